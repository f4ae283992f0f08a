"""The login throttle's arithmetic (core/throttle.py) under any sequence of attempts an attacker chooses."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lockstep.core.limits import SERVER_LIMITS
from lockstep.core.throttle import LoginCounter, ThrottlePolicy, admit, expires_at, refund

S = 1000
POLICY = ThrottlePolicy(
    SERVER_LIMITS["login_attempts_per_user"].default,
    SERVER_LIMITS["login_window_seconds"].default * S,
    SERVER_LIMITS["login_lockout_seconds"].default * S,
    SERVER_LIMITS["login_lockout_max_seconds"].default * S,
)
# Gaps between attempts, in ms: bursts, just-after-the-lockout retries and long pauses.
GAPS = st.lists(
    st.one_of(
        st.integers(0, 2 * S),
        st.integers(0, 2 * POLICY.window_ms),
        st.sampled_from([POLICY.lockout_ms, POLICY.window_ms, POLICY.lockout_max_ms]),
    ),
    min_size=1,
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(GAPS)
def test_no_window_long_interval_admits_more_than_twice_the_limit(gaps: list[int]) -> None:
    """Whatever the timing of failed attempts, any interval as long as the window admits at most twice
    the per-window limit (fixed windows; a lockout lasts at least a window), and a refused attempt is
    told to wait exactly until the lockout ends."""
    counter, now, admitted = LoginCounter("user:acme/alice", 0, 0), 0, []
    for gap in gaps:
        now += gap
        counter, wait = admit(counter, now, POLICY)
        if wait:
            assert counter.locked_until_ms == now + wait
        else:
            admitted.append(now)
    for i, start in enumerate(admitted):
        inside = [t for t in admitted[i:] if t < start + POLICY.window_ms]
        assert len(inside) <= 2 * POLICY.max_attempts, (start, inside)


def test_each_lockout_in_a_row_doubles_up_to_the_ceiling() -> None:
    """An attacker who retries as soon as each lockout ends is locked for 1, 2, 4, ... times the first
    lockout, never longer than the longest."""
    counter, now, lockouts = LoginCounter("k", 0, 0), 0, []
    for _ in range(8 * POLICY.max_attempts):
        counter, wait = admit(counter, now, POLICY)
        assert wait == 0
        if counter.locked_until_ms is not None:
            lockouts.append(counter.locked_until_ms - now)
            now = counter.locked_until_ms
    expected = [min(POLICY.lockout_ms * 2**i, POLICY.lockout_max_ms) for i in range(8)]
    assert lockouts == expected


def test_a_refunded_success_lifts_only_the_lock_it_set_itself() -> None:
    """The attempt that reached the limit and then succeeded gives its count back and lifts the lock; the
    failures before it stay counted, so the next failure locks again."""
    counter = LoginCounter("address:192.0.2.1", 0, 0)
    for _ in range(POLICY.max_attempts):
        counter, _wait = admit(counter, 1, POLICY)
    assert counter.locked_until_ms is not None
    counter = refund(counter, 2, POLICY)
    assert (counter.attempts, counter.locked_until_ms) == (POLICY.max_attempts - 1, None)
    counter, wait = admit(counter, 3, POLICY)
    assert wait == 0
    assert counter.locked_until_ms is not None


def test_an_expired_counter_means_no_more_than_a_fresh_one() -> None:
    """From expires_at on, a stored counter admits exactly like a fresh one (so it may be deleted)."""
    counter = LoginCounter("k", 0, 0)
    for _ in range(POLICY.max_attempts):
        counter, _wait = admit(counter, 0, POLICY)
    until = expires_at(counter, POLICY)
    assert admit(counter, until, POLICY) == admit(LoginCounter("k", 0, until), until, POLICY)
