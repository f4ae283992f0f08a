"""The fake payment API's ledger: one SQLite file (WAL) holding every request the API answered, every
effect it applied, and every webhook body it received. The server writes it (`LedgerWriter`, from its
handler threads); the checker reads it (`LedgerReader`), also while the server runs in another process."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import closing
from http import HTTPStatus
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["SCHEMA", "Decision", "LedgerReader", "LedgerWriter"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY, at REAL, kind TEXT, idempotency_key TEXT, body_sha TEXT, run_id TEXT,
    step TEXT, attempt INT, outcome TEXT, status INT);
CREATE TABLE IF NOT EXISTS effects (
    idempotency_key TEXT PRIMARY KEY, kind TEXT, run_id TEXT, step TEXT, attempt INT, body_sha TEXT,
    response TEXT, at REAL);
CREATE TABLE IF NOT EXISTS notifications (id INTEGER PRIMARY KEY, at REAL, body TEXT);
"""
BUSY_TIMEOUT_S = 30.0


def _connect(path: Path) -> sqlite3.Connection:
    # Autocommit mode: transactions are opened explicitly (BEGIN IMMEDIATE) where a decision needs one.
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    # WAL survives a killed process with synchronous=NORMAL (only power loss could drop the last commits),
    # and that is the failure this suite injects; FULL would fsync on every request for nothing.
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


class Decision(NamedTuple):
    """What the ledger made of one effect request: the status and body to answer, and whether to drop the
    response instead."""

    status: int
    response: str
    dropped: bool


class LedgerWriter:
    """The server's side of the SQLite file: a fresh connection per call, so handler threads share none."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def create(self) -> None:
        with closing(_connect(self.path)) as conn:
            conn.execute("PRAGMA journal_mode=WAL")  # persistent: readers in other processes never block us
            conn.executescript(SCHEMA)

    def log(
        self,
        *,
        kind: str | None,
        key: str | None,
        body_sha: str | None,
        run_id: str | None,
        step: str | None,
        attempt: int | None,
        outcome: str,
        status: int,
    ) -> None:
        with closing(_connect(self.path)) as conn:
            conn.execute(
                "INSERT INTO requests (at, kind, idempotency_key, body_sha, run_id, step, attempt, outcome,"
                " status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (time.time(), kind, key, body_sha, run_id, step, attempt, outcome, status),
            )

    def decide(
        self,
        *,
        kind: str,
        key: str,
        body_sha: str,
        run_id: str,
        step: str,
        attempt: int | None,
        amount: object,
        drop: bool,
    ) -> Decision:
        """Apply, replay or refuse, and log the request, in one transaction. BEGIN IMMEDIATE takes the
        write lock before the lookup, so two requests with one key cannot both find it absent."""
        now = time.time()
        with closing(_connect(self.path)) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(
                    "SELECT kind, body_sha, response FROM effects WHERE idempotency_key = ?", (key,)
                ).fetchone()
                if row is None:
                    n = conn.execute("SELECT COUNT(*) FROM effects WHERE kind = ?", (kind,)).fetchone()[0]
                    saved = {"id": f"{kind}_{n + 1}", "kind": kind, "run_id": run_id, "step": step}
                    response = json.dumps({**saved, "amount": amount})
                    conn.execute(
                        "INSERT INTO effects (idempotency_key, kind, run_id, step, attempt, body_sha,"
                        " response, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (key, kind, run_id, step, attempt, body_sha, response, now),
                    )
                    status, outcome = HTTPStatus.CREATED, "applied"
                elif row[0] == kind and row[1] == body_sha:
                    status, outcome, response = HTTPStatus.OK, "replayed", str(row[2])
                else:
                    # A refusal applies nothing, so there is nothing for a dropped response to hide.
                    drop = False
                    detail = f"idempotency key {key!r} was first used for a different request ({row[0]})"
                    response = json.dumps({"error": "idempotency_key_reuse", "detail": detail})
                    status, outcome = HTTPStatus.CONFLICT, "key_reuse"
                conn.execute(
                    "INSERT INTO requests (at, kind, idempotency_key, body_sha, run_id, step, attempt,"
                    " outcome, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (now, kind, key, body_sha, run_id, step, attempt, "dropped" if drop else outcome, status),
                )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return Decision(status, response, drop)

    def notify(self, raw: str) -> None:
        with closing(_connect(self.path)) as conn:
            conn.execute("INSERT INTO notifications (at, body) VALUES (?, ?)", (time.time(), raw))

    def notification_bodies(self) -> list[Any]:
        with closing(_connect(self.path)) as conn:
            return [json.loads(r[0]) for r in conn.execute("SELECT body FROM notifications ORDER BY id")]


class LedgerReader:
    """Read-only view of a ledger file for the checker; works while the server runs in another process.
    Each call opens and closes its own connection, so it never holds a lock between calls."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def _rows(self, sql: str) -> list[dict[str, Any]]:
        # mode=rw rather than ro: a read-only connection cannot create the -shm file of a WAL database
        # whose writer has exited, and rw still refuses to create a missing ledger.
        uri = f"{self.path.resolve().as_uri()}?mode=rw"
        with closing(sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(row) for row in conn.execute(sql)]

    def effects(self) -> list[dict[str, Any]]:
        """Applied effects in the order applied; `response` is the saved response, parsed."""
        rows = self._rows("SELECT * FROM effects ORDER BY rowid")
        for row in rows:
            row["response"] = json.loads(row["response"])
        return rows

    def requests(self) -> list[dict[str, Any]]:
        """Every /effects request in arrival order, with its outcome and status (for a dropped response,
        the status that was never sent)."""
        return self._rows("SELECT * FROM requests ORDER BY id")

    def notifications(self) -> list[dict[str, Any]]:
        """Every webhook body received (id, at, body parsed), in arrival order."""
        rows = self._rows("SELECT * FROM notifications ORDER BY id")
        for row in rows:
            row["body"] = json.loads(row["body"])
        return rows
