"""Small filesystems for disk-full tests: a size-limited tmpfs mounted on a directory (root only; the lab
and CI machines run as root), unmounted on the way out even when the test failed, and a filler file
that takes every free byte until the test deletes it.

Imported on its own (`from lab.fleet.mounts import small_disk, fill`): it needs mount(8)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["fill", "free_bytes", "mounting_allowed", "small_disk"]


def mounting_allowed() -> bool:
    """Whether this process may mount a tmpfs (root with mount(8) on PATH)."""
    return os.geteuid() == 0 and shutil.which("mount") is not None


@contextmanager
def small_disk(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount(8) syntax: "8m") mounted on `where` (created) for the block's duration.
    Lazy unmount (-l) on the way out: a process the test failed to kill cannot keep it mounted."""
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(  # noqa: S603 - fixed argv
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],  # noqa: S607
        check=True,
        capture_output=True,
    )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)  # noqa: S603, S607


def free_bytes(where: Path) -> int:
    st = os.statvfs(where)
    return st.f_bavail * st.f_frsize


def fill(where: Path, name: str = "filler") -> Path:
    """Write a file in `where` until the filesystem says ENOSPC; return its path (delete it to free)."""
    path = where / name
    chunk = b"\0" * (64 << 10)
    with path.open("ab", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    # A last partial chunk may fit where a whole one did not: take the remaining bytes one page at a time.
    with path.open("ab", buffering=0) as f:
        try:
            while True:
                f.write(chunk[:4096])
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return path
