"""The `lockstep` command line, one module per command group; root.py holds the root group and main()."""

from .root import cli, main

__all__ = ["cli", "main"]
