"""The runs search the UI's runs list and `GET /v1/runs` share: the filters as text (as a URL carries them,
so a search is a link to keep or send), checked into a store query (store/port/search.py) with one clear
message per bad filter, and pages of runs newest first with a cursor."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from ..core.explain import WAIT_KINDS
from ..core.state import STATUSES
from ..core.timeutil import iso
from ..errors import InvalidInput
from ..store.port.search import INPUT_KEY, MAX_INPUT_DEPTH, MAX_INPUT_VALUE, RunQuery, RunSearchTx
from .port import KernelPort
from .runs import Runs
from .views import RunView

__all__ = ["Filters", "RunSearch"]

_HEX = re.compile(r"^[0-9a-f]{1,32}$")


@dataclass(frozen=True)
class Filters:
    """The runs search's filters, as typed in the UI's form or given as API query parameters (every
    field text; "" is any)."""

    status: str = ""
    definition: str = ""
    waiting: str = ""
    run: str = ""  # a run id or the beginning of one
    key: str = ""  # a start key
    version: str = ""
    since: str = ""  # started at or after (ISO 8601; the form's datetime-local, read as UTC)
    until: str = ""  # started before
    input: str = ""  # an input field and its value: `customer = ACME`, `input.address.city = "Köln"`

    def any(self) -> bool:
        return any(asdict(self).values())

    def link(self, **changes: str) -> dict[str, str]:
        """The URL parameters of these filters (with `changes`), the empty ones left out."""
        return {k: v for k, v in {**asdict(self), **changes}.items() if v}

    def query(self) -> RunQuery:
        """The store query; InvalidInput says which filter is wrong and how to write it."""
        run = self.run.strip().lower()
        if run and not _HEX.match(run):
            raise InvalidInput(f"run {self.run[:40]!r}: a run id is lowercase hex; give it or its beginning")
        if self.status and self.status not in STATUSES:
            raise InvalidInput(f"status {self.status[:40]!r} is not one of {', '.join(STATUSES)}")
        if self.waiting and self.waiting not in WAIT_KINDS:
            raise InvalidInput(f"waiting on {self.waiting[:40]!r} is not one of {', '.join(WAIT_KINDS)}")
        if self.version and not self.version.isdigit():
            raise InvalidInput(f"version {self.version[:40]!r} is not a version number")
        return RunQuery(
            status=self.status or None,
            definition=self.definition or None,
            version=int(self.version) if self.version else None,
            run_prefix=run or None,
            start_key=self.key.strip() or None,
            started_from=_instant(self.since, "started from"),
            started_to=_instant(self.until, "started before"),
            **_input_match(self.input),
        )


def _input_match(text: str) -> dict[str, Any]:
    """`[input.]key[.key...] = value` (the value in double quotes or bare) as the query's input filter."""
    text = text.strip()
    if not text:
        return {}
    how = 'write it as customer = ACME or input.address.city = "Köln"'
    field, eq, value = text.partition("=")
    if not eq:
        raise InvalidInput(f"input filter {text[:60]!r}: no `=`; {how}")
    keys = tuple(field.strip().removeprefix("input.").split("."))
    if len(keys) > MAX_INPUT_DEPTH:
        raise InvalidInput(f"input filter: at most {MAX_INPUT_DEPTH} levels of fields; {how}")
    bad = next((k for k in keys if not INPUT_KEY.match(k)), None)
    if bad is not None:
        raise InvalidInput(
            f"input filter: field {bad[:64]!r} is not a field name (letters, digits, `_` and `-`, at most "
            f"64 of them, fields of nested objects joined with `.`); {how}"
        )
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    if len(value) > MAX_INPUT_VALUE:
        raise InvalidInput(f"input filter: the value is longer than {MAX_INPUT_VALUE} characters")
    return {"input_path": keys, "input_value": value}


def _instant(text: str, what: str) -> str | None:
    """An ISO 8601 time (`2026-01-31T09:30`, read as UTC without an offset; `Z` or `+01:00` as given)
    as the stored ISO form."""
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text.strip().removesuffix("Z"))
    except ValueError:
        raise InvalidInput(f"{what} {text[:40]!r}: write a time as 2026-01-31T09:30 (UTC)") from None
    return iso(at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC))


class RunSearch:
    """Pages of a search, for the UI's runs list, `GET /v1/runs` and `lockstep runs` alike
    (Service.find_runs)."""

    def __init__(self, kernel: KernelPort[RunSearchTx], runs: Runs) -> None:
        self.kernel = kernel
        self.runs = runs

    def find(self, tenant: str, f: Filters, before: str, limit: int) -> tuple[list[RunView], str | None]:
        """A page of runs matching `f`, newest first below run id `before`, and the cursor of the next
        page (None: this is the last). InvalidInput says which filter is wrong. Why a run waits is not a
        column: that filter reads the runs' views."""
        query = f.query()
        out: list[RunView] = []
        cursor = before
        while len(out) < limit:
            with self.kernel.read() as tx:
                page = tx.search_runs(tenant, query, cursor, limit)
            for s in page:
                shown = self.runs.describe(s)
                if not f.waiting or shown.wait_kind == f.waiting:
                    out.append(shown)
            if len(page) < limit:
                return out[:limit], None
            cursor = page[-1].run_id
        return out[:limit], out[limit - 1].run_id
