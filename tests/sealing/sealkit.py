"""What the sealing tests share: distinctive sensitive values, a definition that carries them through
every kind of field (run input, activity input and output, approval details, an activity's error
message), raw scans of what is stored. PAY declares its sensitive fields itself (`x-lockstep-sensitive`
on the card, `output_sensitive` on the charge); the tests check what is stored and shown, never how it
was classified (tests/core/test_sensitive_*.py do that).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from lockstep.testing import pg_dump

TENANT = "acme"
CARD = "4111-WOMBAT-0017"
TOKEN = "TOK-QUOKKA-5521"  # noqa: S105 - a made-up payment token
ERROR_SECRET = "ERR-NUMBAT-3307"  # noqa: S105 - a made-up bank reference
# Every sensitive value a run of PAY stores: none may be found in clear anywhere.
SECRETS = (CARD, TOKEN, ERROR_SECRET)
# A value that is NOT sensitive: a raw scan must find it (so a scan that reads nothing cannot pass).
CLEAR_REF = "REF-PLATYPUS-8080"

PAY: dict[str, Any] = {
    "name": "pay",
    "input_schema": {
        "type": "object",
        "required": ["card", "ref"],
        "properties": {"card": {"type": "string", "x-lockstep-sensitive": True}, "ref": {"type": "string"}},
    },
    "steps": [
        {
            "id": "charge",
            "activity": "card.charge",
            "input": {"card": "${input.card}", "ref": "${input.ref}"},
            "output_sensitive": ["/token"],
            "timeout": "10s",
        },
        {
            "id": "approve",
            "approval": {
                "approvers": {"users": ["alice"]},
                "quorum": 1,
                "timeout": "1h",
                "on_timeout": "reject",
                "on_reject": "fail",
                "details": "Charge card ${input.card} for order ${input.ref}",
            },
        },
        {
            "id": "receipt",
            "activity": "card.receipt",
            "input": {"token": "${steps.charge.output.token}", "ref": "${input.ref}"},
            "timeout": "10s",
            "retry": {"max_attempts": 1},
        },
    ],
}
# A definition of the same tenant that declares nothing sensitive (the classification says None).
PLAIN: dict[str, Any] = {
    "name": "plain",
    "steps": [
        {"id": "charge", "activity": "card.charge", "input": {"card": "${input.card}"}, "timeout": "10s"}
    ],
}

# Runs on their own to the end: the card's token, a short durable timer, then a confirmation that
# answers the token again (the run's output): for rotation while runs proceed.
PAY_AUTO: dict[str, Any] = {
    "name": "pay-auto",
    "input_schema": PAY["input_schema"],
    "steps": [
        {
            "id": "charge",
            "activity": "card.charge",
            "input": {"card": "${input.card}", "ref": "${input.ref}"},
            "timeout": "10s",
        },
        {"id": "settle", "wait": "50ms"},
        {
            "id": "confirm",
            "activity": "card.confirm",
            "input": {"token": "${steps.charge.output.token}", "ref": "${input.ref}"},
            "timeout": "10s",
        },
    ],
    "output": {"token": "${steps.confirm.output.token}", "ref": "${input.ref}"},
}


# The inputs the activities received (this process's workers), to check they were given clear values.
SEEN: list[dict[str, Any]] = []


def charge(data: dict[str, Any]) -> dict[str, Any]:
    """The payment provider: answers a token for the card (the card itself is what it needs in clear)."""
    SEEN.append(data)
    return {"token": TOKEN if data["card"] == CARD else f"TOK-{data['card']}", "ref": data.get("ref")}


def confirm(data: dict[str, Any]) -> dict[str, Any]:
    SEEN.append(data)
    return {"token": data["token"], "ref": data["ref"]}


def receipt(data: dict[str, Any]) -> dict[str, Any]:
    from lockstep.runtime.activity import ActivityError

    SEEN.append(data)
    raise ActivityError("Declined", f"the bank says {ERROR_SECRET} for {data['ref']}", retryable=False)


# --- raw scans of what is stored -----------------------------------------------------------------------
def sqlite_files(url: str) -> bytes:
    """The SQLite database file and its write-ahead log, as they are on disk right now."""
    path = Path(url[len("sqlite:///") :])
    out = path.read_bytes()
    for suffix in ("-wal", "-journal"):
        extra = path.with_name(path.name + suffix)
        if extra.exists():
            out += extra.read_bytes()
    return out


def checkpoint(url: str) -> None:
    """Fold the WAL into the database file (then the file alone holds everything)."""
    conn = sqlite3.connect(url[len("sqlite:///") :], timeout=10)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def stored_bytes(url: str) -> bytes:
    return sqlite_files(url) if url.startswith("sqlite:") else pg_dump(url)


def assert_sealed_at_rest(blob: bytes, where: str) -> None:
    """No sensitive value in `blob` in clear, and the clear control value present (the scan is real)."""
    assert CLEAR_REF.encode() in blob, f"{where}: the clear control value is missing: the scan read nothing"
    found = [s for s in SECRETS if s.encode() in blob]
    assert not found, f"{where} holds {found} in clear"
