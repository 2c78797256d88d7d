"""streamparse projects: ``nimbus submit topologies/wordcount.py`` (or ``nimbus local``) of an
unedited streamparse project, as ``sparse submit`` would run it on Storm (``docs/multilang.md``).

A topology file that imports ``streamparse`` is read with streamparse's own DSL (its ``Topology``
class with ``Component.spec(...)``, ``Grouping``, ``par``, ``inputs``, ``config``): the file is
imported as ``sparse`` does (``<project>/src`` and the file's directory on ``sys.path``), and each
component spec becomes a shell component of the same name, parallelism, streams, inputs and
configuration — launched as Storm launches it (``streamparse_run pkg.module.Class``, working
directory ``<project>/src``, the project's root shipped as the code bundle). From ``config.json``:

* ``serializer`` → ``topology.multilang.serializer`` and ``streamparse_run -s <serializer>``;
* the environment (the only one, or ``-c streamparse.env=NAME``): ``options`` → topology
  configuration (overridden by the topology class's ``config``, then by ``-c``); ``log`` →
  ``pystorm.log.path/file/max_bytes/backup_count/level``; ``use_virtualenv`` (default true) with a
  non-empty ``virtualenv_root`` → the command is ``<virtualenv_root>/<virtualenv_name or topology
  name>/bin/streamparse_run`` (the environment must exist on every worker node; Gale does not build
  it from ``virtualenv_specs``); otherwise ``streamparse_run`` from the worker's PATH or beside its
  Python;
* ``nimbus``, ``workers``, ``user``, ``ssh_password`` and the other SSH settings are not used: Gale
  finds nimbus from its own configuration and ships code over HTTP.

Java components (``JavaBolt``/``JavaSpout``) cannot run on Gale and are refused by name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gale.config import as_config
from gale.errors import TopologyError
from gale.topology.definition import Topology
from gale.topology.definition import ComponentDef, GroupingDef, InputDef, StreamDef, TopologyDef, validate

_IMPORTS = re.compile(r"^\s*(from\s+streamparse(\.[\w.]+)?\s+import\b|import\s+streamparse\b)", re.M)

SHELL_BOLT = "gale.worker.multilang.components:ShellBolt"
SHELL_SPOUT = "gale.worker.multilang.components:ShellSpout"
#: streamparse's own settings, not Storm configuration
STREAMPARSE_OPTIONS = ("install_virtualenv", "use_virtualenv", "virtualenv_flags", "virtualenv_root",
                       "virtualenv_name", "sudo_user", "storm.workers.list", "topology.python.path")
_GROUPINGS = ("shuffle", "all", "none", "direct", "local_or_shuffle")


def is_streamparse_file(path: Path) -> bool:
    """A topology file written with streamparse's DSL (it imports streamparse)."""
    try:
        return bool(_IMPORTS.search(path.read_text(errors="replace")))
    except OSError:
        return False


def project_root(path: Path) -> Path:
    """The streamparse project: the topology directory's parent when it holds ``src/`` or
    ``config.json`` (``topologies/wordcount.py``), else the file's own directory."""
    topologies = path.resolve().parent
    parent = topologies.parent
    if (parent / "src").is_dir() or (parent / "config.json").is_file():
        return parent
    return topologies


def load_streamparse_topology(path: Path, conf: Mapping[str, Any]) -> Topology:
    from gale.topology.loader import exec_topology_module

    try:
        from streamparse.dsl.topology import Topology as SparseTopology
        from streamparse.dsl.topology import TopologyType
    except ImportError as exc:
        raise TopologyError(
            f"{path} is a streamparse topology, and reading it needs streamparse where you submit it: "
            f"pip install streamparse ({exc})"
        ) from None
    root = project_root(path)
    module = exec_topology_module(path, [str(path.resolve().parent), str(root / "src")])
    classes = [v for v in vars(module).values()
               if isinstance(v, TopologyType) and v is not SparseTopology and v.__module__ == module.__name__]
    if not classes:
        raise TopologyError(f"{path} imports streamparse but defines no streamparse Topology subclass")
    if len(classes) > 1:
        raise TopologyError(f"{path} defines several streamparse topologies: {[c.__name__ for c in classes]}")
    config = read_config(root)
    env_name, env = choose_env(config, as_config(conf, "topology configuration").streamparse_env, root)
    defn = convert(classes[0], name=path.stem, config=config, env_name=env_name, env=env)
    topology = Topology(defn)
    topology.code_dir = str(root)
    return topology


def read_config(root: Path) -> dict[str, Any]:
    path = root / "config.json"
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text())
    except ValueError as exc:
        raise TopologyError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise TopologyError(f"{path} must hold a JSON object")
    return config


def choose_env(config: Mapping[str, Any], wanted: str | None, root: Path) -> tuple[str | None, dict[str, Any]]:
    envs = config.get("envs") or {}
    if not isinstance(envs, dict):
        raise TopologyError(f"{root / 'config.json'}: 'envs' must be an object")
    if wanted is not None:
        if wanted not in envs:
            raise TopologyError(f"streamparse.env={wanted!r}: {root / 'config.json'} has no such environment; "
                                f"its environments: {sorted(envs)}")
        return wanted, dict(envs[wanted])
    if len(envs) > 1:
        raise TopologyError(f"{root / 'config.json'} lists several environments {sorted(envs)}: choose one with "
                            "-c streamparse.env=NAME")
    if envs:
        (name, env), = envs.items()
        return name, dict(env)
    return None, {}


def _grouping(thrift_grouping: Any, where: str) -> GroupingDef:
    fields = getattr(thrift_grouping, "fields", None)
    if fields is not None:
        return GroupingDef(type="fields", fields=list(fields)) if fields else GroupingDef(type="global")
    for name in _GROUPINGS:
        if getattr(thrift_grouping, name, None) is not None:
            return GroupingDef(type=name)
    raise TopologyError(f"{where}: grouping {thrift_grouping!r} is a custom Java grouping, which Gale cannot run")


def _par(spec: Any, env_name: str | None) -> int:
    par = spec.par
    if isinstance(par, dict):
        if env_name not in par:
            raise TopologyError(f"component {spec.name!r}: par {par} has no entry for environment {env_name!r}")
        par = par[env_name]
    return int(par)


def _command(shell: Any, kind: str, name: str, topology_name: str, serializer: str | None,
             env: Mapping[str, Any]) -> list[str]:
    command, script = shell.execution_command, shell.script or ""
    if "streamparse_run" in command:
        options = {**env, **(env.get("options") or {})}
        root = options.get("virtualenv_root") or options.get("virtualenv_path")
        if options.get("use_virtualenv", True) and root:
            venv = options.get("virtualenv_name") or topology_name
            command = f"{root.rstrip('/')}/{venv}/bin/streamparse_run"
        if serializer:
            script = f"-s {serializer} {script}"  # as sparse's set_topology_serializer
    return [command] + ([script] if script else [])


def convert(topology_class: Any, *, name: str, config: Mapping[str, Any], env_name: str | None,
            env: Mapping[str, Any]) -> TopologyDef:
    """streamparse specs → Gale's definition (shell components launched as Storm would)."""
    serializer = env.get("serializer", config.get("serializer"))
    components: dict[str, ComponentDef] = {}
    for spec in topology_class.specs:
        kind_name = type(spec).__name__
        if kind_name.startswith("Java"):
            raise TopologyError(f"component {spec.name!r} is a Java component ({kind_name}); Gale runs Python "
                                "and multi-lang (shell) components only")
        shell = getattr(spec.component_object, "shell", None)
        if shell is None:
            raise TopologyError(f"component {spec.name!r} has no shell command to run")
        kind = "bolt" if "Bolt" in kind_name else "spout"
        streams = {sid: StreamDef(fields=list(info.output_fields or []), direct=bool(info.direct))
                   for sid, info in (spec.outputs or {}).items()}
        inputs = [InputDef(component=str(gsid.componentId), stream=gsid.streamId,
                           grouping=_grouping(grouping, f"component {spec.name!r}"))
                  for gsid, grouping in (spec.inputs or {}).items()]
        comp_conf = spec.config
        if isinstance(comp_conf, str):
            comp_conf = json.loads(comp_conf or "{}")
        par = _par(spec, env_name)
        components[spec.name] = ComponentDef(
            kind=kind, class_path=SHELL_BOLT if kind == "bolt" else SHELL_SPOUT,
            kwargs={
                "command": _command(shell, kind, spec.name, name, serializer, env),
                "cwd": "src",
                "outputs": {sid: {"fields": s.fields, "direct": s.direct} for sid, s in streams.items()},
            },
            parallelism=par, tasks=par, conf=dict(comp_conf or {}), streams=streams, inputs=inputs,
        )
    options = {k: v for k, v in (env.get("options") or {}).items() if k not in STREAMPARSE_OPTIONS}
    log = env.get("log") or {}
    log_path = log.get("path") or env.get("log_path")
    log_file = log.get("file") or env.get("log_file")
    if log_path:
        options["pystorm.log.path"] = log_path
    if log_file:
        options["pystorm.log.file"] = log_file
    for key in ("max_bytes", "backup_count"):
        if isinstance(log.get(key), int):
            options[f"pystorm.log.{key}"] = log[key]
    if isinstance(log.get("level"), str):
        options["pystorm.log.level"] = log["level"].lower()
    if serializer:
        options["topology.multilang.serializer"] = serializer
    topo_conf = {**options, **{k: v for k, v in (topology_class.config or {}).items() if k not in STREAMPARSE_OPTIONS}}
    defn = TopologyDef(name=name, conf=topo_conf, components=components)
    try:
        validate(defn)
    except TopologyError as exc:
        raise TopologyError(f"streamparse topology {topology_class.__name__}: {exc}") from None
    return defn


__all__ = ["convert", "is_streamparse_file", "load_streamparse_topology", "project_root"]
