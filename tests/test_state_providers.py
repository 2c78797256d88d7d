"""The state provider contract, run against every provider: memory and a real Redis server."""

from __future__ import annotations

import pytest

from gale.redisserver import RedisServer
from gale.worker.state.provider import MemoryStateProvider, StateProviderError, open_provider
from gale.worker.state.redis_provider import RedisStateProvider


@pytest.fixture(scope="module")
def redis_server():
    with RedisServer() as server:
        yield server


@pytest.fixture(params=["memory", "redis"])
def provider(request, redis_server):
    if request.param == "memory":
        p = MemoryStateProvider()
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
        open_provider({"topology.state.provider": "hbase"})
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
