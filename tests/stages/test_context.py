"""What every stage shares (stages/context.py): a build key naming all the output depends on besides the
inputs and templates, and a context that holds the output's lock for the build's length."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import REAL_FILES, both_keys, exclusive_lock_held, keyword_of_calls, open_descriptors, opts, tree
from generate import make_bundle
from site_builder.build import build
from site_builder.cache_folder import leave_save_failure
from site_builder.cache_key import user_cache_key
from site_builder.keys import load_trust_set
from site_builder.loading import stat_signature
from site_builder.options import BuildPolicy, ServeSession
from site_builder.report import BuildReport
from site_builder.settings import SettingsError, SiteConfig
from site_builder.stages.context import (ABOUT_MAX_BYTES, StageClock, build_key_of, default_cache_dir, digest_of,
                                         digests_under, no_cache_note, opened_context, read_about, source_date)
from site_builder.stages.remember import SAVE_STOPPED
from site_builder.writing import OutputError


def test_the_build_key_names_settings_keys_and_search_and_the_site_key_every_template(project, tmp_path):
    """What every page shows; the about page is an input of the pages that show it (tests/test_incremental.py),
    and each unit keys on the templates it uses (tests/test_template_uses.py), all of which the site key names."""
    options = opts(project, project / "site", both_keys())
    base = build_key_of(options)
    assert build_key_of(options) == base
    assert build_key_of(replace(options, config=SiteConfig(title="Another"))) != base
    assert build_key_of(replace(options, trust=load_trust_set())) != base
    assert build_key_of(replace(options, search=True)) != base
    assert build_key_of(replace(options, max_bytes=options.max_bytes // 2)) != base
    # How the build goes about it never changes what it publishes, so the key leaves the policy out.
    policy = BuildPolicy(jobs=1, cache_dir=project / "elsewhere", use_cache=False, one_shot=True, link_twin=True)
    assert build_key_of(replace(options, policy=policy)) == base

    def keys() -> tuple[str, str]:
        with opened_context(options, tmp_path, BuildReport(), lambda: "pagefind 0") as ctx:
            return ctx.build_key, ctx.site_key
    before = keys()
    (project / "templates" / "home.html").write_text("{% extends 'base.html' %}")
    after = keys()
    assert after[0] == before[0] == base and after[1] != before[1]
    (project / "templates" / "assets").mkdir(exist_ok=True)
    (project / "templates" / "assets" / "extra.css").write_text("p {}")  # (an asset is a template file too)
    assert keys()[1] != after[1]


def test_each_stage_is_timed_once_and_the_stages_add_up_to_the_build(project):
    """``build --verbose`` and the benchmarks print each stage's time and CPU: each is the stage's own share,
    none below zero, and together they are the build's time, no more."""
    report = build(opts(project, project / "site", both_keys()))
    stages = ["start", "discover", "verify", "select", "plan_collection", "identify", "render_records",
              "render_collection", "write_report", "swap"]
    assert set(stages) <= set(report.timings) and set(report.cpu) == set(report.timings)
    assert all(seconds >= 0 for seconds in report.timings.values())
    assert all(main >= 0 and workers >= 0 for main, workers in report.cpu.values())
    assert 0.5 * report.seconds < sum(report.timings.values()) <= report.seconds
    # (the build's process runs two threads at most: the main one and the one reading bundles ahead)
    assert sum(main for main, _ in report.cpu.values()) <= 2 * report.seconds + 0.05


def test_the_about_page_is_read_without_a_byte_order_mark_and_is_none_where_no_file_is(tmp_path):
    """An editor's byte-order mark before "# About" would keep the heading from being one; an about page that is
    missing, or a folder, is none (the site then has no about page), not an error."""
    (tmp_path / "about.md").write_bytes(b"\xef\xbb\xbf# About\n")
    assert read_about(tmp_path / "about.md") == "# About\n"
    (tmp_path / "folder.md").mkdir()
    assert read_about(tmp_path / "folder.md") is None and read_about(tmp_path / "missing.md") is None


def test_an_about_page_over_the_size_bound_is_one_line_naming_it(tmp_path):
    """A pull request's about.md of a gigabyte would be read whole into the build's memory: one of exactly the
    bound is read, one byte more is refused by its size, as site.toml is."""
    about = tmp_path / "about.md"
    about.write_bytes(b"# About\n" + b"x" * (ABOUT_MAX_BYTES - 8))
    assert len(read_about(about)) == ABOUT_MAX_BYTES
    about.write_bytes(about.read_bytes() + b"x")
    with pytest.raises(SettingsError, match=f"^{re.escape(str(about))}: {ABOUT_MAX_BYTES + 1} bytes is over the "
                                            f"{ABOUT_MAX_BYTES}-byte limit$"):
        read_about(about)


def test_the_source_date_is_part_of_the_build_key(project, monkeypatch):
    options = opts(project, project / "site", both_keys())
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    first = build_key_of(options)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000001")
    assert build_key_of(options) != first


def test_digests_of_parts_are_unambiguous():
    assert digest_of("ab", "c") != digest_of("a", "bc") and digest_of("a", b"b") == digest_of("a", "b")
    assert digest_of("a\0", "b") != digest_of("a", "\0b")  # (a part may hold the NUL a separator would be)
    assert digest_of("a", None) != digest_of("a", "None", "")
    assert digest_of("\udcff") != digest_of("\udcfe")  # (a name in bytes that are not UTF-8, as Python holds it)


@pytest.mark.parametrize("first", ["", "k" * 64, "\u00e9\ud800"])
def test_digests_under_one_first_part_are_digest_of_the_two(first):
    digest = digests_under(first)
    for text in ["", "b", "record\tabc", "\u00e9" * 5000, "\udc80", first]:
        assert digest(text) == digest_of(first, text)
    assert digest("ab") != digests_under(first + "a")("b")


def test_the_context_holds_the_outputs_lock_until_it_is_left(project, tmp_path):
    options = opts(project, project / "site", both_keys())
    with opened_context(options, tmp_path, BuildReport(), lambda: "pagefind 0") as ctx:
        assert ctx.indexer is None and not ctx.serving and not ctx.store.keeps
        with pytest.raises(OutputError, match="another site-builder build is writing this output"):
            with opened_context(options, tmp_path, BuildReport(), lambda: "pagefind 0"):
                pass
    with opened_context(replace(options, search=True), tmp_path, BuildReport(), lambda: "pagefind 0") as ctx:
        assert ctx.indexer == "pagefind 0"  # (asked only when the build makes search indexes)


def test_an_output_that_holds_the_bundles_is_refused(project, tmp_path):
    build(opts(project, project / "site", both_keys()))
    (project / "bundles").rename(project / "site" / "bundles")
    options = replace(opts(project, project / "site", both_keys()), bundles=project / "site" / "bundles")
    with pytest.raises(OutputError, match="must not contain the bundles folder"):
        with opened_context(options, tmp_path, BuildReport(), lambda: "pagefind 0"):
            pass


@pytest.mark.parametrize("tree_name", ["site", ".site.prev"])
@pytest.mark.parametrize("where", ["templates", "static", "about"])
def test_a_folder_the_build_reads_inside_the_output_is_refused_and_kept(project, where, tree_name):
    """Every build replaces the output folder (and the tree beside it, which a later build updates and swaps in):
    templates, static files or an about page kept inside either would be lost with a next build.  Such a layout
    is refused before anything is written, and the files are kept."""
    build(opts(project, project / "site", both_keys()))
    inner = project / tree_name / "mine"
    inner.mkdir(parents=True)
    (inner / "about.md").write_text("# Mine")
    folder = {"templates": {"templates": inner}, "static": {"static_dir": inner},
              "about": {"about_file": inner / "about.md"}}[where]
    options = replace(opts(project, project / "site", both_keys()), **folder)
    with pytest.raises(OutputError, match="must not be inside the output folder, which every build replaces"):
        build(options)
    assert (inner / "about.md").read_text() == "# Mine"


def test_an_output_inside_the_static_folder_is_refused_even_before_the_folder_exists(project, monkeypatch):
    """The static folder's files are copied into the site: an output inside it would be copied into the next
    site, which would hold itself one level deeper each build (the first build makes the static folder).  The
    static folder is named relative to the working folder where site.toml is (the command line's default)."""
    monkeypatch.chdir(project)
    for static in (project / "static", Path("static")):
        options = opts(project, project / "static" / "site", both_keys(), static_dir=static)
        with pytest.raises(OutputError, match="must not be inside the static folder, whose files every build copies"):
            build(options)
        assert not (project / "static").exists()


def test_a_cache_folder_inside_the_output_is_refused_before_anything_is_written(project, monkeypatch):
    """Each build replaces the output folder (and the tree beside it), so a cache kept in either would be lost
    every time, silently making every build a full one.  The folder is refused however it is written: relative
    to the working folder (``--cache-dir site/cache``) or through a ``..``."""
    site = project / "site"
    build(opts(project, site, both_keys()))
    before = tree(site)
    monkeypatch.chdir(project)
    for folder in (site / "cache", site, project / ".site.prev" / "cache", Path("site") / "cache",
                   project / "elsewhere" / ".." / "site" / "cache"):
        with pytest.raises(OutputError, match="the cache folder must not be inside the output folder"):
            build(opts(project, site, both_keys(), cache_dir=folder))
        assert tree(site) == before and not (site / "cache").exists()
    build(opts(project, site, both_keys(), cache_dir=project / "elsewhere"))  # (beside it: used)
    assert (project / "elsewhere" / "cache.sqlite").is_file()


def test_the_lookups_ahead_are_made_in_a_child_only_where_the_policy_looks_ahead(project, monkeypatch):
    """Looking up the mirrored bundles in a child process is a speed-up, and ``BuildPolicy(look_ahead=False)``
    (the benchmarks' ``--no-look-ahead``) switches it off: the build then looks each tree up itself."""
    from site_builder import mirrors
    started_by = []
    real = mirrors.WorkAhead

    def noted(steps, start_method):
        started_by.append(start_method)
        return real(steps, start_method)
    monkeypatch.setattr(mirrors, "WorkAhead", noted)
    for look_ahead in (False, True):
        options = opts(project, project / f"site-{look_ahead}", both_keys(), look_ahead=look_ahead)
        build(options)  # (a first build: nothing to look up ahead)
        started_by.clear()
        build(options)
        assert started_by == ["fork" if look_ahead else None], look_ahead


def test_a_build_takes_over_lookups_started_ahead_only_for_its_output_and_record(project, tmp_path, monkeypatch):
    """serve starts the lookups of the mirrored bundles before the build (``ServeSession.lookups``); the build
    takes them over where they are of its output and tree beside it against the cache's record as it stands,
    else stops them and makes its own (the tree beside first: serve has no quick no-op check, ``MirrorLookups``)."""
    from site_builder.incremental import IncrementalStore
    from site_builder.mirrors import MirrorLookups, MirrorRecord
    from site_builder.options import ServeSession
    from site_builder.stages import context
    from site_builder.stages.context import mirror_lookups
    from site_builder.writing import OutputSlot

    options = opts(project, project / "site", both_keys())
    slot = OutputSlot(options.output)
    stored = b'{"%s": ["1:2:3 1:2:3", "%s"]}' % (b"A" * 26, b"0" * 64)  # (as the cache stores it)
    recorded = MirrorRecord(stored)

    def serving(ahead):
        return replace(options, session=ServeSession(IncrementalStore(), lookups=ahead))

    ahead = MirrorLookups(slot.output, slot.prev, recorded, None)
    stopped = []
    monkeypatch.setattr(ahead, "close", lambda: stopped.append(True))  # (lookups not taken over stop their child)
    twin_first = keyword_of_calls(monkeypatch, context, "MirrorLookups", "twin_first")
    assert mirror_lookups(serving(ahead), slot, recorded) is ahead
    assert mirror_lookups(serving(ahead), slot, MirrorRecord(bytes(stored))) is ahead  # (the same, read again)
    assert stopped == []
    for other in (MirrorRecord(stored.replace(b"1:2:3", b"1:2:4")), None):  # (another record, or none)
        made = mirror_lookups(serving(ahead), slot, other)
        assert made is not ahead and made.recorded == (other.entries if other else None)
    elsewhere = OutputSlot(tmp_path / "other")
    assert mirror_lookups(serving(ahead), elsewhere, recorded).output == elsewhere.output
    assert stopped == [True] * 3
    assert twin_first == [True, True, True]
    assert mirror_lookups(options, slot, recorded) is not ahead  # (a one-shot build has none)
    assert twin_first[-1] is False


@pytest.mark.parametrize("value", ["abc", "-5", " 5", "1.5", "99999999999999", "253402300800"])
def test_a_malformed_source_date_epoch_stops_the_build_with_one_line(project, monkeypatch, value):
    """SOURCE_DATE_EPOCH set to anything but a whole number of seconds (up to the year 9999) is an error saying
    so, before anything is written (it was a ValueError's traceback, or a year out of range)."""
    from site_builder.settings import SettingsError
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    with pytest.raises(SettingsError, match=r"^SOURCE_DATE_EPOCH=.* is not a whole number of seconds since "
                                            r"1970-01-01 \(up to the year 9999\); fix it or unset it$"):
        build(opts(project, project / "site", both_keys()))
    assert not (project / "site").exists()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "253402300799")
    assert source_date() == "9999-12-31T23:59:59Z"


def test_a_source_date_epoch_set_empty_is_as_if_unset(project, monkeypatch):
    """CI scripts pass the variable on whether or not it has a value (``SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-}``):
    empty, it names no date, and the build goes on as without it."""
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    unset = build_key_of(opts(project, project / "site", both_keys()))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "")
    assert source_date() is None and build_key_of(opts(project, project / "site", both_keys())) == unset
    report = build(opts(project, project / "site", both_keys()))
    assert report.count("published") == len(REAL_FILES) + 6 and not report.rejected


def test_the_default_cache_folder_is_beside_the_output_however_its_path_is_written(tmp_path, monkeypatch):
    """The cache lives beside the output, named after it: the same folder for every spelling of the output's
    path, never inside the output (which each build replaces), as ``--output .`` taken literally would put it."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.chdir(site)
    for spelling in (site, Path("."), Path("../site"), Path("../x/../site")):
        assert default_cache_dir(spelling) == tmp_path / ".site-builder-cache" / "site", spelling


def test_a_build_without_a_cache_makes_no_key_and_no_cache_folder(project, user_cache_home):
    """``--no-cache`` (a one-off build in CI, say) keeps nothing between builds: it makes no cache key in the
    user's cache home, no cache folder beside the output, and has no note to make about a cache."""
    report = build(opts(project, project / "site", both_keys(), use_cache=False))
    assert report.count("published") > 0 and (project / "site" / "index.html").is_file()
    assert list(user_cache_home.iterdir()) == []
    assert not (project / ".site-builder-cache").exists() and report.cache_note == ""


def _busy(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_the_stage_clock_adds_each_stages_cpu_of_this_process_and_of_its_children_over_its_laps():
    """``build --verbose`` and the benchmarks say where the CPU went, stage by stage: this process's own and its
    workers' (children waited for); a stage lapped more than once counts every stretch."""
    timings: dict[str, float] = {}
    cpu: dict[str, tuple[float, float]] = {}
    start = os.times()
    clock = StageClock(timings, cpu)
    _busy(0.1)
    clock.lap("twice")
    subprocess.run([sys.executable, "-c", "import time\nend = time.process_time() + 0.3\n"
                                          "while time.process_time() < end: pass"], check=True)
    clock.lap("child")
    _busy(0.1)
    clock.lap("twice")
    end = os.times()
    own, children = end.user + end.system - start.user - start.system, \
        end.children_user + end.children_system - start.children_user - start.children_system
    assert set(timings) == set(cpu) == {"twice", "child"}
    assert timings["twice"] >= 0.19  # (both stretches: each took 0.1 s of CPU, so at least as long)
    assert 0.15 <= cpu["twice"][0] <= own + 1e-9 and cpu["twice"][1] == 0  # (os.times: ticks of 10 ms)
    assert 0.25 <= cpu["child"][1] <= children + 1e-9 and 0 <= cpu["child"][0] < 0.1


def test_a_serve_build_says_once_a_save_a_command_line_build_did_not_finish_between_two_of_its_own(project,
                                                                                                    serve_store):
    """serve keeps the cache open between its builds; a command-line build of the same output in between whose
    detached save never ended leaves word of it in the cache folder (``announce_save``), which serve's next build
    says as a separate build would, once."""
    options = replace(opts(project, project / "site", both_keys()), session=ServeSession(serve_store))
    assert build(options).cache_note == ""
    assert leave_save_failure(project / ".site-builder-cache" / "site", user_cache_key(), SAVE_STOPPED)
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=4))
    assert build(options).cache_note == (f"the last build's cache was not saved ({SAVE_STOPPED}); this build "
                                         f"could not reuse what that one did")
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=5))
    assert build(options).cache_note == ""


def test_serve_goes_without_a_cache_another_program_holds_and_uses_it_again_once_it_is_let_go(project, serve_store):
    """serve keeps the cache open between its builds, but not one it could not open: a build while another program
    holds the database (a database browser, since before serve started) goes on without it and says so; the next
    build, once that program has let it go, opens it again and saves to it, as a separate build would, and says
    nothing."""
    options = opts(project, project / "site", both_keys())
    database = project / ".site-builder-cache" / "site" / "cache.sqlite"
    assert build(options).cache_note == ""
    options = replace(options, session=ServeSession(serve_store))
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=4))
    with exclusive_lock_held(database):
        report = build(options)
    assert report.cache_note == no_cache_note(f"{database}: database is locked")
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=5))
    report = build(options)
    assert report.cache_note == "" and serve_store.cache.db is not None and serve_store.cache.unusable is None
    assert serve_store.cache.file_sha("gen2.json", stat_signature(os.stat(project / "bundles" / "gen2.json")))


def test_a_build_leaves_none_of_its_caches_files_open(project):
    """A build run in a process that goes on (serve's, a program calling ``build()``) closes the cache it opened:
    each build would otherwise leave the database, its journal and its lock open, until the process ran out of
    descriptors."""
    options = opts(project, project / "site", both_keys())
    build(options)
    before = open_descriptors()
    for variant in (4, 5):
        (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=variant))
        assert build(options).cache_note == ""
    assert open_descriptors() == before
