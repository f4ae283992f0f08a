"""Where a command's runs live: the database (`--db`, the engine in this process) or a lockstep server
(`--url`, over the HTTP API with lockstep.client). The commands that work both ways (`runs`, `show`,
`events`, `start`, `cancel`) ask `backend(c)` and render what it returns the same way; the operator
commands (repair, approvals, migrations) call `c.client` themselves over --url and print its answer as the
same view (`as_view`), so their output is the same both ways."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import msgspec
from pydantic import MISSING

from ..app.search import Filters
from ..app.views import EventView, RunView, View, plain
from ..core.canonical import JSONValue
from ..errors import InvalidInput
from .context import Ctx, cli_user

__all__ = ["Backend", "as_view", "as_views", "backend"]

V = TypeVar("V", bound=View)


class Backend(Protocol):
    def start(
        self,
        name: str,
        payload: JSONValue,
        key: str | None,
        version: int | None,
        traceparent: str | None,
    ) -> str: ...

    def show(self, run_id: str, reveal: bool = False) -> RunView: ...

    def runs(self, f: Filters, limit: int, before: str) -> list[RunView]: ...

    def cancel(self, run_id: str, reason: str) -> Any: ...

    def events(self, run_id: str, reveal: bool = False) -> list[EventView]: ...


class _Local:
    def __init__(self, c: Ctx) -> None:
        self.c = c

    def start(
        self, name: str, payload: JSONValue, key: str | None, version: int | None, traceparent: str | None
    ) -> str:
        c = self.c
        return c.engine.start(
            name,
            input=payload,
            key=key,
            version=version,
            tenant=c.tenant,
            actor=cli_user(),
            traceparent=traceparent,
        )

    def show(self, run_id: str, reveal: bool = False) -> RunView:
        if reveal:  # the CLI reveals as a named user (--as), which `show` itself resolves
            raise InvalidInput("--reveal on the database: use `lockstep show RUN --reveal --as USER`")
        return self.c.engine.service.show(self.c.tenant, run_id)

    def runs(self, f: Filters, limit: int, before: str) -> list[RunView]:
        return self.c.engine.service.find_runs(self.c.tenant, f, before, limit)[0]

    def cancel(self, run_id: str, reason: str) -> Any:
        return self.c.engine.cancel(run_id, reason=reason, tenant=self.c.tenant, actor=cli_user())

    def events(self, run_id: str, reveal: bool = False) -> list[EventView]:
        if reveal:
            raise InvalidInput("--reveal on the database: use `lockstep events RUN --reveal --as USER`")
        return self.c.engine.service.events(self.c.tenant, run_id)


class _Remote:
    """The same over HTTP: the key's tenant and user are the actor (--tenant does not apply)."""

    def __init__(self, c: Ctx) -> None:
        self.client = c.client

    def start(
        self, name: str, payload: JSONValue, key: str | None, version: int | None, traceparent: str | None
    ) -> str:
        return self.client.start(name, payload, key=key, version=version, traceparent=traceparent).run_id

    def show(self, run_id: str, reveal: bool = False) -> RunView:
        return _view(self.client.get(run_id, reveal=reveal))

    def runs(self, f: Filters, limit: int, before: str) -> list[RunView]:
        """The server checks the filters, with the same messages as Service.find_runs on the database."""
        search = {
            "status": f.status or None,
            "definition": f.definition or None,
            "waiting": f.waiting or None,
            "run": f.run or None,
            "key": f.key or None,
            "started_from": f.since or None,
            "started_to": f.until or None,
            "input": f.input or None,
        }
        version = int(f.version) if f.version.isdigit() else None
        rows: list[RunView] = []
        cursor = before or None
        while len(rows) < limit:  # pages of at most 500 (the API's largest), newest first
            page = self.client.runs_page(
                **search, version=version, limit=min(500, limit - len(rows)), cursor=cursor
            )
            rows += [_view(r) for r in page.items]
            if page.next_cursor is None or not page.items:
                break
            cursor = page.next_cursor
        return rows

    def cancel(self, run_id: str, reason: str) -> Any:
        return plain(msgspec.to_builtins(self.client.cancel(run_id, reason)))

    def events(self, run_id: str, reveal: bool = False) -> list[EventView]:
        return [
            EventView.model_validate(msgspec.to_builtins(e))
            for e in self.client.events(run_id, reveal=reveal)
        ]


def _view(run: object) -> RunView:
    """A run the client decoded, as the view the CLI renders (the same fields: the API serves RunView)."""
    return RunView.model_validate(msgspec.to_builtins(run))


def as_view(view: type[V], answer: object) -> V:
    """An answer the client decoded, as the view the API made it from (what the CLI prints on the
    database too). A field the view leaves out when it does not apply (a proposal, a migration's
    request) is left out here where the client decoded it as absent or null."""
    data = msgspec.to_builtins(answer)
    for name, field in view.model_fields.items():
        key = field.alias or name
        if field.default is MISSING and data.get(key) is None:
            data.pop(key, None)
    return view.model_validate(data)


def as_views(view: type[V], answers: list[Any]) -> list[V]:
    return [as_view(view, a) for a in answers]


def backend(c: Ctx, *, unsupported: dict[str, object] | None = None) -> Backend:
    """The database or the server; `unsupported` names options (with their values) that only work on the
    database: one of them given with --url is refused with a message."""
    if not c.remote:
        return _Local(c)
    given = [name for name, value in (unsupported or {}).items() if value not in (None, False, "", ())]
    if given:
        raise InvalidInput(f"{', '.join(given)} work(s) only on the database (--db), not over --url")
    return _Remote(c)
