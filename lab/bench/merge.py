"""One report from several runs of the harness: `python -m lab.bench.merge A/bench.json B/bench.json
--out reports`.

The full benchmark takes longer than a quiet stretch of a shared machine, so it can be run in parts:
the engine comparison with the per-repetition workloads in one run, the workloads measured once (a
million waiting runs, 100,000 timers) in another. Ratios are only ever computed within a part, where
the engines ran side by side; the report names every part with its command and time range.

Repetition i of every part becomes repetition i of the report. A part may add backends, engine entries
and multi-process workloads to a repetition but never replace one another part measured, unless
`--replace NAME` says a later part measured that multi-process workload again (its measurement then
replaces the earlier one whole, and the report says so). The raw commit rates, which every run
measures, are kept from the first part that has them: the one measured next to the engines.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .aggregate import aggregate
from .report import write_reports

__all__ = ["main", "merge"]

_SAME = ("quick", "machine")
_FIELDS = ("command", "began", "finished", "quick", "machine", "versions", "sizes", "repetitions")
KEPT_FROM_FIRST = {"raw"}


class MergeError(ValueError):
    """The parts cannot form one report (what differs, and in which part)."""


def _merge_rep(into: dict[str, Any], part: dict[str, Any], where: str, replace: frozenset[str]) -> None:
    """Add one repetition of a part to `into`; a multi-process workload measured again must be in
    `replace` (the earlier measurement was dropped by `merge` before)."""
    for backend, res in part.items():
        have = into.setdefault(backend, {})
        for key, val in res.items():
            if key == "fleet":
                fleet = have.setdefault("fleet", {})
                if clash := sorted(set(fleet) & set(val) - replace):
                    raise MergeError(
                        f"{where}, {backend}: workload(s) {', '.join(clash)} measured twice (--replace "
                        "NAME keeps the later part's)"
                    )
                fleet.update(val)
            elif key not in have:
                have[key] = val
            elif key not in KEPT_FROM_FIRST:
                raise MergeError(f"{where}, {backend}: {key} measured twice; run each entry in one part")


def _workloads(part: dict[str, Any]) -> set[str]:
    return {w for rep in part["repetitions"] for res in rep.values() for w in res.get("fleet", {})}


def merge(parts: list[dict[str, Any]], replace: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The report of `parts` (harness reports, in order): their repetitions merged, medians recomputed.
    A multi-process workload in `replace` may be measured again by a later part, whose measurement
    wins whole (the earlier one is dropped from every repetition, so no median mixes the two)."""
    if not parts:
        raise MergeError("no parts given")
    for i, p in enumerate(parts, start=1):
        if missing := [k for k in _FIELDS if not isinstance(p, dict) or k not in p]:
            raise MergeError(f"part {i} lacks {', '.join(missing)}: is it a bench.json written by lab.bench?")
    first = parts[0]
    for i, p in enumerate(parts[1:], start=2):
        for key in _SAME:
            if p.get(key) != first.get(key):
                raise MergeError(f"part {i} differs from part 1 in {key!r}: one report needs one setting")
        if p["versions"].get("lockstep") != first["versions"].get("lockstep"):
            raise MergeError(f"part {i} measured another lockstep version than part 1")
    reps: list[dict[str, Any]] = []
    named: list[dict[str, Any]] = []
    for i, p in enumerate(parts, start=1):
        again = sorted(
            _workloads(p) & replace & {w for rep in reps for r in rep.values() for w in r.get("fleet", {})}
        )
        for rep in reps:
            for res in rep.values():
                for w in again:
                    res.get("fleet", {}).pop(w, None)
        for n, rep in enumerate(p["repetitions"]):
            while len(reps) <= n:
                reps.append({})
            _merge_rep(reps[n], rep, f"part {i}, repetition {n + 1}", replace)
        # a merged report merged again keeps naming the runs it came from
        own = p.get("parts", [{k: p[k] for k in ("command", "began", "finished")}])
        named += [{**x, "replaces": again} for x in own] if again else own
    sizes = dict(first["sizes"])
    sizes["repeat"] = max(int(p["sizes"]["repeat"]) for p in parts)
    sizes["fleet"] = {k: v for p in reversed(parts) for k, v in p["sizes"].get("fleet", {}).items()}
    versions = {k: v for p in reversed(parts) for k, v in p["versions"].items() if v is not None}
    return {
        **first,
        "began": min(p["began"] for p in parts),
        "finished": max(p["finished"] for p in parts),
        "parts": named,
        "sizes": sizes,
        "versions": {**first["versions"], **versions},
        "medians": aggregate(reps),
        "repetitions": reps,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.bench.merge", description=__doc__.split("\n\n")[0])
    p.add_argument("parts", nargs="+", type=Path, help="bench.json of each part, in order")
    p.add_argument("--out", default="reports", help="directory for the merged bench.md and bench.json")
    p.add_argument(
        "--replace",
        action="append",
        default=[],
        metavar="NAME",
        help="a multi-process workload a later part measured again: its measurement replaces the earlier",
    )
    args = p.parse_args(argv)
    try:
        loaded = [json.loads(path.read_text()) for path in args.parts]
        report = merge(loaded, frozenset(args.replace))
    except (OSError, json.JSONDecodeError, MergeError) as exc:
        print(f"cannot merge: {exc}", file=sys.stderr)
        return 2
    md, js = write_reports(report, Path(args.out))
    print(f"wrote {md} and {js} from {len(loaded)} parts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
