import codecs
import json
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from site_builder.strict_json import (StrictJSONError, _parse_checked, _parse_plain, parse_strict,
                                      parse_strict_noting_floats)

from conftest import REAL_FILES


@pytest.mark.parametrize("raw, check", [
    (b"", "json_syntax"),
    (b'{"a": 1', "json_syntax"),
    (b'{"a": 1} {"b": 2}', "json_syntax"),
    (b'{"a": 1, "a": 2}', "json_duplicate_key"),
    (b'{"x": {"y": [{"k": 1, "k": 1}]}}', "json_duplicate_key"),
    (b'{"a": NaN}', "json_number"),
    (b'{"a": -Infinity}', "json_number"),
    (b'{"a": 1e400}', "json_number"),
    (b'{"a": 123456789012345678901234567890}', "json_number"),
    (b'{"a": "\\ud800"}', "json_encoding"),
    (b'{"\\ud800": 1}', "json_encoding"),  # (in a key)
    (b'{"a": ["x", "\\udc00"]}', "json_encoding"),  # (in a list)
    (b'\xef\xbb\xbf{"a": 1}', "json_encoding"),
    ('{"a": 1}'.encode("utf-16"), "json_encoding"),
    (b'{"a": "\xff"}', "json_encoding"),
    (b"[" * 100_000 + b"]" * 100_000, "json_depth"),
    (b"[" * 70 + b"]" * 70, "json_depth"),
])
def test_rejections(raw, check):
    with pytest.raises(StrictJSONError) as info:
        parse_strict(raw)
    assert info.value.check == check


@pytest.mark.parametrize("raw, reason", [
    (b'{"title": "cut off', "Unterminated string starting at: line 1 column 11"),  # (json's own words end in "at")
    (b'{\n  "a": 1,\n}', "Illegal trailing comma before end of object: line 2 column 9" if sys.version_info >= (3, 13)
     else "Expecting property name enclosed in double quotes: line 3 column 1"),  # (json's words since 3.13)
])
def test_a_syntax_error_says_where_in_one_plain_phrase(raw, reason):
    """The reason a REJECTED line shows for broken JSON: what is wrong, then the line and column, worded once."""
    with pytest.raises(StrictJSONError) as info:
        parse_strict(raw)
    assert info.value.reason == reason


@pytest.mark.parametrize("raw, reason", [
    (b"  \n", "empty file"),  # (white space alone: not json's "Expecting value")
    ('{"a": 1}'.encode("utf-16"), "UTF-16 byte-order mark; bundles are UTF-8"),
    (codecs.BOM_UTF16_BE + '{"a": 1}'.encode("utf-16-be"), "UTF-16 byte-order mark; bundles are UTF-8"),
    ('{"a": 1}'.encode("utf-16-le"), "contains NUL bytes (UTF-16 or binary?); bundles are UTF-8"),  # (no mark)
    (b'{"a": ' + b"1" * 5000 + b"}", "integer " + "1" * 40 + "\u2026 is outside \u00b12^53"),  # (not Python's limit)
])
def test_a_file_that_is_no_utf8_json_or_holds_a_huge_integer_says_so_in_its_own_words(raw, reason):
    """What a REJECTED line says of a file saved as UTF-16 (with its byte-order mark or without), of one of white
    space alone, and of an integer of thousands of digits (Python's int() refuses one past 4,300 digits, in words
    of its own that name a setting of Python's)."""
    with pytest.raises(StrictJSONError) as info:
        parse_strict(raw)
    assert info.value.reason == reason


@pytest.mark.parametrize("text, refused_by", [
    (b"9007199254740991", None), (b"-9007199254740991", None),  # 2^53 - 1: the largest integer I-JSON allows
    (b"9007199254740992", "json_number"), (b"-9007199254740992", "json_number"),  # 2^53: JavaScript cannot
    # tell it from 2^53 + 1; in a container (as in a bundle), where the fast path reads it, within 64 bits:
    (b'{"n": [9007199254740991, -9007199254740991]}', None),
    (b'{"n": 9007199254740992}', "json_number"), (b"[-9007199254740992]", "json_number"),
    (b'{"n": 9223372036854775807}', "json_number"),  # (the largest 64-bit integer)
    (b"[" * 64 + b"]" * 64, None), (b'{"a":' * 64 + b"1" + b"}" * 64, None),  # containers nested 64 deep
    (b"[" * 65 + b"]" * 65, "json_depth"), (b'{"a":' * 65 + b"1" + b"}" * 65, "json_depth"),
    # (a float: the full parser)
    (b"[" * 64 + b"1.5" + b"]" * 64, None), (b"[" * 65 + b"1.5" + b"]" * 65, "json_depth"),
])
def test_the_limits_are_exact(text, refused_by):
    """The edges of the number and depth limits, where an off-by-one would let a document through (or not)."""
    if refused_by is None:
        parse_strict(text)
    else:
        with pytest.raises(StrictJSONError) as info:
            parse_strict(text)
        assert info.value.check == refused_by


def test_accepts_ordinary_json_with_unicode_and_surrogate_pairs():
    assert parse_strict('{"a": [1, 2.5, "é", "\\ud83d\\ude00", null]}'.encode()) == \
        {"a": [1, 2.5, "é", "😀", None]}


# --- the fast path (orjson) and the checking parser give the same answer -----------------------------------


# Keys and strings weighted toward what the key count looks at: quotes, colons, backslashes, white space.
_TRICKY = st.sampled_from(['"', ':', '\\', ' ', '\t', '\n', 'a', 'é', '\u2028', '\U0001f600', '\x1f'])
_TEXT = st.lists(st.one_of(_TRICKY, st.sampled_from(['":', '\\":', '" :']), st.characters(exclude_categories=("Cs",))),
                 max_size=5).map("".join)
_NUMBERS = st.integers(-(2**65), 2**65) | st.integers(-(2**53) - 2, -(2**53) + 2) | st.integers(2**53 - 2, 2**53 + 2) \
    | st.floats(allow_nan=False, allow_infinity=False)
_SCALAR = st.none() | st.booleans() | _NUMBERS | _TEXT
# Objects as lists of pairs, so that keys may repeat, directly or through an escape (\u0061 for a).
_VALUE = st.recursive(_SCALAR, lambda inner: st.lists(inner, max_size=4).map(lambda v: ("list", v))
                      | st.lists(st.tuples(_TEXT | st.sampled_from(["a", "b"]), inner), max_size=4).map(lambda v: ("obj", v)),
                      max_leaves=25)


def _write(value, style) -> str:
    """JSON text in one of several styles: compact, spaced, white space before colons, keys escaped."""
    if isinstance(value, tuple) and value[0] == "list":
        return "[" + style["comma"].join(_write(v, style) for v in value[1]) + "]"
    if isinstance(value, tuple) and value[0] == "obj":
        pairs = []
        for k, v in value[1]:
            key = json.dumps(k, ensure_ascii=style["ascii"])
            if style["escape_a"] and k == "a":
                key = '"\\u0061"'
            pairs.append(key + style["colon"] + _write(v, style))
        return "{" + style["comma"].join(pairs) + "}"
    return json.dumps(value, ensure_ascii=style["ascii"])


_STYLE = st.fixed_dictionaries({"comma": st.sampled_from([",", ", ", ",\n  "]),
                                "colon": st.sampled_from([":", ": ", " :", "\t:", "\n:", "\r\n :",
                                                           "\x0c:", "\xa0:", "\u2028:"]),  # the last three: not JSON white space
                                "ascii": st.booleans(), "escape_a": st.booleans()})


def _typed(value):
    """*value* with every number tagged by its type (1 == 1.0 == True in Python; the parsers must agree on types)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, repr(value))


def _checked(raw: bytes):
    try:
        return "ok", _typed(_parse_checked(raw.decode(), raw, 64))
    except StrictJSONError as exc:
        return "refused", exc.check


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(_VALUE, _STYLE, st.integers(1, 8))
def test_the_fast_path_accepts_only_what_the_checking_parser_accepts_and_reads_it_the_same(value, style, depth):
    raw = _write(value, style).encode()
    for _ in range(depth if depth > 5 else 0):  # now and then nest it near the depth limit
        raw = b"[" * 10 + raw + b"]" * 10
    fast = _parse_plain(raw, 64) if raw.lstrip()[:1] in (b"{", b"[") else None
    expected = _checked(raw)
    if fast is not None:
        assert expected == ("ok", _typed(fast))
    try:
        got = "ok", _typed(parse_strict(raw))
    except StrictJSONError as exc:
        got = "refused", exc.check
    assert got == expected


def test_a_duplicate_key_is_refused_however_the_text_hides_it():
    cases = [b'{"a":1,"a":2}', b'{"\\u0061":1,"a":2}', b'{"a" :1,"a":2,"x\\":":0}', b'{"a":{"b":1,"b":1}}',
             b'[{"k":"\\":"},{"k":1,"k":2}]', b'{"a":1,\n"a"\n:2}']
    for raw in cases:
        assert _parse_plain(raw, 64) is None, raw
        with pytest.raises(StrictJSONError) as info:
            parse_strict(raw)
        assert info.value.check == "json_duplicate_key", raw


def test_a_duplicate_key_is_named_cut_at_60_characters():
    key = "k" * 100_000
    with pytest.raises(StrictJSONError) as info:
        parse_strict(json.dumps({"a": 1}).replace('"a"', f'"{key}"').replace("}", f', "{key}": 2}}').encode())
    assert info.value.reason == f"duplicate key {'k' * 60!r}…"


def test_the_key_named_is_the_one_that_repeats():
    with pytest.raises(StrictJSONError) as info:
        parse_strict(b'{"first": 1, "second": 2, "third": 3, "second": 4}')
    assert info.value.reason == "duplicate key 'second'"


def test_a_real_bundle_takes_the_fast_path_and_is_known_to_hold_no_float():
    for path in REAL_FILES:
        raw = path.read_bytes()
        value, holds_float = parse_strict_noting_floats(raw)
        assert holds_float is False
        assert _parse_plain(raw, 64) is not None
        assert _typed(value) == _typed(_parse_checked(raw.decode(), raw, 64))
    assert parse_strict_noting_floats(b'{"x": 1.5}') == ({"x": 1.5}, None)  # a float: the checking parser read it
