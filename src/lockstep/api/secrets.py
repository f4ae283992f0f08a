"""/v1/secrets and /v1/egress: a tenant admin's secrets by reference (set a value, list names and
versions, delete) and the tenant's egress policy (permission `secrets`: admins only). No route returns a
secret's value, to anyone: there is none that could. Scoped to the caller's tenant."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from ..app.principals import Principal
from ..app.secrets import MAX_SECRET_BYTES
from ..app.views.secrets import EgressView, SecretDeleted, SecretView
from ..core.egress import MAX_RULE_CHARS, MAX_RULES
from .deps import Svc, need
from .problems import PROBLEM_RESPONSES, error_response

__all__ = ["router"]

router = APIRouter(responses=PROBLEM_RESPONSES, tags=["secrets"])
Admin = Annotated[Principal, Depends(need("secrets"))]
Name = Annotated[str, Path(min_length=1, max_length=64)]
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: error_response("No such secret in the caller's tenant")}


class SecretValue(BaseModel):
    model_config = ConfigDict(extra="forbid")
    value: str = Field(min_length=1, max_length=MAX_SECRET_BYTES, description="The value (never shown again)")


class EgressRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    allow: list[Annotated[str, Field(min_length=1, max_length=MAX_RULE_CHARS)]] = Field(
        default=[], max_length=MAX_RULES, description="URL prefixes, e.g. https://api.example.com/v1/"
    )
    allow_hosts: list[Annotated[str, Field(min_length=1, max_length=253)]] = Field(
        default=[], max_length=MAX_RULES, description="host names; *.example.org allows its subdomains"
    )
    allow_http: bool = Field(default=False, description="allow http:// too (HTTPS only otherwise)")
    allow_loopback: bool = Field(
        default=False, description="refused unless the server's operator set egress_allow_loopback=1"
    )


@router.get(
    "/v1/secrets", response_model=list[SecretView], summary="List secrets (names, versions; no values)"
)
def list_secrets(svc: Svc, p: Admin) -> list[SecretView]:
    return list(svc.secrets.list(p.tenant))


@router.put("/v1/secrets/{name}", response_model=SecretView, summary="Set a secret's value: its next version")
def set_secret(name: Name, body: SecretValue, svc: Svc, p: Admin) -> SecretView:
    return svc.secrets.set(p.tenant, name, body.value, actor=p.name)


@router.delete(
    "/v1/secrets/{name}",
    response_model=SecretDeleted,
    responses=NOT_FOUND,
    summary="Delete a secret (every version and its key), or one version",
)
def delete_secret(
    name: Name, svc: Svc, p: Admin, version: Annotated[int | None, Query(ge=1, le=2**31)] = None
) -> SecretDeleted:
    return svc.secrets.delete(p.tenant, name, version=version, actor=p.name)


@router.get("/v1/egress", response_model=EgressView, summary="The tenant's egress policy")
def show_egress(svc: Svc, p: Admin) -> EgressView:
    return svc.egress.show(p.tenant)


@router.put("/v1/egress", response_model=EgressView, summary="Replace the tenant's egress policy")
def set_egress(body: EgressRequest, svc: Svc, p: Admin) -> EgressView:
    return svc.egress.set(p.tenant, body.model_dump(), actor=p.name)
