"""The views of tenants and users: what `lockstep tenants ...` and `lockstep users ...` print."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import TenantJson, View

__all__ = [
    "EmailSet",
    "KeyRotated",
    "Membership",
    "NewUser",
    "PasswordSet",
    "TenantSettings",
    "TenantView",
    "UserEnabled",
    "UserView",
]


class TenantSettings(View):
    """A tenant and its settings (limits and quotas; app/principals/accounts.py: TENANT_SETTINGS)."""

    tenant: str
    settings: dict[str, TenantJson]


class TenantView(View):
    tenant: str
    settings: dict[str, TenantJson]
    created_at: str


class NewUser(View):
    """A new user with their API key: shown this once, only its hash is stored."""

    tenant: str
    user: str
    roles: list[str]
    groups: list[str]
    api_key: str


class UserView(View):
    user: str
    roles: list[str]
    groups: list[str]
    disabled: bool
    password: bool = Field(description="whether the user has a password (for the UI)")
    created_at: str
    grants: list[str] = Field(default=[], description="per-user grants, e.g. read_sensitive")


class UserEnabled(View):
    tenant: str
    user: str
    disabled: bool


class PasswordSet(View):
    tenant: str
    user: str
    password: Literal["set"]
    sessions: Literal["ended"]


class EmailSet(View):
    tenant: str
    user: str
    email: str


class KeyRotated(View):
    tenant: str
    user: str
    api_key: str
    sessions: Literal["ended"]


class Membership(View):
    tenant: str
    user: str
    roles: list[str]
    groups: list[str]
