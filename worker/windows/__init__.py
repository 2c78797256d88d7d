"""Windowed bolts at run time (``docs/windows.md``).

* :mod:`.store` — the window buffer behind a small store interface (:class:`WindowStore`), with the
  in-memory implementation; a store backed by managed state plugs in here;
* :mod:`.core` — pure: window assignment, triggers, eviction, lateness (events in, actions out);
  :mod:`.mixed` — the same for Storm's mixed windows (a count and a duration);
* :mod:`.watermark` — pure: the watermark of a bolt task, the minimum over its input tasks with an
  idleness timeout;
* :mod:`.executor` — the shell: the executor that buffers tuples, fires ``execute(window)``, anchors,
  acks on expiry and routes late tuples.
"""
