"""Browser test of legal holds on the run page (a real `lockstep serve --example`, headless Chromium): a
run under a hold says so, with the reason, who placed it and how to release it; a tenant hold shows
on every run of the tenant; released, the card is gone. `lockstep show` prints the same line."""

from __future__ import annotations

import re
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


def test_a_held_run_shows_its_hold_and_how_to_release_it(page: Any, ui_server: Server) -> None:
    """Run hold: card with reason, placer and the release command; tenant hold: a second card; both
    released: no card; the CLI's show prints the hold while it stands."""
    run_id = ui_server.start_waiting_run("hold-vendor")
    ui_server.cli("runs", "hold", run_id, "--reason", "case 7781 (litigation)")
    login(page)
    page.goto(f"/ui/runs/{run_id}")
    card = page.locator("section.hold")
    expect(card).to_have_count(1)
    expect(card).to_contain_text("case 7781 (litigation)")
    expect(card).to_contain_text(f"lockstep runs release {run_id}")
    shown = ui_server.cli("show", run_id).stdout
    assert re.search(r"legal hold on this run since .* case 7781 \(litigation\)", shown), shown

    ui_server.cli("tenants", "hold", "default", "--reason", "regulator inquiry")
    page.reload()
    expect(page.locator("section.hold")).to_have_count(2)
    expect(page.locator("section.hold").nth(1)).to_contain_text("on tenant default")

    ui_server.cli("runs", "release", run_id, "--reason", "case closed")
    ui_server.cli("tenants", "release", "default", "--reason", "inquiry closed")
    page.reload()
    expect(page.locator("section.hold")).to_have_count(0)
    assert "legal hold" not in ui_server.cli("show", run_id).stdout
    assert "[bold]" not in ui_server.log()  # serve's own start-up lines render their markup
