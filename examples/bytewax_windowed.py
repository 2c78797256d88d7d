"""Tumbling windows over event time as a plain Bytewax 0.21.1 dataflow — Gale runs it unmodified.

::

    nimbus local examples/bytewax_windowed.py
    python -m gale.bytewax examples/bytewax_windowed.py -r /tmp/windows-state -s 1   # with recovery

Sensor readings carry their own timestamps; ``fold_window`` keeps the mean of each sensor's readings
per 10-second window of event time (``EventClock``, waiting 1 s of system time for late readings),
and every window is printed when it closes — at the latest when the input ends.
"""

from datetime import datetime, timedelta, timezone

import bytewax.operators as op
import bytewax.operators.windowing as win
from bytewax.connectors.stdio import StdOutSink
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSource

START = datetime(2024, 1, 1, tzinfo=timezone.utc)
READINGS = [
    {"sensor": f"s{i % 3}", "at": START + timedelta(seconds=2 * i), "value": float(i % 7)}
    for i in range(60)
]

flow = Dataflow("windowed")
readings = op.input("readings", flow, TestingSource(READINGS, batch_size=10))
keyed = op.key_on("by_sensor", readings, lambda r: r["sensor"])
clock = win.EventClock(lambda r: r["at"], wait_for_system_duration=timedelta(seconds=1))
windower = win.TumblingWindower(length=timedelta(seconds=10), align_to=START)
sums = win.fold_window(
    "mean", keyed, clock, windower,
    builder=lambda: (0.0, 0),
    folder=lambda acc, r: (acc[0] + r["value"], acc[1] + 1),
    merger=lambda a, b: (a[0] + b[0], a[1] + b[1]),
)
means = op.map("format", sums.down, lambda kv: f"{kv[0]} window {kv[1][0]}: mean {kv[1][1][0] / kv[1][1][1]:.2f}")
op.output("out", means, StdOutSink())
