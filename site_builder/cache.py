"""The build cache: what an incremental build may reuse, in one SQLite file.

These things are remembered:
  * ``files``: each input's stat signature and sha256, so an unchanged file is not even read;
  * ``inspections/<0-f>``: the verification result per sha256 of the bytes, under the trusted-key set (and
    builder version) it was made with, in sixteen parts by the digest's first hex digit: an unchanged bundle is
    never verified twice;
  * ``units``: for each group of output files (one record's files, a listing page, the search index, ...)
    the key it was rendered with and the files it produced, per ``build_id``, for the two trees that exist
    (the output and the previous tree beside it); a tree's ``verification.json`` names its build id;
  * ``rows/<0-f>``: each shown record's row in lists, as rendered under the build key (templates and settings),
    in sixteen parts by the row's digest, so that a record joining a listing does not make every later row of it
    render again;
  * ``mirrored``: each published record's bundle.json as the build left it in the output (stat signature and
    sha256), so that an edit of the live site's copy is noticed without hashing every file;
  * ``addresses``: the short-address plan of the last build and the records it was made for (their ids and
    versions), which a build with the same records takes as it is, and one with a few records more or fewer
    re-plans around them;
  * ``previous_site``: what the live site published (each record's sha256, built_at and event count), from the
    outcomes of the build that wrote its verification.json, with that file's stat: while the file is that one,
    the next build takes its claims from here instead of parsing it.
A stale entry can only cause extra work, because every key includes what the output depends on.  The file itself
(opened, locked, made anew where it is damaged, gone without where it cannot be read) is cache_database.py's.

The cache is untrusted input like any file in a project folder: every row carries a tag made with this user's
cache key (cache_key.py), and a row whose tag does not check is ignored, as if it were not there.  The file index,
the mirrored bundles and each part of the results and of the list rows are one document (plain JSON) under one
tag, as the unit lists are: a build reads all of one or none, and checking one tag over it is ~10 ms at 10,000
files against ~35-65 ms for a tag a row.  So a row planted by someone else (a fork, a clone, another user of a
shared folder) or written by another builder version can only cost work: the file is read, hashed and verified
again.  So can an entry of another shape under this user's own tag, as a builder's bug could leave it: values are
checked for their types before a build uses them, and a unit list is read only where every file it names is a
plain path inside the site (unit_files.py), since the build links and removes those files.

A build opening the cache waits first for the detached process that saves the last one (its lock,
cache_database.py).  The same folder holds the templates Jinja compiled (compiled_templates.py, tagged the same
way).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import orjson

from site_builder.cache_database import DIGEST_PARTS, CacheDatabase
from site_builder.cache_key import CacheKey
from site_builder.inspection import Inspection, inspection_from_json, inspection_to_json
from site_builder.loading import signature_size
from site_builder.mirrors import MirrorRecord
from site_builder.pages import ALL_ADDRESSES
from site_builder.selection import PreviousSite, PublishedBefore
from site_builder.stored_document import StoredDocument
from site_builder.unit_files import units_from_text, units_to_text
from site_builder.writing import is_plain_path


@dataclass(frozen=True)
class RecordedAddresses:
    """The short-address plan a build recorded (``BuildCache.addresses``)."""

    records: list[tuple[str, str, int]]  # what it was made for: (pith id, arXiv id, version), in pith-id order
    per_record: dict[str, int]  # pith id -> bit mask of its own addresses
    shared: list[tuple[str, str, list[str]]]  # (folder, label, pith ids), in folder order

    def well_formed(self) -> bool:
        """Whether every value is of the type a build records, every mask one of the five addresses and every
        shared folder a plain path in the site: a plan of another shape (even under this user's tag, as a
        builder's bug could leave it) is planned again, never written from or stopped at."""
        return (isinstance(self.per_record, dict)
                and all(type(p) is str and type(a) is str and type(v) is int for p, a, v in self.records)
                and all(type(mask) is int and 0 <= mask <= ALL_ADDRESSES for mask in self.per_record.values())
                and all(type(folder) is str and type(label) is str and is_plain_path(folder + "index.html")
                        and type(pids) is list and all(type(pid) is str for pid in pids)
                        for folder, label, pids in self.shared))


class BuildCache(CacheDatabase):
    """What a build may reuse from the last ones (the documents above), kept in the cache's file."""

    def __init__(self, path: Path | None, load: bool = True, key: CacheKey | None = None):
        """Open (and lock) the cache at *path*; *load*: read its file index and unit lists now, else at ``load()``
        (a build that turns out to be a no-op never needs them: ~0.5 s at 100,000 records).  *key*: this user's
        cache key; without one there is no cache (nothing could tell this builder's entries from planted ones)."""
        super().__init__(path, key)
        self._files: dict[str, tuple[str, str]] = {}
        self._units: dict[str, dict[str, tuple[str, str]]] = {}  # build id -> unit -> (key, files joined)
        self._rows: tuple[str, dict[str, set[str]]] = ("", {})  # build key, the digests stored under it, by part
        self._mirrored: MirrorRecord | None = None  # (read once: serve builds again and again)
        self._addresses_records: list | None = None  # the records the stored short-address plan was made for
        self._loaded = False
        if self.path is not None:
            self.take_lock()
            self._open()
            if load:
                self.load()

    def _forget(self) -> None:
        self._files, self._units, self._mirrored, self._addresses_records = {}, {}, None, None
        self._rows = ("", {})

    def load(self) -> None:
        """Read the file index and the unit lists of the trees this cache describes (once; a damaged cache is
        thrown away here as when it is opened)."""
        if self._loaded:
            return
        self._loaded = True
        if self.db is None:
            return
        try:
            checks = self._key.checks
            self._files = self._document("files") or {}
            for build_id, data, tag in self.db.execute("SELECT build_id, data, tag FROM units"):
                if checks(tag, "units", build_id, data):
                    self._units[build_id] = units_from_text(data)
        except (sqlite3.DatabaseError, ValueError, TypeError, OSError, AttributeError) as exc:
            self._read_failed(exc)

    # --- reads ------------------------------------------------------------------------------------

    def _document(self, name: str) -> dict[str, tuple[str, str]] | None:
        """The document *name* (``files`` or ``mirrored``: a name -> (stat signature, sha256)), or None where
        there is none or its tag does not check."""
        entries = self._read_document(name)
        if entries is None:
            return None
        document = {entry: (sig, sha) for entry, (sig, sha) in entries.items()}
        if not all(type(sig) is str and type(sha) is str for sig, sha in document.values()):
            raise ValueError(f"the cache's {name} holds an entry of another shape")
        return document

    def previous_site(self, marker_sig: str | None) -> PreviousSite | None:
        """What the live site published, as the build that wrote its verification.json recorded it, while that
        file has the stat *marker_sig* it had then: its claims need not be parsed again (0.06 s at 10,000
        records, ~0.7 s at 100,000).  None where there is no such record, or the file is another one (edited,
        replaced): that file's claims are then read from it, as from any verification.json."""
        doc = self._document_for("previous_site", "marker", marker_sig) if marker_sig is not None else None
        if doc is None:
            return None
        try:
            site = PreviousSite(doc["build_id"], {pid: PublishedBefore(pid, sha256, built_at, events)
                                                  for pid, (sha256, built_at, events) in doc["published"].items()})
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        # (values of another type, even under this user's tag, would stop the rollback rule's comparisons)
        if (site.build_id is None or type(site.build_id) is str) and all(
                type(p.sha256) is type(p.built_at) is str and type(p.event_count) is int
                for p in site.published.values()):
            return site
        return None

    def save_previous_site(self, marker_sig: str, site: PreviousSite) -> None:
        """Record what the site whose verification.json has the stat *marker_sig* published (``previous_site``)."""
        if self.db is not None:
            published = {pid: (p.sha256, p.built_at, p.event_count) for pid, p in site.published.items()}
            self._save_document("previous_site", {"marker": marker_sig, "build_id": site.build_id,
                                                  "published": published})

    def addresses(self) -> RecordedAddresses | None:
        """The short-address plan the last build recorded, with the records it was made for; None where none is
        recorded, or it does not check."""
        if self.db is None:
            return None
        try:
            doc = self._read_document("addresses")
            found = RecordedAddresses([(pid, arxiv_id, version) for pid, arxiv_id, version in doc["records"]],
                                      doc["per_record"],
                                      [(folder, label, pids) for folder, label, pids in doc["shared"]])
        except sqlite3.DatabaseError as exc:
            self._read_failed(exc)
            return None
        except (ValueError, TypeError, KeyError):
            return None
        if not found.well_formed():
            return None
        self._addresses_records = found.records
        return found

    def save_addresses(self, records: list[tuple[str, str, int]], per_record: dict[str, int],
                       shared: list[tuple[str, str, list[str]]]) -> None:
        """Record the short-address plan made for *records* (``addresses``), unless it is the one stored (the
        plan is made of the records' ids and versions alone)."""
        if self.db is not None and records != self._addresses_records and self._save_document(
                "addresses", {"records": records, "per_record": per_record, "shared": shared}):
            self._addresses_records = records

    def template_references(self, build_key: str) -> dict[str, list[str] | None]:
        """The templates each template source uses (sha256 of the source -> names, or None: not known), as a
        builder of *build_key* found them (``template_uses.references``); {} where none are kept that check."""
        doc = self._document_for("template_references", "build_key", build_key)
        found = doc.get("references") if doc is not None else None
        if not isinstance(found, dict):
            return {}
        return {sha: names for sha, names in found.items()
                if names is None or (type(names) is list and all(type(n) is str for n in names))}

    def save_template_references(self, build_key: str, references: dict[str, list[str] | None]) -> None:
        if self.db is not None:
            self._save_document("template_references", {"build_key": build_key, "references": references})

    def file_sha(self, rel: str, sig: str) -> str | None:
        entry = self._files.get(rel)
        return entry[1] if entry and entry[0] == sig else None

    def same_size(self, rel: str, sig: str) -> bool:
        """Whether the file index knows *rel* with another stat of the same size as *sig* says: the file may be
        the same bytes, touched (a checkout, a copy without its times), and is worth hashing before verifying."""
        entry = self._files.get(rel)
        return entry is not None and entry[0] != sig and signature_size(entry[0]) == signature_size(sig)

    def inspections(self, shas: list[str], trust: str) -> dict[str, Inspection]:
        """Cached verification results for these digests under this trust set (a part whose tag does not check
        counts as none, and a damaged result is skipped: each is verified again)."""
        found: dict[str, Inspection] = {}
        if self.db is None or not shas:
            return found
        wanted: dict[str, list[str]] = {}
        for sha in dict.fromkeys(shas):
            wanted.setdefault(sha[:1], []).append(sha)
        parsed_checks: dict = {}
        for part, part_shas in sorted(wanted.items()):
            try:
                results = self._results_part(part, trust)
            except sqlite3.DatabaseError as exc:
                self._read_failed(exc)
                return {}
            for sha in part_shas:
                try:
                    inspection = inspection_from_json(results[sha], parsed_checks)
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue
                if inspection.sha256 == sha:
                    found[sha] = inspection
        return found

    def _results_part(self, part: str, trust: str) -> dict:
        """The stored results of the digests starting with *part* under *trust* (``_part``)."""
        return self._part("inspections", part, "trust", trust, "results")

    def mirrored(self, read_now: bool = True) -> MirrorRecord | None:
        """The record of each published record's bundle.json as the last build left it in the output (stat
        signature and sha256: a file whose signature differs is hashed again, an edit of the live site), its tag
        checked; None where this cache holds no such record that checks, or there is no cache: nothing in the
        output is proven then.

        Not *read_now*: a record read (and its tag checked) where its bytes are first asked for, which may be
        the child process that looks the mirrored bundles up (``MirrorLookups``), so that a no-op build never
        reads it (~5 ms at 10,000 records: the bytes read, ~3 ms, and their tag checked); its document is None
        where there is no such record.  Its reads see the record as stored: this build holds the cache's lock,
        and writes the record only once its lookups are done with."""
        if self.db is None:
            return None
        if self._mirrored is None:
            if not read_now:
                assert self.path is not None and self._bound_key is not None
                self._mirrored = MirrorRecord(StoredDocument(self.path, "mirrored", self._bound_key).read)
                return self._mirrored
            try:
                data = self._checked_bytes("mirrored")
            except sqlite3.DatabaseError as exc:
                self._read_failed(exc)
                return None
            self._mirrored = MirrorRecord(data) if data is not None else None
        elif read_now and self._mirrored.document is None:  # (one read where it was asked for: none that checks)
            return None
        return self._mirrored

    def save_mirrored(self, entries: dict[str, tuple[str, str]]) -> None:
        """Keep exactly *entries* (pith id -> (signature, sha256)), written only when they differ from what is
        stored (a document whose tag did not check counts as not stored, and is replaced)."""
        if self.db is None:
            return
        data, stored = orjson.dumps(entries), self.mirrored()
        if (stored is None or stored.document != data) and self._save_document("mirrored", data):
            self._mirrored = MirrorRecord(data, dict(entries))

    def list_rows(self, build_key: str) -> dict[str, bytes]:
        """Row digest -> a record's list row (UTF-8) rendered under *build_key*, from the parts whose tag checks
        (a row is HTML the list pages show as it is: an unchecked one could be anything)."""
        if self.db is None:
            return {}
        rows: dict[str, bytes] = {}
        stored: dict[str, set[str]] = {}
        try:
            for part in sorted(DIGEST_PARTS):
                found = {digest: html.encode() for digest, html in
                         self._part("rows", part, "build_key", build_key, "rows").items()
                         if isinstance(html, str) and digest[:1] == part}
                rows.update(found)
                stored[part] = set(found)
        except sqlite3.DatabaseError as exc:
            self._read_failed(exc)
            return {}
        self._rows = (build_key, stored)
        return rows

    def save_rows(self, build_key: str, rows: dict[str, bytes]) -> None:
        """Keep exactly *rows* (the shown records') under *build_key*, rewriting only the parts whose rows are
        not the ones stored (all of them where this cache did not read what is stored)."""
        if self.db is None:
            return
        kept_key, stored = self._rows
        if kept_key != build_key:
            stored = {}
        parts: dict[str, dict[str, bytes]] = {part: {} for part in DIGEST_PARTS}
        for digest, html in rows.items():
            if digest[:1] in parts:
                parts[digest[:1]][digest] = html
        try:
            self.db.execute("BEGIN")
            for part, part_rows in sorted(parts.items()):
                if stored.get(part) != set(part_rows):
                    self._write_document(f"rows/{part}", {"build_key": build_key, "rows": {
                        digest: html.decode() for digest, html in part_rows.items()}})
            self.db.execute("COMMIT")
            self._rows = (build_key, {part: set(part_rows) for part, part_rows in parts.items()})
        except sqlite3.DatabaseError as exc:
            self._write_failed(exc)
        except (TypeError, UnicodeDecodeError):  # (a row orjson cannot write: none is kept, all made again)
            self.db.execute("ROLLBACK")

    def units(self, build_id: str | None) -> dict[str, tuple[str, str]] | None:
        """unit -> (key, files as ``unit_files`` keeps them) of the tree built with *build_id*, if this cache saw it."""
        return self._units.get(build_id) if build_id else None

    # --- writes (after a successful build) --------------------------------------------------------

    def save_inputs(self, files: dict[str, tuple[str, str]], new_inspections: list[Inspection], trust: str) -> None:
        """Remember inputs and their verification when the output itself did not change."""
        if self.db is None:
            return
        try:
            self.db.execute("BEGIN")
            self._write_inputs(files, new_inspections, trust)
            self.db.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            self._write_failed(exc)

    def _write_inputs(self, files, new_inspections, trust) -> None:
        """Write what changed since the cache was read: a one-file change writes the file index and the parts of
        the results that gain or lose one (a sixteenth of them each), not every result."""
        old = self._files
        if files != old:
            self._write_document("files", files)
        live = {sha for _, sha in files.values()}
        changes: dict[str, tuple[dict, set]] = {}
        for i in new_inspections:
            if i.sha256:
                changes.setdefault(i.sha256[:1], ({}, set()))[0][i.sha256] = inspection_to_json(i)
        for sha in {sha for _, sha in old.values()} - live:
            changes.setdefault(sha[:1], ({}, set()))[1].add(sha)
        for part, (added, gone) in sorted(changes.items()):
            if part not in DIGEST_PARTS:
                continue
            results = {sha: r for sha, r in self._results_part(part, trust).items() if sha not in gone}
            results.update(added)
            try:
                self._write_document(f"inspections/{part}", {"trust": trust, "results": results})
            except TypeError:  # (text orjson cannot write: those results are made again, as if never stored)
                continue
        self._files = dict(files)

    def save(self, files: dict[str, tuple[str, str]], new_inspections: list[Inspection], trust: str,
             units: dict[str, tuple[str, str]], build_id: str, keep_build_id: str | None) -> None:
        """Record a finished build; keep the units of *keep_build_id* too (the tree now beside the output)."""
        if self.db is None:
            return
        try:
            self.db.execute("BEGIN")
            self._write_inputs(files, new_inspections, trust)
            self.db.execute("DELETE FROM units WHERE build_id NOT IN (?, ?)", (build_id, keep_build_id or ""))
            data = units_to_text(units)
            self.db.execute("INSERT OR REPLACE INTO units VALUES (?, ?, ?)",
                            (build_id, data, self._key.tag("units", build_id, data)))
            self.db.execute("COMMIT")
            self._units = {b: u for b, u in self._units.items() if b == keep_build_id}
            self._units[build_id] = dict(units)
        except sqlite3.DatabaseError as exc:
            self._write_failed(exc)

    def quick(self, input_fingerprint: str, marker_sig: str | None) -> dict | None:
        """The outcomes of the last build if its inputs (by stat) and output are these; else None.

        The key is stored apart from the outcomes, so a build that changed something does not parse them."""
        if self.db is None or marker_sig is None:
            return None
        try:
            key = f"{input_fingerprint} {marker_sig}"
            row = self.db.execute("SELECT value FROM meta WHERE key='quick_key'").fetchone()
            if row is None or row[0] != key:
                return None
            value = self.db.execute("SELECT value FROM meta WHERE key='quick'").fetchone()
            tag = self.db.execute("SELECT value FROM meta WHERE key='quick_tag'").fetchone()
            if value is None or tag is None or not self._key.checks(tag[0], "quick", key, value[0]):
                return None  # (an answer this user's builder did not write keeps no output)
            return orjson.loads(value[0])  # (an answer orjson refuses, as a lone surrogate, is none: the build plans)
        except (sqlite3.DatabaseError, ValueError):
            return None

    def save_quick(self, input_fingerprint: str, marker_sig: str | None, report) -> None:
        if self.db is None or marker_sig is None:
            return
        doc = json.dumps({"outcomes": [o.brief() for o in report.outcomes], "warnings": report.warnings})
        key = f"{input_fingerprint} {marker_sig}"
        try:
            self.db.execute("BEGIN")
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('quick', ?)", (doc,))
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('quick_key', ?)", (key,))
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('quick_tag', ?)", (self._key.tag("quick", key, doc),))
            self.db.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            self._write_failed(exc)

