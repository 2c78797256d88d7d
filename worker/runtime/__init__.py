"""The data plane: executors, collectors, groupings, the acker, transfer between workers."""
