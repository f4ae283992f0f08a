"""Server-wide limits set by whoever runs the server (`--limit NAME=VALUE`, LOCKSTEP_LIMITS): each one
takes effect in a real `lockstep serve` and CLI publish, and a bad setting stops the command before
anything starts, in one line, with exit status 2."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import ui_fixtures as fx  # tests/e2e has no __init__.py: pytest puts this folder on sys.path
from clikit import Cli

from lockstep.core.definition import Limits
from lockstep.engine import Engine
from lockstep.errors import InvalidInput

PASSWORD = "plum-lantern-orbit-quay"  # noqa: S105 - the test user's password
LONG_IF = "input.amount > 100 && input.amount < 100000"  # 43 characters
SHORT_IF = "input.amount > 100"


def choice_yaml(condition: str) -> str:
    return (
        "name: route\nsteps:\n  - id: route\n    choice:\n"
        f"      - {{if: '{condition}', next: done}}\n      - {{else: done}}\n"
        "  - id: done\n    succeed: true\n"
    )


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'lockstep.db'}"


@pytest.fixture
def acme(url: str) -> str:
    """Tenant acme with an admin (its API key is returned) and alice, who logs in with a password."""
    with Engine.open(url) as engine:
        principals = engine.service.principals
        principals.create_tenant("acme")
        key = str(principals.create_user("acme", "admin", ["admin", "operator"], []).api_key)
        principals.create_user("acme", "alice", ["viewer"], [])
        principals.set_password("acme", "alice", PASSWORD)
    return key


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def serve(tmp_path: Path, url: str) -> Iterator[Any]:
    """Start `lockstep [global options] serve` with `env` added to a clean environment; its base URL."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*global_options: str, env: dict[str, str]) -> str:
        port = _free_port()
        cmd = [sys.executable, "-m", "lockstep", "--db", url, *global_options, "serve", "--port", str(port)]
        clean = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
        log_path = tmp_path / "serve.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=clean | env)
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    return base
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "lockstep serve did not answer /healthz within 30 s"
            time.sleep(0.1)

    yield start
    for proc in procs:
        fx.stop(proc)


def _login(c: httpx.Client, password: str) -> int:
    form = c.get("/ui/login")
    token = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert token, form.text
    data = {"csrf": token.group(1), "tenant": "acme", "user": "alice", "password": password}
    return c.post("/ui/login", data=data).status_code


def test_lowered_limits_take_effect_in_a_real_server(serve: Any, acme: str, tmp_path: Path) -> None:
    """With --limit max_request_bytes=2000 and LOCKSTEP_LIMITS lowering max_expression_length to 40 and
    login_attempts_per_user to 2: a 3,000-byte request is 413 (1,500 bytes pass), a 43-character
    condition is refused at publish (18 pass), and the third login attempt to alice is 429 (the default
    allows five); the server says which limits it was given."""
    base = serve(
        "--limit",
        "max_request_bytes=2000",
        env={"LOCKSTEP_LIMITS": "max_expression_length=40, login_attempts_per_user=2"},
    )
    auth = {"Authorization": f"Bearer {acme}"}
    with httpx.Client(base_url=base, timeout=30, headers=auth) as c:
        yaml_type = {"content-type": "application/yaml"}
        refused = c.post("/v1/definitions", content=choice_yaml(LONG_IF), headers=yaml_type)
        assert refused.status_code == 422, refused.text
        assert "max_expression_length" in refused.json()["detail"]
        assert "the limit is 40" in refused.json()["detail"]
        published = c.post("/v1/definitions", content=choice_yaml(SHORT_IF), headers=yaml_type)
        assert published.status_code == 201, published.text

        big = c.post("/v1/runs", json={"definition": "route", "input": {"amount": 5, "pad": "x" * 3000}})
        assert big.status_code == 413, big.text
        assert "max_request_bytes=2000" in big.json()["detail"]
        fits = c.post("/v1/runs", json={"definition": "route", "input": {"amount": 5, "pad": "x" * 1500}})
        assert fits.status_code == 201, fits.text
    with httpx.Client(base_url=base, timeout=30) as browser:
        assert [_login(browser, "not-the-password") for _ in range(2)] == [303, 303]
        assert _login(browser, PASSWORD) == 429
    said = "limits set: login_attempts_per_user=2, max_expression_length=40, max_request_bytes=2000"
    assert said in (tmp_path / "serve.log").read_text()


def test_cli_publish_uses_the_configured_expression_length(tmp_path: Path, url: str) -> None:
    """`lockstep --limit max_expression_length=40 publish` refuses the 43-character condition (exit 2,
    naming the limit); without the setting the same file publishes."""
    cli = Cli(url, tmp_path)
    path = cli.write("route.yaml", choice_yaml(LONG_IF))
    done = cli.run("--limit", "max_expression_length=40", "publish", path, expect=2)
    assert "max_expression_length" in done.stderr
    assert cli.dump()["definitions"] == []
    cli.run("publish", path)
    assert len(cli.dump()["definitions"]) == 1


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (
            ["--limit", "max_reqest_bytes=1", "serve"],
            "",
            "--limit: unknown server-wide limit 'max_reqest_bytes': did you mean max_request_bytes?",
        ),
        (
            ["--limit", "login_attempts_per_user=ten", "worker"],
            "",
            "login_attempts_per_user='ten' is not a whole number: login_attempts_per_user is a whole "
            "number from 1 to 1_000",
        ),
        (
            ["scheduler"],
            "max_request_bytes=0",
            "LOCKSTEP_LIMITS: max_request_bytes=0 is out of range: max_request_bytes is a whole number "
            "from 1 to 1_073_741_824",
        ),
        (
            ["serve"],
            "max_request_bytes=1073741825",
            "max_request_bytes=1073741825 is out of range: max_request_bytes is a whole number from 1 "
            "to 1_073_741_824",
        ),
        (
            ["--limit", "max_links_per_approver=6", "serve"],
            "",
            "max_links_per_approver=6 is out of range: max_links_per_approver is a whole number from 1 to 5",
        ),
        (
            ["--limit", "max_input_bytes=5", "serve"],
            "",
            "max_input_bytes is a tenant limit, not a server-wide one: set it with `lockstep tenants set "
            "TENANT --max-input-bytes N`",
        ),
        (["--limit", "max_request_bytes", "serve"], "", "'max_request_bytes' is not NAME=VALUE"),
        (
            ["--limit", "login_window_seconds=3600", "serve"],
            "",
            "login_lockout_seconds=900 is shorter than login_window_seconds=3600",
        ),
    ],
)
def test_a_bad_setting_is_one_line_exit_2_and_nothing_starts(
    tmp_path: Path, url: str, args: list[str], env: str, said: str
) -> None:
    """A bad name (with a did-you-mean), a value that is no number, zero, one above the ceiling, a
    tenant limit or an inconsistent pair: one line naming the limit and its range, exit 2, and the
    command never opened the database."""
    cli = Cli(url, tmp_path)
    if env:
        cli.env["LOCKSTEP_LIMITS"] = env
    started = time.monotonic()
    done = cli.run(*args, expect=2)
    assert time.monotonic() - started < 60
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: ")
    assert said in done.stderr, done.stderr
    assert not (tmp_path / "lockstep.db").exists()


def test_engine_open_refuses_a_bad_setting_before_opening_the_database(tmp_path: Path) -> None:
    """Engine.open(server_limits=...) checks names and ranges like the CLI, before the file is made, and
    its values reach the YAML loader (next to publish-time `limits` of the caller's own)."""
    url = f"sqlite:///{tmp_path / 'never.db'}"
    with pytest.raises(InvalidInput, match="did you mean max_yaml_nodes"):
        Engine.open(url, server_limits={"max_yaml_node": 10})
    with pytest.raises(InvalidInput, match="from 1 to 8"):
        Engine.open(url, server_limits={"max_macro_nesting": 9})
    assert not (tmp_path / "never.db").exists()
    overrides = {"max_yaml_nodes": 10, "max_expression_length": 30}
    with Engine.open(url, limits=Limits(max_steps=3), server_limits=overrides) as engine:
        assert engine.service.server_limits["max_yaml_nodes"] == 10
        assert (engine.service.limits.max_steps, engine.service.limits.expressions.max_length) == (3, 30)
        with pytest.raises(InvalidInput, match="max_yaml_nodes"):
            engine.publish("name: x\nsteps:\n  - {id: a, wait: 1h}\n  - {id: b, wait: 1h}\n")
