"""Who may scrape /metrics and what they see: closed by default, one tenant's view for its admins and
operators, everything for the metrics token, open only with an explicit metrics_public."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from lockstep.api.app import create_app
from lockstep.app.principals import Principals
from lockstep.engine import Engine

from .conftest import Api, assert_problem, order_input

pytestmark = pytest.mark.anyio

TOKEN = "metrics-s3cret"  # noqa: S105 - a test value


@pytest.fixture
def app(engine: Engine) -> FastAPI:
    return create_app(engine.service, metrics_token=TOKEN)


@pytest.fixture
async def busy(api: Api, other: Api) -> None:
    """Both tenants have published, started and worked, so every metric family has samples of each."""
    for t in (api, other):
        assert (await t.publish()).status_code == 201
        await t.start_ok(input=order_input(1))
        (task,) = await t.poll("inventory.reserve")
        assert (await t.report(task, "fail")).status_code == 200


def tenants_in(text: str) -> set[str | None]:
    return {s.labels.get("tenant") for f in text_string_to_metric_families(text) for s in f.samples}


async def test_anonymous_scrape_is_refused(client: httpx.AsyncClient, busy: None):
    """No credentials, a wrong token or an unknown key: 401, and not a byte of metrics."""
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic eDp5"}):
        r = await client.get("/metrics", headers=headers)
        assert_problem(r, 401, "unauthenticated")
        assert "lockstep_" not in r.text


async def test_metrics_are_closed_without_a_token_configured(engine: Engine, busy: None):
    """The default app (no token, not public) refuses an anonymous scrape too."""
    app = create_app(engine.service)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        assert_problem(await c.get("/metrics"), 401, "unauthenticated")


async def test_tenant_admin_never_sees_another_tenants_label_values(
    api: Api, client: httpx.AsyncClient, busy: None
):
    """acme's admin and operator see acme's samples only: no globex label value, no unlabelled sample."""
    for role in ("admin", "operator"):
        r = await client.get("/metrics", headers=api.t.auth(role))
        assert r.status_code == 200, r.text
        assert tenants_in(r.text) == {"acme"}
        assert "globex" not in r.text
        assert "lockstep_activity_failures_total" in r.text


@pytest.mark.parametrize("role", ["viewer", "approver", "worker"])
async def test_other_roles_may_not_scrape(api: Api, client: httpx.AsyncClient, busy: None, role: str):
    """A valid key of a role that does not operate the tenant is refused with 403."""
    r = await client.get("/metrics", headers=api.t.auth(role))
    assert_problem(r, 403, "forbidden")
    assert "lockstep_" not in r.text


async def test_disabled_admin_may_not_scrape(
    api: Api, client: httpx.AsyncClient, principals: Principals, busy: None
):
    """A disabled user's key stops working on /metrics at once."""
    principals.disable_user("acme", "admin")
    assert_problem(await client.get("/metrics", headers=api.t.auth("admin")), 401, "unauthenticated")


async def test_metrics_token_sees_every_tenant(client: httpx.AsyncClient, busy: None):
    """The operator's metrics token reads every tenant's samples."""
    r = await client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200
    assert {"acme", "globex"} <= tenants_in(r.text)


@pytest.fixture
async def public(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(engine.service, metrics_public=True)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        yield c


async def test_metrics_public_opens_the_endpoint(public: httpx.AsyncClient, busy: None):
    """metrics_public=True (`serve --metrics-public`) restores the open endpoint, every tenant included."""
    r = await public.get("/metrics")
    assert r.status_code == 200
    assert {"acme", "globex"} <= tenants_in(r.text)
