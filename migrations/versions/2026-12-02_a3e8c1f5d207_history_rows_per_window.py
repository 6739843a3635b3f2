"""admission history: one row per pair, device, verdict and label per writer window, with a count

The service wrote a row, with the request's documents by value, per admission: at a few hundred
admissions a second, tens of millions of rows a day, and writer transactions long enough to hold up
the requests they overlapped. A row now stands for ``requests`` admissions of one window (its ``at`` and
request are the newest one's); rows written before count one each.

Revision ID: a3e8c1f5d207
Revises: 9c2d4e6f8a10
Create Date: 2026-12-02 01:50:00
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a3e8c1f5d207"
down_revision: str | Sequence[str] | None = "9c2d4e6f8a10"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("admission_log") as batch:
        batch.add_column(sa.Column("requests", sa.Integer(), nullable=False, server_default="1"))


def downgrade() -> None:
    # The schema below counts a row per admission: a row standing for n admissions becomes n rows
    # (the same values, new ids), so rankings by count come out as they were. ``at`` is copied as the
    # driver returns it (a datetime on PostgreSQL, the stored text on SQLite); the JSON columns as JSON.
    conn = op.get_bind()
    names = ("at", "pair_digest", "key_digests", "device_type", "device_id", "label", "verdict", "request_json")
    log = sa.table("admission_log", sa.column("id", sa.String()), sa.column("requests", sa.Integer()),
                   *(sa.column(n, sa.JSON()) if n in ("key_digests", "request_json") else sa.column(n)
                     for n in names))
    rows = conn.execute(sa.select(log.c.requests, *(log.c[n] for n in names)).where(log.c.requests > 1)).all()
    copies = [{"id": str(uuid.uuid4()), **dict(zip(names, row[1:], strict=True))}
              for row in rows for _ in range(int(row[0]) - 1)]
    if copies:
        conn.execute(sa.insert(log), copies)
    with op.batch_alter_table("admission_log") as batch:
        batch.drop_column("requests")
