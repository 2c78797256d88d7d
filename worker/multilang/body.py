"""The bodies of shell components: a subprocess per task, driven from the executor thread.

Per task a :class:`Shell` holds the protocol session (:mod:`gale.worker.multilang.protocol`), the
child process (:mod:`gale.worker.multilang.process`) and an inbox. The child's reader thread only
appends decoded messages to the inbox and wakes the executor thread; everything else — emits,
acks, fails, task-id replies, heartbeats, timeouts, restarts — happens on the executor thread,
which owns the task: :class:`ShellBoltBody` forwards a task's input tuples to its child (its
intake) and applies the child's commands each round (a poll); :class:`ShellSpoutBody` does the
latter for a spout executor, whose own loop asks for tuples (``next`` commands). Messages to the
child are collected and written in batches (non-blocking; what the pipe does not take waits for the
next round). The child sees data only: the executor's layers (checkpoints, ticks) are the core's.

A child that exits, stays silent past ``topology.subprocess.timeout.secs`` (falling back to
``supervisor.worker.timeout.secs``), writes what is not the protocol (a ``print`` to stdout) or
breaks it is killed; the error is reported against the component with the last line seen, below
the end of its stderr (on lines of their own); a bolt's pending tuples are failed (their trees
replay); the child is started again after ``topology.multilang.restart.secs``, doubling with each
failure in a row. The worker keeps running (Storm halts it with exit code 11).
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

from gale.config_keys import SECRET_KEYS
from gale.worker.multilang import protocol as p
from gale.worker.multilang.codec import Codec, ProtocolError, codec_for
from gale.worker.multilang.process import ChildProcess, Exited, child_env, resolve_command, stop_children
from gale.worker.runtime.bolt import BoltExecutor
from gale.worker.runtime.executor import Executor

STOP_GRACE_SECS = 0.5
STDERR_DRAIN_SECS = 1.0  # how long a dead child's last stderr lines are awaited for its error report
_LOG_METHODS = {"debug": "debug", "info": "info", "warning": "warning", "error": "error"}


def subprocess_timeout(config: Any) -> float:
    """``topology.subprocess.timeout.secs``, falling back to ``supervisor.worker.timeout.secs``."""
    value = config.topology_subprocess_timeout_secs
    return float(value if value is not None else config.supervisor_worker_timeout_secs)


def _plain(value: Any) -> Any:
    """A JSON-safe copy of the topology configuration for the handshake."""
    return json.loads(json.dumps(value, default=str))


class Shell:
    """One task's subprocess and protocol session (owned by the executor thread)."""

    def __init__(self, body: ShellBody, task: int, component: Any, collector: Any):
        self.body = body
        self.task = task
        self.component = component  # the ShellBolt/ShellSpout instance (its configuration)
        self.collector = collector
        self.session: Any = None
        self.child: ChildProcess | None = None
        self.generation = 0
        self.inbox: deque = deque()  # (generation, messages | Exited | ProtocolError), from the reader
        self.outbox: list[Any] = []  # messages for the child, written at the end of the round
        self.unwritten = 0  # tuple messages in the child's write backlog
        self.restart_at: float | None = None
        self.restarts = p.Restarts(float(body.executor.config.topology_multilang_restart_secs or 1))
        self.name = f"{body.executor.component}-{task}"
        self.closing = False

    # ------------------------------------------------------------------ commands (executor thread)
    def send(self, msg: Any) -> None:
        self.outbox.append(msg)

    def command(self, name: str, msg_id: Any = "") -> None:
        """A spout command (ack/fail/activate/deactivate); dropped while no child runs."""
        if self.child is not None and self.session is not None:
            self.send(self.session.command(name, self.body.executor.clock.monotonic(), msg_id))

    def request_next(self) -> None:
        """``next`` unless one is unanswered (one at a time, as Storm asks)."""
        s = self.session
        if self.child is not None and s is not None and s.started and not s.next_outstanding:
            self.send(s.command("next", self.body.executor.clock.monotonic()))

    def close(self) -> None:
        self.closing = True

    def flush(self) -> None:
        child = self.child
        if child is None:
            self.outbox.clear()
            return
        if self.outbox:
            msgs, self.outbox = self.outbox, []
            child.write(self.body.codec.encode_many(msgs))
        elif child.backlog:
            child.flush()
        if not child.backlog:
            self.unwritten = 0

    def deliver(self, generation: int, item: Any) -> None:
        """Called by the reader thread: queue for the executor thread and wake it."""
        self.inbox.append((generation, item))
        self.body.executor.wake()


class ShellBody:
    """What the bodies of shell bolts and spouts share: starting, reading, checking and restarting
    each task's child, on its executor's thread."""

    kind = "bolt"
    name = "shell"

    def __init__(self, executor: Executor):
        self.executor = executor
        config = executor.config
        self.codec: Codec = codec_for(config.topology_multilang_serializer or "json")
        self.timeout = subprocess_timeout(config)
        self.shells: dict[int, Shell] = {}
        self._ids = itertools.count(1)
        self.pid_dir = ""

    def _new_id(self) -> str:
        return str(next(self._ids))

    def _attach(self, task: int, component: Any, collector: Any) -> Shell:
        shell = Shell(self, task, component, collector)
        component._shell = shell
        self.shells[task] = shell
        if not self.pid_dir:
            local = self.executor.runtime.local_dir
            if local:
                self.pid_dir = str(Path(local) / "pids")
                os.makedirs(self.pid_dir, exist_ok=True)
            else:
                self.pid_dir = tempfile.mkdtemp(prefix="gale-pids-")
        return shell

    def _cwd(self, shell: Shell) -> str:
        base = self.executor.runtime.code_dir or os.getcwd()
        return os.path.normpath(os.path.join(base, shell.component.cwd))

    def _start(self, shell: Shell, now: float) -> None:
        ex = self.executor
        runtime = ex.runtime
        shell.generation += 1
        generation = shell.generation
        shell.restart_at = None
        shell.outbox = []
        shell.unwritten = 0
        if self.kind == "bolt":
            session: Any = p.BoltSession(ex.component, shell.task, now, self.timeout, self._new_id)
        else:
            session = p.SpoutSession(ex.component, shell.task, now, self.timeout)
        cwd = self._cwd(shell)
        argv = resolve_command(shell.component.command, cwd)
        child = ChildProcess(argv, cwd, child_env(shell.component.env), self.codec,
                             lambda item: shell.deliver(generation, item), shell.name)
        # the topology's configuration without the daemons' credentials, and with its name
        conf = {k: v for k, v in runtime.task_conf(ex.component).items() if k not in SECRET_KEYS}
        if not ex.config.topology_name:
            conf["topology.name"] = runtime.defn.name or runtime.topology_id
        context = p.storm_context(runtime.defn, runtime.layout.task_to_component, ex.component, shell.task)
        hello = session.handshake(_plain(conf), context, self.pid_dir, now)
        try:
            if not os.path.isdir(cwd):
                raise FileNotFoundError(f"working directory {cwd} does not exist")
            child.start()
        except OSError as exc:
            self._report(shell, f"cannot start subprocess {argv} in {cwd}: {exc}")
            shell.restart_at = shell.restarts.failed(now)
            return
        shell.session, shell.child = session, child
        child.write(self.codec.encode(hello))
        ex.log.info("subprocess-started", task=shell.task, pid=child.pid, command=argv, cwd=cwd)

    def _report(self, shell: Shell, text: str, before: str = "") -> None:
        """Report ``text`` against the component, naming the task; ``before`` (the child's own lines)
        goes on lines of its own above it, so Gale's sentence stays whole and last: a report is
        summed up by its last line (the worker log's ``component-error``, ``nimbus status``,
        ``nimbus local``), as a traceback is."""
        sentence = f"shell {self.kind} {self.executor.component!r} task {shell.task}: {text}"
        self.executor.report_error(f"{before}\n{sentence}" if before else sentence)

    def _child_failed(self, shell: Shell, reason: str, now: float, last_line: str = "") -> None:
        """Kill the child, report why, fail what it held, schedule its restart."""
        child = shell.child
        if child is None:
            return
        child.kill()
        last = last_line or child.decoder.last_line
        parts = [f"subprocess {child.argv} (pid {child.pid}) {reason}"]
        parts.append(f"last line seen: {last!r}" if last else "no output seen")
        stderr = child.stderr_text(wait=STDERR_DRAIN_SECS)
        failed = shell.session.fail_all() if self.kind == "bolt" else []
        if failed:
            parts.append(f"{len(failed)} pending tuples failed (they replay)")
        shell.restart_at = shell.restarts.failed(now)
        parts.append(f"restarting in {shell.restart_at - now:.1f}s")
        self._report(shell, "; ".join(parts),
                     before=f"the end of subprocess {child.pid}'s stderr:\n{stderr}" if stderr else "")
        shell.generation += 1  # whatever the dead child's reader still delivers is dropped
        shell.child = None
        shell.session = None
        shell.outbox = []
        for tup in failed:
            shell.collector.fail(tup)

    def _check(self, shell: Shell, now: float) -> None:
        """Once a round: restart when due, time out a silent child, send a bolt heartbeat."""
        if shell.child is None:
            if shell.restart_at is not None and now >= shell.restart_at and not shell.closing:
                self._start(shell, now)
                if shell.child is not None and self.kind == "spout" and self.executor.active:
                    shell.command("activate")
            return
        session = shell.session
        if session.overdue(now):
            what = ("its handshake reply" if not session.started
                    else "a heartbeat reply" if self.kind == "bolt" else "a command's sync")
            self._child_failed(shell, f"sent nothing for {session.silent_secs(now):.1f}s while asked for "
                                      f"{what} (subprocess timeout {self.timeout:g}s)", now)
            return
        if self.kind == "bolt":
            beat = session.heartbeat(now)
            if beat is not None:
                shell.send(beat)

    def _drain(self, shell: Shell, now: float) -> int:
        """Apply what the reader delivered; returns the number of messages applied."""
        n = 0
        inbox = shell.inbox
        while inbox:
            generation, item = inbox.popleft()
            if generation != shell.generation or shell.child is None:
                continue  # from a child already killed
            if isinstance(item, list):
                try:
                    for msg in item:
                        self._apply(shell, shell.session.receive(msg, now), now)
                        n += 1
                except ProtocolError as exc:
                    self._child_failed(shell, f"broke the protocol: {exc.reason}", now, exc.last_line)
                    return n
                except Exception as exc:  # noqa: BLE001 - never let one child's message stop the executor thread
                    self.executor.log.exception("subprocess-message-failed", task=shell.task)
                    self._child_failed(shell, f"sent a message Gale could not apply ({type(exc).__name__}: {exc})",
                                       now)
                    return n
            elif isinstance(item, ProtocolError):
                self._child_failed(shell, f"wrote what is not the protocol: {item.reason}", now, item.last_line)
                return n
            elif isinstance(item, Exited):
                code = item.code
                how = f"exited with code {code}" if code is None or code >= 0 else f"was killed by signal {-code}"
                if shell.closing:
                    shell.child = None
                else:
                    self._child_failed(shell, how, now)
                return n
        return n

    def _apply(self, shell: Shell, cmd: Any, now: float) -> None:  # pragma: no cover - each body's own
        raise NotImplementedError

    def _apply_common(self, shell: Shell, cmd: Any, now: float) -> bool:
        """Commands both kinds handle; False when ``cmd`` is kind-specific."""
        cls = cmd.__class__
        if cls is p.Log:
            getattr(self.executor.log, _LOG_METHODS.get(cmd.level, "info"))(
                "subprocess-log", task=shell.task, pid=shell.session.pid, msg=cmd.text)
        elif cls is p.ReportError:
            self._report(shell, f"Shell Process Exception: {cmd.text}")
        elif cls is p.Metric:
            shell.collector.incr_metric(cmd.name, cmd.value)
        elif cls is p.Problem:
            if cmd.text:
                self._report(shell, cmd.text)
            for tup in cmd.fail:
                shell.collector.fail(tup)
            if cmd.reply:
                shell.send([])
        elif cls is p.Ignored:
            if cmd.reply:
                shell.send([])
        elif cls is p.Started:
            pid_file = Path(self.pid_dir) / str(cmd.pid)
            if not pid_file.exists():
                raise ProtocolError(f"did not create its pid file {pid_file} (the handshake asks for it)")
            shell.restarts.started(now)
            self.executor.log.info("subprocess-ready", task=shell.task, pid=cmd.pid)
        elif cls is p.Sync:
            pass
        else:
            return False
        return True

    def poll(self, now: float) -> int:
        """Each round: apply what the children sent, check them, write what is due."""
        work = 0
        for shell in self.shells.values():
            if shell.inbox:
                work += self._drain(shell, now)
            self._check(shell, now)
            if shell.child is not None and (shell.outbox or shell.child.backlog):
                shell.flush()
        return work

    def has_news(self) -> bool:
        return any(s.inbox for s in self.shells.values())

    def stop_children(self) -> None:
        children = [s.child for s in self.shells.values() if s.child is not None]
        for s in self.shells.values():
            s.closing = True
            s.flush()
        stop_children(children, STOP_GRACE_SECS, self.executor.clock)
        if self.pid_dir and not self.executor.runtime.local_dir:
            for f in Path(self.pid_dir).glob("*"):
                f.unlink(missing_ok=True)
            try:
                os.rmdir(self.pid_dir)
            except OSError:
                pass


class ShellBoltBody(ShellBody):
    """The body of a :class:`~gale.worker.multilang.components.ShellBolt`'s executor: each task's
    intake writes its input tuples to the child (at most ``topology.shellbolt.max.pending`` unwritten)."""

    kind = "bolt"

    def __init__(self, executor: BoltExecutor):
        super().__init__(executor)
        self.max_pending = int(executor.config.topology_shellbolt_max_pending or 100)

    def attach(self) -> None:
        ex = self.executor
        ex.use_body(self, prepare=self.prepare, close=[self.stop_children, ex.cleanup_tasks], poll=self.poll,
                    pending=self.pending, news=self.has_news, input_ready=self.input_ready)

    def prepare(self) -> None:
        ex = self.executor
        ex.prepare_tasks()  # instances (the configuration), collectors, prepare()
        now = ex.clock.monotonic()
        for task, bolt in ex.bolts.items():
            ex.intake[task] = self.intake
            self._start(self._attach(task, bolt, ex.collectors[task]), now)

    def input_ready(self) -> bool:
        """Input the children can take now (not tuples left queued while a child's backlog is full)."""
        for task, shell in self.shells.items():
            if self.executor.queues[task] and shell.child is not None and shell.unwritten < self.max_pending:
                return True
        return False

    def intake(self, task: int, queue: deque, budget: int) -> int:
        shell = self.shells[task]
        if shell.child is None:
            return 0
        room = min(len(queue), budget, self.max_pending - shell.unwritten)
        if room <= 0:
            return 0
        self._forward(shell, queue, room)
        if shell.outbox or shell.child.backlog:
            shell.flush()
        return room

    def _forward(self, shell: Shell, queue: deque, n: int) -> int:
        """Write ``n`` input tuples to the child (one batch)."""
        ex = self.executor
        session = shell.session
        message = session.tuple_message
        executed = ex.stats.executed
        sample_every = ex.sample_every
        countdown = ex._sample_n or sample_every
        perf = time.perf_counter
        pop = queue.popleft
        out = shell.outbox
        start = len(out)
        for _ in range(n):
            tup = pop()
            executed[tup.fields.source_key] += 1
            if sample_every:
                countdown -= 1
                if countdown <= 0:
                    countdown = sample_every
                    tup._st = perf()
            out.append(message(tup))
        ex._sample_n = countdown
        try:
            data = self.codec.encode_many(out)
        except (TypeError, ValueError, OverflowError):
            self._drop_unencodable(shell, start)
        else:
            shell.outbox = []
            shell.child.write(data)
        shell.unwritten = shell.unwritten + n if shell.child.backlog else 0
        return n

    def _drop_unencodable(self, shell: Shell, start: int) -> None:
        """Some tuples cannot be serialized: fail each of them with the reason, send the rest."""
        keep = []
        encode = self.codec.encode
        for i, msg in enumerate(shell.outbox):
            try:
                encode(msg)
            except (TypeError, ValueError, OverflowError) as exc:
                tup = shell.session.pending.get(msg.get("id")) if i >= start and isinstance(msg, dict) else None
                if tup is not None:
                    shell.session.forget(msg["id"])
                    self._report(shell, f"tuple from {tup.component}:{tup.stream} cannot be sent as "
                                        f"{self.codec.name} ({exc}): failed")
                    shell.collector.fail(tup)
                continue
            keep.append(msg)
        shell.outbox = keep

    def _apply(self, shell: Shell, cmd: Any, now: float) -> None:
        cls = cmd.__class__
        collector = shell.collector
        if cls is p.BoltEmit:
            anchors = cmd.anchors
            anchor: Any = anchors[0] if len(anchors) == 1 else (anchors or None)
            try:
                if cmd.task:
                    collector.emit_direct(cmd.task, cmd.values, anchor, cmd.stream)
                    return
                targets = collector.emit(cmd.values, anchor, cmd.stream)
            except Exception as exc:  # noqa: BLE001 - unknown stream, wrong arity, bad direct task, values a
                # grouping cannot hash: as a native bolt whose emit raises, its inputs fail
                self._report(shell, f"emit refused: {exc}" if isinstance(exc, ValueError)
                             else f"emit failed: {type(exc).__name__}: {exc}")
                for tup in shell.session.refuse(cmd.anchor_ids):
                    collector.fail(tup)
                targets = []
            if cmd.need_task_ids:
                shell.send(targets)
        elif cls is p.Ack:
            tup = cmd.tup
            st = tup._st
            collector.ack(tup)
            if st > 0:  # sampled: the subprocess round trip is this bolt's execute latency
                key = tup.fields.source_key
                stats = self.executor.stats
                stats.execute_ms[key] += (time.perf_counter() - st) * 1000.0
                stats.execute_n[key] += 1
        elif cls is p.Fail:
            collector.fail(cmd.tup)
        elif cls is p.ResetTimeout:
            collector.reset_timeout(cmd.tup)
        elif not self._apply_common(shell, cmd, now):
            self._report(shell, f"unexpected message for a bolt: {cmd!r}")

    def pending(self) -> int:
        return sum(len(s.session.pending) for s in self.shells.values() if s.session is not None)

    def outstanding(self, task: int) -> int:
        """Input tuples the task's child took and has not acked or failed yet (a checkpoint waits
        for them: ``gale.worker.state.gate``)."""
        session = self.shells[task].session
        return len(session.pending) if session is not None else 0


class ShellSpoutBody(ShellBody):
    """The body of a :class:`~gale.worker.multilang.components.ShellSpout`'s executor: the spout
    executor's own loop asks for tuples (``next_tuple`` → a ``next`` command) and hands it acks and
    fails; this body applies the child's answers and keeps it alive."""

    kind = "spout"

    def attach(self) -> None:
        ex = self.executor
        # deactivate and close (commands), then stop the children
        ex.use_body(self, prepare=self.prepare, close=[ex.close_tasks, self.stop_children], poll=self.poll,
                    news=self.has_news)
        ex.afters.append(self.flush)

    def prepare(self) -> None:
        ex = self.executor
        ex.open_tasks()
        now = ex.clock.monotonic()
        for task, spout in ex.spouts.items():
            self._start(self._attach(task, spout, ex.collectors[task]), now)

    def flush(self) -> None:
        for shell in self.shells.values():
            if shell.child is not None and (shell.outbox or shell.child.backlog):
                shell.flush()

    def _apply(self, shell: Shell, cmd: Any, now: float) -> None:
        if cmd.__class__ is p.SpoutEmit:
            collector = shell.collector
            try:
                if cmd.task:
                    collector.emit_direct(cmd.task, cmd.values, cmd.msg_id, cmd.stream)
                    return
                targets = collector.emit(cmd.values, cmd.msg_id, cmd.stream)
            except Exception as exc:  # noqa: BLE001 - as a native spout's emit raising in next_tuple
                self._report(shell, f"emit refused: {exc}" if isinstance(exc, ValueError)
                             else f"emit failed: {type(exc).__name__}: {exc}")
                targets = []
            if cmd.need_task_ids:
                shell.send(targets)
        elif not self._apply_common(shell, cmd, now):
            self._report(shell, f"unexpected message for a spout: {cmd!r}")
