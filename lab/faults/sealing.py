"""Sealed runs in the fault suite (`rotate_under_load`, `purge_under_load`): definitions whose fields are
sensitive, the key file made with `lockstep keys init`, rotations over the CLI, and the checks that
what was sealed still opens to what was started.

Every process of the fleet gets the key file (LOCKSTEP_KEY_FILE in the fleet's environment), so the
driver, the workers and the schedulers all seal and open; the driver's in-process engine is reopened
with it. The checks read raw rows where they can (key versions, run key rows) and open values through
the engine's reveal service (the only way a person reads them), as a user holding `read_sensitive`.

Violations (checker.py): `keys_lost` for a value that no longer opens to its own, an activity that was
given something else than the clear value, or a rotation that never finished.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockstep.app.keys import KEY_FILE_ENV
from lockstep.app.principals import Principal
from lockstep.engine import Engine

from .base import Ctx
from .checker import Verdict
from .downstream import canonical_sha
from .faultfleet import FaultFleet
from .ledger import LedgerReader

__all__ = [
    "Rotator",
    "Started",
    "check_given",
    "check_values",
    "init_keys",
    "rotation_left",
    "sealed_definition",
    "wait_rotated",
]


@dataclass(frozen=True)
class Started:
    """What the driver started a sealed run with: its tenant and its input (sensitive fields in clear)."""

    tenant: str
    input: dict[str, Any]


def sealed_definition(doc: dict[str, Any], *, output: bool = False) -> dict[str, Any]:
    """`doc` (a pay_definition) with the run's `amount` and `card` sensitive (`x-lockstep-sensitive`),
    so the charge's input is sealed too; with `output`, the charge's output `amount` as well."""
    doc["input_schema"] = {
        "type": "object",
        "properties": {
            "amount": {"type": "integer", "x-lockstep-sensitive": True},
            "card": {"type": "string", "x-lockstep-sensitive": True},
            "ref": {"type": "string"},
        },
    }
    if output:
        charge = next(s for s in doc["steps"] if s["id"] == "charge")
        charge["output_sensitive"] = ["/amount"]
    return doc


def init_keys(fleet: FaultFleet) -> Path:
    """`lockstep keys init` in the fleet's directory; every process started from now on has the key,
    and the driver's engine is reopened with it. Call before any worker or scheduler is started."""
    key = fleet.dir / "lockstep.key"
    fleet.env[KEY_FILE_ENV] = str(key)
    fleet.cli("keys", "init")
    fleet.engine.close()
    fleet.engine = Engine.open(fleet.db_url, keys=key)
    return key


class Rotator:
    """`lockstep keys rotate --tenant T` in a thread of its own, so the driver goes on supervising while
    the command runs; a rotation that fails (a lost race with a re-wrap) is retried and counted."""

    ATTEMPTS = 5

    def __init__(self, ctx: Ctx, tenant: str) -> None:
        self.ctx = ctx
        self.tenant = tenant
        self.version = 0  # the newest version a rotation made
        self.retried: list[str] = []  # why an attempt failed (it was tried again)
        self.failed: list[str] = []  # rotations that never went through
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.join()
        self._thread = threading.Thread(target=self._rotate, name="faults-rotate", daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _rotate(self) -> None:
        for _ in range(self.ATTEMPTS):
            done = self.ctx.fleet.cli("keys", "rotate", "--tenant", self.tenant, expect=None)
            if done.returncode == 0:
                self.version = max(self.version, int(json.loads(done.stdout)["version"]))
                self.ctx.count("key rotations")
                return
            self.ctx.count("key rotations retried")
            self.retried.append(done.stderr.strip()[-300:])
            time.sleep(0.2)
        self.failed.append(f"a rotation of {self.tenant} failed {self.ATTEMPTS} times: {self.retried[-1]}")


def rotation_left(fleet: FaultFleet, tenant: str, version: int) -> str | None:
    """What keeps `tenant`'s rotation to `version` from being finished, from the raw rows (None: every
    run key of the tenant is wrapped under `version`, and no other version is left)."""
    versions = [int(r[0]) for r in fleet.sql("SELECT version FROM tenant_keys WHERE tenant = ?", (tenant,))]
    stale = fleet.sql(
        "SELECT key_version, COUNT(*) FROM run_keys WHERE tenant = ? AND key_version <> ?"
        " GROUP BY key_version",
        (tenant, version),
    )
    if sorted(versions) == [version] and not stale:
        return None
    pending = {int(v): int(n) for v, n in stale}
    return f"key versions {sorted(versions)} (want [{version}]), run keys on older versions {pending}"


def wait_rotated(
    ctx: Ctx, tenant: str, version: int, *, tick: Callable[[], None] | None = None
) -> str | None:
    """Wait (supervising with `tick`) until the rotation to `version` finished; what was left if the
    scenario's deadline came first (the caller flags it as keys_lost), else None."""
    deadline = time.monotonic() + ctx.deadline_s
    left = rotation_left(ctx.fleet, tenant, version)
    while left is not None and time.monotonic() < deadline:
        if tick is not None:
            tick()
        time.sleep(0.1)
        left = rotation_left(ctx.fleet, tenant, version)
    return None if left is None else f"tenant {tenant}'s rotation to v{version} unfinished: {left}"


def check_values(engine: Engine, runs: dict[str, Started], v: Verdict) -> int:
    """Each run's sealed input opens to exactly what it was started with (its snapshot and its
    RunStarted event), and each recorded charge output opens to what the activity produced (it answers
    the amount it was given). Returns how many runs were opened."""
    svc = engine.service
    opened = 0
    for run_id, started in runs.items():
        checker = Principal(started.tenant, "faults-checker", ("viewer",), (), 0, ("read_sensitive",))
        try:
            shown = svc.reveal.run(checker, run_id, channel="faults")
            events = svc.reveal.events(checker, run_id, channel="faults")
        except Exception as exc:
            v.flag("keys_lost", f"{run_id}: {type(exc).__name__}: {exc}")
            continue
        opened += 1
        if shown.input != started.input:
            v.flag("keys_lost", f"{run_id}: input opens to {shown.input!r}, started with {started.input!r}")
        for e in events:
            data = e.data if isinstance(e.data, dict) else {}
            if e.type == "RunStarted" and data.get("input") != started.input:
                v.flag("keys_lost", f"{run_id}: RunStarted input opens to {data.get('input')!r}")
            output = data.get("output")
            if e.type == "ActivitySucceeded" and e.step == "charge":
                given = output.get("amount") if isinstance(output, dict) else output
                if given != started.input["amount"]:
                    v.flag("keys_lost", f"{run_id}: the charge output opens to {given!r}")
    return opened


def check_given(ledger: LedgerReader, runs: dict[str, Started], v: Verdict) -> int:
    """Every charge the downstream applied for one of `runs` (stored or purged since) was sent the
    run's amount in clear: the body it recorded hashes to the one the activity builds from it. Returns
    how many charges were compared."""
    compared = 0
    for effect in ledger.effects():
        started = runs.get(str(effect["run_id"]))
        if started is None or effect["kind"] != "charge":
            continue
        compared += 1
        body = {"run_id": effect["run_id"], "step": effect["step"], "amount": started.input["amount"]}
        if effect["body_sha"] != canonical_sha(body):
            v.flag(
                "keys_lost", f"{effect['run_id']}: the charge was not sent amount {started.input['amount']}"
            )
    return compared
