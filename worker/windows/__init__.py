"""Windowed bolts at run time (``docs/windows.md``).

* :mod:`.store` — the window buffer behind a small store interface (:class:`WindowStore`), with the
  in-memory implementation; a store backed by managed state plugs in here;
* :mod:`.core` — pure: window assignment, triggers, eviction, lateness (events in, actions out);
  :mod:`.mixed` — the same for Storm's mixed windows (a count and a duration);
* :mod:`.watermark` — pure: the watermark of a bolt task, the minimum over its input tasks with an
  idleness timeout;
* :mod:`.runner` — the shell: the window body of a bolt executor (a runner per task that buffers
  tuples, fires ``execute(window)``, anchors, acks on expiry and routes late tuples).

A capability on top of the executor core (``gale.worker.runtime``), which imports none of it.
"""
