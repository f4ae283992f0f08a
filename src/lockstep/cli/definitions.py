"""Definitions: publish one, list them."""

from __future__ import annotations

import os

import click
from rich.table import Table

from ..errors import InvalidInput
from .context import Ctx, pass_ctx
from .render import err, out, print_json

__all__ = ["COMMANDS"]


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@pass_ctx
def publish(c: Ctx, file: str) -> None:
    """Publish a definition (YAML or JSON). Identical content returns the existing version.

    Prints the version as JSON; what was accepted but should be fixed goes to stderr, one
    `warning: PATH: MESSAGE` line each."""
    if not os.path.isfile(file):
        raise InvalidInput(f"definition file {file} does not exist")
    with open(file) as fh:
        text = fh.read()
    result = c.engine.publish(text if "\n" in text else text + "\n", tenant=c.tenant)
    warnings = result.pop("warnings", [])
    for w in warnings if isinstance(warnings, list) else []:
        if isinstance(w, dict):
            err.print(f"warning: {w.get('path')}: {w.get('message')}")
    print_json(result)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def definitions(c: Ctx, as_json: bool) -> None:
    """List published definitions and their versions."""
    rows = c.engine.service.definitions(c.tenant)
    if as_json:
        print_json(rows)
        return
    t = Table("name", "version", "digest", "published")
    for r in rows:
        t.add_row(r.name, str(r.version), r.digest[:19] + "…", r.created_at)
    out.print(t)


# The commands of this group, attached to the root group in root.py.
COMMANDS: tuple[click.Command, ...] = (publish, definitions)
