"""The plan stage: every output unit named with a key that covers what it shows (records, listings, feeds,
search shards), and the build id that names them all.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

import jinja2

from site_builder.cache import BuildCache
from site_builder.incremental import IncrementalStore
from site_builder.options import BuildOptions
from site_builder.pages import (
    RECORD_TEMPLATES,
    Catalogue,
    Listing,
    RedirectPlan,
    Unit,
    catalogue,
    collection_units,
    groups,
    other_versions,
    plan_redirects,
    recatalogue,
    replan_redirects,
)
from site_builder.records import PaperSummary
from site_builder.rendering import HELPER_TEMPLATES, ROW_TEMPLATE, SiteRenderer
from site_builder.report import BuildReport, ReportDocument, ReportRows
from site_builder.search_index import SearchLayout, SearchShard, plan_shards, search_layout
from site_builder.selection import PreviousSite, Selection
from site_builder.stages.context import BuildContext, digest_of, digests_under, source_date, template_cache
from site_builder.stages.gather import Inputs
from site_builder.stages.select import Chosen, record_outcomes
from site_builder.stages.verify import Verified
from site_builder.template_uses import TemplateUses
from site_builder.writing import marker_head


def address_shape(published: list[PaperSummary]) -> list[tuple[str, str, int]]:
    """All that ``plan_redirects`` looks at of the records."""
    return [(p.pith_id, p.arxiv_id, p.version) for p in published]


def recorded_addresses(cache: BuildCache, published: list[PaperSummary]
                       ) -> tuple[list[tuple[str, str, int]], RedirectPlan] | None:
    """The plan the last build recorded in the cache and the records' shape it was made for, its list pages
    holding the records as they are now (a record that is gone is left out: every address that named it is
    planned again); None where there is none."""
    found = cache.addresses()
    if found is None:
        return None
    current = {p.pith_id: p for p in published}
    try:
        return found.records, RedirectPlan(found.per_record, [(folder, label, [current[pid] for pid in pids
                                                                               if pid in current])
                                                              for folder, label, pids in found.shared])
    except TypeError:
        return None


def record_addresses(cache: BuildCache, published: list[PaperSummary], plan: RedirectPlan) -> None:
    """Keep *plan*, made for *published*, in the cache for the next build (``recorded_addresses``)."""
    cache.save_addresses(address_shape(published), plan.per_record,
                         [(folder, label, [p.pith_id for p in targets]) for folder, label, targets in plan.shared])


def plan_addresses(store: IncrementalStore, cache: BuildCache, published: list[PaperSummary]) -> RedirectPlan:
    """The short-address plan: the last build's (from the store in serve, from the cache's record otherwise),
    reused while no record's id, arXiv id or version changed, and re-planned only around the records that came
    or went when a few did (0.045 s to plan afresh at 10,000 records, ~1 s at 100,000)."""
    shape = address_shape(published)
    kept = store.last("addresses")
    last = kept or recorded_addresses(cache, published)
    if last is not None and last[0] == shape:
        old = last[1]
        if kept is None or not old.shared:  # (the cache's record holds the records as they are now already)
            return store.keep("addresses", shape, old)
        current = {p.pith_id: p for p in published}  # list pages show the records as they are now
        return store.keep("addresses", shape, RedirectPlan(old.per_record, [
            (folder, label, [current[t.pith_id] for t in targets]) for folder, label, targets in old.shared]))
    touched = set(shape).symmetric_difference(last[0]) if last is not None else None
    if touched is not None and len(touched) <= 64:  # records came or went: re-plan only their neighbourhood
        plan = replan_redirects(last[1], published, touched)
    else:
        plan = plan_redirects(published)
    return store.keep("addresses", shape, plan)


def catalogue_of(store: IncrementalStore, published: list[PaperSummary]) -> Catalogue:
    """Listings in order: reused while no record's id, date or categories changed, and patched when a few
    records came, went or moved."""
    shape = [(p.pith_id, p.submitted_at, p.primary_cat, p.cross_cats) for p in published]
    last = store.last("catalogue")
    if last is not None and last[0] == shape:
        old = last[1]
        shown = {p.pith_id: p for p in old.papers}
        renewed = {p.pith_id: p for p in published if shown[p.pith_id] is not p}  # same record, new bundle
        if not renewed:
            return old
        # One pass per listing: a pull that renews 40,000 of 100,000 records must not search a listing once
        # per record.
        def patched(listing: Listing) -> Listing:
            return replace(listing, papers=[renewed.get(q.pith_id, q) for q in listing.papers])
        everything = patched(old.everything)
        in_category, in_year = groups(list(renewed.values()))
        categories = [patched(c) if c.key in in_category else c for c in old.categories]
        years = [patched(y) if y.key in in_year else y for y in old.years]
        result = Catalogue(everything.papers, everything, categories, years)
        if "record_paths" in old.__dict__:  # same records: same pages (a cached_property carried over)
            result.__dict__["record_paths"] = old.record_paths
    elif last is not None and len(moved := moved_ids(last[0], shape)) <= 64:
        result = recatalogue(last[1], published, moved)  # a few records came, went or moved
    else:
        result = catalogue(published)
    return store.keep("catalogue", shape, result)


def moved_ids(before: list[tuple], now: list[tuple]) -> set[str]:
    """The pith ids of the entries (id first) that are in one list and not in the other."""
    return {entry[0] for entry in set(before).symmetric_difference(now)}


def site_renderer(ctx: BuildContext) -> tuple[SiteRenderer, TemplateUses]:
    """The renderer of these templates and settings, with the list rows kept for its row template, and what each
    template uses; serve compiles every template once, not during the first edit's rebuild."""
    kept = ctx.store.recall("renderer", ctx.site_key)
    if kept is not None:
        return kept
    options = ctx.options
    renderer = SiteRenderer(options.config, ctx.dirs, options.trust, options.search, template_cache(ctx.cache))
    uses = TemplateUses(renderer.env, ctx.templates_key, HELPER_TEMPLATES,
                        ctx.cache.template_references(ctx.build_key))
    renderer.rows.update(ctx.cache.list_rows(list_rows_key(ctx, uses)))
    if ctx.store.keeps:
        for name in renderer.env.list_templates(extensions=["html", "xml", "txt", "svg"]):
            try:
                renderer.env.get_template(name)
            except (jinja2.TemplateError, UnicodeDecodeError, OSError):
                pass  # reported if and when a page uses it
    return ctx.store.keep("renderer", ctx.site_key, (renderer, uses))


def list_rows_key(ctx: BuildContext, uses: TemplateUses) -> str:
    """What the records' list rows are rendered under: the build key and the row template with those it uses
    (an edit of any other template keeps them)."""
    return digest_of(ctx.build_key, uses.digest((ROW_TEMPLATE,)))


def unit_materials(records: list[tuple[str, str]], addresses: RedirectPlan, versions: dict[str, tuple],
                   collection: list[Unit], shards: list[SearchShard], indexer: str | None, uses: TemplateUses,
                   keys: dict[str, tuple[str, str]]) -> Iterator[tuple[str, object]]:
    """Every output unit's name and material (what its files show besides the build key), in the plan's order:
    records by pith id (*records*: pith id and sha256 of the bundle published), then the collection, then the
    search indexes, whose material is read from *keys*, the keys planned so far.

    A record's material is its bytes (which give its ids), its short addresses and the other versions of its
    paper in the site (its page links to them); a collection unit's is what it shows (listings show summaries
    only, so a new event on a record does not re-render any listing); each with the templates it uses (*uses*).
    A search index's is what it indexes and the Pagefind that makes it (*indexer*: the search page's Pagefind,
    the first shard's, reads the other shards' indexes, so all are made by one version)."""
    record_templates = uses.digest(RECORD_TEMPLATES)
    for pid, sha256 in records:  # (as one string: ~10 ms less than a tuple's repr at 10,000 records)
        yield f"record:{pid}", (f"record\t{sha256}\t{addresses.per_record.get(pid, 0)}\t{versions.get(pid, ())!r}"
                                f"\t{record_templates}")
    for unit in collection:  # (material: nested lists and tuples of str and int, whose repr() is exact and fast)
        yield unit.name, (unit.material, uses.digest(unit.templates))
    for shard in shards:
        if shard.glob is None:  # Pagefind reads every page (those rendered on every build too): any may hold
            yield shard.unit, ("search", indexer, sorted(k for k, _ in keys.values()), uses.identity)
        else:  # record pages alone, whose keys cover everything they show
            yield shard.unit, ("search", indexer, shard.folder, [keys[f"record:{pid}"][0] for pid in shard.pith_ids])


def plan_units(ctx: BuildContext, records: list[tuple[str, str]], addresses: RedirectPlan, versions: dict[str, tuple],
               collection: list[Unit], shards: list[SearchShard], uses: TemplateUses) -> dict[str, tuple[str, str]]:
    """Every output unit's key: the digest of the build key and the unit's material (``unit_materials``), the last
    build's key where the material is equal (serve's store keeps them all as one entry, ``unit-keys``, made
    under one build key).  Returns unit -> (key, files); the files are filled in as units are written or
    reused."""
    build_key = ctx.build_key
    kept = ctx.store.recall("unit-keys", build_key) or {}
    units: dict[str, tuple[str, str]] = {}
    keys: dict[str, tuple[object, str]] = {}
    key_of = digests_under(build_key)
    for name, material in unit_materials(records, addresses, versions, collection, shards, ctx.indexer, uses,
                                         units):
        last = kept.get(name)
        # (compared, a listing's joined rows are usually the very same string); a material that is a string is
        # its own text (a record's), any other is its repr()
        if last is not None and last[0] == material:
            key = last[1]
        else:
            key = key_of(material if isinstance(material, str) else repr(material))
        keys[name] = (material, key)
        units[name] = (key, "")
    ctx.store.keep("unit-keys", build_key, keys)
    return units


def is_search_unit(name: str) -> bool:
    return name == "search" or name.startswith("search:")


def search_shards(options: BuildOptions, layout: SearchLayout | None, published: dict) -> list[SearchShard]:
    """The search indexes of a site publishing *published* (pith id -> anything, in pith-id order), as the
    templates' *layout* asks (``plan_shards``); none without the search index (*layout* None)."""
    if layout is None:
        return []
    return plan_shards(published, layout.glob, options.config.search_shard_size, options.config.search_max_shards,
                       layout.merges_shards)


def identify(site_key: str, report: BuildReport, units: dict, options: BuildOptions,
             store: IncrementalStore) -> tuple[str, ReportDocument]:
    """The build id names everything the output depends on (*site_key*: the build key and every template, which
    the pages rendered on every build may use); it is stored at the top of verification.json."""
    doc = report.document([k.key_id for k in options.trust.keys], source_date(), ReportRows(store))
    # The units are in a deterministic order (records by pith id, then the collection in page order).
    build_id = digest_of(site_key, json.dumps(doc.head, sort_keys=True), doc.identity(),
                     "\n".join([f"{u}\t{k}" for u, (k, _) in units.items()]))
    doc.head = {"build_id": build_id, **doc.head}
    return build_id, doc


def read_build_id(tree: Path) -> str | None:
    """The build id at the top of a tree's verification.json (read without parsing the whole report); None
    where it is not a file of the tree's own (``marker_head``)."""
    match = re.search(rb'"build_id":\s*"([0-9a-f]{64})"', marker_head(tree))
    return match.group(1).decode() if match else None


@dataclass(frozen=True)
class SitePlan:
    """Every output unit of the site to build, named by a key that covers what it shows, and the build id.

    ``units`` maps a unit's name to (key, its files joined); the files are filled in as units are written or
    reused (``write.write_units``), in the plan's order: records by pith id, then the collection, then the search
    shards.  The report unit, which the build id names, is added when it is written."""

    inputs: Inputs  # what the plan was made from: a plan made again without some records starts from it
    verified: Verified
    chosen: Chosen
    published: list[PaperSummary]  # the records the site shows, in pith-id order
    addresses: RedirectPlan
    versions: dict[str, tuple[tuple[int, str], ...]]  # pith id -> the other versions of its paper: (version, id)
    renderer: SiteRenderer
    uses: TemplateUses  # the templates each unit uses
    catalog: Catalogue
    layout: SearchLayout | None
    shards: list[SearchShard]
    collection: list[Unit]
    units: dict[str, tuple[str, str]]
    planned_search: dict[str, str]  # search unit -> the key its index is made under when made now
    build_id: str
    report_doc: ReportDocument
    renamed: bool = False  # outcomes or unit keys changed since the build id was made: ``identified`` names it

    @property
    def selection(self) -> Selection:
        return self.chosen.selection

    def is_live(self, ctx: BuildContext) -> bool:
        """Whether the site in the output is this very plan, its mirrored bundles intact (those of the live tree
        are asked for only when the build ids are equal: a change in serve does not wait for their lookups)."""
        previous = self.chosen.previous
        return (previous.build_id == self.build_id and ctx.cache.units(previous.build_id) is not None
                and not ctx.mirrors.edited())


def plan(ctx: BuildContext, inputs: Inputs, verified: Verified, chosen: Chosen) -> SitePlan:
    options = ctx.options
    published = chosen.published
    addresses = plan_addresses(ctx.store, ctx.cache, published)
    ctx.clock.lap("plan_addresses")
    versions = other_versions(published)
    renderer, uses = site_renderer(ctx)
    catalog = catalogue_of(ctx.store, published)
    layout = search_layout(ctx.dirs) if options.search else None
    shards = search_shards(options, layout, chosen.selection.published)
    collection = _collection(ctx, inputs, renderer, catalog, addresses, shards)
    ctx.clock.lap("plan_collection")
    records = [(pid, c.inspection.sha256) for pid, c in chosen.selection.published.items()]
    units = plan_units(ctx, records, addresses, versions, collection, shards, uses)
    planned_search = {s.unit: units[s.unit][0] for s in shards}  # what the indexes would be made under
    if options.defer_search and planned_search:
        _defer_search(ctx, chosen.previous, units, planned_search)
    record_outcomes(ctx.report, verified.inspections, chosen.selection, {}, ctx.store)
    build_id, report_doc = identify(ctx.site_key, ctx.report, units, options, ctx.store)
    ctx.clock.lap("identify")
    return SitePlan(inputs, verified, chosen, published, addresses, versions, renderer, uses, catalog, layout,
                    shards, collection, units, planned_search, build_id, report_doc)


def _collection(ctx: BuildContext, inputs: Inputs, renderer: SiteRenderer, catalog: Catalogue,
                addresses: RedirectPlan, shards: list[SearchShard]) -> list[Unit]:
    return collection_units(renderer, catalog, addresses.shared, ctx.options.trust, source_date(), ctx.about,
                            ctx.store, inputs.static_unit, [s.folder for s in shards])


def _defer_search(ctx: BuildContext, previous: PreviousSite, units: dict, planned_search: dict) -> None:
    """(serve) Plan the live search indexes where they would be made again: the same shards, to keep the
    search page's links right, whose indexes the next build makes (the build id says so)."""
    live_search = {name: key for name, (key, _) in (ctx.cache.units(previous.build_id) or {}).items()
                   if is_search_unit(name)}
    if live_search.keys() == planned_search.keys() and live_search != planned_search:
        units.update((name, (key, "")) for name, key in live_search.items())
        ctx.report.search_behind = True


def without_changed(ctx: BuildContext, site: SitePlan, changed: dict[str, str]) -> SitePlan:
    """The plan again without the records whose files changed after they were verified (*changed*: pith id ->
    why): their short addresses, list rows and search entries must not point at a page that is not there.
    The addresses and listings are planned afresh, not patched from the store's, which hold the full set."""
    ctx.slot.assume_shared()  # (the units are planned again: the retired tree's may match them now)
    ctx.report.outcomes.clear()
    record_outcomes(ctx.report, site.verified.inspections, site.selection, changed, ctx.store)
    papers = [s for s in site.published if s.pith_id not in changed]
    addresses = plan_redirects(papers)
    catalog = catalogue(papers)
    shards = search_shards(ctx.options, site.layout, {p.pith_id: p for p in papers})
    collection = _collection(ctx, site.inputs, site.renderer, catalog, addresses, shards)
    records = [(pid, c.inspection.sha256) for pid, c in site.selection.published.items() if pid not in changed]
    planned = plan_units(ctx, records, addresses, site.versions, collection, shards, site.uses)
    # (the records keep their files; the versions they link to are as planned: their pages are written)
    units = {u: site.units[u] if u in site.units and u.startswith("record:") else v for u, v in planned.items()}
    return replace(site, published=papers, addresses=addresses, catalog=catalog, shards=shards,
                   collection=collection, units=units, planned_search={s.unit: units[s.unit][0] for s in shards},
                   renamed=True)


def identified(ctx: BuildContext, site: SitePlan) -> SitePlan:
    """The plan named again, after its outcomes or unit keys changed while it was carried out."""
    build_id, report_doc = identify(ctx.site_key, ctx.report, site.units, ctx.options, ctx.store)
    return replace(site, build_id=build_id, report_doc=report_doc, renamed=False)
