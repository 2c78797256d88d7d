"""``nimbus serve``: run the nimbus daemon in the foreground until SIGTERM/SIGINT."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gale.daemon_util import StopSignals, configure_daemon_logging, sd_notify
from gale.deadline import Deadline, begin_stop
from gale.http_server import HttpServer
from gale.log import get_logger
from gale.nimbus.api import create_app
from gale.nimbus.daemon import Nimbus

log = get_logger("nimbus.serve")


class NimbusServer:
    """Nimbus plus its HTTP server (API, code downloads; UI and /metrics when installed)."""

    def __init__(self, conf: Mapping[str, Any]):
        self.conf = dict(conf)
        metrics = None
        try:
            from gale.nimbus.metrics import NimbusMetrics

            metrics = NimbusMetrics()
        except ModuleNotFoundError:
            pass
        self.nimbus = Nimbus(self.conf, metrics=metrics)
        if metrics is not None:
            metrics.bind(self.nimbus)
        self.http = HttpServer(create_app(self.nimbus), self.conf["nimbus.host"], int(self.conf["nimbus.http.port"]),
                               name="nimbus")

    def start(self, stop=None) -> None:
        """Listen, then start nimbus (which waits for ZooKeeper unless ``stop`` is set first)."""
        # listen first: the port is part of this nimbus's identity (host:port) in ZooKeeper, and
        # /metrics shows whether nimbus still waits for ZooKeeper
        self.http.start()
        self.nimbus.port = self.http.port
        self.nimbus.start(stop)

    def stop(self, deadline: Deadline | None = None) -> None:
        """Stop nimbus, then its HTTP server, within ``deadline`` (default
        ``nimbus.shutdown.timeout.secs`` from now)."""
        deadline = deadline or Deadline(float(self.conf["nimbus.shutdown.timeout.secs"]))
        self.nimbus.stop(deadline.earlier(min(1.0, deadline.remaining() / 4)))
        self.http.stop(timeout=max(0.1, deadline.remaining()))


def serve(conf: Mapping[str, Any]) -> int:
    configure_daemon_logging(conf, "nimbus")
    signals = StopSignals()
    server = NimbusServer(conf)
    server.start(signals.event)  # a stop signal ends a wait for ZooKeeper
    sd_notify("READY=1")
    log.info("nimbus-ready", address=server.nimbus.address)
    signum = signals.wait()
    sd_notify("STOPPING=1")
    budget = float(server.conf["nimbus.shutdown.timeout.secs"])
    # bounded whatever is unreachable: the steps get 80% of the budget, the process ends at 90%
    deadline = begin_stop(budget, "nimbus")
    log.info("nimbus-stopping", signal=signum, budget_secs=budget)
    server.stop(deadline)
    return 0
