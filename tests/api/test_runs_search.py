"""GET /v1/runs searches as the UI's runs list does (app/search.py): by run id or its beginning, start key,
version, start-time range and an input field (nested too), newest first with a cursor; a sealed field
never matches, another tenant's runs are never returned, and a bad filter is a 422 with the UI's message."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lockstep.app.keys import create_key_file
from lockstep.engine import Engine

from .conftest import Api, FakeClock, assert_problem

pytestmark = pytest.mark.anyio

HOLD: dict[str, Any] = {"name": "hold", "steps": [{"id": "nap", "wait": "1h"}]}
CARD = "4111-WOMBAT-0017"
PAY: dict[str, Any] = {
    "name": "pay",
    "input_schema": {
        "type": "object",
        "properties": {"card": {"type": "string", "x-lockstep-sensitive": True}, "ref": {"type": "string"}},
    },
    "steps": [{"id": "nap", "wait": "1h"}],
}


@pytest.fixture
def engine(
    db_path: Path, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Engine]:
    """The engine with a key, so PAY's card is sealed when a run starts."""
    monkeypatch.delenv("LOCKSTEP_KEY_FILE", raising=False)
    monkeypatch.delenv("LOCKSTEP_KEY", raising=False)
    key = tmp_path / "lockstep.key"
    create_key_file(key)
    e = Engine.open(f"sqlite:///{db_path}", clock=clock, keys=key)
    try:
        yield e
    finally:
        e.close()


@pytest.fixture
async def runs(api: Api, other: Api, clock: FakeClock) -> dict[str, str]:
    """Runs of acme a minute apart from 2025-01-01T00:00 (v1: a, b; v2: c, d, pay) and globex's twin of
    each input (the same start keys too)."""
    for who in (api, other):
        for doc in (HOLD, PAY):
            assert (await who.publish(doc)).status_code == 201
    ids: dict[str, str] = {}
    inputs = {
        "a": {"customer": "ACME", "address": {"city": "Köln"}, "n": 1, "vip": True},
        "b": {"customer": "Initech", "address": {"city": "Bonn"}, "n": 2},
        "c": {"customer": "ACME", "address": {"city": "Bonn"}, "n": 3},
        "d": {"customer": "ACME Tools"},
    }
    for name, payload in inputs.items():
        if name == "c":
            assert (await api.publish({**HOLD, "description": "v2"})).status_code == 201
        ids[name] = await api.start_ok("hold", payload, key=f"order-{name}")
        await other.start_ok("hold", payload, key=f"order-{name}")
        clock.advance(minutes=1)
    ids["pay"] = await api.start_ok("pay", {"card": CARD, "ref": "R-1"})
    await other.start_ok("pay", {"card": CARD, "ref": "R-1"})
    return ids


async def found(api: Api, **params: Any) -> list[str]:
    r = await api.list_runs(**params)
    assert r.status_code == 200, r.text
    return [x["run_id"] for x in r.json()["items"]]


async def test_each_filter_selects_exactly_its_runs_newest_first(api: Api, runs: dict[str, str]) -> None:
    """run (whole id or beginning), key, version, started_from/started_to and input each select their
    runs, newest first, and they combine."""
    a, b, c, d = (runs[k] for k in "abcd")
    assert await found(api, run=a) == [a]
    assert a in await found(api, run=a[:20])
    assert await found(api, run=a.upper()) == [a]  # an id is read in lowercase, as the UI does
    assert await found(api, key="order-b") == [b]
    assert await found(api, key="order-b", definition="pay") == []
    assert await found(api, definition="hold", version="1") == [b, a]
    assert await found(api, definition="hold", version="2") == [d, c]
    assert await found(api, started_from="2025-01-01T00:01:00Z", started_to="2025-01-01T00:03") == [c, b]
    assert await found(api, started_from="2025-01-01T01:01:00+01:00", definition="hold") == [d, c, b]
    assert await found(api, input="customer = ACME") == [c, a]
    assert await found(api, input='customer = "ACME Tools"') == [d]
    assert await found(api, input="customer = ACME", version="2") == [c]
    assert await found(api, input="n = 2") == [b]
    assert await found(api, input="vip=true") == [a]


async def test_an_input_filter_reads_a_nested_field(api: Api, runs: dict[str, str]) -> None:
    """`address.city = "Köln"` (also written `input.address.city`) matches the nested field only."""
    assert await found(api, input='address.city = "Köln"') == [runs["a"]]
    assert await found(api, input="input.address.city = Bonn") == [runs["c"], runs["b"]]
    assert await found(api, input="city = Bonn") == []  # a top-level field of that name: none


async def test_a_sealed_field_never_matches_its_plaintext(api: Api, runs: dict[str, str]) -> None:
    """Searching PAY's sensitive card by its value finds nothing (no oracle for a guessed secret); the
    same run's clear field is found."""
    assert await found(api, input=f"card = {CARD}") == []
    assert await found(api, input=f'card = "{CARD}"', definition="pay") == []
    assert await found(api, input="ref = R-1") == [runs["pay"]]


async def test_another_tenants_runs_are_never_returned(api: Api, other: Api, runs: dict[str, str]) -> None:
    """Attack: globex searching by acme's run ids, their prefix, the shared start keys and inputs gets
    only its own runs, never one of acme's."""
    theirs = set(runs.values())
    for run_id in runs.values():
        assert await found(other, run=run_id) == []
        assert not set(await found(other, run=run_id[:8])) & theirs
    for params in ({"key": "order-a"}, {"input": "customer = ACME"}, {"input": "ref = R-1"}, {}):
        hits = await found(other, **params)
        assert hits, params  # globex has its own twins
        assert not set(hits) & theirs, params


async def test_the_cursor_pages_a_search_newest_first(api: Api, runs: dict[str, str]) -> None:
    """A search a page at a time: each run once, newest first, and the last page has no next_cursor."""
    seen: list[str] = []
    cursor: str | None = None
    while True:
        r = await api.list_runs(definition="hold", limit=1, **({"cursor": cursor} if cursor else {}))
        assert r.status_code == 200, r.text
        seen += [x["run_id"] for x in r.json()["items"]]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            break
        assert len(seen) < 10
    assert seen == [runs[k] for k in "dcba"]


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"run": "xyz"}, "lowercase hex"),
        ({"version": "v2"}, "not a version number"),
        ({"started_from": "yesterday"}, "2026-01-31T09:30"),
        ({"started_to": "2025-13-01"}, "started before"),
        ({"input": "customer"}, "no `=`"),
        ({"input": "a.b.c.d.e.f = 1"}, "at most 5 levels"),
        ({"input": "cust'omer = 1"}, "is not a field name"),
        ({"input": "note = " + "x" * 201}, "longer than 200"),
        ({"status": "sleeping"}, "is not one of"),
        ({"waiting": "godot"}, "is not one of"),
    ],
)
async def test_a_bad_filter_is_422_with_the_uis_message(
    api: Api, runs: dict[str, str], params: dict[str, str], says: str
) -> None:
    """A bad filter is a 422 problem whose detail is the message the UI shows (what is wrong, how to
    write it)."""
    body = assert_problem(await api.list_runs(**params), 422)
    assert says in body["detail"], body


@pytest.mark.parametrize(
    "params",
    [{"run": "a" * 65}, {"key": "k" * 256}, {"version": "1" * 11}, {"input": "a = " + "x" * 600}],
)
async def test_an_overlong_filter_is_refused_before_any_search(api: Api, params: dict[str, str]) -> None:
    """Each text filter is bounded (max_length): longer is a 422 naming the parameter."""
    body = assert_problem(await api.list_runs(**params), 422)
    assert next(iter(params)) in body["detail"], body


async def test_the_document_describes_each_search_parameter(api: Api) -> None:
    """GET /v1/runs documents run, key, version, started_from, started_to and input, each with a
    description, an example and a maximum length."""
    doc = (await api.c.get("/openapi.json")).json()
    params = {p["name"]: p for p in doc["paths"]["/v1/runs"]["get"]["parameters"]}
    for name in ("run", "key", "version", "started_from", "started_to", "input"):
        p = params[name]
        assert p["description"], name
        assert p["schema"]["anyOf"][0]["maxLength"] > 0, (name, p)
        assert p.get("examples") or p["schema"].get("examples"), (name, p)
