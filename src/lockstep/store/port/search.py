"""Finding runs for people (the UI's runs list): by id prefix, start key, definition and version, status
and start time, newest first with a cursor; and the counts of a definition's runs by version and status.
Answered from the run rows and their indexes, never by loading every snapshot."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from ...core.state import RunState

__all__ = ["INPUT_KEY", "MAX_INPUT_DEPTH", "MAX_INPUT_VALUE", "RunQuery", "RunSearchTx"]

# What an input filter may name: bounded, so a hostile tenant's search costs a bounded path walk per
# run, and a key is plain enough to be written into a JSON path without quoting rules.
INPUT_KEY = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_INPUT_DEPTH = 5
MAX_INPUT_VALUE = 200  # characters


@dataclass(frozen=True)
class RunQuery:
    """What a search asks for; None (or "") is any."""

    status: str | None = None
    definition: str | None = None
    version: int | None = None
    run_prefix: str | None = None  # lowercase hex: run ids that begin with it
    start_key: str | None = None  # the exact start (idempotency) key
    started_from: str | None = None  # ISO 8601 UTC as stored, inclusive
    started_to: str | None = None  # exclusive
    # An input field equal to a value: the field's path below `input` (keys of nested objects, each
    # matching INPUT_KEY, at most MAX_INPUT_DEPTH) and the value as text (a string as it is; a number or
    # a boolean as JSON writes it). A sealed (sensitive) value is a marker object and never matches.
    input_path: tuple[str, ...] = ()
    input_value: str | None = None


class RunSearchTx(Protocol):
    def search_runs(self, tenant: str, query: RunQuery, before: str, limit: int) -> list[RunState]:
        """The tenant's runs matching `query`, newest first, with run ids below `before` ("": from the
        newest), at most `limit`."""
        ...

    def run_counts(self, tenant: str, definition: str) -> list[tuple[int, str, int]]:
        """(version, status, runs) of one definition's runs."""
        ...
