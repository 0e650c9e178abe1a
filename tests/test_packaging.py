"""A wheel install (not editable) works from any folder: templates, stylesheet, scripts and the pinned key ship in it."""

import pytest
import subprocess
import sys
import zipfile

from conftest import REAL_FILES, ROOT


@pytest.mark.slow
def test_wheel_ships_defaults_and_builds_from_another_folder(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
                    str(ROOT)], check=True, capture_output=True)
    [wheel] = list(wheels.glob("site_builder-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    # Every module of the package is in the wheel (an editable install's import hook would hide one missing from it
    # when the installed copy runs below).
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "site_builder").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    for required in ("site_builder/templates/base.html", "site_builder/templates/paper.html",
                     "site_builder/templates/feed.xml", "site_builder/templates/assets/style.css",
                     "site_builder/templates/assets/verify.js", "site_builder/data/pith-signing-key.json",
                     "site_builder/data/live.js", "site_builder/data/arxiv-categories.json",
                     "site_builder/templates/verifier.html"):
        assert required in names, required
    target = tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "bundles").mkdir(parents=True)
    for p in REAL_FILES:
        (elsewhere / "bundles" / p.name).write_bytes(p.read_bytes())
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    probe = subprocess.run([sys.executable, "-c", "import site_builder, sys; print(site_builder.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True)
    assert probe.stdout.startswith(str(target))  # the installed copy, not the repository
    r = subprocess.run([sys.executable, "-m", "site_builder", "build", "--no-search"], cwd=elsewhere, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "4 published" in r.stdout
    assert (elsewhere / "output" / "assets" / "style.css").is_file()
    assert (elsewhere / "output" / "assets" / "verify.js").is_file()
    assert '"key_id": "pith-v1-2026-05"' in (elsewhere / "output" / "pith-signing-key.json").read_text()
