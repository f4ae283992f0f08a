"""`lockstep serve`: one process with the API, the UI, the scheduler and optionally a worker."""

from __future__ import annotations

import contextlib
import importlib
import ipaddress
import os
import signal
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from types import FrameType

import uvicorn
from rich.console import Console

from .api import create_app
from .app.observability import configure_logging, log_events
from .engine import Engine
from .errors import InvalidInput
from .runtime.activity import REGISTRY
from .runtime.notify import Notifier, OutboundPolicy, channel_from_spec
from .runtime.scheduler import Scheduler
from .runtime.worker import Worker

__all__ = ["run_server"]


class _Server(uvicorn.Server):
    """uvicorn's server, but a SIGTERM or SIGINT ends the process only after serve's own shutdown.

    uvicorn re-raises the signal once its graceful shutdown is done, so that the exit status says
    "killed by SIGTERM"; the re-raised signal then ends the process before the `finally` below could
    stop the in-process worker (drain its activities), the scheduler and the notifier. Here the signal
    is only recorded: the process drains everything and exits 0, like `lockstep worker`."""

    def __init__(self, config: uvicorn.Config, console: Console) -> None:
        super().__init__(config)
        self.console = console

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            name = signal.Signals(sig).name
            self.console.print(
                f"received {name}: finishing requests, draining in-flight activities, then exiting"
            )
        super().handle_exit(sig, frame)


def run_server(
    engine: Engine,
    *,
    host: str,
    port: int,
    modules: tuple[str, ...],
    concurrency: int,
    example: bool,
    metrics_token: str | None,
    secure_cookies: bool,
    log_format: str,
    console: Console,
    public_url: str = "http://127.0.0.1:8080",
    notify: str = "log",
    outbound: OutboundPolicy | None = None,
    metrics_public: bool = False,
    trusted_proxies: tuple[str, ...] = (),
) -> None:
    configure_logging(json_logs=log_format == "json")
    for proxy in trusted_proxies:
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            raise InvalidInput(
                f"--trusted-proxy {proxy!r} is not an IP address or network: give the proxy's address "
                f"as it connects to lockstep, e.g. 127.0.0.1 or 10.0.0.0/24"
            ) from None
    # First: a notification channel the destination policy refuses stops the server before it starts.
    channel = channel_from_spec(notify, outbound)
    service = engine.service
    service.listeners.append(log_events)
    if service.tracing is not None:  # in-process activities' own spans go where lockstep's go
        service.tracing.set_global()
    sys.path.insert(0, os.getcwd())
    mods = list(modules)
    if example:
        mods.append("lockstep.examples.activities")
    for m in mods:
        try:
            importlib.import_module(m)
        except ImportError as exc:
            raise InvalidInput(f"cannot import activity module {m!r}: {exc}") from None
    if example:
        from .examples.bootstrap import bootstrap  # noqa: PLC0415

        db_dir = (
            os.path.dirname(os.path.abspath(service.store.url.removeprefix("sqlite:///")))
            if service.store.url.startswith("sqlite:///")
            else os.getcwd()
        )
        info = bootstrap(engine, db_dir)
        key = f", API key {info['api_key']}" if "api_key" in info else ""
        console.print(
            f"example: tenant [bold]default[/bold], user [bold]admin[/bold], password "
            f"[bold]{info['password']}[/bold]{key}",
            markup=True,  # our own text and generated secrets: no tenant's text in it
        )
        if not metrics_public:
            console.print(
                "example: /metrics needs `Authorization: Bearer <metrics token>` or the API key of a "
                "tenant admin or operator (e.g. the admin key above)"
            )
    app = create_app(
        service,
        metrics_token=metrics_token,
        metrics_public=metrics_public,
        secure_cookies=secure_cookies,
        public_url=public_url,
    )
    stop = threading.Event()
    scheduler = Scheduler(service, poll_interval=timedelta(milliseconds=200))
    sched_thread = threading.Thread(
        target=scheduler.run, args=(stop,), name="lockstep-scheduler", daemon=True
    )
    sched_thread.start()
    notifier = Notifier(service, app.state.approvals, channel)
    notify_thread = threading.Thread(target=notifier.run, args=(stop,), name="lockstep-notifier", daemon=True)
    notify_thread.start()
    worker = None
    if mods:
        worker = Worker(service, REGISTRY, concurrency=concurrency, scheduler=False).start()
    console.print(f"lockstep serving on http://{host}:{port}  (UI: /ui/, API: /v1, OpenAPI: /openapi.json)")
    changed = service.server_limits.overrides()
    if changed:
        console.print("server-wide limits set: " + ", ".join(f"{k}={v}" for k, v in sorted(changed.items())))
    # The client address (login throttling, audit) is the peer's, unless the peer is a proxy we were told
    # to trust: only then does X-Forwarded-For count, else any client could rotate it at will (uvicorn
    # alone would trust it from 127.0.0.1).
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=10,
        proxy_headers=bool(trusted_proxies),
        forwarded_allow_ips=list(trusted_proxies) or None,
    )
    try:
        _Server(config, console).run()
    finally:
        stop.set()
        scheduler.wake.set()
        if worker is not None:
            worker.stop()
        notifier.wake.set()
        sched_thread.join(5)
        notify_thread.join(5)
