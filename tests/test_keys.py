"""Pinned keys (keys.py): the only root of trust, so every malformed or contradictory key file is refused."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from conftest import ROOT
from signing import TestKey
from site_builder.keys import KeyFileError, key_from_document, load_trust_set

PINNED = json.loads((ROOT / "site_builder" / "data" / "pith-signing-key.json").read_text())


def test_the_built_in_key_is_the_resolvers_and_its_encodings_agree():
    trust = load_trust_set()
    (key,) = trust.keys
    assert key.key_id == PINNED["key_id"] and key.fingerprint_hex == PINNED["fingerprint_sha256_hex"]
    assert trust.by_id(PINNED["key_id"]) is key and trust.by_id("other") is None and trust.by_id(None) is None


def _changed(**fields) -> dict:
    return {**PINNED, **fields}


@pytest.mark.parametrize("doc, reason", [
    ([], "must be a JSON object"),
    (_changed(key_id=""), "key_id missing"),
    (_changed(algorithm="rsa"), "unsupported algorithm"),
    (_changed(algorithm=None), "unsupported algorithm None"),  # (stated as null: not the default left unsaid)
    (_changed(algorithm="Ed25519"), "unsupported algorithm 'Ed25519'"),
    (_changed(public_key_hex="zz"), "is not hex"),
    (_changed(public_key_b64="***"), "is not base64"),
    (_changed(public_key_hex="00" * 32), "differ"),
    (_changed(public_key_hex="00" * 31, public_key_b64=base64.b64encode(bytes(31)).decode()), "32 bytes"),
    ({"key_id": "k", "public_key_hex": "00" * 33}, "an Ed25519 public key is 32 bytes, got 33"),
    (_changed(fingerprint_sha256_hex="0" * 32), "fingerprint_sha256_hex does not match"),
    ({"key_id": "k"}, "needs public_key_hex or public_key_b64"),
    (_changed(key_id="pith-v1\nother"), "is not 1 to 128 visible ASCII characters"),
    (_changed(key_id="pith v1"), "is not 1 to 128 visible ASCII characters"),
    (_changed(key_id="pith\x00v1"), "is not 1 to 128 visible ASCII characters"),
    (_changed(key_id="k" * 129), "is not 1 to 128 visible ASCII characters"),
])
def test_a_malformed_or_contradictory_key_is_refused_with_its_reason(doc, reason):
    with pytest.raises(KeyFileError, match=reason):
        key_from_document(doc, "keys.json")


@pytest.mark.parametrize("left_out", ["public_key_hex", "public_key_b64"])
def test_either_encoding_alone_pins_the_same_key(left_out):
    """A key file gives the key as `public_key_hex` and/or `public_key_b64` (README); one alone is enough."""
    doc = {name: value for name, value in PINNED.items() if name != left_out}
    key = key_from_document(doc, "keys.json")
    assert key.public_key == key_from_document(PINNED, "keys.json").public_key
    assert key.fingerprint_hex == PINNED["fingerprint_sha256_hex"]


def test_a_key_file_is_strict_json_and_one_id_is_never_pinned_to_two_keys(tmp_path):
    one, other = TestKey("same-id"), TestKey("same-id")
    (tmp_path / "a.json").write_text(json.dumps(one.document()))
    (tmp_path / "b.json").write_text(json.dumps([other.document()]))
    assert [k.key_id for k in load_trust_set([tmp_path / "a.json"]).keys] == ["same-id"]
    with pytest.raises(KeyFileError, match="pinned twice"):
        load_trust_set([tmp_path / "a.json", tmp_path / "b.json"])
    (tmp_path / "dup.json").write_text('{"key_id": "x", "key_id": "y"}')
    with pytest.raises(KeyFileError, match="dup.json"):
        load_trust_set([tmp_path / "dup.json"])
    (tmp_path / "empty.json").write_text("[]")
    with pytest.raises(KeyFileError, match="no keys"):
        load_trust_set([tmp_path / "empty.json"])


def test_the_trust_sets_identity_follows_its_keys():
    a, b = TestKey("a"), TestKey("b")
    one = load_trust_set()
    from site_builder.keys import TrustSet
    two = TrustSet(tuple(sorted([key_from_document(a.document()), key_from_document(b.document())],
                                key=lambda k: k.key_id)))
    assert one.identity() != two.identity() and two.identity() == TrustSet(two.keys).identity()


def test_the_keys_are_pinned_in_one_order_whatever_the_order_of_the_files(tmp_path):
    """Pages list the pinned keys, and the same inputs give the same site: ``--trusted-key b.json --trusted-key
    a.json`` pins the set ``a.json b.json`` does, in the same order."""
    a, b = TestKey("b-key").write(tmp_path / "a.json"), TestKey("a-key").write(tmp_path / "b.json")
    assert load_trust_set([a, b]) == load_trust_set([b, a])
    assert [k.key_id for k in load_trust_set([a, b]).keys] == ["a-key", "b-key"]


def test_no_two_trust_sets_share_an_identity():
    """The identity keys every cached verification result: a set of one key whose id spells out another key's
    id and bytes shared the identity of the set of both keys (ids joined to keys with ":", entries with a line
    break), so that a result cached under the pair was reused under the one key."""
    from site_builder.keys import TrustedKey, TrustSet
    a, b = key_from_document(TestKey("a").document()), key_from_document(TestKey("b").document())
    pair = TrustSet((a, b))
    spelled = TrustSet((TrustedKey(f"a:{a.public_key_hex}\nb", b.public_key, {}),))
    assert spelled.identity() != pair.identity()
    assert TrustSet((b, a)).identity() == pair.identity()  # (the same set, in any order)


def test_the_same_key_pinned_under_another_id_verifies_nothing_its_old_id_did_even_from_the_cache(tmp_path):
    """A signature names its key by id: the resolver's key pinned as "renamed" verifies no bundle signed as
    pith-v1-2026-05.  The cache's results are kept by the trust set's identity, which must cover the ids too,
    or the results cached under the resolver's id would publish every bundle under the renamed one."""
    from site_builder.build import BuildOptions, build
    renamed = tmp_path / "renamed.json"
    renamed.write_text(json.dumps({**PINNED, "key_id": "renamed"}))
    options = dict(bundles=ROOT / "bundles", output=tmp_path / "site", search=False)
    assert build(BuildOptions(trust=load_trust_set(), **options)).count("published") == 4
    report = build(BuildOptions(trust=load_trust_set([renamed]), **options))
    assert report.count("published") == 0 and report.count("rejected") == 4


def test_another_key_pinned_under_the_same_id_verifies_nothing_the_first_did_even_from_the_cache(tmp_path):
    """The key file rewritten with another key under the same id (a key rotated, or the wrong one pasted): the
    results cached under the first key count for nothing under the second, whose signature no bundle holds.
    The trust set's identity, which keys the cache, must cover the keys' bytes as well as their ids."""
    from signing import sign_bundle, to_bytes
    from site_builder.build import BuildOptions, build
    first, second = TestKey("same-id"), TestKey("same-id")
    (tmp_path / "bundles").mkdir()
    for i, path in enumerate(sorted((ROOT / "bundles").glob("*.json"))):
        (tmp_path / "bundles" / f"b{i}.json").write_bytes(to_bytes(sign_bundle(json.loads(path.read_bytes()), first)))
    options = dict(bundles=tmp_path / "bundles", output=tmp_path / "site", search=False)
    keys = tmp_path / "key.json"
    assert build(BuildOptions(trust=load_trust_set([first.write(keys)]), **options)).count("published") == 4
    report = build(BuildOptions(trust=load_trust_set([second.write(keys)]), **options))
    assert report.count("published") == 0 and report.count("rejected") == 4


def test_a_key_file_that_is_no_regular_file_or_too_large_is_one_line_and_a_link_is_followed(tmp_path):
    """``--trusted-keys`` names a file: a FIFO (waited on for ever), a device such as /dev/zero (read for ever) or
    a file over 1 MB is refused with one line; a link to a key file is the user's own choice and is followed."""
    import os
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "big.json").write_bytes(b" " * (2 << 20))
    (tmp_path / "dangling.json").symlink_to(tmp_path / "gone.json")
    for path, why in ((tmp_path / "fifo.json", "a FIFO, not a regular file"),
                      (Path("/dev/zero"), "a device, not a regular file"),
                      (tmp_path / "big.json", "2097152 bytes is over the 1048576-byte limit"),
                      (tmp_path, "a folder, not a regular file"),
                      (tmp_path / "missing.json", "cannot read: No such file or directory"),
                      (tmp_path / "dangling.json", "cannot read: No such file or directory")):
        with pytest.raises(KeyFileError, match=f"^{re.escape(str(path))}: {why}$"):
            load_trust_set([path])
    key = TestKey("linked")
    (tmp_path / "real.json").write_text(json.dumps(key.document()))
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    assert [k.key_id for k in load_trust_set([tmp_path / "link.json"]).keys] == ["linked"]
