"""Building kazoo clients from Gale configuration, and waiting for ZooKeeper."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry
from kazoo.security import make_digest_acl, make_acl

from gale.config import zookeeper_hosts


def digest_credentials(conf: Mapping[str, Any]) -> tuple[str, str] | None:
    """(user, password) from ``storm.zookeeper.auth.payload`` when digest auth is configured."""
    if conf.get("storm.zookeeper.auth.scheme") != "digest" or not conf.get("storm.zookeeper.auth.payload"):
        return None
    user, sep, password = conf["storm.zookeeper.auth.payload"].partition(":")
    if not sep or not user:
        from gale.errors import ConfigError

        raise ConfigError("storm.zookeeper.auth.payload must be 'user:password' for digest auth")
    return user, password


def cluster_acl(conf: Mapping[str, Any]) -> list | None:
    """ACL for everything Gale creates: the cluster identity may do anything, everyone may read.

    ``None`` (ZooKeeper's open ACL) when no credentials are configured.
    """
    creds = digest_credentials(conf)
    if creds is None:
        return None
    user, password = creds
    return [make_digest_acl(user, password, all=True), make_acl("world", "anyone", read=True)]


def make_client(conf: Mapping[str, Any], *, chroot: str = "", read_only: bool = False) -> KazooClient:
    """A kazoo client for ``storm.zookeeper.servers`` with Storm's timeouts and retry policy.

    The caller starts it (``client.start(timeout=...)``) and owns its lifecycle.
    """
    retry = KazooRetry(
        max_tries=conf["storm.zookeeper.retry.times"],
        delay=conf["storm.zookeeper.retry.interval"] / 1000.0,
        max_delay=conf["storm.zookeeper.retry.intervalceiling.millis"] / 1000.0,
        ignore_expire=False,
    )
    creds = digest_credentials(conf)
    auth = [("digest", f"{creds[0]}:{creds[1]}")] if creds else None
    return KazooClient(
        hosts=zookeeper_hosts(conf) + chroot,
        timeout=conf["storm.zookeeper.session.timeout"] / 1000.0,
        connection_retry=KazooRetry(max_tries=-1, delay=0.2, max_delay=5.0),
        command_retry=retry,
        auth_data=auth,
        default_acl=cluster_acl(conf),
        read_only=read_only,
        logger=logging.getLogger("kazoo"),
    )


def start_client(conf: Mapping[str, Any], **kwargs: Any) -> KazooClient:
    """Make and start a client, waiting ``storm.zookeeper.connection.timeout`` to connect."""
    client = make_client(conf, **kwargs)
    client.start(timeout=conf["storm.zookeeper.connection.timeout"] / 1000.0)
    return client


def connect(conf: Mapping[str, Any], *, stop: threading.Event | None = None, what: str = "daemon",
            on_waiting: Callable[[float], None] | None = None, **kwargs: Any) -> KazooClient | None:
    """A started client, connected — however long ZooKeeper takes to answer.

    A daemon starting while its ZooKeeper is down, or while an ensemble has no quorum (a majority
    of ``storm.zookeeper.servers`` down: the rest refuse clients), waits here instead of exiting
    (which under systemd would be a restart loop). Every ``storm.zookeeper.connection.timeout`` it
    logs ``zookeeper-unavailable`` with the servers and the seconds waited, and calls
    ``on_waiting(seconds)`` (daemons keep a metric). Returns None, with the client stopped, when
    ``stop`` is set first.
    """
    from gale.log import get_logger

    log = get_logger("zk")
    client = make_client(conf, **kwargs)
    live = client.start_async()
    period = conf["storm.zookeeper.connection.timeout"] / 1000.0
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
            log.warning("zookeeper-unavailable", daemon=what, servers=zookeeper_hosts(conf),
                        waited_secs=round(now - t0, 1),
                        hint="waiting for ZooKeeper: are the servers up, and a majority of an ensemble (its quorum)?")
            if on_waiting is not None:
                on_waiting(now - t0)
    if time.monotonic() - t0 >= period:
        log.info("zookeeper-connected", daemon=what, waited_secs=round(time.monotonic() - t0, 1))
    return client
