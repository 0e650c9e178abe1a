"""The plan stage (stages/plan.py): every output unit keyed by what it shows, so that one record's change
re-keys that record and the pages that show it, and nothing else."""

from __future__ import annotations

import sqlite3

import pytest

from conftest import both_keys, cache_document, calls_of, opts, plant_document, returns_past_fifos, tree
from generate import make_bundle
from site_builder.build import build, default_cache_dir
from site_builder.incremental import IncrementalStore
from site_builder.options import ServeSession
from site_builder.report import BuildReport
from site_builder.settings import SiteConfig
from site_builder.stages.context import opened_context
from site_builder.stages.gather import gather
from site_builder.stages import plan as plan_stage
from site_builder.stages.plan import plan
from site_builder.stages.select import choose
from site_builder.stages.verify import verify


def planned(options, scratch, pagefind: str = "pagefind 0"):
    with opened_context(options, scratch, BuildReport(), lambda: pagefind) as ctx:
        inputs = gather(ctx)
        verified = verify(ctx, inputs)
        return plan(ctx, inputs, verified, choose(ctx, inputs, verified))


def test_the_same_inputs_give_the_same_plan(project, tmp_path):
    options = opts(project, project / "site", both_keys())
    first, second = planned(options, tmp_path), planned(options, tmp_path)
    assert first.build_id == second.build_id and first.units == second.units
    names = list(first.units)
    records = [n for n in names if n.startswith("record:")]
    assert names[:len(records)] == records == sorted(records)  # records first, by pith id, then the collection


def test_a_newer_bundle_re_keys_its_record_and_only_the_pages_that_show_it(project, tmp_path):
    options = opts(project, project / "site", both_keys())
    before = planned(options, tmp_path)
    (project / "bundles" / "gen1.json").write_bytes(make_bundle(1, variant=2))
    after = planned(options, tmp_path)
    changed = {name for name in before.units if before.units[name] != after.units.get(name)}
    record = next(n for n in changed if n.startswith("record:"))
    assert [n for n in changed if n.startswith("record:")] == [record]
    assert before.build_id != after.build_id
    assert 0 < len(changed - {record}) < len(before.units) // 2  # the listings and feeds showing it
    assert "groups" not in changed  # (the category and year counts are the same)


def test_a_template_edit_re_keys_every_unit(project, tmp_path):
    options = opts(project, project / "site", both_keys())
    before = planned(options, tmp_path)
    (project / "templates" / "paper.html").write_text("{% extends 'base.html' %}")
    after = planned(options, tmp_path)
    assert all(before.units[name] != after.units[name] for name in before.units)


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
    changed = {name for name in before.units if before.units[name] != after.units[name]}
    searches = {name for name in before.units if name == "search" or name.startswith("search:")}
    assert searches == {"search"} if shard_size > 1 or whole_site else len(searches) > 1  # (one index, or shards)
    assert changed == searches


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
    """A record added or removed: the next build takes the plan the last one recorded and plans again only the
    addresses near the records that came or went, and the site equals a clean build's."""
    out, clean = project / "site", project / "clean"
    for name, record in (("same-a.json", None), ("same-b.json", 77)):  # two records of one arXiv id and version:
        (project / "bundles" / name).write_bytes(make_bundle(40, record=record, version=1))  # a shared address
    build(opts(project, out, both_keys()))
    shared = planned(opts(project, out, both_keys()), tmp_path).addresses.shared
    assert any(len(targets) == 2 for _, _, targets in shared)  # (kept as recorded unless near a change)
    made = _count_address_plans(monkeypatch)
    replanned = calls_of(monkeypatch, plan_stage, "replan_redirects")
    for change in ("add", "remove"):
        if change == "add":
            (project / "bundles" / "gen6.json").write_bytes(make_bundle(6))  # another record
        else:
            (project / "bundles" / "gen3.json").unlink()
        build(opts(project, out, both_keys()))
        assert made == [] and len(replanned) == 1, change
        build(opts(project, clean, both_keys(), use_cache=False))  # (planned afresh: no cache)
        assert tree(out) == tree(clean), change
        made.clear()
        replanned.clear()


def test_a_record_renewed_at_a_shared_address_is_listed_as_it_is_now_in_serve(project):
    """serve takes the last short-address plan from its store while no record's ids or version changed; the
    page of an address two records share lists each as it is now (a newer bundle of one of them: its row)."""
    out, clean = project / "site", project / "clean"
    store = IncrementalStore()
    for name, record in (("same-a.json", None), ("same-b.json", 77)):  # two records of one arXiv id and version
        (project / "bundles" / name).write_bytes(make_bundle(40, record=record, version=1))
    build(opts(project, out, both_keys(), session=ServeSession(store)))
    (project / "bundles" / "same-b.json").write_bytes(make_bundle(40, record=77, version=1, variant=3))
    build(opts(project, out, both_keys(), session=ServeSession(store)))
    build(opts(project, clean, both_keys(), use_cache=False))
    assert tree(out) == tree(clean)


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
