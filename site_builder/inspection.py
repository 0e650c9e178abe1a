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


def rejected(rel: str, check: str, reason: str, raw: bytes | None = None) -> Inspection:
    sha = hashlib.sha256(raw).hexdigest() if raw is not None else None
    return Inspection(rel, sha, len(raw) if raw is not None else 0, check, reason)


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
    checks as one string (most bundles share it, so it is parsed once per build).  A summary is stored without
    its words, which a build holds by reference to the bundle (``by_reference``)."""
    summary = None if i.summary is None else [*(getattr(i.summary, name) for name in _STORED_FIELDS),
                                               i.summary.row_digest]
    return [i.rel, i.sha256, i.size, i.check, i.reason, json.dumps([[c.name, c.status, c.detail] for c in i.checks]),
            [[w.code, w.message] for w in i.warnings], summary]


_CHECKS_SEEN: dict[str, tuple[CheckResult, ...]] = {}


def _checks_from_text(text: str) -> tuple[CheckResult, ...]:
    found = _CHECKS_SEEN.get(text)
    if found is None:
        found = tuple(CheckResult(*c) for c in json.loads(text))
        found = ALL_PASSED if found == ALL_PASSED else found
        if len(_CHECKS_SEEN) < 10_000:
            _CHECKS_SEEN[text] = found
    return found


_CHECKS_SHARED: dict[tuple[CheckResult, ...], tuple[CheckResult, ...]] = {}
_VALUES_SHARED: dict[object, object] = {}
_SHARED_LIMIT = 10_000  # entries; each a short value (a long one is kept as it is: the memo outlives records)


def _shared(value):
    if len(value) > 256:
        return value
    found = _VALUES_SHARED.get(value)
    if found is None:
        if len(_VALUES_SHARED) >= _SHARED_LIMIT:
            return value
        found = _VALUES_SHARED[value] = value
    return found


def compact(i: Inspection) -> Inspection:
    """The same inspection holding shared copies of what many records have alike: the check results (nearly
    every bundle's 15 are identical, and a worker process sends each its own copy: 100,000 copies are
    ~300 MB), and the summary's few-valued fields (year, categories, license: ~0.3 KB a record as copies)."""
    checks = ALL_PASSED if i.checks == ALL_PASSED else _CHECKS_SHARED.get(i.checks)  # (hashing 15 results: 5 µs)
    if checks is None:
        checks = i.checks
        if len(_CHECKS_SHARED) < _SHARED_LIMIT:
            _CHECKS_SHARED[checks] = checks
    summary = i.summary
    if summary is not None:
        summary = _compact_summary([getattr(summary, name) for name in SUMMARY_FIELDS], summary.row_digest)
    return Inspection(i.rel, i.sha256, i.size, i.check, i.reason, checks, i.warnings, summary)


_FEW_VALUED = tuple(SUMMARY_FIELDS.index(name) for name in ("year", "primary_cat", "license"))
_CROSS = SUMMARY_FIELDS.index("cross_cats")


def _compact_summary(values: list, row_digest: str) -> PaperSummary:
    for index in _FEW_VALUED:
        values[index] = _shared(values[index])
    values[_CROSS] = _shared(tuple(_shared(c) for c in values[_CROSS]))
    return summary_from_values(values, row_digest)


def _summary_from_json(values: list, sha256: str) -> PaperSummary:
    """A summary from its cache row (field values but the words, then the row digest), checked for shape and
    compacted, holding its words by reference to the bundle with digest *sha256*."""
    if not isinstance(values, list) or len(values) != len(_STORED_FIELDS) + 1 or not isinstance(values[-1], str) \
            or not isinstance(sha256, str):
        raise ValueError("damaged summary")
    fields = [tuple(v) if isinstance(v, list) else v for v in values[:-1]]
    fields.insert(_TEXT, TextOf(sha256))
    return _compact_summary(fields, values[-1])


def inspection_from_json(doc: list) -> Inspection:
    """Inverse of inspection_to_json; raises KeyError/TypeError/ValueError on a damaged entry."""
    rel, sha256, size, check, reason, checks, warnings, summary = doc
    return Inspection(rel, sha256, size, check, reason, _checks_from_text(checks),
                      tuple(VerificationWarning(*w) for w in warnings),
                      None if summary is None else _summary_from_json(summary, sha256))
