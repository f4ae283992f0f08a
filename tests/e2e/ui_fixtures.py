"""Fixtures for the browser tests: a real `lockstep serve --example` process and a headless Chromium.

Kept out of conftest.py so that other end-to-end suites in this folder can have their own fixtures.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from lab import clifork

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ADMIN_PASSWORD = "lockstep-example"  # noqa: S105 - the documented password of `serve --example`
VIEWER_PASSWORD = "viewer-pass-123"  # noqa: S105
OUTSIDER_PASSWORD = "outsider-pass-123"  # noqa: S105
# How each example run of `serve --example` ends up once the worker has settled (keyed by its input).
EXAMPLE_STATUSES = {
    "E-1": "completed",
    "E-2": "completed",
    "E-3": "failed",
    "Acme Tools": "waiting",  # a 3-day timer
    "Globex": "waiting",  # a 3-day timer
    "PO-1001": "waiting",  # two approvals (alice, bob or finance)
    "C-77": "waiting",  # legal's and finance's approvals, side by side (a parallel step)
}
# The start (idempotency) key each example run was started with.
EXAMPLE_START_KEYS = {
    "E-1": "example-order-1",
    "E-2": "example-order-2",
    "E-3": "example-order-3",
    "Acme Tools": "example-vendor-1",
    "Globex": "example-vendor-2",
    "PO-1001": "example-po-1",
    "C-77": "example-contract-1",
}
# The approvers `serve --example` creates in tenant default; they log in with the example password.
EXAMPLE_APPROVERS = ("alice", "bob", "carol")
# Environment variables that would point the server or the CLI somewhere else than the test's files.
_SCRUB = (
    "LOCKSTEP_DB",
    "LOCKSTEP_TENANT",
    "LOCKSTEP_DEMO_LEDGER",
    "LOCKSTEP_METRICS_TOKEN",
    "LOCKSTEP_METRICS_PUBLIC",
)


def wait_until(check: Callable[[], Any], what: str, timeout: float = 20.0, interval: float = 0.1) -> Any:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_example_key(item: dict[str, Any]) -> str:
    """The input field that names an example run: the order id, the vendor, the purchase order or the
    contract."""
    data = item.get("input") or {}
    return str(data.get("order_id") or data.get("vendor") or data.get("po") or data.get("contract") or "")


@dataclass
class Server:
    """A running `lockstep serve --example` process and what a test needs to talk to it."""

    base_url: str
    db_url: str
    log_path: Path
    api_key: str = ""
    example_runs: dict[str, str] = field(default_factory=dict)  # example key -> run id

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def api(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {self.api_key}"}, timeout=10
        )

    def runs(self) -> list[dict[str, Any]]:
        with self.api() as c:
            resp = c.get("/v1/runs", params={"limit": 100})
            resp.raise_for_status()
            items: list[dict[str, Any]] = resp.json()["items"]
            return items

    def run(self, run_id: str) -> dict[str, Any]:
        with self.api() as c:
            resp = c.get(f"/v1/runs/{run_id}")
            resp.raise_for_status()
            out: dict[str, Any] = resp.json()
            return out

    def event_types(self, run_id: str) -> list[str]:
        with self.api() as c:
            resp = c.get(f"/v1/runs/{run_id}/events")
            resp.raise_for_status()
            return [e["type"] for e in resp.json()["items"]]

    def start_waiting_run(self, vendor: str) -> str:
        """Start a fresh vendor-onboarding run (it parks on a 3-day timer) and wait until it waits."""
        with self.api() as c:
            resp = c.post(
                "/v1/runs",
                json={"definition": "vendor-onboarding", "input": {"vendor": vendor}},
                headers={"Idempotency-Key": f"e2e-{vendor}"},
            )
            assert resp.status_code in (200, 201), resp.text
            run_id = str(resp.json()["run_id"])
        wait_until(lambda: self.run(run_id)["status"] == "waiting", f"run {run_id} to wait on its timer")
        return run_id

    def cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        proc = clifork.run(
            [sys.executable, "-m", "lockstep", "--db", self.db_url, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=_env(),
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, f"lockstep {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
        return proc


def _start(tmp: Path) -> tuple[subprocess.Popen[bytes], Server]:
    port = _free_port()
    db_url = f"sqlite:///{tmp / 'db.sqlite'}"
    server = Server(base_url=f"http://127.0.0.1:{port}", db_url=db_url, log_path=tmp / "serve.log")
    with server.log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "lockstep", "--db", db_url),
                *("serve", "--example", "--port", str(port), "--log-format", "console"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp,
            env=_env(),
        )
    return proc, server


def _healthy(proc: subprocess.Popen[bytes], server: Server) -> bool:
    if proc.poll() is not None:
        pytest.fail(f"lockstep serve exited with {proc.returncode}:\n{server.log()}")
    try:
        return httpx.get(server.base_url + "/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def _settled(server: Server) -> dict[str, str] | None:
    """Run ids of the example runs once every one has reached its expected status, else None."""
    found = {run_example_key(r): r for r in server.runs()}
    if any(k not in found or found[k]["status"] != s for k, s in EXAMPLE_STATUSES.items()):
        return None
    return {k: str(found[k]["run_id"]) for k in EXAMPLE_STATUSES}


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`lockstep serve --example` on a fresh SQLite file and a free port; killed at teardown."""
    proc, server = _start(tmp_path_factory.mktemp("serve"))
    try:
        wait_until(lambda: _healthy(proc, server), "/healthz", timeout=30)
        key = wait_until(
            lambda: re.search(r"API key (lsk_[A-Za-z0-9_-]+)", server.log()), "the example API key"
        )
        server.api_key = key.group(1)
        server.example_runs = wait_until(
            lambda: _settled(server), "the example runs to settle", timeout=30, interval=0.2
        )
        yield server
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within 15 s."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@pytest.fixture(scope="module")
def viewer(ui_server: Server) -> tuple[str, str]:
    """A user of tenant default with only the viewer role, created with the CLI; (name, password)."""
    ui_server.cli("users", "create", "viewer1", "--tenant", "default", "--roles", "viewer")
    ui_server.cli(
        "users",
        "set-password",
        "viewer1",
        "--tenant",
        "default",
        "--password-stdin",
        stdin=VIEWER_PASSWORD + "\n",
    )
    return "viewer1", VIEWER_PASSWORD


@pytest.fixture(scope="module")
def outsider(ui_server: Server) -> tuple[str, str, str]:
    """An admin of a second tenant, created with the CLI; (tenant, name, password)."""
    ui_server.cli("tenants", "create", "other")
    ui_server.cli("users", "create", "boss", "--tenant", "other", "--roles", "admin")
    ui_server.cli(
        "users",
        "set-password",
        "boss",
        "--tenant",
        "other",
        "--password-stdin",
        stdin=OUTSIDER_PASSWORD + "\n",
    )
    return "other", "boss", OUTSIDER_PASSWORD


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Debian Chromium per module: Playwright's sync API keeps an event loop running in the
    main thread while it is open, which would break the async tests of later modules."""
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


@pytest.fixture
def new_context(browser: Any, ui_server: Server) -> Iterator[Callable[[], Any]]:
    """Make fresh browser contexts (own cookies) against the server; all closed at teardown."""
    made: list[Any] = []

    def make() -> Any:
        ctx = browser.new_context(base_url=ui_server.base_url, viewport={"width": 1280, "height": 900})
        ctx.set_default_timeout(10_000)
        made.append(ctx)
        return ctx

    yield make
    for ctx in made:
        ctx.close()


@pytest.fixture
def page(new_context: Callable[[], Any]) -> Any:
    """A page in a fresh context, not logged in."""
    return new_context().new_page()
