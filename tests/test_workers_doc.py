"""docs/workers.md stays true: every endpoint it names is in the OpenAPI document, and its shell examples,
run in order as one session with curl and jq, drive a run to completion through a real `lockstep serve`
(poll, heartbeat, complete, and the stale report's 409)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lockstep.api.document import document
from lockstep.engine import Engine
from tests.clients.serving import serving

DOC = Path(__file__).parents[1] / "docs" / "workers.md"
TEXT = DOC.read_text(encoding="utf-8")
ENDPOINT = re.compile(r"\b(GET|POST|PATCH|DELETE) (/v1/[\w{}/.-]*\w[}]?)")
SHELL = re.compile(r"```sh\n(.*?)```", re.S)


def test_every_endpoint_the_doc_names_exists() -> None:
    """Each `METHOD /v1/...` in docs/workers.md is an operation of the OpenAPI document."""
    paths = document()["paths"]
    named = set(ENDPOINT.findall(TEXT))
    assert len(named) >= 5, named
    missing = [f"{m} {p}" for m, p in sorted(named) if m.lower() not in paths.get(p, {})]
    assert not missing, f"docs/workers.md names endpoints the API lacks: {missing}"


def test_the_doc_has_the_walk_through() -> None:
    """The doc's shell blocks cover poll, heartbeat and complete (what the run below executes)."""
    script = "\n".join(SHELL.findall(TEXT))
    for call in ("/v1/tasks/poll", "/heartbeat", "/complete", "/v1/runs"):
        assert call in script, call


def test_the_shell_examples_complete_a_run(tmp_path: Path) -> None:
    """The shell blocks, run in order with bash -euo pipefail, print the stale report's code and the
    run's final status `completed`, with ActivitySucceeded in its events."""
    missing = [tool for tool in ("bash", "curl", "jq") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"docs/workers.md's examples need {', '.join(missing)} (not found)")
    url = f"sqlite:///{tmp_path}/doc.sqlite"
    with Engine.open(url) as engine:
        principals = engine.service.principals
        principals.create_tenant("acme")
        admin = str(principals.create_user("acme", "admin1", ["admin"], []).api_key)
        worker = str(principals.create_user("acme", "worker1", ["worker"], []).api_key)
    script = "\n".join(SHELL.findall(TEXT))
    with serving(url, tmp_path) as base:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin", "URL": base, "ADMIN_KEY": admin, "WORKER_KEY": worker},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.split()
    assert "stale_result" in lines, done.stdout
    assert "completed" in lines, done.stdout
    assert "ActivitySucceeded" in lines, done.stdout
