"""Browser test of step durations on the run page (a real `lockstep serve --example`, headless
Chromium): every step that started shows when and how long it took; a pending approval shows its time
in approval so far, and the same numbers are in `lockstep show`."""

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
DURATION = re.compile(r"^\d+(ms|s|m|h|d)( \d+(s|m|h))?$")


def _cells(page: Any, column: str) -> list[str]:
    headers = [h.strip().lower() for h in page.locator("section.card table thead th").all_inner_texts()]
    index = headers.index(column.lower())  # the page's CSS may show headers in capitals
    cells = page.locator(f"section.card table tbody tr td:nth-child({index + 1})")
    return [t.strip() for t in cells.all_inner_texts()]


def test_the_run_page_shows_step_durations_and_time_in_approval(page: Any, ui_server: Server) -> None:
    """A completed example order: each step has a start and a duration; the purchase order waiting for
    its approvals: `in approval ... so far` on its approval step, as `lockstep show` says."""
    login(page)
    order = ui_server.example_runs["E-1"]
    page.goto(f"/ui/runs/{order}")
    expect(page.locator("section.card table thead")).to_contain_text("Took")
    took = [t for t in _cells(page, "Took") if t]
    started = [t for t in _cells(page, "Started") if t]
    assert took, "no step shows a duration"
    assert all(DURATION.match(t) for t in took), took
    assert all(re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$", t) for t in started), started
    assert len(started) == len(took)

    po = ui_server.example_runs["PO-1001"]
    page.goto(f"/ui/runs/{po}")
    pending = [t for t in _cells(page, "Took") if t.startswith("in approval")]
    assert len(pending) == 1, _cells(page, "Took")
    assert pending[0].endswith("so far"), pending
    shown = ui_server.cli("show", po).stdout
    assert re.search(r"waiting_approval .*time in approval .* so far", shown), shown
