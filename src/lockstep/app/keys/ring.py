"""The key ring: tenant data keys, run data keys, and sealing JSON values with them (envelope encryption).

    key-encryption key (the provider's: never in the database)
      wraps each version of a tenant's data key   tenant_keys   context ls1|tenant-key|<tenant>|<version>
        wraps the data key of each run             run_keys      context ls1|run-key|<tenant>|<run>|<version>
          seals each sensitive value               markers       AAD     ls1|<tenant>|<run>|<label>

All three are AES-256-GCM with random 96-bit nonces. A run has one key for its whole life (rotation
re-wraps it, never changes it), so a marker carries no key id, and a marker moved to another run,
tenant or label fails to open: its associated data differs.

Caches. Unwrapped keys are kept in memory, bounded (LRU) and for at most `ttl_s` seconds after their
last use. Every use reads the run's key row first (one indexed read in the caller's transaction), and
a cached key is used only while that row is byte for byte the one it was unwrapped from: once a run is
forgotten or its tenant shredded, no process opens its values again, whatever its cache holds; the key
bytes themselves leave a process's memory at the latest `ttl_s` after their last use (Python cannot
wipe them sooner). The clear states a writer caches (store/states.py) are dropped when a sealed run
stops waiting for an attempt, and runs are forgotten only once finished.
"""

from __future__ import annotations

import base64
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Generic, TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ...core.canonical import JSONObject, JSONValue, compact_json, parse_json
from ...core.sealed import FORGOTTEN, VERSION, make_marker, map_markers, marker_parts, redaction
from ...core.timeutil import iso
from ...errors import Refused
from ...store import ConcurrencyError, RunKeyRow, SealTx, TenantKeyRow
from .provider import KEY_FILE_ENV, NONCE, KeyProvider

__all__ = ["NO_KEY", "KeyRing", "Ttl", "b64", "unb64"]

NO_KEY = (
    f"set {KEY_FILE_ENV} to the key file `lockstep keys init` created (or LOCKSTEP_KEY, or the global "
    "--key-file option): the same key on every lockstep process of this database"
)
CURRENT_S = 5.0
K = TypeVar("K")
V = TypeVar("V")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _value_aad(tenant: str, run_id: str, label: str) -> bytes:
    return f"{VERSION}|{tenant}|{run_id}|{label}".encode()


def _run_key_context(tenant: str, run_id: str, version: int) -> bytes:
    return f"{VERSION}|run-key|{tenant}|{run_id}|{version}".encode()


def tenant_key_context(tenant: str, version: int) -> bytes:
    return f"{VERSION}|tenant-key|{tenant}|{version}".encode()


class Ttl(Generic[K, V]):
    """A bounded LRU whose entries also expire `ttl_s` after their last use."""

    def __init__(self, size: int, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.size, self.ttl_s, self.clock = size, ttl_s, clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        now = self.clock()
        with self._lock:
            self._expire(now)
            hit = self._entries.get(key)
            if hit is None:
                return None
            self._entries[key] = (now, hit[1])
            self._entries.move_to_end(key)
            return hit[1]

    def put(self, key: K, value: V) -> None:
        now = self.clock()
        with self._lock:
            self._entries[key] = (now, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
            self._expire(now)

    def drop(self, keep: Callable[[K], bool]) -> None:
        with self._lock:
            for key in [k for k in self._entries if not keep(k)]:
                del self._entries[key]

    def _expire(self, now: float) -> None:
        while self._entries:
            key, (used, _v) = next(iter(self._entries.items()))
            if now - used <= self.ttl_s:
                return
            del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)


class KeyRing:
    """Implements the store's Sealer: seals values for a run and opens them, under the run's key."""

    def __init__(
        self,
        provider: KeyProvider | None,
        clock: Callable[[], datetime],
        *,
        ttl_s: float = 300.0,
        size: int = 4096,
    ) -> None:
        self.provider = provider
        self.clock = clock
        # (tenant, version, wrapped) -> cipher; (run, version, wrapped) -> cipher: see the module's doc.
        self._tenants: Ttl[tuple[str, int, str], AESGCM] = Ttl(256, ttl_s)
        self._runs: Ttl[tuple[str, int, str], AESGCM] = Ttl(size, ttl_s)
        # The version new run keys are wrapped under, per tenant, read again after CURRENT_S: a rotation
        # elsewhere is picked up within that time, and until then the re-wrap moves the keys made.
        self._current: dict[str, tuple[float, TenantKeyRow]] = {}
        # Called with (tx, tenant, version) when this process creates a tenant key (the audit).
        self.on_created: Callable[[SealTx, str, int, str], None] | None = None

    def require(self, what: str) -> KeyProvider:
        if self.provider is None:
            raise Refused(
                f"{what} needs the encryption key, and this process has none: {NO_KEY}", code="no_key"
            )
        return self.provider

    # --- the store's Sealer --------------------------------------------------------------------
    def seal(
        self,
        tx: SealTx,
        tenant: str,
        run_id: str,
        values: Sequence[tuple[str, JSONValue]],
        *,
        new: bool = False,
    ) -> list[dict[str, str]]:
        aes = self._new_run_key(tx, tenant, run_id) if new else self._cipher(tx, tenant, run_id, create=True)
        if aes is None:
            # Forgotten: what the run records from now on is sealed under a key nobody keeps.
            aes = AESGCM(os.urandom(32))
        out = []
        for label, value in values:
            nonce = os.urandom(NONCE)
            text = compact_json(value).encode()
            out.append(
                make_marker(label, nonce + aes.encrypt(nonce, text, _value_aad(tenant, run_id, label)))
            )
        return out

    def open(self, tx: SealTx, tenant: str, run_id: str, value: JSONValue) -> JSONValue:
        row = tx.run_key(run_id)
        if row is not None and row.wrapped is None:
            return map_markers(value, lambda _m: redaction(FORGOTTEN))
        aes = self._stored_cipher(row, tenant) if row is not None else None

        def one(marker: JSONObject) -> JSONValue:
            try:
                parts = marker_parts(marker)
            except ValueError as exc:
                raise Refused(f"run {run_id} holds a {exc}", code="unreadable_sealed_value") from None
            if parts is None:  # pragma: no cover - map_markers hands over markers only
                return marker
            label, payload = parts
            if aes is None:
                raise Refused(
                    f"run {run_id} holds a sealed value ({label}) but has no key: it was copied from "
                    "another run, or the run's key row was removed",
                    code="unreadable_sealed_value",
                )
            try:
                clear = aes.decrypt(payload[:NONCE], payload[NONCE:], _value_aad(tenant, run_id, label))
            except (InvalidTag, ValueError):
                raise Refused(
                    f"the sealed value {label} of run {run_id} does not open under the run's key: it was "
                    "sealed for another run, tenant or field, or it was altered",
                    code="unreadable_sealed_value",
                ) from None
            return parse_json(clear)

        return map_markers(value, one)

    def forgotten(self, tx: SealTx, run_id: str) -> bool:
        """Whether the run's key was destroyed (its sealed values can never be opened again)."""
        row = tx.run_key(run_id)
        return row is not None and row.wrapped is None

    def drop(self, run_id: str | None = None, tenant: str | None = None) -> None:
        """Forget this process's cached keys of a run or a tenant (after forgetting or shredding them)."""
        if tenant is not None:  # run entries do not name their tenant: shredding is rare, drop them all
            self._current.pop(tenant, None)
            self._tenants.drop(lambda k: k[0] != tenant)
            self._runs.drop(lambda _k: False)
        else:
            self._runs.drop(lambda k: k[0] != run_id)

    def forget_current(self, tenant: str) -> None:
        """Read the tenant's current key version again next time (this process rotated it)."""
        self._current.pop(tenant, None)

    # --- keys ----------------------------------------------------------------------------------
    def _cipher(self, tx: SealTx, tenant: str, run_id: str, *, create: bool) -> AESGCM | None:
        """The run's key (with `create`, made if the run has none); None if it was forgotten."""
        row = tx.run_key(run_id)
        if row is None:
            return self._new_run_key(tx, tenant, run_id) if create else None
        return self._stored_cipher(row, tenant)

    def _stored_cipher(self, row: RunKeyRow, tenant: str) -> AESGCM | None:
        if row.tenant != tenant:
            raise Refused(
                f"the key of run {row.run_id} belongs to another tenant", code="unreadable_sealed_value"
            )
        if row.wrapped is None or row.key_version is None:
            return None
        cache_key = (row.run_id, row.key_version, row.wrapped)
        hit = self._runs.get(cache_key)
        if hit is not None:
            return hit
        aes = AESGCM(self.run_key_bytes(row))
        self._runs.put(cache_key, aes)
        return aes

    def run_key_bytes(self, row: RunKeyRow) -> bytes:
        """A run's data key, unwrapped (re-wrapping needs the bytes themselves)."""
        if row.tenant_key is None or row.wrapped is None or row.key_version is None:
            raise Refused(f"run {row.run_id} has no usable key", code="unreadable_sealed_value")
        tenant_aes = self.tenant_cipher(row.tenant_key)
        wrapped = unb64(row.wrapped)
        context = _run_key_context(row.tenant, row.run_id, row.key_version)
        try:
            return tenant_aes.decrypt(wrapped[:NONCE], wrapped[NONCE:], context)
        except InvalidTag:
            raise Refused(
                f"the key of run {row.run_id} does not unwrap under tenant {row.tenant}'s key version "
                f"{row.key_version}: the row was altered or copied",
                code="unreadable_sealed_value",
            ) from None

    def wrap_run_key(self, key: bytes, tenant: str, run_id: str, under: TenantKeyRow) -> str:
        nonce = os.urandom(NONCE)
        context = _run_key_context(tenant, run_id, under.version)
        return b64(nonce + self.tenant_cipher(under).encrypt(nonce, key, context))

    def tenant_cipher(self, row: TenantKeyRow) -> AESGCM:
        cache_key = (row.tenant, row.version, row.wrapped)
        hit = self._tenants.get(cache_key)
        if hit is not None:
            return hit
        provider = self.require(f"opening tenant {row.tenant}'s sealed values")
        if row.provider != provider.provider_id:
            raise Refused(
                f"tenant {row.tenant}'s key version {row.version} was wrapped by {row.provider}, but this "
                f"process's key is {provider.provider_id}: configure the key it was made with ({NO_KEY})",
                code="wrong_key",
            )
        aes = AESGCM(provider.unwrap(unb64(row.wrapped), tenant_key_context(row.tenant, row.version)))
        self._tenants.put(cache_key, aes)
        return aes

    def current_tenant_key(self, tx: SealTx, tenant: str, *, fresh: bool = False) -> TenantKeyRow:
        """The version new run keys are wrapped under: the newest live one, created if there is none."""
        hit = None if fresh else self._current.get(tenant)
        if hit is not None and time.monotonic() - hit[0] < CURRENT_S:
            return hit[1]
        rows = tx.tenant_keys(tenant)
        live = [r for r in rows if r.retired_at is None]
        row = live[-1] if live else self.new_tenant_key(tx, tenant, (rows[-1].version + 1) if rows else 1)
        self._current[tenant] = (time.monotonic(), row)
        return row

    def new_tenant_key(self, tx: SealTx, tenant: str, version: int) -> TenantKeyRow:
        provider = self.require(f"sealing tenant {tenant}'s sensitive values")
        wrapped = provider.wrap(os.urandom(32), tenant_key_context(tenant, version))
        row = TenantKeyRow(tenant, version, b64(wrapped), provider.provider_id, iso(self.clock()), None)
        if tx.insert_tenant_key(row):
            if self.on_created is not None:
                self.on_created(tx, tenant, version, provider.provider_id)
            return row
        # Another transaction created this version first: use theirs.
        return next(r for r in tx.tenant_keys(tenant) if r.version == version)

    def _new_run_key(self, tx: SealTx, tenant: str, run_id: str) -> AESGCM:
        under = self.current_tenant_key(tx, tenant)
        key = os.urandom(32)
        wrapped = self.wrap_run_key(key, tenant, run_id, under)
        try:
            tx.insert_run_key(run_id, tenant, under.version, wrapped)
        except ConcurrencyError:
            self._current.pop(tenant, None)  # e.g. that version was retired and deleted meanwhile
            raise
        # Not cached here: this transaction may still roll back; the next use reads the committed row.
        return AESGCM(key)
