"""What one build leaves for the next: the planning results of ``BuildMemory``, kept in the process by
``serve`` and saved beside the build cache by separate ``build`` runs.

A separate process used to start from the SQLite cache alone and redo the whole plan (re-read 10,000
verification results, re-plan short addresses, listings, unit keys and report rows: ~1 s at 10,000 records)
for a one-file change.  The snapshot hands it the previous build's memory instead, and the build reuses what
still matches, exactly as ``serve`` does between rebuilds.

Every memo is keyed by what it was computed from (file stats, digests, the build key, the very objects it was
made of), so a stale, foreign or missing snapshot can only cost time, never change the output;
tests/test_incremental.py builds with and without one.  The snapshot is a pickle read by an unpickler that
only admits the builder's own data classes, so it describes data and cannot name code to run.  (It sits in the
cache folder, which is trusted like the cache itself: both say which files were verified.)
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path, PosixPath, PurePosixPath
from typing import TYPE_CHECKING

from site_builder import builder_identity
from site_builder.report import ReportRows

if TYPE_CHECKING:
    from site_builder.build import PreviousSite
    from site_builder.cache import BuildCache
    from site_builder.inspection import Inspection
    from site_builder.pages import Catalogue, RedirectPlan
    from site_builder.rendering import SiteRenderer
    from site_builder.selection import Candidate, Selection

SNAPSHOT_NAME = "memory.pickle"


def _header() -> bytes:
    return f"site-builder memory {builder_identity()}/4\n".encode()


@dataclass
class BuildMemory:
    """What a build keeps for the next one: the open build cache, which then holds every verification result
    in memory, the compiled templates, and the intermediate results of planning (selection, short addresses,
    listing order, unit keys, report rows).  Each entry is keyed by what it was computed from (file stats,
    digests, the build key, or the very objects it was made of), so it can only save work, never change the
    output (tests/test_incremental.py builds with and without it)."""

    cache: BuildCache | None = None
    renderer: tuple[str, SiteRenderer] | None = None
    compile_all_templates: bool = True  # serve compiles every template up front; a one-off build only what it uses
    report_rows: ReportRows = field(default_factory=ReportRows)
    previous_site: tuple[str | None, PreviousSite] | None = None  # keyed by the stat of verification.json
    redirects: tuple[list, RedirectPlan] | None = None  # keyed by the records' ids and versions
    catalogue: tuple[list, Catalogue] | None = None  # keyed by the records' ids, dates and categories
    unit_rows: dict[str, tuple[list, str]] = field(default_factory=dict)  # listing unit -> (its records, digests)
    unit_keys: dict[str, tuple[str, object, str]] = field(default_factory=dict)  # unit -> (build key, material, key)
    inputs: dict[str, tuple[str, str, Inspection]] = field(default_factory=dict)  # rel -> (stat, trust, result)
    selection: tuple[list[Candidate], Selection] | None = None  # last candidates and what select() made of them
    record_keys: tuple[str, dict[str, tuple]] | None = None  # build key; pith id -> (sha256, addresses, key)
    list_rows: tuple[str, dict[str, bytes]] | None = None  # build key; row digest -> a record's list row (UTF-8)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
            self.cache = None


# --- the snapshot on disk ------------------------------------------------------------------------------

_DATA_MODULES = {f"site_builder.{m}" for m in ("build", "inspection", "memory", "pages", "records", "report",
                                                "selection", "verification")}
_ALLOWED_OUTSIDE = {("pathlib", "PosixPath"): PosixPath, ("pathlib", "PurePosixPath"): PurePosixPath}


class _SnapshotUnpickler(pickle.Unpickler):
    """Admits only the builder's own data classes (and paths): no callable, no import of anything else."""

    def find_class(self, module: str, name: str):
        found = _ALLOWED_OUTSIDE.get((module, name))
        if found is not None:
            return found
        if module in _DATA_MODULES:
            cls = getattr(importlib.import_module(module), name, None)
            if isinstance(cls, type) and (dataclasses.is_dataclass(cls) or cls is ReportRows or cls is BuildMemory):
                return cls
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a build memory snapshot")


def _well_formed(memory: object) -> bool:
    """The shape of each memo (their contents are checked against their keys when used)."""
    if not isinstance(memory, BuildMemory) or not isinstance(memory.report_rows, ReportRows):
        return False
    dicts = (memory.unit_rows, memory.unit_keys, memory.inputs)
    pairs = (memory.previous_site, memory.redirects, memory.catalogue, memory.selection, memory.record_keys,
             memory.list_rows)
    return all(isinstance(d, dict) for d in dicts) and all(p is None or (isinstance(p, tuple) and len(p) == 2)
                                                            for p in pairs) \
        and (memory.list_rows is None or isinstance(memory.list_rows[1], dict))


def _shown_rows(memory: BuildMemory) -> tuple[str, dict[str, bytes]] | None:
    """The list rows of the records the site shows now (rows of removed or changed records are dropped)."""
    if memory.list_rows is None or memory.catalogue is None:
        return None
    build_key, rows = memory.list_rows
    kept = {}
    for p in memory.catalogue[1].papers:
        row = rows.get(p.row_digest)
        if row is not None:
            kept[p.row_digest] = row
    return build_key, kept


def save_snapshot(memory: BuildMemory, folder: Path) -> bool:
    """Write *memory* (without the open cache and compiled templates) for the next build; False if it could
    not be written (the next build then plans from scratch)."""
    kept = dataclasses.replace(memory, cache=None, renderer=None, list_rows=_shown_rows(memory))
    path = folder / SNAPSHOT_NAME
    temporary = folder / f".{SNAPSHOT_NAME}.{os.getpid()}"
    try:
        with open(temporary, "wb") as f:
            f.write(_header())
            pickle.dump(kept, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temporary, path)
        return True
    except (OSError, pickle.PicklingError, TypeError, AttributeError, RecursionError):
        try:
            os.unlink(temporary)
        except OSError:
            pass
        return False


def load_snapshot(folder: Path) -> BuildMemory:
    """The memory the last build saved in *folder*; an empty one if there is none or it is unusable
    (damaged, from another version, or naming anything but the builder's data)."""
    try:
        with open(folder / SNAPSHOT_NAME, "rb", buffering=1 << 20) as f:
            header = _header()
            if f.read(len(header)) != header:
                return BuildMemory(compile_all_templates=False)
            memory = _SnapshotUnpickler(f).load()
    except Exception:  # noqa: BLE001 -- whatever a damaged file makes unpickling raise, the answer is the same
        return BuildMemory(compile_all_templates=False)
    if not _well_formed(memory):
        return BuildMemory(compile_all_templates=False)
    memory.compile_all_templates = False
    return memory
