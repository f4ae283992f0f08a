"""Canonical JSON and content digests: the identity of definitions and the links of the hash chain; and
the names of the JSON the engine passes on without reading into it (JSONValue, JSONObject)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, TypeAlias

import orjson

__all__ = ["JSONObject", "JSONValue", "canonical_json", "compact_json", "digest", "parse_json"]

# A JSON value as a tenant, a caller or a worker gave it: run inputs and outputs, activity inputs and
# outputs, values in definitions. The engine stores, hashes, measures and shows it, and checks it at the
# edges at run time (`digest`: plain JSON; core/shape.py: the tenant's bounds); what reads into it (CEL,
# jsonschema, templates) is typed by its library. Any rather than a recursive union: callers pass
# `dict[str, int]` and the like, which an invariant `dict[str, JSONValue]` would refuse.
JSONValue: TypeAlias = Any
# A JSON object of that kind (a published document, a run's recorded error, a view as plain JSON).
JSONObject: TypeAlias = dict[str, JSONValue]

# orjson reads integers beyond 64 bits as floats (silently losing digits): text with a run of 19 or
# more digits anywhere (a false alarm inside a string is harmless) goes to the stdlib parser.
_LONG_DIGITS = re.compile(r"[0-9]{19}")


def canonical_json(value: object) -> str:
    """Sorted keys, no whitespace, UTF-8 kept: equal documents give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def digest(value: object) -> str:
    """`sha256:<hex>` of the canonical JSON of value."""
    return "sha256:" + hashlib.sha256(canonical_json(value).encode()).hexdigest()


def compact_json(value: object) -> str:
    """JSON for storage, in any key order (hashes and identities use canonical_json): orjson, ~15x
    faster, or the stdlib where orjson refuses (integers beyond 64 bits, lone surrogates, non-string
    keys), so both give the same values back."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return canonical_json(value)


def parse_json(text: str | bytes) -> JSONValue:
    """The inverse of compact_json (and of canonical_json), exact for integers of any size."""
    if _LONG_DIGITS.search(text if isinstance(text, str) else text.decode()) is None:
        return orjson.loads(text)
    return json.loads(text)
