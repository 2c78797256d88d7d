"""Gale's example topologies.

Run them by path (``nimbus local examples/word_count.py``, ``nimbus submit examples/word_count.py``).
They also ship inside the installed package as ``gale.examples``, so that ``nimbus dev-cluster --demo``
finds the flagship topology (``spark_word_count.py``) in any installation, not only in a checkout.
"""
