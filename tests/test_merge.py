"""The v1 merge (merge.py): the state the real bundles carry is the state their events make."""

from __future__ import annotations

import copy

import pytest

from site_builder.canonical import digest_without
from site_builder.merge import UnmergeableEvents, recompute_state


def test_the_real_bundles_states_are_recomputed_exactly(real_bundles):
    for bundle in real_bundles:
        state = dict(bundle["state"])
        stated = state.pop("state_sha256")
        assert recompute_state(bundle) == state
        assert digest_without(bundle["state"], "state_sha256") == stated


def test_an_unknown_event_type_cannot_be_merged_and_says_which(real_bundle):
    bundle = copy.deepcopy(real_bundle)
    bundle["events"].append({**bundle["events"][0], "event_type": "teleport"})
    with pytest.raises(UnmergeableEvents) as caught:
        recompute_state(bundle)
    assert caught.value.event_types == ["teleport"]


def test_a_record_needs_exactly_one_record_created_event(real_bundle):
    bundle = copy.deepcopy(real_bundle)
    created = next(e for e in bundle["events"] if e["event_type"] == "record_created")
    bundle["events"].append(copy.deepcopy(created))
    with pytest.raises(ValueError, match="one record_created"):
        recompute_state(bundle)


def test_the_state_follows_the_events_order_and_aliases(real_bundle):
    bundle = copy.deepcopy(real_bundle)
    bundle["source_aliases"] = [{"kind": "test", "value": "x"}, *reversed(bundle["source_aliases"])]  # (as given)
    state = recompute_state(bundle)
    assert state["current"]["source_aliases"] == bundle["source_aliases"]
    assert state["applied_event_ids"] == [e["event_id"] for e in bundle["events"]]
    assert state["event_count"] == len(bundle["events"])


def test_the_state_is_made_from_the_bundle_never_taken_from_the_state_it_is_checked_against(real_bundle):
    """§4: the state names the bundle's record and merge version: a state naming others is no merge of it."""
    bundle = copy.deepcopy(real_bundle)
    bundle["state"].update(pith_number="pith:2001:" + "A" * 26, merge_version="v0", state_version="0.9")
    state = recompute_state(bundle)
    assert (state["pith_number"], state["merge_version"]) == (bundle["pith_number"], bundle["merge_version"])
    assert state["state_version"] == "1.0"


def test_graph_snapshots_are_listed_in_the_bundles_order_not_sorted(real_bundle):
    """§4: one entry per graph_snapshot event, as the events come (a later snapshot whose id sorts first stays
    last)."""
    bundle = copy.deepcopy(real_bundle)
    snapshot = next(e for e in bundle["events"] if e["event_type"] == "graph_snapshot")
    later = {**copy.deepcopy(snapshot), "event_id": "0" * len(snapshot["event_id"])}
    bundle["events"].append(later)
    listed = [s["event_id"] for s in recompute_state(bundle)["current"]["graph_snapshots"]]
    assert listed == [snapshot["event_id"], later["event_id"]]
