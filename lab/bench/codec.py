"""The event codec on the hot path, and why its records are msgspec Structs (issue 15).

    .venv/bin/python -m lab.bench.codec

A typical 3-step run history (11 events: RunStarted, three times ActivityScheduled, ActivityStarted,
ActivitySucceeded, then RunCompleted) made by the real decide(), measured three ways per history:

- decode: its stored rows (type column + data text) to events, as a store reads a run;
- decode + fold: the same, then evolve() over them (lockstep's own records only);
- build: the records made from their fields, as decide() emits them;
- encode: the hash chain (canonical JSON) and the stored data column (orjson) of each event.

The records are compared in three flavours holding the same fields: msgspec.Struct (frozen; what
lockstep uses), frozen dataclasses (slots) and the plain dicts of the earlier `Event(type, data)`.
Times are the best of several rounds, in microseconds per history.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import yaml

from lockstep.core.canonical import canonical_json, compact_json, parse_json
from lockstep.core.commands import ClaimTask, Command, ReportSuccess, StartRun
from lockstep.core.decide import decide
from lockstep.core.definition import parse_definition
from lockstep.core.events import RECORDS, Event, chain_link
from lockstep.core.evolve import evolve, fold
from lockstep.core.state import RunState
from lockstep.core.timeutil import iso

DOC = """
name: three
steps:
  - {id: a, activity: x.a, input: {n: "${input.n}", sku: "ABC-123"}, timeout: 30s}
  - {id: b, activity: x.b, input: {prev: "${steps.a.output}"}, timeout: 30s}
  - {id: c, activity: x.c, input: {prev: "${steps.b.output}"}, timeout: 30s}
"""
T0 = datetime(2024, 1, 1, tzinfo=UTC)
RUN = "run-000001"

Row = tuple[int, str, str, int, str]


def history() -> list[Event]:
    d = parse_definition(yaml.safe_load(DOC))
    state: RunState | None = None
    out: list[Event] = []

    def send(cmd: Command) -> None:
        nonlocal state
        for e in decide(state, cmd, T0, d):
            state = evolve(state, e)
            out.append(e)

    send(StartRun(RUN, "acme", 1, {"n": 7, "customer": "c-1", "items": [1, 2, 3]}))
    for step in "abc":
        task = f"{RUN}/{step}/a1-{len(out)}"
        send(ClaimTask(task, "worker-1", iso(T0 + timedelta(seconds=30))))
        send(ReportSuccess(task, 1, len(out), {"ok": True, "ref": f"{step}-42", "amount": 12.5}))
    return out


def _hash(previous: str, seq: int, type_: str, at: str, v: int, data: dict[str, Any]) -> str:
    body = canonical_json({"run": RUN, "seq": seq, "type": type_, "at": at, "v": v, "data": data})
    return hashlib.sha256((previous + "\n" + body).encode()).hexdigest()


# --- the same records as frozen dataclasses ------------------------------------------------------------


def _dataclass_of(cls: type[Any]) -> type[Any]:
    names = [f.name for f in msgspec.structs.fields(cls)]
    bare = type(cls.__name__, (), {"__annotations__": dict.fromkeys(names, Any)})
    return dataclass(frozen=True, slots=True)(bare)


DATACLASSES = {t: _dataclass_of(c) for t, c in RECORDS.items()}
NAMES = {t: frozenset(f.name for f in fields(c)) for t, c in DATACLASSES.items()}


def main() -> int:
    events = history()
    rows: list[Row] = [(e.seq, e.type, e.at, e.v, compact_json(e.data_json())) for e in events]
    dicts = [(e.seq, e.type, e.at, e.v, e.data_json()) for e in events]
    as_dc = [(e.seq, e.type, e.at, e.v, DATACLASSES[e.type](**e.data_json())) for e in events]

    def decode_msgspec() -> list[Event]:
        return [Event.from_row(*r) for r in rows]

    def decode_dataclass() -> list[Any]:
        out = []
        for seq, type_, at, v, text in rows:
            data = parse_json(text)
            if not data.keys() <= NAMES[type_]:
                raise ValueError(type_)
            out.append((seq, type_, at, v, DATACLASSES[type_](**data)))
        return out

    def decode_dict() -> list[Any]:
        return [(seq, type_, at, v, parse_json(text)) for seq, type_, at, v, text in rows]

    def build_msgspec() -> list[Any]:
        return [RECORDS[t](**d) for _s, t, _a, _v, d in dicts]

    def build_dataclass() -> list[Any]:
        return [DATACLASSES[t](**d) for _s, t, _a, _v, d in dicts]

    def build_dict() -> list[Any]:
        return [dict(d) for _s, _t, _a, _v, d in dicts]

    def encode_msgspec() -> list[tuple[str, str]]:
        h, out = "", []
        for e in events:
            doc = e.to_json()
            h = chain_link(h, RUN, doc)
            out.append((compact_json(doc["data"]), h))
        return out

    def encode_dataclass() -> list[tuple[str, str]]:
        h, out = "", []
        for seq, type_, at, v, r in as_dc:
            data = {f: getattr(r, f) for f in r.__slots__}
            h = _hash(h, seq, type_, at, v, data)
            out.append((compact_json(data), h))
        return out

    def encode_dict() -> list[tuple[str, str]]:
        h, out = "", []
        for seq, type_, at, v, data in dicts:
            h = _hash(h, seq, type_, at, v, data)
            out.append((compact_json(data), h))
        return out

    same = encode_msgspec() == encode_dataclass() == encode_dict()
    if (
        not same
        or [text for text, _h in encode_dict()] != [r[4] for r in rows]
        or fold(decode_msgspec()) != fold(events)
    ):
        raise SystemExit("the flavours disagree: the measurement would compare different work")
    table: dict[str, tuple[Callable[[], object], ...]] = {
        "decode (rows -> records)": (decode_msgspec, decode_dataclass, decode_dict),
        "decode + fold (lockstep)": (lambda: fold(decode_msgspec()),),
        "build (records from fields)": (build_msgspec, build_dataclass, build_dict),
        "encode (hash chain + data column)": (encode_msgspec, encode_dataclass, encode_dict),
    }
    print(f"{len(events)} events per history; µs per history, best of 15 rounds")
    print(f"{'':36} {'msgspec':>9} {'dataclass':>10} {'dict':>8}")
    for name, fns in table.items():
        cells = [f"{_best(fn):9.1f}" for fn in fns] + [f"{'':>9}"] * (3 - len(fns))
        print(f"{name:36} {cells[0]} {cells[1]:>10} {cells[2]:>8}")
    return 0


def _best(fn: Callable[[], object], rounds: int = 15, n: int = 300) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best * 1e6


if __name__ == "__main__":
    sys.exit(main())
