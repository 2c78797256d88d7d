"""Gale's chaos suite: a Jepsen-style harness for Gale's delivery guarantees.

A topology reads a known input from a replayable source on a real multi-process cluster —
ZooKeeper, two nimbuses, three supervisors, one of them on its own network "node" (a network
namespace) — while faults are injected; then the output is checked against the input. Two
workloads: ``rabbitmq`` (message ids from RabbitMQ to sink files, at-least-once: lost ids must be
none, duplicates reported) and ``kafka-eo`` (keyed records from Kafka into a count with
exactly-once state in Redis: lost and over-counted must both be 0). Both report the time to
converge after the last fault.

Modules: :mod:`~tests.chaos.netns` (the namespaced node), :mod:`~tests.chaos.broker` (RabbitMQ on
both nodes' reach), :mod:`~tests.chaos.cluster` (setup and observations), :mod:`~tests.chaos.workload`
(the workload interface; the RabbitMQ workload: publisher, sink reader, checker),
:mod:`~tests.chaos.eo_workload` (the exactly-once workload: producer, Kafka and Redis, count checker),
:mod:`~tests.chaos.faults` (the injectors; what they are given and fill in
:mod:`~tests.chaos.fault_context`, the stores' kills in :mod:`~tests.chaos.store_faults`), :mod:`~tests.chaos.schedule` (bounded plans, seeded soak
steps), :mod:`~tests.chaos.run` (one run), :mod:`~tests.chaos.report` (JSON and Markdown). Entry
point: ``python -m tests.chaos [--workload kafka-eo]``; CI runs ``tests/test_chaos.py`` and
``tests/test_chaos_eo.py``. Method and results: ``docs/reliability.md``.
"""
