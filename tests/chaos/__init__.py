"""Gale's chaos suite: a Jepsen-style harness for the at-least-once guarantee.

A topology reads a known set of message ids from RabbitMQ (a replayable source) on a real
multi-process cluster — ZooKeeper, two nimbuses, three supervisors, one of them on its own network
"node" (a network namespace) — while faults are injected; then the sink is checked: lost ids (must
be none), duplicates (reported), and the time to converge after the last fault.

Modules: :mod:`~tests.chaos.netns` (the namespaced node), :mod:`~tests.chaos.broker` (RabbitMQ on
both nodes' reach), :mod:`~tests.chaos.cluster` (setup and observations), :mod:`~tests.chaos.workload`
(publisher, sink reader, checker), :mod:`~tests.chaos.faults` (the injectors),
:mod:`~tests.chaos.schedule` (bounded plan, seeded soak steps), :mod:`~tests.chaos.run` (one run),
:mod:`~tests.chaos.report` (JSON and Markdown). Entry point: ``python -m tests.chaos``; CI runs
``tests/test_chaos.py``. Method and results: ``docs/reliability.md``.
"""
