"""What the root group's options and run arguments mean on every command.

`lockstep runs --db X` (global options after the command, as git and kubectl users type them) works
because each command also accepts --db, --tenant, --key-file and --limit, unless it has an option of
that name itself (`users create --tenant`): given there, they override the root group's. And a
`run_id` argument may name a run by its id, the start of its id or its start key (app/runrefs.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import click

from ..errors import InvalidInput
from .context import Ctx

__all__ = ["accept_everywhere"]


def _override(attr: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value is None or value == ():
            return
        c = ctx.find_object(Ctx)
        if c is None:  # pragma: no cover - the root group always makes one
            return
        if c.opened:
            raise InvalidInput(f"--{attr.replace('_', '-')} came too late: give it before the run or file")
        if attr == "limits":
            root = ctx.find_root()
            c.limits = root.meta["lockstep.limits"](tuple(root.params.get("limit_settings", ())) + value)
        else:
            setattr(c, attr, value)
            if attr == "db":
                c.db_given = True

    return callback


_GLOBALS: list[tuple[str, str, dict[str, Any]]] = [
    ("--db", "db", {}),
    ("--tenant", "tenant", {}),
    ("--key-file", "key_file", {"type": click.Path(dir_okay=False)}),
    ("--limit", "limits", {"multiple": True}),
    ("--url", "url", {}),
    ("--api-key-file", "api_key_file", {"type": click.Path(dir_okay=False)}),
]


def _commands(group: click.Group) -> Iterator[click.Command]:
    for command in group.commands.values():
        yield command
        if isinstance(command, click.Group):
            yield from _commands(command)


def _resolving(callback: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(callback)
    def resolved(*args: Any, **kwargs: Any) -> Any:
        c = click.get_current_context().find_object(Ctx)
        # Over --url a run is named by its id (the API has no search by prefix or start key yet).
        if c is not None and not c.remote and isinstance(kwargs.get("run_id"), str):
            kwargs["run_id"] = c.engine.service.find_run(c.tenant, kwargs["run_id"])
        return callback(*args, **kwargs)

    return resolved


def accept_everywhere(root: click.Group) -> None:
    """Give every command of `root` the global options it lacks, and run references; call once."""
    for command in _commands(root):
        taken = {opt for p in command.params for opt in getattr(p, "opts", ())}
        for flag, attr, extra in _GLOBALS:
            if flag not in taken:
                command.params.append(
                    click.Option(
                        [flag, f"_global_{attr}"],
                        expose_value=False,
                        hidden=True,
                        callback=_override(attr),
                        **extra,
                    )
                )
        if command.callback is not None and any(p.name == "run_id" for p in command.params):
            command.callback = _resolving(command.callback)
