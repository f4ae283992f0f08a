"""Browser test of the audit page: a real `lockstep serve --example` driven by headless Chromium. The admin
finds the Audit link, sees their own login, filters by action and outcome, pages to older rows; a viewer
has no link and is refused the page (and that refusal is itself in the log)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import ui_fixtures as fx  # tests/e2e has no __init__.py: pytest puts this folder on sys.path
from playwright.sync_api import expect
from ui_fixtures import ADMIN_PASSWORD, Server

browser = fx.browser
ui_server = fx.ui_server
new_context = fx.new_context
page = fx.page
viewer = fx.viewer

pytestmark = pytest.mark.slow
SCREENSHOT = "/tmp/lockstep-audit-page.png"  # looked at by whoever runs the test


def login(page: Any, user: str = "admin", password: str = ADMIN_PASSWORD) -> None:
    page.goto("/ui/login")
    page.get_by_label("Tenant", exact=True).fill("default")
    page.get_by_label("User", exact=True).fill(user)
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"/ui/(approvals)?$"))  # an approver lands on their inbox


def rows(page: Any) -> Any:
    return page.locator("table.audit tbody tr")


def test_an_admin_reads_filters_and_pages_the_audit_log(page: Any, ui_server: Server, viewer: Any) -> None:
    """The nav's Audit link opens the log with the admin's own login on top; filtering by action and
        outcome narrows it; more than a page of rows gives an 'Older rows' link to the rest; details read as
    words (lists as names), not Python reprs."""
    with ui_server.api() as api:  # 60 refused requests by the viewer: more than one page of rows
        name, _password = viewer
        key = ui_server.cli("users", "rotate-key", name, "--tenant", "default").stdout
        viewer_key = re.search(r"lsk_[A-Za-z0-9_-]+", key)
        assert viewer_key is not None
        for _ in range(60):
            r = api.get("/v1/audit", headers={"Authorization": f"Bearer {viewer_key.group(0)}"})
            assert r.status_code == 403
    login(page)
    page.get_by_role("link", name="Audit").click()
    page.wait_for_url(re.compile(r"/ui/audit$"))
    expect(page.get_by_role("heading", name=re.compile("Audit log"))).to_be_visible()
    first = rows(page).first
    expect(first).to_contain_text("ui.login")
    expect(first).to_contain_text("admin")
    expect(first).to_contain_text("ok")
    page.set_viewport_size({"width": 1280, "height": 1100})
    page.screenshot(path=SCREENSHOT, full_page=False)

    page.locator("form.filters input[name=action]").fill("api.")
    page.locator("form.filters select[name=outcome]").select_option("refused")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"action=api\."))
    expect(rows(page)).to_have_count(50)
    for text in rows(page).locator("td:nth-child(4)").all_inner_texts():
        assert text == "api.request"
    expect(rows(page).first).to_contain_text("GET /v1/audit")
    page.get_by_role("link", name=re.compile("Older rows")).click()
    page.wait_for_url(re.compile(r"cursor="))
    expect(rows(page)).to_have_count(10)
    assert page.locator("form.filters input[name=action]").input_value() == "api."
    expect(page.get_by_role("link", name=re.compile("Older rows"))).to_have_count(0)

    page.locator("form.filters input[name=action]").fill("not an action")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_role("alert")).to_contain_text("action: 'not an action' is neither an action name")
    assert page.locator("script").count() == 0  # no JavaScript on the page

    # Details read as words: a user's roles as a list of names, never Python's ['admin'] or None.
    page.goto("/ui/audit?action=user.create")
    details = rows(page).locator("td.detail").all_inner_texts()
    assert details
    assert all("roles" in d for d in details), details
    assert not [d for d in details if "['" in d or "None" in d], details


def test_a_viewer_has_no_audit_link_and_is_refused_the_page(
    new_context: Any, ui_server: Server, viewer: Any
) -> None:
    """A viewer's nav has no Audit link; opening /ui/audit anyway is a 403 page, and the refusal is a row
    the admin then sees."""
    name, password = viewer
    them = new_context().new_page()
    login(them, name, password)
    expect(them.locator("header nav")).to_be_visible()
    expect(them.locator("header nav").get_by_role("link", name="Audit")).to_have_count(0)
    response = them.goto("/ui/audit")
    assert response is not None
    assert response.status == 403
    expect(them.get_by_role("heading", name="Not allowed")).to_be_visible()
    expect(them.locator("table.audit")).to_have_count(0)
    admin = new_context().new_page()
    login(admin)
    admin.goto("/ui/audit?action=ui.page")
    expect(rows(admin).first).to_contain_text(name)
    expect(rows(admin).first).to_contain_text("/ui/audit")
    expect(rows(admin).first).to_contain_text("refused")
