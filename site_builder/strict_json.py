"""Strict JSON parsing: one document, UTF-8, no duplicate keys, no NaN, bounded.

Python's ``json`` module accepts things a signed-record mirror must not: a
duplicate key silently keeps the last value (so two parsers can disagree about
what was signed), ``NaN`` and ``Infinity`` are not JSON, and integers beyond
±2**53 do not survive a round trip through JavaScript (I-JSON, RFC 7493).
Every refusal raises StrictJSONError with a stable check name.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson

MAX_DEPTH = 64
MAX_SAFE_INTEGER = 2**53 - 1
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SPACED_KEY_END = re.compile(rb'"[ \t\n\r]+:')


class StrictJSONError(ValueError):
    def __init__(self, check: str, reason: str):
        super().__init__(f"{check}: {reason}")
        self.check = check
        self.reason = reason


def _reject_constant(name: str) -> Any:
    raise StrictJSONError("json_number", f"{name} is not a JSON number")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StrictJSONError("json_number", f"number {text[:40]} overflows a double")
    return value


def _parse_int(text: str) -> int:
    if len(text) > 17 or abs(int(text)) > MAX_SAFE_INTEGER:
        raise StrictJSONError("json_number", f"integer {text[:40]}{'…' if len(text) > 40 else ''} is outside ±2^53")
    return int(text)


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise StrictJSONError("json_duplicate_key", f"duplicate key {key[:60]!r}{'…' if len(key) > 60 else ''}")
            seen.add(key)
    return obj


def _depth_exceeds(node: dict | list, budget: int) -> bool:
    """True if containers nest deeper than *budget* levels (recursion is bounded by the budget)."""
    if budget <= 0:
        return True
    for value in node.values() if type(node) is dict else node:
        if (type(value) is dict or type(value) is list) and _depth_exceeds(value, budget - 1):
            return True
    return False


def _contains_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def parse_strict(raw: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """Parse *raw* as one strict JSON document or raise StrictJSONError."""
    return parse_strict_noting_floats(raw, max_depth)[0]


def parse_strict_noting_floats(raw: bytes, max_depth: int = MAX_DEPTH) -> tuple[Any, bool | None]:
    """``parse_strict``, and whether the value holds a float: False when known to hold none (the canonical
    encoder then takes its fast path without walking the value again), None when not known."""
    text = _checked_text(raw)
    if _SURROGATE_ESCAPE.search(raw) is None:
        value = _parse_plain(raw, max_depth)
        if value is not None:
            return value, False
    return _parse_checked(text, raw, max_depth), None


def _checked_text(raw: bytes) -> str:
    """*raw* as text, or StrictJSONError for an empty file, a byte-order mark, NUL bytes or invalid UTF-8."""
    if not raw.strip():
        raise StrictJSONError("json_syntax", "empty file")
    if raw.startswith(b"\xef\xbb\xbf"):
        raise StrictJSONError("json_encoding", "starts with a UTF-8 byte-order mark")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise StrictJSONError("json_encoding", "UTF-16 byte-order mark; bundles are UTF-8")
    if b"\x00" in raw:
        raise StrictJSONError("json_encoding", "contains NUL bytes (UTF-16 or binary?); bundles are UTF-8")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StrictJSONError("json_encoding", f"invalid UTF-8 at byte {exc.start}") from None


def _parse_plain(raw: bytes, max_depth: int) -> dict | list | None:
    """The fast path: orjson (~30 µs for a 14 KB bundle where ``json.loads`` with the checking hooks takes
    ~125 µs and the depth walk ~30 µs more), for documents that are plainly acceptable: an object or array
    without floats or integers beyond ±2^53, nesting within *max_depth*, and not one duplicate key.  It only
    ever accepts; anything else (None) goes to ``_parse_checked``, which accepts or names the problem.

    Duplicates are found by counting: orjson keeps one value per key, so its objects hold fewer keys than the
    text names exactly when a key repeats.  The text's keys are counted as ``":`` (a key's closing quote and
    its colon).  That count can only be too high (a string may hold ``\\":``), which sends a document to the
    full parser, never past it; it could be too low only with white space before a colon, and such documents
    go to the full parser too (JSON, and orjson, allow only space, tab, CR and LF there; the property test
    writes other white space as well, which both parsers refuse).  Property tests (tests/test_strict_json.py)
    hold the two paths to the same answer."""
    if _SPACED_KEY_END.search(raw) is not None:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(value) is not dict and type(value) is not list:
        return None
    keys = _plain_keys(value, max_depth)
    return value if keys == raw.count(b'":') else None


def _plain_keys(node: dict | list, budget: int) -> int:
    """How many keys *node*'s objects hold, or -1 if it nests deeper than *budget* or holds a float or an
    integer beyond ±2^53 (orjson reads integers beyond 64 bits as floats)."""
    if budget <= 0:
        return -1
    if type(node) is dict:
        count = len(node)
        values = node.values()
    else:
        count = 0
        values = node
    for value in values:
        kind = type(value)
        if kind is str:
            continue
        if kind is dict or kind is list:
            inner = _plain_keys(value, budget - 1)
            if inner < 0:
                return -1
            count += inner
        elif kind is int:
            if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
                return -1
        elif kind is float:
            return -1
    return count


def _parse_checked(text: str, raw: bytes, max_depth: int) -> Any:
    """Python's parser with a hook for every object and number: slower, and names what is wrong."""
    try:
        value = json.loads(
            text,
            object_pairs_hook=_object_without_duplicates,
            parse_constant=_reject_constant,
            parse_float=_parse_float,
            parse_int=_parse_int,
        )
    except StrictJSONError:
        raise
    except RecursionError:
        raise StrictJSONError("json_depth", "nesting is deeper than the parser allows") from None
    except json.JSONDecodeError as exc:
        # (as json words it, "<what>: line L column C": some of its messages end in "at" themselves)
        raise StrictJSONError("json_syntax", f"{exc.msg}: line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:  # int conversion limits and similar
        raise StrictJSONError("json_number", str(exc).split("\n")[0]) from None
    if isinstance(value, (dict, list)) and _depth_exceeds(value, max_depth):
        raise StrictJSONError("json_depth", f"nesting deeper than {max_depth} levels")
    if _SURROGATE_ESCAPE.search(raw) and _contains_lone_surrogate(value):
        raise StrictJSONError("json_encoding", "a string holds a lone UTF-16 surrogate")
    return value
