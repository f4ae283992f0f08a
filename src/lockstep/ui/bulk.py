"""Bulk actions from the runs list: cancel, retry, resume or migrate (to a chosen version) the selected
runs with one reason. A preview (dry run) says for each run what would be done or why not, and changes
nothing; applying runs one command per run (one transaction each, each audited with the user's name and
the reason, exactly as on the run's own page) and answers with a report of every run's outcome. A
migration is the run page's (app/repair.py `migrate`): one that needs approval becomes a request its
approvers decide ("awaiting approval"), one under four eyes waits for a second operator, a refused one
says why."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from ..app.service import Service
from ..app.views import MigrationRequestView, RunView
from ..core.migapproval import migration_policy
from ..core.repair import RETRYABLE_ATTENTION
from ..core.state import TERMINAL
from ..errors import InvalidInput, LockstepError
from .pages import Session, check_csrf, flash_redirect, page, service_of

__all__ = ["MAX_BULK", "router"]

router = APIRouter(prefix="/ui", include_in_schema=False)
MAX_BULK = 100  # runs per request: a page of the list is 50
# action -> permission
ACTIONS = {"cancel": "cancel", "retry": "operate", "resume": "operate", "migrate": "operate"}


def _check(action: str, run: RunView) -> str | None:
    """Why `action` cannot be done on `run` (None: it can, as far as its view tells)."""
    if run.status in TERMINAL:
        return f"the run is already {run.status}"
    if action == "cancel" and run.status == "cancelling":
        return "the run is already being cancelled"
    if action == "retry":
        att = run.attention
        if not att or att["code"] not in RETRYABLE_ATTENTION:
            return "no step waits for a retry (dead letter, unknown outcome or failed compensation)"
    if action == "resume" and run.status != "paused":
        return "the run is not paused"
    return None


def _migrate(
    svc: Service, me: Any, run: RunView, version: int, reason: str, dry_run: bool
) -> tuple[str, str]:
    """(outcome, detail) of migrating `run` to `version`: the preview's dry run, or the migration."""
    plan = svc.repairs.migrate(me.tenant, run.run_id, version, reason, dry_run=dry_run, actor=me.name)
    move = f"v{plan.from_.version} -> v{version}"
    if plan.problems:
        return "refused", "; ".join(plan.problems)
    if dry_run:
        needs = _approval_needed(svc, run, version)
        return "would", f"would migrate {move}" + (f" ({needs})" if needs else "")
    if isinstance(plan.request, MigrationRequestView):
        r = plan.request
        return "done", (
            f"awaiting approval: migration request {r.request_id} ({move}) waits for "
            f"{r.approvers.quorum} approver(s)"
        )
    if isinstance(plan.proposal, dict):
        return "done", f"awaiting a second operator: the migration {move} is proposed (four eyes)"
    return "done", f"migrated {move}"


def _approval_needed(svc: Service, run: RunView, version: int) -> str:
    """What the preview adds when the migration needs approval (`migration: requires_approval`)."""
    name, current = run.definition.name, run.definition.version
    with svc.read() as tx:
        policy = migration_policy(
            svc.definition_for(tx, run.tenant, name, current),
            current,
            svc.definition_for(tx, run.tenant, name, version),
            version,
        )
    return "needs approval: applying asks its approvers, nothing migrates until they decide" if policy else ""


def _apply(svc: Service, me: Any, action: str, run: RunView, reason: str) -> str:
    if action == "cancel":
        out = svc.cancel(me.tenant, run.run_id, reason, actor=me.name)
        return "cancellation recorded" if out.accepted else "was already being cancelled"
    if action == "retry":
        step = str(run.attention["step"]) if run.attention else ""
        retried = svc.retry(me.tenant, run.run_id, step, reason, actor=me.name)
        return f"step {step} scheduled again (attempt {retried.attempt})"
    svc.repairs.resume(me.tenant, run.run_id, reason, actor=me.name)
    return "resumed"


@router.post("/runs/bulk", response_class=HTMLResponse)
async def bulk(request: Request, session: Session) -> Response:
    me, expected = session
    form = await request.form()
    check_csrf(expected, str(form.get("csrf", "")))
    back = str(form.get("back", "/ui/"))
    back = back if back.startswith("/ui/") and "//" not in back else "/ui/"
    action = str(form.get("action", ""))
    reason = str(form.get("reason", "")).strip()
    dry_run = form.get("apply") is None
    run_ids = list(dict.fromkeys(str(r) for r in form.getlist("run")))
    version_text = str(form.get("version", "")).strip()
    try:
        if action not in ACTIONS:
            raise InvalidInput("choose an action: cancel, retry, resume or migrate")
        if action == "migrate" and not (version_text.isdigit() and 0 < int(version_text) < 2**31):
            raise InvalidInput("give the version number to migrate the selected runs to")
        me.require(ACTIONS[action])
        if not run_ids:
            raise InvalidInput("select the runs first (the boxes in the first column)")
        if len(run_ids) > MAX_BULK:
            raise InvalidInput(f"at most {MAX_BULK} runs at once; {len(run_ids)} were selected")
        if not reason:
            raise InvalidInput("a reason is required: it is recorded with your name on every run")
    except LockstepError as exc:
        return flash_redirect(request, back, f"Nothing done: {exc}")
    svc = service_of(request)
    rows = []
    for run_id in run_ids:
        try:
            run = svc.show(me.tenant, run_id)
            refused = _check(action, run)
            if refused is None and action == "migrate":
                rows.append((run_id, *_migrate(svc, me, run, int(version_text), reason, dry_run)))
            elif refused is not None:
                rows.append((run_id, "refused", refused))
            elif dry_run:
                rows.append((run_id, "would", f"would {action}"))
            else:
                rows.append((run_id, "done", _apply(svc, me, action, run, reason)))
        except LockstepError as exc:  # not found, or refused by the command itself
            rows.append((run_id, "refused", str(exc)))
    ctx = {
        "me": me,
        "csrf": expected,
        "action": action,
        "reason": reason,
        "dry_run": dry_run,
        "rows": rows,
        "back": back,
        "selected": run_ids,
        "version": version_text,
    }
    return page(request, "bulk.html", ctx)
