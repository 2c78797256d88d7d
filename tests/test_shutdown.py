"""Bounded shutdown: a daemon told to stop exits within its bound whatever is unreachable.

The deadline helpers (gale.deadline) are tested on their own; then real processes: a cluster on
the test's own ZooKeeper, which the test stops before SIGTERMing a worker, its supervisor and
nimbus, timing each exit against its bound (supervisor.worker.shutdown.sleep.secs,
supervisor.shutdown.timeout.secs, nimbus.shutdown.timeout.secs)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from kazoo.client import KazooClient

from gale.clock import SimulatedClock
from gale.deadline import EXIT_SHARE, Deadline, within
from gale.zk import stop_client
from gale.zkserver import ZooKeeperServer
from tests.brokers import kafka_broker  # noqa: F401
from tests.cluster import cli, dump_logs, make_cluster
from tests.waiting import eventually

SLOW_TICKS = Path(__file__).resolve().parent / "cluster_topologies" / "slow_ticks.py"

# ------------------------------------------------------------------------------ the helpers


def test_deadline_counts_down_on_its_clock_and_leaves_room_for_later_steps():
    clock = SimulatedClock()
    d = Deadline(3.0, clock.monotonic)
    assert d.remaining() == 3.0 and not d.expired()
    early = d.earlier(0.5)
    clock.advance(2.0)
    assert d.remaining() == 1.0 and early.remaining() == 0.5
    clock.advance(0.6)
    assert early.expired() and early.remaining() == 0.0 and not d.expired()
    assert d.earlier(5.0).remaining() == 0.0  # never before now
    clock.advance(1.0)
    assert d.expired() and d.remaining() == 0.0


def test_within_returns_in_time_abandons_a_stuck_step_and_reports_failures():
    done: list = []
    assert within(Deadline(5.0), "quick", done.append, 1) is True and done == [1]
    release = threading.Event()
    # release.wait() has no end of its own: that within returned at all (before release is set) is
    # the proof that it abandoned the step; the step's thread is still there, blocked
    assert within(Deadline(0.3), "stuck", release.wait) is False
    assert not release.is_set() and any(t.name == "stop-stuck" for t in threading.enumerate())
    release.set()

    def boom():
        raise RuntimeError("broker gone")
    assert within(Deadline(5.0), "failing", boom) is False
    ran: list = []
    assert within(Deadline(0.0), "late", ran.append, 1) is False and ran == []  # past the deadline: skipped


def test_zookeeper_steps_are_skipped_while_disconnected_and_the_client_stops_in_time(tmp_path):
    zk = ZooKeeperServer(data_dir=tmp_path / "zk").start()
    client = KazooClient(hosts=zk.address, timeout=20.0, connection_retry={"max_tries": -1, "max_delay": 5.0})
    try:
        client.start(timeout=15)
        client.create("/beat", b"x", ephemeral=True)
        zk.stop()
        eventually(lambda: _assert_disconnected(client), timeout=30)
        ran: list = []
        # a plain client.delete("/beat") here would block until ZooKeeper came back; skipped, the step
        # never starts (abandoned, its thread would still be there, blocked in the delete)
        assert within(Deadline(2.0), "delete", lambda: ran.append(client.delete("/beat")), zk=client) is False
        assert ran == [] and not any(t.name == "stop-delete" for t in threading.enumerate())
        t0 = time.monotonic()
        stop_client(client, Deadline(2.0))
        assert time.monotonic() - t0 < 2.5
    finally:
        zk.stop()


def _assert_disconnected(client):
    assert not client.connected


def test_an_exit_deadline_ends_a_process_whose_stop_hangs():
    # the process's own end would be exit 0 after its 60 s wait (and subprocess.run's timeout of 60 s
    # would raise first): exit code 7, the deadline's, is the proof that the deadline ended it
    code = ("import threading, time; from gale.deadline import begin_stop; "
            "d = begin_stop(2.0, 'test', code=lambda: 7); threading.Event().wait(60)")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7, proc.stderr
    assert "stop-deadline-exceeded" in proc.stdout + proc.stderr
    # not before its deadline: begin_stop arms the exit at EXIT_SHARE of the 2 s budget (t0 is taken
    # before the interpreter starts, so the elapsed time can only overstate the child's wait)
    assert time.monotonic() - t0 >= EXIT_SHARE * 2.0


# ------------------------------------------------------------------------------ real processes


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _time_exit(pid: int, timeout: float = 60.0) -> float:
    """SIGTERM ``pid``; seconds until it has exited (a zombie counts: its parent may not reap it)."""
    t0 = time.monotonic()
    psutil.Process(pid).send_signal(signal.SIGTERM)
    while not _gone(pid):
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"pid {pid} still running {timeout}s after SIGTERM")
        time.sleep(0.02)
    return time.monotonic() - t0


def _worker_log(cluster) -> Path:
    (path,) = cluster.base.glob("supervisor-0/logs/workers-artifacts/*/*/worker.log")
    return path


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_worker_supervisor_and_nimbus_exit_within_their_bounds_while_zookeeper_is_down(tmp_path):
    grace, sup_budget, nimbus_budget = 3, 5, 5
    zk = ZooKeeperServer(data_dir=tmp_path / "zk").start()  # the test's own: it stops it
    cluster = make_cluster(zk, tmp_path, supervisors=1, slots=1, conf={
        "supervisor.worker.shutdown.sleep.secs": grace,  # Storm's default
        "supervisor.shutdown.timeout.secs": sup_budget,
        "nimbus.shutdown.timeout.secs": nimbus_budget,
        "storm.zookeeper.session.timeout": 20000,  # Storm's default: kazoo keeps reconnecting that long
    })
    try:
        cluster.start()
        cli(cluster, "submit", str(SLOW_TICKS), "--name", "ticks", "--wait")

        def worker_running():
            (pid,) = cluster.worker_pids(0)
            assert '"worker-running"' in _worker_log(cluster).read_text(), "worker not set up yet"
            return pid
        worker_pid = eventually(worker_running, timeout=120, retry_on=(AssertionError, ValueError))
        zk.stop()

        def worker_lost_zookeeper():
            # kazoo's own log line, in the worker's log: its client lost the connection and is
            # reconnecting (its workerbeat writes now wait for a reconnect that never comes)
            assert "Connection dropped" in _worker_log(cluster).read_text()
        eventually(worker_lost_zookeeper, timeout=60)
        times = {"worker": _time_exit(worker_pid)}
        times["supervisor"] = _time_exit(cluster.supervisor_procs[0].proc.pid)
        times["nimbus"] = _time_exit(cluster.nimbus_procs[0].proc.pid)
        print(f"\nexit after SIGTERM with ZooKeeper down: " + ", ".join(f"{k} {v:.2f} s" for k, v in times.items()))
        logs = dump_logs(cluster) + _worker_log(cluster).read_text()[-4000:]
        assert times["worker"] <= grace, logs
        assert times["supervisor"] <= sup_budget, logs
        assert times["nimbus"] <= nimbus_budget, logs
        assert '"worker-stopping"' in _worker_log(cluster).read_text()
    finally:
        cluster.stop()
        zk.stop()


@pytest.mark.timeout(120)
def test_a_kafka_spout_closes_within_its_bound_while_its_zookeeper_is_down(kafka_broker, tmp_path):
    from gale import LocalCluster, TopologyBuilder
    from gale.connectors import KafkaSpout
    from gale.worker.connectors.kafka_spout import CLOSE_SECS
    from tests.topologies import Sink

    zk = ZooKeeperServer(data_dir=tmp_path / "zk").start()
    kafka_broker.create_topic("t", 2)
    kafka_broker.produce("t", [f"v{i}" for i in range(20)], partitions=2)
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, 2)
    b.set_bolt("ack", Sink, 1).shuffle_grouping("kafka")
    conf = {"kafka.bootstrap.servers": kafka_broker.bootstrap, "kafka.topic": "t", "kafka.group": "g",
            "kafka.zookeeper.servers": zk.address, "kafka.commit.interval.ms": 200}
    cluster = LocalCluster()
    try:
        running = cluster.submit_topology("k", conf, b.create_topology(name="k"))

        def all_acked():
            assert running.component_stats()["kafka"]["acked"] == 20
        eventually(all_acked, timeout=60)
        spouts = [s for ex in running.runtime.executors.values() if ex.component == "kafka" for s in ex.spouts.values()]
        zk.stop()
        eventually(lambda: _assert_disconnected_all([s.zk_client for s in spouts]), timeout=30)
        t0 = time.monotonic()
        cluster.kill_topology("k")  # deactivate (commit) and close (leave the group) of both tasks
        secs = time.monotonic() - t0
        print(f"\nkill of a 2-task Kafka spout with its ZooKeeper down: {secs:.2f} s")
        assert secs <= 2 * CLOSE_SECS, secs  # each task's close is bounded (it skips ZooKeeper work)
    finally:
        cluster.shutdown()
        zk.stop()


def _assert_disconnected_all(clients):
    for c in clients:
        _assert_disconnected(c)
