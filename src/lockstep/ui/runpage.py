"""The run page: where the run is (its diagram with the path taken), why it waits, its steps and its
whole timeline; and the fragment of it that htmx polls while the run is not finished, so the open page
follows the run without a reload (without JavaScript the page is the same, reloaded by hand)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup

from ..api import html
from ..app.service import Service
from ..app.views import EventView, RunView
from ..core.paths import step_id
from ..core.state import STEP_OPEN, TERMINAL
from ..core.timeutil import format_duration
from ..errors import Gone, NotFound
from .diagram import Mark, diagram
from .gantt import gantt
from .pages import Session, page, service_of

__all__ = ["marks_of", "router", "run_diagram"]

router = APIRouter(prefix="/ui", include_in_schema=False)

# A step's status as the diagram colours it; the open statuses are `current`.
_STATE = {
    "succeeded": "done",
    "failed": "failed",
    "dead_letter": "failed",
    "compensated": "compensated",
    "skipped": "skipped",
    "cancelled": "cancelled",
    "not_taken": "not-taken",
    "pending": "pending",
}
# When a step id has several keys (for-each items, branches), the one the picture shows first.
_RANK = ["current", "failed", "compensated", "done", "skipped", "cancelled", "pending", "not-taken"]


def marks_of(run: RunView, events: Sequence[EventView]) -> dict[str, Mark]:
    """What the run did at each step id of its definition: every key of it folded into one mark."""
    first: dict[str, int] = {}
    for e in events:
        if e.step:
            first.setdefault(step_id(e.step), e.seq)
    states: dict[str, list[str]] = {}
    took: dict[str, float] = {}
    for key, st in run.steps.items():
        sid = step_id(key)
        state = "current" if st.status in STEP_OPEN else _STATE.get(st.status, "pending")
        if st.compensation and state == "done":
            state = "compensated"
        states.setdefault(sid, []).append(state)
        if st.duration_seconds is not None:
            took[sid] = took.get(sid, 0.0) + st.duration_seconds
    marks = {}
    for sid, seen in states.items():
        state = min(seen, key=_RANK.index)
        ran = [s for s in seen if s not in ("pending", "not-taken")]
        marks[sid] = Mark(
            state=state,
            took=format_duration(timedelta(seconds=took[sid])) if sid in took else "",
            anchor=f"ev-{first[sid]}" if sid in first else None,
            count=max(1, len(ran)),
        )
    return marks


def run_diagram(svc: Service, tenant: str, run: RunView, events: Sequence[EventView]) -> Markup | None:
    """The run's definition drawn with what the run did at each step."""
    definition = svc.kernel.definition(tenant, run.definition.name, run.definition.version)
    return diagram(definition, marks_of(run, events))


def _context(request: Request, run_id: str, session: Any) -> tuple[str, dict[str, Any], int]:
    """The template, context and status of a run page (or of the message that replaces it)."""
    me, csrf = session
    base = {"me": me, "csrf": csrf}
    if not me.can("read"):
        msg = "Your roles do not include reading runs."
        return "message.html", {**base, "title": "Not allowed", "message": msg}, 403
    svc = service_of(request)
    try:
        run = svc.show(me.tenant, run_id)
    except NotFound:
        msg = f"There is no run {run_id} in tenant {me.tenant}."
        return "message.html", {**base, "title": "Run not found", "message": msg}, 404
    except Gone as exc:  # purged: what its tombstone says
        return "message.html", {**base, "title": "Run purged", "message": str(exc)}, 410
    events = svc.events(me.tenant, run_id)
    ctx = {
        **base,
        "run": run,
        "events": events,
        "diagram": run_diagram(svc, me.tenant, run, events),
        "gantt": gantt(run, svc.clock()),
        "live": run.status not in TERMINAL,
        "can_cancel": me.can("cancel"),
        "can_operate": me.can("operate"),
        "revealed": False,
        "holds": svc.retention.holding(me.tenant, run_id),
    }
    return "run.html", ctx, 200


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: str, session: Session) -> HTMLResponse:
    name, ctx, status = _context(request, run_id, session)
    return page(request, name, ctx, status)


@router.get("/runs/{run_id}/live", response_class=HTMLResponse)
def run_live(request: Request, run_id: str, session: Session, seen: str = "") -> Response:
    """The changing part of the run page, for htmx to swap in every few seconds. Once the run's status
    is not the one the page was drawn with (it finished, or now waits for an operator), the whole page
    reloads instead: its forms depend on the status."""
    name, ctx, _ = _context(request, run_id, session)
    if name != "run.html" or ctx["run"].status != seen:
        resp = Response(status_code=204, headers={"HX-Refresh": "true"})
        return html.harden(resp)
    # Not page(): a poll must not take the one-time flash message meant for the page.
    return html.render("_run_live.html", {"now": service_of(request).clock(), **ctx})
