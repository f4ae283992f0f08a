"""Hostile definitions over POST /v1/definitions: alias bombs, duplicate keys, expressions that crashed
or stalled the server; and publishing never holds the event loop."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import pytest

from lockstep.engine import Engine

from .conftest import Api, Db, assert_problem

pytestmark = pytest.mark.anyio


def alias_bomb(levels: int = 7) -> str:
    """Each level repeats the previous one ten times: under 500 bytes that expand to 10^7 strings, in
    a definition that is otherwise valid (the output of its one step)."""
    lines = ["name: bomb", "steps:", "  - id: s", "    succeed:", "      output:"]
    lines.append('        a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]')
    for i in range(1, levels):
        lines.append(f"        a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


async def test_an_alias_bomb_is_refused_at_once(api: Api, db: Db) -> None:
    """A 7-level alias bomb (4.9 s of validation before) is refused while parsing, with its line."""
    doc = alias_bomb()
    assert len(doc) < 500
    started = time.perf_counter()
    r = await api.publish(doc)
    elapsed = time.perf_counter() - started
    body = assert_problem(r, 422, "invalid_input")
    assert "expands to more than 50000 values" in body["detail"]
    assert "at line" in body["detail"]
    assert elapsed < 1.0
    assert db.count("definitions") == 0


async def test_too_many_aliases_are_refused(api: Api) -> None:
    """More than 100 aliases, however small their targets, are refused."""
    doc = "x: &x 1\nname: many\nsteps: [{id: s, succeed: {output: [" + ",".join(["*x"] * 101) + "]}}]\n"
    body = assert_problem(await api.publish(doc), 422)
    assert "more than 100 aliases" in body["detail"]


async def test_a_duplicate_yaml_key_is_refused_with_line_and_column(api: Api, db: Db) -> None:
    """Two `steps:` keys (the last one silently won) are refused, naming both places."""
    doc = "name: dup\nsteps: [{id: a, wait: 1h}]\nsteps: [{id: b, wait: 1h}]\n"
    body = assert_problem(await api.publish(doc), 422)
    assert "duplicate key 'steps' at line 3, column 1 (first at line 2, column 1)" in body["detail"]
    assert db.count("definitions") == 0


async def test_merge_keys_may_still_be_overridden(api: Api) -> None:
    """`<<: *first` then explicit keys is YAML's override, not a duplicate: it publishes."""
    doc = "name: merged\nsteps: [&first {id: a, wait: 1h}, {<<: *first, id: b, wait: 2h}]\n"
    r = await api.publish(doc)
    assert r.status_code == 201, r.text


async def test_a_duplicate_json_key_is_refused(api: Api) -> None:
    """JSON bodies too: `{"name": "a", "name": "b"}` is refused instead of keeping the last."""
    r = await api.c.post(
        "/v1/definitions",
        content=b'{"name": "a", "steps": [{"id": "n", "wait": "1h"}], "name": "b"}',
        headers={**api.t.auth("admin"), "content-type": "application/json"},
    )
    body = assert_problem(r, 422)
    assert "duplicate key 'name'" in body["detail"]


def choice_yaml(condition: str) -> str:
    return (
        "name: route\nsteps:\n  - id: route\n    choice:\n"
        f"      - {{if: '{condition}', next: done}}\n  - id: done\n    succeed: true\n"
    )


async def test_deep_brackets_are_a_422_not_a_plain_text_500(api: Api) -> None:
    """100,000 nested parentheses (a PanicException from the CEL parser) are a 422 problem."""
    r = await api.publish(choice_yaml("(" * 100_000 + "1" + ")" * 100_000 + " > 0"))
    body = assert_problem(r, 422)
    assert "steps[0](route).choice[0].if" in body["detail"]
    assert "the limit is 4096" in body["detail"]


async def test_the_quadratic_duplicate_check_is_refused(api: Api) -> None:
    """The duplicate check that held the server 9.3 s at start time is refused at publish."""
    cond = "input.items.exists(i, input.items.exists(j, i != j && i.sku == j.sku))"
    body = assert_problem(await api.publish(choice_yaml(cond)), 422)
    assert "worst-case cost" in body["detail"]


def test_the_segfaulting_chain_is_refused_over_http(tmp_path: Any) -> None:
    """`1 + 1 + ... (30,000 terms) > 0` over a real request: 422, and the process that served it lives."""
    code = textwrap.dedent(
        f"""
        from fastapi.testclient import TestClient
        from lockstep.api.app import create_app
        from lockstep.engine import Engine
        from lockstep.app.principals import Principals
        engine = Engine.open("sqlite:///{tmp_path}/db.sqlite")
        engine.service.principals.create_tenant("acme")
        key = engine.service.principals.create_user("acme", "admin", ["admin"], []).api_key
        cond = " + ".join(["1"] * 30000) + " > 0"
        doc = "name: route\\nsteps:\\n  - id: route\\n    choice:\\n"
        doc += "      - {{if: '" + cond + "', next: done}}\\n  - id: done\\n    succeed: true\\n"
        with TestClient(create_app(engine.service, ui=False)) as c:
            r = c.post("/v1/definitions", content=doc.encode(),
                       headers={{"Authorization": "Bearer " + key, "content-type": "application/yaml"}})
            print(r.status_code, r.json()["detail"][-120:])
            print("healthz", c.get("/healthz").status_code)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-800:])
    assert proc.stdout.startswith("422 "), proc.stdout
    assert "healthz 200" in proc.stdout


async def test_healthz_answers_while_a_publish_is_in_flight(api: Api, engine: Engine) -> None:
    """A publish held inside the service (as a slow one would be) does not hold /healthz: the loop
    is free while the document is parsed, validated and written."""
    entered, release = threading.Event(), threading.Event()
    real = engine.service.publish

    def held_publish(tenant: str, document: Any) -> dict[str, Any]:
        entered.set()
        release.wait(timeout=10)  # bounded: a publish on the loop must not hang the test forever
        return real(tenant, document)

    engine.service.publish = held_publish  # type: ignore[method-assign]
    try:
        publishing = asyncio.ensure_future(
            api.publish({"name": "held", "steps": [{"id": "w", "wait": "1h"}]})
        )
        deadline = time.monotonic() + 10
        while not entered.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        assert entered.is_set()
        started = time.monotonic()
        health = await asyncio.wait_for(api.c.get("/healthz"), timeout=5)
        assert health.status_code == 200
        assert time.monotonic() - started < 2.0
        assert not release.is_set()
        assert not publishing.done()  # /healthz answered while the publish was still in flight
        release.set()
        assert (await publishing).status_code == 201
    finally:
        release.set()
        engine.service.publish = real  # type: ignore[method-assign]


async def test_the_cost_bound_uses_the_tenant_list_limit(api: Api, engine: Engine) -> None:
    """A filter over lists of 1,000 items is refused; the tenant with max_list_items 100 may publish it."""
    doc = choice_yaml("size(input.items.filter(i, i.qty > 2)) > 0")
    assert "worst-case cost" in assert_problem(await api.publish(doc), 422)["detail"]
    with engine.service.write() as tx:
        tx.update_tenant_settings(api.t.name, {"max_list_items": 100})
    r = await api.publish(doc)
    assert r.status_code == 201, r.text


def _for_each(sid: str, items: str, body: list[Any], most: int, concurrency: int = 5) -> dict[str, Any]:
    return {
        "id": sid,
        "for_each": {"items": items, "max_items": most, "concurrency": concurrency, "body": body},
    }


async def test_a_fan_out_bomb_is_refused_at_publish_even_for_a_tenant_allowing_many_items(
    api: Api, db: Db, engine: Engine
) -> None:
    """Nested for-each steps of 1,000 items each (a million executions per run) are refused with the
    limit that says why, fast, and nothing is stored; the tenant's own max_items is no way around it."""
    with engine.service.write() as tx:
        tx.update_tenant_settings(api.t.name, {"max_items": 1000})
    leaf = {"id": "leaf", "activity": "a.leaf", "timeout": "5s"}
    inner = _for_each("inner", "${item.xs}", [leaf], 1000)
    doc = {"name": "bomb", "steps": [_for_each("outer", "${input.items}", [inner], 1000)]}
    started = time.perf_counter()
    body = assert_problem(await api.publish(doc), 422, "invalid_input")
    assert time.perf_counter() - started < 1.0
    assert "1,001,001 steps" in body["detail"]
    assert "max_expanded_steps" in body["detail"]
    assert db.count("definitions") == 0


async def test_concurrency_beyond_the_active_attempts_bound_is_refused(api: Api, db: Db) -> None:
    """A for-each claiming 200 attempts at once is refused (max_active_attempts 20), as is nesting a
    third level (max_branch_depth 2); a tenant cannot raise either past its ceiling through the API."""
    leaf = {"id": "leaf", "activity": "a.leaf", "timeout": "5s"}
    wide = {"name": "wide", "steps": [_for_each("many", "${input.items}", [leaf], 200, concurrency=200)]}
    body = assert_problem(await api.publish(wide), 422, "invalid_input")
    assert "200 activity attempts in flight" in body["detail"]
    level = [leaf]
    for i in range(3):
        level = [{"id": f"p{i}", "parallel": {"branches": {f"b{i}": level}}}]
    deep = {"name": "deep", "steps": level}
    body = assert_problem(await api.publish(deep), 422, "invalid_input")
    assert "max_branch_depth" in body["detail"]
    assert db.count("definitions") == 0
