"""Bundles that change while the build runs: each such record is rejected as ``file_changed`` (or read again),
the rest is built, and the build is never aborted ("File exists" once stopped 2 of 12 such builds)."""

import json
import os
import random
import subprocess
import sys
import threading
import time

import pytest

from site_builder.build import BuildOptions, build, default_cache_dir
from site_builder.cache import BuildCache
from site_builder.cache_key import user_cache_key
from site_builder.options import BuildPolicy
from site_builder.inspection import inspect_bytes
from site_builder.keys import load_trust_set

from conftest import REAL_FILES, real_and_generated_bundles, tree
from linkcheck import broken_links


def real_bundles(tmp_path):
    """A bundles folder holding the real bundles, and their bytes by file name."""
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    originals = {p.name: p.read_bytes() for p in REAL_FILES}
    for name, raw in originals.items():
        (bundles / name).write_bytes(raw)
    return bundles, originals


def tamper_keeping_size(path) -> None:
    """Change one letter of the file's title: the same size, so only the digest can tell."""
    raw = path.read_bytes()
    at = raw.index(b'"title":"') + 9
    path.write_bytes(raw[:at] + (b"X" if raw[at:at + 1] != b"X" else b"Y") + raw[at + 1:])


def after_first_render(action):
    """A build's progress hook that runs *action* once the first record is rendered, and the list that notes
    it ran."""
    done = []

    def progress(stage, count, total):
        if stage == "render" and not done:
            done.append(count)
            action()
    return progress, done


def test_a_bundle_rewritten_in_place_with_its_mtime_put_back_is_verified_again(tmp_path, pinned):
    """The cache knows a bundle by its size, mtime, inode and change time: a file rewritten in its own inode, the
    same size, its mtime set back to what it was (``touch -r``, an rsync that keeps times), still has a new change
    time, which no user can set.  So it is read and verified again, and the forgery is rejected by its check, as
    it would be in a build without a cache."""
    bundles, _ = real_bundles(tmp_path)
    options = BuildOptions(bundles=bundles, output=tmp_path / "site", trust=pinned, search=False)
    assert build(options).count("published") == len(REAL_FILES)
    target = bundles / REAL_FILES[0].name
    before = os.stat(target)
    time.sleep(0.01)  # (a change time the file system can tell from the first)
    tamper_keeping_size(target)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(target)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    report = build(options)
    [rejected] = report.rejected
    assert rejected.inspection.rel == target.name and rejected.inspection.check == "event_hash", rejected.inspection


def test_files_changed_between_verifying_and_rendering_are_rejected_and_the_rest_is_built(tmp_path, pinned):
    bundles, originals = real_bundles(tmp_path)
    names = sorted(originals)

    def change_the_rest():
        """One file deleted, one tampered, one swapped for another record."""
        (bundles / names[1]).unlink(missing_ok=True)
        others = [n for n in names if (bundles / n).exists()]
        for n in others:
            tamper_keeping_size(bundles / n)
        (bundles / others[-1]).write_bytes(originals[others[0]])

    progress, done = after_first_render(change_the_rest)
    out = tmp_path / "site"
    report = build(BuildOptions(bundles=bundles, output=out, trust=pinned, search=False,
                                policy=BuildPolicy(jobs=1, progress=progress, use_cache=False)))
    statuses = {o.inspection.rel: (o.status, o.inspection.check) for o in report.outcomes}
    changed = [rel for rel, (status, check) in statuses.items() if check == "file_changed"]
    assert done and len(changed) == len(names) - 1, statuses
    published = {o.inspection.pith_id for o in report.outcomes if o.status == "published"}
    assert len(published) == 1
    # What is published is verified bytes, and the site is whole: no link to a record that was dropped.
    for pith_dir in (d for d in (out / "pith").iterdir() if len(d.name) == 26):  # (not the short addresses)
        raw = (pith_dir / "bundle.json").read_bytes()
        assert raw in originals.values() and inspect_bytes("x", raw, pinned).verified
        assert pith_dir.name in published
    assert broken_links(out, "https://mirror.example.org", "/") == []
    doc = json.loads((out / "verification.json").read_text())
    assert sum(f["status"] == "rejected" for f in doc["files"]) == len(names) - 1
    # The next build, with the files as they are now, is a normal one.
    again = build(BuildOptions(bundles=bundles, output=out, trust=pinned, search=False))
    assert not [o for o in again.outcomes if o.inspection.check == "file_changed"]


def test_a_site_planned_again_without_changed_files_names_what_it_holds(tmp_path, pinned):
    """The site planned again without the records whose files changed while it was built names the units it
    holds as they are: every record it publishes, and each listing by the records it shows now.  So the next
    build, with the files back as they were, gives the very site a clean build gives (a listing named by the
    plan made before the change would be reused then, showing one record instead of four).  The twin the
    first build links as it writes is kept, and holds that site: the records dropped wrote no file in it."""
    bundles, originals = real_bundles(tmp_path)
    progress, done = after_first_render(lambda: [tamper_keeping_size(bundles / n) for n in sorted(originals)[1:]])
    out = tmp_path / "site"
    report = build(BuildOptions(bundles=bundles, output=out, trust=pinned, search=False,
                                policy=BuildPolicy(jobs=1, progress=progress, link_twin=True)))
    published = {o.inspection.pith_id for o in report.outcomes if o.status == "published"}
    assert done and len(published) == 1
    assert tree(tmp_path / ".site.prev") == tree(out)
    build_id = json.loads((out / "verification.json").read_text())["build_id"]
    cache = BuildCache(default_cache_dir(out) / "cache.sqlite", key=user_cache_key())
    units = cache.units(build_id)
    cache.close()
    assert {name.removeprefix("record:") for name in units if name.startswith("record:")} == published
    for name, raw in originals.items():
        (bundles / name).write_bytes(raw)
    build(BuildOptions(bundles=bundles, output=out, trust=pinned, search=False))
    clean = tmp_path / "clean"
    build(BuildOptions(bundles=bundles, output=clean, trust=pinned, search=False, policy=BuildPolicy(use_cache=False)))
    assert tree(out) == tree(clean)


def test_a_listing_kept_for_a_record_dropped_mid_build_goes_with_it(tmp_path, pinned):
    """Two records rendered again (their bundles in other bytes: the same JSON laid out anew, so their rows and
    the listings showing them are unchanged, and kept where the previous tree is updated in place), and the
    second one's file changes before it is read: it is dropped, and the pages kept for it go too (it was alone in
    its year and category), so no page lists a record the site does not hold."""
    bundles, originals = real_bundles(tmp_path)
    out = tmp_path / "site"
    options = dict(bundles=bundles, output=out, trust=pinned, search=False)
    build(BuildOptions(**options, policy=BuildPolicy(link_twin=True)))
    first, alone = "5KDARQNDDYME4KO7AJIJ4ADESI.json", "A2G3QVIG5OIYJVZB5MA4S6VDQP.json"  # (alone in 2023, cs.PL)
    assert (out / "year" / "2023" / "index.html").exists() and (out / "category" / "cs.PL" / "index.html").exists()
    for name in (first, alone):
        (bundles / name).write_text(json.dumps(json.loads(originals[name]), indent=1))
    progress, done = after_first_render(lambda: (bundles / alone).write_bytes(originals[alone]))
    report = build(BuildOptions(**options, policy=BuildPolicy(jobs=1, progress=progress)))
    assert done and {o.inspection.rel: o.inspection.check for o in report.rejected} == {alone: "file_changed"}
    assert report.count("published") == len(originals) - 1
    assert not (out / "year" / "2023").exists() and not (out / "category" / "cs.PL").exists()
    assert broken_links(out, "https://mirror.example.org", "/") == []


@pytest.mark.slow
def test_builds_while_bundles_are_rewritten_never_abort(tmp_path):
    """Twelve command-line builds, with and without the cache, while another process keeps replacing, rewriting
    in place and deleting bundles: every build exits 0 and publishes only verified bytes."""
    from generate import benchmark_key
    bundles = real_and_generated_bundles(tmp_path / "bundles", 600)
    key_file = tmp_path / "bench-key.json"
    benchmark_key().write(key_file)
    trust = load_trust_set([key_file])
    originals = {p.name: p.read_bytes() for p in bundles.iterdir()}
    stop = threading.Event()

    def churn():
        rng = random.Random(7)
        names = sorted(originals)
        while not stop.is_set():
            a, b = rng.sample(names, 2)
            path = bundles / a
            action = rng.random()
            try:
                if action < 0.4:  # replaced by rename, with another record's bytes or its own
                    tmp = bundles / f".{a}.tmp"
                    tmp.write_bytes(originals[b] if rng.random() < 0.5 else originals[a])
                    os.replace(tmp, path)
                elif action < 0.7:  # rewritten in place, a torn write first
                    with open(path, "r+b") as f:
                        f.write(originals[a][:100])
                    path.write_bytes(originals[a])
                else:  # deleted and written back
                    path.unlink(missing_ok=True)
                    path.write_bytes(originals[a])
            except OSError:
                pass
            time.sleep(0.0005)

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    out = tmp_path / "site"
    try:
        for i in range(12):
            proc = subprocess.run([sys.executable, "-m", "site_builder", "build", "--no-search", "--bundles", bundles,
                                   "--output", out, "--trusted-keys", key_file, *(["--no-cache"] if i % 3 == 2 else [])],
                                  capture_output=True, text=True, cwd=tmp_path)
            assert proc.returncode == 0, proc.stderr[-2000:]
            assert "Traceback" not in proc.stderr and "File exists" not in proc.stderr
    finally:
        stop.set()
        thread.join()
    site = tree(out)
    every = set(originals.values())
    for rel, raw in site.items():
        if rel.startswith("pith/") and rel.endswith("/bundle.json"):
            assert raw in every and inspect_bytes(rel, raw, trust).verified
