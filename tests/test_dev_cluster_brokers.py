"""``nimbus dev-cluster --kafka --redis``: the Kafka-protocol broker (Tansu) and Redis live and die
with the dev cluster, and the addresses it prints are the ones that work.

The broker launcher itself (:class:`gale.kafkaserver.TansuBroker`, which ``tests/brokers.py`` builds
on) is checked against real processes: it prefers a port when that is free, moves when it is not,
and a port the caller fixed is never moved.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from gale.kafkaserver import PortInUse, TansuBroker
from gale.ports import reserve_port

ROOT = Path(__file__).resolve().parent.parent


def _lines(proc: subprocess.Popen) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _wait_line(lines: queue.Queue, pattern: str, seen: list[str], timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no line matching {pattern!r} within {timeout}s; output:\n{''.join(seen)}") from None
        if line is None:
            raise AssertionError(f"dev-cluster ended without a line matching {pattern!r}; output:\n{''.join(seen)}")
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match


def _service_pids(pid: int) -> dict[str, int]:
    """The dev cluster's broker and Redis processes (its children, each in a session of its own)."""
    found = {}
    for child in psutil.Process(pid).children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "tansu" in cmd and " broker " in f"{cmd} ":
            found["kafka"] = child.pid
        elif "redis-server" in cmd:
            found["redis"] = child.pid
    return found


def _round_trip(bootstrap: str) -> list[bytes]:
    """Create a topic, produce three records, read them back from the start."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic("greetings", 1, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for value in (b"one", b"two", b"three"):
            producer.send("greetings", value, partition=0).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition("greetings", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(r.value for r in records)
        return got
    finally:
        consumer.close()


@pytest.mark.cluster
@pytest.mark.timeout(240)
def test_dev_cluster_runs_a_kafka_broker_and_redis_for_its_lifetime(tmp_path):
    import redis

    proc = subprocess.Popen(
        [sys.executable, "-m", "gale.nimbus.cli", "dev-cluster", "--kafka", "--redis", "--supervisors", "1",
         "--slots", "1", "--http-port", "0", "--dir", str(tmp_path / "dev")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    seen: list[str] = []
    pids: dict[str, int] = {}
    try:
        lines = _lines(proc)
        kafka = _wait_line(lines, r"^Kafka\s+kafka\.bootstrap\.servers=(127\.0\.0\.1:(\d+))\s+\(Tansu, in memory, "
                                  r"(port \d+|port 9092 is taken: port \d+); log (\S+)\)", seen, 120)
        bootstrap, port = kafka.group(1), int(kafka.group(2))
        assert kafka.group(3).endswith(f"port {port}")  # says which port it took: 9092, or why not
        assert Path(kafka.group(4)) == tmp_path / "dev" / "kafka" / "tansu.log"
        url = _wait_line(lines, r"^Redis\s+topology\.state\.redis\.url=(redis://127\.0\.0\.1:\d+/0)\s", seen, 30).group(1)
        _wait_line(lines, r"^Ctrl-C stops everything", seen, 120)
        pids = _service_pids(proc.pid)
        assert set(pids) == {"kafka", "redis"}, pids

        assert _round_trip(bootstrap) == [b"one", b"two", b"three"]
        client = redis.Redis.from_url(url, socket_timeout=5)
        try:
            assert client.ping() is True
        finally:
            client.close()

        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert proc.wait(timeout=120) == 0, "".join(seen)
        gone = {name: not psutil.pid_exists(pid) for name, pid in pids.items()}
        assert gone == {"kafka": True, "redis": True}
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pid in pids.values():  # only what this test's dev cluster started, if it failed to stop them
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_kafka_without_a_broker_binary_is_one_line_and_starts_nothing(tmp_path):
    env = {**os.environ, "CALF_TANSU_BIN": str(tmp_path / "no-such-tansu")}
    proc = subprocess.run(
        [sys.executable, "-m", "gale.nimbus.cli", "dev-cluster", "--kafka", "--http-port", "0",
         "--dir", str(tmp_path / "dev")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr
    assert "Tansu" in proc.stderr and "CALF_TANSU_BIN" in proc.stderr and "no-such-tansu" in proc.stderr
    assert "starting" not in proc.stdout and not (tmp_path / "dev" / "zookeeper").exists()


# ------------------------------------------------------------------------------------- the launcher


def test_broker_takes_the_preferred_port_when_free_and_another_when_not(tmp_path):
    with reserve_port() as free:
        wanted = free.port
    with TansuBroker(prefer_port=wanted, data_dir=tmp_path / "a") as broker:
        assert broker.port == wanted and broker.got_preferred_port
        with TansuBroker(prefer_port=wanted, data_dir=tmp_path / "b") as second:
            assert second.port != wanted and not second.got_preferred_port
            assert second.running()
        assert _round_trip(broker.bootstrap) == [b"one", b"two", b"three"]


def test_a_fixed_port_that_is_taken_is_an_error_not_a_move(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        broker = TansuBroker(port=port, data_dir=tmp_path)
        with pytest.raises(PortInUse, match=f"127.0.0.1:{port}"):
            broker.start()
        assert not broker.running()
