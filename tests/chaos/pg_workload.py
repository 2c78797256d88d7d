"""The chaos suite's third workload: Kafka → keyed count (exactly-once state in Redis) → a
PostgreSQL sink (``postgres-eo``).

Everything of :class:`~tests.chaos.eo_workload.KafkaEOWorkload` (the producer, the broker, Redis,
the consistent-cut watcher, convergence), plus a PostgreSQL server (gale.pgserver, prepared
transactions allowed, on the veth host address so workers on either node reach it; the
``postgres_kill`` fault kills it) and the topology ``tests/chaos_topology/eo_pg.py``. The check
compares the table with the topic: per key, ``n`` (1 added per tuple the sink committed) must equal
the topic's count — lost 0, over-counted 0 — and so must ``count`` (the last count upserted); no
prepared transaction may be left over.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gale.pgserver import PostgresServer
from tests.chaos.cluster import TOPOLOGY_NAME, log
from tests.chaos.eo_workload import ROOT, KafkaEOWorkload, check_counts
from tests.chaos.schedule import PG_KINDS, Step, bounded_pg_plan
from tests.chaos_topology.eo_pg import TABLE

if TYPE_CHECKING:
    from tests.chaos.cluster import ChaosCluster
    from tests.chaos.run import RunResult


class PostgresEOWorkload(KafkaEOWorkload):
    """Kafka → keyed count → PostgreSQL sink, exactly once (``postgres-eo``)."""

    name = "postgres-eo"
    topology = ROOT / "tests" / "chaos_topology" / "eo_pg.py"

    def __init__(self, rate: float = 100.0):
        super().__init__(rate)
        self.pg: PostgresServer | None = None

    def kinds(self, zookeepers: int) -> tuple[str, ...]:
        super().kinds(zookeepers)
        return PG_KINDS

    def bounded_plan(self, zookeepers: int) -> list[Step]:
        self.kinds(zookeepers)
        return bounded_pg_plan()

    def start_services(self, c: ChaosCluster) -> None:
        super().start_services(c)
        self.pg = PostgresServer(host=c.host)
        self.pg.start()
        c.postgres = self.pg
        with self.pg.connect(autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {TABLE} (key text PRIMARY KEY, count bigint NOT NULL, n bigint NOT NULL)")
        log(f"PostgreSQL {self.pg.url} (table {TABLE})")

    def submit_conf(self, c: ChaosCluster) -> dict[str, Any]:
        return {**super().submit_conf(c), "chaos.pg.url": self.pg.url}

    def table(self) -> dict[str, tuple[int, int]]:
        with self.pg.connect(autocommit=True) as conn:
            return {k: (count, n) for k, count, n in conn.execute(f"SELECT key, count, n FROM {TABLE}")}

    def check(self, result: RunResult) -> None:
        super().check(result)  # the state's counts, the cuts (and the topic read back)
        state = (result.lost, result.over_counted)
        expected = self.expected()
        rows = self.table()
        verdict = check_counts(expected, {k: n for k, (_, n) in rows.items()})
        counts = check_counts(expected, {k: count for k, (count, _) in rows.items()})
        with self.pg.connect(autocommit=True) as conn:
            left = [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s",
                                               (f"gale:{TOPOLOGY_NAME}:%",))]
        result.n = verdict.expected_total
        result.lost = verdict.lost + counts.lost
        result.over_counted = verdict.over_counted + counts.over_counted
        result.lost_keys = {**counts.lost_keys, **verdict.lost_keys}
        result.over_counted_keys = {**counts.over_counted_keys, **verdict.over_counted_keys}
        result.unexpected += len(verdict.unexpected_keys) + len(verdict.malformed) + len(left)
        log(f"PostgreSQL: expected {verdict.expected_total}, committed n {verdict.committed_total}, lost "
            f"{verdict.lost} {verdict.lost_keys}, over-counted {verdict.over_counted} {verdict.over_counted_keys}; "
            f"count column lost {counts.lost} over {counts.over_counted}; prepared left {left}; "
            f"state lost/over {state}")
        if state != (0, 0):
            result.lost += state[0]
            result.over_counted += state[1]

    def progress(self) -> int:
        """Tuples committed in PostgreSQL (the last value while it is down)."""
        try:
            self._last_progress = sum(n for _, n in self.table().values())
        except Exception:  # noqa: BLE001 - PostgreSQL down (its fault): no new observation
            pass
        return self._last_progress

    def stop_services(self) -> None:
        try:
            super().stop_services()
        finally:
            if self.pg is not None:
                self.pg.cleanup()


__all__ = ["PostgresEOWorkload"]
