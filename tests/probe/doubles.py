"""Moved to :mod:`tests.support.doubles`; this name stays importable for tests written against it."""

from tests.support.doubles import Bench, FakeExecutor, FakeMonitor

__all__ = ["Bench", "FakeExecutor", "FakeMonitor"]
