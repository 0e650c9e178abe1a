"""Check a mirror as it is served (PITH_FORMAT.md §5), for ``site-builder verify`` of a folder laid out as one.

A mirror serves each record three times over: ``pith/<ID>/bundle.json``, the same bytes at
``.well-known/pith/<ID>/bundle.json``, and ``pith/<ID>/state.json``, the bundle's state as the resolver writes
it, which no signature covers.  For each record folder the bundle is verified against the pinned keys and must be
record <ID>'s, the second path must hold the very same bytes, and ``state.json`` must be the verified bundle's
state (the same JSON value, however laid out: PITH_FORMAT.md names its content, not its bytes).  Pages are not
checked: nothing in them is signed (each record page checks itself in the reader's browser).  Pure but for
reading the files, so that it runs in the worker processes ``verify`` uses.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from site_builder.canonical import canon
from site_builder.inspection import Inspection, by_reference, inspect_bytes, rejected
from site_builder.keys import TrustSet
from site_builder.loading import (DEFAULT_MAX_BYTES, FileReadError, InputFile, is_mirror, is_record_id,
                                  mirror_record_ids, read_bytes)
from site_builder.parallel import Workers, map_in_workers
from site_builder.stages.verify import Inspector
from site_builder.strict_json import StrictJSONError, parse_strict


def mirror_records(folder: Path) -> list[InputFile] | None:
    """The records of a mirror that *folder* holds, each as its ``pith/<ID>/bundle.json`` (named by the path
    given), in ID order (``mirror_record_ids``): every record where *folder* is the mirror (``is_mirror``) or its
    ``pith/`` folder, one where it is that record's folder.  None where it is none of these (a folder of bundles):
    a record's ``state.json`` is no bundle, and is checked as its state only where the record is known as one."""
    if is_mirror(folder):
        return [_record_file(folder / "pith" / pid, folder / "pith" / pid) for pid in mirror_record_ids(folder)]
    if os.path.islink(folder) or not os.path.isdir(folder):  # (as ``is_mirror`` follows no link to a mirror)
        return None
    real = folder.resolve()
    if real.name == "pith" and is_mirror(real.parent):
        return [_record_file(real / pid, folder / pid) for pid in mirror_record_ids(real.parent)]
    if real.parent.name == "pith" and is_record_id(real.name) and is_mirror(real.parent.parent):
        return [_record_file(real, folder)]  # (a real folder: resolved, and found to be one)
    return None


def _record_file(record: Path, given: Path) -> InputFile:
    """The bundle of the record folder *record*, read at that path (its two other files are found from it) and
    named as *given* names paths: relative to the working folder where *given* is relative (``verify .`` in a
    record's folder names ``bundle.json`` and ``../../.well-known/pith/<ID>/bundle.json``)."""
    path = record / "bundle.json"
    return InputFile(rel=str(path) if given.is_absolute() else os.path.relpath(path), path=str(path), sig=None)


def audit_record(inspector: Inspector, item: InputFile) -> list[Inspection]:
    """The record whose ``bundle.json`` *item* is (``mirror_records``): the bundle's result (rejected where it is
    another record's), then a rejection for each of its two other files that is not as the resolver serves it
    (checked only where the bundle verified)."""
    record = Path(item.path).parent
    pid = record.name
    name = str if item.path == item.rel or os.path.isabs(item.rel) else os.path.relpath  # (as the bundle is named)
    raw = _read(Path(item.path), item.rel, inspector.max_bytes)
    if isinstance(raw, Inspection):
        return [raw]
    result = by_reference(inspect_bytes(item.rel, raw, inspector.trust))
    if not result.verified:
        return [result]
    if result.pith_id != pid:
        return [Inspection(item.rel, result.sha256, result.size, "mirror_path",
                           f"holds the bundle of {result.summary.pith_number}, not of record {pid}")]
    copy = record.parent.parent / ".well-known" / "pith" / pid / "bundle.json"
    problems = [_copy_problem(copy, name(copy), raw, pid, inspector.max_bytes),
                _state_problem(record / "state.json", name(record / "state.json"), parse_strict(raw)["state"],
                               inspector.max_bytes)]
    return [result, *(p for p in problems if p is not None)]


def _copy_problem(path: Path, shown: str, raw: bytes, pid: str, max_bytes: int) -> Inspection | None:
    """None where the file at *path* holds *raw*, byte for byte; else its rejection (naming it *shown*)."""
    found = _read(path, shown, max_bytes)
    if isinstance(found, Inspection):
        return found
    return None if found == raw else rejected(shown, "mirror_copy", f"not the same bytes as pith/{pid}/bundle.json")


def _state_problem(path: Path, shown: str, state: object, max_bytes: int) -> Inspection | None:
    """None where the file at *path* is *state* as JSON (the same value: the same canonical form, whatever its
    layout); else its rejection (naming it *shown*)."""
    found = _read(path, shown, max_bytes)
    if isinstance(found, Inspection):
        return found
    try:
        same = canon(parse_strict(found)) == canon(state)
    except StrictJSONError as exc:
        return rejected(shown, "state_json", f"not strict JSON: {exc.reason}")
    return None if same else rejected(shown, "state_json", "not the state of the verified bundle beside it")


def _read(path: Path, shown: str, max_bytes: int) -> bytes | Inspection:
    """The bytes of the file at *path*, or the rejection saying why there are none (naming the file *shown*, as
    ``mirror_records`` names a record's bundle)."""
    if not os.path.lexists(path):
        return rejected(shown, "mirror_path", "missing")
    try:
        return read_bytes(path, max_bytes)
    except FileReadError as exc:
        return rejected(shown, exc.check, exc.reason)


def audit_records(records: list[InputFile], trust: TrustSet, jobs: int = 0,
                  progress: Callable[[str, int, int], None] | None = None) -> list[Inspection]:
    """``audit_record`` for each of *records* (``mirror_records``), on all cores (or *jobs* processes), in order."""
    audited = map_in_workers(audit_record, Inspector, (trust, DEFAULT_MAX_BYTES), records, Workers(jobs, progress),
                             "verify", [r.path for r in records])
    return [result for results in audited for result in results]
