"""A Bytewax word count from Kafka (unmodified Bytewax 0.21.1; the source is a plain
``FixedPartitionedSource`` over kafka-python) for the exactly-once cluster test: each topic partition
a Bytewax partition whose snapshot is its next offset, a running count per word (``stateful_map``),
and a sink that drops the updates (the test reads the committed state). ``settings.json`` beside this
file names the broker and the topic."""

import json
from pathlib import Path

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from kafka import KafkaConsumer, TopicPartition

SETTINGS = json.loads((Path(__file__).parent / "settings.json").read_text())


class _TopicPartition(StatefulSourcePartition):
    def __init__(self, partition, offset):
        self.tp = TopicPartition(SETTINGS["topic"], partition)
        self.consumer = KafkaConsumer(bootstrap_servers=SETTINGS["bootstrap"], enable_auto_commit=False,
                                      group_id=None, max_poll_records=200)
        self.consumer.assign([self.tp])
        self.consumer.seek(self.tp, offset)
        self.offset = offset

    def next_batch(self):
        records = self.consumer.poll(timeout_ms=0).get(self.tp, [])
        if records:
            self.offset = records[-1].offset + 1
        return [r.value.decode() for r in records]

    def snapshot(self):
        return self.offset

    def close(self):
        self.consumer.close()


class KafkaPartitions(FixedPartitionedSource):
    def list_parts(self):
        return [str(p) for p in range(SETTINGS["partitions"])]

    def build_part(self, step_id, for_part, resume_state):
        return _TopicPartition(int(for_part), resume_state or 0)


class _Drop(StatelessSinkPartition):
    def write_batch(self, items):
        pass


class DropSink(DynamicSink):
    def build(self, step_id, worker_index, worker_count):
        return _Drop()


def count(state, _word):
    state = (state or 0) + 1
    return state, state


flow = Dataflow("kafka_wc")
words = op.input("words", flow, KafkaPartitions())
keyed = op.key_on("key", words, lambda w: w)
counts = op.stateful_map("count", keyed, count)
op.output("out", counts, DropSink())
