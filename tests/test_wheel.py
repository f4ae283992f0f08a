"""The wheel holds the product only: the `lockstep` package with its data files (SQL queries and
migrations, templates, static files incl. Swagger UI, examples) and nothing of the test lab (`lab/`:
fault suite, benchmark), the tests or their helpers.

The wheel is built the way a release is (`python -m build --wheel`), offline: without build isolation,
with the `build` frontend and setuptools of the dev extra, from a copy of the checkout, so a build
neither writes into the working tree nor picks up what an earlier build left there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest

pytestmark = pytest.mark.slow

CHECKOUT = Path(__file__).resolve().parents[1]
PACKAGE = CHECKOUT / "src" / "lockstep"
# What a checkout holds that no build reads: environments, caches, earlier builds.
NOT_SOURCE = (
    *(".git", ".venv", ".*_cache", ".hypothesis", "__pycache__", "*.pyc"),
    *("build", "dist", "*.egg-info", "reports"),
)
LAB_PARTS = {"lab", "tests", "bench", "faults"}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of this checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    tree = tmp / "checkout"
    shutil.copytree(CHECKOUT, tree, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    done = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp / "dist")],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, f"python -m build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    (whl,) = (tmp / "dist").glob("lockstep-*.whl")
    return whl


@pytest.fixture(scope="module")
def wheel(built: Path) -> list[str]:
    """The wheel's file list."""
    with zipfile.ZipFile(built) as zf:
        return zf.namelist()


def _source_files() -> set[str]:
    """Every file of the package in the source tree, as a path inside the wheel."""
    return {
        f"lockstep/{p.relative_to(PACKAGE).as_posix()}"
        for p in PACKAGE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def test_the_wheel_holds_the_package_and_its_metadata_only(wheel: list[str]) -> None:
    """Top level: `lockstep/` and its dist-info; no module or folder of the lab, the tests or a bench."""
    tops = {PurePosixPath(name).parts[0] for name in wheel}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"lockstep"}, sorted(tops)
    lab = [n for n in wheel if LAB_PARTS & {part.removesuffix(".py") for part in PurePosixPath(n).parts}]
    assert lab == [], f"the wheel ships test-lab files: {lab}"
    tests = [n for n in wheel if PurePosixPath(n).name.startswith(("test_", "conftest"))]
    assert tests == [], f"the wheel ships tests: {tests}"


def test_the_wheel_holds_every_file_of_the_package(wheel: list[str]) -> None:
    """The package in the wheel is exactly src/lockstep: every module and every data file, nothing else
    (a data file missing here is one `[tool.setuptools.package-data]` in pyproject.toml does not list)."""
    shipped = {n for n in wheel if n.startswith("lockstep/")}
    source = _source_files()
    assert not source - shipped, f"in src/lockstep but not in the wheel: {sorted(source - shipped)}"
    assert not shipped - source, f"in the wheel but not in src/lockstep: {sorted(shipped - source)}"


@pytest.mark.parametrize(
    ("pattern", "what"),
    [
        ("lockstep/py.typed", "the typing marker"),
        ("lockstep/store/sqlite/queries.sql", "SQLite's named queries"),
        ("lockstep/store/sqlite/migrations/0001_*.sql", "SQLite's first migration"),
        ("lockstep/store/postgres/queries.sql", "PostgreSQL's named queries"),
        ("lockstep/store/postgres/migrations/0001_*.sql", "PostgreSQL's first migration"),
        ("lockstep/ui/templates/base.html", "the UI's templates"),
        ("lockstep/ui/static/style.css", "the UI's stylesheet"),
        ("lockstep/api/templates/docs.html", "the API docs page"),
        ("lockstep/api/static/swagger-ui/swagger-ui-bundle.js", "Swagger UI's script"),
        ("lockstep/api/static/swagger-ui/swagger-ui.css", "Swagger UI's stylesheet"),
        ("lockstep/api/static/swagger-ui/LICENSE", "Swagger UI's licence"),
        ("lockstep/examples/*.yaml", "the example definitions"),
    ],
)
def test_the_wheel_holds_the_data_the_product_reads(wheel: list[str], pattern: str, what: str) -> None:
    """Each kind of data file the product opens at run time is in the wheel (not only in the checkout)."""
    assert any(PurePosixPath(n).match(pattern) for n in wheel), f"{what} ({pattern}) is not in the wheel"


def test_the_wheel_declares_the_lockstep_command(built: Path) -> None:
    """Installing the wheel puts a `lockstep` command on the PATH (a console script of lockstep.cli)."""
    with zipfile.ZipFile(built) as zf:
        (name,) = (n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt"))
        entry_points = zf.read(name).decode()
    assert "[console_scripts]" in entry_points
    assert any(
        line.replace(" ", "").startswith("lockstep=lockstep.cli") for line in entry_points.splitlines()
    ), entry_points


SHOW_VERSION = "import lockstep; print(lockstep.__file__, lockstep.__version__)"


@pytest.fixture(scope="module")
def installed(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel installed (no source tree on its path); the wheel's
    dependencies come from this environment's site-packages through a .pth file, so no network is used."""
    env = tmp_path_factory.mktemp("installed") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=120)
    python = env / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(built)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = [p for p in sys.path if p.endswith("site-packages")]
    # Appended after the venv's own site-packages: the installed wheel is found first, never src/.
    (Path(site) / "_lockstep_test_deps.pth").write_text("\n".join(deps) + "\n")
    return env


def test_the_installed_wheel_runs_the_demo_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    """From a directory with no source tree, the wheel's `lockstep demo` runs every example run to the
    state it should and `lockstep --version` names the version in pyproject.toml; lockstep is imported
    from the wheel, not from src/."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCKSTEP_", "PYTHONPATH"))}
    where = subprocess.run(
        [
            str(installed / "bin" / "python"),
            "-c",
            "import lockstep; print(lockstep.__file__, lockstep.__version__)",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert where[0].startswith(str(installed)), where
    version = re.search(r'^version = "([^"]+)"', (CHECKOUT / "pyproject.toml").read_text(), re.M)
    assert version is not None
    assert where[1] == version.group(1)
    shown = subprocess.run(
        [str(installed / "bin" / "lockstep"), "--version"],
        check=True,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert version.group(1) in shown.stdout
    demo = subprocess.run(
        [str(installed / "bin" / "lockstep"), "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "demo finished: every run reached the state it should." in demo.stdout
