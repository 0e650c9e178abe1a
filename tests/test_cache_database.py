"""The cache's file: a lock this build already holds taken again at once; a save the disk cannot take, or a
database another program holds or that fails part-way, left as it is and said; one SQLite finds damaged made
anew, or gone without and said where it cannot be."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading

from site_builder.cache import BuildCache
from site_builder.cache_key import user_cache_key
from site_builder.inspection import inspect_bytes
from site_builder.keys import load_trust_set

from conftest import REAL_FILES, FailingDisk, exclusive_lock_held, run_unprivileged


def test_taking_the_lock_this_cache_already_holds_returns_at_once(tmp_path):
    """serve keeps one cache open and takes its lock at each build: taking it again while held must not wait
    on itself (an flock on a second descriptor of the same file would wait for the first, for ever)."""
    cache = BuildCache(tmp_path / "cache" / "cache.sqlite", key=user_cache_key())
    held = cache.lock_fd
    done = threading.Event()
    threading.Thread(target=lambda: (cache.take_lock(), done.set()), daemon=True).start()
    try:
        assert done.wait(5), "took the lock it held again, and waits on itself"
        assert cache.lock_fd == held
    finally:
        cache.close()


# A cache in a process whose files may not grow past 256 KB (the kernel's per-process limit: its writes past it
# fail as on a full disk) saves a record of 1 MB, then a short-address plan.
SAVED_ON_A_FULL_DISK = """
import resource, signal, sys
from pathlib import Path
from site_builder.cache import BuildCache
from site_builder.cache_key import user_cache_key
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (a write past the limit then fails with EFBIG, as with ENOSPC)
resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))
cache = BuildCache(Path(sys.argv[1]), key=user_cache_key())
cache.save_mirrored({f"{n:026d}": ("1:2:3:4", "0" * 64) for n in range(12000)})
first = cache.save_failure
cache.save_addresses([("A", "2101.00001", 1)], {"A": 1}, [])
print(first, cache.save_failure == first, cache.db is None, sep="\\n")
"""


def test_a_save_the_disk_cannot_take_keeps_the_cache_as_the_last_save_left_it_and_says_why(tmp_path):
    """A write that fails for want of room (or an I/O error) is rolled back: the cache is not thrown away (which
    would cost the next build everything, not only this build's work), nothing more is written to it, and why is
    kept for the build to say."""
    path = tmp_path / "cache" / "cache.sqlite"
    cache = BuildCache(path, key=user_cache_key())
    cache.save_mirrored({"AAAA": ("1:2:3:4", "0" * 64)})
    cache.close()
    ran = subprocess.run([sys.executable, "-c", SAVED_ON_A_FULL_DISK, path], capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0, ran.stderr
    failure, same, closed = ran.stdout.splitlines()
    assert failure.startswith(f"{path}: ") and ("full" in failure or "I/O" in failure)
    assert (same, closed) == ("True", "True")  # (the first failure is the one said; nothing written after it)
    cache = BuildCache(path, key=user_cache_key())
    try:
        assert cache.mirrored().document == b'{"AAAA":["1:2:3:4","' + b"0" * 64 + b'"]}'
        assert cache.save_failure is None
    finally:
        cache.close()


def test_a_cache_found_damaged_by_a_write_is_thrown_away_and_made_anew(tmp_path):
    """Damage is not a failure to save: a database SQLite finds malformed as it writes is made anew (and works),
    as one found so as it is read is."""
    path = tmp_path / "cache" / "cache.sqlite"
    cache = BuildCache(path, key=user_cache_key())
    cache.save_mirrored({"AAAA": ("1:2:3:4", "0" * 64)})
    cache.close()
    db = sqlite3.connect(path)
    page = db.execute("PRAGMA page_size").fetchone()[0]
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name='documents'").fetchone()[0]
    db.close()
    with open(path, "r+b") as f:  # (the documents' first page garbage: the rest reads as it did)
        f.seek((root - 1) * page)
        f.write(b"\xff" * page)
    cache = BuildCache(path, load=False, key=user_cache_key())
    try:
        cache.save_addresses([("A", "2101.00001", 1)], {"A": 1}, [])
        assert cache.save_failure is None and cache.db is not None
        cache.save_mirrored({"BBBB": ("1:2:3:4", "0" * 64)})
        assert cache.mirrored().document == b'{"BBBB":["1:2:3:4","' + b"0" * 64 + b'"]}'
    finally:
        cache.close()


def test_a_cache_another_program_holds_is_left_as_it_is_and_said(tmp_path):
    """A cache that cannot be opened for a lock another program holds (or an I/O error) is not damaged: it is
    not deleted and made anew under that program (which would cost every later build too), the build goes on
    without it and says why, and once the lock is gone the next build reads it as it was."""
    path = tmp_path / "cache" / "cache.sqlite"
    cache = BuildCache(path, key=user_cache_key())
    cache.save_mirrored({"AAAA": ("1:2:3:4", "0" * 64)})
    cache.close()
    with exclusive_lock_held(path):
        cache = BuildCache(path, key=user_cache_key())
        try:
            assert cache.unusable == f"{path}: database is locked" and cache.db is None
            assert cache.mirrored() is None
            cache.save_mirrored({"BBBB": ("1:2:3:4", "0" * 64)})  # (nothing is written to a cache gone without)
        finally:
            cache.close()
    cache = BuildCache(path, key=user_cache_key())
    try:
        assert cache.unusable is None
        assert cache.mirrored().document == b'{"AAAA":["1:2:3:4","' + b"0" * 64 + b'"]}'
    finally:
        cache.close()


def test_a_cache_that_cannot_be_read_part_way_is_gone_without_not_thrown_away(tmp_path):
    """A read that fails after the cache was opened, for anything but damage, leaves it as it is: the read's
    results are none, what was read before is not used any more, and no write reaches the file."""
    path = tmp_path / "cache" / "cache.sqlite"
    cache = BuildCache(path, key=user_cache_key())
    result = inspect_bytes("a.json", REAL_FILES[0].read_bytes(), load_trust_set())
    cache.save({"a.json": ("1:2:3:4", result.sha256)}, [result], "trust", {}, "build-1", None)
    cache.close()
    cache = BuildCache(path, key=user_cache_key())
    try:
        assert cache.file_sha("a.json", "1:2:3:4") == result.sha256
        cache.db = FailingDisk(cache.db)
        assert cache.inspections([result.sha256], "trust") == {}
        assert cache.unusable == f"{path}: disk I/O error" and cache.db is None
        assert cache.file_sha("a.json", "1:2:3:4") is None
        cache.save({}, [], "trust", {}, "build-2", None)
    finally:
        cache.close()
    cache = BuildCache(path, key=user_cache_key())
    try:
        assert cache.file_sha("a.json", "1:2:3:4") == result.sha256 and cache.units("build-1") == {}
        assert list(cache.inspections([result.sha256], "trust")) == [result.sha256]
    finally:
        cache.close()


def test_a_damaged_cache_that_cannot_be_made_anew_is_gone_without_and_said(tmp_path):
    """A damaged database in a folder this user may no longer write to can be neither deleted nor made anew: the
    build goes on without a cache and says why, rather than lose it in silence."""
    path = tmp_path / "cache" / "cache.sqlite"
    BuildCache(path, key=user_cache_key()).close()
    path.write_bytes(b"this is not a database" * 100)
    os.chmod(path.parent, 0o500)

    def opened() -> None:
        cache = BuildCache(path, key=user_cache_key())
        try:
            assert cache.db is None and cache.unusable == f"{path}: file is not a database"
        finally:
            cache.close()
    try:
        run_unprivileged(opened)
    finally:
        os.chmod(path.parent, 0o700)
    assert path.read_bytes() == b"this is not a database" * 100
