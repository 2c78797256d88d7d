"""Storm's multi-lang protocol, pure: codecs (framing, JSON, msgpack) and the bolt/spout sessions,
checked against golden transcripts of the exact bytes in both directions, in simulated time."""

from __future__ import annotations

import msgpack
import pytest

from gale.topology.definition import TopologyTasks
from gale.topology.tuple import Fields, Tuple
from gale.worker.multilang import protocol as p
from gale.worker.multilang.codec import JsonCodec, MsgpackCodec, ProtocolError, codec_for
from tests.topologies import ListSpout  # noqa: F401 - a spout class the builder can import

JSON = JsonCodec()


def tup(values, component="spout", stream="default", task=3):
    return Tuple(values, Fields(["v"] * 0 + [f"f{i}" for i in range(len(values))], f"{component}:{stream}"),
                 component, stream, task)


# ------------------------------------------------------------------------------------ codecs


def test_json_frames_each_message_with_an_end_line_and_batches_into_one_write():
    assert JSON.encode({"command": "next", "id": ""}) == b'{"command":"next","id":""}\nend\n'
    assert JSON.encode_many([{"pid": 7}, [1, 2]]) == b'{"pid":7}\nend\n[1,2]\nend\n'
    assert JSON.encode({"msg": "déjà vu"}) == '{"msg":"déjà vu"}\nend\n'.encode()


@pytest.mark.parametrize("split", [1, 2, 5, 9, 13, 100])
def test_json_decoder_takes_any_split_of_the_stream(split):
    data = JSON.encode_many([{"command": "ack", "id": "1"}, {"command": "log", "msg": "é\nmulti"}, [4, 5]])
    decoder = JSON.decoder()
    got = []
    for i in range(0, len(data), split):
        got += decoder.feed(data[i:i + split])
    assert got == [{"command": "ack", "id": "1"}, {"command": "log", "msg": "é\nmulti"}, [4, 5]]
    decoder.finish()


def test_json_decoder_joins_a_message_spread_over_lines_and_skips_blank_lines():
    decoder = JSON.decoder()
    assert decoder.feed(b'\n{"command":\n "sync"}\nend\n\n\n{"pid": 3}\nend\n') == [{"command": "sync"}, {"pid": 3}]


def test_a_print_to_stdout_is_a_protocol_error_naming_the_text():
    decoder = JSON.decoder()
    with pytest.raises(ProtocolError) as err:
        decoder.feed(b'hello from print\n{"command":"ack","id":"1"}\nend\n')
    assert "invalid JSON" in str(err.value) and "hello from print" in str(err.value)
    assert "a print to stdout?" in str(err.value)


def test_output_cut_off_inside_a_message_is_reported_at_eof():
    decoder = JSON.decoder()
    assert decoder.feed(b'{"command":"emit","tuple":["a"]}\n') == []
    with pytest.raises(ProtocolError, match="ended inside a message"):
        decoder.finish()
    for data in (b"end\n", b"\n\nend\n", b'{"command":"sync"}\nend\n\nend\n'):
        with pytest.raises(ProtocolError, match="no message before it"):
            JSON.decoder().feed(data)


def test_messages_before_a_fault_in_the_same_read_are_kept():
    with pytest.raises(ProtocolError) as err:
        JSON.decoder().feed(b'{"command":"ack","id":"1"}\nend\noops\nend\n')
    assert err.value.messages == [{"command": "ack", "id": "1"}] and "'oops'" in str(err.value)
    assert err.value.last_line == '{"command":"ack","id":"1"}'
    with pytest.raises(ProtocolError, match="invalid JSON"):
        JSON.decoder().feed(b'1, 2\nend\n')  # two values in one message


def test_msgpack_is_unframed_as_pystorm_writes_it():
    codec = MsgpackCodec()
    msgs = [{"command": "emit", "tuple": ["a", 1, b"\x00"]}, [7]]
    assert codec.encode_many(msgs) == msgpack.packb(msgs[0]) + msgpack.packb(msgs[1])
    data = codec.encode_many(msgs)
    decoder = codec.decoder()
    assert decoder.feed(data[:3]) == [] and decoder.feed(data[3:]) == msgs
    decoder.feed(data[:3])
    with pytest.raises(ProtocolError, match="ended inside a message"):
        decoder.finish()


def test_serializer_names_storm_and_short():
    assert codec_for("org.apache.storm.multilang.JsonSerializer").name == "json"
    assert codec_for("msgpack").name == "msgpack"
    assert codec_for("com.yelp.pyleus.serializer.MessagePackSerializer").name == "msgpack"
    with pytest.raises(Exception, match="unknown topology.multilang.serializer 'xml'"):
        codec_for("xml")


# ------------------------------------------------------------------------------------ context


def test_the_handshake_context_has_storms_eight_keys():
    from gale import TopologyBuilder
    from gale.worker.multilang.components import ShellBolt

    b = TopologyBuilder()
    b.set_spout("spout", ListSpout, kwargs={"fields": ["sentence"]})
    b.set_bolt("split", ShellBolt, 2, kwargs={"command": ["x"], "outputs": {"default": ["word"], "odd": ["w", "n"]}}
               ).fields_grouping("spout", ["sentence"])
    b.set_bolt("count", ShellBolt, kwargs={"command": ["x"], "outputs": ["word", "n"]}).global_grouping("split")
    b.set_bolt("odd", ShellBolt, kwargs={"command": ["x"]}).all_grouping("split", "odd")
    defn = b.create_topology("t").definition
    layout = TopologyTasks(defn, {}, 1)
    ctx = p.storm_context(defn, layout.task_to_component, "split", 5)
    assert set(ctx) == {"task->component", "taskid", "componentid", "streams", "stream->outputfields",
                        "stream->target->grouping", "source->stream->grouping", "source->stream->fields"}
    assert ctx["task->component"] == {"1": "__acker", "2": "count", "3": "odd", "4": "split", "5": "split",
                                      "6": "spout"}
    assert ctx["taskid"] == 5 and ctx["componentid"] == "split"
    assert ctx["streams"] == ["default", "odd"]
    assert ctx["stream->outputfields"] == {"default": ["word"], "odd": ["w", "n"]}
    assert ctx["stream->target->grouping"] == {"default": {"count": {"type": "FIELDS", "fields": []}},
                                               "odd": {"odd": {"type": "ALL"}}}
    assert ctx["source->stream->grouping"] == {"spout": {"default": {"type": "FIELDS", "fields": ["sentence"]}}}
    assert ctx["source->stream->fields"] == {"spout": {"default": ["sentence"]}}


# ------------------------------------------------------------------------------ golden transcripts


class Driver:
    """Plays a transcript against a session: ``>`` lines are what Gale must write, ``<`` lines are
    fed as the child's output; emits go to a recording collector that returns fixed targets."""

    def __init__(self, session, codec=JSON, targets=(5, 6)):
        self.session = session
        self.codec = codec
        self.targets = list(targets)
        self.applied = []
        self.written = b""
        self.decoder = codec.decoder()

    def write(self, msg):
        self.written += self.codec.encode(msg)

    def child_says(self, data: bytes, now=0.0):
        for msg in self.decoder.feed(data):
            cmd = self.session.receive(msg, now)
            self.applied.append(cmd)
            if isinstance(cmd, (p.BoltEmit, p.SpoutEmit)) and cmd.need_task_ids and not cmd.task:
                self.write(self.session.task_ids(self.targets))
            elif isinstance(cmd, (p.Problem, p.Ignored)) and cmd.reply:
                self.write([])

    def take(self) -> bytes:
        out, self.written = self.written, b""
        return out


def counter():
    n = iter(range(1, 1000))
    return lambda: str(next(n))


HANDSHAKE_OUT = (b'{"conf":{"topology.name":"t"},"pidDir":"/pids","context":{"taskid":4,"componentid":"split"}}'
                 b"\nend\n")


def started_bolt(now=0.0, timeout=30.0):
    s = p.BoltSession("split", 4, now, timeout, counter())
    d = Driver(s)
    d.write(s.handshake({"topology.name": "t"}, {"taskid": 4, "componentid": "split"}, "/pids", now))
    assert d.take() == HANDSHAKE_OUT
    d.child_says(b'{"pid": 4242}\nend\n', now)
    assert d.applied == [p.Started(4242)] and s.pid == 4242
    return s, d


def test_golden_bolt_transcript_every_message_kind():
    s, d = started_bolt()
    t1, t2 = tup(["the cow"]), tup(["jumped"], "other", "s2", 9)
    d.write(s.tuple_message(t1))
    d.write(s.tuple_message(t2))
    assert d.take() == (b'{"id":"1","comp":"spout","stream":"default","task":3,"tuple":["the cow"]}\nend\n'
                        b'{"id":"2","comp":"other","stream":"s2","task":9,"tuple":["jumped"]}\nend\n')
    d.applied.clear()
    # emit needing task ids (Storm's default) → the bare list comes back; pystorm's need_task_ids false → none
    d.child_says(b'{"command":"emit","anchors":["1"],"tuple":["the"]}\nend\n'
                 b'{"command":"emit","anchors":["1","2"],"stream":"s","tuple":["cow"],"need_task_ids":false}\nend\n'
                 b'{"command":"emit","anchors":"2","task":7,"tuple":["direct"]}\nend\n'
                 b'{"command":"emit","tuple":["unanchored"],"need_task_ids":true}\nend\n')
    assert d.take() == b"[5,6]\nend\n[5,6]\nend\n"  # the first and the last, in emit order; direct: none
    e1, e2, e3, e4 = d.applied
    assert (e1.values, e1.stream, e1.anchors, e1.task, e1.need_task_ids) == (["the"], "default", [t1], 0, True)
    assert (e2.stream, e2.anchors, e2.need_task_ids) == ("s", [t1, t2], False)
    assert (e3.task, e3.anchors, e3.anchor_ids) == (7, [t2], ["2"])
    assert e4.anchors == [] and e4.need_task_ids
    d.applied.clear()
    d.child_says(b'{"command":"log","msg":"hi","level":3}\nend\n'
                 b'{"command":"log","msg":"plain"}\nend\n'
                 b'{"command":"error","msg":"boom"}\nend\n'
                 b'{"command":"metrics","name":"words","params":3}\nend\n'
                 b'{"command":"reset_timeout","id":"2"}\nend\n'
                 b'{"command":"sync"}\nend\n'
                 b'{"command":"ack","id":"1"}\nend\n'
                 b'{"command":"fail","id":"2"}\nend\n')
    assert d.applied == [p.Log("warning", "hi"), p.Log("info", "plain"), p.ReportError("boom"), p.Metric("words", 3),
                         p.ResetTimeout(t2), p.Sync(), p.Ack(t1), p.Fail(t2)]
    assert s.pending == {} and d.take() == b""


def test_golden_bolt_heartbeats_in_simulated_time():
    s, d = started_bolt(now=100.0, timeout=5.0)
    assert s.heartbeat(100.5) is None
    d.write(s.heartbeat(101.0))
    assert d.take() == b'{"id":"1","comp":null,"stream":"__heartbeat","task":-1,"tuple":[]}\nend\n'
    assert not s.overdue(105.9)
    d.child_says(b'{"command":"sync"}\nend\n', 102.0)  # answered: no longer waiting
    assert not s.overdue(200.0)
    d.write(s.heartbeat(200.0))
    assert s.overdue(205.1) and s.silent_secs(205.1) == pytest.approx(5.1)
    d.child_says(b'{"command":"log","msg":"any message counts"}\nend\n', 205.2)
    assert not s.overdue(300.0)


def test_bolt_handshake_silence_is_overdue_and_its_reply_must_be_a_pid():
    s = p.BoltSession("split", 4, 0.0, 5.0, counter())
    s.handshake({}, {}, "/pids", 0.0)
    assert s.heartbeat(10.0) is None  # no heartbeat before the handshake reply
    assert s.overdue(5.5)
    with pytest.raises(ProtocolError, match="handshake reply"):
        s.receive({"command": "sync"}, 1.0)


def test_bolt_protocol_violations_are_fatal():
    s, d = started_bolt()
    t1 = tup(["x"])
    s.tuple_message(t1)
    with pytest.raises(ProtocolError, match="ack of tuple id '9', which is not pending"):
        s.receive({"command": "ack", "id": "9"}, 0)
    with pytest.raises(ProtocolError, match="emit anchored to tuple id 'nope'"):
        s.receive({"command": "emit", "anchors": ["nope"], "tuple": [1]}, 0)
    with pytest.raises(ProtocolError, match="without a command"):
        s.receive({"id": "1"}, 0)
    with pytest.raises(ProtocolError, match="expected a message object"):
        s.receive([1, 2], 0)
    s.receive({"command": "ack", "id": "1"}, 0)
    with pytest.raises(ProtocolError, match="already acked or failed"):
        s.receive({"command": "ack", "id": "1"}, 0)


def test_bolt_small_mistakes_are_problems_and_refused_emits_fail_their_anchors():
    s, d = started_bolt()
    t1, t2 = tup(["a"]), tup(["b"])
    s.tuple_message(t1)
    s.tuple_message(t2)
    bad = s.receive({"command": "emit", "anchors": ["1"], "tuple": "not a list"}, 0)
    assert isinstance(bad, p.Problem) and "without a 'tuple' list" in bad.text and bad.reply and bad.fail == [t1]
    assert s.receive({"command": "frobnicate"}, 0) == p.Problem("unknown command 'frobnicate' from the subprocess: "
                                                                "{'command': 'frobnicate'}")
    assert "params must be a number" in s.receive({"command": "metrics", "name": "m", "params": "x"}, 0).text
    # the refused anchor's later ack, fail or emit is dropped quietly (its tree already replays)
    assert s.receive({"command": "emit", "anchors": ["1"], "tuple": [1]}, 0) == p.Ignored(reply=True)
    assert s.receive({"command": "ack", "id": "1"}, 0) == p.Ignored()
    assert s.refuse(["2"]) == [t2] and s.receive({"command": "fail", "id": "2"}, 0) == p.Ignored()
    t3 = tup(["c"])
    s.tuple_message(t3)
    assert s.fail_all() == [t3] and s.pending == {}


def test_golden_spout_transcript_every_message_kind():
    s = p.SpoutSession("words", 6, 0.0, 30.0)
    d = Driver(s, targets=[2])
    d.write(s.handshake({}, {"taskid": 6}, "/pids", 0.0))
    d.child_says(b'{"pid":77}\nend\n')
    d.take()
    d.applied.clear()
    for name, msg_id in [("activate", ""), ("next", ""), ("ack", 12), ("fail", "m-3"), ("deactivate", "")]:
        d.write(s.command(name, 1.0, msg_id))
    assert d.take() == (b'{"command":"activate","id":""}\nend\n{"command":"next","id":""}\nend\n'
                        b'{"command":"ack","id":12}\nend\n{"command":"fail","id":"m-3"}\nend\n'
                        b'{"command":"deactivate","id":""}\nend\n')
    assert s.next_outstanding
    d.child_says(b'{"command":"sync"}\nend\n'
                 b'{"command":"emit","id":"m-1","tuple":["dog"]}\nend\n'
                 b'{"command":"emit","tuple":["cat"],"stream":"s","need_task_ids":false}\nend\n'
                 b'{"command":"emit","id":5,"task":3,"tuple":["direct"]}\nend\n'
                 b'{"command":"log","msg":"lvl","level":4}\nend\n'
                 b'{"command":"sync"}\nend\n{"command":"sync"}\nend\n{"command":"sync"}\nend\n{"command":"sync"}\nend\n')
    assert d.take() == b"[2]\nend\n"
    emits = [c for c in d.applied if isinstance(c, p.SpoutEmit)]
    assert [(e.values, e.stream, e.msg_id, e.task, e.need_task_ids) for e in emits] == [
        (["dog"], "default", "m-1", 0, True), (["cat"], "s", None, 0, False), (["direct"], "default", 5, 3, True)]
    assert [c.command for c in d.applied if isinstance(c, p.Sync)] == ["activate", "next", "ack", "fail", "deactivate"]
    assert p.Log("error", "lvl") in d.applied
    assert not s.next_outstanding and s.asked_at is None


def test_spout_liveness_counts_only_while_waiting_for_a_sync():
    s = p.SpoutSession("words", 6, 0.0, 5.0)
    s.handshake({}, {}, "/pids", 0.0)
    s.receive({"pid": 1}, 1.0)
    assert not s.overdue(1000.0)  # nothing asked: silence is fine
    s.command("next", 1000.0)
    s.receive({"command": "emit", "tuple": [1]}, 1004.0)  # progress restarts the clock
    assert not s.overdue(1008.0) and s.overdue(1009.5)
    s.receive({"command": "sync"}, 1009.6)
    assert not s.overdue(2000.0)
    assert s.receive({"command": "sync"}, 2000.0) == p.Sync("") and s.unexpected_syncs == 1


def test_msgpack_transcript_round_trips_bytes_values():
    codec = MsgpackCodec()
    s = p.BoltSession("split", 4, 0.0, 30.0, counter())
    d = Driver(s, codec=codec)
    d.child_says(codec.encode({"pid": 9}))
    t1 = tup([b"\x00raw", 1.5])
    d.write(s.tuple_message(t1))
    assert d.take() == msgpack.packb({"id": "1", "comp": "spout", "stream": "default", "task": 3,
                                      "tuple": [b"\x00raw", 1.5]})
    d.child_says(codec.encode_many([{"command": "emit", "anchors": ["1"], "tuple": [b"\x01"]},
                                    {"command": "ack", "id": "1"}]))
    assert d.take() == msgpack.packb([5, 6])
    assert d.applied[-1] == p.Ack(t1)


# ------------------------------------------------------------------------------------ restarts


def test_restarts_back_off_doubling_and_reset_after_a_healthy_run():
    r = p.Restarts(1.0, limit=60.0)
    assert [r.failed(100.0) - 100.0 for _ in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    r.started(200.0)
    assert r.failed(230.0) == 290.0  # ran 30 s: still in a row
    r.started(300.0)
    assert r.failed(361.0) == 362.0  # ran a minute: the count starts over
