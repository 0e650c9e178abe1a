"""Quick pickling of the per-record classes: what goes in comes out, and a damaged state is refused."""

import pickle
from dataclasses import dataclass

import pytest

from site_builder.inspection import Inspection
from site_builder.records import PaperSummary, PaperText
from site_builder.slotted import quick_pickling
from site_builder.verification import CheckResult


@quick_pickling
@dataclass(frozen=True, slots=True)
class One:
    value: object


@quick_pickling
@dataclass(frozen=True, slots=True)
class Three:
    first: int
    second: str
    third: tuple


def test_objects_come_back_equal_field_by_field():
    for original in (One(None), One(("a", 1)), Three(1, "two", (3,)), Three(-5, "", ())):
        copy = pickle.loads(pickle.dumps(original, protocol=pickle.HIGHEST_PROTOCOL))
        assert copy == original and type(copy) is type(original)


def test_the_builds_records_round_trip():
    summary = PaperSummary(pith_id="A" * 26, pith_number="pith:2024:" + "A" * 26, year="2024", arxiv_id="2401.00001",
                           version=2, text=PaperText("A title", ("A. Author", "B. Author"), "An abstract."), primary_cat="cs.LG", cross_cats=("cs.AI", "stat.ML"),
                           submitted_at="2024-01-01T00:00:00Z", built_at="2026-05-01T00:00:00Z", event_count=3,
                           license="")
    inspection = Inspection("a.json", "0" * 64, 14_000, None, "", (CheckResult("structure", "passed"),), (), summary)
    copy = pickle.loads(pickle.dumps(inspection, protocol=pickle.HIGHEST_PROTOCOL))
    assert copy == inspection and copy.summary.row_digest == summary.row_digest
    assert copy.summary.words == summary.words


@pytest.mark.parametrize("state", [(1, "two"), (1, "two", (3,), "four"), ()])
def test_a_state_of_the_wrong_length_is_refused_not_half_set(state):
    """A damaged snapshot must not yield an object with slots left unset (reading one raises AttributeError far
    from the cause); the snapshot loader treats the ValueError as a damaged file."""
    blank = object.__new__(Three)
    with pytest.raises(ValueError):
        blank.__setstate__(state)
