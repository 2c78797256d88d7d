"""Top 10 words per sliding 60 s window every 10 s, by event time, from Kafka.

KafkaSpout (each record a sentence; its Kafka timestamp is the event time) → split (shuffle; every
word carries its sentence's timestamp) → top (a windowed bolt, global: 60 s windows every 10 s,
tuples up to 5 s out of order, later ones on the ``late`` stream) → ``[start, end, top]`` with ``top``
the 10 most frequent words of the window as ``[word, count]``, by count then word::

    nimbus local examples/windowed_top_words.py --duration 120 \\
        -c kafka.bootstrap.servers=127.0.0.1:9092 -c kafka.topic=sentences -c kafka.group=top-words

Window, slide and lag (seconds) come from ``top_words.window.secs`` (60), ``top_words.slide.secs`` (10)
and ``top_words.lag.secs`` (5); ``top_words.idle.secs`` (10) is how long the sentences may pause before
event time moves on without them (docs/windows.md). Other ``kafka.*`` keys (docs/kafka.md) pass
through to the spout. Tuples stay in a window until it closes, so the message timeout is raised to
cover window + slide + lag + watermark interval.
"""

from __future__ import annotations

from collections import Counter

from gale import BasicBolt, ConfigError, Duration, TopologyBuilder, WindowedBolt
from gale.connectors import KafkaSpout, kafka_spout_settings


class SplitWithTime(BasicBolt):
    """A sentence and its timestamp → one ``[word, ts]`` per word (anchored, acked for you)."""

    def declare_output_fields(self, d):
        d.declare(["word", "ts"])

    def execute(self, tup):
        for word in tup["value"].split():
            self.collector.emit([word.lower(), tup["timestamp"]])


def top_words(tuples, n=10):
    """The ``n`` most frequent words as ``[word, count]``, by count (descending) then word."""
    counts = Counter(t["word"] for t in tuples)
    return [[w, c] for w, c in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))[:n]]


class TopWords(WindowedBolt):
    def __init__(self, window_secs=60, slide_secs=10, lag_secs=5, idle_secs=10):
        super().__init__()
        (self.with_window(Duration.seconds(window_secs), Duration.seconds(slide_secs))
             .with_timestamp_field("ts")
             .with_lag(Duration.seconds(lag_secs))
             .with_idle_timeout(Duration.seconds(idle_secs))
             .with_late_tuple_stream("late"))

    def declare_output_fields(self, d):
        d.declare(["start", "end", "top"])

    def execute(self, window):
        self.collector.emit([window.start, window.end, top_words(window.get())])


def _secs(conf, key, default):
    value = conf.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"invalid value for {key!r}: {value!r}; expected a number of seconds > 0")
    return value


def topology(conf=None):
    conf = dict(conf or {})
    kafka_conf = {k: v for k, v in conf.items() if k.startswith("kafka.") and k != "kafka.spout.parallelism"}
    kafka_spout_settings(kafka_conf)  # a missing or bad kafka.* key fails here, before anything runs
    window = _secs(conf, "top_words.window.secs", 60)
    slide = _secs(conf, "top_words.slide.secs", 10)
    lag = _secs(conf, "top_words.lag.secs", 5)
    idle = _secs(conf, "top_words.idle.secs", 10)
    builder = TopologyBuilder()
    builder.set_spout("sentences", KafkaSpout, conf.get("kafka.spout.parallelism", 1),
                      kwargs={"fields": ["value", "timestamp"]})
    builder.set_bolt("split", SplitWithTime, 2).shuffle_grouping("sentences")
    builder.set_bolt("top", TopWords, 1, kwargs={"window_secs": window, "slide_secs": slide, "lag_secs": lag,
                                                  "idle_secs": idle}).global_grouping("split")
    timeout = int(window + slide + lag + 1) + 30
    return builder.create_topology(
        name="windowed-top-words",
        conf={"topology.message.timeout.secs": max(30, timeout), "topology.max.spout.pending": 5000, **kafka_conf},
    )
