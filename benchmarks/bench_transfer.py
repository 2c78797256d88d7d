"""Cross-worker path micro-benchmark: what a tuple and an ack cost to cross workers, stage by stage.

Run: ``.venv/bin/python -m benchmarks.bench_transfer [--messages N] [--repeat R]``

In one process, with the real code of each stage (a Transfer that is not started, its outbox, the
batch sealer and opener, a ZeroMQ PUSH/PULL pair over loopback TCP, the BatchDecoder and the
runtime's ``deliver_many``/``receive_many`` on stub executors), for the word count's crossing
message — a one-word tuple with one anchor — and for a bolt's ACK. Prints ``name: value unit``
lines, microseconds per message, best of ``--repeat`` runs:

* ``transfer_{tuple,ack}_encode_us`` (executor thread: ``send_tuple``/``send_acker`` into the
  destination's outbox), ``transfer_{tuple,ack}_drain_us`` (sender thread: groups into a batch
  payload; drained after every batch of messages queued, as the sender keeps up in a worker), ``transfer_seal_open_us`` (HMAC both ends), ``transfer_zmq_us`` (send + receive),
  ``transfer_{tuple,ack}_decode_deliver_us`` (receiver thread: checks, objects, onto the queue);
* ``transfer_{tuple,ack}_crossing_us`` — their sum, and ``transfer_{tuple,ack}_local_us`` — the same
  message made and queued in the worker, as the collector's inlined paths do;
* ``transfer_tuple_crossing_vs_local`` — the ratio (issue 15 target 2's first half: at most 2).

The batch size is the worker's default (``topology.transfer.batch.size``, 1,000); tuples go to 10
tasks from 5 source tasks, as in the 2-worker word count.
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from collections import deque
from types import SimpleNamespace

import zmq

from gale.topology.tuple import Fields, Tuple, new_tracked
from gale.worker.batch_auth import Opener, ReplayGuard, Sealer
from gale.worker.runtime.acker import ACK
from gale.worker.runtime.executor import Executor
from gale.worker.runtime.runtime import WorkerRuntime
from gale.worker.transfer import Transfer
from gale.worker.wire_kinds import ACKER, TUPLE

WORDS = ["the", "cow", "jumped", "over", "moon", "an", "apple", "a", "day", "keeps", "doctor", "away"]
FIELDS = Fields(["word"], "split:default")
DEST = "127.0.0.1:1"
TUPLE_TASKS = list(range(20, 30))
ACKER_TASK = 40
SECRET = b"s" * 32


def _runtime(tasks: list[int]) -> tuple[WorkerRuntime, dict[int, deque]]:
    """The runtime's deliver_many and the executors' receive_many over stub state."""
    queues = {t: deque() for t in tasks}
    ex = SimpleNamespace(queues=queues, thread=SimpleNamespace(sleeping=False))
    ex.receive = Executor.receive.__get__(ex)
    ex.receive_many = Executor.receive_many.__get__(ex)
    rt = SimpleNamespace(_local={t: ex for t in tasks})
    rt.deliver = WorkerRuntime.deliver.__get__(rt)
    rt.deliver_many = WorkerRuntime.deliver_many.__get__(rt)
    return rt, queues


def _timed(fn) -> float:
    """CPU seconds of this process (ZeroMQ's I/O thread included) that ``fn`` took: other
    programs on the machine slow the wall clock, not this figure."""
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def measure(n: int, seed: int = 1) -> dict[str, float]:
    rng = random.Random(seed)
    tuples = [new_tracked([rng.choice(WORDS)], FIELDS, 5 + i % 5, rng.getrandbits(64), rng.getrandbits(64),
                          rng.getrandbits(63)) for i in range(n)]
    targets = [TUPLE_TASKS[i % len(TUPLE_TASKS)] for i in range(n)]
    acks = [(ACK, rng.getrandbits(64), rng.getrandbits(64), 0) for _ in range(n)]
    rt, queues = _runtime(TUPLE_TASKS + [ACKER_TASK])
    queue_list = list(queues.values())
    roles = {t: TUPLE for t in TUPLE_TASKS} | {ACKER_TASK: ACKER}
    transfer = Transfer(bind_host="127.0.0.1", port=1, secret=SECRET, deliver=rt.deliver,
                        deliver_many=rt.deliver_many, roles=roles,
                        fields_for=lambda c, s: FIELDS if (c, s) == ("split", "default") else None)
    transfer.set_roles(roles, {t: {("split", "default")} for t in TUPLE_TASKS})
    transfer.set_routes({t: DEST for t in roles})
    box = transfer.outboxes[DEST]
    sealer, opener = Sealer(SECRET), Opener(SECRET, "rx", ReplayGuard(0))
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push = ctx.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{port}")
    out: dict[str, float] = {}
    try:
        for kind, send, items in (("tuple", transfer.send_tuple, list(zip(targets, tuples))),
                                  ("ack", transfer.send_acker, [(ACKER_TASK, m) for m in acks])):
            payloads: list[bytes] = []

            def drain():
                while True:
                    payload, taken = box.drain(transfer.batch_size)
                    if not taken:
                        break
                    payloads.append(payload)
            # the sender drains while executors emit: a batch at a time, as in a worker (a queue of
            # all n messages drained at the end would be read back from cold memory)
            out[f"{kind}_encode"] = out[f"{kind}_drain"] = 0.0
            size = transfer.batch_size
            for start in range(0, n, size):
                chunk = items[start:start + size]

                def encode():
                    for task, item in chunk:
                        send(task, item)
                out[f"{kind}_encode"] += _timed(encode)
                out[f"{kind}_drain"] += _timed(drain)
            frames: list = []
            received: list = []
            opened: list[bytes] = []
            seal = _timed(lambda: frames.extend(sealer.seal("rx", p) for p in payloads))

            def over_zmq():
                for f in frames:
                    push.send_multipart(f, copy=False)
                    received.append(pull.recv_multipart())
            out[f"{kind}_zmq"] = _timed(over_zmq)
            opening = _timed(lambda: opened.extend(opener.open(f)[1] for f in received))
            out[f"{kind}_seal_open"] = seal + opening
            decoder = transfer.decoder

            got = 0

            def decode():
                nonlocal got
                for p in opened:
                    decoder.decode(p, transfer.deliver, transfer.deliver_many)
                    for q in queue_list:  # the executor takes them (not timed apart: a few ns each)
                        got += len(q)
                        q.clear()
            out[f"{kind}_decode_deliver"] = _timed(decode)
            if got != n or any(decoder.invalid.values()):
                raise RuntimeError(f"{kind}: {got} of {n} delivered; invalid {decoder.invalid}")
        # the same messages made and queued in the worker (BoltOutputCollector's inlined paths)
        local_q: deque = deque()

        def local_tuples():
            append = local_q.append
            for i, tup in enumerate(tuples):
                if not i % 1000:
                    local_q.clear()  # the executor takes them, as above
                t = Tuple.__new__(Tuple)
                t.values = tup.values
                t.fields = FIELDS
                t.task = tup.task
                t._mid = None
                t._root = tup._root
                t._edge = tup._edge
                t.ack_val = 0
                t._st = 0.0
                t.lineage = tup.lineage
                t._emits = 0
                append(t)
        out["tuple_local"] = _timed(local_tuples)
        local_q.clear()

        def local_acks():
            append = local_q.append
            for i, (_, root, val, _) in enumerate(acks):
                if not i % 1000:
                    local_q.clear()
                append((ACK, root, val, 0))
        out["ack_local"] = _timed(local_acks)
        local_q.clear()
    finally:
        push.close(0)
        pull.close(0)
        ctx.term()
        transfer.ctx.term()
    return {k: v / n * 1e6 for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    gc.set_threshold(10_000, 10, 10)  # what a worker sets (topology.worker.gc.threshold)
    best: dict[str, float] = {}
    for _ in range(args.repeat):
        for k, v in measure(args.messages).items():
            best[k] = min(best.get(k, v), v)
        gc.collect()
    for kind in ("tuple", "ack"):
        stages = ["encode", "drain", "seal_open", "zmq", "decode_deliver"]
        for stage in stages:
            print(f"transfer_{kind}_{stage}_us: {best[f'{kind}_{stage}']:.3f} us")
        crossing = sum(best[f"{kind}_{s}"] for s in stages)
        print(f"transfer_{kind}_crossing_us: {crossing:.3f} us")
        print(f"transfer_{kind}_local_us: {best[f'{kind}_local']:.3f} us")
        if kind == "tuple":
            print(f"transfer_tuple_crossing_vs_local: {crossing / best['tuple_local']:.2f} x (target <= 2)")


if __name__ == "__main__":
    main()
