"""The run page in a real browser (headless Chromium against a real `lockstep serve`): a viewer sees the
redaction marker where a sensitive value is and no way to reveal it (a forged reveal is refused, 403,
and audited); a user with the read_sensitive grant reveals it with a CSRF-protected POST (audited), and
a reload hides it again."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect
from sealkit import CARD, CLEAR_REF, TENANT
from sealworld import open_world

CHROMIUM = "/usr/bin/chromium"
PASSWORD = "correct-horse-battery-staple-7"  # noqa: S105 - the test users' password
pytestmark = pytest.mark.slow


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path, key_file: Path) -> Iterator[tuple[str, str, Any, str]]:
    """A sealed run made in this process and one left waiting for alice's approval (alice holds the
    grant), then `lockstep serve` (with the key) on the same database."""
    from contextlib import ExitStack

    url = f"sqlite:///{tmp_path}/ui.db"
    with ExitStack() as stack:
        world = open_world(url, key_file, stack)
        for user in ("viewer", "auditor", "alice"):
            world.service.principals.set_password(TENANT, user, PASSWORD)
        world.start_worker()
        run_id = world.through(CARD, CLEAR_REF)
        waiting = world.start(CARD, "REF-WAITING-1")
        world.wait(waiting, lambda s: s["wait_kind"] == "approval", "waited for approval")
        world.service.principals.set_grant(TENANT, "alice", "read_sensitive", granted=True, by="test")
        assert world.worker is not None
        world.worker.stop()
        world.engine.close()
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "lockstep", "--db", url, "--key-file", str(key_file)),
            *("serve", "--port", str(port), "--log-format", "console"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=tmp_path,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()
        try:
            if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "lockstep serve did not become healthy"
        time.sleep(0.1)
    try:
        yield base, run_id, url, waiting
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        log.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield b
        finally:
            b.close()
    finally:
        pw.stop()


def _login(browser: Any, base: str, user: str) -> Any:
    page = browser.new_context(base_url=base, viewport={"width": 1280, "height": 1400}).new_page()
    page.goto("/ui/login")
    page.get_by_label("Tenant", exact=True).fill(TENANT)
    page.get_by_label("User", exact=True).fill(user)
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"/ui/(approvals)?$"))  # an approver lands on their inbox
    return page


def _audit(url: str) -> list[tuple[str, str, str]]:
    import sqlite3

    conn = sqlite3.connect(url[len("sqlite:///") :])
    try:
        rows = conn.execute(
            "SELECT actor, outcome, detail FROM audit WHERE action = 'sensitive.read' ORDER BY id"
        ).fetchall()
    finally:
        conn.close()
    return [(r[0], r[1], r[2]) for r in rows]


def test_a_viewer_sees_the_redaction_marker_and_a_granted_user_reveals(
    browser: Any, served: tuple[str, str, Any, str]
) -> None:
    """Viewer: marker shown, value absent, no reveal button, a forged reveal POST is 403. Auditor: the
    button reveals the card (audited); reloading hides it again."""
    base, run_id, url, _waiting = served
    viewer = _login(browser, base, "viewer")
    viewer.goto(f"/ui/runs/{run_id}")
    expect(viewer.locator("#sensitive h2")).to_have_text("Sensitive values hidden")
    expect(viewer.locator("#sensitive")).to_contain_text("read_sensitive")
    viewer.get_by_text("Details (raw JSON)").click()
    expect(viewer.locator("details.drawer")).to_contain_text('"$redacted": "sensitive"')
    assert CARD not in viewer.content()
    expect(viewer.locator("#reveal")).to_have_count(0)
    viewer.screenshot(path="/tmp/i16seal-viewer.png", full_page=True)
    csrf = viewer.locator('form[action="/ui/logout"] input[name="csrf"]').input_value()
    forged = viewer.request.post(f"/ui/runs/{run_id}/reveal", form={"csrf": csrf})
    assert forged.status == 403
    assert "read_sensitive" in forged.text()
    assert CARD not in forged.text()

    auditor = _login(browser, base, "auditor")
    auditor.goto(f"/ui/runs/{run_id}")
    assert CARD not in auditor.content()  # hidden until asked for
    auditor.locator("#reveal").click()
    auditor.wait_for_load_state()
    expect(auditor.locator("#revealed h2")).to_have_text("Sensitive values shown")
    auditor.get_by_text("Details (raw JSON)").click()
    expect(auditor.locator("details.drawer")).to_contain_text(CARD)
    expect(auditor.locator("ol.timeline")).to_contain_text(CARD)  # the approval details, narrated
    auditor.screenshot(path="/tmp/i16seal-revealed.png", full_page=True)
    auditor.goto(f"/ui/runs/{run_id}")
    assert CARD not in auditor.content()
    rows = _audit(url)
    assert ("viewer", "refused") in [(a, o) for a, o, _ in rows]
    assert [(a, o) for a, o, _ in rows].count(("auditor", "ok")) == 2  # the run and its events
    assert all(CARD not in detail for _a, _o, detail in rows)


def test_an_approver_with_the_grant_reveals_the_details_she_decides_on(
    browser: Any, served: tuple[str, str, Any, str]
) -> None:
    """alice's review page says the details are sensitive and hides them; her Reveal (a CSRF POST) shows
    the card, audited as an approval read; a reload hides it; a viewer's forged reveal is refused."""
    base, _run_id, url, waiting = served
    alice = _login(browser, base, "alice")
    alice.goto(f"/ui/approvals/{waiting}/approve")
    expect(alice.locator("#details")).to_contain_text("hold sensitive values")
    assert CARD not in alice.content()
    alice.locator("#reveal").click()
    alice.wait_for_load_state()
    expect(alice.locator("p.details")).to_contain_text(CARD)
    expect(alice.locator("#revealed")).to_contain_text("audit log")
    alice.screenshot(path="/tmp/i16seal-approval-revealed.png", full_page=True)
    alice.goto(f"/ui/approvals/{waiting}/approve")
    assert CARD not in alice.content()

    viewer = _login(browser, base, "viewer")
    csrf = viewer.locator('form[action="/ui/logout"] input[name="csrf"]').input_value()
    forged = viewer.request.post(f"/ui/approvals/{waiting}/approve/reveal", form={"csrf": csrf})
    assert forged.status in (403, 409)
    assert CARD not in forged.text()
    rows = _audit(url)
    assert [(a, o) for a, o, d in rows if '"approval"' in d] == [("alice", "ok")]
    assert all(CARD not in detail for _a, _o, detail in rows)
