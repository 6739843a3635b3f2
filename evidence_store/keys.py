"""The pair key, re-exported: ``PairKey`` and ``KEY_FIELDS`` live in the models (``canary._model``), so
that the request, the probe's journal and the certificate speak of a key without importing the store.

This module must stay light: the fast ``gpu-fit`` path imports it, so it never imports SQLAlchemy.
"""

from __future__ import annotations

from canary._model import KEY_FIELDS, PairKey

__all__ = ["KEY_FIELDS", "PairKey"]
