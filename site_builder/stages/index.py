"""The index stage: a Pagefind index for each shard of the search index whose pages changed; the others are
reused as they are."""

from __future__ import annotations

import shutil
import time
from dataclasses import replace

from site_builder.search_index import SEARCH_STAGE, SearchShard, files_under, index_search
from site_builder.stages.context import BuildContext
from site_builder.stages.plan import SitePlan
from site_builder.stages.publish import OutputTree, reuse_units
from site_builder.unit_files import join_files


def index(ctx: BuildContext, site: SitePlan, out: OutputTree, names: list[str]) -> SitePlan:
    """The search units *names* (those not reused), indexed by Pagefind.  A unit planned as the live index
    (serve defers indexing) that is not to be had is made now, under its own key, so the plan returned is to be
    named again (``renamed``)."""
    behind = [name for name in names if site.units[name][0] != site.planned_search[name]]
    for name in behind:
        site.units[name] = (site.planned_search[name], "")
    left = [name for name in names if name not in behind] + reuse_units(ctx, site, out, behind)
    to_index = [shard for shard in site.shards if shard.unit in set(left)]
    if to_index:
        _make_indexes(ctx, site, out, to_index)
    ctx.report.search_behind = any(site.units[s.unit][0] != site.planned_search[s.unit] for s in site.shards)
    return replace(site, renamed=True) if behind else site


def _make_indexes(ctx: BuildContext, site: SitePlan, out: OutputTree, to_index: list[SearchShard]) -> None:
    options, report = ctx.options, ctx.report
    indexing = time.perf_counter()
    # The progress display, refreshed while Pagefind runs: shards made of how many, or for one index, a pulsing
    # bar and the seconds it takes (~10 s at 10,000 records).
    waiting = None
    if options.policy.progress is not None:
        total = len(to_index) if len(to_index) > 1 else None
        waiting = lambda done: options.policy.progress(SEARCH_STAGE, done, total)  # noqa: E731
        waiting(0)
    for shard in to_index:
        shutil.rmtree(out.tree.root / shard.folder, ignore_errors=True)
    # A Pagefind on each core: it uses more than one, but not two (and a shard's memory each).
    index_search(out.tree.root, [(shard.glob, shard.folder) for shard in to_index], options.policy.workers.processes,
                 waiting)
    for shard in to_index:
        files = join_files(files_under(out.tree.root, shard.folder))
        site.units[shard.unit] = (site.planned_search[shard.unit], files)
        out.link_in_twin(files)
    if options.policy.progress is not None:
        options.policy.progress(SEARCH_STAGE, len(to_index), len(to_index))
    report.search_seconds = time.perf_counter() - indexing  # (the summary line names it)
    report.note_rendered(["search/index.html"])  # (the page whose results come from the index)
