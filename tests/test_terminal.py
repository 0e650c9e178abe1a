"""What reaches a terminal (terminal.py): controls escaped, text kept."""

import os

import pytest

from site_builder.terminal import printable


@pytest.mark.parametrize("text, shown", [
    ("plain café.json", "plain café.json"),
    ("a\nb", "a\\nb"),
    ("\x1b[31mred", "\\x1b[31mred"),
    ("bell\x07", "bell\\x07"),
    ("rtl\u202eevil", "rtl\\u202eevil"),
    ("surrogate\udcff", "surrogate\\xff"),  # (a byte of a file name that is not UTF-8: shown as that byte)
    ("low byte\udc80", "low byte\\x80"),  # (the lowest such byte)
    ("no byte\udc7f\udd00", "no byte\\udc7f\\udd00"),  # (lone surrogates either side of those: no byte makes them)
    ("c1\x85\x9f", "c1\\x85\\x9f"),  # (the C1 controls, as the bytes they are in Latin-1)
    ("tag\U000e0001", "tag\\U000e0001"),  # (a format character past the first plane)
    ("private\U0010fffd", "private\\U0010fffd"),
    ("nonchars\uffff\U0001ffff", "nonchars\\uffff\\U0001ffff"),  # (either side of the first plane's end)
])
def test_controls_and_bidi_overrides_are_escaped_and_text_is_kept(text, shown):
    assert printable(text) == shown


def test_anything_is_printed_as_its_text():
    assert printable(3) == "3"


def test_printable_escapes_controls_and_keeps_text():
    assert printable("Gödel, Ω and 日本.json") == "Gödel, Ω and 日本.json"
    assert printable("a\nb\r\tc") == "a\\nb\\r\\tc"
    assert printable("x\u202ey\u2066z\u2028") == "x\\u202ey\\u2066z\\u2028"
    assert printable(os.fsdecode(b"bad\xff")) == "bad\\xff"
