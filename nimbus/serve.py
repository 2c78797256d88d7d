"""``nimbus serve``: run the nimbus daemon in the foreground until SIGTERM/SIGINT."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gale.daemon_util import StopSignals, configure_daemon_logging, sd_notify
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

    def stop(self) -> None:
        self.nimbus.stop()
        self.http.stop()


def serve(conf: Mapping[str, Any]) -> int:
    configure_daemon_logging(conf, "nimbus")
    signals = StopSignals()
    server = NimbusServer(conf)
    server.start(signals.event)  # a stop signal ends a wait for ZooKeeper
    sd_notify("READY=1")
    log.info("nimbus-ready", address=server.nimbus.address)
    signum = signals.wait()
    sd_notify("STOPPING=1")
    log.info("nimbus-stopping", signal=signum)
    server.stop()
    return 0
