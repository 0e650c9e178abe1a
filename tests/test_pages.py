"""Planning the site's pages (pages.py): short addresses, listings and their incremental patches, which must give
exactly what planning from scratch gives, and what the pages are made of (other versions, charts, JSON-LD)."""

from __future__ import annotations

import random
from dataclasses import replace
from types import SimpleNamespace

import pytest

from site_builder import pages
from site_builder.records import PaperSummary, PaperText, detail, summarize
from site_builder.settings import SiteConfig

from signing import with_paper


def _summary(pith_id, arxiv_id, version):
    return PaperSummary(pith_id, f"pith:2020:{pith_id}", "2020", arxiv_id, version, PaperText("T", (), ""), "cs.LG", (),
                        "2020-01-01T00:00:00Z", "2026-01-01T00:00:00Z", 2, "")


def test_shared_prefix_becomes_a_list_and_arxiv_goes_to_latest_version():
    a, b = _summary("AAAAAAAABBBBBBBBCCCCCCCCDD", "2001.00001", 1), _summary("AAAAAAAAXBBBBBBBCCCCCCCCDD", "2001.00001", 2)
    plan = pages.plan_redirects([a, b])
    shared = {folder: [t.pith_id for t in targets] for folder, _, targets in plan.shared}
    assert shared == {"pith/AAAAAAAA/": [a.pith_id, b.pith_id]}
    assert ("arxiv/2001.00001/", "arXiv:2001.00001") in plan.addresses(b)
    assert ("arxiv/2001.00001v1/", "arXiv:2001.00001v1") in plan.addresses(a)
    assert ("pith/AAAAAAAABBBB/", "pith:AAAAAAAABBBB") in plan.addresses(a)


def _reference_plan(papers):
    """The short-address plan by its definition: every address, sorted; one target redirects, more list."""
    addresses = {}
    for p in papers:
        for n in (8, 12, 16):
            addresses.setdefault(f"pith/{p.pith_id[:n]}/", (f"pith:{p.pith_id[:n]}", []))[1].append(p)
        addresses.setdefault(f"arxiv/{p.arxiv_id}v{p.version}/", (f"arXiv:{p.arxiv_id}v{p.version}", []))[1].append(p)
    for arxiv_id in {p.arxiv_id for p in papers}:
        top = max(p.version for p in papers if p.arxiv_id == arxiv_id)
        addresses[f"arxiv/{arxiv_id}/"] = (f"arXiv:{arxiv_id}", [p for p in papers if p.arxiv_id == arxiv_id
                                                                and p.version == top])
    per_record, shared = {}, []
    for folder in sorted(addresses):
        label, targets = addresses[folder]
        if len(targets) == 1:
            per_record.setdefault(targets[0].pith_id, []).append((folder, label))
        else:
            shared.append((folder, label, sorted(t.pith_id for t in targets)))
    return {k: tuple(v) for k, v in per_record.items()}, shared


def test_short_address_plan_matches_its_definition_with_many_collisions():
    rng = random.Random(7)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
    stems = ["".join(rng.choice(alphabet) for _ in range(20)) for _ in range(40)]
    papers, seen = [], set()
    for _ in range(600):  # few stems and ids: prefixes, arXiv ids and versions collide often
        stem = rng.choice(stems)[:rng.choice([8, 12, 16, 20])]
        pith_id = (stem + "".join(rng.choice(alphabet) for _ in range(26)))[:26]
        if pith_id in seen:
            continue
        seen.add(pith_id)
        arxiv_id = rng.choice(["2001.00001", "2001.00002", "hep-lat/0305021", f"2101.{rng.randrange(10**5):05d}"])
        papers.append(_summary(pith_id, arxiv_id, rng.randrange(1, 4)))
    papers.sort(key=lambda p: p.pith_id)
    plan = pages.plan_redirects(papers)
    per_record, shared = _reference_plan(papers)
    assert {p.pith_id: plan.addresses(p) for p in papers if plan.addresses(p)} == per_record
    assert [(f, label, [t.pith_id for t in targets]) for f, label, targets in plan.shared] == shared
    assert shared and len(per_record) > 100  # both kinds occur


def _colliding_summaries(rng, count, stems=40, shared_arxiv_ids=("2001.00001", "2001.00002", "hep-lat/0305021")):
    """Summaries whose pith ids, arXiv ids and versions collide often (so short addresses are shared): their
    ids begin with one of *stems* prefixes, and three in four have one of *shared_arxiv_ids*."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
    prefixes = ["".join(rng.choice(alphabet) for _ in range(20)) for _ in range(stems)]
    papers = {}
    for _ in range(count):
        stem = rng.choice(prefixes)[:rng.choice([8, 12, 16, 20])]
        pith_id = (stem + "".join(rng.choice(alphabet) for _ in range(26)))[:26]
        own = f"2101.{rng.randrange(10**5):05d}"
        arxiv_id = rng.choice([*shared_arxiv_ids, own])
        papers[pith_id] = _summary(pith_id, arxiv_id, rng.randrange(1, 4))
    return list(papers.values())


# Dense: nearly every record is linked to every other by some address, so each step re-plans nearly all of
# them.  Sparse: 300 prefixes and arXiv ids of their own, so a step re-plans a few neighbourhoods and keeps the
# other shared addresses from the plan before, whose list pages must still show the records as they are now.
@pytest.mark.parametrize("collisions", [{}, {"stems": 300, "shared_arxiv_ids": ()}], ids=["dense", "sparse"])
def test_replanning_around_added_and_removed_records_equals_a_full_plan(collisions):
    """An incremental build re-plans only the addresses near the records that came or went; after every step of
    a random sequence of additions and removals the plan is the one planned from scratch."""
    rng = random.Random(11)
    pool = _colliding_summaries(rng, 900, **collisions)
    papers = sorted(pool[:500], key=lambda p: p.pith_id)
    plan = pages.plan_redirects(papers)
    waiting = pool[500:]
    for step in range(60):
        shown = list(papers)
        touched = set()
        for _ in range(rng.choice([1, 1, 2, 5])):
            if waiting and (rng.random() < 0.5 or len(shown) < 10):
                p = waiting.pop()
                shown.append(p)
            else:
                p = shown.pop(rng.randrange(len(shown)))
                waiting.append(p)
            touched.add((p.pith_id, p.arxiv_id, p.version))
        # The same records as new objects (a new bundle of each): list pages must show the current ones.
        shown = sorted((replace(p, text=PaperText(f"T{step}", (), "")) for p in shown), key=lambda p: p.pith_id)
        plan = pages.replan_redirects(plan, shown, touched)
        full = pages.plan_redirects(shown)
        assert plan.per_record == full.per_record, f"step {step}"
        assert [(f, label, [id(t) for t in targets]) for f, label, targets in plan.shared] == \
            [(f, label, [id(t) for t in targets]) for f, label, targets in full.shared], f"step {step}"
        papers = shown
    assert plan.shared and len(plan.per_record) > 100  # both kinds occurred


def test_patching_the_listings_for_added_removed_and_moved_records_equals_a_full_catalogue():
    """The listings (all, per category, per year) patched for a few records that came, went or changed date or
    categories are those sorted from scratch, holding the current objects."""
    rng = random.Random(12)
    cats = ["cs.LG", "cs.AI", "math.PR", "hep-th", "q-bio.NC"]

    def dated(p):  # rare categories and years come and go as records do
        rare = [f"rare.{rng.randrange(40)}"] if rng.random() < 0.2 else []
        year = rng.randrange(2007, 2026) if rng.random() < 0.95 else rng.randrange(1990, 2007)
        return replace(p, submitted_at=f"{year}-0{rng.randrange(1, 10)}-01T00:00:00Z", primary_cat=rng.choice(cats),
                       cross_cats=tuple(rng.sample(cats, rng.randrange(0, 3)) + rare))

    pool = [dated(p) for p in _colliding_summaries(rng, 700)]
    shown = {p.pith_id: p for p in pool[:400]}
    waiting = pool[400:]
    cat = pages.catalogue(sorted(shown.values(), key=lambda p: p.pith_id))
    for step in range(60):
        moved = set()
        for _ in range(rng.choice([1, 2, 5])):
            roll = rng.random()
            if roll < 0.4 and waiting:
                p = waiting.pop()
                shown[p.pith_id] = p
            elif roll < 0.8 and len(shown) > 1:
                p = shown.pop(rng.choice(sorted(shown)))
                waiting.append(p)
            else:  # the same record with another date or categories
                p = shown[rng.choice(sorted(shown))]
                shown[p.pith_id] = dated(p)
            moved.add(p.pith_id)
        for pid in rng.sample(sorted(shown), 3):  # newer bundles of records that stay in place
            shown[pid] = replace(shown[pid], text=PaperText(f"T{step}", (), ""))
        papers = sorted(shown.values(), key=lambda p: p.pith_id)
        cat = pages.recatalogue(cat, papers, moved)
        full = pages.catalogue(papers)
        for mine, theirs in zip([cat.everything, *cat.categories, *cat.years],
                                [full.everything, *full.categories, *full.years], strict=True):
            assert (mine.key, mine.title, mine.base) == (theirs.key, theirs.title, theirs.base), f"step {step}"
            assert [id(p) for p in mine.papers] == [id(p) for p in theirs.papers], f"step {step}: {mine.key}"
        assert [id(p) for p in cat.papers] == [id(p) for p in full.papers]


def test_each_version_of_a_paper_links_to_the_others_and_a_lone_version_to_none():
    v1, v2, v3 = (_summary(f"{c * 8}BBBBBBBBCCCCCCCCDD", "2001.00001", n) for n, c in ((1, "A"), (3, "C"), (2, "B")))
    w1, w2 = (_summary(f"{c * 8}BBBBBBBBCCCCCCCCDD", "2003.00003", n) for n, c in ((1, "E"), (2, "F")))
    alone = _summary("DDDDDDDDBBBBBBBBCCCCCCCCDD", "2002.00002", 1)
    assert pages.other_versions([v1, w2, v2, alone, v3, w1]) == {
        v1.pith_id: ((2, v3.pith_id), (3, v2.pith_id)),
        v3.pith_id: ((1, v1.pith_id), (3, v2.pith_id)),
        v2.pith_id: ((1, v1.pith_id), (2, v3.pith_id)),
        w1.pith_id: ((2, w2.pith_id),),
        w2.pith_id: ((1, w1.pith_id),),
    }


def test_bars_are_drawn_to_scale_with_the_largest_at_full_width():
    """The stats page's charts: a bar's length is its value over the largest one's, every bar at least a
    pixel wide, the bars one under another inside the picture; a chart of zeros (a site with nothing in it yet)
    draws hairlines, not an error."""
    chart = pages.bar_chart([("a", 40), ("b", 10), ("c", 0)], "papers", "paper")
    full = chart["bars"][0]["w"]
    assert full > 100 and [b["w"] for b in chart["bars"]] == [full, round(full / 4), 1]
    assert all(b["x"] + b["w"] <= chart["width"] for b in chart["bars"])
    bars = chart["bars"]  # one under the other, none overlapping the next, the last one inside the picture
    assert all(b["y"] + b["h"] <= below["y"] for b, below in zip(bars, bars[1:])) and bars[0]["y"] == 0
    assert bars[-1]["y"] + bars[-1]["h"] <= chart["height"]
    assert [b["w"] for b in pages.bar_chart([("a", 0), ("b", 0)], "papers", "paper")["bars"]] == [1, 1]


def test_the_search_engines_headline_is_the_title_cut_at_110_characters(real_bundle):
    """schema.org's ScholarlyArticle: search engines take a headline of at most 110 characters; ``name`` is the
    page's short title."""
    renderer = SimpleNamespace(config=SiteConfig(base_url="https://m.example/"))

    def article(title: str) -> dict:
        bundle = with_paper(real_bundle, title=title)
        return pages.scholarly_article(renderer, detail(bundle, summarize(bundle)))

    assert article("t" * 110)["headline"] == "t" * 110  # (at the bound: whole)
    cut = article("word " * 40)
    assert len(cut["headline"]) == 110 and ("word " * 40).startswith(cut["headline"])
    assert cut["name"] == summarize(with_paper(real_bundle, title="word " * 40)).short_title
