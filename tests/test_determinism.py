"""The same inputs give a byte-identical tree in any process, whatever its hash seed.

Builds in one process share their string hashes, so anything ordered by a set or a dict of strings built in a
different order looks stable there; separate processes with different ``PYTHONHASHSEED`` values do not.
"""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, real_and_generated_bundles, tree

from generate import benchmark_key, make_bundle  # noqa: E402


@pytest.fixture
def mixed_project(tmp_path):
    """Real bundles and generated ones, most with several cross-listed categories."""
    real_and_generated_bundles(tmp_path / "bundles", 24)
    benchmark_key().write(tmp_path / "bench-key.json")
    shutil.copy(ROOT / "site_builder" / "data" / "pith-signing-key.json", tmp_path / "pith-key.json")
    return tmp_path


def _build_in_process(project, output, seed, *flags):
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    env.pop("SOURCE_DATE_EPOCH", None)
    result = subprocess.run([sys.executable, "-m", "site_builder", "build", "--bundles", project / "bundles",
                             "--output", project / output, "--trusted-keys", project / "pith-key.json",
                             "--trusted-keys", project / "bench-key.json", "--base-url", "https://m.example/x/",
                             *flags], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    return tree(project / output)


@pytest.mark.slow  # (a second or more: left to the full suite)
def test_separate_processes_with_different_hash_seeds_build_the_same_tree(mixed_project):
    """Catches an order taken from a set of strings (a record's categories, say), which follows the hash seed."""
    first = _build_in_process(mixed_project, "one", 1, "--no-search", "--no-cache")
    second = _build_in_process(mixed_project, "two", 2, "--no-search", "--no-cache")
    third = _build_in_process(mixed_project, "three", 12345, "--no-search", "--no-cache")
    assert len(first) > 100
    assert first == second == third


@pytest.mark.slow
def test_with_the_search_index_and_the_cache_too(mixed_project):
    """The search index, and a tree a second build with another seed brings up to date from the cache."""
    first = _build_in_process(mixed_project, "one", 7)
    second = _build_in_process(mixed_project, "two", 8)
    assert first == second
    (mixed_project / "bundles" / "gen3.json").write_bytes(make_bundle(3, variant=2))
    updated = _build_in_process(mixed_project, "one", 9)
    clean = _build_in_process(mixed_project, "clean", 10, "--no-cache")
    assert updated == clean
