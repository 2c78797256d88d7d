"""Storm's multi-lang wire formats: framing and serializers, pure (bytes in, messages out).

* **JSON** (Storm's ``org.apache.storm.multilang.JsonSerializer``, the default): every message is one
  JSON value followed by a line holding only ``end`` — ``<json>\\nend\\n`` — in UTF-8. A message may
  span lines; blank lines between messages are skipped, as pystorm does.
* **msgpack** (pystorm's ``MsgpackSerializer``, pyleus's ``MessagePackSerializer`` on the JVM side):
  messages are msgpack values written back to back, no framing — msgpack delimits itself
  (pystorm writes ``msgpack.packb(message)`` and reads with a streaming ``Unpacker``).

:meth:`Decoder.feed` takes whatever bytes a read returned (any split) and returns the complete
messages; bytes that cannot be a message (a ``print`` to stdout, a half-written line at exit) stop
the decoder with a :class:`ProtocolError` naming the text and the last line seen. The encoders
frame many messages into one ``bytes`` so a batch is a single write.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import msgpack

from gale.errors import GaleError

#: topology.multilang.serializer values → codec name
SERIALIZERS = {
    "org.apache.storm.multilang.JsonSerializer": "json",
    "json": "json",
    "com.yelp.pyleus.serializer.MessagePackSerializer": "msgpack",
    "msgpack": "msgpack",
}

_SHOWN = 300  # characters of offending text an error shows


def shorten(text: str, limit: int = _SHOWN) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


class ProtocolError(GaleError):
    """The subprocess broke the protocol; ``reason`` says how, ``last_line`` is the last line of
    its stdout seen (what it wrote just before)."""

    def __init__(self, reason: str, last_line: str = "", messages: list[Any] | None = None):
        self.reason = reason
        self.last_line = last_line
        #: messages decoded from the same read before the fault (still to be applied)
        self.messages = messages or []
        super().__init__(reason + (f"; last line seen: {last_line!r}" if last_line else ""))


class Decoder:
    """Turns a subprocess's stdout bytes into messages. ``last_line`` is the last complete line
    (JSON) or message (msgpack) seen, for error reports."""

    last_line: str = ""

    def feed(self, data: bytes) -> list[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def finish(self) -> None:
        """The stream ended (EOF): raise :class:`ProtocolError` if a message was cut off."""


class JsonDecoder(Decoder):
    """Splits on the ``\nend\n`` frames and parses every complete message of a read with ONE
    ``json.loads`` of the bodies joined as an array (a JSON string cannot hold a raw newline, so
    ``\nend\n`` only ever ends a message); a body that does not parse is found one by one."""

    def __init__(self) -> None:
        self._partial = b""
        self.last_line = ""

    def feed(self, data: bytes) -> list[Any]:
        if self._partial:
            data = self._partial + data
        elif data.startswith(b"end\n"):
            raise ProtocolError("an 'end' line with no message before it", self.last_line)
        bodies = data.split(b"\nend\n")
        self._partial = bodies.pop()
        if not bodies:
            return []
        try:
            out = json.loads(b"[" + b",".join(bodies) + b"]")
        except (ValueError, UnicodeDecodeError):
            out = self._one_by_one(bodies)
        else:
            if len(out) != len(bodies):  # a body held several values ("1,2"): find it
                out = self._one_by_one(bodies)
        self._last(bodies[-1])
        return out

    def _one_by_one(self, bodies: list[bytes]) -> list[Any]:
        out: list[Any] = []
        for body in bodies:
            if not body.strip():
                raise ProtocolError("an 'end' line with no message before it", self.last_line, out)
            try:
                out.append(json.loads(body))
            except (ValueError, UnicodeDecodeError) as exc:
                text = body.decode("utf-8", "replace").strip("\n")
                raise ProtocolError(
                    f"invalid JSON from the subprocess ({exc}; a print to stdout?): {shorten(text)!r}",
                    self.last_line, out) from None
            self._last(body)
        return out

    def _last(self, body: bytes) -> None:
        lines = body.decode("utf-8", "replace").strip().splitlines()
        if lines:
            self.last_line = shorten(lines[-1].rstrip("\r"))

    def finish(self) -> None:
        rest = self._partial.strip()
        if rest:
            text = rest.decode("utf-8", "replace")
            raise ProtocolError(f"the subprocess's output ended inside a message: {shorten(text)!r}",
                                shorten(text.splitlines()[-1]))


class MsgpackDecoder(Decoder):
    def __init__(self) -> None:
        self._unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        self._buffered = 0
        self.last_line = ""

    def feed(self, data: bytes) -> list[Any]:
        self._unpacker.feed(data)
        out: list[Any] = []
        try:
            for msg in self._unpacker:
                out.append(msg)
        except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError) as exc:
            raise ProtocolError(f"invalid msgpack from the subprocess ({exc}; a print to stdout?)",
                                self.last_line) from None
        if out:
            self.last_line = shorten(repr(out[-1]))
            self._buffered = 0
        else:
            self._buffered += len(data)
        return out

    def finish(self) -> None:
        if self._buffered:
            raise ProtocolError(f"the subprocess's output ended inside a message ({self._buffered} bytes)",
                                self.last_line)


class Codec:
    """One serializer: ``encode_many`` frames messages into one write; ``decoder()`` reads them."""

    name = ""

    def encode(self, msg: Any) -> bytes:
        return self.encode_many((msg,))

    def encode_many(self, msgs: Iterable[Any]) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError

    def decoder(self) -> Decoder:  # pragma: no cover - abstract
        raise NotImplementedError


class JsonCodec(Codec):
    name = "json"

    def __init__(self) -> None:
        self._dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode

    def encode_many(self, msgs: Iterable[Any]) -> bytes:
        dumps = self._dumps
        return "".join([dumps(m) + "\nend\n" for m in msgs]).encode("utf-8")

    def decoder(self) -> Decoder:
        return JsonDecoder()


class MsgpackCodec(Codec):
    name = "msgpack"

    def __init__(self) -> None:
        self._pack = msgpack.Packer(use_bin_type=True).pack

    def encode_many(self, msgs: Iterable[Any]) -> bytes:
        pack = self._pack
        return b"".join([pack(m) for m in msgs])

    def decoder(self) -> Decoder:
        return MsgpackDecoder()


def codec_for(serializer: str) -> Codec:
    """The codec for a ``topology.multilang.serializer`` value; refuses unknown ones by name."""
    name = SERIALIZERS.get(serializer)
    if name is None:
        raise GaleError(
            f"unknown topology.multilang.serializer {serializer!r}; known: {', '.join(SERIALIZERS)}"
        )
    return JsonCodec() if name == "json" else MsgpackCodec()
