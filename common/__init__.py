"""Gale's shared foundation: configuration, ZooKeeper layout and records, LocalState, logging."""
