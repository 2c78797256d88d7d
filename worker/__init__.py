"""Gale worker."""
