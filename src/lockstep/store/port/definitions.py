"""The definitions aggregate: published workflow definitions, one row per name and version, found by
version or by digest (implemented by sqltx/definitions.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypedDict

from ...core.canonical import JSONObject

__all__ = ["DefinitionRow", "DefinitionVersionRow", "DefinitionsTx"]


@dataclass(frozen=True)
class DefinitionRow:
    name: str
    version: int
    digest: str
    document: JSONObject


class DefinitionVersionRow(TypedDict):
    name: str
    version: int
    digest: str
    created_at: str


class DefinitionsTx(Protocol):
    def definition(self, tenant: str, name: str, version: int | None) -> DefinitionRow | None: ...
    def definition_by_digest(self, tenant: str, name: str, digest: str) -> DefinitionRow | None: ...
    def insert_definition(self, tenant: str, row: DefinitionRow, created_at: str) -> None: ...
    def definitions(self, tenant: str) -> list[DefinitionVersionRow]: ...
