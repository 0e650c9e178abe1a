"""The remember stage: what the next build starts from (the authenticated cache, the no-op answer, serve's
incremental store), saved in a detached process for a one-shot build.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Callable

from site_builder.cache import BuildCache
from site_builder.cache_folder import clear_save_failure, leave_save_failure
from site_builder.incremental import IncrementalStore
from site_builder.mirrors import MirrorCheck, record_after
from site_builder.options import BuildOptions
from site_builder.pages import Catalogue
from site_builder.rendering import SiteRenderer
from site_builder.report import BuildReport, FileOutcome, ReportRows
from site_builder.stages.context import BuildContext, stat_sig
from site_builder.stages.plan import SitePlan, list_rows_key, record_addresses
from site_builder.stages.select import published_by
from site_builder.writing import MARKER, OutputSlot


def remember(write_cache: Callable[[], None], cache: BuildCache, options: BuildOptions, report: BuildReport,
              input_fingerprint: Callable[[], str], marker_sig: str | None, upkeep: Callable[[], None]) -> None:
    """Save what the next build reads (the cache via *write_cache*, the no-op answer, and serve's store brought
    up to date by *upkeep*), in a detached process for a one-shot build (``build`` on the command
    line): the new site is live already, and saving 10,000 records' worth takes longer than the rest of a
    one-file rebuild.  The saver inherits the cache's lock, so the next build waits for it before reading the
    cache; a saver that fails, or never ends, leaves the previous cache, which can only cost the next build time,
    and the next build says so (``announce_save``).  The saver
    touches nothing in the output: when ``build`` returns, the site is final (a deploy step may archive it at
    once, and tar fails on a file whose status changes while it reads it)."""
    if cache.unusable is not None:  # (a cache the build went on without is left as it is: BuildCache._read_failed)
        if options.store is not None:
            upkeep()
        return

    def save() -> None:
        write_cache()
        if not report.search_behind:  # else the next build, even with these inputs, has the index to make
            cache.save_quick(input_fingerprint(), marker_sig, report)
        if options.store is not None:
            upkeep()

    announced = options.policy.one_shot and announce_save(cache)
    if announced and start_detached(functools.partial(save_telling_the_next_build, save, cache), cache):
        report.saved_in_background = True
        return
    save()
    if announced and cache.path is not None:  # (for a saver that could not be started: said here instead)
        clear_save_failure(cache.path.parent)
    if cache.save_failure is not None:
        report.cache_note = f"the build cache was not saved ({cache.save_failure}); the next build cannot reuse " \
                            f"what this one did"


# What the next build says of a detached save that neither finished nor failed: its process was stopped (killed,
# the machine turned off, a CI job's end) before it could say anything.
SAVE_STOPPED = "the save did not finish: its process was stopped"


def announce_save(cache: BuildCache) -> bool:
    """Leave word in the cache's folder that a save is under way (``SAVE_STOPPED``), which the detached saver
    replaces with why it failed, or removes once it is done: the next build then says a save that never ended.
    False where no word can be left (a full disk, a folder this user may not write to: the save is then made in
    place, and its failure said at once) or there is no cache."""
    return (cache.path is not None and cache.user_key is not None
            and leave_save_failure(cache.path.parent, cache.user_key, SAVE_STOPPED))


def save_telling_the_next_build(save: Callable[[], None], cache: BuildCache) -> None:
    """*save*, in a process nobody watches: why it failed (as the cache says, or what it raised) is left in the
    cache's folder for the next build to say, in place of the word ``announce_save`` left there."""
    try:
        save()
        failure = cache.save_failure
    except Exception as exc:  # (a builder's bug: said by the next build, not lost with this process's stderr)
        failure = f"{type(exc).__name__}: {exc}"
    if cache.path is None or cache.user_key is None:
        return
    if failure is None:
        clear_save_failure(cache.path.parent)
    else:
        leave_save_failure(cache.path.parent, cache.user_key, failure)


def start_detached(save: Callable[[], None], cache: BuildCache) -> bool:
    """Run *save* in a grandchild process that outlives this one and holds only the cache lock; False when
    this process cannot fork safely (threads running, no fork) -- the caller then saves in place."""
    if not hasattr(os, "fork") or threading.active_count() > 1 or cache.lock_fd is None:
        return False
    if cache.db is not None:  # an SQLite connection must not cross a fork: the saver opens its own
        cache.db.close()
        cache.db = None
    try:
        pid = os.fork()
    except OSError:
        cache.reconnect()
        return False
    if pid == 0:
        code = 1
        try:
            # Drop the output lock and the caller's pipes (which the saver would hold open) before the saver
            # is started: this process ends before the build returns, so the output is free for a next build
            # at once, however late the saver gets to run.
            keep_only_fd(cache.lock_fd)
            if os.fork() == 0:  # the grandchild: no parent waits for it, so it never becomes a zombie
                os.setsid()
                cache.reconnect()
                save()
            code = 0
        finally:
            os._exit(code)
    if os.waitpid(pid, 0)[1] != 0:  # no saver was started
        cache.reconnect()
        return False
    cache.release_lock()  # this process's copy only: the saver still holds the lock
    return True


def keep_only_fd(keep: int) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    limit = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024
    os.closerange(3, keep)
    os.closerange(keep + 1, limit)


def tidy_store(store: IncrementalStore, report: BuildReport) -> None:
    """Keep this build's report lines for the next (the build wrote them without keeping them), and drop what
    the build did not use (it would pin old results in memory)."""
    ReportRows(store).keep_lines(report.outcomes)
    store.forget_unused()


def shown_rows(renderer: SiteRenderer, catalog: Catalogue) -> dict[str, bytes]:
    """The list rows of the records the site shows (those of removed or changed records are not kept)."""
    rows = renderer.rows
    return {p.row_digest: rows[p.row_digest] for p in catalog.papers if p.row_digest in rows}


def last_outcomes(cache: BuildCache, input_fingerprint: str, slot: OutputSlot) -> tuple[list, list] | None:
    """The outcomes and warnings of the last build when the inputs (by stat), settings, templates and keys are
    those of the site in the output; else None.

    Then the build reports them and writes nothing; this is what makes a no-op rebuild of a large mirror take a
    fraction of a second.
    """
    quick = cache.quick(input_fingerprint, stat_sig(slot.output / MARKER))
    if quick is None:
        return None
    try:
        return [FileOutcome.from_brief(o) for o in quick["outcomes"]], list(quick["warnings"])
    except (KeyError, TypeError, ValueError):
        return None


def save_template_references(ctx: BuildContext, site: SitePlan) -> None:
    """Keep what each template uses where this build had to parse a template to know (``TemplateUses``)."""
    if site.uses.learned:
        ctx.cache.save_template_references(ctx.build_key, site.uses.to_keep())
        site.uses.learned = False


def remember_unchanged(ctx: BuildContext, site: SitePlan) -> None:
    """The site in the output is the one planned: only what this build verified anew is remembered."""
    inputs, verified = site.inputs, site.verified
    ctx.report.changed = False
    cache, options, report = ctx.cache, ctx.options, ctx.report
    marker_sig = stat_sig(ctx.slot.output / MARKER)

    def write_cache() -> None:
        cache.save_inputs(verified.file_index, verified.fresh, options.trust.identity())
        save_template_references(ctx, site)
        if marker_sig is not None and cache.previous_site(marker_sig) is None:  # (made from this build's own
            cache.save_previous_site(marker_sig, published_by(site.build_id, report))  # outcomes, not the file)
    remember(write_cache, cache, options, report, lambda: inputs.fingerprint, marker_sig,
             lambda: tidy_store(ctx.store, report))
    ctx.clock.lap("save_cache")
    if options.policy.left_for_exit is not None:
        options.policy.left_for_exit[:] = [cache, verified, site.units]


def remember_build(ctx: BuildContext, site: SitePlan, written: set[str], check: MirrorCheck) -> None:
    """Everything the next build starts from, for the site just published (*written*: the records whose files
    this build wrote; *check*: the live site's mirrored bundles as the build checked them, ``prepare_tree``)."""
    inputs, verified = site.inputs, site.verified
    cache, options, report = ctx.cache, ctx.options, ctx.report
    marker_sig = stat_sig(ctx.slot.output / MARKER)
    mirrored = {} if cache.db is None else record_after(  # (no cache to keep it in: nothing to look up)
        ctx.slot.output, check,
        {pid: chosen.inspection.sha256 for pid, chosen in site.selection.published.items()
         if f"record:{pid}" in site.units},  # (not a record whose bytes changed after they were verified)
        written)

    # (what the next build would read from verification.json: kept in serve's store and in the cache, made once)
    published = functools.cache(lambda: published_by(site.build_id, report))

    def upkeep() -> None:
        if marker_sig is not None:
            ctx.store.keep("previous_site", marker_sig, published())
        tidy_store(ctx.store, report)

    def write_cache() -> None:
        cache.save(verified.file_index, verified.fresh, options.trust.identity(), site.units, site.build_id,
                   keep_build_id=site.chosen.previous.build_id)
        cache.save_rows(list_rows_key(ctx, site.uses), shown_rows(site.renderer, site.catalog))
        save_template_references(ctx, site)
        cache.save_mirrored(mirrored)
        if marker_sig is not None:
            cache.save_previous_site(marker_sig, published())
        record_addresses(cache, site.published, site.addresses)
    remember(write_cache, cache, options, report, lambda: inputs.fingerprint, marker_sig, upkeep)
    ctx.clock.lap("save_cache")
    if options.policy.left_for_exit is not None:
        options.policy.left_for_exit[:] = [cache, verified, site]
