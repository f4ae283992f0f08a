"""The OpenAPI document of the API, without a server: `python -m lockstep.api.document [FILE]` writes
it (clients/typescript/openapi.json is this output; its types are generated from it). The document does
not depend on the database's contents, so it is built over a throwaway SQLite file."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..engine import Engine
from .app import create_app

__all__ = ["document", "document_text", "main"]


def document() -> dict[str, Any]:
    """The document the app serves at /openapi.json."""
    with tempfile.TemporaryDirectory() as d, Engine.open(f"sqlite:///{d}/doc.sqlite") as e:
        return create_app(e.service, ui=False).openapi()


def document_text() -> str:
    """The document as committed: indented JSON, keys in the app's order, a final newline."""
    return json.dumps(document(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    text = document_text()
    if args:
        Path(args[0]).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
