"""The build pipeline: gather and verify -> select -> render and write -> swap in.

Stages (each timed in ``BuildReport.timings``, its CPU time in ``BuildReport.cpu``):
  1. ``discover`` + ``verify``: every input file is inspected (in parallel; a pure function per file),
     unless the build cache already holds the result for the same bytes and trusted keys;
  2. ``select``: one bundle per record, rollbacks refused; every output unit (a record's files, a listing
     page, a feed, the search index, ...) gets a key naming what it shows.  If the keys are those of the
     site in the output, nothing is written at all;
  3. ``render_records`` and ``render_collection``: units go into the tree being prepared: the previous
     site kept beside the output (updated in place: only units whose key changed are removed and
     re-rendered) or a fresh staging folder; a unit unchanged since the live site is hard-linked from it;
  4. ``search_index`` (Pagefind, for each shard of the index whose pages changed: search_index.py) and
     ``swap``: the prepared tree and the output are exchanged atomically;
  5. ``save_cache``: the build cache (cache.py, every entry authenticated with this user's key) that the next
     build starts from, in a detached process for a one-shot build; serve also keeps its memory (memory.py).
A bad bundle never stops the build; a failure in stages 3-4 (a broken template, a full disk, a kill)
leaves the output untouched.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import closing
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from multiprocessing import current_process, get_context
from pathlib import Path
from typing import Callable, Iterator, Sequence

import jinja2
import orjson

from site_builder import builder_identity
from site_builder.cache import BuildCache, file_count, join_files, record_unit_files, split_files
from site_builder.cache_key import CacheKey, CacheKeyUnavailable, user_cache_key
from site_builder.compiled_templates import CompiledTemplates
from site_builder.inspection import Inspection, by_reference, compact, inspect_bytes, rejected
from site_builder.keys import TrustSet
from site_builder.live_site import LiveManifest, LiveSite, LiveSiteUnavailable, MAX_MANIFEST_BYTES, is_url, manifest_claims
from site_builder.loading import (DEFAULT_MAX_BYTES, BundleListing, FileReadError, InputFile, Prefetcher, StaticFile,
                                  discover, read_bytes, read_static_files, stat_signature)
from site_builder.memory import BuildMemory
from site_builder.pages import (Catalogue, Listing, RedirectPlan, catalogue, collection_units, groups,
                                paper_dir, paper_files, plan_redirects, recatalogue, refused_static_path,
                                replan_redirects, report_files, static_unit)
from site_builder.records import PaperSummary, PaperText, paper_text, text_source
from site_builder.rendering import SiteRenderer, template_dirs, templates_identity
from site_builder.search_index import (SEARCH_STAGE, SearchLayout, SearchShard, files_under, index_search,
                                      pagefind_version, plan_shards, search_layout)
from site_builder.report import PUBLISHED, REJECTED, SUPERSEDED, BuildReport, FileOutcome, ReportDocument
from site_builder.selection import Candidate, PublishedBefore, Selection, is_rollback, select
from site_builder.settings import SiteConfig
from site_builder.slotted import quick_pickling
from site_builder.terminal import printable
from site_builder.writing import MARKER, OutputError, OutputSlot, StagingTree

PARALLEL_THRESHOLD = 64
# Update the previous tree in place unless more than this share of its files is stale.  Unlinking a stale file
# costs what linking an unchanged one into a fresh tree does, and a fresh tree also has the old one deleted, which
# the build waits for when the two share files: with 40 % of 10,000 records changed, in place took 9-12 s, a
# fresh tree 25-34 s.  A fresh tree wins where nearly everything is rewritten (a template edit).
IN_PLACE_LIMIT = 0.9


@dataclass(frozen=True)
class Workers:
    """How per-bundle work is spread: worker processes (0: one per usable core, ``usable_cores``; 1: this
    process), the progress callback (stage, done, total) and the processes' start method."""

    jobs: int = 0
    progress: Callable[[str, int, int | None], None] | None = None  # (total None: not known, as for Pagefind)
    mp_context: str = "fork"

    @property
    def processes(self) -> int:
        """How many processes work at once (worker processes, or Pagefinds side by side)."""
        return self.jobs or usable_cores()


@dataclass
class BuildOptions:
    bundles: Path
    output: Path
    trust: TrustSet
    config: SiteConfig = field(default_factory=SiteConfig)
    templates: Path | None = None
    about_file: Path | None = None
    static_dir: Path | None = None  # files copied into the site as they are (when the folder exists)
    jobs: int = 0  # 0: one worker per usable core (none on one)
    max_bytes: int = DEFAULT_MAX_BYTES
    progress: Callable[[str, int, int | None], None] | None = None
    search: bool = True
    cache_dir: Path | None = None  # default: .site-builder-cache beside the output
    use_cache: bool = True
    mp_context: str = "fork"  # "forkserver" where the caller runs threads (serve)
    memory: BuildMemory | None = None  # kept between builds by a long-running process (serve)
    # The process ends after this build (the command line): the cache is saved by a detached process once the site
    # is live, and the build's objects are left for the exit to drop (freeing a million objects takes ~1 s).
    one_shot: bool = False
    on_published: Callable[[BuildReport], None] | None = None  # called as soon as the new site is live
    listing: BundleListing | None = None  # the bundles folder as the caller already listed it (serve); else discover()
    # (serve) When a shard of the search index would be made again, publish with the live one and say so
    # (``BuildReport.search_behind``): a change is on screen without waiting for Pagefind (~2.5 s a shard of 2,500
    # records, ~13 s one of 12,500), and the caller's next build, without this, brings the index up to date.
    defer_search: bool = False
    # (the command line) A build that writes the whole site afresh (a first build, a template edit) links a twin
    # of it as it goes, which the next change updates in place: that change then takes well under a second
    # instead of linking a whole tree (~5 s at 10,000 records), for 6-20 % (tmpfs) to ~18 % (disk) more full build.
    link_twin: bool = False
    # The deployed mirror (an http(s) base URL or a folder): none of its newer, verifying bundles is rolled back.
    deployed: str | None = None
    deployed_fetcher: object | None = None  # a pulling.Fetcher for a URL (its timeouts); a default one otherwise

    @property
    def workers(self) -> Workers:
        return Workers(self.jobs, self.progress, self.mp_context)


class WorkerLostError(Exception):
    """A worker process ended without handing back its results (killed: by the out-of-memory killer, most
    often): the stage cannot finish, so the build stops, and the output stays as it was."""

    def __init__(self, stage: str):
        doing = {"verify": "verifying", "render": "rendering"}.get(stage, f"at the {stage} stage")
        super().__init__(f"a worker process ended abruptly while {doing} (killed by the system: out of memory? "
                         f"see dmesg)")


def source_date() -> str | None:
    """SOURCE_DATE_EPOCH as an ISO timestamp; without it the output holds no wall-clock time."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        return None
    return datetime.fromtimestamp(int(epoch), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hash(*parts: object) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else str(part).encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


# What a one-shot build leaves for the process exit to drop instead of freeing it on return (BuildOptions.one_shot).
_LEFT_FOR_EXIT: list = []


# --- worker processes ----------------------------------------------------------------------------

_worker: dict = {}


def _in_worker_process() -> None:
    """Workers render thousands of pages with short-lived cyclic garbage: they keep the collector on; and they
    leave when the build process is gone (``_leave_with_parent``)."""
    if current_process().name != "MainProcess":
        gc.enable()
        _leave_with_parent()


PARENT_CHECK_SECONDS = 0.5


def _leave_with_parent() -> None:
    """End this worker soon after the process that started it is gone.  A build killed outright (SIGKILL, the
    out-of-memory killer) cannot shut its pool down, and its workers would wait for work forever, holding their
    memory and the output's lock, which they inherited with the rest of the build's open files: every later
    build of that output would stop with "another site-builder build is writing this output".  A thread notes
    the parent at start and exits the process once it has another (orphans are adopted by another process).
    The parent is the build process (fork) or the forkserver, which ends with it.  A worker forked just as the
    build was killed may start after it is gone, already adopted: it knows the build's pid from before the fork
    (``_imap``), and leaves at once if its parent is another process."""
    parent = os.getppid()
    build_pid = _worker.get("build_pid")  # (set before forking; absent in a forkserver's children)
    if build_pid is not None and parent != build_pid:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(1)  # (nothing of this process's to clean up: the next build removes what a killed one left)

    threading.Thread(target=watch, name="site-builder parent watch", daemon=True).start()


def _init_inspect(trust: TrustSet, max_bytes: int) -> None:
    _in_worker_process()
    _worker["trust"] = trust
    _worker["max_bytes"] = max_bytes


def _inspect_file(item: InputFile) -> Inspection:
    try:
        raw = read_bytes(item.path, _worker["max_bytes"])
    except FileReadError as exc:
        return rejected(item.rel, exc.check, exc.reason)
    return by_reference(inspect_bytes(item.rel, raw, _worker["trust"]))  # the words stay out of the build


def _init_render(config: SiteConfig, dirs: list[Path], trust: TrustSet, staging_root: Path, search: bool,
                 build_key: str, compiled: CompiledTemplates | None, spare_root: Path | None = None) -> None:
    """*spare_root*: the twin the build links (``_renders_everything``), where each record's files are linked as
    soon as they are written."""
    _in_worker_process()
    if _worker.get("renderer_key") != build_key:  # same key: same templates and settings, reuse the compiled ones
        _worker["renderer"] = SiteRenderer(config, dirs, trust, search, compiled)
        _worker["renderer_key"] = build_key
    _worker["staging"] = StagingTree(staging_root)
    _worker["spare"] = StagingTree(spare_root) if spare_root is not None else None


@dataclass(frozen=True)
class RecordTask:
    source: str | Path
    inspection: Inspection
    addresses: int  # bit mask of the record's own short addresses (pages.own_addresses): expanded in the worker,
    # since 100,000 records' addresses as strings are ~90 MB held for the whole render stage


@quick_pickling
@dataclass(frozen=True, slots=True)
class RecordFiles:
    """What a worker reports of one record it rendered."""

    pith_id: str
    files: str  # as the cache keeps them (``record_unit_files``); "" if none were written
    pages: int  # how many of them are pages
    error: str | None  # why none were written: the bytes changed after they were verified
    row: bytes | None  # the record's row in lists
    twin_lost: bool = False  # the files could not be linked in the twin: the build must discard it


def _render_record(task: RecordTask) -> RecordFiles:
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
    staging: StagingTree = _worker["staging"]
    written = []
    raw_at = None  # where the bundle's bytes were first written: its second path links to it
    bundle = orjson.loads(raw)
    summary = inspection.summary.with_words(paper_text(bundle))  # (the build holds them by reference)
    for rel, data in paper_files(_worker["renderer"], raw, bundle, summary, inspection.checks, inspection.warnings,
                                 task.addresses):
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
    spare: StagingTree | None = _worker["spare"]
    if spare is not None:
        try:
            spare.mirror(written, staging.root)
        except OSError:
            _worker["spare"] = None  # (the build discards the twin once the workers are done)
            twin_lost = True
    return RecordFiles(inspection.pith_id, files, pages, None, _worker["renderer"].row_of(summary), twin_lost)


def inspect_files(items: list[InputFile], trust: TrustSet, max_bytes: int = DEFAULT_MAX_BYTES, jobs: int = 0,
                  progress: Callable[[str, int, int], None] | None = None) -> list[Inspection]:
    """Verify *items* on all cores (or *jobs* processes), results in order, as a build does but without building
    (``site-builder verify``).  An inspection's words are left out, as in a build."""
    return _map(_inspect_file, _init_inspect, (trust, max_bytes), items, Workers(jobs, progress), "verify",
                [i.path for i in items])


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system has one (``taskset``, a container's
    cpuset), which ``os.cpu_count()`` ignores; else every core."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _map(fn, init, initargs, items: list, workers: Workers, stage: str, reads: Sequence = ()) -> list:
    """Map in worker processes (fork) when there is enough work, else in this process; order kept.  *reads*:
    the file each item reads, in order, for the kernel to read ahead (``Prefetcher``)."""
    return list(_imap(fn, init, initargs, items, workers, stage, reads))


def _imap(fn, init, initargs, items: list, workers: Workers, stage: str, reads: Sequence = ()) -> Iterator:
    """``_map`` yielding each result as it comes (in order), so a caller that digests results one by one does
    not hold them all: 100,000 records' lists of written files are ~100 MB."""
    pool = None
    progress = workers.progress
    processes = workers.processes
    if len(items) >= PARALLEL_THRESHOLD and processes > 1:  # (one worker would only add the hand-over)
        _worker["build_pid"] = os.getpid()  # (forked workers compare it with their parent: _leave_with_parent)
        try:
            pool = ProcessPoolExecutor(processes, mp_context=get_context(workers.mp_context), initializer=init,
                                       initargs=initargs)
        except (NotImplementedError, OSError):
            pool = None  # no usable semaphores here (some sandboxes, some users): work in this process
    if pool is None:
        init(*initargs)
        for i, item in enumerate(items):
            yield fn(item)
            if progress:
                progress(stage, i + 1, len(items))
        return
    chunk = max(1, min(256, len(items) // (processes * 8) or 1))
    # Forked workers share this process's memory (100,000 records: ~1 GB) until they touch it; their garbage
    # collector would touch every object and so copy it all.  Frozen objects are left alone by it.
    gc.freeze()
    prefetcher = None
    try:
        with pool:
            results = pool.map(fn, items, chunksize=chunk)  # the workers are forked by now: a thread may start
            # Ahead of the results taken by what the workers may be working on (a chunk each, in order), and two
            # chunks more.
            prefetcher = Prefetcher(reads, ahead=chunk * (processes + 2)).start()
            for i, result in enumerate(results):
                prefetcher.taken = i
                yield result
                if progress and (i % 100 == 0 or i + 1 == len(items)):
                    progress(stage, i + 1, len(items))
    except BrokenProcessPool:
        raise WorkerLostError(stage) from None
    finally:
        if prefetcher is not None:
            prefetcher.stop()
        gc.unfreeze()


def _cpu_seconds() -> tuple[float, float]:
    """CPU time so far (user + system) of this process, and of the child processes it has waited for: the worker
    pools, which a stage shuts down (and so waits for) before it ends, and Pagefind."""
    t = os.times()
    return t.user + t.system, t.children_user + t.children_system


class _StageClock:
    """Records how long each stage took, and the CPU time this process and its workers spent in it (the
    benchmark and ``build --verbose`` print these): a stage whose workers' CPU is near its wall time times the
    cores is bound by the CPU, one far below it waits for the disk."""

    def __init__(self, timings: dict[str, float], cpu: dict[str, tuple[float, float]]):
        self.timings = timings
        self.cpu = cpu
        self.last = time.perf_counter()
        self.last_cpu = _cpu_seconds()

    def lap(self, stage: str) -> None:
        now, cpu = time.perf_counter(), _cpu_seconds()
        self.timings[stage] = self.timings.get(stage, 0.0) + now - self.last
        main, workers = self.cpu.get(stage, (0.0, 0.0))
        self.cpu[stage] = (main + cpu[0] - self.last_cpu[0], workers + cpu[1] - self.last_cpu[1])
        self.last, self.last_cpu = now, cpu


@dataclass
class PreviousSite:
    build_id: str | None
    published: dict[str, PublishedBefore]


def read_previous_site(output: Path) -> PreviousSite:
    """What the site in *output* published, from its verification.json (empty if unreadable)."""
    try:
        build_id, found, _ = manifest_claims(read_bytes(output / MARKER, MAX_MANIFEST_BYTES))
        return PreviousSite(build_id, found)
    except (FileReadError, ValueError):
        return PreviousSite(None, {})


def default_cache_dir(output: Path) -> Path:
    output = Path(os.path.abspath(output))
    return output.parent / ".site-builder-cache" / output.name


def _inspect_all(options: BuildOptions, cache: BuildCache,
                 found: list[InputFile]) -> tuple[list[Inspection], list[Inspection], dict]:
    """Inspections for every found file (cached where the bytes and keys are unchanged); also the new ones."""
    trust_id = options.trust.identity()
    memo = options.memory.inputs if options.memory is not None else {}
    results: dict[str, Inspection] = {}
    rest = []
    for f in found:  # serve: a file with the stat it had last build has the result it had
        hit = memo.get(f.rel)
        if hit is not None and hit[0] == f.sig and hit[1] == trust_id:
            results[f.rel] = hit[2]
        else:
            rest.append(f)
    known_sha = {f.rel: cache.file_sha(f.rel, f.sig) for f in rest}
    cached = cache.inspections([s for s in known_sha.values() if s], trust_id)
    todo = []
    for f in rest:
        hit = cached.get(known_sha[f.rel] or "")
        if hit is not None and hit.rel == f.rel:
            results[f.rel] = hit
        elif hit is not None:
            results[f.rel] = Inspection(f.rel, hit.sha256, hit.size, hit.check, hit.reason, hit.checks, hit.warnings,
                                        hit.summary)
        else:
            todo.append(f)
    fresh = [compact(i) for i in
             _map(_inspect_file, _init_inspect, (options.trust, options.max_bytes), todo, options.workers, "verify",
                  [f.path for f in todo])]
    for inspection in fresh:
        results[inspection.rel] = inspection
    file_index = {f.rel: (f.sig, results[f.rel].sha256) for f in found if results[f.rel].sha256}
    if options.memory is not None:
        options.memory.inputs = {f.rel: (f.sig, trust_id, results[f.rel]) for f in found}
    return [results[f.rel] for f in found], fresh, file_index


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
    clock = _StageClock(report.timings, report.cpu)
    slot = OutputSlot(options.output)
    slot.check_usable()
    bundles_abs = options.bundles.resolve()
    if slot.output == bundles_abs or slot.output in bundles_abs.parents:
        raise OutputError(f"{slot.output}: the output folder must not contain the bundles folder")
    dirs = template_dirs(options.templates)
    about = None
    if options.about_file is not None and options.about_file.is_file():
        about = options.about_file.read_text("utf-8")
    build_key = _hash(builder_identity(), options.trust.identity(), templates_identity(dirs), repr(options.config),
                      about, options.max_bytes, source_date(), options.search)

    indexer = pagefind_version() if options.search else None  # (the search indexes' keys name it)
    slot.acquire()
    cache = _open_cache(options, report, load=False)  # waits while the last build's detached saver writes it
    clock.lap("start")
    try:
        if options.listing is not None:
            found, skipped = options.listing.found, options.listing.skipped
        else:
            found, skipped = discover(options.bundles, output=slot.output)
        static, static_warnings = _static_files(options.static_dir)
        static_files = static_unit(static) if static else None  # (a unit of the site, and an input of the build)
        deployed, deployed_manifest, deployed_lines = _read_deployed(options)

        @functools.cache
        def input_fingerprint() -> str:  # the inputs by stat; computed only when needed, once (10,000 entries)
            return _hash(build_key, [(f.rel, f.sig) for f in found], [(x.rel, x.reason) for x in skipped],
                         static_files.material if static_files else None, static_warnings, indexer,
                         deployed_manifest.sha256 if deployed_manifest else None)
        clock.lap("discover")
        edited = _edited_mirrors(cache, slot.output)  # mirrored bundles changed in the output since it was built
        # The quick no-op check is for separate processes; serve, with everything in memory, plans anyway
        # (and writes nothing if nothing changed), which also fills the memory on its first build.
        if options.memory is None and not edited and \
                _unchanged_since_last_build(cache, input_fingerprint(), slot, report):
            return report
        report.warnings.extend(static_warnings + deployed_lines)
        cache.load()  # (~2 million objects at 100,000 records: build() has paused the cyclic collector)
        inspections, fresh, file_index = _inspect_all(options, cache, found)
        inspections = sorted([rejected(s.rel, s.check, s.reason) for s in skipped] + inspections, key=lambda i: i.rel)
        paths = {f.rel: f.path for f in found}
        clock.lap("verify")

        previous = _previous_site(options, slot)
        clock.lap("previous_site")
        selection = _select(options, inspections, paths)
        _refuse_rollbacks(selection, previous, slot, options, report)
        if deployed_manifest is not None:
            _refuse_deployed_rollbacks(selection, deployed, deployed_manifest, options, report, scratch)
        published = [c.inspection.summary for c in selection.published.values()]  # in pith-id order
        clock.lap("select")
        plan = _plan_redirects(options, published)
        clock.lap("plan_addresses")
        record_keys = _record_keys(options, build_key, selection, plan)
        clock.lap("record_keys")

        # Everything the output depends on is known now; if it is what the current site was built from,
        # there is nothing to do (and nothing is written).
        renderer = _renderer(options, dirs, build_key, cache)
        catalog = _catalogue(options, published)
        layout = search_layout(dirs) if options.search else None
        shards = _search_shards(options, layout, selection.published)
        collection = collection_units(renderer, catalog, plan.shared, options.trust, source_date(), about,
                                      options.memory.unit_rows if options.memory is not None else None, static_files,
                                      [s.folder for s in shards])
        clock.lap("plan_collection")
        units = _units_plan(build_key, record_keys, published, collection, shards, indexer, options)
        planned_search = {s.unit: units[s.unit][0] for s in shards}  # what the indexes would be made under
        if options.defer_search and planned_search:
            live_search = {name: key for name, (key, _) in (cache.units(previous.build_id) or {}).items()
                           if _is_search_unit(name)}
            # (the same shards, to keep the search page's links right; their indexes to be made again)
            if live_search.keys() == planned_search.keys() and live_search != planned_search:
                units.update((name, (key, "")) for name, key in live_search.items())  # (the build id says so)
                report.search_behind = True
        _record_outcomes(report, inspections, selection, {}, options.memory)
        build_id, report_doc = _identify(build_key, report, units, options)
        clock.lap("identify")
        if previous.build_id == build_id and cache.units(previous.build_id) is not None and not edited:
            report.changed = False
            _remember(lambda: cache.save_inputs(file_index, fresh, options.trust.identity()), cache, options,
                      report, input_fingerprint, _stat_sig(slot.output / MARKER),
                      lambda: _tidy_memory(options.memory, report, cache.units(build_id) or {}))
            clock.lap("save_cache")
            if options.one_shot:
                _LEFT_FOR_EXIT[:] = [options.memory, cache, inspections, units]
            return report
        live_units = cache.units(previous.build_id) or {}
        if edited:  # those records' files are written again, into a fresh tree (the twin shares their inodes)
            live_units = {name: ("(edited in the output)", files) if name.removeprefix("record:") in edited
                          else (key, files) for name, (key, files) in live_units.items()}
        tree, kept, stale_dirs = _prepare_tree(slot, cache, units, live_units, trust_twin=not edited)
        spare = None
        try:
            if options.link_twin and options.use_cache and _renders_everything(tree, slot, units, live_units):
                report.twin_note = _twin_shortfall(slot, len(selection.published), len(collection))
                spare = None if report.twin_note else _new_twin(slot)
            clock.lap("prepare_tree")

            place = lambda name, key: _place_unit(name, key, tree, kept, live_units, slot.output)
            to_render = []
            for pid, chosen in selection.published.items():
                reused = place(f"record:{pid}", record_keys[pid])
                if reused is None:
                    to_render.append(RecordTask(chosen.source, chosen.inspection, plan.per_record.get(pid, 0)))
                else:
                    units[f"record:{pid}"] = (record_keys[pid], reused)
                    report.files_reused += file_count(reused)
            changed = {}
            with closing(_imap(_render_record, _init_render,
                               (options.config, dirs, options.trust, tree.root, options.search, build_key,
                                _compiled_templates(cache), spare.root if spare is not None else None),
                               to_render, options.workers, "render", [t.source for t in to_render])) as results:
                # (closed, which stops the workers, on any error)
                twin_lost = False
                for done in results:
                    pid = done.pith_id
                    twin_lost = twin_lost or done.twin_lost
                    if done.error:
                        changed[pid] = done.error
                        units.pop(f"record:{pid}", None)
                        continue
                    renderer.keep_row(selection.published[pid].inspection.summary.row_digest, done.row)
                    units[f"record:{pid}"] = (record_keys[pid], done.files)
                    report.files_written += file_count(done.files)
                    report.pages_written += done.pages
                    if not report.rendered_more:  # (once its list is full, the files need not be listed)
                        report.note_rendered(split_files(done.files))
            if twin_lost and spare is not None:  # (deleted now that no worker links in it, before the build goes on)
                slot.discard(spare)
                spare = None
            clock.lap("render_records")

            papers = [s for s in published if s.pith_id not in changed]
            if changed:  # a file changed under us: its short addresses must not point at a missing page
                slot.assume_shared()  # (the units are planned again: the retired tree's may match them now)
                report.outcomes.clear()
                _record_outcomes(report, inspections, selection, changed)
                plan = plan_redirects(papers)
                catalog = catalogue(papers)
                shards = _search_shards(options, layout, {p.pith_id: p for p in papers})
                collection = collection_units(renderer, catalog, plan.shared, options.trust, source_date(), about,
                                              static_files=static_files, search_folders=[s.folder for s in shards])
                units = {u: v for u, v in units.items() if u.startswith("record:")}
                units.update({u: v for u, v in _units_plan(build_key, record_keys, papers, collection, shards,
                                                           indexer, options).items() if not u.startswith("record:")})
                planned_search = {s.unit: units[s.unit][0] for s in shards}  # (planned afresh: indexed now)
            renamed = False  # a search unit's key is not the one planned (below)
            # (feeds show the words of records, which the build holds by reference: read from the tree's bundles)
            with text_source(_words_in(tree, options.max_bytes)):
                for unit in collection:
                    key = units[unit.name][0]
                    reused = place(unit.name, key)
                    if reused is None:
                        rendered = []
                        for rel, data in unit.render():
                            tree.write(rel, data)
                            rendered.append(rel)
                        report.files_written += len(rendered)
                        report.pages_written += sum(1 for rel in rendered if rel.endswith(".html"))
                        report.note_rendered(rendered)
                        reused = join_files(rendered)
                    else:
                        report.files_reused += file_count(reused)
                    units[unit.name] = (key, reused)
                    spare = _mirror(slot, spare, tree, reused)
                clock.lap("render_collection")

                to_index = []
                for shard in shards:
                    key = units[shard.unit][0]
                    reused = place(shard.unit, key)
                    if reused is None and key != planned_search[shard.unit]:  # behind, and the live index is not
                        key = planned_search[shard.unit]  # to be had: make it now, under its own key (which the
                        renamed = True  # build id must name)
                        reused = place(shard.unit, key)
                    if reused is None:
                        to_index.append(shard)
                    else:
                        units[shard.unit] = (key, reused)
                        spare = _mirror(slot, spare, tree, reused)
                if to_index:
                    indexing = time.perf_counter()
                    # The progress display, refreshed while Pagefind runs: shards made of how many, or for one
                    # index, a pulsing bar and the seconds it takes (~10 s at 10,000 records).
                    waiting = None
                    if options.progress is not None:
                        total = len(to_index) if len(to_index) > 1 else None
                        waiting = lambda done: options.progress(SEARCH_STAGE, done, total)  # noqa: E731
                        waiting(0)
                    for shard in to_index:
                        shutil.rmtree(tree.root / shard.folder, ignore_errors=True)
                    # A Pagefind on each core: it uses more than one, but not two (and a shard's memory each).
                    index_search(tree.root, [(shard.glob, shard.folder) for shard in to_index],
                                 options.workers.processes, waiting)
                    for shard in to_index:
                        reused = join_files(files_under(tree.root, shard.folder))
                        units[shard.unit] = (planned_search[shard.unit], reused)
                        spare = _mirror(slot, spare, tree, reused)
                    if options.progress is not None:
                        options.progress(SEARCH_STAGE, len(to_index), len(to_index))
                    report.search_seconds = time.perf_counter() - indexing  # (the summary line names it)
                    report.note_rendered(["search/index.html"])  # (the page whose results come from the index)
                report.search_behind = any(units[s.unit][0] != planned_search[s.unit] for s in shards)
                if shards:
                    clock.lap("search_index")

                if changed or renamed:  # the outcomes and unit keys differ from those planned
                    build_id, report_doc = _identify(build_key, report, units, options)
                tree.write_chunks(MARKER, report_doc.chunks())  # (its build id differs from the live one's)
                report.note_rendered([MARKER])
                written = [MARKER]
                report.files_written += 1
                for rel, chunks in report_doc.pages():
                    tree.write_chunks(rel, chunks)
                    written.append(rel)
                    report.files_written += 1
                for rel, data in report_files(renderer, catalog, report_doc, about is not None):
                    tree.write(rel, data)
                    written.append(rel)
                    report.files_written += 1
                    report.pages_written += rel.endswith(".html")
                    if _differs(slot.output / rel, data):
                        report.note_rendered([rel])
                units["report"] = ("", join_files(written))
                spare = _mirror(slot, spare, tree, units["report"][1], copy=True)
                report.removed = sorted(f"pith/{pid}/index.html" for pid in previous.published
                                        if pid not in selection.published)
                _prune_empty_dirs(tree.root, stale_dirs)
                clock.lap("render_collection")
            if tree.root == slot.prev:
                slot.publish_prev()
            else:
                slot.publish(tree, spare)
                spare = None
                # Unless this build linked in files of the old site, all of the new one's are new: deleting an
                # older tree cannot change any (the build need not wait for it).
                slot.shares_files = tree.holds_older_files
            clock.lap("swap")
            if options.on_published is not None:
                options.on_published(report)
            marker_sig = _stat_sig(slot.output / MARKER)

            def upkeep() -> None:  # (the previous site is what the next build would read from verification.json)
                options.memory.previous_site = (marker_sig, _published_by(build_id, report))
                _tidy_memory(options.memory, report, units)

            def write_cache() -> None:
                cache.save(file_index, fresh, options.trust.identity(), units, build_id,
                           keep_build_id=previous.build_id)
                cache.save_rows(build_key, _shown_rows(renderer, catalog))
                cache.save_mirrored(_mirrored_now(slot.output, selection, changed))
            _remember(write_cache, cache, options, report, input_fingerprint, marker_sig, upkeep)
            clock.lap("save_cache")
            if options.one_shot:
                _LEFT_FOR_EXIT[:] = [options.memory, cache, inspections, units, selection, catalog, collection]
        except BaseException:
            if tree.root != slot.prev:
                slot.discard(tree)
            if spare is not None:
                slot.discard(spare)
            raise
    finally:
        if options.memory is None:
            cache.close()
        else:
            cache.release_lock()  # serve keeps the cache open between builds, not locked
        slot.release()
        report.seconds = time.perf_counter() - started
    return report


def _remember(write_cache: Callable[[], None], cache: BuildCache, options: BuildOptions, report: BuildReport,
              input_fingerprint: Callable[[], str], marker_sig: str | None, upkeep: Callable[[], None]) -> None:
    """Save what the next build reads (the cache via *write_cache*, the no-op answer, and serve's memory brought
    up to date by *upkeep*), in a detached process for a one-shot build (``build`` on the command
    line): the new site is live already, and saving 10,000 records' worth takes longer than the rest of a
    one-file rebuild.  The saver inherits the cache's lock, so the next build waits for it before reading the
    cache; a saver that fails leaves the previous cache, which can only cost the next build time.  The saver
    touches nothing in the output: when ``build`` returns, the site is final (a deploy step may archive it at
    once, and tar fails on a file whose status changes while it reads it)."""
    def save() -> None:
        write_cache()
        if not report.search_behind:  # else the next build, even with these inputs, has the index to make
            cache.save_quick(input_fingerprint(), marker_sig, report)
        if options.memory is not None:
            upkeep()

    if options.one_shot and _start_detached(save, cache):
        report.saved_in_background = True
        return
    save()


def _start_detached(save: Callable[[], None], cache: BuildCache) -> bool:
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
            if os.fork() == 0:  # the grandchild: no parent waits for it, so it never becomes a zombie
                os.setsid()
                _keep_only_fd(cache.lock_fd)  # drops the output lock and the caller's pipes (which it would hold open)
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


def _keep_only_fd(keep: int) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    limit = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024
    os.closerange(3, keep)
    os.closerange(keep + 1, limit)


def _tidy_memory(memory: BuildMemory, report: BuildReport, units: dict) -> None:
    """Drop what no longer belongs to the build (it would pin old results in memory), and
    keep this build's report lines for the next (the build wrote them without keeping them)."""
    memory.report_rows.keep_lines(report.outcomes)
    memory.unit_rows = {k: v for k, v in memory.unit_rows.items() if k in units}
    memory.unit_keys = {k: v for k, v in memory.unit_keys.items() if k in units}


def _mirror_signature(path: str) -> str | None:
    """What changes when a mirrored bundle.json is edited in place: size, mtime and inode (not the ctime, which
    the twin's hard links change)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"


def _edited_mirrors(cache: BuildCache, output: Path) -> set[str]:
    """The records whose mirrored bundle.json in the output no longer holds the verified bytes: a file whose
    signature differs from the one recorded is hashed, and only one whose digest differs counts (~10,000 stats
    at 10,000 records)."""
    edited = set()
    root = os.fspath(output)
    for pid, (sig, sha) in cache.mirrored().items():
        path = os.path.join(root, "pith", pid, "bundle.json")
        if _mirror_signature(path) == sig:
            continue
        try:
            data = read_bytes(path)
        except FileReadError:
            data = None
        if data is None or hashlib.sha256(data).hexdigest() != sha:
            edited.add(pid)
    return edited


def _mirrored_now(output: Path, selection: Selection, changed: dict) -> dict[str, tuple[str, str]]:
    """Each published record's mirrored bundle.json as this build left it: its signature and verified digest."""
    root = os.fspath(output)
    found = {}
    for pid, chosen in selection.published.items():
        if pid in changed:
            continue
        sig = _mirror_signature(os.path.join(root, "pith", pid, "bundle.json"))
        if sig is not None:
            found[pid] = (sig, chosen.inspection.sha256)
    return found


def _shown_rows(renderer: SiteRenderer, catalog: Catalogue) -> dict[str, bytes]:
    """The list rows of the records the site shows (those of removed or changed records are not kept)."""
    rows = renderer.rows
    return {p.row_digest: rows[p.row_digest] for p in catalog.papers if p.row_digest in rows}


def _words_in(tree: StagingTree, max_bytes: int) -> Callable[[str, str], PaperText]:
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


def _differs(path: Path, data: bytes) -> bool:
    try:
        return path.read_bytes() != data
    except OSError:
        return True


def _stat_sig(path: Path) -> str | None:
    try:
        return stat_signature(os.stat(path))
    except OSError:
        return None


def _previous_site(options: BuildOptions, slot: OutputSlot) -> PreviousSite:
    memory = options.memory
    sig = _stat_sig(slot.output / MARKER)
    if memory is not None and sig is not None and memory.previous_site is not None and memory.previous_site[0] == sig:
        return memory.previous_site[1]
    previous = read_previous_site(slot.output)
    if memory is not None and sig is not None:
        memory.previous_site = (sig, previous)
    return previous


def prepare_spare_tree(options: BuildOptions, cancelled: Callable[[], bool] = lambda: False) -> bool:
    """Give the output a twin made of hard links, so that the next change updates it in place.

    Incremental builds update the tree beside the output (the previous site) and swap it in.  Right after a
    first build there is no such tree, and the next change would have to link a whole new one (100,000 files:
    seconds); ``serve`` calls this while the user is still reading, so that the first edit is fast.
    Returns True if a twin was made.  Safe to interrupt: an unfinished twin is a staging folder, removed later.
    """
    slot = OutputSlot(options.output)
    slot.check_usable()
    slot.acquire()
    cache = None
    try:
        cache = _open_cache(options, BuildReport())
        units = cache.units(read_build_id(slot.output))
        if units is None:
            return False
        prev_units = _twin_units(slot, cache)
        if prev_units is not None and not _mostly_stale(prev_units, _kept_and_stale(prev_units, units)[1]):
            return False  # a twin the next change can update in place (after a template edit it could not)
        records = sum(1 for name in units if name.startswith("record:"))
        if _twin_shortfall(slot, records, len(units) - records):
            return False
        staging = slot.new_staging()
        try:
            if not _link_twin(slot, units, staging, cancelled):
                raise OSError("cancelled, or a file could not be linked")
            slot.retire_prev()
            staging.root.rename(slot.prev)
        except OSError:
            slot.discard(staging)
            return False
        except BaseException:
            slot.discard(staging)
            raise
        return True
    finally:
        if cache is not None and options.memory is None:
            cache.close()
        elif cache is not None:
            cache.release_lock()
        slot.release()


def _static_files(folder: Path | None) -> tuple[list[StaticFile], list[str]]:
    """The static folder's files the site may take, and a warning for each one it may not."""
    files, problems = read_static_files(folder)
    warnings = [f"{folder.name}/{problem}; not copied" for problem in problems]
    allowed = []
    seen: dict[str, str] = {}  # case-folded path -> the file that has it (one per name on a case-insensitive host)
    for f in files:
        refused = refused_static_path(f.rel)
        other = seen.get(f.rel.casefold())
        if refused is None and other is not None:
            refused = f"differs from {other} only in letter case (one file on a case-insensitive host)"
        if refused is None:
            allowed.append(f)
            seen[f.rel.casefold()] = f.rel
        else:
            warnings.append(f"{folder.name}/{f.rel}: {refused}; not copied")
    return allowed, warnings


def _published_by(build_id: str, report: BuildReport) -> PreviousSite:
    published = {}
    for o in report.outcomes:
        summary = o.inspection.summary
        if o.status == PUBLISHED and summary is not None and o.inspection.sha256:
            published[summary.pith_id] = PublishedBefore(summary.pith_id, o.inspection.sha256, summary.built_at,
                                                         summary.event_count)
    return PreviousSite(build_id, published)


def _select(options: BuildOptions, inspections: list[Inspection], paths: dict) -> Selection:
    """select() over the verified files.  In memory, when a few files came, went or changed since the last
    build and no record has two of them, the last selection is patched instead of recomputed."""
    memory = options.memory
    last = memory.selection if memory is not None else None
    memo = {c.inspection.rel: c for c in last[0]} if last is not None else {}
    candidates = []
    for i in inspections:
        if i.verified:
            c = memo.get(i.rel)
            if c is None or c.inspection is not i or c.source != paths[i.rel]:
                c = Candidate(i, paths[i.rel])
            candidates.append(c)
    if memory is None:
        return select(candidates)
    selection = None
    if last is not None and not last[1].superseded:
        selection = _patched_selection(memo, last[1], candidates)
    if selection is None:
        selection = select(candidates)
    # Kept as a copy: the caller goes on to refuse rollbacks, which edits the selection it gets.
    memory.selection = (candidates, Selection(dict(selection.published), dict(selection.superseded)))
    return selection


def _patched_selection(was: dict[str, Candidate], selected: Selection,
                       candidates: list[Candidate]) -> Selection | None:
    """``select(candidates)`` from the last selection, which superseded nothing (so each of its candidates was
    published under its own record), when at most 64 files came, went or changed; None when a record now has
    two candidates (then select() has to choose)."""
    now = {c.inspection.rel: c for c in candidates}
    gone = [c for rel, c in was.items() if now.get(rel) is not c]
    came = [c for rel, c in now.items() if was.get(rel) is not c]
    if len(gone) + len(came) > 64:
        return None
    published = dict(selected.published)
    for c in gone:
        del published[c.inspection.pith_id]
    for c in came:
        if c.inspection.pith_id in published:
            return None
        published[c.inspection.pith_id] = c
    return Selection(dict(sorted(published.items())) if came else published)  # in pith-id order, as select()


def _plan_redirects(options: BuildOptions, published: list[PaperSummary]) -> RedirectPlan:
    """The short-address plan; in memory it is reused while no record's id, arXiv id or version changed, and
    re-planned only around the records that came or went when a few did."""
    memory = options.memory
    if memory is None:
        return plan_redirects(published)
    shape = [(p.pith_id, p.arxiv_id, p.version) for p in published]  # all that plan_redirects looks at
    if memory.redirects is not None and memory.redirects[0] == shape:
        old = memory.redirects[1]
        if not old.shared:
            return old
        current = {p.pith_id: p for p in published}  # list pages show the records as they are now
        return RedirectPlan(old.per_record, [(folder, label, [current[t.pith_id] for t in targets])
                                             for folder, label, targets in old.shared])
    touched = set(shape).symmetric_difference(memory.redirects[0]) if memory.redirects is not None else None
    if touched is not None and len(touched) <= 64:  # records came or went: re-plan only their neighbourhood
        plan = replan_redirects(memory.redirects[1], published, touched)
    else:
        plan = plan_redirects(published)
    memory.redirects = (shape, plan)
    return plan


def _catalogue(options: BuildOptions, published: list[PaperSummary]) -> Catalogue:
    """Listings in order; in memory the order is reused while no record's id, date or categories changed, and
    patched when a few records came, went or moved."""
    memory = options.memory
    if memory is None:
        return catalogue(published)
    shape = [(p.pith_id, p.submitted_at, p.primary_cat, p.cross_cats) for p in published]
    if memory.catalogue is not None and memory.catalogue[0] == shape:
        old = memory.catalogue[1]
        shown = {p.pith_id: p for p in old.papers}
        newer = [p for p in published if shown[p.pith_id] is not p]  # same record, new bundle
        if not newer:
            return old
        # Entries are found by identity (dataclass == would compare every field), all in one pass per listing:
        # a pull that renews 40,000 of 100,000 records must not search a listing once per record.
        renewed = {id(shown[p.pith_id]): p for p in newer}

        def patched(listing: Listing) -> Listing:
            return replace(listing, papers=[renewed.get(id(q), q) for q in listing.papers])
        everything = patched(old.everything)
        in_category, in_year = groups(newer)
        categories = [patched(c) if c.key in in_category else c for c in old.categories]
        years = [patched(y) if y.key in in_year else y for y in old.years]
        result = Catalogue(everything.papers, everything, categories, years)
        if "record_paths" in old.__dict__:  # same records: same pages (a cached_property carried over)
            result.__dict__["record_paths"] = old.record_paths
    elif memory.catalogue is not None and len(moved := _moved(memory.catalogue[0], shape)) <= 64:
        result = recatalogue(memory.catalogue[1], published, moved)  # a few records came, went or moved
    else:
        result = catalogue(published)
    memory.catalogue = (shape, result)
    return result


def _moved(before: list[tuple], now: list[tuple]) -> set[str]:
    """The pith ids of the entries (id first) that are in one list and not in the other."""
    return {entry[0] for entry in set(before).symmetric_difference(now)}


def _record_keys(options: BuildOptions, build_key: str, selection, plan: RedirectPlan) -> dict[str, str]:
    """A record's key covers the build key, its bytes and its short addresses."""
    memory = options.memory
    memo = memory.record_keys[1] if memory is not None and memory.record_keys and \
        memory.record_keys[0] == build_key else {}
    keys, seen = {}, {}
    for pid, chosen in selection.published.items():
        sha, redirects = chosen.inspection.sha256, plan.per_record.get(pid, 0)  # (the bytes give the record's ids)
        hit = memo.get(pid)
        if hit is not None and hit[0] == sha and hit[1] == redirects:
            key = hit[2]
        else:
            key = hashlib.sha256(f"{build_key}\0{sha}\0{redirects!r}".encode()).hexdigest()
        keys[pid] = key
        seen[pid] = (sha, redirects, key)
    if memory is not None:
        memory.record_keys = (build_key, seen)
    return keys


def _cache_folder(options: BuildOptions) -> Path | None:
    """Where the cache and the compiled templates live (None: no cache)."""
    return (options.cache_dir or default_cache_dir(options.output)) if options.use_cache else None


def _compiled_templates(cache: BuildCache) -> CompiledTemplates | None:
    """Compiled templates kept beside the cache between processes, under the same user key (None: no cache)."""
    if cache.path is None or cache.user_key is None:
        return None
    return CompiledTemplates(cache.path.parent / "templates", cache.user_key)


def _cache_key(options: BuildOptions, report: BuildReport) -> CacheKey | None:
    """This user's cache key, or None (and a note saying why) where no cache can be kept safely."""
    if not options.use_cache:
        return None
    try:
        return user_cache_key()
    except CacheKeyUnavailable as e:
        report.cache_note = f"no build cache: {e}; every bundle is verified and every page rendered"
        return None


def _open_cache(options: BuildOptions, report: BuildReport, load: bool = True) -> BuildCache:
    folder = _cache_folder(options)
    path = folder / "cache.sqlite" if folder is not None else None
    memory = options.memory
    if memory is not None and memory.cache is not None and memory.cache.path == path and memory.cache.db is not None:
        memory.cache.take_lock()
        return memory.cache
    cache = BuildCache(path, load, _cache_key(options, report))
    if memory is not None:
        memory.close()
        memory.cache = cache
    return cache


def _renderer(options: BuildOptions, dirs: list[Path], build_key: str, cache: BuildCache) -> SiteRenderer:
    memory = options.memory
    if memory is not None and memory.renderer is not None and memory.renderer[0] == build_key:
        return memory.renderer[1]
    # List rows rendered with these templates and settings: kept in serve's memory, else in the cache.
    if memory is not None and memory.list_rows and memory.list_rows[0] == build_key:
        rows = memory.list_rows[1]
    else:
        rows = cache.list_rows(build_key)
    renderer = SiteRenderer(options.config, dirs, options.trust, options.search, _compiled_templates(cache),
                            rows)
    if memory is not None:
        memory.renderer = (build_key, renderer)
        memory.list_rows = (build_key, renderer.rows)
    if memory is not None:  # (serve: compile every template now, not during the first edit's rebuild)
        for name in renderer.env.list_templates(extensions=["html", "xml", "txt", "svg"]):
            try:
                renderer.env.get_template(name)  # compile now, not during the first edit's rebuild
            except (jinja2.TemplateError, UnicodeDecodeError, OSError):
                pass  # reported if and when a page uses it
    # Records rendered in this process (a few changed ones) use the same compiled templates.
    _worker["renderer"], _worker["renderer_key"] = renderer, build_key
    return renderer


def _unchanged_since_last_build(cache: BuildCache, input_fingerprint: str, slot: OutputSlot,
                                report: BuildReport) -> bool:
    """True when the inputs (by stat), settings, templates and keys are those of the site in the output.

    Then the build reports the previous outcomes and writes nothing; this is what makes a no-op rebuild
    of a large mirror take a fraction of a second.
    """
    quick = cache.quick(input_fingerprint, _stat_sig(slot.output / MARKER))
    if quick is None:
        return False
    try:
        report.outcomes = [FileOutcome(rejected(o["rel"], o["check"], o["reason"]) if o["check"] else
                                       Inspection(o["rel"], o["sha256"], 0, None, ""), o["status"], o["note"],
                                       o["pith_number"]) for o in quick["outcomes"]]
        report.warnings = list(quick["warnings"])
    except (KeyError, TypeError):
        report.outcomes, report.warnings = [], []
        return False
    report.changed = False
    return True


def _units_plan(build_key: str, record_keys: dict[str, str], papers: list[PaperSummary], collection: list,
                shards: list[SearchShard], indexer: str | None, options: BuildOptions) -> dict[str, tuple[str, str]]:
    """The key of every output unit (files are filled in as units are rendered or reused).

    A record's key covers its bytes and short addresses; a collection unit's key covers what it shows
    (listings show summaries only, so a new event on a record does not re-render any listing); a search index's,
    what it indexes and the Pagefind that makes it (*indexer*: the search page's Pagefind, the first shard's,
    reads the other shards' indexes, so all are made by one version)."""
    units: dict[str, tuple[str, str]] = {f"record:{p.pith_id}": (record_keys[p.pith_id], "") for p in papers}
    memo = options.memory.unit_keys if options.memory is not None else {}
    for unit in collection:  # materials are nested lists and tuples of str and int: repr() is exact and fast
        hit = memo.get(unit.name)
        if hit is not None and hit[0] == build_key and hit[1] == unit.material:
            key = hit[2]  # (comparing reuses the joined row strings: usually the very same objects)
        else:
            key = _hash(build_key, repr(unit.material))
            if options.memory is not None:
                memo[unit.name] = (build_key, unit.material, key)
        units[unit.name] = (key, "")
    for shard in shards:
        if shard.glob is None:  # Pagefind reads every page: any unit may hold what it indexes
            units[shard.unit] = (_hash(build_key, indexer, sorted(k for k, _ in units.values())), "")
        else:  # record pages alone, whose keys cover everything they show
            units[shard.unit] = (_hash(build_key, indexer, shard.folder, [record_keys[pid] for pid in shard.pith_ids]),
                                 "")
    return units


def _is_search_unit(name: str) -> bool:
    return name == "search" or name.startswith("search:")


def _search_shards(options: BuildOptions, layout: SearchLayout | None, published: dict) -> list[SearchShard]:
    """The search indexes of a site publishing *published* (pith id -> anything, in pith-id order), as the
    templates' *layout* asks (``plan_shards``); none without the search index (*layout* None)."""
    if layout is None:
        return []
    return plan_shards(published, layout.glob, options.config.search_shard_size, options.config.search_max_shards,
                       layout.merges_shards)


def _identify(build_key: str, report: BuildReport, units: dict, options: BuildOptions) -> tuple[str, ReportDocument]:
    """The build id names everything the output depends on; it is stored at the top of verification.json."""
    rows = options.memory.report_rows if options.memory is not None else None
    doc = report.document([k.key_id for k in options.trust.keys], source_date(), rows)
    # The units are in a deterministic order (records by pith id, then the collection in page order).
    build_id = _hash(build_key, json.dumps(doc.head, sort_keys=True), doc.identity(),
                     "\n".join([f"{u}\t{k}" for u, (k, _) in units.items()]))
    doc.head = {"build_id": build_id, **doc.head}
    return build_id, doc


def read_build_id(tree: Path) -> str | None:
    """The build id at the top of a tree's verification.json (read without parsing the whole report)."""
    try:
        with open(tree / MARKER, "rb") as f:
            head = f.read(300)
    except OSError:
        return None
    match = re.search(rb'"build_id":\s*"([0-9a-f]{64})"', head)
    return match.group(1).decode() if match else None


def _link_twin(slot: OutputSlot, units: dict, staging: StagingTree, cancelled: Callable[[], bool]) -> bool:
    """Fill *staging* with hard links to every file of the live tree (made of *units*); False if cancelled or
    a file could not be linked (the caller discards *staging*).  The report's files are copied instead: a link
    would change the live verification.json's ctime, by which the next build recognises the live site (its
    no-op check, its memory of what the site published)."""
    for n, (name, (_, files)) in enumerate(units.items()):
        if n % 256 == 0 and cancelled():
            return False
        try:
            staging.mirror(split_files(files), slot.output, copy=name == "report")
        except OSError:
            return False
    return True


def _prepare_tree(slot: OutputSlot, cache: BuildCache, units: dict, live_units: dict,
                  trust_twin: bool = True) -> tuple[StagingTree, dict, set[str]]:
    """The tree to build into: the previous tree, updated in place when the cache knows exactly what it holds
    (its stale files are removed here), else a fresh staging folder -- also when nearly every file changes, as
    after a template edit, where writing afresh beats removing the whole tree first."""
    prev = slot.prev
    prev_units = _twin_units(slot, cache) if trust_twin else None
    kept, stale = _kept_and_stale(prev_units or {}, units)
    if prev_units is None or _mostly_stale(prev_units, stale):
        # Of no use: its deletion starts now, beside the build.  The new site takes old files only from the live
        # one (its units whose key did not change), and the live site shares a file with this tree only through
        # a unit the two have alike (same key); a tree the cache does not know may share any.
        shares = prev_units is None or any(units.get(name, (None,))[0] == key == live_units.get(name, (None,))[0]
                                           for name, (key, _) in prev_units.items() if name != "report")
        slot.retire_prev(shares_files=shares)
        return slot.new_staging(), {}, set()
    (prev / MARKER).unlink()  # from here on the previous tree counts as unknown until it is swapped in
    root = str(prev)
    stale_dirs: set[str] = set()
    for files in stale:
        for rel in split_files(files):
            try:
                os.unlink(os.path.join(root, rel))
            except FileNotFoundError:
                pass
            stale_dirs.add(rel.rpartition("/")[0])
    return StagingTree(prev), kept, stale_dirs


def _renders_everything(tree: StagingTree, slot: OutputSlot, units: dict, live_units: dict) -> bool:
    """Whether this build writes a fresh tree that takes nothing from the live site (a first build, a template
    edit): then it links a spare twin of what it writes as it goes, so that the next change updates that twin in
    place instead of linking a whole new tree (seconds at 10,000 records) -- linked before the build returns,
    so that no file of the live site changes status after (a deploy step's tar reads them)."""
    if tree.root == slot.prev:
        return False
    return not any(live_units.get(name, (None,))[0] == key for name, (key, _) in units.items() if name != "report")


# What a record puts in the tree (``pages.record_files``): ten files, one a link, in seven folders.
RECORD_ENTRIES = 17


def _twin_shortfall(slot: OutputSlot, records: int, other_units: int) -> str:
    """Why the output's file system cannot take a twin of a site of *records* records and *other_units* other
    units ("" if it can): it needs the inodes for the site and its twin, and as much again.  On tmpfs every hard
    link takes an inode of its budget: a 100,000-record site and its twin need ~3.4 million, more than this VM's
    /dev/shm allowed, and the site's own files then failed for the twin's links.  A twin only saves the next
    build time, so where it might not fit it is not made."""
    try:
        fs = os.statvfs(slot.output.parent)
    except OSError:
        return ""
    needed = 2 * (RECORD_ENTRIES * records + 2 * other_units)
    if fs.f_files == 0 or fs.f_favail >= needed:  # (0: no inode budget, as on btrfs)
        return ""
    return (f"no twin linked: {slot.output.parent} has {fs.f_favail:,} inodes free, and a site this size with its "
            f"twin wants {needed:,}; the next build, which needs room for a second tree, may run out of them "
            f"(on tmpfs every hard link takes one: see df -i)")


def _new_twin(slot: OutputSlot) -> StagingTree | None:
    """An empty folder for the twin, or None where it cannot be made (the twin only saves the next build time)."""
    try:
        return slot.new_staging("-spare")  # (beside the tree being built)
    except OSError:
        return None


def _mirror(slot: OutputSlot, spare: StagingTree | None, tree: StagingTree, files: str,
            copy: bool = False) -> StagingTree | None:
    """Give *spare* (if the build links one) the unit's files of *tree* (hard links; copies with *copy*: the
    report's files, whose status the next build reads); None if one cannot be linked: the spare is then deleted
    before the build goes on, as deleting its links later would change the status of the site's files after the
    build returned."""
    if spare is None:
        return None
    try:
        spare.mirror(split_files(files), tree.root, copy)
    except OSError:
        slot.discard(spare)
        return None
    return spare


def _twin_units(slot: OutputSlot, cache: BuildCache) -> dict | None:
    """The units the twin tree (``.<output>.prev``) holds, if the cache knows them; None for no twin, or one it
    cannot vouch for (left half-updated by a killed build, or not made by a build)."""
    prev = slot.prev
    return cache.units(read_build_id(prev)) if prev.is_dir() and not prev.is_symlink() else None


def _kept_and_stale(prev_units: dict, units: dict) -> tuple[dict, list[str]]:
    """Of a tree holding *prev_units*: the units it holds as *units* has them (by key), and the files of the
    others (joined per unit)."""
    kept = {name: (key, files) for name, (key, files) in prev_units.items()
            if name != "report" and units.get(name, (None,))[0] == key}
    return kept, [files for name, (_, files) in prev_units.items() if name not in kept]


def _mostly_stale(prev_units: dict, stale: list[str]) -> bool:
    """Whether more than IN_PLACE_LIMIT of a tree's files are *stale*: then a fresh tree beats updating it.  The
    tree's files are counted only until they outnumber the stale ones enough: for a small change, a few units
    instead of all of them (counting 100,000 records' took 0.1 s of a one-bundle change)."""
    stale_files = sum(map(file_count, stale))
    total = 0
    for _, files in prev_units.values():
        total += file_count(files)
        if IN_PLACE_LIMIT * total >= stale_files:
            return False
    return stale_files > IN_PLACE_LIMIT * total


def _place_unit(name: str, key: str, tree: StagingTree, kept: dict, live_units: dict, output: Path) -> str | None:
    """Files of an unchanged unit (joined): already in the tree, or hard-linked from the live output; None: render
    it."""
    have = kept.get(name)
    if have is not None and have[0] == key:
        return have[1]
    live = live_units.get(name)
    if live is None or live[0] != key:
        return None
    linked = []
    live_root = os.path.join(os.fspath(output), "")
    for rel in split_files(live[1]):
        if not tree.reuse(rel, live_root + rel):  # (rel is checked before anything is made)
            for done in linked:  # could not reuse all of it: render the unit instead
                os.unlink(tree.path_for(done))
            return None
        linked.append(rel)
    return live[1]


def _prune_empty_dirs(root: Path, folders: set[str]) -> None:
    """Remove folders emptied by removed files (deepest first), up to the tree's root."""
    for folder in sorted(folders, key=lambda f: f.count("/"), reverse=True):
        while folder:
            try:
                os.rmdir(root / folder)
            except OSError:
                break
            folder = folder.rpartition("/")[0]


def _refuse_rollbacks(selection, previous: PreviousSite, slot: OutputSlot, options: BuildOptions,
                      report: BuildReport) -> None:
    """Never replace a newer published bundle by an older one: keep the previous site's copy (re-verified)."""
    for pith_id, chosen in list(selection.published.items()):
        prior = previous.published.get(pith_id)
        if prior is None or prior.sha256 == chosen.inspection.sha256 or not is_rollback(chosen.inspection, prior):
            continue
        kept_path = slot.output / "pith" / pith_id / "bundle.json"
        try:
            kept = inspect_bytes(f"(previous site) pith/{pith_id}/bundle.json", read_bytes(kept_path), options.trust)
        except FileReadError:
            kept = None
        if kept is None or not kept.verified or kept.sha256 != prior.sha256:
            report.warnings.append(f"{chosen.inspection.rel}: older than the bundle published before, which no "
                                   f"longer verifies; publishing the input")
            continue
        selection.published[pith_id] = Candidate(kept, kept_path, kept_from="the previous site")
        note = (f"rollback refused: built_at {chosen.inspection.summary.built_at} with "
                f"{chosen.inspection.summary.event_count} events is older than the published bundle "
                f"(built_at {prior.built_at}, {prior.event_count} events), which stays published")
        selection.superseded[chosen.inspection.rel] = note
        report.warnings.append(f"{chosen.inspection.rel}: pith:{pith_id}: {note}")


def _record_outcomes(report: BuildReport, inspections: list[Inspection], selection, changed: dict,
                     memory: BuildMemory | None = None) -> None:
    rows = memory.report_rows if memory is not None else None
    for i in inspections:
        if not i.verified:
            report.outcomes.append(FileOutcome(i, REJECTED))
        elif i.rel in selection.superseded:
            report.outcomes.append(FileOutcome(i, SUPERSEDED, selection.superseded[i.rel]))
        elif i.pith_id in changed:
            check, _, reason = changed[i.pith_id].partition(": ")
            report.outcomes.append(FileOutcome(rejected(i.rel, check, reason), REJECTED))
        else:
            # The same result published again keeps its outcome (and its report line).
            report.outcomes.append(rows.outcome(i, PUBLISHED) if rows is not None else FileOutcome(i, PUBLISHED))
    for c in selection.published.values():
        if c.kept_from and c.inspection.pith_id not in changed:
            report.outcomes.append(FileOutcome(c.inspection, PUBLISHED, f"kept from {c.kept_from}"))


def _read_deployed(options: BuildOptions) -> tuple[LiveSite | None, LiveManifest | None, list[str]]:
    """The deployed mirror and its manifest, and what to warn about; nothing there, or unreachable, is no error."""
    if options.deployed is None:
        return None, None, []
    fetcher = options.deployed_fetcher
    if fetcher is None and is_url(options.deployed):
        from site_builder.pulling import Fetcher  # (only here: the HTTP stack costs a no-op build ~30 ms to import)
        # Every request of the check within 20 s, and all of them within 5 minutes.
        fetcher = Fetcher(timeout=20, retries=2, deadline=time.monotonic() + 300)
    site = LiveSite(options.deployed, fetcher)
    shown = printable(options.deployed)
    try:
        manifest = site.manifest()
    except LiveSiteUnavailable as exc:
        return None, None, [f"live site {shown}: {printable(str(exc))}; no rollback check against it"]
    if manifest is None:
        return None, None, [f"live site {shown}: nothing published there yet ({MARKER} not found); "
                            f"no rollback check against it"]
    lines = []
    if manifest.malformed:
        lines.append(f"live site {shown}: {manifest.malformed} published entries of its {MARKER} are malformed; "
                     f"they prove nothing and are ignored")
    return site, manifest, lines


def _refuse_deployed_rollbacks(selection, site: LiveSite, manifest: LiveManifest, options: BuildOptions,
                               report: BuildReport, scratch: Path) -> None:
    """Never publish a record older than the deployed mirror's copy, where that copy verifies.

    The manifest only says which records to look at (those it claims are newer); the live bundle then has to
    verify, be that record's and be newer by its own signed values to be kept.  A claim that is not borne out
    proves nothing: the input is published, with a warning."""
    shown = printable(options.deployed)
    for pith_id, chosen in list(selection.published.items()):
        claim = manifest.claims.get(pith_id)
        if claim is None or claim.sha256 == chosen.inspection.sha256 or not is_rollback(chosen.inspection, claim):
            continue
        where = f"(live site) pith/{pith_id}/bundle.json"
        try:
            raw = site.bundle(pith_id, options.max_bytes)
        except LiveSiteUnavailable as exc:
            raw, problem = None, f"could not be read ({printable(str(exc))})"
        else:
            problem = "is missing"
        live = inspect_bytes(where, raw, options.trust) if raw is not None else None
        if live is not None:
            if not live.verified:
                problem = f"does not verify ({live.check}: {printable(live.reason)})"
            elif live.pith_id != pith_id:
                problem = f"is another record's (pith:{live.pith_id})"
            elif not is_rollback(chosen.inspection, PublishedBefore(pith_id, live.sha256, live.summary.built_at,
                                                                    live.summary.event_count)):
                problem = "is not newer than the input"
            else:
                problem = None
        if problem is not None:
            report.warnings.append(f"{chosen.inspection.rel}: pith:{pith_id}: live site {shown} lists a newer bundle "
                                   f"(built_at {printable(claim.built_at)}), but that bundle {problem}: the claim "
                                   f"proves nothing; publishing the input")
            continue
        kept_path = scratch / f"live-{pith_id}.json"
        kept_path.write_bytes(raw)
        selection.published[pith_id] = Candidate(live, kept_path, kept_from="the live site")
        note = (f"rollback refused: built_at {chosen.inspection.summary.built_at} with "
                f"{chosen.inspection.summary.event_count} events is older than the live site's verified bundle "
                f"(built_at {live.summary.built_at}, {live.summary.event_count} events), which stays published")
        if chosen.kept_from:  # (the previous site's copy was older still: no input file lost a place)
            continue
        selection.superseded[chosen.inspection.rel] = note
        report.warnings.append(f"{chosen.inspection.rel}: pith:{pith_id}: {note}")
