"""The PostgreSQL sink: rows upserted (or deltas added, or rows appended) in one transaction per
checkpoint and task (``psycopg`` 3). How a record maps to a row: :mod:`gale.worker.sinks.rows`.

::

    builder.set_bolt("to-pg", PostgresSink, 2, kwargs={
        "url": "postgresql://user@db:5432/app", "table": "word_counts", "key": ["word"]}
    ).fields_grouping("count", ["word"])

Two ways to commit with the checkpoint, chosen per server (``two_phase="auto"``):

* **two-phase** (the server allows prepared transactions: ``max_prepared_transactions > 0``): at
  PREPARE the rows are written in a transaction that ends with ``PREPARE TRANSACTION
  'gale:<topology>:<component>:<task>:<txid>'`` (durable, invisible, holding its row locks); COMMIT
  is ``COMMIT PREPARED``, an abandoned checkpoint ``ROLLBACK PREPARED``. A restarted task finds its
  own in ``pg_prepared_xacts``.
* **staged** (``max_prepared_transactions = 0``, PostgreSQL's default): at PREPARE the rows go to a
  staging table (``<table>__gale_staged``, the table's columns and a ``gale_txn`` column) in one
  committed transaction, after a trial write to the table that is rolled back (so a row the table
  refuses fails PREPARE, not COMMIT). COMMIT is one transaction: the staged rows into the table,
  the task's marker in ``gale_sink_applied`` (``task`` → the last applied txid) and the staged
  copy deleted (``gale_sink_prepared`` lists the staged transactions and their columns); a marker at or past the txid means it was applied before: a repeat changes nothing.

Both fail a checkpoint with the server's error and address (the password left out) when the server
cannot be reached, and with the row's key when the table refuses a row (a constraint, a type) —
nothing of the checkpoint is committed — unless ``dead_letters=True``: then such rows go to the
sink's ``error`` stream and the rest is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gale.errors import ConfigError
from gale.topology.sink import SinkError, TransactionalSink
from gale.worker.sinks.rows import RowBatch, RowError, RowSpec

APPLIED_TABLE = "gale_sink_applied"
PREPARED_TABLE = "gale_sink_prepared"
STAGED_SUFFIX = "__gale_staged"
TWO_PHASE = ("auto", True, False)


def safe_url(url: str) -> str:
    """The server's address without its password, for messages."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(url)
    except Exception:  # noqa: BLE001 - an unparsable URL: name what little is safe
        return url.split("@")[-1]
    return f"postgresql://{info.get('user', '')}@{info.get('host', '')}:{info.get('port', 5432)}/{info.get('dbname', '')}"


class PostgresSink(TransactionalSink):
    """See the module docstring. ``url``: a libpq URL or conninfo; ``table``: ``name`` or
    ``schema.name``; ``key``/``deltas``/``columns``: the row mapping; ``two_phase``: ``"auto"``,
    True (prepared transactions; fails if the server has none) or False (staged); ``create``: the
    table's column definitions, to make it when it is missing (``"word text PRIMARY KEY, count
    bigint NOT NULL"``)."""

    def __init__(self, url: str, table: str, key: Sequence[str] = (), deltas: Sequence[str] = (),
                 columns: Sequence[str] | None = None, two_phase: Any = "auto", guarantee: str | None = None,
                 dead_letters: bool = False, create: str | None = None):
        super().__init__(guarantee=guarantee, dead_letters=dead_letters)
        if not isinstance(url, str) or not url:
            raise ConfigError(f"PostgresSink url must be a PostgreSQL URL, got {url!r}")
        if not isinstance(table, str) or not table or len(table.split(".")) > 2:
            raise ConfigError(f"PostgresSink table must be 'name' or 'schema.name', got {table!r}")
        if two_phase not in TWO_PHASE:
            raise ConfigError(f"PostgresSink two_phase must be 'auto', True or False, got {two_phase!r}")
        if create is not None and (not isinstance(create, str) or not create.strip()):
            raise ConfigError(f"PostgresSink create must be the table's column definitions, got {create!r}")
        self.url, self.table, self.two_phase, self.create = url, table, two_phase, create
        self.spec = RowSpec(key, deltas, columns, where=f"PostgresSink table {table!r}")

    def open_store(self) -> PostgresStore:
        return PostgresStore(self.url, self.table, self.spec, self.sink_name, self.two_phase, self.create)


class PostgresStore:
    """One task's connection and transactions (``gale.topology.sink.SinkStore``)."""

    def __init__(self, url: str, table: str, spec: RowSpec, name: Any, two_phase: Any = "auto",
                 create: str | None = None):
        from psycopg import sql

        self.url, self.spec, self.name, self.two_phase_option = url, spec, name, two_phase
        self.where = f"PostgreSQL sink {name.component!r} at {safe_url(url)}"
        self.table = sql.Identifier(*table.split("."))
        parts = table.split(".")
        self.staged = sql.Identifier(*parts[:-1], parts[-1] + STAGED_SUFFIX)
        self.conn: Any = None
        self.two_phase: bool | None = None
        self._statements: dict[tuple, Any] = {}
        self._staging_ready = False
        self.create = create

    # ------------------------------------------------------------------ connection

    def _connect(self) -> Any:
        if self.conn is not None and not self.conn.closed:
            return self.conn
        import psycopg

        try:
            self.conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
            if self.two_phase is None:
                allowed = int(self.conn.execute("SHOW max_prepared_transactions").fetchone()[0])
                if self.two_phase_option is True and not allowed:
                    raise SinkError(f"{self.where}: two_phase=True, but the server allows no prepared transactions "
                                    "(max_prepared_transactions = 0): raise it, or use two_phase='auto'")
                self.two_phase = bool(allowed) if self.two_phase_option == "auto" else bool(self.two_phase_option)
            if self.create:
                from psycopg import sql

                self.conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(self.table,
                                                                                    sql.SQL(self.create)))
            if not self.two_phase:
                self._markers()
        except psycopg.Error as exc:
            self._drop()
            raise SinkError(f"{self.where}: {_message(exc)}") from None
        return self.conn

    def _drop(self) -> None:
        conn, self.conn = self.conn, None
        self._staging_ready = False
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a broken connection
                pass

    def _run(self, what: str, fn: Any) -> Any:
        """``fn(conn)`` in an explicit transaction block the caller ends; a connection error drops
        the connection (the next call reconnects) and raises :class:`SinkError` naming the server."""
        import psycopg

        conn = self._connect()
        try:
            return fn(conn)
        except SinkError:
            self._rollback(conn)
            raise
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError) or conn.closed or conn.broken:
                self._drop()
            else:
                self._rollback(conn)
            raise SinkError(f"{self.where}: {what}: {_message(exc)}") from None

    def _rollback(self, conn: Any) -> None:
        try:
            if conn.info.transaction_status != 0:  # not idle: end the open block
                conn.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - the connection is gone: reconnect next time
            self._drop()

    def _markers(self) -> None:
        self.conn.execute(f"CREATE TABLE IF NOT EXISTS {APPLIED_TABLE} (task text PRIMARY KEY, txid bigint NOT NULL)")
        self.conn.execute(f"CREATE TABLE IF NOT EXISTS {PREPARED_TABLE} (txn text PRIMARY KEY, columns text[] NOT NULL)")

    # ------------------------------------------------------------------ SinkStore

    def new_batch(self) -> RowBatch:
        return RowBatch(self.spec)

    def prepared(self) -> list[str]:
        prefix = self.name.component_prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"

        def read(conn: Any) -> list[str]:
            if self.two_phase:
                rows = conn.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
                                    "AND gid LIKE %s", (prefix,)).fetchall()
            else:
                rows = conn.execute(f"SELECT txn FROM {PREPARED_TABLE} WHERE txn LIKE %s", (prefix,)).fetchall()
            return [r[0] for r in rows]

        return self._run("reading prepared transactions", read)

    def prepare(self, name: str, txid: int, batch: RowBatch, refused: Any) -> int:
        from psycopg import sql

        def stage(conn: Any) -> int:
            conn.execute("BEGIN")
            written = self._write(conn, self.table, batch, refused, upsert=True)
            if self.two_phase:
                conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(name)))
                return written
            # staged: the trial write above checked the rows against the table; undo it, keep a copy
            conn.execute("ROLLBACK")
            self._ensure_staging(conn)
            conn.execute("BEGIN")
            conn.execute(sql.SQL("DELETE FROM {} WHERE gale_txn = %s").format(self.staged), (name,))
            self._write(conn, self.staged, batch, None, upsert=False, txn=name, skip=self._refused_rows)
            conn.execute(f"INSERT INTO {PREPARED_TABLE} (txn, columns) VALUES (%s, %s) ON CONFLICT (txn) "
                         "DO UPDATE SET columns = EXCLUDED.columns", (name, list(batch.columns or ())))
            conn.execute("COMMIT")
            return written

        self._refused_rows: set[int] = set()
        return self._run(f"preparing checkpoint {txid}", stage)

    def commit(self, name: str) -> None:
        from psycopg import sql

        def two_phase(conn: Any) -> None:
            _end_prepared(conn, "COMMIT PREPARED", name)

        def staged(conn: Any) -> None:
            task, _, txid = name.rpartition(":")
            conn.execute("BEGIN")
            row = conn.execute(f"SELECT txid FROM {APPLIED_TABLE} WHERE task = %s FOR UPDATE", (task,)).fetchone()
            if row is None or row[0] < int(txid):
                self._ensure_staging(conn)
                row = conn.execute(f"SELECT columns FROM {PREPARED_TABLE} WHERE txn = %s", (name,)).fetchone()
                cols = list(row[0]) if row is not None else []
                if cols:
                    select = sql.SQL("SELECT {} FROM {} WHERE gale_txn = %s").format(
                        sql.SQL(", ").join(map(sql.Identifier, cols)), self.staged)
                    conn.execute(self._insert(self.table, cols, True, select), (name,))
                conn.execute(f"INSERT INTO {APPLIED_TABLE} (task, txid) VALUES (%s, %s) ON CONFLICT (task) "
                             "DO UPDATE SET txid = EXCLUDED.txid", (task, int(txid)))
            conn.execute(sql.SQL("DELETE FROM {} WHERE gale_txn = %s").format(self.staged), (name,))
            conn.execute(f"DELETE FROM {PREPARED_TABLE} WHERE txn = %s", (name,))
            conn.execute("COMMIT")

        self._run(f"committing {name}", two_phase if self.two_phase else staged)

    def abort(self, name: str) -> None:
        from psycopg import sql

        def two_phase(conn: Any) -> None:
            _end_prepared(conn, "ROLLBACK PREPARED", name)

        def staged(conn: Any) -> None:
            conn.execute("BEGIN")
            if self._staging_exists(conn):
                conn.execute(sql.SQL("DELETE FROM {} WHERE gale_txn = %s").format(self.staged), (name,))
            conn.execute(f"DELETE FROM {PREPARED_TABLE} WHERE txn = %s", (name,))
            conn.execute("COMMIT")

        self._run(f"aborting {name}", two_phase if self.two_phase else staged)

    def close(self) -> None:
        self._drop()

    # ------------------------------------------------------------------ SQL

    def _insert(self, table: Any, cols: Sequence[str], upsert: bool, source: Any = None, extra: Sequence[str] = ()):
        from psycopg import sql

        key = (id(table), tuple(cols), upsert, source is None, tuple(extra))
        if source is None and key in self._statements:
            return self._statements[key]
        all_cols = list(cols) + list(extra)
        names = sql.SQL(", ").join(map(sql.Identifier, all_cols))
        values = source if source is not None else sql.SQL("VALUES ({})").format(
            sql.SQL(", ").join(sql.Placeholder() * len(all_cols)))
        stmt = sql.SQL("INSERT INTO {} ({}) {}").format(table, names, values)
        if upsert and self.spec.key:
            updates = [sql.SQL("{c} = {t}.{c} + EXCLUDED.{c}").format(c=sql.Identifier(c), t=table)
                       if c in self.spec.deltas else sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c))
                       for c in cols if c not in self.spec.key]
            conflict = sql.SQL(" ON CONFLICT ({}) ").format(sql.SQL(", ").join(map(sql.Identifier, self.spec.key)))
            stmt += conflict + (sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(updates) if updates
                                else sql.SQL("DO NOTHING"))
        if source is None:
            self._statements[key] = stmt
        return stmt

    def _write(self, conn: Any, table: Any, batch: RowBatch, refused: Any, upsert: bool, txn: str | None = None,
               skip: set[int] | None = None) -> int:
        """The batch's rows into ``table`` inside the open block; a row the table refuses raises
        naming its key, or (``refused``) goes to it and is left out."""
        import psycopg

        cols = batch.columns or ()
        extra = ("gale_txn",) if txn is not None else ()
        stmt = self._insert(table, cols, upsert and table is self.table, extra=extra)
        rows = [r + (txn,) if txn is not None else r for i, r in enumerate(batch.rows())
                if not skip or i not in skip]
        if not rows:
            return 0
        conn.execute("SAVEPOINT gale_batch")
        try:
            with conn.cursor() as cur:
                cur.executemany(stmt, rows)
            return len(rows)
        except (psycopg.errors.IntegrityError, psycopg.errors.DataError, psycopg.errors.ProgrammingError) as exc:
            if isinstance(exc, psycopg.errors.UndefinedTable) or isinstance(exc, psycopg.errors.UndefinedColumn):
                raise SinkError(f"{self.where}: {_message(exc)}") from None
            conn.execute("ROLLBACK TO SAVEPOINT gale_batch")
        # one by one, to name (or divert) the rows the table refuses
        written = 0
        for i, row in enumerate(batch.rows()):
            conn.execute("SAVEPOINT gale_row")
            try:
                conn.execute(stmt, row + (txn,) if txn is not None else row)
                written += 1
            except (psycopg.errors.IntegrityError, psycopg.errors.DataError, psycopg.errors.ProgrammingError) as exc:
                conn.execute("ROLLBACK TO SAVEPOINT gale_row")
                key = batch.key_of_row(row)
                reason = _message(exc)
                if refused is None:
                    raise SinkError(f"{self.where}: the table refused the row with key {key!r} "
                                    f"({batch.record_of(row)!r}): {reason}; nothing of this checkpoint was "
                                    "committed (dead_letters=True sends such rows to the error stream)") from None
                refused(batch.record_of(row), key, reason)
                self._refused_rows.add(i)
        return written

    def _staging_exists(self, conn: Any) -> bool:
        if self._staging_ready:
            return True
        return conn.execute("SELECT to_regclass(%s)", (self._staged_text(),)).fetchone()[0] is not None

    def _staged_text(self) -> str:
        return self.staged.as_string(self.conn)

    def _ensure_staging(self, conn: Any) -> None:
        from psycopg import sql

        if self._staging_ready:
            return
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (LIKE {} INCLUDING DEFAULTS)").format(
            self.staged, self.table))
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS gale_txn text").format(self.staged))
        conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (gale_txn)").format(
            sql.Identifier(self.staged.as_string(conn).replace('"', "").split(".")[-1] + "_txn"), self.staged))
        self._staging_ready = True


def _end_prepared(conn: Any, command: str, name: str) -> None:
    """``COMMIT PREPARED`` / ``ROLLBACK PREPARED`` of ``name`` if it is still prepared (idempotent)."""
    from psycopg import sql

    if conn.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = %s AND database = current_database()",
                    (name,)).fetchone():
        conn.execute(sql.SQL(command + " {}").format(sql.Literal(name)))


def _message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


__all__ = ["PostgresSink", "PostgresStore", "RowError", "safe_url"]
