"""PostgreSQL adapter: psycopg 3 with a connection pool, row locks instead of a global writer lock.

A command locks its run row (`FOR UPDATE`) and appends with the expected sequence; claims and scheduler
passes pick candidates without locks, then lock each run with `SKIP LOCKED` (run before task, always,
so transactions cannot deadlock) and re-check the row. `synchronous_commit` stays on: a transition
acknowledged to anyone is on disk.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from ...core.effects import Effect
from ...core.timeutil import iso
from ..migrate import check_applied, created_indexes, created_tables, created_triggers, migrations
from ..port import ConcurrencyError, LoadedRun, RowLocked, SchemaError, Sealer, StoreUnavailable
from ..sql import load_queries
from ..sqltx import SqlTx
from ..sqltx.base import wake_channels
from ..states import StateCache
from .options import split_options
from .partitions import PgPartitionsTx

__all__ = ["PgStore", "PgTx"]

Q = load_queries(__package__ or "lockstep.store.postgres", "queries.sql")
PARTITIONS = 64
# Two processes upgrading at once: the second waits on this lock, then finds nothing left to do.
MIGRATION_LOCK = int.from_bytes(hashlib.sha256(b"lockstep.migrations").digest()[:8], "big", signed=True)


@contextmanager
def _autocommit(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """A read without BEGIN and COMMIT: one round trip per statement instead of three for a lone read
    (authentication, `show`). Under READ COMMITTED every statement of a transaction sees its own
    snapshot anyway; a read that needs one snapshot begins its transaction itself (audit_snapshot),
    and whatever it left open is rolled back here."""
    conn.autocommit = True
    try:
        yield
    finally:
        if not conn.broken:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.rollback()
            conn.autocommit = False


class PgTx(PgPartitionsTx, SqlTx):
    def __init__(
        self,
        conn: psycopg.Connection[Any],
        *,
        writing: bool,
        states: StateCache | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        super().__init__(conn, Q, psycopg.errors.IntegrityError, states, sealer)
        self.writing = writing

    def load_run(self, run_id: str, *, skip_locked: bool = False) -> LoadedRun | None:
        if not self.writing:
            return self._loaded(run_id, self._one("run_load", run_id=run_id))
        row = self._one("run_load_skip_locked" if skip_locked else "run_load_for_update", run_id=run_id)
        if row is None and skip_locked and self._one("run_exists", run_id=run_id) is not None:
            raise RowLocked(run_id)
        return self._loaded(run_id, row)

    def load_runs(self, run_ids: Sequence[str], *, skip_locked: bool = False) -> dict[str, LoadedRun]:
        if not self.writing:
            return super().load_runs(run_ids)
        query = self.q["runs_load_skip_locked_many" if skip_locked else "runs_load_for_update"]
        rows = self.c.execute(query, {"run_ids": sorted(set(run_ids))}).fetchall()
        out = {}
        for row in rows:
            loaded = self._loaded(row[0], row[1:])
            if loaded is not None:
                out[row[0]] = loaded
        return self.with_keys(out)

    def pipeline(self) -> AbstractContextManager[Any]:
        conn: psycopg.Connection[Any] = self.c
        return conn.pipeline()

    def hint(self, effects: Sequence[Effect]) -> None:
        # NOTIFY is transactional: delivered only if this transaction commits, once per channel. A task
        # leased in the same transition (eager dispatch) is nobody else's to wake up for.
        channels = wake_channels(effects)
        if "lockstep_tasks" in channels:
            self._notify("notify_tasks")
        if "lockstep_timers" in channels:
            self._notify("notify_timers")

    def _notify(self, query: str) -> None:
        if self._pending is not None:
            self._pending.append((query, {}))  # once per batch, after its writes
        else:
            self.c.execute(self.q[query])

    def list_param(self, values: Sequence[str]) -> Any:
        return list(values)

    def lock_tenant(self, name: str) -> None:
        self._one("tenant_lock", name=name)

    def scheduler_partitions(self, owner: str, now_ms: int, ttl_ms: int) -> list[int] | None:
        """Keep a fair share of the 64 partitions: renew ours, take expired ones, release extras."""
        until = now_ms + ttl_ms
        self.c.execute(self.q["member_renew"], {"owner": owner, "until": until})
        self.c.execute(self.q["members_prune"], {"now": now_ms})
        mine = sorted(
            r[0] for r in self.c.execute(self.q["partitions_renew"], {"owner": owner, "until": until})
        )
        others = int(self._one("partitions_live_owners", now=now_ms, owner=owner)[0])
        share = math.ceil(PARTITIONS / (others + 1))
        if len(mine) < share:
            free = [r[0] for r in self.c.execute(self.q["partitions_free"], {"now": now_ms})]
            want = free[: share - len(mine)]
            if want:
                got = self.c.execute(
                    self.q["partitions_take"], {"owner": owner, "until": until, "now": now_ms, "wanted": want}
                )
                mine = sorted({*mine, *(r[0] for r in got)})
        elif len(mine) > share:
            extra = mine[share:]
            self.c.execute(self.q["partitions_release"], {"owner": owner, "parts": extra})
            mine = mine[:share]
        return mine


class PgStore:
    """A pooled PostgreSQL database. URL: postgresql://user:pass@host:port/db, optionally with
    `?prepare_threshold=none` (options.py: behind a PgBouncer before 1.21 in transaction mode)."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 8,
        connect_timeout: float = 5.0,
        check_schema: bool = True,
        refuse_damaged: bool = True,
    ) -> None:
        self.url, self.prepare_threshold = split_options(url)
        url = self.url
        self.refuse_damaged = refuse_damaged  # False for `lockstep verify`: see SqliteStore
        self._closed = False
        self._lock = threading.Lock()
        self.states = StateCache()
        self.sealer: Sealer | None = None
        self._clock_lock = threading.Lock()
        self._clock_conn: psycopg.Connection[Any] | None = None
        self.pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            open=False,
            timeout=connect_timeout,
            kwargs={
                "autocommit": False,
                "connect_timeout": max(1, int(connect_timeout)),
                "prepare_threshold": self.prepare_threshold,
            },
            configure=_configure,
            reconnect_timeout=60,
            name="lockstep",
        )
        try:
            self.pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout:
            self.pool.close()
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL at {_safe(url)} within {connect_timeout}s"
            ) from None
        if check_schema:
            try:
                self._check_schema()
            except BaseException:
                self.close()
                raise

    @contextmanager
    def _tx(self, writing: bool) -> Iterator[PgTx]:
        try:
            with self.pool.connection() as conn:
                if writing:
                    with conn.transaction():
                        yield PgTx(conn, writing=True, states=self.states, sealer=self.sealer)
                else:
                    with _autocommit(conn):
                        # Only writers use the state cache: reads (verify, show) see the stored snapshot.
                        yield PgTx(conn, writing=False, states=None, sealer=self.sealer)
        except psycopg.errors.TransactionRollback as exc:
            # deadlock or serialization failure: the transaction lost a race; the caller retries it
            raise ConcurrencyError(str(exc).splitlines()[0]) from None
        except (PoolTimeout, psycopg.OperationalError) as exc:
            raise StoreUnavailable(f"PostgreSQL is unavailable: {str(exc).splitlines()[0]}") from None

    def write(self) -> AbstractContextManager[PgTx]:
        return self._tx(True)

    def read(self) -> AbstractContextManager[PgTx]:
        return self._tx(False)

    # --- schema --------------------------------------------------------------------------------
    def _applied(self, conn: psycopg.Connection[Any]) -> dict[int, str]:
        if conn.execute("SELECT to_regclass('schema_migrations')").fetchone() == (None,):
            return {}
        return {r[0]: r[1] for r in conn.execute("SELECT version, checksum FROM schema_migrations")}

    def _check_schema(self) -> None:
        wanted = migrations("lockstep.store.postgres")
        with self.pool.connection() as conn:
            applied = self._applied(conn)
        if not applied:
            self.upgrade(fresh_only=True)  # checks for foreign tables under the migration lock
            return
        check_applied(wanted, applied, _safe(self.url))
        missing = self._missing_objects()
        if missing and self.refuse_damaged:
            raise SchemaError(
                f"database {_safe(self.url)} is damaged: {'; '.join(missing)}, though its migration record "
                f"says the schema is complete; restore it from a backup and run `lockstep verify`"
            )

    def _missing_objects(self) -> list[str]:
        """Tables and indexes of the recorded schema that are gone, and triggers gone or disabled (an
        append-only trigger switched off is a history anyone can rewrite)."""
        wanted = migrations("lockstep.store.postgres")
        with self.pool.connection() as conn:
            row = conn.execute(
                "SELECT"
                " (SELECT array_agg(t ORDER BY t) FROM unnest(%s::text[]) t WHERE to_regclass(t) IS NULL),"
                " (SELECT array_agg(t ORDER BY t) FROM unnest(%s::text[]) t WHERE to_regclass(t) IS NULL),"
                " (SELECT array_agg(t ORDER BY t) FROM unnest(%s::text[]) t WHERE NOT EXISTS ("
                "   SELECT 1 FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid"
                "   WHERE g.tgname = t AND g.tgenabled <> 'D'"
                "     AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())))",
                (created_tables(wanted), created_indexes(wanted), created_triggers(wanted)),
            ).fetchone()
        tables, indexes, triggers = row if row is not None else (None, None, None)
        return (
            [f"table {t} is missing" for t in tables or ()]
            + [f"index {i} is missing" for i in indexes or ()]
            + [f"trigger {t} is missing or disabled" for t in triggers or ()]
        )

    def check_files(self) -> list[str]:
        """The tables, indexes and triggers of the recorded schema that are gone (or, triggers,
        disabled); PostgreSQL checks its own pages (data checksums, amcheck): see docs/design.md."""
        return [f"schema: {what}" for what in self._missing_objects()]

    def upgrade(self, fresh_only: bool = False) -> list[str]:
        """Apply pending migrations, each in its own transaction, under an advisory lock.

        With `fresh_only` (opening a database), refuse one that has tables but no migration record."""
        done: list[str] = []
        try:
            with self.pool.connection() as conn:
                conn.autocommit = True
                conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
                try:
                    conn.execute(
                        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                        "name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at TEXT NOT NULL)"
                    )
                    applied = self._applied(conn)
                    if fresh_only and not applied:
                        row = conn.execute(
                            "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() "
                            "AND tablename <> 'schema_migrations'"
                        ).fetchone()
                        if row is not None and row[0] > 0:
                            raise SchemaError(
                                f"{_safe(self.url)} has tables but no lockstep schema record: it is "
                                f"not a lockstep database; use another database"
                            )
                    for m in migrations("lockstep.store.postgres"):
                        if m.version in applied:
                            continue
                        with conn.transaction():
                            conn.execute(m.sql.encode())
                            if m.name == "audit_chain":  # the rows written before it, hashed in Python
                                PgTx(conn, writing=True).chain_legacy_audit()
                            conn.execute(
                                "INSERT INTO schema_migrations VALUES (%s, %s, %s, %s)",
                                (m.version, m.name, m.checksum, iso(datetime.now(UTC))),
                            )
                        done.append(f"{m.version:04d}_{m.name}")
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
                    conn.autocommit = False
        except (PoolTimeout, psycopg.OperationalError) as exc:
            raise StoreUnavailable(f"PostgreSQL is unavailable: {str(exc).splitlines()[0]}") from None
        return done

    def listen(self, channels: Sequence[str], on_notify: Callable[[], None], stop: threading.Event) -> None:
        """Call on_notify for every NOTIFY on channels until stop is set (run it in a thread). Only a hint:
        it reconnects after errors and never raises; missing a notification only costs a poll interval."""
        backoff = 0.5
        while not stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
                    for ch in channels:
                        conn.execute(f"LISTEN {ch}")
                    backoff = 0.5
                    while not stop.is_set():
                        for _ in conn.notifies(timeout=1.0):
                            on_notify()
            except psycopg.Error:
                stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def ensure_partitions(self) -> None:
        """Create the event partitions of the coming months (idempotent; the scheduler calls it daily)."""
        with self.write() as tx:
            tx.c.execute(
                "SELECT lockstep_ensure_event_partition((date_trunc('month', now() AT TIME ZONE 'UTC') "
                "+ make_interval(months => m))::date) FROM generate_series(0, 3) AS m"
            )

    def database_clock_ms(self) -> int | None:
        """The server's clock_timestamp(), on a connection of its own: never waits for the pool (a clock
        read inside a transaction would need a second pooled connection)."""
        with self._clock_lock:
            try:
                if self._clock_conn is None or self._clock_conn.closed:
                    self._clock_conn = psycopg.connect(self.url, autocommit=True, connect_timeout=2)
                row = self._clock_conn.execute(
                    "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
                ).fetchone()
            except psycopg.Error as exc:
                if self._clock_conn is not None:
                    self._clock_conn.close()
                self._clock_conn = None
                raise StoreUnavailable(f"PostgreSQL is unavailable: {str(exc).splitlines()[0]}") from None
            return int(row[0]) if row else None

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self.pool.close()
        with self._clock_lock:
            if self._clock_conn is not None:
                self._clock_conn.close()
                self._clock_conn = None


def _configure(conn: psycopg.Connection[Any]) -> None:
    """Like SQLite's busy timeout: a transaction stuck behind a lock gives up instead of waiting forever."""
    conn.execute("SET lock_timeout = '30s'")
    conn.execute("SET TIME ZONE 'UTC'")
    conn.commit()


def _safe(url: str) -> str:
    """The URL without its password, for messages."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}@{host}"
    return url
