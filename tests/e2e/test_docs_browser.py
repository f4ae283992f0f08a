"""/docs in a real headless Chromium against a real `lockstep serve --example`: Swagger UI comes from the
package and runs under the page's CSP; plus the served headers and /metrics of the real server."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import ui_fixtures as fx  # tests/e2e has no __init__.py: pytest puts this folder on sys.path
from playwright.sync_api import expect
from prometheus_client.parser import text_string_to_metric_families
from ui_fixtures import Server

browser = fx.browser
ui_server = fx.ui_server

pytestmark = pytest.mark.slow

LOOPBACK = {"127.0.0.1", "localhost", "[::1]", "::1"}
# Report CSP violations from inside the page; Playwright's init scripts are not subject to the page's CSP.
CSP_PROBE = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', e => {
  window.__violations.push(e.violatedDirective + ' ' + e.blockedURI);
});
"""


@pytest.fixture
def docs_page(browser: Any, ui_server: Server) -> Iterator[tuple[Any, list[str], list[str]]]:
    """A page on /docs, with every request the page made and every console error."""
    ctx = browser.new_context(base_url=ui_server.base_url, viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(15_000)
    ctx.add_init_script(CSP_PROBE)
    requested: list[str] = []
    errors: list[str] = []

    def guard(route: Any) -> None:
        url = route.request.url
        requested.append(url)
        if urlsplit(url).hostname in LOOPBACK or url.startswith("data:"):
            route.continue_()
        else:
            route.abort()  # and the test fails below: nothing may leave loopback

    ctx.route("**/*", guard)
    page = ctx.new_page()
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    try:
        yield page, requested, errors
    finally:
        ctx.close()


def test_docs_render_the_operations_from_the_package_under_csp(
    docs_page: tuple[Any, list[str], list[str]], ui_server: Server
):
    """/docs lists the API's operations with Swagger UI served locally: no CSP violation, no remote load."""
    page, requested, errors = docs_page
    resp = page.goto("/docs")
    assert resp is not None
    assert resp.status == 200
    csp = resp.headers["content-security-policy"]
    assert "'unsafe-inline'" not in csp
    assert "'nonce-" in csp
    expect(page.locator(".opblock-summary-path", has_text="/v1/runs").first).to_be_visible()
    expect(page.get_by_text("Publish a definition (YAML or JSON body)")).to_be_visible()
    assert page.locator(".opblock").count() >= 15
    page.locator(".opblock-summary", has_text="/v1/definitions").first.click()
    expect(page.get_by_role("button", name="Try it out").first).to_be_visible()
    shot = os.environ.get("LOCKSTEP_DOCS_SCREENSHOT")
    if shot:
        page.screenshot(path=shot, full_page=False)
    assert page.evaluate("window.__violations") == []
    assert [e for e in errors if "Content Security Policy" in e] == []
    remote = [u for u in requested if urlsplit(u).hostname not in LOOPBACK and not u.startswith("data:")]
    assert remote == []
    assets = {urlsplit(u).path for u in requested}
    assert {
        "/docs/static/swagger-ui/swagger-ui-bundle.js",
        "/docs/static/swagger-ui/swagger-ui.css",
    } <= assets
    assert "/openapi.json" in assets


def test_docs_assets_are_the_vendored_files(ui_server: Server):
    """The bundle served is the file in the package, with its license beside it."""
    here = Path(__file__).resolve().parents[2] / "src" / "lockstep" / "api" / "static" / "swagger-ui"
    r = httpx.get(ui_server.base_url + "/docs/static/swagger-ui/swagger-ui-bundle.js", timeout=10)
    assert r.status_code == 200
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.content == (here / "swagger-ui-bundle.js").read_bytes()
    assert "Apache License" in (here / "LICENSE").read_text()
    assert "5.35.0" in (here / "README.md").read_text()


def test_real_server_problem_link_is_not_reflected(ui_server: Server):
    """The reported reproduction against a real server: the /problems path is a 404 problem, not HTML."""
    r = httpx.get(ui_server.base_url + "/problems/%3Cimg%20src=x%20onerror=alert(1)%3E", timeout=10)
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "<img" not in r.json()["detail"]


def test_real_server_approve_redirect_keeps_the_token_private(ui_server: Server):
    """The redirect of /approve/{token} to the login page sends no referrer and is never cached."""
    r = httpx.get(ui_server.base_url + "/approve/some-token", timeout=10)
    assert r.status_code == 303
    assert r.headers["location"].startswith("/ui/login?next=")
    assert r.headers["referrer-policy"] == "no-referrer"
    assert r.headers["cache-control"] == "no-store"


def test_real_server_metrics_are_closed_by_default(ui_server: Server):
    """`serve --example` without --metrics-public: anonymous 401, the example admin key sees its tenant."""
    anon = httpx.get(ui_server.base_url + "/metrics", timeout=10)
    assert anon.status_code == 401
    with ui_server.api() as c:
        r = c.get("/metrics")
    assert r.status_code == 200
    tenants = {s.labels.get("tenant") for f in text_string_to_metric_families(r.text) for s in f.samples}
    assert tenants == {"default"}


def _serve(tmp: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    port = fx._free_port()
    db = f"sqlite:///{tmp / 'db.sqlite'}"
    with (tmp / "serve.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lockstep", "--db", db, "serve", "--port", str(port), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp,
            env={**fx._env(), **(env or {})},
        )
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, (tmp / "serve.log").read_text()
        try:
            return httpx.get(base + "/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    fx.wait_until(healthy, "/healthz", timeout=30)
    return proc, base


def test_serve_metrics_flags(tmp_path: Path):
    """`serve` passes LOCKSTEP_METRICS_TOKEN (only it reads /metrics) and --metrics-public (anyone)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    proc, base = _serve(tmp_path / "a", env={"LOCKSTEP_METRICS_TOKEN": "tok-123"})
    try:
        assert httpx.get(base + "/metrics", timeout=10).status_code == 401
        ok = httpx.get(base + "/metrics", headers={"Authorization": "Bearer tok-123"}, timeout=10)
        assert ok.status_code == 200
        assert "lockstep_runs" in ok.text
    finally:
        fx.stop(proc)
    proc, base = _serve(tmp_path / "b", "--metrics-public")
    try:
        r = httpx.get(base + "/metrics", timeout=10)
        assert r.status_code == 200
        assert "lockstep_runs" in r.text
    finally:
        fx.stop(proc)
