"""The views of secrets (names, versions and dates: never a value) and of a tenant's egress policy."""

from __future__ import annotations

from pydantic import Field

from .base import View

__all__ = ["EgressView", "SecretDeleted", "SecretVersionView", "SecretView"]


class SecretVersionView(View):
    version: int
    created_at: str
    created_by: str | None


class SecretView(View):
    """A secret as anyone may see it: its name and versions. The value is never shown to anyone."""

    name: str
    latest: int = Field(description="the version an http step without `auth.version` uses")
    versions: list[SecretVersionView]


class SecretDeleted(View):
    name: str
    deleted_versions: int
    key_destroyed: bool = Field(description="every version went, so the secret's data key was destroyed")


class EgressView(View):
    """Where the tenant's http steps may send requests (nothing, until an admin allows something)."""

    tenant: str
    allow: list[str] = Field(description="allowed URL prefixes (scheme, host, port and path prefix)")
    allow_hosts: list[str] = Field(description="allowed hosts (a leading *. allows subdomains)")
    allow_http: bool = Field(description="whether http:// is allowed (otherwise HTTPS only)")
    allow_loopback: bool = Field(
        description="loopback allowed too: only honoured where the server's operator set "
        "egress_allow_loopback=1 (a test setting)"
    )
    updated_at: str | None
    updated_by: str | None
