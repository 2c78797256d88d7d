"""``supervisor serve``: run the supervisor daemon in the foreground until SIGTERM/SIGINT."""

from __future__ import annotations

import socket

from gale import config as gconfig
from gale.config_keys import Config
from gale.daemon_util import StopSignals, configure_daemon_logging, log_dir, sd_notify
from gale.deadline import begin_stop
from gale.http_server import HttpServer
from gale.log import get_logger
from gale.supervisor.daemon import Supervisor

log = get_logger("supervisor.serve")


def start_log_server(config: Config, sup: Supervisor) -> HttpServer:
    """Start the supervisor's log server (:mod:`gale.supervisor.logserver`) and put its address in
    ``sup.logviewer`` for the supervisor's record. ``logviewer.port`` taken: any free port."""
    from gale.supervisor.logserver import listen_plan, make_app

    token = gconfig.api_token(config)
    plan = listen_plan(config, token)
    allowed = None
    if plan.loopback_only:
        names = {"localhost", "127.0.0.1", "::1", plan.host, sup.hostname, socket.gethostname()}
        allowed = {n.strip("[]").lower() for n in names if n}
    app = make_app(config, token, log_dir(config), sup.worker_refs, sup.supervisor_id, allowed_hosts=allowed)
    server = HttpServer(app, plan.host, config.logviewer_port, name="logviewer")
    try:
        server.start()
    except OSError as exc:
        if not config.logviewer_port:
            raise
        log.warning("logviewer-port-taken", port=config.logviewer_port, error=str(exc), fallback="any free port")
        server = HttpServer(app, plan.host, 0, name="logviewer")
        server.start()
    advertised = plan.host if plan.loopback_only else (sup.hostname if plan.host in ("0.0.0.0", "::") else plan.host)
    sup.logviewer = (advertised, server.port)
    return server


def serve(config: Config, kill_workers_on_exit: bool = False) -> int:
    configure_daemon_logging(config, "supervisor", keep_file=True)
    signals = StopSignals()
    metrics = None
    try:
        from gale.supervisor.metrics import SupervisorMetrics

        metrics = SupervisorMetrics()
    except ModuleNotFoundError:
        pass
    sup = Supervisor(config, metrics=metrics)
    if metrics is not None:
        sup.metrics_port = metrics.serve(config.supervisor_metrics_port, sup)
    logs = start_log_server(config, sup)
    sup.start(signals.event)  # waits for ZooKeeper; a stop signal ends the wait
    sd_notify("READY=1")
    signum = signals.wait()
    sd_notify("STOPPING=1")
    budget = sup.stop_budget(kill_workers_on_exit)
    # bounded whatever is unreachable: the steps get 80% of the budget, the process ends at 90%
    deadline = begin_stop(budget, "supervisor")
    log.info("supervisor-stopping", signal=signum, budget_secs=budget)
    sup.stop(kill_workers=kill_workers_on_exit, deadline=deadline)
    logs.stop(timeout=max(0.1, min(1.0, deadline.remaining())))
    return 0
