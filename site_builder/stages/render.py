"""The render stage, the writers of two output kinds (``write.py``): each record's files written from its
verified bytes (in worker processes), with the words of records read back for the pages that show them; and the
collection's listing pages, feeds and other files.
"""

from __future__ import annotations

import functools
import hashlib
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import orjson

from site_builder.compiled_templates import CompiledTemplates
from site_builder.inspection import Inspection
from site_builder.keys import TrustSet
from site_builder.loading import FileReadError, read_bytes
from site_builder.pages import paper_dir, paper_files
from site_builder.parallel import imap_in_workers
from site_builder.records import PaperText, paper_text
from site_builder.rendering import SiteRenderer
from site_builder.settings import SiteConfig
from site_builder.stages.context import BuildContext, template_cache
from site_builder.stages.plan import SitePlan, without_changed
from site_builder.stages.publish import OutputTree
from site_builder.unit_files import file_count, join_files, record_unit_files, split_files
from site_builder.writing import OutputError, StagingTree


@dataclass
class RecordWriter:
    """What each process rendering records works with: the renderer, the tree being written, and the twin the
    build links (``open_tree``), where each record's files are linked as soon as they are written
    (None when there is none, or once a link failed)."""

    renderer: SiteRenderer
    staging: StagingTree
    spare: StagingTree | None


def record_writer(config: SiteConfig, dirs: list[Path], trust: TrustSet, staging_root: Path, existing: bool,
                  search: bool, compiled: CompiledTemplates | None, spare_root: Path | None,
                  renderer: SiteRenderer | None = None) -> RecordWriter:
    """A worker makes its renderer (templates compiled once, kept in *compiled*); in the build's own process
    the planned *renderer* is used as it is.  *existing*: the tree is one an earlier build left (``StagingTree``)."""
    if renderer is None:
        renderer = SiteRenderer(config, dirs, trust, search, compiled)
    return RecordWriter(renderer, StagingTree(staging_root, existing),
                        StagingTree(spare_root) if spare_root is not None else None)


@dataclass(frozen=True)
class RecordTask:
    source: str | Path
    inspection: Inspection
    addresses: int  # bit mask of the record's own short addresses (pages.own_addresses): expanded in the worker,
    # since 100,000 records' addresses as strings are ~90 MB held for the whole render stage
    versions: tuple[tuple[int, str], ...] = ()  # the other versions of the paper in the site: (version, pith id)
    row_known: bool = False  # the build holds the record's row in lists already: the worker need not render it


@dataclass(frozen=True, slots=True)
class RecordFiles:
    """What a worker reports of one record it rendered."""

    pith_id: str
    files: str  # as the cache keeps them (``record_unit_files``); "" if none were written
    pages: int  # how many of them are pages
    error: str | None  # why none were written: the bytes changed after they were verified
    row: bytes | None  # the record's row in lists (None: not rendered)
    twin_lost: bool = False  # the files could not be linked in the twin: the build must discard it


def render_record(writer: RecordWriter, task: RecordTask) -> RecordFiles:
    """Write one record's files from the verified bytes, and link them in the twin if the build makes one.
    The record's row in lists is rendered here too, spread over the workers like its pages, so that list pages
    (4,428 of them at 100,000 records, rendered in the main process) only join rows.  The twin's links are made
    here too, not by the build process as results come: there they were ~1.3 s of CPU at 10,000 records, taken
    from the workers' two cores, and a serial part of the stage that more cores would not shorten."""
    inspection = task.inspection
    try:
        raw = read_bytes(task.source, inspection.size)
    except FileReadError as exc:
        return RecordFiles(inspection.pith_id, "", 0, f"file_changed: {exc.reason}", None)
    if hashlib.sha256(raw).hexdigest() != inspection.sha256:
        return RecordFiles(inspection.pith_id, "", 0, "file_changed: file changed after it was verified", None)
    staging = writer.staging
    written = []
    raw_at = None  # where the bundle's bytes were first written: its second path links to it
    bundle = orjson.loads(raw)
    summary = inspection.summary.with_words(paper_text(bundle))  # (the build holds them by reference)
    for rel, data in paper_files(writer.renderer, raw, bundle, summary, inspection.checks, inspection.warnings,
                                 task.addresses, task.versions):
        if data is raw and raw_at is not None:
            staging.write_twin(rel, raw_at, data)
        else:
            staging.write(rel, data)
            if data is raw:
                raw_at = rel
        written.append(rel)
    files = record_unit_files(summary.pith_id, summary.arxiv_id, summary.version, task.addresses, written)
    pages = sum(1 for rel in written if rel.endswith(".html"))
    twin_lost = False
    if writer.spare is not None:
        try:
            writer.spare.mirror(written, staging.root)
        except OSError:
            writer.spare = None  # (the build discards the twin once the workers are done)
            twin_lost = True
    row = None if task.row_known else writer.renderer.row_of(summary)
    return RecordFiles(inspection.pith_id, files, pages, None, row, twin_lost)


def words_in(tree: StagingTree, max_bytes: int) -> Callable[[str, str], PaperText]:
    """Reads a record's words back from the bundle the tree being built holds for it (written, or linked from
    the previous tree, from the verified bytes), which must still have the verified digest."""
    @functools.lru_cache(maxsize=2048)  # a feed entry reads title, authors and abstract; feeds overlap
    def read(pith_id: str, sha256: str) -> PaperText:
        rel = paper_dir(pith_id) + "bundle.json"
        advice = "the output was changed outside site-builder: build again with --no-cache"
        try:
            raw = read_bytes(tree.path_for(rel), max_bytes)
        except FileReadError as exc:
            raise OutputError(f"{tree.root / rel}: {exc.reason} ({advice})") from None
        if hashlib.sha256(raw).hexdigest() != sha256:
            raise OutputError(f"{tree.root / rel}: not the bundle that was verified ({advice})")
        return paper_text(orjson.loads(raw))
    return read


def render_records(ctx: BuildContext, site: SitePlan, out: OutputTree, names: list[str]) -> SitePlan:
    """The record units *names* (those not reused), rendered in the workers.  Returns the plan as it stands
    after: without the records whose bytes changed after they were verified (they have no files), and with the
    renderer reading records' words back from the bundles now in the tree, for the feeds and new list rows."""
    options, report, units = ctx.options, ctx.report, site.units
    to_render = []
    for name in names:
        pid = name.removeprefix("record:")
        chosen = site.selection.published[pid]
        to_render.append(RecordTask(chosen.source, chosen.inspection, site.addresses.per_record.get(pid, 0),
                                    site.versions.get(pid, ()),
                                    chosen.inspection.summary.row_digest in site.renderer.rows))
    changed = {}
    twin_lost = False
    init_args = (options.config, ctx.dirs, options.trust, out.tree.root, out.tree.existing, options.search,
                 template_cache(ctx.cache),
                 out.spare.root if out.spare is not None else None)
    with closing(imap_in_workers(render_record, record_writer, init_args, to_render, options.policy.workers, "render",
                                 [t.source for t in to_render], (*init_args, site.renderer))) as results:
        # (closed, which stops the workers, on any error)
        for done in results:
            pid = done.pith_id
            twin_lost = twin_lost or done.twin_lost
            if done.error:  # (no files: the site is planned again without it, below)
                changed[pid] = done.error
                continue
            if done.row is not None:
                site.renderer.keep_row(site.selection.published[pid].inspection.summary.row_digest, done.row)
            units[f"record:{pid}"] = (units[f"record:{pid}"][0], done.files)
            out.records_written.add(pid)
            report.files_written += file_count(done.files)
            report.pages_written += done.pages
            if not report.rendered_more:  # (once its list is full, the files need not be listed)
                report.note_rendered(split_files(done.files))
    if twin_lost:  # (deleted now that no worker links in it, before the build goes on)
        out.drop_twin()
    if changed:
        site = without_changed(ctx, site, changed)
        out.drop_replanned(site.units)
    # (feeds and new list rows show the words of records, which the build holds by reference: they are read back
    # from the verified bundles of the tree being written; the write loop unsets this when it ends)
    site.renderer.read_words = words_in(out.tree, options.max_bytes)
    return site


def render_collection(ctx: BuildContext, site: SitePlan, out: OutputTree, names: list[str]) -> SitePlan:
    """Listing pages, feeds, redirects and the site's other files: the units *names* (those not reused),
    rendered here."""
    report = ctx.report
    by_name = {unit.name: unit for unit in site.collection}
    for name in names:
        rendered = []
        for rel, data in by_name[name].render():
            out.tree.write(rel, data)
            rendered.append(rel)
        report.files_written += len(rendered)
        report.pages_written += sum(1 for rel in rendered if rel.endswith(".html"))
        report.note_rendered(rendered)
        site.units[name] = (site.units[name][0], join_files(rendered))
        out.link_in_twin(site.units[name][1])
    return site
