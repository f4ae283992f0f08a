"""Browser tests of the operations UI of issue 21, part two: bulk actions from the runs list and the
accessibility check of every page (axe-core), against a real `lockstep serve --example` in headless
Chromium. Helpers and definitions come from test_ops_ui_browser.py."""

from __future__ import annotations

import re
import shutil
from typing import Any

import pytest
import ui_fixtures as fx  # tests/e2e has no __init__.py: pytest puts this folder on sys.path
from test_ops_ui_browser import GREETING, publish, start
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


def _serious(page: Any) -> list[str]:
    """axe-core's serious and critical violations on the page as it is now (rule, first element)."""
    from axe_playwright_python.sync_playwright import Axe

    found = Axe().run(page).response["violations"]
    return [
        f"{v['id']} at {v['nodes'][0]['target']}" for v in found if v["impact"] in ("serious", "critical")
    ]


def test_every_page_passes_axe_core(ui_server: Server, new_context: Any) -> None:
    """The login page, the runs list (with a refused search), each kind of run page, the definition pages
    with a diff, audit, schedules, webhooks, and an approver's inbox and review page: no serious or
    critical axe-core violation."""
    runs = ui_server.example_runs
    admin = new_context().new_page()
    admin.goto("/ui/login")
    problems = {"/ui/login": _serious(admin)}
    login(admin)
    publish(ui_server, GREETING)
    publish(ui_server, {**GREETING, "steps": [{"id": "pause", "wait": "3h"}]})
    paths = [
        "/ui/",
        "/ui/?run=not-hex",
        *(f"/ui/runs/{runs[k]}" for k in ("E-1", "E-3", "Acme Tools", "PO-1001", "C-77")),
        "/ui/definitions",
        "/ui/definitions/greeting?version=2&compare=1",
        "/ui/audit",
        "/ui/schedules",
        "/ui/webhooks",
    ]
    for path in paths:
        admin.goto(path)
        problems[path] = _serious(admin)
    alice = new_context().new_page()
    login(alice, "alice")
    for path in ("/ui/approvals", f"/ui/approvals/{runs['PO-1001']}/manager-approval"):
        alice.goto(path)
        problems[path] = _serious(alice)
    assert {p: v for p, v in problems.items() if v} == {}


# One attempt, then the run waits for an operator (dead letter) instead of failing.
FLAKY = {
    "name": "flaky-reserve",
    "steps": [
        {
            "id": "reserve",
            "activity": "inventory.reserve",
            "input": {"order_id": "${input.order}", "sku": "A", "qty": 1, "fail_times": "${input.fails}"},
            "timeout": "30s",
            "retry": {"max_attempts": 1, "on_exhausted": "dead_letter"},
        }
    ],
}


def _select(page: Any, run_ids: list[str]) -> None:
    for run_id in run_ids:
        page.locator(f"input[type=checkbox][value='{run_id}']").check()


def test_bulk_retry_of_three_runs_previews_then_applies_with_one_reason(ui_server: Server, page: Any) -> None:
    """Three runs waiting for an operator are selected with a completed one: the preview would retry the
    three and refuses the completed one, changing nothing; applying retries the three, which complete,
    each with the reason in its history."""
    publish(ui_server, FLAKY)
    stuck = [
        start(ui_server, "flaky-reserve", {"order": f"B-{i}", "fails": 1}, f"e2e-bulk-{i}") for i in range(3)
    ]
    done = start(ui_server, "flaky-reserve", {"order": "B-ok", "fails": 0}, "e2e-bulk-ok")
    for run_id in stuck:
        wait_until(
            lambda r=run_id: ui_server.run(r)["status"] == "needs_attention", f"{run_id} to dead-letter"
        )
    wait_until(lambda: ui_server.run(done)["status"] == "completed", "the fourth run to complete")
    login(page)
    page.goto("/ui/?definition=flaky-reserve")
    _select(page, [*stuck, done])
    bulk = page.locator("form#bulk")
    bulk.locator("select[name=action]").select_option("retry")
    bulk.get_by_placeholder(re.compile("^Reason")).fill("inventory is back (bulk e2e)")
    bulk.get_by_role("button", name="Preview").click()
    page.wait_for_url(re.compile(r"/ui/runs/bulk$"))
    assert page.locator("#summary").inner_text() == "3 would be done, 1 refused."
    refused = page.locator("tr.o-row-refused")
    assert refused.count() == 1
    assert "already completed" in refused.inner_text()
    assert all(ui_server.run(r)["status"] == "needs_attention" for r in stuck)  # the preview changed nothing
    page.get_by_role("button", name="Retry 3 runs").click()
    assert page.locator("#summary").inner_text() == "3 done, 0 refused."
    for run_id in stuck:
        wait_until(lambda r=run_id: ui_server.run(r)["status"] == "completed", f"{run_id} to complete")
        assert "StepRetried" in ui_server.event_types(run_id)


def test_bulk_cancel_needs_a_reason_and_a_token(ui_server: Server, page: Any) -> None:
    """Without a reason nothing is done (and said so); without the CSRF token the request is refused."""
    run_id = ui_server.start_waiting_run("Bulk Cancel Ltd")
    login(page)
    token = page.locator("input[name=csrf]").first.get_attribute("value") or ""
    no_reason = page.request.post(
        "/ui/runs/bulk", form={"csrf": token, "action": "cancel", "run": run_id, "apply": "1"}
    )
    assert "Nothing done: a reason is required" in no_reason.text()
    forged = page.request.post(
        "/ui/runs/bulk", form={"action": "cancel", "run": run_id, "reason": "x", "apply": "1"}
    )
    assert forged.status == 403
    assert ui_server.run(run_id)["status"] == "waiting"
    applied = page.request.post(
        "/ui/runs/bulk",
        form={"csrf": token, "action": "cancel", "run": run_id, "reason": "e2e", "apply": "1"},
    )
    assert "1 done, 0 refused." in applied.text()
    wait_until(lambda: ui_server.run(run_id)["status"] == "cancelled", "the run to be cancelled")


@pytest.mark.parametrize(("width", "scale"), [(375, 1), (640, 2)])  # a phone; 1280 px at 200% zoom
def test_pages_fit_a_narrow_window_without_clipping(
    ui_server: Server, browser: Any, width: int, scale: int
) -> None:
    """At 375 px and at 200% zoom no page scrolls sideways and no cell of the steps or runs tables cuts
    its text off (each row becomes a card)."""
    ctx = browser.new_context(
        base_url=ui_server.base_url, viewport={"width": width, "height": 800}, device_scale_factor=scale
    )
    try:
        page = ctx.new_page()
        login(page)
        runs = ui_server.example_runs
        for path in ("/ui/", f"/ui/runs/{runs['E-3']}", f"/ui/runs/{runs['C-77']}", "/ui/definitions"):
            page.goto(path)
            wide = page.evaluate("document.documentElement.scrollWidth")
            assert wide <= width, f"{path} is {wide} px wide in a {width} px window"
            clipped = page.locator("table.steps td, table.runs td").evaluate_all(
                "els => els.filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent.trim())"
            )
            assert clipped == [], f"{path}: cut off: {clipped}"
    finally:
        ctx.close()
