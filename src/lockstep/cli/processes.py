"""The long-running processes: `worker`, `scheduler` and `serve` (API, UI and scheduler duties); each
logs its events and stops cleanly on SIGTERM or SIGINT."""

from __future__ import annotations

import gc
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from types import FrameType

import click

from ..core.definition import HTTP_ACTIVITY
from ..errors import InvalidInput
from ..runtime.activity import DEFAULT_SLOTS, REGISTRY
from .context import Ctx, pass_ctx
from .inputs import duration
from .render import err

__all__ = ["COMMANDS"]


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
    from ..app.observability import configure_logging, log_events  # noqa: PLC0415

    if os.environ.get("LOCKSTEP_LOG_FORMAT", "json") != "off":
        configure_logging(json_logs=os.environ.get("LOCKSTEP_LOG_FORMAT", "json") == "json")
        c.engine.service.listeners.append(log_events)
    if c.engine.service.tracing is not None:  # activities' own spans go where lockstep's go
        c.engine.service.tracing.set_global()


def _freeze_startup_heap() -> None:
    """Move what start-up created (modules, classes, the engine: some 65,000 objects) out of the cyclic
    collector's reach. It lives as long as the process; unfrozen, every full collection of a busy worker
    or scheduler walks all of it again."""
    gc.collect()
    gc.freeze()


def _metrics_options(command: Callable[..., None]) -> Callable[..., None]:
    """--metrics-port, --metrics-host and --metrics-token of `worker` and `scheduler`."""
    for option in reversed(
        (
            click.option(
                "--metrics-port",
                type=click.IntRange(0, 65535),
                help="Serve this process's counters and histograms as Prometheus text on "
                "http://HOST:PORT/metrics (0: any free port; default: not served).",
            ),
            click.option(
                "--metrics-host",
                default="127.0.0.1",
                show_default=True,
                help="Address for --metrics-port; anything but loopback needs --metrics-token.",
            ),
            click.option(
                "--metrics-token",
                envvar="LOCKSTEP_METRICS_TOKEN",
                help="A bearer token every scrape of --metrics-port must send (the one `serve` takes).",
            ),
        )
    ):
        command = option(command)
    return command


def _serve_metrics(c: Ctx, port: int | None, host: str, token: str | None) -> Callable[[], None]:
    """Start this process's /metrics if asked (its own counters; the database's gauges are serve's)."""
    if port is None:
        return lambda: None
    from ..runtime.metrics_http import MetricsServer  # noqa: PLC0415

    server = MetricsServer(c.engine.service.metrics.exposition(database=False), host, port, token)
    server.start()
    err.print(f"metrics on {server.url}")
    return server.stop


def _run_until_signal(stoppers: list[Callable[[], None]], on_stop: str) -> None:
    stop = threading.Event()

    def handler(signum: int, _frame: FrameType | None) -> None:
        err.print(f"received {signal.Signals(signum).name}: {on_stop}")
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    # Python runs a signal's handler in the main thread, and only when that thread executes bytecode.
    # The kernel may deliver SIGTERM to any of the worker's threads; a main thread blocked in an untimed
    # wait is then never woken and the process never drains. Waking up regularly lets the handler run.
    while not stop.wait(0.25):
        pass
    for s in stoppers:
        s()


@click.command()
@click.option(
    "--activities",
    "modules",
    multiple=True,
    help="Python module that registers activities with @lockstep.activity (repeatable). Without one "
    "the worker runs the built-in http steps only (a tenant's processes that call HTTP APIs need no code).",
)
@click.option("--concurrency", type=click.IntRange(1, 1024), default=DEFAULT_SLOTS, show_default=True)
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
    "--no-http",
    is_flag=True,
    help="Do not run http steps here (the built-in lockstep.http; also left out by --only unless named).",
)
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
@click.option(
    "--poll-wait",
    default="10s",
    show_default=True,
    help="With --url: how long one long poll of the task API waits for a task (at most 30s).",
)
@_metrics_options
@pass_ctx
def worker(
    c: Ctx,
    modules: tuple[str, ...],
    concurrency: int,
    lease_ttl: str,
    poll_interval: str,
    only: tuple[str, ...],
    no_scheduler: bool,
    no_http: bool,
    worker_id: str | None,
    queue: str,
    versions: tuple[str, ...],
    metrics_port: int | None,
    metrics_host: str,
    metrics_token: str | None,
    poll_wait: str,
) -> None:
    """Run activities from MODULE (and http steps), on the database (--db) or over a server's task API
    (--url with --api-key-file: the worker never sees the database; http steps stay with database
    workers, which hold the tenant's secrets). SIGTERM drains gracefully; SIGKILL loses nothing."""
    _import_activities(modules)
    if c.remote:
        names = [n for n in only if n != HTTP_ACTIVITY] if only else REGISTRY.names()
        if not names:
            raise InvalidInput(
                f"module(s) {', '.join(modules)} registered no activities (use @lockstep.activity)"
                if modules
                else "a remote worker runs your activities: give --activities MODULE (http steps run "
                "on workers of the database, which hold the tenant's secrets)"
            )
        if metrics_port is not None:
            raise InvalidInput(
                "--metrics-port needs --db: a remote worker's results are counted by the server"
            )
        _remote_worker(c, names, concurrency, lease_ttl, poll_wait, worker_id, queue, _versions(versions))
        return
    http = not no_http and (not only or HTTP_ACTIVITY in only)
    names = [n for n in only if n != HTTP_ACTIVITY] if only else REGISTRY.names()
    if not names and not http:
        raise InvalidInput(
            f"module(s) {', '.join(modules)} registered no activities (use @lockstep.activity)"
            if modules
            else "nothing to run: give --activities MODULE, or leave out --no-http to run http steps"
        )
    from ..runtime.worker import Worker  # noqa: PLC0415 - keep `lockstep show` fast

    w = Worker(
        c.engine.service,
        REGISTRY,
        activities=names or [HTTP_ACTIVITY],
        concurrency=concurrency,
        lease_ttl=duration(lease_ttl, "--lease-ttl"),
        poll_interval=duration(poll_interval, "--poll-interval"),
        scheduler=not no_scheduler,
        worker_id=worker_id,
        queue=queue,
        versions=_versions(versions),
        http=http,
    )
    _event_logs(c)
    stop_metrics = _serve_metrics(c, metrics_port, metrics_host, metrics_token)
    _freeze_startup_heap()
    w.start()
    err.print(
        f"worker {w.worker_id} serving {', '.join(w.activities)}" + ("" if no_scheduler else " (+ scheduler)")
    )
    _run_until_signal([w.stop, stop_metrics], "draining in-flight activities, then exiting")


def _remote_worker(
    c: Ctx,
    names: list[str],
    concurrency: int,
    lease_ttl: str,
    poll_wait: str,
    worker_id: str | None,
    queue: str,
    versions: list[str] | None,
) -> None:
    """`worker --url`: the same activities over the HTTP task API (runtime/remote.py)."""
    from ..app.observability import configure_logging  # noqa: PLC0415
    from ..runtime.remote import RemoteWorker  # noqa: PLC0415

    w = RemoteWorker(
        c.client,
        REGISTRY,
        activities=names,
        concurrency=concurrency,
        lease_ttl=duration(lease_ttl, "--lease-ttl"),
        poll_wait=duration(poll_wait, "--poll-wait"),
        worker_id=worker_id,
        queue=queue,
        versions=versions,
    )
    if os.environ.get("LOCKSTEP_LOG_FORMAT", "json") != "off":
        configure_logging(json_logs=os.environ.get("LOCKSTEP_LOG_FORMAT", "json") == "json")
    _freeze_startup_heap()
    w.start()
    err.print(f"worker {w.worker_id} serving {', '.join(names)} via {c.client.url}")

    def drain() -> None:
        if not w.stop():
            err.print("drain timed out: the tasks left are retried after their leases expire")

    _run_until_signal([drain], "draining in-flight activities, then exiting")


@click.command()
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
@click.option(
    "--purge-interval",
    default="60s",
    show_default=True,
    help="How often to purge finished runs past their tenant's retention (a pass with work left goes "
    "on at once, in bounded batches).",
)
@click.option(
    "--purge-batch",
    type=click.IntRange(1, 100_000),
    default=1000,
    show_default=True,
    help="Rows the purge deletes per transaction (and, up to 100, runs it tombstones per transaction).",
)
@click.option(
    "--scrub-interval",
    default="60s",
    show_default=True,
    help="How often to verify a batch of runs (hash chain, seq, replay) and mark the damaged ones, whose "
    "commands are then refused; 0 turns the scrub off.",
)
@click.option(
    "--scrub-batch",
    type=click.IntRange(1, 100_000),
    default=200,
    show_default=True,
    help="Runs the scrub verifies per pass (round robin over every run, so all are checked in turn).",
)
@_metrics_options
@pass_ctx
def scheduler(
    c: Ctx,
    poll_interval: str,
    partition_ttl: str,
    scheduler_id: str | None,
    purge_interval: str,
    purge_batch: int,
    scrub_interval: str,
    scrub_batch: int,
    metrics_port: int | None,
    metrics_host: str,
    metrics_token: str | None,
) -> None:
    """Fire due timers, expire lost leases, purge past retention, scrub (any number may run at once)."""
    from ..runtime.scheduler import Scheduler  # noqa: PLC0415

    stop = threading.Event()
    s = Scheduler(
        c.engine.service,
        poll_interval=duration(poll_interval, "--poll-interval"),
        purge_interval=duration(purge_interval, "--purge-interval"),
        purge_batch=purge_batch,
        scrub_interval=timedelta(0)
        if scrub_interval.strip() == "0"
        else duration(scrub_interval, "--scrub-interval"),
        scrub_batch=scrub_batch,
    )
    if scheduler_id:
        s.owner = scheduler_id
    _event_logs(c)
    ttl = duration(partition_ttl, "--partition-ttl")
    if ttl.total_seconds() < 1:
        raise InvalidInput("--partition-ttl must be at least 1s")
    s.partition_ttl = ttl
    stop_metrics = _serve_metrics(c, metrics_port, metrics_host, metrics_token)
    _freeze_startup_heap()
    t = threading.Thread(target=s.run, args=(stop,), daemon=True)
    t.start()
    err.print("scheduler running")

    def halt() -> None:
        stop.set()
        s.wake.set()
        t.join(10)

    _run_until_signal([halt, stop_metrics], "stopping")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--activities", "modules", multiple=True, help="Also run an in-process worker for MODULE.")
@click.option("--concurrency", type=click.IntRange(1, 1024), default=DEFAULT_SLOTS, show_default=True)
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
    from ..runtime.outbound import OutboundPolicy  # noqa: PLC0415
    from ..serve import run_server  # noqa: PLC0415 - web stack loads only for `serve`

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


# The commands of this group, attached to the root group in root.py.
COMMANDS: tuple[click.Command, ...] = (worker, scheduler, serve)
