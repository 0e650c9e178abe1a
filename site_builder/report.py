"""The build report: what happened to every input file, for people and machines."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Iterator

import orjson

from site_builder import __version__
from site_builder.incremental import IncrementalStore
from site_builder.inspection import Inspection
from site_builder.verification import ALL_PASSED, CHECK_FAMILIES, CHECK_ORDER

PUBLISHED, REJECTED, SUPERSEDED = "published", "rejected", "superseded"
STATUSES = frozenset((PUBLISHED, REJECTED, SUPERSEDED))

# Rejection classes: a reader of verification.json sees at a glance what kind of attack or damage it was.
CHECK_CLASSES = {
    "file_type": "filesystem", "file_read": "filesystem", "file_size": "filesystem", "file_changed": "filesystem",
    "file_name": "filesystem",
    "json_encoding": "json", "json_syntax": "json", "json_duplicate_key": "json", "json_number": "json",
    "json_depth": "json",
    **CHECK_FAMILIES,  # (the verifier's checks: their families, from its registry)
}


@dataclass(slots=True)
class FileOutcome:
    inspection: Inspection
    status: str
    note: str = ""
    known_pith_number: str | None = None  # when restored from the cache without a summary

    @property
    def pith_number(self) -> str | None:
        return self.inspection.summary.pith_number if self.inspection.summary else self.known_pith_number

    def brief(self) -> list:
        """What the next build's no-op answer shows of this outcome (``from_brief``): a plain array (with orjson,
        the answer of 10,000 files reads in 10-12 ms, against 19-27 ms as objects read by the standard parser)."""
        i = self.inspection
        return [i.rel, i.sha256, self.status, i.check, i.reason, self.note, self.pith_number]

    @classmethod
    def from_brief(cls, brief: list) -> FileOutcome:
        """The outcome ``brief`` shows (without the result's checks and summary); TypeError/ValueError for an
        array of another shape."""
        rel, sha256, status, check, reason, note, pith_number = brief
        if not (type(rel) is type(sha256) is type(reason) is type(note) is str and status in STATUSES
                and (check is None or type(check) is str) and (pith_number is None or type(pith_number) is str)):
            raise TypeError("an outcome of another shape")  # (even under the user's tag: a builder's bug)
        return cls(Inspection(rel, sha256, 0, check or None, reason), status, note, pith_number)

    def as_json(self) -> dict:
        i = self.inspection
        doc: dict = {"path": i.rel, "sha256": i.sha256, "size": i.size, "status": self.status,
                     "pith_number": i.summary.pith_number if i.summary else None}
        if i.summary:
            doc["built_at"] = i.summary.built_at
            doc["event_count"] = i.summary.event_count
        # Nearly every file passed every check (the shared ALL_PASSED): not looking through its fifteen results
        # makes a line in 0.7 µs instead of 2.5 (18 ms a build at 10,000 files); any other results are looked at.
        every_check_passed = i.checks is ALL_PASSED
        doc["failed_checks"] = [] if every_check_passed else [{"check": c.name, "reason": c.detail}
                                                              for c in i.checks if c.status == "failed"]
        if i.check and not doc["failed_checks"]:
            doc["failed_checks"] = [{"check": i.check, "reason": i.reason}]
        if i.check:
            doc["rejected_by"] = i.check
            doc["class"] = CHECK_CLASSES.get(i.check, "other")
        skipped = [] if every_check_passed else [c.name for c in i.checks if c.status == "skipped"]
        if skipped:
            doc["skipped_checks"] = skipped
        doc["warnings"] = [{"code": w.code, "message": w.message} for w in i.warnings]
        if self.note:
            doc["note"] = self.note
        return doc


RENDERED_KEPT = 5_000
# verification.json holds every published file's line (the manifest a later build, or ``--live``, reads) and the
# first INLINE_OTHERS of the others; past that the others are in pages of PAGE_LINES lines
# (verification/files-0001.json, ...), so that 200,000 junk files make no 112 MB report (Pages refuses files
# over 100 MB).  The HTML report lists as many rows.
INLINE_OTHERS = 1_000
PAGE_LINES = 10_000
# The lines of a report file are made, and kept for serve's next build, PIECE_LINES at a time.
PIECE_LINES = 2_000


def pieces(items: list) -> Iterator[tuple[int, list]]:
    """*items* PIECE_LINES at a time: (the first's index, the piece)."""
    return ((start, items[start:start + PIECE_LINES]) for start in range(0, len(items), PIECE_LINES))


@dataclass
class BuildReport:
    outcomes: list[FileOutcome] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    pages_written: int = 0
    files_written: int = 0
    files_reused: int = 0
    seconds: float = 0.0
    search_seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, tuple[float, float]] = field(default_factory=dict)  # stage -> CPU s (this process, workers)
    rendered: list[str] = field(default_factory=list)  # files rendered anew (serve reloads their pages), the first
    rendered_more: bool = False  # ... RENDERED_KEPT of them; True if there were more
    removed: list[str] = field(default_factory=list)  # pages of records no longer published
    changed: bool = True
    search_behind: bool = False  # published with the previous search index (BuildOptions.defer_search)
    saved_in_background: bool = False  # the cache is being saved by a detached process (stages/remember.py)
    # Why no twin was linked where one was asked for, for the person at the terminal (not in verification.json:
    # it depends on the machine, and the same inputs make the same site).
    twin_note: str = ""
    cache_note: str = ""  # why the build kept no cache (no private place for the cache key)
    reuse_note: str = ""  # why the build took nothing over from a tree in the output folder (others may write to it)

    def stage_line(self) -> str:
        """Where the time went, on one line (``build --verbose``): each stage that took 10 ms or more, in wall
        seconds, with the CPU seconds of this process and of its worker processes where they worked (at the
        ``search_index`` stage, Pagefind's)."""
        parts = []
        for stage, wall in self.timings.items():
            if wall < 0.01:
                continue
            main, workers = self.cpu.get(stage, (0.0, 0.0))
            cpu = f" (CPU {main:.2f}s, workers {workers:.2f}s)" if workers >= 0.01 else ""
            parts.append(f"{stage} {wall:.2f}s{cpu}")
        return "stages: " + ("; ".join(parts) or "none took 10 ms")

    def note_rendered(self, rels: list[str]) -> None:
        """Remember files rendered anew, up to RENDERED_KEPT: past a few hundred pages serve reloads every open
        page anyway, and a full build of 100,000 records would otherwise hold a million paths (~90 MB)."""
        room = RENDERED_KEPT - len(self.rendered)
        if len(rels) > room:
            self.rendered.extend(rels[:max(room, 0)])
            self.rendered_more = True
        else:
            self.rendered.extend(rels)

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def rejected(self) -> list[FileOutcome]:
        return [o for o in self.outcomes if o.status == REJECTED]

    def class_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for o in self.rejected:
            cls = CHECK_CLASSES.get(o.inspection.check or "", "other")
            counts[cls] = counts.get(cls, 0) + 1
        return dict(sorted(counts.items()))

    def summary_line(self) -> str:
        return (f"{len(self.outcomes)} bundles read, {self.count(PUBLISHED)} published, "
                f"{self.count(REJECTED)} rejected, {self.count(SUPERSEDED)} superseded, "
                f"{self.pages_written} pages written in {self.seconds:.2f}s"
                + (f" (search index {self.search_seconds:.2f}s)" if self.search_seconds else ""))

    def document(self, trusted_key_ids: list[str], generated_at: str | None,
                 rows: ReportRows | None = None) -> ReportDocument:
        """verification.json's content: its head, the outcomes whose lines make its "files" array (serialised as
        the file is written, not held: 100,000 lines are ~50 MB), and the rows that need a reader's attention
        (the only ones the HTML report lists)."""
        rows = rows if rows is not None else ReportRows(IncrementalStore(keeps=False))
        ordered = sorted(self.outcomes, key=lambda o: o.inspection.rel)
        head = {
            "generator": "site-builder",
            "generator_version": __version__,
            "trusted_keys": trusted_key_ids,
            "checks": list(CHECK_ORDER),
            "counts": {"read": len(self.outcomes), PUBLISHED: self.count(PUBLISHED),
                       REJECTED: self.count(REJECTED), SUPERSEDED: self.count(SUPERSEDED)},
            "rejected_by_class": self.class_counts(),
            "warnings": self.warnings,
        }
        if generated_at:
            head["generated_at"] = generated_at
        others = [o for o in ordered if o.status != PUBLISHED]
        inline, paged = ordered, []
        if len(others) > INLINE_OTHERS:
            paged = others[INLINE_OTHERS:]
            inline, kept_others = [], INLINE_OTHERS  # every published line, and the first others
            for o in ordered:
                if o.status == PUBLISHED:
                    inline.append(o)
                elif kept_others:
                    inline.append(o)
                    kept_others -= 1
            head["more_files"] = {"count": len(paged), "pages": [
                page_path(n) for n in range(1, (len(paged) + PAGE_LINES - 1) // PAGE_LINES + 1)]}
        attention = [o.as_json() for o in others[:INLINE_OTHERS]]
        attention += [o.as_json() for o in ordered if o.status == PUBLISHED and o.inspection.warnings][
            :INLINE_OTHERS - len(attention)]
        return ReportDocument(head, ordered, rows, attention, inline, paged)


def page_path(number: int) -> str:
    return f"verification/files-{number:04d}.json"


@dataclass
class ReportDocument:
    head: dict  # everything but the per-file rows
    ordered: list[FileOutcome]  # one per input file, by path
    rows: ReportRows  # makes (or has kept) each outcome's line
    attention: list[dict]  # rejected and superseded files, then published files with warnings (INLINE_OTHERS)
    inline: list[FileOutcome]  # verification.json's "files": every published file, the first others
    paged: list[FileOutcome]  # the other files past INLINE_OTHERS, in the pages head["more_files"] names

    def identity(self) -> str:
        """What the "files" arrays are made of, one short line per file (``identity_line``), for the build id.
        Hashing this instead of the lines spares the build serialising 100,000 lines to name it."""
        return "\n".join([self.rows.piece(f"identity:{start}", piece, "\n", self.rows.identity_line)
                          for start, piece in pieces(self.ordered)])

    def chunks(self) -> Iterator[bytes]:
        """verification.json in pieces: one line per file (readable, diffable, fast to write for 100,000
        files), made as they are written; lines kept from an earlier build are reused, new ones not kept."""
        return self._document("verification.json", self.head, self.inline)

    def pages(self) -> Iterator[tuple[str, Iterator[bytes]]]:
        """The files past verification.json's share, as (path, pieces) per page."""
        paths = self.head.get("more_files", {}).get("pages", [])
        for n, path in enumerate(paths, 1):
            head = {"generator": "site-builder", "build_id": self.head.get("build_id"), "page": n, "pages": len(paths)}
            yield path, self._document(path, head, self.paged[(n - 1) * PAGE_LINES:n * PAGE_LINES])

    def _document(self, name: str, head: dict, outcomes: list[FileOutcome]) -> Iterator[bytes]:
        """*head* with a "files" array of *outcomes*' lines, in pieces (the file *name*'s)."""
        yield (json.dumps(head, ensure_ascii=False)[:-1] + ',\n"files": [\n').encode("utf-8")
        for start, piece in pieces(outcomes):
            text = self.rows.piece(f"lines:{name}:{start}", piece, ",\n", self.rows.line_unkept)
            yield ((",\n" if start else "") + text).encode("utf-8")
        yield b"\n]}\n"


def identity_line(o: FileOutcome) -> str:
    """What a file's line in verification.json is a function of: a result is a function of the file's bytes
    (``sha256``) under the build key (trusted keys, builder version), and a result made without bytes (a file
    that could not be read) is its check and reason."""
    i = o.inspection
    return f"{i.rel!r}\t{i.sha256}\t{i.size}\t{o.status}\t{o.note!r}\t{i.check}\t{i.reason!r}"  # (free text quoted)


class ReportRows:
    """Each file's outcome, its verification.json line and its ``identity_line``, made once per (result, status,
    note) and kept in the incremental store, all files' as one entry (``report-lines``: file -> them):
    serialising 10,000 lines takes a tenth of a second, and ``serve`` builds again and again with mostly the
    same results."""

    def __init__(self, store: IncrementalStore) -> None:
        self.store = store
        last = store.last("report-lines")
        self._kept: dict[str, tuple[tuple, tuple[FileOutcome, str, str]]] = last[1] if last is not None else {}

    def _recall(self, inspection: Inspection, status: str, note: str) -> tuple[FileOutcome, str, str] | None:
        entry = self._kept.get(inspection.rel)
        return entry[1] if entry is not None and entry[0] == (inspection, status, note) else None

    def outcome(self, inspection: Inspection, status: str, note: str = "") -> FileOutcome:
        """The outcome made before for this result, status and note, or a new one."""
        kept = self._recall(inspection, status, note)
        return kept[0] if kept is not None else FileOutcome(inspection, status, note)

    def line_unkept(self, outcome: FileOutcome) -> str:
        """The outcome's line, kept before or made without keeping it: a build writes its report before it
        saves what the next build reads, and ``keep_lines`` keeps them then (a one-shot build never does), so
        the build itself does not hold 100,000 lines."""
        kept = self._recall(outcome.inspection, outcome.status, outcome.note)
        return kept[1] if kept is not None else _line(outcome.as_json())

    def identity_line(self, outcome: FileOutcome) -> str:
        kept = self._recall(outcome.inspection, outcome.status, outcome.note)
        return kept[2] if kept is not None else identity_line(outcome)

    def piece(self, name: str, outcomes: list[FileOutcome], separator: str,
              line: Callable[[FileOutcome], str]) -> str:
        """The *line*s of *outcomes* joined by *separator*: a piece of a report file, or of the report's
        identity, kept in the store under *name* (``report-<name>``) with the outcomes it was made of, and
        reused while they are equal (a list of the very same outcomes compares at once).  A serve build that
        changes one file's outcome makes one piece of each again, not every line: at 10,000 files, 0.005-0.007 s
        less writing verification.json and 0.0035-0.005 s less naming the build (``bench_serve.py``'s changes,
        timed stage by stage against the commit before)."""
        return self.store.reuse(f"report-{name}", outcomes, lambda: separator.join([line(o) for o in outcomes]))

    def keep_lines(self, outcomes: list[FileOutcome]) -> None:
        """Keep the lines of *outcomes* for the next build (and no others: those of files gone are dropped)."""
        kept = {}
        for o in outcomes:
            material = (o.inspection, o.status, o.note)
            known = self._recall(*material)
            kept[o.inspection.rel] = (material, known if known is not None
                                      else (o, _line(o.as_json()), identity_line(o)))
        self._kept = self.store.keep("report-lines", None, kept)


def _line(doc: dict) -> str:
    """A file's line in verification.json, in orjson's compact form: 0.2 µs a line against the standard
    encoder's 4 µs (40 ms a build at 10,000 files, 0.4 s at 100,000).  The standard encoder takes what orjson
    refuses, as an escape (a lone surrogate, which no bundle that parses and no name the build reads holds)."""
    try:
        return orjson.dumps(doc).decode("utf-8")
    except TypeError:
        return json.dumps(doc)
