"""The Bytewax word count of ``benchmarks.bench_peers``: a plain Bytewax 0.21.1 file, run unmodified by
Bytewax's engine (``bytewax.testing.run_main``) and by Gale's (``gale.bytewax.run_main``).

``BENCH_SENTENCES`` sentences of 10 words over a vocabulary of that many words + 8, built at import
(before any clock starts), in batches of 1,000 → ``flat_map`` (split) → ``key_on`` → ``stateful_map``
(a running count per word, every update emitted) → a sink counting what it is given (``seen``).
"""

import os

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.testing import TestingSource

n = int(os.environ.get("BENCH_SENTENCES", "100000"))
vocab = n + 8
data = [" ".join(f"w{(k + j) % vocab}" for j in range(10)) for k in range(n)]
seen = [0]


class _Part(StatelessSinkPartition):
    def write_batch(self, items):
        seen[0] += len(items)


class CountingSink(DynamicSink):
    def build(self, step_id, worker_index, worker_count):
        return _Part()


def count(state, word):
    state = (state or 0) + 1
    return state, state


flow = Dataflow("peers")
s = op.input("in", flow, TestingSource(data, batch_size=1000))
words = op.flat_map("split", s, str.split)
keyed = op.key_on("key", words, lambda w: w)
counted = op.stateful_map("count", keyed, count)
op.output("out", counted, CountingSink())
