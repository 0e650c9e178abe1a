"""Signing for the tests and benchmarks: turn a real bundle into one validly signed by a key they make.

The pinned production key's private half is unknown, so tests and benchmarks that need a *valid* bundle with
chosen content sign it with a fresh key and pin that key.  (It lives beside the benchmarks, which run as
scripts and import it from their own folder; pytest's ``pythonpath`` gives it to the tests.)
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path

from nacl.signing import SigningKey

from site_builder.canonical import digest, digest_without, pith_id_from_digest
from site_builder.merge import recompute_state


class TestKey:
    __test__ = False
    def __init__(self, key_id: str = "test-key-1", seed: bytes | None = None):
        self.key_id = key_id
        self.signing_key = SigningKey(seed) if seed else SigningKey.generate()
        self.public = self.signing_key.verify_key.encode()
        self.fingerprint = hashlib.sha256(self.public).hexdigest()[:32]

    def document(self) -> dict:
        return {
            "key_id": self.key_id,
            "algorithm": "ed25519",
            "format": "raw",
            "public_key_b64": base64.b64encode(self.public).decode(),
            "public_key_hex": self.public.hex(),
            "fingerprint_sha256_hex": self.fingerprint,
            "fingerprint_sha256_b32_first128bits": base64.b32encode(hashlib.sha256(self.public).digest()).decode()[:26],
            "rotates_at": None,
        }

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.document()))
        return path

    def sign_hex(self, hex_digest: str) -> str:
        return base64.b64encode(self.signing_key.sign(bytes.fromhex(hex_digest)).signature).decode()

    def block(self, **extra) -> dict:
        return {"signature_status": "signed_v1", "algorithm": "ed25519", "key_id": self.key_id,
                "public_key_fingerprint": self.fingerprint, **extra}


def sign_bundle(bundle: dict, key: TestKey, *, claim_key_id: str | None = None, claim_fingerprint: str | None = None,
                embed: dict | None = None, keep_state: bool = False, keep_subject: bool = False,
                keep_receipt: bool = False, keep_aliases: bool = False) -> dict:
    """Re-derive every hash of *bundle* and sign everything with *key*.

    claim_key_id / claim_fingerprint let an attacker key pretend to be another key;
    embed replaces the embedded public_keys entry; keep_receipt leaves the record_created receipt as it is, and
    keep_aliases the source aliases.
    """
    b = copy.deepcopy(bundle)
    key_id = claim_key_id or key.key_id
    fingerprint = claim_fingerprint or key.fingerprint
    sig_block = lambda **extra: {"signature_status": "signed_v1", "algorithm": "ed25519", "key_id": key_id,
                                 "public_key_fingerprint": fingerprint, **extra}
    b["public_keys"] = [embed if embed is not None else dict(key.document(), key_id=key_id)]
    b["canonical_sha256"] = digest(b["canonical_record"])
    pith_id = pith_id_from_digest(b["canonical_sha256"])
    b["pith_number"] = f"pith:{b['canonical_record']['metadata']['submitted_at'][:4]}:{pith_id}"
    b["short_pith_number"] = f"pith:{pith_id[:8]}"
    b["source"] = copy.deepcopy(b["canonical_record"]["source"])
    src = b["source"]
    values = {"arxiv": src["id"], "arxiv_version": f"{src['id']}v{src['version']}", "doi": f"10.48550/arxiv.{src['id']}",
              "pith_short_8": pith_id[:8], "pith_short_12": pith_id[:12], "pith_short_16": pith_id[:16]}
    for alias in b["source_aliases"] if not keep_aliases else ():
        if alias["alias_kind"] in values:
            alias["alias_value"] = values[alias["alias_kind"]]
    for event in b["events"]:
        if not keep_subject:
            event["subject_pith_number"] = b["pith_number"]
        event["signer"] = {"signer_id": "test-signer", "signer_type": "pith_registry", "key_id": key_id,
                           "public_key_fingerprint": fingerprint}
        if event["event_type"] == "record_created":
            payload = event["payload"]
            payload["canonical_record"] = copy.deepcopy(b["canonical_record"])
            payload["canonical_sha256"] = b["canonical_sha256"]
            if not keep_receipt:
                payload["receipt"].update(key_id=key_id, public_key_fingerprint=fingerprint,
                                          canonical_sha256=b["canonical_sha256"],
                                          signature_b64=key.sign_hex(b["canonical_sha256"]))
        event["content_sha256"] = digest_without(event, "signature", "content_sha256", "event_id")
        event["event_id"] = "sha256:" + event["content_sha256"]
        event["signature"] = sig_block(signature_b64=key.sign_hex(event["content_sha256"]),
                                       signed_message="open_graph_event_sha256_bytes",
                                       signed_at="2026-09-01T00:00:00Z")
    if not keep_state:
        state = recompute_state(b)
        state["state_sha256"] = digest(state)
        b["state"] = state
    else:
        b["state"]["state_sha256"] = digest_without(b["state"], "state_sha256")
    return seal(b, key, key_id, fingerprint)


def seal(bundle: dict, key: TestKey, key_id: str | None = None, fingerprint: str | None = None) -> dict:
    """*bundle* with its bundle hash and signature made (again) by *key*, its block naming *key_id* and
    *fingerprint* (default: the key's own); nothing else of it is re-derived."""
    bundle["bundle_signature"] = {}
    bundle_sha = digest_without(bundle, "bundle_signature")
    bundle["bundle_signature"] = {"signature_status": "signed_v1", "algorithm": "ed25519",
                                  "key_id": key_id or key.key_id,
                                  "public_key_fingerprint": fingerprint or key.fingerprint,
                                  "signature_b64": key.sign_hex(bundle_sha), "signed_message": "bundle_sha256_bytes",
                                  "signed_at": "2026-09-01T00:00:00Z", "bundle_sha256": bundle_sha}
    return bundle


def snapshot_of(bundle: dict) -> dict:
    """The payload of *bundle*'s graph snapshot event: its paper, claims, verdict, integrity scan..."""
    return next(e for e in bundle["events"] if e["event_type"] == "graph_snapshot")["payload"]["graph_snapshot"]


def to_bytes(bundle: dict) -> bytes:
    """The resolver's serialisation: compact, file key order, UTF-8."""
    return json.dumps(bundle, separators=(",", ":"), ensure_ascii=False).encode()


def with_paper(bundle: dict, **paper) -> dict:
    """A copy whose graph snapshot paper fields (title, authors_text, ...) are replaced."""
    b = copy.deepcopy(bundle)
    for event in b["events"]:
        if event["event_type"] == "graph_snapshot":
            event["payload"]["graph_snapshot"]["paper"].update(paper)
    return b


def with_unmergeable_event(bundle: dict) -> dict:
    """A copy with one more event, of a type the v1 merge has no rule for (a timestamp anchor): sign it with
    ``keep_state=True``, and its state can be checked by its hash only."""
    b = copy.deepcopy(bundle)
    extra = copy.deepcopy(b["events"][0])
    extra.update(event_type="timestamp_anchor", target="record", payload={"ots": "abc"})
    b["events"].append(extra)
    return b
