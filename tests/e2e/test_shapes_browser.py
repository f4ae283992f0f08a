"""Browser test of a parallel and for-each run: the contract-review example of `lockstep serve
--example` (its own server: it changes that run), driven by headless Chromium. Legal (dana) and finance
(carol) each decide their own branch's request from their inbox; the run page then shows the branches
and the items of the for-each step, and the run completes once every line is reserved."""

from __future__ import annotations

import re
from typing import Any

import pytest
import ui_fixtures as fx  # tests/e2e has no __init__.py: pytest puts this folder on sys.path
from playwright.sync_api import expect
from ui_fixtures import ADMIN_PASSWORD, Server, wait_until

browser = fx.browser
ui_server = fx.ui_server
new_context = fx.new_context
page = fx.page

pytestmark = pytest.mark.slow


def login(p: Any, user: str) -> None:
    p.goto("/ui/login")
    p.get_by_label("Tenant", exact=True).fill("default")
    p.get_by_label("User", exact=True).fill(user)
    p.get_by_label("Password", exact=True).fill(ADMIN_PASSWORD)
    p.get_by_role("button", name="Log in").click()
    p.wait_for_url(re.compile(r"/ui/(approvals)?$"))  # an approver lands on their inbox


def test_each_branch_is_decided_from_its_own_inbox_then_the_lines_run(
    page: Any, new_context: Any, ui_server: Server
) -> None:
    """dana sees legal's request only, carol finance's only; after both, the run page lists the two
    branches done and the three items, and the run completes."""
    run_id = ui_server.example_runs["C-77"]
    login(page, "admin")
    page.goto(f"/ui/runs/{run_id}")
    why = page.locator("#why .reason")
    expect(why).to_contain_text("branch legal: approval from dana")
    expect(why).to_contain_text("branch finance: approval from group finance")
    lanes = page.locator("table.lanes tbody tr")
    expect(lanes).to_have_count(2)

    for user, mine, theirs in (
        ("dana", "Legal review of contract C-77", "Finance review"),
        ("carol", "Finance review of contract C-77", "Legal review"),
    ):
        inbox = new_context().new_page()
        login(inbox, user)
        inbox.goto("/ui/approvals")
        row = inbox.locator("tbody tr", has_text=mine)
        expect(row).to_have_count(1)
        expect(inbox.locator("tbody tr", has_text=theirs)).to_have_count(0)
        row.get_by_role("button", name="Review").click()
        expect(inbox.locator("section.approve")).to_contain_text(mine)
        inbox.get_by_role("button", name="Approve").click()
        expect(inbox.locator("#outcome")).to_contain_text("You chose approve")

    def finished() -> Any:
        shown = ui_server.run(run_id)
        return shown if shown["status"] == "completed" else None

    done = wait_until(finished, "the contract's lines to be reserved", timeout=30)
    assert [x["reservation_id"] for x in done["steps"]["lines"]["output"]] == [
        "res-C-77-0",
        "res-C-77-1",
        "res-C-77-2",
    ]
    # The open page reloads itself once the run's status changes (its live poll); a reload of our
    # own here would race that one.
    expect(page.locator("h1 .badge")).to_have_text("completed", timeout=15_000)
    expect(lanes).to_have_count(5)  # two branches, three items
    expect(page.locator("table.lanes tbody tr", has_text="branch legal")).to_contain_text("succeeded")
    expect(page.locator("table.lanes tbody tr", has_text="item 2")).to_contain_text("lines[2].reserve")
