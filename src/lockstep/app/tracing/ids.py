"""The identities of a run's trace: W3C traceparent parsing and formatting, the trace context a start
records, and the span ids every process derives from a run's state alone.

A run's trace context is stored with the run (RunStarted.trace: the traceparent of its root span, and
trace_parent: the caller's span id when the run joined the caller's trace). Every other span id is
derived from (trace id, run id, what the span is, the seq that identifies it), so any process, after
any crash, emits a span with the same ids and the right parent without asking anyone, and a span
emitted twice (a redelivered commit, `lockstep trace --export`) is the same span. A run started
without a trace context (before tracing existed, or with tracing off) gets a trace id derived from
its tenant and run id the same way.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from ...core.state import RunState

__all__ = [
    "SAMPLED",
    "RunTrace",
    "SpanRef",
    "attempt_traceparent",
    "derived_id",
    "format_traceparent",
    "new_trace",
    "parse_traceparent",
    "run_trace",
]

SAMPLED = 0x01
# version-traceid-parentid-flags (W3C Trace Context, level 1); a later version may append fields.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\s]*)?")
_MAX_HEADER = 512  # a traceparent is 55 characters; anything much longer is not one


@dataclass(frozen=True)
class SpanRef:
    """One span's place in a trace: what a traceparent says."""

    trace_id: int
    span_id: int
    flags: int = SAMPLED

    @property
    def sampled(self) -> bool:
        return bool(self.flags & SAMPLED)


def parse_traceparent(text: str | None) -> SpanRef | None:
    """The span a W3C `traceparent` names, or None when it is absent or invalid (the spec's rule: an
    invalid header is ignored and the receiver starts a new trace)."""
    if not text or len(text) > _MAX_HEADER:
        return None
    m = _TRACEPARENT.fullmatch(text.strip())
    if m is None:
        return None
    version, trace, span, flags, rest = m.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, span_id = int(trace, 16), int(span, 16)
    if trace_id == 0 or span_id == 0:
        return None
    return SpanRef(trace_id, span_id, int(flags, 16))


def format_traceparent(ref: SpanRef) -> str:
    return f"00-{ref.trace_id:032x}-{ref.span_id:016x}-{ref.flags & 0xFF:02x}"


def new_trace(parent: SpanRef | None, sampled: bool = True) -> tuple[str, str | None]:
    """(RunStarted.trace, RunStarted.trace_parent) for a run starting now: in the caller's trace (its
    trace id and sampling decision) when `parent` is given, else in a new one. The root span id is
    random: it names this run's root span wherever the trace is read."""
    root = _nonzero(secrets.randbits(64))
    if parent is not None:
        ref = SpanRef(parent.trace_id, root, parent.flags & SAMPLED)
        return format_traceparent(ref), f"{parent.span_id:016x}"
    ref = SpanRef(_nonzero(secrets.randbits(128)), root, SAMPLED if sampled else 0)
    return format_traceparent(ref), None


@dataclass(frozen=True)
class RunTrace:
    """A run's trace: its id, its root span, the root's parent (the caller's span) and the flags."""

    trace_id: int
    root: int
    parent: int | None
    flags: int
    run_id: str

    def span(self, kind: str, *key: object) -> int:
        """The id of one span of this run (see the module docstring)."""
        return derived_id(f"{self.trace_id:032x}", self.run_id, kind, *key)

    def ref(self, span_id: int) -> SpanRef:
        return SpanRef(self.trace_id, span_id, self.flags)


def run_trace(state: RunState) -> RunTrace:
    """The trace of `state`'s run: as stored at its start, or derived from its tenant and id."""
    stored = parse_traceparent(state.trace)
    if stored is not None:
        parent = int(state.trace_parent, 16) if state.trace_parent else None
        return RunTrace(stored.trace_id, stored.span_id, parent or None, stored.flags, state.run_id)
    digest = hashlib.sha256(f"lockstep-trace\n{state.tenant}\n{state.run_id}".encode()).digest()
    trace_id = _nonzero(int.from_bytes(digest[:16], "big"))
    root = derived_id(f"{trace_id:032x}", state.run_id, "run")
    return RunTrace(trace_id, root, None, SAMPLED, state.run_id)


def derived_id(*parts: object) -> int:
    """A non-zero 64-bit span id from `parts` (sha256: no two spans of a run share one in practice)."""
    text = "\n".join(str(p) for p in parts)
    return _nonzero(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


def attempt_traceparent(state: RunState, task_id: str, fencing: int) -> str:
    """The traceparent of the span of an attempt leased with `fencing`: the activity's spans' parent."""
    trace = run_trace(state)
    return format_traceparent(trace.ref(trace.span("attempt", task_id, fencing)))


def _nonzero(n: int) -> int:
    return n or 1
