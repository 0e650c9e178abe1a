"""The verify stage (stages/verify.py): every file checked against the pinned keys unless the store (serve) or the
authenticated cache already holds its result for the same bytes and keys."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import replace

from conftest import both_keys, cache_document, calls_of, opts, verified
from generate import make_bundle
from site_builder.build import build
from site_builder.keys import load_trust_set
from site_builder.options import ServeSession
from site_builder.stages import verify as verify_stage


def test_serve_verifies_a_file_again_only_when_it_changed(project, tmp_path, serve_store):
    store = serve_store
    options = opts(project, project / "site", both_keys(), session=ServeSession(store), use_cache=False)
    first = verified(options, tmp_path)
    assert len(first.fresh) == 10 and all(i.verified for i in first.inspections)
    again = verified(options, tmp_path)
    assert again.fresh == [] and all(a is b for a, b in zip(again.inspections, first.inspections))
    (project / "bundles" / "gen1.json").write_bytes(make_bundle(1, variant=2))
    changed = verified(options, tmp_path)
    assert [i.rel for i in changed.fresh] == ["gen1.json"]


def test_serve_takes_results_from_its_store_only_for_the_same_keys(project, tmp_path, serve_store):
    """A key no longer pinned (serve's keys file edited) is no key: every file is checked again, and the
    generated bundles, signed by it, are rejected."""
    store = serve_store
    options = opts(project, project / "site", both_keys(), session=ServeSession(store), use_cache=False)
    assert all(i.verified for i in verified(options, tmp_path).inspections)
    other_keys = verified(replace(options, trust=load_trust_set()), tmp_path)
    assert len(other_keys.fresh) == 10 and sum(i.verified for i in other_keys.inspections) == 4


def test_a_separate_build_takes_results_from_the_cache_only_for_the_same_keys(project, tmp_path):
    options = opts(project, project / "site", both_keys())
    build(options)
    assert verified(options, tmp_path).fresh == []  # (the cache the build left)
    other_keys = verified(replace(options, trust=load_trust_set()), tmp_path)
    assert len(other_keys.fresh) == 10  # other pinned keys: every file checked again
    assert sum(i.verified for i in other_keys.inspections) == 4  # (the generated bundles' key is not pinned)


def test_a_separate_build_verifies_only_what_changed_since_the_last_build_again(project, tmp_path):
    """The cache keeps every unchanged file's result when a build saves what changed (results of one digest
    part rewritten, the rest left): after two changes in turn, each build verifies its changed file alone."""
    options = opts(project, project / "site", both_keys())
    build(options)
    for n, variant in ((1, 2), (2, 2), (1, 3)):
        (project / "bundles" / f"gen{n}.json").write_bytes(make_bundle(n, variant=variant))
        assert [i.rel for i in verified(options, tmp_path).fresh] == [f"gen{n}.json"]
        build(options)
    assert verified(options, tmp_path).fresh == []
    db = sqlite3.connect(project / ".site-builder-cache" / "site" / "cache.sqlite")
    stored = [sha for name, in db.execute("SELECT name FROM documents WHERE name LIKE 'inspections/%'").fetchall()
              for sha in cache_document(db, name)[0]["results"]]
    assert sorted(stored) == sorted({sha for _, sha in cache_document(db, "files")[0].values()})  # (none left over)
    db.close()


def test_files_with_the_same_bytes_each_keep_their_own_name(project, tmp_path):
    """The cache keeps one result per digest: two files holding the same bytes (a bundle pulled twice under two
    names) share it, and each is reported under its own name, the copy superseded by the other."""
    options = opts(project, project / "site", both_keys())
    (project / "bundles" / "copy.json").write_bytes((project / "bundles" / "gen3.json").read_bytes())
    build(options)
    again = verified(options, tmp_path)
    assert again.fresh == []
    names = sorted(i.rel for i in again.inspections)
    assert names == sorted(p.name for p in (project / "bundles").iterdir())
    assert len({i.sha256 for i in again.inspections if i.rel in ("copy.json", "gen3.json")}) == 1
    (project / "bundles" / "gen4.json").write_bytes(make_bundle(4, variant=2))  # (a build that is no no-op)
    report = build(options)
    statuses = {o.inspection.rel: o.status for o in report.outcomes}
    assert sorted(statuses) == names
    assert sorted([statuses["copy.json"], statuses["gen3.json"]]) == ["published", "superseded"]


def test_a_file_only_touched_is_not_verified_again(project, tmp_path, monkeypatch):
    """A file whose stat alone changed (touched, checked out again, copied without its times) is hashed, not
    verified again, where the cache holds a result for its bytes; the build that finds it so writes nothing and
    remembers its new stat, so the builds after it do not even hash it.  A file of the same size whose bytes
    changed is verified."""
    options = opts(project, project / "site", both_keys())
    build(options)
    hashed = calls_of(monkeypatch, verify_stage, "file_sha256")
    for n, path in enumerate(sorted((project / "bundles").glob("*.json"))):
        os.utime(path, ns=(0, (n + 1) * 1_000_000_000))
    assert verified(options, tmp_path).fresh == [] and len(hashed) == 10
    assert build(options).changed is False
    hashed.clear()
    assert verified(options, tmp_path).fresh == [] and hashed == []
    tampered = project / "bundles" / "gen1.json"
    raw = bytearray(tampered.read_bytes())
    raw[raw.index(b'"title"') + 10] ^= 1  # (the same size, other bytes)
    tampered.write_bytes(bytes(raw))
    again = verified(options, tmp_path)
    assert [i.rel for i in again.fresh] == ["gen1.json"] and again.fresh[0].check is not None
    assert hashed == [str(tampered)]


def test_every_file_found_or_passed_over_has_one_result_in_path_order(project, tmp_path):
    """The files the walk could not read (a FIFO, a link) are results too, rejected, among the others in path
    order: the report lists every file of the folder as the folder holds them."""
    bundles = project / "bundles"
    os.mkfifo(bundles / "a-pipe.json")
    os.symlink(bundles / "gen1.json", bundles / "m-link.json")
    (bundles / "z-broken.json").write_bytes(b"{")
    result = verified(opts(project, project / "site", both_keys(), use_cache=False), tmp_path)
    names = [i.rel for i in result.inspections]
    assert names == sorted(p.name for p in bundles.iterdir())
    assert {i.rel: i.check for i in result.inspections if not i.verified} == {
        "a-pipe.json": "file_type", "m-link.json": "file_type", "z-broken.json": "json_syntax"}


def test_a_bundle_over_the_builds_byte_limit_is_refused_unread(project, tmp_path):
    """``BuildOptions.max_bytes`` bounds what a build reads of a bundle (a planted file of gigabytes is refused,
    not read into memory): a bundle one byte over it is rejected for its size, those within it verify."""
    sizes = {p.name: p.stat().st_size for p in (project / "bundles").iterdir()}
    limit = sizes["gen1.json"] - 1
    assert any(size <= limit for size in sizes.values())  # (bundles under it too, which verify)
    options = replace(opts(project, project / "site", both_keys(), use_cache=False), max_bytes=limit)
    result = {i.rel: i for i in verified(options, tmp_path).inspections}
    assert (result["gen1.json"].check, result["gen1.json"].reason) == (
        "file_size", f"{sizes['gen1.json']} bytes is over the {limit}-byte limit")
    assert all(result[name].verified == (size <= limit) for name, size in sizes.items())


def test_a_file_with_no_bytes_read_costs_the_next_build_only_itself(project, tmp_path):
    """A file rejected before any of its bytes were verified (over the size limit, or one this user may not read)
    has no digest, and is left out of the file index the cache keeps: the next separate build checks it again,
    and takes every other file's result from the cache (a file index holding it would be refused as damaged,
    and the whole cache with it)."""
    options = opts(project, project / "site", both_keys(), max_bytes=100_000)
    (project / "bundles" / "huge.json").write_bytes(b"[" + b"0," * 60_000 + b"0]")
    build(options)
    again = verified(options, tmp_path)
    assert [(i.rel, i.check) for i in again.fresh] == [("huge.json", "file_size")]
    assert sum(i.verified for i in again.inspections) == 10
