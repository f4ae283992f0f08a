"""`lockstep runs` on the database searches as the API and the UI do (app/search.py): --run, --key,
--version, --since/--until and --input 'field=value', newest first; a bad filter is one clear line that
names it, and the oldest-first listing refuses the search's options; on both backends."""

from __future__ import annotations

import json

from clikit import Cli

HOLD = """\
name: hold
steps:
  - id: nap
    wait: 1h
"""


def _ids(cli: Cli, *args: str) -> list[str]:
    return [r["run_id"] for r in cli.json("runs", "--json", *args)]


def test_runs_searches_by_each_filter(cli: Cli) -> None:
    """Each search option selects exactly its runs, newest first, and they combine with --definition."""
    path = cli.write("hold.yaml", HOLD)
    cli.json("publish", path)
    a = cli.json(
        "start", "hold", "--key", "k-a", "--input", '{"customer": "ACME", "address": {"city": "Köln"}}'
    )
    b = cli.json("start", "hold", "--key", "k-b", "--input", '{"customer": "Initech"}')
    cli.json("publish", cli.write("hold2.yaml", HOLD + "description: v2\n"))
    c = cli.json("start", "hold", "--key", "k-c", "--input", '{"customer": "ACME"}')
    a, b, c = a["run_id"], b["run_id"], c["run_id"]
    assert _ids(cli, "--input", "customer=ACME") == [c, a]
    assert _ids(cli, "--input", 'address.city = "Köln"') == [a]
    assert _ids(cli, "--key", "k-b") == [b]
    assert _ids(cli, "--run", a[:32]) == [a]
    assert _ids(cli, "--version", "2", "--definition", "hold") == [c]
    assert _ids(cli, "--version", "1", "--input", "customer=ACME") == [a]
    assert _ids(cli, "--since", "2000-01-01T00:00") == [c, b, a]
    assert _ids(cli, "--until", "2000-01-01") == []
    assert _ids(cli, "--since", "2999-01-01T00:00Z") == []


def test_a_bad_filter_is_one_clear_line(cli: Cli) -> None:
    """A bad --input, --run or --since exits 2 with the search's message (no traceback); --oldest-first
    with a search option says the search lists newest first."""
    cli.json("publish", cli.write("hold.yaml", HOLD))
    for args, says in (
        (["--input", "customer"], "no `=`"),
        (["--run", "xyz"], "lowercase hex"),
        (["--since", "yesterday"], "2026-01-31T09:30"),
        (["--oldest-first", "--key", "k"], "newest first"),
    ):
        done = cli.run("runs", *args, expect=2)
        assert says in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert json.loads(cli.run("runs", "--oldest-first", "--json").stdout) == []
