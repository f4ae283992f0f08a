"""The background scrub (app/scrub.py): a bounded, round-robin batch of `verify` checks per pass; a run
whose event bytes were changed (still decodable, or not) is marked damaged once, every command on it is
refused with corrupt_run, `show` says why, and healthy runs are untouched."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
from click.testing import CliRunner

from lockstep.app.service import Service
from lockstep.cli import cli
from lockstep.errors import Refused
from lockstep.runtime.scheduler import Scheduler

from .conftest import NAP, FakeClock, Raw

# One letter of RunStarted's data (still valid JSON): only the hash chain can tell.
FLIP = "UPDATE events SET data = replace(data, '\"abc\"', '\"abb\"') WHERE run_id = ? AND seq = 1"


def start_naps(svc: Service, n: int) -> list[str]:
    svc.principals.create_tenant("acme")  # its own audit chain
    svc.publish("acme", NAP)
    return sorted(svc.start("acme", "nap", input={"m": "abc"}).run_id for _ in range(n))


def flip(raw: Raw, run_id: str) -> None:
    """FLIP past the append-only triggers, and the schema put back as it was (on SQLite the tampering
    drops them; every process refuses a schema without them at start-up)."""
    triggers = []
    if raw.backend == "sqlite":
        triggers = [
            r[0] for r in raw.fetch("SELECT sql FROM sqlite_master WHERE name LIKE 'events_append_only_%'")
        ]
    raw.tamper_events(FLIP, run_id)
    for sql in triggers:
        raw.execute(sql)


def marks(raw: Raw) -> dict[str, str]:
    return {
        str(r[0]): str(r[1]) for r in raw.fetch("SELECT run_id, damaged FROM runs WHERE damaged IS NOT NULL")
    }


def damaged_audit_rows(raw: Raw) -> list[tuple[object, ...]]:
    return raw.fetch("SELECT tenant, actor, target, detail FROM audit WHERE action = 'run.damaged'")


def test_a_flipped_event_byte_is_marked_and_every_command_on_the_run_refused(svc: Service, raw: Raw) -> None:
    """A changed byte in an event row that still decodes: one pass marks the run (naming the seq), a
    cancel is refused with corrupt_run naming the problem and `lockstep verify`, show explains it,
    one audit row and one count; the healthy run is untouched."""
    bad, sound = start_naps(svc, 2)
    flip(raw, bad)

    report = svc.scrub.run_pass()

    assert report.checked == 2
    assert report.damaged == [bad]
    assert list(marks(raw)) == [bad]
    assert "hash chain broken at seq 1 (RunStarted)" in marks(raw)[bad]
    with pytest.raises(Refused) as refused:
        svc.cancel("acme", bad, "stop it")
    assert refused.value.code == "corrupt_run"
    assert "found damaged by the background scrub" in str(refused.value)
    assert "hash chain broken at seq 1" in str(refused.value)
    assert f"lockstep verify {bad}" in str(refused.value)

    shown = svc.show("acme", bad)
    assert shown.damaged is not None
    assert "hash chain broken at seq 1" in shown.damaged
    assert shown.wait_kind is None
    assert shown.waiting_until is None
    assert shown.wait_reason is not None
    assert shown.wait_reason.startswith("refused: ")
    assert shown.next_action is not None
    assert "restored from a backup" in shown.next_action
    assert "damaged" not in svc.show("acme", sound).plain()

    ((tenant, actor, target, detail),) = damaged_audit_rows(raw)
    assert (tenant, actor, target) == ("acme", "scrub", bad)
    assert any("hash chain broken" in p for p in json.loads(str(detail))["problems"])
    assert svc.metrics.registry.get_sample_value("lockstep_runs_damaged_total", {"tenant": "acme"}) == 1

    # Marked once: later passes skip it (no second audit row), and the sound run still runs.
    for _ in range(3):
        assert bad not in svc.scrub.run_pass().damaged
    assert len(damaged_audit_rows(raw)) == 1
    assert svc.cancel("acme", sound, "done").accepted


def test_verify_still_checks_a_marked_run(svc: Service, raw: Raw) -> None:
    """`lockstep verify` of a marked run lists what is wrong with its rows, not just the mark."""
    (bad,) = start_naps(svc, 1)
    flip(raw, bad)
    svc.scrub.run_pass()
    (result,) = svc.verify(bad)
    assert result.ok is False
    assert any("hash chain broken at seq 1" in p for p in result.problems), result.problems


def test_a_pass_is_bounded_and_goes_round_robin_over_every_run(svc: Service) -> None:
    """A pass checks at most its batch of runs, the next pass goes on after the last one checked, and
    past the end it starts again: every run is checked in turn."""
    runs = start_naps(svc, 5)
    seen: list[str] = []
    checked = []
    for _ in range(3):
        before = svc.scrub.cursor
        report = svc.scrub.run_pass(2)
        checked.append(report.checked)
        seen += [r for r in runs if r > before][: report.checked]
    assert checked == [2, 2, 1]
    assert seen == runs
    assert svc.scrub.cursor == ""  # wrapped: the next pass begins at the first run again
    assert svc.scrub.run_pass(2).checked == 2


def test_a_row_that_does_not_decode_is_marked_and_the_pass_goes_on(svc: Service, raw: Raw) -> None:
    """An event row that no longer decodes is a problem of its run, marked like the others; the pass
    checks the rest and leaves them alone."""
    broken, flipped, sound = start_naps(svc, 3)
    raw.tamper_events("UPDATE events SET data = 'z' || substr(data, 2) WHERE run_id = ? AND seq = 1", broken)
    flip(raw, flipped)

    report = svc.scrub.run_pass()

    assert report.checked == 3
    assert sorted(report.damaged) == sorted([broken, flipped])
    assert "cannot be decoded" in marks(raw)[broken]
    assert sound not in marks(raw)
    with pytest.raises(Refused) as refused:
        svc.cancel("acme", broken, "stop it")
    assert refused.value.code == "corrupt_run"


def test_a_healthy_database_is_left_untouched(svc: Service, raw: Raw) -> None:
    """Runs that moved on since they started (cancelled, or still waiting) are never marked."""
    runs = start_naps(svc, 3)
    svc.cancel("acme", runs[0], "done")
    assert svc.scrub.run_pass().damaged == []
    assert marks(raw) == {}
    assert damaged_audit_rows(raw) == []


def test_the_scheduler_scrubs_every_interval_and_not_at_all_with_0(svc: Service, raw: Raw) -> None:
    """A running scheduler makes a scrub pass every `scrub_interval` (on a thread of its own); with 0 it
    never scrubs."""
    (bad,) = start_naps(svc, 1)
    flip(raw, bad)
    for interval, marked, within in ((0, [], 0.5), (50, [bad], 10.0)):
        s = Scheduler(svc, scrub_interval=timedelta(milliseconds=interval), scrub_batch=10, owner="s1")
        stop = threading.Event()
        t = threading.Thread(target=s.run, args=(stop,))
        t.start()
        try:
            deadline = time.monotonic() + within  # off: it must stay unmarked for all of it
            while time.monotonic() < deadline and not (marked and list(marks(raw)) == marked):
                time.sleep(0.02)
        finally:
            stop.set()
            s.wake.set()
            t.join(10)
        assert list(marks(raw)) == marked


def test_a_marked_runs_timer_neither_fires_nor_makes_the_scheduler_spin(
    svc: Service, raw: Raw, clock: FakeClock
) -> None:
    """Once marked, the run's due timer is not due work: the tick skips it and the scheduler sleeps its
    poll interval instead of retrying the refused run every few milliseconds; a sound run's timer fires."""
    bad, sound = start_naps(svc, 2)
    flip(raw, bad)
    svc.scrub.run_pass()
    clock.advance(hours=2)
    s = Scheduler(svc, scrub_interval=timedelta(0), owner="s1")
    assert s.tick() == 1  # the sound run's timer
    assert svc.show("acme", sound).status == "completed"
    assert s._sleep_for() == s.poll
    assert raw.fetch("SELECT status FROM timers WHERE run_id = ?", bad) == [("scheduled",)]


def test_the_cli_shows_a_marked_run_as_damaged_and_refuses_its_cancel(svc: Service, raw: Raw) -> None:
    """`lockstep show` names the damage before anything else; `lockstep cancel` is refused corrupt_run
    (exit status 5 through `main`, as test_corrupt_files.py checks of the process)."""
    (bad,) = start_naps(svc, 1)
    flip(raw, bad)
    svc.scrub.run_pass()
    db = ["--db", svc.store.url, "--tenant", "acme"]
    shown = CliRunner().invoke(cli, [*db, "show", bad])
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines()[1].startswith("damaged, every command refused: hash chain broken")
    cancelled = CliRunner().invoke(cli, [*db, "cancel", bad, "--reason", "stop"])
    assert isinstance(cancelled.exception, Refused)
    assert cancelled.exception.code == "corrupt_run"
    assert cancelled.exception.exit_code == 5
