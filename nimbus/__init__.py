"""Gale nimbus (``gale.nimbus``; the source folder is the repository's ``nimbus/``)."""

if __name__ != "gale.nimbus":  # pragma: no cover - the repository root on sys.path
    raise ImportError(f"Gale's nimbus package was imported as {__name__!r}; its only import name is 'gale.nimbus'")
