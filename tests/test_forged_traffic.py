"""Forged worker traffic against real workers on a real cluster (issue 11 §2).

A process outside the topology (its own ZeroMQ context and socket) connects to a worker's slot
port and sends: a batch MACed with the topology id (the old fallback key), one with a random key,
a verbatim copy of a legitimate batch captured off the loopback interface, and batches sealed with
the real secret (as an insider who stole it would) carrying an out-of-range root, a negative
anchor and messages of unknown kinds, tasks and shapes. None executes, each is counted under its
reason, and the worker keeps running — past the acker rotations that used to kill it — and keeps
processing. The worker's restarted process refuses the captured batch (replayed: it has heard from
that live sender since) and the insider's old batch (stale: sealed before it started), and a
restarted sender is accepted at once.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import msgpack
import pytest
import zmq
from prometheus_client.parser import text_string_to_metric_families

from gale.nimbus.client import NimbusClient
from gale.worker.batch_auth import Sealer
from gale.worker.runtime.acker import ACK, INIT
from gale.worker.wire_kinds import ACKER, RESULT, TUPLE, TUPLES
from tests.cluster import cli, dump_logs, make_cluster
from tests.test_secure_defaults import listening_addresses
from tests.waiting import eventually
from tests.wire_capture import LoopbackCapture, capture_available

WIRE_PROBE = Path(__file__).resolve().parent / "cluster_topologies" / "wire_probe.py"
TIMEOUT_SECS = 3  # topology.message.timeout.secs: the acker rotates every 3 s

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300),
              pytest.mark.skipif(capture_available() is not None, reason=str(capture_available()))]


def metrics(port: int) -> dict[tuple[str, str], float]:
    """``(sample name, reason label)`` → value from a worker's /metrics."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5, trust_env=False).text
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, sample.labels.get("reason", ""))] = sample.value
    return out


def rejected(port: int) -> dict[str, float]:
    m = metrics(port)
    return {r: v for (n, r), v in m.items() if n == "gale_worker_transfer_batches_rejected_total" and v}


def invalid(port: int) -> dict[str, float]:
    m = metrics(port)
    return {r: v for (n, r), v in m.items() if n == "gale_worker_transfer_messages_invalid_total" and v}


class Sinks:
    def __init__(self, state: Path):
        self.state = state

    def lines(self, tasks: list[int] | None = None) -> list[tuple[str, str, float]]:
        out = []
        for p in sorted(self.state.glob("sink-*.log")):
            task = int(p.stem.split("-")[1])
            if tasks is not None and task not in tasks:
                continue
            for line in p.read_text().splitlines():
                tag, value, when = line.split(" ")
                out.append((tag, value, float(when)))
        return out


def placement(client: NimbusClient, name: str) -> dict[str, dict]:
    """component → {tasks, port, node, pid} of its executors (one entry per worker port)."""
    detail = client.topology(name)
    out: dict[str, dict] = {}
    for comp, c in detail["components"].items():
        for ex in c["executor_list"]:
            assert ex["running"], ex
            entry = out.setdefault(comp, {})
            w = entry.setdefault(ex["port"], {"tasks": [], "node": ex["node"], "pid": ex["worker"]["pid"]})
            w["tasks"] += ex["tasks"]
    return out


def test_forged_replayed_and_invalid_batches_never_execute_and_the_worker_survives(zk_server, tmp_path):
    c = make_cluster(zk_server, tmp_path, supervisors=2, slots=1)
    c.start()
    ports = {p for conf in c.supervisor_confs for p in conf["supervisor.slots.ports"]}
    capture = LoopbackCapture(ports).start()
    ctx = zmq.Context()
    try:
        state = tmp_path / "state"
        sinks = Sinks(state)
        cli(c, "submit", str(WIRE_PROBE), "--name", "probe", "--wait", "-c", f"test.state.dir={state}",
            "-c", f"topology.message.timeout.secs={TIMEOUT_SECS}")
        client = NimbusClient(c.client_conf())

        def placed():
            where = placement(client, "probe")
            (spout_port,) = where["probe"]
            targets = [p for p in where["sink"] if p != spout_port]
            assert targets, f"no sink outside the spout's worker: {where}"
            return where, spout_port, targets[0]

        where, spout_port, port = eventually(placed, 60, retry_on=(AssertionError, KeyError, TypeError, ValueError))
        node = where["sink"][port]["node"]
        pid = where["sink"][port]["pid"]
        sink_tasks = where["sink"][port]["tasks"]
        acker_task = where["__acker"][port]["tasks"][0]
        metrics_port = port + 1000
        # the slot port listens on storm.local.hostname's address (127.0.0.1 here), not on every interface
        assert listening_addresses(port) == {"127.0.0.1"}
        topology_id = client.topology("probe")["id"]
        identity = f"{node}:{port}"

        # a legitimate batch for the target, captured off the wire
        def captured():
            for frames in capture.messages(port):
                if len(frames) == 3:
                    unpacker = msgpack.Unpacker(raw=False)
                    unpacker.feed(frames[2])
                    msgs = list(unpacker)
                    if any(m[0] == TUPLES and m[1] in sink_tasks for m in msgs):
                        return frames, msgs
            raise AssertionError(f"no tuple batch to port {port} captured yet")

        frames, captured_msgs = eventually(captured, 30)
        capture.stop()
        # workers send tuples in groups: [TUPLES, task, component, stream, source task, [[values, ...], ...]]
        captured_values = [body[0][1] for m in captured_msgs if m[0] == TUPLES for body in m[5]]
        eventually(lambda: _assert_executed(sinks, captured_values, sink_tasks), 30)
        baseline = {**rejected(metrics_port), **{f"invalid:{k}": v for k, v in invalid(metrics_port).items()}}
        assert baseline == {}, f"legitimate traffic was refused: {baseline}"

        # the insider's key: what the supervisor wrote beside the code (mode 0600)
        sup = next(i for i in range(2) if c.supervisor_id(i) == node)
        stormconf = Path(c.supervisor_confs[sup]["storm.local.dir"]) / "supervisor" / "stormdist" / topology_id / \
            "stormconf.json"
        assert stormconf.stat().st_mode & 0o777 == 0o600
        secret = json.loads(stormconf.read_text())["topology.secret"].encode()

        spout_task = where["probe"][spout_port]["tasks"][0]

        def tuple_msg(tag, anchors=()):
            return [TUPLE, sink_tasks[0], "probe", "default", spout_task, [tag, f"forged:{tag}"], list(anchors), 0]

        def batch(*msgs):
            return b"".join(msgpack.packb(m) for m in msgs)

        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 1000)
        push.connect(f"tcp://127.0.0.1:{port}")
        sent_at = time.time()
        # 1. MACed with the topology id: the key workers used to fall back to
        push.send_multipart(Sealer(topology_id.encode()).seal(identity, batch(tuple_msg("FORGED-topology-id"))))
        # 2. a random key
        push.send_multipart(Sealer(os.urandom(32)).seal(identity, batch(tuple_msg("FORGED-random-key"))))
        # 3. a legitimate batch, replayed verbatim
        push.send_multipart(frames)
        # 4. sealed with the real secret, every message invalid
        insider = Sealer(secret)
        bad = [
            [ACKER, acker_task, ACK, -1, 1, 0],                       # root outside unsigned 64 bits
            [ACKER, acker_task, INIT, 12345, -7, 3],                  # value outside unsigned 64 bits
            tuple_msg("FORGED-negative-anchor", [-5, 9]),
            [42, sink_tasks[0], "?"],                                 # unknown message kind
            [TUPLE, 99999, "probe", "default", spout_task, ["FORGED-unknown-task", "x"], [], 0],  # not hosted here
            [RESULT, sink_tasks[0], 1, 5],                            # a verdict for a bolt task
            [TUPLE, sink_tasks[0], "probe", "default", 1, "FORGED-not-a-list", [], 0],
            [TUPLE, sink_tasks[0], "nosuch", "default", 1, ["FORGED-stream", "x"], [], 0],
            # a tree whose "spout" is a bolt task, or the acker itself, then its ACK: the acker would
            # send its verdict there, and an executor thread would crash on it
            [ACKER, acker_task, INIT, 777, 5, sink_tasks[0]],
            [ACKER, acker_task, ACK, 777, 5, 0],
            [ACKER, acker_task, INIT, 778, 6, acker_task],
            [ACKER, acker_task, ACK, 778, 6, 0],
        ]
        push.send_multipart(insider.seal(identity, batch(*bad)))
        # 5. positive control: the same path, sealed with the secret, valid — it does execute
        control = insider.seal(identity, batch(tuple_msg("INSIDER-control")))
        push.send_multipart(control)

        def counted():
            assert rejected(metrics_port) == {"bad_mac": 2, "replayed": 1}
            assert invalid(metrics_port) == {"out_of_range": 3, "unknown_kind": 1, "unknown_task": 2,
                                             "malformed": 1, "unknown_stream": 1, "not_a_spout_task": 2}

        try:
            eventually(counted, 30)
        except AssertionError:
            raise AssertionError(dump_logs(c)) from None
        lines = sinks.lines()
        tags = Counter(tag for tag, _, _ in lines)
        assert tags["INSIDER-control"] == 1, tags
        assert not [t for t in tags if t.startswith("FORGED")], tags
        values = Counter(value for tag, value, _ in lines if tag == "legit")
        assert all(values[v] == 1 for v in captured_values), [(v, values[v]) for v in captured_values]

        # the worker is alive and working two acker rotations later (a negative root used to kill it then)
        def still_processing():
            newest = max(when for tag, _, when in sinks.lines(sink_tasks) if tag == "legit")
            assert newest > sent_at + 2 * TIMEOUT_SECS + 1
        eventually(still_processing, 60)
        assert placement(client, "probe")["sink"][port]["pid"] == pid
        os.kill(pid, 0)

        # 6. the worker restarts: its new process refuses the captured batch and the control batch
        os.kill(pid, signal.SIGKILL)

        def restarted():
            now = placement(client, "probe")["sink"][port]
            assert now["pid"] != pid
            return now["pid"]

        killed_at = time.time()
        eventually(restarted, 60, retry_on=(AssertionError, KeyError, TypeError))

        def new_process_serves_metrics():  # counters of the new process, not the old one's last scrape
            assert metrics(metrics_port)[("gale_worker_uptime_seconds", "")] < time.time() - killed_at
        eventually(new_process_serves_metrics, 30, retry_on=(AssertionError, httpx.HTTPError, KeyError))
        def new_process_executes():  # and so has heard from the live sender's session since it started
            assert [when for tag, _, when in sinks.lines(sink_tasks) if tag == "legit" and when > killed_at]
        eventually(new_process_executes, 60)
        executed_before = len(sinks.lines())
        push.send_multipart(frames)   # the live sender's session, an old sequence number: replayed
        push.send_multipart(control)  # a session the new process never heard from, sealed before it started: stale
        eventually(lambda: _assert_equal(rejected(metrics_port), {"replayed": 1, "stale": 1}), 30)
        tags = Counter(tag for tag, _, _ in sinks.lines())
        assert tags["INSIDER-control"] == 1 and not [t for t in tags if t.startswith("FORGED")], tags
        values = Counter(value for tag, value, _ in sinks.lines() if tag == "legit")
        assert all(values[v] == 1 for v in captured_values)
        assert len(sinks.lines()) >= executed_before

        # 7. the sender restarts: its new session is accepted by the receiver at once
        spout_pid = placement(client, "probe")["probe"][spout_port]["pid"]
        os.kill(spout_pid, signal.SIGKILL)

        def new_sender_delivers():
            from_new = [v for tag, v, _ in sinks.lines(sink_tasks) if tag == "legit" and not v.startswith(f"{spout_pid}:")]
            assert from_new, "no tuple from the restarted spout reached the restarted worker yet"
        eventually(new_sender_delivers, 90)
        assert rejected(metrics_port) == {"replayed": 1, "stale": 1}
        push.close(0)
    finally:
        capture.stop()
        ctx.destroy(linger=0)
        c.cleanup()


def _assert_executed(sinks: Sinks, values: list[str], tasks: list[int]):
    seen = {v for tag, v, _ in sinks.lines(tasks) if tag == "legit"}
    assert set(values) <= seen, sorted(set(values) - seen)[:5]


def _assert_equal(a, b):
    assert a == b, a
