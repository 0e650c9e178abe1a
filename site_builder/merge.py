"""The deterministic merge (PITH_FORMAT.md §4): rebuild ``state`` from the events.

Only the two event types whose merge rule is known are merged.  For any other
type the rule is unknown, so :func:`recompute_state` refuses (raises
UnmergeableEvents) rather than guessing; the state is then checked by hash and
bundle signature only and the page says so.
"""

from __future__ import annotations

from typing import Any

KNOWN_EVENT_TYPES = ("record_created", "graph_snapshot")
STATE_LISTS = (
    "author_attestations",
    "timestamp_anchors",
    "storage_attestations",
    "citation_signatures",
    "replication_records",
    "corrections",
    "mirror_hints",
)


class UnmergeableEvents(Exception):
    def __init__(self, event_types: list[str]):
        super().__init__(", ".join(event_types))
        self.event_types = event_types


def event_entry(event: dict) -> dict:
    """How an event appears inside ``state.current``."""
    return {key: event[key] for key in ("event_id", "target", "created_at", "signer", "payload")}


def recompute_state(bundle: dict) -> dict:
    """The state a v1 merge produces from the bundle's events (without ``state_sha256``)."""
    events: list[dict] = bundle["events"]
    unknown = sorted({str(e.get("event_type")) for e in events} - set(KNOWN_EVENT_TYPES))
    if unknown:
        raise UnmergeableEvents(unknown)
    record_created = [e for e in events if e["event_type"] == "record_created"]
    if len(record_created) != 1:
        raise ValueError(f"expected one record_created event, found {len(record_created)}")
    created = record_created[0]
    current: dict[str, Any] = {
        "canonical_record": created["payload"]["canonical_record"],
        "source_aliases": bundle["source_aliases"],
        "graph_snapshots": [event_entry(e) for e in events if e["event_type"] == "graph_snapshot"],
    }
    for name in STATE_LISTS:
        current[name] = []
    current["record_created"] = event_entry(created)
    return {
        "state_type": "pith_open_graph_state",
        "state_version": "1.0",
        "pith_number": bundle["pith_number"],
        "merge_version": bundle["merge_version"],
        "event_count": len(events),
        "valid_event_count": len(events),
        "invalid_event_count": 0,
        "equivocation_count": 0,
        "current": current,
        "equivocations": [],
        "invalid_events": [],
        "applied_event_ids": [e["event_id"] for e in events],
    }
