"""What nimbus checks of a submitted topology before it writes anything (pure: no ZooKeeper).

A submit is refused here, with the problem named, when the name is not a valid topology name, the
bundle is not a Gale bundle, the definition or the configuration is malformed, the configuration
carries a ``topology.secret`` (nimbus makes it), or a rule that needs the effective configuration
fails — windows against the message timeout and max spout pending (``docs/windows.md``),
checkpoints against the message timeout (``docs/state.md``).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any

from gale import config as gconfig
from gale.config_keys import Config
from gale.bundle import BundleError, read_bundle
from gale.errors import ConfigError, TopologyError
from gale.topology.composition import validate_composition
from gale.topology.definition import TopologyDef
from gale.topology.windowing import validate_windows

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


@dataclass(frozen=True)
class Submission:
    """A submitted topology that passed every check."""

    name: str
    defn: TopologyDef
    definition_json: str
    #: the topology's configuration as stored with its code: the user's, its name and a new secret
    stored_conf: dict[str, Any]
    #: the effective configuration: the cluster's, then the stored one
    config: Config


def check_submission(name: str, bundle: bytes, cluster: Config) -> Submission:
    """Validate a submit of ``bundle`` as ``name``; raises :class:`TopologyError` naming the problem."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise TopologyError(
            f"invalid topology name {name!r}: use letters, digits, '.', '_' or '-' (at most 128 characters)"
        )
    try:
        definition_json, topo_conf = read_bundle(bundle)
    except BundleError as exc:
        raise TopologyError(f"invalid code bundle: {exc}") from None
    defn = TopologyDef.from_json(definition_json, "topology definition in the bundle")
    try:
        gconfig.validate(topo_conf, where="topology configuration", allow_user_keys=True)
        gconfig.refuse_secret(topo_conf)
    except ConfigError as exc:
        raise TopologyError(str(exc)) from None
    stored_conf = dict(topo_conf)
    stored_conf["topology.name"] = name
    stored_conf["topology.secret"] = secrets.token_hex(32)  # leaves nimbus only to cluster daemons
    config = cluster.with_overrides(stored_conf, where="topology configuration")
    try:
        validate_windows(defn.components, config)  # with the effective config (docs/windows.md)
        gconfig.check_bounds(config)
    except ConfigError as exc:
        raise TopologyError(str(exc)) from None
    validate_composition(defn, config)
    return Submission(name, defn, definition_json, stored_conf, config)
