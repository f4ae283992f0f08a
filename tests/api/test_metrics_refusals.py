"""lockstep_refusals_total counts the API's 403 and 429 answers by tenant and problem code, and each
tenant's scrape sees only its own refusals."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from lockstep.api.app import create_app
from lockstep.app.principals import Principals
from lockstep.engine import Engine

from .conftest import ORDER, Api, assert_problem, order_input

pytestmark = pytest.mark.anyio
TOKEN = "metrics-s3cret"  # noqa: S105 - a test value


@pytest.fixture
def app(engine: Engine) -> FastAPI:
    return create_app(engine.service, metrics_token=TOKEN)


def refusals(text: str) -> dict[tuple[str, str, str], float]:
    return {
        (s.labels["tenant"], s.labels["status"], s.labels["code"]): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "lockstep_refusals_total"
    }


async def test_a_429_and_a_403_are_counted_by_tenant_and_code(
    api: Api, other: Api, principals: Principals
) -> None:
    """Two starts over starts_per_second (429 start_rate_exceeded) and a viewer starting a run (403
    forbidden) count as such; a 401 (no key, so no tenant) is not a refusal of this kind."""
    assert (await api.publish()).status_code == 201
    principals.set_tenant("acme", starts_per_second=1)
    for n in (1, 2):
        assert (await api.start(ORDER, order_input(n))).status_code == 201
    for n in (3, 4):
        assert_problem(await api.start(ORDER, order_input(n)), 429, "start_rate_exceeded")
    assert_problem(await api.start(ORDER, order_input(5), role="viewer"), 403, "forbidden")
    assert_problem(await api.c.post("/v1/runs", json={"definition": ORDER}), 401)
    everything = (await api.c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})).text
    expected = {("acme", "429", "start_rate_exceeded"): 2, ("acme", "403", "forbidden"): 1}
    assert refusals(everything) == expected
    mine = (await api.c.get("/metrics", headers=api.t.auth("operator"))).text
    assert refusals(mine) == refusals(everything)
    theirs = (await other.c.get("/metrics", headers=other.t.auth("operator"))).text
    assert refusals(theirs) == {}
