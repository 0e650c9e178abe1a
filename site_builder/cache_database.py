"""The build cache's SQLite file: opened and locked, its documents read and written under their tags, and what a
build does when it cannot be read or written.

Every document (and every unit list) carries a tag made with this user's cache key (cache_key.py), bound to the
builder's version and the schema (``cache_context``): one whose tag does not check reads as none.  A database
SQLite finds damaged, or one of another builder version, is deleted and made anew; a stale entry can only cause
extra work.  One that cannot be read or written for another reason (a lock another program holds, a full disk, an
I/O error) stays as the last save left it: the build goes on without it (``unusable``) or saves nothing more to it
(``save_failure``), and says why.  ``cache.lock`` beside the file is held by the build using the cache, and then by
the detached process that saves it (``stages/remember.py``).  What the documents hold is ``cache.py``'s.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from pathlib import Path

import orjson

from site_builder import builder_identity
from site_builder.cache_key import CacheKey
from site_builder.stored_document import checked_document

SCHEMA = "12"

# The verification results and the list rows are each kept in sixteen documents, by the first hex digit of their
# digest: a build reads each under one tag (a tag a row, 20,000 of them, cost ~50 ms a build at 10,000 records),
# and a one-bundle change rewrites the parts that gain or lose an entry, not all of them.
DIGEST_PARTS = frozenset("0123456789abcdef")


def cache_context() -> str:
    """What a cache entry's tag is bound to: entries of another builder or schema never check."""
    return f"site-builder cache {builder_identity()}/{SCHEMA}"


def _damaged(exc: sqlite3.DatabaseError) -> bool:
    """Whether *exc* says the database itself is damaged (not a lock, a full disk or an I/O error)."""
    return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


class CacheDatabase:
    """The cache file at *path*, under this user's cache *key* (without one, or without a path, there is none:
    nothing could tell this builder's entries from planted ones).  Made closed; ``take_lock`` and ``_open`` open
    it."""

    def __init__(self, path: Path | None, key: CacheKey | None):
        if key is None:
            path = None
        self.path = path
        self.user_key = key if path is not None else None  # (compiled templates beside it are tagged with it too)
        self._bound_key = key.bound_to(cache_context()) if key is not None else None
        self._key = self._bound_key.tagger() if self._bound_key is not None else None
        self.db: sqlite3.Connection | None = None
        self.lock_fd: int | None = None
        self.save_failure: str | None = None  # why a save did not reach the disk (the cache is as it was before)
        self.unusable: str | None = None  # why the build went on without the cache at *path* (and saves none)

    def _forget(self) -> None:
        """Drop what was read over the connection (the entries' own: ``BuildCache``)."""

    def take_lock(self) -> None:
        """Hold the cache's lock for this build, first waiting while the previous build saves the cache in the
        background (stages/remember.py): reading before that save ends would miss what the live site is made of."""
        if self.path is None or self.lock_fd is not None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path.parent / "cache.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError:
            return  # an unwritable cache folder: the cache itself falls back to nothing
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            os.close(fd)
            return
        self.lock_fd = fd

    def release_lock(self) -> None:
        """Close this process's handle on the lock (a background saver that inherited it keeps holding it)."""
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None

    def reconnect(self) -> None:
        """A fresh connection in a forked process (an SQLite connection must not cross a fork)."""
        self.db = None
        if self.path is not None:
            try:
                self.db = sqlite3.connect(self.path, isolation_level=None)
            except sqlite3.DatabaseError:
                self.db = None

    def _open(self) -> None:
        assert self.path is not None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self._ensure_schema()
        except (sqlite3.DatabaseError, ValueError, OSError, AttributeError) as exc:
            self._read_failed(exc)

    def _ensure_schema(self) -> None:
        assert self.db is not None
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        row = self.db.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        version = f"{builder_identity()}/{SCHEMA}"  # (another builder's results are not to be trusted)
        if row is None or row[0] != version:
            for table in ("documents", "files", "inspections", "units", "rows", "mirrored"):
                self.db.execute(f"DROP TABLE IF EXISTS {table}")
            self.db.execute("DELETE FROM meta")
            self.db.execute("INSERT INTO meta VALUES ('version', ?)", (version,))
        self.db.execute("CREATE TABLE IF NOT EXISTS documents (name TEXT PRIMARY KEY, data BLOB, tag TEXT)")
        self.db.execute("CREATE TABLE IF NOT EXISTS units (build_id TEXT PRIMARY KEY, data TEXT, tag TEXT)")

    def _write_failed(self, exc: sqlite3.DatabaseError) -> None:
        """After *exc* stopped a write: a database SQLite finds damaged is thrown away (``_reset``); on anything
        else (a full disk, an I/O error, a lock another program holds) the write is rolled back, the cache kept as
        the last save left it (which costs the next build only what this one did), this build writes nothing
        more to it, and the failure is said (``save_failure``), not hidden."""
        if _damaged(exc):
            self._reset()
            return
        self.save_failure = self.save_failure or f"{self.path}: {exc}"
        self._disconnect()  # (rolls back the write it was in)

    def _read_failed(self, exc: Exception) -> None:
        """After *exc* stopped a read (or the opening): a database SQLite finds damaged, or an entry that cannot be
        parsed, is thrown away; on any other error of SQLite's (a lock another program holds, an I/O error) the
        cache is left as it is, the build goes on without it and saves nothing to it, and says why
        (``unusable``): making it anew would cost later builds too, and delete a database another program has open."""
        if not isinstance(exc, sqlite3.DatabaseError) or _damaged(exc):
            self._reset()
            return
        self.unusable = self.unusable or f"{self.path}: {exc}"
        self._disconnect(forget=True)

    def _disconnect(self, forget: bool = False) -> None:
        """Close the connection (rolling back any write it was in); *forget*: and drop what was read over it."""
        if self.db is not None:
            try:
                self.db.close()
            except sqlite3.Error:
                pass
            self.db = None
        if forget:
            self._forget()

    def _reset(self) -> None:
        """Throw the cache away (corrupt, truncated, foreign) and start an empty one."""
        self._disconnect(forget=True)
        assert self.path is not None
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(str(self.path) + suffix)
            except OSError:
                pass
        try:
            self.db = sqlite3.connect(self.path, isolation_level=None)
            self._ensure_schema()
        except (sqlite3.DatabaseError, OSError) as exc:
            self.db = None
            self.unusable = f"{self.path}: {exc}"

    # --- documents ---------------------------------------------------------------------------------

    def _read_document(self, name: str) -> object | None:
        """The JSON of the document *name*, or None where there is none or its tag does not check."""
        data = self._checked_bytes(name)
        return None if data is None else orjson.loads(data)

    def _checked_bytes(self, name: str) -> bytes | None:
        """The bytes of the document *name* as stored, or None where there is none or its tag does not check."""
        return checked_document(self.db, name, self._key)

    def _document_for(self, name: str, field: str, value: str) -> dict | None:
        """The document *name* if it was made for *value* (its *field*), else None: none, a tag that does not
        check, one made for another value, or no cache."""
        if self.db is None:
            return None
        try:
            return self._read_document_for(name, field, value)
        except sqlite3.DatabaseError as exc:
            self._read_failed(exc)
            return None

    def _read_document_for(self, name: str, field: str, value: str) -> dict | None:
        """``_document_for``, leaving a damaged database's error (sqlite3.DatabaseError) to the caller."""
        try:
            doc = self._read_document(name)
        except ValueError:
            return None
        return doc if isinstance(doc, dict) and doc.get(field) == value else None

    def _part(self, kind: str, part: str, field: str, value: str, entries: str) -> dict:
        """The *entries* of the part *part* of *kind* (``inspections``, ``rows``: sixteen documents by digest)
        made for *value* (its *field*); {} where there are none that check: none stored, one made for another
        value, a tag that does not check, a part that is no hex digit."""
        doc = self._read_document_for(f"{kind}/{part}", field, value) if part in DIGEST_PARTS else None
        found = doc.get(entries) if doc is not None else None
        return found if isinstance(found, dict) else {}

    def _save_document(self, name: str, doc: dict | bytes) -> bool:
        """Store *doc* (or its JSON) as the document *name*; False where the cache could not take it (and was
        reset)."""
        try:
            self._write_document(name, doc)
            return True
        except sqlite3.DatabaseError as exc:
            self._write_failed(exc)
            return False

    def _write_document(self, name: str, entries: dict | bytes) -> None:
        data = entries if isinstance(entries, bytes) else orjson.dumps(entries)
        self.db.execute("INSERT OR REPLACE INTO documents VALUES (?, ?, ?)",
                        (name, data, self._key.tag("document", name, data)))

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None
        self.release_lock()
