"""Bounded output per input: a validly signed bundle built to blow the site up (thousands of authors, a huge
title and abstract, hundreds of categories) costs at most 4 times its size plus 100 KB, and junk files by the
hundred thousand do not make a verification.json too big to host."""

import json
import os

import pytest

from site_builder import report as report_module
from site_builder.build import BuildOptions, build
from site_builder.options import BuildPolicy

from conftest import REAL_FILES, record_id, resigned_real_bundles, tree
from linkcheck import broken_links
from signing import sign_bundle, to_bytes, with_paper


def site_bytes(root) -> int:
    """The bytes a host stores for the tree: each file once, however many names link to it."""
    seen, total = set(), 0
    for folder, _, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(folder, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


@pytest.fixture
def signed_set(tmp_path):
    return resigned_real_bundles(tmp_path)


def hostile_record(key) -> bytes:
    base = json.loads(REAL_FILES[0].read_bytes())
    b = with_paper(base, title="A title that goes on " * 1_000, abstract_excerpt="word " * 40_000,
                   authors_text=", ".join(f"Author Number{i}" for i in range(5_000)))
    b["canonical_record"]["source"]["id"] = "2004.99999"
    cats = sorted(f"cs.{a}{c}" for a in "ABCDEFGHIJKLMNOPQRST" for c in "ABCDEFGHIJKLMNO")  # 300 categories
    b["canonical_record"]["metadata"]["cross_cats_sorted"] = cats
    return to_bytes(sign_bundle(b, key))


@pytest.mark.slow  # (a second or more: left to the full suite)
def test_a_record_built_to_blow_up_the_site_costs_at_most_four_times_its_bundle(signed_set, tmp_path):
    key, trust, bundles = signed_set
    without = tmp_path / "without"
    build(BuildOptions(bundles=bundles, output=without, trust=trust, policy=BuildPolicy(use_cache=False)))
    raw = hostile_record(key)
    (bundles / "hostile.json").write_bytes(raw)
    with_it = tmp_path / "with"
    report = build(BuildOptions(bundles=bundles, output=with_it, trust=trust, policy=BuildPolicy(use_cache=False)))
    assert report.count("published") == len(REAL_FILES) + 1
    cost = site_bytes(with_it) - site_bytes(without)
    assert cost <= 4 * len(raw) + 100_000, (cost, len(raw))
    # Its categories past the listed ones get no pages, and nothing links to a page that is not there.
    pith_id = record_id(raw)
    listed = [c for c in (with_it / "category").iterdir() if c.name.startswith("cs.") and len(c.name) == 5
              and c.name[3:].isupper() and c.name not in {"cs.DC", "cs.LG", "cs.AI", "cs.CL", "cs.CV", "cs.PL"}]
    assert 0 < len(listed) <= 12
    page = (with_it / "pith" / pith_id / "index.html").read_text()
    assert page.count('name="citation_author"') == 100
    assert "Author Number4999" in page  # the page itself names every author
    row_page = (with_it / "papers" / "index.html").read_text()
    assert "Author Number9," in row_page and "Author Number10," not in row_page and "et al. (4990 more)" in row_page
    assert broken_links(with_it, "https://mirror.example.org", "/") == []


def test_past_a_thousand_others_the_report_is_paged(signed_set, tmp_path, monkeypatch):
    """(The limits are lowered to keep the test quick: 12 files inline, pages of 25.)"""
    monkeypatch.setattr(report_module, "INLINE_OTHERS", 12)
    monkeypatch.setattr(report_module, "PAGE_LINES", 25)
    key, trust, bundles = signed_set
    real = REAL_FILES[0].read_bytes()
    for n in range(60):  # tampered copies of real bytes, each rejected
        (bundles / f"junk{n:03d}.json").write_bytes(real.replace(b'"version":1', b'"version":%d' % (n + 2), 1))
    out = tmp_path / "site"
    build(BuildOptions(bundles=bundles, output=out, trust=trust, search=False))
    doc = json.loads((out / "verification.json").read_text())
    assert doc["counts"] == {"read": 64, "published": 4, "rejected": 60, "superseded": 0}
    inline = doc["files"]
    assert sum(f["status"] == "published" for f in inline) == 4 and len(inline) == 4 + 12
    assert doc["more_files"]["count"] == 48
    assert doc["more_files"]["pages"] == ["verification/files-0001.json", "verification/files-0002.json"]
    paged = []
    for n, rel in enumerate(doc["more_files"]["pages"], 1):
        page = json.loads((out / rel).read_text())
        assert page["build_id"] == doc["build_id"] and page["page"] == n and page["pages"] == 2
        paged += page["files"]
    assert len(paged) == 48
    assert sorted(f["path"] for f in inline + paged) == sorted(p.name for p in bundles.iterdir())
    html = (out / "verification" / "index.html").read_text()
    assert html.count('<tr class="rejected">') == 12
    assert 'href="/verification/files-0002.json"' in html
    # The manifest a later build reads is whole: every published record is in verification.json itself.
    again = build(BuildOptions(bundles=bundles, output=out, trust=trust, search=False))
    assert again.count("published") == 4
    # Pages the report no longer needs go with it, also from the tree beside that a build updates in place.
    for junk in sorted(bundles.glob("junk*.json"))[:40]:
        junk.unlink()
    build(BuildOptions(bundles=bundles, output=out, trust=trust, search=False))
    assert json.loads((out / "verification.json").read_text())["more_files"]["pages"] == [
        "verification/files-0001.json"]
    for junk in bundles.glob("junk*.json"):
        junk.unlink()
    build(BuildOptions(bundles=bundles, output=out, trust=trust, search=False))  # (the tree of two pages, updated)
    clean = tmp_path / "clean"
    build(BuildOptions(bundles=bundles, output=clean, trust=trust, search=False, policy=BuildPolicy(use_cache=False)))
    assert tree(out) == tree(clean) and not (out / "verification" / "files-0001.json").exists()
