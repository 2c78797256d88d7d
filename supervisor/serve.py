"""``supervisor serve``: run the supervisor daemon in the foreground until SIGTERM/SIGINT."""

from __future__ import annotations

from gale.config_keys import Config
from gale.daemon_util import StopSignals, configure_daemon_logging, sd_notify
from gale.deadline import begin_stop
from gale.log import get_logger
from gale.supervisor.daemon import Supervisor

log = get_logger("supervisor.serve")


def serve(config: Config, kill_workers_on_exit: bool = False) -> int:
    configure_daemon_logging(config, "supervisor")
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
    sup.start(signals.event)  # waits for ZooKeeper; a stop signal ends the wait
    sd_notify("READY=1")
    signum = signals.wait()
    sd_notify("STOPPING=1")
    budget = sup.stop_budget(kill_workers_on_exit)
    # bounded whatever is unreachable: the steps get 80% of the budget, the process ends at 90%
    deadline = begin_stop(budget, "supervisor")
    log.info("supervisor-stopping", signal=signum, budget_secs=budget)
    sup.stop(kill_workers=kill_workers_on_exit, deadline=deadline)
    return 0
