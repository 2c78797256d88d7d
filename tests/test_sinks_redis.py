"""The Redis sink against a real Redis server (conftest's ``redis_server``, append-only file): the store
contract (tests/sink_contract.py) for an incremented hash, a stream, the applied-txid guard, Redis
killed with a checkpoint staged, and an exactly-once word count through failures."""

from __future__ import annotations

import pytest

from gale.topology.sink import SinkError
from gale.worker.local import LocalCluster
from gale.worker.sinks.protocol import SinkName
from gale.worker.sinks.redis_sink import RedisSink, RedisStore
from tests.sink_contract import EXACTLY_ONCE, SinkContract, expected_words, word_count_into
from tests.waiting import eventually


def client(server):
    import redis

    return redis.Redis.from_url(server.url)


class TestHash(SinkContract):
    topology = "rhash"

    @pytest.fixture(autouse=True)
    def _server(self, redis_server):
        self.server = redis_server

    def make_store(self, name):
        return RedisStore(self.server.url, "contract", name, field="key", value="n", increment=True)

    def visible(self):
        return {k.decode(): int(v) for k, v in client(self.server).hgetall("contract").items()}


def test_a_stream_gets_each_checkpoint_once_in_order(redis_server):
    name = SinkName("s", "stream", 0, 1)
    store = RedisStore(redis_server.url, "events", name, mode="stream")
    for txid in (1, 2):
        batch = store.new_batch()
        batch.add({"i": txid, "what": "x"})
        batch.add({"i": txid, "what": "y"})
        store.prepare(name.txn(txid), txid, batch, None)
        store.commit(name.txn(txid))
        store.commit(name.txn(txid))
    entries = client(redis_server).xrange("events")
    assert [(e[b"i"], e[b"what"]) for _, e in entries] == [(b"1", b"x"), (b"1", b"y"), (b"2", b"x"), (b"2", b"y")]


def test_the_guard_keeps_a_checkpoint_from_being_applied_twice(redis_server):
    name = SinkName("g", "guard", 0, 1)
    store = RedisStore(redis_server.url, "guarded", name, field="k", value="v", increment=True)
    batch = store.new_batch()
    batch.add({"k": "a", "v": 2})
    store.prepare(name.txn(5), 5, batch, None)
    store.commit(name.txn(5))
    # the same staged checkpoint again (a copy left by a task killed between its EXEC and ... ): ignored
    store.prepare(name.txn(5), 5, batch, None)
    store.commit(name.txn(5))
    assert client(redis_server).hget("guarded", "a") == b"2"
    assert client(redis_server).get("gale:sink:applied:g:guard:0") == b"5"
    assert store.prepared() == []


def test_a_staged_checkpoint_survives_redis_killed(redis_server):
    name = SinkName("k", "killed", 0, 1)
    store = RedisStore(redis_server.url, "survivor", name, field="k", value="v")
    batch = store.new_batch()
    batch.add({"k": "a", "v": "1"})
    store.prepare(name.txn(2), 2, batch, None)
    redis_server.kill()
    with pytest.raises(SinkError, match=rf"Redis sink 'killed' at redis://127.0.0.1:{redis_server.port}/0: committing"):
        store.commit(name.txn(2))
    redis_server.start()
    assert store.prepared() == [name.txn(2)]
    store.commit(name.txn(2))
    assert client(redis_server).hget("survivor", "a") == b"1"


class WordsToRedis(RedisSink):
    def records(self, tup):
        return ({"word": tup["word"], "one": 1},)


def test_exactly_once_word_count_into_a_hash(redis_server):
    n = 300
    topo = word_count_into(WordsToRedis, {"url": redis_server.url, "key": "wc", "field": "word", "value": "one",
                                          "increment": True}, {**EXACTLY_ONCE, "test.sentences": n}, name="redis-wc")
    with LocalCluster() as cluster:
        cluster.submit_topology("redis-wc", {}, topo)

        def exact():
            got = {k.decode(): int(v) for k, v in client(redis_server).hgetall("wc").items()}
            assert got == expected_words(n)  # 1 added per (word, count) output: each committed once

        eventually(exact, timeout=90)
