"""Browser test of an approval form (a real `lockstep serve --example`, headless Chromium): the approver
sees labelled inputs, submits a bad value and gets the error next to its field (the input marked
invalid and described by the error, nothing recorded), then a good one, which is recorded with the
decision and reaches the step output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import ui_fixtures as fx  # tests/e2e has no __init__.py: pytest puts this folder on sys.path
from playwright.sync_api import expect
from test_audit_browser import login
from ui_fixtures import Server

browser = fx.browser
ui_server = fx.ui_server
new_context = fx.new_context
page = fx.page

pytestmark = pytest.mark.slow

FORMED = {
    "name": "po-form",
    "steps": [
        {
            "id": "approve",
            "approval": {
                "approvers": {"users": ["alice"]},
                "quorum": 1,
                "timeout": "1d",
                "details": "Approve the order",
                "form": [
                    {
                        "name": "amount",
                        "type": "number",
                        "label": "Amount approved",
                        "required": True,
                        "minimum": 0,
                        "description": "In EUR, without VAT",
                    },
                    {"name": "centre", "type": "string", "label": "Cost centre", "enum": ["ops", "sales"]},
                    {
                        "name": "checked",
                        "type": "boolean",
                        "label": "I checked the invoice",
                        "required": True,
                    },
                ],
            },
        },
        {"id": "done", "succeed": {"output": {"amount": "${steps.approve.output.values.amount}"}}},
    ],
}


def test_an_approver_fills_the_form_with_a_bad_then_a_good_value(
    page: Any, ui_server: Server, tmp_path: Path
) -> None:
    """-5 is refused next to the amount (aria-invalid, aria-describedby, focusable by its label);
    12.5 with the box ticked is approved; the run's output holds the value."""
    doc = tmp_path / "po-form.json"
    doc.write_text(json.dumps(FORMED))
    ui_server.cli("publish", str(doc))
    run_id = json.loads(ui_server.cli("start", "po-form").stdout)["run_id"]
    fx.wait_until(lambda: ui_server.run(run_id)["status"] == "waiting", "the run to wait for alice")
    login(page, "alice")
    page.goto(f"/ui/approvals/{run_id}/approve")
    amount = page.get_by_label("Amount approved")
    expect(amount).to_be_visible()
    expect(page.get_by_label("Cost centre")).to_be_visible()
    amount.fill("-5")
    page.get_by_label("Cost centre").select_option("ops")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#form-errors")).to_contain_text("Nothing was recorded")
    amount = page.get_by_label("Amount approved")
    expect(amount).to_have_attribute("aria-invalid", "true")
    expect(amount).to_have_value("-5")
    expect(page.locator("#field-amount-error")).to_have_text("Amount approved must be at least 0")
    expect(page.locator("#field-checked-error")).to_contain_text("must be ticked to approve")
    described = amount.get_attribute("aria-describedby") or ""
    assert "field-amount-error" in described.split()
    assert "field-amount-help" in described.split()
    assert "ApprovalDecisionRecorded" not in ui_server.event_types(run_id)

    amount.fill("12.5")
    page.get_by_label("I checked the invoice").check()
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("main")).to_contain_text("Decision recorded")
    fx.wait_until(lambda: ui_server.run(run_id)["status"] == "completed", "the run to complete")
    shown = ui_server.run(run_id)
    assert shown["output"] == {"amount": 12.5}, shown
