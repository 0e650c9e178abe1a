"""The index stage (stages/index.py): a Pagefind index made again only for the shards whose pages changed, and
every shard made again when Pagefind itself changed."""

import os
from dataclasses import replace

import pytest

from conftest import both_keys, opts, search_page_counts, tree
from generate import make_bundle
from site_builder.build import BuildOptions, build
from site_builder.keys import load_trust_set
from site_builder.options import BuildPolicy, ServeSession
from site_builder.search_index import SEARCH_STAGE
from site_builder.settings import SiteConfig


def test_a_change_re_indexes_only_its_shard_and_equals_a_clean_build(bundles_dir, tmp_path):
    """Four records in three shards (one record or two a shard): removing a record re-makes the index of its own
    shard alone (the others' files are the live ones, linked), and removing a shard's only record removes that
    index from the site and from the search page."""
    config = SiteConfig(search_shard_size=1)
    out = tmp_path / "site"
    options = BuildOptions(bundles=bundles_dir, output=out, trust=load_trust_set(), config=config)
    build(options)
    assert search_page_counts(out) == {"pagefind/1-of-4": 2, "pagefind/3-of-4": 1, "pagefind/4-of-4": 1}
    inode = lambda rel: os.stat(out / rel).st_ino  # noqa: E731
    kept = {rel: inode(rel) for rel in ("pagefind/3-of-4/pagefind-entry.json", "pagefind/4-of-4/pagefind-entry.json")}

    (bundles_dir / "A2G3QVIG5OIYJVZB5MA4S6VDQP.json").unlink()  # shares 1-of-4 with AOU3...
    report = build(options)
    assert not report.search_behind  # (made now: a build out of serve never defers)
    assert 0 < report.search_seconds < report.seconds  # (the summary line gives it as the index's share)
    assert search_page_counts(out) == {"pagefind/1-of-4": 1, "pagefind/3-of-4": 1, "pagefind/4-of-4": 1}
    assert {rel: inode(rel) for rel in kept} == kept  # the other shards' indexes were not made again

    (bundles_dir / "W3PCQTV6U43ZRLRXL3ULSAQ7HW.json").unlink()  # alone in 3-of-4; now 2 records, 2 shards
    build(options)
    assert search_page_counts(out) == {"pagefind/1-of-2": 1, "pagefind/2-of-2": 1}
    assert '["/pagefind/1-of-2/","/pagefind/2-of-2/"]' in (out / "search/index.html").read_text()
    clean = tmp_path / "clean"
    build(BuildOptions(bundles=bundles_dir, output=clean, trust=load_trust_set(), config=config))
    assert tree(out) == tree(clean)


def test_a_build_whose_record_pages_are_the_same_indexes_nothing(bundles_dir, tmp_path):
    """A static file edited is that file rewritten alone: no shard's pages changed, so Pagefind is not run, the
    summary line names no search index, and serve is not told that the search page changed."""
    static = tmp_path / "static"
    static.mkdir()
    (static / "notice.txt").write_text("Mirrored daily.\n")
    options = BuildOptions(bundles=bundles_dir, output=tmp_path / "site", trust=load_trust_set(), static_dir=static,
                           config=SiteConfig(search_shard_size=1))
    build(options)
    (static / "notice.txt").write_text("Mirrored hourly.\n")
    report = build(options)
    assert report.changed and (tmp_path / "site" / "notice.txt").read_text() == "Mirrored hourly.\n"
    assert report.search_seconds == 0 and "search index" not in report.summary_line()
    assert "search/index.html" not in report.rendered


@pytest.mark.slow  # (a second or more: left to the full suite)
def test_another_pagefind_remakes_every_shard_and_nothing_else(bundles_dir, tmp_path, monkeypatch):
    """The search page's Pagefind (the first shard's) reads the other shards' indexes: after Pagefind is upgraded
    every shard is made again by the new one, even with nothing else changed, and no record page is."""
    import site_builder.build

    options = BuildOptions(bundles=bundles_dir, output=tmp_path / "site", trust=load_trust_set(),
                           config=SiteConfig(search_shard_size=1))
    build(options)
    entries = sorted((tmp_path / "site").glob("pagefind/*/pagefind-entry.json"))
    inodes = [os.stat(p).st_ino for p in entries]
    pages = {p: os.stat(p).st_ino for p in (tmp_path / "site").glob("pith/*/index.html")}
    assert len(entries) == 3 and not build(options).changed  # (the same Pagefind: nothing to do)
    monkeypatch.setattr(site_builder.build, "pagefind_version", lambda: "pagefind 99.0, pagefind-bin 99.0")
    report = build(options)
    assert report.changed and report.search_seconds > 0
    assert all(os.stat(p).st_ino != inode for p, inode in zip(entries, inodes))
    assert {p: os.stat(p).st_ino for p in pages} == pages  # every record's pages reused


def test_a_deferred_index_made_after_all_is_named_by_the_build_id(project, serve_store):
    """serve plans the live search index where the new one would be made (the report says the search is behind);
    where the live index cannot be taken over after all (others may write to the output, so nothing in it is
    reused), the index stage makes it now, and the build id must name the index made, not the live one: else
    serve's next build, finding another id for the same site, writes it again."""
    out = project / "site"
    build(opts(project, out, both_keys(), search=True))
    (project / "bundles" / "gen1.json").write_bytes(make_bundle(1, variant=2))
    os.chmod(out, 0o777)  # (shared: the live site's files are not reused)
    session = ServeSession(serve_store, defer_search=True)
    report = build(opts(project, out, both_keys(), search=True, session=session))
    assert report.changed and report.search_seconds > 0 and not report.search_behind  # (made now)
    again = build(opts(project, out, both_keys(), search=True, session=session))  # (plans: no quick no-op answer)
    assert not again.changed and again.files_written == 0


@pytest.mark.parametrize("shard_size", [1, 10])  # (three shards: made of how many; one index: no total known)
def test_the_progress_of_the_search_index_ends_done(bundles_dir, tmp_path, shard_size):
    """The progress display shows Pagefind's run as shards made of how many, or for one index as a bar that
    pulses (no total known); when it is done it says so, so that the bar ends full, not pulsing."""
    seen = []
    options = BuildOptions(bundles=bundles_dir, output=tmp_path / "site", trust=load_trust_set(),
                           config=SiteConfig(search_shard_size=shard_size))
    build(replace(options, policy=BuildPolicy(progress=lambda *call: seen.append(call))))
    indexing = [call for call in seen if call[0] == SEARCH_STAGE]
    shards = 3 if shard_size == 1 else 1
    assert indexing[0] == (SEARCH_STAGE, 0, shards if shards > 1 else None)
    assert indexing[-1] == (SEARCH_STAGE, shards, shards)
