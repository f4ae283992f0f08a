"""Reading the user's input: JSON given inline or as @file, and durations (`10s`, `1d`). Bad input is an
InvalidInput naming the option, which main() prints as one line."""

from __future__ import annotations

import json
from datetime import timedelta

from ..core.canonical import JSONValue
from ..core.timeutil import parse_duration
from ..errors import InvalidInput

__all__ = ["duration", "parse_json", "seconds"]


def parse_json(text: str | None, what: str) -> JSONValue:
    if text is None:
        return None
    if text.startswith("@"):
        try:
            with open(text[1:]) as fh:
                text = fh.read()
        except OSError as exc:
            raise InvalidInput(f"{what}: cannot read {text[1:]}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None


def seconds(text: str | None, what: str) -> float | None:
    return duration(text, what).total_seconds() if text else None


def duration(text: str, what: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise InvalidInput(f"{what}: {exc}") from None
