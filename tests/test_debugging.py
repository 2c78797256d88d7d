"""Debugging a worker, piece by piece: which share of a component is sampled and what an event
shows (truncated, never a secret), timed log levels (what is in force, what is put back), the
debug API's validation, the control socket's thread dump (a real Unix socket, a directory path
longer than a socket path may be) and CPU profiles with the real py-spy of a real process —
including one that exits half-way."""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
import threading

import pytest

from gale.nimbus.debug_api import (DebugRequestError, log_config_update, log_config_view, sampling_percentage,
                                   with_debug)
from gale.records import DebugOptions, LogConfig, LoggerLevel, StormBase
from gale.supervisor.profiler import ProfileError, Profiler, WorkerExited, py_spy_binary
from gale.worker.debug import log_levels
from gale.worker.debug.control import ControlError, ControlServer, ask
from gale.worker.debug.sampling import (EVENT_CHARS, MASK, VALUE_CHARS, EventLog, Sampler, render_event, sampling_pct,
                                        secrets_of)
from gale.worker.debug.threaddump import thread_dump
from tests.components import requires
from tests.waiting import until

# ------------------------------------------------------------------ sampling


def test_the_components_own_debug_entry_wins_over_the_topologys():
    debug = {"topo-1": DebugOptions(enable=True, samplingpct=5), "count": DebugOptions(enable=True, samplingpct=50),
             "split": DebugOptions(enable=False, samplingpct=90)}
    assert sampling_pct(debug, "topo-1", "count") == 50
    assert sampling_pct(debug, "topo-1", "sentences") == 5
    assert sampling_pct(debug, "topo-1", "split") == 0  # its own entry, disabled
    assert sampling_pct({}, "topo-1", "count") == 0


def test_an_event_is_truncated_and_shows_no_secret():
    secrets = secrets_of({"topology.secret": "0123456789abcdef", "kafka.sasl.password": "hunter22", "kafka.topic": "t",
                          "nimbus.api.token": "tok-tok-tok"})
    assert set(secrets) == {"0123456789abcdef", "hunter22", "tok-tok-tok"}
    line = render_event("count", "default", ("word", "password", "note", "blob"),
                        ["x" * 1000, "pw-in-clear", "the key is 0123456789abcdef!", {"n": 1}], secrets, now=12.5)
    event = json.loads(line)
    assert event["fields"] == ["word", "password", "note", "blob"]
    assert len(event["values"][0]) == VALUE_CHARS and event["values"][0].endswith("…")
    assert event["values"][1] == MASK and "pw-in-clear" not in line
    assert event["values"][2] == f"the key is {MASK}!" and "0123456789abcdef" not in line
    assert event["values"][3] == "{'n': 1}"
    wide = render_event("c", "s", [f"f{i}" for i in range(30)], ["y" * 500] * 30, [], now=1.0)
    assert len(wide) <= EVENT_CHARS and json.loads(wide)["truncated"] is True
    assert json.loads(render_event("c", "s", (), [1, 2.5, None, True], [], now=1))["values"] == [1, 2.5, None, True]


class Clock:
    def __init__(self):
        self.now = 1000.0

    def time(self):
        return self.now


def test_a_sampler_takes_its_share_and_the_event_log_its_budget(tmp_path):
    events = EventLog(tmp_path, per_sec=30)
    clock = Clock()
    sampler = Sampler(25.0, lambda c, s: ("n",), events, [], clock, rng=random.Random(7))
    for i in range(400):
        sampler("count", "default", [i])
    taken = len(events.queue)
    assert taken == 30 and events.dropped > 0  # a quarter of 400 is over the budget of 30 a second
    clock.now += 1
    for i in range(40):
        sampler("count", "default", [i])
    assert 3 <= len(events.queue) - taken <= 20  # about a quarter of 40
    queued = len(events.queue)
    events.close()  # the writer thread drains the queue into events.log
    lines = (tmp_path / "events.log").read_text().splitlines()
    assert len(lines) == queued == events.written
    assert json.loads(lines[0]) == {"ts": 1000.0, "component": "count", "stream": "default", "fields": ["n"],
                                    "values": [json.loads(lines[0])["values"][0]]}


# ------------------------------------------------------------------ log levels


def entry(level: str, until_s: float, *components: str) -> LoggerLevel:
    return LoggerLevel(target_log_level=level, reset_log_level_timeout_epoch=until_s, components=list(components))


def test_the_levels_in_force_for_a_worker_and_when_the_next_ends():
    config = LogConfig(named_logger_level={"ROOT": entry("DEBUG", 100.0), "gale.worker": entry("WARNING", 50.0),
                                           "ended": entry("ERROR", 10.0), "scoped": entry("DEBUG", 80.0, "count")})
    assert log_levels.plan(config, 20.0, {"split"}) == ({"ROOT": logging.DEBUG, "gale.worker": logging.WARNING}, 50.0)
    assert log_levels.plan(config, 20.0, {"count"})[0]["scoped"] == logging.DEBUG
    assert log_levels.plan(config, 100.0, {"count"}) == ({}, None)
    assert log_levels.plan(None, 0, ()) == ({}, None)


def test_levels_set_are_put_back_as_they_were():
    logger = logging.getLogger("gale.test.levels")
    logger.setLevel(logging.ERROR)
    levels = log_levels.LogLevels()
    assert levels.apply({"gale.test.levels": logging.DEBUG}) == ["gale.test.levels=DEBUG"]
    assert logger.level == logging.DEBUG and levels.apply({"gale.test.levels": logging.DEBUG}) == []
    assert levels.apply({}) == ["gale.test.levels=ERROR (reset)"] and logger.level == logging.ERROR


# ------------------------------------------------------------------ the debug API's input


def test_sampling_percentages_and_actions_are_checked():
    assert sampling_percentage("enable", "12.5") == (True, 12.5)
    assert sampling_percentage("disable", "0") == (False, 0.0)
    for action, pct, why in (("enable", "0", "out of range"), ("enable", "101", "out of range"),
                             ("enable", "nan", "out of range"), ("enable", "ten", "not a number"),
                             ("toggle", "5", "unknown debug action")):
        with pytest.raises(DebugRequestError, match=why):
            sampling_percentage(action, pct)
    base = StormBase(name="t", status="ACTIVE", num_workers=1, component_executors={}, launch_time_secs=0)
    on = with_debug(base, "count", True, 5.0)
    assert on.component_debug["count"] == DebugOptions(enable=True, samplingpct=5.0)
    assert with_debug(on, "count", False, 0).component_debug == {}


def test_log_config_requests_are_checked_and_ended_entries_dropped():
    now = 1000.0
    current = LogConfig(named_logger_level={"old": entry("DEBUG", 900.0), "kept": entry("INFO", 2000.0)})
    new = log_config_update(current, {"namedLoggerLevels": {"ROOT": {"target_level": "warn", "timeout": 60,
                                                                      "components": ["count"]}}}, {"count"}, now)
    assert set(new.named_logger_level) == {"kept", "ROOT"}
    assert new.named_logger_level["ROOT"] == entry("WARNING", 1060.0, "count")
    cleared = log_config_update(new, {"namedLoggerLevels": {"ROOT": {"target_level": "", "timeout": 0}}}, {"count"}, now)
    assert set(cleared.named_logger_level) == {"kept"}
    view = log_config_view("t-1", new, now)["namedLoggerLevels"]
    assert view["ROOT"] == {"target_level": "WARNING", "timeout_epoch": 1060000, "timeout": 60, "components": ["count"]}
    for body, why in (({}, "namedLoggerLevels"), ({"namedLoggerLevels": {"../x": {"target_level": "DEBUG", "timeout": 5}}},
                                                    "not ROOT or a dotted"),
                      ({"namedLoggerLevels": {"ROOT": {"target_level": "LOUD", "timeout": 5}}}, "is not one of"),
                      ({"namedLoggerLevels": {"ROOT": {"target_level": "DEBUG", "timeout": 10 ** 6}}}, "out of range"),
                      ({"namedLoggerLevels": {"ROOT": {"target_level": "DEBUG", "timeout": 5, "components": ["nope"]}}},
                       "unknown components")):
        with pytest.raises(DebugRequestError, match=why):
            log_config_update(None, body, {"count"}, now)


# ------------------------------------------------------------------ thread dumps over the control socket


def test_a_thread_dump_over_the_control_socket_names_every_thread(tmp_path):
    directory = tmp_path / ("d" * 90) / ("e" * 60)  # longer than a Unix socket path may be
    directory.mkdir(parents=True)
    stop = threading.Event()
    waiter = threading.Thread(target=stop.wait, name="parked-thread", daemon=True)
    waiter.start()
    server = ControlServer(directory, {"threaddump": lambda _r: {"text": thread_dump(header="test")}})
    server.start()
    try:
        text = ask(directory, {"op": "threaddump"})["text"]
        assert '"parked-thread"' in text and '"MainThread"' in text and "in wait" in text and "test" in text
        with pytest.raises(ControlError, match="unknown request"):
            ask(directory, {"op": "heapdump"})
    finally:
        server.stop()
        stop.set()
    with pytest.raises(ControlError, match="no control socket"):
        ask(tmp_path, {"op": "threaddump"})


# ------------------------------------------------------------------ CPU profiles with py-spy

SPIN = "import time\nt = time.time()\nwhile time.time() - t < {secs}:\n    sum(range(1000))\n"


def py_process(secs: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SPIN.format(secs=secs)])


@requires(py_spy_binary() is not None, "py-spy is not installed (a Gale dependency)")
def test_a_profile_is_a_flame_graph_and_a_worker_exiting_midway_is_reported(tmp_path):
    profiler = Profiler()
    proc = py_process(30)
    try:
        out = tmp_path / "profile.svg"
        profile = profiler.record("w1", proc.pid, lambda: proc.poll() is None, 1, 50, out)
        assert out.read_text().startswith("<?xml") and "<svg" in out.read_text()
        assert f"worker w1 (pid {proc.pid}): 1 s at 50 samples/s" in out.read_text()  # not py-spy's command line
        assert "--output" not in out.read_text()
        assert profile.samples and profile.samples > 10
        with pytest.raises(ProfileError, match="out of range"):
            profiler.record("w1", proc.pid, lambda: True, 61, 50, out)
        with pytest.raises(ProfileError, match="out of range"):
            profiler.record("w1", proc.pid, lambda: True, 1, 1000, out)
    finally:
        proc.kill()
        proc.wait()
    short = py_process(3)
    until(lambda: short.poll() is None, 5)
    with pytest.raises(WorkerExited, match="exited") as exited:
        profiler.record("w2", short.pid, lambda: short.poll() is None, 20, 50, tmp_path / "partial.svg")
    short.wait()
    assert exited.value.output is not None  # what was sampled until then is kept


# ------------------------------------------------------------------ key groups at a glance


def test_a_key_group_walk_goes_a_chunk_at_a_time_and_reports_the_biggest_groups():
    import msgpack

    from gale.topology.keygroups import key_group
    from gale.topology.state import pack
    from gale.worker.state.keygroup_stats import Walk, top_groups

    entries = [(f"k{i}", "v" * (i % 7)) for i in range(1000)]
    pack_value = msgpack.Packer(use_bin_type=True).pack
    walk = Walk(entries, 16, pack_value)
    steps = 1
    while not walk.step(300):
        steps += 1
    assert steps == 4 and sum(walk.keys.values()) == 1000
    expected: dict[int, int] = {}
    for k, v in entries:
        g = key_group(k, 16)
        expected[g] = expected.get(g, 0) + len(pack(k)) + len(pack_value(v))
    assert walk.size == expected
    top = top_groups(walk.keys, walk.size, n=3)
    biggest = sorted(expected, key=lambda g: (-expected[g], g))[:3]
    assert list(top["state_keygroup_bytes"]) == [str(g) for g in biggest]
    assert top["state_keygroup_keys"] == {str(g): float(walk.keys[g]) for g in biggest}
