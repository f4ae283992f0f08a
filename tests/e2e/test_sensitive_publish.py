"""Publishing a definition that declares sensitive data through the real CLI: the shipped example
publishes, a pointer the schema lacks is refused with its path and a fix (exit 2, nothing stored), and
the server-wide limits on declared places take effect."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from clikit import Cli

EXAMPLE = resources.files("lockstep.examples").joinpath("card-payment.yaml").read_text()


def test_the_card_payment_example_publishes(tmp_path: Path) -> None:
    """The example with x-lockstep-sensitive, sensitive_input and output_sensitive is a valid definition."""
    cli = Cli(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    cli.run("publish", cli.write("pay.yaml", EXAMPLE))
    assert [row[1] for row in cli.dump()["definitions"]] == ["card-payment"]


def test_a_pointer_the_schema_lacks_is_refused_with_a_fix(tmp_path: Path) -> None:
    """A typo in sensitive_input: exit 2, path and did-you-mean on stderr, no traceback, nothing stored."""
    cli = Cli(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    bad = EXAMPLE.replace("sensitive_input: [/customer/iban]", "sensitive_input: [/customer/ibna]")
    done = cli.run("publish", cli.write("pay.yaml", bad), expect=2)
    assert "sensitive_input[0]" in done.stderr
    assert "did you mean `/customer/iban`?" in done.stderr
    assert "Traceback" not in done.stderr
    assert cli.dump()["definitions"] == []


def test_the_server_limit_on_declared_places_applies_to_publish(tmp_path: Path) -> None:
    """`--limit max_sensitive_pointers=2` refuses the example's three places, naming the limit."""
    cli = Cli(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    path = cli.write("pay.yaml", EXAMPLE)
    done = cli.run("--limit", "max_sensitive_pointers=2", "publish", path, expect=2)
    assert "max_sensitive_pointers" in done.stderr
    assert cli.dump()["definitions"] == []
    cli.run("--limit", "max_sensitive_pointers=3", "publish", path)
