"""Secure by default (issue 11 §3), against real nimbus processes: where nimbus listens with and
without an API token, refusing a reachable address without one, the content types actions accept,
Host names a loopback-only nimbus answers; plus the pure decisions behind them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from gale import config as gconfig
from gale.config_keys import Config
from gale.errors import ConfigError, GaleError
from gale.nimbus.api import content_type_problem, host_problem
from gale.nimbus.serve import allowed_host_names, bind_plan, is_loopback
from gale.worker.daemon import slot_bind_host
from gale.zkserver import free_port
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parent.parent


def resolved(conf: dict) -> Config:
    return Config.resolve(conf, allow_user_keys=False)


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a socket listening on ``port`` (from /proc/net/tcp and tcp6)."""
    out = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, _, hexport = local.partition(":")
            if state != "0A" or int(hexport, 16) != port:
                continue
            raw = bytes.fromhex(addr)
            if width == 8:
                out.add(socket.inet_ntop(socket.AF_INET, raw[::-1]))
            else:
                words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                out.add(socket.inet_ntop(socket.AF_INET6, words))
    return out


class NimbusProcess:
    """``nimbus serve`` with a config file, as systemd runs it."""

    def __init__(self, zk_server, tmp_path: Path, **conf):
        self.port = free_port()
        self.conf = {
            "storm.zookeeper.servers": [zk_server.host], "storm.zookeeper.port": zk_server.port,
            "storm.zookeeper.root": f"/secure-{os.urandom(4).hex()}/storm", "storm.local.dir": str(tmp_path / "nimbus"),
            "nimbus.http.port": self.port, "nimbus.seeds": [f"127.0.0.1:{self.port}"], **conf,
        }
        self.path = tmp_path / "nimbus.yaml"
        self.path.write_text(yaml.safe_dump(self.conf))
        self.log = tmp_path / "nimbus.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "gale.nimbus.cli", "serve", "--config", str(self.path)],
                                         stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_serving(self, timeout: float = 60) -> None:
        """Until it serves as the leader (actions answer past the leader check)."""
        def serving():
            assert self.proc.poll() is None, f"nimbus exited ({self.proc.returncode}):\n{self.output()}"
            health = httpx.get(f"http://127.0.0.1:{self.port}/api/v1/health", timeout=2, trust_env=False).json()
            assert health["leader"] is True, health

        eventually(serving, timeout, retry_on=(AssertionError, httpx.HTTPError))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def nimbus_process(zk_server, tmp_path):
    started: list[NimbusProcess] = []

    def start(**conf) -> NimbusProcess:
        base = tmp_path / f"n{len(started)}"
        base.mkdir()
        n = NimbusProcess(zk_server, base, **conf)
        started.append(n)
        return n

    yield start
    for n in started:
        n.stop()


# ---------------------------------------------------------------------------- real nimbus processes


def test_without_a_token_nimbus_listens_on_loopback_only_and_says_so(nimbus_process):
    n = nimbus_process()
    n.wait_serving()
    assert listening_addresses(n.port) == {"127.0.0.1"}
    assert '"event": "nimbus-api-loopback-only"' in n.output()
    # it advertises the address clients can use
    assert httpx.get(f"http://127.0.0.1:{n.port}/api/v1/health", trust_env=False).json()["address"] == \
        f"127.0.0.1:{n.port}"


def test_a_reachable_address_without_a_token_is_refused_at_start(nimbus_process):
    n = nimbus_process(**{"nimbus.host": "0.0.0.0"})
    assert n.proc.wait(60) == 1
    out = n.output()
    assert "nimbus.host is '0.0.0.0'" in out and "nimbus.api.token" in out and "nimbus.api.insecure: true" in out
    assert listening_addresses(n.port) == set()


def test_nimbus_api_insecure_lets_it_listen_everywhere_with_a_warning(nimbus_process):
    n = nimbus_process(**{"nimbus.host": "0.0.0.0", "nimbus.api.insecure": True})
    n.wait_serving()
    assert listening_addresses(n.port) == {"0.0.0.0"}
    assert '"event": "nimbus-api-insecure"' in n.output()


def test_with_a_token_file_nimbus_listens_everywhere_and_guards_actions(nimbus_process, tmp_path):
    token_file = tmp_path / "api-token"
    token_file.write_text("file-t0ken\n")
    token_file.chmod(0o600)
    n = nimbus_process(**{"nimbus.api.token.file": str(token_file)})
    n.wait_serving()
    assert listening_addresses(n.port) == {"0.0.0.0"}
    base = f"http://127.0.0.1:{n.port}/api/v1"
    json_type = {"Content-Type": "application/json"}
    assert httpx.post(f"{base}/topologies/x/kill", headers=json_type, trust_env=False).status_code == 401
    resp = httpx.post(f"{base}/topologies/x/kill", headers={**json_type, "Authorization": "Bearer file-t0ken"},
                      trust_env=False)
    assert resp.status_code == 404 and "no topology named 'x'" in resp.json()["error"]  # past the token check
    # a Host header of any name is fine when the token guards the API
    assert httpx.get(f"{base}/health", headers={"Host": "nimbus.example.com"}, trust_env=False).status_code == 200


FORMS = ["application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain", "text/plain;charset=UTF-8"]


def test_actions_refuse_every_content_type_a_web_page_can_send(nimbus_process):
    n = nimbus_process()
    n.wait_serving()
    url = f"http://127.0.0.1:{n.port}"
    actions = ["/api/v1/topologies/x/kill", "/api/v1/topologies/x/activate", "/api/v1/topologies/x/deactivate",
               "/api/v1/topologies/x/rebalance", "/api/v1/topology/x/kill/0", "/api/v1/topology/x/activate",
               "/api/v1/topology/x/deactivate", "/api/v1/topology/x/rebalance/0"]
    for path in actions:
        for ctype in FORMS + [None]:
            headers = {"Content-Type": ctype} if ctype else {}
            resp = httpx.post(url + path, content=b"a=1" if ctype else b"", headers=headers, trust_env=False)
            assert resp.status_code == 415, (path, ctype, resp.status_code)
            assert "application/json" in resp.json()["error"]
        resp = httpx.post(url + path, json={}, trust_env=False)  # what the CLI and the web UI send
        assert resp.status_code == 404, (path, resp.text)           # past the check: no topology x
    for ctype in FORMS + ["application/json", None]:
        headers = {"Content-Type": ctype} if ctype else {}
        resp = httpx.post(f"{url}/api/v1/topologies?name=x", content=b"bundle", headers=headers, trust_env=False)
        assert resp.status_code == 415 and "application/gzip" in resp.json()["error"], (ctype, resp.text)
    resp = httpx.post(f"{url}/api/v1/topologies?name=x", content=b"bundle", trust_env=False,
                      headers={"Content-Type": "application/gzip"})
    assert resp.status_code == 400 and "invalid code bundle" in resp.json()["error"]
    # reads are untouched
    assert httpx.get(f"{url}/api/v1/topologies", trust_env=False).status_code == 200
    assert '"event": "topology-submitted"' not in n.output()


def test_a_loopback_only_nimbus_refuses_foreign_host_names(nimbus_process):
    """DNS rebinding: a page whose name now resolves to 127.0.0.1 sends its own name as Host."""
    n = nimbus_process()
    n.wait_serving()
    url = f"http://127.0.0.1:{n.port}"
    for host in ("evil.example", f"evil.example:{n.port}", "192.0.2.7"):
        resp = httpx.get(f"{url}/api/v1/topologies", headers={"Host": host}, trust_env=False)
        assert resp.status_code == 403 and "not a name of this nimbus" in resp.json()["error"], host
        resp = httpx.post(f"{url}/api/v1/topologies/x/kill", json={}, headers={"Host": host}, trust_env=False)
        assert resp.status_code == 403
    for host in (f"127.0.0.1:{n.port}", f"localhost:{n.port}", "localhost", f"[::1]:{n.port}"):
        assert httpx.get(f"{url}/api/v1/topologies", headers={"Host": host}, trust_env=False).status_code == 200, host


# ---------------------------------------------------------------------------- pure decisions


def test_bind_plan():
    conf = gconfig.defaults()
    assert bind_plan(resolved(conf), None) == bind_plan(resolved(conf), "")
    assert (bind_plan(resolved(conf), None).host, bind_plan(resolved(conf), None).loopback_only) == ("127.0.0.1", True)
    assert (bind_plan(resolved(conf), "t").host, bind_plan(resolved(conf), "t").loopback_only) == ("0.0.0.0", False)
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        plan = bind_plan(resolved({**conf, "nimbus.host": host}), None)
        assert plan.host == host and plan.loopback_only
    for host in ("0.0.0.0", "::", "192.0.2.2"):
        with pytest.raises(ConfigError, match="nimbus.api.insecure: true"):
            bind_plan(resolved({**conf, "nimbus.host": host}), None)
        assert bind_plan(resolved({**conf, "nimbus.host": host, "nimbus.api.insecure": True}), None).insecure
        assert bind_plan(resolved({**conf, "nimbus.host": host}), "t") == \
            bind_plan(resolved({**conf, "nimbus.host": host}), "t2")
    assert is_loopback("localhost") and is_loopback("[::1]") and not is_loopback("0.0.0.0")


def test_api_token_file(tmp_path):
    conf = gconfig.defaults()
    assert gconfig.api_token(conf) is None
    assert gconfig.api_token({**conf, "nimbus.api.token": "t"}) == "t"
    path = tmp_path / "token"
    path.write_text("  s3cret  \nignored\n")
    assert gconfig.api_token({**conf, "nimbus.api.token.file": str(path)}) == "s3cret"
    with pytest.raises(ConfigError, match="not both"):
        gconfig.api_token({**conf, "nimbus.api.token": "t", "nimbus.api.token.file": str(path)})
    path.write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        gconfig.api_token({**conf, "nimbus.api.token.file": str(path)})
    with pytest.raises(ConfigError, match="cannot read nimbus.api.token.file .*missing"):
        gconfig.api_token({**conf, "nimbus.api.token.file": str(tmp_path / "missing")})
    path.write_bytes(b"\x9a\x03\xff binary, as from openssl rand 32")
    with pytest.raises(ConfigError, match=r"nimbus.api.token.file .* is not UTF-8 text: byte 0x9a at line 1, "
                                          r"column 1 .*openssl rand -hex 32"):
        gconfig.api_token({**conf, "nimbus.api.token.file": str(path)})


def test_content_type_and_host_decisions():
    for method in ("GET", "HEAD", "OPTIONS"):
        assert content_type_problem(method, "/api/v1/topologies/x/kill", "") is None
    assert content_type_problem("POST", "/api/v1/topologies/x/kill", "application/json; charset=utf-8") is None
    assert content_type_problem("POST", "/api/v1/topologies/x/kill", "Application/JSON") is None
    assert content_type_problem("POST", "/api/v1/topologies", "application/gzip") is None
    assert content_type_problem("POST", "/api/v1/topologies", "application/octet-stream") is None
    assert "got no Content-Type" in content_type_problem("DELETE", "/api/v1/anything", "")
    assert content_type_problem("POST", "/api/v1/topologies", "application/json") is not None
    assert content_type_problem("PUT", "/api/v1/topologies", "application/gzip") is not None
    allowed = allowed_host_names(resolved({"nimbus.seeds": ["nimbus1:8080", "nimbus2"], "nimbus.host": None,
                                  "storm.local.hostname": "node1.example.com"}), "127.0.0.1")
    assert allowed >= {"localhost", "127.0.0.1", "::1", "nimbus1", "nimbus2", "node1.example.com"}
    assert host_problem("NIMBUS1:8080", allowed) is None and host_problem("[::1]:8080", allowed) is None
    assert host_problem("evil.example", allowed) is not None
    assert host_problem("anything", None) is None and host_problem("", allowed) is None


def test_slot_port_binds_the_address_of_the_advertised_hostname():
    conf = gconfig.defaults()
    assert slot_bind_host(resolved({**conf, "storm.local.hostname": "127.0.0.1"})) == "127.0.0.1"
    assert slot_bind_host(resolved({**conf, "storm.local.hostname": "localhost"})) in ("127.0.0.1", "::1")
    assert slot_bind_host(resolved({**conf, "storm.local.hostname": "192.0.2.9"})) == "192.0.2.9"
    assert slot_bind_host(resolved({**conf, "storm.local.hostname": "x",
                                    "worker.transfer.host": "0.0.0.0"})) == "0.0.0.0"
    with pytest.raises(GaleError, match="cannot resolve storm.local.hostname 'no-such-host.invalid'"):
        slot_bind_host(resolved({**conf, "storm.local.hostname": "no-such-host.invalid"}))
    default = slot_bind_host(resolved(conf))  # this host's name, resolved
    assert default != "0.0.0.0"


def test_deploy_ships_with_the_token_set_up(tmp_path):
    conf = gconfig.daemon_config(ROOT / "deploy" / "gale.yaml")
    assert conf["nimbus.api.token.file"] == "/etc/gale/api-token" and conf["nimbus.host"] == "0.0.0.0"
    if not Path("/etc/gale/api-token").exists():  # not installed here: the daemons say what to create
        with pytest.raises(ConfigError, match="cannot read nimbus.api.token.file /etc/gale/api-token.*openssl rand"):
            gconfig.api_token(conf)
    token = tmp_path / "api-token"
    token.write_text("0123abcd\n")
    installed = {**conf, "nimbus.api.token.file": str(token)}
    plan = bind_plan(resolved(installed), gconfig.api_token(installed))
    assert plan.host == "0.0.0.0" and not plan.loopback_only and not plan.insecure
    with pytest.raises(ConfigError, match="no API token is configured"):
        bind_plan(resolved({**conf, "nimbus.api.token.file": None}), None)  # the example without its token: refused
    for unit in ("gale-nimbus.service", "gale-supervisor.service"):
        assert "AssertFileNotEmpty=/etc/gale/api-token" in (ROOT / "deploy" / "systemd" / unit).read_text()
