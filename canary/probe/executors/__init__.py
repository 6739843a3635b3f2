"""Executors start, load and stop the candidate: ``sim``, ``process`` (and ``cuda``, separately)."""
