import pytest

from gale.records import StormBase, TopologyStatus
from gale.nimbus import transitions as tr

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


def base(status="ACTIVE"):
    return StormBase(name="wc", status=status, num_workers=2, component_executors={"a": 2, "__acker": 2},
                     launch_time_secs=1)


def test_activate_deactivate():
    assert tr.deactivate(base()).status == TopologyStatus.INACTIVE
    assert tr.activate(base("INACTIVE")).status == TopologyStatus.ACTIVE
    assert tr.activate(base()) == base()  # no-op
    with pytest.raises(tr.TransitionError, match="cannot activate topology 'wc': it is KILLED"):
        tr.activate(base("KILLED"))
    with pytest.raises(tr.TransitionError, match="it is REBALANCING"):
        tr.deactivate(base("REBALANCING"))


def test_kill_countdown_survives_in_the_record():
    killed = tr.kill(base(), 30, now=1000.0)
    assert killed.status == TopologyStatus.KILLED
    assert killed.topology_action_options.deadline_secs == 1030.0
    assert tr.due_action(killed, 1029.9) is None
    assert tr.due_action(killed, 1030.0) == "remove"
    # a new leader reading the record back resumes the same countdown
    again = StormBase.decode(killed.encode(), "/x")
    assert tr.due_action(again, 1031) == "remove"
    assert tr.kill(killed, 5, now=1010).topology_action_options.deadline_secs == 1015  # kill again shortens


def test_rebalance_then_do_rebalance_restores_previous_status():
    r = tr.rebalance(base("INACTIVE"), 10, 500.0, 4, {"a": 1})
    assert r.status == TopologyStatus.REBALANCING and r.prev_status == TopologyStatus.INACTIVE
    assert tr.due_action(r, 505) is None and tr.due_action(r, 510) == "do-rebalance"
    done = tr.do_rebalance(r)
    assert done.status == TopologyStatus.INACTIVE
    assert done.num_workers == 4 and done.component_executors == {"a": 1, "__acker": 2}
    assert done.topology_action_options is None
    with pytest.raises(tr.TransitionError):
        tr.rebalance(r, 1, 0, None, {})
    assert tr.kill(r, 0, 0).status == TopologyStatus.KILLED
