"""A network namespace joined to the host by a veth pair: one "remote node" on this machine.

::

    host (default namespace)                     namespace gale-chaos-<pid>-<hex>
    <veth>h  10.X.Y.1/30  <================>  <veth>n  10.X.Y.2/30  (+ lo up)

The host side carries the address every host daemon binds and advertises (ZooKeeper, nimbus,
RabbitMQ, the host's workers), so processes inside the namespace reach them and the host reaches
the namespace's workers at 10.X.Y.2. :meth:`partition` brings the namespace's end of the link down:
the namespace loses its route to the host (its sockets fail with "network unreachable") and the
host's packets to 10.X.Y.2 go nowhere, while 10.X.Y.1 stays a working local address on the host.
:meth:`heal` brings it back up.

Names are unique per run (pid + random) and the /30 subnet is picked among 10.200-254.*.* so it
collides with nothing configured on this machine. :meth:`cleanup` deletes the namespace and the
link; processes still inside must be killed first (the harness does), otherwise the kernel keeps
the namespace alive until they exit. :func:`sweep_stale` removes namespaces of runs whose process
is gone (a run that was killed with SIGKILL cannot clean up after itself), killing what still runs
inside them.
"""

from __future__ import annotations

import ipaddress
import os
import random
import re
import secrets
import signal
import subprocess

PREFIX = "gale-chaos-"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def _used_networks() -> list[ipaddress.IPv4Network]:
    out = ip("-4", "-o", "addr", "show").stdout
    nets = []
    for m in re.finditer(r"inet (\d+\.\d+\.\d+\.\d+/\d+)", out):
        nets.append(ipaddress.ip_network(m.group(1), strict=False))
    for line in ip("-4", "route", "show", "table", "all", check=False).stdout.splitlines():
        m = re.match(r"(?:local |broadcast )?(\d+\.\d+\.\d+\.\d+(?:/\d+)?)", line.strip())
        if m:
            nets.append(ipaddress.ip_network(m.group(1), strict=False))
    return nets


def pick_subnet(rng: random.Random | None = None) -> ipaddress.IPv4Network:
    rng = rng or random.Random()
    used = _used_networks()
    for _ in range(500):
        net = ipaddress.ip_network(f"10.{rng.randint(200, 254)}.{rng.randint(0, 255)}.{rng.randrange(0, 256, 4)}/30")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free 10.200-254.*.*/30 subnet for the chaos namespace")


def sweep_stale() -> list[str]:
    """Delete namespaces (and their links) left by chaos runs whose process no longer exists."""
    removed = []
    for line in ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        m = re.fullmatch(re.escape(PREFIX) + r"(\d+)-([0-9a-f]{6})", name)
        if not m or _pid_alive(int(m.group(1))):
            continue
        for pid in ip("netns", "pids", name, check=False).stdout.split():
            try:  # processes of the dead run still inside (its supervisor and workers)
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        ip("netns", "del", name, check=False)
        ip("link", "del", f"gc{m.group(2)}h", check=False)
        removed.append(name)
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class NetNamespace:
    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.name = f"{PREFIX}{os.getpid()}-{tag}"
        self.host_if = f"gc{tag}h"  # interface names: at most 15 characters
        self.ns_if = f"gc{tag}n"
        self.subnet = pick_subnet()
        hosts = list(self.subnet.hosts())
        self.host_ip, self.ns_ip = str(hosts[0]), str(hosts[1])
        self.created = False
        self.partitioned = False

    @property
    def prefix(self) -> list[str]:
        """argv prefix that runs a command inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def create(self) -> NetNamespace:
        plen = self.subnet.prefixlen
        ip("netns", "add", self.name)
        self.created = True
        try:
            ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            ip("link", "set", self.ns_if, "netns", self.name)
            ip("addr", "add", f"{self.host_ip}/{plen}", "dev", self.host_if)
            ip("link", "set", self.host_if, "up")
            self.exec("ip", "addr", "add", f"{self.ns_ip}/{plen}", "dev", self.ns_if)
            self.exec("ip", "link", "set", self.ns_if, "up")
            self.exec("ip", "link", "set", "lo", "up")
        except BaseException:
            self.cleanup()
            raise
        return self

    def exec(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([*self.prefix, *args], capture_output=True, text=True, timeout=30)
        if check and proc.returncode != 0:
            raise RuntimeError(f"in {self.name}: {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def partition(self) -> None:
        self.exec("ip", "link", "set", self.ns_if, "down")
        self.partitioned = True

    def heal(self) -> None:
        self.exec("ip", "link", "set", self.ns_if, "up")
        self.partitioned = False

    def pids(self) -> list[int]:
        """Processes running inside the namespace."""
        out = ip("netns", "pids", self.name, check=False).stdout
        return [int(x) for x in out.split() if x.isdigit()]

    def cleanup(self) -> None:
        if not self.created:
            return
        ip("netns", "del", self.name, check=False)
        ip("link", "del", self.host_if, check=False)  # gone with the namespace, unless a process kept it
        self.created = False

    def __enter__(self) -> NetNamespace:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
