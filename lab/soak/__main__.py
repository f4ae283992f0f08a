"""`python -m lab.soak --duration 30m`: run the soak, write reports/soak.md and reports/soak.json; exit 1
unless it passed (0 violations, flat memory)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import click

from lockstep.core.timeutil import parse_duration
from lockstep.errors import LockstepError

from .report import flatness, write
from .soak import Settings, soak


def _seconds(text: str) -> float:
    return parse_duration(text).total_seconds()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--duration", default="30m", show_default=True, help="How long the faults go on, e.g. 30m, 2h.")
@click.option("--seed", type=int, default=7, show_default=True, help="Same seed, same fault schedule.")
@click.option(
    "--rate", type=click.FloatRange(0.1, 200), default=4.0, show_default=True, help="Run starts per second."
)
@click.option("--fault-interval", default="20s", show_default=True, help="Mean time between two faults.")
@click.option("--sample", default="60s", show_default=True, help="How often memory and files are sampled.")
@click.option("--check-every", default="5m", show_default=True, help="How often the checker runs meanwhile.")
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports"), show_default=True
)
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), help="Logs and ledger here.")
def main(
    duration: str,
    seed: int,
    rate: float,
    fault_interval: str,
    sample: str,
    check_every: str,
    out: Path,
    workdir: Path | None,
) -> None:
    """A mixed-fault soak on PostgreSQL (2 servers, 2 schedulers, 3 workers), judged by the checker."""
    try:
        settings = Settings(
            duration_s=_seconds(duration),
            seed=seed,
            rate=rate,
            fault_interval_s=_seconds(fault_interval),
            sample_s=_seconds(sample),
            check_every_s=_seconds(check_every),
        )
    except (ValueError, LockstepError) as exc:
        raise click.BadParameter(str(exc)) from None
    work = workdir or Path(tempfile.mkdtemp(prefix="lockstep-soak-"))
    click.echo(f"soak: {duration}, seed {seed}, {rate} starts/s, logs in {work}")
    result = soak(settings, work, say=click.echo)
    md, js = write(result, out)
    found = sum(result["violations"].values())
    faults = sum(result["faults"].values())
    click.echo(f"soak: {result['runs']} runs, {faults} faults, {found} violations; {md}, {js}")
    sys.exit(0 if found == 0 and all(p["flat"] for p in flatness(result["samples"])) else 1)


if __name__ == "__main__":
    main()
