"""Incremental builds give exactly the tree a clean full build gives, and a no-op writes nothing."""

import errno
import itertools
import json
import random
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from site_builder import pages as pages_module
from site_builder import report as report_module
from site_builder.build import build, prepare_spare_tree
from site_builder.cache_database import cache_context
from site_builder.cache_key import user_cache_key
from site_builder.incremental import IncrementalStore
from site_builder.options import ServeSession
from site_builder.parallel import PARALLEL_THRESHOLD
from site_builder.keys import load_trust_set
from site_builder.settings import SiteConfig

from conftest import (REAL_FILES, ROOT, both_keys, cache_document, document_tag, edit_every_template, edit_visibly,
                      opts, own_document_tag, plant_document, record_id, tree)
from generate import benchmark_key, make_bundle
from signing import sign_bundle, to_bytes


def test_the_store_reuses_a_value_only_for_equal_material():
    store = IncrementalStore()
    made = []

    def make(value):
        return lambda: made.append(value) or value
    assert store.reuse("a", (1, "x"), make("first")) == "first"
    assert store.reuse("a", (1, "x"), make("again")) == "first"  # equal material: kept
    assert store.reuse("a", [1, "x"], make("list")) == "list"  # ([1, "x"] != (1, "x")): made again
    assert store.recall("a", (1, "x")) is None  # and the new value replaced the old
    assert store.last("a") == ([1, "x"], "list")
    assert made == ["first", "list"]


def test_a_store_that_keeps_nothing_always_makes_the_value():
    store = IncrementalStore(keeps=False)
    assert store.keep("a", 1, "v") == "v"
    assert store.recall("a", 1) is None and store.last("a") is None and "a" not in store


def test_a_finished_build_forgets_what_it_did_not_use():
    store = IncrementalStore()
    store.keep("gone", 1, "old")
    store.keep("stays", 1, "value")
    store.keep("patched", 1, "plan")
    store.start_build()
    store.recall("stays", 2)  # asked for (even with other material: the build makes and keeps it again)
    store.last("patched")  # taken to be patched
    store.keep("new", 1, "n")
    store.forget_unused()
    assert "gone" not in store and "stays" in store and "patched" in store and "new" in store


def test_serve_builds_drop_the_entries_of_records_that_are_gone(project, serve_store):
    """What serve keeps between builds holds only what the site still has: a removed bundle's result, record
    key and report line must not stay pinned in memory."""
    trust = both_keys()
    store = serve_store
    report = build(opts(project, project / "site", trust, session=ServeSession(store)))
    victim = sorted((project / "bundles").iterdir())[0]
    pith_id = next(o.inspection.pith_id for o in report.outcomes if o.inspection.rel == victim.name)

    def held() -> tuple[bool, bool, bool]:
        return (victim.name in store.last("inspections")[1], victim.name in store.last("report-lines")[1],
                f"record:{pith_id}" in store.last("unit-keys")[1])

    assert held() == (True, True, True)
    victim.unlink()
    store.keep("unit-rows:category/gone/", ("a listing no longer in the site",), "rows")  # (one entry per unit)
    build(opts(project, project / "site", trust, session=ServeSession(store)))
    assert held() == (False, False, False)
    assert "unit-rows:category/gone/" not in store


def in_a_category_of_its_own(bundle: Path, n: int, category: str = "q-fin.CP") -> bytes:
    """Another paper (number *n*) of *bundle*'s year, in *category* alone, signed with the benchmark key."""
    b = json.loads(bundle.read_bytes())
    source, meta = b["canonical_record"]["source"], b["canonical_record"]["metadata"]
    source["id"] = f"{source['id'][:5]}9{n:04d}"
    meta.update(primary_cat=category, cross_cats_sorted=[])
    for event in b["events"]:
        if event["event_type"] == "graph_snapshot":
            event["payload"]["graph_snapshot"]["paper"].update(primary_cat=category, cross_cats=[])
            event["payload"]["graph_snapshot"]["source"] = dict(source)
    return to_bytes(sign_bundle(b, benchmark_key()))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["separate", "separate-foreign-cache", "separate-twin", "separate-search-shards",
                                  "serve", "serve-and-separate"])
def test_random_edits_match_clean_builds(project, mode, tmp_path_factory, monkeypatch, serve_store):
    """As separate builds (each starting from the cache the last one saved; from a cache written under another
    user's key every time, which must count for nothing; linking a twin whenever every file is written afresh,
    as the command line does; with the search index in shards of at most 3 records, 2 to 4 of them as records
    come and go), as ``serve`` builds: one IncrementalStore (open cache, compiled templates) across all the
    builds, and as both by turns (``build`` run in another terminal while ``serve`` runs: serve's next build
    must not take what it keeps for the output as the build before the other left it).  Listings hold 3 records
    a page, so that pages come and go with the records, and a page whose own records stay must still follow the
    count of them all (its navigation, its heading); feeds hold 2 entries, so that a newer bundle of a record
    they do not show still moves their updated stamp; and records come and go alone in a category of their own
    in a year others have (the search page's filter lists the categories)."""
    rng = random.Random(20261129)
    monkeypatch.setattr(pages_module, "FEED_ENTRIES", 2)
    trust = both_keys()
    inc = project / "inc"
    memory = serve_store if mode.startswith("serve") else None
    builds = itertools.count()
    if memory is not None:  # the report's outcomes and lines kept in pieces of two files: several of them here
        monkeypatch.setattr(report_module, "PIECE_LINES", 2)
    twin = mode == "separate-twin"
    search = {"search": True} if mode == "separate-search-shards" else {}
    about = project / "about.md"  # (none at first)
    # (two of the modes build a site with an origin, which has a sitemap and absolute links in its feeds)
    origin = "https://mirror.example/" if mode in ("separate-twin", "serve-and-separate") else "/"
    settings = {**search, "config": SiteConfig(page_size=3, search_shard_size=3, base_url=origin), "about_file": about}

    def another_user() -> None:
        if mode == "separate-foreign-cache":
            monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("other-user")))
    another_user()
    def session() -> ServeSession | None:  # (serve hands each build a session around its one store)
        if mode == "serve-and-separate" and next(builds) % 3 == 2:  # (every third build a separate one)
            return None
        return ServeSession(memory) if memory is not None else None
    build(opts(project, inc, trust, session=session(), link_twin=twin, **settings))
    layouts = set()  # (the search index's shards, as records come and go)
    assert not list(project.rglob("*.pickle"))
    next_id = 100
    actions = ["add", "remove", "change", "change", "replace", "duplicate", "template", "keys", "noop", "version",
               "remove-version", "about", "category"] * 2
    rng.shuffle(actions)  # every kind of edit, twice, in a random order
    for step, action in enumerate(actions):
        bundles = sorted((project / "bundles").iterdir())
        if action == "add":
            (project / "bundles" / f"gen{next_id}.json").write_bytes(make_bundle(next_id))
            next_id += 1
        elif action == "remove" and len(bundles) > 2:
            rng.choice(bundles).unlink()
        elif action == "change":
            victim = rng.choice([b for b in bundles if b.name.startswith("gen")] or bundles)
            n = int(victim.stem[3:]) if victim.stem.startswith("gen") else 0
            victim.write_bytes(make_bundle(n, variant=step + 1))  # a newer bundle of the same record
        elif action == "replace":
            victim = rng.choice([b for b in bundles if b.name.startswith("gen")] or bundles)
            victim.write_bytes(make_bundle(next_id, record=next_id + 1000))  # now holds another record
            next_id += 1
        elif action == "version":  # another version of a paper the mirror has: short addresses move to it
            victim = rng.choice([b for b in bundles if b.name.startswith("gen")] or bundles)
            n = int(victim.stem[3:]) if victim.stem.startswith("gen") else 0
            (project / "bundles" / f"ver{step}.json").write_bytes(make_bundle(n, version=10 + step))
        elif action == "remove-version":  # an older or the latest version goes: the other takes its addresses
            versions = [b for b in bundles if b.name.startswith("ver")]
            if versions:
                rng.choice(versions).unlink()
        elif action == "category":  # a record alone in its category, in the year of the one it is made from
            (project / "bundles" / f"cat{step}.json").write_bytes(
                in_a_category_of_its_own(rng.choice([b for b in bundles if b.name.startswith("gen")] or bundles), step))
        elif action == "duplicate":  # the same record twice: one copy is published, the other superseded
            shutil.copy(rng.choice(bundles), project / "bundles" / f"dup{step}.json")
        elif action == "template":  # any template, where its pages show the edit (each unit keys on its own)
            edit_visibly(project, rng.choice(sorted(p.name for p in (ROOT / "templates").glob("*") if p.is_file())),
                         f"edit {step}")
        elif action == "keys":
            trust = load_trust_set() if len(trust.keys) == 2 else both_keys()
        elif action == "about":  # written, edited or removed: its own unit, the sitemap and the home page
            if about.exists() and rng.random() < 0.5:
                about.unlink()
            else:
                about.write_text(f"# About\n\nAs of step {step}.\n")
        another_user()
        report = build(opts(project, inc, trust, session=session(), link_twin=twin, **settings))
        clean = project / f"clean{step}"
        build(opts(project, clean, trust, use_cache=False, **settings))
        assert tree(inc) == tree(clean), f"step {step}: {action}"
        if action == "category" and len(trust.keys) == 2:  # (published: the benchmark key is trusted)
            assert (inc / "category" / "q-fin.CP" / "index.html").is_file()
        if search:
            layouts.add(tuple(sorted(p.name for p in (inc / "pagefind").iterdir() if p.is_dir())))
        assert report.count("published") + report.count("rejected") + report.count("superseded") == \
            len(list((project / "bundles").iterdir()))
        shutil.rmtree(clean)
    if search:  # the number of shards changed as records came and went (fewer while the benchmark key is untrusted)
        assert len(layouts) >= 2
    if memory is not None:  # (the builds were serve's: each kept what the next reused, the report in pieces)
        assert all(name in memory for name in ("unit-keys", "report-lines", "report-outcomes:2",
                                               "report-lines:verification.json:2", "report-identity:2"))


def test_noop_rebuild_writes_nothing(project):
    trust = both_keys()
    out = project / "site"
    build(opts(project, out, trust))
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.rglob("*")}
    out_inode = out.stat().st_ino
    report = build(opts(project, out, trust))
    assert not report.changed and report.files_written == 0
    assert out.stat().st_ino == out_inode
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.rglob("*")} == before
    assert report.count("published") == 10


@pytest.mark.parametrize("removed", ["latest", "older"])
def test_removing_one_of_two_versions_of_a_paper_hands_its_addresses_to_the_other(project, removed):
    """Catches a record's unit key that ignores its short-address mask: ``arxiv/<id>/`` belongs to the latest
    version, so when it goes, the older version's unit must be rendered again with that address (an
    incremental build lacked ``arxiv/<id>/index.html``); when the older one goes, ``arxiv/<id>v<n>/`` goes."""
    trust = both_keys()
    out = project / "site"
    older, latest = project / "bundles" / "gen1.json", project / "bundles" / "gen1-v9.json"
    older.write_bytes(make_bundle(1, version=1))
    latest.write_bytes(make_bundle(1, version=9))
    build(opts(project, out, trust))
    arxiv_id = json.loads(latest.read_bytes())["canonical_record"]["source"]["id"]
    assert (out / "arxiv" / arxiv_id / "index.html").is_file() and (out / "arxiv" / f"{arxiv_id}v9").is_dir()
    (latest if removed == "latest" else older).unlink()
    build(opts(project, out, trust))
    clean = project / "clean"
    build(opts(project, clean, trust, use_cache=False))
    assert (clean / "arxiv" / arxiv_id / "index.html").is_file()
    assert tree(out) == tree(clean)


def test_versions_of_a_paper_link_each_other_and_stay_exact_as_they_come_and_go(project):
    """The other versions a page links are inputs of its unit key: adding or removing a version renders the
    pages of the others again (an incremental build kept a link to a removed version)."""
    trust = both_keys()
    out, clean = project / "site", project / "clean"
    v1, v2 = project / "bundles" / "gen2.json", project / "bundles" / "gen2-v2.json"
    v1.write_bytes(make_bundle(2, version=1))
    build(opts(project, out, trust))
    ids = {}
    v2.write_bytes(make_bundle(2, version=2))
    build(opts(project, out, trust))
    for version, path in ((1, v1), (2, v2)):
        ids[version] = record_id(path)
    page = lambda version: (out / "pith" / ids[version] / "index.html").read_text()  # noqa: E731
    assert f'href="/pith/{ids[2]}/"' in page(1) and f'href="/pith/{ids[1]}/"' in page(2)
    build(opts(project, clean, trust, use_cache=False))
    assert tree(out) == tree(clean)
    v2.unlink()
    build(opts(project, out, trust))
    assert "Other versions in this mirror" not in page(1)
    shutil.rmtree(clean)
    build(opts(project, clean, trust, use_cache=False))
    assert tree(out) == tree(clean)


@pytest.mark.parametrize("serving", [False, True])
def test_an_edit_of_the_about_page_rewrites_its_pages_not_the_records_and_equals_a_clean_build(project, serving,
                                                                                             serve_store):
    """The about page is shown by its own page, the home page's link and the sitemap: editing it renders those
    again and reuses every record's files (it rendered the whole site); adding and removing it is seen too (the
    quick no-op check included), each build equal to a clean one."""
    trust = both_keys()
    out, about = project / "site", project / "about.md"
    session = ServeSession(serve_store) if serving else None
    run = lambda target, **kw: build(opts(project, target, trust, about_file=about, **kw))  # noqa: E731

    def equals_clean() -> None:
        clean = project / "clean"
        shutil.rmtree(clean, ignore_errors=True)
        run(clean, use_cache=False)
        assert tree(out) == tree(clean)

    run(out, session=session)
    assert not (out / "about").exists() and "about/" not in (out / "index.html").read_text()
    record_page = next(out.glob("pith/*/index.html"))
    inode = record_page.stat().st_ino
    for text in ("# About\n\nA mirror.\n", "# About\n\nA mirror of ten records.\n"):
        about.write_text(text)
        report = run(out, session=session)
        assert report.changed and report.files_reused > 4 * report.files_written > 0
        assert text.split("\n")[-2] in (out / "about" / "index.html").read_text()
        assert 'href="/about/"' in (out / "index.html").read_text()
        assert record_page.stat().st_ino == inode  # (the record's page kept, not written again)
        equals_clean()
    about.unlink()
    assert run(out, session=session).changed and not (out / "about").exists()
    assert "about/" not in (out / "index.html").read_text()
    equals_clean()


def test_one_change_rebuilds_only_that_record(project):
    trust = both_keys()
    out = project / "site"
    build(opts(project, out, trust))
    (project / "bundles" / "gen3.json").write_bytes(make_bundle(3, variant=9))
    report = build(opts(project, out, trust))
    assert report.changed and report.files_reused > report.files_written > 0
    pith_id = record_id((project / "bundles" / "gen3.json"))
    new_bytes = (project / "bundles" / "gen3.json").read_bytes()
    mirrored = out / ".well-known" / "pith" / pith_id / "bundle.json"
    assert (out / "pith" / pith_id / "bundle.json").read_bytes() == new_bytes == mirrored.read_bytes()
    assert mirrored.samefile(out / "pith" / pith_id / "bundle.json")  # one file with two names, both new


def test_the_categories_page_follows_their_counts_where_the_years_and_the_categories_stay(project):
    """A record replaced by another of its year in another category the site has: no year's count changes and
    no category comes or goes, but two categories' counts do, which the categories page shows."""
    trust, bundles, out = both_keys(), project / "bundles", project / "site"
    for n, category in enumerate(["q-fin.CP", "q-fin.CP", "q-fin.TR", "q-fin.TR"]):
        (bundles / f"x{n}.json").write_bytes(in_a_category_of_its_own(bundles / "gen0.json", n, category))
    build(opts(project, out, trust))
    (bundles / "x1.json").write_bytes(in_a_category_of_its_own(bundles / "gen0.json", 9, "q-fin.TR"))
    build(opts(project, out, trust))
    build(opts(project, project / "clean", trust, use_cache=False))
    assert tree(out) == tree(project / "clean")
    shown = (out / "category" / "index.html").read_text()
    count = r'</a>(?: <span class="cat-name">[^<]*</span>)? <span class="n">'
    assert re.search(rf'>q-fin\.CP{count}1<', shown) and re.search(rf'>q-fin\.TR{count}3<', shown)


def test_the_sitemap_follows_a_record_replaced_by_another(project):
    """A site with an origin has a sitemap (a site at "/" has none, as in the random edits above): one record
    replaced by another keeps the number of pages and changes one of their addresses."""
    trust, out, clean = both_keys(), project / "site", project / "clean"
    config = SiteConfig(base_url="https://mirror.example/")
    build(opts(project, out, trust, config=config))
    gone = record_id((project / "bundles" / "gen2.json"))
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, record=1002))
    came = record_id((project / "bundles" / "gen2.json"))
    build(opts(project, out, trust, config=config))
    build(opts(project, clean, trust, config=config, use_cache=False))
    assert tree(out) == tree(clean)
    sitemap = (out / "sitemap.xml").read_text()
    assert f"https://mirror.example/pith/{came}/" in sitemap and gone not in sitemap


@pytest.mark.parametrize("damage", ["old_version", "truncated", "garbage", "record_unit", "unit_path"])
def test_damaged_or_foreign_cache_gives_correct_full_rebuild(project, damage):
    """A cache it cannot trust costs the build time, never correctness, and is made anew; and a path in it that
    leads out of the output (the build links and unlinks the files its cache names) touches nothing there."""
    victim = project / "victim.txt"
    victim.write_text("not the site's")
    trust = both_keys()
    out = project / "site"
    build(opts(project, out, trust))
    cache = project / ".site-builder-cache" / "site" / "cache.sqlite"
    assert cache.is_file()
    if damage == "old_version":
        db = sqlite3.connect(cache)
        db.execute("UPDATE meta SET value='0.0.1/0' WHERE key='version'")
        db.commit()
        db.close()
    elif damage == "record_unit":  # a record's files, kept as "@<pith id> <arXiv id> <version> <mask>", garbled
        db = sqlite3.connect(cache)
        (build_id, units), = db.execute("SELECT build_id, data FROM units").fetchall()
        assert "\trecord:" in "\t" + units and "\t@" in units
        db.execute("UPDATE units SET data=? WHERE build_id=?", (units.replace("\t@", "\t@../../x ", 1), build_id))
        db.commit()
        db.close()
    elif damage == "unit_path":  # a file of an unchanged unit (the style sheet, reused from the live site) led out
        db = sqlite3.connect(cache)
        (build_id, units), = db.execute("SELECT build_id, data FROM units").fetchall()
        assert "\tassets/style.css" in units
        db.execute("UPDATE units SET data=? WHERE build_id=?",
                   (units.replace("\tassets/style.css", "\t../victim.txt", 1), build_id))
        db.commit()
        db.close()
    elif damage == "truncated":
        data = cache.read_bytes()
        cache.write_bytes(data[: len(data) // 3])
    else:
        cache.write_bytes(b"this is not a database" * 100)
    for suffix in ("-wal", "-shm"):
        Path(str(cache) + suffix).unlink(missing_ok=True)
    (project / "bundles" / "gen1.json").write_bytes(make_bundle(1, variant=5))
    report = build(opts(project, out, trust))
    assert report.files_reused == 0  # nothing from a cache it cannot trust
    assert victim.read_text() == "not the site's" and victim.stat().st_nlink == 1
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=5))
    assert build(opts(project, out, trust)).files_reused > 0  # (the cache was made anew: it saves work again)
    clean = project / "clean"
    build(opts(project, clean, trust, use_cache=False))
    assert tree(out) == tree(clean)


@pytest.mark.slow
def test_a_cache_made_by_other_code_is_not_reused_even_at_the_same_version(bundles_dir, tmp_path):
    """The builder's code is part of what its caches are keyed on, not only its version string: a cache (and a
    snapshot) made by a checkout whose code differs, here by one comment, is thrown away, so that a fixed
    verifier never serves an old verifier's results."""
    import subprocess

    import site_builder
    package = Path(site_builder.__file__).parent
    builds = {}
    for name in ("same", "patched"):
        shutil.copytree(package, tmp_path / name / "site_builder", ignore=shutil.ignore_patterns("__pycache__"))
    verification = tmp_path / "patched" / "site_builder" / "verification.py"
    verification.write_text(verification.read_text() + "\n# a fix that changes nothing visible\n")

    def run(name):
        env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path / name)}
        result = subprocess.run([sys.executable, "-m", "site_builder", "build", "--bundles", bundles_dir, "--output",
                                 tmp_path / "site", "--no-search", "--templates", ROOT / "templates"],
                                capture_output=True, text=True, env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        builds[name] = result
        return result.stdout.strip().splitlines()[-1]

    def pages_written(line):
        return int(line.split(" pages written")[0].rpartition(" ")[2])

    everything = pages_written(run("same"))
    assert everything > 30
    assert pages_written(run("same")) == 0  # the same code: nothing to do
    assert pages_written(run("patched")) == everything  # other code: everything verified and built again
    assert pages_written(run("patched")) == 0
    assert "up to date" in builds["patched"].stderr


def test_cache_entry_tampered_to_claim_success_is_not_blindly_trusted(project):
    """A rejected bundle stays rejected when the cached result for its bytes is edited to say it passed (a real
    "passed" result, relabelled with the tampered file's digest, under the tag made for the results before), and
    damaged results, even under a tag of this user's, do not crash the build either."""
    from site_builder.inspection import inspect_bytes, inspection_to_json
    trust = both_keys()
    bad = json.loads(REAL_FILES[0].read_bytes())
    bad["links"]["resolver"] = "https://evil.example/"
    (project / "bundles" / "bad.json").write_bytes(json.dumps(bad, separators=(",", ":")).encode())
    out = project / "site"
    first = build(opts(project, out, trust))
    assert {o.inspection.rel for o in first.rejected} == {"bad.json"}
    cache = project / ".site-builder-cache" / "site" / "cache.sqlite"
    db = sqlite3.connect(cache)
    bad_sha = cache_document(db, "files")[0]["bad.json"][1]
    passed = inspection_to_json(inspect_bytes("bad.json", REAL_FILES[0].read_bytes(), trust))
    assert passed[3] is None  # (check: none failed)
    passed[1] = bad_sha
    part = f"inspections/{bad_sha[0]}"
    results, tag = cache_document(db, part)
    results["results"][bad_sha] = passed
    plant_document(db, part, results, tag)  # (the tag made for that part as it was)
    key = user_cache_key().bound_to(cache_context())  # this user's own: a damaged result under a good tag
    for name, in db.execute("SELECT name FROM documents WHERE name LIKE 'inspections/%' AND name != ?",
                            (part,)).fetchall():
        damaged = {"trust": results["trust"], "results": {sha: {"broken": True} for sha in
                                                          cache_document(db, name)[0]["results"]}}
        plant_document(db, name, damaged, document_tag(key, name, damaged))
    db.execute("DELETE FROM meta WHERE key LIKE 'quick%'")
    db.commit()
    db.close()
    again = build(opts(project, out, trust))
    assert {o.inspection.rel for o in again.rejected} == {"bad.json"}
    assert again.count("published") == first.count("published")
    clean = project / "clean"
    build(opts(project, clean, trust, use_cache=False))
    assert tree(out) == tree(clean)


def test_spare_tree_makes_the_first_change_an_in_place_update(project):
    """serve links a twin of a fresh output; the next change updates the twin, never the files it shares."""
    trust = both_keys()
    out = project / "site"
    build(opts(project, out, trust))
    prev = project / ".site.prev"
    assert not prev.exists()
    assert prepare_spare_tree(opts(project, out, trust))
    assert tree(prev) == tree(out)
    sample = next((out / "pith").rglob("index.html")).relative_to(out)
    assert (prev / sample).stat().st_ino == (out / sample).stat().st_ino  # hard links, not copies
    assert not prepare_spare_tree(opts(project, out, trust))  # already there: nothing to do

    live_before = tree(out)
    twin = prev.stat().st_ino
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=7))
    report = build(opts(project, out, trust))
    assert out.stat().st_ino == twin  # the twin was updated and swapped in, not a new tree
    assert report.files_written < 40 and report.files_reused > 50
    assert tree(prev) == live_before  # the old site (shared inodes) was not touched by the update
    clean = project / "clean"
    build(opts(project, clean, trust, use_cache=False))
    assert tree(out) == tree(clean)


def test_spare_tree_replaces_a_twin_an_edit_of_every_page_left_stale(project):
    """After an edit every page shows (the settings) every page is new: the old site, now the twin, holds nothing
    the next change could keep, so serve links a new twin from the live site, and the change after it updates
    that in place."""
    trust = both_keys()
    out = project / "site"
    build(opts(project, out, trust))
    edited = SiteConfig(title="Edited")
    build(opts(project, out, trust, config=edited))  # every page again: the twin is the site before the edit
    prev = project / ".site.prev"
    sample = max((out / "pith").glob("*/index.html"), key=lambda page: page.stat().st_size).relative_to(out)
    assert b"Edited" not in (prev / sample).read_bytes() and b"Edited" in (out / sample).read_bytes()
    assert prepare_spare_tree(opts(project, out, trust, config=edited))
    assert tree(prev) == tree(out) and (prev / sample).stat().st_ino == (out / sample).stat().st_ino
    assert not prepare_spare_tree(opts(project, out, trust, config=edited))  # now of use: nothing to do
    twin = prev.stat().st_ino
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=7))
    report = build(opts(project, out, trust, config=edited))
    assert out.stat().st_ino == twin and report.files_written < 40  # updated in place
    clean = project / "clean"
    build(opts(project, clean, trust, use_cache=False, config=edited))
    assert tree(out) == tree(clean)


def _is_twin_of(prev: Path, out: Path) -> bool:
    """*prev* holds the same files as *out*: the records' files as hard links to the live ones, the report as a
    copy (the next build reads the live verification.json's status, which a link would change)."""
    records = [p.relative_to(out) for p in [*(out / "pith").rglob("*"), *(out / ".well-known").rglob("*")]
               if p.is_file()]
    return prev.is_dir() and tree(prev) == tree(out) and len(records) >= 20 \
        and all((prev / rel).samefile(out / rel) for rel in records) \
        and not (prev / "verification.json").samefile(out / "verification.json")


@pytest.mark.slow
@pytest.mark.parametrize("search, jobs", [(False, 1), (True, 1), (False, 2)])
def test_a_build_written_afresh_links_the_twin_the_next_change_updates(project, search, jobs):
    """With ``link_twin`` (the command line's default) a build that writes every file afresh (the first one, a
    template edit) leaves a twin of the new site beside it (its search index too), linked before it returns; the
    next change updates that twin in place (a few files) instead of linking a whole new tree, and equals a clean
    build.  With workers (*jobs* 2), they link the records' files in the twin as they write them."""
    if jobs > 1:  # enough records for the build to start workers
        for i in range(6, 6 + PARALLEL_THRESHOLD):
            (project / "bundles" / f"gen{i}.json").write_bytes(make_bundle(i))
    trust = both_keys()
    out, prev = project / "site", project / ".site.prev"
    build(opts(project, out, trust, link_twin=True, search=search, jobs=jobs))
    assert (prev / "pagefind").is_dir() == search
    assert _is_twin_of(prev, out)
    assert not prepare_spare_tree(opts(project, out, trust, search=search))  # (what serve would link: there)
    for step, edit in enumerate([lambda: None, lambda: edit_every_template(project)]):
        edit()
        if step:  # an edit of every template: every page new, so a new twin (of the edited site)
            build(opts(project, out, trust, link_twin=True, search=search, jobs=jobs))
            assert _is_twin_of(prev, out)
        twin = prev.stat().st_ino
        (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=7 + step))
        report = build(opts(project, out, trust, link_twin=True, search=search, jobs=jobs))
        assert out.stat().st_ino == twin  # updated in place and swapped in
        assert report.files_written < 40 + 30 * search and report.files_reused > 50
        clean = project / f"clean{step}"
        build(opts(project, clean, trust, use_cache=False, search=search))
        assert tree(out) == tree(clean)


def test_no_twin_by_default_nor_from_a_build_that_reuses_files_or_has_no_cache(project):
    trust = both_keys()
    out, prev = project / "site", project / ".site.prev"
    build(opts(project, out, trust))  # (the library's default: no twin)
    assert not prev.exists()
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=7))
    build(opts(project, out, trust, link_twin=True))  # takes unchanged files from the live site: no twin of it
    assert not _is_twin_of(prev, out)
    build(opts(project, project / "fresh", trust, link_twin=True, use_cache=False))  # a cache-less build: none
    assert not (project / ".fresh.prev").exists()


def test_no_twin_where_the_file_system_is_short_of_inodes(project, free_inodes):
    """On tmpfs every hard link takes an inode, and a twin that used the last ones would make the site's own files
    fail: where the output's file system has too few inodes free for a site and its twin, no twin is linked (not
    by a build, not by serve), and the build is as exact as ever."""
    free_inodes["count"] = 10
    trust = both_keys()
    out, prev = project / "site", project / ".site.prev"
    report = build(opts(project, out, trust, link_twin=True))
    assert report.count("published") == 10 and not prev.exists()
    assert report.twin_note.startswith(f"no twin linked: {project} has 10 inodes free")
    assert b"inodes" not in (out / "verification.json").read_bytes()  # (the machine's state is not the site's)
    assert not prepare_spare_tree(opts(project, out, trust)) and not prev.exists()
    clean = project / "clean"
    build(opts(project, clean, trust, use_cache=False))
    assert tree(out) == tree(clean)
    free_inodes["count"] = 10**6  # room again: the same calls link it
    assert prepare_spare_tree(opts(project, out, trust)) and _is_twin_of(prev, out)


@pytest.mark.slow  # (a second or more: left to the full suite)
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_twin_that_cannot_be_linked_is_dropped_and_the_build_goes_on(project, monkeypatch, jobs):
    """A twin that runs out of inodes or links half-way (one unit's files could not be linked) is deleted before
    the build returns (its links share the site's files), and the site is exact.  With workers (*jobs* 2), which
    link each record's files in the twin as they write them, the failure happens in one of them (the patched
    method is forked with them)."""
    from site_builder import writing

    real_mirror = writing.StagingTree.mirror
    failed = project / "mirror-failed"  # (seen from worker processes too)

    def mirror(tree, rels, source, copy=False):  # (a unit's files a call)
        # Once: the links after it would succeed, and a twin missing a unit's files must not be left anyway.
        if tree.root.name.endswith("-spare") and sum(1 for p in tree.root.rglob("*") if p.is_file()) > 25 \
                and not failed.exists():
            failed.touch()
            raise OSError(errno.EMLINK, "Too many links")  # e.g. out of inodes, or links, half-way
        return real_mirror(tree, rels, source, copy)

    monkeypatch.setattr(writing.StagingTree, "mirror", mirror)
    if jobs > 1:  # enough records for the build to start workers
        for i in range(6, 6 + PARALLEL_THRESHOLD):
            (project / "bundles" / f"gen{i}.json").write_bytes(make_bundle(i))
    trust = both_keys()
    out = project / "site"
    report = build(opts(project, out, trust, link_twin=True, jobs=jobs))
    published = len(list((project / "bundles").glob("*.json")))
    assert report.count("published") == published and (out / "verification.json").is_file()
    assert failed.exists()
    assert not (project / ".site.prev").exists()
    # deleted before the build returned (its links share files), as is any tree it began:
    assert not [p.name for p in project.iterdir() if p.name.startswith(".site.") and p.name != ".site.lock"]
    clean = project / "clean"
    build(opts(project, clean, trust, use_cache=False))
    assert tree(out) == tree(clean)


@pytest.mark.slow  # (a second or more: left to the full suite)
def test_command_line_links_a_twin_unless_told_not_to(project):
    for flags, twin in [((), True), (("--no-twin",), False)]:
        out = project / f"site{len(flags)}"
        r = subprocess.run([sys.executable, "-m", "site_builder", "build", "--bundles", project / "bundles",
                            "--output", out, "--no-search", "--templates", project / "templates", *flags],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        prev = project / f".{out.name}.prev"
        assert (prev.exists() and _is_twin_of(prev, out)) == twin


def test_spare_tree_can_be_cancelled(project):
    trust = both_keys()
    out = project / "site"
    build(opts(project, out, trust))
    assert not prepare_spare_tree(opts(project, out, trust), cancelled=lambda: True)
    assert not (project / ".site.prev").exists()
    assert [p.name for p in project.iterdir() if ".staging-" in p.name] == []


def test_no_spare_tree_is_made_where_a_live_file_cannot_be_linked(project):
    """A twin missing a file its units name would have the next in-place update reuse a file that is not there:
    a live file gone (deleted on the host) leaves no twin at all, and no staging folder."""
    trust = both_keys()
    out = project / "site"
    build(opts(project, out, trust))
    next((out / "pith").rglob("badge.svg")).unlink()
    assert not prepare_spare_tree(opts(project, out, trust))
    assert not (project / ".site.prev").exists()
    assert [p.name for p in project.iterdir() if ".staging-" in p.name] == []


def test_a_cache_row_wrong_about_a_files_digest_is_caught_when_the_bundle_is_written(project):
    """Catches the render-time digest re-check removed: a cache row (here an authentic one, as a race between
    an edit and the stat could leave) pointing a tampered file at its genuine digest.  The record's files are
    rendered again (a template changed), and the bytes written must be the ones verified: the tampered file is
    read, found to differ from its digest, and nothing of it is published."""
    from site_builder.loading import stat_signature
    trust = both_keys()
    out = project / "site"
    victim = project / "bundles" / REAL_FILES[0].name
    build(opts(project, out, trust))
    genuine = victim.read_bytes()
    tampered = re.sub(rb'"title":"....', b'"title":"EVIL', genuine, count=1)  # (the same size: read as it is)
    assert tampered != genuine and len(tampered) == len(genuine)
    victim.write_bytes(tampered)
    db = sqlite3.connect(project / ".site-builder-cache" / "site" / "cache.sqlite")
    files, _ = cache_document(db, "files")
    files[victim.name][0] = stat_signature(victim.stat())  # (as if the tampered bytes were the ones hashed)
    plant_document(db, "files", files, own_document_tag("files", files))
    db.execute("DELETE FROM meta WHERE key LIKE 'quick%'")
    db.commit()
    db.close()
    (project / "templates" / "badge.svg").write_text((ROOT / "templates" / "badge.svg").read_text() + "<!-- -->")
    report = build(opts(project, out, trust))
    pid = record_id(genuine)
    assert pid not in {o.inspection.pith_id for o in report.outcomes if o.status == "published"}
    assert not any(b"EVIL" in data for data in tree(out).values())
    assert not (out / "pith" / pid).exists()
