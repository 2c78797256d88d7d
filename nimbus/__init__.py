"""Gale nimbus."""
