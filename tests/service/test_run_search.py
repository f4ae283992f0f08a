"""RunSearchTx on both backends (store/port/search.py): the runs list's filters each narrow the answer,
newest first below a cursor, and a definition's runs are counted by version and status."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep.app.service import Service
from lockstep.core.timeutil import iso
from lockstep.store.port.search import RunQuery

HOLD = {"name": "hold", "steps": [{"id": "pause", "wait": "1h"}]}
DONE = {"name": "done", "steps": [{"id": "finish", "succeed": True}]}


def _ids(
    svc: Service, query: RunQuery, before: str = "", limit: int = 100, tenant: str = "acme"
) -> list[str]:
    with svc.read() as tx:
        return [s.run_id for s in tx.search_runs(tenant, query, before, limit)]


def test_each_filter_narrows_the_search_and_the_cursor_pages_newest_first(svc: Service, clock: Any) -> None:
    """Status, definition, version, id prefix, start key and start time each select exactly their runs;
    another tenant's runs never show; pages below a cursor do not overlap."""
    svc.publish("acme", HOLD)
    svc.publish("acme", DONE)
    svc.publish("other", HOLD)
    early = [svc.start("acme", "hold", input={}, key=f"k{i}").run_id for i in range(3)]
    clock.advance(hours=2)
    noon = iso(clock())
    late = [svc.start("acme", "done", input={}).run_id for _ in range(2)]
    svc.publish("acme", {**HOLD, "steps": [{"id": "pause", "wait": "2h"}]})
    v2 = svc.start("acme", "hold", input={}).run_id
    svc.start("other", "hold", input={}, key="k0")
    everything = _ids(svc, RunQuery())
    assert everything == sorted([*early, *late, v2], reverse=True)
    assert _ids(svc, RunQuery(status="completed")) == sorted(late, reverse=True)
    assert _ids(svc, RunQuery(definition="hold")) == sorted([*early, v2], reverse=True)
    assert _ids(svc, RunQuery(definition="hold", version=2)) == [v2]
    assert _ids(svc, RunQuery(start_key="k1")) == [early[1]]
    assert _ids(svc, RunQuery(run_prefix=early[2])) == [early[2]]
    assert set(_ids(svc, RunQuery(run_prefix=early[0][:8]))) <= set(everything)
    assert _ids(svc, RunQuery(started_from=noon)) == sorted([*late, v2], reverse=True)
    assert _ids(svc, RunQuery(started_to=noon)) == sorted(early, reverse=True)
    first = _ids(svc, RunQuery(), limit=4)
    rest = _ids(svc, RunQuery(), before=first[-1], limit=4)
    assert first + rest == everything


def test_a_definitions_runs_are_counted_by_version_and_status(svc: Service) -> None:
    """(version, status, runs) for one definition of one tenant."""
    svc.publish("acme", HOLD)
    svc.start("acme", "hold", input={})
    svc.start("acme", "hold", input={})
    svc.publish("acme", {**HOLD, "steps": [{"id": "pause", "wait": "2h"}]})
    cancelled = svc.start("acme", "hold", input={}).run_id
    svc.cancel("acme", cancelled, "test", actor="ops")
    svc.publish("other", HOLD)
    svc.start("other", "hold", input={})
    with svc.read() as tx:
        assert tx.run_counts("acme", "hold") == [(1, "waiting", 2), (2, "cancelled", 1)]
        assert tx.run_counts("acme", "nothing") == []


def test_an_input_field_equal_to_a_value_selects_its_runs_of_this_tenant_only(svc: Service) -> None:
    """`input.customer = ACME` (also nested, numbers and booleans as JSON writes them) selects exactly the
    runs whose input says so, newest first with the cursor; the same input in another tenant never
    shows, and a hostile path is refused by the store itself."""
    svc.publish("acme", HOLD)
    svc.publish("other", HOLD)
    acme = [
        svc.start(
            "acme", "hold", input={"customer": "ACME", "n": 3, "vip": True, "a": {"city": "Köln"}}
        ).run_id
        for _ in range(3)
    ]
    svc.start("acme", "hold", input={"customer": "Globex", "n": 3.5, "a": {"city": "Bonn"}})
    svc.start("acme", "hold", input={"customer": {"nested": "ACME"}})  # an object never matches
    svc.start("other", "hold", input={"customer": "ACME"})

    def match(path: tuple[str, ...], value: str, **kw: Any) -> list[str]:
        return _ids(svc, RunQuery(input_path=path, input_value=value), **kw)

    newest = sorted(acme, reverse=True)
    assert match(("customer",), "ACME") == newest
    assert match(("a", "city"), "Köln") == newest
    assert match(("n",), "3") == newest
    assert len(match(("n",), "3.5")) == 1
    assert match(("vip",), "true") == newest
    assert match(("customer",), "acme") == []  # exact, like the other filters
    assert match(("missing",), "ACME") == []
    first = match(("customer",), "ACME", limit=2)
    assert first + match(("customer",), "ACME", before=first[-1], limit=2) == newest
    assert _ids(svc, RunQuery(input_path=("customer",), input_value="ACME"), tenant="other") != []
    assert not set(_ids(svc, RunQuery(input_path=("customer",), input_value="ACME"), tenant="other")) & set(
        acme
    )
    for hostile in (('customer"',), ("a",) * 6, ("x') OR 1=1 --",), ("$",)):
        with pytest.raises(ValueError, match="not allowed"):
            match(hostile, "ACME")
    with pytest.raises(ValueError, match="at most 200"):
        match(("customer",), "A" * 201)
