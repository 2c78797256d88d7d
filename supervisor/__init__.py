"""Gale supervisor."""
