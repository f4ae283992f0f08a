"""The pieces under the sealing: the marker syntax and JSON pointers (pure), the local key provider and
its key file, the bounded key cache, and the key ring over a real SQLite store."""

from __future__ import annotations

import base64
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lockstep.app.keys import KeyRing, LocalKeyProvider, create_key_file, key_provider
from lockstep.app.keys.ring import Ttl
from lockstep.core.sealed import (
    FORGOTTEN,
    label_of,
    make_marker,
    map_markers,
    marker_parts,
    pointer_get,
    pointer_set,
    redact,
    redaction,
)
from lockstep.errors import InvalidInput, Refused
from lockstep.store import Store, open_store


# --- markers and pointers ---------------------------------------------------------------------------
def test_labels_escape_dots_and_percents_so_a_marker_splits_in_three() -> None:
    """A key with '.', '%', '/' or '~' still gives a marker of exactly three parts, read back exactly."""
    label = label_of("RunStarted", "/input/a.b%c/x~1y~0z")
    assert label == "RunStarted/input/a%2Eb%25c/x~1y~0z"
    marker = make_marker(label, b"\x00\x01payload")
    assert marker_parts(marker) == (label, b"\x00\x01payload")
    with pytest.raises(ValueError, match="must start with '/'"):
        label_of("RunStarted", "input")


@pytest.mark.parametrize(
    "bad",
    [
        {"$sealed": "ls2.L.AAAA"},
        {"$sealed": "ls1..AAAA"},
        {"$sealed": "ls1.L"},
        {"$sealed": 7},
        {"$sealed": "ls1.L.AAAA", "other": 1},
        {"$sealed": "ls1.L.!!!"},
    ],
)
def test_a_malformed_sealed_object_is_an_error_never_a_clear_value(bad: dict[str, object]) -> None:
    """Anything under `$sealed` that is not a well-formed marker raises, so it cannot pass as clear."""
    with pytest.raises(ValueError, match="malformed sealed value"):
        marker_parts(bad)
    assert marker_parts({"sealed": "x"}) is None


def test_pointers_read_and_replace_copying_only_the_path() -> None:
    """RFC 6901: objects, arrays, escaped keys; a replace copies the containers on the path only."""
    doc = {"a": [{"b/c": 1, "d~e": 2}, {"f": 3}], "g": {"h": 4}}
    assert pointer_get(doc, "/a/0/b~1c") == (True, 1)
    assert pointer_get(doc, "/a/0/d~0e") == (True, 2)
    assert pointer_get(doc, "/a/1/f") == (True, 3)
    assert pointer_get(doc, "/a/01/f") == (False, None)  # no leading zeros
    assert pointer_get(doc, "/a/9") == (False, None)
    assert pointer_get(doc, "/g/x") == (False, None)
    new = pointer_set(doc, "/a/1/f", "X")
    assert new["a"][1] == {"f": "X"}
    assert doc["a"][1] == {"f": 3}  # the original is unchanged
    assert new["g"] is doc["g"]  # and what is off the path is shared
    assert new["a"][0] is doc["a"][0]
    with pytest.raises(KeyError):
        pointer_set(doc, "/g/missing", 1)


def test_map_markers_shares_a_value_without_markers_and_redacts_one_with() -> None:
    """No marker: the very same object back (no copy); markers: each replaced, the rest shared."""
    plain = {"a": [1, {"b": 2}], "c": "d"}
    assert map_markers(plain, lambda m: 1 / 0) is plain
    marker = make_marker("RunStarted/input/card", b"x")
    value = {"card": marker, "other": {"k": [1]}}
    shown = redact(value, FORGOTTEN)
    assert shown == {"card": redaction(FORGOTTEN), "other": {"k": [1]}}
    assert shown["other"] is value["other"]
    assert redaction() == {"$redacted": "sensitive", "readable_by": "read_sensitive"}


# --- the key provider and its file ---------------------------------------------------------------------
def test_a_key_file_is_created_once_private_and_read_back(tmp_path: Path) -> None:
    """`keys init` writes 32 random bytes (base64) with mode 0600 and never overwrites a file."""
    path = tmp_path / "k"
    made = create_key_file(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert len(base64.b64decode(path.read_text())) == 32
    assert LocalKeyProvider.from_file(path).provider_id == made.provider_id
    with pytest.raises(InvalidInput, match="never overwritten"):
        create_key_file(path)
    with pytest.raises(InvalidInput, match="does not exist"):
        create_key_file(tmp_path / "nowhere" / "k")


def test_a_bad_key_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    """Missing (names `keys init`), readable by others (names chmod), not base64, not 32 bytes."""
    with pytest.raises(InvalidInput, match="lockstep keys init"):
        LocalKeyProvider.from_file(tmp_path / "missing")
    loose = tmp_path / "loose"
    loose.write_text(base64.b64encode(os.urandom(32)).decode())
    loose.chmod(0o644)
    with pytest.raises(InvalidInput, match="chmod 600"):
        LocalKeyProvider.from_file(loose)
    for name, text in (("junk", "not base64!"), ("short", base64.b64encode(b"x" * 16).decode())):
        bad = tmp_path / name
        bad.write_text(text)
        bad.chmod(0o600)
        with pytest.raises(InvalidInput, match="keys init"):
            LocalKeyProvider.from_file(bad)


def test_the_key_comes_from_the_file_option_then_the_environment(tmp_path: Path) -> None:
    """--key-file, else LOCKSTEP_KEY_FILE, else LOCKSTEP_KEY (base64); none: no key."""
    a, b = tmp_path / "a", tmp_path / "b"
    pa, pb = create_key_file(a), create_key_file(b)
    env_key = base64.b64encode(os.urandom(32)).decode()
    env = {"LOCKSTEP_KEY_FILE": str(b), "LOCKSTEP_KEY": env_key}
    assert key_provider(a, env).provider_id == pa.provider_id
    assert key_provider(None, env).provider_id == pb.provider_id
    from_env = key_provider(None, {"LOCKSTEP_KEY": env_key})
    assert from_env is not None
    assert from_env.provider_id == LocalKeyProvider(base64.b64decode(env_key)).provider_id
    assert key_provider(None, {}) is None


def test_unwrapping_with_another_key_or_context_is_refused() -> None:
    """A wrapped key opens only under the key and the context (tenant, version) it was wrapped for."""
    p, q = LocalKeyProvider(os.urandom(32)), LocalKeyProvider(os.urandom(32))
    wrapped = p.wrap(b"k" * 32, b"ctx-a")
    assert p.unwrap(wrapped, b"ctx-a") == b"k" * 32
    for provider, context in ((p, b"ctx-b"), (q, b"ctx-a")):
        with pytest.raises(Refused, match="does not unwrap") as e:
            provider.unwrap(wrapped, context)
        assert e.value.code == "wrong_key"


def test_the_key_cache_is_bounded_and_forgets_unused_keys() -> None:
    """At most `size` entries, and none kept longer than `ttl_s` after its last use."""
    now = [0.0]
    cache: Ttl[str, int] = Ttl(2, 10.0, clock=lambda: now[0])
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert cache.get("a") is None  # evicted: the least recently used
    now[0] = 5.0
    assert cache.get("b") == 2  # used at 5: lives until 15
    now[0] = 12.0
    assert cache.get("c") is None  # last used at 0
    assert cache.get("b") == 2
    now[0] = 30.0
    assert cache.get("b") is None
    assert len(cache) == 0


# --- the key ring over a real store ----------------------------------------------------------------------
def _ring(tmp_path: Path, provider: LocalKeyProvider | None = None) -> tuple[KeyRing, Store]:
    store = open_store(f"sqlite:///{tmp_path}/ring.db")
    ring = KeyRing(provider or LocalKeyProvider(os.urandom(32)), lambda: datetime(2025, 1, 1, tzinfo=UTC))
    return ring, store


def test_the_ring_seals_and_opens_and_binds_each_value_to_its_run(tmp_path: Path) -> None:
    """Sealed for run r1, a value opens for r1 only; r2 (same tenant, its own key) refuses it clearly."""
    ring, store = _ring(tmp_path)
    with store.write() as tx:
        (m1,) = ring.seal(tx, "acme", "r1", [("RunStarted/input/card", {"n": "4111"})])
        ring.seal(tx, "acme", "r2", [("RunStarted/input/card", "x")])
    with store.read() as tx:
        assert ring.open(tx, "acme", "r1", {"card": m1}) == {"card": {"n": "4111"}}
        with pytest.raises(Refused, match="does not open under the run's key"):
            ring.open(tx, "acme", "r2", {"card": m1})
        with pytest.raises(Refused, match="has no key"):
            ring.open(tx, "acme", "r3", m1)
        with pytest.raises(Refused, match="another tenant"):
            ring.open(tx, "other", "r1", m1)
        label, payload = marker_parts(m1) or ("", b"")
        flipped = make_marker(label, payload[:-1] + bytes([payload[-1] ^ 1]))
        with pytest.raises(Refused, match="altered"):
            ring.open(tx, "acme", "r1", flipped)
        relabeled = make_marker("RunStarted/input/other", payload)
        with pytest.raises(Refused, match="another run, tenant or field"):
            ring.open(tx, "acme", "r1", relabeled)
    store.close()


def test_a_forgotten_run_opens_as_forgotten_even_with_its_key_cached(tmp_path: Path) -> None:
    """The key row is read on every use: once forgotten, this process's cached key is never used."""
    ring, store = _ring(tmp_path)
    with store.write() as tx:
        (m,) = ring.seal(tx, "acme", "r1", [("RunStarted/input/card", "4111")])
    with store.read() as tx:
        assert ring.open(tx, "acme", "r1", m) == "4111"  # now cached
    with store.write() as tx:
        tx.forget_run_key("r1", "acme", "2025-01-01T00:00:00Z")
    with store.read() as tx:
        assert ring.open(tx, "acme", "r1", m) == redaction(FORGOTTEN)
    with store.write() as tx:
        (late,) = ring.seal(tx, "acme", "r1", [("ResultIgnored/result", "late value")])
    with store.read() as tx:
        assert ring.open(tx, "acme", "r1", late) == redaction(FORGOTTEN)  # sealed under a key nobody kept
    store.close()


def test_another_key_names_both_keys_and_the_setting(tmp_path: Path) -> None:
    """A process configured with another key than the tenant's is told which key wrapped it."""
    ring, store = _ring(tmp_path)
    with store.write() as tx:
        (m,) = ring.seal(tx, "acme", "r1", [("RunStarted/input/card", "4111")])
    wrong = KeyRing(LocalKeyProvider(os.urandom(32)), ring.clock)
    with store.read() as tx, pytest.raises(Refused, match=r"was wrapped by local:.*LOCKSTEP_KEY_FILE") as e:
        wrong.open(tx, "acme", "r1", m)
    assert e.value.code == "wrong_key"
    none = KeyRing(None, ring.clock)
    with store.read() as tx, pytest.raises(Refused, match="has none") as e:
        none.open(tx, "acme", "r1", m)
    assert e.value.code == "no_key"
    store.close()
