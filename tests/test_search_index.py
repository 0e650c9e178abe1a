"""The search index (search_index.py): which pages Pagefind reads, how a large site is split into shards (each
indexed alone, merged by the search page; chromium searches them in test_site.py), and how Pagefind is run."""

import fnmatch
import json
import os
import random
import shutil
import signal
import time
from pathlib import Path

import pytest

from site_builder import search_index
from site_builder.build import BuildOptions, build
from site_builder.keys import load_trust_set
from site_builder.rendering import template_dirs
from site_builder.search_index import (BASE32, MAX_SHARDS, RECORD_PAGES_GLOB, SearchIndexError, files_under,
                                       index_search, plan_shards, search_layout, shard_count, shard_glob, shard_of)
from site_builder.settings import SiteConfig

from conftest import REAL_FILES, search_page_counts, stand_in_pagefind

# A user's listing template that marks listing pages for the search index.
MARKED_LISTING = ('{% extends "base.html" %}{% block main %}<div data-pagefind-body>{{ paper_rows(papers) }}</div>'
                  '{% endblock %}')


# A user's search page written for one index (as search pages were before shards): it loads pagefind/ alone.
ONE_INDEX_SEARCH_PAGE = (
    '{% extends "base.html" %}'
    '{% block head %}<link rel="stylesheet" href="{{ url(\'pagefind/pagefind-ui.css\') }}">{% endblock %}'
    '{% block main %}<h1>Search</h1><div id="search"></div>{% endblock %}'
    '{% block scripts %}<script src="{{ url(\'pagefind/pagefind-ui.js\') }}"></script>'
    '<script>new PagefindUI({ element: "#search" });</script>{% endblock %}')


def test_pagefind_reads_only_record_pages_unless_a_users_template_marks_others(tmp_path):
    builtin = template_dirs(None)
    assert search_layout(builtin).glob == RECORD_PAGES_GLOB
    assert fnmatch.fnmatch("pith/" + "A" * 26 + "/index.html", RECORD_PAGES_GLOB)
    assert not any(fnmatch.fnmatch(f"pith/{'A' * n}/index.html", RECORD_PAGES_GLOB) for n in (8, 12, 16))
    user = tmp_path / "templates"
    user.mkdir()
    (user / "listing.html").write_text(MARKED_LISTING)
    assert search_layout(template_dirs(user)).glob is None  # listing pages are indexed too
    (user / "listing.html").unlink()
    (user / "paper.html").write_text("<p>{{ p.title }}</p>")  # nothing marked: Pagefind indexes every page whole
    assert search_layout(template_dirs(user)).glob is None
    (user / "paper.html").unlink()
    (user / "about.html").write_text("<p>no mark here</p>")
    assert search_layout(template_dirs(user)).glob == RECORD_PAGES_GLOB


@pytest.mark.slow  # (a second or more: left to the full suite)
def test_search_indexes_every_marked_page(bundles_dir, tmp_path):
    """Built-in templates: the record pages, read alone; a user's template that marks listing pages gets them
    indexed as well."""
    def indexed(out: Path) -> int:
        return json.loads((out / "pagefind" / "pagefind-entry.json").read_text())["languages"]["en"]["page_count"]

    plain = tmp_path / "plain"
    build(BuildOptions(bundles=bundles_dir, output=plain, trust=load_trust_set(), search=True))
    assert indexed(plain) == len(REAL_FILES)
    user = tmp_path / "templates"
    user.mkdir()
    (user / "listing.html").write_text(MARKED_LISTING)
    marked = tmp_path / "marked"
    build(BuildOptions(bundles=bundles_dir, output=marked, trust=load_trust_set(), search=True, templates=user))
    listings = [p for p in marked.rglob("index.html") if b"data-pagefind-body" in p.read_bytes()]
    assert len(listings) > len(REAL_FILES) and indexed(marked) == len(listings)
    # ... and one index of the whole site even where record pages alone would be split into shards
    sharded = tmp_path / "sharded"
    build(BuildOptions(bundles=bundles_dir, output=sharded, trust=load_trust_set(), search=True, templates=user,
                       config=SiteConfig(search_shard_size=1)))
    assert indexed(sharded) == len(listings) and search_page_counts(sharded) == {"pagefind": len(listings)}


def test_a_site_under_a_folder_named_in_bytes_that_are_not_utf8_is_indexed(bundles_dir, tmp_path, monkeypatch):
    """Pagefind takes UTF-8 arguments and environment only: a project folder named in other bytes (the site's path
    as its --site, the shell's PWD, any variable naming it) was "pagefind failed" and no site at all."""
    project = tmp_path / os.fsdecode(b"proj\xff")
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("PWD", str(project))
    monkeypatch.setenv("OLDPWD", str(project))
    monkeypatch.setenv("PROJECT_HOME", str(project))  # (any variable: Pagefind panics reading the environment)
    build(BuildOptions(bundles=bundles_dir, output=project / "site", trust=load_trust_set(), search=True))
    entry = json.loads((project / "site" / "pagefind" / "pagefind-entry.json").read_text())
    assert entry["languages"]["en"]["page_count"] == len(REAL_FILES)


def test_a_pagefind_module_in_the_folder_a_build_runs_in_is_never_run(bundles_dir, tmp_path, monkeypatch):
    """``python -m pagefind`` puts its working folder first on the import path: run in the project, a
    ``pagefind.py`` there (a pull request's file) was what ran, not Pagefind."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "ran"
    (tmp_path / "pagefind.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    build(BuildOptions(bundles=bundles_dir, output=tmp_path / "site", trust=load_trust_set(), search=True))
    assert not marker.exists() and (tmp_path / "site" / "pagefind" / "pagefind-entry.json").is_file()


@pytest.mark.slow
def test_index_search_reports_while_pagefind_runs_and_keeps_its_output(tmp_path, monkeypatch):
    """The progress display is refreshed from the build's own thread (a thread would make forking the cache saver
    unsafe): ``index_search`` calls back while Pagefind runs, and still hears what it said when it fails."""
    monkeypatch.setenv("PYTHONPATH", stand_in_pagefind(tmp_path / "fake", "import sys, time\n"
                                                       "sys.stderr.write('x' * 200000 + '\\n')\ntime.sleep(0.9)\n"
                                                       "sys.exit('Error: the last line')\n"))
    calls = []
    with pytest.raises(SearchIndexError, match=r"pagefind failed: Error: the last line; previous output"):
        index_search(tmp_path, waiting=calls.append)
    assert len(calls) >= 3 and set(calls) == {0}  # every 0.2 s of its 0.9 s; its 200 KB of output did not block it


def test_an_interrupted_search_index_leaves_no_pagefind_running(tmp_path, monkeypatch):
    """Ctrl-C (or any error) while Pagefind runs ends Pagefind too, as ``subprocess.run`` would."""
    monkeypatch.setenv("PYTHONPATH", stand_in_pagefind(tmp_path / "fake", f"import os, time\n"
                                                       f"open({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid()))\n"
                                                       f"time.sleep(60)\n"))

    def interrupt(finished):
        if (tmp_path / "pid").exists():
            raise KeyboardInterrupt

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        index_search(tmp_path, waiting=interrupt)
    assert time.monotonic() - started < 30
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(pid, 0)


# A stand-in Pagefind that notes when it ran (by the folder it writes), then sleeps or fails as its folder says.
# One that fails waits until a slow one beside it has noted its process (on a busy machine it could fail before
# the other had started, and the test could not tell that one killed).
TIMED_STAND_IN = """import os, sys, time
folder = sys.argv[sys.argv.index("--output-subdir") + 1].replace("/", "_")
log = os.environ["STAND_IN_LOG"]
open(os.path.join(log, folder + ".pid.part"), "w").write(str(os.getpid()))
os.replace(os.path.join(log, folder + ".pid.part"), os.path.join(log, folder + ".pid"))
start = time.monotonic()
if "fail" in folder:
    while not any(n.endswith("slow.pid") for n in os.listdir(log)) and time.monotonic() - start < 20:
        time.sleep(0.01)
    sys.exit("Error: " + folder + " cannot be made")
time.sleep(60 if "slow" in folder else 0.6)
open(os.path.join(log, folder + ".span"), "w").write(f"{start} {time.monotonic()}")
"""


@pytest.mark.slow
def test_shards_are_indexed_a_process_at_a_time_per_core(tmp_path, monkeypatch):
    """Two shards side by side on two cores took 11.8 s where one after the other took 17.9 s: ``index_search``
    keeps *processes* Pagefinds running, no more, and counts those finished."""
    monkeypatch.setenv("PYTHONPATH", stand_in_pagefind(tmp_path / "fake", TIMED_STAND_IN))
    monkeypatch.setenv("STAND_IN_LOG", str(tmp_path))

    def spans() -> list[tuple[float, float]]:
        return sorted(tuple(map(float, p.read_text().split())) for p in tmp_path.glob("*.span"))

    calls = []
    index_search(tmp_path, [(None, f"pagefind/{n}-of-5/") for n in range(1, 6)], processes=2, waiting=calls.append)
    side_by_side = spans()
    assert len(side_by_side) == 5
    most = max(sum(1 for s, e in side_by_side if s <= moment < e) for moment, _ in side_by_side)
    assert most == 2  # side by side, but never three
    assert calls == sorted(calls) and calls[-1] == 5 and 0 in calls
    for span in tmp_path.glob("*.span"):
        span.unlink()
    index_search(tmp_path, [(None, f"pagefind/{n}-of-2/") for n in (1, 2)], processes=1)  # (one core: one at a time)
    (_, first_end), (second_start, _) = spans()
    assert second_start >= first_end


def test_one_failed_shard_stops_the_others(tmp_path, monkeypatch):
    """A shard's Pagefind failing fails the build at once, naming its last line, and ends the ones beside it."""
    monkeypatch.setenv("PYTHONPATH", stand_in_pagefind(tmp_path / "fake", TIMED_STAND_IN))
    monkeypatch.setenv("STAND_IN_LOG", str(tmp_path))
    started = time.monotonic()
    with pytest.raises(SearchIndexError, match=r"pagefind failed: Error: pagefind_2-fail cannot be made; previous"):
        index_search(tmp_path, [(None, "pagefind/1-slow/"), (None, "pagefind/2-fail/"), (None, "pagefind/3/")],
                     processes=2, waiting=lambda finished: None)
    assert time.monotonic() - started < 30
    assert not (tmp_path / "pagefind_3.pid").exists()  # never started
    with pytest.raises(ProcessLookupError):  # the slow one beside it: killed and reaped
        os.kill(int((tmp_path / "pagefind_1-slow.pid").read_text()), 0)


def test_files_under_lists_what_rglob_lists(tmp_path):
    """The search index's files are listed without ``Path.rglob`` (which holds every path it yields): the same
    sorted relative paths, files only, symlinked files included as ``is_file`` has them."""
    index = tmp_path / "pagefind"
    for rel in ["pagefind-entry.json", "fragment/en_1.pf_fragment", "fragment/en_0.pf_fragment", "index/en_a.pf_index",
                "filter/x/deep.pf_filter"]:
        (index / rel).parent.mkdir(parents=True, exist_ok=True)
        (index / rel).write_bytes(b"x")
    (index / "empty").mkdir()
    (index / "link.json").symlink_to(index / "pagefind-entry.json")
    (index / "gone.json").symlink_to(index / "removed.json")  # (a link to nothing is no file)
    expected = sorted(str(p.relative_to(tmp_path)) for p in index.rglob("*") if p.is_file())
    assert files_under(tmp_path, "pagefind") == expected and "pagefind/link.json" in expected
    assert files_under(tmp_path, "missing") == []


def _random_ids(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return sorted({"".join(rng.choice(BASE32) for _ in range(26)) for _ in range(n)})


@pytest.mark.parametrize("count", [1, 2, 4, 8, 32, 64, 256,  # (MAX_SHARDS: a second, left to the full suite)
                                   pytest.param(MAX_SHARDS, marks=pytest.mark.slow)])
def test_each_shards_glob_matches_exactly_the_ids_it_holds(count):
    """Pagefind reads a shard's record pages by its glob, so the glob must match the ids ``shard_of`` puts in that
    shard and no other (every first and second character tried), and never a short address's page."""
    ids = [a + b + "A" * 24 for a in BASE32 for b in BASE32] + _random_ids(300, count)
    globs = [shard_glob(n, count) for n in range(count)]
    for pid in ids:
        page = f"pith/{pid}/index.html"
        assert [fnmatch.fnmatchcase(page, g) for g in globs].count(True) == 1
        assert fnmatch.fnmatchcase(page, globs[shard_of(pid, count)]), (pid, count)
        assert fnmatch.fnmatchcase(page, RECORD_PAGES_GLOB)
    for n in (8, 12, 16):
        assert not any(fnmatch.fnmatchcase(f"pith/{ids[-1][:n]}/index.html", g) for g in globs)
    assert sorted({shard_of(pid, count) for pid in ids}) == list(range(count))  # every shard holds ids


def test_shard_count_is_the_smallest_power_of_two_within_the_shard_size_and_the_limit():
    assert [shard_count(n, 10) for n in (0, 1, 10, 11, 20, 21, 40, 41, 10 * MAX_SHARDS, 10**9)] == \
        [1, 1, 1, 2, 2, 4, 4, 8, MAX_SHARDS, MAX_SHARDS]
    assert [shard_count(n, 10, 8) for n in (41, 80, 81, 10**9)] == [8, 8, 8, 8]
    assert [shard_count(10**9, 10, limit) for limit in (1, 2, 3, 7, 9, 5000)] == [1, 2, 2, 4, 8, MAX_SHARDS]


def test_plan_shards_splits_only_a_large_site_of_record_pages():
    ids = _random_ids(1000, 7)
    assert plan_shards([], RECORD_PAGES_GLOB, 10) == []
    (one,) = plan_shards(ids, RECORD_PAGES_GLOB, 1000)
    assert (one.unit, one.folder, one.glob, one.pith_ids) == ("search", "pagefind/", RECORD_PAGES_GLOB, tuple(ids))
    (whole,) = plan_shards(ids, None, 10)  # a user's template marks other pages: one index of every page
    assert (whole.unit, whole.folder, whole.glob) == ("search", "pagefind/", None)
    assert len(plan_shards(ids, RECORD_PAGES_GLOB, 100, max_shards=4)) == 4
    shards = plan_shards(ids, RECORD_PAGES_GLOB, 100)  # 16 shards of ~62
    assert [s.unit for s in shards] == [f"search:{n}" for n in range(16)]
    assert [s.folder for s in shards] == [f"pagefind/{n + 1}-of-16/" for n in range(16)]
    assert sorted(pid for s in shards for pid in s.pith_ids) == ids
    for s in shards:
        assert s.pith_ids and all(fnmatch.fnmatchcase(f"pith/{pid}/index.html", s.glob) for pid in s.pith_ids)
    few = plan_shards(["A" * 26, "M" * 26, "Z" * 26], RECORD_PAGES_GLOB, 1)  # 4 shards, one of them empty: it
    assert [s.folder for s in few] == ["pagefind/1-of-4/", "pagefind/2-of-4/", "pagefind/4-of-4/"]  # gets no
    # index (Pagefind refuses to make one)


def test_a_search_page_written_for_one_index_keeps_one(bundles_dir, tmp_path):
    """A user's ``search.html`` that does not name ``search_indexes`` loads ``pagefind/`` alone: the site keeps
    one index there however many records it has, so that the page still works; naming them gets shards."""
    user = tmp_path / "templates"
    user.mkdir()
    assert search_layout(template_dirs(None)).merges_shards
    (user / "search.html").write_text(ONE_INDEX_SEARCH_PAGE)
    assert not search_layout(template_dirs(user)).merges_shards
    ids = _random_ids(100, 3)
    (whole,) = plan_shards(ids, RECORD_PAGES_GLOB, 10, merges_shards=False)
    assert (whole.unit, whole.folder, whole.glob, whole.pith_ids) == ("search", "pagefind/", RECORD_PAGES_GLOB,
                                                                     tuple(ids))

    out = tmp_path / "site"
    options = BuildOptions(bundles=bundles_dir, output=out, trust=load_trust_set(), templates=user,
                           config=SiteConfig(search_shard_size=1))
    build(options)
    assert search_page_counts(out) == {"pagefind": len(REAL_FILES)}  # (the built-in page would have three shards)
    assert 'src="/pagefind/pagefind-ui.js"' in (out / "search/index.html").read_text()
    assert (out / "pagefind/pagefind-ui.js").is_file()
    # The user's page, made to load the shards, gets them (the search page's own template decides).
    (user / "search.html").write_text(ONE_INDEX_SEARCH_PAGE.replace("<h1>Search</h1>",
                                                                    "<h1>Search</h1>{{ search_indexes }}"))
    build(options)
    assert search_page_counts(out) == {"pagefind/1-of-4": 2, "pagefind/3-of-4": 1, "pagefind/4-of-4": 1}



@pytest.mark.slow  # (a second or more: left to the full suite)

def test_a_site_with_no_record_says_there_is_nothing_to_search_until_one_comes(bundles_dir, tmp_path):
    """Pagefind cannot index nothing (it fails), so a site without records has no index, and its search page says
    why instead of loading a missing one."""
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "site"
    build(BuildOptions(bundles=empty, output=out, trust=load_trust_set()))
    page = (out / "search/index.html").read_text()
    assert "No record is published here yet" in page and "pagefind-ui.js" not in page
    assert not (out / "pagefind").exists()
    shutil.copy(REAL_FILES[0], empty / REAL_FILES[0].name)
    build(BuildOptions(bundles=empty, output=out, trust=load_trust_set()))
    page = (out / "search/index.html").read_text()
    assert '["/pagefind/"]' in page and 'src="/pagefind/pagefind-ui.js"' in page
    assert search_page_counts(out) == {"pagefind": 1}


def test_a_killed_pagefind_is_named_by_its_signal_and_only_a_sigkill_suggests_memory(tmp_path):
    """The kernel's out-of-memory killer sends SIGKILL: only then does the error point at memory and the shard
    settings; another signal is named as it is, and an exit code says Pagefind's last line."""
    with open(tmp_path / "log", "w+b") as log:
        log.write(b"indexing...\nError: no pages\n")
        with pytest.raises(SearchIndexError, match=r"killed by SIGKILL \(out of memory\? .*search_shard_size"):
            search_index._check_exit(-signal.SIGKILL, log)
        with pytest.raises(SearchIndexError) as terminated:
            search_index._check_exit(-signal.SIGTERM, log)
        assert "killed by SIGTERM;" in str(terminated.value) and "memory" not in str(terminated.value)
        with pytest.raises(SearchIndexError, match=r"killed by signal 77; previous output left untouched$"):
            search_index._check_exit(-77, log)  # (a real-time signal Python has no name for)
        with pytest.raises(SearchIndexError, match=r"pagefind failed: Error: no pages; previous output left"):
            search_index._check_exit(1, log)
        search_index._check_exit(0, log)  # (no error)


def test_the_indexer_is_named_by_both_pagefind_packages_versions(monkeypatch):
    """What the search indexes are keyed on besides the pages: a new Pagefind (its package or its binary) makes
    them again, so that no shard is read by another version's search page."""
    import importlib.metadata
    installed = {dist: importlib.metadata.version(dist) for dist in ("pagefind", "pagefind-bin")}
    assert search_index.pagefind_version() == (f"pagefind {installed['pagefind']}, "
                                                f"pagefind-bin {installed['pagefind-bin']}")
    versions = {"pagefind": "1.1.0"}

    def version(dist: str) -> str:
        if dist not in versions:
            raise importlib.metadata.PackageNotFoundError(dist)
        return versions[dist]
    monkeypatch.setattr(importlib.metadata, "version", version)
    assert search_index.pagefind_version() == "pagefind 1.1.0, pagefind-bin unknown"
