"""The audit log's hash chains on both backends: rows chained per tenant as they are written, append-only
in the database itself, verification that names every changed, deleted or inserted row (an operator with
raw database access tampering, triggers bypassed), the upgrade of a database with rows written before the
chain, and (PostgreSQL) several processes appending to one chain at once."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from lockstep.app.audit import Audit
from lockstep.app.kernel import Kernel
from lockstep.core.auditchain import GENESIS, audit_hash
from lockstep.core.timeutil import iso
from lockstep.store import Store, open_store, upgrade_store

from .conftest import T0, Backend

COLS = "id, tenant, seq, prev_hash, hash"
HEAD = "rows, last_id, last_hash"
INSERT = "INSERT INTO audit (at, tenant, actor, action, target, outcome, detail) VALUES (?, ?, ?, ?, ?, ?, ?)"


@pytest.fixture
def log(store: Store) -> Audit:
    """The application's audit log over the test's store, with tenants acme and globex."""
    with store.write() as tx:
        tx.insert_tenant("acme", {}, iso(T0))
        tx.insert_tenant("globex", {}, iso(T0))
    return Audit(Kernel(store, clock=lambda: T0))


def rows(backend: Backend, url: str, where: str = "1=1") -> list[tuple[Any, ...]]:
    return backend.fetch(url, f"SELECT {COLS} FROM audit WHERE {where} ORDER BY id")


@contextmanager
def tampering(backend: Backend, url: str) -> Iterator[Any]:
    """A raw connection on which the append-only triggers do not fire: what an operator with the
    database's owner rights can do (SQLite: drop them; PostgreSQL: replica mode skips them)."""
    with backend.raw(url) as conn:
        if backend.name == "sqlite":
            for trigger in ("audit_append_only_update", "audit_append_only_delete", "audit_chains_kept"):
                conn.execute(f"DROP TRIGGER {trigger}")
        else:
            conn.execute("SET session_replication_role = replica")
        yield conn


def write_some(log: Audit) -> None:
    """Rows of acme, globex and no tenant, interleaved."""
    for i in range(4):
        log.record("acme", "bob", "ui.login", None, "ok", address=f"10.0.0.{i}")
        log.record("globex", "eve", "repair.pause", f"run-{i}", "refused", code="not_found")
        log.record(None, None, "api.request", "GET /v1/runs", "refused", code="unauthenticated")


def test_rows_are_chained_per_tenant_in_the_order_written(backend, url, log: Audit) -> None:
    """Each tenant's rows (and those without one) form their own chain: seq 1, 2, ...; each row links
    to its predecessor's hash, the first to GENESIS; each head records its chain's end."""
    write_some(log)
    chains = (("tenant = 'acme'", "acme"), ("tenant = 'globex'", "globex"), ("tenant IS NULL", ""))
    for where, tenant in chains:
        chain = rows(backend, url, where)
        assert [r[2] for r in chain] == [1, 2, 3, 4]
        assert [r[3] for r in chain] == [GENESIS, *(r[4] for r in chain[:-1])]
        head = backend.fetch(url, f"SELECT {HEAD} FROM audit_chains WHERE chain = ?", [tenant])
        assert head == [(4, chain[-1][0], chain[-1][4])]
    report = log.verify()
    assert report.ok, report
    assert report.rows == 12
    assert [(c.tenant, c.rows) for c in report.chains] == [(None, 4), ("acme", 4), ("globex", 4)]


def test_a_row_is_hashed_over_its_content(backend, url, log: Audit) -> None:
    """The stored hash is sha256 over the previous hash and the canonical JSON of the row's content."""
    log.record("acme", "bob", "run.cancel", "r-1", "ok", reason="customer asked")
    (_id, at, tenant, actor, action, target, outcome, detail, seq, prev, h) = backend.fetch(
        url, "SELECT id, at, tenant, actor, action, target, outcome, detail, seq, prev_hash, hash FROM audit"
    )[0]
    content = {
        "at": at,
        "tenant": tenant,
        "actor": actor,
        "action": action,
        "target": target,
        "outcome": outcome,
        "detail": json.loads(detail),
    }
    assert h == audit_hash(prev, seq, content)
    assert content["detail"] == {"reason": "customer asked"}


def test_a_tenant_that_does_not_exist_goes_to_the_chain_without_a_tenant(backend, url, log: Audit) -> None:
    """A login naming a made-up tenant is recorded without a tenant, the typed name in the detail: made-up
    names start no chains, and a tenant created later does not inherit them."""
    log.record("made-up", "bob", "ui.login", None, "refused", address="10.0.0.9")
    assert backend.fetch(url, "SELECT tenant, detail FROM audit") == [
        (None, json.dumps({"address": "10.0.0.9", "tenant_given": "made-up"}, separators=(",", ":")))
    ]
    assert backend.fetch(url, "SELECT chain FROM audit_chains") == [("",)]


def test_a_detail_holding_a_credential_is_refused_and_nothing_is_written(backend, url, log: Audit) -> None:
    """A caller passing a password or an API key in a detail gets an error; no row, no head moves."""
    with pytest.raises(ValueError, match="password"):
        log.record("acme", "bob", "ui.login", None, "refused", password="hunter2hunter2")  # noqa: S106 - the refused secret
    with pytest.raises(ValueError, match="API key"):
        log.record("acme", "bob", "ui.login", None, "ok", used="lsk_" + "x" * 43)
    assert backend.fetch(url, "SELECT COUNT(*) FROM audit") == [(0,)]
    assert backend.fetch(url, "SELECT COUNT(*) FROM audit_chains") == [(0,)]


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE audit SET detail = '{}' WHERE id = 1",
        "UPDATE audit SET hash = NULL WHERE id = 2",
        "DELETE FROM audit WHERE id = 2",
        "DELETE FROM audit_chains",
        "UPDATE audit_chains SET rows = 1",
    ],
)
def test_the_database_refuses_to_change_or_delete_audit_rows(backend, url, log: Audit, statement) -> None:
    """Attack: plain SQL that edits or removes audit rows, or winds a chain's head back, is refused by
    the database itself (triggers), and the log still verifies."""
    write_some(log)
    with pytest.raises(backend.error, match=r"append-only|only grows"):
        backend.execute(url, statement)
    assert log.verify().ok


def _problems(log: Audit) -> list[tuple[str | None, int | None, str]]:
    report = log.verify()
    assert not report.ok
    return [(c.tenant, p.id, p.problem) for c in report.chains for p in c.problems]


def test_verify_names_a_row_whose_detail_was_changed(backend, url, log: Audit) -> None:
    """Attack: an operator rewrites a login row's client address with raw SQL (triggers bypassed):
    verify fails and names that row and its tenant, and only that."""
    write_some(log)
    target = rows(backend, url, "tenant = 'acme'")[1][0]
    with tampering(backend, url) as conn:
        backend.run(conn, "UPDATE audit SET detail = ? WHERE id = ?", ['{"address":"192.0.2.1"}', target])
    assert _problems(log) == [
        ("acme", target, f"audit row {target} (tenant acme) was changed: its content does not match its hash")
    ]


def test_verify_names_a_deleted_middle_row(backend, url, log: Audit) -> None:
    """Attack: an operator deletes one of a tenant's rows from the middle: verify names the gap (its seq)
    and the rows around it."""
    write_some(log)
    chain = rows(backend, url, "tenant = 'globex'")
    with tampering(backend, url) as conn:
        backend.run(conn, "DELETE FROM audit WHERE id = ?", [chain[2][0]])
    assert _problems(log) == [
        (
            "globex",
            chain[3][0],
            f"audit row(s) seq 3 (tenant globex) after row {chain[1][0]} and before row {chain[3][0]} "
            "were deleted",
        )
    ]


def test_verify_names_an_inserted_row_and_rows_cut_from_the_end(backend, url, log: Audit) -> None:
    """Attack: a row inserted by hand (no hash, or a copy of another's) and the newest rows deleted are
    each named; a head wound back cannot hide the deletion without breaking verification."""
    write_some(log)
    chain = rows(backend, url, "tenant = 'acme'")
    with tampering(backend, url) as conn:
        backend.run(conn, INSERT, [iso(T0), "acme", "mallory", "repair.skip", "r-9", "ok", "{}"])
        backend.run(conn, "DELETE FROM audit WHERE tenant = 'globex' AND seq >= 3")
    found = _problems(log)
    inserted = max(r[0] for r in rows(backend, url))
    unhashed = f"audit row {inserted} (tenant acme) has no hash: it was written outside lockstep"
    assert ("acme", inserted, unhashed) in found
    cut = [p for t, _i, p in found if t == "globex"]
    assert len(cut) == 1
    assert "rows at the end were deleted" in cut[0]
    assert chain[-1][0] not in [i for t, i, _p in found if t == "acme"]


def _pre_chain_version(backend: Backend) -> int:
    chained = next(m.version for m in backend.migrations() if m.name == "audit_chain")
    return max(m.version for m in backend.migrations() if m.version < chained)


LEGACY = [
    ("2024-05-01T10:00:00.000Z", "acme", "bob", "ui.login", None, "ok", "{}"),
    ("2024-05-01T10:01:00.000Z", None, None, "ui.login", None, "refused", '{"address":"10.1.1.1"}'),
    ("2024-05-01T10:02:00.000Z", "acme", "alice", "approval.decide", "lnk_1", "ok", '{"channel":"api"}'),
    ("2024-05-01T10:03:00.000Z", "acme", "bob", "ui.login", None, "throttled", '{"locked":["user:a/b"]}'),
]


def test_upgrading_a_database_with_older_audit_rows_chains_them(backend, url) -> None:
    """A database written by the previous lockstep has audit rows without hashes: `db upgrade` chains
    them per tenant in id order, so they verify, new rows continue their chains, and a later edit of an
    old row is caught like any other."""
    backend.build_at(url, _pre_chain_version(backend))
    with backend.raw(url) as conn:
        tenant = "INSERT INTO tenants (name, settings, created_at) VALUES ('acme', '{}', ?)"
        backend.run(conn, tenant, [iso(T0)])
        for row in LEGACY:
            backend.run(conn, INSERT, list(row))
    assert "audit_chain" in ",".join(upgrade_store(url))
    assert [r[1:3] for r in rows(backend, url)] == [("acme", 1), (None, 1), ("acme", 2), ("acme", 3)]
    store = open_store(url)
    try:
        log = Audit(Kernel(store, clock=lambda: T0))
        report = log.verify()
        assert report.ok, report
        assert report.rows == 4
        log.record("acme", "bob", "ui.login", None, "ok")
        assert rows(backend, url)[-1][1:4] == ("acme", 4, rows(backend, url, "tenant = 'acme'")[2][4])
        assert log.verify().ok
        with tampering(backend, url) as conn:
            backend.run(conn, "UPDATE audit SET outcome = 'ok' WHERE id = 4")
        assert [(t, i) for t, i, _p in _problems(log)] == [("acme", 4)]
    finally:
        store.close()


def test_upgrading_a_database_without_audit_rows_starts_the_chains_empty(backend, url) -> None:
    """No rows before the upgrade: no chain heads; the first row written is seq 1 after GENESIS."""
    backend.build_at(url, _pre_chain_version(backend))
    upgrade_store(url)
    assert backend.fetch(url, "SELECT COUNT(*) FROM audit_chains") == [(0,)]
    store = open_store(url)
    try:
        with store.write() as tx:
            tx.insert_tenant("acme", {}, iso(T0))
        Audit(Kernel(store, clock=lambda: T0)).record("acme", "bob", "ui.login", None, "ok")
    finally:
        store.close()
    assert [r[1:4] for r in rows(backend, url)] == [("acme", 1, GENESIS)]


WRITER = """
import sys
from datetime import UTC, datetime
from lockstep.app.audit import Audit
from lockstep.app.kernel import Kernel
from lockstep.store import open_store

url, me, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = open_store(url)
log = Audit(Kernel(store, clock=lambda: datetime.now(UTC)))
print("ready", flush=True)
sys.stdin.readline()
for i in range(n):
    log.record("acme", me, "ui.login", None, "ok", n=i)
    log.record(None, None, "api.request", "GET /v1/runs", "refused", code="unauthenticated", who=me)
store.close()
"""


def test_writers_in_several_processes_keep_one_unbroken_chain(backend, url, log: Audit) -> None:
    """Four processes appending to the same two chains at once (released together): every row gets its
    own seq, ids grow with seq in each chain, and verification passes."""
    if backend.name == "sqlite":
        pytest.skip("SQLite serialises writers (BEGIN IMMEDIATE): the PostgreSQL case is the one at risk")
    n = 60
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, f"w{i}", str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    for p in procs:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        p.communicate(timeout=120)  # closes the pipes
        assert p.returncode == 0
    for where in ("tenant = 'acme'", "tenant IS NULL"):
        chain = rows(backend, url, where)
        assert [r[2] for r in chain] == list(range(1, 4 * n + 1))  # in id order: ids follow commit order
    report = log.verify()
    assert report.ok, report
    assert report.rows == 8 * n


def test_verify_while_rows_are_written_sees_one_consistent_moment(backend, url, log: Audit) -> None:
    """Verification reads each chain's head and rows in one snapshot: run again and again while two
    threads append to the chain it checks, it never reports rows past the head as a problem."""

    stop = threading.Event()
    writers_log = Audit(Kernel(open_store(url), clock=lambda: T0))

    def write() -> None:
        i = 0
        while not stop.is_set():
            writers_log.record("acme", "w", "ui.login", None, "ok", n=i)
            i += 1

    threads = [threading.Thread(target=write) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        checked: list[int] = []
        deadline = time.monotonic() + 60
        while (len(checked) < 10 or checked[-1] - checked[0] < 50) and time.monotonic() < deadline:
            report = log.verify("acme", untenanted=False)
            assert report.ok, report
            checked.append(report.rows)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        writers_log.kernel.store.close()
    assert checked[-1] > checked[0]  # the writers did get in between
    assert log.verify().ok
