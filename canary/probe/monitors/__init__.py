"""Monitors measure the resident: ``sim``, ``http``, ``prometheus``."""
