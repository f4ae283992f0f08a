"""/metrics: closed unless the scraper proves who it is.

- the metrics token (`lockstep serve --metrics-token` / LOCKSTEP_METRICS_TOKEN) sees every sample;
- an API key of a tenant admin or operator sees only the samples labelled with their own tenant
  (samples without a `tenant` label, e.g. process totals, are not theirs to see);
- anyone else gets 401 (no or unknown credentials) or 403 (a key of another role);
- `metrics_public=True` (`lockstep serve --metrics-public`) opens the endpoint as it was before.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator

from fastapi import FastAPI, Request, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..app.principals import Principals
from ..errors import Forbidden, Unauthenticated

__all__ = ["SCRAPER_ROLES", "install"]

SCRAPER_ROLES = frozenset({"admin", "operator"})
_HOW = "send `Authorization: Bearer <metrics token>` or the API key of a tenant admin or operator"


class _OneTenant(Collector):
    """A view of a registry with only the samples labelled `tenant=<tenant>`."""

    def __init__(self, source: Collector, tenant: str) -> None:
        self.source = source
        self.tenant = tenant

    def collect(self) -> Iterable[Metric]:
        return self._filtered()

    def _filtered(self) -> Iterator[Metric]:
        for family in self.source.collect():
            mine = Metric(family.name, family.documentation, family.type, family.unit)
            mine.samples = [s for s in family.samples if s.labels.get("tenant") == self.tenant]
            if mine.samples:
                yield mine


def _tenant_of_scraper(request: Request, token: str | None) -> str | None:
    """None for the metrics token (everything), else the tenant whose samples the caller may see."""
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    credential = credential.strip()
    if scheme.lower() != "bearer" or not credential:
        raise Unauthenticated(f"/metrics needs credentials: {_HOW}")
    if token is not None and hmac.compare_digest(credential.encode(), token.encode()):
        return None
    principals: Principals = request.app.state.principals
    p = principals.authenticate_key(credential)
    if p is None:
        raise Unauthenticated(f"invalid metrics token or API key: {_HOW}")
    if not SCRAPER_ROLES & set(p.roles):
        raise Forbidden(
            f"user {p.name} (roles: {', '.join(p.roles) or 'none'}) may not read /metrics: "
            "only a tenant's admins and operators may, or the metrics token"
        )
    return p.tenant


def install(app: FastAPI, *, token: str | None, public: bool) -> None:
    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        source: Collector = app.state.metrics.exposition()
        tenant = None if public else _tenant_of_scraper(request, token)
        view = source if tenant is None else _OneTenant(source, tenant)
        return PlainTextResponse(generate_latest(view), media_type=CONTENT_TYPE_LATEST)
