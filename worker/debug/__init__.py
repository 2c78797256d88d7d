"""Debugging a running worker (docs/ui.md): thread dumps over a control socket the supervisor
reaches (:mod:`.control`, :mod:`.threaddump`), timed log levels from ZooKeeper (:mod:`.log_levels`),
and event sampling — a share of the tuples a component emits, written to the worker's
``events.log`` (:mod:`.sampling`). CPU profiles are taken from outside by the supervisor (py-spy)."""
