"""The search index: Pagefind run over the built site, split into shards for large mirrors.

Pagefind holds its whole index in memory and cannot update one: at 100,000 records a single index took ~2
minutes and 8.6 GB, after any change; at 10,000, ~9.5 s and 1 GB.  So a site of more than ``search_shard_size``
records (a setting) is indexed as a power-of-two number of shards (``search_max_shards`` at most), each holding
the records whose pith id starts with a fixed range of base32 characters (ids are digests, so the shards come
out even); the search page merges them in the browser (Pagefind's ``mergeIndex``).  A change re-indexes only the
shard that holds it, and a Pagefind run needs the memory of one shard (a build runs one per core, side by side:
``index_search``).  The price is paid by the reader: a query
fetches a little from every shard (at 10,000 records, 24 requests and 339 KB with 4 shards against 12 and 311 KB
with one index; 67 and 796 KB with 16), which is why the shards are few.

Which records are in which shard depends only on their ids and how many there are, so the same inputs give the
same tree.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterable, Sequence

from site_builder.loading import is_utf8

BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"  # RFC 4648, the alphabet of pith ids, in the order of their values
ID_LENGTH = 26
MAX_SHARDS = 32 * 32  # split by the ids' first two characters at most
INDEX_FOLDER = "pagefind/"

# A record's page: the one page the built-in templates mark for the search index (data-pagefind-body).
RECORD_PAGES_GLOB = "pith/" + "?" * ID_LENGTH + "/index.html"
_INDEX_MARK = b"data-pagefind-body"
# What a search page that loads every shard's index names (``search_indexes``, the built-in ``search.html``).
_SHARDS_MARK = b"search_indexes"

SEARCH_STAGE = "indexing for search"  # (what the progress bar says while Pagefind runs)


class SearchIndexError(Exception):
    """Pagefind failed; the previous output is kept."""


@dataclass(frozen=True)
class SearchLayout:
    """What the templates in effect ask of the search index (``search_layout``)."""

    glob: str | None  # the HTML files Pagefind need read: the record pages, or None (every one)
    merges_shards: bool  # the search page loads every index it is given (``search_indexes``)


def search_layout(dirs: list[Path]) -> SearchLayout:
    """Read the templates and assets in effect (the first folder holding a name wins, as for Jinja) for what they
    ask of the search index.

    *glob*: the record pages when the record page's template alone marks pages for the index; else None, every
    HTML file (a user's template marks other pages, or none does and Pagefind indexes every page whole).
    Pagefind reads every HTML file to find the marked ones, ~60,000 at 10,000 records: given the record pages
    alone it builds the same index in ~60 % of the time and ~500 MB less memory.

    *merges_shards*: whether ``search.html`` names ``search_indexes``, the list of indexes it must load.  One
    that does not was written for one index at ``pagefind/`` (a user's, from before shards): the site keeps one
    index then, so that the page still finds Pagefind where it looks."""
    marked, seen, merges_shards = set(), set(), False
    for folder in dirs:
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder).as_posix()
            if rel in seen or not path.is_file():
                continue
            seen.add(rel)
            text = path.read_bytes()
            if _INDEX_MARK in text:
                marked.add(rel)
            if rel == "search.html":
                merges_shards = _SHARDS_MARK in text
    return SearchLayout(RECORD_PAGES_GLOB if marked == {"paper.html"} else None, merges_shards)


def pagefind_version() -> str:
    """Which Pagefind makes the indexes (its Python package and binary): a site's shards must all be made by one
    version, as the search page's Pagefind (the first shard's) reads the others' indexes."""
    import importlib.metadata  # (~20 ms to import: a build without the search index does without it)

    found = []
    for dist in ("pagefind", "pagefind-bin"):
        try:
            found.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{dist} unknown")
    return ", ".join(found)


@dataclass(frozen=True)
class SearchShard:
    """One Pagefind index of the site: the unit the build caches, names and re-makes on its own."""

    unit: str  # the build's unit name: "search" for a site with one index, "search:<n>" for shard n
    folder: str  # where the index goes, relative to the site root, ending in "/"
    glob: str | None  # the pages Pagefind reads (None: every HTML file)
    pith_ids: tuple[str, ...]  # the records it indexes


def shard_count(records: int, shard_size: int, max_shards: int = MAX_SHARDS) -> int:
    """The smallest power of two that splits *records* into shards of at most *shard_size* (as the ids fall,
    on average), but no more than *max_shards* (and ``MAX_SHARDS``)."""
    count = 1
    while 2 * count <= min(max_shards, MAX_SHARDS) and records > count * shard_size:
        count *= 2
    return count


def shard_of(pith_id: str, count: int) -> int:
    """Which of *count* shards (a power of two) holds *pith_id*: the top bits of its first two characters."""
    value = BASE32.index(pith_id[0]) * 32 + BASE32.index(pith_id[1])
    return value * count // MAX_SHARDS


def shard_glob(number: int, count: int) -> str:
    """The record pages of shard *number* of *count*, as a Pagefind glob: a character class for each leading
    character the shard fixes (the ids it holds and no other, as ``shard_of`` places them)."""
    first, last = number * MAX_SHARDS // count, (number + 1) * MAX_SHARDS // count - 1
    if count <= 32:
        head = "[" + BASE32[first // 32:last // 32 + 1] + "]"
    else:
        head = BASE32[first // 32] + "[" + BASE32[first % 32:last % 32 + 1] + "]"
    return "pith/" + head + "?" * (ID_LENGTH - (1 if count <= 32 else 2)) + "/index.html"


def plan_shards(pith_ids: Iterable[str], glob: str | None, shard_size: int,
                max_shards: int = MAX_SHARDS, merges_shards: bool = True) -> list[SearchShard]:
    """The search indexes of a site publishing *pith_ids* (sorted), given what Pagefind reads (*glob*) and
    whether the search page loads shards (*merges_shards*), as ``search_layout`` finds them: one index at ``pagefind/`` unless the site has more than *shard_size* records,
    only record pages are indexed (a user's template that marks other pages gets one index of the whole site) and
    the search page merges shards; else one per shard that holds a record (``shard_count``), at
    ``pagefind/<n>-of-<count>/``.  None at all for a site with no record (Pagefind refuses to make an empty
    index)."""
    ids = list(pith_ids)
    if not ids:
        return []
    shardable = glob == RECORD_PAGES_GLOB and merges_shards
    count = shard_count(len(ids), shard_size, max_shards) if shardable else 1
    if count == 1:
        return [SearchShard("search", INDEX_FOLDER, glob, tuple(ids))]
    members: dict[int, list[str]] = {}
    for pid in ids:
        members.setdefault(shard_of(pid, count), []).append(pid)
    return [SearchShard(f"search:{n}", f"{INDEX_FOLDER}{n + 1}-of-{count}/", shard_glob(n, count), tuple(held))
            for n, held in sorted(members.items())]


def index_search(site: Path, indexes: Sequence[tuple[str | None, str]] = ((None, INDEX_FOLDER),), processes: int = 1,
                 waiting: Callable[[int], None] | None = None) -> None:
    """Run Pagefind over the staged site (only pages marked data-pagefind-body are indexed) once for each of
    *indexes*, (glob, folder): the HTML files it need read (``search_layout``, ``shard_glob``; None: every one)
    and where the index goes; *processes* at a time (shards of ~3,000 records: four took 17.9 s one after the
    other, 11.8 s two at a time, on two cores).  *waiting* is called every 0.2 s with how many have finished (a
    progress display, refreshed from this thread: Pagefind takes ~2.5 s for 2,500 records, ~13 s for 12,500).
    Their output goes to unnamed temporary files, which need no draining while they run."""
    pending = list(indexes)
    running: list[tuple[subprocess.Popen, IO[bytes]]] = []
    finished = 0
    # Pagefind takes its arguments and environment as UTF-8 only (a site under a folder named in other bytes is
    # its usage error, a PWD or any variable so named its panic), and ``python -m`` imports from the folder it
    # starts in first (a project's pagefind.py would run instead): it runs in a private folder of its own that
    # holds one link, "site", to the tree, with the environment's variables that are UTF-8.
    named = tempfile.TemporaryDirectory(prefix="site-builder-index-")
    environment = {**{k: v for k, v in os.environ.items() if is_utf8(k) and is_utf8(v)}, "PWD": named.name}
    try:
        os.symlink(os.path.abspath(site), os.path.join(named.name, "site"))
        while pending or running:
            while pending and len(running) < max(1, processes):
                glob, folder = pending.pop(0)
                cmd = [sys.executable, "-m", "pagefind", "--site", "site", "--silent", "--include-characters",
                       ".:", "--output-subdir", folder.rstrip("/")] + (["--glob", glob] if glob is not None else [])
                log = tempfile.TemporaryFile(dir=site)  # (unnamed: nothing outside the tree, nothing in it)
                running.append((subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                                 cwd=named.name, env=environment), log))
            try:
                running[0][0].wait(timeout=0.2 if waiting is not None else None)
            except subprocess.TimeoutExpired:
                pass
            for process, log in [r for r in running if r[0].poll() is not None]:
                running.remove((process, log))
                with log:
                    _check_exit(process.returncode, log)
                finished += 1
            if waiting is not None:
                waiting(finished)
    finally:  # (an error, or Ctrl-C: an interrupted build leaves no indexer running, as subprocess.run does)
        for process, log in running:
            process.kill()
            process.wait()
            log.close()
        named.cleanup()


def _check_exit(code: int, log: IO[bytes]) -> None:
    """Raise SearchIndexError for a Pagefind that failed (naming its last line) or was killed."""
    if code < 0:  # killed: by the kernel's out-of-memory killer, most likely (it holds the whole index)
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = (" (out of memory? Pagefind holds a whole index in memory, ~90 KB a record page: see dmesg, index "
                "in smaller shards (search_shard_size, search_max_shards), or build with --no-search)"
                ) if code == -signal.SIGKILL else ""
        raise SearchIndexError(f"search index: pagefind was killed by {name}{hint}; previous output left untouched")
    if code != 0:
        log.seek(0)
        detail = log.read().decode("utf-8", "replace").strip().splitlines()
        raise SearchIndexError(f"search index: pagefind failed: {detail[-1] if detail else code}; "
                               f"previous output left untouched")


def files_under(root: Path, folder: str) -> list[str]:
    """The files under *root*/*folder*, as sorted paths relative to *root*.  Listed as strings: ``Path.rglob``
    keeps every path it has yielded (to yield none twice), which for Pagefind's ~100,000 files at 100,000
    records was ~80 MB of the build process's peak."""
    found = []
    for where, _, names in os.walk(root / folder):
        prefix = os.path.relpath(where, root).replace(os.sep, "/") + "/"
        found.extend(prefix + name for name in names if os.path.isfile(os.path.join(where, name)))
    return sorted(found)
