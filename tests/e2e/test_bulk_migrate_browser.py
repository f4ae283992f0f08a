"""Browser test of bulk migration from the runs list (issue 21): select runs (found by an input field),
choose a version and one reason, preview (nothing changes), apply; per-run results, a migration that
needs approval reported as awaiting it, refused ones with why; against a real `lockstep serve --example`
in headless Chromium."""

from __future__ import annotations

import re
import shutil
from typing import Any
from urllib.parse import quote

import pytest
import ui_fixtures as fx  # tests/e2e has no __init__.py: pytest puts this folder on sys.path
from test_ops_bulk_browser import _select, _serious
from test_ops_ui_browser import publish, start
from test_ui_browser import login
from ui_fixtures import Server, wait_until

browser = fx.browser
ui_server = fx.ui_server
new_context = fx.new_context
page = fx.page
viewer = fx.viewer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz: apt-get install graphviz"),
]

PLAIN_V1: dict[str, Any] = {"name": "e2e-bulk-mig", "steps": [{"id": "hold", "wait": "1h"}]}
PLAIN_V2: dict[str, Any] = {
    **PLAIN_V1,
    "steps": [{"id": "hold", "wait": "1h"}, {"id": "done", "succeed": True}],
}
GUARDED_V1: dict[str, Any] = {"name": "e2e-bulk-mig-guarded", "steps": [{"id": "hold", "wait": "1h"}]}
GUARDED_V2: dict[str, Any] = {
    **GUARDED_V1,
    "migration": {"requires_approval": {"approvers": {"users": ["alice"]}, "quorum": 1, "timeout": "1d"}},
    "steps": [{"id": "hold", "wait": "1h"}, {"id": "done", "succeed": True}],
}
ONLY_V1: dict[str, Any] = {"name": "e2e-bulk-mig-single", "steps": [{"id": "hold", "wait": "1h"}]}
QUICK: dict[str, Any] = {"name": "e2e-bulk-mig-quick", "steps": [{"id": "done", "succeed": True}]}


def _outcome(page: Any, run_id: str) -> str:
    row = page.locator("table.bulk-report tbody tr").filter(has=page.locator(f'a[href="/ui/runs/{run_id}"]'))
    return str(row.locator("td[data-label=Detail]").inner_text())


def test_bulk_migrate_previews_then_migrates_asks_approval_and_says_why_not(
    ui_server: Server, page: Any
) -> None:
    """Two runs migrate to v2; a run whose version 2 needs approval is asked for (awaiting approval,
    still on v1); a run of a definition without v2 and a completed run are refused with the reason; the
    preview changed nothing and the pages pass axe-core."""
    for doc in (PLAIN_V1, GUARDED_V1, ONLY_V1, QUICK):
        publish(ui_server, doc)
    batch = {"batch": "bm-1"}
    plain = [start(ui_server, PLAIN_V1["name"], batch, f"e2e-bm-{i}") for i in range(2)]
    guarded = start(ui_server, GUARDED_V1["name"], batch, "e2e-bm-g")
    single = start(ui_server, ONLY_V1["name"], batch, "e2e-bm-s")
    quick = start(ui_server, QUICK["name"], batch, "e2e-bm-q")
    publish(ui_server, PLAIN_V2)
    publish(ui_server, GUARDED_V2)
    wait_until(lambda: ui_server.run(quick)["status"] == "completed", "the quick run to complete")
    everything = [*plain, guarded, single, quick]
    login(page)
    page.goto("/ui/?input=" + quote("batch = bm-1"))
    _select(page, everything)
    bulk = page.locator("form#bulk")
    bulk.locator("select[name=action]").select_option("migrate")
    bulk.locator("input[name=version]").fill("2")
    bulk.get_by_placeholder(re.compile("^Reason")).fill("move to v2 (bulk e2e)")
    bulk.get_by_role("button", name="Preview").click()
    page.wait_for_url(re.compile(r"/ui/runs/bulk$"))
    assert page.locator("#summary").inner_text() == "3 would be done, 2 refused."
    assert all(_outcome(page, r) == "would migrate v1 -> v2" for r in plain)
    assert "needs approval" in _outcome(page, guarded)
    assert "has no version 2" in _outcome(page, single)
    assert "already completed" in _outcome(page, quick)
    assert _serious(page) == []
    assert {ui_server.run(r)["definition"]["version"] for r in [*plain, guarded]} == {1}  # nothing moved
    page.get_by_role("button", name="Migrate 3 runs").click()
    assert page.locator("#summary").inner_text() == "3 done, 0 refused."
    assert all(_outcome(page, r) == "migrated v1 -> v2" for r in plain)
    assert re.match(
        r"awaiting approval: migration request \S+ \(v1 -> v2\) waits for 1", _outcome(page, guarded)
    )
    assert [ui_server.run(r)["definition"]["version"] for r in plain] == [2, 2]
    assert ui_server.run(guarded)["definition"]["version"] == 1  # its approvers decide, not the operator
    assert all("WorkflowMigrated" in ui_server.event_types(r) for r in plain)


def test_bulk_migrate_needs_a_version_and_an_operator(
    ui_server: Server, page: Any, new_context: Any, viewer: tuple[str, str]
) -> None:
    """Without a version nothing is done (and said so); a forged post without the token is refused; a
    viewer's post with a valid token migrates nothing."""
    publish(ui_server, ONLY_V1)  # a definition no other test gives a version 2
    run_id = start(ui_server, ONLY_V1["name"], {"batch": "bm-2"}, "e2e-bm-nov")
    login(page)
    token = page.locator("input[name=csrf]").first.get_attribute("value") or ""
    form = {"csrf": token, "action": "migrate", "run": run_id, "reason": "x", "apply": "1"}
    assert "Nothing done: give the version number" in page.request.post("/ui/runs/bulk", form=form).text()
    assert (
        "Nothing done: give the version number"
        in page.request.post("/ui/runs/bulk", form={**form, "version": "-1"}).text()
    )
    forged = page.request.post("/ui/runs/bulk", form={**form, "csrf": "", "version": "1"})
    assert forged.status == 403
    other = new_context().new_page()
    login(other, viewer[0], viewer[1])
    their_token = other.locator("input[name=csrf]").first.get_attribute("value") or ""
    refused = other.request.post("/ui/runs/bulk", form={**form, "csrf": their_token, "version": "1"})
    assert "Nothing done" in refused.text()
    assert ui_server.run(run_id)["definition"]["version"] == 1
