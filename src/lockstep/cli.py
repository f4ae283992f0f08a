"""The `lockstep` command line: thin commands over the Engine/Service, `--json` on every read.

Every failure is one line on stderr and a non-zero exit; no traceback reaches the user unless
LOCKSTEP_DEBUG=1 is set.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .app import failpoints
from .core.limits import DEFAULT_SERVER_LIMITS, LimitSettingError, ServerLimits, parse_limit_settings
from .core.narrate import narrate
from .core.state import STATUSES
from .core.timeutil import parse_duration
from .engine import DEFAULT_DB, Engine
from .errors import InvalidInput, LockstepError
from .runtime.activity import REGISTRY

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])
# Piped output (scripts, tests, CI logs) gets a wide console so run ids and reasons are not wrapped.
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, soft_wrap=True)
STATUS_STYLE = {
    "completed": "green",
    "failed": "red",
    "cancelled": "yellow",
    "needs_attention": "bold magenta",
    "waiting": "cyan",
    "running": "blue",
    "cancelling": "yellow",
    "compensating": "yellow",
}


class Ctx:
    def __init__(self, db: str, tenant: str, limits: ServerLimits = DEFAULT_SERVER_LIMITS) -> None:
        self.db = db
        self.tenant = tenant
        self.limits = limits
        self._engine: Engine | None = None

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine.open(self.db, server_limits=self.limits)
        return self._engine


LIMITS_ENV = "LOCKSTEP_LIMITS"


def _server_limits(options: tuple[str, ...]) -> ServerLimits:
    """LOCKSTEP_LIMITS, then each --limit (a later setting of a name wins), checked before anything
    starts: one line naming the setting, the limit and its range, exit 2."""
    where = LIMITS_ENV
    try:
        settings = parse_limit_settings([os.environ.get(LIMITS_ENV, "")])
        where = "--limit"
        settings |= parse_limit_settings(options)
        where = "limits"
        return ServerLimits(settings)
    except LimitSettingError as exc:
        raise InvalidInput(f"{where}: {exc}", code="bad_limit") from None


def _fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(message)}", markup=True, highlight=False)
    sys.exit(code)


def _json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _parse_json(text: str | None, what: str) -> Any:
    if text is None:
        return None
    if text.startswith("@"):
        try:
            with open(text[1:]) as fh:
                text = fh.read()
        except OSError as exc:
            raise InvalidInput(f"{what}: cannot read {text[1:]}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None


def _seconds(text: str | None, what: str) -> float | None:
    return _duration(text, what).total_seconds() if text else None


def _duration(text: str, what: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise InvalidInput(f"{what}: {exc}") from None


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--db",
    envvar="LOCKSTEP_DB",
    default=DEFAULT_DB,
    show_default=True,
    help="Database URL (env LOCKSTEP_DB).",
)
@click.option(
    "--tenant",
    envvar="LOCKSTEP_TENANT",
    default="default",
    show_default=True,
    help="Tenant whose definitions and runs to use (env LOCKSTEP_TENANT).",
)
@click.option(
    "--limit",
    "limit_settings",
    multiple=True,
    metavar="NAME=VALUE",
    help=f"Set a server-wide limit, e.g. max_request_bytes=33554432 (repeatable; env {LIMITS_ENV}="
    "NAME=VALUE,...; docs/security.md lists the names and ranges).",
)
@click.version_option(package_name="lockstep")
@click.pass_context
def cli(ctx: click.Context, db: str, tenant: str, limit_settings: tuple[str, ...]) -> None:
    """lockstep: durable workflows for tenant-defined processes.

    Publish a definition, start runs, run workers; every run survives crashes and explains its waits.
    """
    if failpoints.SPEC_ERROR:
        raise InvalidInput(f"{failpoints.SPEC_ERROR} (unset {failpoints.ENV} to run normally)")
    if failpoints.active_spec():
        err.print(f"warning: fail points are active ({failpoints.ENV}={failpoints.active_spec()})")
    ctx.obj = Ctx(db, tenant, _server_limits(limit_settings))

    def _close() -> None:
        if ctx.obj._engine is not None:
            ctx.obj._engine.close()

    ctx.call_on_close(_close)


pass_ctx = click.make_pass_decorator(Ctx)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False))
@pass_ctx
def publish(c: Ctx, file: str) -> None:
    """Publish a definition (YAML or JSON). Identical content returns the existing version."""
    if not os.path.isfile(file):
        raise InvalidInput(f"definition file {file} does not exist")
    with open(file) as fh:
        text = fh.read()
    _json(c.engine.publish(text if "\n" in text else text + "\n", tenant=c.tenant))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def definitions(c: Ctx, as_json: bool) -> None:
    """List published definitions and their versions."""
    rows = c.engine.service.definitions(c.tenant)
    if as_json:
        _json(rows)
        return
    t = Table("name", "version", "digest", "published")
    for r in rows:
        t.add_row(r["name"], str(r["version"]), r["digest"][:19] + "…", r["created_at"])
    out.print(t)


@cli.command()
@click.argument("name")
@click.option("--version", "version", type=int, help="Definition version (default: latest).")
@click.option("--input", "input_", help="Run input as JSON, or @file.json.")
@click.option("--key", help="Start key: the same key returns the same run.")
@pass_ctx
def start(c: Ctx, name: str, version: int | None, input_: str | None, key: str | None) -> None:
    """Start a run of definition NAME; prints {"run_id"}."""
    payload = _parse_json(input_, "--input")
    run_id = c.engine.start(
        name, input=payload, key=key, version=version, tenant=c.tenant, actor=os.environ.get("USER")
    )
    _json({"run_id": run_id})


def _print_run(s: dict[str, Any]) -> None:
    style = STATUS_STYLE.get(s["status"], "")
    d = s["definition"]
    out.print(
        f"[bold]{s['run_id']}[/bold]  [{style}]{s['status']}[/{style}]  "
        f"{d['name']} v{d['version']}  tenant {s['tenant']}"
    )
    if s["current_step"]:
        out.print(f"current step: {s['current_step']}")
    if s["wait_reason"]:
        out.print(f"[bold]why:[/bold]  {s['wait_reason']}")
        out.print(f"[bold]next:[/bold] {s['next_action']}")
    if s["error"]:
        out.print(f"[red]error:[/red] {s['error'].get('code')}: {s['error'].get('message')}")
    if s["status"] == "completed":
        out.print(f"output: {json.dumps(s['output'])}")
    t = Table("step", "status", "attempts", "idempotency key", "detail")
    for sid, st in s["steps"].items():
        detail = ""
        if st.get("error"):
            detail = f"{st['error'].get('code')}: {st['error'].get('message')}"
        comp = st.get("compensation")
        if comp:
            detail = (
                detail + "; " if detail else ""
            ) + f"compensation {comp['status']} ({comp['attempts']} attempt(s))"
        t.add_row(sid, st["status"], str(st["attempts"]), st.get("idempotency_key") or "", detail)
    out.print(t)


@cli.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def show(c: Ctx, run_id: str, as_json: bool) -> None:
    """Show a run: status, current step, why it waits and what happens next."""
    s = c.engine.show(run_id, tenant=c.tenant)
    if as_json:
        _json(s)
    else:
        _print_run(s)


@cli.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def events(c: Ctx, run_id: str, as_json: bool) -> None:
    """The run's event history (append-only, hash-chained)."""
    rows = c.engine.events(run_id, tenant=c.tenant)
    if as_json:
        _json(rows)
        return
    t = Table("seq", "at", "type", "what happened")
    for e in rows:
        t.add_row(str(e["seq"]), e["at"], e["type"], narrate(e["type"], e["data"], e["at"]))
    out.print(t)


@cli.command()
@click.option(
    "--status",
    type=click.Choice(STATUSES),
)
@click.option("--definition", help="Only runs of this definition.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@click.option("--after", default="", help="Cursor: list runs after this run id.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def runs(c: Ctx, status: str | None, definition: str | None, limit: int, after: str, as_json: bool) -> None:
    """List runs (oldest first), with filters and a cursor."""
    rows = c.engine.service.runs(c.tenant, status=status, definition=definition, after=after, limit=limit)
    if as_json:
        _json(
            [
                {
                    k: r[k]
                    for k in (
                        "run_id",
                        "status",
                        "definition",
                        "current_step",
                        "wait_reason",
                        "started_at",
                        "updated_at",
                    )
                }
                for r in rows
            ]
        )
        return
    t = Table("run", "status", "definition", "step", "why / next")
    for r in rows:
        style = STATUS_STYLE.get(r["status"], "")
        t.add_row(
            r["run_id"],
            f"[{style}]{r['status']}[/{style}]",
            f"{r['definition']['name']} v{r['definition']['version']}",
            r["current_step"] or "",
            r["wait_reason"] or "",
        )
    out.print(t)


@cli.command()
@click.argument("run_id")
@click.option("--reason", required=True, help="Why (recorded in the audit trail).")
@pass_ctx
def cancel(c: Ctx, run_id: str, reason: str) -> None:
    """Cancel a run: start nothing new, wait for in-flight work, compensate, end cancelled."""
    _json(c.engine.cancel(run_id, reason=reason, tenant=c.tenant, actor=os.environ.get("USER")))


@cli.command()
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def verify(c: Ctx, run_id: str | None, as_json: bool) -> None:
    """Replay events and compare with snapshots; check sequences and the hash chain. Exit 1 on mismatch."""
    report = c.engine.service.verify(run_id, tenant=c.tenant)
    bad = [r for r in report if not r["ok"]]
    if as_json:
        _json({"runs": len(report), "ok": not bad, "problems": bad})
    else:
        for r in bad:
            out.print(f"[red]MISMATCH[/red] {r['run_id']}: " + "; ".join(r["problems"]))
        out.print(
            f"verified {len(report)} run(s), {sum(r['events'] for r in report)} event(s): "
            + ("[green]all consistent[/green]" if not bad else f"[red]{len(bad)} inconsistent[/red]")
        )
    if bad:
        sys.exit(1)


def _import_activities(modules: tuple[str, ...]) -> None:
    sys.path.insert(0, os.getcwd())
    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError as exc:
            raise InvalidInput(f"cannot import activity module {m!r}: {exc}") from None


def _versions(values: tuple[str, ...]) -> list[str] | None:
    for v in values:
        name, sep, number = v.partition(":")
        if not sep or not name or not number.isdigit():
            raise InvalidInput(f"--versions {v!r}: write NAME:VERSION, e.g. order-fulfilment:2")
    return list(values) or None


def _event_logs(c: Ctx) -> None:
    """Long-running processes log every committed event as a JSON line (run, step, attempt ids)."""
    from .app.observability import configure_logging, log_events  # noqa: PLC0415

    if os.environ.get("LOCKSTEP_LOG_FORMAT", "json") != "off":
        configure_logging(json_logs=os.environ.get("LOCKSTEP_LOG_FORMAT", "json") == "json")
        c.engine.service.listeners.append(log_events)


def _run_until_signal(stoppers: list[Callable[[], None]], on_stop: str) -> None:
    stop = threading.Event()

    def handler(signum: int, _frame: Any) -> None:
        err.print(f"received {signal.Signals(signum).name}: {on_stop}")
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    stop.wait()
    for s in stoppers:
        s()


@cli.command()
@click.option(
    "--activities",
    "modules",
    multiple=True,
    required=True,
    help="Python module that registers activities with @lockstep.activity (repeatable).",
)
@click.option("--concurrency", type=click.IntRange(1, 1024), default=4, show_default=True)
@click.option(
    "--lease-ttl",
    default="10s",
    show_default=True,
    help="Lease length; the worker renews it while an activity runs. A dead worker's tasks are "
    "retried after this.",
)
@click.option("--poll-interval", default="200ms", show_default=True)
@click.option("--only", "only", multiple=True, help="Serve only these activity types (repeatable).")
@click.option("--no-scheduler", is_flag=True, help="Do not also fire timers and expire leases here.")
@click.option(
    "--worker-id",
    help="Name in leases and events (default host:pid). Unique among live workers: a worker started "
    "under an id abandons the leases its dead predecessor held, so they are retried at once.",
)
@click.option("--queue", default="default", show_default=True, help="Take tasks of this queue only.")
@click.option(
    "--versions",
    "versions",
    multiple=True,
    help="Only tasks of these definition versions, NAME:VERSION (repeatable; default: all).",
)
@pass_ctx
def worker(
    c: Ctx,
    modules: tuple[str, ...],
    concurrency: int,
    lease_ttl: str,
    poll_interval: str,
    only: tuple[str, ...],
    no_scheduler: bool,
    worker_id: str | None,
    queue: str,
    versions: tuple[str, ...],
) -> None:
    """Run activities from MODULE. SIGTERM drains gracefully; SIGKILL loses nothing."""
    _import_activities(modules)
    from .runtime.worker import Worker  # noqa: PLC0415 - keep `lockstep show` fast

    names = list(only) or REGISTRY.names()
    if not names:
        raise InvalidInput(
            f"module(s) {', '.join(modules)} registered no activities (use @lockstep.activity)"
        )
    w = Worker(
        c.engine.service,
        REGISTRY,
        activities=names,
        concurrency=concurrency,
        lease_ttl=_duration(lease_ttl, "--lease-ttl"),
        poll_interval=_duration(poll_interval, "--poll-interval"),
        scheduler=not no_scheduler,
        worker_id=worker_id,
        queue=queue,
        versions=_versions(versions),
    )
    _event_logs(c)
    w.start()
    err.print(f"worker {w.worker_id} serving {', '.join(names)}" + ("" if no_scheduler else " (+ scheduler)"))
    _run_until_signal([w.stop], "draining in-flight activities, then exiting")


@cli.command()
@click.option("--poll-interval", default="200ms", show_default=True)
@click.option(
    "--partition-ttl",
    default="10s",
    show_default=True,
    help="PostgreSQL: how long this scheduler's partition leases last; a dead scheduler's "
    "partitions move to the others after this.",
)
@click.option(
    "--scheduler-id",
    help="PostgreSQL: name in the partition leases (default host:pid). Unique among live schedulers: "
    "one restarted under its name takes its predecessor's partitions back at once.",
)
@pass_ctx
def scheduler(c: Ctx, poll_interval: str, partition_ttl: str, scheduler_id: str | None) -> None:
    """Fire due timers and expire lost leases (any number may run at once)."""
    stop = threading.Event()
    s = c.engine.scheduler(_duration(poll_interval, "--poll-interval"))
    if scheduler_id:
        s.owner = scheduler_id
    _event_logs(c)
    ttl = _duration(partition_ttl, "--partition-ttl")
    if ttl.total_seconds() < 1:
        raise InvalidInput("--partition-ttl must be at least 1s")
    s.partition_ttl = ttl
    t = threading.Thread(target=s.run, args=(stop,), daemon=True)
    t.start()
    err.print("scheduler running")

    def halt() -> None:
        stop.set()
        s.wake.set()
        t.join(10)

    _run_until_signal([halt], "stopping")


@cli.group()
def db() -> None:
    """Database schema management."""


@db.command("upgrade")
@pass_ctx
def db_upgrade(c: Ctx) -> None:
    """Apply pending schema migrations (safe to run from several processes at once)."""
    from .store import upgrade_store  # noqa: PLC0415

    _json({"applied": upgrade_store(c.db)})


@cli.command()
@click.option("--db", "db_url", default=None, help="Where to run the tour (default: a fresh temporary file).")
@click.option("--keep", is_flag=True, help="Keep the temporary database afterwards.")
def demo(db_url: str | None, keep: bool) -> None:
    """A scripted tour: retries, a lost response, a durable timer, a cancellation with compensation."""
    from .examples.tour import run_tour  # noqa: PLC0415

    sys.exit(run_tour(db_url, keep=keep, console=out))


def main() -> None:
    debug = os.environ.get("LOCKSTEP_DEBUG") == "1"
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        _fail("aborted", 130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except LockstepError as exc:
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except BrokenPipeError:
        # the reader went away (e.g. `lockstep events RUN | head`): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except Exception as exc:
        if debug:
            raise
        _fail(f"internal error: {type(exc).__name__}: {exc} (set LOCKSTEP_DEBUG=1 for a traceback)", 70)


# --- tenants, users, serve (the service surface) ---------------------------------------------------


def _principals(c: Ctx) -> Any:
    return c.engine.service.principals


def _csv(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


@cli.group()
def tenants() -> None:
    """Tenants and their limits."""


@tenants.command("create")
@click.argument("name")
@pass_ctx
def tenants_create(c: Ctx, name: str) -> None:
    """Create tenant NAME."""
    _json(_principals(c).create_tenant(name))


def _value_limit_options(f: Any) -> Any:
    """--max-input-bytes, --max-json-depth, ...: one option per value limit, up to its ceiling."""
    from .core.limits import TENANT_LIMITS  # noqa: PLC0415

    for name, limit in reversed(TENANT_LIMITS.items()):
        f = click.option(
            f"--{name.replace('_', '-')}",
            name,
            type=click.IntRange(1, limit.ceiling),
            help=f"Bound on {limit.protects}, in {limit.unit} (default {limit.default}).",
        )(f)
    return f


@tenants.command("set")
@click.argument("name")
@click.option("--max-active-runs", type=click.IntRange(1), help="Non-terminal runs allowed at once.")
@click.option(
    "--starts-per-second", type=click.FloatRange(min=0.001), help="Sustained run starts per second."
)
@click.option("--max-steps", type=click.IntRange(1, 1000), help="Steps allowed per definition.")
@click.option("--activity-concurrency", type=click.IntRange(1), help="Activity attempts running at once.")
@click.option("--unserved-after", help="Dead-letter tasks no worker takes within this long, e.g. 10m.")
@click.option("--max-history-events", type=click.IntRange(10), help="Events per run before it is cancelled.")
@click.option("--max-run-time", help="Total time per run before it is cancelled, e.g. 30d.")
@click.option(
    "--max-timers", type=click.IntRange(1), help="Durable timers armed at once (starts beyond: 429)."
)
@_value_limit_options
@pass_ctx
def tenants_set(
    c: Ctx,
    /,
    name: str,
    max_active_runs: int | None,
    starts_per_second: float | None,
    max_steps: int | None,
    activity_concurrency: int | None,
    unserved_after: str | None,
    max_history_events: int | None,
    max_run_time: str | None,
    max_timers: int | None,
    **value_limits: int | None,
) -> None:
    """Change tenant NAME's limits (only the options given)."""
    changes: dict[str, Any] = {
        "max_active_runs": max_active_runs,
        "starts_per_second": starts_per_second,
        "max_steps": max_steps,
        "activity_concurrency": activity_concurrency,
        "unserved_after": _seconds(unserved_after, "--unserved-after"),
        "max_history_events": max_history_events,
        "max_run_seconds": _seconds(max_run_time, "--max-run-time"),
        "max_timers": max_timers,
        **value_limits,
    }
    changes = {k: v for k, v in changes.items() if v is not None}
    if not changes:
        raise InvalidInput("give at least one limit option (see `lockstep tenants set --help`)")
    _json(_principals(c).set_tenant(name, **changes))


@tenants.command("list")
@pass_ctx
def tenants_list(c: Ctx) -> None:
    """List tenants and their settings."""
    _json(_principals(c).tenants())


@cli.group()
def users() -> None:
    """Users (people and services) of a tenant, their roles, groups and keys."""


tenant_opt = click.option("--tenant", "tenant", help="Tenant (default: the global --tenant).")


@users.command("create")
@click.argument("name")
@tenant_opt
@click.option("--roles", required=True, help="Comma-separated: admin, operator, approver, viewer, worker.")
@click.option("--groups", default="", help="Comma-separated group names, e.g. finance,managers.")
@pass_ctx
def users_create(c: Ctx, name: str, tenant: str | None, roles: str, groups: str) -> None:
    """Create a user; prints its API key ONCE (only a hash is stored)."""
    _json(_principals(c).create_user(tenant or c.tenant, name, _csv(roles), _csv(groups)))


@users.command("disable")
@click.argument("name")
@tenant_opt
@pass_ctx
def users_disable(c: Ctx, name: str, tenant: str | None) -> None:
    """Disable a user: their key, sessions and links stop working at once (enabling does not revive
    the sessions)."""
    _json(_principals(c).disable_user(tenant or c.tenant, name))


@users.command("enable")
@click.argument("name")
@tenant_opt
@pass_ctx
def users_enable(c: Ctx, name: str, tenant: str | None) -> None:
    """Enable a disabled user again."""
    _json(_principals(c).enable_user(tenant or c.tenant, name))


@users.command("set-password")
@click.argument("name")
@tenant_opt
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@pass_ctx
def users_set_password(c: Ctx, name: str, tenant: str | None, password_stdin: bool) -> None:
    """Set the password used to log in to the web UI; ends the user's UI sessions.

    At least 12 characters, and not easy to guess (checked offline against lists of common passwords,
    words, names and keyboard patterns): a passphrase of four or more unrelated words works."""
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    _json(_principals(c).set_password(tenant or c.tenant, name, password))


@users.command("rotate-key")
@click.argument("name")
@tenant_opt
@pass_ctx
def users_rotate_key(c: Ctx, name: str, tenant: str | None) -> None:
    """Replace a user's API key; prints the new key once, the old one stops working and the user's UI
    sessions end."""
    _json(_principals(c).rotate_key(tenant or c.tenant, name))


@users.command("set")
@click.argument("name")
@tenant_opt
@click.option("--roles", help="Replace the roles (comma-separated).")
@click.option("--groups", help="Replace the groups (comma-separated; empty string for none).")
@pass_ctx
def users_set(c: Ctx, name: str, tenant: str | None, roles: str | None, groups: str | None) -> None:
    """Change a user's roles or groups."""
    _json(
        _principals(c).set_membership(
            tenant or c.tenant,
            name,
            roles=_csv(roles) if roles is not None else None,
            groups=_csv(groups) if groups is not None else None,
        )
    )


@users.command("list")
@tenant_opt
@pass_ctx
def users_list(c: Ctx, tenant: str | None) -> None:
    """List a tenant's users (never their keys)."""
    _json(_principals(c).users(tenant or c.tenant))


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--activities", "modules", multiple=True, help="Also run an in-process worker for MODULE.")
@click.option("--concurrency", type=click.IntRange(1, 1024), default=4, show_default=True)
@click.option("--example", is_flag=True, help="Publish the example processes and start a few example runs.")
@click.option(
    "--metrics-token",
    envvar="LOCKSTEP_METRICS_TOKEN",
    help="A bearer token that reads every tenant's /metrics (tenant admins and operators read their own "
    "tenant's with their API key).",
)
@click.option(
    "--metrics-public",
    is_flag=True,
    envvar="LOCKSTEP_METRICS_PUBLIC",
    help="Serve /metrics to anyone, every tenant included (only behind a network that limits who scrapes).",
)
@click.option("--secure-cookies", is_flag=True, help="Mark UI cookies Secure (when served over HTTPS).")
@click.option("--log-format", type=click.Choice(["json", "console"]), default="json", show_default=True)
@click.option(
    "--public-url",
    envvar="LOCKSTEP_PUBLIC_URL",
    help="Base URL in approval links (default http://HOST:PORT).",
)
@click.option(
    "--notify",
    "notify",
    default="log",
    show_default=True,
    help="Approval link delivery: log, webhook:https://HOST/PATH (signed; secret in "
    "LOCKSTEP_WEBHOOK_SECRET[_FILE]) or smtp[s]://HOST:PORT?from=ADDR (docs/approvals.md).",
)
@click.option(
    "--allow-insecure-http",
    is_flag=True,
    help="Allow an http:// webhook to a host that is not loopback (links travel in clear text).",
)
@click.option(
    "--allow-insecure-smtp",
    is_flag=True,
    help="Allow SMTP without TLS (tls=none) to a host that is not loopback.",
)
@click.option(
    "--allow-webhook-network",
    "webhook_networks",
    multiple=True,
    metavar="CIDR",
    help="Allow the webhook to reach this private/link-local network (refused by default; repeatable).",
)
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    metavar="ADDR",
    help="A reverse proxy (IP or CIDR; repeatable) whose X-Forwarded-For names the client address used "
    "for login throttling. Without it the peer address counts and the header is ignored.",
)
@pass_ctx
def serve(
    c: Ctx,
    host: str,
    port: int,
    modules: tuple[str, ...],
    concurrency: int,
    example: bool,
    metrics_token: str | None,
    metrics_public: bool,
    secure_cookies: bool,
    log_format: str,
    public_url: str | None,
    notify: str,
    allow_insecure_http: bool,
    allow_insecure_smtp: bool,
    webhook_networks: tuple[str, ...],
    trusted_proxies: tuple[str, ...],
) -> None:
    """Serve the HTTP API (/v1), the web UI (/ui) and /metrics; also do the scheduler's duties."""
    from .runtime.outbound import OutboundPolicy  # noqa: PLC0415
    from .serve import run_server  # noqa: PLC0415 - web stack loads only for `serve`

    outbound = OutboundPolicy.from_options(
        allow_insecure_http=allow_insecure_http,
        allow_insecure_smtp=allow_insecure_smtp,
        networks=webhook_networks,
    )

    run_server(
        c.engine,
        host=host,
        port=port,
        modules=modules,
        concurrency=concurrency,
        example=example,
        metrics_token=metrics_token,
        metrics_public=metrics_public,
        secure_cookies=secure_cookies,
        log_format=log_format,
        console=err,
        public_url=public_url or f"http://{host}:{port}",
        notify=notify,
        outbound=outbound,
        trusted_proxies=trusted_proxies,
    )


@cli.group()
def webhooks() -> None:
    """Signed approval webhooks (Standard Webhooks)."""


@webhooks.command("secret")
def webhooks_secret() -> None:
    """Print a new whsec_ signing secret (give it to the receiver; start serve with it in
    LOCKSTEP_WEBHOOK_SECRET_FILE or LOCKSTEP_WEBHOOK_SECRET)."""
    from .runtime.webhook import new_secret  # noqa: PLC0415

    click.echo(new_secret())


# --- approvals --------------------------------------------------------------------------------------

public_url_opt = click.option(
    "--public-url",
    envvar="LOCKSTEP_PUBLIC_URL",
    default="http://127.0.0.1:8080",
    show_default=True,
    help="Base URL of `lockstep serve`, used in approval links.",
)


@cli.group()
def approvals() -> None:
    """Approval links and approvers of waiting runs (operators)."""


def _approvals(c: Ctx, public_url: str = "http://127.0.0.1:8080") -> Any:
    return c.engine.service.approvals.linking_to(public_url)


@approvals.command("link")
@click.argument("run_id")
@click.argument("step")
@click.option("--approver", required=True, help="The user the link is for (it works only for them).")
@click.option("--expires-in", help="e.g. 1d (never later than the step's timeout).")
@public_url_opt
@pass_ctx
def approvals_link(
    c: Ctx, run_id: str, step: str, approver: str, expires_in: str | None, public_url: str
) -> None:
    """Mint and print a fresh single-use link {"url", "token", "expires_at"} (recorded in the history)."""
    expires = _duration(expires_in, "--expires-in") if expires_in else None
    _json(
        _approvals(c, public_url).mint(
            c.tenant, run_id, step, approver, expires_in=expires, by=os.environ.get("USER")
        )
    )


@approvals.command("links")
@click.argument("run_id")
@pass_ctx
def approvals_links(c: Ctx, run_id: str) -> None:
    """Links of the run's pending approval request (ids and status, never tokens)."""
    _json(_approvals(c).links(c.tenant, run_id))


@approvals.command("revoke")
@click.argument("link_id")
@click.option("--reason", required=True)
@pass_ctx
def approvals_revoke(c: Ctx, link_id: str, reason: str) -> None:
    """Revoke a pending link (e.g. after resending a new one)."""
    _json(_approvals(c).revoke(c.tenant, link_id, reason, actor=os.environ.get("USER")))


@approvals.command("reassign")
@click.argument("run_id")
@click.argument("step")
@click.option("--from", "old", required=True, help="The approver to replace.")
@click.option("--to", "new", required=True, help="The new approver (an enabled user).")
@click.option("--reason", required=True)
@pass_ctx
def approvals_reassign(c: Ctx, run_id: str, step: str, old: str, new: str, reason: str) -> None:
    """Replace an approver on a pending request; their links are revoked, the new one is notified."""
    _json(_approvals(c).reassign(c.tenant, run_id, step, old, new, reason, actor=os.environ.get("USER")))


@users.command("set-email")
@click.argument("name")
@click.argument("email")
@tenant_opt
@pass_ctx
def users_set_email(c: Ctx, name: str, email: str, tenant: str | None) -> None:
    """Set the address the SMTP notifier sends approval links to."""
    _json(_principals(c).set_email(tenant or c.tenant, name, email))


# --- operator repair ----------------------------------------------------------------------------------


@cli.command()
@click.argument("run_id")
@click.argument("step")
@click.option("--reason", required=True, help="Why (recorded in the audit trail).")
@click.option(
    "--new-key", is_flag=True, help="Use a new idempotency key (the downstream will see a new request)."
)
@pass_ctx
def retry(c: Ctx, run_id: str, step: str, reason: str, new_key: bool) -> None:
    """Run a step that waits for an operator (dead letter, unknown outcome) again, as a new attempt."""
    _json(
        c.engine.service.retry(c.tenant, run_id, step, reason, actor=os.environ.get("USER"), new_key=new_key)
    )


@cli.command("dead-letters")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def dead_letters(c: Ctx, as_json: bool) -> None:
    """Runs whose task went to the dead-letter state, with the reason (retry with `lockstep retry`)."""
    rows = c.engine.service.dead_letters(c.tenant)
    if as_json:
        _json(rows)
        return
    t = Table("run", "step", "since", "reason")
    for r in rows:
        t.add_row(r["run_id"], r["step"], r["since"], r["reason"])
    out.print(t)


def _repairs(c: Ctx) -> Any:
    return c.engine.service.repairs


reason_opt = click.option(
    "--reason", required=True, help="Why (recorded with your name in the run's history)."
)


@cli.command()
@click.argument("run_id")
@reason_opt
@pass_ctx
def pause(c: Ctx, run_id: str, reason: str) -> None:
    """Pause a run: nothing new starts; in-flight attempts finish and are recorded; due timers wait."""
    _json(_repairs(c).pause(c.tenant, run_id, reason, actor=os.environ.get("USER")))


@cli.command()
@click.argument("run_id")
@reason_opt
@pass_ctx
def resume(c: Ctx, run_id: str, reason: str) -> None:
    """Resume a paused run: transitions held back while paused (due timers, next steps) happen now."""
    _json(_repairs(c).resume(c.tenant, run_id, reason, actor=os.environ.get("USER")))


@cli.command()
@click.argument("run_id")
@click.argument("step")
@click.option("--output", help="JSON that stands in for the step's output.")
@reason_opt
@pass_ctx
def skip(c: Ctx, run_id: str, step: str, output: str | None, reason: str) -> None:
    """Skip the current step where the definition allows it (skippable / skip_policy)."""
    _json(
        _repairs(c).skip(
            c.tenant,
            run_id,
            step,
            reason,
            output=_parse_json(output, "--output"),
            actor=os.environ.get("USER"),
            roles=("operator", "admin"),
        )
    )


@cli.command("edit-input")
@click.argument("run_id")
@click.option("--input", "input_", required=True, help="The new input as JSON, or @file.json.")
@reason_opt
@pass_ctx
def edit_input(c: Ctx, run_id: str, input_: str, reason: str) -> None:
    """Replace the run's input (checked against its version's input_schema) for steps not yet started."""
    _json(
        _repairs(c).edit_input(
            c.tenant, run_id, _parse_json(input_, "--input"), reason, actor=os.environ.get("USER")
        )
    )


@cli.command()
@click.argument("run_id")
@click.argument("step")
@click.option("--as", "outcome", required=True, type=click.Choice(["succeeded", "failed"]))
@click.option("--output", help="The step's output as JSON (with --as succeeded).")
@reason_opt
@pass_ctx
def resolve(c: Ctx, run_id: str, step: str, outcome: str, output: str | None, reason: str) -> None:
    """Settle a step whose outcome was unknown, after checking the downstream system."""
    _json(
        _repairs(c).resolve(
            c.tenant,
            run_id,
            step,
            outcome,
            reason,
            output=_parse_json(output, "--output"),
            actor=os.environ.get("USER"),
        )
    )


@cli.command()
@click.argument("run_id")
@click.argument("proposal_id")
@reason_opt
@pass_ctx
def confirm(c: Ctx, run_id: str, proposal_id: str, reason: str) -> None:
    """Four-eyes: confirm another operator's proposed skip, migrate or resolve (it runs now)."""
    _json(
        _repairs(c).confirm(
            c.tenant, run_id, proposal_id, reason, actor=os.environ.get("USER"), roles=("operator", "admin")
        )
    )


@cli.command("reject-proposal")
@click.argument("run_id")
@click.argument("proposal_id")
@reason_opt
@pass_ctx
def reject_proposal(c: Ctx, run_id: str, proposal_id: str, reason: str) -> None:
    """Four-eyes: reject a proposal (your own proposal: withdraw it)."""
    _json(_repairs(c).reject(c.tenant, run_id, proposal_id, reason, actor=os.environ.get("USER")))


def _mapping(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for p in pairs:
        old, sep, new = p.partition("=")
        if not sep or not old or not new:
            raise InvalidInput(f"--map {p!r}: write OLD_STEP=NEW_STEP")
        out[old] = new
    return out


@cli.command()
@click.argument("run_id", required=False)
@click.option("--to-version", type=click.IntRange(1), required=True)
@click.option("--map", "maps", multiple=True, help="OLD_STEP=NEW_STEP for renamed steps (repeatable).")
@click.option("--dry-run", is_flag=True, help="Explain what would happen; change nothing.")
@click.option("--definition", help="Bulk: migrate the runs of this definition ...")
@click.option("--from-version", type=click.IntRange(1), help="... that are on this version ...")
@click.option("--where", "where", help="... and match status=S (e.g. status=waiting).")
@reason_opt
@pass_ctx
def migrate(
    c: Ctx,
    run_id: str | None,
    to_version: int,
    maps: tuple[str, ...],
    dry_run: bool,
    definition: str | None,
    from_version: int | None,
    where: str | None,
    reason: str,
) -> None:
    """Move a running run (or, with --definition, many) to another version of its definition."""
    mapping = _mapping(maps)
    actor = os.environ.get("USER")
    if run_id is not None:
        if definition or from_version or where:
            raise InvalidInput("give either RUN_ID or --definition/--from-version/--where, not both")
        result = _repairs(c).migrate(
            c.tenant, run_id, to_version, reason, mapping=mapping, dry_run=dry_run, actor=actor
        )
        _json(result)
        if not result.get("ok", True):
            sys.exit(5)
        return
    if not definition or not from_version:
        raise InvalidInput("give a RUN_ID, or --definition NAME --from-version N for a bulk migration")
    status = None
    if where:
        key, _, value = where.partition("=")
        if key != "status" or not value:
            raise InvalidInput("--where supports status=STATUS, e.g. --where status=waiting")
        status = value
    _json(
        _repairs(c).migrate_many(
            c.tenant,
            definition,
            from_version,
            to_version,
            reason,
            status=status,
            mapping=mapping,
            dry_run=dry_run,
            actor=actor,
        )
    )
