"""Activities of the example process. The "payment service" is a ledger in its own SQLite file that,
like Stripe, deduplicates by idempotency key: a retried charge returns the saved charge."""

from __future__ import annotations

import os
import signal
import sqlite3
from typing import Any

from ..runtime.activity import ActivityContext, ActivityError, activity

LEDGER_ENV = "LOCKSTEP_DEMO_LEDGER"


def _ledger() -> sqlite3.Connection:
    path = os.environ.get(LEDGER_ENV)
    if not path:
        raise ActivityError("Misconfigured", f"set {LEDGER_ENV} to the ledger file", retryable=False)
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(
        "CREATE TABLE IF NOT EXISTS effects (idempotency_key TEXT PRIMARY KEY, kind TEXT, ref TEXT, "
        "order_id TEXT, amount REAL);"
        "CREATE TABLE IF NOT EXISTS calls (id INTEGER PRIMARY KEY, kind TEXT, idempotency_key TEXT, "
        "attempt INT);"
        "CREATE TABLE IF NOT EXISTS crashes (idempotency_key TEXT PRIMARY KEY);"
    )
    return conn


def _effect(
    kind: str, ctx: ActivityContext, ref: str, order_id: str = "", amount: float = 0.0
) -> tuple[str, bool]:
    """Apply an effect once per idempotency key; returns (ref, replayed)."""
    conn = _ledger()
    try:
        conn.execute(
            "INSERT INTO calls (kind, idempotency_key, attempt) VALUES (?, ?, ?)",
            (kind, ctx.idempotency_key, ctx.attempt),
        )
        cur = conn.execute(
            "INSERT OR IGNORE INTO effects VALUES (?, ?, ?, ?, ?)",
            (ctx.idempotency_key, kind, ref, order_id, amount),
        )
        row = conn.execute(
            "SELECT ref FROM effects WHERE idempotency_key = ?", (ctx.idempotency_key,)
        ).fetchone()
        return str(row[0]), cur.rowcount == 0
    finally:
        conn.close()


@activity("inventory.reserve")
def reserve(input: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
    if ctx.attempt <= int(input.get("fail_times", 0)):
        raise ActivityError("InventoryBusy", "the inventory service answered 503, try again later")
    if input["qty"] > 1000:
        raise ActivityError("OutOfStock", f"only 1000 of {input['sku']} in stock", retryable=False)
    ref, _ = _effect("reserve", ctx, f"res-{input['order_id']}", input["order_id"])
    return {"reservation_id": ref}


@activity("inventory.release")
def release(input: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
    ref, _ = _effect("release", ctx, f"rel-{input['reservation_id']}")
    return {"released": input["reservation_id"], "ref": ref}


@activity("payments.charge")
def charge(input: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
    ref, replayed = _effect(
        "charge", ctx, f"ch-{input['order_id']}-{ctx.attempt}", input["order_id"], float(input["amount"])
    )
    if input.get("lose_response"):
        conn = _ledger()
        try:
            first = conn.execute("INSERT OR IGNORE INTO crashes VALUES (?)", (ctx.idempotency_key,)).rowcount
        finally:
            conn.close()
        if first:
            # The card is charged; now die before reporting, as a real worker might (OOM kill, power loss).
            os.kill(os.getpid(), signal.SIGKILL)
    return {"charge_id": ref, "replayed": replayed}


@activity("payments.refund")
def refund(input: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
    ref, _ = _effect("refund", ctx, f"re-{input['charge_id']}")
    return {"refund_id": ref}


@activity("shipping.create")
async def ship(input: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
    ref, _ = _effect("ship", ctx, f"TRK-{input['order_id']}", input["order_id"])
    return {"tracking": ref}


@activity("compliance.check")
def compliance_check(input: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
    return {"vendor": input["vendor"], "sanctioned": False}


@activity("erp.activate-vendor")
def activate_vendor(input: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
    ref, _ = _effect("activate", ctx, f"vendor-{input['vendor']}")
    return {"erp_id": ref}
