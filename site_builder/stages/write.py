"""The write loop: every output unit of the plan, kind by kind, kept where the one reuse rule allows
(``publish.reuse_units``) and written by its kind where it does not.

An output kind is a name, the units of the plan that are its own, and the function that writes those of them
that could not be reused.  The kinds run in the order their outputs depend on each other:

  records     render.render_records      each record's files, in the workers; listings and feeds read the
                                         words of records back from the bundles written here
  collection  render.render_collection   listing pages, feeds, redirects, the about page, static files
  search      index.index                a Pagefind index per search shard, which reads the written pages
  report      publish.write_report       verification.json and the pages of this build's outcome, under the
                                         build id; never reused, since it names this very build

A writer returns the plan as it stands after it: records whose bytes changed after they were verified drop out
of it (the listings are planned again without them), and a search index made under another key than planned
marks the plan to be named again before the report names it.

To add an output kind: give its units a name and a material in ``plan.unit_materials`` (what its files show,
so that the key changes when they would), write a function ``(ctx, site, out, names) -> SitePlan`` that writes
the named units and records their files in ``site.units``, and put an ``OutputKind`` for it below, after the
kinds whose files it reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from site_builder.stages.context import BuildContext
from site_builder.stages.index import index
from site_builder.stages.plan import SitePlan
from site_builder.stages.publish import OutputTree, reuse_units, write_report
from site_builder.stages.render import render_collection, render_records


@dataclass(frozen=True)
class OutputKind:
    """One kind of output unit: which of the plan's units are its own (in plan order) and how those not
    reused are written; *stage* names its time in the build's report."""

    name: str
    units: Callable[[SitePlan], list[str]]
    write: Callable[[BuildContext, SitePlan, OutputTree, list[str]], SitePlan]
    stage: str
    reused: bool = True  # whether its units may keep files of an earlier build


def record_units(site: SitePlan) -> list[str]:
    return [f"record:{pid}" for pid in site.selection.published]


def collection_units(site: SitePlan) -> list[str]:
    return [unit.name for unit in site.collection]


def search_units(site: SitePlan) -> list[str]:
    return [shard.unit for shard in site.shards]


OUTPUT_KINDS = (
    OutputKind("records", record_units, render_records, "render_records"),
    OutputKind("collection", collection_units, render_collection, "render_collection"),
    OutputKind("search", search_units, index, "search_index"),
    OutputKind("report", lambda site: ["report"], write_report, "write_report", reused=False),
)


def write_units(ctx: BuildContext, site: SitePlan, out: OutputTree) -> SitePlan:
    """Every unit of *site* in *out*: the one loop over the output kinds.  Returns the plan as carried out,
    which the report and the cache name."""
    try:
        for kind in OUTPUT_KINDS:
            names = kind.units(site)
            if not names:
                continue
            if kind.reused:
                names = reuse_units(ctx, site, out, names)
            site = kind.write(ctx, site, out, names)
            ctx.clock.lap(kind.stage)
    finally:
        site.renderer.read_words = None  # (it reads from this build's tree; serve keeps the renderer)
    return site
