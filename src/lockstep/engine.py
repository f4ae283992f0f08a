"""The embedding API: `Engine.open(url)` and the handful of calls an application needs."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path

from .app.dbclock import DatabaseClock
from .app.documents import parse_yaml_document
from .app.keys import KeyProvider, key_provider
from .app.service import Service, utcnow
from .app.tracing import TraceSink, explicit_parent, tracing_from_env
from .core.canonical import JSONObject, JSONValue
from .core.definition import Limits
from .core.limits import DEFAULT_SERVER_LIMITS, LimitSettingError, ServerLimits
from .errors import InvalidInput, LockstepError
from .runtime.activity import DEFAULT_SLOTS, Registry
from .runtime.scheduler import Scheduler
from .runtime.worker import Worker
from .store import SchemaError, StoreUnavailable, open_store

__all__ = ["DEFAULT_DB", "Engine", "check_definition_size", "load_document"]

DEFAULT_DB = "sqlite:///lockstep.db"


def load_document(
    source: str | Path | JSONObject, limits: ServerLimits = DEFAULT_SERVER_LIMITS
) -> JSONObject:
    """A definition from a dict, a file path, or YAML/JSON text (at most `limits`'s
    max_definition_bytes, max_yaml_aliases and max_yaml_nodes); errors name the line and column."""
    if isinstance(source, dict):
        return source
    text = str(source)
    where = "definition text"
    if isinstance(source, Path) or ("\n" not in text and text.endswith((".yaml", ".yml", ".json"))):
        path = Path(text)
        if not path.is_file():
            raise InvalidInput(f"definition file {path} does not exist")
        text, where = path.read_text(), str(path)
    check_definition_size(len(text.encode("utf-8", "surrogatepass")), where, limits)
    doc = parse_yaml_document(text, where, limits)
    if not isinstance(doc, dict):
        raise InvalidInput(f"{where}: a definition must be a mapping with name and steps")
    return doc


def check_definition_size(size: int, where: str, limits: ServerLimits) -> None:
    most = limits["max_definition_bytes"]
    if size > most:
        raise InvalidInput(
            f"{where} is {size} bytes, over this server's limit max_definition_bytes={most}: split the "
            "process into several definitions, or write repeated parts once"
        )


def _tracing(tracing: TraceSink | bool | None) -> TraceSink | None:
    if tracing is None:
        return tracing_from_env(os.environ)
    if tracing is True:
        raise InvalidInput("tracing=True: pass a TraceSink, or None to trace as the OTEL_* variables say")
    return None if tracing is False else tracing


class Engine:
    """A lockstep engine over one database. Thread-safe; open one per process."""

    def __init__(self, service: Service, *, owns_tracing: bool = False) -> None:
        self.service = service
        self._owns_tracing = owns_tracing

    @classmethod
    def open(
        cls,
        url: str = DEFAULT_DB,
        *,
        clock: Callable[[], datetime] = utcnow,
        limits: Limits | None = None,
        server_limits: Mapping[str, int] | None = None,
        synchronous: str = "FULL",
        busy_timeout: timedelta = timedelta(seconds=30),
        keys: KeyProvider | str | Path | None = None,
        tracing: TraceSink | bool | None = None,
        refuse_damaged: bool = True,
    ) -> Engine:
        """`server_limits` overrides server-wide limits of core/limits.py by name (SERVER_LIMITS and
        HISTORY_LIMITS, e.g. {"max_request_bytes": 33554432}); a bad name or value raises InvalidInput
        before the database is opened. `keys` is the key that seals sensitive values: a KeyProvider, or
        the path of a key file (`lockstep keys init`); by default LOCKSTEP_KEY_FILE or LOCKSTEP_KEY,
        and without either, starting a run of a definition with sensitive fields is refused.
        `tracing`: None (the default) traces as the OTEL_* environment says (off when it says
        nothing: docs/operations.md); False never; a TraceSink (app/tracing) as given, e.g. over the
        SDK's in-memory exporter. Tracing set up here is flushed and shut down by close().
        `refuse_damaged=False` opens a database whose tables are damaged (for `verify` to report)."""
        provider = keys if keys is not None and not isinstance(keys, str | Path) else key_provider(keys)
        try:
            configured = (
                server_limits if isinstance(server_limits, ServerLimits) else ServerLimits(server_limits)
            )
        except LimitSettingError as exc:
            raise InvalidInput(str(exc), code="bad_limit") from None
        owned = tracing is None
        sink = _tracing(tracing)
        try:
            store = open_store(
                url,
                synchronous=synchronous,
                busy_timeout_s=busy_timeout.total_seconds(),
                refuse_damaged=refuse_damaged,
            )
        except (SchemaError, StoreUnavailable) as exc:
            if owned and sink is not None:
                sink.shutdown()
            raise LockstepError(str(exc), code="database") from None
        if clock is utcnow:
            # The database's clock decides (app/dbclock.py): one host's clock jumping moves no lease,
            # timer or deadline of the others.
            clock = DatabaseClock(store.database_clock_ms)
        service = Service(
            store, clock=clock, limits=limits, server_limits=configured, keys=provider, tracing=sink
        )
        # Server settings of run webhooks (docs/webhooks.md): the claim's lease and the first retry's
        # delay, in milliseconds. (Receivers on loopback: the server limit egress_allow_loopback.)
        hooks = service.webhooks
        for name, attr in (
            ("LOCKSTEP_WEBHOOK_LEASE_MS", "lease_ms"),
            ("LOCKSTEP_WEBHOOK_RETRY_MS", "retry_base_ms"),
        ):
            value = os.environ.get(name, "")
            if value.isdigit() and int(value) > 0:
                setattr(hooks, attr, int(value))
        return cls(service, owns_tracing=owned)

    def close(self) -> None:
        """Close the database; export the spans still buffered (and stop tracing set up by open())."""
        tracing = self.service.tracing
        if tracing is not None:
            if self._owns_tracing:
                tracing.shutdown()
            else:
                tracing.flush()
        self.service.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- definitions and runs ------------------------------------------------------------------
    def publish(self, source: str | Path | JSONObject, *, tenant: str = "default") -> JSONObject:
        """Publish a definition; identical content returns the existing version. `warnings` lists what
        was accepted but should be fixed, as {path, message} (docs/definitions.md, "Checks")."""
        out = self.service.publish(tenant, load_document(source, self.service.server_limits))
        warnings: list[JSONValue] = [w.plain() for w in out.warnings]
        return {"name": out.name, "version": out.version, "digest": out.digest, "warnings": warnings}

    def start(
        self,
        name: str,
        *,
        input: JSONValue = None,
        key: str | None = None,
        version: int | None = None,
        tenant: str = "default",
        actor: str | None = None,
        traceparent: str | None = None,
    ) -> str:
        """Start a run and return its id; the same `key` returns the same run. The run's trace is part of
        the caller's: `traceparent` (W3C), else the OpenTelemetry span current in this thread."""
        parent = explicit_parent(traceparent)
        out = self.service.start(
            tenant, name, input=input, key=key, version=version, actor=actor, parent=parent
        )
        return out.run_id

    # The calls below answer with the views' plain JSON (app/views): dicts, as `lockstep ... --json`.
    def show(self, run_id: str, *, tenant: str = "default") -> JSONObject:
        return self.service.show(tenant, run_id).plain()

    def events(self, run_id: str, *, tenant: str = "default") -> list[JSONObject]:
        return [e.plain() for e in self.service.events(tenant, run_id)]

    def runs(
        self, *, status: str | None = None, tenant: str = "default", limit: int = 100
    ) -> list[JSONObject]:
        return [r.plain() for r in self.service.runs(tenant, status=status, limit=limit)]

    def cancel(
        self, run_id: str, *, reason: str, tenant: str = "default", actor: str | None = None
    ) -> JSONObject:
        return self.service.cancel(tenant, run_id, reason, actor).plain()

    def verify(self, run_id: str | None = None) -> list[JSONObject]:
        return [v.plain() for v in self.service.verify(run_id)]

    # --- running work in-process ---------------------------------------------------------------
    def worker(
        self,
        registry: Registry | None = None,
        *,
        concurrency: int = DEFAULT_SLOTS,
        lease_ttl: timedelta = timedelta(seconds=10),
        scheduler: bool = True,
        poll_interval: timedelta = timedelta(milliseconds=50),
        queue: str = "default",
    ) -> Worker:
        """A worker (and by default the scheduler) in this process; call .start() and later .stop()."""
        return Worker(
            self.service,
            registry,
            concurrency=concurrency,
            lease_ttl=lease_ttl,
            scheduler=scheduler,
            poll_interval=poll_interval,
            queue=queue,
        )

    def scheduler(self, poll_interval: timedelta = timedelta(milliseconds=200)) -> Scheduler:
        return Scheduler(self.service, poll_interval=poll_interval)

    def wait_for(
        self,
        run_id: str,
        statuses: tuple[str, ...] = ("completed", "failed", "cancelled", "needs_attention"),
        *,
        timeout: float = 30.0,
        tenant: str = "default",
    ) -> JSONObject:
        """Poll until the run reaches one of `statuses` (default: terminal or needs_attention)."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.show(run_id, tenant=tenant)
            if shown["status"] in statuses:
                return shown
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"run {run_id} still {shown['status']} after {timeout}s: "
                    f"{json.dumps(shown['wait_reason'])}"
                )
            time.sleep(0.02)
