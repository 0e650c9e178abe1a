"""Canonical JSON and digests (PITH_FORMAT.md §1), pure functions.

Every hash in a bundle is ``sha256(canon(obj))`` where ``canon`` is Python's
``json.dumps`` with sorted keys, compact separators and non-ASCII kept as
UTF-8.  The in-browser verifier (``static/verify.js``) must produce the same
bytes; both are tested against each other.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

_encoder = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=False
)


def canon(obj: Any) -> bytes:
    """The canonical bytes of *obj*; raises ValueError on NaN/Infinity or lone surrogates."""
    try:
        return _encoder.encode(obj).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"string is not valid Unicode ({exc.reason})") from None


def digest(obj: Any) -> str:
    """Hex SHA-256 of the canonical bytes of *obj*."""
    return hashlib.sha256(canon(obj)).hexdigest()


def digest_without(obj: dict, *excluded: str) -> str:
    """Digest of a dict with some keys left out (how bundles, events and states hash themselves)."""
    return digest({k: v for k, v in obj.items() if k not in excluded})


def pith_id_from_digest(canonical_sha256: str) -> str:
    """The 26-character pith ID: RFC 4648 base32 of the digest bytes, first 26 characters."""
    return base64.b32encode(bytes.fromhex(canonical_sha256)).decode("ascii")[:26]


def title_canon_sha256(title: str) -> str:
    """Digest of a title lower-cased with whitespace collapsed (PITH_FORMAT.md §3)."""
    return hashlib.sha256(" ".join(title.lower().split()).encode("utf-8")).hexdigest()


def resolver_json(obj: Any) -> bytes:
    """The resolver's compact form for served JSON (file key order, not sorted)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
