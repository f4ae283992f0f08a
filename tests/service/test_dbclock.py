"""The database's clock decides: a process adds the offset it measured against the database to its own
clock, measures again every second and at once when its wall clock steps, and keeps the last offset
while the database cannot be reached."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from lockstep import Engine
from lockstep.app.dbclock import DatabaseClock
from lockstep.store import StoreUnavailable, open_store


class Clocks:
    """A wall clock and a monotonic clock the test moves, and a database clock that is `db_ahead` off."""

    def __init__(self) -> None:
        self.wall = 1_000_000.0
        self.mono = 50.0
        self.db_ahead = 600.0
        self.reads = 0
        self.down = False

    def database_ms(self) -> int:
        self.reads += 1
        if self.down:
            raise StoreUnavailable("PostgreSQL is unavailable: connection refused")
        return int((self.wall + self.db_ahead) * 1000)

    def advance(self, s: float) -> None:
        self.wall += s
        self.mono += s

    def clock(self) -> DatabaseClock:
        return DatabaseClock(self.database_ms, local=lambda: self.wall, monotonic=lambda: self.mono)


def at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def test_a_process_ten_minutes_behind_tells_the_database_time() -> None:
    """A local clock 600 s behind the database's: the clock answers the database's time."""
    c = Clocks()
    clock = c.clock()
    assert clock() == at(c.wall + 600)
    assert clock.offset.total_seconds() == pytest.approx(600)


def test_the_offset_is_measured_again_at_most_every_second() -> None:
    """Calls within a second cost no database read; the next one after it reads again."""
    c = Clocks()
    clock = c.clock()
    clock()
    for _ in range(10):
        c.advance(0.05)
        clock()
    assert c.reads == 1
    c.advance(0.6)
    clock()
    assert c.reads == 2


def test_a_step_of_the_wall_clock_is_measured_at_once() -> None:
    """The wall clock jumps 10 minutes ahead (the monotonic clock does not): the very next call reads the
    database again and still answers the database's time."""
    c = Clocks()
    clock = c.clock()
    clock()
    c.wall += 600  # a step: NTP, `date -s`, a VM resumed
    c.db_ahead -= 600  # the database's own clock did not move
    assert clock() == at(c.wall + c.db_ahead)
    assert c.reads == 2


def test_an_unreachable_database_keeps_the_last_offset_and_is_not_hammered() -> None:
    """While the database is down the last offset stands, and it is tried again only a second later."""
    c = Clocks()
    clock = c.clock()
    clock()
    c.down = True
    c.advance(1.5)
    assert clock() == at(c.wall + 600)
    c.advance(0.1)
    clock()
    assert c.reads == 2


def test_postgresql_answers_its_clock_and_sqlite_has_none(pg_url: str, tmp_path: object) -> None:
    """PostgreSQL's clock_timestamp() (here on this host: within a second of ours); SQLite: None."""
    pg = open_store(pg_url)
    try:
        ms = pg.database_clock_ms()
        assert ms is not None
        assert abs(ms / 1000 - time.time()) < 1.0
    finally:
        pg.close()
    lite = open_store(f"sqlite:///{tmp_path}/clock.db")
    try:
        assert lite.database_clock_ms() is None
    finally:
        lite.close()


def test_an_engine_opened_with_the_default_clock_uses_the_database_clock(tmp_path: object) -> None:
    """Engine.open wraps its default clock; a clock passed in (a test's fake) is used as given."""
    with Engine.open(f"sqlite:///{tmp_path}/a.db") as engine:
        assert isinstance(engine.service.clock, DatabaseClock)
    fixed = at(1_700_000_000)
    with Engine.open(f"sqlite:///{tmp_path}/b.db", clock=lambda: fixed) as engine:
        assert engine.service.clock() == fixed
