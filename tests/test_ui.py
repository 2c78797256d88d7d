"""The web UI in a real headless Chromium (Debian's, driven by Selenium and Debian's chromedriver)
against a running cluster: pages render real data, the live chart updates without a reload, and
the action buttons work behind their confirmation dialog. Screenshots go to artifacts/ui/."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import httpx
import pytest

from tests.cluster import cli, dump_logs, make_cluster, wait_for
from tests.components import requires
from tests.test_storm_api import write_flaky

CHROMIUM = next((p for p in ("/usr/lib/chromium/chromium", shutil.which("chromium")) if p and os.path.exists(p)), None)
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts" / "ui"

pytestmark = [
    pytest.mark.cluster, pytest.mark.timeout(300),
    requires(CHROMIUM is not None and CHROMEDRIVER is not None,
             "Debian chromium and chromium-driver are not installed (make test installs them)"),
]


@pytest.fixture(scope="module")
def running(zk_server, tmp_path_factory):
    base = tmp_path_factory.mktemp("ui")
    cluster = make_cluster(zk_server, base, supervisors=2, slots=2)
    cluster.start()
    try:
        tid = cli(cluster, "submit", str(write_flaky(base / "topo")), "--name", "flaky", "--wait").stdout.strip()
        yield cluster, tid
    except BaseException:
        print(dump_logs(cluster))
        raise
    finally:
        cluster.cleanup()


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
    from selenium.webdriver.common.by import By

    box = by_id(driver, container_id)
    box.find_element(By.LINK_TEXT, text).click()


def shot(driver, name: str) -> None:
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def n(text: str) -> int:
    return int(text.replace(",", "") or 0)


def test_cluster_page_renders_the_running_cluster(running, browser):
    cluster, tid = running
    browser.get(cluster.nimbus_url() + "/?refresh=1")
    topologies = wait_for(lambda: [r for r in rows(browser, "topology-summary") if r.get("Name") == "flaky"], 30)
    assert topologies[0]["Id"] == tid and topologies[0]["Status"] == "ACTIVE" and topologies[0]["Workers"] == "2"
    (summary,) = wait_for(lambda: rows(browser, "cluster-summary"), 10)
    assert (summary["Supervisors"], summary["Topologies"], summary["Slots"], summary["Used slots"]) == ("2", "1", "4", "2")
    sups = rows(browser, "supervisor-summary")
    assert sorted(r["Id"] for r in sups) == sorted(cluster.supervisor_id(i) for i in range(2))
    assert [r["Status"] for r in rows(browser, "nimbus-summary")] == ["Leader"]
    shot(browser, "cluster")


def test_topology_page_tables_and_live_chart(running, browser):
    cluster, tid = running
    browser.get(cluster.nimbus_url() + "/?refresh=1")
    wait_for(lambda: rows(browser, "topology-summary") and by_id(browser, "topology-summary").text, 30)
    click_link(browser, "topology-summary", "flaky")
    wait_for(lambda: "topology.html" in browser.current_url, 10)
    browser.execute_script("window.galeNoReload = 42")
    spouts = wait_for(lambda: [r for r in rows(browser, "spouts") if r["Id"] == "sentences" and n(r["Emitted"]) > 0], 30)
    assert n(spouts[0]["Acked"]) > 0 and float(spouts[0]["Complete latency (ms)"]) > 0
    bolts = {r["Id"]: r for r in wait_for(lambda: rows(browser, "bolts"), 10)}
    assert set(bolts) == {"split", "count"}
    wait_for(lambda: "flaky bolt refuses sentence" in {r["Id"]: r for r in rows(browser, "bolts")}["count"]["Last error"], 30)
    workers = rows(browser, "workers")
    assert len(workers) == 2 and all(Path(w["Worker log"]).is_file() for w in workers)
    # the chart: samples accumulate and its lines move, without a page load
    chart = by_id(browser, "chart")
    first = wait_for(lambda: int(chart.get_attribute("data-points")) >= 2 and chart.get_attribute("data-points"), 30)
    path_before = browser.execute_script("return document.querySelector('#chart path[data-series=acked]').getAttribute('d')")
    wait_for(lambda: int(chart.get_attribute("data-points")) >= int(first) + 3, 30)
    path_after = browser.execute_script("return document.querySelector('#chart path[data-series=acked]').getAttribute('d')")
    assert path_after != path_before
    assert float(chart.get_attribute("data-last-acked-rate")) > 0
    assert browser.execute_script("return window.galeNoReload") == 42
    shot(browser, "topology")


def test_component_and_supervisor_pages(running, browser):
    cluster, tid = running
    browser.get(f"{cluster.nimbus_url()}/topology.html?id={tid}&refresh=1")
    wait_for(lambda: rows(browser, "bolts"), 30)
    click_link(browser, "bolts", "count")
    execs = wait_for(lambda: [r for r in rows(browser, "executors") if r["Host:port"].startswith("127.0.0.1:")], 30)
    assert len(execs) == 2
    assert all(r["Worker log"].endswith("worker.log") and Path(r["Worker log"]).is_file() for r in execs)
    assert all(n(r["Executed"]) > 0 for r in wait_for(lambda: [r for r in rows(browser, "executors")
                                                               if n(r["Executed"]) > 0] or None, 20))
    errors = wait_for(lambda: rows(browser, "errors") if rows(browser, "errors")[0].get("Error") else None, 30)
    assert "ValueError: flaky bolt refuses sentence" in errors[0]["Error"]
    assert [r["Component"] for r in rows(browser, "input-stats")] == ["split"]
    shot(browser, "component")
    supervisor = execs[0]["Supervisor"]
    click_link(browser, "executors", supervisor)
    workers = wait_for(lambda: rows(browser, "workers") if rows(browser, "workers") and
                       rows(browser, "workers")[0].get("Topology") == "flaky" else None, 30)
    assert Path(workers[0]["Worker log"]).is_file()
    assert [r["Id"] for r in rows(browser, "supervisor-summary")] == [supervisor]
    shot(browser, "supervisor")


def test_action_buttons_confirm_then_act(running, browser):
    from selenium.webdriver.common.by import By

    cluster, tid = running
    api = f"{cluster.nimbus_url()}/api/v1/topology/{tid}"
    browser.get(f"{cluster.nimbus_url()}/topology.html?id={tid}&refresh=1")
    status = wait_for(lambda: by_id(browser, "topology-status").text == "ACTIVE" and by_id(browser, "topology-status"), 30)
    browser.execute_script("window.galeNoReload = 7")
    assert not by_id(browser, "action-deactivate").get_attribute("disabled")
    assert by_id(browser, "action-activate").get_attribute("disabled")
    # cancel does nothing
    by_id(browser, "action-deactivate").click()
    dialog = by_id(browser, "confirm")
    wait_for(lambda: dialog.get_attribute("open") is not None, 5)
    assert "Deactivate flaky?" in by_id(browser, "confirm-title").text
    by_id(browser, "confirm-cancel").click()
    wait_for(lambda: dialog.get_attribute("open") is None, 5)
    assert httpx.get(api).json()["status"] == "ACTIVE"
    # confirm deactivates; the page shows it on its next refresh, without a reload
    by_id(browser, "action-deactivate").click()
    wait_for(lambda: dialog.get_attribute("open") is not None, 5)
    shot(browser, "confirm-dialog")
    by_id(browser, "confirm-ok").click()
    wait_for(lambda: status.text == "INACTIVE", 15)
    assert httpx.get(api).json()["status"] == "INACTIVE"
    assert "deactivate " + tid + ": success" in by_id(browser, "action-result").text
    wait_for(lambda: by_id(browser, "action-activate").get_attribute("disabled") is None, 10)
    shot(browser, "topology-deactivated")
    by_id(browser, "action-activate").click()
    wait_for(lambda: dialog.get_attribute("open") is not None, 5)
    by_id(browser, "confirm-ok").click()
    wait_for(lambda: status.text == "ACTIVE", 15)
    # kill with a wait typed into the dialog
    by_id(browser, "action-kill").click()
    wait_for(lambda: dialog.get_attribute("open") is not None, 5)
    wait_input = by_id(browser, "confirm-wait")
    wait_input.clear()
    wait_input.send_keys("-3")
    by_id(browser, "confirm-ok").click()  # refused in the page: nothing sent
    wait_for(lambda: by_id(browser, "confirm-error").is_displayed(), 5)
    assert httpx.get(api).json()["status"] == "ACTIVE"
    wait_input.clear()
    wait_input.send_keys("30")
    by_id(browser, "confirm-ok").click()
    wait_for(lambda: status.text == "KILLED", 15)
    assert httpx.get(api).json()["pendingAction"]["kill"]["wait_secs"] == 30
    assert browser.execute_script("return window.galeNoReload") == 7
    wait_for(lambda: not browser.find_elements(By.CSS_SELECTOR, "#actions button:not([disabled])"), 10)
    shot(browser, "topology-killed")
