"""Shell components: spouts and bolts that run as a subprocess per task speaking Storm's multi-lang
protocol (``from gale import ShellBolt, ShellSpout``; ``docs/multilang.md``).

As in Storm, a shell component is the command to run plus its declared outputs; the program is
anything that speaks the protocol — a pystorm or streamparse component, Storm's ``storm.py`` /
``storm.js`` adapters, your own::

    builder.set_bolt("split", ShellBolt, 4,
                     kwargs={"command": ["python3", "splitsentence.py"], "outputs": ["word"]})

or, the way Storm's Java API subclasses ``ShellBolt``::

    class SplitSentence(ShellBolt):
        command = ["python3", "splitsentence.py"]
        outputs = ["word"]                       # or {"words": ["word"], "errors": ["msg"]}

``cwd`` is the child's working directory, relative to the topology's code directory (the unpacked
bundle in a worker; the topology file's directory in local mode); ``env`` adds environment
variables. ``command[0]`` is looked up on PATH, then beside the worker's own Python; a relative
path (``venv/bin/python``) is relative to ``cwd``. The wire format is
``topology.multilang.serializer`` (JSON, or msgpack for pystorm's ``MsgpackSerializer``).

The instances here only hold that configuration: the executors in
:mod:`gale.worker.multilang.body` start the subprocesses, carry tuples to them and apply what
they answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gale.errors import TopologyError
from gale.topology.components import Bolt, OutputFieldsDeclarer, Spout


class ShellComponent:
    """What shell spouts and bolts share: the command, outputs, working directory, environment."""

    #: the program and its arguments, e.g. ``["python3", "splitsentence.py"]``
    command: Sequence[str] = ()
    #: more arguments, appended to ``command`` (``command="node", args=["split.js"]``)
    args: Sequence[str] = ()
    #: the default stream's fields (``["word"]``), or ``{stream: fields}``; a stream's fields may
    #: also be ``{"fields": [...], "direct": true}`` for a direct stream
    outputs: Sequence[str] | Mapping[str, Any] = ()
    #: working directory relative to the topology's code directory (or absolute)
    cwd: str = "."
    #: extra environment variables (an extra PATH is appended to the worker's)
    env: Mapping[str, str] = {}

    #: set by the executor: the task's shell (commands to the subprocess)
    _shell: Any = None

    def __init__(self, command: str | Sequence[str] | None = None,
                 outputs: Sequence[str] | Mapping[str, Any] | None = None, *,
                 args: Sequence[str] | None = None, cwd: str | None = None, env: Mapping[str, str] | None = None):
        if command is not None:
            self.command = [command] if isinstance(command, str) else list(command)
        elif isinstance(self.command, str):
            self.command = [self.command]
        if args is not None:
            self.args = list(args)
        if self.args:
            if isinstance(self.args, str):
                raise TopologyError(f"{type(self).__name__}: args must be a list of strings, got {self.args!r}")
            self.command = [*self.command, *self.args]
        if outputs is not None:
            self.outputs = outputs
        if cwd is not None:
            self.cwd = cwd
        if env is not None:
            self.env = dict(env)
        name = type(self).__name__
        if (isinstance(self.command, str) or not self.command
                or not all(isinstance(a, str) and a for a in self.command)):
            raise TopologyError(
                f"{name}: command must be a non-empty list of strings (the program and its arguments), "
                f"got {self.command!r}"
            )
        if not isinstance(self.cwd, str) or not self.cwd:
            raise TopologyError(f"{name}: cwd must be a directory path, got {self.cwd!r}")
        if not isinstance(self.env, Mapping) or not all(isinstance(k, str) for k in self.env):
            raise TopologyError(f"{name}: env must map variable names to strings, got {self.env!r}")

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        outputs = self.outputs
        if isinstance(outputs, Mapping):
            for stream, spec in outputs.items():
                if isinstance(spec, Mapping):
                    declarer.declare_stream(stream, spec.get("fields", ()), direct=bool(spec.get("direct")))
                else:
                    declarer.declare_stream(stream, spec)
        elif outputs:
            if isinstance(outputs, str):
                raise TopologyError(f"{type(self).__name__}: outputs must be a list of field names, got {outputs!r}")
            declarer.declare(list(outputs))


class ShellBolt(ShellComponent, Bolt):
    """A bolt whose tasks are subprocesses (Storm's ``ShellBolt``): each input tuple is written to
    the child, which acks, fails and emits asynchronously; those are applied on the executor
    thread. A child that exits, hangs past ``topology.subprocess.timeout.secs`` or breaks the
    protocol is killed, its pending tuples fail (and replay) and it is started again."""

    #: its tasks are subprocesses (``gale.worker.multilang.body``; recorded in the definition)
    body_kind = "shell"

    def execute(self, tup: Any) -> None:  # pragma: no cover - the shell body forwards tuples itself
        raise TopologyError("ShellBolt tuples are forwarded to its subprocess, not executed in the worker")


class ShellSpout(ShellComponent, Spout):
    """A spout whose tasks are subprocesses (Storm's ``ShellSpout``): ``next``, ``ack``, ``fail``,
    ``activate`` and ``deactivate`` are commands to the child, each answered with emits and ``sync``."""

    #: its tasks are subprocesses (``gale.worker.multilang.body``; recorded in the definition)
    body_kind = "shell"

    def next_tuple(self) -> None:
        self._shell.request_next()

    def ack(self, msg_id: Any) -> None:
        self._shell.command("ack", msg_id)

    def fail(self, msg_id: Any) -> None:
        self._shell.command("fail", msg_id)

    def activate(self) -> None:
        self._shell.command("activate")

    def deactivate(self) -> None:
        self._shell.command("deactivate")

    def close(self) -> None:
        self._shell.close()
