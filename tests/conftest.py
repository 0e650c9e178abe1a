import json
import shutil
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
