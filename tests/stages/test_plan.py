"""The plan stage (stages/plan.py): every output unit keyed by what it shows, so that one record's change
re-keys that record and the pages that show it, and nothing else."""

from __future__ import annotations

import dataclasses
import json
import sqlite3

import pytest

from conftest import (ROOT, both_keys, planned, cache_document, calls_of, opts, own_document_tag, plant_document,
                      returns_past_fifos, tree)
from generate import make_bundle
from site_builder.build import build, default_cache_dir
from site_builder.options import ServeSession
from site_builder.report import BuildReport
from site_builder.settings import SiteConfig
from site_builder.stages import plan as plan_stage


def re_keyed(before, after) -> set[str]:
    """The units of plan *before* whose key or files differ in plan *after* (or that it has no longer)."""
    return {name for name in before.units if before.units[name] != after.units.get(name)}


def test_the_same_inputs_give_the_same_plan(project, tmp_path):
    options = opts(project, project / "site", both_keys())
    first, second = planned(options, tmp_path), planned(options, tmp_path)
    assert first.build_id == second.build_id and first.units == second.units
    names = list(first.units)
    records = [n for n in names if n.startswith("record:")]
    assert names[:len(records)] == records == sorted(records)  # records first, by pith id, then the collection


def test_a_warning_that_comes_with_no_unit_changed_names_a_new_build_and_the_report_shows_it(project):
    """The build id names the report's head too: a static file the site refuses to copy changes no unit (it is not
    copied), but verification.json must say why it is missing, so the site in the output is not this build's."""
    static, out = project / "static", project / "site"
    static.mkdir()
    (static / "notes.txt").write_text("kept")
    options = opts(project, out, both_keys(), static_dir=static)
    build(options)
    before = json.loads((out / "verification.json").read_text())
    (static / "verification.json").write_text("{}")  # (the site's own path: refused)
    assert build(options).changed
    after = json.loads((out / "verification.json").read_text())
    assert after["build_id"] != before["build_id"] and before["warnings"] == []
    assert [w for w in after["warnings"] if "static/verification.json" in w and "not copied" in w]


def test_a_newer_bundle_re_keys_its_record_and_only_the_pages_that_show_it(project, tmp_path):
    options = opts(project, project / "site", both_keys())
    before = planned(options, tmp_path)
    (project / "bundles" / "gen1.json").write_bytes(make_bundle(1, variant=2))
    after = planned(options, tmp_path)
    changed = re_keyed(before, after)
    record = next(n for n in changed if n.startswith("record:"))
    assert [n for n in changed if n.startswith("record:")] == [record]
    assert before.build_id != after.build_id
    assert 0 < len(changed - {record}) < len(before.units) // 2  # the listings and feeds showing it
    assert "groups" not in changed  # (the category and year counts are the same)


def kind(unit: str) -> str:
    return unit.split(":", 1)[0]


@pytest.mark.parametrize("template, kinds", [
    ("paper.html", {"record"}),
    ("_check_rows.html", {"record"}),  # (rendered by the check_rows helper paper.html calls)
    ("_pinned_keys_checked.html", {"record"}),  # (a sitewide() partial of paper.html)
    ("base.html", {"record", "listing", "groups", "shared"}),
    ("_site_footer.html", {"record", "listing", "groups", "shared"}),  # (a sitewide() partial of base.html)
    ("_paper_row.html", {"listing", "shared"}),  # (rendered by the paper_rows helper _paper_list.html calls)
    ("listing.html", {"listing"}),
    ("feed.xml", {"feed"}),
    ("sitemap.xml", {"sitemap"}),
    ("home.html", set()),  # (rendered on every build: the build id names every template)
])
def test_a_template_edit_re_keys_the_units_that_use_it_and_names_a_new_build(project, tmp_path, template, kinds):
    """An edited template renders again the pages that use it, and the site-wide pages (the static unit: about,
    search, 404, the assets), which may use any; its change of the build id rewrites the home page and report."""
    options = opts(project, project / "site", both_keys())
    before = planned(options, tmp_path)
    source = ROOT / "templates" / template
    (project / "templates" / template).write_text(source.read_text() + "{# edited #}\n")
    after = planned(options, tmp_path)
    changed = re_keyed(before, after)
    assert changed == {unit for unit in before.units if kind(unit) in kinds | {"static"}}
    assert {kind(unit) for unit in changed} >= kinds - {"shared"}  # (the project has no shared short address)
    assert after.build_id != before.build_id


def test_a_new_template_file_re_keys_only_the_units_that_may_use_any_template(project, tmp_path):
    options = opts(project, project / "site", both_keys())
    before = planned(options, tmp_path)
    (project / "templates" / "unused.html").write_text("nothing uses this")
    after = planned(options, tmp_path)
    assert re_keyed(before, after) == {"static"} and after.build_id != before.build_id


@pytest.mark.parametrize("shard_size, whole_site", [(2500, False), (1, False), (1, True)])
def test_another_pagefind_re_keys_every_search_index_and_nothing_else(project, tmp_path, shard_size, whole_site):
    """An index one Pagefind made cannot be read by another's search page: a new Pagefind makes every index anew,
    one index or shards alike, or one of the whole site (where a user's template marks another page for it), and
    leaves the pages as they are."""
    if whole_site:
        (project / "templates" / "about.html").write_text("{% extends 'base.html' %}{% block main %}"
                                                          "<main data-pagefind-body>About</main>{% endblock %}")
    options = opts(project, project / "site", both_keys(), search=True,
                   config=SiteConfig(search_shard_size=shard_size))
    before, after = planned(options, tmp_path, "pagefind 1.0.0"), planned(options, tmp_path, "pagefind 1.1.0")
    changed = re_keyed(before, after)
    searches = {name for name in before.units if plan_stage.is_search_unit(name)}
    assert searches == {"search"} if shard_size > 1 or whole_site else len(searches) > 1  # (one index, or shards)
    assert changed == searches



@pytest.mark.parametrize("whole_site", [False, True])
def test_a_search_index_is_re_keyed_by_what_its_pagefind_reads(project, tmp_path, whole_site):
    """Pagefind reads the record pages alone (the default templates), or every page where a user's template marks
    another for the index: a change of a static page then re-keys the index, and with record pages alone it does
    not (a record's change re-keys the shard that holds it, and no other)."""
    if whole_site:
        (project / "templates" / "about.html").write_text("{% extends 'base.html' %}{% block main %}"
                                                          "<main data-pagefind-body>About</main>{% endblock %}")
    static = project / "static"
    static.mkdir()
    options = opts(project, project / "site", both_keys(), search=True, static_dir=static,
                   config=SiteConfig(search_shard_size=1 if not whole_site else 2500))
    before = planned(options, tmp_path)
    (static / "howto.html").write_text("<main data-pagefind-body>How to cite a record</main>")
    after_static = planned(options, tmp_path)
    (project / "bundles" / "gen1.json").write_bytes(make_bundle(1, variant=2))
    after_record = planned(options, tmp_path)

    def changed(a, b):
        return {name for name in re_keyed(a, b) if plan_stage.is_search_unit(name)}
    if whole_site:
        assert changed(before, after_static) == changed(after_static, after_record) == {"search"}
    else:
        assert changed(before, after_static) == set()
        renewed = [pid for pid in after_record.selection.published
                   if after_record.units[f"record:{pid}"] != after_static.units[f"record:{pid}"]]
        holding = {s.unit for s in after_record.shards if renewed[0] in s.pith_ids}
        assert len(renewed) == 1 and len(after_record.shards) > 2
        assert changed(after_static, after_record) == holding and len(holding) == 1


@pytest.mark.parametrize("live", ["no index", "fewer shards", "same shards"])
def test_serve_publishes_with_the_live_search_index_only_where_it_has_the_same_shards(project, tmp_path, live,
                                                                                      serve_store):
    """serve puts a change on screen with the live search index while its next build makes the new one (the
    report says the search is behind); where the live site has no index, or one of other shards (records came
    and a second shard is needed), the indexes are made now: the search page names the shards that are there."""
    config = SiteConfig(search_shard_size=12)  # (the project's records fit in one shard)
    build(opts(project, project / "site", both_keys(), search=live != "no index", config=config))
    if live == "fewer shards":
        for n in range(20, 23):
            (project / "bundles" / f"more{n}.json").write_bytes(make_bundle(n))
    else:
        (project / "bundles" / "gen1.json").write_bytes(make_bundle(1, variant=2))
    report = BuildReport()
    session = ServeSession(serve_store, defer_search=True)
    site = planned(opts(project, project / "site", both_keys(), search=True, config=config, session=session),
                   tmp_path, report=report)
    now = planned(opts(project, project / "site", both_keys(), search=True, config=config), tmp_path)
    searches = {name: site.units[name][0] for name in site.units if plan_stage.is_search_unit(name)}
    assert searches.keys() == {s.unit for s in now.shards} == site.planned_search.keys()
    assert len(searches) == (2 if live == "fewer shards" else 1)
    assert report.search_behind == (live == "same shards")
    assert (searches == site.planned_search) == (live != "same shards")


def _count_address_plans(monkeypatch) -> list:
    """Each planning of the short addresses from scratch: the records it planned for, noted as it happens."""
    return calls_of(monkeypatch, plan_stage, "plan_redirects")


def test_the_short_addresses_come_from_the_cache_while_the_records_ids_and_versions_are_the_same(project,
                                                                                               monkeypatch):
    """A newer bundle of a record changes none of the ids and versions the short addresses are made of: the
    next build takes the plan the last one recorded, and the site equals a clean build's."""
    out, clean = project / "site", project / "clean"
    build(opts(project, out, both_keys()))
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=1))
    build(opts(project, clean, both_keys(), use_cache=False))
    made = _count_address_plans(monkeypatch)
    build(opts(project, out, both_keys()))
    assert made == []
    assert tree(out) == tree(clean)


def test_records_that_come_or_go_re_plan_the_short_addresses_around_them(project, monkeypatch, tmp_path):
    """A record added or removed (one of two sharing an address too): the next build takes the plan the last one
    recorded and plans again only the addresses near the records that came or went, and the site equals a clean
    build's."""
    out, clean = project / "site", project / "clean"
    for name, record in (("same-a.json", None), ("same-b.json", 77)):  # two records of one arXiv id and version:
        (project / "bundles" / name).write_bytes(make_bundle(40, record=record, version=1))  # a shared address
    build(opts(project, out, both_keys()))
    shared = planned(opts(project, out, both_keys()), tmp_path).addresses.shared
    assert any(len(targets) == 2 for _, _, targets in shared)  # (kept as recorded unless near a change)
    made = _count_address_plans(monkeypatch)
    replanned = calls_of(monkeypatch, plan_stage, "replan_redirects")
    for change in ("add", "remove", "remove one of two at an address"):
        if change == "add":
            (project / "bundles" / "gen6.json").write_bytes(make_bundle(6))  # another record
        elif change == "remove":
            (project / "bundles" / "gen3.json").unlink()
        else:  # (the recorded plan's shared page names a record that is gone)
            (project / "bundles" / "same-b.json").unlink()
        build(opts(project, out, both_keys()))
        assert made == [] and len(replanned) == 1, change
        build(opts(project, clean, both_keys(), use_cache=False))  # (planned afresh: no cache)
        assert tree(out) == tree(clean), change
        made.clear()
        replanned.clear()


def test_a_record_renewed_at_a_shared_address_is_listed_as_it_is_now_in_serve(project, serve_store):
    """serve takes the last short-address plan from its store while no record's ids or version changed; the
    page of an address two records share lists each as it is now (a newer bundle of one of them: its row)."""
    out, clean = project / "site", project / "clean"
    store = serve_store
    for name, record in (("same-a.json", None), ("same-b.json", 77)):  # two records of one arXiv id and version
        (project / "bundles" / name).write_bytes(make_bundle(40, record=record, version=1))
    build(opts(project, out, both_keys(), session=ServeSession(store)))
    (project / "bundles" / "same-b.json").write_bytes(make_bundle(40, record=77, version=1, variant=3))
    build(opts(project, out, both_keys(), session=ServeSession(store)))
    build(opts(project, clean, both_keys(), use_cache=False))
    assert tree(out) == tree(clean)


def test_a_record_that_comes_to_share_its_short_address_is_re_keyed(project, tmp_path, monkeypatch):
    """Among a million records, two are likely to share the first 8 characters of their pith ids.  When the
    second comes, ``pith/<8>/`` becomes a list page, and the first record, its bytes and its paper's versions
    unchanged, no longer has that address among its files: its unit is keyed by its own addresses too."""
    options = opts(project, project / "site", both_keys(), use_cache=False)
    before = planned(options, tmp_path)
    pid = next(iter(before.selection.published))
    assert before.addresses.per_record[pid] & 0b100  # (its pith/<8>/ is its own)
    plan_alone = plan_stage.plan_redirects

    def sharing_its_8_character_prefix(papers):
        plan = plan_alone(papers)
        return dataclasses.replace(plan, per_record={**plan.per_record, pid: plan.per_record[pid] & ~0b100})

    monkeypatch.setattr(plan_stage, "plan_redirects", sharing_its_8_character_prefix)
    after = planned(options, tmp_path)
    assert [n for n in re_keyed(before, after) if n.startswith("record:")] == [f"record:{pid}"]


def test_a_planted_address_plan_is_planned_again(project, monkeypatch):
    """A recorded plan without this user's tag (every record without its addresses) is no plan: the build
    plans the addresses afresh."""
    out = project / "site"
    build(opts(project, out, both_keys()))
    made = _count_address_plans(monkeypatch)
    db = sqlite3.connect(default_cache_dir(out) / "cache.sqlite")
    genuine, _ = cache_document(db, "addresses")
    plant_document(db, "addresses", {**genuine, "per_record": {}}, None)
    db.commit()
    db.close()
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=1))
    build(opts(project, out, both_keys()))
    assert [len(papers) for papers in made] == [10]  # (every record of the project)
    clean = project / "clean"
    build(opts(project, clean, both_keys(), use_cache=False))
    assert tree(out) == tree(clean)


# Plans of another shape, as a builder's bug could leave them under this user's own tag.
MISSHAPEN_PLANS = {
    "a shared folder outside the site": lambda d: d["shared"][0].__setitem__(0, "../outside/"),
    "a shared folder that is no plain path": lambda d: d["shared"][0].__setitem__(0, "a b/"),
    "a shared folder that is no string": lambda d: d["shared"][0].__setitem__(0, 7),
    "a label that is no string": lambda d: d["shared"][0].__setitem__(1, None),
    "a shared address's records that are no list": lambda d: d["shared"][0].__setitem__(2, "ABC"),
    "a shared address naming a record by a number": lambda d: d["shared"][0][2].append(3),
    "a record's mask above every address": lambda d: d["per_record"].update(dict.fromkeys(d["per_record"], 32)),
    "a record's mask below zero": lambda d: d["per_record"].update(dict.fromkeys(d["per_record"], -1)),
    "a record's mask that is no number": lambda d: d["per_record"].update(dict.fromkeys(d["per_record"], "31")),
    "the records' addresses that are no object": lambda d: d.update(per_record=[]),
    "a record's version that is no number": lambda d: d["records"][0].__setitem__(2, "1"),
    "a record's id that is no string": lambda d: d["records"][0].__setitem__(0, 1),
    "a record's arXiv id that is no string": lambda d: d["records"][0].__setitem__(1, None),
}


@pytest.mark.parametrize("shape", list(MISSHAPEN_PLANS))
def test_a_recorded_plan_of_another_shape_is_planned_again(project, monkeypatch, shape):
    """A recorded plan is worth something only in the shape a build records it, even under this user's own tag:
    a folder it names becomes a path the build writes, and a mask says which files a record has.  Any other
    shape is planned afresh; the site is a clean build's and nothing is written outside it."""
    out = project / "site"
    for name, record in (("same-a.json", None), ("same-b.json", 77)):  # (two records at one shared address)
        (project / "bundles" / name).write_bytes(make_bundle(40, record=record, version=1))
    build(opts(project, out, both_keys()))
    before = sorted(p.name for p in project.iterdir())
    made = _count_address_plans(monkeypatch)
    db = sqlite3.connect(default_cache_dir(out) / "cache.sqlite")
    doc, _ = cache_document(db, "addresses")
    assert doc["shared"] and doc["records"]
    MISSHAPEN_PLANS[shape](doc)
    plant_document(db, "addresses", doc, own_document_tag("addresses", doc))
    db.commit()
    db.close()
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=1))
    build(opts(project, out, both_keys()))
    assert [len(papers) for papers in made] == [12]  # (every record of the project)
    assert set(p.name for p in project.iterdir()) - set(before) <= {".site.prev"}  # (the site's own tree beside it)
    clean = project / "clean"
    build(opts(project, clean, both_keys(), use_cache=False))
    assert tree(out) == tree(clean)


def test_a_trees_build_id_is_read_from_its_own_file_only(tmp_path):
    """A tree's verification.json names the build id its units are looked up by; one replaced by a FIFO must not
    stop the build (opening one to read waits for a writer), and one that is a link names nothing."""
    import os

    from site_builder.stages.plan import read_build_id

    marker = '{"build_id": "' + "a" * 64 + '", "generator": "site-builder"}'
    own, linked, piped = (tmp_path / name for name in ("own", "linked", "piped"))
    for folder in (own, linked, piped):
        folder.mkdir()
    (own / "verification.json").write_text(marker)
    (linked / "verification.json").symlink_to(own / "verification.json")
    os.mkfifo(piped / "verification.json")
    assert read_build_id(own) == "a" * 64 and read_build_id(linked) is None
    found = returns_past_fifos(lambda: read_build_id(piped), [piped / "verification.json"], seconds=10)
    assert found == [None], "reading the build id waited on a FIFO"
