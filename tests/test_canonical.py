"""Known answers from real resolver pages (tests/vectors, copied from ../shared/vectors)."""

import base64
import json

import pytest
from nacl.signing import VerifyKey

from site_builder.canonical import canon, digest, pith_id_from_digest, title_canon_sha256
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


def test_canon_matches_python_recipe_and_keeps_unicode():
    obj = {"b": [1, 2.5, None, True], "a": "é\u2028\"\\", "ä": {}}
    assert canon(obj) == json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert "é".encode() in canon(obj)


def test_canon_refuses_nan_and_lone_surrogates():
    with pytest.raises(ValueError):
        canon({"x": float("nan")})
    with pytest.raises(ValueError):
        canon({"x": "\ud800"})
