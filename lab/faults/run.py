"""The matrix: every scenario on every backend, each in its own fleet and directory, then the reports
(`reports/faults.md` for people, `reports/faults.json` for tools).

The broken builds run last: the same scenarios with a safety mechanism switched off by a fail point.
They pass only if the checker finds violations, which is the proof that a clean run means something.
"""

from __future__ import annotations

import contextlib
import functools
import json
import platform
import random
import shutil
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lockstep.testing.pgcluster import PgCluster

from ..fleet import postgres
from ..fleet.mounts import small_disk
from .base import Ctx, Outcome, Scenario
from .checker import CHECKS
from .faultfleet import FaultFleet
from .scenarios import crash_after_commit, duplicate_delivery, duplicate_timer, lease_expiry, lost_response
from .scenarios_backpressure import backpressure
from .scenarios_clocks import clock_jumps
from .scenarios_corrupt import corrupt_history
from .scenarios_disk import disk_full
from .scenarios_events import event_replay
from .scenarios_http import http_lost_response
from .scenarios_keys import rotate_under_load
from .scenarios_ops import (
    approval_replay,
    db_outage,
    db_partition,
    interrupted_deployment,
    queue_backlog,
    quota_exhausted,
)
from .scenarios_retention import purge_under_load
from .scenarios_schedules import schedules_under_faults
from .scenarios_tenants import hostile_tenant
from .scenarios_traces import traced_crashes
from .scenarios_upgrade import upgrade_under_load
from .scenarios_webhooks import webhook_receiver_down

__all__ = ["SCENARIOS", "run_matrix", "write_reports"]

SCENARIOS = [
    Scenario("crash_after_commit", "crash_after_commit", crash_after_commit),
    Scenario("duplicate_delivery", "duplicate_delivery", duplicate_delivery),
    Scenario("lease_expiry", "lease_expiry", lease_expiry),
    Scenario("lost_response", "lost_response", lost_response),
    Scenario("approval_replay", "approval_replay", approval_replay),
    Scenario("duplicate_timer", "duplicate_timer", duplicate_timer),
    Scenario(
        "event_replay",
        "event_replay",
        event_replay,
        about="external events sent twice at once and out of order (some buffered), replayed, sent by "
        "another tenant's publisher, and callbacks posted twice and replayed, across a server SIGKILL",
    ),
    Scenario("db_outage", "db_outage", db_outage),
    Scenario(
        "upgrade_under_load",
        "upgrade_under_load",
        upgrade_under_load,
        backends=("postgresql",),
        about="a rolling upgrade from an older build (its wheel, its schema) while runs are started: "
        "schema migrated under the old fleet, old and new side by side, then new only",
    ),
    Scenario(
        "disk_full",
        "disk_full",
        disk_full,
        backends=("sqlite",),
        disk="16m",
        about="SQLite's disk filled up mid-load for 2 s (a filler file on its 16 MiB tmpfs), then freed",
    ),
    Scenario(
        "db_partition",
        "db_partition",
        db_partition,
        backends=("postgresql",),
        about="one worker cut off from PostgreSQL by a TCP proxy, longer than its lease, three times",
    ),
    Scenario(
        "corrupt_history",
        "corrupt_history",
        corrupt_history,
        about="events of waiting runs changed in place (still decodable, chain broken) under load: the "
        "scrub marks each before its timer, commands on it are refused, the other runs go on",
    ),
    Scenario("queue_backlog", "queue_backlog", queue_backlog),
    Scenario("interrupted_deployment", "interrupted_deployment", interrupted_deployment),
    Scenario("quota_exhausted", "quota_exhausted", quota_exhausted),
    Scenario(
        "hostile_tenant",
        "hostile_tenant",
        hostile_tenant,
        about="a tenant admin sends bombs (documents, expressions, inputs) while another tenant's runs go on",
    ),
    Scenario(
        "purge_under_load",
        "purge_under_load",
        purge_under_load,
        about="finished runs purged after a retention of seconds while runs start, finish and are held, "
        "and the purging schedulers are SIGKILLed",
    ),
    Scenario(
        "rotate_under_load",
        "rotate_under_load",
        rotate_under_load,
        about="two key rotations while sealed runs proceed; workers and a re-wrapping scheduler SIGKILLed",
    ),
    Scenario(
        "traced_crashes",
        "traced_crashes",
        traced_crashes,
        about="crash_after_commit's kills with every process exporting spans to a real OTLP receiver: one "
        "trace per run, each span the history's, losses only within a killed process's batch delay",
    ),
    # The same faults on runs with two branches in flight at once (a parallel step): no branch's effect
    # is repeated, and each run's join is decided and ended exactly once (checker: joins_repeated).
    *(
        Scenario(
            f"{name}_parallel",
            name,
            functools.partial(body, parallel=True),
            about=f"{name}, on a definition whose ship and pack run as two branches of a parallel step",
        )
        for name, body in (
            ("crash_after_commit", crash_after_commit),
            ("duplicate_delivery", duplicate_delivery),
            ("lease_expiry", lease_expiry),
            ("lost_response", lost_response),
            ("duplicate_timer", duplicate_timer),
        )
    ),
    # The worker scenarios with remote workers (`lockstep worker --url`: the task API of a `lockstep
    # serve`, no database): freezes and late reports, kills at each point of an attempt, redeliveries.
    *(
        Scenario(
            f"{name}_http",
            name,
            body,
            http=True,
            about=f"{name}, every worker a remote one over the HTTP task API of a lockstep serve",
        )
        for name, body in (
            ("lease_expiry", lease_expiry),
            ("crash_after_commit", crash_after_commit),
            ("duplicate_delivery", duplicate_delivery),
        )
    ),
    Scenario(
        "schedules_under_faults",
        "schedules_under_faults",
        schedules_under_faults,
        about="three schedules firing every 1-3 s under two schedulers SIGKILLed at fire points and a "
        "database outage: each due slot one run, none early, none missed beyond its policies",
    ),
    Scenario(
        "webhook_receiver_down",
        "webhook_receiver_down",
        webhook_receiver_down,
        about="a run-webhook receiver down for 6 s while runs proceed, a delivering scheduler SIGKILLed "
        "mid-POST: every subscribed event delivered at least once, in order per run, no run held up",
    ),
    Scenario(
        "http_lost_response",
        "http_lost_response",
        http_lost_response,
        about="http steps (no activity code) against the downstream, which drops a quarter of the answers "
        "after applying them and fails a tenth; a worker SIGKILLed: each effect applied once by key",
    ),
    Scenario(
        "backpressure",
        "backpressure",
        backpressure,
        about="25 starts per run sent to serve at full speed by 8 clients honouring Retry-After, into a "
        "backlog bounded at 1/50 of them: 429s, serve's memory flat, the backlog drained",
    ),
    Scenario(
        "clock_jumps",
        "clock_jumps",
        clock_jumps,
        about="faketime: workers 10 min ahead and behind, a worker and the scheduler stepped +-10 min "
        "mid-run (PostgreSQL: no lease taken, no timer early); every process stepped at once (SQLite)",
    ),
    Scenario(
        "broken_no_fencing",
        "lease_expiry",
        functools.partial(lease_expiry, unsafe=True),
        expect_violations=True,
        backends=("sqlite",),
        about="fencing switched off (unsafe.no_fencing): late reports land on the current attempt",
    ),
    Scenario(
        "broken_no_fencing_http",
        "lease_expiry",
        functools.partial(lease_expiry, unsafe=True),
        expect_violations=True,
        backends=("sqlite",),
        http=True,
        server_faults="unsafe.no_fencing=on",
        about="lease_expiry_http with fencing switched off in the server that records the remote "
        "workers' reports: late reports over HTTP land on the current attempt",
    ),
    Scenario(
        "broken_schedule_no_advance",
        "schedules_under_faults",
        functools.partial(schedules_under_faults, unsafe=True),
        expect_violations=True,
        backends=("sqlite",),
        about="a fire that does not move its schedule on (unsafe.schedule_no_advance): slots fire again",
    ),
    Scenario(
        "broken_webhook_drop_failed",
        "webhook_receiver_down",
        functools.partial(webhook_receiver_down, unsafe=True),
        expect_violations=True,
        backends=("sqlite",),
        about="a failed webhook attempt marked delivered (unsafe.webhook_drop_failed): events are lost",
    ),
    Scenario(
        "broken_http_key_per_attempt",
        "http_lost_response",
        functools.partial(http_lost_response, unsafe=True),
        expect_violations=True,
        backends=("sqlite",),
        about="http steps sending a new idempotency key per attempt (unsafe.key_per_attempt): charged again",
    ),
    Scenario(
        "broken_no_scrub",
        "corrupt_history",
        functools.partial(corrupt_history, unsafe=True),
        expect_violations=True,
        backends=("sqlite",),
        about="corrupt_history with the schedulers' scrub off: damaged runs go unmarked and move on",
    ),
    Scenario(
        "broken_key_per_attempt",
        "lost_response",
        functools.partial(lost_response, unsafe=True),
        expect_violations=True,
        backends=("sqlite",),
        about="a new idempotency key per attempt (unsafe.key_per_attempt): retries charge again",
    ),
]


def run_matrix(
    backends: list[str],
    *,
    seed: int,
    runs: int,
    soak: bool,
    workdir: Path,
    only: list[str] | None = None,
    keep: bool = False,
    say: Callable[[str], None] = print,
) -> list[Outcome]:
    # By exact name: `lease_expiry` is that scenario, not also its _parallel and _http variants.
    chosen = [s for s in SCENARIOS if not only or s.name in only]
    results: list[Outcome] = []
    with postgres("postgresql" in backends) as pg:
        for backend in backends:
            for sc in chosen:
                if backend in sc.backends:
                    results.append(_one(sc, backend, pg, seed, runs, soak, workdir, keep, say))
    return results


def _one(
    sc: Scenario,
    backend: str,
    pg: PgCluster | None,
    seed: int,
    runs: int,
    soak: bool,
    workdir: Path,
    keep: bool,
    say: Callable[[str], None],
) -> Outcome:
    where = workdir / f"{backend}-{sc.name}"
    shutil.rmtree(where, ignore_errors=True)
    t0 = time.monotonic()
    disk = contextlib.ExitStack()
    db_dir = None
    if sc.disk and backend == "sqlite":  # the database alone on a small disk; logs and ledger beside it
        db_dir = disk.enter_context(small_disk(where / "disk", sc.disk))
    try:
        fleet = FaultFleet(where, backend, pg, http=sc.http, server_faults=sc.server_faults, db_dir=db_dir)
    except BaseException:
        disk.close()
        raise
    rng = random.Random(f"{seed}/{sc.name}/{backend}")  # noqa: S311 - reproducible faults, not secrets
    ctx = Ctx(fleet, seed, rng, runs, soak, deadline_s=300.0 if soak else 120.0)
    outcome = Outcome(sc.name, sc.fault, backend, seed, 0, {}, dict.fromkeys(CHECKS, 0), None)
    outcome.expect_violations = sc.expect_violations
    try:
        verdict, recovery = sc.body(ctx)
        outcome.outcomes, outcome.violations, outcome.examples = (
            verdict.outcomes,
            verdict.violations,
            verdict.examples,
        )
        outcome.runs = verdict.outcomes.get("started", 0)
        outcome.recovery_s = recovery
    except Exception as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"
        (where / "error.txt").write_text(traceback.format_exc())
    finally:
        outcome.injected = ctx.injected
        fleet.shutdown()
        disk.close()
    outcome.duration_s = time.monotonic() - t0
    found = sum(outcome.violations.values())
    verdict_text = "ok" if outcome.passed else "FAILED"
    if sc.expect_violations:
        verdict_text += (
            f" (broken build: {found} violations found, as it must)" if found else " (not caught!)"
        )
    say(
        f"{backend:10} {sc.name:24} runs={outcome.runs:<4} violations={found:<3} "
        f"recovery={outcome.recovery_s}s {outcome.duration_s:5.1f}s  {verdict_text}"
        + (f"  error: {outcome.error}" if outcome.error else "")
    )
    if outcome.passed and not keep:
        shutil.rmtree(where, ignore_errors=True)
    return outcome


def write_reports(results: list[Outcome], out: Path, settings: dict[str, Any]) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
        **settings,
        "scenarios": [r.to_json() for r in results],
    }
    json_path, md_path = out / "faults.json", out / "faults.md"
    json_path.write_text(json.dumps(doc, indent=2) + "\n")
    md_path.write_text(_markdown(results, doc))
    return md_path, json_path


def _markdown(results: list[Outcome], doc: dict[str, Any]) -> str:
    lines = [
        "# Fault-injection report",
        "",
        f"Generated {doc['generated_at']} by `{doc['command']}` (seed {doc['seed']}, {doc['runs']} runs per"
        f" scenario) on {doc['machine']}. Every scenario runs real `lockstep` worker / scheduler / serve"
        " processes, a real database and a real downstream HTTP service; the checker reads the event log,"
        " the snapshots and the downstream ledger afterwards (see `lab/faults/checker.py`).",
        "",
        "Outcomes: done = completed, failed, cancelled; human = an explicit state for a person"
        " (needs_attention, paused, waiting for approval); stuck must be 0. Recovery: seconds from the"
        " last injected fault until every run settled.",
        "",
        "| scenario | backend | runs | completed | failed | cancelled | human | stuck | violations |"
        " recovery s | faults injected | result |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        o = r.outcomes
        bad = {k: n for k, n in r.violations.items() if n}
        shown = ", ".join(f"{k} {n}" for k, n in bad.items()) or "0"
        injected = "; ".join(f"{k}: {n}" for k, n in r.injected.items()) or "-"
        result = "ok" if r.passed else "**FAILED**"
        if r.expect_violations:
            result = "caught (broken build)" if r.passed else "**NOT CAUGHT**"
        if r.error:
            result += f" (error: {r.error})"
        lines.append(
            f"| {r.name} | {r.backend} | {r.runs} | {o.get('completed', 0)} | {o.get('failed', 0)} |"
            f" {o.get('cancelled', 0)} | {o.get('human', 0)} | {o.get('stuck', 0)} | {shown} |"
            f" {r.recovery_s if r.recovery_s is not None else '-'} | {injected} | {result} |"
        )
    lines += ["", "## Checks (totals over the scenarios that must be clean)", ""]
    lines += ["| check | violations |", "|---|---|"]
    clean = [r for r in results if not r.expect_violations]
    for c in CHECKS:
        lines.append(f"| {c} | {sum(r.violations.get(c, 0) for r in clean)} |")
    broken = [r for r in results if r.expect_violations]
    if broken:
        lines += ["", "## Broken builds (the checker must fail them)", ""]
        for r in broken:
            found = {k: n for k, n in r.violations.items() if n}
            lines.append(f"- **{r.name}** ({r.backend}): {found or 'nothing found'}")
            for check, examples in r.examples.items():
                lines += [f"  - {check}: {examples[0]}"]
    failed = [r for r in results if not r.passed and not r.expect_violations]
    if failed:
        lines += ["", "## Failures", ""]
        for r in failed:
            lines.append(f"- **{r.name}** ({r.backend}): {r.error or ''}")
            for check, examples in r.examples.items():
                lines += [f"  - {check}: {e}" for e in examples]
    return "\n".join(lines) + "\n"
