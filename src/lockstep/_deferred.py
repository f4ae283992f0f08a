"""Start-up cost that lockstep never uses, deferred: the `cel` package's __init__ imports its own
interactive shell (`cel.cli`: typer, prompt_toolkit, pygments, rich), a quarter of a second in every
CLI call, worker and test subprocess. Here `cel.cli` is registered as a module that loads the real one
the first time something reads a name from it, which lockstep never does. Importing this module does
it: the package imports it before anything imports cel (lockstep.core.expr does)."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from importlib.machinery import ModuleSpec

__all__ = ["defer_cel_shell"]


class _OnFirstUse(types.ModuleType):
    """A module whose body runs when a name is first looked up in it (importlib's LazyLoader is no use
    here: the import system itself reads `__spec__`, which would load it at once)."""

    def __init__(self, spec: ModuleSpec) -> None:
        super().__init__(spec.name)
        self.__spec__ = spec

    def __getattr__(self, name: str) -> object:
        spec = self.__spec__
        if spec is None or spec.loader is None:  # pragma: no cover - set in __init__
            raise AttributeError(name)
        real = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = real
        spec.loader.exec_module(real)
        self.__dict__.update(real.__dict__)
        return getattr(real, name)


def defer_cel_shell() -> None:
    if "cel" in sys.modules or "cel.cli" in sys.modules:
        return
    package = importlib.util.find_spec("cel")  # a top-level spec: found without running the package
    if package is None or not package.submodule_search_locations:
        return
    for location in package.submodule_search_locations:
        spec = importlib.util.spec_from_file_location("cel.cli", f"{location}/cli.py")
        if spec is not None and spec.loader is not None and spec.origin and os.path.isfile(spec.origin):
            sys.modules["cel.cli"] = _OnFirstUse(spec)
            return


defer_cel_shell()
