"""Sensitive approval-form fields: a field declared `sensitive: true` is sealed in the decision event,
the run's snapshot and the next step's task input (which reads it), never stored in clear, redacted in
what the API shows, and handed to the activity in clear; on both backends."""

from __future__ import annotations

from typing import Any

from sealkit import CARD, CLEAR_REF, SEEN, TENANT, TOKEN, assert_sealed_at_rest, stored_bytes
from sealworld import World

IBAN = "IBAN-WALLABY-4242"

FORMED: dict[str, Any] = {
    "name": "pay-form",
    "steps": [
        {
            "id": "approve",
            "approval": {
                "approvers": {"users": ["alice"]},
                "quorum": 1,
                "timeout": "1h",
                "form": [
                    {"name": "iban", "type": "string", "sensitive": True, "required": True},
                    {"name": "ref", "type": "string"},
                ],
            },
        },
        {
            "id": "receipt",
            "activity": "card.receipt",
            "input": {"token": "${steps.approve.output.values.iban}", "ref": "${input.ref}"},
            "timeout": "10s",
            "retry": {"max_attempts": 1},
        },
    ],
}


def test_a_sensitive_form_value_is_sealed_everywhere_it_is_stored(world: World) -> None:
    """The IBAN an approver types is in no stored byte; the ref next to it is; the API shows the
    redaction marker in the decision; the activity reading it gets it in clear."""
    world.engine.publish(FORMED, tenant=TENANT)
    run_id = world.engine.start("pay-form", input={"ref": CLEAR_REF}, tenant=TENANT, actor="admin")
    world.wait(run_id, lambda s: s["wait_kind"] == "approval", "waited for approval")
    alice = world.principal("alice")
    (item,) = world.service.approvals.inbox(alice)
    world.service.approvals.decide_by_request(
        alice, item.request_id, "approve", values={"iban": IBAN, "ref": CLEAR_REF}
    )
    world.wait(run_id, lambda s: s["status"] in ("failed", "completed"), "ended")
    blob = stored_bytes(world.url)
    assert IBAN.encode() not in blob, "the sensitive form value is stored in clear"
    assert_sealed_at_rest(blob.replace(CARD.encode(), b"").replace(TOKEN.encode(), b""), "the database")
    events = world.get(f"/v1/runs/{run_id}/events", "viewer").json()
    (decided,) = [e["data"] for e in events["items"] if e["type"] == "ApprovalDecisionRecorded"]
    assert decided["values"]["ref"] == CLEAR_REF
    assert decided["values"]["iban"]["$redacted"] == "sensitive"
    assert IBAN not in str(events)
    assert any(s.get("token") == IBAN for s in SEEN), "the activity was not given the value in clear"
