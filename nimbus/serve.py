"""``nimbus serve``: run the nimbus daemon in the foreground until SIGTERM/SIGINT.

Where the HTTP server listens is decided by :func:`bind_plan` (pure): with an API token, on
``nimbus.host`` (default every interface); without one, on the loopback interface only — the API
can submit code that every node runs — unless ``nimbus.api.insecure: true`` says otherwise. A
non-loopback ``nimbus.host`` without a token and without that flag is a configuration error.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gale import config as gconfig
from gale.config_keys import Config
from gale.daemon_util import StopSignals, configure_daemon_logging, sd_notify
from gale.deadline import Deadline, begin_stop
from gale.errors import ConfigError
from gale.http_guard import is_loopback
from gale.http_server import HttpServer
from gale.log import get_logger
from gale.nimbus.api import create_app
from gale.nimbus.daemon import Nimbus

log = get_logger("nimbus.serve")


@dataclass(frozen=True)
class BindPlan:
    host: str                    # what the HTTP server binds
    loopback_only: bool          # no token and not insecure: only this machine reaches the API
    insecure: bool               # a non-loopback address without a token (nimbus.api.insecure)


def bind_plan(config: Config, token: str | None) -> BindPlan:
    """Decide the HTTP bind address from ``nimbus.host``, the token and ``nimbus.api.insecure``."""
    host = config.nimbus_host
    insecure_ok = config.nimbus_api_insecure
    if token:
        return BindPlan(host or "0.0.0.0", loopback_only=False, insecure=False)
    if host is None:
        return BindPlan("127.0.0.1", loopback_only=True, insecure=False)
    if is_loopback(host):
        return BindPlan(host, loopback_only=True, insecure=False)
    if insecure_ok:
        return BindPlan(host, loopback_only=False, insecure=True)
    raise ConfigError(
        f"nimbus.host is {host!r}, which other machines can reach, but no API token is configured: anyone reaching "
        f"port {config.nimbus_http_port} could submit a topology and run code on every node. Set "
        "nimbus.api.token (or nimbus.api.token.file; docs/security.md), or bind nimbus.host: 127.0.0.1, or set "
        "nimbus.api.insecure: true to accept the risk"
    )


def allowed_host_names(config: Config, advertised: str) -> set[str]:
    """Host header values a loopback-only nimbus answers (anything else is a DNS-rebinding attempt)."""
    names = {"localhost", "127.0.0.1", "::1", advertised}
    for name in (config.nimbus_host, config.storm_local_hostname):
        if name:
            names.add(name)
    for seed in config.nimbus_seeds:
        names.add(seed.rsplit(":", 1)[0] if seed.count(":") == 1 else seed)
    return {n.strip("[]").lower() for n in names}


class NimbusServer:
    """Nimbus plus its HTTP server (API, code downloads; UI and /metrics when installed)."""

    def __init__(self, config: Config):
        token = gconfig.api_token(config)
        # the token read once, from the file if that is where it is
        self.config = replace(config, nimbus_api_token=token, nimbus_api_token_file=None)
        self.plan = bind_plan(self.config, token)
        metrics = None
        try:
            from gale.nimbus.metrics import NimbusMetrics

            metrics = NimbusMetrics()
        except ModuleNotFoundError:
            pass
        host = None
        if self.plan.loopback_only and not self.config.storm_local_hostname:
            # reachable on loopback only: advertise the address clients can actually use
            host = "127.0.0.1" if ":" not in self.plan.host else "localhost"
        self.nimbus = Nimbus(self.config, host=host, metrics=metrics)
        if metrics is not None:
            metrics.bind(self.nimbus)
        allowed = allowed_host_names(self.config, self.nimbus.host) if self.plan.loopback_only else None
        self.http = HttpServer(create_app(self.nimbus, allowed_hosts=allowed), self.plan.host,
                               self.config.nimbus_http_port, name="nimbus")

    def start(self, stop=None) -> None:
        """Listen, then start nimbus (which waits for ZooKeeper unless ``stop`` is set first)."""
        if self.plan.loopback_only:
            log.warning("nimbus-api-loopback-only", host=self.plan.host,
                        reason="no nimbus.api.token is configured, so the API (which can submit code) listens on "
                               "the loopback interface only; set nimbus.api.token to serve other machines")
        elif self.plan.insecure:
            log.warning("nimbus-api-insecure", host=self.plan.host,
                        reason="nimbus.api.insecure is true and no nimbus.api.token is set: anyone who reaches "
                               "this port can submit topologies and run code on every node")
        # listen first: the port is part of this nimbus's identity (host:port) in ZooKeeper, and
        # /metrics shows whether nimbus still waits for ZooKeeper
        self.http.start()
        self.nimbus.port = self.http.port
        self.nimbus.start(stop)

    def stop(self, deadline: Deadline | None = None) -> None:
        """Stop nimbus, then its HTTP server, within ``deadline`` (default
        ``nimbus.shutdown.timeout.secs`` from now)."""
        deadline = deadline or Deadline(float(self.config.nimbus_shutdown_timeout_secs))
        self.nimbus.stop(deadline.earlier(min(1.0, deadline.remaining() / 4)))
        self.http.stop(timeout=max(0.1, deadline.remaining()))


def serve(config: Config) -> int:
    configure_daemon_logging(config, "nimbus")
    signals = StopSignals()
    server = NimbusServer(config)
    server.start(signals.event)  # a stop signal ends a wait for ZooKeeper
    sd_notify("READY=1")
    log.info("nimbus-ready", address=server.nimbus.address)
    signum = signals.wait()
    sd_notify("STOPPING=1")
    budget = float(server.config.nimbus_shutdown_timeout_secs)
    # bounded whatever is unreachable: the steps get 80% of the budget, the process ends at 90%
    deadline = begin_stop(budget, "nimbus")
    log.info("nimbus-stopping", signal=signum, budget_secs=budget)
    server.stop(deadline)
    return 0
