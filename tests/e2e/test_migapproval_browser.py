"""Browser test of a migration that needs approval (a real `lockstep serve --example`, headless
Chromium): an operator's `lockstep migrate` makes a request; the approver finds it in the Approvals
inbox as a migration (versions, run), opens its review page, approves; the run is on version 2."""

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

V1: dict[str, Any] = {"name": "mig-browser", "steps": [{"id": "hold", "wait": "1h"}]}
V2: dict[str, Any] = {
    **V1,
    "migration": {"requires_approval": {"approvers": {"users": ["alice"]}, "quorum": 1, "timeout": "1d"}},
    "steps": [{"id": "hold", "wait": "1h"}, {"id": "notify", "succeed": True}],
}


def test_an_approver_reviews_and_approves_a_migration_in_the_inbox(
    page: Any, ui_server: Server, tmp_path: Path
) -> None:
    """The inbox row says what it is; the review page shows versions, run and reason; Approve migrates."""
    for n, doc in enumerate((V1, V2)):
        path = tmp_path / f"v{n + 1}.json"
        path.write_text(json.dumps(doc))
        ui_server.cli("publish", str(path))
    run_id = json.loads(ui_server.cli("start", "mig-browser", "--version", "1").stdout)["run_id"]
    asked = json.loads(ui_server.cli("migrate", run_id, "--to-version", "2", "--reason", "add notify").stdout)
    assert asked["request"]["status"] == "pending"
    login(page, "alice")
    page.goto("/ui/approvals")
    row = page.locator("tr", has_text="migration to v2")
    expect(row).to_be_visible()
    row.get_by_role("link", name="Review").click()
    expect(page.get_by_role("heading", name="mig-browser: version 1 → 2")).to_be_visible()
    expect(page.locator("#runs")).to_contain_text(run_id)
    expect(page.locator("#details")).to_contain_text("add notify")
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("heading", name="Decision recorded")).to_be_visible()
    expect(page.locator("main")).to_contain_text("the runs were migrated")
    assert ui_server.run(run_id)["definition"]["version"] == 2
