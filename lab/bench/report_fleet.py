"""lockstep's multi-process workloads in bench.md: their table, the waiting runs' curve (memory, disk and
idle CPU at each size) and issue 22's targets on them, each met or not with the measured number and,
when not met, the measured reason."""

from __future__ import annotations

from typing import Any

__all__ = ["PROCS", "fleet_section", "fleet_targets", "once_note", "waiting_points"]

PROCS = ("serve", "scheduler", "worker")
# issue 22's sizes: a target measured below them says so
TARGET_TIMERS = 100_000
TARGET_WAITING = 1_000_000
TARGET_RECOVERY = 1000
TIMERS_S = 5.0
RECOVERY_S = 1.0
FLAT = 1.10  # memory "flat": every process within 10% of its size at the smallest point


def _f(v: float | None, digits: int = 1) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "**not met**")


def waiting_points(sizes: dict[str, Any]) -> list[int]:
    """The waiting workload's sizes, smallest first (`small` and `large` in reports before the curve)."""
    w = sizes.get("waiting", {})
    pts = w.get("points") or [x for x in (w.get("small"), w.get("large")) if x is not None]
    return sorted(int(x) for x in pts)


def once_note(sizes: dict[str, Any], repeat: int) -> str:
    """The workloads measured in the first repetition only, for the report's sizes line ('' if none)."""
    once = [name for name, s in sizes.items() if s.get("once")]
    if not once or repeat < 2:
        return ""
    what = {"timers": f"{sizes.get('timers', {}).get('n', 0):,} timers"}
    what["waiting"] = f"waiting runs up to {max(waiting_points(sizes), default=0):,}"
    return (
        f", except the large multi-process workloads ({', '.join(what.get(n, n) for n in once)}), "
        "**measured once** per backend (marked so)"
    )


def _once(fl: dict[str, Any], name: str) -> bool:
    return int(fl.get("measured", {}).get(name, 0)) == 1 and int(fl.get("repetitions", 1)) > 1


def _how(fl: dict[str, Any], name: str) -> str:
    return "measured once" if _once(fl, name) else "median"


def _below(n: int, target: int) -> str:
    return f" (measured at {n:,}; the target names {target:,})" if n < target else ""


def fleet_section(fl: dict[str, Any], sizes: dict[str, Any]) -> list[str]:
    pts = waiting_points(sizes)
    n_rec = sizes.get("recovery", {}).get("runs", 0)
    n_tim = sizes.get("timers", {}).get("n", 0)
    rows: list[tuple[str, str, str]] = [
        ("two_workers", "two worker processes: steps/s", _f(fl.get("two_workers.steps_per_s"))),
        (
            "tracing",
            "tracing (two workers exporting to a local OTLP receiver): steps/s off / on, on/off",
            f"{_f(fl.get('tracing.steps_per_s_off'))} / {_f(fl.get('tracing.steps_per_s_on'))}, "
            f"x{_f(fl.get('tracing.on_over_off'), 2)}",
        ),
        (
            "shapes",
            "shapes (two workers, three activity steps per run): steps/s straight / parallel / for-each",
            f"{_f(fl.get('shapes.steps_per_s_straight'))} / {_f(fl.get('shapes.steps_per_s_parallel'))} / "
            f"{_f(fl.get('shapes.steps_per_s_for_each'))}",
        ),
        (
            "recovery",
            f"recovery: {n_rec:,} runs, every engine process SIGKILLed, restarted under the same ids; "
            "restart -> all completed, s (of which starting the processes)",
            f"{_f(fl.get('recovery.recovery_s'), 2)} ({_f(fl.get('recovery.restart_s'), 2)})",
        ),
        (
            "recovery",
            "recovery: leases the restarted workers abandoned at start-up",
            _f(fl.get("recovery.abandoned_leases"), 0),
        ),
        (
            "recovery",
            "recovery: completed steps started again (must be 0)",
            _f(fl.get("recovery.completed_steps_started_again"), 0),
        ),
        (
            "recovery",
            "recovery: attempts in flight at the kill, run again (same key)",
            _f(fl.get("recovery.steps_run_twice"), 0),
        ),
        (
            "timers",
            f"timers: {n_tim:,} due in the same instant, schedulers running; due -> all fired, s",
            _f(fl.get("timers.all_fired_s"), 2),
        ),
        (
            "timers",
            "timers: lag p50 / p90 / p99, ms",
            " / ".join(_f(fl.get(f"timers.lag_p{q}_ms"), 0) for q in (50, 90, 99)),
        ),
        (
            "timers",
            "timers: fired per second, overall / per partition (median of the 64)",
            f"{_f(fl.get('timers.fired_per_s'), 0)} / {_f(fl.get('timers.partition_fired_per_s_p50'), 0)}",
        ),
        ("timers", "timers: fired twice (must be 0)", _f(fl.get("timers.fired_twice"), 0)),
        (
            "approval_round_trip",
            "approval round trip (HTTP decision -> next activity entered, worker process) p50 / p99, ms",
            f"{_f(fl.get('approval_round_trip.p50_ms'))} / {_f(fl.get('approval_round_trip.p99_ms'))}",
        ),
    ]
    out = ["\nMulti-process workloads (lockstep only; real `lockstep` processes on a fresh database):\n"]
    out += ["| workload | value | how |", "|---|---:|---|"]
    out += [f"| {label} | {value} | {_how(fl, name)} |" for name, label, value in rows]
    if pts and f"waiting.{pts[0]}.db_mib" in fl:
        out += _waiting_curve(fl, pts)
    if fl.get("errors"):
        out.append(f"\nFailed: {'; '.join(fl['errors'][:3])}")
    return out


def _waiting_curve(fl: dict[str, Any], pts: list[int]) -> list[str]:
    out = [
        f"\nWaiting runs ({_how(fl, 'waiting')}; half on an approval, half on a 30-day timer; "
        "`lockstep serve`, a scheduler and a worker running):\n",
        "| waiting runs | RSS serve / scheduler / worker, MiB | database, MiB | KiB per run "
        "| scheduler idle CPU, % of a core | loaded, runs/s |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n in pts:
        db = fl.get(f"waiting.{n}.db_mib")
        rss = " / ".join(_f(fl.get(f"waiting.{n}.rss_mib.{p}")) for p in PROCS)
        out.append(
            f"| {n:,} | {rss} | {_f(db)} | {_f(None if db is None else db * 1024 / n, 2)} "
            f"| {_f(fl.get(f'waiting.{n}.scheduler_idle_cpu_pct'), 2)} "
            f"| {_f(fl.get(f'waiting.{n}.loaded_per_s'), 0)} |"
        )
    return out


def _recovery_target(backend: str, fl: dict[str, Any], n: int) -> tuple[str, str, str]:
    rec, reran = fl.get("recovery.recovery_s"), fl.get("recovery.completed_steps_started_again")
    ok = None if rec is None else rec < RECOVERY_S and reran == 0
    measured = f"{_f(rec, 2)} s, {_f(reran, 0)} completed steps re-run" + _below(n, TARGET_RECOVERY)
    if ok is False:
        measured += (
            f"; of it {_f(fl.get('recovery.restart_s'), 2)} s starting the processes (Python start-up "
            f"until ready) and {_f(fl.get('recovery.after_ready_s'), 2)} s running the steps left, "
            f"which need at least {_f(fl.get('recovery.activity_floor_s'), 2)} s (their 20 ms sleeps "
            "over the workers' slots)"
        )
        if fl.get("recovery.abandoned_leases") == 0 and (fl.get("recovery.restart_s") or 0) > (
            ttl := fl.get("recovery.lease_ttl_s") or 10.0
        ):
            measured += f"; no lease was left to abandon: the start-up outlasted the {ttl:g} s lease"
    return (
        f"{backend}: recovery of {n:,} interrupted runs under {RECOVERY_S:g} s after the restart of the "
        "workers under their ids, nothing completed re-run",
        _verdict(ok),
        measured + (" (measured once)" if _once(fl, "recovery") else ""),
    )


def _memory_target(backend: str, fl: dict[str, Any], pts: list[int]) -> tuple[str, str, str]:
    if len(pts) < 2:
        return (f"{backend}: memory flat with the waiting runs", _verdict(None), "—")
    lo, hi = pts[0], pts[-1]
    growth: dict[str, float] = {}
    for p in PROCS:
        base = fl.get(f"waiting.{lo}.rss_mib.{p}")
        seen = [v for n in pts if (v := fl.get(f"waiting.{n}.rss_mib.{p}")) is not None]
        if base and seen:
            growth[p] = max(seen) / base
    worst = max(growth, key=lambda k: growth[k]) if growth else None
    ok = None if worst is None else growth[worst] <= FLAT
    measured = "—"
    if worst is not None:
        curve = " -> ".join(_f(fl.get(f"waiting.{n}.rss_mib.{worst}")) for n in pts)
        at = ", ".join(f"{n:,}" for n in pts)
        measured = f"worst growth x{_f(growth[worst], 2)} ({worst}: {curve} MiB at {at})"
    return (
        f"{backend}: memory flat from {lo:,} to {hi:,} waiting runs (each process within 10%)",
        _verdict(ok),
        measured + _below(hi, TARGET_WAITING) + (" (measured once)" if _once(fl, "waiting") else ""),
    )


def _timers_target(backend: str, fl: dict[str, Any], n: int) -> tuple[str, str, str]:
    fired, twice = fl.get("timers.all_fired_s"), fl.get("timers.fired_twice")
    ok = None if fired is None else fired < TIMERS_S and twice == 0
    measured = f"{_f(fired, 2)} s, {_f(twice, 0)} fired twice" + _below(n, TARGET_TIMERS)
    if ok is False:
        lags = " / ".join(_f(fl.get(f"timers.lag_p{q}_ms"), 0) for q in (50, 90, 99))
        measured += (
            f"; fired at {_f(fl.get('timers.fired_per_s'), 0)}/s overall, "
            f"{_f(fl.get('timers.partition_fired_per_s_p50'), 0)}/s per partition (median of the 64), "
            f"lag p50 / p90 / p99 {lags} ms"
        )
    return (
        f"{backend}: {n:,} timers due at the same instant all fired within {TIMERS_S:g} s, none twice",
        _verdict(ok),
        measured + (" (measured once)" if _once(fl, "timers") else ""),
    )


def _round_trip_parts(fl: dict[str, Any]) -> str:
    """Where the round trip's time went, when the run measured the answer (reports since 2026-12-03)."""
    total, answer = fl.get("approval_round_trip.p50_ms"), fl.get("approval_round_trip.answered_p50_ms")
    if total is None or answer is None:
        return ""
    return (
        f"; of it {_f(answer)} ms until the decision was answered (HTTP, authentication, the decision's "
        f"transaction and commit) and {_f(max(total - answer, 0.0))} ms for the worker to be woken, "
        "claim the next step and enter its activity"
    )


def fleet_targets(backend: str, fl: dict[str, Any], sizes: dict[str, Any]) -> list[tuple[str, str, str]]:
    pts = waiting_points(sizes)
    idle = fl.get(f"waiting.{pts[-1]}.scheduler_idle_cpu_pct") if pts else None
    art = fl.get("approval_round_trip.p50_ms")
    return [
        _recovery_target(backend, fl, int(sizes.get("recovery", {}).get("runs", 0))),
        _memory_target(backend, fl, pts),
        (
            f"{backend}: approval round trip p50 < 10 ms (issue 22)",
            _verdict(None if art is None else art < 10)
            + (" ([why](#where-the-time-goes-per-step))" if art is not None and art >= 10 else ""),
            f"{_f(art)} ms" + _round_trip_parts(fl),
        ),
        (
            f"{backend}: scheduler idle CPU < 2%" + (f" at {pts[-1]:,} waiting runs" if pts else ""),
            _verdict(None if idle is None else idle < 2),
            f"{_f(idle, 2)}%",
        ),
        _timers_target(backend, fl, int(sizes.get("timers", {}).get("n", 0))),
    ]
