"""Set-based fill of the library's tables for the scaling study, and their sizes on disk.

The rows copy the shape one real call writes (``BenchCounter.add(n=1)``): an
actor row with ``{"value": M}`` and an empty mailbox after M turns, and M
completed messages with their results. Timestamps are two days old, so
``prune(older_than=1 day)`` and a one-day ``state_ttl`` find every filled row.
This SQL is the benchmark's, not the library's: it writes rows directly so a
million actors take minutes, not hours of calls.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Engine, text

AGE_MS = 2 * 86_400_000
CHUNK = 100_000


def _series(dialect: str, lo: int, hi: int, name: str) -> str:
    """A one-column row source ``<name>.g`` of the integers lo..hi."""
    if dialect == "postgresql":
        return f"generate_series({lo}, {hi}) AS {name}(g)"
    if dialect in ("mysql", "mariadb"):
        return f"(SELECT seq AS g FROM seq_{lo}_to_{hi}) AS {name}"
    return (
        f"(WITH RECURSIVE r(g) AS (SELECT {lo} UNION ALL SELECT g + 1 FROM r WHERE g < {hi}) "
        f"SELECT g FROM r) AS {name}"
    )


def _hex32(dialect: str, expr: str) -> str:
    if dialect == "postgresql":
        return f"lpad(to_hex({expr}), 32, '0')"
    if dialect in ("mysql", "mariadb"):
        return f"lower(lpad(hex({expr}), 32, '0'))"
    return f"printf('%032x', {expr})"


def _concat(dialect: str, *parts: str) -> str:
    if dialect in ("mysql", "mariadb"):
        return f"concat({', '.join(parts)})"
    return " || ".join(f"({p})" for p in parts)


def pk_base(engine: Engine, prefix: str) -> int:
    """The highest actor pk so far: filled actor ``fill-<k>`` gets pk base + k."""
    with engine.connect() as c:
        return int(c.scalar(text(f"SELECT COALESCE(MAX(pk), 0) FROM {prefix}actors")))


def fill(engine: Engine, prefix: str, base: int, first: int, last: int, per_actor: int) -> float:
    """Insert actors ``fill-<first>`` .. ``fill-<last>`` (pk = base + the number), each
    with ``per_actor`` completed messages; returns seconds taken."""
    d = engine.dialect.name
    old = int(time.time() * 1000) - AGE_MS
    t0 = time.perf_counter()
    for lo in range(first, last + 1, CHUNK):
        hi = min(last, lo + CHUNK - 1)
        with engine.begin() as c:
            ident = _concat(
                d, "'fill-'", "CAST(a.g AS CHAR(20))" if d != "postgresql" else "a.g::text"
            )
            state = _concat(d, "'{\"value\":'", f"'{per_actor}'", "'}'")
            if d == "postgresql":
                state = f"CAST({state} AS jsonb)"
            c.execute(
                text(
                    f"INSERT INTO {prefix}actors (pk, actor_type, actor_id, state, state_version, "
                    "next_seq, done_seq, attempt, lease_generation, paused, created_at, "
                    "updated_at) "
                    f"SELECT {base} + a.g, 'BenchCounter', {ident}, {state}, 1, {per_actor + 1}, "
                    f"{per_actor}, 0, 1, 0, {old}, {old} FROM {_series(d, lo, hi, 'a')}"
                )
            )
            if per_actor:
                at = f"{old} + s.g"
                args = "'{\"n\"\\:1}'"
                result = "CAST(s.g AS CHAR(20))" if d != "postgresql" else "s.g::text"
                c.execute(
                    text(
                        f"INSERT INTO {prefix}messages (id, actor_pk, actor_type, actor_id, seq, "
                        "operation, arguments, status, available_at, attempts, result, "
                        "created_at, completed_at) "
                        f"SELECT {_hex32(d, f'({base} + a.g) * 1000 + s.g')}, {base} + a.g, "
                        f"'BenchCounter', {ident}, "
                        f"s.g, 'add', {args}, 'completed', {at}, 1, {result}, {at}, {at} "
                        f"FROM {_series(d, lo, hi, 'a')} CROSS JOIN "
                        f"{_series(d, 1, per_actor, 's')}"
                    )
                )
    with engine.begin() as c:
        if d == "postgresql":
            c.execute(
                text(
                    f"SELECT setval(pg_get_serial_sequence('{prefix}actors', 'pk'), "
                    f"(SELECT max(pk) FROM {prefix}actors))"
                )
            )
            c.execute(text(f"ANALYZE {prefix}actors"))
            c.execute(text(f"ANALYZE {prefix}messages"))
        elif d in ("mysql", "mariadb"):
            c.execute(text(f"ANALYZE TABLE {prefix}actors, {prefix}messages"))
        else:
            c.execute(text("ANALYZE"))
    return time.perf_counter() - t0


def sizes(engine: Engine, prefix: str) -> dict[str, Any]:
    """Bytes on disk of the actors and messages tables (with indexes) and of each index;
    on PostgreSQL also the tables' sequential and index scans so far."""
    d = engine.dialect.name
    tables = [f"{prefix}actors", f"{prefix}messages"]
    out: dict[str, Any] = {"tables": {}, "indexes": {}}
    with engine.connect() as c:
        if d == "postgresql":
            for t in tables:
                out["tables"][t] = int(c.scalar(text(f"SELECT pg_total_relation_size('{t}')")))
                for name, size in c.execute(
                    text(
                        "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) "
                        f"FROM pg_index WHERE indrelid = '{t}'::regclass"
                    )
                ):
                    out["indexes"][name] = int(size)
                # Cumulative since the fill: a sequential scan of a big table shows here.
                scans = c.execute(
                    text(
                        "SELECT seq_scan, seq_tup_read, idx_scan FROM pg_stat_user_tables "
                        "WHERE relname = :t"
                    ),
                    {"t": t},
                ).one()
                out.setdefault("scans", {})[t] = {
                    "seq_scan": int(scans[0]),
                    "seq_tup_read": int(scans[1]),
                    "idx_scan": int(scans[2] or 0),
                }
        elif d in ("mysql", "mariadb"):
            for t in tables:
                out["tables"][t] = int(
                    c.scalar(
                        text(
                            "SELECT data_length + index_length FROM information_schema.tables "
                            "WHERE table_schema = DATABASE() AND table_name = :t"
                        ),
                        {"t": t},
                    )
                )
                for name, pages in c.execute(
                    text(
                        "SELECT index_name, stat_value FROM mysql.innodb_index_stats "
                        "WHERE database_name = DATABASE() AND table_name = :t "
                        "AND stat_name = 'size'"
                    ),
                    {"t": t},
                ):
                    out["indexes"][f"{t}.{name}"] = int(pages) * 16384
        else:
            try:
                for name, size in c.execute(
                    text("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")
                ):
                    if any(str(name).startswith(t) or t in str(name) for t in tables):
                        out["indexes"][str(name)] = int(size)
                for t in tables:
                    out["tables"][t] = sum(v for k, v in out["indexes"].items() if k == t or t in k)
            except Exception:  # dbstat is a compile-time option
                page = int(c.scalar(text("PRAGMA page_size")))
                out["tables"]["file"] = page * int(c.scalar(text("PRAGMA page_count")))
    return out
