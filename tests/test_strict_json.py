import pytest

from site_builder.strict_json import StrictJSONError, parse_strict


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


def test_accepts_ordinary_json_with_unicode_and_surrogate_pairs():
    assert parse_strict('{"a": [1, 2.5, "é", "\\ud83d\\ude00", null]}'.encode()) == \
        {"a": [1, 2.5, "é", "😀", None]}
