"""The write loop (stages/write.py): every planned unit belongs to exactly one output kind, the reuse rule keeps
what it can and only the rest reaches the kind's writer, the kinds run in the order their files are read, and the
report is written by every build that writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import both_keys, opts, recording_writers, tree
from generate import make_bundle
from site_builder.build import build
from site_builder.stages import write


def test_every_planned_unit_belongs_to_one_kind_in_plan_order(project):
    """A unit no kind claims would never be written, nor reused; one claimed twice would be written twice."""
    held: list = []
    build(opts(project, project / "site", both_keys(), search=True, left_for_exit=held))
    site = held[2]
    claimed = [name for kind in write.OUTPUT_KINDS for name in kind.units(site)]
    assert claimed == list(site.units)
    assert {name.partition(":")[0] for name in claimed} >= {"record", "listing", "search", "report"}
    assert [kind.name for kind in write.OUTPUT_KINDS if not kind.reused] == ["report"]


def test_only_the_units_the_reuse_rule_cannot_keep_reach_their_writer(project, monkeypatch):
    """A first build hands every unit to its kind; after one record is re-signed only that record's unit (and
    the units showing it, and the report) are written, the rest keep the live files, and the site equals a clean
    build."""
    out = project / "site"
    options = opts(project, out, both_keys(), search=True, left_for_exit=[])
    calls = recording_writers(monkeypatch)
    build(options)
    site = options.policy.left_for_exit[2]
    assert [(kind, names) for kind, names, _ in calls] == [
        (kind.name, kind.units(site)) for kind in write.OUTPUT_KINDS]

    renewed = next(pid for pid, chosen in site.selection.published.items() if Path(chosen.source).name == "gen2.json")
    page = out / "pith" / renewed / "index.html"
    other_page = next(p for p in out.glob("pith/*/index.html") if p.parent.name != renewed)
    listing = out / "papers" / "index.html"
    before = {path: os.stat(path).st_ino for path in (page, other_page, listing)}
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=1))
    calls.clear()
    build(options)
    handed = {kind: names for kind, names, _ in calls}
    assert [kind for kind, _, _ in calls] == [kind.name for kind in write.OUTPUT_KINDS]
    assert handed["records"] == [f"record:{renewed}"]
    assert handed["report"] == ["report"]
    site = options.policy.left_for_exit[2]
    assert len(handed["collection"]) < len(write.collection_units(site))
    assert os.stat(other_page).st_ino == before[other_page]  # kept: the live file, linked
    assert os.stat(page).st_ino != before[page]
    clean = project / "clean"
    build(opts(project, clean, both_keys(), search=True, use_cache=False))
    assert tree(out) == tree(clean)


@pytest.mark.parametrize("fail_at", ["collection", "report"])
def test_a_writer_that_fails_leaves_the_site_and_the_renderer_as_they_were(project, monkeypatch, fail_at):
    """A writer failing after the records were written (a full disk) publishes nothing, and the renderer, which
    serve keeps for its next build, no longer reads words from the tree that was discarded."""
    out = project / "site"
    build(opts(project, out, both_keys()))
    live = tree(out)
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=1))
    calls = recording_writers(monkeypatch, fail_at)
    with pytest.raises(OSError, match="No space left"):
        build(opts(project, out, both_keys()))
    failed_with = calls[-1][2]
    assert calls[-1][0] == fail_at and calls[0][0] == "records"
    assert failed_with.renderer.read_words is None
    assert tree(out) == live
    assert not [p.name for p in project.iterdir() if ".staging-" in p.name]  # (the tree it began: deleted)
