"""Evidence store benchmark: bulk load, lookup latency, write throughput, and the lookup's query plan.

    python benchmarks/evidence_store.py                       # 1,000,000 rows, SQLite and PostgreSQL
    python benchmarks/evidence_store.py --rows 20000          # a quick run
    python benchmarks/evidence_store.py --backends sqlite

For each backend it loads ``--rows`` evidence records into a fresh store (SQLite: ``insert()``
executemany; PostgreSQL: ``COPY``), then measures, in the same run:

* ``lookup`` latency (p50/p99) through the public path (a read-only ``session_scope`` around
  ``evidence_store.lookup.lookup``), on keys that exist and keys that do not;
* the baseline: the same lookup query with the key index disabled (SQLite ``NOT INDEXED``,
  PostgreSQL ``enable_indexscan/bitmapscan = off``), so the index's effect is a measured ratio;
* write throughput of ``record_evidence``, one committed transaction per record, and the per-row
  ORM insert rate as the baseline for the bulk load;
* the query plan of the lookup (``EXPLAIN QUERY PLAN`` / ``EXPLAIN ANALYZE``), which must name
  ``ix_evidence_lookup``.

Targets: p99 lookup < 2 ms on SQLite, < 5 ms on PostgreSQL. Data are synthetic (seeded): about eight
records per pair key, 80% current, outcomes and sources mixed, three driver versions; ``superseded_by``
is not computed for bulk-loaded rows (lookup does not read it).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

# Run as a script, this file's folder comes first on sys.path and its name would shadow the
# ``evidence_store`` package it measures.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from sqlalchemy import Engine, Table, insert  # noqa: E402

from canary._model import PairKey  # noqa: E402
from evidence_store.database import make_engine, run_transaction, session_scope  # noqa: E402
from evidence_store.evidence import record_evidence  # noqa: E402
from evidence_store.lookup import lookup, lookup_query  # noqa: E402
from evidence_store.migrate import upgrade  # noqa: E402
from evidence_store.models import Evidence  # noqa: E402
from evidence_store.schemas import EvidenceIn  # noqa: E402

NOW = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
TTL_S = 30 * 86400.0
DRIVERS = ("550.54.15", "550.90.07", "535.161.08")
DEVICE_TYPES = ("h100-sxm", "a100-80gb", "l40s", "mi300x")
REGIMES = ("timeslice", "mps:50", "mps:25", "mig:3g.40gb", "streams")
COLUMNS = [c.name for c in Evidence.__table__.columns]


def _pick(rng: random.Random, weighted: tuple[tuple[str, float], ...]) -> str:
    return rng.choices([v for v, _ in weighted], weights=[w for _, w in weighted])[0]


def make_keys(n_keys: int, seed: int) -> list[PairKey]:
    rng = random.Random(seed)
    return [
        PairKey(
            resident_version=f"resident-{rng.randrange(2000)}:{rng.randrange(50)}",
            resident_shape_family=f"bs<={rng.choice((8, 16, 32, 64))}",
            candidate_version=f"sha256:{i:012x}",
            candidate_shape_family=f"seq<={rng.choice((1024, 4096, 8192))}",
            device_type=rng.choice(DEVICE_TYPES),
            regime=rng.choice(REGIMES),
        )
        for i in range(n_keys)
    ]


def generate_rows(
    keys: list[PairKey], rows: int, seed: int, batch: int, spent_s: list[float] | None = None
) -> Iterator[list[dict[str, Any]]]:
    """Seeded synthetic rows in batches; the time spent generating is added to ``spent_s[0]`` so the
    load figure can leave it out."""
    rng = random.Random(seed + 1)
    started = time.perf_counter()
    digests = [k.digest() for k in keys]
    out: list[dict[str, Any]] = []
    for i in range(rows):
        k = rng.randrange(len(keys))
        key = keys[k]
        created = NOW - timedelta(seconds=rng.uniform(0, 60 * 86400))
        outcome = _pick(rng, (("safe", 0.70), ("unsafe", 0.15), ("inconclusive", 0.10), ("aborted", 0.05)))
        est = rng.uniform(0.0, 30.0) if outcome in ("safe", "unsafe") else None
        out.append(
            {
                "id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                "key_digest": digests[k],
                **key.as_dict(),
                "driver_version": rng.choice(DRIVERS),
                "cuda_version": "12.4",
                "device_uuid": f"GPU-{rng.randrange(10_000):04d}",
                "probe_id": f"bench-{i}",
                "source": _pick(rng, (("canary", 0.90), ("production", 0.08), ("import", 0.02))),
                "outcome": outcome,
                "resident_slowdown_pct": est,
                "resident_slowdown_low_pct": None if est is None else max(0.0, est - 2.0),
                "resident_slowdown_high_pct": None if est is None else est + 2.0,
                "candidate_slowdown_pct": None,
                "samples": rng.randrange(20, 500),
                "exposure_used": rng.randrange(10, 1000),
                "time_used_s": rng.uniform(5, 300),
                "confidence": rng.uniform(0.8, 0.999),
                "created_at": created,
                "expires_at": created + timedelta(days=14),
                "status": _pick(rng, (("current", 0.80), ("stale", 0.15), ("revoked", 0.05))),
                "superseded_by": None,
                "revoked_reason": None,
                "stale_reason": None,
                "origin": None,
            }
        )
        if len(out) == batch:
            if spent_s is not None:
                spent_s[0] += time.perf_counter() - started
            yield out
            started = time.perf_counter()
            out = []
    if spent_s is not None:
        spent_s[0] += time.perf_counter() - started
    if out:
        yield out


def bulk_load(engine: Engine, batches: Iterator[list[dict[str, Any]]]) -> int:
    loaded = 0
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            raw = conn.connection.driver_connection
            assert raw is not None
            with raw.cursor() as cur, cur.copy(f"COPY evidence ({', '.join(COLUMNS)}) FROM STDIN") as copy:
                for batch in batches:
                    for row in batch:
                        copy.write_row([row[c] for c in COLUMNS])
                    loaded += len(batch)
        # VACUUM sets the visibility map and statistics now, so autovacuum does not start on the fresh
        # million rows in the middle of the measurements (a long-running store has been vacuumed).
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM (ANALYZE) evidence")
        return loaded
    statement = insert(cast(Table, Evidence.__table__))
    for batch in batches:
        # The UTC type stores naive UTC on SQLite; executemany skips the ORM, not the column types.
        with engine.begin() as conn:
            conn.execute(statement, batch)
        loaded += len(batch)
    with engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE")
    return loaded


def percentile(values: list[float], pct: float) -> float:
    """The project's one quantile definition (nearest rank), in percent."""
    from canary.quantiles import quantile

    result = quantile(values, pct / 100)
    assert result is not None, "no samples"
    return result


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def lookup_sql(key: PairKey, engine: Engine) -> str:
    query = lookup_query(key, now=NOW, ttl_s=TTL_S)
    return str(query.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))


def explain(engine: Engine, key: PairKey) -> str:
    sql = lookup_sql(key, engine)
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql).all()
            return "\n".join(f"  {row[-1]}" for row in rows)
        rows = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql).all()
        return "\n".join(f"  {row[0]}" for row in rows)


def server_execution_ms(engine: Engine, keys: list[PairKey]) -> list[float]:
    """PostgreSQL only: the server's own execution time of the lookup query (``EXPLAIN ANALYZE``),
    which separates the database's work from client, network and scheduling time."""
    samples = []
    with engine.connect() as conn:
        for key in keys:
            plan = conn.exec_driver_sql(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + lookup_sql(key, engine)
            ).scalar_one()
            document = plan[0] if isinstance(plan, list) else plan
            samples.append(float(document["Execution Time"]) + float(document["Planning Time"]))
        conn.rollback()
    return samples


def unindexed_lookup_ms(engine: Engine, keys: list[PairKey], repeat: int) -> list[float]:
    samples = []
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("SET enable_indexscan = off")
            conn.exec_driver_sql("SET enable_bitmapscan = off")
        for key in keys[:repeat]:
            sql = lookup_sql(key, engine)
            if engine.dialect.name == "sqlite":
                sql = sql.replace("FROM evidence", "FROM evidence NOT INDEXED", 1)
            start = time.perf_counter()
            conn.exec_driver_sql(sql).all()
            samples.append((time.perf_counter() - start) * 1000)
        conn.rollback()
    return samples


@dataclass
class Figures:
    backend: str
    rows: int
    load_s: float
    orm_rows_per_s: float
    lookup_ms: list[float]
    miss_ms: list[float]
    unindexed_ms: list[float]
    server_ms: list[float]
    writes_per_s: float
    plan: str


def run_backend(backend: str, url: str, args: argparse.Namespace) -> Figures:
    upgrade(url)
    engine = make_engine(url)
    try:
        keys = make_keys(max(1, args.rows // 8), args.seed)
        print(f"[{backend}] loading {args.rows:,} rows …", flush=True)
        generating_s = [0.0]
        start = time.perf_counter()
        loaded = bulk_load(
            engine, generate_rows(keys, args.rows, args.seed, batch=50_000, spent_s=generating_s)
        )
        load_s = time.perf_counter() - start - generating_s[0]
        assert loaded == args.rows

        # Baseline for the bulk load: ORM inserts, one flush per row, in one transaction.
        orm_rows = 2000
        orm_batch = next(generate_rows(make_keys(50, args.seed + 7), orm_rows, args.seed + 7, batch=orm_rows))
        start = time.perf_counter()
        with session_scope(engine) as session:
            for row in orm_batch:
                session.add(
                    Evidence(**{**row, "probe_id": "orm-" + row["probe_id"], "id": str(uuid.uuid4())})
                )
                session.flush()
            session.rollback()
        orm_rows_per_s = orm_rows / (time.perf_counter() - start)

        rng = random.Random(args.seed + 2)
        hits = [keys[rng.randrange(len(keys))] for _ in range(args.lookups)]
        misses = make_keys(args.lookups // 4, args.seed + 99)  # versions never loaded

        def do_lookup(key: PairKey) -> None:
            with session_scope(engine, read_only=True) as session:
                lookup(
                    session, key, driver_version=DRIVERS[0], now=NOW, ttl_s=TTL_S, allow_cross_driver=False
                )

        for key in hits[:200]:  # warm caches and the connection pool
            do_lookup(key)
        lookup_ms = [timed(lambda k=key: do_lookup(k), 1)[0] for key in hits]  # type: ignore[misc]
        miss_ms = [timed(lambda k=key: do_lookup(k), 1)[0] for key in misses]  # type: ignore[misc]
        unindexed_ms = unindexed_lookup_ms(engine, hits, args.unindexed)
        server_ms = server_execution_ms(engine, hits[:500]) if engine.dialect.name == "postgresql" else []

        base = NOW + timedelta(hours=1)
        records = [
            EvidenceIn(
                probe_id=f"write-{i}",
                key=hits[i % len(hits)],
                driver_version=DRIVERS[0],
                source="canary",
                outcome="safe",
                resident_slowdown_pct=3.0,
                resident_slowdown_low_pct=1.0,
                resident_slowdown_high_pct=5.0,
                samples=100,
                exposure_used=50,
                time_used_s=30.0,
                confidence=0.95,
                created_at=base + timedelta(seconds=i),
                expires_at=base + timedelta(days=14, seconds=i),
            )
            for i in range(args.writes)
        ]
        start = time.perf_counter()
        for rec in records:
            run_transaction(engine, lambda session, r=rec: record_evidence(session, r))  # type: ignore[misc]
        writes_per_s = args.writes / (time.perf_counter() - start)

        return Figures(
            backend,
            loaded,
            load_s,
            orm_rows_per_s,
            lookup_ms,
            miss_ms,
            unindexed_ms,
            server_ms,
            writes_per_s,
            explain(engine, hits[0]),
        )
    finally:
        engine.dispose()


def report(f: Figures, target_ms: float) -> None:
    p50, p99 = percentile(f.lookup_ms, 50), percentile(f.lookup_ms, 99)
    scan = statistics.median(f.unindexed_ms) if f.unindexed_ms else float("nan")
    bulk_rate = f.rows / f.load_s
    print(f"\n== {f.backend}: {f.rows:,} evidence rows")
    print(
        f"bulk load            {f.load_s:8.1f} s (generation excluded)   {bulk_rate:10,.0f} rows/s   "
        f"(ORM row-by-row baseline {f.orm_rows_per_s:,.0f} rows/s; bulk is {bulk_rate / f.orm_rows_per_s:.1f}x)"
    )
    print(
        f"lookup (hit)         p50 {p50:6.3f} ms   p95 {percentile(f.lookup_ms, 95):6.3f} ms   "
        f"p99 {p99:6.3f} ms   n={len(f.lookup_ms)}   "
        f"target p99 < {target_ms:g} ms: {'MET' if p99 < target_ms else 'MISSED'}"
    )
    print(
        f"lookup (miss)        p50 {percentile(f.miss_ms, 50):6.3f} ms   p99 {percentile(f.miss_ms, 99):6.3f} ms   "
        f"n={len(f.miss_ms)}"
    )
    print(
        f"query without index  median {scan:8.1f} ms   n={len(f.unindexed_ms)}   "
        f"(indexed lookup p50 is {scan / p50:,.0f}x faster)"
    )
    if f.server_ms:
        print(
            f"server execution     p50 {percentile(f.server_ms, 50):6.3f} ms   "
            f"p99 {percentile(f.server_ms, 99):6.3f} ms   n={len(f.server_ms)}   "
            "(planning + execution inside PostgreSQL; the rest of a lookup is client, network, scheduling)"
        )
    print(f"record_evidence      {f.writes_per_s:8.0f} writes/s (one committed transaction each)")
    print("lookup query plan:")
    print(f.plan)
    if "ix_evidence_lookup" not in f.plan:
        print("WARNING: the lookup did not use ix_evidence_lookup", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rows", type=int, default=1_000_000, help="evidence rows to load (default 1,000,000)"
    )
    parser.add_argument("--lookups", type=int, default=5000, help="timed lookups of existing keys")
    parser.add_argument("--writes", type=int, default=1000, help="timed record_evidence transactions")
    parser.add_argument("--unindexed", type=int, default=10, help="timed lookups with the index disabled")
    parser.add_argument("--backends", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql")
    parser.add_argument(
        "--pg-admin-url",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL database to connect to for creating the benchmark database",
    )
    parser.add_argument("--seed", type=int, default=20261130)
    args = parser.parse_args(argv)
    targets = {"sqlite": 2.0, "postgresql": 5.0}
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        if backend == "sqlite":
            with tempfile.TemporaryDirectory(prefix="canary-bench-") as tmp:
                figures = run_backend("sqlite", f"sqlite:///{Path(tmp) / 'evidence.sqlite3'}", args)
        elif backend == "postgresql":
            import psycopg

            name = f"canary_bench_{uuid.uuid4().hex[:10]}"
            with psycopg.connect(args.pg_admin_url, autocommit=True) as admin:
                admin.execute(f'CREATE DATABASE "{name}"')
            try:
                figures = run_backend("postgresql", args.pg_admin_url.rsplit("/", 1)[0] + "/" + name, args)
            finally:
                with psycopg.connect(args.pg_admin_url, autocommit=True) as admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        else:
            parser.error(f"unknown backend {backend!r}")
        report(figures, targets[backend])
        print(
            f"(load average while measuring: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
