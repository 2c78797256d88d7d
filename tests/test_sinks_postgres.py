"""The PostgreSQL sink against a real PostgreSQL server (Debian's ``postgresql``, started by the
test like ZooKeeper: gale.pgserver): the store contract (tests/sink_contract.py) in both modes —
two-phase (``PREPARE TRANSACTION``) and staged (a staging table and the applied-txid marker) — the
row mapping, refused rows, the server killed with a checkpoint prepared, an unreachable server; and
word counts through a local topology under both guarantees, with failures injected and the server
stopped mid-run."""

from __future__ import annotations

from collections import Counter

import pytest

import gale
from gale import TopologyBuilder
from gale.pgserver import PostgresServer, pg_bin
from gale.topology.sink import SinkError
from gale.topology.state import CHECKPOINT_COMPONENT
from gale.worker.local import LocalCluster
from gale.worker.sinks.postgres import PostgresSink, PostgresStore, safe_url
from gale.worker.sinks.protocol import SinkName
from gale.worker.sinks.rows import RowSpec
from tests.components import requires
from tests.sink_contract import SinkContract
from tests.state_topologies import FlakySplit, NumberedSentences, RewindableSentences, StatefulCount, sentence
from tests.waiting import eventually


def _have_postgres() -> bool:
    try:
        pg_bin("postgres")
        return True
    except Exception:  # noqa: BLE001
        return False


pytestmark = requires(_have_postgres(), "the PostgreSQL server (Debian's postgresql; make test installs it)")


@pytest.fixture(scope="module")
def pg():
    with PostgresServer() as server:
        with server.connect(autocommit=True) as conn:
            conn.execute("CREATE TABLE contract (key text PRIMARY KEY, n bigint NOT NULL CHECK (n >= 0))")
            conn.execute("CREATE TABLE wc (word text PRIMARY KEY, count bigint NOT NULL, n bigint NOT NULL)")
        yield server


def query(pg, sql, *args):
    with pg.connect(autocommit=True) as conn:
        return conn.execute(sql, args or None).fetchall()


class _PgContract(SinkContract):
    two_phase = True

    @pytest.fixture(autouse=True)
    def _server(self, pg):
        self.pg = pg

    def make_store(self, name):
        return PostgresStore(self.pg.url, "contract", RowSpec(key=["key"], deltas=["n"]), name, self.two_phase)

    def visible(self):
        return dict(query(self.pg, "SELECT key, n FROM contract"))


@pytest.mark.build_independent  # no tuple passes the hot path (tests/hot_path_audit.py)
class TestTwoPhase(_PgContract):
    topology = "pg2pc"
    two_phase = True


@pytest.mark.build_independent  # no tuple passes the hot path (tests/hot_path_audit.py)
class TestStaged(_PgContract):
    topology = "pgstaged"
    two_phase = False


@pytest.mark.build_independent  # no tuple passes the hot path (tests/hot_path_audit.py)
@pytest.mark.parametrize("two_phase", [True, False])
def test_a_row_the_table_refuses_fails_prepare_naming_its_key_and_nothing_is_committed(pg, two_phase):
    name = SinkName("refuse", f"c{int(two_phase)}", 0, 1)
    store = PostgresStore(pg.url, "contract", RowSpec(key=["key"], deltas=["n"]), name, two_phase)
    batch = store.new_batch()
    for key, n in ((f"ok{two_phase}", 1), (f"bad{two_phase}", -5)):
        batch.add({"key": key, "n": n})
    with pytest.raises(SinkError, match=rf"refused the row with key 'bad{two_phase}'.*check constraint.*nothing of "
                                        r"this checkpoint was committed"):
        store.prepare(name.txn(1), 1, batch, None)
    assert store.prepared() == []
    assert query(pg, "SELECT key FROM contract WHERE key LIKE %s", f"%{two_phase}") == []
    # with dead letters: the refused row goes to them, the rest commits
    diverted = []
    assert store.prepare(name.txn(1), 1, batch, lambda record, key, reason: diverted.append((record, key))) == 1
    store.commit(name.txn(1))
    assert diverted == [({"key": f"bad{two_phase}", "n": -5}, f"bad{two_phase}")]
    assert query(pg, "SELECT key, n FROM contract WHERE key LIKE %s", f"%{two_phase}") == [(f"ok{two_phase}", 1)]
    store.close()


@pytest.mark.build_independent  # no tuple passes the hot path (tests/hot_path_audit.py)
@pytest.mark.parametrize("two_phase", [True, False])
def test_a_prepared_checkpoint_survives_the_server_killed(pg, two_phase):
    name = SinkName("crash", f"c{int(two_phase)}", 0, 1)
    store = PostgresStore(pg.url, "wc", RowSpec(key=["word"], deltas=["n"]), name, two_phase)
    batch = store.new_batch()
    batch.add({"word": f"crash{two_phase}", "count": 4, "n": 4})
    store.prepare(name.txn(3), 3, batch, None)
    pg.kill()  # kill -9, mid-checkpoint
    with pytest.raises(SinkError, match=rf"at postgresql://gale@127.0.0.1:{pg.port}/postgres"):
        store.commit(name.txn(3))
    pg.start()
    assert store.prepared() == [name.txn(3)]  # reconnected
    store.commit(name.txn(3))
    assert query(pg, "SELECT count, n FROM wc WHERE word = %s", f"crash{two_phase}") == [(4, 4)]
    store.close()


@pytest.mark.build_independent  # no tuple passes the hot path (tests/hot_path_audit.py)
def test_an_unreachable_server_is_named_without_its_password():
    url = "postgresql://alice:s3cret@127.0.0.1:1/app"
    assert safe_url(url) == "postgresql://alice@127.0.0.1:1/app"
    store = PostgresStore(url, "t", RowSpec(), SinkName("t", "c", 0, 1))
    with pytest.raises(SinkError) as info:
        store.prepared()
    assert "PostgreSQL sink 'c' at postgresql://alice@127.0.0.1:1/app" in str(info.value)
    assert "s3cret" not in str(info.value)


@pytest.mark.build_independent  # no tuple passes the hot path (tests/hot_path_audit.py)
def test_a_missing_table_is_named(pg):
    store = PostgresStore(pg.url, "nope", RowSpec(key=["key"]), SinkName("t", "missing", 0, 1), True)
    batch = store.new_batch()
    batch.add({"key": "a"})
    with pytest.raises(SinkError, match=r'relation "nope" does not exist'):
        store.prepare("gale:t:missing:0:1", 1, batch, None)
    store.close()


# ------------------------------------------------------------------------------ topologies


class CountsToPostgres(PostgresSink):
    """The word count's ``(word, count)`` as ``count`` (upserted) and ``n`` = 1 per tuple (added): ``n``
    counts how often the sink committed each word, so a tuple written twice shows."""

    def records(self, tup):
        return ({"word": tup["word"], "count": tup["count"], "n": 1},)


def word_count_to_postgres(pg, table, conf, two_phase="auto", sink_tasks=2, spout=RewindableSentences):
    b = TopologyBuilder()
    b.set_spout("sentences", spout, 2)
    b.set_bolt("split", FlakySplit, 2).shuffle_grouping("sentences")
    b.set_bolt("count", StatefulCount, 2).fields_grouping("split", ["word"])
    b.set_bolt("pg", CountsToPostgres, sink_tasks, kwargs={
        "url": pg.url, "table": table, "key": ["word"], "deltas": ["n"], "two_phase": two_phase,
    }).fields_grouping("count", ["word"])
    return b.create_topology(table, {"test.fail.every": 7, "test.fail.prepare": 3,
                                     "topology.state.checkpoint.interval.ms": 50, "topology.max.spout.pending": 40,
                                     **conf})


def _table(pg, name):
    with pg.connect(autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (word text PRIMARY KEY, count bigint NOT NULL, n bigint NOT NULL)")


def _rows(pg, table):
    return {w: (c, n) for w, c, n in query(pg, f"SELECT word, count, n FROM {table}")}


@pytest.mark.parametrize("two_phase", [True, False])
def test_exactly_once_word_counts_in_postgres_through_failures_and_a_server_outage(pg, two_phase):
    n = 400
    expected = Counter(w for i in range(n) for w in sentence(i).split())
    table = f"eo_{int(two_phase)}"
    _table(pg, table)
    topo = word_count_to_postgres(pg, table, {"topology.state.guarantee": "exactly-once", "test.sentences": n},
                                  two_phase)
    pg.kill()  # down while the first checkpoints with data prepare: they fail naming the server
    with LocalCluster() as cluster:
        running = cluster.submit_topology(table, {}, topo)

        def reported():
            errors = running.errors.get("pg", [])
            assert any(f"at postgresql://gale@127.0.0.1:{pg.port}/postgres" in e for e in errors), errors

        eventually(reported, timeout=30)
        pg.start()

        def exact():
            rows = _rows(pg, table)
            assert {w: n for w, (_, n) in rows.items()} == expected, rows
            assert {w: c for w, (c, _) in rows.items()} == expected, rows

        eventually(exact, timeout=120)
        stats = running.component_stats()["pg"]["extra"]
    assert stats["sink_transactions_committed"] >= 2 and stats["state_checkpoint_failures"] >= 1
    assert query(pg, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s", f"gale:{table}:%") == []


def test_at_least_once_word_counts_in_postgres_lose_nothing(pg):
    n = 300
    expected = Counter(w for i in range(n) for w in sentence(i).split())
    _table(pg, "alo")
    # a failed PREPARE rolls back what the sink prepared and fails its held acks: they replay
    topo = word_count_to_postgres(pg, "alo", {"test.sentences": n}, spout=NumberedSentences)
    with LocalCluster() as cluster:
        running = cluster.submit_topology("alo", {}, topo)

        def all_there():
            rows = _rows(pg, "alo")
            assert set(rows) == set(expected)
            assert all(rows[w][0] >= expected[w] and rows[w][1] >= expected[w] for w in expected), rows

        eventually(all_there, timeout=90)
        stats = running.component_stats()
    # the injected failure rolled back: the records the sink held for that checkpoint were dropped and
    # are there only because their held acks failed and the sentences replayed
    assert stats[CHECKPOINT_COMPONENT]["extra"]["checkpoint_failures"] >= 1



class DeadLetterRecorder(gale.BasicBolt):
    """Keeps the dead letters it is sent."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen = []

    def execute(self, tup):
        self.seen.append((tup["key"], tup["reason"], tup["sink"]))


class NegativeForSome(PostgresSink):
    """``n`` = -1 for the word "kafka" (the table's CHECK refuses it), else 1."""

    def records(self, tup):
        return ({"key": f"dl/{tup['word']}", "n": -1 if tup["word"] == "kafka" else 1},)


def test_rows_the_table_refuses_go_to_the_dead_letter_stream_and_the_rest_commits(pg):
    n = 100
    expected = {f"dl/{w}": c for w, c in Counter(w for i in range(n) for w in sentence(i).split()).items()
                if w != "kafka"}
    b = TopologyBuilder()
    b.set_spout("sentences", RewindableSentences, 1)
    b.set_bolt("split", FlakySplit, 1).shuffle_grouping("sentences")
    b.set_bolt("count", StatefulCount, 1).shuffle_grouping("split")
    b.set_bolt("pg", NegativeForSome, 1, kwargs={"url": pg.url, "table": "contract", "key": ["key"],
                                                 "deltas": ["n"], "dead_letters": True}).shuffle_grouping("count")
    b.set_bolt("dead", DeadLetterRecorder, 1).shuffle_grouping("pg", "error")
    topo = b.create_topology("dl", {"topology.state.guarantee": "exactly-once", "test.sentences": n,
                                    "topology.state.checkpoint.interval.ms": 50})
    with LocalCluster() as cluster:
        running = cluster.submit_topology("dl", {}, topo)
        recorders = [b for ex in running.runtime.executors.values() if ex.component == "dead"
                     for b in ex.bolts.values()]

        def committed():
            rows = dict(query(pg, "SELECT key, n FROM contract WHERE key LIKE 'dl/%%'"))
            assert rows == expected
            seen = [x for r in recorders for x in r.seen]
            assert seen and all(k == "dl/kafka" and "check constraint" in r and s == "pg" for k, r, s in seen)
            return seen

        seen = eventually(committed, timeout=60)
        stats = running.component_stats()["pg"]["extra"]
    assert stats["sink_dead_letters"] >= len(seen) >= 1
