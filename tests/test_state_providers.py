"""The state provider contract, run against every provider: memory and a real Redis server."""

from __future__ import annotations

import pytest

from gale.worker.state.provider import MemoryStateProvider, StateProviderError, open_provider
from gale.worker.state.redis_provider import RedisStateProvider
from gale.worker.state.sqlite_provider import SqliteStateProvider
from gale.config_keys import Config


@pytest.fixture(params=["memory", "redis", "sqlite"])
def provider(request, redis_server, tmp_path):
    if request.param == "memory":
        p = MemoryStateProvider()
    elif request.param == "sqlite":
        p = SqliteStateProvider(str(tmp_path))
    else:
        p = RedisStateProvider(redis_server.url)
        p.client.flushdb()
    yield p
    p.close()


def test_staged_changes_are_invisible_until_committed(provider):
    assert provider.prepare(1, {"a": ({b"k1": b"v1", b"k2": b"v2"}, set()), "b": ({b"x": b"1"}, set())}) > 0
    assert provider.load(["a", "b", "c"]) == {"a": {}, "b": {}, "c": {}}
    provider.commit(1, ["a", "b"])
    assert provider.load(["a", "b"]) == {"a": {b"k1": b"v1", b"k2": b"v2"}, "b": {b"x": b"1"}}


def test_commit_merges_puts_and_deletes_and_is_idempotent(provider):
    provider.prepare(1, {"a": ({b"k1": b"v1", b"k2": b"v2"}, set())})
    provider.commit(1, ["a"])
    provider.prepare(2, {"a": ({b"k1": b"new", b"k3": b"v3"}, {b"k2"})})
    provider.commit(2, ["a"])
    provider.commit(2, ["a"])  # repeated by recovery
    provider.commit(1, ["a"])  # an old txid: nothing staged for it
    assert provider.load(["a"]) == {"a": {b"k1": b"new", b"k3": b"v3"}}


def test_staging_a_txid_again_replaces_it(provider):
    provider.prepare(3, {"a": ({b"k1": b"first"}, set())})
    provider.prepare(3, {"a": ({b"k2": b"second"}, set())})
    provider.commit(3, ["a"])
    assert provider.load(["a"]) == {"a": {b"k2": b"second"}}


def test_rollback_forgets_what_was_staged(provider):
    provider.prepare(1, {"a": ({b"k": b"1"}, set())})
    provider.commit(1, ["a"])
    provider.prepare(2, {"a": ({b"k": b"2"}, {b"gone"})})
    provider.rollback(["a"])
    provider.commit(2, ["a"])  # nothing staged any more
    assert provider.load(["a"]) == {"a": {b"k": b"1"}}


def test_namespaces_without_changes_and_large_checkpoints(provider):
    puts = {f"k{i}".encode(): str(i).encode() for i in range(5000)}
    provider.prepare(1, {"a": (puts, set()), "empty": ({}, set())})
    provider.commit(1, ["a", "empty"])
    assert provider.load(["a"])["a"] == puts
    provider.prepare(2, {"a": ({}, set(list(puts)[:4500]))})
    provider.commit(2, ["a"])
    assert len(provider.load(["a"])["a"]) == 500


def test_staging_a_txid_again_replaces_it_even_with_nothing(provider):
    provider.prepare(3, {"ns": ({b"k": b"old"}, set())})
    provider.prepare(3, {"ns": ({}, set())})  # the same txid staged again, with no change
    provider.commit(3, ["ns"])
    assert provider.load(["ns"])["ns"] == {}


def test_meta_records(provider):
    assert provider.get_meta("topo/__state") is None
    provider.put_meta("topo/__state", b'{"txid": 1}')
    assert provider.get_meta("topo/__state") == b'{"txid": 1}'


def test_unreachable_redis_fails_with_the_url_named_and_commits_nothing(redis_server):
    provider = RedisStateProvider(redis_server.url)
    provider.client.flushdb()
    provider.prepare(1, {"a": ({b"k": b"1"}, set())})
    redis_server.stop()
    try:
        with pytest.raises(StateProviderError, match=rf"{redis_server.url}: commit failed"):
            provider.commit(1, ["a"])
        with pytest.raises(StateProviderError, match="load failed"):
            provider.load(["a"])
    finally:
        redis_server.start()
    provider = RedisStateProvider(redis_server.url)
    assert provider.load(["a"]) == {"a": {}}  # staged survived the restart (AOF), nothing committed
    provider.commit(1, ["a"])
    assert provider.load(["a"]) == {"a": {b"k": b"1"}}


def test_open_provider_by_name(redis_server):
    assert isinstance(open_provider({"topology.state.provider": "memory"}), MemoryStateProvider)
    p = open_provider({"topology.state.provider": "redis", "topology.state.redis.url": redis_server.url})
    assert isinstance(p, RedisStateProvider)
    with pytest.raises(StateProviderError, match="unknown topology.state.provider 'hbase'"):
        open_provider(Config(topology_state_provider="hbase"))  # past validation (which refuses it)
    with pytest.raises(StateProviderError, match="invalid topology.state.redis.url 'nope'"):
        RedisStateProvider("nope")


def test_a_state_written_with_another_partitioning_is_refused_not_mixed(provider):
    from gale.topology.state import StateError
    from gale.worker.state.task_state import TaskState

    first = TaskState(provider, "topo", "count", 0, 2, 128, [["word"]])
    first.load()
    first.kv.put(next(k for k in (f"w{i}" for i in range(1000)) if first.kv._owns(k) is None), 1)
    first.prepare(1)
    first.commit(1)
    TaskState(provider, "topo", "count", 1, 2, 128, [["word"]]).load()  # same layout: fine
    with pytest.raises(StateError, match=r"written with keyed state in 128 key groups.*this topology has keyed "
                                         r"state in 64 key groups"):
        TaskState(provider, "topo", "count", 0, 2, 64, [["word"]]).load()
    with pytest.raises(StateError, match=r"this topology has per-task state over 2 tasks"):
        TaskState(provider, "topo", "count", 0, 2, None).load()


def test_the_checkpoint_spout_waits_for_an_unreachable_provider_and_starts_when_it_answers():
    """Its recorded state cannot be read: the error is reported, retried once per interval (not on
    every next_tuple call), and recovery starts when the provider answers."""
    from gale.worker.state.checkpoint_spout import CheckpointSpout

    class Down(MemoryStateProvider):
        up = False
        reads = 0

        def get_meta(self, name):
            self.reads += 1
            if not self.up:
                raise StateProviderError("redis state provider at redis://x: read failed: Connection refused")
            return super().get_meta(name)

    class Collector:
        def __init__(self):
            self.errors, self.emitted, self._stats = [], [], type("S", (), {"extra": {}})()

        def report_error(self, e):
            self.errors.append(str(e))

        def declare_metrics(self, names):
            pass

        def incr_metric(self, name, n=1):
            pass

        def emit(self, values, msg_id=None, stream="default"):
            self.emitted.append(list(values))

    class Context:
        resources = {"state": Down(), "state_prefix": "topo", "bolt_components": ["count"]}
        task_to_component = {1: "$checkpointspout", 2: "count"}

    now = [0.0]
    spout = CheckpointSpout(clock=lambda: now[0])
    collector = Collector()
    spout.open({"topology.state.checkpoint.interval.ms": 1000}, Context(), collector)
    provider = Context.resources["state"]
    for _ in range(50):
        spout.next_tuple()
    assert provider.reads == 1 and "Connection refused" in collector.errors[0]
    now[0] = 1.0
    spout.next_tuple()
    assert provider.reads == 2 and collector.emitted == []
    provider.up = True
    now[0] = 2.0
    spout.next_tuple()
    assert collector.emitted == [[0, "INITSTATE"]]  # recovery of a fresh topology


def test_the_sqlite_provider_keeps_commits_and_stagings_across_processes(tmp_path):
    """What one process committed (and staged) another reads from the same file: a RecoveryConfig
    directory outlives the run that wrote it, and workers on one machine share it."""
    first = SqliteStateProvider(str(tmp_path))
    first.prepare(1, {"a": ({b"k": b"1"}, set())})
    first.commit(1, ["a"])
    first.prepare(2, {"a": ({b"k": b"2"}, set())})
    first.put_meta("topo/__state", b"rec")
    first.close()
    code = ("import sys; from gale.worker.state.sqlite_provider import SqliteStateProvider as P; "
            "p = P(sys.argv[1]); assert p.load(['a']) == {'a': {b'k': b'1'}}; assert p.get_meta('topo/__state') == b'rec'; "
            "p.commit(2, ['a']); p.close()")
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=60)
    assert SqliteStateProvider(str(tmp_path)).load(["a"]) == {"a": {b"k": b"2"}}
    bad = tmp_path / "file"
    bad.write_text("x")
    with pytest.raises(StateProviderError, match=r"cannot open the SQLite state file .*file/gale-state.sqlite3"):
        SqliteStateProvider(str(bad / "gale-state.sqlite3"))
