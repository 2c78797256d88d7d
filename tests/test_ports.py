"""gale.ports: ports outside the kernel's ephemeral range, free when handed out, and never handed
out twice while reserved (by this process or by another one)."""

from __future__ import annotations

import socket
import subprocess
import sys

from gale.ports import candidate_ports, ephemeral_range, is_free, reserve_port


def test_candidates_avoid_the_ephemeral_range_with_their_offsets():
    got = candidate_ports(1000, (32768, 60999), lowest=20000)
    assert got[0] == 20000 and 31767 in got and 31768 not in got  # 31768 + 1000 = 32768 is ephemeral
    assert 61000 in got and 64535 in got and 64536 not in got  # 64536 + 1000 > 65535
    assert not [p for p in got if 32768 - 1000 <= p <= 60999]
    assert candidate_ports(0, (1024, 65535), lowest=20000) == []  # the whole space is ephemeral


def test_reservations_are_free_outside_the_range_and_exclusive():
    lo, hi = ephemeral_range()
    held = [reserve_port(offsets=(0, 1000)) for _ in range(20)]
    try:
        ports = [p for r in held for p in r.ports]
        assert len(set(ports)) == len(ports)
        assert all(not lo <= p <= hi for p in ports)
        assert all(is_free(p) for p in ports)  # reserved, not bound: the server binds it
        # another process does not get them either
        code = ("from gale.ports import reserve_port\n"
                "print(*{p for _ in range(200) for p in reserve_port(offsets=(0, 1000)).ports})")
        theirs = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert not set(ports) & {int(x) for x in theirs.split()}
    finally:
        for r in held:
            r.release()


def test_a_bound_port_is_not_free():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert not is_free(s.getsockname()[1])
