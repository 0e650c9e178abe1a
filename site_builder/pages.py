"""Pages: what files the site consists of, as (path, bytes) pairs.

``paper_files`` makes one record's files; ``collection_files`` makes every
page that depends on the set of records (listings, feeds, sitemaps, redirects,
statistics).  Listing cost is linear: each paper appears once per category it
belongs to, once per year and once in the full list.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections import Counter
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Callable, Iterable, Iterator

from markupsafe import Markup

from site_builder.canonical import resolver_json
from site_builder.categories import category_name
from site_builder.incremental import IncrementalStore
from site_builder.keys import TrustSet
from site_builder.loading import StaticFile
from site_builder.records import PaperSummary, detail
from site_builder.rendering import SiteRenderer, pagination
from site_builder.report import ReportDocument
from site_builder.template_uses import EVERY_TEMPLATE
from site_builder.verification import CheckResult, Verdict, VerificationWarning
from site_builder.writing import check_relative_path

# What the site makes at its top (folders and files) or under .well-known: a static file may not take any of it.
# (tests/test_build.py holds every path a build writes to this list.)
SITE_OWNED = frozenset({".nojekyll", "404.html", "about", "arxiv", "assets", "category", "feed.xml", "index.html",
                        "pagefind", "papers", "pith", "pith-mirrors.json", "pith-signing-key.json", "robots.txt",
                        "search", "stats", "verification", "verification.json", "verify", "year"})
FEED_ENTRIES = 50
SITEMAP_LIMIT = 50_000
HOME_RECENT = 20


def made_by_the_site(name: str) -> bool:
    """Whether a build writes *name* at the top of a site, as ``SITE_OWNED`` says, or ``.well-known`` or one of
    the sitemaps; the static folder's files come on top of these."""
    return name in SITE_OWNED or name == ".well-known" or (name.startswith("sitemap") and name.endswith(".xml"))


Groups = dict[str, list[PaperSummary]]  # a key (category, year, address) -> the records under it


def paper_dir(pith_id: str) -> str:
    return f"pith/{pith_id}/"


def other_versions(published: Iterable[PaperSummary]) -> dict[str, tuple[tuple[int, str], ...]]:
    """For each record with other versions of its paper in the site: their (version, pith id), by version."""
    by_paper: dict[str, list[tuple[int, str]]] = {}
    for p in published:
        by_paper.setdefault(p.arxiv_id, []).append((p.version, p.pith_id))
    found = {}
    for versions in by_paper.values():
        if len(versions) > 1:
            versions.sort()
            for _, pid in versions:
                found[pid] = tuple(v for v in versions if v[1] != pid)
    return found


# The templates a record's files are rendered from (``template_uses``: those they use follow).
RECORD_TEMPLATES = ("paper.html", "badge.svg", "redirect.html")


def paper_files(renderer: SiteRenderer, raw: bytes, bundle: dict, summary: PaperSummary,
                checks: tuple[CheckResult, ...], warnings: tuple[VerificationWarning, ...],
                mask: int = 0, versions: tuple[tuple[int, str], ...] = ()) -> Iterator[tuple[str, bytes]]:
    """One record's files (``record_files``): its page, mirrored JSON, badge, and the short addresses in *mask*
    (see ``own_addresses``), which lead only to it.  *versions*: the other versions of the paper in the site."""
    info = detail(bundle, summary, renderer.config.resolver_url)
    page, bundle_path, state, well_known, badge, *redirects = record_files(summary.pith_id, summary.arxiv_id,
                                                                            summary.version, mask)
    yield page, renderer.render(
        "paper.html", paper=info, p=summary, checks=checks, warnings=warnings, other_versions=versions,
        jsonld=scholarly_article(renderer, info),
        state_recomputed=Verdict(checks, warnings).state_recomputed)
    yield bundle_path, raw
    yield state, resolver_json(bundle["state"])
    yield well_known, raw
    yield badge, renderer.render("badge.svg", p=summary)
    for path, (_, label) in zip(redirects, own_addresses(summary, mask), strict=True):
        yield path, renderer.render("redirect.html", label=label, target=summary)


def scholarly_article(renderer: SiteRenderer, info) -> dict:
    """schema.org ScholarlyArticle for search engines."""
    p = info.summary
    return {
        "@context": "https://schema.org",
        "@type": "ScholarlyArticle",
        "headline": p.display_title[:110],
        "name": p.short_title,
        "author": [{"@type": "Person", "name": a} for a in p.cited_authors],
        "datePublished": p.submitted_date,
        "abstract": p.short_abstract,
        "identifier": [p.pith_number, f"arXiv:{p.arxiv_version_id}", f"doi:{info.doi}"],
        "sameAs": [f"https://arxiv.org/abs/{p.arxiv_version_id}", f"https://doi.org/{info.doi}", info.resolver_url],
        "url": renderer.config.absolute_url(f"pith/{p.pith_id}/"),
        "license": p.license,
        "about": list(p.listed_categories),
        "isAccessibleForFree": True,
    }


def newest_first(papers: list[PaperSummary]) -> list[PaperSummary]:
    return sorted(papers, key=lambda p: (p.submitted_at, p.pith_id), reverse=True)


@dataclass(frozen=True)
class Listing:
    key: str
    title: str
    base: str  # site-relative folder of page 1
    papers: list[PaperSummary]
    name: str = ""  # a category's name ("Machine Learning" for cs.LG), where arXiv's table knows it

    @cached_property
    def updated(self) -> str:
        """The newest ``built_at`` shown (the feed's updated stamp)."""
        return max((p.built_at for p in self.papers), default="1970-01-01T00:00:00Z")


def listings(papers: list[PaperSummary]) -> tuple[Listing, list[Listing], list[Listing]]:
    """The full list, one listing per category and one per year; each newest first."""
    by_cat, by_year = groups(papers)  # papers are newest first already, so every group stays sorted
    everything = Listing("all", "All papers", "papers/", papers)
    cats = [_category(c, by_cat[c]) for c in sorted(by_cat)]
    years = [_year(y, by_year[y]) for y in sorted(by_year, reverse=True)]
    return everything, cats, years


def groups(papers: Iterable[PaperSummary]) -> tuple[Groups, Groups]:
    """*papers* by category (each under every category it is in) and by submission year, in the order given."""
    by_cat: Groups = {}
    by_year: Groups = {}
    for p in papers:
        for cat in p.listed_categories:
            by_cat.setdefault(cat, []).append(p)
        by_year.setdefault(p.submitted_at[:4], []).append(p)
    return by_cat, by_year


def _category(cat: str, papers: list[PaperSummary]) -> Listing:
    return Listing(cat, f"Category {cat}", f"category/{cat}/", papers, category_name(cat))


def _year(year: str, papers: list[PaperSummary]) -> Listing:
    return Listing(year, f"Submitted in {year}", f"year/{year}/", papers)


@dataclass(frozen=True)
class Catalogue:
    """The published records newest first and the listings made from them: computed once per build, shared by
    the collection pages and the report pages."""

    papers: list[PaperSummary]
    everything: Listing
    categories: list[Listing]
    years: list[Listing]

    @cached_property
    def record_paths(self) -> list[str]:
        """Every record's page, in pith-id order (as the sitemap lists them)."""
        return [f"pith/{pid}/" for pid in sorted(p.pith_id for p in self.papers)]


def catalogue(papers: list[PaperSummary]) -> Catalogue:
    newest = newest_first(papers)
    return Catalogue(newest, *listings(newest))


def _insert_newest_first(papers: list[PaperSummary], p: PaperSummary) -> None:
    """Insert *p* into *papers*, kept in ``newest_first`` order, by bisection."""
    key, lo, hi = (p.submitted_at, p.pith_id), 0, len(papers)
    while lo < hi:
        mid = (lo + hi) // 2
        q = papers[mid]
        if (q.submitted_at, q.pith_id) > key:
            lo = mid + 1
        else:
            hi = mid
    papers.insert(lo, p)


def recatalogue(old: Catalogue, papers: list[PaperSummary], moved: set[str]) -> Catalogue:
    """``catalogue(papers)`` for a catalogue *old* made before the records *moved* (pith ids) came, went or
    changed date or categories: the others keep their places (as the objects in *papers*, which may be newer
    bundles of them) and the moved ones are inserted by bisection instead of sorting everything again.  The
    result is the same (tests/test_site.py compares the two)."""
    current = {p.pith_id: p for p in papers}
    arriving = [current[pid] for pid in sorted(moved) if pid in current]

    def patched(listing: Listing, incoming: list[PaperSummary]) -> Listing | None:
        kept = [current[q.pith_id] for q in listing.papers if q.pith_id not in moved]
        for p in incoming:
            _insert_newest_first(kept, p)
        return replace(listing, papers=kept) if kept else None

    everything = patched(old.everything, arriving) or Listing("all", "All papers", "papers/", [])
    by_cat, by_year = groups(arriving)
    cats = {c.key: c for c in old.categories}
    cats.update((c, _category(c, [])) for c in by_cat if c not in cats)
    years = {y.key: y for y in old.years}
    years.update((y, _year(y, [])) for y in by_year if y not in years)
    categories = [patched(cats[c], by_cat.get(c, [])) for c in sorted(cats)]
    in_years = [patched(years[y], by_year.get(y, [])) for y in sorted(years, reverse=True)]
    return Catalogue(everything.papers, everything, [c for c in categories if c is not None],
                     [y for y in in_years if y is not None])


def own_addresses(p: PaperSummary, mask: int) -> tuple[tuple[str, str], ...]:
    """The (folder, label) of each of *p*'s short addresses whose bit is set in *mask*, in folder order:
    ``arxiv/<id>/`` (bit 0) < ``arxiv/<id>v<n>/`` (1) < ``pith/<8>/`` (2) < ``pith/<12>/`` (3) < ``pith/<16>/`` (4)."""
    return _addresses(p.pith_id, p.arxiv_id, p.version, mask)


def _addresses(pid: str, arxiv_id: str, version: int, mask: int) -> tuple[tuple[str, str], ...]:
    versioned = f"{arxiv_id}v{version}"
    every = ((f"arxiv/{arxiv_id}/", f"arXiv:{arxiv_id}"), (f"arxiv/{versioned}/", f"arXiv:{versioned}"),
             *((f"pith/{pid[:n]}/", f"pith:{pid[:n]}") for n in (8, 12, 16)))
    return tuple(address for bit, address in enumerate(every) if mask >> bit & 1)


def record_file_count(mask: int) -> int:
    """How many files ``record_files`` names for a record with the short addresses in *mask*."""
    return 5 + mask.bit_count()


def record_files(pith_id: str, arxiv_id: str, version: int, mask: int) -> list[str]:
    """The files of a record (``paper_files`` writes them, in this order): its page, bundle, state, the bundle's
    second path, badge, and the short addresses in *mask*.  A function of four values, so that the build can
    remember a record's files as those (``unit_files.record_unit_files``) instead of as ten paths."""
    base = paper_dir(pith_id)
    return [base + "index.html", base + "bundle.json", base + "state.json", f".well-known/pith/{pith_id}/bundle.json",
            base + "badge.svg", *(folder + "index.html" for folder, _ in _addresses(pith_id, arxiv_id, version, mask))]


ALL_ADDRESSES = 0b11111


@dataclass
class RedirectPlan:
    """Short addresses: those with one target belong to that record's files, the rest are list pages.

    A record's own addresses are kept as a bit mask (``own_addresses``): 10,000 records' addresses as strings
    were 170,000 objects, and the mask is also what a record's unit key and its cached file list are made of."""

    per_record: dict[str, int]  # pith id -> bit mask of the addresses naming it alone (0: absent)
    shared: list[tuple[str, str, list[PaperSummary]]]  # (folder, label, targets), in folder order

    def addresses(self, p: PaperSummary) -> tuple[tuple[str, str], ...]:
        """*p*'s own short addresses as (folder, label), in folder order."""
        return own_addresses(p, self.per_record.get(p.pith_id, 0))


def _address_groups(papers: Iterable[PaperSummary]) -> tuple[Groups, Groups]:
    """Every short address of *papers* with the records it names, and per arXiv id its latest version's records."""
    targets: dict[str, list[PaperSummary]] = {}
    latest: dict[str, list[PaperSummary]] = {}
    for p in papers:
        pid = p.pith_id
        for folder in (f"pith/{pid[:8]}/", f"pith/{pid[:12]}/", f"pith/{pid[:16]}/",
                       f"arxiv/{p.arxiv_id}v{p.version}/"):
            group = targets.get(folder)
            if group is None:
                targets[folder] = [p]
            else:
                group.append(p)
        group = latest.get(p.arxiv_id)
        if group is None or p.version > group[0].version:
            latest[p.arxiv_id] = [p]
        elif p.version == group[0].version:
            group.append(p)
    for arxiv_id, group in latest.items():
        targets[f"arxiv/{arxiv_id}/"] = group
    return targets, latest


def _own_addresses(p: PaperSummary, targets: Groups, latest: Groups) -> int:
    """The bit mask (see ``own_addresses``) of a record's addresses that name it alone."""
    pid = p.pith_id
    group = latest[p.arxiv_id]
    mask = 1 if len(group) == 1 and group[0] is p else 0
    if len(targets[f"arxiv/{p.arxiv_id}v{p.version}/"]) == 1:
        mask |= 2
    for bit, n in ((4, 8), (8, 12), (16, 16)):
        if len(targets[f"pith/{pid[:n]}/"]) == 1:
            mask |= bit
    return mask


def _shared_address(folder: str, group: list[PaperSummary]) -> tuple[str, str, list[PaperSummary]]:
    kind, _, name = folder[:-1].partition("/")
    return folder, f"pith:{name}" if kind == "pith" else f"arXiv:{name}", sorted(group, key=lambda p: p.pith_id)


def plan_redirects(papers: list[PaperSummary]) -> RedirectPlan:
    """Which short address leads where: ``pith/<8|12|16>/``, ``arxiv/<id>v<n>/`` and ``arxiv/<id>/`` (the
    latest version).  An address shared by several records becomes a list page."""
    targets, latest = _address_groups(papers)
    per_record = {}
    for p in papers:
        own = _own_addresses(p, targets, latest)
        if own:
            per_record[p.pith_id] = own
    shared = [_shared_address(f, targets[f]) for f in sorted(f for f, group in targets.items() if len(group) > 1)]
    return RedirectPlan(per_record, shared)


def replan_redirects(old: RedirectPlan, papers: list[PaperSummary], touched: set[tuple[str, str, int]]) -> RedirectPlan:
    """``plan_redirects(papers)`` for a plan *old* made before the records *touched* (pith id, arXiv id,
    version) came or went: only the addresses of records sharing one with them, directly or through another
    such record, are planned again (a record added to 10,000 touches a handful).  *papers* is in pith-id order,
    as for a full plan, and the result is the same (tests/test_pages.py compares the two)."""
    ids = [p.pith_id for p in papers]
    by_arxiv: dict[str, list[PaperSummary]] = {}
    for p in papers:
        by_arxiv.setdefault(p.arxiv_id, []).append(p)
    prefixes = {pid[:8] for pid, _, _ in touched}  # records sharing a 12- or 16-character prefix share the 8
    arxiv_ids = {arxiv_id for _, arxiv_id, _ in touched}
    involved: dict[str, PaperSummary] = {}
    while True:  # the records linked to the touched ones by some address, until no more are found
        found = {}
        for prefix in prefixes:
            i = bisect.bisect_left(ids, prefix)
            while i < len(ids) and ids[i].startswith(prefix):
                found[ids[i]] = papers[i]
                i += 1
        for arxiv_id in arxiv_ids:
            found.update((p.pith_id, p) for p in by_arxiv.get(arxiv_id, ()))
        if found.keys() <= involved.keys():
            break
        involved.update(found)
        prefixes |= {pid[:8] for pid in found}
        arxiv_ids |= {p.arxiv_id for p in found.values()}
    targets, latest = _address_groups(involved.values())
    current = dict(zip(ids, papers))  # list pages show the records as they are now
    per_record = {pid: own for pid, own in old.per_record.items() if pid not in involved and pid in current}
    for pid, p in involved.items():
        own = _own_addresses(p, targets, latest)
        if own:
            per_record[pid] = own
    # A shared address that named a record which went names others still here, and they are involved.
    replanned = {folder for p in involved.values() for folder, _ in own_addresses(p, ALL_ADDRESSES)}
    shared = [(folder, label, [current[t.pith_id] for t in group])
              for folder, label, group in old.shared if folder not in replanned]
    shared += [_shared_address(f, group) for f, group in targets.items() if len(group) > 1]
    shared.sort(key=lambda entry: entry[0])
    return RedirectPlan(per_record, shared)


def bar_chart(rows: list[tuple[str, int]], unit: str, unit_one: str) -> dict:
    """Geometry for an inline SVG bar chart; labels and values are printed, so colour is not needed.  *unit*
    names many of what is counted, *unit_one* one of them.  Drawn about as wide as a phone's screen: a chart is
    scaled down to fit it, its labels with it."""
    top = max((v for _, v in rows), default=1) or 1
    bar_height, gap, label_width, width = 18, 6, 120, 400
    bars = []
    for i, (label, value) in enumerate(rows):
        y = i * (bar_height + gap)
        bars.append({"label": label, "value": value, "y": y, "h": bar_height,
                     "w": max(1, round((width - label_width - 60) * value / top)), "x": label_width})
    return {"bars": bars, "width": width, "height": max(1, len(rows)) * (bar_height + gap), "unit": unit,
            "unit_one": unit_one}


def _counts(papers: list[PaperSummary], head: dict) -> dict:
    return {"published": len(papers), "rejected": head["counts"]["rejected"],
            "superseded": head["counts"]["superseded"], "read": head["counts"]["read"]}


def report_files(renderer: SiteRenderer, catalog: Catalogue, report: ReportDocument,
                 has_about: bool) -> Iterator[tuple[str, bytes]]:
    """Pages that show the outcome of this build (counts, rejections); rendered on every build.  (Its
    verification.json is written by the build, in pieces: ``ReportDocument.chunks``.)"""
    papers, cats, years = catalog.papers, catalog.categories, catalog.years
    counts = _counts(papers, report.head)
    yield "index.html", renderer.render("home.html", recent=renderer.shown(papers[:HOME_RECENT]), counts=counts,
                                        categories=cats,
                                        years=years, has_about=has_about)
    per_year = [(y.key, len(y.papers)) for y in sorted(years, key=lambda y: y.key)]
    per_primary = sorted(Counter(p.primary_cat for p in papers).items(), key=lambda kv: (-kv[1], kv[0]))
    outcome_rows = [("published", counts["published"]), ("rejected", counts["rejected"]),
                    ("superseded", counts["superseded"])]
    yield "stats/index.html", renderer.render(
        "stats.html", counts=counts, charts=[
            ("Papers per submission year", bar_chart(per_year, "papers", "paper")),
            ("Papers per primary category", bar_chart(per_primary, "papers", "paper")),
            ("Bundles by verification outcome", bar_chart(outcome_rows, "bundles", "bundle")),
        ])
    yield "verification/index.html", renderer.render("verification.html", report=report.head,
                                                     attention=report.attention)


@dataclass
class Unit:
    """A group of output files that is rendered, or reused, as a whole.

    ``material`` is everything the files show besides the build-wide settings (keys, config) and the templates:
    when it and the templates it uses are unchanged, the files are unchanged, so an incremental build reuses them.
    ``templates``: the templates ``render`` renders (those they use follow, ``template_uses``); () for none,
    ``EVERY_TEMPLATE`` (None) where any of them may show.
    """

    name: str
    material: object
    render: Callable[[], list[tuple[str, bytes]]]
    templates: tuple[str, ...] | None = EVERY_TEMPLATE


def _rows(papers: list[PaperSummary], store: IncrementalStore, name: str) -> str:
    """The row digests of a unit's records (its key material).  A unit that shows the same records as in the
    store reuses the joined string: comparing 100 references is cheaper."""
    rows = store.recall(f"unit-rows:{name}", papers)
    if rows is None:
        rows = store.keep(f"unit-rows:{name}", list(papers), " ".join(p.row_digest for p in papers))
    return rows


def _listing_units(renderer: SiteRenderer, listings: list[Listing],
                   store: IncrementalStore) -> tuple[list[Unit], list[str]]:
    """A unit for each page of each listing, and the pages' URLs."""
    units: list[Unit] = []
    urls: list[str] = []
    size = renderer.config.page_size
    for listing in listings:
        pages = pagination(listing.base, len(listing.papers), size)
        urls += [page.url for page in pages]
        for page in pages:
            start = (page.number - 1) * size
            chunk = listing.papers[start:start + size]
            name = f"listing:{page.url}"
            units.append(Unit(
                name, [listing.title, len(listing.papers), len(pages), _rows(chunk, store, name)],
                lambda listing=listing, page=page, pages=pages, chunk=chunk, start=start: [(
                    page.url + "index.html",
                    renderer.render("listing.html", listing=listing, page=page, pages=pages,
                                    papers=renderer.shown(chunk),
                                    first_index=start + 1))], ("listing.html",)))
    return units, urls


def _feed_units(renderer: SiteRenderer, catalog: Catalogue, updated: str, store: IncrementalStore) -> list[Unit]:
    """The site's feed and each category's, a unit each."""
    title = renderer.config.title
    feeds = [("feed.xml", title, catalog.papers[:FEED_ENTRIES], updated)]
    feeds += [(c.base + "feed.xml", f"{title}: {c.key}", c.papers[:FEED_ENTRIES], c.updated)
              for c in catalog.categories]
    units = []
    for path, feed_title, entries, stamp in feeds:
        name = f"feed:{path}"
        units.append(Unit(name, [feed_title, stamp, _rows(entries, store, name)],
                          lambda path=path, feed_title=feed_title, entries=entries, stamp=stamp: [(
                              path, renderer.render("feed.xml", feed_title=feed_title, feed_path=path,
                                                    entries=renderer.shown(entries),
                                                    updated=stamp))], ("feed.xml",)))
    return units


def collection_units(renderer: SiteRenderer, catalog: Catalogue, shared: list, trust: TrustSet,
                     generated_at: str | None, about_markdown: str | None,
                     store: IncrementalStore,
                     static_files: Unit | None = None, search_folders: list[str] = ()) -> list[Unit]:
    """Pages that depend on the set of published records and its order (not on rejections), as units, and the
    site's other files (*static_files*: the static folder's, made once by the build, which also keys on it).
    *search_folders*: where the search indexes are (``search_index.plan_shards``), which the search page merges.

    Each listing page, each feed and each shared short address is its own unit, so a change to one record
    re-renders only the pages that show it.
    """
    config = renderer.config
    papers, everything, cats, years = catalog.papers, catalog.everything, catalog.categories, catalog.years
    updated = everything.updated if papers else generated_at or "1970-01-01T00:00:00Z"
    units, listing_urls = _listing_units(renderer, [everything, *cats, *years], store)
    units.append(Unit("groups", [[(g.key, g.base, len(g.papers)) for g in cats], [(g.key, len(g.papers)) for g in years]],
                      lambda: [("category/index.html",
                                renderer.render("groups.html", title="Categories", groups=cats, named=True)),
                               ("year/index.html",
                                renderer.render("groups.html", title="Years", groups=years, named=False))],
                      ("groups.html",)))

    units += _feed_units(renderer, catalog, updated, store)

    for folder, label, targets in shared:
        name = f"shared:{folder}"
        units.append(Unit(name, [label, _rows(targets, store, name)],
                          lambda folder=folder, label=label, targets=targets: [(
                              folder + "index.html",
                              renderer.render("ambiguous.html", label=label, targets=renderer.shown(targets)))],
                          ("ambiguous.html",)))

    urls = ["", "papers/", "category/", "year/", "stats/", "verification/", "search/", "verify/"]
    if about_markdown is not None:
        urls.append("about/")
    urls += catalog.record_paths
    urls = list(dict.fromkeys(urls + listing_urls))
    units.append(Unit("sitemap", [SITEMAP_LIMIT, urls], lambda: list(_sitemaps(renderer, urls)),
                      ("sitemap.xml", "sitemap-index.xml")))

    search_folders = list(search_folders)
    category_keys, year_keys = [c.key for c in cats], [y.key for y in years]

    def static() -> list[tuple[str, bytes]]:
        assets = renderer.assets()
        files = [("robots.txt", renderer.render("robots.txt")),
                 ("search/index.html", renderer.render("search.html", search_indexes=search_folders,
                                                       filter_categories=category_keys, filter_years=year_keys)),
                 ("404.html", renderer.render("404.html")), (".nojekyll", b""),
                 ("verify/index.html", renderer.render("verifier.html",
                                                       verify_js=Markup(assets["verify.js"].decode("utf-8"))))]
        if about_markdown is not None:
            files.append(("about/index.html", renderer.render("about.html", about=about_markdown)))
        files += [("assets/" + name, data) for name, data in assets.items()]
        return files
    units.append(Unit("static", [about_markdown, search_folders, category_keys, year_keys], static))  # (any template)
    units.append(Unit("manifest", [updated], lambda: _manifests(config, trust, updated), ()))
    if static_files is not None:
        units.append(static_files)
    return units


_SITE_OWNED_FOLDED = frozenset(name.casefold() for name in SITE_OWNED)


def refused_static_path(rel: str) -> str | None:
    """Why a static file may not be published at *rel*, or None.  The site's own pages, and above all the
    resolver's paths (``pith/``, ``.well-known/pith/``), are the build's: a file copied there as it is would
    stand where only verified records may."""
    try:
        check_relative_path(rel)
    except ValueError:
        return "not a plain file name a static host serves"
    folded = rel.casefold()  # (a case-insensitive host serves PITH/<id>/ and Index.html at the site's own paths)
    top = folded.split("/", 1)[0]
    if top in _SITE_OWNED_FOLDED or folded == ".well-known/pith" or folded.startswith(".well-known/pith/") or (
            "/" not in folded and folded.startswith("sitemap") and folded.endswith(".xml")):
        return "the site makes this path itself (override a page with a template instead)"
    return None


def static_unit(files: list[StaticFile]) -> Unit:
    """The static folder's files as one unit, keyed on their names and contents."""
    return Unit("static-files", [(f.rel, hashlib.sha256(f.data).hexdigest()) for f in files],
                lambda: [(f.rel, f.data) for f in files], ())


def _sitemaps(renderer: SiteRenderer, urls: list[str]) -> Iterator[tuple[str, bytes]]:
    if not renderer.config.has_origin:
        return
    chunks = [urls[i:i + SITEMAP_LIMIT] for i in range(0, len(urls), SITEMAP_LIMIT)]
    if len(chunks) == 1:
        yield "sitemap.xml", renderer.render("sitemap.xml", urls=chunks[0])
        return
    names = [f"sitemap-{i + 1}.xml" for i in range(len(chunks))]
    for name, chunk in zip(names, chunks, strict=True):
        yield name, renderer.render("sitemap.xml", urls=chunk)
    yield "sitemap.xml", renderer.render("sitemap-index.xml", sitemaps=names)


def _manifests(config, trust: TrustSet, updated: str) -> list[tuple[str, bytes]]:
    """The pinned key document(s) and a mirror manifest in the resolver's shape (PITH_FORMAT.md §5)."""
    key_docs = trust.documents()
    key_doc = key_docs[0] if len(key_docs) == 1 else key_docs
    manifest = {
        "manifest_type": "pith_mirror_manifest",
        "manifest_version": "1.0",
        "generated_at": updated,
        "merge_version": "pith-open-graph-merge-v1",
        "mirrors": [{
            "name": config.title,
            "mirror_type": "https",
            "base_url": config.absolute_url("").rstrip("/"),
            "bundle_pattern": config.absolute_url("pith/{suffix}/bundle.json"),
            "state_pattern": config.absolute_url("pith/{suffix}/state.json"),
            "well_known_pattern": config.absolute_url(".well-known/pith/{suffix}/bundle.json"),
            "public_key": key_doc,
            "status": "mirror",
        }],
        "notes": "Static mirror built by site-builder; every bundle was verified against the pinned key(s) above.",
    }
    return [("pith-signing-key.json", (json.dumps(key_doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")),
            ("pith-mirrors.json", (json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))]
