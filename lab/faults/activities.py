"""The fault suite's activities (`lockstep worker --activities lab.faults.activities`): each one
calls the downstream payment API over HTTP with the step's idempotency key, as a real integration would.

The request body is the same on every attempt (the attempt number travels in a header), because the
downstream applies Stripe's rule: same key and same body replay the saved response, a different body
is an error. A lost response (connection dropped after the effect) is left to propagate as an
unexpected error: the outcome is unknown, so an at-least-once step retries with the same key and an
at-most-once step goes to needs_attention for a person to check the ledger.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import httpx

from lockstep.runtime.activity import ActivityContext, ActivityError, activity

__all__ = ["DOWNSTREAM_ENV", "charge", "pack", "refund", "ship"]

DOWNSTREAM_ENV = "LOCKSTEP_FAULTS_DOWNSTREAM"
_local = threading.local()


def _client() -> httpx.Client:
    client: httpx.Client | None = getattr(_local, "client", None)
    if client is None:
        # One client per activity thread: connection reuse without sharing a pool across threads.
        client = httpx.Client(base_url=os.environ[DOWNSTREAM_ENV], timeout=15.0)
        _local.client = client
    return client


def _effect(kind: str, data: dict[str, Any] | None, ctx: ActivityContext) -> dict[str, Any]:
    body = {"run_id": ctx.run_id, "step": ctx.step_id, "amount": (data or {}).get("amount", 0)}
    headers = {"Idempotency-Key": ctx.idempotency_key, "X-Attempt": str(ctx.attempt)}
    resp = _client().post(f"/effects/{kind}", json=body, headers=headers)
    if resp.status_code == 409:
        raise ActivityError("IdempotencyKeyReuse", resp.text[:200], retryable=False)
    if resp.status_code >= 500:
        raise ActivityError("DownstreamUnavailable", f"{resp.status_code}: {resp.text[:200]}")
    if resp.status_code >= 300:
        raise ActivityError("DownstreamRefused", f"{resp.status_code}: {resp.text[:200]}", retryable=False)
    saved = resp.json()
    return {
        "id": saved["id"],
        "attempt": ctx.attempt,
        "replayed": resp.headers.get("Idempotent-Replayed") == "true",
        "amount": body["amount"],  # what the activity was given (sealing.py: opened in clear)
    }


@activity("pay.charge")
def charge(data: dict[str, Any] | None, ctx: ActivityContext) -> dict[str, Any]:
    return _effect("charge", data, ctx)


@activity("pay.ship")
def ship(data: dict[str, Any] | None, ctx: ActivityContext) -> dict[str, Any]:
    return _effect("ship", data, ctx)


@activity("pay.pack")
def pack(data: dict[str, Any] | None, ctx: ActivityContext) -> dict[str, Any]:
    return _effect("pack", data, ctx)


@activity("pay.refund")
def refund(data: dict[str, Any] | None, ctx: ActivityContext) -> dict[str, Any]:
    return _effect("refund", data, ctx)


@activity("load.noop")
def noop(data: dict[str, Any] | None, ctx: ActivityContext) -> dict[str, Any]:
    """No effect: a load whose workers must drain as fast as the engine can (scenarios_backpressure)."""
    return {}
