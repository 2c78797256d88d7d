"""The Redis sink: a hash (fields set, or incremented) or a stream (entries added), applied once
per checkpoint and task in one ``MULTI``/``EXEC`` guarded by the task's applied txid.

::

    builder.set_bolt("to-redis", RedisSink, 2, kwargs={
        "url": "redis://cache:6379/0", "key": "word_counts", "field": "word", "value": "count"})

Redis has no prepared transactions, so the sink writes idempotently keyed by checkpoint:

* PREPARE(``m``): the task's operations of ``m`` (a hash: field → value, the last per field, or
  summed increments with ``increment=True``; a stream: the entries in order) are staged under
  ``gale:sink:staged:<transaction name>`` and the name added to the component's set
  ``gale:sink:prepared:<topology>:<component>`` — one ``MULTI``/``EXEC``, durable with the
  append-only file (``appendfsync always``).
* COMMIT(``m``): ``WATCH`` the task's guard ``gale:sink:applied:<topology>:<component>:<task>``;
  unless it already says ``m`` or later, one ``MULTI``/``EXEC`` applies the staged operations,
  sets the guard to ``m`` and deletes the staged copy — so a repeated COMMIT (a recovery, a restarted
  task) changes nothing.
* An abandoned checkpoint's staged copy is deleted.

A record is a dict: ``field`` and ``value`` name its entries for a hash; a stream entry is the whole
record (values written as strings, as Redis keeps them).
"""

from __future__ import annotations

from typing import Any

import msgpack

from gale.errors import ConfigError
from gale.topology.sink import SinkError, TransactionalSink

MODES = ("hash", "stream")


class RedisSink(TransactionalSink):
    """See the module docstring. ``url``: the Redis server; ``key``: the hash or stream; ``mode``:
    ``hash`` or ``stream``; ``field``/``value``: the record's entries a hash uses; ``increment``:
    add the values to the hash's (HINCRBY / HINCRBYFLOAT) instead of setting them."""

    def __init__(self, url: str, key: str, mode: str = "hash", field: str = "field", value: str = "value",
                 increment: bool = False, guarantee: str | None = None, dead_letters: bool = False):
        super().__init__(guarantee=guarantee, dead_letters=dead_letters)
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError(f"RedisSink url must be a redis:// URL, got {url!r}")
        if not isinstance(key, str) or not key:
            raise ConfigError(f"RedisSink key must be the name of a hash or stream, got {key!r}")
        if mode not in MODES:
            raise ConfigError(f"RedisSink mode {mode!r}: use one of {list(MODES)}")
        if increment and mode != "hash":
            raise ConfigError("RedisSink increment=True needs mode='hash'")
        self.url, self.key, self.mode, self.field, self.value, self.increment = url, key, mode, field, value, increment

    def open_store(self) -> RedisStore:
        return RedisStore(self.url, self.key, self.sink_name, self.mode, self.field, self.value, self.increment)


class RedisBatch:
    def __init__(self, mode: str, field: str, value: str, increment: bool):
        self.mode, self.field, self.value, self.increment = mode, field, value, increment
        self.fields: dict[str, Any] = {}
        self.entries: list[dict[str, str]] = []

    def add(self, record: Any) -> None:
        if not isinstance(record, dict):
            raise SinkError(f"a Redis sink record must be a dict, got {type(record).__name__}: {record!r}")
        if self.mode == "stream":
            self.entries.append({str(k): _text(v) for k, v in record.items()})
            return
        try:
            field, value = str(record[self.field]), record[self.value]
        except KeyError as exc:
            raise SinkError(f"record {record!r} has no {exc.args[0]!r} (the hash's field and value)") from None
        if self.increment:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise SinkError(f"record with field {field!r}: increment needs a number, got {value!r}")
            self.fields[field] = self.fields.get(field, 0) + value
        else:
            self.fields.pop(field, None)
            self.fields[field] = _text(value)

    def __len__(self) -> int:
        return len(self.fields) + len(self.entries)

    def ops(self) -> list:
        return [list(kv) for kv in self.fields.items()] if self.mode == "hash" else list(self.entries)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


class RedisStore:
    def __init__(self, url: str, key: str, name: Any, mode: str = "hash", field: str = "field", value: str = "value",
                 increment: bool = False):
        self.url, self.key, self.name = url, key, name
        self.mode, self.field, self.value, self.increment = mode, field, value, increment
        self.where = f"Redis sink {name.component!r} at {_safe(url)}"
        self.prepared_set = f"gale:sink:prepared:{name.component_prefix[len('gale:'):].rstrip(':')}"
        self.client: Any = None

    def _redis(self) -> Any:
        if self.client is None:
            import redis

            self.client = redis.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=5)
        return self.client

    def _io(self, what: str, fn: Any) -> Any:
        import redis

        try:
            return fn(self._redis())
        except SinkError:
            raise
        except redis.RedisError as exc:
            raise SinkError(f"{self.where}: {what}: {type(exc).__name__}: {exc}") from None

    @staticmethod
    def staged_key(txn: str) -> str:
        return f"gale:sink:staged:{txn[len('gale:'):]}"

    def guard_key(self, txn: str) -> str:
        task = txn.rpartition(":")[0]
        return f"gale:sink:applied:{task[len('gale:'):]}"

    def new_batch(self) -> RedisBatch:
        return RedisBatch(self.mode, self.field, self.value, self.increment)

    def prepared(self) -> list[str]:
        return self._io("reading prepared transactions",
                        lambda r: sorted(m.decode() for m in r.smembers(self.prepared_set)))

    def prepare(self, name: str, txid: int, batch: RedisBatch, refused: Any) -> int:
        blob = msgpack.packb(batch.ops(), use_bin_type=True)

        def stage(r: Any) -> int:
            with r.pipeline(transaction=True) as p:
                p.set(self.staged_key(name), blob)
                p.sadd(self.prepared_set, name)
                p.execute()
            return len(batch)

        return self._io(f"preparing checkpoint {txid}", stage)

    def commit(self, name: str) -> None:
        import redis

        txid = int(name.rpartition(":")[2])
        staged_key, guard = self.staged_key(name), self.guard_key(name)

        def apply(r: Any) -> None:
            with r.pipeline(transaction=True) as p:
                while True:
                    try:
                        p.watch(guard, staged_key)
                        applied = p.get(guard)
                        blob = p.get(staged_key)
                        p.multi()
                        if blob is not None and (applied is None or int(applied) < txid):
                            self._apply(p, msgpack.unpackb(blob, raw=False))
                            p.set(guard, txid)
                        p.delete(staged_key)
                        p.srem(self.prepared_set, name)
                        p.execute()
                        return
                    except redis.WatchError:
                        continue  # another client touched the guard: read it again

        self._io(f"committing {name}", apply)

    def _apply(self, p: Any, ops: list) -> None:
        if self.mode == "stream":
            for entry in ops:
                p.xadd(self.key, entry)
        elif self.increment:
            for field, value in ops:
                if isinstance(value, float):
                    p.hincrbyfloat(self.key, field, value)
                else:
                    p.hincrby(self.key, field, value)
        elif ops:
            p.hset(self.key, mapping=dict(ops))

    def abort(self, name: str) -> None:
        def drop(r: Any) -> None:
            with r.pipeline(transaction=True) as p:
                p.delete(self.staged_key(name))
                p.srem(self.prepared_set, name)
                p.execute()

        self._io(f"aborting {name}", drop)

    def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            client.close()


def _safe(url: str) -> str:
    """The URL without a password."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    creds, _, host = rest.rpartition("@")
    user = creds.partition(":")[0]
    return f"{scheme}://{user + '@' if user else ''}{host}"
