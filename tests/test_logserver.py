"""The supervisor's log server on real files: which names reach a file (traversal in every form is
refused with its reason), paging, search, its token and Host rules, and where it listens. The app
runs in process (Starlette's test client); the cluster tests (tests/test_logs_cluster.py) reach it
through nimbus, and tests/test_ui.py through the browser."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gale.config_keys import Config
from gale.errors import ConfigError, NotFoundError
from gale.supervisor import logfiles
from gale.supervisor.logfiles import LogPathError, list_files, read_page, resolve, search
from gale.supervisor.logserver import listen_plan, make_app

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

WORKER = "workers-artifacts/topo-1-1/6700"


@pytest.fixture
def root(tmp_path) -> Path:
    base = tmp_path / "logs"
    (base / WORKER).mkdir(parents=True)
    (base / WORKER / "worker.log").write_text("".join(f'{{"n": {i}, "event": "line-{i}"}}\n' for i in range(5000)))
    (base / WORKER / "worker.out").write_text("")
    (base / "supervisor.log").write_text("supervisor started\nERROR something\n")
    (base / "stormconf.json").write_text('{"topology.secret": "s3cret"}')  # never served: not a log
    secret = tmp_path / "outside.log"
    secret.write_text("outside the log directory")
    os.symlink(secret, base / "evil.log")
    os.symlink(tmp_path, base / "up")
    return base


@pytest.mark.parametrize("name, why", [
    ("../outside.log", "'..' segment"),
    ("workers-artifacts/../../outside.log", "'..' segment"),
    ("/etc/passwd", "absolute"),
    ("//etc/passwd", "absolute"),
    ("workers-artifacts//x.log", "empty"),
    ("./supervisor.log", "'.' or '..'"),
    ("..\\outside.log", "backslash"),
    ("%2e%2e/outside.log", "characters other than"),  # an encoded form left over after decoding
    ("supervisor.log\x00.txt", "NUL"),
    ("stormconf.json", "not a log file"),
    ("evil.log", "outside the log directory"),           # a symlink out of it
    ("up/outside.log", "outside the log directory"),     # a directory symlink out of it
    (WORKER, "not a log file"),
    ("", "no file named"),
    ("a" * 600 + ".log", "longer than"),
])
def test_names_that_do_not_reach_a_log_inside_the_directory_are_refused(root, name, why):
    with pytest.raises(LogPathError) as err:
        resolve(root, name)
    assert why in str(err.value)


def test_names_inside_resolve_and_missing_ones_are_404(root):
    assert resolve(root, "supervisor.log").path == (root / "supervisor.log").resolve()
    assert resolve(root, f"{WORKER}/worker.log").name == f"{WORKER}/worker.log"
    with pytest.raises(NotFoundError):
        resolve(root, f"{WORKER}/profile-1.svg")


def test_the_listing_holds_only_servable_files_and_no_links(root):
    names = {f["file"] for f in list_files(root)}
    assert names == {"supervisor.log", f"{WORKER}/worker.log", f"{WORKER}/worker.out"}


def test_pages_are_the_tail_by_default_and_chain_both_ways(root):
    f = resolve(root, f"{WORKER}/worker.log")
    size = f.path.stat().st_size
    tail = read_page(f, None, 1000)
    assert (tail["end"], tail["length"], tail["next"]) == (size, 1000, None)
    assert tail["data"].endswith('"line-4999"}\n') and tail["prev"] == size - 2000
    first = read_page(f, 0, 100)
    assert first["data"].startswith('{"n": 0,') and first["prev"] is None and first["next"] == 100
    past = read_page(f, size + 10, 100)
    assert past["start"] == size and past["data"] == ""
    for bad, why in (((-1, 10), "negative"), ((0, 0), "out of range"), ((0, logfiles.PAGE_MAX + 1), "out of range")):
        with pytest.raises(LogPathError, match=why):
            read_page(f, *bad)


def test_search_lists_matching_lines_with_their_offsets_and_continues(root):
    f = resolve(root, f"{WORKER}/worker.log")
    out = search(f, '"line-49', max_matches=5)
    assert [m["line"] for m in out["matches"]] == [f'{{"n": {i}, "event": "line-{i}"}}' for i in (49, 490, 491, 492, 493)]
    with open(f.path, "rb") as fh:
        fh.seek(out["matches"][0]["offset"])
        assert fh.readline().startswith(b'{"n": 49,')
    more = search(f, '"line-49', start=out["next"], max_matches=100)  # 494..499, then 4900..4993
    assert len(more["matches"]) == 100 and more["matches"][-1]["line"].endswith('"line-4993"}')
    rest = search(f, '"line-49', start=more["next"], max_matches=100)
    assert len(rest["matches"]) == 6 and rest["next"] is None
    assert search(f, "LINE-4999", ignore_case=True)["matches"][0]["line"].endswith('"line-4999"}')
    assert search(f, "LINE-4999")["matches"] == []
    budget = search(f, "line-4999", scan_max=1000)
    assert budget["matches"] == [] and budget["next"] is not None and budget["scanned"] >= 1000
    for args, why in ((("",), "1 to"), (("x" * 300,), "1 to"), (("x", 0, 0), "max matches")):
        with pytest.raises(LogPathError, match=why):
            search(f, *args)


def config(**conf) -> Config:
    return Config.resolve(conf, where="test", allow_user_keys=False)


def app(root, token=None, read_required=False, hosts=None):
    conf = config(**{"nimbus.api.read.token.required": read_required})
    return TestClient(make_app(conf, token, root, lambda: {}, "sup-1", allowed_hosts=hosts))


def test_over_http_bad_names_are_400_with_the_reason_and_files_are_served(root):
    client = app(root)
    for raw in ("../outside.log", "%2e%2e%2foutside.log", "%252e%252e%252foutside.log", "/etc/passwd", "evil.log"):
        resp = client.get("/api/v1/log?file=" + raw)
        assert resp.status_code == 400 and resp.json()["error"], (raw, resp.text)
    page = client.get("/api/v1/log", params={"file": "supervisor.log"}).json()
    assert page["data"] == "supervisor started\nERROR something\n"
    assert client.get("/api/v1/log", params={"file": "nope.log"}).status_code == 404
    assert client.get("/api/v1/log", params={"file": "supervisor.log", "start": "x"}).status_code == 400
    found = client.get("/api/v1/log/search", params={"file": "supervisor.log", "search": "ERROR"}).json()
    assert [m["line"] for m in found["matches"]] == ["ERROR something"]
    raw = client.get("/api/v1/log/raw", params={"file": "supervisor.log"})
    assert raw.text.startswith("supervisor started") and "default-src 'none'" in raw.headers["content-security-policy"]
    assert client.post("/api/v1/workers/6700/threaddump", json={}).status_code == 404  # no worker on that port


def test_token_rules_are_the_apis(root):
    open_reads = app(root, token="t0ken")
    assert open_reads.get("/api/v1/logs").status_code == 200
    for path in ("/api/v1/workers/6700/threaddump", "/api/v1/workers/6700/profile"):
        assert open_reads.post(path, json={}).status_code == 401
        assert open_reads.post(path, json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert open_reads.post(path, json={}, headers={"Authorization": "Bearer t0ken"}).status_code == 404  # past the token
    closed = app(root, token="t0ken", read_required=True)
    assert closed.get("/api/v1/logs").status_code == 401
    assert closed.get("/api/v1/logs", headers={"Authorization": "Bearer t0ken"}).status_code == 200


def test_a_loopback_server_refuses_other_host_names_and_form_posts(root):
    client = app(root, hosts={"127.0.0.1", "localhost"})
    assert client.get("/api/v1/logs", headers={"Host": "127.0.0.1:8000"}).status_code == 200
    assert client.get("/api/v1/logs", headers={"Host": "evil.example:8000"}).status_code == 403
    form = client.post("/api/v1/workers/6700/threaddump", data={"a": "b"}, headers={"Host": "127.0.0.1"})
    assert form.status_code == 415


def test_where_the_log_server_listens():
    assert listen_plan(config(), None).host == "127.0.0.1" and listen_plan(config(), None).loopback_only
    assert (listen_plan(config(), "t").host, listen_plan(config(), "t").loopback_only) == ("0.0.0.0", False)
    assert listen_plan(config(**{"logviewer.host": "10.1.2.3"}), "t").host == "10.1.2.3"
    with pytest.raises(ConfigError, match="logviewer.host"):
        listen_plan(config(**{"logviewer.host": "10.1.2.3"}), None)
    assert listen_plan(config(**{"logviewer.host": "10.1.2.3", "nimbus.api.insecure": True}), None).host == "10.1.2.3"
