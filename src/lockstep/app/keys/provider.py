"""Key providers: where the key-encryption key lives that wraps each tenant's data key.

A provider wraps and unwraps 32-byte keys with a context (associated data naming what the key is for),
and says who it is (`provider_id`, stored beside every key it wrapped). The database never holds the
key-encryption key, so whoever has the database without it reads no sealed value.

`LocalKeyProvider` is the built-in one: a 256-bit key from a key file (`LOCKSTEP_KEY_FILE`, created by
`lockstep keys init`, mode 0600) or from `LOCKSTEP_KEY` (base64). The seam for a KMS (Vault transit,
AWS KMS, GCP KMS) is the same three members: `wrap` is the KMS's encrypt with the context as its
associated data or encryption context, `unwrap` its decrypt, `provider_id` names the KMS key (e.g.
`vault:transit/lockstep`); the KMS then sees one call per tenant key unwrapped, which the key ring
caches (app/keys/ring.py), never one per value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ...errors import InvalidInput, Refused

__all__ = [
    "KEY_ENV",
    "KEY_FILE_ENV",
    "KeyProvider",
    "LocalKeyProvider",
    "create_key_file",
    "key_provider",
]

KEY_FILE_ENV = "LOCKSTEP_KEY_FILE"
KEY_ENV = "LOCKSTEP_KEY"
NONCE = 12


class KeyProvider(Protocol):
    @property
    def provider_id(self) -> str:
        """Stored with each key it wraps: which provider and key can unwrap it again."""
        ...

    def wrap(self, key: bytes, context: bytes) -> bytes: ...
    def unwrap(self, wrapped: bytes, context: bytes) -> bytes:
        """The key; Refused (code wrong_key) when `wrapped` was not made by this key and context."""
        ...


class LocalKeyProvider:
    """AES-256-GCM key wrapping under a local key-encryption key (random 96-bit nonces)."""

    def __init__(self, key: bytes, source: str = "the key") -> None:
        if len(key) != 32:
            raise InvalidInput(
                f"{source} holds {len(key)} bytes, not 32: create a key with `lockstep keys init`"
            )
        self._aes = AESGCM(key)
        self.source = source
        # A fingerprint, not the key: sha256 of a 256-bit random key reveals nothing about it.
        self._id = "local:" + hashlib.sha256(b"lockstep key id\0" + key).hexdigest()[:16]

    @property
    def provider_id(self) -> str:
        return self._id

    def wrap(self, key: bytes, context: bytes) -> bytes:
        nonce = os.urandom(NONCE)
        return nonce + self._aes.encrypt(nonce, key, context)

    def unwrap(self, wrapped: bytes, context: bytes) -> bytes:
        try:
            return self._aes.decrypt(wrapped[:NONCE], wrapped[NONCE:], context)
        except InvalidTag:
            raise Refused(
                f"a stored key does not unwrap under {self._id} ({self.source}): it was wrapped by "
                f"another key, or altered; configure the key file it was made with",
                code="wrong_key",
            ) from None

    @classmethod
    def from_text(cls, text: str, source: str) -> LocalKeyProvider:
        try:
            key = base64.b64decode(text.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput(
                f"{source} is not base64 of 32 bytes: create a key with `lockstep keys init`"
            ) from None
        return cls(key, source)

    @classmethod
    def from_file(cls, path: str | Path) -> LocalKeyProvider:
        p = Path(path).expanduser()
        try:
            info = p.stat()
        except FileNotFoundError:
            raise InvalidInput(
                f"key file {p} does not exist: create it with `lockstep keys init --key-file {p}`"
            ) from None
        except OSError as exc:
            raise InvalidInput(f"key file {p} cannot be read: {exc.strerror}") from None
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise InvalidInput(
                f"key file {p} can be read by other users (mode {stat.S_IMODE(info.st_mode):o}): "
                f"`chmod 600 {p}`"
            )
        try:
            text = p.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"key file {p} cannot be read: {exc}") from None
        return cls.from_text(text, f"key file {p}")


def key_provider(
    key_file: str | Path | None = None, env: Mapping[str, str] | None = None
) -> LocalKeyProvider | None:
    """The configured key: `key_file`, else LOCKSTEP_KEY_FILE, else LOCKSTEP_KEY; None without any."""
    env = os.environ if env is None else env
    path = key_file or env.get(KEY_FILE_ENV)
    if path:
        return LocalKeyProvider.from_file(path)
    text = env.get(KEY_ENV)
    if text:
        return LocalKeyProvider.from_text(text, KEY_ENV)
    return None


def create_key_file(path: str | Path) -> LocalKeyProvider:
    """Write a new random key to `path` (mode 0600; refused if the file exists: a key in use must never
    be overwritten, every value sealed under it would be lost)."""
    p = Path(path).expanduser()
    if not p.parent.is_dir():
        raise InvalidInput(f"cannot create key file {p}: directory {p.parent} does not exist")
    key = os.urandom(32)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise InvalidInput(
            f"key file {p} exists already: it may hold the key of sealed values, so it is never "
            "overwritten; choose another path"
        ) from None
    with os.fdopen(fd, "w") as f:
        f.write(base64.b64encode(key).decode() + "\n")
    return LocalKeyProvider(key, f"key file {p}")
