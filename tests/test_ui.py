"""The web UI in a real headless Chromium (Debian's, driven by Selenium and Debian's chromedriver)
against a running cluster: pages render real data, the live chart and the topology graph update
without a reload, the action buttons work behind their confirmation dialog, the log viewer opens
from every link, and the debugging actions (thread dump, flame graph, log levels, sampling) work
from the page. Screenshots go to artifacts/ui/.

The page tests read one shared topology nobody acts on; the action test submits its own (and it is
killed when the test ends, pass or fail). Every wait is for the exact rendered state asserted."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import httpx
import pytest

from tests.brokers import kafka_broker  # noqa: F401 - a fixture
from tests.cluster import Topologies, make_cluster
from tests.components import requires
from tests.test_storm_api import write_flaky
from tests.waiting import eventually, until

CHROMIUM = next((p for p in ("/usr/lib/chromium/chromium", shutil.which("chromium")) if p and os.path.exists(p)), None)
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts" / "ui"

pytestmark = [
    pytest.mark.cluster, pytest.mark.timeout(300),
    requires(CHROMIUM is not None and CHROMEDRIVER is not None,
             "Debian chromium and chromium-driver are not installed (make test installs them)"),
]


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    cluster = make_cluster(zk_server, tmp_path_factory.mktemp("ui"), supervisors=2, slots=3)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.cleanup()


@pytest.fixture(scope="module")
def running(cluster, tmp_path_factory):
    """The page tests' topology: (cluster, id, name); nobody acts on it."""
    with Topologies(cluster) as topologies:
        name, tid = topologies.submit(write_flaky(tmp_path_factory.mktemp("topo")), "flaky")
        yield cluster, tid, name


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # never let Selenium Manager go looking for drivers online
    profile = tempfile.mkdtemp(prefix="gale-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                 "--window-size=1400,1700"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.implicitly_wait(0)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_browser_errors(request):
    yield
    if "browser" in request.fixturenames:
        driver = request.getfixturevalue("browser")
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not severe, f"errors in the browser console: {severe}"


def by_id(driver, element_id):
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.ID, element_id)
    return found[0] if found else None


def rows(driver, table_id: str) -> list[dict[str, str]]:
    """The rows of a rendered table as {column title: cell text}."""
    return driver.execute_script("""
        const box = document.getElementById(arguments[0]);
        if (!box) return [];
        const titles = [...box.querySelectorAll('thead th')].map(th => th.textContent);
        return [...box.querySelectorAll('tbody tr')].filter(tr => tr.children.length === titles.length)
            .map(tr => Object.fromEntries([...tr.children].map((td, i) => [titles[i], td.textContent])));
    """, table_id)


def click_link(driver, container_id: str, text: str) -> None:
    """Click the link with ``text`` in a container, found and clicked in one step in the page (the
    tables are rendered again at every refresh: an element found first could be gone by the click)."""
    clicked = driver.execute_script("""
        const link = [...document.getElementById(arguments[0]).querySelectorAll('a')]
            .find(a => a.textContent === arguments[1]);
        if (link) link.click();
        return !!link;""", container_id, text)
    assert clicked, f"no link {text!r} in #{container_id}"


def click(driver, css: str) -> None:
    """Click the first element matching ``css``, found and clicked in one step (see click_link)."""
    assert driver.execute_script("const e = document.querySelector(arguments[0]); if (e) e.click(); return !!e;",
                                 css), f"nothing matches {css}"


def shot(driver, name: str) -> None:
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def n(text: str) -> int:
    return int(text.replace(",", "") or 0)


def test_cluster_page_renders_the_running_cluster(running, browser):
    cluster, tid, name = running
    browser.get(cluster.nimbus_url() + "/?refresh=1")

    def rendered():  # the page refreshes itself: wait for the rendered state asserted
        topologies = [r for r in rows(browser, "topology-summary") if r.get("Name") == name]
        assert topologies and topologies[0]["Id"] == tid, rows(browser, "topology-summary")
        assert (topologies[0]["Status"], topologies[0]["Workers"]) == ("ACTIVE", "2"), topologies
        (summary,) = rows(browser, "cluster-summary")
        assert (summary["Supervisors"], summary["Topologies"], summary["Slots"], summary["Used slots"]) == (
            "2", "1", "6", "2"), summary
        sups = rows(browser, "supervisor-summary")
        assert sorted(r["Id"] for r in sups) == sorted(cluster.supervisor_id(i) for i in range(2))
        assert [r["Status"] for r in rows(browser, "nimbus-summary")] == ["Leader"]

    eventually(rendered, 30)
    shot(browser, "cluster")


def test_topology_page_tables_and_live_chart(running, browser):
    cluster, tid, name = running
    browser.get(cluster.nimbus_url() + "/?refresh=1")
    until(lambda: [r for r in rows(browser, "topology-summary") if r.get("Name") == name], 30)
    click_link(browser, "topology-summary", name)
    until(lambda: "topology.html" in browser.current_url, 10)
    browser.execute_script("window.galeNoReload = 42")

    def tables():
        spouts = [r for r in rows(browser, "spouts") if r["Id"] == "sentences"]
        assert spouts and n(spouts[0]["Emitted"]) > 0 and n(spouts[0]["Acked"]) > 0, spouts
        assert float(spouts[0]["Complete latency (ms)"]) > 0
        bolts = {r["Id"]: r for r in rows(browser, "bolts")}
        assert set(bolts) == {"split", "count"}
        assert "flaky bolt refuses sentence" in bolts["count"]["Last error"], bolts["count"]
        workers = rows(browser, "workers")
        assert len(workers) == 2 and all(Path(w["Worker log"]).is_file() for w in workers), workers

    eventually(tables, 60)
    # the chart: samples accumulate and its lines move, without a page load
    chart = by_id(browser, "chart")
    first = until(lambda: int(chart.get_attribute("data-points")) >= 2 and chart.get_attribute("data-points"), 30)
    path_before = browser.execute_script("return document.querySelector('#chart path[data-series=acked]').getAttribute('d')")
    until(lambda: int(chart.get_attribute("data-points")) >= int(first) + 3, 30)
    path_after = browser.execute_script("return document.querySelector('#chart path[data-series=acked]').getAttribute('d')")
    assert path_after != path_before
    assert float(chart.get_attribute("data-last-acked-rate")) > 0
    assert browser.execute_script("return window.galeNoReload") == 42
    shot(browser, "topology")


def test_component_and_supervisor_pages(running, browser):
    cluster, tid, name = running
    browser.get(f"{cluster.nimbus_url()}/topology.html?id={tid}&refresh=1")
    until(lambda: rows(browser, "bolts"), 30)
    click_link(browser, "bolts", "count")

    def component_page():
        execs = [r for r in rows(browser, "executors") if r["Host:port"].startswith("127.0.0.1:")]
        assert len(execs) == 2, rows(browser, "executors")
        assert all(r["Worker log"].endswith("worker.log") and Path(r["Worker log"]).is_file() for r in execs)
        assert all(n(r["Executed"]) > 0 for r in execs), execs
        errors = rows(browser, "errors")
        assert errors and "ValueError: flaky bolt refuses sentence" in errors[0].get("Error", ""), errors
        assert [r["Component"] for r in rows(browser, "input-stats")] == ["split"]
        return execs

    execs = eventually(component_page, 60)
    shot(browser, "component")
    supervisor = execs[0]["Supervisor"]
    click_link(browser, "executors", supervisor)

    def supervisor_page():
        workers = rows(browser, "workers")
        assert workers and workers[0].get("Topology") == name, workers
        assert Path(workers[0]["Worker log"]).is_file()
        assert [r["Id"] for r in rows(browser, "supervisor-summary")] == [supervisor]

    eventually(supervisor_page, 30)
    shot(browser, "supervisor")


def test_action_buttons_confirm_then_act(cluster, browser, tmp_path):
    from selenium.webdriver.common.by import By

    with Topologies(cluster) as topologies:
        name, tid = topologies.submit(write_flaky(tmp_path / "topo"), "actions")
        try:
            act_through_the_page(cluster, browser, name, tid, By)
        finally:
            browser.get("about:blank")  # leave the page before the topology is removed (its polls would 404)


def act_through_the_page(cluster, browser, name, tid, By):
    api = f"{cluster.nimbus_url()}/api/v1/topology/{tid}"
    browser.get(f"{cluster.nimbus_url()}/topology.html?id={tid}&refresh=1")
    status = until(lambda: by_id(browser, "topology-status").text == "ACTIVE" and by_id(browser, "topology-status"), 30)
    browser.execute_script("window.galeNoReload = 7")
    assert not by_id(browser, "action-deactivate").get_attribute("disabled")
    assert by_id(browser, "action-activate").get_attribute("disabled")
    # cancel does nothing
    by_id(browser, "action-deactivate").click()
    dialog = by_id(browser, "confirm")
    until(lambda: dialog.get_attribute("open") is not None, 5)
    assert f"Deactivate {name}?" in by_id(browser, "confirm-title").text
    by_id(browser, "confirm-cancel").click()
    until(lambda: dialog.get_attribute("open") is None, 5)
    assert httpx.get(api).json()["status"] == "ACTIVE"
    # confirm deactivates; the page shows it on its next refresh, without a reload
    by_id(browser, "action-deactivate").click()
    until(lambda: dialog.get_attribute("open") is not None, 5)
    shot(browser, "confirm-dialog")
    by_id(browser, "confirm-ok").click()
    until(lambda: status.text == "INACTIVE", 15)
    assert httpx.get(api).json()["status"] == "INACTIVE"
    assert "deactivate " + tid + ": success" in by_id(browser, "action-result").text
    until(lambda: by_id(browser, "action-activate").get_attribute("disabled") is None, 10)
    shot(browser, "topology-deactivated")
    by_id(browser, "action-activate").click()
    until(lambda: dialog.get_attribute("open") is not None, 5)
    by_id(browser, "confirm-ok").click()
    until(lambda: status.text == "ACTIVE", 15)
    # rebalance: a new task count for split, typed into the dialog's table of components
    by_id(browser, "action-rebalance").click()
    until(lambda: dialog.get_attribute("open") is not None, 5)
    assert by_id(browser, "confirm-tasks-split").get_attribute("value") == "2"
    for field, value in (("confirm-wait", "0"), ("confirm-tasks-split", "3")):
        box = by_id(browser, field)
        box.clear()
        box.send_keys(value)
    by_id(browser, "confirm-ok").click()

    def rebalanced():
        topo = httpx.get(api).json()
        split = next(b for b in topo["bolts"] if b["boltId"] == "split")
        assert (topo["status"], split["tasks"], split["executors"]) == ("ACTIVE", 3, 2), topo
        assert status.text == "ACTIVE"

    eventually(rebalanced, 60)
    # kill with a wait typed into the dialog
    by_id(browser, "action-kill").click()
    until(lambda: dialog.get_attribute("open") is not None, 5)
    wait_input = by_id(browser, "confirm-wait")
    wait_input.clear()
    wait_input.send_keys("-3")
    by_id(browser, "confirm-ok").click()  # refused in the page: nothing sent
    until(lambda: by_id(browser, "confirm-error").is_displayed(), 5)
    assert httpx.get(api).json()["status"] == "ACTIVE"
    wait_input.clear()
    wait_input.send_keys("600")  # a countdown long enough to observe (the test's teardown ends it)
    by_id(browser, "confirm-ok").click()
    until(lambda: status.text == "KILLED", 15)
    assert httpx.get(api).json()["pendingAction"]["kill"]["wait_secs"] == 600
    assert browser.execute_script("return window.galeNoReload") == 7
    until(lambda: not browser.find_elements(By.CSS_SELECTOR, "#actions button:not([disabled])"), 10)
    shot(browser, "topology-killed")


# ------------------------------------------------------------------ the graph, state at a glance

UI_TOPOLOGIES = Path(__file__).resolve().parent / "ui_topologies"


def graph_state(driver) -> dict:
    """The drawn graph: nodes (kind, capacity, failed, box on screen) and edges (rate)."""
    return driver.execute_script("""
        const svg = document.getElementById('graph');
        if (!svg) return {nodes: [], edges: []};
        const nodes = [...svg.querySelectorAll('a.node')].map(a => {
            const r = a.querySelector('rect:last-of-type').getBoundingClientRect();
            const name = a.querySelector('.node-name').getBoundingClientRect();
            return {id: a.dataset.component, kind: a.dataset.kind, capacity: Number(a.dataset.capacity),
                    failed: Number(a.dataset.failed), bp: a.dataset.backpressure,
                    box: [r.left, r.top, r.right, r.bottom], textHeight: name.height};
        });
        const edges = [...svg.querySelectorAll('path.edge')].map(p => ({
            source: p.dataset.source, target: p.dataset.target, stream: p.dataset.stream,
            rate: p.dataset.rate === '' ? null : Number(p.dataset.rate), system: p.classList.contains('system')}));
        const labels = [...svg.querySelectorAll('text.edge-label')].map(t => t.textContent);
        return {nodes, edges, labels, draws: Number(svg.dataset.draws), width: svg.getBoundingClientRect().width};
    """)


def test_the_topology_graph_is_live_and_leads_to_components(running, browser):
    cluster, tid, name = running
    browser.get(f"{cluster.nimbus_url()}/topology.html?id={tid}&refresh=1")
    browser.execute_script("window.galeNoReload = 3")

    def drawn():
        g = graph_state(browser)
        nodes = {n["id"]: n for n in g["nodes"]}
        assert set(nodes) == {"sentences", "split", "count"}, g
        assert (nodes["sentences"]["kind"], nodes["split"]["kind"]) == ("spout", "bolt")
        rates = {(e["source"], e["target"]): e["rate"] for e in g["edges"]}
        assert set(rates) == {("sentences", "split"), ("split", "count")}
        assert all(r and r > 0 for r in rates.values()), rates  # live tuples/s between polls
        assert all(label.endswith("/s") for label in g["labels"]) and len(g["labels"]) == 2, g["labels"]
        assert nodes["count"]["failed"] > 0  # the flaky bolt's refusals mark it
        return g

    first = eventually(drawn, 60)
    until(lambda: graph_state(browser)["draws"] >= first["draws"] + 2, 20)  # redrawn in place, no reload
    assert browser.execute_script("return window.galeNoReload") == 3
    shot(browser, "graph")
    browser.execute_script("document.querySelector('#graph a.node[data-component=split]')"
                           ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")
    until(lambda: "component.html" in browser.current_url and "id=split" in browser.current_url, 15)
    until(lambda: by_id(browser, "component-name") and by_id(browser, "component-name").text == "split", 15)


def overlapping(nodes: list[dict]) -> list[tuple[str, str]]:
    out = []
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            ax0, ay0, ax1, ay1 = a["box"]
            bx0, by0, bx1, by1 = b["box"]
            if ax0 < bx1 and bx0 < ax1 and ay0 < by1 and by0 < ay1:
                out.append((a["id"], b["id"]))
    return out


def test_thirty_components_stay_readable_with_their_state_at_a_glance(cluster, browser):
    with Topologies(cluster) as topologies:
        name, tid = topologies.submit(UI_TOPOLOGIES / "wide.py", "wide")
        browser.get(f"{cluster.nimbus_url()}/topology.html?id={tid}&refresh=1")
        try:
            def drawn():
                g = graph_state(browser)
                assert len(g["nodes"]) == 31, len(g["nodes"])  # 30 and the checkpoint spout
                kinds = {n["id"]: n["kind"] for n in g["nodes"]}
                assert kinds["$checkpointspout"] == "checkpoint spout" and kinds["aggregate-0"] == "stateful bolt"
                assert kinds["source-0"] == "spout" and kinds["sink-5"] == "bolt"
                assert overlapping(g["nodes"]) == []
                # readable at a 1,400 px window: names at least 9 px high, the whole graph on the page
                assert min(n["textHeight"] for n in g["nodes"]) >= 9, g["nodes"]
                assert max(n["box"][2] for n in g["nodes"]) <= g["width"] + 20
                data = [e for e in g["edges"] if not e["system"]]
                assert len(data) == 6 + 16 + 14 + 6 and all(e["rate"] is not None for e in data)
                assert {e["stream"] for e in g["edges"] if e["system"]} == {"$checkpoint"}
                return g

            eventually(drawn, 90)

            def state():
                # read in the page: the line is drawn again at every refresh
                line, commits = browser.execute_script("""
                    const line = document.getElementById('checkpoint-line');
                    const timeline = document.getElementById('checkpoint-timeline');
                    return [line ? line.textContent : '', timeline ? Number(timeline.dataset.commits) : 0];""")
                assert line.startswith("txid ") and "rollbacks 0" in line and "generation" in line, line
                assert commits >= 2, commits
                groups = rows(browser, "keygroups-aggregate-0")
                assert groups and all(n(g["Keys"]) > 0 for g in groups), groups
                assert sum(n(g["Keys"]) for g in groups) <= 50  # 50 keys in all
                return groups

            eventually(state, 90)
            shot(browser, "graph-30-components")
        finally:
            browser.get("about:blank")


def test_kafka_lag_per_partition_is_charted(cluster, browser, kafka_broker):  # noqa: F811
    kafka_broker.create_topic("ui-lag", 3)
    kafka_broker.produce("ui-lag", [f"r{i}" for i in range(3000)], partitions=3)
    overrides = {"kafka.bootstrap.servers": kafka_broker.bootstrap, "kafka.topic": "ui-lag", "kafka.group": "ui",
                 "kafka.zookeeper.root": cluster.root.rsplit("/", 1)[0] + "/kafka"}
    args = [x for k, v in overrides.items() for x in ("-c", f"{k}={v}")]
    with Topologies(cluster) as topologies:
        name, tid = topologies.submit(UI_TOPOLOGIES / "kafka_lag.py", "kafka-lag", *args)
        browser.get(f"{cluster.nimbus_url()}/topology.html?id={tid}&refresh=1")
        try:
            def charted():
                bars = browser.execute_script("""
                    return [...document.querySelectorAll('.lag-chart[data-component=kafka] rect')]
                        .map(r => [r.dataset.partition, Number(r.dataset.lag)]);""")
                assert sorted(p for p, _ in bars) == ["ui-lag/0", "ui-lag/1", "ui-lag/2"], bars
                assert all(0 <= lag <= 1000 for _, lag in bars) and sum(lag for _, lag in bars) > 0, bars
                return bars

            eventually(charted, 90)
            shot(browser, "kafka-lag")
        finally:
            browser.get("about:blank")


# ------------------------------------------------------------------ the log viewer, debugging


def test_the_log_viewer_opens_from_a_worker_and_at_an_error(running, browser):
    cluster, tid, name = running
    browser.get(f"{cluster.nimbus_url()}/topology.html?id={tid}&refresh=1")
    until(lambda: rows(browser, "workers"), 30)
    click_link(browser, "workers", rows(browser, "workers")[0]["Worker log"])

    def log_page():
        view = by_id(browser, "log-view")
        assert view is not None and int(view.get_attribute("data-end") or 0) > 0
        assert '"event": "worker-running"' in view.text or '"daemon": "worker"' in view.text
        return int(view.get_attribute("data-end"))

    end = eventually(log_page, 30)
    by_id(browser, "log-follow").click()  # the tail, re-read at every refresh
    until(lambda: int(by_id(browser, "log-view").get_attribute("data-end")) > end, 60)
    shot(browser, "log-viewer")
    browser.get(f"{cluster.nimbus_url()}/topology.html?id={tid}&refresh=1")
    until(lambda: rows(browser, "errors"), 60)
    click(browser, "#errors a.log-link")

    def at_the_error():
        assert int(by_id(browser, "search-results").get_attribute("data-matches") or 0) >= 1
        view = by_id(browser, "log-view")
        assert view is not None and int(view.get_attribute("data-marks") or 0) >= 1
        assert "flaky bolt refuses sentence" in view.text

    eventually(at_the_error, 30)
    shot(browser, "log-viewer-error")
    # an executor's link: its worker's log at the executor's last line
    browser.get(f"{cluster.nimbus_url()}/component.html?topology_id={tid}&id=count&refresh=1")
    until(lambda: [r for r in rows(browser, "executors") if r["Host:port"].startswith("127.0.0.1:")], 30)
    executor = rows(browser, "executors")[0]["Id"].strip("[]")
    click(browser, "#executors a.log-link")

    def at_the_executor():
        view = by_id(browser, "log-view")
        assert view is not None and int(view.get_attribute("data-marks") or 0) >= 1
        assert f'"executor": "{executor}"' in by_id(browser, "log-search").get_attribute("value")

    eventually(at_the_executor, 30)


def test_thread_dump_and_flame_graph_from_a_worker_row(running, browser):
    cluster, tid, name = running
    browser.get(f"{cluster.nimbus_url()}/topology.html?id={tid}&refresh=2")
    until(lambda: rows(browser, "worker-actions"), 30)
    click(browser, "#worker-actions button[data-action=threaddump]")
    dump = until(lambda: by_id(browser, "threaddump-text") and by_id(browser, "threaddump-text").text, 30)
    assert '"executors-0"' in dump and '"heartbeat"' in dump
    secs = by_id(browser, "profile-secs")
    secs.clear()
    secs.send_keys("2")
    click(browser, "#worker-actions button[data-action=profile]")
    until(lambda: browser.execute_script(
        "const i = document.getElementById('flamegraph'); return i && i.complete && i.naturalWidth > 0"), 60)
    browser.execute_script("document.getElementById('flamegraph').scrollIntoView()")
    shot(browser, "flame-graph")


def test_log_levels_and_sampling_from_the_pages(running, browser):
    cluster, tid, name = running
    browser.get(f"{cluster.nimbus_url()}/topology.html?id={tid}&refresh=1")
    until(lambda: by_id(browser, "loglevel-set"), 30)
    by_id(browser, "loglevel-logger").clear()
    by_id(browser, "loglevel-logger").send_keys("gale.worker")
    by_id(browser, "loglevel-set").click()
    level = until(lambda: [r for r in rows(browser, "loglevels") if r.get("Logger") == "gale.worker"], 30)
    assert level[0]["Level"] == "DEBUG" and level[0]["Workers"] == "all"
    click(browser, "#loglevels button[data-logger='gale.worker']")
    until(lambda: not [r for r in rows(browser, "loglevels") if r.get("Logger") == "gale.worker"], 30)
    browser.get(f"{cluster.nimbus_url()}/component.html?topology_id={tid}&id=split&refresh=1")
    until(lambda: by_id(browser, "sampling-enable"), 30)
    pct = by_id(browser, "sampling-pct")
    pct.clear()
    pct.send_keys("50")
    by_id(browser, "sampling-enable").click()
    until(lambda: by_id(browser, "sampling-state").get_attribute("data-sampling") == "50", 30)

    def sampled():
        events = rows(browser, "sampled-events")
        assert events and all(e["Values"].startswith("id=") and "word=" in e["Values"] for e in events), events

    eventually(sampled, 60)
    shot(browser, "sampling")
    by_id(browser, "sampling-disable").click()
    until(lambda: by_id(browser, "sampling-state").get_attribute("data-sampling") == "0", 30)
