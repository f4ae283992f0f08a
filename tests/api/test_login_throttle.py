"""Attacks on the password login: guessing one user's password, spraying many users from one address,
racing attempts past the limit from several server processes, and rotating X-Forwarded-For.

Each login goes through the real UI form (its CSRF cookie and token) over httpx against the ASGI app;
the client address is the transport's peer address. The last tests run a real `lockstep serve`.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

import lockstep.app.principals.credentials as principals_module
from lockstep.app.principals import Principals
from lockstep.core.limits import SERVER_LIMITS
from lockstep.engine import Engine
from lockstep.errors import RateLimited

from .conftest import FakeClock

pytestmark = pytest.mark.anyio

PASSWORD = "plum-lantern-orbit-quay"  # noqa: S105 - the test user's password
WRONG = "not-the-password"
PER_USER = SERVER_LIMITS["login_attempts_per_user"].default
PER_ADDRESS = SERVER_LIMITS["login_attempts_per_address"].default
LOCKOUT = SERVER_LIMITS["login_lockout_seconds"].default
WINDOW = SERVER_LIMITS["login_window_seconds"].default


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every scrypt password check the server makes (the user tried), in order."""
    seen: list[str] = []
    real = principals_module._check_password

    def counting(password: str, stored: str | None) -> bool:
        seen.append(password)
        return real(password, stored)

    monkeypatch.setattr(principals_module, "_check_password", counting)
    return seen


@pytest.fixture
def alice(principals: Principals) -> str:
    principals.create_tenant("acme")
    principals.create_user("acme", "alice", ["viewer"], [])
    principals.create_user("acme", "bob", ["viewer"], [])
    principals.set_password("acme", "alice", PASSWORD)
    principals.set_password("acme", "bob", PASSWORD)
    return "alice"


class Browser:
    """One client at one address, logging in through the login form like a browser."""

    def __init__(self, app: FastAPI, address: str) -> None:
        transport = httpx.ASGITransport(app=app, client=(address, 50_000))
        self.c = httpx.AsyncClient(transport=transport, base_url="http://test")

    async def login(self, user: str, password: str, tenant: str = "acme") -> httpx.Response:
        form = await self.c.get("/ui/login")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token, form.text
        data = {"csrf": token.group(1), "tenant": tenant, "user": user, "password": password}
        return await self.c.post("/ui/login", data=data)


@pytest.fixture
async def browsers(app: FastAPI) -> Any:
    opened: list[Browser] = []

    def at(address: str) -> Browser:
        b = Browser(app, address)
        opened.append(b)
        return b

    yield at
    for b in opened:
        await b.c.aclose()


def assert_in(r: httpx.Response) -> None:
    """The login succeeded: a redirect to the runs page."""
    assert r.status_code == 303, r.text
    assert r.headers["location"] == "/ui/", r.headers


def assert_wrong(r: httpx.Response) -> None:
    """The password was checked and refused: back to the login form."""
    assert r.status_code == 303, r.text
    assert r.headers["location"].startswith("/ui/login"), r.headers


def assert_throttled(r: httpx.Response) -> int:
    """A 429 login page that says why and when to come back; returns its Retry-After (seconds)."""
    assert r.status_code == 429, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert "logins are paused after too many failed attempts" in r.text.lower()
    assert 'name="csrf"' in r.text  # the form is there to try again later
    return int(r.headers["retry-after"])


def audit(db_path: Path, outcome: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db_path, timeout=10)
    try:
        rows = conn.execute(
            "SELECT tenant, actor, detail FROM audit WHERE action = 'ui.login' AND outcome = ? ORDER BY id",
            (outcome,),
        ).fetchall()
    finally:
        conn.close()
    return [{"tenant": r[0], "actor": r[1], "detail": json.loads(r[2])} for r in rows]


async def test_guessing_one_password_is_stopped_after_the_limit_before_any_scrypt_check(
    alice: str, browsers: Any, checks: list[str], db_path: Path
) -> None:
    """Five wrong passwords lock the user: the sixth attempt, even with the right password, gets 429
    with Retry-After, costs no password check and is in the audit log."""
    b = browsers("198.51.100.7")
    for _ in range(PER_USER):
        assert_wrong(await b.login(alice, WRONG))
    assert len(checks) == PER_USER
    retry_after = assert_throttled(await b.login(alice, PASSWORD))
    assert LOCKOUT - 1 <= retry_after <= LOCKOUT
    assert_throttled(await b.login(alice, WRONG))
    assert len(checks) == PER_USER, "a throttled attempt must not reach scrypt"
    wrong = audit(db_path, "refused")
    assert [e["detail"]["address"] for e in wrong] == ["198.51.100.7"] * PER_USER
    refused = audit(db_path, "throttled")
    assert len(refused) == 2
    assert (refused[0]["tenant"], refused[0]["actor"]) == ("acme", "alice")
    assert refused[0]["detail"]["address"] == "198.51.100.7"
    assert refused[0]["detail"]["locked"] == ["user:acme/alice"]
    assert "lockstep_session" not in b.c.cookies


async def test_the_lock_binds_the_user_from_every_address_and_no_other_user(
    alice: str, browsers: Any, checks: list[str]
) -> None:
    """The user's lockout holds from a fresh address (no rotation around it), while another user of the
    same tenant logs in as usual."""
    for _ in range(PER_USER):
        await browsers("198.51.100.7").login(alice, WRONG)
    assert_throttled(await browsers("203.0.113.9").login(alice, PASSWORD))
    assert_in(await browsers("203.0.113.9").login("bob", PASSWORD))


async def test_lockouts_grow_and_a_success_after_one_clears_the_users_count(
    alice: str, browsers: Any, clock: FakeClock, checks: list[str]
) -> None:
    """A second lockout in a row lasts twice as long as the first; once it ends the right password logs
    in, and the user's count starts from zero again (five more attempts before the next lockout)."""
    b = browsers("198.51.100.7")
    for _ in range(PER_USER):
        await b.login(alice, WRONG)
    first = assert_throttled(await b.login(alice, WRONG))
    clock.advance(seconds=first)
    for _ in range(PER_USER):
        assert_wrong(await b.login(alice, WRONG))
    second = assert_throttled(await b.login(alice, WRONG))
    assert second == 2 * first
    clock.advance(seconds=second)
    assert_in(await b.login(alice, PASSWORD))
    for _ in range(PER_USER - 1):
        assert_wrong(await browsers("198.51.100.8").login(alice, WRONG))
    assert_in(await browsers("198.51.100.8").login(alice, PASSWORD))


async def test_a_quiet_window_after_a_lockout_forgives_it(
    alice: str, browsers: Any, clock: FakeClock, checks: list[str]
) -> None:
    """A user who waits a whole window after a lockout starts again with the shortest lockout."""
    b = browsers("198.51.100.7")
    for _ in range(PER_USER):
        await b.login(alice, WRONG)
    first = assert_throttled(await b.login(alice, WRONG))
    clock.advance(seconds=first + WINDOW)
    for _ in range(PER_USER):
        await b.login(alice, WRONG)
    assert assert_throttled(await b.login(alice, WRONG)) == first


async def test_spraying_many_users_from_one_address_is_stopped_at_the_address_limit(
    alice: str, browsers: Any, checks: list[str], db_path: Path
) -> None:
    """One wrong password per user name (real or not) from one address: after 20 the address is locked
    for every user, unknown names are throttled alike (no hint which users exist), and another address
    is not affected."""
    b = browsers("198.51.100.7")
    for i in range(PER_ADDRESS):
        assert_wrong(await b.login(alice if i == 0 else f"user{i}", WRONG))
    assert_throttled(await b.login("bob", PASSWORD))
    assert_throttled(await b.login("nobody", WRONG))
    assert len(checks) == PER_ADDRESS
    assert audit(db_path, "throttled")[-1]["detail"]["locked"] == ["address:198.51.100.7"]
    assert_in(await browsers("198.51.100.8").login("bob", PASSWORD))


async def test_a_good_login_does_not_reset_the_addresss_failures(
    alice: str, browsers: Any, checks: list[str]
) -> None:
    """An attacker with an account of their own cannot buy more guesses by logging in to it between
    them: only the good login's own attempt is given back, the failures stay counted."""
    b = browsers("198.51.100.7")
    for i in range(PER_ADDRESS - 1):
        await b.login(f"user{i}", WRONG)
    for _ in range(3):
        assert_in(await b.login("bob", PASSWORD))
    assert_wrong(await b.login("user-last", WRONG))
    assert_throttled(await b.login("user-more", WRONG))


async def test_an_ipv6_client_is_counted_by_its_64_prefix(
    alice: str, browsers: Any, checks: list[str]
) -> None:
    """Rotating through the 2^64 addresses of one IPv6 /64 does not escape the address limit."""
    for i in range(PER_ADDRESS):
        await browsers(f"2001:db8:1:2::{i + 1:x}").login(f"user{i}", WRONG)
    assert_throttled(await browsers("2001:db8:1:2:ffff::1").login("bob", PASSWORD))
    assert_in(await browsers("2001:db8:1:3::1").login("bob", PASSWORD))


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_racing_attempts_from_two_server_processes_get_no_more_checks_than_the_limit(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, checks: list[str]
) -> None:
    """Two servers on one database (separate engines and connections, as two processes would have) and
    24 wrong passwords at once: exactly five reach scrypt, every other one is refused as throttled."""
    url = f"sqlite:///{tmp_path}/lockstep.db" if kind == "sqlite" else str(request.getfixturevalue("pg_url"))
    clock = FakeClock()
    servers = [Engine.open(url, clock=clock) for _ in range(2)]
    try:
        setup = servers[0].service.principals
        setup.create_tenant("acme")
        setup.create_user("acme", "alice", ["viewer"], [])
        setup.set_password("acme", "alice", PASSWORD)
        fronts = [e.service.principals for e in servers]
        start = threading.Barrier(24)
        outcomes: list[str] = []

        def attempt(i: int) -> None:
            start.wait(timeout=30)
            try:
                p = fronts[i % 2].authenticate_password("acme", "alice", WRONG, address=f"10.9.0.{i}")
                outcomes.append("wrong" if p is None else "in")
            except RateLimited:
                outcomes.append("throttled")

        threads = [threading.Thread(target=attempt, args=(i,)) for i in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert sorted(outcomes) == ["throttled"] * (24 - PER_USER) + ["wrong"] * PER_USER
        assert len(checks) == PER_USER
    finally:
        for e in servers:
            e.close()


# --- a real server: which address counts ------------------------------------------------------------


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    """Start `lockstep serve` on a fresh SQLite file with extra flags; returns its base URL."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*flags: str) -> str:
        port = _free_port()
        db = f"sqlite:///{tmp_path / f'db{port}.sqlite'}"
        cmd = [sys.executable, "-m", "lockstep", "--db", db, "serve", "--port", str(port), *flags]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
        with (tmp_path / f"serve{port}.log").open("wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=env)
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            assert proc.poll() is None, (tmp_path / f"serve{port}.log").read_text()
            try:
                return httpx.get(base + "/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        deadline = time.monotonic() + 30
        while not healthy():
            assert time.monotonic() < deadline, "lockstep serve did not answer /healthz within 30 s"
            time.sleep(0.1)
        return base

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _login(base: str, user: str, forwarded_for: str) -> int:
    with httpx.Client(base_url=base, timeout=30) as c:
        form = c.get("/ui/login")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token, form.text
        r = c.post(
            "/ui/login",
            data={"csrf": token.group(1), "tenant": "acme", "user": user, "password": WRONG},
            headers={"X-Forwarded-For": forwarded_for},
        )
        return r.status_code


def test_rotating_x_forwarded_for_does_not_escape_the_address_limit(serve: Any) -> None:
    """Without --trusted-proxy the peer address counts: a client that sends a new X-Forwarded-For with
    every attempt is still locked out after 20 (uvicorn alone would trust the header from loopback)."""
    base = serve()
    codes = [_login(base, f"user{i}", f"192.0.2.{i}") for i in range(PER_ADDRESS + 1)]
    assert codes == [303] * PER_ADDRESS + [429]


def test_behind_a_trusted_proxy_the_forwarded_client_address_counts(serve: Any) -> None:
    """With --trusted-proxy 127.0.0.1, X-Forwarded-For names the client: clients behind the proxy are
    counted apart, and one of them is locked out after 20 attempts."""
    base = serve("--trusted-proxy", "127.0.0.1")
    assert [_login(base, f"user{i}", f"192.0.2.{i}") for i in range(PER_ADDRESS + 2)] == [303] * (
        PER_ADDRESS + 2
    )
    codes = [_login(base, f"other{i}", "192.0.2.200") for i in range(PER_ADDRESS + 1)]
    assert codes == [303] * PER_ADDRESS + [429]
