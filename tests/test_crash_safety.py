"""SIGKILL the build at many random points: the output is always the complete old or the complete new site."""

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT, tree

sys.path.insert(0, str(ROOT / "benchmarks"))
from generate import benchmark_key, make_bundle  # noqa: E402

KILLS = 50


def build_cmd(bundles: Path, output: Path, key: Path) -> list[str]:
    return [sys.executable, "-m", "site_builder", "build", "--bundles", str(bundles), "--output", str(output),
            "--trusted-keys", str(key), "--no-search", "--quiet"]


def test_sigkill_never_leaves_a_mixed_site(tmp_path):
    key = benchmark_key().write(tmp_path / "key.json")
    sets = [tmp_path / "set0", tmp_path / "set1"]
    for n, folder in enumerate(sets):
        folder.mkdir()
        for i in range(40):
            if (i + n) % 5:  # each set lacks some records the other has
                (folder / f"g{i}.json").write_bytes(make_bundle(i, record=i + 1000 * n))
    expected = []
    for folder in sets:
        out = tmp_path / f"expected-{folder.name}"
        subprocess.run(build_cmd(folder, out, key), check=True, cwd=tmp_path)
        expected.append(tree(out))
    assert expected[0] != expected[1]

    site = tmp_path / "site"
    subprocess.run(build_cmd(sets[0], site, key), check=True, cwd=tmp_path)
    t = time.perf_counter()
    subprocess.run(build_cmd(sets[1], site, key), check=True, cwd=tmp_path)
    duration = time.perf_counter() - t
    rng = random.Random(7)
    current = 1
    seen = {0: 0, 1: 0}
    for kill in range(KILLS):
        target = 1 - current
        proc = subprocess.Popen(build_cmd(sets[target], site, key), cwd=tmp_path)
        time.sleep(rng.uniform(0.05, duration * 1.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        now = tree(site)
        assert now in (expected[0], expected[1]), f"kill {kill}: mixed or damaged site"
        current = 0 if now == expected[0] else 1
        seen[current] += 1
    # Kills landed both before and after the swap.
    assert seen[0] and seen[1]
    subprocess.run(build_cmd(sets[0], site, key), check=True, cwd=tmp_path)
    assert tree(site) == expected[0]
    deadline = time.time() + 30
    while time.time() < deadline:
        leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".site.") and p.name not in (".site.lock", ".site.prev")]
        if not leftovers:
            break
        time.sleep(0.2)
    assert leftovers == []
