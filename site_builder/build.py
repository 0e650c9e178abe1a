"""The build pipeline: gather and verify -> select -> render and write -> swap in.

Stages:
  1. discover + inspect every input file (parallel; pure per file)
  2. select one bundle per record, detect rollbacks against the previous site
  3. render each record's files into a staging folder (parallel)
  4. render the pages that depend on the whole collection
  5. swap the staging folder in as the output (atomic)
A bad bundle never stops the build; a failure in stages 3-5 (a broken template,
a full disk, a kill) leaves the previous output untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from multiprocessing import get_context
from pathlib import Path
from typing import Callable

from site_builder.inspection import Inspection, inspect_bytes, rejected
from site_builder.keys import TrustSet
from site_builder.loading import DEFAULT_MAX_BYTES, FileReadError, InputFile, discover, read_bytes
from site_builder.pages import collection_files, paper_files
from site_builder.records import PaperSummary
from site_builder.rendering import SiteRenderer, template_dirs
from site_builder.report import PUBLISHED, REJECTED, SUPERSEDED, BuildReport, FileOutcome
from site_builder.selection import Candidate, PublishedBefore, is_rollback, select
from site_builder.settings import SiteConfig
from site_builder.writing import MARKER, OutputSlot, StagingTree

PARALLEL_THRESHOLD = 64


@dataclass
class BuildOptions:
    bundles: Path
    output: Path
    trust: TrustSet
    config: SiteConfig = field(default_factory=SiteConfig)
    templates: Path | None = None
    about_file: Path | None = None
    jobs: int = 0  # 0: all cores
    max_bytes: int = DEFAULT_MAX_BYTES
    serve_mode: bool = False
    progress: Callable[[str, int, int], None] | None = None
    search: bool = True


class SearchIndexError(Exception):
    """Pagefind failed; the previous output is kept."""


def index_search(site: Path) -> float:
    """Run Pagefind over the staged site (only pages marked data-pagefind-body are indexed)."""
    started = time.perf_counter()
    cmd = [sys.executable, "-m", "pagefind", "--site", str(site), "--silent", "--include-characters", ".:"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise SearchIndexError(f"search index: pagefind failed: {detail[-1] if detail else result.returncode}")
    return time.perf_counter() - started


def source_date() -> str | None:
    """SOURCE_DATE_EPOCH as an ISO timestamp; without it the output holds no wall-clock time."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        return None
    return datetime.fromtimestamp(int(epoch), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- worker state (set once per process) ---------------------------------------------------------

_worker: dict = {}


def _init_inspect(trust: TrustSet, max_bytes: int) -> None:
    _worker["trust"] = trust
    _worker["max_bytes"] = max_bytes


def _inspect_file(item: InputFile) -> Inspection:
    try:
        raw = read_bytes(item.path, _worker["max_bytes"])
    except FileReadError as exc:
        return rejected(item.rel, exc.check, exc.reason)
    return inspect_bytes(item.rel, raw, _worker["trust"])


def _init_render(config: SiteConfig, dirs: list[Path], trust: TrustSet, staging_root: Path, serve_mode: bool) -> None:
    _worker["renderer"] = SiteRenderer(config, dirs, trust, serve_mode)
    _worker["staging"] = StagingTree(staging_root)


def _render_record(task: tuple[Path, Inspection]) -> tuple[str, int, str | None]:
    """Write one record's files; returns (pith_id, files written, error) -- error when the bytes changed."""
    source, inspection = task
    try:
        raw = read_bytes(source, inspection.size)
    except FileReadError as exc:
        return inspection.pith_id, 0, f"file_changed: {exc.reason}"
    if hashlib.sha256(raw).hexdigest() != inspection.sha256:
        return inspection.pith_id, 0, "file_changed: file changed after it was verified"
    bundle = json.loads(raw)
    staging: StagingTree = _worker["staging"]
    count = 0
    for rel, data in paper_files(_worker["renderer"], raw, bundle, inspection.summary,
                                 inspection.checks, inspection.warnings):
        staging.write(rel, data)
        count += 1
    return inspection.pith_id, count, None


def _map(fn, init, initargs, items: list, jobs: int, progress, stage: str) -> list:
    """Map in worker processes (fork) when there is enough work, else in this process; order kept."""
    results = []
    if len(items) < PARALLEL_THRESHOLD or jobs == 1:
        init(*initargs)
        for i, item in enumerate(items):
            results.append(fn(item))
            if progress:
                progress(stage, i + 1, len(items))
        return results
    workers = jobs or os.cpu_count() or 1
    chunk = max(1, min(256, len(items) // (workers * 8) or 1))
    with ProcessPoolExecutor(workers, mp_context=get_context("fork"), initializer=init, initargs=initargs) as pool:
        for i, result in enumerate(pool.map(fn, items, chunksize=chunk)):
            results.append(result)
            if progress and (i % 100 == 0 or i + 1 == len(items)):
                progress(stage, i + 1, len(items))
    return results


def previous_publications(output: Path) -> dict[str, PublishedBefore]:
    """What the site in *output* published, from its verification.json (ignored if unreadable)."""
    try:
        doc = json.loads((output / MARKER).read_text("utf-8"))
        found = {}
        for f in doc.get("files", []):
            if f.get("status") == PUBLISHED and f.get("pith_number"):
                pith_id = f["pith_number"].rsplit(":", 1)[1]
                found[pith_id] = PublishedBefore(pith_id, f["sha256"], f["built_at"], f["event_count"])
        return found
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return {}


def build(options: BuildOptions) -> BuildReport:
    """Build the site; raises BundlesFolderError/OutputError/template errors, never for bad bundles."""
    started = time.perf_counter()
    report = BuildReport()
    slot = OutputSlot(options.output)
    slot.check_usable()
    bundles_abs = options.bundles.resolve()
    if slot.output == bundles_abs or slot.output in bundles_abs.parents:
        from site_builder.writing import OutputError
        raise OutputError(f"{slot.output}: the output folder must not contain the bundles folder")

    found, skipped = discover(options.bundles)
    inspections = [rejected(s.rel, s.check, s.reason) for s in skipped]
    inspections += _map(_inspect_file, _init_inspect, (options.trust, options.max_bytes), found, options.jobs,
                        options.progress, "verify")
    paths = {f.rel: f.path for f in found}

    slot.acquire()
    try:
        before = previous_publications(slot.output)
        candidates: list[Candidate] = []
        for i in inspections:
            if i.verified:
                candidates.append(Candidate(i, paths[i.rel]))
        selection = select(candidates)
        # Rollback protection: never replace a newer published bundle by an older one.
        for pith_id, chosen in list(selection.published.items()):
            prior = before.get(pith_id)
            if prior is None or not is_rollback(chosen.inspection, prior):
                continue
            kept_path = slot.output / "pith" / pith_id / "bundle.json"
            try:
                kept = inspect_bytes(f"(previous site) pith/{pith_id}/bundle.json", read_bytes(kept_path),
                                     options.trust)
            except FileReadError:
                kept = None
            if kept is None or not kept.verified or kept.sha256 != prior.sha256:
                report.warnings.append(f"{chosen.inspection.rel}: rollback: older than the bundle published before, "
                                       f"which no longer verifies; publishing the input")
                continue
            selection.published[pith_id] = Candidate(kept, kept_path, from_previous_site=True)
            selection.superseded[chosen.inspection.rel] = (
                f"rollback: built_at {chosen.inspection.summary.built_at} and {chosen.inspection.summary.event_count} "
                f"events; the mirror keeps the bundle built_at {prior.built_at} with {prior.event_count} events")
            report.warnings.append(f"{chosen.inspection.rel}: rollback refused for pith:{pith_id}: "
                                   f"{selection.superseded[chosen.inspection.rel]}")

        staging = slot.new_staging()
        try:
            dirs = template_dirs(options.templates)
            tasks = [(c.source, c.inspection) for _, c in sorted(selection.published.items())]
            results = _map(_render_record, _init_render,
                           (options.config, dirs, options.trust, staging.root, options.serve_mode),
                           tasks, options.jobs, options.progress, "render")
            changed = {pith_id: err for pith_id, _, err in results if err}
            report.files_written += sum(n for _, n, _ in results)
            report.pages_written += sum(1 for _, n, _ in results if n)

            kept_outcomes = {c.inspection.rel for c in selection.published.values() if c.from_previous_site}
            for i in inspections:
                if not i.verified:
                    report.outcomes.append(FileOutcome(i, REJECTED))
                elif i.rel in selection.superseded:
                    report.outcomes.append(FileOutcome(i, SUPERSEDED, selection.superseded[i.rel]))
                elif i.pith_id in changed:
                    check, _, reason = changed[i.pith_id].partition(": ")
                    report.outcomes.append(FileOutcome(rejected(i.rel, check, reason), REJECTED))
                else:
                    report.outcomes.append(FileOutcome(i, PUBLISHED))
            for c in selection.published.values():
                if c.inspection.rel in kept_outcomes and c.inspection.pith_id not in changed:
                    report.outcomes.append(FileOutcome(c.inspection, PUBLISHED, "kept from the previous site"))

            papers: list[PaperSummary] = [c.inspection.summary for pid, c in selection.published.items()
                                          if pid not in changed]
            about = None
            if options.about_file is not None and options.about_file.is_file():
                about = options.about_file.read_text("utf-8")
            renderer = SiteRenderer(options.config, dirs, options.trust, options.serve_mode)
            report.seconds = time.perf_counter() - started
            for rel, data in collection_files(renderer, papers, report, options.trust, source_date(), about):
                staging.write(rel, data)
                report.files_written += 1
                if rel.endswith(".html"):
                    report.pages_written += 1
            if options.search and papers:
                report.search_seconds = index_search(staging.root)
            slot.publish(staging)
        except BaseException:
            slot.discard(staging)
            raise
    finally:
        slot.release()
    report.seconds = time.perf_counter() - started
    return report
