"""Watching an exactly-once topology's committed checkpoints from outside, for the cluster tests.

A checkpoint is a consistent cut when its committed state is the effect of exactly the records
before its committed source positions. For a count over a Kafka topic whose offsets start at 0,
every record adds one to one count, so each committed cut must satisfy::

    sum(committed counts) == sum(committed positions over the partitions)

:class:`CutWatcher` reads the cut of every checkpoint it sees committed (the record, the positions
and the counts, then the record again: equal records mean nothing committed in between, since a
commit moves the record to COMMITTING first) on a thread while the test runs, so a test that only
checks its final counts also catches a cut that was wrong for a while — and says which checkpoint
of which generation first went wrong. :func:`logs_kept_on_failure` copies the workers' logs out of
pytest's temporary directory (which later runs rotate away) when the test fails.
"""

from __future__ import annotations

import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gale.worker.state.exactly_once import read_epoch
from gale.worker.state.redis_provider import RedisStateProvider

FAILURES = Path(__file__).resolve().parent.parent / "artifacts" / "failures"


def settled(epoch: Any) -> int:
    """The last checkpoint whose commit has finished, from the coordinator's record.

    Wait for this to pass a txid, never for the phase COMMITTED: the record is COMMITTED only from a
    commit to the next checkpoint's start, which is no time at all once a checkpoint takes longer
    than the interval (a loaded machine, 20 ms checkpoints), so a poller can miss every one. A
    COMMITTING(m) record has finished m - 1 (m is past its commit point, still committing); PAUSING(m)
    and PREPARING(m) too; ROLLING_BACK(c) goes back to c, which is committed."""
    return epoch.committed - (epoch.phase == "COMMITTING")  # Epoch.committed counts m as committed


@dataclass(frozen=True)
class Cut:
    txid: int
    generation: int
    positions: dict[int, int]
    total: int

    @property
    def consistent(self) -> bool:
        return sum(self.positions.values()) == self.total


class CutWatcher:
    """``positions(provider, name)`` → {partition: committed offset}; ``total(provider, name)`` → the
    committed state's sum. Use as a context manager around the run; :attr:`cuts` holds one
    :class:`Cut` per (txid, generation) seen committed, in order."""

    def __init__(self, url: str, name: str, positions: Callable[[Any, str], dict[int, int]],
                 total: Callable[[Any, str], int], interval: float = 0.003):
        self.provider = RedisStateProvider(url, timeout=1.0)
        self.name = name
        self._positions = positions
        self._total = total
        self.interval = interval
        self.cuts: list[Cut] = []
        self.read_errors = 0  # the provider unreachable (a test may kill Redis): those moments are skipped
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"cuts-{name}", daemon=True)

    def __enter__(self) -> CutWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.provider.close()

    def _run(self) -> None:
        seen = None
        while not self._stop.wait(self.interval):
            try:
                before = read_epoch(self.provider, self.name)
                if before.phase != "COMMITTED" or (before.txid, before.generation) == seen:
                    continue
                positions = self._positions(self.provider, self.name)
                total = self._total(self.provider, self.name)
                if read_epoch(self.provider, self.name) != before:
                    continue  # a checkpoint began meanwhile: read this one again next time
            except Exception:  # noqa: BLE001 - Redis down or restarting
                self.read_errors += 1
                continue
            seen = (before.txid, before.generation)
            self.cuts.append(Cut(before.txid, before.generation, positions, total))

    def inconsistent(self) -> list[Cut]:
        return [c for c in self.cuts if not c.consistent]

    def describe(self) -> str:
        """The cuts around the first inconsistent one (all of them if there is none), one a line."""
        bad = next((i for i, c in enumerate(self.cuts) if not c.consistent), None)
        shown = self.cuts if bad is None else self.cuts[max(0, bad - 5):bad + 5]
        lines = [f"txid {c.txid} gen {c.generation}: positions {dict(sorted(c.positions.items()))} "
                 f"(sum {sum(c.positions.values())}), state sum {c.total}{'' if c.consistent else '  <-- WRONG'}"
                 for c in shown]
        return f"{len(self.cuts)} committed cuts seen ({self.read_errors} unreadable moments):\n" + "\n".join(lines)


@contextmanager
def logs_kept_on_failure(cluster: Any, name: str) -> Iterator[None]:
    """On a failure inside, copy the topology's worker logs and the daemons' logs to
    ``artifacts/failures/<name>/`` (and say so on stderr) before the failure propagates."""
    try:
        yield
    except BaseException:
        dest = FAILURES / name
        try:
            for p in cluster.base.glob(f"supervisor-*/logs/workers-artifacts/{name}-*/*/worker.log"):
                target = dest / p.parts[-5] / p.parts[-3] / p.parts[-2]
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, target / p.name)
            for p in cluster.base.glob("logs/*.log"):
                (dest / "daemons").mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, dest / "daemons" / p.name)
            sys.stderr.write(f"\nlogs of {name} kept in {dest}\n")
        except OSError as exc:
            sys.stderr.write(f"\ncould not keep the logs of {name}: {exc}\n")
        raise
