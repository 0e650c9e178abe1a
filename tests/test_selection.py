"""Choosing one bundle per record (selection.py): the newest valid one, by its own signed values."""

from __future__ import annotations

import copy
import hashlib
import json

from generate import benchmark_key, make_bundle, sign_bundle, to_bytes
from site_builder.inspection import inspect_bytes
from site_builder.keys import TrustSet, key_from_document
from site_builder.selection import Candidate, instant, is_rollback, published_record, select

TRUST = TrustSet((key_from_document(benchmark_key().document()),))


def candidate(rel: str, raw: bytes) -> Candidate:
    inspection = inspect_bytes(rel, raw, TRUST)
    assert inspection.verified
    return Candidate(inspection, rel)


def test_the_newest_bundle_of_a_record_is_published_and_the_others_say_by_what():
    old, new, other = candidate("a.json", make_bundle(1)), candidate("b.json", make_bundle(1, variant=2)), \
        candidate("c.json", make_bundle(2))
    chosen = select([old, other, new])
    assert list(chosen.published) == sorted([old.inspection.pith_id, other.inspection.pith_id])  # pith-id order
    assert chosen.published[old.inspection.pith_id] is new
    assert chosen.superseded == {"a.json": f"superseded by b.json (built_at {new.inspection.summary.built_at})"}


def test_the_same_bytes_twice_are_published_once():
    raw = make_bundle(1)
    chosen = select([candidate("a.json", raw), candidate("b.json", raw)])
    assert len(chosen.published) == 1 and chosen.superseded == {"b.json": "same bytes as a.json, published once"}


def test_a_rollback_is_an_older_built_at_or_fewer_events_never_the_same_bytes():
    old, new = candidate("a.json", make_bundle(1)), candidate("b.json", make_bundle(1, variant=2))
    assert is_rollback(old.inspection, published_record(new.inspection))
    assert not is_rollback(new.inspection, published_record(old.inspection))
    assert not is_rollback(old.inspection, published_record(old.inspection))
    fewer = published_record(old.inspection)
    more_events = type(fewer)(fewer.pith_id, "another digest", fewer.built_at, fewer.event_count + 1)
    assert is_rollback(old.inspection, more_events)


def test_an_equally_new_bundle_in_other_bytes_is_no_rollback():
    """The same built_at and event count in other bytes (the bundle written out again, indented) replaces the
    published one: only an older built_at or fewer events is refused (README, "No rollback")."""
    raw = make_bundle(1)
    published = published_record(candidate("a.json", raw).inspection)
    rewritten = candidate("b.json", json.dumps(json.loads(raw), indent=2).encode())
    assert rewritten.inspection.sha256 != published.sha256
    assert not is_rollback(rewritten.inspection, published)


def test_a_tie_is_broken_by_the_bytes_digest_whatever_the_files_are_called():
    """Two files of one record, equally new (the same bundle written out twice, compact and indented): the same
    one is published whichever name sorts first, so renaming files never changes the site."""
    raw = make_bundle(1)
    indented = json.dumps(json.loads(raw), indent=2).encode()
    for names in (("a.json", "b.json"), ("b.json", "a.json")):
        compact, spaced = candidate(names[0], raw), candidate(names[1], indented)
        assert compact.inspection.sha256 != spaced.inspection.sha256
        newest = max((compact, spaced), key=lambda c: c.inspection.sha256)
        for order in ([compact, spaced], [spaced, compact]):
            chosen = select(order)
            assert chosen.published[compact.inspection.pith_id] is newest
            loser = compact if newest is spaced else spaced
            assert chosen.superseded == {loser.inspection.rel: f"superseded by {newest.inspection.rel} (built_at "
                                                    f"{newest.inspection.summary.built_at})"}


def built_at(stamp: str) -> bytes:
    """Record 1's bundle built at *stamp*, signed again."""
    bundle = json.loads(make_bundle(1))
    bundle["built_at"] = stamp
    return to_bytes(sign_bundle(bundle, benchmark_key()))


def with_extra_snapshot(bundle: dict, created_at: str) -> dict:
    """*bundle* with one more graph snapshot event (a copy of its own, created at *created_at*), unsigned."""
    extra = copy.deepcopy(next(e for e in bundle["events"] if e["event_type"] == "graph_snapshot"))
    extra["created_at"] = created_at
    return dict(bundle, events=[*bundle["events"], extra])


def test_built_at_is_ordered_in_time_not_as_text_where_a_fraction_of_a_second_is_written():
    """PITH_FORMAT.md allows a fraction of a second; as text, "...:51.5Z" sorts before "...:51Z"."""
    stamps = ["2026-09-01T00:00:50.999Z", "2026-09-01T00:00:51Z", "2026-09-01T00:00:51.25Z",
              "2026-09-01T00:00:51.5Z", "2026-09-01T00:00:52Z"]
    assert sorted(reversed(stamps), key=instant) == stamps
    assert instant("2026-09-01T00:00:51.500Z") == instant("2026-09-01T00:00:51.5Z")
    assert instant("2026-09-01T00:00:51.000Z") == instant("2026-09-01T00:00:51Z")
    whole, later = candidate("a.json", built_at("2026-09-01T00:00:51Z")), \
        candidate("b.json", built_at("2026-09-01T00:00:51.5Z"))
    assert select([whole, later]).published[whole.inspection.pith_id] is later
    assert select([later, whole]).published[whole.inspection.pith_id] is later
    assert not is_rollback(later.inspection, published_record(whole.inspection))  # (it was refused as one)
    assert is_rollback(whole.inspection, published_record(later.inspection))


def test_the_latest_built_at_is_published_even_where_an_older_bundle_holds_more_events():
    """The order is the time the resolver built the bundle, then (for one time) the events: an older bundle with
    an extra event is superseded by a newer one with fewer (README: "the latest built_at is published")."""
    bundle = json.loads(make_bundle(1))
    more = dict(with_extra_snapshot(bundle, "2026-08-31T00:00:00Z"), built_at="2026-09-01T00:00:00Z")
    newer = dict(bundle, built_at="2026-09-02T00:00:00Z")
    older_with_more = candidate("a.json", to_bytes(sign_bundle(more, benchmark_key())))
    newer_with_fewer = candidate("b.json", to_bytes(sign_bundle(newer, benchmark_key())))
    assert older_with_more.inspection.summary.event_count == newer_with_fewer.inspection.summary.event_count + 1
    for order in ([older_with_more, newer_with_fewer], [newer_with_fewer, older_with_more]):
        chosen = select(order)
        assert chosen.published[newer_with_fewer.inspection.pith_id] is newer_with_fewer
        assert list(chosen.superseded) == ["a.json"]


def test_for_one_built_at_the_bundle_with_more_events_is_published_whatever_the_digests():
    """Two bundles built at the same time, one with an extra event: the one with more events is published (the
    rollback rule would refuse the other next time), also where the other's digest sorts higher, which breaks a
    tie only of time and events."""
    bundle = json.loads(make_bundle(1))
    fewer_raw = to_bytes(sign_bundle(bundle, benchmark_key()))
    for day in range(1, 29):  # (an extra event whose bundle's digest sorts below the other's)
        more = with_extra_snapshot(bundle, f"2026-08-{day:02d}T00:00:00Z")
        more_raw = to_bytes(sign_bundle(more, benchmark_key()))
        if hashlib.sha256(more_raw).hexdigest() < hashlib.sha256(fewer_raw).hexdigest():
            break
    fewer, more = candidate("a.json", fewer_raw), candidate("b.json", more_raw)
    assert fewer.inspection.summary.built_at == more.inspection.summary.built_at
    assert more.inspection.sha256 < fewer.inspection.sha256
    for order in ([fewer, more], [more, fewer]):
        chosen = select(order)
        assert chosen.published[more.inspection.pith_id] is more and list(chosen.superseded) == ["a.json"]
