"""What a worker does for debugging (docs/ui.md), in one object the worker's loops call.

* :meth:`start_control` (before the worker's setup, so a worker stuck starting can be dumped):
  the control socket its supervisor asks for thread dumps;
* :meth:`attach` (once the runtime runs): event sampling on its executors;
* :meth:`follow` (on every refresh of the worker's view of its topology): the debug options of the
  StormBase (sampling) and the LogConfig (timed log levels); returns when it must look again (a
  timed level ending).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gale.log import get_logger
from gale.records import LogConfig, StormBase
from gale.worker.debug import log_levels
from gale.worker.debug.control import ControlServer
from gale.worker.debug.sampling import EventLog, Sampling, sampling_pct, secrets_of
from gale.worker.debug.threaddump import thread_dump

log = get_logger("worker.debugging")


class Debugging:
    def __init__(self, worker_dir: Path, artifacts: Path | None, topology_id: str, clock: Any, header: str = ""):
        self.worker_dir = worker_dir
        self.topology_id = topology_id
        self.clock = clock
        self.header = header
        self.events = EventLog(artifacts)
        self.levels = log_levels.LogLevels()
        self.sampling: Sampling | None = None
        self.control: ControlServer | None = None

    def start_control(self) -> None:
        try:
            self.control = ControlServer(self.worker_dir, {"threaddump": self._dump})
            self.control.start()
        except OSError as exc:  # debugging must never keep a worker from running
            log.warning("control-socket-unavailable", error=str(exc))
            self.control = None

    def _dump(self, _request: dict[str, Any]) -> dict[str, Any]:
        import sys

        frames = sys._current_frames()
        return {"text": thread_dump(frames, header=self.header), "threads": len(frames)}

    def attach(self, runtime: Any, conf: dict[str, Any], secret: bytes) -> None:
        self.sampling = Sampling(runtime, self.events, secrets_of(conf, [secret.decode(errors="replace")]), self.clock)

    def follow(self, base: StormBase | None, log_config: LogConfig | None, running: set[str]) -> float | None:
        """Apply the topology's sampling and log levels; the time the next log level ends (or None)."""
        if self.sampling is not None and base is not None:
            wanted = {c: sampling_pct(base.component_debug, self.topology_id, c) for c in running}
            self.sampling.apply({c: p for c, p in wanted.items() if p > 0})
        levels, next_end = log_levels.plan(log_config, self.clock.time(), running)
        changed = self.levels.apply(levels)
        if changed:
            log.info("log-levels", changed=changed)
        return next_end

    def stop(self) -> None:
        if self.control is not None:
            self.control.stop()
        self.events.close()
