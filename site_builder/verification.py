"""Verification of one bundle: pure code, no I/O, typed results.

Checks run in the order of :data:`CHECK_ORDER`, modelled on python-tuf: the
structure is checked first (nothing else can run on a malformed bundle), then
which keys signed (only pinned keys count), then the record itself, then each
event, then the merged state, and last the envelope (bundle hash and
signature).  After ``structure`` passes every check runs, so the report lists
all failures; the *first* failure in this order is the reason a bundle is
rejected.  Any failure rejects; warnings never do.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from site_builder.canonical import CanonicalEncoder, pith_id_from_digest, title_canon_sha256
from site_builder.keys import TrustedKey, TrustSet
from site_builder.merge import UnmergeableEvents, recompute_state
from site_builder.terminal import printable

SUPPORTED_BUNDLE_VERSIONS = ("1.0",)
KNOWN_TOP_LEVEL = frozenset(
    "bundle_type bundle_version pith_number short_pith_number canonical_record canonical_sha256 source "
    "source_aliases events timestamp_proofs mirror_hints public_keys merge_version built_at links state "
    "bundle_signature".split()
)

PITH_NUMBER_RE = re.compile(r"pith:([0-9]{4}):([A-Z2-7]{26})\Z")
HEX64_RE = re.compile(r"[0-9a-f]{64}\Z")
# New style 2301.01234 / 0704.0001, old style hep-lat/0305021 or math.AG/0601001.
ARXIV_ID = r"(?:[0-9]{4}\.[0-9]{4,5}|[a-z]+(?:-[a-z]+)*(?:\.[A-Z]{2})?/[0-9]{7})"
ARXIV_ID_RE = re.compile(ARXIV_ID + r"\Z")
# arXiv's archives, current and retired: a category is an archive, or an archive and a subject class.  The
# subject classes of these archives are two capital letters (cs.AI, math.OC, astro-ph.GA); those of cond-mat and
# physics are lower-case words (cond-mat.str-el, physics.optics).  So each category has one spelling: cs.ai is
# not cs.AI under another case (the two would be one folder on a case-insensitive host), and no category can be
# a name the site uses itself (index.html, page, feed.xml).
ARXIV_ARCHIVES = frozenset((
    "astro-ph cond-mat cs econ eess gr-qc hep-ex hep-lat hep-ph hep-th math math-ph nlin nucl-ex nucl-th physics "
    "q-bio q-fin quant-ph stat acc-phys adap-org alg-geom ao-sci atom-ph bayes-an chao-dyn chem-ph cmp-lg comp-gas "
    "dg-ga funct-an mtrl-th patt-sol plasm-ph q-alg solv-int supr-con").split())
_CAPITAL_SUBJECTS = frozenset("astro-ph cs econ eess math nlin q-bio q-fin stat".split())
_WORD_SUBJECTS = frozenset("cond-mat physics".split())
_CAPITAL_SUBJECT_RE = re.compile(r"[A-Z]{2}\Z")
_WORD_SUBJECT_RE = re.compile(r"[a-z]+(?:-[a-z]+)*\Z")


def is_arxiv_category(cat: object) -> bool:
    """Whether *cat* has the shape of an arXiv category, spelt as arXiv spells it."""
    if not isinstance(cat, str) or len(cat) > 40:
        return False
    archive, dot, subject = cat.partition(".")
    if archive not in ARXIV_ARCHIVES:
        return False
    if not dot:
        return True
    if archive in _CAPITAL_SUBJECTS:
        return _CAPITAL_SUBJECT_RE.match(subject) is not None
    return archive in _WORD_SUBJECTS and _WORD_SUBJECT_RE.match(subject) is not None
TIMESTAMP_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?Z\Z")


def is_utc_timestamp(value: object) -> bool:
    """Whether *value* is a UTC date and time as the resolver writes them (``YYYY-MM-DDTHH:MM:SS[.fff]Z``) naming
    a real instant: pages put it in ``<time datetime>`` and feeds in their dates, which must be one
    (``2023-02-30T25:61:00Z`` is not; nor is a leap second, ``:60``, which HTML's dates leave out)."""
    match = TIMESTAMP_RE.match(value) if isinstance(value, str) else None
    if match is None:
        return False
    year, month, day, hour, minute, second = map(int, match.groups())
    try:
        datetime.date(year, month, day)
    except ValueError:
        return False
    return hour < 24 and minute < 60 and second < 60


Status = Literal["passed", "failed", "skipped"]


class CheckFailed(Exception):
    """Raised inside a check; the message is the one-line reason.  Each family of checks raises its own kind."""


class StructureError(CheckFailed):
    """The bundle's shape: fields, types, versions."""


class IdentifierError(CheckFailed):
    """An identifier that would become a path is not a well-formed, safe name."""


class KeyNotPinned(CheckFailed):
    """A signature names a key that is not pinned, or an embedded key contradicts a pin."""


class HashMismatch(CheckFailed):
    """A stated digest is not the digest of what it covers."""


class RecordMismatch(CheckFailed):
    """The pith number, short number or aliases do not derive from the record."""


class SignatureInvalid(CheckFailed):
    """An Ed25519 signature does not verify with the pinned key."""


class EventMismatch(CheckFailed):
    """An event's id or subject is not what the record requires."""


class StateMismatch(CheckFailed):
    """The state rebuilt from the events is not the state the bundle carries."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    status: Status
    detail: str = ""


@dataclass(frozen=True, slots=True)
class VerificationWarning:
    code: str
    message: str


@dataclass(frozen=True)
class Verdict:
    """All check results for one bundle, in CHECK_ORDER."""

    checks: tuple[CheckResult, ...]
    warnings: tuple[VerificationWarning, ...] = ()

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if c.status == "failed")

    @property
    def first_failure(self) -> CheckResult | None:
        failures = self.failures
        return failures[0] if failures else None

    @property
    def state_recomputed(self) -> bool:
        return any(c.name == "state_recomputed" and c.status == "passed" for c in self.checks)


@dataclass
class _Context:
    bundle: dict
    trust: TrustSet
    warnings: list[VerificationWarning] = field(default_factory=list)
    record_created: dict | None = None
    canon: CanonicalEncoder = field(default_factory=CanonicalEncoder)


# --- small helpers -------------------------------------------------------------------------

def _require(obj: Any, path: str, spec: dict[str, Any]) -> None:
    if not isinstance(obj, dict):
        raise StructureError(f"{path} is not an object")
    for key, expected in spec.items():
        if key not in obj:
            raise StructureError(f"{path}.{key} is missing")
        value = obj[key]
        if isinstance(expected, dict):
            _require(value, f"{path}.{key}", expected)
        elif expected is int:
            if not isinstance(value, int) or isinstance(value, bool):
                raise StructureError(f"{path}.{key} is not an integer")
        elif not isinstance(value, expected):
            names = expected.__name__ if isinstance(expected, type) else "/".join(t.__name__ for t in expected)
            raise StructureError(f"{path}.{key} is not {_TYPE_WORDS.get(names, names)}")


_TYPE_WORDS = {"str": "a string", "list": "a list", "dict": "an object", "str/NoneType": "a string or null"}

_SIGNATURE_SPEC = {"algorithm": str, "key_id": str, "public_key_fingerprint": str, "signature_b64": str}
_RECORD_SPEC = {
    "source": {"kind": str, "id": str, "version": int},
    "metadata": {"primary_cat": str, "submitted_at": str, "cross_cats_sorted": list, "license": str},
    "schema_version": str,
}
_EVENT_SPEC = {
    "event_type": str,
    "subject_pith_number": str,
    "target": str,
    "payload": dict,
    "signer": {"signer_id": str, "key_id": str, "public_key_fingerprint": str},
    "created_at": str,
    "signature": _SIGNATURE_SPEC,
    "content_sha256": str,
    "event_id": str,
}
_BUNDLE_SPEC = {
    "bundle_type": str,
    "bundle_version": str,
    "pith_number": str,
    "short_pith_number": str,
    "canonical_record": _RECORD_SPEC,
    "canonical_sha256": str,
    "source": dict,
    "source_aliases": list,
    "events": list,
    "public_keys": list,
    "merge_version": str,
    "built_at": str,
    "state": {"state_sha256": str, "pith_number": str, "current": dict},
    "bundle_signature": dict(_SIGNATURE_SPEC, bundle_sha256=str),
}


def _require_signed_message(block: dict, where: str, expected: str) -> None:
    """A signature block says what it signed; anything but the one message we verify is not understood."""
    if block.get("signed_message") != expected:
        raise SignatureInvalid(f"{where}.signed_message is {str(block.get('signed_message'))[:40]!r}, expected {expected!r}")


def _decode_signature(sig_b64: str, where: str) -> bytes:
    try:
        raw = base64.b64decode(sig_b64, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureInvalid(f"{where}: signature_b64 is not valid base64") from None
    if len(raw) != 64:
        raise SignatureInvalid(f"{where}: an Ed25519 signature is 64 bytes, got {len(raw)}")
    return raw


def _digest_bytes(hex_digest: Any, where: str) -> bytes:
    if not isinstance(hex_digest, str) or not HEX64_RE.match(hex_digest):
        raise HashMismatch(f"{where}: not a lowercase 64-character hex SHA-256 digest")
    return bytes.fromhex(hex_digest)


def _verify_ed25519(key: TrustedKey, message: bytes, signature: bytes, where: str) -> None:
    try:
        VerifyKey(key.public_key).verify(message, signature)
    except BadSignatureError:
        raise SignatureInvalid(f"{where}: signature does not verify with pinned key {key.key_id}") from None


def _pinned_key(trust: TrustSet, block: dict, where: str) -> TrustedKey:
    key = trust.by_id(block.get("key_id"))
    if key is None:
        raise KeyNotPinned(f"{where}: key {block.get('key_id')!r} is not a pinned key")
    if block.get("public_key_fingerprint") != key.fingerprint_hex:
        raise KeyNotPinned(f"{where}: fingerprint does not match pinned key {key.key_id}")
    if block.get("algorithm", "ed25519") != "ed25519":
        raise KeyNotPinned(f"{where}: algorithm {block.get('algorithm')!r} is not ed25519")
    return key


def _events(ctx: _Context) -> list[dict]:
    return ctx.bundle["events"]


def _receipt(ctx: _Context) -> dict:
    assert ctx.record_created is not None
    return ctx.record_created["payload"]["receipt"]


# --- the checks ----------------------------------------------------------------------------

def check_structure(ctx: _Context) -> None:
    bundle = ctx.bundle
    _require(bundle, "bundle", _BUNDLE_SPEC)
    if bundle["bundle_type"] != "pith_open_graph_bundle":
        raise StructureError(f"bundle_type is {bundle['bundle_type']!r}, not 'pith_open_graph_bundle'")
    if bundle["bundle_version"] not in SUPPORTED_BUNDLE_VERSIONS:
        raise StructureError(f"unsupported bundle_version {bundle['bundle_version']!r} (supported: 1.0)")
    if not bundle["events"]:
        raise StructureError("events is empty")
    for i, event in enumerate(bundle["events"]):
        _require(event, f"events[{i}]", _EVENT_SPEC)
    created = [e for e in bundle["events"] if e["event_type"] == "record_created"]
    if len(created) != 1:
        raise StructureError(f"expected exactly one record_created event, found {len(created)}")
    _require(created[0]["payload"], "record_created.payload",
             {"canonical_record": dict, "canonical_sha256": str, "receipt": dict(_SIGNATURE_SPEC, canonical_sha256=str)})
    for i, event in enumerate(bundle["events"]):
        if event["event_type"] == "graph_snapshot":
            _require(event["payload"], f"events[{i}].payload",
                     {"graph_snapshot": {"paper": {"title": str, "authors_text": str}}})
    for i, alias in enumerate(bundle["source_aliases"]):
        _require(alias, f"source_aliases[{i}]", {"alias_kind": str, "alias_value": str})
    for i, key in enumerate(bundle["public_keys"]):
        _require(key, f"public_keys[{i}]", {"key_id": str})
    if not is_utc_timestamp(bundle["built_at"]):
        raise StructureError(f"built_at {bundle['built_at'][:40]!r} is not an ISO 8601 UTC timestamp")
    ctx.record_created = created[0]
    _require_signed_message(ctx.record_created["payload"]["receipt"], "receipt", "canonical_sha256_bytes")
    for i, event in enumerate(bundle["events"]):
        _require_signed_message(event["signature"], f"events[{i}].signature", "open_graph_event_sha256_bytes")
    _require_signed_message(bundle["bundle_signature"], "bundle_signature", "bundle_sha256_bytes")
    unknown = sorted(set(bundle) - KNOWN_TOP_LEVEL)
    if unknown:
        ctx.warnings.append(VerificationWarning("unknown_fields", "unknown top-level fields: " + _named(unknown)))


def check_identifiers(ctx: _Context) -> None:
    bundle = ctx.bundle
    match = PITH_NUMBER_RE.match(bundle["pith_number"])
    if not match:
        raise IdentifierError(f"pith_number {bundle['pith_number'][:60]!r} is not pith:<YEAR>:<26 base32 characters>")
    record = bundle["canonical_record"]
    source = record["source"]
    if source["kind"] != "arxiv":
        raise IdentifierError(f"source kind {source['kind'][:40]!r} is not supported (only arxiv)")
    archive = source["id"].partition("/")[0].partition(".")[0] if "/" in source["id"] else None
    # (an old-style id's first part is an archive's name: none is a name Windows reserves, such as con or nul,
    # which a mirror copied to any file system could not hold)
    if not ARXIV_ID_RE.match(source["id"]) or (archive is not None and archive not in ARXIV_ARCHIVES):
        raise IdentifierError(f"arXiv id {source['id'][:60]!r} is not a valid arXiv identifier")
    if not 1 <= source["version"] <= 999:
        raise IdentifierError(f"version {source['version']} is out of range")
    metadata = record["metadata"]
    for cat in [metadata["primary_cat"], *metadata["cross_cats_sorted"]]:
        if not is_arxiv_category(cat):
            raise IdentifierError(f"category {str(cat)[:40]!r} is not a valid arXiv category")
    if not is_utc_timestamp(metadata["submitted_at"]):
        raise IdentifierError(f"submitted_at {metadata['submitted_at'][:40]!r} is not an ISO 8601 UTC timestamp")


def check_key_pinned(ctx: _Context) -> None:
    bundle, trust = ctx.bundle, ctx.trust
    for embedded in bundle["public_keys"]:
        pinned = trust.by_id(embedded["key_id"])
        if pinned is None:
            ctx.warnings.append(VerificationWarning(
                "unpinned_embedded_key", f"embedded key {embedded['key_id'][:60]!r} is not pinned and was ignored"))
            continue
        for field_name, expected in (("public_key_hex", pinned.public_key_hex), ("public_key_b64", pinned.public_key_b64),
                                     ("fingerprint_sha256_hex", pinned.fingerprint_hex)):
            if field_name in embedded and embedded[field_name] != expected:
                raise KeyNotPinned(f"embedded key {pinned.key_id} differs from the pinned key ({field_name})")
    _pinned_key(trust, _receipt(ctx), "receipt")
    for i, event in enumerate(_events(ctx)):
        _pinned_key(trust, event["signature"], f"events[{i}].signature")
        signer = event["signer"]
        if signer["key_id"] != event["signature"]["key_id"] or \
                signer["public_key_fingerprint"] != event["signature"]["public_key_fingerprint"]:
            raise KeyNotPinned(f"events[{i}]: signer and signature name different keys")
    _pinned_key(trust, bundle["bundle_signature"], "bundle_signature")


def check_canonical_hash(ctx: _Context) -> None:
    bundle = ctx.bundle
    actual = ctx.canon.digest(bundle["canonical_record"])
    if actual != bundle["canonical_sha256"]:
        raise HashMismatch(f"canonical_record hashes to {actual[:16]}…, bundle says {bundle['canonical_sha256'][:16]}…")
    payload = ctx.record_created["payload"]
    if payload["canonical_sha256"] != bundle["canonical_sha256"]:
        raise HashMismatch("record_created payload names a different canonical_sha256")
    if ctx.canon.digest(payload["canonical_record"]) != actual:
        raise HashMismatch("record_created payload holds a different canonical_record")


def check_pith_number(ctx: _Context) -> None:
    bundle = ctx.bundle
    _digest_bytes(bundle["canonical_sha256"], "canonical_sha256")
    expected_id = pith_id_from_digest(bundle["canonical_sha256"])
    year = bundle["canonical_record"]["metadata"]["submitted_at"][:4]
    expected = f"pith:{year}:{expected_id}"
    if bundle["pith_number"] != expected:
        raise RecordMismatch(f"pith_number is {bundle['pith_number']}, the record derives {expected}")
    if bundle["short_pith_number"] != f"pith:{expected_id[:8]}":
        raise RecordMismatch(f"short_pith_number {bundle['short_pith_number'][:40]!r} is not pith:{expected_id[:8]}")


def check_aliases(ctx: _Context) -> None:
    bundle = ctx.bundle
    source = bundle["canonical_record"]["source"]
    if bundle["source"] != source:
        raise RecordMismatch("top-level source differs from canonical_record.source")
    pith_id = bundle["pith_number"].rsplit(":", 1)[-1]
    expected = {
        "arxiv": source["id"],
        "arxiv_version": f"{source['id']}v{source['version']}",
        "doi": f"10.48550/arxiv.{source['id']}",
        "pith_short_8": pith_id[:8],
        "pith_short_12": pith_id[:12],
        "pith_short_16": pith_id[:16],
    }
    for alias in bundle["source_aliases"]:
        kind, value = alias["alias_kind"], alias["alias_value"]
        if kind in expected and value.lower() != expected[kind].lower():
            raise RecordMismatch(f"alias {kind} is {value[:60]!r}, expected {expected[kind]!r}")


def check_receipt_signature(ctx: _Context) -> None:
    receipt = _receipt(ctx)
    if receipt["canonical_sha256"] != ctx.bundle["canonical_sha256"]:
        raise SignatureInvalid("receipt signs a different canonical_sha256")
    message = _digest_bytes(receipt["canonical_sha256"], "receipt.canonical_sha256")
    signature = _decode_signature(receipt["signature_b64"], "receipt")
    _verify_ed25519(_pinned_key(ctx.trust, receipt, "receipt"), message, signature, "receipt")


def check_event_hash(ctx: _Context) -> None:
    for i, event in enumerate(_events(ctx)):
        actual = ctx.canon.digest_without(event, "signature", "content_sha256", "event_id")
        if actual != event["content_sha256"]:
            raise HashMismatch(f"events[{i}] ({event['event_type'][:40]}) content hashes to {actual[:16]}…, "
                              f"content_sha256 says {event['content_sha256'][:16]}…")


def check_event_id(ctx: _Context) -> None:
    seen: set[str] = set()
    for i, event in enumerate(_events(ctx)):
        if event["event_id"] != "sha256:" + event["content_sha256"]:
            raise EventMismatch(f"events[{i}].event_id is not sha256:<content_sha256>")
        if event["event_id"] in seen:
            raise EventMismatch(f"events[{i}] duplicates an earlier event")
        seen.add(event["event_id"])


def check_event_signature(ctx: _Context) -> None:
    for i, event in enumerate(_events(ctx)):
        where = f"events[{i}]"
        message = _digest_bytes(event["content_sha256"], f"{where}.content_sha256")
        signature = _decode_signature(event["signature"]["signature_b64"], where)
        _verify_ed25519(_pinned_key(ctx.trust, event["signature"], where), message, signature, where)


def check_event_subject(ctx: _Context) -> None:
    for i, event in enumerate(_events(ctx)):
        if event["subject_pith_number"] != ctx.bundle["pith_number"]:
            raise EventMismatch(f"events[{i}] is about {event['subject_pith_number'][:60]}, not this record")


def check_state_hash(ctx: _Context) -> None:
    state = ctx.bundle["state"]
    actual = ctx.canon.digest_without(state, "state_sha256")
    if actual != state["state_sha256"]:
        raise HashMismatch(f"state hashes to {actual[:16]}…, state_sha256 says {state['state_sha256'][:16]}…")


def check_state_recomputed(ctx: _Context) -> str | None:
    try:
        recomputed = recompute_state(ctx.bundle)
    except UnmergeableEvents as exc:
        ctx.warnings.append(VerificationWarning(
            "state_not_recomputed",
            "state not independently recomputed: no merge rule for event type(s) " + _named(exc.event_types)))
        return "skipped"
    except (KeyError, TypeError, ValueError) as exc:
        raise StateMismatch(f"events cannot be merged: {exc}") from None
    if ctx.canon.text(recomputed) != ctx.canon.text_without(ctx.bundle["state"], "state_sha256"):
        differing = sorted(k for k in recomputed if recomputed.get(k) != ctx.bundle["state"].get(k))
        where = ", ".join(differing) or "current"
        raise StateMismatch(f"state differs from the merge of the events (in {where})")
    return None


def check_bundle_hash(ctx: _Context) -> None:
    signature = ctx.bundle["bundle_signature"]
    # depth 3 reaches each event's payload and the state's members, already encoded by earlier checks.
    actual = ctx.canon.digest_without(ctx.bundle, "bundle_signature")
    if actual != signature["bundle_sha256"]:
        raise HashMismatch(f"bundle hashes to {actual[:16]}…, bundle_sha256 says {signature['bundle_sha256'][:16]}…")


def check_bundle_signature(ctx: _Context) -> None:
    block = ctx.bundle["bundle_signature"]
    message = _digest_bytes(block["bundle_sha256"], "bundle_sha256")
    signature = _decode_signature(block["signature_b64"], "bundle_signature")
    _verify_ed25519(_pinned_key(ctx.trust, block, "bundle_signature"), message, signature, "bundle_signature")


@dataclass(frozen=True)
class Check:
    """One check of the verifier: its name (a rejection's reason names it), the family of checks it belongs to
    (a rejection's class in the report), what it means (the pages and README say it), and the function that
    runs it."""

    name: str
    family: str
    description: str
    run: Callable[[_Context], Any]


# The checks, in the order they run: the one definition the verifier, the report and the pages read.
CHECKS: tuple[Check, ...] = (
    Check("structure", "structure", "required fields and types, bundle_type, bundle_version 1.0, built_at a real UTC time", check_structure),
    Check("identifiers", "identifiers", "pith ID, arXiv id, version and categories are safe, well-formed names; submitted_at a real UTC time", check_identifiers),
    Check("key_pinned", "key", "every signature names a pinned key (id and fingerprint); embedded keys match the pins", check_key_pinned),
    Check("canonical_hash", "hash", "sha256 of the canonical record equals canonical_sha256", check_canonical_hash),
    Check("pith_number", "record", "pith ID and year derive from the record; short number consistent", check_pith_number),
    Check("aliases", "record", "source and source_aliases agree with the record and the pith ID", check_aliases),
    Check("receipt_signature", "signature", "the receipt's Ed25519 signature over the canonical digest", check_receipt_signature),
    Check("event_hash", "hash", "each event's content_sha256 equals the digest of its content", check_event_hash),
    Check("event_id", "events", "each event_id is sha256:<content_sha256>", check_event_id),
    Check("event_signature", "signature", "each event's Ed25519 signature over its content digest", check_event_signature),
    Check("event_subject", "events", "each event is about this record", check_event_subject),
    Check("state_hash", "hash", "state_sha256 equals the digest of the state", check_state_hash),
    Check("state_recomputed", "state", "the state rebuilt from the events by the v1 merge has the same digest", check_state_recomputed),
    Check("bundle_hash", "hash", "bundle_sha256 equals the digest of the bundle without its signature", check_bundle_hash),
    Check("bundle_signature", "signature", "the bundle's Ed25519 signature over bundle_sha256", check_bundle_signature),
)
CHECK_ORDER = tuple(check.name for check in CHECKS)
CHECK_DESCRIPTIONS = {check.name: check.description for check in CHECKS}
CHECK_FAMILIES = {check.name: check.family for check in CHECKS}

# Every check passed: nearly every bundle's verdict, one tuple shared by all of them (``inspection.compact``)
# instead of fifteen objects made for each record and kept.
ALL_PASSED: tuple[CheckResult, ...] = tuple(CheckResult(name, "passed") for name in CHECK_ORDER)
_PASSED = dict(zip(CHECK_ORDER, ALL_PASSED))


def _title_warning(ctx: _Context) -> None:
    stated = ctx.bundle["canonical_record"]["metadata"].get("title_canon_sha256")
    for event in _events(ctx):
        if event["event_type"] != "graph_snapshot":
            continue
        title = event["payload"]["graph_snapshot"]["paper"]["title"]
        if stated is not None and title_canon_sha256(title) != stated:
            ctx.warnings.append(VerificationWarning(
                "title_hash", "the snapshot's title does not match the record's title_canon_sha256"))
            return


def _named(names: list[str], most: int = 10) -> str:
    """Names the bundle chose (fields, event types), as a warning lists them: each escaped and cut at 60
    characters, and no more than *most* of them (the bundle is signed, but a name may be anything)."""
    shown = ", ".join(printable(name[:60]) for name in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def verify_bundle(bundle: Any, trust: TrustSet, holds_float: bool | None = None) -> Verdict:
    """Run every check on a parsed bundle. Never raises for bad input; returns a Verdict.  *holds_float*: what
    the parser found out about floats in *bundle* (None: not known; the canonical encoder then looks)."""
    ctx = _Context(bundle=bundle, trust=trust, canon=CanonicalEncoder.for_document(bundle, holds_float))
    results: list[CheckResult] = []
    for check in CHECKS:
        name = check.name
        if results and results[0].status == "failed":
            results.append(CheckResult(name, "skipped", "structure check failed"))
            continue
        try:
            outcome = check.run(ctx)
        except CheckFailed as exc:  # (a detail may quote the bundle: shown escaped, as a terminal would show it)
            results.append(CheckResult(name, "failed", printable(str(exc))))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as exc:
            # A malformed value that slipped past the structure check: still a rejection, never a crash.
            results.append(CheckResult(name, "failed",
                                       printable(f"malformed bundle: {type(exc).__name__}: {str(exc)[:120]}")))
        else:
            results.append(CheckResult(name, "skipped") if outcome == "skipped" else _PASSED[name])
    if results[0].status == "passed":
        try:
            _title_warning(ctx)
        except (KeyError, TypeError, AttributeError):
            pass
    passed = len(results) == len(ALL_PASSED) and all(r is p for r, p in zip(results, ALL_PASSED))
    return Verdict(ALL_PASSED if passed else tuple(results), tuple(ctx.warnings))
