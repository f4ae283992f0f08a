"""Canonical JSON and content digests: the identity of definitions and the links of the hash chain."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import orjson

__all__ = ["canonical_json", "compact_json", "digest", "parse_json"]

# orjson reads integers beyond 64 bits as floats (silently losing digits): text with a run of 19 or
# more digits anywhere (a false alarm inside a string is harmless) goes to the stdlib parser.
_LONG_DIGITS = re.compile(r"[0-9]{19}")


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 kept: equal documents give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def digest(value: Any) -> str:
    """`sha256:<hex>` of the canonical JSON of value."""
    return "sha256:" + hashlib.sha256(canonical_json(value).encode()).hexdigest()


def compact_json(value: Any) -> str:
    """JSON for storage, in any key order (hashes and identities use canonical_json): orjson, ~15x
    faster, or the stdlib where orjson refuses (integers beyond 64 bits, lone surrogates, non-string
    keys), so both give the same values back."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return canonical_json(value)


def parse_json(text: str | bytes) -> Any:
    """The inverse of compact_json (and of canonical_json), exact for integers of any size."""
    if _LONG_DIGITS.search(text if isinstance(text, str) else text.decode()) is None:
        return orjson.loads(text)
    return json.loads(text)
