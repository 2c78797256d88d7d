"""Word count into PostgreSQL, exactly once: sentences → split → a stateful count → a PostgreSQL sink
whose rows commit with the checkpoint (docs/sinks.md).

The table: ``count`` is upserted by ``word`` (the last count of each checkpoint) and ``seen`` adds 1
per count the sink received — so ``seen = count`` on every row says that every count was written
once: none lost, none twice (docs/sinks.md, "How a record maps to a row")::

    CREATE TABLE word_counts (word text PRIMARY KEY, count bigint NOT NULL, seen bigint NOT NULL);

On a cluster, with the state in Redis and the counts in PostgreSQL — kill -9 any worker and the
table's counts stay exact (no count is ever ahead of or behind what the topology committed)::

    nimbus submit examples/word_count_to_postgres.py --name wc-pg \\
        -c postgres.url=postgresql://gale@127.0.0.1:5432/postgres \\
        -c topology.state.provider=redis -c topology.state.redis.url=redis://127.0.0.1:6379/0

``nimbus dev-cluster --redis --postgres`` starts both servers and prints the lines to pass;
``make demo-state`` runs this topology on one and kills the worker holding the counts.

Keys (``-c key=value``): ``postgres.url``, ``postgres.table`` (default ``word_counts``, made if missing: the sink's ``create``),
``wordcount.sentences.per.task`` (0: forever).
"""

from __future__ import annotations

from stateful_word_count import StatefulWordCount
from word_count import RandomSentenceSpout, SplitSentence

from gale import TopologyBuilder
from gale.sinks import PostgresSink

TABLE = "word_counts"


COLUMNS = "word text PRIMARY KEY, count bigint NOT NULL, seen bigint NOT NULL"


class WordCountsToPostgres(PostgresSink):
    def records(self, tup):
        return ({"word": tup["word"], "count": tup["count"], "seen": 1},)


def topology(conf=None):
    conf = dict(conf or {})
    limit = int(conf.get("wordcount.sentences.per.task", 0))
    builder = TopologyBuilder()
    builder.set_spout("sentences", RandomSentenceSpout, 1, kwargs={"limit": limit})
    builder.set_bolt("split", SplitSentence, 2).shuffle_grouping("sentences")
    builder.set_bolt("count", StatefulWordCount, 2).fields_grouping("split", ["word"])
    builder.set_bolt("postgres", WordCountsToPostgres, 2, kwargs={
        "url": conf.get("postgres.url", "postgresql://gale@127.0.0.1:5432/postgres"),
        "table": conf.get("postgres.table", TABLE), "key": ["word"], "deltas": ["seen"],
        "guarantee": "exactly-once", "create": COLUMNS,
    }).fields_grouping("count", ["word"])
    return builder.create_topology(name="wordcount-to-postgres",
                                   conf={"topology.max.spout.pending": 5000,
                                         "topology.state.guarantee": "exactly-once"})
