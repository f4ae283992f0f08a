"""Browser tests of the approval page's context (issue 21): the run's input with its sensitive fields
redacted, the decisions so far ("1 of 2", who, when, comment), what approving, rejecting and letting it
expire lead to (inside a parallel branch too), and the accessibility check, against a real
`lockstep serve --example` in headless Chromium."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
import ui_fixtures as fx  # tests/e2e has no __init__.py: pytest puts this folder on sys.path
from test_ops_bulk_browser import _serious
from test_ops_ui_browser import publish, start
from test_ui_browser import login
from ui_fixtures import Server, wait_until

browser = fx.browser
ui_server = fx.ui_server
new_context = fx.new_context
page = fx.page

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz: apt-get install graphviz"),
]

# `serve --example` has no encryption key, so nothing is declared sensitive here: the redaction of the
# input on this page is pinned against sealed values in tests/sealing/test_sealing_approval_context.py.
CONTEXT = {
    "name": "e2e-approval-context",
    "input_schema": {
        "type": "object",
        "required": ["customer"],
        "properties": {"customer": {"type": "string"}, "note": {"type": "string"}},
    },
    "steps": [
        {
            "id": "reserve-stock",
            "activity": "inventory.reserve",
            "input": {"order_id": "${input.customer}", "sku": "A", "qty": 1},
            "timeout": "30s",
            "compensate": {
                "activity": "inventory.release",
                "input": {"reservation_id": '${steps["reserve-stock"].output.reservation_id}'},
            },
        },
        {
            "id": "checks",
            "parallel": {
                "join": "all",
                "branches": {
                    "legal": [
                        {
                            "id": "legal-ok",
                            "approval": {
                                "approvers": {"users": ["alice"]},
                                "timeout": "1d",
                                "details": "Legal check for ${input.customer}",
                            },
                        }
                    ]
                },
            },
        },
        {
            "id": "sign-off",
            "approval": {
                "approvers": {"users": ["alice", "bob"]},
                "quorum": 2,
                "timeout": "1d",
                "details": "Sign off the order of ${input.customer}",
            },
        },
        {
            "id": "charge-card",
            "activity": "payments.charge",
            "input": {"order_id": "${input.customer}", "amount": 1},
            "timeout": "30s",
        },
    ],
}


def _pending_at(server: Server, run_id: str, step: str) -> bool:
    return bool(server.run(run_id)["current_step"] == step)


def test_the_approval_page_shows_input_history_and_outcomes(ui_server: Server, new_context: Any) -> None:
    """In a parallel branch and at the top level: the outcomes name the next step and the compensation,
    the input is shown, and bob sees alice's decision (1 of 2, her
    comment); the page passes axe-core."""
    publish(ui_server, CONTEXT)
    run_id = start(ui_server, "e2e-approval-context", {"customer": "ACME", "note": "rush"}, "e2e-ctx-1")
    wait_until(lambda: ui_server.run(run_id)["status"] == "waiting", "the run to wait for legal")
    alice = new_context().new_page()
    login(alice, "alice")
    alice.goto(f"/ui/approvals/{run_id}/checks.legal.legal-ok")
    assert alice.locator("#on-approve").inner_text() == (
        "Approve: once approved, branch legal of parallel step checks ends successfully (its step's "
        "join decides what follows)."
    )
    assert alice.locator("#on-reject").inner_text() == (
        "Reject: once rejected, branch legal of parallel step checks fails, which fails checks: "
        "the run fails and compensates reserve-stock."
    )
    shown = alice.locator("#run-input").inner_text()
    assert '"customer": "ACME"' in shown
    assert '"note": "rush"' in shown
    assert _serious(alice) == []
    alice.get_by_label("Comment (optional)").fill("legal is fine")
    alice.get_by_role("button", name="Approve").click()
    wait_until(lambda: _pending_at(ui_server, run_id, "sign-off"), "the sign-off request")
    alice.goto(f"/ui/approvals/{run_id}/sign-off")
    assert alice.locator("#on-approve").inner_text() == (
        "Approve: once 2 approve, the run continues with charge-card."
    )
    assert alice.locator("#on-reject").inner_text() == (
        "Reject: once rejected, the run fails and compensates reserve-stock."
    )
    assert alice.locator("#on-approve code").inner_text() == "charge-card"
    assert alice.locator("#tally").inner_text() == "0 of 2 approval(s)"
    alice.get_by_label("Comment (optional)").fill("looks right to me")
    alice.get_by_role("button", name="Approve").click()
    bob = new_context().new_page()
    login(bob, "bob")
    bob.goto(f"/ui/approvals/{run_id}/sign-off")
    assert bob.locator("#tally").inner_text() == "1 of 2 approval(s)"
    row = bob.locator("table#decisions tbody tr")
    assert row.count() == 1
    assert row.locator("td[data-label=Who]").inner_text() == "alice"
    assert row.locator("td[data-label=Choice]").inner_text() == "approved"
    assert row.locator("td[data-label=Comment]").inner_text() == "looks right to me"
    assert _serious(bob) == []


def test_an_approver_outside_the_policy_sees_no_input(ui_server: Server, new_context: Any) -> None:
    """carol is an approver but not named by the request: the review page refuses her and shows neither
    the input nor the outcomes (the answer of a request that is not hers)."""
    run_id = start(ui_server, "e2e-approval-context", {"customer": "Initech"}, "e2e-ctx-2")
    wait_until(lambda: ui_server.run(run_id)["status"] == "waiting", "the run to wait for legal")
    carol = new_context().new_page()
    login(carol, "carol")
    resp = carol.goto(f"/ui/approvals/{run_id}/checks.legal.legal-ok")
    assert resp is not None
    assert resp.status == 409
    assert "Initech" not in carol.content()
    assert carol.locator("#run-input").count() == 0
