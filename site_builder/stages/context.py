"""What every stage of a build shares: its context (options, output slot, templates, build key, the open
cache, the report and the stage clock), how the cache is opened for it, the digest helper and the source date."""

from __future__ import annotations

import hashlib
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

from site_builder import builder_identity
from site_builder.cache import BuildCache
from site_builder.cache_folder import CacheFolderUnsafe, make_private_folder, names_not_the_caches, take_save_failure
from site_builder.cache_key import CacheKey, CacheKeyUnavailable, user_cache_key
from site_builder.compiled_templates import CompiledTemplates
from site_builder.incremental import IncrementalStore
from site_builder.loading import FileReadError, read_bytes, stat_signature
from site_builder.mirrors import MirrorLookups, MirrorRecord
from site_builder.options import BuildOptions
from site_builder.parallel import cpu_seconds
from site_builder.rendering import template_dirs, templates_identity
from site_builder.report import BuildReport
from site_builder.settings import SettingsError
from site_builder.terminal import printable
from site_builder.writing import OutputError, OutputSlot


def source_date() -> str | None:
    """SOURCE_DATE_EPOCH as an ISO timestamp; without it the output holds no wall-clock time.  SettingsError
    where it is set to anything but a whole number of seconds since 1970 up to the year 9999 (reproducible-
    builds.org: a malformed value stops the build rather than being guessed at)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        return None
    if not _EPOCH.fullmatch(epoch) or int(epoch) > _LAST_EPOCH:
        raise SettingsError(f"SOURCE_DATE_EPOCH={printable(epoch[:40])!r} is not a whole number of seconds since "
                            f"1970-01-01 (up to the year 9999); fix it or unset it")
    return datetime.fromtimestamp(int(epoch), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


_EPOCH = re.compile(r"[0-9]{1,12}")
_LAST_EPOCH = 253402300799  # 9999-12-31T23:59:59Z


def digest_of(*parts: object) -> str:
    """The digest of *parts* (bytes, or anything as its ``str``), each prefixed by its length: no two lists of
    parts share it, whatever a part holds (an about page with a NUL in it, say)."""
    h = hashlib.sha256()
    for part in parts:
        _add_part(h, part)
    return h.hexdigest()


def digests_under(first: str) -> Callable[[str], str]:
    """``digest_of(first, text)`` as a function of *text*, *first* hashed once: a build names 10,000 units
    under one build key (10,000 digests in 10 ms against 17 ms calling ``digest_of`` for each)."""
    keyed = hashlib.sha256()
    _add_part(keyed, first)

    def digest(text: str) -> str:
        h = keyed.copy()
        _add_part(h, text)
        return h.hexdigest()
    return digest


def _add_part(h, part: object) -> None:  # (h: a hashlib hash)
    """One part of a ``digest_of``: its length in bytes, then its bytes (text as UTF-8, a lone surrogate kept)."""
    data = part if isinstance(part, bytes) else str(part).encode("utf-8", "surrogatepass")
    h.update(b"%d:" % len(data))
    h.update(data)


class StageClock:
    """Records how long each stage took, and the CPU time this process and its workers spent in it (the
    benchmark and ``build --verbose`` print these): a stage whose workers' CPU is near its wall time times the
    cores is bound by the CPU, one far below it waits for the disk."""

    def __init__(self, timings: dict[str, float], cpu: dict[str, tuple[float, float]]):
        self.timings = timings
        self.cpu = cpu
        self.last = time.perf_counter()
        self.last_cpu = cpu_seconds()

    def lap(self, stage: str) -> None:
        now, cpu = time.perf_counter(), cpu_seconds()
        self.timings[stage] = self.timings.get(stage, 0.0) + now - self.last
        main, workers = self.cpu.get(stage, (0.0, 0.0))
        self.cpu[stage] = (main + cpu[0] - self.last_cpu[0], workers + cpu[1] - self.last_cpu[1])
        self.last, self.last_cpu = now, cpu


@dataclass(frozen=True)
class BuildContext:
    """One build's fixed surroundings, handed to every stage.  The report and the clock are written as the
    build goes (they are its account of itself); the cache is open, and locked, for the build's length."""

    options: BuildOptions
    slot: OutputSlot
    dirs: list[Path]  # the template folders, the user's over the built-in ones
    about: str | None  # the about page's Markdown
    build_key: str  # names everything every output file depends on but the inputs and templates: code, keys, settings
    templates_key: str  # every template and asset file (``templates_identity``); each unit keys on those it uses
    indexer: str | None  # the Pagefind version that makes the search indexes (None: no search)
    cache: BuildCache
    store: IncrementalStore  # serve's, kept across its builds; else one that keeps nothing
    report: BuildReport
    clock: StageClock
    scratch: Path  # a private folder removed with the build (bundles fetched from the deployed mirror)
    mirrors: MirrorLookups  # the mirrored bundles of the output and the tree beside it, against the cache's record

    @property
    def site_key(self) -> str:
        """What the site as a whole depends on besides the inputs: the build key and every template (the renderer,
        the no-op check and the build id are keyed on it)."""
        return digest_of(self.build_key, self.templates_key)

    @property
    def serving(self) -> bool:
        """Whether the build is one of a long-running process's (``serve``)."""
        return self.options.session is not None


@contextmanager
def opened_context(options: BuildOptions, scratch: Path, report: BuildReport,
                   indexer: Callable[[], str]) -> Iterator[BuildContext]:
    """The context of one build: the output checked and locked, the templates and about page read, the build
    key made and the cache opened; the lock is released and the cache closed (serve's: left open) on leaving.
    *indexer* names the Pagefind that makes the search indexes (asked only when the build makes them)."""
    slot = OutputSlot(options.output)
    slot.check_usable()
    check_folders_apart(options, slot)
    dirs = template_dirs(options.templates)
    about = read_about(options.about_file)
    build_key = build_key_of(options)
    templates_key = templates_identity(dirs)
    search_by = indexer() if options.search else None  # (the search indexes' keys name it)
    slot.acquire()
    try:
        cache = open_cache(options, report, load=False)  # waits while the last build's detached saver writes it
        try:
            store = options.store if options.store is not None else IncrementalStore(keeps=False)
            store.start_build()
            clock = StageClock(report.timings, report.cpu)
            mirrors = mirror_lookups(options, slot, cache.mirrored(read_now=options.session is not None))
            try:
                yield BuildContext(options, slot, dirs, about, build_key, templates_key, search_by, cache, store,
                                   report, clock, scratch, mirrors)
            finally:
                mirrors.close()
        finally:
            put_cache_back(options, cache, report)
    finally:
        slot.release()


def mirror_lookups(options: BuildOptions, slot: OutputSlot, record: MirrorRecord | None) -> MirrorLookups:
    """The lookups of the mirrored bundles this build checks: those serve started ahead when they are of this
    output against this *record* (``BuildCache.mirrored``; else they are stopped), or new ones, made beside the
    build where the policy looks ahead."""
    ahead = options.session.lookups if options.session is not None else None
    if ahead is not None:
        if ahead.made_for(slot.output, slot.prev, record):
            return ahead
        ahead.close()
    policy = options.policy
    return MirrorLookups(slot.output, slot.prev, record, policy.mp_context if policy.look_ahead else None,
                         twin_first=options.session is not None)  # (serve: no quick no-op check)


def check_folders_apart(options: BuildOptions, slot: OutputSlot) -> None:
    """OutputError where a folder the build reads lies inside the output (or the tree beside it), which every
    build replaces (the user's files there would be lost), or where the output lies inside the static folder,
    whose files every build copies into the site (the site would hold itself, one level deeper each build)."""
    trees = (slot.output, slot.prev)
    if options.bundles.resolve().is_relative_to(slot.output):
        raise OutputError(f"{slot.output}: the output folder must not contain the bundles folder")
    cache_at = cache_folder(options)
    cache_at = Path(os.path.abspath(cache_at)) if cache_at is not None else None
    if cache_at is not None and any(cache_at.is_relative_to(tree) for tree in trees):
        raise OutputError(f"{cache_at}: the cache folder must not be inside the output folder, which every build "
                          f"replaces; choose another --cache-dir")
    if cache_at is not None and options.policy.cache_dir is not None and (others := names_not_the_caches(cache_at)):
        raise OutputError(f"{cache_at}: not a build cache folder (it holds {printable(', '.join(others[:3]))}"
                          f"{', ...' if len(others) > 3 else ''}), and the cache's files and templates folder would "
                          f"go beside them; name a new or empty folder for --cache-dir")
    for name, folder in (("templates folder", options.templates), ("static folder", options.static_dir),
                         ("about page", options.about_file)):
        if folder is not None and any(folder.resolve().is_relative_to(tree) for tree in trees):
            raise OutputError(f"{folder}: the {name} must not be inside the output folder, which every build "
                              f"replaces")
    if options.static_dir is not None and slot.output.is_relative_to(options.static_dir.resolve()):
        raise OutputError(f"{slot.output}: the output folder must not be inside the static folder, whose files "
                          f"every build copies into the site")


# An about page is a few KB of Markdown; one from a pull request must not hold the build's memory (site.toml and
# key files have the same bound).
ABOUT_MAX_BYTES = 1 << 20


def read_about(path: Path | None) -> str | None:
    """The about page's Markdown, None where there is no such file; SettingsError where it cannot be read, is
    over ``ABOUT_MAX_BYTES`` or is not UTF-8 text."""
    if path is None or not os.path.isfile(path):
        return None
    try:  # (a link is followed: ``settings.project_paths`` has made sure it stays inside the project)
        raw = read_bytes(path, ABOUT_MAX_BYTES, follow_links=True)
    except FileReadError as exc:
        raise SettingsError(f"{path}: {exc.reason}") from None
    try:
        return raw.decode("utf-8-sig")  # (a byte-order mark, as some editors save one, is no text of the page)
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{path}: not UTF-8 text ({exc.reason} at byte offset {exc.start:,})") from None


def build_key_of(options: BuildOptions) -> str:
    """What every output file depends on besides the inputs and the templates.  The about page is an input, not
    part of this: its own unit and the sitemap show it (their material names it) and the home page links it
    (rendered by every build), so an edit of it rewrites those alone, not every record's pages (~100,000 files at
    10,000 records).  The templates are not either: each unit keys on those it uses (``template_uses``)."""
    return digest_of(builder_identity(), options.trust.identity(), repr(options.config), options.max_bytes,
                     source_date(), options.search)


def default_cache_dir(output: Path) -> Path:
    output = Path(os.path.abspath(output))
    return output.parent / ".site-builder-cache" / output.name


def stat_sig(path: Path) -> str | None:
    try:
        return stat_signature(os.stat(path))
    except OSError:
        return None


def cache_folder(options: BuildOptions) -> Path | None:
    """Where the cache and the compiled templates live (None: no cache)."""
    return (options.policy.cache_dir or default_cache_dir(options.output)) if options.policy.use_cache else None


def template_cache(cache: BuildCache) -> CompiledTemplates | None:
    """Compiled templates kept beside the cache between processes, under the same user key (None: no cache)."""
    if cache.path is None or cache.user_key is None:
        return None
    return CompiledTemplates(cache.path.parent / "templates", cache.user_key)


def no_cache_note(why: object) -> str:
    """What a build that keeps no cache says, and why (*why*: no key, a folder others may write, a database
    that cannot be opened)."""
    return f"no build cache: {why}; every bundle is verified and every page rendered"


def user_key_or_note(options: BuildOptions, report: BuildReport) -> CacheKey | None:
    """This user's cache key, or None (and a note saying why) where no cache can be kept safely."""
    if not options.policy.use_cache:
        return None
    try:
        return user_cache_key()
    except CacheKeyUnavailable as e:
        report.cache_note = no_cache_note(e)
        return None


def put_cache_back(options: BuildOptions, cache: BuildCache, report: BuildReport) -> None:
    """Done with the cache *open_cache* gave: closed, or for serve, which keeps it open between builds, unlocked.
    A cache that could not be read part-way through the build (``BuildCache.unusable``) is said here."""
    if cache.unusable is not None and not report.cache_note:
        report.cache_note = f"the build cache could not be read ({cache.unusable}); this build went on without " \
                            f"it, and left it as it was"
    if options.session is None:
        cache.close()
    else:
        cache.release_lock()


def note_a_save_that_failed(cache: BuildCache, report: BuildReport) -> None:
    """Say, once, a detached save of the last build that failed or never ended (``remember.announce_save``); read
    under the cache's lock, so that saver is done."""
    if cache.path is not None and cache.user_key is not None:
        failure = take_save_failure(cache.path.parent, cache.user_key)
        if failure is not None:
            report.cache_note = f"the last build's cache was not saved ({failure}); this build could not reuse " \
                                f"what that one did"


def open_cache(options: BuildOptions, report: BuildReport, load: bool = True) -> BuildCache:
    folder = cache_folder(options)
    path = folder / "cache.sqlite" if folder is not None else None
    store = options.store
    if store is not None and store.cache is not None and store.cache.path == path and store.cache.db is not None:
        store.cache.take_lock()
        note_a_save_that_failed(store.cache, report)  # (a command-line build's, between two of serve's)
        return store.cache
    key = user_key_or_note(options, report)
    if key is not None and folder is not None:
        try:
            make_private_folder(folder, ours=options.policy.cache_dir is None)
        except CacheFolderUnsafe as e:
            report.cache_note = no_cache_note(e)
            key = None
    cache = BuildCache(path, load, key)
    if cache.unusable is not None:
        report.cache_note = no_cache_note(cache.unusable)
    else:
        note_a_save_that_failed(cache, report)
    if store is not None:
        store.close()
        store.cache = cache
    return cache
