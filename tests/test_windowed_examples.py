"""The window examples: top words by event time from a real Kafka broker, and sessions."""

from __future__ import annotations

import random
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from gale.worker.local import LocalTopology, local_conf
from tests.brokers import kafka_broker  # noqa: F401
from tests.waiting import until

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import session_windows  # noqa: E402
import windowed_top_words  # noqa: E402

pytestmark = pytest.mark.timeout(180)

WORDS = "the quick brown fox jumps over lazy dog and cat runs".split()


def run_captured(topo, conf):
    emitted: dict = defaultdict(list)
    running = LocalTopology(topo.name, topo, local_conf(topo, conf),
                            capture=lambda c, s, v: emitted[(c, s)].append(list(v)))
    return running, emitted


def test_windowed_top_words_by_kafka_event_time_equal_the_reference(kafka_broker, zk, zk_chroot, conf):
    rng = random.Random(11)
    base = 1_700_000_000_000
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))) for _ in range(400)]
    timestamps = [base + i * 150 for i in range(len(sentences))]  # 60 s of event time
    kafka_broker.create_topic("timed", 1)
    kafka_broker.produce("timed", sentences, partitions=1, timestamps=timestamps)
    cluster_conf = conf
    conf = {
        "kafka.bootstrap.servers": kafka_broker.bootstrap, "kafka.topic": "timed", "kafka.group": "top",
        "kafka.zookeeper.root": zk_chroot, "kafka.commit.interval.ms": 200,
        "top_words.window.secs": 20, "top_words.slide.secs": 5, "top_words.lag.secs": 1, "top_words.idle.secs": 1,
    }
    topo = windowed_top_words.topology(conf)
    running, emitted = run_captured(topo, {**cluster_conf, **conf})
    try:
        # a sentence is acked once every window holding its words has fired and closed
        until(lambda: running.component_stats()["sentences"]["acked"] >= len(sentences), 120,
              f"{len(sentences)} sentences acked")
        stats = running.component_stats()
        assert running.errors == {}
    finally:
        running.kill()
    assert stats["sentences"]["failed"] == 0 and stats["top"]["extra"]["late_tuples"] == 0
    got = {(s, e): top for s, e, top in emitted[("top", "default")]}
    assert len(got) == len(emitted[("top", "default")])  # each window once
    starts = {s for ts in timestamps for s in range(ts - ts % 5000 - 15000, ts + 1, 5000) if s + 20000 > ts}
    expected = {}
    for s in sorted(starts):
        words = [{"word": w.lower()} for sent, ts in zip(sentences, timestamps) if s <= ts < s + 20000
                 for w in sent.split()]
        expected[(s, s + 20000)] = windowed_top_words.top_words(words)
    assert got == expected


def test_session_example_reports_sessions_per_user():
    topo = session_windows.topology({"sessions.gap.secs": 5, "sessions.users": 3})
    spec = topo.definition.components["sessions"]
    assert spec.conf["topology.bolts.window.session.gap.ms"] == 5000
    running, emitted = run_captured(topo, {})
    try:
        until(lambda: len(emitted[("sessions", "default")]) >= 6, 60, "six sessions reported")
        assert running.errors == {}
    finally:
        running.kill()
    for user, start, end, clicks, pages, update in emitted[("sessions", "default")]:
        assert user in {"user0", "user1", "user2"} and clicks >= 1 and end - start >= 5000
        assert set(pages) <= set(session_windows.PAGES)
