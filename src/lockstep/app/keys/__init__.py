"""Encryption at rest: key providers (provider.py), the key ring that seals and opens values with
tenant and run data keys (ring.py), and key management: rotation, re-wrap, forget, shred (manage.py)."""

from .manage import Keys
from .provider import KEY_ENV, KEY_FILE_ENV, KeyProvider, LocalKeyProvider, create_key_file, key_provider
from .ring import NO_KEY, KeyRing

__all__ = [
    "KEY_ENV",
    "KEY_FILE_ENV",
    "NO_KEY",
    "KeyProvider",
    "KeyRing",
    "Keys",
    "LocalKeyProvider",
    "create_key_file",
    "key_provider",
]
