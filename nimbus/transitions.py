"""The topology state machine (Storm's TOPO_STATE_TRANSITIONS), as pure functions on StormBase.

=============  ==========  ===========  ============  ======  ============  ======
status         activate    deactivate   rebalance     kill    do-rebalance  remove
=============  ==========  ===========  ============  ======  ============  ======
ACTIVE         no-op       INACTIVE     REBALANCING   KILLED  –             –
INACTIVE       ACTIVE      no-op        REBALANCING   KILLED  –             –
REBALANCING    –           –            –             KILLED  prev status   –
KILLED         –           –            –             KILLED  –             removed
=============  ==========  ===========  ============  ======  ============  ======

Kill and rebalance are delayed actions: the deadline (wall clock) is stored in the StormBase so a
new nimbus leader resumes the countdown (``due_action``) instead of losing it.
"""

from __future__ import annotations

from gale.errors import GaleError
from gale.records import (
    KillOptions,
    RebalanceOptions,
    StormBase,
    TopologyActionOptions,
    TopologyStatus,
)

ACTIVE, INACTIVE, REBALANCING, KILLED = (
    TopologyStatus.ACTIVE,
    TopologyStatus.INACTIVE,
    TopologyStatus.REBALANCING,
    TopologyStatus.KILLED,
)


class TransitionError(GaleError):
    """A user action that is not allowed in the topology's current status."""


def _refuse(base: StormBase, action: str) -> TransitionError:
    return TransitionError(f"cannot {action} topology {base.name!r}: it is {base.status.value}")


def activate(base: StormBase) -> StormBase:
    if base.status == ACTIVE:
        return base
    if base.status != INACTIVE:
        raise _refuse(base, "activate")
    return base.model_copy(update={"status": ACTIVE})


def deactivate(base: StormBase) -> StormBase:
    if base.status == INACTIVE:
        return base
    if base.status != ACTIVE:
        raise _refuse(base, "deactivate")
    return base.model_copy(update={"status": INACTIVE})


def kill(base: StormBase, wait_secs: int, now: float) -> StormBase:
    """Any status → KILLED; removal after ``wait_secs`` (spouts are deactivated meanwhile)."""
    return base.model_copy(
        update={
            "status": KILLED,
            "prev_status": None,
            "topology_action_options": TopologyActionOptions(
                kill=KillOptions(wait_secs=wait_secs), deadline_secs=now + wait_secs
            ),
        }
    )


def rebalance(
    base: StormBase, wait_secs: int, now: float, num_workers: int | None, num_executors: dict[str, int],
    num_tasks: dict[str, int] | None = None,
) -> StormBase:
    if base.status not in (ACTIVE, INACTIVE):
        raise _refuse(base, "rebalance")
    return base.model_copy(
        update={
            "status": REBALANCING,
            "prev_status": base.status,
            "topology_action_options": TopologyActionOptions(
                rebalance=RebalanceOptions(wait_secs=wait_secs, num_workers=num_workers, num_executors=num_executors,
                                           num_tasks=num_tasks or {}),
                deadline_secs=now + wait_secs,
            ),
        }
    )


def do_rebalance(base: StormBase) -> StormBase:
    """Apply the stored rebalance options and return to the previous status."""
    if base.status != REBALANCING or base.topology_action_options is None or base.topology_action_options.rebalance is None:
        raise _refuse(base, "finish rebalancing")
    opts = base.topology_action_options.rebalance
    executors = dict(base.component_executors)
    executors.update(opts.num_executors)
    tasks = dict(base.component_tasks)
    tasks.update(opts.num_tasks)
    return base.model_copy(
        update={
            "status": base.prev_status or ACTIVE,
            "prev_status": None,
            "num_workers": opts.num_workers or base.num_workers,
            "component_executors": executors,
            "component_tasks": tasks,
            "topology_action_options": None,
        }
    )


def due_action(base: StormBase, now: float) -> str | None:
    """``"remove"`` or ``"do-rebalance"`` when the stored delayed action is due, else None."""
    opts = base.topology_action_options
    if opts is None or now < opts.deadline_secs:
        return None
    if base.status == KILLED:
        return "remove"
    if base.status == REBALANCING:
        return "do-rebalance"
    return None
