"""What a shell child says reaches the person running it: ``nimbus local`` (a real subprocess) prints
the child's info-level ``log`` messages like its other log lines, and a child that writes to stderr
and exits is reported with its stderr and Gale's sentence on lines of their own (issue 40)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from gale import LocalCluster, ShellBolt, TopologyBuilder
from tests.multilang_topologies import RecordSink, SentenceSpout
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parent.parent

# a pystorm bolt (nothing of Gale's): logs through pystorm's StormHandler, i.e. `log` messages with
# Storm's levels (2 info, 1 debug); pystorm.log.level is set to debug so the debug line is sent too
LOGGING_BOLT = textwrap.dedent('''
    import pystorm


    class LoggingBolt(pystorm.Bolt):
        def initialize(self, conf, context):
            self.logger.info("child-info-line task=%s", context["taskid"])
            self.logger.debug("child-debug-line")

        def process(self, tup):
            self.emit([tup.values[0]])


    if __name__ == "__main__":
        LoggingBolt().run()
''')

TOPOLOGY = textwrap.dedent('''
    import sys

    from gale import ShellBolt, Spout, TopologyBuilder


    class Words(Spout):
        def declare_output_fields(self, declarer):
            declarer.declare(["word"])

        def next_tuple(self):
            pass


    def topology(conf):
        b = TopologyBuilder()
        b.set_spout("words", Words)
        b.set_bolt("talker", ShellBolt, kwargs={"command": [sys.executable, "logging_bolt.py"],
                                                "outputs": ["word"]}).shuffle_grouping("words")
        return b.create_topology(name="talk", conf={"pystorm.log.level": "debug"})
''')


def test_nimbus_local_prints_a_shell_childs_info_log_lines(tmp_path):
    (tmp_path / "logging_bolt.py").write_text(LOGGING_BOLT)
    (tmp_path / "talk.py").write_text(TOPOLOGY)
    proc = subprocess.run([sys.executable, "-m", "gale.nimbus.cli", "local", str(tmp_path / "talk.py"),
                           "--duration", "3"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "subprocess-log" in line]
    info = [line for line in lines if "child-info-line" in line]
    assert len(info) == 1, proc.stderr
    # a console log line like the others: level, event, the component, the child's message
    assert "[info" in info[0] and "component=talker" in info[0] and "task=" in info[0], info[0]
    # the child's debug line is logged at debug: below the level nimbus local (like a worker) shows
    assert not any("child-debug-line" in line for line in lines), proc.stderr
    assert "talker" in proc.stdout  # and the stats table still comes


# a pystorm bolt that writes two lines to stderr and exits on its first tuple
EXITING_BOLT = textwrap.dedent('''
    import os
    import sys

    import pystorm


    class Quitter(pystorm.Bolt):
        def process(self, tup):
            sys.stderr.write("quitter: first stderr line\\nquitter: giving up on " + tup.values[0] + "\\n")
            sys.stderr.flush()
            os._exit(3)


    if __name__ == "__main__":
        Quitter().run()
''')


def test_a_childs_stderr_and_gales_sentence_are_on_lines_of_their_own(tmp_path):
    (tmp_path / "quitter.py").write_text(EXITING_BOLT)
    out = tmp_path / "out"
    out.mkdir()
    b = TopologyBuilder()
    b.set_spout("sentences", SentenceSpout)
    b.set_bolt("quitter", ShellBolt, kwargs={"command": [sys.executable, "quitter.py"], "cwd": str(tmp_path),
                                             "outputs": ["sentence"]}).shuffle_grouping("sentences")
    b.set_bolt("sink", RecordSink).shuffle_grouping("quitter")
    topo = b.create_topology("quit", conf={"test.out": str(out), "test.n": 5,
                                           "topology.multilang.restart.secs": 30})
    with LocalCluster() as cluster:
        running = cluster.submit_topology("quit", {}, topo)

        def reported():
            assert running.errors.get("quitter"), "no error reported yet"
        eventually(reported, 60)
        error = running.errors["quitter"][0]
    lines = error.splitlines()
    # the child's lines exactly as it wrote them, each on its own line
    assert "quitter: first stderr line" in lines, error
    assert "quitter: giving up on s0 alpha beta gamma" in lines, error
    # Gale's sentence whole, on a line of its own and last (what summaries of an error show)
    sentence = lines[-1]
    assert sentence.startswith("shell bolt 'quitter' task "), error
    assert "exited with code 3" in sentence and "last line seen:" in sentence, error
    assert "pending tuples failed (they replay)" in sentence and "restarting in" in sentence, error
    assert "quitter:" not in sentence, error
