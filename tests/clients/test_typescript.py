"""The TypeScript client (clients/typescript): its committed openapi.json is the app's document, its types
are what openapi-typescript generates from it (no drift), it type-checks (tsc), and its example worker
completes a run through a real `lockstep serve` on loopback over the HTTP task protocol alone (a
retryable failure and its retry included). Node and npm are required: without them this FAILS."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lockstep.api.document import document_text
from lockstep.engine import Engine

from .serving import serving

CLIENT = Path(__file__).parents[2] / "clients" / "typescript"
GENERATE = ["npx", "--no-install", "openapi-typescript", "--default-non-nullable", "false"]
DEFINITION: dict[str, Any] = {
    "name": "ts-demo",
    "input_schema": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
    "steps": [
        {"id": "greet", "activity": "greet", "input": {"name": "${input.name}"}, "timeout": "10s"},
        {
            "id": "flaky",
            "activity": "flaky",
            "input": {"greeting": "${steps.greet.output.greeting}"},
            "timeout": "10s",
            "retry": {"max_attempts": 3, "initial_interval": "100ms"},
        },
    ],
}


def _run(cmd: list[str], cwd: Path, timeout: float = 300, **kw: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False, **kw)
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def client_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The client with its node_modules: in place when installed (.ci/run does), else a temp copy after
    `npm ci` (from the committed package-lock.json)."""
    missing = [tool for tool in ("node", "npm", "npx") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"the TypeScript client tests need Node.js 20+ and npm; not found: {', '.join(missing)}")
    if (CLIENT / "node_modules" / ".bin" / "tsc").exists():
        return CLIENT
    copy = tmp_path_factory.mktemp("ts") / "typescript"
    shutil.copytree(CLIENT, copy, ignore=shutil.ignore_patterns("node_modules", "dist"))
    _run(["npm", "ci", "--no-audit", "--no-fund"], copy)
    return copy


def test_node_is_recent_enough(client_dir: Path) -> None:
    """Node.js is version 20 or later (the client's engines field, and fetch built in)."""
    version = _run(["node", "--version"], client_dir).stdout.strip()
    assert int(version.lstrip("v").split(".")[0]) >= 20, version


def test_committed_document_is_the_apps() -> None:
    """clients/typescript/openapi.json is what the app serves (regenerate: python -m lockstep.api.document
    clients/typescript/openapi.json, then npm run generate)."""
    assert (CLIENT / "openapi.json").read_text(encoding="utf-8") == document_text(), (
        "clients/typescript/openapi.json is stale: run `python -m lockstep.api.document "
        "clients/typescript/openapi.json && (cd clients/typescript && npm run generate)`"
    )


def test_generated_types_have_no_drift(client_dir: Path, tmp_path: Path) -> None:
    """openapi-typescript over the app's current document gives exactly the committed src/schema.d.ts."""
    doc = tmp_path / "openapi.json"
    doc.write_text(document_text(), encoding="utf-8")
    out = tmp_path / "schema.d.ts"
    _run([*GENERATE, str(doc), "--output", str(out)], client_dir)
    assert out.read_text(encoding="utf-8") == (CLIENT / "src" / "schema.d.ts").read_text(encoding="utf-8"), (
        "clients/typescript/src/schema.d.ts drifted from the API: run `npm run generate` there"
    )


def test_the_client_and_example_type_check(client_dir: Path) -> None:
    """`tsc --noEmit` passes over the wrapper and the example worker (strict)."""
    _run(["npx", "--no-install", "tsc", "--noEmit"], client_dir)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A real `lockstep serve` on loopback over a fresh SQLite file: its URL and the API keys by role."""
    url = f"sqlite:///{tmp_path}/ts.sqlite"
    with Engine.open(url) as engine:
        principals = engine.service.principals
        principals.create_tenant("acme")
        keys = {r: str(principals.create_user("acme", r, [r], []).api_key) for r in ("worker", "operator")}
        engine.service.publish("acme", DEFINITION)
    with serving(url, tmp_path) as base:
        yield base, keys


def test_example_worker_completes_a_run(client_dir: Path, server: tuple[str, dict[str, str]]) -> None:
    """examples/worker.ts, given only the URL and a worker's key, runs greet and flaky (whose first
    attempt fails retryably, so the step's retry runs it again, for three times its lease, heartbeating)
    and the run completes with their output, no attempt timed out."""
    base, keys = server
    operator = {"Authorization": f"Bearer {keys['operator']}"}
    started = httpx.post(
        f"{base}/v1/runs", json={"definition": "ts-demo", "input": {"name": "ada"}}, headers=operator
    )
    assert started.status_code == 201, started.text
    run_id = started.json()["run_id"]
    env = {
        **os.environ,
        "LOCKSTEP_URL": base,
        "LOCKSTEP_API_KEY": keys["worker"],
        "WORKER_MAX_TASKS": "3",
        # flaky's second attempt takes 3 s on a 1 s lease: only its heartbeats keep the lease alive.
        "WORKER_LEASE_SECONDS": "1",
        "FLAKY_MS": "3000",
    }
    worker = _run(["npx", "--no-install", "tsx", "examples/worker.ts"], client_dir, timeout=180, env=env)
    assert "stopped after 3 tasks" in worker.stdout, worker.stdout + worker.stderr
    beats = re.search(r"\(flaky, attempt 2\): accepted, (\d+) heartbeats", worker.stdout)
    assert beats, worker.stdout
    assert int(beats.group(1)) >= 3, worker.stdout
    run = httpx.get(f"{base}/v1/runs/{run_id}", headers=operator).json()
    assert run["status"] == "completed", run
    assert run["steps"]["greet"]["output"] == {"greeting": "hello, ada"}
    assert run["steps"]["flaky"]["attempts"] == 2
    assert run["steps"]["flaky"]["output"]["attempt"] == 2
    page = httpx.get(f"{base}/v1/runs/{run_id}/events", headers=operator).json()
    failed = [e for e in page["items"] if e["type"] == "ActivityFailed"]
    assert [e["step"] for e in failed] == ["flaky"]
    assert failed[0]["data"]["error"]["message"].startswith("a transient failure")
    assert not [e for e in page["items"] if e["type"] == "ActivityTimedOut"], page
