"""Alembic environment and versions of the evidence store: the only way its schema changes.

Run through ``canary db upgrade|current|downgrade`` (``evidence_store.migrate``), which builds the Alembic
configuration in code so it works from an installed package. ``alembic.ini`` here serves developers who
write a new revision: ``alembic -c migrations/alembic.ini revision -m "…"``.
"""
