"""Browser tests of the operations UI: a real `lockstep serve --example` driven by headless Chromium.

The example server has tenant `default`, user `admin` (password `lockstep-example`), the approvers alice,
bob, carol and dana (same password) and seven runs: two completed orders, one failed order
(InventoryBusy), two vendor onboardings waiting on a 3-day timer, one purchase order waiting for two
approvals and one contract waiting for legal's and finance's approvals side by side.
Tests that change a run start their own run over the API, so the example runs stay as they are.

Flash messages and the login error travel in a short-lived HttpOnly cookie (never in the URL), set on the
redirect and deleted once a page has shown them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlencode

import pytest
import ui_fixtures as fx  # tests/e2e has no __init__.py: pytest puts this folder on sys.path
from playwright.sync_api import expect
from ui_fixtures import (
    ADMIN_PASSWORD,
    EXAMPLE_APPROVERS,
    EXAMPLE_START_KEYS,
    EXAMPLE_STATUSES,
    Server,
)

# The fixtures live in ui_fixtures.py (conftest.py is left to other end-to-end suites); pytest finds
# them by name in this module's namespace.
browser = fx.browser
ui_server = fx.ui_server
new_context = fx.new_context
page = fx.page
viewer = fx.viewer
outsider = fx.outsider

pytestmark = pytest.mark.slow

SESSION_COOKIE = "lockstep_session"
FLASH_COOKIE = "lockstep_flash"
WAIT_BLUE = "rgb(28, 126, 214)"  # --wait in style.css
FAIL_RED = "rgb(201, 42, 42)"  # --bad in style.css


def fill_login(
    page: Any, user: str = "admin", password: str = ADMIN_PASSWORD, tenant: str = "default"
) -> None:
    page.get_by_label("Tenant", exact=True).fill(tenant)
    page.get_by_label("User", exact=True).fill(user)
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state()


def login(page: Any, user: str = "admin", password: str = ADMIN_PASSWORD, tenant: str = "default") -> None:
    page.goto("/ui/login")
    fill_login(page, user, password, tenant)
    page.wait_for_url(re.compile(r"/ui/(approvals)?$"))  # an approver lands on their inbox


def run_row(page: Any, run_id: str) -> Any:
    return page.locator("table.runs tbody tr").filter(has=page.locator(f'a[href="/ui/runs/{run_id}"]'))


def listed_run_ids(page: Any) -> set[str]:
    hrefs = page.locator("table.runs tbody tr td:first-child a").evaluate_all(
        "els => els.map(e => e.pathname)"
    )
    return {h.removeprefix("/ui/runs/") for h in hrefs}


def filter_by(page: Any, status: str = "", waiting: str = "") -> None:
    page.locator("form.filters select[name=status]").select_option(status)
    page.locator("form.filters select[name=waiting]").select_option(waiting)
    page.get_by_role("button", name="Filter").click()
    # Wait for the filtered page itself (and its load event), not the one the click left.
    page.wait_for_url(re.compile(rf"/ui/\?status={status}&definition=[^&]*&waiting={waiting}(&|$)"))


def session_cookies(context: Any) -> list[dict[str, Any]]:
    return [c for c in context.cookies() if c["name"] == SESSION_COOKIE]


def flash_cookies(context: Any) -> list[dict[str, Any]]:
    return [c for c in context.cookies() if c["name"] == FLASH_COOKIE]


def assert_flash_set_cookie(response: Any, message: str) -> None:
    """The redirect sets the flash cookie: the message (URL-quoted), HttpOnly, SameSite=Strict, brief."""
    headers = response.headers_array  # a property of APIResponse, a method of a page's Response
    headers = headers() if callable(headers) else headers
    (header,) = [h["value"] for h in headers if h["name"].lower() == "set-cookie"]
    name_value, *attributes = [part.strip() for part in header.split(";")]
    assert name_value.startswith(FLASH_COOKIE + "=")
    assert unquote(name_value.removeprefix(FLASH_COOKIE + "=")) == message
    lowered = {a.lower() for a in attributes}
    assert {"httponly", "samesite=strict", "path=/"} <= lowered, header
    (max_age,) = [a for a in lowered if a.startswith("max-age=")]
    assert 0 < int(max_age.removeprefix("max-age=")) <= 300, header


def csrf_token(page: Any) -> str:
    token: str = page.locator('form[action="/ui/logout"] input[name="csrf"]').input_value()
    assert token
    return token


def test_runs_list_shows_example_runs_with_badges_and_filters(page: Any, ui_server: Server) -> None:
    """After login the list shows each example run with its status badge; the filters narrow it."""
    login(page)
    runs = ui_server.example_runs
    for key, status in EXAMPLE_STATUSES.items():
        badge = run_row(page, runs[key]).locator(".badge")
        expect(badge).to_have_text(status)
        expect(badge).to_have_class(re.compile(rf"\bs-{status}\b"))
    expect(page.locator('.counts a[href="/ui/?status=failed"]')).to_have_text(re.compile(r"failed\s+1$"))
    expect(page.locator('.counts a[href="/ui/?status=completed"]')).to_have_text(
        re.compile(r"completed\s+2$")
    )
    # Each row names its run by the last 10 characters of the id (the full id as title) and its start key.
    for key, run_id in runs.items():
        cell = run_row(page, run_id).locator("td").first
        expect(cell.get_by_role("link")).to_have_text("…" + run_id[-10:])
        expect(cell.get_by_role("link")).to_have_attribute("title", run_id)
        expect(cell.locator("small")).to_have_text(EXAMPLE_START_KEYS[key])

    filter_by(page, status="failed")
    expect(page).to_have_url(re.compile(r"[?&]status=failed\b"))
    expect(page.locator("form.filters select[name=status]")).to_have_value("failed")
    assert listed_run_ids(page) == {runs["E-3"]}
    expect(run_row(page, runs["E-3"]).locator("td.why")).to_contain_text("InventoryBusy")

    filter_by(page, status="completed")
    assert listed_run_ids(page) == {runs["E-1"], runs["E-2"]}

    filter_by(page, status="waiting", waiting="timer")
    waiting = listed_run_ids(page)
    assert {runs["Acme Tools"], runs["Globex"]} <= waiting
    assert not waiting & {runs["E-1"], runs["E-2"], runs["E-3"], runs["PO-1001"]}
    expect(page.locator("table.runs tbody .badge")).to_have_text(["waiting"] * len(waiting))
    expect(page.locator("table.runs tbody .bad")).to_have_count(0)
    why = run_row(page, runs["Globex"]).locator("td.why")
    expect(why).to_contain_text("durable timer")
    # Under the wait reason: what happens next, as the API explains it.
    expect(why.locator("small")).to_have_text("next: " + ui_server.run(runs["Globex"])["next_action"])

    filter_by(page, status="waiting", waiting="approval")
    assert listed_run_ids(page) == {runs["PO-1001"], runs["C-77"]}
    contract = run_row(page, runs["C-77"]).locator("td.why")
    expect(contract).to_contain_text("branch legal: approval from dana")
    expect(contract).to_contain_text("branch finance: approval from group finance")
    why = run_row(page, runs["PO-1001"]).locator("td.why")
    expect(why).to_contain_text("waiting for 2 more approvals of 2 from {alice, bob, finance}")
    expect(why.locator("small")).to_have_text("next: " + ui_server.run(runs["PO-1001"])["next_action"])

    page.get_by_role("link", name="clear").click()
    page.wait_for_url(re.compile(r"/ui/$"))
    assert set(runs.values()) <= listed_run_ids(page)


def test_waiting_run_page_explains_the_wait_and_does_not_look_failed(
    page: Any, ui_server: Server, tmp_path: Path
) -> None:
    """A run on its 3-day timer shows why it waits, what is next, steps and timeline, and no failure."""
    run_id = ui_server.example_runs["Globex"]
    login(page)
    filter_by(page, status="waiting")
    run_row(page, run_id).get_by_role("link").click()
    expect(page).to_have_url(re.compile(rf"/ui/runs/{run_id}$"))
    expect(page.locator("h1 .badge")).to_have_text("waiting")

    why = page.locator("#why")
    expect(why.get_by_role("heading")).to_have_text("Waiting — this is not a failure")
    expect(why.locator(".reason")).to_contain_text("waits on a durable timer")
    expect(why.locator(".reason")).to_contain_text("objection-period")
    expect(why.locator("dt", has_text="What happens next")).to_be_visible()
    expect(page.locator("#next-action")).to_have_text(re.compile(r"when the timer fires.+moves on"))
    expect(why.locator("dd", has_text=re.compile(r"\(in 2d \d+h\)"))).to_be_visible()

    steps = page.locator("section.card", has=page.get_by_role("heading", name="Steps")).locator("tbody tr")
    expect(steps).to_have_count(3)
    key = f"default:{run_id}:check-sanctions"  # an activity step shows the key its attempt was sent
    started, took, so_far = (
        re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$"),
        re.compile(r"^\d+m?s$"),
        re.compile(r"so far$"),
    )
    expect(steps.nth(0).locator("td")).to_have_text(
        ["check-sanctions", "succeeded", "1", started, took, key, ""]
    )
    expect(steps.nth(1).locator("td")).to_have_text(
        ["objection-period", "waiting", "1", started, so_far, "", ""]
    )
    expect(steps.nth(1)).to_have_class(re.compile(r"\bcurrent\b"))
    expect(steps.nth(2).locator("td")).to_have_text(["activate", "pending", "0", "", "", "", ""])

    timeline = page.locator("ol.timeline li .etype")
    expect(timeline).to_have_text(
        ["RunStarted", "ActivityScheduled", "ActivityStarted", "ActivitySucceeded", "TimerScheduled"]
    )
    expect(page.locator("li.ev-TimerScheduled .what")).to_contain_text("durable timer set")

    # Waiting must not look failed: no Failed heading, nothing red in the why-card, a blue (not red) bar.
    expect(page.get_by_role("heading", name="Failed", exact=True)).to_have_count(0)
    expect(page.locator(".why-card.failed")).to_have_count(0)
    expect(why.locator(".failed, .bad")).to_have_count(0)
    expect(why).to_have_css("border-left-color", WAIT_BLUE)
    expect(page.locator("ol.timeline .ev-RunFailed, ol.timeline .ev-ActivityFailed")).to_have_count(0)
    # Raw JSON only inside the closed details drawer.
    assert page.locator("main pre.json").count() == page.locator("details.drawer pre.json").count()
    expect(page.locator("details.drawer pre.json").first).not_to_be_visible()

    shot = tmp_path / "run-waiting.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 0


def test_purchase_order_example_waits_for_two_approvals(
    page: Any, ui_server: Server, new_context: Callable[[], Any]
) -> None:
    """The purchase-order example waits on an approval (blue, not a failure); each example approver logs
    in with the example password and finds it in their inbox."""
    run_id = ui_server.example_runs["PO-1001"]
    login(page)
    filter_by(page, status="waiting", waiting="approval")
    run_row(page, run_id).get_by_role("link").click()
    expect(page).to_have_url(re.compile(rf"/ui/runs/{run_id}$"))
    expect(page.locator("h1")).to_contain_text("purchase-order")
    expect(page.locator("h1 .badge")).to_have_text("waiting")
    why = page.locator("#why")
    expect(why.get_by_role("heading")).to_have_text("Waiting — this is not a failure")
    expect(why.locator(".reason")).to_contain_text(
        "waiting for 2 more approvals of 2 from {alice, bob, finance}"
    )
    expect(why.locator(".reason")).to_contain_text(re.compile(r"expires in 2d \d+h"))
    expect(why).to_have_css("border-left-color", WAIT_BLUE)
    expect(page.locator("#next-action")).to_have_text(ui_server.run(run_id)["next_action"])
    expect(why.locator(".failed, .bad")).to_have_count(0)

    for user in EXAMPLE_APPROVERS:
        inbox = new_context().new_page()
        login(inbox, user)
        inbox.goto("/ui/approvals")
        row = inbox.locator("tbody tr", has_text="Approve PO PO-1001 for 1250.0 EUR")
        expect(row).to_have_count(1)
        expect(row.locator("td")).to_contain_text(["purchase-order", "manager-approval"])
        expect(row).to_contain_text("0 of 2")
    assert ui_server.run(run_id)["status"] == "waiting"


def test_cancel_with_reason_cancels_the_waiting_run(page: Any, ui_server: Server) -> None:
    """Cancelling a waiting run with a reason flashes, then the run is cancelled with that reason."""
    run_id = ui_server.start_waiting_run("Cancel Me Ltd")
    reason = "vendor withdrew their application (e2e)"
    login(page)
    filter_by(page, status="waiting")
    run_row(page, run_id).get_by_role("link").click()
    expect(page.locator("#why")).to_be_visible()

    page.get_by_placeholder(re.compile("^Reason")).fill(reason)
    with page.expect_response(lambda r: r.url.endswith("/cancel") and r.request.method == "POST") as info:
        page.get_by_role("button", name="Cancel run").click()
    assert info.value.status == 303
    assert info.value.headers["location"] == f"/ui/runs/{run_id}"
    assert_flash_set_cookie(info.value, "Cancellation recorded.")
    expect(page).to_have_url(re.compile(rf"/ui/runs/{run_id}$"))
    expect(page.get_by_role("status")).to_have_text("Cancellation recorded.")
    assert flash_cookies(page.context) == []  # shown once, then deleted

    # Should the cancel still be settling, the page's live poll reloads it once the status changes: a
    # reload of our own only once it is terminal (no poll left to race).
    expect(page.locator("h1 .badge")).to_have_text("cancelled", timeout=15_000)
    page.reload()
    expect(page.locator("h1 .badge")).to_have_text("cancelled")
    expect(page.get_by_role("status")).to_have_count(0)  # a reload does not show the flash again
    expect(page.locator(".why-card.cancelled")).to_contain_text(f"{reason} — by admin")
    requested = page.locator("ol.timeline li.ev-CancelRequested")
    expect(requested).to_have_count(1)
    expect(requested.locator(".what")).to_contain_text(reason)
    expect(requested.locator(".what")).to_contain_text("admin")
    expect(page.locator("ol.timeline li.ev-RunCancelled")).to_have_count(1)
    expect(page.locator('form[action$="/cancel"]')).to_have_count(0)
    assert ui_server.run(run_id)["status"] == "cancelled"


def test_cancel_without_valid_csrf_token_is_refused(
    new_context: Callable[[], Any], ui_server: Server
) -> None:
    """A cancel POST with a session but a missing, wrong or foreign CSRF token is a 403, run unchanged."""
    run_id = ui_server.start_waiting_run("CSRF Target Ltd")
    ctx = new_context()
    page = ctx.new_page()
    login(page)
    other = new_context().new_page()
    login(other)
    other_token = csrf_token(other)
    assert other_token != csrf_token(page)

    url = f"/ui/runs/{run_id}/cancel"
    for form in (
        {"reason": "forged"},
        {"reason": "forged", "csrf": ""},
        {"reason": "forged", "csrf": "A" * 32},
        {"reason": "forged", "csrf": other_token},
    ):
        resp = ctx.request.post(url, form=form, max_redirects=0)
        assert resp.status == 403, (form, resp.status, resp.headers)
        assert "CSRF token is missing or wrong" in resp.text()

    # The same through the real form with its hidden token removed.
    page.goto(f"/ui/runs/{run_id}")
    page.evaluate("document.querySelector('form[action$=\"/cancel\"] input[name=csrf]').remove()")
    page.get_by_placeholder(re.compile("^Reason")).fill("forged through the page")
    with page.expect_response(lambda r: r.url.endswith(url) and r.request.method == "POST") as info:
        page.get_by_role("button", name="Cancel run").click()
    assert info.value.status == 403
    expect(page.get_by_role("heading", name="Request refused")).to_be_visible()

    assert ui_server.run(run_id)["status"] == "waiting"
    assert "CancelRequested" not in ui_server.event_types(run_id)
    page.goto(f"/ui/runs/{run_id}")
    expect(page.locator("h1 .badge")).to_have_text("waiting")


def test_wrong_password_is_refused_and_session_cookie_is_httponly_lax_and_logout_ends_it(
    page: Any, new_context: Callable[[], Any]
) -> None:
    """Wrong login: error, no session; session cookie HttpOnly+Lax; logout ends it on the server."""
    ctx = page.context
    page.goto("/ui/")
    expect(page).to_have_url(re.compile(r"/ui/login\?next="))
    for tenant, user, password in (
        ("default", "admin", "not-the-password"),
        ("nope", "admin", ADMIN_PASSWORD),
    ):
        page.goto("/ui/login")
        with page.expect_response(
            lambda r: r.url.endswith("/ui/login") and r.request.method == "POST"
        ) as info:
            fill_login(page, user, password, tenant)
        assert_flash_set_cookie(info.value, "Wrong tenant, user, password or key.")
        expect(page).to_have_url(re.compile(r"/ui/login\?next=%2Fui%2F$"))  # the error is not in the URL
        expect(page.get_by_role("alert")).to_have_text("Wrong tenant, user, password or key.")
        assert session_cookies(ctx) == []
        assert flash_cookies(ctx) == []
        page.reload()
        expect(page.get_by_role("alert")).to_have_count(0)

    login(page)
    (cookie,) = session_cookies(ctx)
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Lax"
    assert cookie["path"] == "/"
    assert SESSION_COOKIE not in page.evaluate("document.cookie")

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/ui/login$"))
    assert session_cookies(ctx) == []
    page.goto("/ui/")
    expect(page).to_have_url(re.compile(r"/ui/login\?next="))
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()

    # The old cookie, replayed from elsewhere, no longer opens a session.
    replay = new_context()
    replay.add_cookies([cookie])
    replayed = replay.new_page()
    replayed.goto("/ui/")
    expect(replayed).to_have_url(re.compile(r"/ui/login\?next="))


def test_login_post_without_login_csrf_token_is_refused(page: Any) -> None:
    """A login POST without the login form's CSRF token opens no session, even with the right password."""
    page.goto("/ui/login")
    resp = page.context.request.post(
        "/ui/login",
        form={"tenant": "default", "user": "admin", "password": ADMIN_PASSWORD},
        max_redirects=0,
    )
    assert resp.status == 303
    assert resp.headers["location"] == "/ui/login?next=%2Fui%2F"
    assert_flash_set_cookie(resp, "Your login form expired; please try again.")
    assert session_cookies(page.context) == []
    page.goto(resp.headers["location"])
    expect(page.get_by_role("alert")).to_have_text("Your login form expired; please try again.")


def test_login_with_api_key_and_deep_link_survives_login(page: Any, ui_server: Server) -> None:
    """Opening a run link while logged out returns to that run after logging in with the API key."""
    run_id = ui_server.example_runs["Acme Tools"]
    page.goto(f"/ui/runs/{run_id}")
    expect(page).to_have_url(re.compile(r"/ui/login\?next=%2Fui%2Fruns%2F" + run_id))
    page.get_by_text("Log in with an API key instead").click()
    page.get_by_label("API key", exact=True).fill(ui_server.api_key)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(rf"/ui/runs/{run_id}$"))
    expect(page.locator("header .user")).to_contain_text("admin")
    expect(page.locator("h1 .badge")).to_have_text("waiting")


def test_viewer_sees_runs_but_cannot_cancel(page: Any, ui_server: Server, viewer: tuple[str, str]) -> None:
    """A viewer (made with the CLI) sees runs and run pages, gets no cancel form, cannot forge one."""
    name, password = viewer
    login(page, name, password)
    expect(page.locator("header .user")).to_contain_text("(viewer)")
    assert set(ui_server.example_runs.values()) <= listed_run_ids(page)

    run_id = ui_server.example_runs["Acme Tools"]
    run_row(page, run_id).get_by_role("link").click()
    expect(page.locator("#why")).to_contain_text("Waiting — this is not a failure")
    expect(page.locator("ol.timeline li")).not_to_have_count(0)
    expect(page.locator('form[action$="/cancel"]')).to_have_count(0)
    expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)
    expect(page.get_by_role("heading", name="Cancel this run")).to_have_count(0)

    # A hand-made POST with the viewer's own valid token is refused too.
    target = ui_server.start_waiting_run("Viewer Target Ltd")
    resp = page.context.request.post(
        f"/ui/runs/{target}/cancel",
        form={"reason": "viewer tries", "csrf": csrf_token(page)},
        max_redirects=0,
    )
    assert resp.status in (303, 403)
    if resp.status == 303:
        page.goto(resp.headers["location"])
        expect(page.get_by_role("status")).to_contain_text("Not cancelled")
    assert ui_server.run(target)["status"] == "waiting"
    assert "CancelRequested" not in ui_server.event_types(target)


def test_failed_run_page_shows_its_error_under_a_failed_heading(page: Any, ui_server: Server) -> None:
    """The failed example run shows a Failed heading, the InventoryBusy error and 5 attempts."""
    run_id = ui_server.example_runs["E-3"]
    login(page)
    filter_by(page, status="failed")
    run_row(page, run_id).get_by_role("link").click()
    expect(page.locator("h1 .badge")).to_have_text("failed")
    card = page.locator(".why-card.failed")
    expect(card.get_by_role("heading", name="Failed", exact=True)).to_be_visible()
    expect(card.locator(".reason")).to_have_text(
        "InventoryBusy: the inventory service answered 503, try again later (step reserve)"
    )
    expect(card).to_have_css("border-left-color", FAIL_RED)
    expect(page.get_by_text("Waiting — this is not a failure")).to_have_count(0)
    reserve = page.locator("tbody tr", has=page.locator("td", has_text=re.compile(r"^reserve$")))
    expect(reserve.locator("td").nth(1)).to_have_text("failed")
    expect(reserve.locator("td").nth(2)).to_have_text("5")
    expect(reserve.locator("td .bad")).to_contain_text("InventoryBusy")
    expect(page.locator("ol.timeline li.ev-RunFailed")).to_have_count(1)
    expect(page.locator('form[action$="/cancel"]')).to_have_count(0)


def test_another_tenant_cannot_see_or_cancel_the_runs(
    page: Any, ui_server: Server, outsider: tuple[str, str, str]
) -> None:
    """Another tenant's admin sees none of these runs: run page 404, a cancel POST changes nothing."""
    tenant, name, password = outsider
    login(page, name, password, tenant)
    expect(page.locator("header .tenant")).to_have_text(tenant)
    assert not listed_run_ids(page) & set(ui_server.example_runs.values())

    run_id = ui_server.example_runs["Globex"]
    resp = page.goto(f"/ui/runs/{run_id}")
    assert resp is not None
    assert resp.status == 404
    expect(page.get_by_role("heading", name="Run not found")).to_be_visible()
    expect(page.get_by_text("vendor-onboarding")).to_have_count(0)

    resp = page.context.request.post(
        f"/ui/runs/{run_id}/cancel", form={"reason": "not mine", "csrf": csrf_token(page)}, max_redirects=0
    )
    assert resp.status in (303, 404)
    if resp.status == 303:  # the UI answers with a flash; it must read like a missing run, nothing more
        assert resp.headers["location"] == f"/ui/runs/{run_id}"
        assert_flash_set_cookie(resp, f"Not cancelled: run {run_id} not found in tenant {tenant}")
    assert ui_server.run(run_id)["status"] == "waiting"
    assert "CancelRequested" not in ui_server.event_types(run_id)


def test_cancel_after_session_expiry_returns_to_the_run_after_login(page: Any, ui_server: Server) -> None:
    """A cancel sent after the session expired leads, after login, back to the run page, not a 405."""
    run_id = ui_server.start_waiting_run("Expired Session Ltd")
    login(page)
    page.goto(f"/ui/runs/{run_id}")
    page.get_by_placeholder(re.compile("^Reason")).fill("sent after the session expired")
    page.context.clear_cookies()  # what 12 hours (the session TTL) would do
    page.get_by_role("button", name="Cancel run").click()
    expect(page).to_have_url(re.compile(r"/ui/login\?next=%2Fui%2Fruns%2F" + run_id + "$"))
    with page.expect_response(lambda r: r.request.method == "GET" and "/ui/runs/" in r.url) as info:
        fill_login(page)
    assert info.value.status == 200
    expect(page).to_have_url(re.compile(rf"/ui/runs/{run_id}$"))
    expect(page.locator("h1 .badge")).to_have_text("waiting")  # the lost POST was not replayed
    assert "CancelRequested" not in ui_server.event_types(run_id)


@pytest.mark.parametrize("where", ["login-error", "run-flash"])
def test_alert_text_cannot_be_injected_through_the_url(page: Any, ui_server: Server, where: str) -> None:
    """A crafted link cannot make the login page or a run page display arbitrary text as an alert:
    `?error=` and `?flash=` are ignored."""
    spoof = "Your account is locked: call +1 555 0100 to unlock it"
    if where == "login-error":
        page.goto("/ui/login?" + urlencode({"error": spoof}))
    else:
        login(page)
        page.goto(f"/ui/runs/{ui_server.example_runs['Globex']}?" + urlencode({"flash": spoof}))
    # Server-rendered: the page is complete once loaded, so look once instead of waiting for a change.
    assert page.get_by_text(spoof).count() == 0
    assert page.get_by_role("alert").count() == 0
    assert page.get_by_role("status").count() == 0
