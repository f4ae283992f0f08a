"""Sessions end when their user's credentials change, and passwords must not be easy to guess.

A UI session is opened through the real login form (CSRF cookie and token, session cookie) over httpx
against the ASGI app; the credential changes are made with the real `lockstep users ...` commands on
the same database file, as an operator would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from lab import clifork
from lockstep.app.principals import Principals, check_password_policy
from lockstep.examples.bootstrap import APPROVERS, EXAMPLE_PASSWORD

pytestmark = pytest.mark.anyio

PASSWORD = "plum-lantern-orbit-quay"  # noqa: S105 - the test users' password
NEW_PASSWORD = "velvet-compass-thunder-kiln"  # noqa: S105


def lockstep(db_path: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI on the test's database file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    return clifork.run(
        [sys.executable, "-m", "lockstep", "--db", f"sqlite:///{db_path}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.fixture
def users(principals: Principals) -> dict[str, str]:
    """Viewers alice and bob of tenant acme, both with PASSWORD; their API keys by name."""
    principals.create_tenant("acme")
    keys = {}
    for name in ("alice", "bob"):
        keys[name] = principals.create_user("acme", name, ["viewer"], []).api_key
        principals.set_password("acme", name, PASSWORD)
    return keys


class Browser:
    def __init__(self, app: FastAPI) -> None:
        self.c = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")

    async def login(self, user: str = "", password: str = "", api_key: str = "") -> httpx.Response:
        form = await self.c.get("/ui/login")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token, form.text
        data = {"csrf": token.group(1), "tenant": "acme", "user": user, "password": password}
        if api_key:
            data["api_key"] = api_key
        return await self.c.post("/ui/login", data=data)

    async def logged_in(self) -> bool:
        """Whether the session cookie still opens the runs page (else the UI sends us to log in)."""
        r = await self.c.get("/ui/")
        if r.status_code == 303:
            assert r.headers["location"].startswith("/ui/login"), r.headers
            return False
        assert r.status_code == 200, r.text
        return True


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[Any]:
    opened: list[Browser] = []

    async def open_as(user: str = "", password: str = PASSWORD, api_key: str = "") -> Browser:
        b = Browser(app)
        opened.append(b)
        r = await b.login(user, password if not api_key else "", api_key)
        assert r.status_code == 303, r.text
        assert r.headers["location"] == "/ui/", r.headers
        assert await b.logged_in()
        return b

    yield open_as
    for b in opened:
        await b.c.aclose()


async def test_set_password_ends_the_users_sessions(
    users: dict[str, str], browser: Any, app: FastAPI, db_path: Path
) -> None:
    """After `lockstep users set-password alice`, alice's open session is refused (the cookie stolen
    before the change is worthless), bob's session stays, and only the new password logs in."""
    alice, bob = await browser("alice"), await browser("bob")
    done = lockstep(
        db_path,
        "users",
        "set-password",
        "alice",
        "--tenant",
        "acme",
        "--password-stdin",
        stdin=NEW_PASSWORD + "\n",
    )
    assert done.returncode == 0, done.stderr
    assert not await alice.logged_in()
    assert await bob.logged_in()
    old = await Browser(app).login("alice", PASSWORD)
    assert old.headers["location"].startswith("/ui/login"), old.headers
    assert await (await browser("alice", NEW_PASSWORD)).logged_in()


async def test_rotate_key_ends_the_users_sessions(users: dict[str, str], browser: Any, db_path: Path) -> None:
    """After `lockstep users rotate-key alice`, both alice's password session and the session she opened
    with her old API key are refused; bob's session stays."""
    by_password = await browser("alice")
    by_key = await browser(api_key=users["alice"])
    bob = await browser("bob")
    done = lockstep(db_path, "users", "rotate-key", "alice", "--tenant", "acme")
    assert done.returncode == 0, done.stderr
    assert not await by_password.logged_in()
    assert not await by_key.logged_in()
    assert await bob.logged_in()


async def test_disable_then_enable_does_not_revive_the_users_sessions(
    users: dict[str, str], browser: Any, db_path: Path
) -> None:
    """`lockstep users disable alice` then `enable alice`: the session from before stays refused; alice
    has to log in again."""
    alice = await browser("alice")
    assert lockstep(db_path, "users", "disable", "alice", "--tenant", "acme").returncode == 0
    assert not await alice.logged_in()
    assert lockstep(db_path, "users", "enable", "alice", "--tenant", "acme").returncode == 0
    assert not await alice.logged_in()
    assert await (await browser("alice")).logged_in()


async def test_a_login_that_checked_the_old_password_cannot_open_a_lasting_session(
    users: dict[str, str], principals: Principals
) -> None:
    """The race: a login checks the old password, the password changes, then the login opens its
    session. That session is refused: it carries the credential generation its check saw."""
    checked = principals.authenticate_password("acme", "alice", PASSWORD)
    assert checked is not None
    principals.set_password("acme", "alice", NEW_PASSWORD)
    cookie, _csrf = principals.open_session(checked)
    assert principals.session(cookie) is None
    fresh = principals.authenticate_password("acme", "alice", NEW_PASSWORD)
    assert fresh is not None
    assert principals.session(principals.open_session(fresh)[0]) is not None


@pytest.mark.parametrize(
    ("password", "why"),
    [
        ("short-pw-1", "too short (10 characters, at least 12 needed)"),
        ("password1234", "too easy to guess (this is a very common password"),
        ("qwertyuiop123", "too easy to guess"),
        ("alicealicealice", "too easy to guess"),
    ],
)
async def test_a_weak_password_is_refused_with_why_and_how_and_changes_nothing(
    users: dict[str, str], browser: Any, db_path: Path, password: str, why: str
) -> None:
    """set-password refuses a short or common password (exit 2, one line saying why and how to pick a
    better one, no traceback); the old password and alice's session keep working."""
    alice = await browser("alice")
    done = lockstep(
        db_path,
        "users",
        "set-password",
        "alice",
        "--tenant",
        "acme",
        "--password-stdin",
        stdin=password + "\n",
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert why in done.stderr
    assert "passphrase of four or more unrelated words" in done.stderr
    assert "Traceback" not in done.stderr
    assert await alice.logged_in()
    assert await (await browser("alice")).logged_in()


def test_the_example_password_passes_the_policy() -> None:
    """`lockstep serve --example` (and the README) log in with a password the policy accepts."""
    for user in ("admin", *(name for name, _roles, _groups in APPROVERS)):
        check_password_policy(EXAMPLE_PASSWORD, tenant="default", user=user)
