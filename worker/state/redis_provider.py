"""The Redis state provider (``topology.state.provider: redis``, ``topology.state.redis.url``).

Keys, per namespace ``ns`` (see ``provider.py``):

* ``gale:state:{ns}`` — hash, the committed content (key → value);
* ``gale:staged:{ns}:{txid}`` — hash, the puts staged for checkpoint ``txid``;
* ``gale:deleted:{ns}:{txid}`` — set, the deletes staged for ``txid``;
* ``gale:txids:{ns}`` — set, the txids staged and not yet committed;
* ``gale:meta:{name}`` — string, small records (the coordinator's ``__state``).

``prepare`` writes a namespace's staged keys in one MULTI/EXEC; ``commit`` is one Lua script over
every namespace of the task (Redis runs a script atomically: a half-merged checkpoint is never seen,
and a server killed mid-commit has either applied all of it or none); committing a txid that is not
staged is a no-op, so a COMMIT repeated by recovery is harmless. With the append-only file and
``appendfsync always`` (as :class:`gale.redisserver.RedisServer` runs it) a committed checkpoint
survives a crash of the server.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import redis

from gale.worker.state.provider import Changes, StateProviderError

_CHUNK = 1000

# KEYS: per namespace 4 keys (txids set, staged hash, deleted set, committed hash); ARGV[1]: txid
_COMMIT = """
local txid = ARGV[1]
for i = 1, #KEYS, 4 do
  local txids, staged, deleted, committed = KEYS[i], KEYS[i + 1], KEYS[i + 2], KEYS[i + 3]
  if redis.call('SISMEMBER', txids, txid) == 1 then
    local dels = redis.call('SMEMBERS', deleted)
    for j = 1, #dels, 1000 do
      redis.call('HDEL', committed, unpack(dels, j, math.min(j + 999, #dels)))
    end
    local kv = redis.call('HGETALL', staged)
    for j = 1, #kv, 2000 do
      redis.call('HSET', committed, unpack(kv, j, math.min(j + 1999, #kv)))
    end
    redis.call('DEL', staged, deleted)
    redis.call('SREM', txids, txid)
  end
end
return 1
"""

# KEYS: txids sets of the namespaces; ARGV: the key prefix of staged/deleted keys per namespace
_ROLLBACK = """
for i = 1, #KEYS do
  local txids = redis.call('SMEMBERS', KEYS[i])
  for _, t in ipairs(txids) do
    redis.call('DEL', ARGV[2 * i - 1] .. t, ARGV[2 * i] .. t)
  end
  redis.call('DEL', KEYS[i])
end
return 1
"""


def _committed(ns: str) -> str:
    return f"gale:state:{ns}"


def _txids(ns: str) -> str:
    return f"gale:txids:{ns}"


def _staged(ns: str, txid: int | str) -> str:
    return f"gale:staged:{ns}:{txid}"


def _deleted(ns: str, txid: int | str) -> str:
    return f"gale:deleted:{ns}:{txid}"


class RedisStateProvider:
    def __init__(self, url: str, *, timeout: float = 5.0):
        self.url = url
        try:
            self.client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        except ValueError as exc:
            raise StateProviderError(f"invalid topology.state.redis.url {url!r}: {exc}") from None
        self._commit = self.client.register_script(_COMMIT)
        self._rollback = self.client.register_script(_ROLLBACK)

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except redis.RedisError as exc:
            raise StateProviderError(f"redis state provider at {self.url}: {what} failed: {exc}") from exc

    def load(self, namespaces: Iterable[str]) -> dict[str, dict[bytes, bytes]]:
        namespaces = list(namespaces)

        def run() -> list:
            pipe = self.client.pipeline(transaction=False)
            for ns in namespaces:
                pipe.hgetall(_committed(ns))
            return pipe.execute()

        return dict(zip(namespaces, self._call("load", run)))

    def prepare(self, txid: int, changes: Changes) -> int:
        written = 0

        def run() -> None:
            nonlocal written
            pipe = self.client.pipeline(transaction=True)
            for ns, (puts, deletes) in changes.items():
                puts, deletes = dict(puts), list(deletes)
                staged, deleted = _staged(ns, txid), _deleted(ns, txid)
                pipe.delete(staged, deleted)  # staging a txid again replaces it (with nothing, too)
                if not puts and not deletes:
                    continue
                items = list(puts.items())
                for i in range(0, len(items), _CHUNK):
                    pipe.hset(staged, mapping=dict(items[i:i + _CHUNK]))
                for i in range(0, len(deletes), _CHUNK):
                    pipe.sadd(deleted, *deletes[i:i + _CHUNK])
                pipe.sadd(_txids(ns), txid)
                written += sum(len(k) + len(v) for k, v in items) + sum(len(k) for k in deletes)
            pipe.execute()

        self._call("prepare", run)
        return written

    def commit(self, txid: int, namespaces: Iterable[str]) -> None:
        keys: list[str] = []
        for ns in namespaces:
            keys += [_txids(ns), _staged(ns, txid), _deleted(ns, txid), _committed(ns)]
        if keys:
            self._call("commit", self._commit, keys, [txid])

    def rollback(self, namespaces: Iterable[str]) -> None:
        namespaces = list(namespaces)
        if not namespaces:
            return
        argv: list[str] = []
        for ns in namespaces:
            argv += [_staged(ns, ""), _deleted(ns, "")]
        self._call("rollback", self._rollback, [_txids(ns) for ns in namespaces], argv)

    def get_meta(self, name: str) -> bytes | None:
        return self._call("read", self.client.get, f"gale:meta:{name}")

    def put_meta(self, name: str, value: bytes) -> None:
        self._call("write", self.client.set, f"gale:meta:{name}", value)

    def close(self) -> None:
        try:
            self.client.close()
        except redis.RedisError:  # pragma: no cover
            pass
