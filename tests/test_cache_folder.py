"""The cache's folder: this user's alone, a link at its names never followed, a folder the user named never
changed."""

from __future__ import annotations

import os
import sqlite3

import pytest

from conftest import both_keys, opts
from site_builder.build import build
from site_builder.cache_folder import (CACHE_NAMES, SAVE_FAILED, CacheFolderUnsafe, leave_save_failure,
                                       make_private_folder, take_save_failure)
from site_builder.cache_key import CacheKey, user_cache_key
from site_builder.stages.context import cache_folder
from site_builder.writing import OutputError


def test_the_builders_own_folder_is_made_private_and_one_the_user_named_only_refused(tmp_path):
    ours = tmp_path / "ours" / "cache"
    make_private_folder(ours, ours=True)
    assert ours.is_dir() and ours.stat().st_mode & 0o777 == 0o755  # (made with its parent)
    ours.chmod(0o775)
    for name in CACHE_NAMES:
        os.symlink(tmp_path / "elsewhere", ours / name)
    make_private_folder(ours, ours=True)
    assert ours.stat().st_mode & 0o777 == 0o755 and os.listdir(ours) == []
    named = tmp_path / "named"
    named.mkdir()
    named.chmod(0o775)
    with pytest.raises(CacheFolderUnsafe, match="writable by other users"):
        make_private_folder(named, ours=False)
    assert named.stat().st_mode & 0o777 == 0o775
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(CacheFolderUnsafe, match="^cannot make .*file/cache"):
        make_private_folder(tmp_path / "file" / "cache", ours=True)


def _other_database(path):
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE meta (key TEXT, value TEXT)")
    db.execute("INSERT INTO meta VALUES ('mine', 'not the cache''s')")
    db.commit()
    db.close()
    return path.read_bytes()


def test_a_link_planted_in_the_cache_folder_is_removed_not_opened(project, tmp_path):
    """The cache's folder holds authenticated bytes, but its names are not: a link planted as cache.sqlite made
    the build open the database it led to as its cache, and empty its tables."""
    options = opts(project, project / "site", both_keys())
    folder = cache_folder(options)
    folder.mkdir(parents=True)
    elsewhere = tmp_path / "other.sqlite"
    before = _other_database(elsewhere)
    (folder / "cache.sqlite").symlink_to(elsewhere)
    (folder / "cache.lock").symlink_to(tmp_path / "created-elsewhere")
    build(options)
    assert elsewhere.read_bytes() == before and not (tmp_path / "created-elsewhere").exists()
    assert not (folder / "cache.sqlite").is_symlink() and not build(options).changed  # (a cache of its own)


def test_a_cache_folder_that_is_a_link_or_writable_by_others_is_not_used_as_it_is(project, tmp_path):
    options = opts(project, project / "site", both_keys())
    folder = cache_folder(options)
    folder.parent.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder.symlink_to(elsewhere)
    report = build(options)
    assert "no build cache" in report.cache_note and "is not a folder" in report.cache_note
    assert list(elsewhere.iterdir()) == []
    folder.unlink()
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    report = build(options)
    assert report.cache_note == "" and folder.stat().st_mode & 0o777 == 0o755  # (this user's: made private)


def test_a_cache_folder_named_by_the_user_is_never_changed_only_refused_if_others_may_write_to_it(project, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # (as /tmp is)
    report = build(opts(project, project / "site", both_keys(), cache_dir=shared))
    assert "is writable by other users" in report.cache_note
    assert shared.stat().st_mode & 0o7777 == 0o1777 and list(shared.iterdir()) == []



def test_a_cache_folder_named_by_the_user_must_hold_nothing_but_a_cache(project, tmp_path_factory):
    """``--cache-dir .`` in a project wrote the cache and its compiled templates into the project, the latter
    into the project's own templates folder, and removed a ``templates`` link there as a planted one.  A folder
    that holds anything else is refused before anything is written; a new, an empty or a cache folder is used."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "home.html").write_text("{% extends 'base.html' %}")
    (project / "templates").rmdir()
    (project / "templates").symlink_to(elsewhere)  # (a templates folder shared between projects)
    before = sorted(os.listdir(project))
    assert before == ["bundles", "templates"]
    site = tmp_path_factory.mktemp("out") / "site"
    with pytest.raises(OutputError, match=f"^{project}: not a build cache folder \\(it holds bundles, templates\\), "
                                          f"and the cache's files and templates folder would go beside them; name "
                                          f"a new or empty folder for --cache-dir$"):
        build(opts(project, site, both_keys(), cache_dir=project))
    assert sorted(os.listdir(project)) == before and (project / "templates").is_symlink()
    assert os.listdir(elsewhere) == ["home.html"] and not site.exists()
    for n in range(4):
        (project / f"more-{n}").touch()
    with pytest.raises(OutputError, match=r"\(it holds bundles, more-0, more-1, \.\.\.\)"):  # (the first three)
        build(opts(project, site, both_keys(), cache_dir=project))
    holder = tmp_path_factory.mktemp("holder")
    (holder / "templates").mkdir()
    (holder / "templates" / "home.html").write_text("{% extends 'base.html' %}")
    with pytest.raises(OutputError, match=r"\(it holds templates\)"):  # (the cache's name, a user's templates)
        build(opts(project, site, both_keys(), cache_dir=holder))
    (holder / "templates").rename(holder / "cache.sqlite")  # (a folder at the cache's file's name is none of it)
    with pytest.raises(OutputError, match=r"\(it holds cache\.sqlite\)"):
        build(opts(project, site, both_keys(), cache_dir=holder))
    empty = tmp_path_factory.mktemp("empty")
    for folder in (empty, empty / "new" / "cache"):  # (empty; made; then each a cache folder, used as one)
        options = opts(project, folder.parent / "site", both_keys(), cache_dir=folder)
        build(options)
        (folder / "cache.sqlite-journal").write_bytes(b"")  # (SQLite's own, where a write was cut short)
        (folder / "templates" / f".{'0' * 40}.jbc.4242").write_bytes(b"")  # (a compile cut short: its temporary)
        assert not build(options).changed
        assert set(os.listdir(folder)) <= set(CACHE_NAMES)


def test_an_output_named_in_bytes_that_are_not_utf8_keeps_its_cache(project, tmp_path_factory):
    """Folder names are bytes on Linux: the cache of an output named ``site\\xff`` was opened by a URI made from
    the name as text, which cannot be encoded, and the second build stopped with a traceback."""
    import json
    import shutil
    out = tmp_path_factory.mktemp("out") / os.fsdecode(b"site\xff")
    options = opts(project, out, both_keys())
    first = build(options)
    assert first.changed and not build(options).changed  # (the cache used, read back)
    some = sorted((project / "bundles").glob("*.json"))[0]
    shutil.copy(some, project / "bundles" / "copy.json")
    report = build(options)
    assert report.changed and report.count("superseded") == 1
    assert "copy.json" in {f["path"] for f in json.loads((out / "verification.json").read_bytes())["files"]}


def test_why_a_save_failed_is_said_once_and_only_where_this_users_builder_left_it(tmp_path):
    """The detached saver leaves why it failed for the next build to say; nothing else at that name makes a build
    say anything (another key's note, text planted there, a note cut short, a link to a genuine one), and
    whatever is there is said at most once."""
    key, note = user_cache_key(), tmp_path / SAVE_FAILED
    reason = "/c/cache.sqlite: database or disk is full \x1b[2J\u00e9"  # (escaped where it is printed, not here)
    leave_save_failure(tmp_path, key, reason)
    assert note.stat().st_mode & 0o777 == 0o600
    assert take_save_failure(tmp_path, key) == reason
    assert take_save_failure(tmp_path, key) is None and not note.exists()

    leave_save_failure(tmp_path, CacheKey(b"another user's key".ljust(32)), reason)
    planted = note.read_bytes()
    genuine = tmp_path / "genuine"
    leave_save_failure(genuine.parent, key, reason)
    genuine_bytes = note.read_bytes()
    for flaw in (planted, b"0" * 64 + b"planted", genuine_bytes[:-1], b"", "link"):
        if flaw == "link":
            genuine.write_bytes(genuine_bytes)
            note.symlink_to(genuine)
        else:
            note.write_bytes(flaw)
        assert take_save_failure(tmp_path, key) is None, flaw
        assert not note.is_symlink() and not note.exists()
    assert genuine.read_bytes() == genuine_bytes  # (a link is removed, never followed)


def test_a_long_reason_a_save_failed_is_said_cut_short_not_lost(tmp_path):
    """An SQLite message naming a long cache path can run past what one note keeps: the note keeps its start,
    which the next build says, rather than a file too long to be read back (and so not said at all)."""
    key = user_cache_key()
    reason = f"{tmp_path}/{'deep/' * 800}cache.sqlite: database or disk is full"
    assert leave_save_failure(tmp_path, key, reason)
    said = take_save_failure(tmp_path, key)
    assert said is not None and reason.startswith(said) and len(said) >= 1000
