"""Sealed values as stored and shown: the marker syntax, JSON-pointer access, and redaction (pure).

A sensitive JSON value is stored as a *marker*, the JSON object `{"$sealed": "ls1.<label>.<payload>"}`
with exactly that one key:

- `label` names the field the value was sealed for: the event type followed by the RFC 6901 pointer of
  the value inside that event's data (`RunStarted/input/card`; a key holding `/` or `~` is escaped as
  the RFC says, `~1` and `~0`). `%` and `.` are then percent-encoded (`%25`, `%2E`), so a label never
  holds a `.` and the three parts of a marker split unambiguously.
- `payload` is base64url (no padding) of the 96-bit nonce followed by the AES-256-GCM ciphertext and
  tag, under the run's data key, with associated data `ls1|<tenant>|<run id>|<label>` (app/keys).

Markers are plain JSON, so the core folds them like any other value, and the hash chain covers them.
Read models replace each marker with a *redaction marker*, `{"$redacted": "sensitive", "readable_by":
"read_sensitive"}`, or `"forgotten"` once the run's key was destroyed. No cryptography here: that is
the application layer's (app/keys), which alone holds keys.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable

from .canonical import JSONValue
from .pointer import get_at, replace_at

__all__ = [
    "FORGOTTEN",
    "READ_GRANT",
    "REDACTED",
    "SEALED",
    "SENSITIVE",
    "VERSION",
    "contains_marker",
    "label_of",
    "make_marker",
    "map_markers",
    "marker_parts",
    "maybe_sealed",
    "pointer_get",
    "pointer_set",
    "redact",
    "redaction",
    "text_of",
]

SEALED = "$sealed"
REDACTED = "$redacted"
VERSION = "ls1"
# The per-user grant that may read sealed values (the redaction marker names it).
READ_GRANT = "read_sensitive"
SENSITIVE = "sensitive"
FORGOTTEN = "forgotten"
# What a stored text holds iff it may hold a marker: cheaper than parsing (a C-speed substring test).
_NEEDLE = '"' + SEALED + '"'


def maybe_sealed(text: str | bytes) -> bool:
    """Whether stored JSON text may hold a marker (never false when it does)."""
    if isinstance(text, bytes):
        return _NEEDLE.encode() in text
    return _NEEDLE in text


def label_of(event_type: str, pointer: str) -> str:
    """The label of the value at `pointer` (RFC 6901) in an event of `event_type`'s data."""
    if not pointer.startswith("/"):
        raise ValueError(f"a sealed field's pointer must start with '/', got {pointer!r}")
    return (event_type + pointer).replace("%", "%25").replace(".", "%2E")


def make_marker(label: str, payload: bytes) -> dict[str, str]:
    text = base64.urlsafe_b64encode(payload).rstrip(b"=").decode()
    return {SEALED: f"{VERSION}.{label}.{text}"}


def marker_parts(value: JSONValue) -> tuple[str, bytes] | None:
    """(label, payload) of a marker; None for any other value. A `$sealed` object that is not a
    well-formed marker raises ValueError: it cannot be opened, and must not pass for a clear value."""
    if type(value) is not dict or SEALED not in value:
        return None
    text = value[SEALED]
    parts = text.split(".") if isinstance(text, str) and len(value) == 1 else []
    if len(parts) != 3 or parts[0] != VERSION or not parts[1]:
        raise ValueError(f"malformed sealed value {str(text)[:40]!r}: not {VERSION}.<label>.<payload>")
    try:
        padded = parts[2] + "=" * (-len(parts[2]) % 4)
        payload = base64.b64decode(padded, altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"malformed sealed value of {parts[1]}: its payload is not base64url") from None
    return parts[1], payload


def map_markers(value: JSONValue, fn: Callable[[dict[str, JSONValue]], JSONValue]) -> JSONValue:
    """`value` with every marker replaced by `fn(marker)`; containers without one are returned as they
    are (shared, not copied), so a value with no marker costs one walk and no allocation."""
    if type(value) is dict:
        if SEALED in value:
            return fn(value)
        out: dict[str, JSONValue] | None = None
        for k, v in value.items():
            if type(v) is dict or type(v) is list:
                nv = map_markers(v, fn)
                if nv is not v:
                    if out is None:
                        out = dict(value)
                    out[k] = nv
        return value if out is None else out
    if type(value) is list:
        items: list[JSONValue] | None = None
        for i, v in enumerate(value):
            if type(v) is dict or type(v) is list:
                nv = map_markers(v, fn)
                if nv is not v:
                    if items is None:
                        items = list(value)
                    items[i] = nv
        return value if items is None else items
    return value


def contains_marker(value: JSONValue) -> bool:
    found = False

    def seen(m: dict[str, JSONValue]) -> JSONValue:
        nonlocal found
        found = True
        return m

    map_markers(value, seen)
    return found


def redaction(kind: str = SENSITIVE) -> dict[str, str | None]:
    """What a read model shows for a sealed value: that one exists, and who may read it (nobody, once
    its key is destroyed: `readable_by` null)."""
    return {REDACTED: kind, "readable_by": None if kind == FORGOTTEN else READ_GRANT}


def text_of(value: JSONValue) -> str:
    """A value as a sentence shows it: a redaction marker as `[sensitive]` (or `[forgotten]`)."""
    if type(value) is dict and REDACTED in value:
        return f"[{value[REDACTED]}]"
    return str(value)


def redact(value: JSONValue, kind: str = SENSITIVE) -> JSONValue:
    """`value` with every marker replaced by the redaction marker of `kind`."""
    shown = redaction(kind)
    return map_markers(value, lambda _m: dict(shown))


def pointer_get(doc: JSONValue, pointer: str) -> tuple[bool, JSONValue]:
    """(found, value) at an RFC 6901 pointer ("/a/0/b") inside `doc` (core/pointer.py walks it)."""
    try:
        return True, get_at(doc, pointer)
    except KeyError:
        return False, None


def pointer_set(doc: JSONValue, pointer: str, value: JSONValue) -> JSONValue:
    """A copy of `doc` with `value` at `pointer` (which must exist: KeyError otherwise): only the
    containers on the path are copied; everything else is shared."""
    return replace_at(doc, pointer, value)
