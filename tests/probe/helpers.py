"""Moved to :mod:`tests.support.helpers`; this name stays importable for tests written against it."""

from tests.support.helpers import (
    SERVERS,
    candidate_profile,
    free_port,
    proc_environ,
    proc_nice,
    profile,
    resident_profile,
    server_command,
    start_server,
)

__all__ = [
    "SERVERS",
    "candidate_profile",
    "free_port",
    "proc_environ",
    "proc_nice",
    "profile",
    "resident_profile",
    "server_command",
    "start_server",
]
