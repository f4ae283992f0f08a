"""Canonical JSON and content digests: the identity of definitions and the links of the hash chain."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_json", "digest"]


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 kept: equal documents give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def digest(value: Any) -> str:
    """`sha256:<hex>` of the canonical JSON of value."""
    return "sha256:" + hashlib.sha256(canonical_json(value).encode()).hexdigest()
