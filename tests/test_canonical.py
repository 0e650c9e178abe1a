"""Known answers from real resolver pages (tests/vectors, copied from ../shared/vectors), and the fast canonical
encoder (orjson) against the reference recipe."""

import base64
import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.signing import VerifyKey

from site_builder.canonical import (CanonicalEncoder, canon, digest, pith_id_from_digest, pretty_json,
                                    resolver_json, title_canon_sha256)
from site_builder.keys import load_trust_set

from conftest import VECTORS

RECORDS = json.loads((VECTORS / "canonical_records.json").read_text())
RECEIPTS = json.loads((VECTORS / "receipt_signatures.json").read_text())
TITLES = json.loads((VECTORS / "title_canon_vectors.json").read_text())


@pytest.mark.parametrize("vector", RECORDS, ids=[v["pith_id"] for v in RECORDS])
def test_canonical_record_digest_and_pith_number(vector):
    assert digest(vector["canonical_record"]) == vector["canonical_sha256"]
    pith_id = pith_id_from_digest(vector["canonical_sha256"])
    assert pith_id == vector["pith_id"]
    year = vector["canonical_record"]["metadata"]["submitted_at"][:4]
    assert f"pith:{year}:{pith_id}" == vector["pith_number"]


@pytest.mark.parametrize("vector", RECEIPTS, ids=[v["pith_id"] for v in RECEIPTS])
def test_real_receipt_signatures_verify_with_pinned_key(vector):
    key = load_trust_set().keys[0]
    VerifyKey(key.public_key).verify(bytes.fromhex(vector["canonical_sha256"]),
                                     base64.b64decode(vector["signature_b64"]))
    assert pith_id_from_digest(vector["canonical_sha256"]) == vector["pith_id"]


@pytest.mark.parametrize("vector", TITLES, ids=[v["pith_id"] for v in TITLES])
def test_title_canon_hash(vector):
    assert title_canon_sha256(vector["title"]) == vector["title_canon_sha256"]
    # (as an arXiv listing wraps it: in upper case, a line break and runs of spaces and tabs between its words)
    wrapped = "  " + "\n\t".join(vector["title"].upper().split(" ", 1)).replace(" ", "   ") + " \r\n"
    assert title_canon_sha256(wrapped) == vector["title_canon_sha256"], wrapped


def test_canon_matches_python_recipe_and_keeps_unicode():
    obj = {"b": [1, 2.5, None, True], "a": "é\u2028\"\\", "ä": {}}
    assert canon(obj) == json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert "é".encode() in canon(obj)


def test_canon_refuses_nan_and_lone_surrogates():
    with pytest.raises(ValueError):
        canon({"x": float("nan")})
    with pytest.raises(ValueError):
        canon({"x": "\ud800"})


def reference(value) -> str:
    """The canonical form as PITH_FORMAT.md defines it."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# Every character but lone surrogates (which the strict parser refuses and both encoders reject), weighted
# toward the ones encoders treat specially: controls, quotes, backslash, DEL, U+2028, the BMP's end, astral.
_SPECIAL = st.sampled_from(list('\x00\x01\x08\t\n\x0c\r\x1f "\\/\x7f\x80\u00e9\u2028\u2029\ud7ff\ue000\uffff') + ["\U0001f600", "\U0010ffff"])
_TEXT = st.text(st.one_of(_SPECIAL, st.characters(exclude_categories=("Cs",))), max_size=12)
_PLAIN = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | _TEXT
JSON_WITHOUT_FLOATS = st.recursive(_PLAIN, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=6),
                                   max_leaves=30)


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(JSON_WITHOUT_FLOATS, st.data())
def test_fast_encoder_gives_the_reference_bytes(value, data):
    cache = CanonicalEncoder.for_document(value)
    assert cache.fast  # no float: orjson encodes it
    assert cache.text(value) == reference(value)
    assert cache.digest(value) == hashlib.sha256(reference(value).encode()).hexdigest()
    if isinstance(value, dict) and value:
        excluded = data.draw(st.lists(st.sampled_from(sorted(value)), max_size=3))
        rest = {k: v for k, v in value.items() if k not in excluded}
        assert cache.text_without(value, *excluded) == reference(rest)
        assert cache.digest_without(value, *excluded) == hashlib.sha256(reference(rest).encode()).hexdigest()


@settings(max_examples=300, deadline=None)
@given(st.recursive(_PLAIN | st.floats(allow_nan=False, allow_infinity=False),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4), max_leaves=20))
@pytest.mark.slow  # (a second or more: left to the full suite)
def test_a_document_with_a_float_uses_the_reference_encoder(value):
    cache = CanonicalEncoder.for_document(value)
    assert cache.text(value) == reference(value)
    assert cache.digest(value) == hashlib.sha256(reference(value).encode()).hexdigest()


def test_where_orjson_differs_or_refuses_the_reference_decides():
    assert CanonicalEncoder.for_document({"x": [1e-07, 1e16]}).text({"x": [1e-07, 1e16]}) == '{"x":[1e-07,1e+16]}'
    fast = CanonicalEncoder(fast=True)
    assert fast.text(2**70) == str(2**70)  # beyond orjson's 64 bits
    assert fast.text({"\uffff": 1, "\U0001f600": 2}) == reference({"\uffff": 1, "\U0001f600": 2})  # code point order
    with pytest.raises(ValueError):
        fast.digest({"x": "\ud800"})


@settings(max_examples=400, deadline=None)
@given(st.recursive(_PLAIN | st.floats(allow_nan=False, allow_infinity=False) | st.integers(),
                    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=6), max_leaves=30))
@pytest.mark.slow
def test_served_json_is_the_resolver_form_in_file_order(value):
    """state.json is written by orjson where it agrees with the reference form, by the reference elsewhere."""
    assert resolver_json(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if isinstance(value, dict) and len(value) > 1:
        reordered = dict(reversed(list(value.items())))
        assert list(json.loads(resolver_json(reordered))) == list(reordered)  # keys in the order given, not sorted


@settings(max_examples=400, deadline=None)
@given(st.recursive(_PLAIN | st.floats(allow_nan=False, allow_infinity=False) | st.integers(),
                    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=6), max_leaves=30))
@pytest.mark.slow
def test_the_record_page_shows_the_reference_pretty_form(value):
    """The canonical record on a record page: orjson's indented form where it agrees with Python's (no float, no
    integer beyond 64 bits), Python's elsewhere; the same text either way."""
    assert pretty_json(value) == json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False)
