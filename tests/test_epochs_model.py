"""The exactly-once protocol (gale.worker.state.epochs) checked on a model of a whole topology.

A discrete-event model, no I/O: source tasks reading fixed sequences of keys, bolt tasks keeping a
count per key, the checkpoint coordinator, a durable provider (committed and staged values, the
coordinator's record), and a network that delivers messages in any order (not even per channel),
loses some, and times trees out. The control travels in band, as in Gale: the coordinator sends
each epoch to every source task over that network at each change and again periodically, the
sources answer with their reports over it, a restarted source says hello, and a ROLLBACK carries
its generation (in Gale, in its root id). Tasks and the coordinator are killed at random (a killed
task loses its memory; the provider survives). The checks:

* **consistency** — whenever the record says COMMITTED, the committed counts are exactly the counts
  of the keys before the committed source positions: nothing lost, nothing counted twice;
* **progress** — once faults stop, the sources are read to the end and a checkpoint covering all
  of it commits.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

import pytest

from gale.worker.state.epochs import (
    COMMIT,
    COMMITTED,
    PREPARE,
    ROLLBACK,
    CommitSources,
    Committed,
    Emit,
    Epoch,
    EpochCoordinator,
    Report,
    Rewind,
    RolledBack,
    Save,
    SourceTask,
    StagePosition,
    WriteReport,
    epoch_order,
    generation_of,
    newer_report,
    generation_range,
    is_current,
    with_generation,
)

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

TIMEOUT = 0.5  # a tree's message timeout (model seconds)
STEP = 0.001
REBROADCAST = 0.1  # the coordinator sends the epoch to every source again this often


@dataclass
class Provider:
    committed: dict = field(default_factory=dict)
    staged: dict = field(default_factory=dict)  # ns -> {txid: value}
    meta: dict = field(default_factory=dict)
    down: bool = False

    def check(self):
        if self.down:
            raise ConnectionError("provider unreachable")

    def stage(self, ns, txid, value):
        self.check()
        self.staged.setdefault(ns, {})[txid] = value

    def commit(self, ns, txid):
        self.check()
        if txid in self.staged.get(ns, {}):
            self.committed[ns] = self.staged[ns].pop(txid)

    def rollback(self, ns):
        self.check()
        self.staged.pop(ns, None)


@dataclass
class Source:
    task: int
    data: list
    core: SourceTask = field(default_factory=SourceTask)
    pos: int = 0
    pending: dict = field(default_factory=dict)  # root -> (pos, emitted at)
    epoch: Epoch | None = None  # the newest epoch received

    @property
    def ns(self):
        return f"src/{self.task}"


@dataclass
class BoltTask:
    task: int
    counts: Counter = field(default_factory=Counter)
    initialized: bool = False
    generation: int | None = None

    @property
    def ns(self):
        return f"bolt/{self.task}"


class Model:
    filter_stale = True  # bolts ignore data of older generations (False: a broken protocol)

    def __init__(self, seed: int, n_sources=2, n_bolts=2, length=120, keys=7, faults=True):
        self.rng = random.Random(seed)
        self.now = 0.0
        self.provider = Provider()
        self.sources = [Source(t, [f"k{self.rng.randrange(keys)}" for _ in range(length)]) for t in range(n_sources)]
        self.bolts = [BoltTask(b) for b in range(n_bolts)]
        self.net: list[tuple] = []
        self.ckpt: dict | None = None  # the checkpoint tuple tree in flight
        self.faults = faults
        self.commits = 0
        self.rollbacks = 0
        self.checks = 0
        self.reports: dict = {}
        self.next_broadcast = 0.0
        self.trees = 0
        self.coordinator = self._new_coordinator()
        for src in self.sources:
            self.net.append(("report", src.task, None))  # hello

    # ------------------------------------------------------------------ coordinator shell

    def _new_coordinator(self):
        c = EpochCoordinator(interval=0.05, pause_timeout=TIMEOUT * 2, retry_secs=0.02)
        self.reports = {s.task: None for s in self.sources}  # a new coordinator knows no report
        self._perform(c.start(Epoch.from_record(self.provider.meta.get("__state")), self.now), c)
        return c

    def _broadcast(self, epoch):
        self.next_broadcast = self.now + REBROADCAST
        for s in self.sources:
            self.net.append(("epoch", s.task, epoch))

    def coordinator_turn(self):
        self._perform(self.coordinator.tick(self.now, self.reports))
        if self.now >= self.next_broadcast:
            self._broadcast(self.coordinator.epoch)

    def coordinator_report(self, task, report):
        if newer_report(report, self.reports[task]):
            self.reports[task] = report
        c = self.coordinator
        if c.started and (report is None or report.generation != c.epoch.generation):
            self.net.append(("epoch", task, c.epoch))
    def _perform(self, actions, coordinator=None):
        c = coordinator or self.coordinator
        while actions:
            a, actions = actions[0], actions[1:]
            if isinstance(a, Save):
                if self.provider.down:
                    actions = c.save_failed(self.now)
                    continue
                self.provider.meta["__state"] = a.epoch.to_record()
                if a.epoch.phase == COMMITTED:
                    self.check_consistent()
                self._broadcast(a.epoch)
            elif isinstance(a, CommitSources):
                if self.provider.down:
                    actions = c.action_failed(self.now)  # the COMMIT after it is not sent either
                    continue
                for s in self.sources:
                    self.provider.commit(s.ns, a.txid)
            elif isinstance(a, Emit):
                # a tuple tree: its root (``tree``) tells its acks from those of an older tree with the
                # same (txid, action) — a coordinator's restart, a re-sent ROLLBACK — and carries the generation
                self.trees += 1
                self.ckpt = {"txid": a.txid, "action": a.action, "waiting": {b.task for b in self.bolts},
                             "failed": False, "sent": self.now, "tree": self.trees}
                for b in self.bolts:
                    self.net.append(("ckpt", b.task, a.txid, a.action, c.epoch.generation, self.trees))
            elif isinstance(a, Committed):
                self.commits += 1
            elif isinstance(a, RolledBack):
                self.rollbacks += 1

    def _ckpt_done(self, ok: bool):
        ck, self.ckpt = self.ckpt, None
        c = self.coordinator
        if ok:
            self._perform(c.acked(ck["txid"], ck["action"], self.now))
        else:
            self._perform(c.failed(ck["txid"], ck["action"], self.now))

    # ------------------------------------------------------------------ source shell

    def source_epoch(self, s: Source, epoch: Epoch):
        """An epoch message reached a source task: it observes the newest it has, and answers."""
        if s.epoch is None or epoch_order(epoch) > epoch_order(s.epoch):
            s.epoch = epoch
        if not self.source_observe(s) and s.core.report is not None:
            self.net.append(("report", s.task, s.core.report))  # again: the last one may have been lost

    def source_observe(self, s: Source) -> bool:
        """Returns whether it sent a report."""
        wrote = False
        for a in s.core.observe(s.epoch, len(s.pending)):
            try:
                if isinstance(a, Rewind):
                    self.provider.check()
                    s.pending.clear()
                    s.pos = self.provider.committed.get(s.ns, 0)
                elif isinstance(a, StagePosition):
                    self.provider.stage(s.ns, a.txid, s.pos)
                elif isinstance(a, WriteReport):
                    self.net.append(("report", s.task, a.report))
                    wrote = True
            except ConnectionError:
                s.core.action_failed()
                break
        return wrote

    def source_turn(self, s: Source):
        if s.epoch is not None:
            self.source_observe(s)  # a drained pause, a failed tree: reported at its next round
        if s.core.emitting and s.pos < len(s.data) and len(s.pending) < 8:
            root = with_generation(self.rng.getrandbits(64), s.core.generation)
            key = s.data[s.pos]
            s.pending[root] = (s.pos, self.now)
            s.pos += 1
            self.net.append(("data", int(key[1:]) % len(self.bolts), root, key, s.task))

    # ------------------------------------------------------------------ bolt shell

    def bolt_data(self, b: BoltTask, root, key, src):
        if not b.initialized:
            self.net.append(("fail", src, root))
            return
        if not self.filter_stale or is_current({root: 1}, b.generation):
            b.counts[key] += 1
        self.net.append(("ack", src, root))

    def bolt_ckpt(self, b: BoltTask, txid, action, generation, tree):
        ok = True
        if b.generation is not None and generation < b.generation:
            # a late copy of a checkpoint of an older generation: nothing to do (Gale's gate acks it)
            self.net.append(("ckpt_ack", b.task, tree, True))
            return
        try:
            if action == PREPARE:
                if not b.initialized:
                    ok = False
                else:
                    self.provider.stage(b.ns, txid, Counter(b.counts))
            elif action == COMMIT:
                self.provider.commit(b.ns, txid)
            elif action == ROLLBACK:
                self.provider.rollback(b.ns)
                b.counts = Counter(self.provider.committed.get(b.ns, Counter()))
                b.generation = generation
                b.initialized = True
        except ConnectionError:
            ok = False
        self.net.append(("ckpt_ack", b.task, tree, ok))

    # ------------------------------------------------------------------ the world

    def deliver(self, msg):
        kind = msg[0]
        if kind == "data":
            self.bolt_data(self.bolts[msg[1]], *msg[2:])
        elif kind in ("ack", "fail"):
            s = self.sources[msg[1]]
            if msg[2] in s.pending:
                del s.pending[msg[2]]
                if kind == "fail":
                    s.core.tree_failed()
        elif kind == "ckpt":
            self.bolt_ckpt(self.bolts[msg[1]], *msg[2:])
        elif kind == "epoch":
            self.source_epoch(self.sources[msg[1]], msg[2])
        elif kind == "report":
            self.coordinator_report(msg[1], msg[2])
        elif kind == "ckpt_ack":
            _, b, tree, ok = msg
            ck = self.ckpt
            if ck is None or ck["tree"] != tree or b not in ck["waiting"]:
                return
            if not ok:
                self._ckpt_done(False)
                return
            ck["waiting"].discard(b)
            if not ck["waiting"]:
                self._ckpt_done(True)

    def timeouts(self):
        for s in self.sources:
            old = [r for r, (_, t) in s.pending.items() if self.now - t > TIMEOUT]
            for r in old:
                del s.pending[r]
                s.core.tree_failed()
        if self.ckpt is not None and self.now - self.ckpt["sent"] > TIMEOUT:
            self._ckpt_done(False)

    def fault(self):
        r = self.rng.random()
        if r < 0.25 and self.net:
            self.net.pop(self.rng.randrange(len(self.net)))  # a lost message
        elif r < 0.45:
            b = self.rng.choice(self.bolts)  # kill -9 of a bolt task: its memory is gone
            self.bolts[b.task] = BoltTask(b.task)
        elif r < 0.6:
            s = self.rng.choice(self.sources)  # kill -9 of a source task
            self.sources[s.task] = Source(s.task, s.data)
            self.net.append(("report", s.task, None))  # hello
        elif r < 0.75:
            self.ckpt = None  # the coordinator's worker restarted: its tree is forgotten
            self.coordinator = self._new_coordinator()
        elif r < 0.9:
            self.provider.down = not self.provider.down  # the provider goes away / comes back
        else:
            pass

    def step(self, fault_rate: float):
        self.now += STEP
        if self.faults and self.rng.random() < fault_rate:
            self.fault()
        r = self.rng.random()
        if r < 0.5 and self.net:
            self.deliver(self.net.pop(self.rng.randrange(len(self.net))))
        elif r < 0.85:
            self.source_turn(self.rng.choice(self.sources))
        else:
            self.coordinator_turn()
        self.timeouts()

    # ------------------------------------------------------------------ the checks

    def check_consistent(self):
        self.checks += 1
        committed = Counter()
        for b in self.bolts:
            committed.update(self.provider.committed.get(b.ns, Counter()))
        expected = Counter()
        for s in self.sources:
            expected.update(s.data[: self.provider.committed.get(s.ns, 0)])
        assert +committed == +expected, (
            f"committed counts differ from the source prefixes: over-counted {dict(committed - expected)}, "
            f"lost {dict(expected - committed)}; positions "
            f"{[self.provider.committed.get(s.ns, 0) for s in self.sources]}")

    def finished(self):
        rec = Epoch.from_record(self.provider.meta.get("__state"))
        return rec.phase == COMMITTED and all(self.provider.committed.get(s.ns, 0) == len(s.data) for s in self.sources)


@pytest.mark.parametrize("seed", range(150))
def test_exactly_once_under_random_faults_and_any_delivery_order(seed):
    m = Model(seed)
    for _ in range(6000):
        m.step(fault_rate=0.004)
    m.faults = False
    m.provider.down = False
    for _ in range(200000):
        if m.finished():
            break
        m.step(0.0)
    assert m.finished(), (f"no progress after the faults stopped: record {m.provider.meta.get('__state')}, "
                          f"positions {[m.provider.committed.get(s.ns, 0) for s in m.sources]}")
    m.check_consistent()
    assert m.checks > 1


def test_without_faults_it_commits_checkpoints_and_never_rolls_back_after_the_first():
    m = Model(7, faults=False)
    for _ in range(100000):
        if m.finished():
            break
        m.step(0.0)
    assert m.finished()
    assert m.rollbacks == 1  # the start: generation 1 restores checkpoint 0
    assert m.commits >= 3


def test_the_model_catches_a_protocol_without_the_pause():
    """A check that cannot fail is worthless: with sources that ignore the pause (keep emitting
    through PAUSING and PREPARING, Storm's scheme), the consistency check finds the difference."""
    caught = 0
    for seed in range(40):
        m = Model(seed, faults=False)
        original = SourceTask.observe

        def observe_without_pause(self, epoch, pending, _orig=original):
            actions = _orig(self, epoch, pending)
            if epoch.phase != "ROLLING_BACK" and self.generation == epoch.generation and not self.failed:
                self.emitting = True
                want = Report(epoch.generation, paused=epoch.txid)
                if epoch.phase == "PAUSING" and self.report != want:
                    return [StagePosition(epoch.txid), self._write(want)]
            return actions

        SourceTask.observe = observe_without_pause
        try:
            for _ in range(60000):
                if m.finished():
                    break
                m.step(0.0)
        except AssertionError:
            caught += 1
        finally:
            SourceTask.observe = original
    assert caught > 0


def test_the_model_catches_bolts_that_count_tuples_of_rolled_back_generations():
    caught = 0
    for seed in range(60):
        m = Model(seed)
        m.filter_stale = False
        try:
            for _ in range(6000):
                m.step(fault_rate=0.004)
        except AssertionError:
            caught += 1
    assert caught > 0


def test_generations_live_in_the_top_byte_whatever_acker_the_root_is_steered_to():
    rng = random.Random(1)
    edges = [0, 1, 2, 3, (1 << 56) - 1, (1 << 56) - 2, (1 << 64) - 1, 1 << 56]
    for i in range(3000):
        root = edges[i] if i < len(edges) else rng.getrandbits(64)
        g = rng.randrange(1000)
        n = rng.choice([1, 2, 3, 7, 64, 1000])
        idx = rng.randrange(n)
        r = with_generation(root, g, n, idx)
        assert generation_of(r) == g % 256, (root, g, n, idx)
        for other in (g, g + 1, g - 1, g + 256, rng.randrange(1000)):  # the executors' inlined check
            lo, hi = generation_range(other)
            assert (lo <= r < hi) == (generation_of(r) == other % 256), (root, g, other)
        assert r % n == idx and 1 < r < 1 << 64, (root, g, n, idx)
    assert is_current({with_generation(5, 3): 1, with_generation(9, 3): 2}, 3)
    assert not is_current({with_generation(5, 3): 1, with_generation(9, 4): 2}, 3)
    assert is_current({}, 3) and is_current(None, 3)
