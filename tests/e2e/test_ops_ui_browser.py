"""Browser tests of the operations UI of issue 21 (diagrams, run page, definitions, search, approvers),
against a real `lockstep serve --example` driven by headless Chromium. Each test that changes something
publishes its own definition or starts its own run over the API, so the example runs stay as they are."""

from __future__ import annotations

import re
import shutil
from typing import Any

import pytest
import ui_fixtures as fx  # tests/e2e has no __init__.py: pytest puts this folder on sys.path
import yaml
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

ATTACK = """</text></svg><script>window.__xss=1</script><img src=x onerror='window.__xss=2'>"""
HOSTILE = {
    "name": "hostile-labels",
    "steps": [
        {
            "id": "route",
            "choice": [
                {"if": 'input.note == "' + ATTACK.replace('"', '\\"') + '"', "next": "boom"},
                {"else": "done"},
            ],
        },
        {"id": "boom", "fail": {"error": ATTACK, "message": "no"}},
        {"id": "done", "succeed": True},
    ],
}
# Two timers in a row: the run waits on the first, then on the second (its status stays `waiting`).
TWO_WAITS = {
    "name": "two-waits",
    "steps": [
        {"id": "first-wait", "wait": "2s"},
        {
            "id": "check",
            "activity": "compliance.check",
            "input": {"vendor": "${input.vendor}"},
            "timeout": "30s",
        },
        {"id": "second-wait", "wait": "1h"},
    ],
}


def publish(server: Server, document: dict[str, Any]) -> None:
    with server.api() as c:
        resp = c.post(
            "/v1/definitions", content=yaml.safe_dump(document), headers={"content-type": "application/yaml"}
        )
        assert resp.status_code in (200, 201), resp.text


def start(server: Server, definition: str, data: dict[str, Any], key: str) -> str:
    with server.api() as c:
        resp = c.post(
            "/v1/runs", json={"definition": definition, "input": data}, headers={"Idempotency-Key": key}
        )
        assert resp.status_code in (200, 201), resp.text
        return str(resp.json()["run_id"])


def node(page: Any, step: str) -> Any:
    """The diagram's node of a step (its first line of text is the step id)."""
    return page.locator("svg.diagram g.node").filter(
        has=page.locator("text", has_text=re.compile(f"^{step}$"))
    )


def test_hostile_labels_are_drawn_as_text_and_run_nothing(ui_server: Server, page: Any) -> None:
    """A condition and a fail code with </svg><script> and quotes show as text; no script, no handler runs."""
    publish(ui_server, HOSTILE)
    run_id = start(ui_server, "hostile-labels", {"note": "hello"}, "e2e-hostile-1")
    wait_until(lambda: ui_server.run(run_id)["status"] == "completed", "the hostile run to complete")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    login(page)
    page.goto(f"/ui/runs/{run_id}")
    texts = page.locator("svg.diagram text").all_text_contents()
    assert any(t.startswith('input.note == "</text></svg><script>') for t in texts), texts
    assert any(t.startswith("fail </text></svg><script>") for t in texts), texts
    assert page.evaluate("window.__xss") is None
    assert page.locator("svg.diagram script, svg.diagram img, main script").count() == 0
    assert dialogs == []
    # The path taken: route -> done; boom was never entered, in the API and the CLI as on the page.
    assert {k: v["status"] for k, v in ui_server.run(run_id)["steps"].items()} == {
        "route": "succeeded",
        "boom": "not_taken",
        "done": "succeeded",
    }
    assert re.search(r"boom\s+.\s*not_taken", ui_server.cli("show", run_id).stdout)
    assert "st-done" in (node(page, "route").get_attribute("class") or "")
    assert "st-not-taken" in (node(page, "boom").get_attribute("class") or "")


def test_the_diagram_highlights_the_current_steps_of_a_live_run(ui_server: Server, page: Any) -> None:
    """The contract example waits on two approvals side by side: both nodes are current (blue, thick),
    the later for-each is still to come, and a node links to its first event in the timeline."""
    run_id = ui_server.example_runs["C-77"]
    login(page)
    page.goto(f"/ui/runs/{run_id}")
    for step in ("legal-review", "finance-review"):
        shape = node(page, step).locator("path, polygon").first
        assert "st-current" in (node(page, step).get_attribute("class") or "")
        assert shape.evaluate("e => getComputedStyle(e).stroke") == fx_wait_blue()
        assert float(shape.evaluate("e => getComputedStyle(e).strokeWidth").removesuffix("px")) >= 3
    assert "st-pending" in (node(page, "reserve").get_attribute("class") or "")
    link = node(page, "legal-review").locator("a")
    href = link.get_attribute("xlink:href")
    assert href
    assert href.startswith("#ev-")
    link.click()
    target = page.locator(f"li{href}")
    assert "legal-review" in (target.get_attribute("data-step") or "")
    assert page.evaluate("location.hash") == href


def fx_wait_blue() -> str:
    return "rgb(28, 126, 214)"  # --wait in style.css


def test_the_run_page_follows_a_run_while_a_worker_moves_it(ui_server: Server, page: Any) -> None:
    """Opened while the run waits on its first timer, the page shows without a reload (htmx polling the
    run's fragment) the worker's activity done and the run waiting on its second timer."""
    publish(ui_server, TWO_WAITS)
    login(page)
    run_id = start(ui_server, "two-waits", {"vendor": "Live Ltd"}, "e2e-live-1")
    page.goto(f"/ui/runs/{run_id}")
    assert "st-current" in (node(page, "first-wait").get_attribute("class") or "")
    page.evaluate("window.__same_page = true")
    wait_until(
        lambda: "st-current" in (node(page, "second-wait").get_attribute("class") or ""),
        "the page to show the second wait as current",
        timeout=30,
    )
    assert page.evaluate("window.__same_page") is True  # swapped in place, not reloaded
    bars = page.locator("#gantt svg g.bar")  # the Gantt chart: one bar per step that started
    labels = page.locator("#gantt svg g.labels text").all_text_contents()
    assert labels == ["first-wait", "check", "second-wait"]
    assert "s-waiting" in (bars.last.get_attribute("class") or "")
    assert "st-done" in (node(page, "check").get_attribute("class") or "")
    assert page.locator("table.steps tr", has_text="check").locator(".step").inner_text() == "succeeded"
    assert page.locator(".timeline li").last.locator(".etype").inner_text() == "TimerScheduled"


GREETING = {
    "name": "greeting",
    "input_schema": {
        "type": "object",
        "required": ["who"],
        "properties": {"who": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
    },
    "steps": [{"id": "pause", "wait": "1h"}],
}


def test_a_definition_page_shows_versions_counts_a_diff_and_starts_a_run(
    ui_server: Server, page: Any
) -> None:
    """Versions with digests and their runs by status, the YAML, a side-by-side diff of v1 and v2, and a
    start form from input_schema whose answer is the new run's page (input typed as the schema says)."""
    publish(ui_server, GREETING)
    publish(ui_server, {**GREETING, "steps": [{"id": "pause", "wait": "2h"}]})
    start(ui_server, "greeting", {"who": "Bo"}, "e2e-greet-1")  # v2, the latest
    login(page)
    page.goto("/ui/definitions")
    page.get_by_role("link", name="greeting").click()
    rows = page.locator("table.versions tbody tr")
    assert rows.count() == 2
    assert rows.first.locator("td").first.inner_text() == "v2"
    assert rows.first.locator("code").inner_text().startswith("sha256:")
    assert "waiting 1" in rows.first.locator("td.counts").inner_text()
    assert "none" in rows.nth(1).locator("td.counts").inner_text()
    assert "wait: 2h" in page.locator("pre.yaml").inner_text()
    rows.nth(1).get_by_role("link", name="diff with v2").click()
    changed = page.locator("table.diff tr.d-changed")
    assert changed.count() == 1
    assert "wait: 1h" in changed.locator("td.old").inner_text()
    assert "wait: 2h" in changed.locator("td.new").inner_text()
    form = page.locator("#start form")
    form.locator("input[name='in.who']").fill("Ann")
    form.locator("input[name='in.times']").fill("3")
    form.get_by_role("button", name="Start run").click()
    page.wait_for_url(re.compile(r"/ui/runs/[0-9a-f]+$"))
    assert page.locator("p.alert").inner_text() == "Run started."
    run = ui_server.run(page.url.rsplit("/", 1)[1])
    assert run["input"] == {"who": "Ann", "times": 3}
    assert run["definition"]["version"] == 2


def test_the_start_form_refuses_a_missing_token_and_a_viewer(
    ui_server: Server, new_context: Any, viewer: tuple[str, str]
) -> None:
    """Without the CSRF token the start is refused (403); a viewer sees no form and is refused when it
    posts one with its own token; no run is started either way."""
    publish(ui_server, GREETING)
    before = len(ui_server.runs())
    admin = new_context().new_page()
    login(admin)
    forged = admin.request.post("/ui/definitions/greeting/start", form={"version": "1", "in.who": "X"})
    assert forged.status == 403
    assert "CSRF" in forged.text()
    looker = new_context().new_page()
    login(looker, *viewer)
    looker.goto("/ui/definitions/greeting")
    assert looker.locator("#start").count() == 0
    token = looker.locator("input[name=csrf]").first.get_attribute("value")
    refused = looker.request.post(
        "/ui/definitions/greeting/start", form={"csrf": token or "", "version": "1", "in.who": "X"}
    )
    assert refused.url.endswith("/ui/definitions/greeting")  # back to the definition page
    assert "Not started" in refused.text()
    assert len(ui_server.runs()) == before


def test_the_runs_list_searches_by_id_prefix_start_key_definition_and_time(
    ui_server: Server, page: Any
) -> None:
    """Each search is server-side and kept in the URL: a run id prefix, a start key, a definition with a
    version, a start-time range that excludes everything, and a bad prefix explained; a started-at column."""
    runs = ui_server.example_runs
    po = runs["PO-1001"]
    login(page)
    page.goto("/ui/")
    assert page.locator("table.runs thead th").all_inner_texts()[-2:] == ["STARTED", "UPDATED"]
    started = page.locator("table.runs tr", has=page.locator(f'a[href="/ui/runs/{po}"]')).locator(
        "td.started time"
    )
    assert started.get_attribute("datetime") == ui_server.run(po)["started_at"]

    def listed() -> set[str]:
        hrefs = page.locator("table.runs tbody tr td:first-child a").evaluate_all(
            "els => els.map(e => e.pathname)"
        )
        return {h.removeprefix("/ui/runs/") for h in hrefs}

    page.locator("form.filters input[name=run]").fill(po[:24])
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(rf"run={po[:24]}"))
    assert listed() == {po}

    page.goto("/ui/?key=example-vendor-2")
    assert listed() == {runs["Globex"]}

    page.goto("/ui/?definition=order-fulfilment&version=1&status=completed")
    assert listed() == {runs["E-1"], runs["E-2"]}
    assert page.locator("form.filters select[name=status]").input_value() == "completed"  # kept in the form

    page.goto("/ui/?definition=order-fulfilment&since=2000-01-01T00:00&until=2000-01-02T00:00")
    assert listed() == set()
    assert "No runs match these filters" in page.locator("p.empty").inner_text()
    page.goto("/ui/?since=2000-01-01T00:00")
    assert set(runs.values()) <= listed()

    resp = page.goto("/ui/?run=not-hex")
    assert resp is not None
    assert resp.status == 400
    assert "a run id is lowercase hex" in page.locator("p.alert.bad").inner_text()


def test_the_runs_list_pages_with_a_cursor_that_keeps_the_filters(ui_server: Server, page: Any) -> None:
    """More than a page of matching runs: `Older runs` carries the filters and the cursor; no run twice."""
    publish(ui_server, GREETING)
    made = {start(ui_server, "greeting", {"who": f"p{i}"}, f"e2e-page-{i}") for i in range(55)}
    login(page)
    page.goto("/ui/?definition=greeting&status=waiting")
    first = page.locator("table.runs tbody tr td:first-child a").evaluate_all(
        "els => els.map(e => e.pathname)"
    )
    assert len(first) == 50
    page.get_by_role("link", name="Older runs →").click()
    page.wait_for_url(re.compile(r"cursor="))
    assert "definition=greeting" in page.url
    assert "status=waiting" in page.url
    rest = page.locator("table.runs tbody tr td:first-child a").evaluate_all(
        "els => els.map(e => e.pathname)"
    )
    seen = [h.removeprefix("/ui/runs/") for h in [*first, *rest]]
    assert len(seen) == len(set(seen))
    assert made <= set(seen)


def test_an_approver_lands_on_their_inbox_with_context_and_sort(ui_server: Server, new_context: Any) -> None:
    """alice (approver only) logs in to her inbox, not to an empty runs page; the nav offers no runs; the
    inbox shows each request's process, run, details, decisions, waiting time and time left, sorted."""
    alice = new_context().new_page()
    alice.goto("/ui/login")
    alice.get_by_label("Tenant", exact=True).fill("default")
    alice.get_by_label("User", exact=True).fill("alice")
    alice.get_by_label("Password", exact=True).fill(fx.ADMIN_PASSWORD)
    alice.get_by_role("button", name="Log in").click()
    alice.wait_for_url(re.compile(r"/ui/approvals$"))
    assert alice.locator("h1").inner_text() == "Waiting for your decision"
    assert alice.locator("header nav").get_by_role("link", name="Runs").count() == 0
    alice.goto("/ui/")  # the runs page itself sends her to the inbox too
    alice.wait_for_url(re.compile(r"/ui/approvals$"))
    row = alice.locator("table.inbox tbody tr", has_text="Approve PO PO-1001")
    assert row.locator("td[data-label=Process]").inner_text().startswith("purchase-order v1")
    assert ui_server.example_runs["PO-1001"][-10:] in row.inner_text()
    assert "0 of 2" in row.locator("td[data-label=Decided]").inner_text()
    assert re.search(r"in 2d \d+h", row.locator("td.left").inner_text())
    alice.locator("form.filters select[name=sort]").select_option("requested")
    alice.get_by_role("button", name="Show").click()
    alice.wait_for_url(re.compile(r"sort=requested"))
    assert alice.locator("form.filters select[name=sort]").input_value() == "requested"
    alice.goto("/ui/approvals?definition=contract-review")
    assert alice.locator("table.inbox tbody tr", has_text="Approve PO").count() == 0
