"""A person receives an approval link, logs in, sees what they approve and approves once: a real
`lockstep serve --example` process driven by headless Chromium.

`serve --example` starts a purchase-order run that waits for two approvals (alice, bob or finance) and
delivers the links through the `log` channel: JSON lines on stderr with event "approval link".
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "lockstep-example"  # noqa: S105 - the documented password of `serve --example`
SCRUB = ("LOCKSTEP_DB", "LOCKSTEP_TENANT", "LOCKSTEP_PUBLIC_URL", "LOCKSTEP_METRICS_TOKEN")


def wait_until(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    base_url: str
    stderr: Path
    api_key: str = ""

    def log_lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.stderr.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:  # a line still being written
                    continue
        return out

    def links(self) -> dict[str, dict[str, Any]] | None:
        """The approval links the notifier logged, by approver, once alice's and bob's are there."""
        found = {x["approver"]: x for x in self.log_lines() if x.get("event") == "approval link"}
        return found if {"alice", "bob"} <= set(found) else None

    def healthy(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"lockstep serve exited with {self.proc.returncode}:\n{self.stderr.read_text()}")
        try:
            return httpx.get(self.base_url + "/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def api(self, path: str) -> Any:
        r = httpx.get(self.base_url + path, headers={"Authorization": f"Bearer {self.api_key}"}, timeout=10)
        r.raise_for_status()
        return r.json()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`lockstep serve --example --log-format json` on a fresh SQLite file; killed at teardown."""
    tmp = tmp_path_factory.mktemp("approval-serve")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in SCRUB} | {"PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "lockstep", "--db", f"sqlite:///{tmp / 'db.sqlite'}"]
    cmd += ["serve", "--example", "--port", str(port), "--log-format", "json"]
    with (tmp / "stdout.log").open("wb") as out, (tmp / "stderr.log").open("wb") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=tmp, env=env)
    srv = Server(proc, f"http://127.0.0.1:{port}", tmp / "stderr.log")
    try:
        wait_until(srv.healthy, "/healthz")
        key = wait_until(
            lambda: re.search(r"API key (lsk_[A-Za-z0-9_-]+)", srv.stderr.read_text()), "the API key"
        )
        srv.api_key = key.group(1)
        yield srv
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()
    finally:
        pw.stop()


def test_receive_link_log_in_approve_once_and_csrf_is_enforced(server: Server, browser: Any) -> None:
    """alice opens her logged link, logs in, sees details/quorum/expiry on a private page, approves once;
    POSTs without the CSRF token are refused (403) and change nothing."""
    links = wait_until(server.links, "alice's and bob's approval links in the JSON log")
    alice, bob = links["alice"], links["bob"]
    run = alice["run_id"]
    assert alice["url"].startswith(server.base_url + "/approve/")
    alice_token = alice["url"].rsplit("/", 1)[1]
    bob_token = bob["url"].rsplit("/", 1)[1]

    ctx = browser.new_context(base_url=server.base_url)
    ctx.set_default_timeout(15_000)
    try:
        page = ctx.new_page()
        page.goto(alice["url"])
        assert re.search(r"/ui/login\?next=", page.url), page.url  # a link is not a login
        page.get_by_label("Tenant", exact=True).fill("default")
        page.get_by_label("User", exact=True).fill("alice")
        page.get_by_label("Password", exact=True).fill(PASSWORD)
        with page.expect_response(lambda r: r.request.method == "GET" and "/approve/" in r.url) as shown:
            page.get_by_role("button", name="Log in").click()
        resp = shown.value
        assert resp.status == 200
        assert resp.headers["referrer-policy"] == "no-referrer"
        assert resp.headers["cache-control"] == "no-store"
        page.wait_for_url(alice["url"])
        text = page.locator("section.approve").inner_text()
        assert "Approve PO PO-1001 for 1250.0 EUR" in text
        assert "2 approval(s) from alice, bob, finance" in text
        assert alice["expires_at"] in text
        assert "Nobody has decided yet." in text

        def snapshot() -> tuple[int, dict[str, str]]:
            events = server.api(f"/v1/runs/{run}/events")["items"]
            links = server.api(f"/v1/runs/{run}/approvals/links")
            return len(events), {x["approver"] + ":" + x["link_id"]: x["status"] for x in links}

        # Forged POSTs carrying alice's session cookie but no CSRF token: refused, nothing changes.
        before = snapshot()
        for token in (alice_token, bob_token):
            forged = ctx.request.post(f"/approve/{token}", form={"decision": "approve"}, max_redirects=0)
            assert forged.status == 403, forged.text()
            assert "CSRF" in forged.text()
        assert snapshot() == before

        with page.expect_response(lambda r: r.request.method == "POST" and "/approve/" in r.url) as posted:
            page.get_by_role("button", name="Approve").click()
        assert posted.value.status == 200
        assert posted.value.headers["cache-control"] == "no-store"
        outcome = page.locator("#outcome").inner_text()
        assert "You chose approve" in outcome
        assert "still waits for more approvals" in outcome

        after = snapshot()
        assert after[0] > before[0]
        assert after[1][f"alice:{alice['link_id']}"] == "used"
        shown_run = server.api(f"/v1/runs/{run}")
        assert shown_run["status"] == "waiting"
        assert "waiting for 1 more approval of 2" in shown_run["wait_reason"]

        # After approving: a POST to bob's link without the CSRF token is still refused; nothing changes.
        forged = ctx.request.post(f"/approve/{bob_token}", form={"decision": "reject"}, max_redirects=0)
        assert forged.status == 403, forged.text()
        assert snapshot() == after
        assert after[1][f"bob:{bob['link_id']}"] == "pending"
        # And alice's link is spent: opening it again says so.
        again = page.goto(alice["url"])
        assert again is not None
        assert again.status == 409
        assert "Already handled" in page.content()
    finally:
        ctx.close()
