"""Inspect one input file: bytes -> strict JSON -> verification -> summary.

Pure (no I/O): it takes the bytes already read, so the same function serves
the build, ``site-builder verify``, ``pull`` and the worker processes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from site_builder.keys import TrustSet
from site_builder.records import SUMMARY_FIELDS, PaperSummary, TextOf, summarize, summary_from_values
from site_builder.strict_json import StrictJSONError, parse_strict_noting_floats
from site_builder.verification import ALL_PASSED, CheckResult, VerificationWarning, verify_bundle


@dataclass(frozen=True, slots=True)
class Inspection:
    rel: str
    sha256: str | None
    size: int
    check: str | None  # the check that rejected the file; None when it verified
    reason: str
    checks: tuple[CheckResult, ...] = ()
    warnings: tuple[VerificationWarning, ...] = ()
    summary: PaperSummary | None = None

    @property
    def verified(self) -> bool:
        return self.check is None

    @property
    def pith_id(self) -> str | None:
        return self.summary.pith_id if self.summary else None

    def error_line(self) -> str:
        return f"{self.rel}: {self.check}: {self.reason}"


def rejected(rel: str, check: str, reason: str) -> Inspection:
    """A file rejected with no bytes of it verified (unreadable, too large, not a plain file, changed after it
    was verified): it has no digest to name."""
    return Inspection(rel, None, 0, check, reason)


def inspect_bytes(rel: str, raw: bytes, trust: TrustSet) -> Inspection:
    """Never raises for bad input: every problem becomes a rejected Inspection."""
    sha = hashlib.sha256(raw).hexdigest()
    try:
        bundle, holds_float = parse_strict_noting_floats(raw)
    except StrictJSONError as exc:
        return Inspection(rel, sha, len(raw), exc.check, exc.reason)
    if not isinstance(bundle, dict):
        return Inspection(rel, sha, len(raw), "structure", "top-level JSON value is not an object")
    verdict = verify_bundle(bundle, trust, holds_float)
    failure = verdict.first_failure
    if failure is not None:
        return Inspection(rel, sha, len(raw), failure.name, failure.detail, verdict.checks, verdict.warnings)
    summary = summarize(bundle)  # with its row digest, computed here in the worker process and kept in the cache
    return Inspection(rel, sha, len(raw), None, "", verdict.checks, verdict.warnings, summary)


def by_reference(i: Inspection) -> Inspection:
    """The result with its summary's words held by reference (``records.TextOf``): what a build keeps."""
    if i.summary is None or type(i.summary.text) is TextOf:
        return i
    return Inspection(i.rel, i.sha256, i.size, i.check, i.reason, i.checks, i.warnings,
                      i.summary.by_reference(i.sha256))


_TEXT = SUMMARY_FIELDS.index("text")
_STORED_FIELDS = tuple(name for name in SUMMARY_FIELDS if name != "text")


def inspection_to_json(i: Inspection) -> list:
    """A compact plain-JSON form for the build cache: an array (faster to parse than an object), with the
    checks as null where every check passed (``ALL_PASSED``: nearly every bundle; their text was 60 % of the
    stored results) and as one string otherwise (parsed once per distinct text in a build).  A summary is stored
    without its words, which a build holds by reference to the bundle (``by_reference``)."""
    summary = None if i.summary is None else [*(getattr(i.summary, name) for name in _STORED_FIELDS),
                                               i.summary.row_digest]
    checks = None if i.checks == ALL_PASSED else json.dumps([[c.name, c.status, c.detail] for c in i.checks])
    return [i.rel, i.sha256, i.size, i.check, i.reason, checks, [[w.code, w.message] for w in i.warnings], summary]


def _checks_from_text(text: str | None, parsed: dict[str, tuple[CheckResult, ...]]) -> tuple[CheckResult, ...]:
    """The check results stored as *text* (None: every check passed), parsed once per distinct text in one read
    of the cache (*parsed*): parsing each row's took a tenth of a second at 10,000 records."""
    if text is None:
        return ALL_PASSED
    found = parsed.get(text)
    if found is None:
        found = tuple(CheckResult(*c) for c in json.loads(text))
        found = parsed[text] = ALL_PASSED if found == ALL_PASSED else found
    return found


def compact(i: Inspection) -> Inspection:
    """The same inspection holding the shared ``ALL_PASSED`` for a bundle that passed every check: each worker
    process sends its own copy of the fifteen results, and 100,000 copies are ~300 MB."""
    if i.checks is ALL_PASSED or i.checks != ALL_PASSED:
        return i
    return Inspection(i.rel, i.sha256, i.size, i.check, i.reason, ALL_PASSED, i.warnings, i.summary)


def _summary_from_json(values: list, sha256: str) -> PaperSummary:
    """A summary from its cache row (field values but the words, then the row digest), checked for shape,
    holding its words by reference to the bundle with digest *sha256*."""
    if not isinstance(values, list) or len(values) != len(_STORED_FIELDS) + 1 or not isinstance(values[-1], str) \
            or not isinstance(sha256, str):
        raise ValueError("damaged summary")
    fields = [tuple(v) if isinstance(v, list) else v for v in values[:-1]]
    fields.insert(_TEXT, TextOf(sha256))
    return summary_from_values(fields, values[-1])


def inspection_from_json(doc: list, parsed_checks: dict | None = None) -> Inspection:
    """Inverse of inspection_to_json; raises KeyError/TypeError/ValueError on a damaged entry.  *parsed_checks*:
    the check texts parsed so far in this read of the cache."""
    rel, sha256, size, check, reason, checks, warnings, summary = doc
    parsed = parsed_checks if parsed_checks is not None else {}
    return Inspection(rel, sha256, size, check, reason, _checks_from_text(checks, parsed),
                      tuple(VerificationWarning(*w) for w in warnings),
                      None if summary is None else _summary_from_json(summary, sha256))
