"""deploy/: the systemd units verify cleanly, the daemons keep the unit's contract (Type=notify
readiness, KillMode=process leaves healthy workers to be re-adopted), and the example configs load."""

from __future__ import annotations

import configparser
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from gale import config as gconfig
from gale.ports import reserve_port
from tests.cluster import DURABLE_WC, SLOW_SINK, DurableInput, cli, dump_logs, make_cluster, pid_alive
from tests.components import require, requires
from tests.waiting import until

ROOT = Path(__file__).resolve().parent.parent
UNITS = ROOT / "deploy" / "systemd"
VENV_BIN = Path(sys.executable).parent
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(UNITS / name)
    return parser


@requires(SYSTEMD_ANALYZE is not None, "systemd-analyze is not installed (Debian package systemd)")
def test_every_unit_verifies_without_errors_or_warnings(tmp_path):
    units = sorted(UNITS.glob("*.service"))
    assert [u.name for u in units] == ["gale-nimbus.service", "gale-supervisor.service"]
    copies = []
    for u in units:
        text = u.read_text()
        assert "ExecStart=/opt/gale/venv/bin/" in text
        # verify checks that ExecStart's binary exists: point it at this checkout's venv
        copy = tmp_path / u.name
        copy.write_text(text.replace("/opt/gale/venv/bin/", f"{VENV_BIN}/"))
        copies.append(str(copy))
    proc = subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", *copies], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    # unknown keys and unparsable values are only warnings with exit code 0: refuse those too
    assert proc.stderr.strip() == "" and proc.stdout.strip() == "", proc.stderr + proc.stdout


def test_units_keep_the_daemons_contract():
    for name, command in (("gale-nimbus.service", "nimbus"), ("gale-supervisor.service", "supervisor")):
        u = unit(name)
        service = u["Service"]
        assert service["Type"] == "notify"
        assert service["ExecStart"] == f"/opt/gale/venv/bin/{command} serve --config /etc/gale/gale.yaml"
        assert service["Restart"] == "on-failure"
        # a daemon waits for ZooKeeper (or its quorum) as long as it takes: no start timeout to loop on
        assert service["TimeoutStartSec"] == "infinity"
        assert service["EnvironmentFile"] == "-/etc/default/gale"
        assert "zookeeper.service" in u["Unit"]["After"] and "zookeeper.service" in u["Unit"]["Wants"]
        assert service["NoNewPrivileges"] == "yes" and service["ProtectSystem"] == "strict"
        assert service["StateDirectory"] == "gale" and "/var/lib/gale" in service["ReadWritePaths"]
        assert u["Install"]["WantedBy"] == "multi-user.target"
    assert unit("gale-supervisor.service")["Service"]["KillMode"] == "process"
    assert "KillMode" not in unit("gale-nimbus.service")["Service"]


def test_example_configs_are_valid():
    conf = gconfig.daemon_config(ROOT / "deploy" / "gale.yaml")
    assert conf["storm.local.dir"] == "/var/lib/gale" and conf["nimbus.http.port"] == 8080
    prom = yaml.safe_load((ROOT / "deploy" / "prometheus.yaml").read_text())
    sd = prom["scrape_configs"][0]["http_sd_configs"]
    assert all(c["url"].endswith(":8080/api/v1/prometheus/targets") for c in sd)
    promtool = shutil.which("promtool")
    require(promtool is not None, "promtool is not installed (Debian package prometheus)")
    proc = subprocess.run([promtool, "check", "config", str(ROOT / "deploy" / "prometheus.yaml")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _notify_socket(tmp_path: Path) -> tuple[socket.socket, str]:
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.5)
    return sock, path


def _wait_message(sock: socket.socket, wanted: str, proc: subprocess.Popen, timeout: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            seen.append(sock.recv(4096).decode())
        except TimeoutError:
            pass
        if wanted in seen:
            return seen
        if proc.poll() is not None:
            break
    raise AssertionError(f"no {wanted} from the daemon (got {seen}, exit code {proc.poll()})")


@pytest.mark.parametrize("daemon", ["nimbus", "supervisor"])
def test_daemon_notifies_ready_then_stopping(daemon, zk_server, tmp_path):
    """What Type=notify relies on: READY=1 once serving, STOPPING=1 and exit 0 on SIGTERM."""
    from kazoo.client import KazooClient

    slot = reserve_port()  # a supervisor's slot port must be known up front; nimbus binds port 0
    root = f"/notify-{daemon}-{os.getpid()}/storm"
    conf = {
        "storm.zookeeper.servers": [zk_server.host], "storm.zookeeper.port": zk_server.port,
        "storm.zookeeper.root": root, "storm.local.dir": str(tmp_path / "local"),
        "storm.local.hostname": "127.0.0.1", "nimbus.host": "127.0.0.1", "nimbus.http.port": 0,
        "supervisor.slots.ports": [slot.port], "supervisor.metrics.host": "127.0.0.1",
    }
    path = tmp_path / "gale.yaml"
    path.write_text(yaml.safe_dump(conf))
    sock, addr = _notify_socket(tmp_path)
    env = dict(os.environ, NOTIFY_SOCKET=addr)
    proc = subprocess.Popen([sys.executable, "-m", f"gale.{daemon}.cli", "serve", "--config", str(path)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        _wait_message(sock, "READY=1", proc, 60)
        if daemon == "nimbus":  # ready means serving, at the address it registered in ZooKeeper
            zk = KazooClient(hosts=zk_server.address)
            zk.start(timeout=10)
            try:
                (address,) = zk.get_children(f"{root}/nimbuses")
            finally:
                zk.stop()
                zk.close()
            assert httpx.get(f"http://{address}/api/v1/health", timeout=5).status_code == 200
        # the SIGTERM handlers are installed before start-up (StopSignals): a stop right after
        # READY=1 is clean
        proc.send_signal(signal.SIGTERM)
        _wait_message(sock, "STOPPING=1", proc, 30)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sock.close()
        slot.release()


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_supervisor_restart_like_killmode_process_keeps_and_readopts_workers(zk_server, tmp_path):
    """KillMode=process: only the supervisor gets SIGTERM; its workers keep running and the next
    supervisor adopts them instead of launching new ones."""
    cluster = make_cluster(zk_server, tmp_path, supervisors=1, slots=2,
                           conf={"supervisor.metrics.host": "127.0.0.1", "worker.metrics.host": "127.0.0.1"})
    cluster.start()
    try:
        work = DurableInput(tmp_path / "w", 400000)
        cli(cluster, "submit", str(DURABLE_WC), "--name", "wc-restart", "--wait", *work.overrides(**SLOW_SINK))
        work.wait_acked_beyond(100, 60)
        before = set(cluster.worker_pids(0))
        assert len(before) == 2
        cluster.supervisor_procs[0].stop()  # SIGTERM to the supervisor process only
        assert cluster.supervisor_procs[0].proc.returncode == 0
        # the marker that time passed without a supervisor: 200 more tuples processed
        work.wait_acked_beyond(len(work.acked()) + 200, 30)
        assert all(pid_alive(pid) for pid in before), "workers survived the supervisor's stop"
        cluster.add_supervisor(0)
        cluster.wait_for_supervisors(1, 60)
        sid = cluster.supervisor_id(0)

        def adopted():
            info = next(s for s in cluster.cluster()["supervisors"] if s["id"] == sid)
            if not info.get("metrics_port"):
                return None
            text = httpx.get(f"http://127.0.0.1:{info['metrics_port']}/metrics", timeout=5).text
            return 'gale_supervisor_slots{state="running"} 2.0' in text and text

        text = until(adopted, 60)
        assert 'gale_supervisor_worker_launches_total{reason="new"} 0.0' in text
        assert set(cluster.worker_pids(0)) == before and all(pid_alive(pid) for pid in before)
        work.wait_acked_beyond(len(work.acked()) + 200, 30)
    except BaseException:
        print(dump_logs(cluster))
        raise
    finally:
        cluster.cleanup()
