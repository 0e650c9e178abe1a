"""Canonical JSON and digests (PITH_FORMAT.md §1), pure functions.

Every hash in a bundle is ``sha256(canon(obj))`` where ``canon`` is Python's
``json.dumps`` with sorted keys, compact separators and non-ASCII kept as
UTF-8.  The in-browser verifier (``static/verify.js``) must produce the same
bytes; both are tested against each other.  Verification encodes with orjson
where it gives the same bytes (no floats), checked by a property test.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any, Callable

import orjson

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
    return digest(_without(obj, excluded))


def _without(obj: dict, excluded: tuple[str, ...]) -> dict:
    return {k: v for k, v in obj.items() if k not in excluded}


def _holds_float(obj: Any) -> bool:
    """True if a float is anywhere in *obj* (dicts and lists walked without recursion)."""
    stack = [obj]
    pop, push = stack.pop, stack.extend
    while stack:
        node = pop()
        kind = type(node)
        if kind is dict:
            push(node.values())
        elif kind is list:
            push(node)
        elif kind is float:
            return True
    return False


def _by_orjson(obj: Any, option: int, reference: Callable[[Any], bytes]) -> bytes:
    """What *reference* (Python's encoder) makes of *obj*, made by orjson, for values that hold no float (the one
    place the two differ: orjson writes ``1e-7`` where Python writes ``1e-07``).  On strings, integers, keys and
    nesting they agree byte for byte (``tests/test_canonical.py`` checks it on generated values); whatever orjson
    refuses (an integer beyond 64 bits, a lone surrogate, deep nesting) goes to *reference*, which encodes or
    refuses it as ever."""
    try:
        return orjson.dumps(obj, option=option)
    except (orjson.JSONEncodeError, TypeError):
        return reference(obj)


def _orjson_canon(obj: Any) -> bytes:
    """``canon(obj)`` by orjson, for a value without floats."""
    return _by_orjson(obj, orjson.OPT_SORT_KEYS, canon)


class CanonicalEncoder:
    """Canonical texts and digests of one parsed document's parts: by orjson (about four times as fast) when the
    document holds no float, else by the reference encoder.

    Each part is encoded whole, each time it is asked for.  Reusing the text of a part met twice (an event's
    payload is hashed for the event and again inside the bundle) gained nothing measurable with orjson, and with
    the reference encoder it cost a fifth more than encoding again (4 real bundles verified 2,000 times: 1.18 s
    against 1.19 s, and 1.06 s against 0.86 s)."""

    def __init__(self, fast: bool):
        self.fast = fast
        self._encode: Callable[[Any], bytes] = _orjson_canon if fast else canon

    @staticmethod
    def for_document(doc: Any, holds_float: bool | None = None) -> CanonicalEncoder:
        """The encoder for *doc*; *holds_float* is what the parser found out (None: not known); the walk that
        finds out otherwise costs about a fifth of what orjson saves on a bundle (~0.05 ms of ~0.25 ms)."""
        if holds_float is None:
            holds_float = _holds_float(doc)
        return CanonicalEncoder(fast=not holds_float)

    def text(self, obj: Any) -> str:
        return self._encode(obj).decode("utf-8")

    def text_without(self, obj: dict, *excluded: str) -> str:
        return self._encode(_without(obj, excluded)).decode("utf-8")

    def digest(self, obj: Any) -> str:
        return hashlib.sha256(self._encode(obj)).hexdigest()

    def digest_without(self, obj: dict, *excluded: str) -> str:
        return hashlib.sha256(self._encode(_without(obj, excluded))).hexdigest()


def pith_id_from_digest(canonical_sha256: str) -> str:
    """The 26-character pith ID: RFC 4648 base32 of the digest bytes, first 26 characters."""
    return base64.b32encode(bytes.fromhex(canonical_sha256)).decode("ascii")[:26]


def title_canon_sha256(title: str) -> str:
    """Digest of a title lower-cased with whitespace collapsed (PITH_FORMAT.md §3)."""
    return hashlib.sha256(" ".join(title.lower().split()).encode("utf-8")).hexdigest()


def resolver_json(obj: Any) -> bytes:
    """The resolver's compact form for served JSON (file key order, not sorted):
    ``json.dumps(obj, separators=(",", ":"), ensure_ascii=False)`` in UTF-8.  Written by orjson (every record's
    ``state.json``) where the two agree, as for canonical bytes: without floats."""
    return _by_orjson_unless_float(obj, 0, _resolver_reference)


def pretty_json(obj: Any) -> str:
    """``json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False)``, as a record page shows its canonical
    record; by orjson (a sixth of the time) where the two agree, as for canonical bytes: without floats."""
    return _by_orjson_unless_float(obj, orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2, _pretty_reference).decode("utf-8")


def _by_orjson_unless_float(obj: Any, option: int, reference: Callable[[Any], bytes]) -> bytes:
    """``_by_orjson`` for a value not known to be float-free: a walk looks, and a float goes to *reference*."""
    return reference(obj) if _holds_float(obj) else _by_orjson(obj, option, reference)


def _pretty_reference(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False).encode("utf-8")


def _resolver_reference(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
