"""Every table of the store in one ``MetaData``.

Each aggregate's ORM classes register on ``models.Base`` when their module is imported; this module imports
them all, so Alembic's environment and the schema tests see the whole store without ``models`` importing
its neighbours (which would close an import cycle).
"""

from __future__ import annotations

from sqlalchemy import MetaData

# Imported for their side effect: each module's tables register on ``models.Base``.
from evidence_store import fleet_models, models  # noqa: F401
from evidence_store.service import models as service_models  # noqa: F401

__all__ = ["METADATA"]

METADATA: MetaData = models.Base.metadata
