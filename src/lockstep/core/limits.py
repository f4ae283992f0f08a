"""Every bound that protects one tenant from another, in one place: its default, its setting, its meaning.

A tenant admin is untrusted by every other tenant. What they publish and what their callers send is
bounded in size, depth and cost so that no document, input or expression can crash the server or hold
it for long. Each limit here is named by the tenant setting that changes it (`lockstep tenants set`),
except the server-wide ones, which no tenant may raise: whoever runs the server sets those at start
(`ServerLimits`, below). docs/security.md lists them all.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeAlias

__all__ = [
    "DEFAULT_SERVER_LIMITS",
    "HISTORY_LIMITS",
    "SERVER_LIMITS",
    "TENANT_LIMITS",
    "Limit",
    "LimitSettingError",
    "ServerLimits",
    "Settings",
    "parse_limit_settings",
    "tenant_limit",
]


# A tenant's settings as stored: a positive number for each setting it has (its limits and quotas,
# app/principals/accounts.py lists them); what it does not set takes the default.
Settings: TypeAlias = dict[str, float]


@dataclass(frozen=True)
class Limit:
    name: str
    default: int
    unit: str
    protects: str
    # The largest value a tenant setting may take: raising a bound past it would void the cost analysis
    # that the other limits rely on (e.g. max_list_items bounds every comprehension's cost).
    ceiling: int


# Bounds on what one tenant's callers send and their activities return (per value, checked on entry), and on
# its schedules (checked when one is created or changed).
TENANT_LIMITS: dict[str, Limit] = {
    limit.name: limit
    for limit in (
        Limit("max_input_bytes", 256 * 1024, "bytes", "a run's input, as compact JSON", 8 * 1024 * 1024),
        Limit(
            "max_output_bytes",
            256 * 1024,
            "bytes",
            "one activity result (output, or error code and message), as compact JSON",
            8 * 1024 * 1024,
        ),
        Limit(
            "max_payload_bytes",
            64 * 1024,
            "bytes",
            "any other payload a caller adds to a run's history (comments, operator edits, event payloads)",
            1024 * 1024,
        ),
        Limit("max_json_depth", 32, "levels", "nesting of objects and arrays in any JSON value", 64),
        Limit(
            "max_list_items",
            1000,
            "items",
            "elements of any one array (or members of one object) in an input or output (bounds the cost "
            "of every expression: comprehensions iterate objects too)",
            10_000,
        ),
        # Schedules (core/schedule.py, app/schedules/): each starts runs by itself, again and again.
        Limit("max_schedules", 100, "schedules", "schedules one tenant may have (paused ones count)", 10_000),
        Limit(
            "max_schedule_rate",
            60,
            "slots per hour",
            "how often one schedule may fire: two of its slots are at least 3600 s / this apart (60: once "
            "a minute; 3600: once a second, with a seconds field)",
            3600,
        ),
        Limit(
            "max_catch_up_slots",
            100,
            "slots",
            "missed slots one schedule with catch-up `all` starts after downtime (its catch-up limit)",
            1000,
        ),
        # The shapes of a definition (definition/shapes.py): checked at publish time over the whole
        # shape, so no definition can fan out past them whatever input its runs are started with.
        Limit(
            "max_branch_depth",
            2,
            "levels",
            "parallel and for-each steps nested inside each other in one definition",
            4,
        ),
        Limit(
            "max_items",
            100,
            "items",
            "elements one for-each step runs its body for (a longer list fails the step, saying so)",
            1000,
        ),
        Limit(
            "max_expanded_steps",
            1000,
            "steps",
            "steps one run can execute, each for-each body counted once per item it may get "
            "(publish-time worst case)",
            10_000,
        ),
        # External events (app/events): one sent before any run waits for it is kept this long for the
        # first run that starts waiting; at most this many are kept per tenant (more are refused, 429).
        Limit(
            "event_buffer_ttl",
            3600,
            "seconds",
            "how long an event nobody waits for yet is kept for the first run that starts waiting for it",
            30 * 86_400,
        ),
        Limit(
            "max_buffered_events",
            1000,
            "events",
            "events kept per tenant for runs that do not wait for them yet",
            100_000,
        ),
        Limit(
            "max_child_depth",
            3,
            "levels",
            "runs started by `run` steps of runs started by `run` steps (a child deeper than this fails "
            "its parent's step, saying so)",
            10,
        ),
        Limit(
            "max_active_attempts",
            20,
            "attempts",
            "activity attempts one run can have in flight at once: parallel branches times for-each "
            "concurrency (publish-time worst case)",
            200,
        ),
    )
}

# Server-wide bounds: the same for every tenant, set by whoever runs the server.
SERVER_LIMITS: dict[str, Limit] = {
    limit.name: limit
    for limit in (
        Limit("max_request_bytes", 16 * 1024 * 1024, "bytes", "one HTTP request body (413 above)", 1 << 30),
        Limit("max_definition_bytes", 1024 * 1024, "bytes", "one published definition document", 1 << 24),
        # Prometheus label values chosen by tenants and workers: one tenant's names cannot grow /metrics
        # (and every scraper's memory) without bound; past the bound a value is counted as `other`.
        Limit(
            "max_metric_activities",
            100,
            "label values per tenant",
            "distinct activity names in /metrics (the first ones seen keep their name)",
            10_000,
        ),
        Limit(
            "max_metric_error_codes",
            20,
            "label values per tenant",
            "distinct declared error codes in /metrics (engine codes always pass; undeclared are `other`)",
            1000,
        ),
        Limit(
            "max_metric_definitions",
            20,
            "label values per tenant",
            "distinct definition names in /metrics (the first ones seen keep their name)",
            1000,
        ),
        Limit(
            "max_metric_versions",
            2,
            "label values per definition",
            "versions of one definition in /metrics (the newest ones seen keep their number; older are "
            "`other`, and the series of a version pushed out are dropped)",
            100,
        ),
        Limit(
            "max_metric_steps",
            50,
            "label values per definition",
            "distinct step ids of one definition in /metrics (the first ones seen keep their name)",
            10_000,
        ),
        # Checked on the raw bytes before anything parses them: the ceiling of max_json_depth plus the
        # two levels of a request's own fields (e.g. {"inputs": [<input>]}); each tenant's own
        # max_json_depth is checked after.
        Limit(
            "max_request_depth",
            TENANT_LIMITS["max_json_depth"].ceiling + 2,
            "levels",
            "nesting of a JSON request body (422 above)",
            200,
        ),
        # Login throttling (principals/credentials.py, core/throttle.py): protects every user's password from
        # guessing and the server's CPU from scrypt floods; counted in the database, so it holds across
        # server processes. A throttled attempt gets 429 with Retry-After and costs no password check.
        Limit(
            "login_attempts_per_user",
            5,
            "attempts",
            "password logins to one user per window before a lockout (a success clears the count)",
            1000,
        ),
        Limit(
            "login_attempts_per_address",
            20,
            "attempts",
            "failed password logins from one client address (IPv6: its /64) per window before a lockout",
            100_000,
        ),
        Limit(
            "login_window_seconds", 15 * 60, "seconds", "the window the login attempts are counted in", 86_400
        ),
        # At least the window: then any window-long interval admits at most twice the per-window limit.
        Limit(
            "login_lockout_seconds",
            15 * 60,
            "seconds",
            "the first lockout; each further one in a row lasts twice as long",
            86_400,
        ),
        Limit(
            "login_lockout_max_seconds",
            4 * 3600,
            "seconds",
            "the longest lockout (bounds how long failing on purpose locks a user out)",
            7 * 86_400,
        ),
        # Password policy (principals/credentials.py): a password set with `lockstep users set-password`.
        Limit("min_password_chars", 12, "characters", "a password's length, at least", 1024),
        Limit(
            "min_password_score",
            3,
            "zxcvbn score 0-4",
            "a password's strength against lists of common passwords, words, names and patterns "
            "(3: about 10^8 guesses or more)",
            4,
        ),
        # Expressions (core/exprcheck.py): the CEL library recurses per tree level and segfaults past
        # ~15,000 levels (~1,000 on a 512 KiB stack); the ceilings are what stored definitions get.
        Limit("max_expression_length", 4096, "characters", "one CEL expression", 16_384),
        Limit("max_expression_nesting", 32, "levels", "brackets ( [ { nested in one expression", 48),
        Limit(
            "max_expression_depth",
            200,
            "levels",
            "the tree of one expression: each operator of a chain, member access and bracket",
            2000,
        ),
        Limit("max_macro_nesting", 2, "levels", "comprehensions (exists, all, map...) inside others", 8),
        Limit(
            "max_expression_cost",
            500_000,
            "units of ~60 ns",
            "the worst case of one expression, or of one template's expressions together, on inputs "
            "at the tenant's max_list_items and max_input_bytes (500,000: 30 ms idle, 60 ms loaded)",
            8_000_000,
        ),
        # Sensitive data (definition/sensitivity.py): every declared pointer is checked against the
        # input schema and every template against every pointer at publish time.
        Limit(
            "max_sensitive_pointers",
            64,
            "pointers",
            "sensitive places one definition declares (sensitive_input, output_sensitive, "
            "x-lockstep-sensitive), together",
            1000,
        ),
        Limit("max_pointer_length", 256, "characters", "one JSON pointer in a definition", 4096),
        # YAML (documents.py): counted while composing, before any tree is built.
        Limit(
            "max_yaml_aliases", 100, "aliases", "alias references (*name) in one definition document", 10_000
        ),
        Limit(
            "max_yaml_nodes", 50_000, "nodes", "scalars, sequences and mappings in one document", 1_000_000
        ),
        # Backpressure (app/backlog.py): starts are refused (429, Retry-After) while the activity tasks
        # waiting for a worker are this many, of the starting tenant or of all together; a tenant's
        # bound is its share, so filling its own backlog refuses only its own starts.
        Limit(
            "max_tenant_backlog",
            100_000,
            "tasks",
            "activity tasks of one tenant ready but not yet taken by a worker; its starts beyond it get 429",
            100_000_000,
        ),
        Limit(
            "max_backlog",
            1_000_000,
            "tasks",
            "activity tasks of all tenants ready but not yet taken by a worker; any start beyond it gets 429",
            100_000_000,
        ),
        Limit(
            "backlog_refresh_ms",
            500,
            "milliseconds",
            "how old the backlog count a start is checked against may be (each server process counts the "
            "ready tasks once per interval, plus the starts it admitted since)",
            60_000,
        ),
        # Egress (core/egress.py): the one switch that lets `http` steps reach loopback, for a server
        # whose operator runs test receivers on the same machine. 0 (off) is the default; a tenant's
        # policy must also say allow_loopback, and no tenant can set this.
        Limit(
            "egress_allow_loopback",
            0,
            "0 or 1",
            "1: a tenant egress policy with allow_loopback may reach 127.0.0.0/8 and ::1 (tests only)",
            1,
        ),
    )
}


def tenant_limit(settings: Mapping[str, object], name: str) -> int:
    """The tenant's value of limit `name`: its setting (capped at the ceiling), else the default."""
    limit = TENANT_LIMITS[name]
    value = settings.get(name)
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return min(int(value), limit.ceiling)
    return limit.default


# Bounds on events that people and workers can make a run record again and again. Without them an
# approver clicking "Review", an operator re-sending links or a worker replaying a stale report could grow
# a run's history until the tenant's max_history_events cancels it. Not tenant settings, and their
# ceiling is their default (the server may only lower them): they bound evidence, not work, and every
# count above them is refused (or, for stale reports, answered as ignored without being appended),
# never silently dropped.
HISTORY_LIMITS: dict[str, Limit] = {
    limit.name: limit
    for limit in (
        Limit(
            "max_ignored_results_per_attempt",
            3,
            "events",
            "ResultIgnored events per task id; later stale reports are answered as ignored, not appended",
            3,
        ),
        Limit(
            "max_ignored_results_per_run",
            50,
            "events",
            "ResultIgnored events per run, over all task ids (made-up task ids included)",
            50,
        ),
        Limit("max_links_per_approver", 5, "links", "approval links minted per approver per request", 5),
        Limit("max_approver_replacements", 10, "events", "ApproverReplaced events per approval request", 10),
        Limit("max_repair_proposals", 20, "proposals", "four-eyes repair proposals per run", 20),
    )
}


# --- the server-wide setting: `--limit NAME=VALUE` / LOCKSTEP_LIMITS / Engine.open(server_limits=...) ---


class LimitSettingError(ValueError):
    """A server-wide limit setting that names no limit or is out of its range; one line, says which."""


class ServerLimits(Mapping[str, int]):
    """The values of every SERVER_LIMITS and HISTORY_LIMITS limit for one server process: the defaults,
    with the operator's overrides. Built once at startup and passed down (never a module global), so the
    core decides with the values it is given."""

    def __init__(self, overrides: Mapping[str, int] | None = None) -> None:
        values = {name: limit.default for name, limit in _SETTABLE.items()}
        for name, value in (overrides or {}).items():
            values[name] = _checked(name, value)
        if values["login_lockout_seconds"] < values["login_window_seconds"]:
            raise LimitSettingError(
                f"login_lockout_seconds={values['login_lockout_seconds']} is shorter than "
                f"login_window_seconds={values['login_window_seconds']}: a lockout must last at least "
                "the window (else attempts per window are no longer bounded); raise it or lower the window"
            )
        self._values = MappingProxyType(values)

    def __getitem__(self, name: str) -> int:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        changed = {k: v for k, v in self._values.items() if v != _SETTABLE[k].default}
        return f"ServerLimits({changed})"

    def overrides(self) -> dict[str, int]:
        """The values that differ from their defaults."""
        return {k: v for k, v in self._values.items() if v != _SETTABLE[k].default}


_SETTABLE: dict[str, Limit] = {**SERVER_LIMITS, **HISTORY_LIMITS}


def _range(limit: Limit) -> str:
    return f"a whole number from 1 to {limit.ceiling:_} (default {limit.default:_}, in {limit.unit})"


def _named(name: str) -> Limit:
    limit = _SETTABLE.get(name)
    if limit is not None:
        return limit
    if name in TENANT_LIMITS:
        raise LimitSettingError(
            f"{name} is a tenant limit, not a server-wide one: set it with "
            f"`lockstep tenants set TENANT --{name.replace('_', '-')} N`"
        )
    close = difflib.get_close_matches(name, _SETTABLE, n=1)
    hint = f"did you mean {close[0]}?" if close else "docs/security.md lists them (## Limits)"
    raise LimitSettingError(f"unknown server-wide limit {name!r}: {hint}")


def _checked(name: str, value: object) -> int:
    limit = _named(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit.ceiling:
        raise LimitSettingError(f"{name}={value!r} is out of range: {name} is {_range(limit)}")
    return value


def parse_limit_settings(items: Iterable[str]) -> dict[str, int]:
    """`NAME=VALUE` settings (each item may hold several, separated by commas) as a mapping, each
    checked; a later setting of a name wins. Values may use `_` between digits (33_554_432)."""
    out: dict[str, int] = {}
    for item in items:
        for part in item.split(","):
            text = part.strip()
            if not text:
                continue
            name, sep, raw = (x.strip() for x in text.partition("="))
            if not sep or not name:
                raise LimitSettingError(
                    f"limit setting {text!r} is not NAME=VALUE (e.g. max_request_bytes=33554432)"
                )
            limit = _named(name)
            try:
                value = int(raw)
            except ValueError:
                raise LimitSettingError(
                    f"{name}={raw!r} is not a whole number: {name} is {_range(limit)}"
                ) from None
            out[name] = _checked(name, value)
    return out


DEFAULT_SERVER_LIMITS = ServerLimits()
