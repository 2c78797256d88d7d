"""Gale worker (``gale.worker``; the source folder is the repository's ``worker/``)."""

if __name__ != "gale.worker":  # pragma: no cover - the repository root on sys.path
    raise ImportError(f"Gale's worker package was imported as {__name__!r}; its only import name is 'gale.worker'")
