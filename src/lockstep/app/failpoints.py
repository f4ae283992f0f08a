"""Fail points: named places in the workers and the service where a fault-injection run can crash,
freeze or misbehave on purpose, so a fault lands at an exact moment (after the downstream effect but
before the report; inside the completion commit) instead of wherever a timer happens to hit.

They are inert unless the process starts with LOCKSTEP_FAILPOINTS set; the fault suite
(`python -m lab.faults`) sets it on the processes it launches. The spec is a list of
`point=action[@n]` separated by `;`:

- `kill`: SIGKILL this process (nothing runs after it: no cleanup, no report, no commit);
- `stop`: SIGSTOP this process (the suite resumes it with SIGCONT, e.g. after its leases expired);
- `hold`: block this thread until the suite creates the release file `<log>.release.<pid>.<hit>` (it
  freezes the whole process meanwhile, at a moment no other thread holds a database lock);
- `sleep:MS`: pause this thread;
- `on`: turn on a behaviour switch the code asks about with `enabled(point)`.

`@n` fires only on the n-th hit of the point in this process (the suite draws n from its seed); without
it, every hit fires. Each firing appends a line to the file in LOCKSTEP_FAILPOINTS_LOG, written before
the action, so the suite knows where each process died.

The `unsafe.*` switches turn off a safety mechanism. They exist to prove the fault checker can fail
(a deliberately broken build must be caught); a process that has one prints a warning at start-up. What
a switch does instead of the safe thing is here too (`without_fencing`), beside the switch.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass, replace

from ..core.commands import ReportFailure, ReportSuccess
from ..core.lanes import attempts
from ..core.state import RunState

__all__ = ["ENV", "LOG_ENV", "SPEC_ERROR", "active_spec", "enabled", "hit", "parse", "without_fencing"]

ENV = "LOCKSTEP_FAILPOINTS"
LOG_ENV = "LOCKSTEP_FAILPOINTS_LOG"
ACTIONS = ("kill", "stop", "hold", "sleep", "on")
HOLD_LIMIT_S = 120.0


@dataclass
class Rule:
    action: str
    arg: int = 0
    nth: int | None = None
    hits: int = 0


def parse(spec: str) -> dict[str, Rule]:
    """Parse a LOCKSTEP_FAILPOINTS value; a malformed one raises ValueError naming the bad part."""
    rules: dict[str, Rule] = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        point, sep, action = part.partition("=")
        if not sep or not point:
            raise ValueError(f"{ENV}: {part!r} is not point=action[@n]")
        action, _, nth = action.partition("@")
        name, _, arg = action.partition(":")
        if name not in ACTIONS:
            raise ValueError(f"{ENV}: unknown action {name!r} in {part!r}; use one of {', '.join(ACTIONS)}")
        try:
            rules[point] = Rule(name, int(arg or 0), int(nth) if nth else None)
        except ValueError:
            raise ValueError(f"{ENV}: {part!r} needs integers after ':' and '@'") from None
    return rules


try:
    _RULES = parse(os.environ.get(ENV, ""))
    SPEC_ERROR: str | None = None
except ValueError as exc:  # reported by the CLI as one clear line; the process then stops
    _RULES, SPEC_ERROR = {}, str(exc)
_LOCK = threading.Lock()


def active_spec() -> str:
    """The spec this process runs with ("" when fail points are off)."""
    return os.environ.get(ENV, "") if _RULES else ""


def _due(point: str, actions: tuple[str, ...]) -> Rule | None:
    rule = _RULES.get(point)
    if rule is None or rule.action not in actions:
        return None
    with _LOCK:
        rule.hits += 1
        if rule.nth is not None and rule.hits != rule.nth:
            return None
    return rule


def _record(point: str, rule: Rule, context: dict[str, object]) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    line = json.dumps(
        {
            "at": time.time(),
            "pid": os.getpid(),
            "point": point,
            "action": rule.action,
            "hit": rule.hits,
            **context,
        }
    )
    # O_APPEND + one write: lines from several processes never interleave; fsync so a kill keeps it.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def hit(point: str, **context: object) -> None:
    """Pass fail point `point`: crash, freeze or pause here if the spec says so; else do nothing."""
    if not _RULES:
        return
    rule = _due(point, ("kill", "stop", "hold", "sleep"))
    if rule is None:
        return
    _record(point, rule, context)
    if rule.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif rule.action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif rule.action == "hold":
        release = f"{os.environ.get(LOG_ENV, '')}.release.{os.getpid()}.{rule.hits}"
        deadline = time.monotonic() + HOLD_LIMIT_S  # never hang forever if the suite is gone
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.01)
    else:
        time.sleep(rule.arg / 1000)


def enabled(point: str, **context: object) -> bool:
    """Whether behaviour switch `point` is on for this hit (always False unless the spec names it)."""
    if not _RULES:
        return False
    rule = _due(point, ("on",))
    if rule is None:
        return False
    _record(point, rule, context)
    return True


def without_fencing(state: RunState, command: ReportSuccess | ReportFailure) -> ReportSuccess | ReportFailure:
    """The deliberately broken build of switch unsafe.no_fencing: the report applies to whatever attempt
    is current, as an engine without fencing tokens would. Only the fault suite uses it, to prove its
    checker catches what fencing prevents."""
    active = state.active or next((a for a in attempts(state) if a.fencing is not None), None)
    if active is None or active.fencing is None:
        return command
    return replace(command, task_id=active.task_id, attempt=active.attempt, fencing=active.fencing)
