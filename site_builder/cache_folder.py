"""Where the build cache lives: a folder of this user's that no one else may write to.

The cache's bytes are authenticated (cache_key.py), but where they live is not: a folder others may write to
lets them swap the database under a build, and a link planted at one of the cache's names makes the build open
another file (and change it).  So the folder is checked, and made private where it is the builder's own.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from site_builder.writing import make_folders, not_private

# What the cache keeps in its folder, by name (compiled_templates.py keeps its files in ``templates``).
CACHE_NAMES = ("cache.sqlite", "cache.sqlite-wal", "cache.sqlite-shm", "cache.lock", "templates")


class CacheFolderUnsafe(Exception):
    """The cache's folder is not one this user alone can write to: the build then keeps no cache."""


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
