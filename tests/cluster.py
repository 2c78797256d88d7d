"""Helpers for tests against a real local cluster (nimbus, supervisors, worker processes).

Waiting: ``tests/waiting.py`` (``eventually``/``until``) only. Cluster facts a test can wait on:
:func:`next_heartbeats` (every worker of a topology reported after the call: the positive marker
for "nothing happened meanwhile"), :func:`worker_pids`, :func:`gone`. Shared clusters: a test
submits through :class:`Topologies`, which names each topology uniquely and kills (and waits out)
whatever the test submitted when it ends, pass or fail.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path

import httpx

from gale.nimbus.devcluster import DAEMON_PRELOAD, DevCluster
from gale.supervisor.fork_server import ForkServer
from tests.waiting import eventually, until

ROOT = Path(__file__).resolve().parent.parent
DURABLE_WC = Path(__file__).resolve().parent / "cluster_topologies" / "durable_wc.py"
CORPUS = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]

#: fast timeouts so fault tests take seconds, not minutes
FAST = {
    "nimbus.monitor.freq.secs": 1,
    "nimbus.task.timeout.secs": 8,
    "nimbus.task.launch.secs": 30,
    "supervisor.worker.timeout.secs": 8,
    "supervisor.worker.start.timeout.secs": 30,
    "supervisor.worker.shutdown.sleep.secs": 1,
    "supervisor.monitor.frequency.secs": 1,
    "supervisor.heartbeat.frequency.secs": 1,
    "task.heartbeat.frequency.secs": 1,
    "task.refresh.poll.secs": 2,
    "storm.zookeeper.session.timeout": 6000,
    "topology.message.timeout.secs": 10,
}


_FORK_SERVER: list[ForkServer] = []


def fork_server() -> ForkServer:
    """This test process's fork server for the daemons of its dev clusters and its command-line calls
    (they are the processes an exec would make, without importing Gale again each time: the suite
    starts about 250 of them); started at the first use, stopped when the process ends. Whatever it
    cannot fork is exec'd as before."""
    if not _FORK_SERVER:
        server = ForkServer([sys.executable], dict(os.environ), stderr=subprocess.DEVNULL, preload=list(DAEMON_PRELOAD))
        server.start()
        atexit.register(server.close)
        _FORK_SERVER.append(server)
    return _FORK_SERVER[0]


def make_cluster(zk_server, tmp_path, **kwargs) -> DevCluster:
    conf = dict(FAST)
    conf.update(kwargs.pop("conf", {}))
    root = f"/c-{uuid.uuid4().hex[:10]}/storm"
    kwargs.setdefault("fork_server", fork_server())
    return DevCluster(tmp_path / "cluster", zookeeper=zk_server, root=root, conf=conf, **kwargs)


def run_forked(argv: list[str], env: dict[str, str], timeout: float, cwd: Path = ROOT) -> subprocess.CompletedProcess | None:
    """``subprocess.run(argv, capture_output=True, text=True, ...)`` of ``<python> -m module ...``,
    forked by :func:`fork_server`; None when it cannot be forked (the caller runs it)."""
    with tempfile.TemporaryDirectory(prefix="gale-cli-") as tmp:
        out, err = Path(tmp) / "out", Path(tmp) / "err"
        child = fork_server().spawn(argv, cwd, env, out, err)
        if child is None:
            return None
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise
        return subprocess.CompletedProcess(argv, code, out.read_text(errors="replace"), err.read_text(errors="replace"))


def cli(cluster: DevCluster, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, GALE_CONFIG=str(cluster.client_config_path()))
    argv = [sys.executable, "-m", "gale.nimbus.cli", *args]
    proc = run_forked(argv, env, timeout) or subprocess.run(argv, capture_output=True, text=True, env=env,
                                                           timeout=timeout, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"nimbus {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


#: a slow sink (1 ms a tuple, two sink tasks: at most ~2,000 sentences/s), so that an input of
#: 200,000 or more outlasts a test that waits for progress after a daemon restart (see
#: :meth:`DurableInput.wait_acked_beyond`)
SLOW_SINK = {"test.sink.delay.secs": 0.001}


class DurableInput:
    """The durable word-count workload: input file + state dir, with result readers."""

    def __init__(self, base: Path, n: int):
        self.n = n
        self.dir = base
        self.dir.mkdir(parents=True, exist_ok=True)
        self.input = self.dir / "input.tsv"
        self.state = self.dir / "state"
        self.input.write_text("".join(f"{i}\t{CORPUS[i % len(CORPUS)]}\n" for i in range(n)))

    def overrides(self, **extra) -> list[str]:
        pairs = {"test.input": str(self.input), "test.state.dir": str(self.state), **extra}
        out = []
        for k, v in pairs.items():
            out += ["-c", f"{k}={v}"]
        return out

    def acked(self) -> set[int]:
        ids: set[int] = set()
        for p in self.state.glob("acked-*.log"):
            ids |= {int(x) for x in p.read_text().split()}
        return ids

    def sink_counts(self) -> Counter:
        c: Counter = Counter()
        for p in self.state.glob("sink-*.log"):
            c.update(int(x) for x in p.read_text().split())
        return c

    def word_counts(self) -> Counter:
        c: Counter = Counter()
        for p in self.state.glob("counts-*.json"):
            try:
                c.update(json.loads(p.read_text()))
            except (ValueError, FileNotFoundError):
                pass
        return c

    def expected_words(self) -> Counter:
        return Counter(w for i in range(self.n) for w in CORPUS[i % len(CORPUS)].split())

    def wait_all_acked(self, timeout: float) -> None:
        until(lambda: len(self.acked()) >= self.n, timeout, lambda: f"{len(self.acked())}/{self.n} acked")

    def wait_acked_beyond(self, n: int, timeout: float) -> int:
        """Until more than ``n`` ids are acked; returns how many are.

        Refuses a wait that can never pass: the input holds ``self.n`` ids, so more than
        ``self.n - 1`` cannot be acked. A test that shows "processing goes on" late needs input
        that outlasts it: a slow sink (``overrides(**SLOW_SINK)``) bounds the rate."""
        if n >= self.n:
            raise AssertionError(f"waiting for more than {n} acked, but the input has only {self.n} ids "
                                 f"({len(self.acked())} acked): the input ran out; slow the topology down")
        return until(lambda: (lambda k: k if k > n else 0)(len(self.acked())), timeout,
                     lambda: f"{len(self.acked())} acked, waiting for more than {n}")


def status(cluster: DevCluster, name: str) -> dict:
    """What ``nimbus status NAME --json`` prints — the CLI's JSON is the client's ``topology`` call —
    read through that client in this process: a wait loop reading it need not start a Python process
    each time (1.3 s a read in the suite, 98 reads a run). The command itself is run by the tests of
    the command line (test_kafka_cluster, test_bad_input, test_cluster). An API error fails like the
    command's exit code 1 did: an AssertionError, which a wait retries."""
    from gale.errors import GaleError

    try:
        return client_of(cluster).topology(name)
    except GaleError as exc:
        raise AssertionError(f"nimbus status {name}: {exc}") from exc


def client_of(cluster: DevCluster):
    """The cluster's :class:`~gale.nimbus.client.NimbusClient` from its client config (every nimbus
    seed, as the command line finds the leader); made again when the file changes (a restarted nimbus
    on a new port), as each command reads it afresh."""
    path = cluster.client_config_path()
    text = path.read_text()
    made = getattr(cluster, "_test_client", None)
    if made is None or made[0] != text:
        from gale.config import load_daemon_config
        from gale.nimbus.client import NimbusClient

        if made is not None:
            made[1].close()
        made = cluster._test_client = (text, NimbusClient(load_daemon_config(str(path))))
    return made[1]


def api(cluster: DevCluster, path: str, i: int = 0):
    resp = httpx.get(cluster.nimbus_url(i) + path, timeout=15, trust_env=False)
    assert resp.status_code == 200, (path, resp.status_code, resp.text[:500])
    return resp.json()


def workers(cluster: DevCluster, name: str) -> list[dict]:
    """The topology's live workers (Gale's API: pid, worker_id, heartbeat_secs, stats, ...)."""
    return api(cluster, f"/api/v1/topologies/{name}/workers")


def worker_pids(cluster: DevCluster, name: str) -> list[int]:
    return sorted({w["pid"] for w in workers(cluster, name) if w.get("pid")})


def next_heartbeats(cluster: DevCluster, name: str, timeout: float = 30) -> list[dict]:
    """Wait until every worker of ``name`` has written a heartbeat after this call — its
    ``heartbeat_secs`` moved past the one read now — and return the workers then. Whatever those
    heartbeats report was true after the call: the positive marker for "nothing happened since"."""
    before = {(w["host"], w["port"]): w["heartbeat_secs"] for w in workers(cluster, name)}
    assert before, f"{name} has no live workers"

    def moved():
        now = workers(cluster, name)
        beats = {(w["host"], w["port"]): w["heartbeat_secs"] for w in now}
        assert set(beats) == set(before), f"workers changed: {sorted(before)} -> {sorted(beats)}"
        assert all(beats[k] > before[k] for k in before), f"heartbeats {beats} not past {before} yet"
        return now

    return eventually(moved, timeout, interval=0.25)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not). Reading the stat file of a process that is exiting
    can fail with ESRCH (ProcessLookupError) after the open succeeded: gone too."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def gone(pids) -> bool:
    return not [p for p in pids if pid_alive(p)]


def scheduling_rounds(c) -> int:
    return api(c, "/api/v1/health")["scheduling_rounds"]


def supervisor_beats(c) -> dict[str, int]:
    return {s["id"]: s["last_heartbeat_secs"] for s in c.cluster()["supervisors"]}


def cluster_went_on(c, rounds: int = 3, timeout: float = 60) -> None:
    """The positive marker for "the daemons survived what they just read": nimbus ran ``rounds``
    more scheduling rounds and every supervisor heartbeat twice more, after this call."""
    start_rounds, start_beats = scheduling_rounds(c), supervisor_beats(c)
    until(lambda: scheduling_rounds(c) >= start_rounds + rounds, timeout,
          lambda: f"nimbus at {scheduling_rounds(c)} rounds, from {start_rounds}")

    def beat_twice():
        beats = supervisor_beats(c)
        assert set(beats) == set(start_beats), f"supervisors {sorted(start_beats)} -> {sorted(beats)}"
        assert all(beats[s] >= start_beats[s] + 2 for s in beats), f"heartbeats {beats} from {start_beats}"

    eventually(beat_twice, timeout)


class Topologies:
    """What one test submits to a shared cluster: unique names, and at the end (pass or fail) each
    one killed and waited out — removed from ZooKeeper and its worker processes gone — so the next
    test finds the cluster as this one found it. Use as a context manager (a fixture's body)."""

    def __init__(self, cluster: DevCluster):
        self.cluster = cluster
        self.names: list[str] = []

    def submit(self, path, base: str, *args: str, wait: bool = True) -> tuple[str, str]:
        """Submit ``path`` as ``<base>-<random>``; returns (name, topology id)."""
        name = f"{base}-{uuid.uuid4().hex[:6]}"
        self.names.append(name)
        out = cli(self.cluster, "submit", str(path), "--name", name, *(["--wait"] if wait else []), *args)
        return name, out.stdout.strip().splitlines()[-1]

    def kill(self, name: str, timeout: float = 60) -> None:
        """Kill ``name`` now and wait until nimbus removed it and its workers exited."""
        try:
            pids = worker_pids(self.cluster, name)
        except AssertionError:
            pids = []  # not running (any more)
        proc = cli(self.cluster, "kill", name, "--wait", "0", check=False)
        if proc.returncode != 0 and "no topology named" not in proc.stderr:
            raise AssertionError(f"nimbus kill {name} failed: {proc.stderr}")
        until(lambda: name not in [t["name"] for t in api(self.cluster, "/api/v1/topologies")], timeout,
              lambda: f"{name} still listed")
        until(lambda: gone(pids), timeout, lambda: f"workers {[p for p in pids if pid_alive(p)]} of {name} still alive")

    def __enter__(self) -> Topologies:
        return self

    def __exit__(self, *exc: object) -> None:
        errors = []
        for name in self.names:
            try:
                self.kill(name)
            except Exception as e:  # noqa: BLE001 - kill every one, then report
                errors.append(f"{name}: {e}")
        if errors and exc[0] is None:
            raise AssertionError("could not clean up the test's topologies: " + "; ".join(errors))


def dump_logs(cluster: DevCluster) -> str:
    parts = []
    for d in cluster.nimbus_procs + cluster.supervisor_procs:
        parts.append(f"--- {d.name}\n{d.log_tail(30)}")
    for p in sorted(cluster.base.glob("supervisor-*/logs/workers-artifacts/*/*/worker.*")):
        try:
            parts.append(f"--- {p}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-20:]))
        except OSError:
            pass
    return "\n".join(parts)


def wait_for(predicate, timeout: float, describe=lambda: "", interval: float = 0.25):
    """The old name of :func:`tests.waiting.until`, for test files not yet moved to it."""
    return until(predicate, timeout, describe, interval)
