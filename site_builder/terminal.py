"""Text from inputs made safe to print on a terminal.

File names and fields come from bundles, folders and servers nobody vouches for.  Printed as they are, a newline
in a file name could fake an ``OK pith:...`` line, an escape sequence could clear the screen or retitle the
window, and a right-to-left override could make a name read backwards.  ``printable`` shows each such character
as an escape instead, and a byte of a name that is not UTF-8 (Python keeps it as a lone surrogate) as ``\\xNN``.
"""

from __future__ import annotations

import unicodedata

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (os.fsdecode's surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _needs_escape(char: str) -> bool:
    category = unicodedata.category(char)
    return category in ("Cc", "Cf", "Cs", "Zl", "Zp", "Co", "Cn")


def printable(text: object) -> str:
    """*text* with every control, format (bidirectional overrides among them), separator-of-lines, private,
    unassigned or surrogate character shown as an escape; everything else as it is."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(_escape(c) if _needs_escape(c) else c for c in text)
