"""Load named SQL blocks (`-- name: NAME`) from a .sql file shipped in the package."""

from __future__ import annotations

import re
from importlib import resources

__all__ = ["load_queries"]

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def load_queries(package: str, filename: str) -> dict[str, str]:
    text = resources.files(package).joinpath(filename).read_text()
    parts = _NAME.split(text)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}
