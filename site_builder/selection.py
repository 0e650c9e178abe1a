"""Selection: which verified bundle is published for each record.

One page per record.  Among valid bundles for one pith number the latest
``built_at`` wins (ties broken by the byte digest, so the choice is stable);
the others are ``superseded``.  A bundle older than, or with fewer events than,
the one this mirror published before is a rollback: the previous bundle stays
published (after being verified again) and the build reports a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from site_builder.inspection import Inspection


@dataclass(frozen=True, slots=True)
class PublishedBefore:
    """What the previous build's verification.json says it published for one record."""

    pith_id: str
    sha256: str
    built_at: str
    event_count: int


@dataclass
class PreviousSite:
    """What a site's verification.json says it published: its build id and, by pith ID, each record's bundle."""

    build_id: str | None
    published: dict[str, PublishedBefore]


@dataclass(frozen=True, slots=True)
class Candidate:
    inspection: Inspection
    source: str | Path  # where the verified bytes live (an input file, the previous site, a copy of the live one)
    kept_from: str = ""  # "the previous site" or "the live site" when an input was older than that copy
    stands_for: Inspection | None = None  # (a kept copy) the input it is published in place of


@dataclass
class Selection:
    published: dict[str, Candidate] = field(default_factory=dict)
    superseded: dict[str, str] = field(default_factory=dict)  # rel -> reason


def instant(timestamp: str) -> tuple[str, str]:
    """A ``built_at`` (``YYYY-MM-DDTHH:MM:SSZ``, with or without a fraction of a second) as what orders it in
    time: as text, ``...:51.5Z`` sorts before ``...:51Z`` ("." before "Z"), half a second later though it is.
    The whole seconds, then the fraction's digits without trailing zeros (".5" after "", ".25" before ".5")."""
    seconds, dot, rest = timestamp.partition(".")
    return (seconds.removesuffix("Z"), rest.removesuffix("Z").rstrip("0")) if dot else (timestamp[:-1], "")


def _newness(inspection: Inspection) -> tuple[tuple[str, str], int, str]:
    assert inspection.summary is not None
    return (instant(inspection.summary.built_at), inspection.summary.event_count, inspection.sha256 or "")


def published_record(i: Inspection) -> PublishedBefore:
    """What a manifest says of a verified bundle it publishes."""
    return PublishedBefore(i.summary.pith_id, i.sha256, i.summary.built_at, i.summary.event_count)


def is_rollback(new: Inspection, before: PublishedBefore) -> bool:
    assert new.summary is not None
    return new.sha256 != before.sha256 and (
        instant(new.summary.built_at) < instant(before.built_at) or new.summary.event_count < before.event_count)


def select(candidates: list[Candidate]) -> Selection:
    """Pick the newest valid bundle per record (``published`` is in pith-id order); the rest are superseded."""
    selection = Selection()
    by_record: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        by_record.setdefault(candidate.inspection.pith_id, []).append(candidate)
    for pith_id in sorted(by_record):
        group = by_record[pith_id]
        if len(group) == 1:
            selection.published[pith_id] = group[0]
            continue
        group = sorted(group, key=lambda c: _newness(c.inspection), reverse=True)
        winner = group[0]
        selection.published[pith_id] = winner
        for loser in group[1:]:
            if loser.inspection.sha256 == winner.inspection.sha256:
                reason = f"same bytes as {winner.inspection.rel}, published once"
            else:
                reason = f"superseded by {winner.inspection.rel} (built_at {winner.inspection.summary.built_at})"
            selection.superseded[loser.inspection.rel] = reason
    return selection
