"""``nimbus logs --follow``'s loop as pure logic (a stand-in for nimbus's API): it prints what each
worker's log gained, whole lines only, and a stop request (Ctrl-C sets it) ends it between polls."""

from __future__ import annotations

import threading

import pytest

from gale.nimbus.logs_cmd import run_logs

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

WORKER = {"supervisorId": "sup0", "logFile": "w.log", "host": "h", "port": 6700, "componentNumTasks": {"count": 1}}


class Api:
    """Topology ``t`` with one worker whose log grows by one line per read after the first."""

    def __init__(self):
        self.text = "a\nb\n"
        self.reads = 0

    def get(self, path, params=None):
        if path == "/api/v1/topology/t":
            return {"name": "t", "workers": [WORKER], "spouts": [], "bolts": [{"boltId": "count"}]}
        self.reads += 1
        if self.reads > 1:
            self.text += f"line {self.reads}\n"
        start = (params or {}).get("start", 0)
        return {"data": self.text[start:], "start": start, "end": len(self.text), "size": len(self.text)}


def test_following_prints_new_whole_lines_of_each_worker():
    api, out = Api(), []
    run_logs(api, "t", "count", True, 5, out=out.append, polls=3, poll_secs=0)
    assert out == ["h:6700 | a", "h:6700 | b", "h:6700 | line 2", "h:6700 | line 3", "h:6700 | line 4"]


def test_a_stop_request_ends_the_follow_loop_between_polls():
    api, out = Api(), []
    stop = threading.Event()
    follower = threading.Thread(target=run_logs, args=(api, "t", None, True, 1),
                                kwargs={"out": out.append, "poll_secs": 3600, "stop": stop}, daemon=True)
    follower.start()
    stop.set()
    follower.join(30)  # a deadline for a hang, not a timing: the loop waits an hour between polls
    assert not follower.is_alive()
    assert out == ["h:6700 | b"]
