"""One document of the build cache read over a connection of its own: what a child process (which may not
share the build's SQLite connection) reads, its tag checked with the cache's key, so that a planted or damaged
document reads as none.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from site_builder.cache_key import CacheKey, Tagger


@dataclass(frozen=True)
class StoredDocument:
    """The cache's document *name* at *path*, read over a connection of its own and its tag checked with *key*
    (the cache's, bound to its context) where it is asked for: plain data, so a child process can read it (an
    SQLite connection must not cross a fork), and the process that started it need not."""

    path: Path
    name: str
    key: CacheKey

    def read(self) -> bytes | None:
        """The document's bytes as stored; None where there is none, its tag does not check, or the file cannot
        be read (a damaged cache is the build's to find and throw away, over its own connection)."""
        try:
            # (the path's bytes, escaped: a folder named in bytes that are not UTF-8 is a folder too)
            db = sqlite3.connect(f"file:{quote(os.fsencode(self.path))}?mode=ro", uri=True)
        except sqlite3.Error:
            return None
        try:
            return checked_document(db, self.name, self.key)
        except sqlite3.Error:
            return None
        finally:
            db.close()


def checked_document(db: sqlite3.Connection, name: str, key: CacheKey | Tagger) -> bytes | None:
    """The bytes of the document *name* in *db* as stored, or None where there is none or its tag (by *key*,
    the cache's) does not check; sqlite3.Error where the database cannot be read."""
    row = db.execute("SELECT data, tag FROM documents WHERE name=?", (name,)).fetchone()
    if row is None or type(row[0]) is not bytes or not key.checks(row[1], "document", name, row[0]):
        return None
    return row[0]
