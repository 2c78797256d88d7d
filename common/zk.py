"""Building kazoo clients from Gale configuration, waiting for ZooKeeper, and stopping them within a
deadline."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry
from kazoo.security import make_digest_acl, make_acl

from gale.config import zookeeper_hosts
from gale.config_keys import Config
from gale.deadline import Deadline, within


def digest_credentials(config: Config) -> tuple[str, str] | None:
    """(user, password) from ``storm.zookeeper.auth.payload`` when digest auth is configured."""
    payload = config.storm_zookeeper_auth_payload
    if config.storm_zookeeper_auth_scheme != "digest" or not payload:
        return None
    user, sep, password = payload.partition(":")
    if not sep or not user:
        from gale.errors import ConfigError

        raise ConfigError("storm.zookeeper.auth.payload must be 'user:password' for digest auth")
    return user, password


def cluster_acl(config: Config) -> list | None:
    """ACL for everything Gale creates: the cluster identity may do anything, everyone may read.

    ``None`` (ZooKeeper's open ACL) when no credentials are configured.
    """
    creds = digest_credentials(config)
    if creds is None:
        return None
    user, password = creds
    return [make_digest_acl(user, password, all=True), make_acl("world", "anyone", read=True)]


def make_client(config: Config, *, chroot: str = "", read_only: bool = False) -> KazooClient:
    """A kazoo client for ``storm.zookeeper.servers`` with Storm's timeouts and retry policy.

    The caller starts it (``client.start(timeout=...)``) and owns its lifecycle.
    """
    retry = KazooRetry(
        max_tries=config.storm_zookeeper_retry_times,
        delay=config.storm_zookeeper_retry_interval / 1000.0,
        max_delay=config.storm_zookeeper_retry_intervalceiling_millis / 1000.0,
        ignore_expire=False,
    )
    creds = digest_credentials(config)
    auth = [("digest", f"{creds[0]}:{creds[1]}")] if creds else None
    return KazooClient(
        hosts=zookeeper_hosts(config) + chroot,
        timeout=config.storm_zookeeper_session_timeout / 1000.0,
        connection_retry=KazooRetry(max_tries=-1, delay=0.2, max_delay=5.0),
        command_retry=retry,
        auth_data=auth,
        default_acl=cluster_acl(config),
        read_only=read_only,
        logger=logging.getLogger("kazoo"),
    )


def start_client(config: Config, **kwargs: Any) -> KazooClient:
    """Make and start a client, waiting ``storm.zookeeper.connection.timeout`` to connect."""
    client = make_client(config, **kwargs)
    client.start(timeout=config.storm_zookeeper_connection_timeout / 1000.0)
    return client


def connect(config: Config, *, stop: threading.Event | None = None, what: str = "daemon",
            on_waiting: Callable[[float], None] | None = None, **kwargs: Any) -> KazooClient | None:
    """A started client, connected — however long ZooKeeper takes to answer.

    A daemon starting while its ZooKeeper is down, or while an ensemble has no quorum (a majority
    of ``storm.zookeeper.servers`` down: the rest refuse clients), waits here instead of exiting
    (which under systemd would be a restart loop). Every ``storm.zookeeper.connection.timeout`` it
    logs ``zookeeper-unavailable`` with the servers and the seconds waited, and calls
    ``on_waiting(seconds)`` (daemons keep a metric). Returns None, with the client stopped, when
    ``stop`` is set first.
    """
    from gale.daemon_util import sd_notify
    from gale.log import get_logger

    log = get_logger("zk")
    client = make_client(config, **kwargs)
    live = client.start_async()
    period = config.storm_zookeeper_connection_timeout / 1000.0
    t0 = time.monotonic()
    next_report = t0 + period
    while not (live.wait(min(1.0, period)) and client.connected):
        if stop is not None and stop.is_set():
            client.stop()
            client.close()
            return None
        now = time.monotonic()
        if now >= next_report:
            next_report = now + period
            log.warning("zookeeper-unavailable", daemon=what, servers=zookeeper_hosts(config),
                        waited_secs=round(now - t0, 1),
                        hint="waiting for ZooKeeper: are the servers up, and a majority of an ensemble (its quorum)?")
            sd_notify(f"STATUS=waiting for ZooKeeper {zookeeper_hosts(config)} ({now - t0:.0f} s)")
            if on_waiting is not None:
                on_waiting(now - t0)
    if time.monotonic() - t0 >= period:
        log.info("zookeeper-connected", daemon=what, waited_secs=round(time.monotonic() - t0, 1))
        sd_notify("STATUS=connected to ZooKeeper")
    return client


def _stop_and_close(client: KazooClient) -> None:
    client.stop()
    client.close()


#: how long a stop waits for a disconnected client (its thread finishes the stop by itself)
DISCONNECTED_STOP_SECS = 0.5


def stop_client(client: KazooClient | None, deadline: Deadline, what: str = "zookeeper-client-stop") -> bool:
    """Stop and close ``client`` by ``deadline``, whatever ZooKeeper's state; True if it did.

    kazoo's ``stop`` waits for its connection thread, which while ZooKeeper is unreachable may be in
    a reconnect back-off (up to 5 s) or a connect attempt (up to the session timeout). A disconnected
    client is given ``DISCONNECTED_STOP_SECS``: the stop is requested at once and its connection
    thread ends at its next attempt, after this returns. A connected one gets until the deadline.
    Either way a client still stopping is abandoned (its session expires on the server, which
    removes its ephemeral nodes).
    """
    if client is None:
        return True
    if not client.connected:
        deadline = Deadline(min(deadline.remaining(), DISCONNECTED_STOP_SECS))
    return within(deadline, what, _stop_and_close, client)
