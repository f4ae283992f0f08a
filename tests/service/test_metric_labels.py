"""Prometheus label values that tenants and workers choose stay bounded: error codes (engine and
declared ones keep their value, the rest are `other`), activity names (the first N per tenant)."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lockstep.app.observability import Metrics
from lockstep.app.service import Service
from lockstep.core.limits import SERVER_LIMITS, ServerLimits
from lockstep.store import Store

from .conftest import FakeClock

TTL = timedelta(seconds=30)
ACTIVITIES = SERVER_LIMITS["max_metric_activities"].default
CODES = SERVER_LIMITS["max_metric_error_codes"].default
pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # labels are not storage


def one_step(name: str, activity: str, **retry: Any) -> dict[str, Any]:
    step = {"id": "call", "activity": activity, "timeout": "30s", "retry": {"max_attempts": 1, **retry}}
    return {"name": name, "steps": [step]}


def series(metrics: Metrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = generate_latest(metrics.exposition()).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def fail_all(svc: Service, activities: list[str], code: Any) -> int:
    leases = svc.claim("w1", activities, limit=500, lease_ttl=TTL)
    reports = [
        svc.failure_report(le.task_id, le.attempt, le.fencing, code(i), "boom") for i, le in enumerate(leases)
    ]
    svc.report_and_claim(reports, "w1", activities, limit=0, lease_ttl=TTL, scan=False)
    return len(leases)


def test_ten_thousand_random_error_codes_leave_metrics_bounded(svc: Service, clock: FakeClock) -> None:
    """A worker failing 10,000 attempts with 10,000 distinct random codes adds one `other` series, not
    10,000: the /metrics text stays the same size however many codes it invents."""
    metrics = Metrics(svc.kernel)
    doc = one_step("flaky", "remote.call", max_attempts=100, initial_interval="1s", backoff=1.0)
    svc.publish("acme", doc)
    svc.start_many("acme", "flaky", [{}] * 100)
    failed = 0
    for _ in range(100):
        failed += fail_all(svc, ["remote.call"], lambda _i: "E" + secrets.token_hex(8))
        clock.advance(seconds=2)
        while svc.fire_due_timers(limit=500):
            pass
    assert failed == 10_000
    failures = series(metrics, "lockstep_activity_failures_total")
    assert failures == {(("activity", "remote.call"), ("code", "other"), ("tenant", "acme")): 10_000.0}
    assert len(generate_latest(metrics.exposition())) < 20_000


def test_engine_and_declared_codes_keep_their_value(svc: Service, clock: FakeClock) -> None:
    """Timeout (the engine's) and a code the definition declares in non_retryable keep their label;
    an undeclared code is `other`; declared codes past the per-tenant bound are `other` too."""
    metrics = Metrics(svc.kernel)
    declared = [f"Declared{i}" for i in range(CODES + 5)]
    svc.publish("acme", one_step("pay", "pay.charge", non_retryable=declared))
    svc.start_many("acme", "pay", [{}] * (CODES + 7))
    codes = [*declared, "Undeclared", "Timeout"]
    assert fail_all(svc, ["pay.charge"], lambda i: codes[i]) == CODES + 7
    svc.start("acme", "pay", input={})
    svc.claim("w1", ["pay.charge"], limit=1, lease_ttl=TTL)
    clock.advance(seconds=60)
    assert svc.expire_leases() == 1  # the engine's own Timeout
    by_code = {dict(k)["code"]: v for k, v in series(metrics, "lockstep_activity_failures_total").items()}
    assert by_code["Timeout"] == 2.0  # one reported by the worker, one from the expired lease
    named = {c: v for c, v in by_code.items() if c.startswith("Declared")}
    assert len(named) == CODES  # which ones is first come, first served
    assert set(named.values()) == {1.0}
    assert by_code["other"] == 6.0  # 5 declared past the bound and 1 undeclared
    assert len(by_code) == CODES + 2


def test_activity_names_are_bounded_per_tenant(svc: Service) -> None:
    """A tenant with more activity names than the bound gets the first ones by name and `other` for the
    rest, in the queue gauges and the counters; another tenant's names are not crowded out."""
    metrics = Metrics(svc.kernel)
    names = [f"act.n{i}" for i in range(ACTIVITIES + 20)]
    for i, activity in enumerate(names):
        svc.publish("acme", one_step(f"d{i}", activity))
        svc.start("acme", f"d{i}", input={})
    svc.publish("globex", one_step("g", "globex.only"))
    svc.start("globex", "g", input={})
    ready = series(metrics, "lockstep_tasks_ready")
    acme = {dict(k)["activity"]: v for k, v in ready.items() if dict(k)["tenant"] == "acme"}
    assert len(acme) == ACTIVITIES + 1
    assert acme["other"] == 20.0
    assert sum(acme.values()) == ACTIVITIES + 20
    assert ready[(("activity", "globex.only"), ("tenant", "globex"))] == 1.0
    assert fail_all(svc, names, lambda _i: "Boom") == ACTIVITIES + 20
    attempts = series(metrics, "lockstep_activity_attempts_total")
    assert len(attempts) == ACTIVITIES + 1
    assert attempts[(("activity", "other"), ("tenant", "acme"))] == 20.0


def run_once(svc: Service, name: str, activity: str, version: int | None = None, fail: bool = False) -> None:
    """Start one run and complete its (single) attempt, or fail it once (a retry) first."""
    svc.start("acme", name, input={}, version=version)
    (lease,) = svc.claim("w1", [activity], limit=1, lease_ttl=TTL)
    if fail:
        svc.fail(lease.task_id, lease.attempt, lease.fencing, "Busy", "again")
        return
    svc.complete(lease.task_id, lease.attempt, lease.fencing, {})


def labelsets(svc: Service, name: str, label: str) -> set[str]:
    return {dict(k)[label] for k in series(svc.metrics, name)}


def test_versions_keep_the_newest_and_the_series_of_older_ones_are_removed(svc: Service) -> None:
    """With two versions kept per definition, a third version's first observation removes the first
    version's step series (durations and retries); a later run of version 1 counts as `other`. Thirty
    versions later the output holds the same number of series."""
    retry = {"max_attempts": 5, "initial_interval": "1s"}
    for v in (1, 2, 3):
        svc.publish("acme", {"name": "flow", "steps": [{**one_step("", "x.do")["steps"][0], "id": f"s{v}"}]})
    svc.publish("acme", {"name": "flaky", "steps": [{**one_step("", "x.do", **retry)["steps"][0]}]})
    for v in (1, 2):
        run_once(svc, "flow", "x.do", version=v)
    assert labelsets(svc, "lockstep_step_duration_seconds_count", "version") == {"1", "2"}
    run_once(svc, "flow", "x.do", version=3)
    durations = series(svc.metrics, "lockstep_step_duration_seconds_count")
    assert {(dict(k)["version"], dict(k)["step"]) for k in durations} == {("2", "s2"), ("3", "s3")}
    run_once(svc, "flow", "x.do", version=1)
    assert labelsets(svc, "lockstep_step_duration_seconds_count", "version") == {"2", "3", "other"}
    run_once(svc, "flaky", "x.do", fail=True)
    assert labelsets(svc, "lockstep_step_retries_total", "definition") == {"flaky"}
    size = len(generate_latest(svc.metrics.exposition()))
    for v in range(4, 34):
        svc.publish("acme", {"name": "flow", "steps": [{**one_step("", "x.do")["steps"][0], "id": f"s{v}"}]})
        run_once(svc, "flow", "x.do", version=v)
    assert labelsets(svc, "lockstep_step_duration_seconds_count", "version") == {"32", "33", "other"}
    assert len(generate_latest(svc.metrics.exposition())) < size * 1.1


def test_definition_names_and_step_ids_are_bounded(store: Store, clock: FakeClock) -> None:
    """Past max_metric_definitions a definition is `other` (its versions too); past max_metric_steps a
    definition's step is `other`, in the histograms and in the runs-at-step gauge alike."""
    svc = Service(
        store, clock=clock, server_limits=ServerLimits({"max_metric_definitions": 3, "max_metric_steps": 2})
    )
    for i in range(5):
        svc.publish("acme", one_step(f"d{i}", "x.do"))
        run_once(svc, f"d{i}", "x.do")
    assert labelsets(svc, "lockstep_run_duration_seconds_count", "definition") == {"d0", "d1", "d2", "other"}
    steps = series(svc.metrics, "lockstep_step_duration_seconds_count")
    assert {dict(k)["definition"]: dict(k)["version"] for k in steps}["other"] == "other"
    long = {"name": "d0", "steps": [{**one_step("", f"y.s{n}")["steps"][0], "id": f"s{n}"} for n in range(4)]}
    svc.publish("acme", long)
    svc.start("acme", "d0", input={}, version=2)
    for n in range(4):
        (lease,) = svc.claim("w1", [f"y.s{n}"], limit=1, lease_ttl=TTL)
        svc.complete(lease.task_id, lease.attempt, lease.fencing, {})
    d0 = {
        dict(k)["step"]
        for k in series(svc.metrics, "lockstep_step_duration_seconds_count")
        if ("definition", "d0") in k
    }
    assert d0 == {"call", "s0", "other"}  # `call` (version 1) and s0 came first
    svc.start("acme", "d0", input={}, version=2)
    (lease,) = svc.claim("w1", ["y.s0"], limit=1, lease_ttl=TTL)
    svc.complete(lease.task_id, lease.attempt, lease.fencing, {})
    at = series(svc.metrics, "lockstep_runs_at_step")
    assert {dict(k)["step"] for k in at if ("definition", "d0") in k} == {"other"}  # s1 is past the bound
