"""A Kafka spout over a backlog and a slow sink, for the UI's lag chart (tests/test_ui.py): the
spout is behind on every partition for a while."""

import time

from gale import Bolt, TopologyBuilder
from gale.connectors import KafkaSpout


class SlowSink(Bolt):
    def execute(self, tup):
        time.sleep(0.005)  # workload pacing: at most 200 records a second, so a backlog lasts
        self.collector.ack(tup)


def topology(conf=None):
    conf = dict(conf or {})
    kafka = {k: v for k, v in conf.items() if k.startswith("kafka.")}
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, 1, kwargs={"fields": ["partition", "offset", "value"]})
    b.set_bolt("sink", SlowSink, 1).shuffle_grouping("kafka")
    return b.create_topology(conf={"topology.workers": 1, "topology.max.spout.pending": 20, **kafka})
