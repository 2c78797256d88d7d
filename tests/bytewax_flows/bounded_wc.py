"""A bounded Bytewax word count (unmodified Bytewax 0.21.1) for the cluster tests: lines → words →
count_final → one file per worker task in ``out_dir`` (``settings.json`` beside this file, which the
test writes into a copy of this directory: the code bundle)."""

import json
from pathlib import Path

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.testing import TestingSource

SETTINGS = json.loads((Path(__file__).parent / "settings.json").read_text())
WORDS = [f"w{i}" for i in range(17)]
LINES = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(5)) for i in range(SETTINGS["lines"])]


class _FilePart(StatelessSinkPartition):
    def __init__(self, path):
        self.path = path

    def write_batch(self, items):
        with open(self.path, "a") as f:
            for word, count in items:
                f.write(f"{word} {count}\n")


class FileSink(DynamicSink):
    def build(self, step_id, worker_index, worker_count):
        return _FilePart(Path(SETTINGS["out_dir"]) / f"part-{worker_index}.txt")


flow = Dataflow("bounded_wc")
lines = op.input("lines", flow, TestingSource(LINES, batch_size=50))
words = op.flat_map("split", lines, str.split)
counts = op.count_final("count", words, lambda w: w)
op.output("out", counts, FileSink())
