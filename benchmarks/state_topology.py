"""``bench_state``'s word count as a file nimbus can submit, stateless or stateful by configuration.

``nimbus submit benchmarks/state_topology.py --bundle-dir examples --name s -c bench.stateful=true -c
topology.state.guarantee=exactly-once -c topology.state.provider=redis -c topology.state.redis.url=...``

The spout → split ×4 (shuffle) → count ×4 (fields on word) of :mod:`benchmarks.bench_state`: the
count is the shipped word count's ``WordCount`` (a dict) or, with ``bench.stateful`` true,
``StatefulWordCount`` (managed state). Everything else is the same, so the two rates compare the
cost of state alone. Submit it with ``--bundle-dir examples``: its components are the examples' (this
file only builds the topology). ``bench.pending`` sets ``topology.max.spout.pending`` (default 20,000, as
``bench_state``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import stateful_word_count  # noqa: E402
import word_count  # noqa: E402

from gale import TopologyBuilder  # noqa: E402


def topology(conf=None):
    conf = conf or {}
    stateful = str(conf.get("bench.stateful", "false")).strip().lower() in ("1", "true", "yes")
    b = TopologyBuilder()
    b.set_spout("sentences", word_count.RandomSentenceSpout, 1, kwargs={"seed": 1})
    b.set_bolt("split", word_count.SplitSentence, 4).shuffle_grouping("sentences")
    count = stateful_word_count.StatefulWordCount if stateful else word_count.WordCount
    b.set_bolt("count", count, 4).fields_grouping("split", ["word"])
    return b.create_topology("state-bench", {"topology.max.spout.pending": int(conf.get("bench.pending", 20_000))})
