"""Sessions per user: clicks closer than 30 s (event time) form one session.

ClickSpout (simulated users browsing, each click with its event timestamp, a little out of order) →
sessions (a windowed bolt with session windows keyed by user; fields grouping on user, so each user's
clicks meet in one task) → ``[user, start, end, clicks, pages]`` per closed session. A late click
that lands in a session already reported (within the 60 s allowed lateness) makes the session fire
again with ``update`` set::

    nimbus local examples/session_windows.py --duration 60

The gap (``sessions.gap.secs``, 30) and the number of users (``sessions.users``, 20) can be set with
``-c``. Event time runs ten times faster than the clock here, so sessions close within seconds.
"""

from __future__ import annotations

import random
import time

from gale import Duration, ReliableSpout, TopologyBuilder, WindowedBolt

PAGES = ["home", "search", "product", "cart", "checkout", "help"]


class ClickSpout(ReliableSpout):
    """Each user clicks, pauses a few seconds (sometimes a minute: a new session), clicks again; event
    time advances 10x faster than the clock; some clicks are emitted up to 2 s late."""

    def __init__(self, users=20, speedup=10.0):
        super().__init__()
        self.users = users
        self.speedup = speedup

    def declare_output_fields(self, d):
        d.declare(["user", "page", "ts"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.rng = random.Random(context.task_id)
        self.t0_wall = time.time()
        self.t0_event = int(self.t0_wall * 1000)
        self.next_click = {f"user{u}": self.t0_event + self.rng.randint(0, 20_000) for u in range(self.users)}

    def event_now(self):
        return self.t0_event + int((time.time() - self.t0_wall) * 1000 * self.speedup)

    def next_message(self):
        now = self.event_now()
        user, due = min(self.next_click.items(), key=lambda kv: kv[1])
        if due > now:
            return
        pause = self.rng.choice([1_000, 3_000, 8_000, 15_000, 90_000])
        self.next_click[user] = due + pause
        jitter = self.rng.choice([0, 0, 0, 500, 2_000])  # out of order by up to 2 s
        self.emit([user, self.rng.choice(PAGES), due - jitter])


class Sessions(WindowedBolt):
    def __init__(self, gap_secs=30):
        super().__init__()
        (self.with_session_window(Duration.seconds(gap_secs), key_field="user")
             .with_timestamp_field("ts")
             .with_lag(Duration.seconds(2))
             .with_allowed_lateness(Duration.seconds(60))
             .with_watermark_interval(Duration.millis(200)))

    def declare_output_fields(self, d):
        d.declare(["user", "start", "end", "clicks", "pages", "update"])

    def execute(self, window):
        pages = sorted({t["page"] for t in window.get()})
        self.collector.emit([window.key, window.start, window.end, len(window.get()), pages, window.is_update])


def topology(conf=None):
    conf = dict(conf or {})
    gap = conf.get("sessions.gap.secs", 30)
    builder = TopologyBuilder()
    builder.set_spout("clicks", ClickSpout, 1, kwargs={"users": conf.get("sessions.users", 20)})
    builder.set_bolt("sessions", Sessions, 2, kwargs={"gap_secs": gap}).fields_grouping("clicks", ["user"])
    # a session lasts as long as its user keeps clicking: give its first clicks time to stay unacked
    return builder.create_topology(name="sessions", conf={"topology.message.timeout.secs": 300})
