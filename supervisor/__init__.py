"""Gale supervisor (``gale.supervisor``; the source folder is the repository's ``supervisor/``)."""

if __name__ != "gale.supervisor":  # pragma: no cover - the repository root on sys.path
    raise ImportError(f"Gale's supervisor package was imported as {__name__!r}; its only import name is 'gale.supervisor'")
