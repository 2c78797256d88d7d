"""Word count as a plain Bytewax 0.21.1 dataflow — no Gale import: Gale runs it as it is.

::

    nimbus local examples/bytewax_word_count.py                 # in one process, until the input ends
    python -m gale.bytewax examples/bytewax_word_count.py -w 2  # two tasks per step
    nimbus submit examples/bytewax_word_count.py --name wc -c topology.workers=2   # on a cluster

Lines → words → a count per word at the end of the input (``count_final``) → standard output. The
same file runs on Bytewax's own engine: ``python -m bytewax.run examples/bytewax_word_count.py``.
"""

import bytewax.operators as op
from bytewax.connectors.stdio import StdOutSink
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSource

LINES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]

flow = Dataflow("word_count")
lines = op.input("lines", flow, TestingSource(LINES * 100))
words = op.flat_map("split", lines, lambda line: line.lower().split())
counts = op.count_final("count", words, lambda word: word)
op.output("out", counts, StdOutSink())
