"""The build: gather -> verify -> plan -> render -> index -> publish -> remember.

Each stage is a function in ``site_builder/stages/`` with a named input and output:

  gather    BuildContext                      -> Inputs     the bundle files by stat, static files, the deployed
                                                            manifest (and the context's lookups of the mirrored
                                                            bundles in the output start: ``ctx.mirrors``)
  verify    Inputs                            -> Verified   every file checked against the pinned keys (in workers),
                                                            unless the cache holds an authenticated result
  plan      Inputs, Verified -> Chosen        -> SitePlan   one bundle per record (no rollback), then every output
                                                            unit keyed by what it shows, and the build id
  render    SitePlan, OutputTree              -> SitePlan   records (in workers) and the collection: the units
  index     SitePlan, OutputTree              -> SitePlan   whose key changed are written, the others reused from
  publish   SitePlan, OutputTree              -> SitePlan   the previous or live tree, by one loop over the output
                                                            kinds (write.py); publish writes the report unit,
                                                            then swaps the tree into the output atomically
  remember  SitePlan (with its Inputs, Verified)            the authenticated cache the next build starts from

If the plan's build id is the live site's, nothing is written.  A bad bundle never stops the build; a failure
from render on (a broken template, a full disk, a kill) leaves the output untouched.  Each stage is timed in
``BuildReport.timings``, its CPU time in ``BuildReport.cpu``.
"""

from __future__ import annotations

import gc
import tempfile
import time
from pathlib import Path

from site_builder.options import BuildOptions
from site_builder.parallel import PARALLEL_THRESHOLD, WorkerLostError, usable_cores
from site_builder.report import BuildReport
from site_builder.search_index import pagefind_version
from site_builder.stages.context import BuildContext, default_cache_dir, opened_context
from site_builder.stages.gather import Inputs, gather
from site_builder.stages.plan import plan
from site_builder.stages.publish import check_only_the_site, open_tree, prepare_spare_tree, swap
from site_builder.stages.remember import last_outcomes, remember_build, remember_unchanged
from site_builder.stages.select import choose
from site_builder.stages.verify import inspect_files, verify
from site_builder.stages.write import write_units

__all__ = ["BuildOptions", "BuildReport", "PARALLEL_THRESHOLD", "WorkerLostError", "build", "default_cache_dir",
           "inspect_files", "prepare_spare_tree", "usable_cores"]


def build(options: BuildOptions) -> BuildReport:
    """Build the site; raises BundlesFolderError/OutputError/template errors, never for bad bundles."""
    # The build holds one long-lived object per record; the cyclic garbage collector would walk all of them
    # again and again while the build allocates (a third of an incremental build's time at 10,000 records).
    # Nothing the build makes depends on collecting cycles, so it is paused until the build ends.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with tempfile.TemporaryDirectory(prefix="site-builder-") as scratch:  # (bundles fetched from the live site)
            return _build(options, Path(scratch))
    finally:
        if collecting:
            gc.enable()


def _build(options: BuildOptions, scratch: Path) -> BuildReport:
    started = time.perf_counter()
    report = BuildReport()
    try:
        with opened_context(options, scratch, report, pagefind_version) as ctx:
            ctx.clock.lap("start")
            _run_stages(ctx)
    finally:
        report.seconds = time.perf_counter() - started
    return report


def _run_stages(ctx: BuildContext) -> None:
    inputs = gather(ctx)
    check_only_the_site(ctx, inputs)
    # The quick no-op check is for separate processes; serve, with everything in memory, plans anyway
    # (and writes nothing if nothing changed), which also fills its store on its first build.
    if not ctx.serving and _unchanged(ctx, inputs):
        return
    ctx.report.warnings.extend(inputs.warnings)
    verified = verify(ctx, inputs)
    site = plan(ctx, inputs, verified, choose(ctx, inputs, verified))
    if site.is_live(ctx):
        remember_unchanged(ctx, site)
        return
    out = open_tree(ctx, site)
    try:
        site = write_units(ctx, site, out)
        swap(ctx, out)
    except BaseException:
        out.discard()
        raise
    remember_build(ctx, site, out.records_written, out.check)


def _unchanged(ctx: BuildContext, inputs: Inputs) -> bool:
    """Whether the output is the site the last build made of these very inputs, its mirrored bundles intact.

    The mirrored bundles are asked for only when the inputs are the last build's: a build that has work to do
    waits for their lookups when it comes to write, by which time they are made (``MirrorLookups``: ~25 ms of
    a one-bundle change at 10,000 records)."""
    last = last_outcomes(ctx.cache, inputs.fingerprint, ctx.slot)
    unchanged = last is not None and not ctx.mirrors.edited()
    ctx.clock.lap("check_live")
    if unchanged:
        ctx.report.outcomes, ctx.report.warnings = last
        ctx.report.changed = False
    return unchanged
