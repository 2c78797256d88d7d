"""The combination matrix: every component kind in every position that makes sense, under every
guarantee, in local mode — exact results, or refused at submit naming the component.

The cases, topology builders and checks shared by ``tests/test_combinations_*.py`` (the components
are in ``tests/combination_components.py``).

**Guarantees**: ``off`` (``topology.acker.executors: 0``, no state), ``on`` (acking, no state),
``alo`` (``topology.state.guarantee: at-least-once``), ``eo`` (``exactly-once``); checkpoints every
50 ms. **Bolt kinds X**, each a pass-through of the stream ``[i]``, so one expected result per
position holds for all: ``Bolt``, ``BasicBolt``, ``ShellBolt`` (an unmodified pystorm bolt),
``WindowedBolt`` in memory and persistent (tumbling count windows of 10 emitting every tuple of the
fired window; each window's contents recorded), ``StatefulBolt`` (tallies each item in its state),
``SparkBolt`` (a Spark stage returning its batch), ``SparkSink`` (Parquet, default de-duplication,
read back with pyarrow). **Positions**, ``source`` emitting the items 0..59:

* alone (off, on): source → flaky → X → recorder
* upstream (alo, eo): source → flaky → X → count → recorder
* downstream (alo, eo): source → flaky → count → X → recorder
* between (alo, eo): source → flaky → a → X → b → recorder

``count``, ``a``, ``b`` are stateful tallies (item → times counted, fields-grouped). The recorder keeps
its inputs in memory under off/on and is a stateful tally under alo/eo (its committed state is what
it durably saw, so a duplicate is a failure under both). A sink ends the topology: no recorder.
**Spout kinds S** (2 tasks each): S → flaky → recorder (off, on), S → flaky → count → recorder (alo,
eo); ``Spout`` and ``ReliableSpout`` (message ids, replays; position()/rewind() for eo),
``KafkaSpout`` (a real Tansu broker, 4 partitions), ``ShellSpout`` (an unmodified pystorm spout).

**Forced failures.** on: ``flaky`` fails the first attempt of items 0, 20, 40 before emitting. alo:
the same, and ``count``/``a`` raises in its 3rd ``pre_prepare`` (the checkpoint fails, everything rolls
back to the last commit and replays) — not with an X holding tuples outside managed state (in-memory
window, Spark batch) downstream of a stateful bolt (downstream, between): a rollback there replays
what X still holds into the next stateful bolt, at-least-once by design (docs/state.md
"Guarantees"). eo: ``count``/``a`` fails item 13 after updating its state and emitting, ``b`` item 29
and the recorder item 47 before anything (after a window X: one window's output failing), X item 33
after emitting (a StatefulBolt X after its update too) or its second micro-batch (Spark), and
``count``/``a`` raises in its 3rd ``pre_prepare``; each must roll the topology back. off: none.

**Exact**: the recorder holds each item once (off/on: its list; alo/eo: its committed state); the
committed state of every stateful bolt is ``{i: 1}``; a sink's Parquet files hold each item once;
every fired window holds 10 items and every item is in one — exactly one where nothing rolls back
(off, on), in order ``[0..9], [10..19], ...`` under off; where a rollback re-fires windows, the
committed state downstream (each item once) shows the committed windows partition the input.
alo/eo: at least 3 checkpoints committed, the state read again two commits later, the forced
rollback seen, no error reported but the injected ones.

**Expected** (the target: exact, or refused by ``create_topology``/``submit_topology`` with
``gale.TopologyError``/``ConfigError`` naming the component; – : no such position for a sink):

| X | off alone | on alone | alo up | alo down | alo between | eo up | eo down | eo between |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
| Bolt, BasicBolt, ShellBolt | exact | exact | exact | exact | exact | exact | exact | exact |
| WindowedBolt in memory | exact | exact | exact | exact ¹ | exact ¹ | refused ² | refused ² | refused ² |
| WindowedBolt persistent | refused ³ | exact | exact | exact | exact | exact | exact | exact |
| StatefulBolt | refused ³ | exact | exact | exact | exact | exact | exact | exact |
| SparkBolt | exact | exact | exact | exact ¹ | exact ¹ | exact | exact | exact |
| SparkSink | exact | exact | – | exact | – | – | exact | – |

| S | off | on | alo | eo |
| --- | --- | --- | --- | --- |
| Spout, ReliableSpout, KafkaSpout | exact | exact | exact | exact |
| ShellSpout | exact | exact | exact | refused: "cannot rewind" |
| a Spout without position()/rewind() | | | | refused: position()/rewind() |

¹ without the forced prepare failure (above). ² naming ``with_persistence()``. ³ naming
``topology.acker.executors`` (managed state needs the acker).

Test ids: ``<guarantee>-<position>-<kind>`` (``eo-upstream-ShellBolt``, ``alo-chain-KafkaSpout``).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gale
from gale import TopologyBuilder
from gale.topology.state import CHECKPOINT_COMPONENT
from tests.combination_components import (  # noqa: F401 - the cases' vocabulary
    BASE_CONF,
    BOLT_KINDS,
    BUFFERING,
    EO_FAIL,
    FAIL_PREPARE,
    FLAKY_EVERY,
    Flaky,
    GUARANTEES,
    GUARANTEE_CONF,
    ItemSpout,
    N,
    ParquetSink,
    PassBasic,
    PassBolt,
    REPO,
    Recorder,
    ReliableItems,
    RewindableItemSpout,
    SINKS,
    SPOUT_KINDS,
    SparkPass,
    Tally,
    Tens,
    WINDOW,
    pystorm_command,
)
from tests.waiting import eventually

# ------------------------------------------------------------------------------------------ cases


@dataclass(frozen=True)
class Case:
    guarantee: str
    position: str  # alone / upstream / downstream / between; "chain" for the spout kinds
    kind: str

    @property
    def id(self) -> str:
        return f"{self.guarantee}-{self.position}-{self.kind}"

    @property
    def refusal(self) -> str | None:
        """A regex the submit-time refusal must match, or None: the case must run exactly."""
        subject = "source" if self.position == "chain" else "x"
        if self.guarantee == "off" and self.kind in ("StatefulBolt", "WindowedBoltPersistent"):
            return both(f"'{subject}'", r"topology\.acker\.executors")
        if self.guarantee == "eo" and self.kind == "WindowedBoltMemory":
            return both(f"'{subject}'", r"with_persistence")
        if self.guarantee == "eo" and self.kind == "ShellSpout":
            return both(f"'{subject}'", "cannot rewind")
        if self.guarantee == "eo" and self.kind == "SpoutWithoutRewind":
            return both(f"'{subject}'", r"position|rewind")
        return None


def both(a: str, b: str) -> str:
    """A regex matching a message that holds ``a`` and ``b``, in either order."""
    return f"(?s)(?=.*(?:{a}))(?=.*(?:{b}))"


def bolt_cases(kinds) -> list[Case]:
    cases = []
    for kind in kinds:
        for g in ("off", "on"):
            cases.append(Case(g, "alone", kind))
        for g in ("alo", "eo"):
            for position in ("upstream", "downstream", "between"):
                if kind in SINKS and position != "downstream":
                    continue
                cases.append(Case(g, position, kind))
    return cases


def spout_cases() -> list[Case]:
    return [Case(g, "chain", kind) for kind in SPOUT_KINDS for g in GUARANTEES] + [
        Case("eo", "chain", "SpoutWithoutRewind")]


def params(cases):
    import pytest

    return [pytest.param(c, id=c.id) for c in cases]


# ------------------------------------------------------------------------------------- topologies


@dataclass
class Built:
    """A topology of a case and what its checks need."""

    case: Case
    builder: TopologyBuilder
    conf: dict[str, Any]
    tallies: list[str]  # stateful tallies whose committed state must be {i: 1}
    recorder: str | None  # "recorder" (plain under off/on, a tally under alo/eo) or None (a sink ends it)
    sink_path: str | None = None
    prepare_failure: bool = False  # a pre_prepare raises once: a rollback is forced
    extra_checks: list[Callable[[Any], None]] = field(default_factory=list)

    def topology(self):
        return self.builder.create_topology(self.case.id, self.conf)


def _conf(case: Case, **extra) -> dict[str, Any]:
    return {**BASE_CONF, **GUARANTEE_CONF[case.guarantee], **extra}


def _stateful(case: Case) -> bool:
    return case.guarantee in ("alo", "eo")


def _tally_kwargs(case: Case, cid: str, prepare: bool = False) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if case.guarantee == "eo":
        kwargs["fail_item"], kwargs["fail_after"] = EO_FAIL[cid]
    if prepare and case.guarantee in ("alo", "eo"):
        kwargs["fail_prepare"] = FAIL_PREPARE
    return kwargs


def _add_x(b: TopologyBuilder, case: Case, source: str, tmp_path: Path) -> tuple[Any, str | None]:
    """Add X reading ``source``; returns (its declarer, its Parquet path if a sink)."""
    kind, eo = case.kind, case.guarantee == "eo"
    fail = dict(zip(("fail_item", "fail_after"), EO_FAIL["x"])) if eo else {}
    if kind == "Bolt":
        return b.set_bolt("x", PassBolt, 1, kwargs=fail).shuffle_grouping(source), None
    if kind == "BasicBolt":
        return b.set_bolt("x", PassBasic, 1, kwargs=fail).shuffle_grouping(source), None
    if kind == "ShellBolt":
        args = (EO_FAIL["x"][0], "after") if eo else (-1, "after")
        return b.set_bolt("x", gale.ShellBolt, 1, kwargs={**pystorm_command("ShellPass", *args), "outputs": ["i"]}
                          ).shuffle_grouping(source), None
    if kind == "WindowedBoltMemory":
        return b.set_bolt("x", Tens, 1, kwargs={"persistent": False}).global_grouping(source), None
    if kind == "WindowedBoltPersistent":
        return b.set_bolt("x", Tens, 1, kwargs={"persistent": True}).global_grouping(source), None
    if kind == "StatefulBolt":
        return b.set_bolt("x", Tally, 1, kwargs=fail).fields_grouping(source, ["i"]), None
    if kind == "SparkBolt":
        kwargs = {"fail_batch": 1} if eo else {}
        return b.set_bolt("x", SparkPass, 1, kwargs=kwargs).shuffle_grouping(source), None
    if kind == "SparkSink":
        path = str(tmp_path / "sink")
        kwargs = {"path": path, **({"fail_batch": 1} if eo else {})}
        return b.set_bolt("x", ParquetSink, 1, kwargs=kwargs).shuffle_grouping(source), path
    raise AssertionError(f"unknown bolt kind {kind}")


def _add_recorder(b: TopologyBuilder, case: Case, source: str) -> None:
    if _stateful(case):
        b.set_bolt("recorder", Tally, 1, kwargs=_tally_kwargs(case, "recorder")).fields_grouping(source, ["i"])
    else:
        b.set_bolt("recorder", Recorder, 1).shuffle_grouping(source)


def build_bolt_case(case: Case, tmp_path: Path) -> Built:
    """source → flaky → ... with X in the case's position (module docstring)."""
    b = TopologyBuilder()
    b.set_spout("source", RewindableItemSpout, 1)
    every = FLAKY_EVERY if case.guarantee in ("on", "alo") else 0
    b.set_bolt("flaky", Flaky, 1, kwargs={"every": every}).shuffle_grouping("source")
    # a rollback with X holding tuples outside managed state between two stateful bolts replays what
    # X still holds: at-least-once counts it twice by design, so no forced rollback there
    prepare = not (case.guarantee == "alo" and case.kind in BUFFERING and case.position in ("downstream", "between"))
    tallies: list[str] = []
    last = "flaky"
    sink_path = None
    if case.position == "alone":
        _, sink_path = _add_x(b, case, last, tmp_path)
        last = "x"
    elif case.position == "upstream":
        _, sink_path = _add_x(b, case, last, tmp_path)
        b.set_bolt("count", Tally, 1, kwargs=_tally_kwargs(case, "count", prepare)).fields_grouping("x", ["i"])
        tallies.append("count")
        last = "count"
    elif case.position == "downstream":
        b.set_bolt("count", Tally, 1, kwargs=_tally_kwargs(case, "count", prepare)).fields_grouping(last, ["i"])
        tallies.append("count")
        _, sink_path = _add_x(b, case, "count", tmp_path)
        last = "x"
    elif case.position == "between":
        b.set_bolt("a", Tally, 1, kwargs=_tally_kwargs(case, "a", prepare)).fields_grouping(last, ["i"])
        _, sink_path = _add_x(b, case, "a", tmp_path)
        b.set_bolt("b", Tally, 1, kwargs=_tally_kwargs(case, "b")).fields_grouping("x", ["i"])
        tallies += ["a", "b"]
        last = "b"
    else:
        raise AssertionError(case.position)
    if case.kind == "StatefulBolt":
        tallies.append("x")
    recorder = None
    if case.kind not in SINKS:
        _add_recorder(b, case, last)
        recorder = "recorder"
        if _stateful(case):
            tallies.append("recorder")
    built = Built(case, b, _conf(case), tallies, recorder, sink_path=sink_path,
                  prepare_failure=prepare and _stateful(case))
    if case.kind.startswith("WindowedBolt"):
        built.extra_checks.append(windows_check(case))
    return built


def build_spout_case(case: Case, tmp_path: Path, kafka: dict[str, Any] | None = None) -> Built:
    """S (2 tasks) → flaky → recorder (off, on); S → flaky → count → recorder (alo, eo)."""
    b = TopologyBuilder()
    extra: dict[str, Any] = {}
    if case.kind == "Spout":
        b.set_spout("source", RewindableItemSpout, 2)
    elif case.kind == "SpoutWithoutRewind":
        b.set_spout("source", ItemSpout, 2)
    elif case.kind == "ReliableSpout":
        b.set_spout("source", ReliableItems, 2)
    elif case.kind == "KafkaSpout":
        from gale.connectors import KafkaSpout

        b.set_spout("source", KafkaSpout, 2, kwargs={"fields": ["partition", "offset", "value"]})
        extra.update(kafka or {})
    elif case.kind == "ShellSpout":
        b.set_spout("source", gale.ShellSpout, 2, kwargs={**pystorm_command("ShellItems"), "outputs": ["i"]})
    else:
        raise AssertionError(case.kind)
    every = FLAKY_EVERY if case.guarantee in ("on", "alo") else 0
    b.set_bolt("flaky", Flaky, 2, kwargs={"every": every}).shuffle_grouping("source")
    tallies: list[str] = []
    last = "flaky"
    if _stateful(case):
        b.set_bolt("count", Tally, 1, kwargs=_tally_kwargs(case, "count", True)).fields_grouping("flaky", ["i"])
        tallies += ["count", "recorder"]
        last = "count"
    _add_recorder(b, case, last)
    return Built(case, b, _conf(case, **extra), tallies, "recorder", prepare_failure=_stateful(case))


# ------------------------------------------------------------------------------------------ checks


def instances(running, component: str) -> list[Any]:
    """The user objects of ``component``'s tasks in a local run (a window's bolt, not its runner)."""
    out = []
    for ex in running.runtime.executors.values():
        if ex.component != component:
            continue
        for obj in (getattr(ex, "spouts", None) or getattr(ex, "bolts", None) or {}).values():
            out.append(getattr(obj, "bolt", obj))
    return out


def committed(running, component: str) -> dict[Any, Any]:
    """The committed state of a keyed stateful component (the memory provider of this process)."""
    from gale.worker.state.inspect import read_committed

    provider = running.runtime.resources["state"]
    return read_committed(provider, running.runtime.resources["state_prefix"], component, key_groups=128)


def checkpoint_extra(running) -> dict[str, Any]:
    return running.component_stats().get(CHECKPOINT_COMPONENT, {}).get("extra", {})


def read_sink(path: str) -> Counter:
    """Every item committed under a Parquet sink's path: each committed batch directory read with pyarrow.
    (Not ``pq.read_table(path)`` while the sink writes: its directory walk enters ``_gale_tmp`` and
    fails when a batch being written there is renamed into place under it.)"""
    import pyarrow.parquet as pq

    batches = sorted(d for d in os.listdir(path) if d.startswith("gale_batch=")) if os.path.isdir(path) else []
    tables = [pq.read_table(os.path.join(path, d), columns=["i"]) for d in batches]
    return Counter(i for table in tables for i in table.column("i").to_pylist())


def unexpected_errors(running) -> dict[str, list[str]]:
    """Errors reported by any component, but the injected ones."""
    out = {}
    for cid, errors in running.errors.items():
        rest = [e for e in errors if "injected" not in e]
        if rest:
            out[cid] = rest
    return out


def _diff(actual: dict, expected: dict, limit: int = 12) -> str:
    keys = sorted(set(actual) | set(expected), key=repr)
    wrong = [(k, actual.get(k), expected.get(k)) for k in keys if actual.get(k) != expected.get(k)]
    return (f"{len(wrong)} keys differ (key, actual, expected): {wrong[:limit]}"
            + (" ..." if len(wrong) > limit else ""))


def windows_check(case: Case) -> Callable[[Any], None]:
    def check(running) -> None:
        windows = [w for bolt in instances(running, "x") for w in bolt.windows]
        sizes = Counter(len(w) for w in windows)
        assert set(sizes) <= {WINDOW}, f"windows of other sizes than {WINDOW}: {sizes}"
        seen = Counter(i for w in windows for i in w)
        assert set(seen) == set(range(N)), f"items in no fired window: {sorted(set(range(N)) - set(seen))[:20]}"
        if case.guarantee in ("off", "on"):
            assert all(c == 1 for c in seen.values()), f"items in several windows: {_diff(dict(seen), {})}"
        if case.guarantee == "off":
            assert windows == [list(range(k, k + WINDOW)) for k in range(0, N, WINDOW)], windows
    return check


def diagnosis(running) -> str:
    """What a failing case's message adds: the checkpoint figures and record, each component's tuple
    counts, and the last lines of the errors reported."""
    stats = running.component_stats()
    extra = stats.get(CHECKPOINT_COMPONENT, {}).get("extra", {})
    lines = []
    if extra:
        keys = ("checkpoints_committed", "checkpoint_failures", "checkpoint_rollbacks", "checkpoint_txid_max")
        figures = {k.removeprefix("checkpoint_"): extra[k] for k in sorted(extra) if k in keys}
        record = running.runtime.resources["state"].get_meta(f"{running.runtime.resources['state_prefix']}/__state")
        lines.append(f"checkpoints {figures}; record {record.decode() if record else None}")
    lines.append("tuples (emitted/acked/failed): " + ", ".join(
        f"{cid} {int(s.get('emitted', 0))}/{int(s.get('acked', 0))}/{int(s.get('failed', 0))}"
        for cid, s in sorted(stats.items()) if cid != "__acker"))
    for cid, errors in sorted(running.errors.items()):
        lines.append(f"errors of {cid!r} ({len(errors)}): " + " | ".join(
            e.strip().splitlines()[-1][:300] for e in errors[-2:]))
    return "\n".join(lines)


def check_exact(running, built: Built) -> dict[str, Any]:
    """Every check of the case's "exact" (module docstring); returns figures for the report."""
    case = built.case
    expected = {i: 1 for i in range(N)}
    problems = []
    errors = unexpected_errors(running)
    if errors:
        problems.append(f"errors reported by {sorted(errors)}")
    if built.recorder and not _stateful(case):
        seen = Counter(tuple(v) for bolt in instances(running, built.recorder) for v in bolt.seen)
        want = Counter((i,) for i in range(N))
        if seen != want:
            problems.append(f"recorder saw {sum(seen.values())} tuples: " + _diff(dict(seen), dict(want)))
    for cid in built.tallies:
        state = committed(running, cid)
        if state != expected:
            problems.append(f"committed state of {cid!r} ({len(state)} keys): " + _diff(state, expected))
    if built.sink_path:
        rows = read_sink(built.sink_path)
        if rows != Counter(expected):
            problems.append(f"sink holds {sum(rows.values())} rows: " + _diff(dict(rows), expected))
    for check in built.extra_checks:
        try:
            check(running)
        except AssertionError as exc:
            problems.append(str(exc))
    assert not problems, "\n".join(problems) + "\n" + diagnosis(running)
    figures: dict[str, Any] = {}
    if _stateful(case):
        extra = checkpoint_extra(running)
        figures = {k: extra.get(k, 0) for k in ("checkpoints_committed", "checkpoint_txid_max", "checkpoint_failures",
                                                 "checkpoint_rollbacks")}
        assert figures["checkpoints_committed"] >= 3, f"checkpoints: {figures}\n{diagnosis(running)}"
    return figures


def run_exact(cluster, built: Built, timeout: float) -> dict[str, Any]:
    """Submit the case, wait until every check holds; under alo/eo wait two more commits and check again
    (nothing counted twice late); the injected rollback must have happened."""
    running = cluster.submit_topology(built.case.id, {}, built.topology())
    figures = eventually(lambda: check_exact(running, built), timeout)
    if _stateful(built.case):
        txid = figures["checkpoint_txid_max"]

        def two_more_commits():
            now = checkpoint_extra(running).get("checkpoint_txid_max", 0)
            assert now >= txid + 2, f"checkpoints committed: txid {now}, waiting for {txid + 2}"

        eventually(two_more_commits, timeout)
        figures = check_exact(running, built)
        if built.prepare_failure:
            forced = ("checkpoint_rollbacks" if built.case.guarantee == "eo" else "checkpoint_failures")
            # eo: the start-up rollback (generation 1) counts as one
            assert figures[forced] >= (2 if built.case.guarantee == "eo" else 1), \
                f"no forced rollback: {figures}\n{diagnosis(running)}"
    return figures


def expect_refusal(cluster, built: Built, pattern: str) -> str:
    """The case must be refused when built or submitted, with a message matching ``pattern``; returns it."""
    from gale import ConfigError, TopologyError

    try:
        cluster.submit_topology(built.case.id, {}, built.topology())
    except (TopologyError, ConfigError) as exc:
        message = str(exc)
        assert re.search(pattern, message), f"refused, but the message does not match {pattern!r}: {message}"
        return message
    raise AssertionError(f"not refused at submit (expected a TopologyError/ConfigError matching {pattern!r})")


def run_case(built: Built, timeout: float, cluster_conf: dict[str, Any] | None = None) -> None:
    """A case end to end in a local cluster: refused at submit, or exact (module docstring)."""
    with gale.LocalCluster(cluster_conf) as cluster:
        if built.case.refusal:
            expect_refusal(cluster, built, built.case.refusal)
        else:
            run_exact(cluster, built, timeout)
