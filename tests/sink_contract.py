"""The contract every transactional sink's store keeps (``gale.topology.sink.SinkStore``), as tests
a store's test module runs against its real server by subclassing :class:`SinkContract`:

* a subclass gives ``make_store(name)`` (a store for a :class:`SinkName`, fresh each call: a second
  call is a restarted task) and ``visible()`` (what a reader sees committed: key → the sum of the
  records' ``n``); its sink writes records ``{"key": str, "n": int}``.

What is checked: staged records are invisible until COMMIT; COMMIT is idempotent; ABORT drops them;
``prepared`` lists the task's open transactions (a store may list the component's: each task
picks its own by name), also to a restarted store, which can commit or abort them; two tasks'
transactions do not mix.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gale.worker.sinks.protocol import SinkName


def records(*pairs: tuple[str, int]) -> list[dict]:
    return [{"key": k, "n": n} for k, n in pairs]


class SinkContract:
    topology = "contract"

    def make_store(self, name: SinkName) -> Any:
        raise NotImplementedError

    def visible(self) -> dict[str, int]:
        raise NotImplementedError

    def _name(self, request: Any, index: int = 0, tasks: int = 1) -> SinkName:
        # one component per test: their transactions and rows never meet
        return SinkName(self.topology, request.node.name.replace("[", "-").replace("]", ""), index, tasks)

    def _prepare(self, store: Any, name: SinkName, txid: int, recs: list[dict]) -> str:
        batch = store.new_batch()
        for r in recs:
            batch.add(r)
        txn = name.txn(txid)
        assert store.prepare(txn, txid, batch, None) == len(recs)
        return txn

    def _mine(self, request: Any) -> dict[str, int]:
        prefix = self.topology + "." + request.node.name.replace("[", "-").replace("]", "") + "/"
        return {k[len(prefix):]: v for k, v in self.visible().items() if k.startswith(prefix)}

    def _recs(self, request: Any, *pairs: tuple[str, int]) -> list[dict]:
        prefix = self.topology + "." + request.node.name.replace("[", "-").replace("]", "") + "/"
        return records(*((prefix + k, n) for k, n in pairs))

    def test_prepared_records_are_invisible_until_commit(self, request):
        name = self._name(request)
        store = self.make_store(name)
        try:
            txn = self._prepare(store, name, 1, self._recs(request, ("a", 1), ("b", 2)))
            assert self._mine(request) == {}
            assert store.prepared() == [txn]
            store.commit(txn)
            assert self._mine(request) == {"a": 1, "b": 2}
            assert store.prepared() == []
            store.commit(txn)  # again (a COMMIT of a recovery): nothing changes
            assert self._mine(request) == {"a": 1, "b": 2}
        finally:
            store.close()

    def test_abort_drops_what_was_prepared(self, request):
        name = self._name(request)
        store = self.make_store(name)
        try:
            txn = self._prepare(store, name, 1, self._recs(request, ("a", 5)))
            store.abort(txn)
            store.abort(txn)
            assert store.prepared() == [] and self._mine(request) == {}
            txn = self._prepare(store, name, 1, self._recs(request, ("a", 1)))  # the txid again, after a rollback
            store.commit(txn)
            assert self._mine(request) == {"a": 1}
        finally:
            store.close()

    def test_a_restarted_task_finds_and_commits_what_it_prepared(self, request):
        name = self._name(request)
        first = self.make_store(name)
        txn = self._prepare(first, name, 7, self._recs(request, ("a", 3)))
        first.close()  # the task is gone (its worker killed): the transaction stays prepared
        second = self.make_store(name)
        try:
            assert second.prepared() == [txn]
            second.commit(txn)
            assert self._mine(request) == {"a": 3}
            txn8 = self._prepare(second, name, 8, self._recs(request, ("a", 1)))
            second.close()
            third = self.make_store(name)
            assert third.prepared() == [txn8]
            third.abort(txn8)
            assert third.prepared() == [] and self._mine(request) == {"a": 3}
            third.close()
        finally:
            second.close()

    def test_tasks_keep_their_own_transactions(self, request):
        names = [self._name(request, i, 2) for i in range(2)]
        stores = [self.make_store(n) for n in names]
        try:
            txns = [self._prepare(s, n, 1, self._recs(request, (f"t{i}", i + 1)))
                    for i, (s, n) in enumerate(zip(stores, names))]
            for i in range(2):
                assert names[i].mine(stores[i].prepared()) == {1: [txns[i]]}
            stores[1].commit(txns[1])
            stores[0].abort(txns[0])
            assert self._mine(request) == {"t1": 2}
        finally:
            for s in stores:
                s.close()

    def test_many_records_in_one_checkpoint(self, request):
        name = self._name(request)
        store = self.make_store(name)
        try:
            recs = self._recs(request, *((f"k{i % 50}", 1) for i in range(1000)))
            batch = store.new_batch()
            for r in recs:
                batch.add(r)
            store.prepare(name.txn(1), 1, batch, None)
            store.commit(name.txn(1))
            assert self._mine(request) == {f"k{i}": 20 for i in range(50)}
        finally:
            store.close()


def summed(recs: list[dict]) -> dict[str, int]:
    out: Counter = Counter()
    for r in recs:
        out[r["key"]] += r["n"]
    return dict(out)


# ------------------------------------------------------------------------------ topologies


def word_count_into(sink: type, kwargs: dict, conf: dict, name: str = "wc", spout: Any = None) -> Any:
    """Sentences → split (fails some first attempts) → stateful count (fails its 3rd prepare once)
    → ``sink`` (2 tasks, fields-grouped by word), under ``conf``; the sink gets ``(word, count)``."""
    from gale import TopologyBuilder
    from tests.state_topologies import FlakySplit, RewindableSentences, StatefulCount

    b = TopologyBuilder()
    b.set_spout("sentences", spout or RewindableSentences, 2)
    b.set_bolt("split", FlakySplit, 2).shuffle_grouping("sentences")
    b.set_bolt("count", StatefulCount, 2).fields_grouping("split", ["word"])
    b.set_bolt("sink", sink, 2, kwargs=kwargs).fields_grouping("count", ["word"])
    return b.create_topology(name, {"test.fail.every": 7, "test.fail.prepare": 3,
                                    "topology.state.checkpoint.interval.ms": 50, "topology.max.spout.pending": 40,
                                    **conf})


def expected_words(n: int) -> dict[str, int]:
    from tests.state_topologies import sentence

    return dict(Counter(w for i in range(n) for w in sentence(i).split()))


EXACTLY_ONCE = {"topology.state.guarantee": "exactly-once"}
