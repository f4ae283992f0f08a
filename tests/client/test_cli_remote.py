"""The CLI over `--url`: `start`, `show`, `runs`, `events` and `cancel` go to a real `lockstep serve` through
lockstep.client (the global options also after the command), and every misuse is one clear line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab import clifork
from lab.fleet import free_port

from .serverkit import Server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("cli-remote")
    s = Server(tmp, f"sqlite:///{tmp / 'lockstep.db'}")
    try:
        s.publish({"name": "hold", "steps": [{"id": "nap", "wait": "1h"}]})
        yield s.up()
    finally:
        s.shutdown()


def _cli(server: Server, *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
    done = clifork.run(
        [sys.executable, "-m", "lockstep", *args],
        env=server.env,
        cwd=server.dir,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == expect, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done


def _remote(server: Server, role: str = "operator") -> list[str]:
    return ["--url", server.url, "--api-key-file", str(server.key_files[role])]


def test_start_show_runs_cancel_over_url(server: Server) -> None:
    """start prints the run id (the same for the same --key), show and runs read it back from the
    server (also with the options after the command), cancel cancels it, events lists its history: no
    database involved."""
    out = _cli(server, *_remote(server), "start", "hold", "--key", "cli-1", "--input", '{"a": 1}').stdout
    run_id = json.loads(out)["run_id"]
    again = _cli(server, "start", "hold", "--key", "cli-1", "--input", '{"a": 1}', *_remote(server)).stdout
    assert json.loads(again)["run_id"] == run_id
    shown = json.loads(_cli(server, "show", run_id, "--json", *_remote(server)).stdout)
    assert shown["run_id"] == run_id
    assert shown["status"] == "waiting"
    assert shown["input"] == {"a": 1}
    table = _cli(server, *_remote(server), "show", run_id).stdout
    assert run_id in table
    assert "waiting" in table
    listed = json.loads(_cli(server, "runs", "--json", "--definition", "hold", *_remote(server)).stdout)
    assert run_id in [r["run_id"] for r in listed]
    cancelled = json.loads(_cli(server, "cancel", run_id, "--reason", "cli test", *_remote(server)).stdout)
    assert cancelled["run_id"] == run_id
    events = json.loads(_cli(server, "events", run_id, "--json", *_remote(server)).stdout)
    assert events[0]["type"] == "RunStarted"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert "RunStarted" in _cli(server, "events", run_id, *_remote(server)).stdout


def test_runs_pages_over_the_api_limit(server: Server) -> None:
    """`runs --limit N` over --url follows the API's cursors: N runs, newest first, none twice."""
    for i in range(4):
        _cli(server, *_remote(server), "start", "hold", "--input", json.dumps({"i": i}))
    rows = json.loads(_cli(server, *_remote(server), "runs", "--json", "--limit", "3").stdout)
    assert len(rows) == 3
    assert len({r["run_id"] for r in rows}) == 3
    assert rows == sorted(rows, key=lambda r: r["started_at"], reverse=True)


def test_runs_searches_over_url(server: Server) -> None:
    """`runs --input/--key/--run/--version/--since/--until` over --url search through GET /v1/runs as on
    the database; a bad filter is the server's message on one line (exit 2)."""
    koeln = json.dumps({"customer": "YAK", "address": {"city": "Köln"}})
    a = json.loads(_cli(server, *_remote(server), "start", "hold", "--key", "yak-a", "--input", koeln).stdout)
    b = json.loads(_cli(server, *_remote(server), "start", "hold", "--input", '{"customer": "YAK"}').stdout)

    def ids(*args: str) -> list[str]:
        return [
            r["run_id"] for r in json.loads(_cli(server, *_remote(server), "runs", "--json", *args).stdout)
        ]

    assert ids("--input", "customer=YAK") == [b["run_id"], a["run_id"]]
    assert ids("--input", 'address.city = "Köln"', "--version", "1") == [a["run_id"]]
    assert ids("--key", "yak-a", "--since", "2000-01-01") == [a["run_id"]]
    assert ids("--run", a["run_id"][:32], "--until", "2000-01-01") == []
    err = _cli(server, *_remote(server), "runs", "--input", "customer", expect=2).stderr
    assert "no `=`" in err
    assert len(err.strip().splitlines()) == 1


def test_misuse_is_one_clear_line(server: Server, tmp_path: Path) -> None:
    """--db with --url, a database-only command or option over --url, no key, a wrong role, an unknown
    run and an unreachable server: each exits non-zero with one line that says what to do."""
    db = ["--db", f"sqlite:///{tmp_path / 'x.db'}"]
    err = _cli(server, *db, *_remote(server), "runs", expect=2).stderr
    assert "not both" in err
    err = _cli(server, *_remote(server), "worker", "--activities", server.activities, *db, expect=2).stderr
    assert "not both" in err
    err = _cli(server, *_remote(server), "definitions", expect=2).stderr
    assert "needs the database" in err
    err = _cli(server, *_remote(server), "runs", "--oldest-first", expect=2).stderr
    assert "--oldest-first" in err
    err = _cli(server, "--url", server.url, "runs", expect=2).stderr
    assert "API key" in err
    err = _cli(server, *_remote(server, "viewer"), "start", "hold", expect=7).stderr
    assert "error:" in err
    err = _cli(server, *_remote(server), "show", "no-such-run", expect=3).stderr
    assert "no-such-run" in err
    gone = ["--url", f"http://127.0.0.1:{free_port()}", "--api-key-file", str(server.key_files["operator"])]
    err = _cli(server, *gone, "runs", expect=6).stderr
    assert "no answer" in err
    assert len(err.strip().splitlines()) == 1
