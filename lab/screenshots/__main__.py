"""Take the screenshots of docs/ui.md from a fresh `lockstep serve --example` with headless Debian Chromium,
so the pictures in the docs are the product as it is: `python -m lab.screenshots [OUT_DIR]`."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from playwright.sync_api import sync_playwright

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "docs" / "img"
PASSWORD = "lockstep-example"  # noqa: S105 - the documented password of `serve --example`


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(check: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = check()
        except (httpx.HTTPError, OSError):
            got = None
        if got:
            return got
        time.sleep(0.3)
    raise SystemExit(f"timed out waiting for {what}")


def _login(page: Any, user: str) -> None:
    page.goto("/ui/login")
    page.get_by_label("Tenant", exact=True).fill("default")
    page.get_by_label("User", exact=True).fill(user)
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="lockstep-shots-"))
    port, db = _port(), f"sqlite:///{tmp / 'db.sqlite'}"
    base = f"http://127.0.0.1:{port}"
    log = (tmp / "serve.log").open("wb")
    cmd = [sys.executable, "-m", "lockstep", "--db", db, "serve", "--example", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)  # noqa: S603
    try:
        key = _wait(lambda: re.search(r"API key (lsk_\S+)", (tmp / "serve.log").read_text()), "the API key")
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key.group(1)}"}, timeout=10)

        def settled() -> Any:
            items = api.get("/v1/runs").json()["items"]
            seen = {r["definition"]["name"] + ":" + r["status"] for r in items}
            want = {"order-fulfilment:failed", "contract-review:waiting", "vendor-onboarding:waiting"}
            want.add("purchase-order:waiting")
            return items if want <= seen else None

        runs = {"items": _wait(settled, "the example runs to settle")}
        by_def = {r["definition"]["name"] + ":" + r["status"]: r["run_id"] for r in runs["items"]}
        example = (
            Path(__file__).resolve().parents[2] / "src" / "lockstep" / "examples" / "order-fulfilment.yaml"
        )
        v2 = example.read_text().replace("input.qty > 10", "input.qty > 20")
        api.post(
            "/v1/definitions", content=v2, headers={"content-type": "application/yaml"}
        ).raise_for_status()
        shots = {
            "ui-runs": "/ui/",
            "ui-run-contract": f"/ui/runs/{by_def['contract-review:waiting']}",
            "ui-run-failed": f"/ui/runs/{by_def['order-fulfilment:failed']}",
            "ui-definition-diff": "/ui/definitions/order-fulfilment?version=2&compare=1",
            "ui-search": "/ui/?definition=vendor-onboarding&status=waiting",
            "ui-search-input": "/ui/?input=" + quote('vendor = "Acme Tools"'),
        }
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"]
            )
            page = browser.new_context(base_url=base, viewport={"width": 1280, "height": 900}).new_page()
            _login(page, "admin")
            for name, path in shots.items():
                page.goto(path)
                page.wait_for_load_state()
                page.screenshot(path=str(OUT / f"{name}.png"), full_page=True)
            phone = browser.new_context(base_url=base, viewport={"width": 375, "height": 800}).new_page()
            _login(phone, "admin")
            phone.goto(f"/ui/runs/{by_def['order-fulfilment:failed']}")
            phone.screenshot(path=str(OUT / "ui-run-375px.png"))
            alice = browser.new_context(base_url=base, viewport={"width": 1280, "height": 500}).new_page()
            _login(alice, "alice")
            alice.screenshot(path=str(OUT / "ui-inbox.png"))
            alice.set_viewport_size({"width": 1280, "height": 900})
            alice.goto(f"/ui/approvals/{by_def['purchase-order:waiting']}/manager-approval")
            alice.screenshot(path=str(OUT / "ui-approval.png"), full_page=True)
            browser.close()
        print(f"screenshots in {OUT}")
    finally:
        proc.terminate()
        proc.wait(timeout=15)


if __name__ == "__main__":
    main()
