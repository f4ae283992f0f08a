"""The views of encryption keys and sensitive data: what `lockstep keys ...`, `runs forget`, `tenants
shred` and `users grant` print."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import View

__all__ = [
    "GrantsChanged",
    "KeyFileCreated",
    "KeyVersion",
    "KeysRotated",
    "KeysStatus",
    "RunForgotten",
    "TenantKeys",
    "TenantShredded",
]


class KeyVersion(View):
    version: int
    provider: str = Field(description="the key provider (and key) that wrapped this version")
    created_at: str
    retired_at: str | None = Field(description="set once a newer version exists")
    run_keys: int = Field(description="run keys wrapped under this version")


class TenantKeys(View):
    tenant: str
    versions: list[KeyVersion]
    rewrap_pending: int = Field(description="run keys still wrapped under an older version")
    forgotten_runs: int
    readable: bool = Field(description="whether this process's key wrapped the newest version")


class KeysStatus(View):
    provider: str | None = Field(description="this process's key provider, None without a key")
    tenants: list[TenantKeys]


class KeyFileCreated(View):
    key_file: str
    provider: str


class KeysRotated(View):
    tenant: str
    version: int = Field(description="the new version: every new run key is wrapped under it")
    retired: list[int] = Field(description="older versions, deleted once no run key uses them")
    rewrap_pending: int


class RunForgotten(View):
    run_id: str
    status: Literal["forgotten"] = "forgotten"


class TenantShredded(View):
    tenant: str
    run_keys: int = Field(description="run keys destroyed")
    key_versions: int = Field(description="versions of the tenant's key destroyed")
    cancelled: list[str] = Field(description="unfinished runs cancelled first (--cancel)")


class GrantsChanged(View):
    tenant: str
    user: str
    grants: list[str]
