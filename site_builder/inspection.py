"""Inspect one input file: bytes -> strict JSON -> verification -> summary.

Pure (no I/O): it takes the bytes already read, so the same function serves
the build, ``site-builder verify``, ``pull`` and the worker processes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from site_builder.keys import TrustSet
from site_builder.records import PaperSummary, summarize
from site_builder.strict_json import StrictJSONError, parse_strict
from site_builder.verification import CheckResult, VerificationWarning, verify_bundle


@dataclass(frozen=True)
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
        bundle = parse_strict(raw)
    except StrictJSONError as exc:
        return Inspection(rel, sha, len(raw), exc.check, exc.reason)
    if not isinstance(bundle, dict):
        return Inspection(rel, sha, len(raw), "structure", "top-level JSON value is not an object")
    verdict = verify_bundle(bundle, trust)
    failure = verdict.first_failure
    if failure is not None:
        return Inspection(rel, sha, len(raw), failure.name, failure.detail, verdict.checks, verdict.warnings)
    return Inspection(rel, sha, len(raw), None, "", verdict.checks, verdict.warnings, summarize(bundle))


def inspection_to_json(i: Inspection) -> dict:
    """A plain-JSON form for the build cache (the checks as one string: most bundles share it)."""
    return {
        "rel": i.rel, "sha256": i.sha256, "size": i.size, "check": i.check, "reason": i.reason,
        "checks": json.dumps([[c.name, c.status, c.detail] for c in i.checks]),
        "warnings": [[w.code, w.message] for w in i.warnings],
        "summary": None if i.summary is None else {
            f: (list(v) if isinstance(v, tuple) else v) for f, v in vars(i.summary).items()},
    }


_CHECKS_SEEN: dict[str, tuple[CheckResult, ...]] = {}


def _checks_from_text(text: str) -> tuple[CheckResult, ...]:
    found = _CHECKS_SEEN.get(text)
    if found is None:
        found = tuple(CheckResult(*c) for c in json.loads(text))
        if len(_CHECKS_SEEN) < 10_000:
            _CHECKS_SEEN[text] = found
    return found


def inspection_from_json(doc: dict) -> Inspection:
    """Inverse of inspection_to_json; raises KeyError/TypeError/ValueError on a damaged entry."""
    summary = doc["summary"]
    if summary is not None:
        summary = PaperSummary(**{k: tuple(v) if isinstance(v, list) else v for k, v in summary.items()})
    return Inspection(
        rel=doc["rel"], sha256=doc["sha256"], size=doc["size"], check=doc["check"], reason=doc["reason"],
        checks=_checks_from_text(doc["checks"]),
        warnings=tuple(VerificationWarning(*w) for w in doc["warnings"]),
        summary=summary,
    )
