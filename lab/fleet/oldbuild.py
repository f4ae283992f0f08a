"""An older lockstep, built from a commit of this repository as a release is built (`python -m build
--wheel`), installed into its own virtual environment: what a rolling upgrade starts from.

`old_build(commit)` exports the commit's tree (`git archive`, so nothing of the working tree leaks in),
builds its wheel offline, installs it with `--no-deps` into a fresh venv whose dependencies come from
this environment through a .pth file (no network), and keeps the result under the cache directory, so
the second call is instant. The exported tree stays next to it: its `lab/` is the activities module the
old workers import (the old lockstep's, not this checkout's).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OldBuild", "old_build"]

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path.home() / ".cache" / "lockstep-lab"


@dataclass(frozen=True)
class OldBuild:
    commit: str
    python: Path  # the venv's interpreter: `python -m lockstep ...` is the old build
    tree: Path  # the commit's source tree (its lab/ for PYTHONPATH)

    def version(self) -> str:
        done = subprocess.run(  # noqa: S603 - our own interpreter
            [str(self.python), "-m", "lockstep", "--version"], capture_output=True, text=True, check=True
        )
        return done.stdout.strip()


def _run(argv: list[str], cwd: Path | None = None, timeout: float = 300) -> bytes:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=timeout, check=False)  # noqa: S603
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[:4])} failed ({done.returncode}): {done.stderr.decode(errors='replace')[-2000:]}"
        )
    return done.stdout


def old_build(commit: str, cache: Path = CACHE) -> OldBuild:
    """The build of `commit` (a full or abbreviated id this repository has), built once and cached."""
    verify = ["git", "rev-parse", "--verify", f"{commit}^{{commit}}"]
    try:
        try:
            sha = _run(verify, cwd=ROOT).decode().strip()
        except RuntimeError:  # a shallow clone (some CI checkouts): its history, once
            _run(["git", "fetch", "--quiet", "--unshallow"], cwd=ROOT)
            sha = _run(verify, cwd=ROOT).decode().strip()
    except RuntimeError as exc:
        raise RuntimeError(
            f"commit {commit} is not in this clone ({exc}); a shallow clone lacks it: `git fetch --unshallow`"
        ) from None
    home = cache / f"old-{sha[:12]}"
    build = OldBuild(sha, home / "venv" / "bin" / "python", home / "tree")
    if (home / "ready").exists():
        return build
    shutil.rmtree(home, ignore_errors=True)
    build.tree.mkdir(parents=True)
    archive = _run(["git", "archive", "--format=tar", sha], cwd=ROOT)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(build.tree, filter="data")
    dist = home / "dist"
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist)], cwd=build.tree)
    (wheel,) = dist.glob("lockstep-*.whl")
    venv = home / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    _run([str(build.python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)])
    site = _run([str(build.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    deps = [p for p in sys.path if p.endswith("site-packages")]
    # After the venv's own site-packages: the old wheel is found first, never this checkout's src/.
    (Path(site.decode().strip()) / "_lockstep_lab_deps.pth").write_text("\n".join(deps) + "\n")
    (home / "ready").write_text(f"{sha}\n")
    return build
