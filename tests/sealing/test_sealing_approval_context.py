"""The approval page's context never shows an approver more than docs/security.md allows: the run's input
with its sensitive fields redacted (also after a reveal of the details, which opens the details only),
and the outcomes of the decision; on both backends."""

from __future__ import annotations

from sealkit import CARD, CLEAR_REF, TENANT
from sealworld import World

from lockstep.store.port.search import RunQuery


def test_the_approval_page_shows_the_input_redacted_and_the_outcomes(world: World) -> None:
    """alice sees the order reference and a redaction marker for the card, before and after revealing
    the details with the grant; the page says what approving and rejecting lead to."""
    run_id = world.start(CARD, CLEAR_REF)
    world.wait(run_id, lambda s: s["wait_kind"] == "approval", "waited for approval")
    alice = world.principal("alice")
    page = world.service.approvals.request_view(alice, run_id, "approve")
    assert isinstance(page.run.input, dict)
    assert page.run.input["ref"] == CLEAR_REF
    assert isinstance(page.run.input["card"], dict)
    assert "$redacted" in page.run.input["card"]
    assert CARD not in page.model_dump_json()
    assert page.outcomes is not None
    assert page.outcomes.approve == "once approved, the run continues with `receipt`"
    assert page.outcomes.reject == "once rejected, the run fails (nothing to compensate)"
    world.service.principals.set_grant(TENANT, "alice", "read_sensitive", granted=True, by="test")
    shown = world.service.reveal.approval(world.principal("alice"), run_id, "approve", channel="ui")
    assert isinstance(shown.approval, dict)
    assert CARD in str(shown.approval["details"])
    assert CARD not in shown.run.model_dump_json()  # the reveal opens the details, not the input


def test_the_input_filter_is_no_oracle_for_a_sealed_value(world: World) -> None:
    """Searching the runs by the card's plaintext finds nothing (the stored value is sealed), while the
    clear reference of the same run is found: the filter cannot confirm a guessed secret."""
    run_id = world.start(CARD, CLEAR_REF)
    with world.service.read() as tx:
        by_card = tx.search_runs(TENANT, RunQuery(input_path=("card",), input_value=CARD), "", 10)
        by_ref = tx.search_runs(TENANT, RunQuery(input_path=("ref",), input_value=CLEAR_REF), "", 10)
    assert by_card == []
    assert [s.run_id for s in by_ref] == [run_id]
