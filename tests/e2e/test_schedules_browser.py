"""Browser test of the schedules page: a real `lockstep serve --example` driven by headless Chromium. The
admin finds the Schedules link, reads each schedule's next fire time (UTC and local), pauses one with a
reason and resumes it; a viewer sees the list without forms, and a viewer's forged pause (with the
viewer's own CSRF token) or a post without a token changes nothing."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import ui_fixtures as fx  # tests/e2e has no __init__.py: pytest puts this folder on sys.path
from playwright.sync_api import expect
from test_ops_bulk_browser import _serious
from ui_fixtures import ADMIN_PASSWORD, Server

browser = fx.browser
ui_server = fx.ui_server
new_context = fx.new_context
page = fx.page
viewer = fx.viewer

pytestmark = pytest.mark.slow
SCREENSHOT = "/tmp/lockstep-schedules-page.png"  # looked at by whoever runs the test


def login(page: Any, user: str = "admin", password: str = ADMIN_PASSWORD) -> None:
    page.goto("/ui/login")
    page.get_by_label("Tenant", exact=True).fill("default")
    page.get_by_label("User", exact=True).fill(user)
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"/ui/(approvals)?$"))  # an approver lands on their inbox


def show(server: Server, name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(server.cli("schedules", "show", name, "--json").stdout)
    return out


@pytest.fixture(scope="module")
def schedules(ui_server: Server) -> list[str]:
    """Two schedules of tenant default (the global --tenant's default), made with the CLI."""
    made = (("nightly", "30 2 * * *", "Europe/Berlin"), ("weekday", "0 9 * * MON-FRI", "UTC"))
    for name, cron, zone in made:
        ui_server.cli(
            "schedules", "create", name, "--definition", "vendor-onboarding",
            "--cron", cron, "--timezone", zone, "--input", '{"vendor": "Nightly Ltd"}',
        )  # fmt: skip
    return ["nightly", "weekday"]


def test_an_admin_reads_pauses_and_resumes(page: Any, ui_server: Server, schedules: list[str]) -> None:
    login(page)
    page.get_by_role("link", name="Schedules").click()
    page.wait_for_url(re.compile(r"/ui/schedules$"))
    nightly = page.locator("#schedule-nightly")
    expected = show(ui_server, "nightly")
    expect(nightly).to_contain_text(expected["next_fire_at"])
    expect(nightly).to_contain_text(expected["next_fire_times_local"][0])
    expect(nightly).to_contain_text("At 02:30 every day (Europe/Berlin)")
    expect(page.locator("#schedule-weekday")).to_contain_text("Monday through Friday")
    page.set_viewport_size({"width": 1400, "height": 700})
    page.screenshot(path=SCREENSHOT, full_page=False)

    nightly.get_by_label("reason to pause nightly").fill("holiday freeze")
    nightly.get_by_role("button", name="Pause").click()
    expect(page.get_by_role("status")).to_contain_text("Schedule nightly paused")
    expect(nightly.locator("td.status")).to_contain_text("paused")
    paused = show(ui_server, "nightly")
    assert paused["status"] == "paused"
    assert paused["next_fire_times"] == []  # the API lists no fire times while paused
    assert paused["paused_by"] == "admin"
    expect(nightly.locator("td.next")).to_have_text(
        f"paused since {paused['paused_at']} by admin: holiday freeze"
    )
    expect(nightly).not_to_contain_text(expected["next_fire_times_local"][0])
    assert _serious(page) == []  # axe-core on the page with a paused schedule
    text = ui_server.cli("schedules", "show", "nightly").stdout
    assert f"paused since {paused['paused_at']} by admin: holiday freeze" in text
    assert expected["next_fire_times"][0] not in text  # the CLI lists none either

    nightly.get_by_role("button", name="Resume").click()
    expect(page.get_by_role("status")).to_contain_text("Schedule nightly resumed")
    assert show(ui_server, "nightly")["status"] == "active"
    assert page.locator("script").count() == 0  # no JavaScript on the page


def test_a_viewer_sees_no_forms_and_cannot_forge_a_pause(
    new_context: Any, ui_server: Server, schedules: list[str], viewer: tuple[str, str]
) -> None:
    ctx = new_context()
    page = ctx.new_page()
    login(page, *viewer)
    page.goto("/ui/schedules")
    expect(page.locator("#schedule-nightly")).to_be_visible()
    expect(page.get_by_role("button", name="Pause")).to_have_count(0)
    # The viewer's own session token (from the logout form) on a hand-made pause: refused, audited.
    token = page.locator("form[action='/ui/logout'] input[name=csrf]").get_attribute("value")
    r = ctx.request.post("/ui/schedules/nightly/pause", form={"csrf": token, "reason": "mine now"})
    assert r.ok  # the page it lands on says why
    assert "your roles may not pause schedules" in r.text()
    assert show(ui_server, "nightly")["status"] == "active"
    audit = ui_server.cli("audit", "--tenant", "default", "--action", "ui.page", "--json").stdout
    assert "/ui/schedules/nightly/pause" in audit
    # Without a token, even an admin's session is refused before anything happens.
    admin_ctx = new_context()
    admin = admin_ctx.new_page()
    login(admin)
    r = admin_ctx.request.post("/ui/schedules/nightly/pause", form={"reason": "no token"})
    assert r.status == 403
    assert show(ui_server, "nightly")["status"] == "active"
