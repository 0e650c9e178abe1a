"""Where the build cache lives: a folder of this user's that no one else may write to.

The cache's bytes are authenticated (cache_key.py), but where they live is not: a folder others may write to
lets them swap the database under a build, and a link planted at one of the cache's names makes the build open
another file (and change it).  So the folder is checked, and made private where it is the builder's own.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from site_builder.cache_key import TAG_CHARS, CacheKey
from site_builder.loading import FileReadError, read_bytes
from site_builder.writing import create_new, make_folders, not_private

SAVE_FAILED = "save-failed"  # word of a detached save: under way, or why it failed (stages/remember.py)

# What the cache keeps in its folder, by name (compiled_templates.py keeps its files in ``templates``).
CACHE_NAMES = ("cache.sqlite", "cache.sqlite-wal", "cache.sqlite-shm", "cache.sqlite-journal", "cache.lock",
               "templates", SAVE_FAILED)
_REASON_LIMIT = 2000  # (bytes: one line of a terminal's worth, an SQLite message and the cache's path)


class CacheFolderUnsafe(Exception):
    """The cache's folder is not one this user alone can write to: the build then keeps no cache."""


def names_not_the_caches(folder: Path) -> list[str]:
    """The names in *folder* that are not the cache's own (sorted; none where it is missing or no folder).  A
    folder the user names for the cache must hold nothing else: the cache writes its files and a ``templates``
    folder at its top and removes a link at those names, so ``--cache-dir .`` would write into the project's
    own templates folder, and remove it where it is a link."""
    try:
        names = os.listdir(folder)
    except OSError:  # (missing: it is made; not a folder: make_private_folder says why)
        return []
    return sorted(name for name in names if not _the_caches(folder / name))


_COMPILED_TEMPLATE = re.compile(r"\.?[0-9a-f]{40}\.jbc(\.[0-9]+)?")  # (compiled_templates.py: a file, a temporary)


def _the_caches(path: Path) -> bool:
    """Whether *path* is what the cache keeps at that name: one of its files, or its folder of compiled
    templates and nothing else."""
    try:
        st = os.lstat(path)
        if path.name == "templates":
            return stat.S_ISDIR(st.st_mode) and all(_COMPILED_TEMPLATE.fullmatch(n) for n in os.listdir(path))
    except OSError:
        return False
    return path.name in CACHE_NAMES and stat.S_ISREG(st.st_mode)


def make_private_folder(folder: Path, ours: bool) -> None:
    """Make *folder* a folder of this user's that no one else may write to, or raise CacheFolderUnsafe saying
    why it is not; a link at one of the cache's own names in it is removed.  *ours*: the folder is the builder's
    own (the default one beside the output), so one others may write to is tightened; a folder the user named is
    never changed (``--cache-dir /tmp`` must not change /tmp), only refused."""
    try:
        make_folders(os.fspath(folder))
    except OSError as e:
        raise CacheFolderUnsafe(f"cannot make {folder}: {e.strerror}") from None
    problem = not_private(folder, others_may_write=ours)
    if problem is not None:
        raise CacheFolderUnsafe(f"{problem} (make it yours alone, chmod go-w, or name another)")
    try:
        mode = stat.S_IMODE(os.lstat(folder).st_mode)
        if mode & 0o022:
            os.chmod(folder, mode & ~0o022)
        for name in CACHE_NAMES:
            if os.path.islink(folder / name):
                os.unlink(folder / name)
    except OSError as e:
        raise CacheFolderUnsafe(f"cannot make {folder} private: {e.strerror}") from None


def leave_save_failure(folder: Path, key: CacheKey, reason: str) -> bool:
    """Leave *reason* in *folder* for the next build to say: the detached saver has no terminal, and a cache not
    saved costs every later build what it could have reused.  Tagged with this user's cache key, so that no
    one else's file there makes a build say anything.  False where it cannot be left (a disk too full for
    these few bytes, a folder this user may not write to)."""
    data = reason.encode("utf-8", "backslashreplace")[:_REASON_LIMIT]
    try:
        with open(create_new(folder / SAVE_FAILED, 0o600), "wb") as f:
            f.write(_failure_key(key).tagged_file("save failed", data=data))
        return True
    except OSError:
        clear_save_failure(folder)  # (not one cut short)
        return False


def clear_save_failure(folder: Path) -> None:
    """Remove what ``leave_save_failure`` left in *folder*, if anything."""
    try:
        os.unlink(folder / SAVE_FAILED)
    except OSError:
        pass


def take_save_failure(folder: Path, key: CacheKey) -> str | None:
    """The reason the last detached save left in *folder* (``leave_save_failure``), which is then removed: said
    once.  None where there is none, or it is not one this user's builder left (its tag does not check)."""
    path = folder / SAVE_FAILED
    try:
        raw = read_bytes(path, TAG_CHARS + _REASON_LIMIT)
    except FileReadError:
        return None
    finally:
        clear_save_failure(folder)
    data = _failure_key(key).checked_file(raw, "save failed")
    return data.decode("utf-8", "replace") if data is not None else None


def _failure_key(key: CacheKey) -> CacheKey:
    return key.bound_to("site-builder cache save failure")
