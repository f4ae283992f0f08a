"""The run-webhooks checks of the fault suite (scenario `webhook_receiver_down`), from the stored events
and what the receiver verified (Standard Webhooks signatures checked with the `standardwebhooks` library):

- webhooks_lost: a subscribed event of a run (RunCompleted, RunFailed, RunCancelled, NeedsAttention,
  ApprovalRequested in its history) that the receiver never got;
- webhooks_out_of_order: the first arrivals of one run's deliveries not in the order of its events;
- webhooks_forged: a request the receiver could not verify, or one whose webhook-id changed between
  copies of the same event (the id must be the same on every attempt).

"No run blocked" is the checker's own `stuck` (every run settled while the receiver was down).
"""

from __future__ import annotations

from typing import Any

from .checker import WEBHOOK_CHECKS, Verdict
from .faultfleet import FaultFleet

__all__ = ["SUBSCRIBED", "WEBHOOK_CHECKS", "check_webhooks"]

SUBSCRIBED = {
    "RunCompleted": "run.completed",
    "RunFailed": "run.failed",
    "RunCancelled": "run.cancelled",
    "NeedsAttention": "run.needs_attention",
    "ApprovalRequested": "approval.requested",
}


def check_webhooks(
    f: FaultFleet, tenant: str, got: list[tuple[str, dict[str, Any]]], forged: int, v: Verdict
) -> dict[str, Any]:
    """Flag every subscribed event not delivered, out of order or forged; counts for the report."""
    if forged:
        v.flag("webhooks_forged", f"{forged} requests failed Webhook.verify")
    by_event: dict[tuple[str, int], set[str]] = {}
    first_seen: dict[str, list[int]] = {}
    for msg_id, body in got:
        key = (str(body["data"]["run_id"]), int(body["data"]["seq"]))
        ids = by_event.setdefault(key, set())
        ids.add(msg_id)
        seqs = first_seen.setdefault(key[0], [])
        if key[1] not in seqs:
            seqs.append(key[1])
    for (run, seq), ids in by_event.items():
        if len(ids) > 1:
            v.flag("webhooks_forged", f"run {run} seq {seq} arrived under {len(ids)} webhook-ids")
    expected = 0
    with f.engine.service.read() as tx:
        run_ids = tx.run_ids(tenant)
    for run in run_ids:
        seqs = [e["seq"] for e in f.engine.events(run, tenant=tenant) if e["type"] in SUBSCRIBED]
        expected += len(seqs)
        for seq in seqs:
            if (run, seq) not in by_event:
                v.flag("webhooks_lost", f"run {run} seq {seq} never reached the receiver")
        arrived = first_seen.get(run, [])
        if arrived != sorted(arrived):
            v.flag("webhooks_out_of_order", f"run {run}: first arrivals in seq order {arrived}")
    copies = len(got) - len(by_event)
    return {"subscribed events": expected, "deliveries received": len(got), "duplicate copies": copies}
