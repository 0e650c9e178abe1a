"""Pinned signing keys: the only keys a signature may verify against.

A key embedded in a bundle is never trusted by itself; the mirror operator pins
keys (by default the resolver's ``pith-v1-2026-05``, shipped in the package)
and every signature is matched to a pinned key by key id *and* fingerprint.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

from site_builder.loading import FileReadError, read_bytes
from site_builder.strict_json import StrictJSONError, parse_strict


class KeyFileError(ValueError):
    """A trusted-key file that cannot be used; the message names the file."""


@dataclass(frozen=True)
class TrustedKey:
    key_id: str
    public_key: bytes
    document: dict = field(compare=False, hash=False, repr=False)

    @property
    def fingerprint_hex(self) -> str:
        """First 128 bits of sha256(raw key), as bundles write it."""
        return hashlib.sha256(self.public_key).hexdigest()[:32]

    @property
    def public_key_hex(self) -> str:
        return self.public_key.hex()

    @property
    def public_key_b64(self) -> str:
        return base64.b64encode(self.public_key).decode("ascii")


@dataclass(frozen=True)
class TrustSet:
    keys: tuple[TrustedKey, ...]

    def by_id(self, key_id: Any) -> TrustedKey | None:
        for key in self.keys:
            if key.key_id == key_id:
                return key
        return None

    def identity(self) -> str:
        """A digest naming this exact set of keys (part of every cache key): one encoding per set, so that no
        other set of ids and keys shares it (a verification result cached under one set is reused only under
        that set)."""
        material = json.dumps(sorted([k.key_id, k.public_key_hex] for k in self.keys), ensure_ascii=True)
        return hashlib.sha256(material.encode()).hexdigest()

    def documents(self) -> list[dict]:
        return [k.document for k in self.keys]


_KEY_ID = re.compile(r"[!-~]{1,128}")  # (the resolver's: pith-v1-2026-05)


def key_from_document(doc: Any, origin: str = "key document") -> TrustedKey:
    """Build a TrustedKey from a ``public_keys``-shaped object, cross-checking every encoding given."""
    if not isinstance(doc, dict):
        raise KeyFileError(f"{origin}: a key must be a JSON object")
    key_id = doc.get("key_id")
    if not isinstance(key_id, str) or not key_id:
        raise KeyFileError(f"{origin}: key_id missing or not a string")
    if not _KEY_ID.fullmatch(key_id):
        raise KeyFileError(f"{origin}: key_id {key_id[:60]!r} is not 1 to 128 visible ASCII characters (it is shown "
                           f"on every page and names the key in the cache)")
    algorithm = doc.get("algorithm", "ed25519")
    if algorithm != "ed25519":
        raise KeyFileError(f"{origin}: key {key_id}: unsupported algorithm {algorithm!r}")
    candidates: list[bytes] = []
    if "public_key_hex" in doc:
        try:
            candidates.append(bytes.fromhex(doc["public_key_hex"]))
        except (TypeError, ValueError):
            raise KeyFileError(f"{origin}: key {key_id}: public_key_hex is not hex") from None
    if "public_key_b64" in doc:
        try:
            candidates.append(base64.b64decode(doc["public_key_b64"], validate=True))
        except (TypeError, ValueError, binascii.Error):
            raise KeyFileError(f"{origin}: key {key_id}: public_key_b64 is not base64") from None
    if not candidates:
        raise KeyFileError(f"{origin}: key {key_id}: needs public_key_hex or public_key_b64")
    if any(c != candidates[0] for c in candidates):
        raise KeyFileError(f"{origin}: key {key_id}: public_key_hex and public_key_b64 differ")
    raw = candidates[0]
    if len(raw) != 32:
        raise KeyFileError(f"{origin}: key {key_id}: an Ed25519 public key is 32 bytes, got {len(raw)}")
    key = TrustedKey(key_id=key_id, public_key=raw, document=doc)
    stated = doc.get("fingerprint_sha256_hex")
    if stated is not None and stated != key.fingerprint_hex:
        raise KeyFileError(f"{origin}: key {key_id}: fingerprint_sha256_hex does not match the key")
    return key


KEY_FILE_MAX_BYTES = 1 << 20  # (a key is ~400 bytes)


def load_key_file(path: Path) -> list[TrustedKey]:
    """The keys in the file *path*: a regular file of at most 1 MB (a link to one is followed: the user named it;
    a FIFO would be waited on for ever, /dev/zero read for ever)."""
    try:  # (nothing there, a link that leads nowhere, or a folder on the way this user may not search)
        os.stat(path)
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = parse_strict(read_bytes(path, KEY_FILE_MAX_BYTES, follow_links=True))
    except FileReadError as exc:
        raise KeyFileError(f"{path}: {exc.reason}") from None
    except StrictJSONError as exc:
        raise KeyFileError(f"{path}: {exc.reason}") from None
    docs = data if isinstance(data, list) else [data]
    if not docs:
        raise KeyFileError(f"{path}: no keys in file")
    return [key_from_document(doc, str(path)) for doc in docs]


def default_key_document() -> dict:
    text = resources.files("site_builder").joinpath("data/pith-signing-key.json").read_text("utf-8")
    return json.loads(text)


def load_trust_set(paths: Iterable[Path] = ()) -> TrustSet:
    """The pinned keys: those in *paths*, or the resolver's key shipped in the package."""
    paths = list(paths)
    keys: list[TrustedKey] = []
    if paths:
        for path in paths:
            keys.extend(load_key_file(Path(path)))
    else:
        keys.append(key_from_document(default_key_document(), "built-in resolver key"))
    seen: dict[str, TrustedKey] = {}
    for key in keys:
        if key.key_id in seen and seen[key.key_id].public_key != key.public_key:
            raise KeyFileError(f"key id {key.key_id} is pinned twice with different keys")
        seen[key.key_id] = key
    return TrustSet(tuple(sorted(seen.values(), key=lambda k: k.key_id)))
