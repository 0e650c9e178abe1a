"""Every check of PITH_FORMAT.md §1-§4: a real bundle tampered so that check is the one that rejects it."""

import base64
import copy
import json

import pytest

from site_builder.canonical import digest_without
from site_builder.keys import TrustSet, key_from_document
from site_builder.merge import recompute_state
from site_builder.verification import CHECK_ORDER, CHECKS, CheckFailed, verify_bundle
from site_builder.writing import is_plain_path
from site_builder import verification

from conftest import REAL_FILES, ROOT
from signing import TestKey, sign_bundle, with_unmergeable_event


def flip_b64(value: str) -> str:
    raw = bytearray(base64.b64decode(value))
    raw[5] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


def snapshot(b):
    return next(e for e in b["events"] if e["event_type"] == "graph_snapshot")


def record_created(b):
    return next(e for e in b["events"] if e["event_type"] == "record_created")


def fix_state_hash(b):
    b["state"]["state_sha256"] = digest_without(b["state"], "state_sha256")


TAMPERS = {
    "structure": lambda b: b.pop("events"),
    "identifiers": lambda b: b["canonical_record"]["source"].update(id="../../etc"),
    "key_pinned": lambda b: b["bundle_signature"].update(key_id="attacker-key"),
    "canonical_hash": lambda b: b["canonical_record"]["metadata"].update(license="http://example.org/stolen"),
    "pith_number": lambda b: b.update(pith_number="pith:1999:" + b["pith_number"].rsplit(":", 1)[1]),
    "aliases": lambda b: next(a for a in b["source_aliases"] if a["alias_kind"] == "doi").update(
        alias_value="10.48550/arxiv.9999.99999"),
    "receipt_signature": lambda b: record_created(b)["payload"]["receipt"].update(
        signature_b64=flip_b64(record_created(b)["payload"]["receipt"]["signature_b64"])),
    "event_hash": lambda b: snapshot(b)["payload"]["graph_snapshot"]["paper"].update(title="A different title"),
    "event_id": lambda b: snapshot(b).update(event_id="sha256:" + "0" * 64),
    "event_signature": lambda b: snapshot(b)["signature"].update(
        signature_b64=flip_b64(snapshot(b)["signature"]["signature_b64"])),
    "state_hash": lambda b: b["state"].update(event_count=99),
    "state_recomputed": lambda b: (b["state"]["current"]["corrections"].append({"note": "injected"}),
                                   fix_state_hash(b)),
    "bundle_hash": lambda b: b["links"].update(resolver="https://evil.example/"),
    "bundle_signature": lambda b: b["bundle_signature"].update(
        signature_b64=flip_b64(b["bundle_signature"]["signature_b64"])),
}


# A check holds several conditions: each of the others, alone, is rejected by its check too.
MORE_TAMPERS = {
    "a version outside 1-999": ("identifiers", lambda b: b["canonical_record"]["source"].update(version=0)),
    "an embedded pinned key with other bytes": ("key_pinned", lambda b: b["public_keys"][0].update(
        public_key_b64=TestKey("other").document()["public_key_b64"])),
    "an event signer naming another key than its signature": ("key_pinned", lambda b: snapshot(b)["signer"].update(
        key_id="someone-else")),
    "an event signer naming another fingerprint than its signature": ("key_pinned", lambda b: snapshot(b)[
        "signer"].update(public_key_fingerprint="0" * 32)),
    # (no hash covers the bundle signature's block but the signature itself, which an algorithm's name does not
    # change: only this check refuses a block that says it is not Ed25519)
    "a bundle signature that names another algorithm": ("key_pinned", lambda b: b["bundle_signature"].update(
        algorithm="rsa-pss")),
    "a record_created payload holding another record": ("canonical_hash", lambda b: record_created(b)["payload"][
        "canonical_record"]["metadata"].update(license="http://example.org/stolen")),
    "a record_created payload naming another digest": ("canonical_hash", lambda b: record_created(b)["payload"].update(
        canonical_sha256="0" * 64)),
    "a short pith number of another record": ("pith_number", lambda b: b.update(short_pith_number="pith:AAAAAAAA")),
    "a top-level source other than the record's": ("aliases", lambda b: b["source"].update(
        version=b["source"]["version"] + 1)),
    # (each signature's key is also checked where it is verified, later: the reason must still be the key)
    "a receipt naming a key that is not pinned": ("key_pinned", lambda b: record_created(b)["payload"][
        "receipt"].update(key_id="attacker-key")),
    "an event whose signer and signature name a key that is not pinned": ("key_pinned", lambda b: (
        snapshot(b)["signer"].update(key_id="attacker-key"), snapshot(b)["signature"].update(key_id="attacker-key"))),
    "a version above 999": ("identifiers", lambda b: b["canonical_record"]["source"].update(version=1000)),
    "an old-style arXiv id under no arXiv archive": ("identifiers", lambda b: b["canonical_record"]["source"].update(
        id="nonsense/0601001")),
    # (names Windows reserves, which a mirror copied to any file system could not hold as folders)
    "an old-style arXiv id under a name Windows reserves": ("identifiers", lambda b: b["canonical_record"][
        "source"].update(id="con/0601001")),
    "an old-style arXiv id under a reserved name with a subject": ("identifiers", lambda b: b["canonical_record"][
        "source"].update(id="nul.AG/0601001")),
    "a category in another case": ("identifiers", lambda b: b["canonical_record"]["metadata"].update(
        primary_cat="cs.lg")),
    "a built_at with a decimal point and no fraction": ("structure", lambda b: b.update(
        built_at=b["built_at"].replace("Z", ".Z"))),
    # (a regular expression's $ allows a line break after it: the identifiers check must refuse it, not a later one)
    "a pith number with a line break after it": ("identifiers", lambda b: b.update(
        pith_number=b["pith_number"] + "\n")),
    # (a decoder that skipped what is not base64 would read the same signature: one signed bundle, many files)
    "a signature with a character that is not base64": ("bundle_signature", lambda b: b["bundle_signature"].update(
        signature_b64=b["bundle_signature"]["signature_b64"][:20] + "*" + b["bundle_signature"]["signature_b64"][20:])),
}


def test_no_archive_a_record_names_is_a_name_windows_reserves():
    # An old-style id's first folder and every category's folder start with an archive's name; the verifier
    # holds no list of reserved names of its own, so each archive must be a plain folder name, as the writer
    # holds every output path to (no con, nul, lpt1, ...).
    assert not is_plain_path("con") and not is_plain_path("NUL")
    assert verification.ARXIV_ARCHIVES and not [a for a in verification.ARXIV_ARCHIVES if not is_plain_path(a)]


@pytest.mark.parametrize("name", list(MORE_TAMPERS))
def test_each_condition_of_a_check_is_checked(name, real_bundle, pinned):
    check, tamper = MORE_TAMPERS[name]
    tamper(real_bundle)
    assert verify_bundle(real_bundle, pinned).first_failure.name == check


def cut_signature(block: dict, length: int) -> None:
    raw = base64.b64decode(block["signature_b64"])
    block["signature_b64"] = base64.b64encode((raw * 2)[:length]).decode()


# The reason a mirror's operator reads: the field and what is wrong with it, not a Python error.
REASONS = {
    "a missing field": (lambda b: b.pop("events"), "structure", "bundle.events is missing"),
    "a missing nested field": (lambda b: b["state"].pop("current"), "structure", "bundle.state.current is missing"),
    "a list where an object belongs": (lambda b: b.update(state=[]), "structure", "bundle.state is not an object"),
    "true where an integer belongs": (lambda b: b["canonical_record"]["source"].update(version=True), "structure",
                                      "bundle.canonical_record.source.version is not an integer"),
    "a bundle signature one byte short": (lambda b: cut_signature(b["bundle_signature"], 63), "bundle_signature",
                                          "bundle_signature: an Ed25519 signature is 64 bytes, got 63"),
    "an event signature one byte long": (lambda b: cut_signature(b["events"][0]["signature"], 65), "event_signature",
                                         "events[0]: an Ed25519 signature is 64 bytes, got 65"),
    # (the parts of a bundle that hold other parts are checked through, not only at the top)
    "an event without its signer": (lambda b: b["events"][1].pop("signer"), "structure", "events[1].signer is missing"),
    "a receipt without its signature": (lambda b: record_created(b)["payload"]["receipt"].pop("signature_b64"),
                                        "structure", "record_created.payload.receipt.signature_b64 is missing"),
    "a snapshot without a title": (lambda b: snapshot(b)["payload"]["graph_snapshot"]["paper"].pop("title"),
                                   "structure", "events[1].payload.graph_snapshot.paper.title is missing"),
    "an alias without its value": (lambda b: b["source_aliases"][2].pop("alias_value"), "structure",
                                   "source_aliases[2].alias_value is missing"),
    "an embedded key without its id": (lambda b: b["public_keys"][0].pop("key_id"), "structure",
                                       "public_keys[0].key_id is missing"),
}


@pytest.mark.parametrize("name", list(REASONS))
def test_a_rejection_names_the_field_and_what_is_wrong(name, real_bundle, pinned):
    tamper, check, detail = REASONS[name]
    tamper(real_bundle)
    failure = verify_bundle(real_bundle, pinned).first_failure
    assert (failure.name, failure.detail) == (check, detail)


@pytest.mark.parametrize("field, value", [("version", 1), ("version", 999), ("id", "hep-th/9901001"),
                                          ("id", "math.AG/0601001"), ("id", "0704.0001"), ("id", "2501.00001")])
def test_identifiers_at_the_ends_of_what_arxiv_issues_pass_their_check(field, value, real_bundle, pinned):
    """The identifier check refuses only what arXiv never issues; a record at either end of a range passes it
    (only that check is asked: the hash check after it rejects a record whose source was edited)."""
    real_bundle["canonical_record"]["source"][field] = value
    verdict = verify_bundle(real_bundle, pinned)
    assert next(c for c in verdict.checks if c.name == "identifiers").status == "passed"


@pytest.mark.parametrize("value, accepted", [
    ("2024-02-29T23:59:59Z", True), ("2026-08-06T09:07:51.5Z", True), ("0001-01-01T00:00:00Z", True),
    ("2023-02-29T00:00:00Z", False), ("2026-13-01T00:00:00Z", False), ("2026-04-31T00:00:00Z", False),
    ("2026-08-06T24:00:00Z", False), ("2026-08-06T09:60:00Z", False), ("2016-12-31T23:59:60Z", False),
    ("0000-01-01T00:00:00Z", False), ("2026-08-06T09:07:51", False), ("2026-08-06 09:07:51Z", False),
])
@pytest.mark.parametrize("field, check", [("built_at", "structure"), ("submitted_at", "identifiers")])
def test_a_time_is_accepted_only_where_it_names_a_real_instant(real_bundle, pinned, field, check, value,
                                                              accepted):
    """``built_at`` and ``submitted_at`` go into pages' ``<time datetime>`` and feeds' dates, where a day or an
    hour that does not exist (a leap second either: HTML has none) makes the page and feed invalid: such a
    bundle is rejected by the check of that field, naming it (only that check is asked)."""
    where = real_bundle if field == "built_at" else real_bundle["canonical_record"]["metadata"]
    where[field] = value
    verdict = verify_bundle(real_bundle, pinned)
    result = next(c for c in verdict.checks if c.name == check)
    assert result.status == ("passed" if accepted else "failed")
    if not accepted:
        assert result.detail == f"{field} {value!r} is not an ISO 8601 UTC timestamp"


@pytest.mark.parametrize("category, accepted", [
    ("cs", True), ("hep-th", True), ("cs.AI", True), ("cond-mat.str-el", True), ("physics.optics", True),
    ("physics." + "a" * 32, True),                    # 40 characters: the longest accepted
    ("physics." + "a" * 33, False), (None, False), (7, False), ("", False),
    ("cs.", False), ("cs.ai", False), ("cs.AIX", False), ("CS.AI", False), ("cs.A1", False),
    ("cond-mat.STR", False), ("cond-mat.str_el", False), ("hep-th.XX", False), ("hep-th.xx", False),
    ("nonsense", False), ("nonsense.AI", False), ("index.html", False),
])
def test_a_category_is_an_arxiv_archive_and_its_subject_class_as_arxiv_spells_them(category, accepted):
    """Categories become folders: one spelling each, and none the site's own names (README's list of checks,
    ``identifiers``)."""
    assert verification.is_arxiv_category(category) is accepted


def test_every_category_the_generator_and_the_real_bundles_use_is_accepted(real_bundles):
    from generate import CATEGORIES
    metadata = [b["canonical_record"]["metadata"] for b in real_bundles]
    real = {c for m in metadata for c in [m["primary_cat"], *m["cross_cats_sorted"]]}
    for cat in [*CATEGORIES, *real, "hep-th", "math-ph", "cond-mat.mes-hall", "q-fin.CP", "nlin.AO", "eess.SP"]:
        assert verification.is_arxiv_category(cat), cat


def test_a_state_that_is_not_the_merge_names_the_part_that_differs(real_bundle, pinned):
    """The reason points the mirror's operator at the part of the state to look at, not at every part."""
    TAMPERS["state_recomputed"](real_bundle)
    failure = verify_bundle(real_bundle, pinned).first_failure
    assert (failure.name, failure.detail) == ("state_recomputed",
                                              "state differs from the merge of the events (in current)")
    real_bundle["state"]["event_count"] += 1
    fix_state_hash(real_bundle)
    failure = verify_bundle(real_bundle, pinned).first_failure
    assert failure.detail == "state differs from the merge of the events (in current, event_count)"


def test_a_receipt_signed_by_a_pinned_key_for_another_record_is_rejected(real_bundle, pinned):
    """The receipt is a signature over the record's digest: one the pinned key made for another record, moved
    into a bundle whose every other hash and signature is made anew with that key, proves nothing of this one."""
    key = TestKey()
    trust = TrustSet((key_from_document(key.document()),))
    other = sign_bundle(json.loads(REAL_FILES[1].read_bytes()), key)
    record_created(real_bundle)["payload"]["receipt"] = copy.deepcopy(record_created(other)["payload"]["receipt"])
    moved = sign_bundle(real_bundle, key, keep_receipt=True)
    assert verify_bundle(other, trust).first_failure is None
    assert verify_bundle(moved, trust).first_failure.name == "receipt_signature"


@pytest.mark.parametrize("path", REAL_FILES, ids=[p.stem for p in REAL_FILES])
def test_real_bundles_pass_every_check(path, pinned):
    verdict = verify_bundle(json.loads(path.read_bytes()), pinned)
    assert verdict.first_failure is None
    assert [c.name for c in verdict.checks] == list(CHECK_ORDER)
    assert all(c.status == "passed" for c in verdict.checks)
    assert verdict.warnings == ()


@pytest.mark.parametrize("check", list(TAMPERS))
def test_each_tamper_is_rejected_by_its_check(check, real_bundle, pinned):
    TAMPERS[check](real_bundle)
    verdict = verify_bundle(real_bundle, pinned)
    assert verdict.first_failure is not None
    assert verdict.first_failure.name == check, verdict.failures
    assert verdict.first_failure.detail


def test_a_failure_that_quotes_the_bundle_shows_its_control_characters_escaped(real_bundle, pinned):
    """A check's detail may quote the bundle (here an event type that holds a terminal escape and a NUL): the
    detail shows such characters as escapes, in the terminal, the report and the verification page alike."""
    snapshot(real_bundle)["event_type"] = "graph_snapshot\x1b[2J\x00"
    failure = verify_bundle(real_bundle, pinned).first_failure
    assert failure.name == "event_hash"
    assert "(graph_snapshot\\x1b[2J\\x00) content hashes to" in failure.detail and failure.detail.isprintable()


def test_every_named_check_has_a_tamper_test():
    assert set(TAMPERS) | {"event_subject"} == set(CHECK_ORDER)


def test_event_subject_from_another_record_is_rejected(real_bundles):
    key = TestKey()
    trust = TrustSet((key_from_document(key.document()),))
    other = real_bundles[1]["pith_number"]
    b = copy.deepcopy(real_bundles[0])
    snapshot(b)["subject_pith_number"] = other
    forged = sign_bundle(b, key, keep_subject=True)
    verdict = verify_bundle(forged, trust)
    assert verdict.first_failure.name == "event_subject"


def test_event_about_this_records_id_under_another_year_is_rejected(real_bundle):
    """The subject is the whole pith number: an event signed for ``pith:<another year>:<this ID>`` is about
    no record this bundle is."""
    key = TestKey()
    trust = TrustSet((key_from_document(key.document()),))
    year, pith_id = real_bundle["pith_number"].split(":")[1:]
    snapshot(real_bundle)["subject_pith_number"] = f"pith:{int(year) - 1}:{pith_id}"
    verdict = verify_bundle(sign_bundle(real_bundle, key, keep_subject=True), trust)
    assert verdict.first_failure.name == "event_subject"


@pytest.mark.parametrize("path", REAL_FILES, ids=[p.stem for p in REAL_FILES])
def test_state_recomputed_reproduces_embedded_state_sha256(path):
    bundle = json.loads(path.read_bytes())
    recomputed = recompute_state(bundle)
    assert digest_without(dict(recomputed, state_sha256="x"), "state_sha256") == bundle["state"]["state_sha256"]


def test_forged_bundle_with_embedded_attacker_key_is_rejected(real_bundle, pinned):
    snapshot(real_bundle)["payload"]["graph_snapshot"]["paper"]["title"] = "Forged"
    forged = sign_bundle(real_bundle, TestKey("attacker"))
    verdict = verify_bundle(forged, pinned)
    assert verdict.first_failure.name == "key_pinned"


def test_attacker_key_claiming_pinned_id_and_fingerprint_is_rejected(real_bundle, pinned):
    real_key = pinned.keys[0]
    attacker = TestKey()
    forged = sign_bundle(real_bundle, attacker, claim_key_id=real_key.key_id, claim_fingerprint=real_key.fingerprint_hex,
                         embed=dict(attacker.document(), key_id=real_key.key_id))
    verdict = verify_bundle(forged, pinned)
    assert verdict.first_failure.name == "key_pinned"
    # Even when it embeds the genuine key document, the signatures do not verify.
    forged = sign_bundle(real_bundle, attacker, claim_key_id=real_key.key_id, claim_fingerprint=real_key.fingerprint_hex,
                         embed=real_key.document)
    assert verify_bundle(forged, pinned).first_failure.name == "receipt_signature"


def test_bundle_signed_by_trusted_test_key_passes_and_real_key_does_not_count(real_bundle, pinned):
    key = TestKey()
    trust = TrustSet((key_from_document(key.document()),))
    signed = sign_bundle(real_bundle, key)
    assert verify_bundle(signed, trust).first_failure is None
    assert verify_bundle(signed, pinned).first_failure.name == "key_pinned"
    assert verify_bundle(json.loads(REAL_FILES[0].read_bytes()), trust).first_failure.name == "key_pinned"


def test_an_alias_in_other_letters_is_the_same_alias(real_bundle):
    """A DOI is case-insensitive (DataCite writes arXiv's as 10.48550/arXiv.<id>): in other letters it is
    consistent with the record, where another value is not (TAMPERS)."""
    key = TestKey()
    trust = TrustSet((key_from_document(key.document()),))
    doi = next(a for a in real_bundle["source_aliases"] if a["alias_kind"] == "doi")
    doi["alias_value"] = doi["alias_value"].replace("arxiv", "arXiv")
    assert "arXiv" in doi["alias_value"]
    assert verify_bundle(sign_bundle(real_bundle, key, keep_aliases=True), trust).first_failure is None
    doi["alias_value"] = doi["alias_value"].replace(".", ":")
    assert verify_bundle(sign_bundle(real_bundle, key, keep_aliases=True), trust).first_failure.name == "aliases"


def test_title_hash_mismatch_is_a_warning_not_a_rejection(real_bundle):
    key = TestKey()
    trust = TrustSet((key_from_document(key.document()),))
    snapshot(real_bundle)["payload"]["graph_snapshot"]["paper"]["title"] = "Not the hashed title"
    verdict = verify_bundle(sign_bundle(real_bundle, key), trust)
    assert verdict.first_failure is None
    assert [w.code for w in verdict.warnings] == ["title_hash"]


def test_a_record_without_a_title_digest_has_no_title_warning(real_bundle):
    # PITH_FORMAT.md lists title_canon_sha256 in the record's metadata, but the verifier does not require it:
    # a record without one has nothing to hold the snapshot's title to, which is no mismatch.
    key = TestKey()
    trust = TrustSet((key_from_document(key.document()),))
    del real_bundle["canonical_record"]["metadata"]["title_canon_sha256"]
    snapshot(real_bundle)["payload"]["graph_snapshot"]["paper"]["title"] = "Any title at all"
    verdict = verify_bundle(sign_bundle(real_bundle, key), trust)
    assert verdict.first_failure is None
    assert verdict.warnings == ()


def test_unknown_event_type_skips_state_recompute_with_warning(real_bundle):
    key = TestKey()
    trust = TrustSet((key_from_document(key.document()),))
    b = sign_bundle(with_unmergeable_event(real_bundle), key, keep_state=True)  # a state the v1 merge cannot reproduce
    verdict = verify_bundle(b, trust)
    assert verdict.first_failure is None
    assert not verdict.state_recomputed
    assert any(c.name == "state_recomputed" and c.status == "skipped" for c in verdict.checks)
    assert "state_not_recomputed" in [w.code for w in verdict.warnings]


def test_unknown_top_level_field_is_a_warning(real_bundle):
    key = TestKey()
    trust = TrustSet((key_from_document(key.document()),))
    real_bundle["future_field"] = 1
    verdict = verify_bundle(sign_bundle(real_bundle, key), trust)
    assert verdict.first_failure is None and [w.code for w in verdict.warnings] == ["unknown_fields"]
    assert verdict.warnings[0].message == "unknown top-level fields: future_field"


def test_names_a_warning_lists_are_escaped_cut_and_counted(real_bundle):
    """A warning names the fields the bundle chose: each shown escaped and at most 60 characters long, ten of
    them at most (a signed bundle may hold 5,000 fields with names of 100 KB)."""
    key = TestKey()
    trust = TrustSet((key_from_document(key.document()),))
    real_bundle["a\x1b[2J\x00"] = 1
    for i in range(12):
        real_bundle[f"z{i:02d}" + "x" * 100] = i
    message = verify_bundle(sign_bundle(real_bundle, key), trust).warnings[0].message
    cut = [f"z{i:02d}" + "x" * 57 for i in range(9)]
    assert message == "unknown top-level fields: a\\x1b[2J\\x00, " + ", ".join(cut) + " and 3 more"
    for i in range(9, 12):  # ten names: each is shown, none counted
        del real_bundle[f"z{i:02d}" + "x" * 100]
    message = verify_bundle(sign_bundle(real_bundle, key), trust).warnings[0].message
    assert message == "unknown top-level fields: a\\x1b[2J\\x00, " + ", ".join(cut)


@pytest.mark.parametrize("mutate", [
    lambda b: b.update(bundle_version="2.0"),
    lambda b: b.update(bundle_type="something_else"),
    lambda b: b.update(events="not a list"),
    lambda b: b["events"][0].pop("signature"),
    lambda b: b["canonical_record"]["source"].update(version="1"),
    lambda b: b.update(state=None),
])
def test_structure_errors(mutate, real_bundle, pinned):
    mutate(real_bundle)
    assert verify_bundle(real_bundle, pinned).first_failure.name == "structure"


def test_after_a_structure_failure_every_other_check_is_listed_as_skipped(real_bundle, pinned):
    """The report lists each check of a rejected bundle: the ones that could not run on a malformed bundle are
    there, skipped, in their order."""
    real_bundle["state"].pop("current")
    checks = verify_bundle(real_bundle, pinned).checks
    assert [c.name for c in checks] == list(CHECK_ORDER)
    assert [c.status for c in checks] == ["failed"] + ["skipped"] * (len(CHECK_ORDER) - 1)


@pytest.mark.parametrize("block", ["receipt", "event", "bundle"])
def test_a_signature_over_another_message_than_the_one_verified_is_rejected(block, real_bundle):
    """Each signature block says which bytes were signed; a bundle, however well signed, whose block names another
    message is not understood, and is rejected for its structure."""
    key = TestKey()
    trust = TrustSet((key_from_document(key.document()),))
    if block == "receipt":  # (the receipt is part of its event's content: changed before signing)
        record_created(real_bundle)["payload"]["receipt"]["signed_message"] = "canonical_sha256_hex"
    signed = sign_bundle(real_bundle, key)
    if block == "event":
        signed["events"][1]["signature"]["signed_message"] = "canonical_sha256_hex"
    elif block == "bundle":  # (the bundle's signature block is outside what it signs: still a valid signature)
        signed["bundle_signature"]["signed_message"] = "canonical_sha256_hex"
    where = {"receipt": "receipt", "event": "events[1].signature", "bundle": "bundle_signature"}[block]
    failure = verify_bundle(signed, trust).first_failure
    assert failure is not None and (failure.name, failure.detail.split(" is ")[0]) == (
        "structure", where + ".signed_message")


def test_a_check_that_meets_a_value_it_cannot_read_rejects_the_bundle(real_bundle, pinned):
    """A value past the structure check that a check cannot handle (here a string that is not Unicode, which the
    canonical encoder refuses) is that check's failure: the bundle is rejected, never passed over."""
    real_bundle["canonical_record"]["metadata"]["license"] = "\ud800"
    verdict = verify_bundle(real_bundle, pinned)
    assert verdict.first_failure.name == "canonical_hash"
    assert verdict.first_failure.detail.startswith("malformed bundle: ValueError: ")


def test_non_object_input_never_raises(pinned):
    for value in (None, [], "x", 1, {"events": [1, 2]}):
        assert verify_bundle(value, pinned).first_failure is not None


FAMILY_ERRORS = {"structure": verification.StructureError, "identifiers": verification.IdentifierError,
                 "key": verification.KeyNotPinned, "hash": verification.HashMismatch,
                 "record": verification.RecordMismatch, "signature": verification.SignatureInvalid,
                 "events": verification.EventMismatch, "state": verification.StateMismatch}


@pytest.mark.parametrize("check", [c for c in CHECKS if c.name in TAMPERS], ids=lambda c: c.name)
def test_each_check_raises_its_familys_error(check, real_bundle, pinned):
    """A check's failure is a typed error of its family (what the report classes a rejection by)."""
    TAMPERS[check.name](real_bundle)
    ctx = verification._Context(bundle=real_bundle, trust=pinned,
                                canon=verification.CanonicalEncoder.for_document(real_bundle, None))
    for earlier in CHECKS[:CHECKS.index(check)]:  # (a check may rely on what the ones before it found)
        earlier.run(ctx)
    with pytest.raises(FAMILY_ERRORS[check.family]) as caught:
        check.run(ctx)
    assert isinstance(caught.value, CheckFailed) and str(caught.value)


def test_readmes_list_of_checks_is_the_registrys():
    """README says the checks in the order they run; the registry is that order's one definition."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("Checks run in this order"):]
    section = section[:section.index("\n\n", section.index("1. "))]
    import re
    listed = [name for line in section.splitlines() if re.match(r"\d+\. ", line)
              for name in re.findall(r"`(\w+)`(?=[,:])", line.split(":")[0] + ":")]
    assert listed == list(CHECK_ORDER)


@pytest.mark.parametrize("tamper", [
    lambda b, v: b.update(built_at=v),
    lambda b, v: b.update(pith_number=v),
    lambda b, v: b["canonical_record"]["source"].update(kind=v),
    lambda b, v: b["canonical_record"]["metadata"].update(submitted_at=v),
    lambda b, v: b["canonical_record"]["metadata"].update(primary_cat=v),
    lambda b, v: b.update(canonical_sha256=v),
    lambda b, v: b.update(short_pith_number=v),
    lambda b, v: b["source_aliases"][0].update(alias_value=v),
    lambda b, v: b["state"].update(state_sha256=v),
    lambda b, v: b["bundle_signature"].update(bundle_sha256=v),
    lambda b, v: b["bundle_signature"].update(signed_message=v),
], ids=["built_at", "pith_number", "source kind", "submitted_at", "category", "canonical_sha256",
        "short_pith_number", "alias", "state_sha256", "bundle_sha256", "signed_message"])
def test_a_rejection_quotes_only_the_start_of_what_the_bundle_says(real_bundle, pinned, tamper):
    """A reason is one line of the report and of the terminal: a value of 10,000 characters is quoted by its
    start, not whole."""
    tamper(real_bundle, "Z" * 10_000)
    failure = verify_bundle(real_bundle, pinned).first_failure
    assert failure is not None and "ZZZZZZZZZZZZZZZZ" in failure.detail and len(failure.detail) < 200


def test_a_signed_event_about_another_record_and_an_unpinned_key_are_quoted_by_their_start(real_bundle):
    """The same bound holds where the bundle is signed (by a pinned key) and only its content is hostile."""
    key = TestKey()
    trust = TrustSet((key_from_document(key.document()),))
    snapshot(real_bundle)["subject_pith_number"] = "Z" * 10_000
    failure = verify_bundle(sign_bundle(real_bundle, key, keep_subject=True), trust).first_failure
    assert failure.name == "event_subject" and "ZZZZZZZZ" in failure.detail and len(failure.detail) < 200
    other = TestKey("other")
    embedded = sign_bundle(real_bundle, key, embed=dict(other.document(), key_id="Z" * 10_000))
    [warning] = [w for w in verify_bundle(embedded, trust).warnings if w.code == "unpinned_embedded_key"]
    assert "ZZZZZZZZ" in warning.message and len(warning.message) < 200
