"""``benchmarks.suite_cpu``: the process kinds and the CPU ledger (pure), and one real run."""

from __future__ import annotations

import sys

from benchmarks import suite_cpu
from benchmarks.suite_cpu import Ledger, kind


def test_kinds_name_the_jvms_daemons_and_the_test_processes():
    assert kind(["/usr/bin/java", "-cp", "x", "org.apache.zookeeper.server.quorum.QuorumPeerMain"]) == "zookeeper-jvm"
    assert kind(["java", "-cp", "/opt/spark/jars/*", "org.apache.spark.deploy.SparkSubmit"]) == "spark-jvm"
    assert kind(["/v/bin/python", "-m", "gale.worker.cli", "run", "t-1", "/tmp/pytest-of-root/x"]) == "gale-worker"
    assert kind(["/v/bin/python", "-m", "gale.nimbus.cli", "kill", "wc"]) == "nimbus-cli"
    assert kind(["/v/bin/python3.11", "-m", "pytest", "-n", "2"]) == "pytest"
    assert kind(["/v/bin/python", "-m", "tests.chaos"]) == "python-tests.chaos"
    assert kind(["/v/bin/python", "bench.py"]) == "python-bench.py"
    assert kind(["/v/bin/python", "-c", "print(1)"]) == "python-c"
    assert kind(["/usr/lib/erlang/erts/bin/beam.smp", "-W"]) == "beam.smp"
    assert kind([]) == ""
    forked = "/v/bin/python -m gale.worker.cli run wc-3f2a-1-1796038949 sup0 6700 w1 --config /x/worker-conf.yaml"
    assert kind([forked, "", ""]) == "gale-worker"  # a forked worker's title: one string, then empty ones
    assert kind([forked]) == "gale-worker"
    assert kind([forked], by_topology=True) == "gale-worker:wc-3f2a"
    assert kind(forked.split(), by_topology=True) == "gale-worker:wc-3f2a"
    assert kind(["/v/bin/python", "-m", "gale.worker.zygote", " " * 4096], by_topology=True) == "gale-worker"


def test_ledger_counts_cpu_from_the_first_snapshot_and_a_process_under_its_last_kind():
    ledger = Ledger()
    ledger.observe({(1, 0.0): ("pytest", 100.0)})                          # running before: baseline
    ledger.observe({(1, 0.0): ("pytest", 102.5), (7, 5.0): ("bash", 0.1)})  # a script starts
    ledger.observe({(1, 0.0): ("pytest", 103.0), (7, 5.0): ("spark-jvm", 9.0),  # it exec'd a JVM
                    (8, 6.0): ("nimbus-cli", 0.4)})                        # and a command ran
    ledger.observe({(1, 0.0): ("pytest", 104.0), (7, 9.0): ("gale-worker", 0.2),  # pid 7 again: a new process
                    (8, 6.0): ("", 0.5), (2, 0.5): ("", 1.0)})  # exited, not reaped yet; a kernel thread
    cpu, started = ledger.totals()
    assert cpu == {"pytest": 4.0, "spark-jvm": 9.0, "nimbus-cli": 0.5, "gale-worker": 0.2, "kernel": 1.0}
    assert started == {"pytest": 0, "spark-jvm": 1, "nimbus-cli": 1, "gale-worker": 1, "kernel": 1}


def test_a_real_run_counts_all_the_cpu_of_the_command_it_ran(capsys):
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    assert suite_cpu.main(["--interval", "0.1", "--", sys.executable, "-c", busy]) == 0
    lines = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert float(lines["cpu_python-c"].split()[0]) >= 0.55, lines
    assert lines["command_exit_code"] == "0"
