import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from site_builder.keys import load_trust_set

ROOT = Path(__file__).resolve().parent.parent
BUNDLES = ROOT / "bundles"
VECTORS = ROOT / "tests" / "vectors"
REAL_FILES = sorted(BUNDLES.glob("*.json"))


def tree(root: Path) -> dict[str, bytes]:
    """Every file under *root* by its relative path: two sites are the same when these are equal."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def real_and_generated_bundles(folder: Path, generated: int) -> Path:
    """Make *folder* hold the real bundles and *generated* benchmark bundles (``gen0.json``, ...)."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    from generate import make_bundle
    folder.mkdir(parents=True)
    for p in REAL_FILES:
        shutil.copy(p, folder / p.name)
    for i in range(generated):
        (folder / f"gen{i}.json").write_bytes(make_bundle(i))
    return folder


def stand_in_pagefind(folder: Path, main: str) -> str:
    """A ``pagefind`` package under *folder* whose ``python -m pagefind`` runs *main* (the source of its
    ``__main__``); returns the ``PYTHONPATH`` that finds it before the real one."""
    package = folder / "pagefind"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(main)
    return str(folder)


@pytest.fixture(autouse=True)
def user_cache_home(tmp_path_factory, monkeypatch) -> Path:
    """Each test's own cache home, where its builds keep their cache key: the user's real one is never read or
    written, and a test's builds (its subprocesses too) share one key."""
    home = tmp_path_factory.mktemp("cache-home")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def real_raw() -> dict[str, bytes]:
    """name -> the real bundle's bytes."""
    return {p.name: p.read_bytes() for p in REAL_FILES}


@pytest.fixture
def real_bundle() -> dict:
    """A fresh parsed copy of one real bundle (safe to mutate)."""
    return json.loads(REAL_FILES[0].read_bytes())


@pytest.fixture
def real_bundles() -> list[dict]:
    return [json.loads(p.read_bytes()) for p in REAL_FILES]


@pytest.fixture(scope="session")
def pinned():
    return load_trust_set()


@pytest.fixture
def bundles_dir(tmp_path) -> Path:
    d = tmp_path / "bundles"
    d.mkdir()
    for p in REAL_FILES:
        shutil.copy(p, d / p.name)
    return d


@pytest.fixture
def free_inodes(monkeypatch) -> dict[str, int]:
    """``os.statvfs`` reporting an inode budget with ``free_inodes["count"]`` free (the rest as it is): a build
    links its twin only where the output's file system has the inodes for it (tmpfs counts hard links)."""
    real_statvfs = os.statvfs
    free = {"count": 10**6}

    def statvfs(path):
        fs = real_statvfs(path)
        return os.statvfs_result((fs.f_bsize, fs.f_frsize, fs.f_blocks, fs.f_bfree, fs.f_bavail, 10**7,
                                  free["count"], free["count"], fs.f_flag, fs.f_namemax))

    monkeypatch.setattr(os, "statvfs", statvfs)
    return free
