"""What a server process does when it starts and stops (the application's lifespan, run in this
process): the decision reads' pool is opened and closed with it, and what start-up built is moved out
of the garbage collector's sight, so that full collections scan only what requests create."""

from __future__ import annotations

import gc
from pathlib import Path

import anyio

from canary.serve.app import create_app
from canary.serve.config import ServeConfig
from evidence_store.migrate import upgrade
from tests.evidence_store.conftest import PgServer, _need_pg


def _run_lifespan(db_url: str) -> tuple[int, object, object]:
    app = create_app(ServeConfig(db_url=db_url))
    seen: dict[str, object] = {}

    async def main() -> None:
        async with app.router.lifespan_context(app):
            seen["frozen"] = gc.get_freeze_count()
            seen["pool"] = app.state.service.reads._pool
        seen["after"] = app.state.service.reads._pool

    frozen_before = gc.get_freeze_count()
    try:
        anyio.run(main)
    finally:
        gc.unfreeze()  # give this test process its collector back
    assert frozen_before == 0
    return int(str(seen["frozen"])), seen["pool"], seen["after"]


def test_start_up_freezes_what_it_built_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'life.sqlite3'}"
    upgrade(url)
    frozen, pool, after = _run_lifespan(url)
    assert frozen > 10_000  # modules, models, the catalog: what a process keeps until it ends
    assert pool is None and after is None  # SQLite reads run in threads on the engine's own pool


def test_the_read_pool_lives_as_long_as_the_server(pg_server: PgServer | None) -> None:
    frozen, pool, after = _run_lifespan(_need_pg(pg_server).migrated())
    assert frozen > 10_000
    assert pool is not None and after is None  # opened at start-up, closed at shutdown
