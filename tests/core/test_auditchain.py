"""The audit chain's checker on rows built in memory: an intact chain passes; a changed, deleted, inserted,
reordered or cut-off row is named with its id; the secret guard refuses credentials in a detail."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lockstep.core.auditchain import (
    GENESIS,
    AuditHead,
    ChainCheck,
    StoredAudit,
    audit_hash,
    chain_of,
    secret_in_detail,
)


def chain(n: int, tenant: str | None = "acme", first_id: int = 10) -> tuple[list[StoredAudit], AuditHead]:
    """`n` rows of one chain, ids spaced by 2 (other chains' rows sit between), and its head."""
    rows, previous = [], GENESIS
    for i in range(n):
        content = {
            "at": f"2025-01-01T00:00:{i:02d}.000Z",
            "tenant": tenant,
            "actor": "bob",
            "action": "ui.login",
            "target": None,
            "outcome": "ok",
            "detail": {"address": f"10.0.0.{i}", "n": i},
        }
        h = audit_hash(previous, i + 1, content)
        rows.append(StoredAudit(first_id + 2 * i, **content, seq=i + 1, prev_hash=previous, hash=h))
        previous = h
    return rows, AuditHead(chain_of(tenant), n, rows[-1].id if rows else None, previous)


def check(rows: list[StoredAudit], head: AuditHead | None, tenant: str | None = "acme") -> ChainCheck:
    c = ChainCheck(chain_of(tenant))
    for r in rows:
        c.feed(r)
    c.finish(head)
    return c


def test_an_intact_chain_passes() -> None:
    """Every row links to the one before and matches its hash; the end matches the head."""
    rows, head = chain(6)
    c = check(rows, head)
    assert c.problems == []
    assert c.rows == 6


def test_a_changed_row_is_named_once() -> None:
    """A detail edited in place: that row, and only that row, is reported as changed."""
    rows, head = chain(5)
    rows[2] = replace(rows[2], detail={"address": "6.6.6.6", "n": 2})
    assert check(rows, head).problems == [
        (14, "audit row 14 (tenant acme) was changed: its content does not match its hash")
    ]


def test_a_changed_row_with_a_recomputed_hash_breaks_the_next_link() -> None:
    """Rewriting a row's hash to fit its new content shows at the next row, which no longer follows it."""
    rows, head = chain(5)
    edited = replace(rows[2], actor="mallory")
    rows[2] = replace(edited, hash=audit_hash(edited.prev_hash or "", 3, edited.content()))
    problems = check(rows, head).problems
    assert [i for i, _ in problems] == [16]
    assert "does not follow row 14" in problems[0][1]


def test_a_deleted_middle_row_is_named_with_its_neighbours() -> None:
    """A row removed from the middle: the gap in seq names the rows around it."""
    rows, head = chain(5)
    del rows[2]
    assert check(rows, head).problems == [
        (16, "audit row(s) seq 3 (tenant acme) after row 12 and before row 16 were deleted")
    ]


def test_rows_deleted_at_the_end_are_seen_through_the_head() -> None:
    """The last rows removed: every link still holds, but the head records more rows."""
    rows, head = chain(5)
    problems = check(rows[:3], head).problems
    assert len(problems) == 1
    assert problems[0][0] == 18
    assert "ends at row 14 (seq 3) but its head records 5 row(s)" in problems[0][1]


def test_an_inserted_row_is_named() -> None:
    """A row added between two others (a copy with the next seq, or without a hash) is reported."""
    rows, head = chain(4)
    forged = replace(rows[1], id=13, actor="mallory")
    problems = check([*rows[:2], forged, *rows[2:]], head).problems
    assert problems[0][0] == 13
    assert "repeats seq 2" in problems[0][1]
    unhashed = replace(rows[1], id=13, seq=None, prev_hash=None, hash=None)
    assert check([*rows[:2], unhashed, *rows[2:]], head).problems == [
        (13, "audit row 13 (tenant acme) has no hash: it was written outside lockstep")
    ]


def test_a_row_moved_to_another_tenant_breaks_both_chains() -> None:
    """Changing a row's tenant takes it out of its chain (a gap) and into another (a stranger)."""
    acme, acme_head = chain(3)
    globex, globex_head = chain(3, "globex", first_id=11)
    moved = replace(acme[1], tenant="globex")
    assert [i for i, _ in check([acme[0], acme[2]], acme_head).problems] == [14]
    problems = check([globex[0], moved, *globex[1:]], globex_head, "globex").problems
    assert 12 in [i for i, _ in problems]


def test_a_missing_head_and_a_head_without_rows_are_reported() -> None:
    """Rows whose chain has no head, and a head whose rows are all gone, are both problems."""
    rows, head = chain(2)
    assert check(rows, None).problems == [(None, "the audit chain of tenant acme has rows but no head row")]
    assert len(check([], head).problems) == 1
    assert check([], None).problems == []


def test_rows_without_a_tenant_form_their_own_chain() -> None:
    """The rows without a tenant chain under '' and are reported as such."""
    rows, head = chain(2, None)
    assert head.chain == ""
    rows[0] = replace(rows[0], outcome="ok!")
    assert "(no tenant)" in check(rows, head, None).problems[0][1]


@pytest.mark.parametrize(
    "detail",
    [{"password": "x"}, {"Token": "abc"}, {"api_key": "k"}, {"csrf": "c"}, {"who": "lsk_abcdef"}],
)
def test_a_detail_with_a_credential_is_refused(detail: dict[str, str]) -> None:
    """A detail key naming a credential, or a value that is an API key, is refused with the reason."""
    assert secret_in_detail(detail) is not None


def test_a_plain_detail_passes_the_guard() -> None:
    """Ids, hash prefixes, codes and addresses are what a detail holds, and they pass."""
    assert secret_in_detail({"token_sha256_prefix": "ab12", "code": "csrf", "address": "::1"}) is None
