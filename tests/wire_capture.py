"""Capturing ZeroMQ messages off the loopback interface, as an eavesdropper on the network would.

:class:`LoopbackCapture` reads every TCP segment sent to the given ports on ``lo`` with a raw
``AF_PACKET`` socket (root only), reassembles each connection's byte stream by sequence number and
parses it as ZMTP 3 (greeting, commands, frames). :meth:`messages` returns the multipart messages
seen so far per destination port, byte for byte as they crossed the wire.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
from collections import defaultdict

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
ZMTP_GREETING = 64


def capture_available() -> str | None:
    """None when a raw capture socket can be opened, else why not."""
    try:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    except (PermissionError, OSError, AttributeError) as exc:
        return f"cannot open a raw packet socket ({exc}); run as root on Linux"
    s.close()
    return None


class LoopbackCapture:
    def __init__(self, ports: set[int]):
        self.ports = set(ports)
        self._segments: dict[tuple[int, int], dict[int, bytes]] = defaultdict(dict)  # (dst, src) -> seq -> data
        self._isn: dict[tuple[int, int], int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 1024 * 1024)
        self._sock.bind(("lo", 0))
        self._thread = threading.Thread(target=self._run, name="loopback-capture", daemon=True)

    def start(self) -> LoopbackCapture:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(5)
        self._sock.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._sock], [], [], 0.1)
            if not ready:
                continue
            packet, address = self._sock.recvfrom(65536)
            if address[2] == PACKET_OUTGOING:
                continue  # loopback shows each packet twice: keep the incoming copy
            self._take(packet)

    def _take(self, packet: bytes) -> None:
        if len(packet) < 14 + 20 or packet[12:14] != b"\x08\x00":  # IPv4 only
            return
        ip = packet[14:]
        ihl = (ip[0] & 0x0F) * 4
        if ip[9] != socket.IPPROTO_TCP:
            return
        total = struct.unpack("!H", ip[2:4])[0]
        tcp = ip[ihl:total]
        src, dst, seq = struct.unpack("!HHI", tcp[:8])
        if dst not in self.ports:
            return
        flags = tcp[13]
        data = tcp[(tcp[12] >> 4) * 4:]
        with self._lock:
            if flags & 0x02:  # SYN: the stream starts at seq + 1
                self._isn[(dst, src)] = seq + 1
                self._segments[(dst, src)].clear()
            elif data:
                self._segments[(dst, src)][seq] = data

    def streams(self, port: int) -> list[bytes]:
        """The contiguous bytes received so far on each connection to ``port`` (from its SYN)."""
        out = []
        with self._lock:
            for (dst, src), segments in self._segments.items():
                if dst != port or (dst, src) not in self._isn:
                    continue
                pos, buf = self._isn[(dst, src)], bytearray()
                while True:
                    data = segments.get(pos)
                    if data is None:
                        break
                    buf += data
                    pos = (pos + len(data)) & 0xFFFFFFFF
                out.append(bytes(buf))
        return out

    def messages(self, port: int) -> list[list[bytes]]:
        """Every complete ZMTP message (a list of frames) sent to ``port`` so far."""
        out = []
        for stream in self.streams(port):
            out.extend(parse_zmtp(stream))
        return out


def parse_zmtp(stream: bytes) -> list[list[bytes]]:
    """The messages of one direction of a ZMTP 3.x connection (commands skipped)."""
    if len(stream) < ZMTP_GREETING or stream[0] != 0xFF or stream[9] != 0x7F:
        return []
    pos, frames, messages = ZMTP_GREETING, [], []
    while pos < len(stream):
        flags = stream[pos]
        if flags & 0x02:  # LONG
            if pos + 9 > len(stream):
                break
            size = struct.unpack("!Q", stream[pos + 1:pos + 9])[0]
            start = pos + 9
        else:
            if pos + 2 > len(stream):
                break
            size = stream[pos + 1]
            start = pos + 2
        if start + size > len(stream):
            break
        body = stream[start:start + size]
        pos = start + size
        if flags & 0x04:  # COMMAND (READY, ...)
            continue
        frames.append(body)
        if not flags & 0x01:  # last frame of the message
            messages.append(frames)
            frames = []
    return messages
