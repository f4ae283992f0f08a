"""The engines side by side in bench.md: per backend, one table per deployment shape (embedded, split:
a client process plus worker processes), medians with the spread of the repetitions, lockstep's ratio
to each peer, the long runs' per-step cost, and the worker slots; and the issue 22 targets they meet."""

from __future__ import annotations

from typing import Any

from lockstep.runtime.activity import DEFAULT_SLOTS

__all__ = [
    "LABELS",
    "METHOD",
    "RERUN",
    "SHAPES",
    "engine_section",
    "fmt",
    "hardware_limit",
    "per_step_cost_ratio",
    "reference_peer",
    "throughput_targets",
]

LABELS = {
    "lockstep": "lockstep",
    "dbos": "DBOS",
    "dbos_wal": "DBOS (WAL)",
    "absurd": "Absurd",
}
SQLITE_LABELS = {"dbos": "DBOS (DELETE, its default)", "dbos_wal": "DBOS (WAL, synchronous=FULL)"}
PEERS = ("dbos", "dbos_wal", "absurd")

METHOD = """- **Peers** (issue 22): DBOS on SQLite twice, with the file in its default journal (DELETE) and in
  WAL (set on the file before DBOS opens it; SQLite's default synchronous=FULL, which DBOS leaves alone:
  lockstep's durability); Absurd on PostgreSQL (absurd-sdk, its schema installed by `absurdctl init`
  from the SQL bundled in the wheel), a task of `ctx.step`s run by `Absurd.start_worker` with the same
  slots and a 50 ms idle poll. Every engine on a fresh database, in its own process; each repetition
  runs the engines in another order (rotated), and the tables give the median with (min-max).
- **Deployment shapes**: *embedded*, one process starts the runs and runs them (lockstep
  `Engine.worker`, DBOS `DBOS.launch` + `start_workflow`, Absurd `start_worker` in a thread);
  *production shape*, a client process starts each run with a start key (lockstep `Engine.start(key=)`,
  DBOS `DBOSClient.enqueue(workflow_id=)` onto a queue, Absurd `spawn(idempotency_key=)`) while worker
  processes run them (`lockstep worker`; DBOS processes running the queue; Absurd worker processes),
  two by default (`--workers`).
- **Long runs**: the same workload with 20 trivial steps per run (`--long-steps`), as many steps in all
  (runs x 3 / 20 runs). The cost of a step is the CPU per step (user + system from /proc: the
  benchmark's process plus the worker processes, and on PostgreSQL the server: the postmaster, its live
  backends and the reaped ones' times), so a 20-step run's cost carries its start over 20 steps.
- **Hardware limit** (`python -m lab.bench.hardware`): lockstep's own writes recorded from the 3-step
  embedded workload (every INSERT, UPDATE, DELETE, NOTIFY and savepoint each transaction sent, with its
  parameters and executemany batches) and replayed with no engine on fresh databases, one transaction
  after another as recorded: on one connection, and on PostgreSQL on one connection per core at once,
  each on its own database. Steps/s of the replay is the ceiling for lockstep on this machine.
- **Worker slots**: the production shape with `lockstep worker --concurrency N` for each N of
  `--slots` (default 4, 8, 16; 16 is the default of `lockstep worker` and `Engine.worker()`).
"""

_ONE = "python -m lab.bench"
_EMBEDDED = "--shapes embedded --slots '' --no-hardware --no-fleet"
RERUNS = (
    (
        "3-step and 20-step throughput and latency, embedded, one engine (lockstep, dbos, dbos_wal on "
        "SQLite, absurd on PostgreSQL)",
        f"{_ONE} --backends sqlite --engines dbos_wal {_EMBEDDED}",
    ),
    (
        "the same, one engine on a database of your own",
        "python -m lab.bench.child --engine absurd --url postgresql://... --throughput-runs 2000 "
        "--latency-runs 200",
    ),
    (
        "the production shape (`--workers N` worker processes)",
        f"{_ONE} --backends postgresql --engines dbos --shapes split --slots '' --no-hardware --no-fleet",
    ),
    ("worker slots", f"{_ONE} --engines lockstep --shapes split --slots 4,8,16 --no-hardware --no-fleet"),
    ("hardware limit", f"{_ONE} --engines lockstep --shapes '' --slots '' --no-fleet"),
    (
        "the workloads measured once, as a part of their own, then merged into one report",
        f"{_ONE} --engines lockstep --shapes '' --slots '' --no-hardware --fleet timers,waiting --repeat 1 "
        "--out /tmp/b && python -m lab.bench.merge reports/bench.json /tmp/b/bench.json --out reports",
    ),
    (
        "one multi-process workload (two_workers, tracing, shapes, recovery, timers, waiting, "
        "approval_round_trip)",
        f"{_ONE} --engines lockstep --shapes '' --slots '' --no-hardware --fleet approval_round_trip",
    ),
    (
        "the scale workloads at issue 22's sizes (100,000 timers; waiting runs up to 1,000,000, about 25 "
        "minutes of loading per backend; `--quick` for small sizes)",
        f"{_ONE} --engines lockstep --shapes '' --slots '' --no-hardware --repeat 1 --fleet timers,waiting",
    ),
)
RERUN = (
    "Each line reruns one workload alone (`--repeat 1` for one pass, `--out DIR` to leave `reports/` "
    "as is):\n\n" + "\n".join(f"- {what}: `{cmd}`" for what, cmd in RERUNS) + "\n"
)


def fmt(v: float | None, digits: int = 1) -> str:
    """A number for the report ("—" when not measured)."""
    return "—" if v is None else f"{v:,.{digits}f}"


_f = fmt
# (entry suffix, name) of the two deployment shapes, in the report's order
SHAPES = (("", "embedded"), ("/split", "production shape"))


def hardware_limit(hw: dict[str, Any]) -> float | None:
    """The hardware limit, steps/s: all connections at once where measured (PostgreSQL), else one."""
    limit = hw.get("all_connections_steps_per_s") or hw.get("one_connection_steps_per_s")
    return None if limit is None else float(limit)


def throughput_targets(backend: str) -> tuple[tuple[str, int], ...]:
    """(peer, times) of the issue's throughput targets: 10x DBOS (in WAL on SQLite), 3x Absurd."""
    return ((reference_peer(backend), 10), ("absurd", 3))


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "**not met**")


def reference_peer(backend: str) -> str:
    """The DBOS the 10x target is measured against: with WAL on SQLite (lockstep's journal mode)."""
    return "dbos_wal" if backend == "sqlite" else "dbos"


def _cpu(res: dict[str, Any], workload: str) -> float | None:
    """CPU ms per step, engine plus database (the engine alone on SQLite)."""
    engine = res.get(f"{workload}.engine_ms_per_step")
    return None if engine is None else engine + (res.get(f"{workload}.db_ms_per_step") or 0.0)


def per_step_cost_ratio(res: dict[str, Any]) -> float | None:
    """Cost of a step in the long runs over its cost in the 3-step runs: CPU per step (engine plus
    database) when measured, which a loaded machine disturbs less than rates, else the rates' ratio."""
    cpu = _ratio(_cpu(res, "throughput_long"), _cpu(res, "throughput"))
    if cpu is not None:
        return cpu
    return _ratio(res.get("throughput.steps_per_s"), res.get("throughput_long.steps_per_s"))


def _cell(res: dict[str, Any], key: str, digits: int = 1) -> str:
    if res.get("errors") and not res.get("repetitions_ok"):
        return "failed"
    med = res.get(key)
    spread = (res.get("spread") or {}).get(key)
    if med is not None and spread and spread[0] != spread[1]:
        return f"{_f(med, digits)} ({_f(spread[0], 0)}-{_f(spread[1], 0)})"
    return _f(med, digits)


def _table(backend: str, med: dict[str, Any], suffix: str, long_steps: int) -> list[str]:
    names = [e for e in (*LABELS,) if f"{e}{suffix}" in med]
    if not names:
        return []
    labels = {**LABELS, **(SQLITE_LABELS if backend == "sqlite" else {})}
    res = {e: med[f"{e}{suffix}"] for e in names}
    peers = [e for e in names if e in PEERS]
    head = "| " + " | ".join(
        ["metric", *(labels[e] for e in names), *(f"lockstep/{labels[p]}" for p in peers)]
    )
    head += " |"
    out = [head, "|---|" + "---:|" * (len(names) + len(peers))]
    rows: list[tuple[str, str, int]] = [
        ("throughput, 3-step runs, steps/s", "throughput.steps_per_s", 1),
        (f"throughput, {long_steps}-step runs, steps/s", "throughput_long.steps_per_s", 1),
    ]
    rows += [
        ("CPU per step, engine processes, ms, 3-step runs", "throughput.engine_ms_per_step", 3),
        (
            f"CPU per step, engine processes, ms, {long_steps}-step runs",
            "throughput_long.engine_ms_per_step",
            3,
        ),
    ]
    if backend == "postgresql":
        rows += [
            ("CPU per step, PostgreSQL server, ms, 3-step runs", "throughput.db_ms_per_step", 3),
            (
                f"CPU per step, PostgreSQL server, ms, {long_steps}-step runs",
                "throughput_long.db_ms_per_step",
                3,
            ),
        ]
    if not suffix:
        rows += [("latency p50, ms (lower is better)", "latency.p50_ms", 1)]
        rows += [("latency p99, ms (lower is better)", "latency.p99_ms", 1)]
    lk = res.get("lockstep", {})
    for label, key, digits in rows:
        cells = [_cell(res[e], key, digits) for e in names]
        ratios = [f"{_f(_ratio(lk.get(key), res[p].get(key)), 2)}x" for p in peers]
        out.append(f"| {label} | " + " | ".join(cells + ratios) + " |")
    cost = [f"x{_f(per_step_cost_ratio(res[e]), 2)}" for e in names]
    out.append(
        f"| cost of a step, {long_steps}-step / 3-step runs (CPU, engine + database) | "
        + " | ".join(cost + ["—"] * len(peers))
        + " |"
    )
    for e in names:
        if res[e].get("errors"):
            errs = res[e]["errors"]
            out.append(f"\n{labels[e]}{suffix} failed in {len(errs)} repetition(s): {errs[0]}")
    return out


def engine_section(
    backend: str, med: dict[str, Any], long_steps: int
) -> tuple[list[str], list[tuple[str, str, str]]]:
    out: list[str] = []
    shapes = (
        ("", "embedded: one process runs the workers and starts the runs"),
        (
            "/split",
            "production shape: a client process starts runs with start keys, worker processes run them",
        ),
    )
    for suffix, title in shapes:
        table = _table(backend, med, suffix, long_steps)
        if table:
            out += [f"\n**{title}** (median, (min-max) of the repetitions):\n", *table]
    slots = sorted((int(k.split("@")[1]), v) for k, v in med.items() if k.startswith("lockstep/split@"))
    if slots:
        out.append(
            "\nlockstep worker slots (`lockstep worker --concurrency N`, production shape), steps/s:\n"
        )
        out.append("| slots | " + " | ".join(str(n) for n, _ in slots) + " |")
        out.append("|---|" + "---:|" * len(slots))
        out.append(
            "| 3-step runs | " + " | ".join(_cell(v, "throughput.steps_per_s") for _, v in slots) + " |"
        )
    hw = med.get("hardware") or {}
    limit = hardware_limit(hw)
    if limit:
        out += _hardware(backend, med, hw)
    targets = _targets(backend, med, long_steps) + _hardware_targets(backend, med, limit)
    return out, targets + _slots_target(backend, slots)


def _hardware(backend: str, med: dict[str, Any], hw: dict[str, Any]) -> list[str]:
    one, many = hw.get("one_connection_steps_per_s"), hw.get("all_connections_steps_per_s")
    out = [
        "\n**Hardware limit**: lockstep's own writes for the 3-step workload (recorded: "
        f"{_f(hw.get('statements_per_step'), 2)} write statements and {_f(hw.get('rows_per_step'), 2)} rows "
        "per step, in its transactions and batches) replayed with no engine: "
        f"{_f(one, 0)} steps/s on one connection"
        + (f", {_f(many, 0)} steps/s on {_f(hw.get('connections'), 0)} connections at once" if many else "")
        + (
            " (SQLite has one writer per database: one connection is its limit)"
            if backend == "sqlite"
            else ""
        )
        + ".\n",
        "| lockstep | steps/s | fraction of the limit |",
        "|---|---:|---:|",
    ]
    limit = many or one
    for name, label in (("lockstep", "embedded"), ("lockstep/split", "production shape")):
        sps = med.get(name, {}).get("throughput.steps_per_s")
        if sps is not None:
            out.append(f"| {label} | {_f(sps)} | {_f(_ratio(sps, limit), 3)} |")
    rec = hw.get("lockstep_recording_steps_per_s")
    if rec is not None:  # the same moment as the replay: the ratio a busy machine disturbs least
        out.append(
            f"| embedded, while recording (moments before the replay) | {_f(rec)} | "
            f"{_f(_ratio(rec, one), 3)} of one connection |"
        )
    return out


def _hardware_targets(backend: str, med: dict[str, Any], limit: float | None) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for suffix, label in SHAPES:
        name = f"lockstep{suffix}"
        if name not in med or limit is None:
            continue
        sps = med.get(name, {}).get("throughput.steps_per_s")
        r = _ratio(sps, limit)
        out.append(
            (
                f"{backend}, {label}: steps/s >= 50% of the measured hardware limit",
                _verdict(None if r is None else r >= 0.5),
                f"{_f(100 * r, 1)}%" if r is not None else "—",
            )
        )
    return out


def _slots_target(backend: str, slots: list[tuple[int, dict[str, Any]]]) -> list[tuple[str, str, str]]:
    """The default a user gets (DEFAULT_SLOTS) against the best slots measured: a default chosen from
    the measurements is within 10% of the best."""
    measured = {n: r for n, v in slots if (r := v.get("throughput.steps_per_s")) is not None}
    if not measured:
        return []
    best_n = max(measured, key=lambda n: measured[n])
    mine = measured.get(DEFAULT_SLOTS)
    r = _ratio(mine, measured[best_n])
    return [
        (
            f"{backend}: the default worker slots ({DEFAULT_SLOTS}) within 10% of the best measured",
            _verdict(None if r is None else r >= 0.9),
            f"{_f(100 * r, 0)}% of the best ({_f(measured[best_n], 0)} steps/s with {best_n} slots)"
            if r is not None
            else f"{DEFAULT_SLOTS} slots not measured",
        )
    ]


def _targets(backend: str, med: dict[str, Any], long_steps: int) -> list[tuple[str, str, str]]:
    key = "throughput.steps_per_s"
    out: list[tuple[str, str, str]] = []
    for suffix, shape in SHAPES:
        if f"lockstep{suffix}" not in med:
            continue  # not measured in this run: no verdict
        lk = med.get(f"lockstep{suffix}", {}).get(key)
        for peer, times in throughput_targets(backend):
            if f"{peer}{suffix}" not in med:
                continue
            r = _ratio(lk, med[f"{peer}{suffix}"].get(key))
            out.append(
                (
                    f"{backend}, {shape}: steps/s >= {times}x {LABELS[peer]}",
                    _verdict(None if r is None else r >= times),
                    f"{_f(r, 2)}x",
                )
            )
        c = per_step_cost_ratio(med.get(f"lockstep{suffix}", {}))
        out.append(
            (
                f"{backend}, {shape}: a {long_steps}-step run's per-step cost within 1.5x of a 3-step run's",
                _verdict(None if c is None else c <= 1.5),
                f"x{_f(c, 2)}",
            )
        )
    return out
