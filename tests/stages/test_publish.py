"""The tree a build writes into (stages/publish.py): which units the previous tree or the live site already
holds, when updating in place beats a fresh tree, and the one rule by which any unit is reused."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import signal
from types import SimpleNamespace

import pytest
from conftest import REAL_FILES, both_keys, opts, record_id, recording_writers, returns_past_fifos, tree
from generate import make_bundle

from site_builder.build import build
from site_builder.pages import ALL_ADDRESSES, record_files
from site_builder.stages.publish import RECORD_ENTRIES, kept_and_stale, prepare_spare_tree, twin_shortfall
from site_builder.writing import OutputError, OutputSlot


def test_of_the_previous_tree_only_units_with_the_planned_key_are_kept():
    previous = {"record:A": ("k1", "a/1"), "record:B": ("k2", "b/1\tb/2"), "report": ("", "verification.json"),
                "feed": ("k3", "feed.xml")}
    planned = {"record:A": ("k1", ""), "record:B": ("changed", ""), "report": ("", ""), "home": ("k4", "")}
    kept, stale = kept_and_stale(previous, planned)
    assert kept == {"record:A": ("k1", "a/1")}  # (the report is always written again)
    assert sorted(stale) == sorted(["b/1\tb/2", "verification.json", "feed.xml"])


def test_a_fresh_tree_copies_only_where_it_takes_at_most_a_tenth_of_the_live_sites_files():
    """``takes_little``: the files of the live site's units that the plan has with the same key, over all of its
    files, the report left out of both (it is always written again)."""
    from site_builder.stages.publish import COPY_LIMIT, takes_little

    assert COPY_LIMIT == 0.1
    live = {"report": ("r", "a\tb\tc\td\te"), "kept": ("k1", "f1"), "changed": ("k2", "f2\tf3"),
            "gone": ("k3", "\t".join(f"g{i}" for i in range(7)))}
    planned = {"report": ("r", ""), "kept": ("k1", ""), "changed": ("new", ""), "added": ("k4", "")}
    assert takes_little(planned, live)  # 1 file of 10: at the limit
    assert not takes_little({**planned, "changed": ("k2", "")}, live)  # 3 of 10
    assert takes_little({}, {}) and takes_little(planned, {})  # (a first build: nothing to take)


def test_mostly_stale_counts_as_the_whole_sum_would():
    """``mostly_stale`` stops counting the tree's files early; its answer is the full count's, at the limit too."""
    from site_builder.stages.publish import IN_PLACE_LIMIT, mostly_stale

    rng = random.Random(5)
    for _ in range(500):
        units = {f"u{i}": ("k", "\t".join(["f"] * rng.randint(0, 4))) for i in range(rng.randint(0, 12))}
        stale = [files for _, files in units.values() if rng.random() < rng.random()]
        count = lambda files: files.count("\t") + 1 if files else 0  # noqa: E731
        whole = sum(map(count, stale)) > IN_PLACE_LIMIT * sum(count(f) for _, f in units.values())
        assert mostly_stale(units, stale) == whole
    assert mostly_stale({"a": ("k", "f\tf\tf\tf\tf\tf\tf\tf\tf\tf")}, ["f\tf\tf\tf\tf\tf\tf\tf\tf"]) is False  # 9 of 10
    assert mostly_stale({"a": ("k", "f\tf"), "b": ("k", "f")}, ["f\tf", "f"]) is True


def test_a_fifo_or_a_link_planted_in_the_live_site_neither_stalls_the_next_build_nor_is_followed(project, tmp_path):
    """The build reads the build id of the tree beside the output, and compares the pages it writes with the live
    site's (to tell open pages which changed): a FIFO put in either tree in a file's place must not stop it
    (opening one to read waits for a writer), nor may a link there be followed (here to a FIFO outside)."""
    out = tmp_path / "out"
    build(opts(project, out, both_keys()))
    change(project)  # (a change: the tree beside the output is made)
    build(opts(project, out, both_keys()))
    outside = tmp_path / "outside"
    os.mkfifo(outside)
    fifos = [out / "stats" / "index.html", tmp_path / ".out.prev" / "verification.json", outside]
    for fifo in fifos[:2]:  # (in the live site, and in the tree beside it that the build updates)
        fifo.unlink()
        os.mkfifo(fifo)
    (out / "verification" / "index.html").unlink()
    (out / "verification" / "index.html").symlink_to(outside)
    change(project)  # (a change: the pages are written again)
    done = returns_past_fifos(lambda: build(opts(project, out, both_keys())), fifos)
    assert done, "the build waited on a FIFO in a tree of the output"
    assert {"stats/index.html", "verification/index.html"} <= set(done[0].rendered)
    for page in ("stats/index.html", "verification/index.html"):
        assert (out / page).is_file() and not (out / page).is_symlink()


def test_open_report_pages_are_told_to_reload_only_where_they_changed(project, tmp_path):
    """The pages that show a build's outcome are written by every build, but only those whose bytes changed are
    named among the pages rendered anew (what serve tells open pages to reload): a newer bundle of a record
    leaves the counts and the rejections as they were, a rejected file changes both pages."""
    out = tmp_path / "out"
    report_pages = {"stats/index.html", "verification/index.html"}
    build(opts(project, out, both_keys()))
    (project / "bundles" / "gen1.json").write_bytes(make_bundle(1, variant=2))
    quiet = build(opts(project, out, both_keys()))
    assert quiet.changed and not report_pages & set(quiet.rendered)
    (project / "bundles" / "broken.json").write_bytes(b"{}")
    loud = build(opts(project, out, both_keys()))
    assert report_pages <= set(loud.rendered)


def test_a_record_that_goes_is_named_among_the_pages_removed(project, tmp_path):
    """serve tells an open page of a record that is no longer published to reload (``BuildReport.removed``):
    the record deleted is named, and no other."""
    out = tmp_path / "out"
    build(opts(project, out, both_keys()))
    gone = record_id((project / "bundles" / "gen3.json"))
    (project / "bundles" / "gen3.json").unlink()
    assert build(opts(project, out, both_keys())).removed == [f"pith/{gone}/index.html"]
    (project / "bundles" / "gen4.json").write_bytes(make_bundle(4, variant=2))  # (renewed: not removed)
    assert build(opts(project, out, both_keys())).removed == []
    # That build updated the tree beside, which still held the record gone: no empty folder of it is left.
    assert not (out / "pith" / gone).exists() and not [d for d in out.rglob("*") if d.is_dir() and not any(d.iterdir())]


def test_the_twins_inode_estimate_counts_every_entry_a_record_puts_in_the_tree():
    """``twin_shortfall`` budgets RECORD_ENTRIES inodes a record: its files with every short address its own,
    and the folders they make (each a record's alone)."""
    files = record_files("A" * 26, "2001.00001", 3, ALL_ADDRESSES)
    folders = {path.rsplit("/", 1)[0] for path in files}
    assert len(files) == 10 and len(files) + len(folders) == RECORD_ENTRIES


def test_a_twin_is_linked_only_where_the_site_and_its_twin_fit_twice_in_the_free_inodes(tmp_path, free_inodes):
    """The budget (``twin_shortfall``): RECORD_ENTRIES inodes a record and two a unit of one page, and as much
    again; one short of it and the twin is not linked, saying why."""
    slot = SimpleNamespace(output=tmp_path / "site")
    needed = 2 * (RECORD_ENTRIES * 100 + 2 * 50)  # (100 records, 50 other units)
    free_inodes["count"] = needed
    assert twin_shortfall(slot, 100, 50) == ""
    free_inodes["count"] = needed - 1
    why = twin_shortfall(slot, 100, 50)
    assert why.startswith("no twin linked") and f"{needed - 1:,} inodes free" in why and f"wants {needed:,}" in why
    free_inodes["total"] = free_inodes["count"] = 0  # a file system with no inode budget (btrfs says so)
    assert twin_shortfall(slot, 100, 50) == ""


def test_a_twin_is_prepared_only_for_an_output_a_build_may_write(project, tmp_path):
    """serve prepares the twin while the user reads; like a build it waits for no other build of the output (it
    would link a tree that build is swapping) and takes no output that is a link."""
    out = project / "site"
    build(opts(project, out, both_keys()))
    other_build = OutputSlot(out)
    other_build.acquire()
    try:
        with pytest.raises(OutputError, match="another site-builder build is writing this output"):
            prepare_spare_tree(opts(project, out, both_keys()))
    finally:
        other_build.release()
    assert not (project / ".site.prev").exists()
    link = tmp_path / "link-to-site"
    link.symlink_to(out)
    with pytest.raises(OutputError, match="is a symbolic link"):
        prepare_spare_tree(opts(project, link, both_keys()))
    assert not (tmp_path / ".link-to-site.prev").exists()
    assert not prepare_spare_tree(opts(project, tmp_path / "never-built", both_keys()))  # (no site to twin)
    assert prepare_spare_tree(opts(project, out, both_keys()))


def test_a_tree_beside_left_half_updated_is_not_taken_for_what_it_was(project, monkeypatch):
    """A build that updates the tree beside the output in place and fails half-way (here: a full disk once the
    records are written) leaves that tree holding files of no build; the next build must not take it for the
    tree it was, or it would publish them (the page of a record that is gone by then)."""
    out, trust = project / "site", both_keys()
    build(opts(project, out, trust, link_twin=True))  # (the tree beside: a twin of the site)
    (project / "bundles" / "gen9.json").write_bytes(make_bundle(9))
    with monkeypatch.context() as patched, pytest.raises(OSError, match="No space left"):
        recording_writers(patched, fail_at="collection")
        build(opts(project, out, trust, link_twin=True))
    (project / "bundles" / "gen9.json").unlink()
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=1))  # (a site to build, not the live)
    build(opts(project, out, trust, link_twin=True))
    clean = project / "clean"
    build(opts(project, clean, trust, use_cache=False))
    assert tree(out) == tree(clean)


def _build_killed_after_its_first_removal(options) -> None:
    """A build (in a child process) killed as SIGKILL does, with no handler run, right after it removed the first
    stale file of the tree it updates in place."""
    from site_builder.writing import StagingTree

    remove = StagingTree.remove

    def remove_then_die(self, rel):
        remove(self, rel)
        os.kill(os.getpid(), signal.SIGKILL)
    StagingTree.remove = remove_then_die
    build(options)


def test_a_tree_beside_killed_while_its_stale_files_go_is_not_taken_for_what_it_was(project):
    """A build killed right after it removed the first stale file of the tree beside leaves a tree that lacks a
    file of a unit its cache entry says it holds.  Undo the change and make another, so that the next build plans
    that unit as it was and has work to do: it must not take the tree for what it was, or the site would lack
    the file."""
    out, trust = project / "site", both_keys()
    build(opts(project, out, trust, link_twin=True))  # (the tree beside: a twin of the site)
    bundle = project / "bundles" / "gen2.json"
    original = bundle.read_bytes()
    bundle.write_bytes(make_bundle(2, variant=1))
    before = tree(project / ".site.prev")
    killed = multiprocessing.get_context("fork").Process(target=_build_killed_after_its_first_removal,
                                                         args=(opts(project, out, trust, link_twin=True),))
    killed.start()
    killed.join(120)
    assert killed.exitcode == -signal.SIGKILL
    assert len(before) - len(tree(project / ".site.prev")) in (1, 2)  # (one file gone; and the marker, first)
    bundle.write_bytes(original)
    (project / "bundles" / "gen3.json").write_bytes(make_bundle(3, variant=1))
    build(opts(project, out, trust, link_twin=True))
    build(opts(project, project / "clean", trust, use_cache=False))
    assert tree(out) == tree(project / "clean")


def test_a_unit_a_file_of_which_is_gone_from_the_live_site_is_written_again(project, tmp_path):
    """A unit is taken over from the live site only whole: one whose file was deleted there (by hand, by a deploy
    step) is written again, its files linked before the missing one taken back first, and the site equals a
    clean build."""
    out = tmp_path / "out"
    build(opts(project, out, both_keys()))
    (out / "assets" / "style.css").unlink()  # (a file the static unit names after robots.txt, 404.html...)
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=1))  # (a site to build, not the live)
    build(opts(project, out, both_keys()))
    build(opts(project, tmp_path / "clean", both_keys(), use_cache=False))
    assert tree(out) == tree(tmp_path / "clean")


@pytest.mark.parametrize("planted", [None, "link", "fifo", "gone"])
def test_a_fresh_tree_that_takes_little_from_the_live_site_copies_it_and_shares_no_file(project, monkeypatch,
                                                                                        planted):
    """Where nearly every file is new (an edit of the record's page template at 10,000 records; here most records
    changed, with the limits lowered to this project's size), the units the live site holds as planned are copied
    into the fresh tree (a record's bundle.json still one file with two names), so that the new site shares no
    file with the old one, whose deletion is not waited for, and the build links its twin.  A link or FIFO
    planted in the live site in a unit's place is neither followed, nor waited on, nor copied, and one gone from
    it is not taken for copied: the unit is rendered instead."""
    from site_builder import writing
    from site_builder.stages import publish as publish_stage

    monkeypatch.setattr(publish_stage, "IN_PLACE_LIMIT", 0.3)
    monkeypatch.setattr(publish_stage, "COPY_LIMIT", 0.6)
    monkeypatch.setattr(writing, "_DELETER", "import time; time.sleep(3)\n" + writing._DELETER)
    trust, out = both_keys(), project / "site"
    build(opts(project, out, trust, link_twin=True))
    groups = out / "category" / "index.html"
    live = {rel: path.stat().st_ino for rel, path in ((p.relative_to(out), p) for p in out.rglob("*"))
            if path.is_file()}
    if planted == "link":
        groups.unlink()
        groups.symlink_to(project / "bundles" / sorted(os.listdir(project / "bundles"))[0])
    elif planted == "fifo":
        groups.unlink()
        os.mkfifo(groups)
    elif planted == "gone":
        groups.unlink()
    for i in range(6):
        (project / "bundles" / f"gen{i}.json").write_bytes(make_bundle(i, variant=5))
    done = returns_past_fifos(lambda: build(opts(project, out, trust, link_twin=True)), [groups])
    assert done, "the build waited on a FIFO in the live site"
    # (both retired trees, the old site and the twin beside it, are left to their deleters: no file is shared)
    assert len(list(project.glob(".site.old-*"))) == 2, "the build waited for an old tree's deletion"
    now = {rel: path.stat().st_ino for rel, path in ((p.relative_to(out), p) for p in out.rglob("*"))
           if path.is_file()}
    assert not set(live.items()) & set(now.items())  # (no file of the old site's)
    assert groups.is_file() and not groups.is_symlink()
    assert (planted is None) == ("category/index.html" not in done[0].rendered)  # (copied, or rendered again)
    unchanged = {f"pith/{json.loads(p.read_bytes())['pith_number'].rsplit(':', 1)[1]}/index.html" for p in REAL_FILES}
    assert not unchanged & set(done[0].rendered)  # (the real records copied whole, bundle.json's two names too)
    copied = [p.parent for p in (out / "pith").glob("*/bundle.json")]
    assert len(copied) == 10 and all(folder.name for folder in copied)
    for folder in copied:
        assert (folder / "bundle.json").samefile(out / ".well-known" / "pith" / folder.name / "bundle.json")
    prev = project / ".site.prev"
    assert tree(prev) == tree(out) and (prev / "category" / "index.html").samefile(groups)  # (its twin)
    build(opts(project, project / "clean", trust, use_cache=False))
    assert tree(out) == tree(project / "clean")


def test_a_build_that_fails_leaves_neither_its_tree_nor_its_twin(project):
    """A first build (a fresh tree, its twin linked as it goes) whose list template fails once the records are
    written leaves no tree and no twin of its own behind, and no site: the records' files and their links went with
    it."""
    (project / "templates" / "listing.html").write_text("{{ no_such_thing.field }}")
    with pytest.raises(Exception, match="no_such_thing"):
        build(opts(project, project / "site", both_keys(), link_twin=True))
    assert sorted(p.name for p in project.iterdir() if p.name.startswith(".site.")) in ([], [".site.lock"])
    assert not (project / "site").exists()


@pytest.mark.parametrize("failing", ["record", "listing"])
def test_a_twin_that_cannot_be_linked_is_dropped_before_the_build_returns(project, monkeypatch, failing):
    """The twin only saves the next build time: where its links cannot be made (no inode left, a file system
    without hard links), as a record's files are written or a list page's, the build goes on without it, and
    deletes what it linked before it returns (deleting those links later would change the status of the site's
    files under a deploy step)."""
    from site_builder.writing import StagingTree

    mirror = StagingTree.mirror
    failing_file = {"record": "state.json", "listing": "papers/index.html"}[failing]

    def no_room(self, rels, source_root, copy=False):
        rels = list(rels)
        if any(rel.endswith(failing_file) for rel in rels):
            raise OSError(28, "No space left on device")
        mirror(self, rels, source_root, copy)
    out = project / "site"
    with monkeypatch.context() as patched:
        patched.setattr(StagingTree, "mirror", no_room)
        build(opts(project, out, both_keys(), link_twin=True))
    assert not [p.name for p in project.iterdir() if p.name.startswith(".site.") and p.name != ".site.lock"]
    build(opts(project, project / "clean", both_keys(), use_cache=False))
    assert tree(out) == tree(project / "clean")


def test_the_twin_shares_the_sites_files_but_the_reports(project):
    """The twin a build links as it writes afresh holds every file of the site, each the site's own file (a hard
    link: the twin costs folders, not a copy of the site), except the report's files, which are copies: the next
    build reads verification.json's status to recognise the live site, and updating the twin in place removes and
    rewrites the report there, which would change the live file's status."""
    out = project / "site"
    build(opts(project, out, both_keys(), link_twin=True))
    twin = project / ".site.prev"
    site_files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert site_files == sorted(p.relative_to(twin).as_posix() for p in twin.rglob("*") if p.is_file())
    shared = {rel for rel in site_files if (twin / rel).samefile(out / rel)}
    assert {"verification.json", "index.html", "stats/index.html", "verification/index.html"}.isdisjoint(shared)
    assert {"feed.xml", "papers/index.html", "assets/style.css"} <= shared
    assert {rel for rel in site_files if rel.startswith("pith/")} <= shared


def test_only_the_top_of_a_site_the_builder_makes_counts_as_its_own(tmp_path):
    from site_builder.pages import made_by_the_site
    from site_builder.stages.publish import foreign_names

    assert all(made_by_the_site(name) for name in ("index.html", "pith", ".well-known", "sitemap.xml", "sitemap-7.xml"))
    assert not any(made_by_the_site(name) for name in ("CNAME", ".git", "Index.html", "sitemap.txt", "notes"))
    for name in ("index.html", "pith", "CNAME", ".git", ".DS_Store", "b", "a"):
        (tmp_path / name).mkdir()
    asked = []
    assert foreign_names(tmp_path, lambda: asked.append(1) or {"a"}) == [".git", "CNAME", "b"]
    assert asked == [1]
    assert foreign_names(tmp_path / "pith", lambda: asked.append(2) or set()) == [] and asked == [1]  # (not asked)
    assert foreign_names(tmp_path / "missing", lambda: set()) == []


def change(project) -> None:
    """Delete the last bundle of *project*: a build with work to do."""
    sorted((project / "bundles").glob("*.json"))[-1].unlink()


def test_a_file_put_in_the_output_by_hand_stops_the_build_and_is_kept(project, tmp_path):
    """A CNAME or a .git put in the output folder is not the site: every build swaps a new tree in for the folder
    (and the old tree beside it is the next build's), so the file would be lost, or come and go from one build
    to the next.  The build stops first, naming it, and changes nothing; from the static folder the file is in
    every build's site."""
    out = tmp_path / "out"
    build(opts(project, out, both_keys()))
    (out / "CNAME").write_text("mirror.example.org\n")
    (out / ".git").mkdir()
    (out / ".git" / "HEAD").write_text("ref: refs/heads/gh-pages\n")
    (out / ".DS_Store").write_bytes(b"\0")  # (a file manager's: not worth stopping for)
    before = tree(out)
    change(project)
    with pytest.raises(OutputError, match=r"out/\.git: not part of the site nor of the static folder \(also found: "
                                          r"CNAME\); every build replaces the output folder.*nothing was changed"):
        build(opts(project, out, both_keys()))
    assert tree(out) == before and not (tmp_path / ".out.prev").exists()
    with pytest.raises(OutputError, match="out/.git: not part of the site"):  # (a no-op build too: the same rule)
        build(opts(project, out, both_keys()))
    shutil.rmtree(out / ".git")
    static = tmp_path / "static"
    static.mkdir()
    (out / "CNAME").rename(static / "CNAME")
    for _ in range(3):  # (the tree beside is updated in place, in turn with the live one)
        change(project)
        build(opts(project, out, both_keys(), static_dir=static))
        assert (out / "CNAME").read_text() == "mirror.example.org\n" and not (out / ".DS_Store").exists()


def test_a_static_file_since_removed_is_the_sites_own_where_the_cache_recorded_it(project, tmp_path):
    out = tmp_path / "out"
    static = tmp_path / "static"
    static.mkdir()
    (static / "CNAME").write_text("mirror.example.org\n")
    (static / "google0123.html").write_text("google-site-verification: google0123.html\n")
    build(opts(project, out, both_keys(), static_dir=static))
    build(opts(project, out, both_keys(), static_dir=static, use_cache=False))  # (the static folder's: no cache needed)
    assert (out / "CNAME").is_file()
    (static / "CNAME").unlink()
    build(opts(project, out, both_keys(), static_dir=static))
    assert not (out / "CNAME").exists() and (out / "google0123.html").is_file()
    (static / "google0123.html").unlink()  # (without a cache, nothing tells it from a file put there by hand)
    with pytest.raises(OutputError, match="google0123.html: .* delete it if you removed it from there"):
        build(opts(project, out, both_keys(), static_dir=static, use_cache=False))
    build(opts(project, out, both_keys(), static_dir=static))
    assert not (out / "google0123.html").exists()


def test_a_file_put_in_the_tree_beside_the_site_is_never_published(project, tmp_path):
    """The tree beside the output is brought up to date in place, unit by unit: a file that is no unit's, put
    there, would be swapped in with it.  Such a tree is not updated but replaced, and the site is the one a build
    from scratch makes."""
    out = tmp_path / "out"
    build(opts(project, out, both_keys()))
    change(project)
    build(opts(project, out, both_keys()))
    (tmp_path / ".out.prev" / "planted.html").write_text("<h1>not from any bundle</h1>")
    change(project)
    build(opts(project, out, both_keys()))
    assert not (out / "planted.html").exists()
    build(opts(project, tmp_path / "clean", both_keys(), use_cache=False))
    assert tree(out) == tree(tmp_path / "clean")


@pytest.mark.parametrize("atomic", [True, False])
def test_an_output_deleted_by_hand_is_built_again_from_the_tree_beside_it(project, tmp_path, monkeypatch, atomic):
    """``rm -rf output`` leaves the tree beside it, which the cache knows: the next build brings that tree up to
    date and moves it into place, there being no site to exchange it with (with the atomic swap, and with the
    renames a file system without it gets), and the builds after it go on as ever."""
    from site_builder import writing

    if not atomic:
        monkeypatch.setattr(writing, "exchange", lambda a, b: False)
    out = tmp_path / "out"
    build(opts(project, out, both_keys()))
    change(project)
    build(opts(project, out, both_keys()))
    shutil.rmtree(out)
    assert (tmp_path / ".out.prev").is_dir()
    report = build(opts(project, out, both_keys()))
    assert report.files_reused > 0  # (the tree beside, brought up to date in place)
    build(opts(project, tmp_path / "clean", both_keys(), use_cache=False))
    assert tree(out) == tree(tmp_path / "clean")
    change(project)
    build(opts(project, out, both_keys()))
    build(opts(project, tmp_path / "clean", both_keys(), use_cache=False))
    assert tree(out) == tree(tmp_path / "clean")
