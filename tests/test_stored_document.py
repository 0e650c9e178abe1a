"""A cache document read over a connection of its own (what the child process that looks up the mirrored
bundles reads): the bytes the cache stored, or None for anything this user's builder did not write."""

from __future__ import annotations

import os
import sqlite3

import orjson
import pytest

from site_builder.cache import BuildCache
from site_builder.cache_database import cache_context
from site_builder.cache_key import CacheKey, user_cache_key
from site_builder.stored_document import StoredDocument, checked_document

ENTRIES = {"AAAA": ["1:2:3:4", "0" * 64]}


def stored(folder) -> StoredDocument:
    """The cache at *folder* holding ENTRIES as its ``mirrored`` document, and a reader of that document."""
    cache = BuildCache(folder / "cache.sqlite", key=user_cache_key())
    cache.save_mirrored(ENTRIES)
    cache.close()
    return StoredDocument(folder / "cache.sqlite", "mirrored", user_cache_key().bound_to(cache_context()))


def test_the_document_is_read_as_the_cache_stored_it_even_in_a_folder_whose_name_a_uri_would_garble(tmp_path):
    folder = tmp_path / os.fsdecode(b"a cache?#%41 \xff")  # (not UTF-8, and each of ?, # and % means something)
    assert orjson.loads(stored(folder).read()) == ENTRIES


@pytest.mark.parametrize("flaw", ["planted tag", "another key's tag", "stored as text", "deleted"])
def test_a_document_this_users_builder_did_not_write_reads_as_none(tmp_path, flaw):
    document = stored(tmp_path)
    db = sqlite3.connect(document.path)
    data = db.execute("SELECT data FROM documents WHERE name='mirrored'").fetchone()[0]
    tags = {"planted tag": "0" * 64, "another key's tag": CacheKey(b"k" * 32).bound_to(cache_context()).tag(
        "document", "mirrored", data)}
    if flaw == "deleted":
        db.execute("DELETE FROM documents WHERE name='mirrored'")
    elif flaw == "stored as text":  # (the right tag over the same bytes, but not a blob: not what the cache writes)
        db.execute("UPDATE documents SET data=? WHERE name='mirrored'", (data.decode(),))
    else:
        db.execute("UPDATE documents SET tag=? WHERE name='mirrored'", (tags[flaw],))
    db.commit()
    assert checked_document(db, "mirrored", document.key) is None
    db.close()
    assert document.read() is None


def test_no_cache_file_reads_as_none_and_is_not_made(tmp_path):
    document = StoredDocument(tmp_path / "cache.sqlite", "mirrored", user_cache_key().bound_to(cache_context()))
    assert document.read() is None
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_not_a_database_reads_as_none(tmp_path):
    document = stored(tmp_path)
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"cache.sqlite{suffix}").unlink(missing_ok=True)
    document.path.write_bytes(b"not a database " * 100)
    assert document.read() is None
