"""docs/production.md stays true to the code: every `lockstep ...` command and every `--option` it names
exists in the CLI, the pool and session settings it states are the adapter's, and the numbers it quotes
from reports/bench.md and reports/faults.md are in those reports."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import click

from lockstep.cli.root import cli
from lockstep.store.postgres import adapter

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "docs" / "production.md").read_text(encoding="utf-8")
# `lockstep db upgrade`, also broken over a line inside the backticks
MENTION = re.compile(r"`lockstep\s+([^`]+)`")
OPTION = re.compile(r"`[^`]*?(--[a-z][a-z-]+)[^`]*`")
FENCE = re.compile(r"```.*?```", re.S)  # shell blocks name other tools' options (pip, useradd)


def _section(title: str) -> str:
    start = TEXT.index(f"## {title}")
    end = TEXT.find("\n## ", start + 1)
    return TEXT[start : end if end != -1 else len(TEXT)]


def _resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    """The deepest command the words name, and the words after it."""
    command: click.Command = cli
    rest = list(words)
    while rest and isinstance(command, click.Group) and rest[0] in command.commands:
        command = command.commands[rest.pop(0)]
    return command, rest


def _options(command: click.Command) -> set[str]:
    names = {opt for p in command.params if isinstance(p, click.Option) for opt in p.opts + p.secondary_opts}
    return names | {opt for p in cli.params if isinstance(p, click.Option) for opt in p.opts}


def _all_options(command: click.Command) -> set[str]:
    found = _options(command)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            found |= _all_options(sub)
    return found


def test_every_command_the_page_names_exists() -> None:
    """Each `lockstep A B --opt` on the page resolves to a real command, and its options are that
    command's (a misspelt or removed command or option fails)."""
    mentions = MENTION.findall(FENCE.sub("", TEXT))
    assert len(mentions) >= 8, mentions
    wrong = []
    for mention in mentions:
        words = mention.split()
        command, rest = _resolve(words)
        if command is cli or (isinstance(command, click.Group) and rest):
            wrong.append(f"`lockstep {mention}`: no such command")
            continue
        wrong += [
            f"`lockstep {mention}`: no option {w}"
            for w in rest
            if w.startswith("--") and w not in _options(command)
        ]
    assert not wrong, wrong


def test_every_option_the_page_names_exists_somewhere() -> None:
    """Each `--option` in backticks (`--public-url`, `--poll-interval`, ...) is an option of some command."""
    named = set(OPTION.findall(FENCE.sub("", TEXT)))
    assert {"--public-url", "--secure-cookies", "--trusted-proxy", "--poll-interval"} <= named, named
    known = _all_options(cli)
    assert not sorted(named - known), f"options the CLI lacks: {sorted(named - known)}"


def test_pool_and_session_settings_are_the_adapters() -> None:
    """The pooling section's numbers (8 connections, 5 s wait, 30 s lock_timeout, UTC) are in the adapter."""
    defaults = inspect.signature(adapter.PgStore.__init__).parameters
    assert defaults["pool_size"].default == 8
    assert defaults["connect_timeout"].default == 5.0
    source = inspect.getsource(adapter)
    assert "SET lock_timeout = '30s'" in source
    assert "SET TIME ZONE 'UTC'" in source
    assert "pg_advisory_lock" in source
    text = _section("Connection pooling (PgBouncer)")
    for said in ("at most **8**", "5 s wait", "30 s", "`lockstep_tasks`", "`lockstep_timers`"):
        assert said in text, said
    assert source.count("LISTEN") >= 1


def test_quoted_benchmark_and_fault_numbers_are_in_the_reports() -> None:
    """Every number in the Sizing and failover tables appears in the report it is quoted from."""
    bench = (ROOT / "reports" / "bench.md").read_text(encoding="utf-8")
    faults = (ROOT / "reports" / "faults.md").read_text(encoding="utf-8")
    assert "2026-12-03" in bench
    assert "2026-12-03" in _section("Sizing")
    assert "2026-12-04" in faults
    assert "2026-12-04" in _section("Database failover (HA)")
    for section, report in (("Sizing", bench), ("Database failover (HA)", faults)):
        rows = [
            line for line in _section(section).splitlines() if line.startswith("| ") and "---" not in line
        ]
        numbers = {n for line in rows for n in re.findall(r"\b\d[\d,]*\.\d+\b|\b\d{1,3}(?:,\d{3})+\b", line)}
        assert numbers, section
        missing = sorted(n for n in numbers if n not in report)
        assert not missing, f"{section}: numbers not in the report: {missing}"
