"""`python -m lab.faults`: run the fault matrix and write reports/faults.md and reports/faults.json."""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from .run import SCENARIOS, run_matrix, write_reports


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--backend",
    type=click.Choice(["sqlite", "postgresql", "all"]),
    default="all",
    show_default=True,
)
@click.option("--seed", type=int, default=7, show_default=True, help="Same seed, same faults.")
@click.option("--quick", is_flag=True, help="Small runs (CI).")
@click.option("--soak", is_flag=True, help="Longer and larger: more runs, longer outages.")
@click.option("--runs", type=click.IntRange(2), help="Runs per scenario (overrides --quick/--soak).")
@click.option(
    "--only",
    multiple=True,
    type=click.Choice(sorted(s.name for s in SCENARIOS)),
    help="Run only these scenarios, by exact name (repeatable).",
)
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports"), show_default=True
)
@click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path), help="Keep databases and logs here."
)
@click.option("--keep", is_flag=True, help="Keep the directories of passing scenarios too.")
def main(
    backend: str,
    seed: int,
    quick: bool,
    soak: bool,
    runs: int | None,
    only: tuple[str, ...],
    out: Path,
    workdir: Path | None,
    keep: bool,
) -> None:
    """Run every fault scenario on SQLite and PostgreSQL; exit 1 if any check failed."""
    # The database outages are on purpose: the driver's pool reporting them would only be noise.
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    size = runs or (12 if quick else 200 if soak else 40)
    backends = ["sqlite", "postgresql"] if backend == "all" else [backend]
    work = workdir or Path(tempfile.mkdtemp(prefix="lockstep-faults-"))
    click.echo(f"fault matrix: {', '.join(backends)}, seed {seed}, {size} runs per scenario, in {work}")
    try:
        results = run_matrix(
            backends,
            seed=seed,
            runs=size,
            soak=soak,
            workdir=work,
            only=list(only) or None,
            keep=keep,
            say=click.echo,
        )
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:  # the harness could not start
        detail = getattr(exc, "stderr", None) or ""
        raise click.ClickException(f"{exc} {detail}".strip()) from None
    command = " ".join(["python -m lab.faults", *sys.argv[1:]])
    md, js = write_reports(results, out, {"command": command, "seed": seed, "runs": size, "soak": soak})
    failed = [r for r in results if not r.passed]
    click.echo(f"wrote {md} and {js}: {len(results) - len(failed)} of {len(results)} scenarios passed")
    if failed:
        click.echo("failed: " + ", ".join(f"{r.backend}/{r.name}" for r in failed), err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
