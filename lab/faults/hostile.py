"""A hostile tenant admin, as a process of its own: `python -m lab.faults.hostile URL KEY OUT`.

It sends, round after round until SIGTERM, every cheap request that once crashed or stalled a lockstep
server for all its tenants (issue 14): YAML alias bombs, expressions that overflow the CEL parser's
stack, quadratic and nested comprehensions over large lists, huge and deep inputs, huge and deep
documents. Each request's status (or the connection error) is counted by attack and written to OUT as
JSON after every round, so the driver can read it even if the process is killed.

Bodies are built once, before the first round: the attacker's own CPU stays out of the victim's way.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

__all__ = ["build_attacks", "main"]

YAML = {"content-type": "application/yaml"}
JSON = {"content-type": "application/json"}


def _choice_definition(name: str, condition: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": name,
        "steps": [
            {"id": "route", "choice": [{"if": condition, "next": "done"}, {"else": "done"}]},
            {"id": "done", "succeed": True},
        ],
    }
    if schema is not None:
        doc["input_schema"] = schema
    return doc


def _alias_bomb(levels: int = 7) -> bytes:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, levels + 1):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines += ["name: bomb", f"description: *a{levels}", "steps: [{id: s, succeed: true}]"]
    return ("\n".join(lines) + "\n").encode()


def _deep(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"d": value}
    return value


ITEMS_SCHEMA = {"type": "object", "properties": {"items": {"type": "array"}}}


def build_attacks() -> dict[str, tuple[str, str, dict[str, str], bytes]]:
    """attack name -> (method, path, headers, body): every body built once."""
    items_3000 = [{"sku": f"sku-{i}"} for i in range(3000)]
    deep_list = b"[" * 50_000 + b"]" * 50_000
    items_1000 = [{"sku": f"sku-{i}"} for i in range(1000)]
    defs = {
        "dup-check": _choice_definition(
            "dup-check",
            "input.items.exists(i, input.items.exists(j, i != j && i.sku == j.sku))",
            ITEMS_SCHEMA,
        ),
        "nested-map": _choice_definition(
            "nested-map",
            "input.items.map(i, input.items.map(j, i.sku + j.sku)).size() > 0",
            ITEMS_SCHEMA,
        ),
    }

    # The worst a tenant may do within the limits: five conditions at the cost bound, each over an
    # input at max_input_bytes and max_list_items (about 4 ms each on the reference machine).
    allowed = 'input.items.all(i, i.sku != "x" && i.sku.size() > 0 && i.sku.startsWith("s"))'
    worst = {
        "name": "allowed-worst",
        "input_schema": ITEMS_SCHEMA,
        "steps": [
            *(
                {"id": f"c{k}", "choice": [{"if": allowed, "next": f"c{k + 1}"}, {"else": "done"}]}
                for k in range(5)
            ),
            {"id": "c5", "succeed": True},
            {"id": "done", "succeed": True},
        ],
    }
    items_max = [{"sku": f"sku-{i:05d}-" + "y" * 200} for i in range(1000)]

    # Fan-out: for-each steps nested so their items multiply (a million steps per run), and the widest
    # shape the limits allow, started with as many items as it takes (parallel and for-each steps).
    def for_each(sid: str, items: str, body: list[Any], most: int, concurrency: int = 5) -> dict[str, Any]:
        spec = {"items": items, "max_items": most, "concurrency": concurrency, "body": body}
        return {"id": sid, "for_each": spec}

    leaf = {"id": "leaf", "activity": "hostile.nothing", "timeout": "5s"}
    fanout_bomb = {
        "name": "fanout-bomb",
        "steps": [for_each("outer", "${input.items}", [for_each("inner", "${item.xs}", [leaf], 1000)], 1000)],
    }
    fanout_widest = {
        "name": "fanout-widest",
        "steps": [for_each("lines", "${input.items}", [leaf], 100, concurrency=20)],
    }

    def post(path: str, body: Any, headers: dict[str, str] = JSON) -> tuple[str, str, dict[str, str], bytes]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return ("POST", path, headers, data)

    def start(name: str, data: Any) -> tuple[str, str, dict[str, str], bytes]:
        return post("/v1/runs", {"definition": name, "input": data})

    return {
        "alias_bomb": post("/v1/definitions", _alias_bomb(), YAML),
        "duplicate_keys": post(
            "/v1/definitions", b"name: dup\nname: dup2\nsteps: [{id: s, succeed: true}]\n", YAML
        ),
        "long_operator_chain": post(
            "/v1/definitions", _choice_definition("chain", " + ".join(["1"] * 30_000) + " > 0")
        ),
        "deep_parentheses": post(
            "/v1/definitions", _choice_definition("parens", "(" * 100_000 + "1" + ")" * 100_000 + " > 0")
        ),
        "deep_document": post("/v1/definitions", b'{"name": "deep", "x": ' + deep_list + b"}"),
        "huge_document": post("/v1/definitions", b"name: huge\ndescription: " + b"x" * (3 << 20), YAML),
        "publish_dup_check": post("/v1/definitions", defs["dup-check"]),
        "publish_nested_map": post("/v1/definitions", defs["nested-map"]),
        "publish_allowed_worst": post("/v1/definitions", worst),
        "publish_fanout_bomb": post("/v1/definitions", fanout_bomb),
        "publish_fanout_widest": post("/v1/definitions", fanout_widest),
        "fanout_widest_start": start("fanout-widest", {"items": list(range(100))}),
        "fanout_too_many_items": start("fanout-widest", {"items": list(range(1000))}),
        "allowed_worst_start": start("allowed-worst", {"items": items_max}),
        "quadratic_exists_3000": start("dup-check", {"items": items_3000}),
        "quadratic_exists_1000": start("dup-check", {"items": items_1000}),
        "nested_map_1000": start("nested-map", {"items": items_1000}),
        "huge_input": post(
            "/v1/runs", b'{"definition": "dup-check", "input": {"blob": "' + b"a" * (50 << 20) + b'"}}'
        ),
        "deep_input": start("dup-check", _deep(500)),
        "wide_input": start("dup-check", {"items": list(range(200_000))}),
    }


def main(argv: list[str]) -> int:
    url, key, out = argv[0], argv[1], Path(argv[2])
    attacks = build_attacks()
    counts: Counter[str] = Counter()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    auth = {"authorization": f"Bearer {key}"}
    rounds = 0
    with httpx.Client(base_url=url, timeout=60) as client:
        print("attacking", flush=True)
        while not stop.is_set():
            for name, (method, path, headers, body) in attacks.items():
                if stop.is_set():
                    break
                try:
                    r = client.request(method, path, headers={**auth, **headers}, content=body)
                    counts[f"{name} {r.status_code}"] += 1
                except httpx.HTTPError as exc:
                    counts[f"{name} {type(exc).__name__}"] += 1
            rounds += 1
            out.write_text(json.dumps({"rounds": rounds, "counts": dict(counts)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
