"""What a build keeps per record: the inspection of each file, compact and unchanged through the cache and on its
way back from a worker process."""

import hashlib
import json
import pickle
from dataclasses import replace

import pytest

from site_builder.inspection import by_reference, compact, inspect_bytes, inspection_from_json, inspection_to_json
from site_builder.keys import load_trust_set
from site_builder.records import DIGESTED_FIELDS, TextOf, paper_text

from conftest import REAL_FILES, signed_project
from signing import sign_bundle, to_bytes, with_paper, with_unmergeable_event


def _inspect(rel: str):
    result = inspect_bytes(rel, REAL_FILES[0].read_bytes(), load_trust_set())
    assert result.verified, result.error_line()
    return result


def test_results_handed_over_by_workers_share_the_passed_checks():
    """Each worker sends its own copy of the fifteen results; the build keeps the one shared ``ALL_PASSED``."""
    from site_builder.verification import ALL_PASSED

    first, second = (pickle.loads(pickle.dumps(_inspect(rel))) for rel in ("a.json", "b.json"))
    assert first.checks is not second.checks and first.checks == ALL_PASSED  # as they come from the workers
    a, b = compact(first), compact(second)
    assert a == first and a.summary.row_digest == first.summary.row_digest
    assert a.checks is b.checks is ALL_PASSED


def test_a_passed_bundles_checks_are_one_shared_tuple_in_every_process(tmp_path):
    """Nearly every bundle passes every check: its verdict is the shared ``ALL_PASSED`` in the worker, after the
    hand-over (``compact``) and after the cache; a bundle that fails keeps its own results, with their reasons,
    through all of them."""
    from site_builder.verification import ALL_PASSED

    passed = _inspect("a.json")
    bad = bytearray(REAL_FILES[0].read_bytes())
    bad[bad.index(b'"signature_b64":"') + 20] ^= 1  # one flipped bit in the bundle's first signature
    failed = inspect_bytes("b.json", bytes(bad), load_trust_set())
    assert passed.checks is ALL_PASSED and not failed.verified and failed.checks != ALL_PASSED
    for result in (passed, failed):
        handed_over = pickle.loads(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
        assert handed_over == result
        for copy in (compact(handed_over), inspection_from_json(json.loads(json.dumps(inspection_to_json(result))))):
            assert copy == result and (copy.checks is ALL_PASSED) == (result is passed)
    assert any(c.status == "failed" and "signature" in c.detail for c in pickle.loads(pickle.dumps(failed)).checks)
    # The cache stores no text for the checks of a bundle that passed them all (most of what it held), and
    # the failed one's in full.
    stored_passed, stored_failed = (json.dumps(inspection_to_json(r)) for r in (passed, failed))
    assert "receipt_signature" not in stored_passed and "receipt_signature" in stored_failed


def _words_of_real_file(pith_id, sha256):
    raw = REAL_FILES[0].read_bytes()
    assert hashlib.sha256(raw).hexdigest() == sha256
    return paper_text(json.loads(raw))


def test_a_result_is_the_same_after_the_cache_and_a_worker():
    result = _inspect("a.json")
    kept_by_build = by_reference(result)
    assert type(kept_by_build.summary.text) is TextOf and kept_by_build.summary.text.sha256 == result.sha256
    from_cache = inspection_from_json(json.loads(json.dumps(inspection_to_json(result))))
    from_worker = pickle.loads(pickle.dumps(kept_by_build, protocol=pickle.HIGHEST_PROTOCOL))  # (in memory)
    for kept in (kept_by_build, from_cache, from_worker):
        assert kept == result and kept.summary.row_digest == result.summary.row_digest
        assert type(kept.summary.text) is TextOf  # what a build holds: no words
        read_back = kept.summary.with_words(_words_of_real_file(kept.summary.pith_id, kept.summary.text.sha256))
        assert [getattr(read_back, n) for n in DIGESTED_FIELDS] == [getattr(result.summary, n) for n in DIGESTED_FIELDS]
        with pytest.raises(LookupError, match="held by reference"):
            _ = kept.summary.title
        assert kept.summary.with_words(result.summary.words).title == result.summary.title


def test_the_row_digest_follows_every_field():
    summary = _inspect("a.json").summary
    words = summary.words
    changes = [("version", 9), ("primary_cat", "math.CO"), ("built_at", "2030-01-01T00:00:00Z"),
               ("text", replace(words, title="Another title")), ("text", replace(words, authors=("A. Person",))),
               ("text", replace(words, abstract="x"))]
    for name, value in changes:
        assert replace(summary, **{name: value}).row_digest != summary.row_digest, name
    assert replace(summary).row_digest == summary.row_digest


def _signed(tmp_path, edit, keep_state: bool = False) -> tuple[bytes, object]:
    """A real bundle edited by *edit* (which returns it), re-signed with a test key, and the trust set of that
    key; *keep_state*: as ``sign_bundle``."""
    key, trust, _, base = signed_project(tmp_path)
    return to_bytes(sign_bundle(edit(base), key, keep_state=keep_state)), trust


def test_warnings_stay_with_a_result_published_or_rejected_and_through_the_cache(tmp_path):
    """What a bundle is warned of is on its report line however the result was had: made now, or read back from
    the cache by a later build; a rejected bundle keeps its warnings too."""
    raw, trust = _signed(tmp_path, lambda b: dict(b, mirror_note="an unknown field"))
    bad = bytearray(raw)
    bad[bad.index(b'"signature_b64":"') + 20] ^= 1
    for data, verified in ((raw, True), (bytes(bad), False)):
        result = inspect_bytes("a.json", data, trust)
        assert result.verified is verified
        assert [w.code for w in result.warnings] == ["unknown_fields"] and "mirror_note" in result.warnings[0].message
        assert inspection_from_json(json.loads(json.dumps(inspection_to_json(result)))) == result


def test_a_bundle_holding_a_float_is_hashed_as_the_format_writes_it(tmp_path):
    """A float is written by the canonical form's rules (``1e-07``), not as a fast JSON encoder writes it
    (``1e-7``): a genuine bundle that holds one must verify."""
    raw, trust = _signed(tmp_path, lambda b: with_paper(b, score=1e-07))
    assert b"1e-07" in raw
    result = inspect_bytes("a.json", raw, trust)
    assert result.verified, result.error_line()


def test_a_published_bundle_with_a_skipped_check_keeps_it_through_the_cache(tmp_path):
    """A bundle can verify with a check skipped (an event type this builder cannot merge: its state is checked by
    its hash only); a later build that reads the result from the cache must not show that check as passed."""
    raw, trust = _signed(tmp_path, with_unmergeable_event, keep_state=True)
    result = inspect_bytes("a.json", raw, trust)
    assert result.verified and [c.name for c in result.checks if c.status == "skipped"] == ["state_recomputed"]
    assert inspection_from_json(json.loads(json.dumps(inspection_to_json(result)))) == result
