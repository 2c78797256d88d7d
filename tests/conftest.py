"""Shared fixtures: one real ZooKeeper per test session, a unique chroot per test.

- ``zk_server``: the session's :class:`~gale.zkserver.ZooKeeperServer`.
- ``zk_chroot`` / ``zk``: a unique chroot per test and a started kazoo client inside it.
- ``conf``: a daemon config pointing at the server and the test's chroot-free root
  (``storm.zookeeper.root`` = ``<chroot>/storm``) and a temp ``storm.local.dir``.
- ``expire_session(client)``: force a client's session to expire (ZooKeeper-side).
- The server's log tail is attached to the report of a failing test.
- Every JVM the tests start (ZooKeeper, Spark drivers, executors and standalone daemons, each
  living seconds) compiles with the JIT's first tier only and collects with the serial collector
  (``JAVA_TOOL_OPTIONS``, :data:`~tests.jvm_archive.TEST_JVM_OPTIONS`; an outer setting wins), and
  maps Spark's classes from this environment's class archive once there is one (``make test`` makes
  it in the background: :mod:`tests.jvm_archive`). Same code, same results; a Spark session's start
  and first job took 16 s of CPU with the JVM's defaults, 8 s with these options, 4.4 s with the
  archive as well.
- Hypothesis examples have no deadline (profile ``gale``): a test judges what it asserts, never
  how long an example took.
- Real components: a test that needs one the machine lacks (Prometheus, Chromium, systemd, root
  for the chaos suite, ...) says so with :func:`requires`. It is skipped on a developer's machine,
  but FAILS with the reason under ``make test`` (``GALE_REQUIRE_COMPONENTS=1``) or when ``CI`` is
  set, which install every component: a green run there means every component was exercised. Any
  other skip fails there too, except the ``slow`` soak tests (deselected by design).
"""

from __future__ import annotations

import os
import signal
import threading
import uuid

import pytest
from hypothesis import settings
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from gale.config import defaults
from gale.zkserver import ZooKeeperServer
from tests.components import components_required, require
from tests.jvm_archive import TEST_JVM_OPTIONS, archive_key, archive_options, use_archive

_SERVER: ZooKeeperServer | None = None

_JVM_ARCHIVE_KEY = archive_key()
os.environ.setdefault("JAVA_TOOL_OPTIONS", TEST_JVM_OPTIONS + archive_options(_JVM_ARCHIVE_KEY))

# Hypothesis fails an example that runs past a deadline (200 ms by default): a timed assertion, which
# a test here never makes — on two shared cores a 0.03 ms example once took 476 ms (a pure offsets
# plan, in the Python-source pass beside the compiled one). Examples are judged by what they assert.
settings.register_profile("gale", deadline=None)
settings.load_profile("gale")

# `make test` runs the Python-source pass in the background of its shell, which starts it with SIGINT
# ignored: take the signal back, so Ctrl-C (or the recipe's trap) interrupts that pass as it does the
# compiled one, with every fixture's servers stopped. Not in pytest-xdist's workers: their
# controller decides.
if os.environ.get("PYTEST_XDIST_WORKER") is None and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("requires_component"):
        require(mark.kwargs["available"], mark.kwargs["reason"])


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow (soak runs)")


def pytest_configure(config: pytest.Config) -> None:
    # the processes the tests start hash strings alike (set before any fixture: the tests' fork server
    # starts with the environment it finds, and forks only for the same interpreter settings)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    # pytest-xdist hands out whole files (``--dist loadfile``) in the collection's order only when told
    # to: by default it sends the files with the most tests first, which undid :func:`clusters_first`
    # and left minute-long cluster files of a few tests each for the end of the pass
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    clusters_first(items)
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow (make soak)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def clusters_first(items: list[pytest.Item]) -> None:
    """The files whose tests start clusters or Spark (marked ``cluster`` or ``spark``) first, each
    file's tests in their order: pytest-xdist hands out whole files in this order, so a pass ends on
    short unit files instead of a minute-long cluster file that came last by name (2,330 s of test
    time in three processes: 810 s in name order, 783 s this way, simulated on measured times)."""
    heavy = {item.path for item in items if "cluster" in item.keywords or "spark" in item.keywords}
    items.sort(key=lambda item: item.path not in heavy)  # stable: a file's tests stay together, in order


@pytest.fixture(scope="session")
def zk_server(request: pytest.FixtureRequest) -> ZooKeeperServer:
    global _SERVER
    if any("cluster" in item.keywords for item in request.session.items):
        from tests.cluster import fork_server

        fork_server()  # imports the daemons while ZooKeeper starts: the first dev cluster's are forked too
    server = ZooKeeperServer(tick_time_ms=500, max_session_timeout_ms=60000)
    server.start()
    _SERVER = server
    yield server
    _SERVER = None
    server.cleanup()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> None:
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and components_required() and "slow" not in item.keywords
            and not hasattr(report, "wasxfail")):
        # a skip here would make a green run claim something it never exercised
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (f"skipped under make test / CI, where every component is installed: {reason} "
                           "(GALE_REQUIRE_COMPONENTS / CI)")
    setattr(item, f"rep_{report.when}", report)
    if report.failed and _SERVER is not None and "zk_server" in getattr(item, "fixturenames", ()):
        report.sections.append(("ZooKeeper server log (tail)", _SERVER.log_tail(40)))


@pytest.fixture(autouse=True)
def _jvm_archive_once_made() -> None:
    """make test archives Spark's classes in the background as the tests start: the JVMs started
    from the moment the archive is there use it (an outer JAVA_TOOL_OPTIONS stays as it is)."""
    use_archive(_JVM_ARCHIVE_KEY)


@pytest.fixture(autouse=True)
def _cluster_logs_on_failure(request):
    """A failed test that used a dev cluster (its ``cluster`` fixture, or ``own_cluster`` it set on
    its node) prints the daemons' and workers' log tails."""
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is None or not rep.failed:
        return
    c = request.node.funcargs.get("cluster") if hasattr(request.node, "funcargs") else None
    c = c or getattr(request.node, "own_cluster", None)
    if c is not None and hasattr(c, "nimbus_procs"):
        from tests.cluster import dump_logs

        print(dump_logs(c))


@pytest.fixture(scope="module")
def redis_server():
    """A Redis server (Debian's ``redis-server``, AOF with ``appendfsync always``) per test module."""
    from gale.redisserver import RedisServer

    with RedisServer() as server:
        yield server


@pytest.fixture
def zk_chroot(zk_server: ZooKeeperServer) -> str:
    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    admin = KazooClient(hosts=zk_server.address)
    admin.start(timeout=10)
    admin.ensure_path(chroot)
    admin.stop()
    admin.close()
    yield chroot
    # The server is shared across the session, so each test's tree is removed afterwards.
    if zk_server.running():
        admin = KazooClient(hosts=zk_server.address)
        try:
            admin.start(timeout=10)
            admin.delete(chroot, recursive=True)
        except Exception:
            pass
        finally:
            admin.stop()
            admin.close()


def make_client(zk_server: ZooKeeperServer, chroot: str = "", timeout: float = 10.0) -> KazooClient:
    client = KazooClient(hosts=zk_server.address + chroot, timeout=timeout)
    client.start(timeout=10)
    return client


@pytest.fixture
def zk(zk_server: ZooKeeperServer, zk_chroot: str) -> KazooClient:
    client = make_client(zk_server, zk_chroot)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def zk_client_factory(zk_server: ZooKeeperServer, zk_chroot: str):
    """Make more kazoo clients in the test's chroot; all are stopped at teardown."""
    clients: list[KazooClient] = []

    def factory(timeout: float = 10.0) -> KazooClient:
        c = make_client(zk_server, zk_chroot, timeout)
        clients.append(c)
        return c

    yield factory
    for c in clients:
        c.stop()
        c.close()


def expire_session(zk_server: ZooKeeperServer, client: KazooClient, timeout: float = 15.0) -> None:
    """Expire ``client``'s session on the server, then wait until the client sees it (LOST).

    The standard trick: a second connection with the same session id and password, closed
    at once, makes the server expire the session; the original client is told EXPIRED.
    """
    lost = threading.Event()

    def listener(state: KazooState) -> bool:
        if state == KazooState.LOST:
            lost.set()
            return True
        return False

    client.add_listener(listener)
    session_id, password = client.client_id
    clone = KazooClient(
        hosts=zk_server.address, timeout=client._session_timeout / 1000.0, client_id=(session_id, password)
    )
    clone.start(timeout=10)
    clone.stop()
    clone.close()
    if not lost.wait(timeout):
        raise AssertionError("client did not observe session expiry")


@pytest.fixture
def expire(zk_server: ZooKeeperServer):
    return lambda client, timeout=15.0: expire_session(zk_server, client, timeout)


@pytest.fixture
def conf(zk_server: ZooKeeperServer, zk_chroot: str, tmp_path) -> dict:
    c = defaults()
    c["storm.zookeeper.servers"] = [zk_server.host]
    c["storm.zookeeper.port"] = zk_server.port
    c["storm.zookeeper.root"] = f"{zk_chroot}/storm"
    c["storm.zookeeper.session.timeout"] = 6000
    c["storm.local.dir"] = str(tmp_path / "storm-local")
    c["storm.log.format"] = "console"
    return c


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "*")
