"""Mirrored JSON is byte-exact: the bundle a reader downloads is the very file that was verified, through
``build``, ``serve`` and ``pull``, whatever its layout.

The resolver writes compact JSON, so a builder that re-serialised a bundle (parse, then dump) would give the same
bytes for every real file and go unnoticed.  These inputs are the real bundles laid out as nobody's encoder would
write them by accident: pretty-printed, with ``\\u`` escapes for plain letters, and a trailing newline.  They
verify as they are, as signatures cover the canonical form, not the file.
"""

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from browser import serve as static_server
from conftest import REAL_FILES, free_port, record_id

IDS = [record_id(p) for p in REAL_FILES]


def unusual_bytes(path) -> bytes:
    """The bundle at *path*, pretty-printed, every non-ASCII character and the first letter of its title as
    ``\\u`` escapes, ending in a newline: the same JSON value, other bytes."""
    text = json.dumps(json.loads(path.read_bytes()), indent=2, ensure_ascii=True)
    text, escaped = re.subn(r'("title": ")([A-Za-z])', lambda m: m.group(1) + f"\\u{ord(m.group(2)):04x}", text,
                            count=1)
    assert escaped == 1
    return (text + "\n").encode()


@pytest.fixture
def unusual(tmp_path):
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    raw = {}
    for path, pid in zip(REAL_FILES, IDS):
        raw[pid] = unusual_bytes(path)
        assert raw[pid] != path.read_bytes() and json.loads(raw[pid]) == json.loads(path.read_bytes())
        (bundles / path.name).write_bytes(raw[pid])
    return tmp_path, raw


def cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "site_builder", *map(str, args)], capture_output=True, text=True,
                          timeout=300, **kw)


def assert_mirrored(site, raw):
    for pid, data in raw.items():
        assert (site / "pith" / pid / "bundle.json").read_bytes() == data
        assert (site / ".well-known" / "pith" / pid / "bundle.json").read_bytes() == data


def test_build_mirrors_the_verified_bytes(unusual):
    """Catches a bundle.json re-serialised before it is written (compact inputs would hide it)."""
    root, raw = unusual
    result = cli("build", "--bundles", root / "bundles", "--output", root / "site", "--no-search")
    assert result.returncode == 0 and "0 rejected" in result.stdout, result.stderr
    assert_mirrored(root / "site", raw)
    # ... and so does an incremental build that reuses them, and one that writes them again.
    (root / "bundles" / REAL_FILES[0].name).unlink()
    again = cli("build", "--bundles", root / "bundles", "--output", root / "site", "--no-search")
    assert again.returncode == 0, again.stderr
    assert_mirrored(root / "site", {pid: data for pid, data in raw.items() if pid != IDS[0]})


@pytest.mark.slow  # (a serve process)
def test_serve_sends_the_verified_bytes(unusual):
    root, raw = unusual
    port = free_port()
    with subprocess.Popen([sys.executable, "-m", "site_builder", "serve", "--port", str(port), "--no-search"],
                          cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            deadline = time.monotonic() + 30
            while not _up(f"http://127.0.0.1:{port}/"):
                assert time.monotonic() < deadline and proc.poll() is None, "serve did not come up"
                time.sleep(0.1)
            for pid, data in raw.items():
                for path in (f"pith/{pid}/bundle.json", f".well-known/pith/{pid}/bundle.json"):
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/{path}", timeout=10) as response:
                        assert response.headers["Content-Type"] == "application/json"
                        assert response.read() == data
            assert_mirrored(root / "output", raw)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(10)


def _up(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.mark.slow  # (a second or more: left to the full suite)
def test_pull_writes_the_served_bytes_and_build_mirrors_them(unusual, tmp_path):
    root, raw = unusual
    source = tmp_path / "source"
    for pid, data in raw.items():
        (source / "pith" / pid).mkdir(parents=True)
        (source / "pith" / pid / "bundle.json").write_bytes(data)
    pulled = tmp_path / "pulled"
    with static_server(source) as url:
        result = cli("pull", "--from", url, "--bundles", pulled, *IDS)
    assert result.returncode == 0, result.stderr
    assert sorted(p.read_bytes() for p in pulled.glob("*.json") if not p.name.startswith(".")) == sorted(raw.values())
    built = cli("build", "--bundles", pulled, "--output", tmp_path / "site", "--no-search")
    assert built.returncode == 0, built.stderr
    assert_mirrored(tmp_path / "site", raw)
