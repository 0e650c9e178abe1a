"""An adversarial corpus derived from the real bundles, one attack per entry (python-tuf style).

``corpus()`` returns cases grouped by class; each names the check that must reject it.
Content tampering inserts the marker ``EVIL`` wherever it can, so a test can prove that
nothing derived from a rejected bundle reaches the site.  ``odd_bundle`` makes the other
kind: validly signable bundles whose shown text is odd, which must publish well-formed pages.
"""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from site_builder.canonical import digest_without

from signing import TestKey, sign_bundle, to_bytes

ROOT = Path(__file__).resolve().parent.parent
REAL = [json.loads(p.read_bytes()) for p in sorted((ROOT / "bundles").glob("*.json"))]
REAL_BYTES = [p.read_bytes() for p in sorted((ROOT / "bundles").glob("*.json"))]


@dataclass
class Case:
    name: str
    cls: str
    expected: str  # the check that must reject it
    data: bytes | None = None  # file content; None for filesystem cases made by `make`
    make: Callable[[Path, Path], None] | None = None  # (bundles folder, outside folder) -> creates the entry


def _b(i: int = 0) -> dict:
    return copy.deepcopy(REAL[i])


def _flip(b64: str) -> str:
    raw = bytearray(base64.b64decode(b64))
    raw[7] ^= 0x80
    return base64.b64encode(bytes(raw)).decode()


def _snap(b: dict) -> dict:
    return next(e for e in b["events"] if e["event_type"] == "graph_snapshot")


def _created(b: dict) -> dict:
    return next(e for e in b["events"] if e["event_type"] == "record_created")


def _edit(fn, i: int = 0) -> bytes:
    b = _b(i)
    fn(b)
    return to_bytes(b)


def _raw_replace(old: bytes, new: bytes, i: int = 0) -> bytes:
    raw = REAL_BYTES[i]
    assert old in raw, old
    return raw.replace(old, new, 1)


def _rehash_state(b: dict) -> None:
    b["state"]["state_sha256"] = digest_without(b["state"], "state_sha256")


def _rehash_bundle(b: dict) -> None:
    b["bundle_signature"]["bundle_sha256"] = digest_without(b, "bundle_signature")


def corpus() -> list[Case]:
    cases: list[Case] = []
    add = lambda name, cls, expected, data=None, make=None: cases.append(Case(name, cls, expected, data, make))
    pinned_id, pinned_fp = REAL[0]["public_keys"][0]["key_id"], REAL[0]["public_keys"][0]["fingerprint_sha256_hex"]

    # -- hashes and signatures: content, encoding, bit flips, wrong length, non-base64 --------------------
    c = "hash_and_signature"
    add("canonical-sha-bitflip", c, "canonical_hash", _edit(lambda b: b.update(
        canonical_sha256=("0" if b["canonical_sha256"][0] != "0" else "1") + b["canonical_sha256"][1:])))
    add("canonical-sha-uppercase", c, "canonical_hash", _edit(lambda b: b.update(canonical_sha256=b["canonical_sha256"].upper())))
    add("record-content-EVIL", c, "canonical_hash", _edit(lambda b: b["canonical_record"]["metadata"].update(license="EVIL")))
    add("event-content-EVIL", c, "event_hash", _edit(lambda b: _snap(b)["payload"]["graph_snapshot"]["paper"].update(title="EVIL title")))
    # (events[0], the record_created event, is hashed too: an event_hash that skipped it would leave these to
    # later checks, or to none)
    add("created-event-content-EVIL", c, "event_hash", _edit(lambda b: _created(b)["payload"].update(attestation_state="EVIL")))
    add("created-event-date-changed", c, "event_hash", _edit(lambda b: _created(b).update(created_at="2020-01-01T00:00:00Z")))
    add("event-content-sha-changed", c, "event_hash", _edit(lambda b: _snap(b).update(content_sha256="ab" * 32)))
    add("event-sig-bitflip", c, "event_signature", _edit(lambda b: _snap(b)["signature"].update(signature_b64=_flip(_snap(b)["signature"]["signature_b64"]))))
    add("event-sig-short", c, "event_signature", _edit(lambda b: _snap(b)["signature"].update(signature_b64=base64.b64encode(b"x" * 63).decode())))
    add("event-sig-not-base64", c, "event_signature", _edit(lambda b: _snap(b)["signature"].update(signature_b64="not base64!!")))
    add("receipt-sig-bitflip", c, "receipt_signature", _edit(lambda b: _created(b)["payload"]["receipt"].update(signature_b64=_flip(_created(b)["payload"]["receipt"]["signature_b64"]))))
    add("receipt-sig-long", c, "receipt_signature", _edit(lambda b: _created(b)["payload"]["receipt"].update(signature_b64=base64.b64encode(b"x" * 65).decode())))
    add("receipt-sig-not-base64", c, "receipt_signature", _edit(lambda b: _created(b)["payload"]["receipt"].update(signature_b64="@@@@")))
    add("bundle-sig-bitflip", c, "bundle_signature", _edit(lambda b: b["bundle_signature"].update(signature_b64=_flip(b["bundle_signature"]["signature_b64"]))))
    add("bundle-sig-empty", c, "bundle_signature", _edit(lambda b: b["bundle_signature"].update(signature_b64="")))
    add("bundle-sig-urlsafe-alphabet", c, "bundle_signature", _edit(lambda b: b["bundle_signature"].update(
        signature_b64=base64.urlsafe_b64encode(base64.b64decode(b["bundle_signature"]["signature_b64"])).decode().replace("=", ""))))
    add("bundle-sha-changed", c, "bundle_hash", _edit(lambda b: b["bundle_signature"].update(bundle_sha256="cd" * 32)))
    add("bundle-sha-not-hex", c, "bundle_hash", _edit(lambda b: b["bundle_signature"].update(bundle_sha256="zz" * 32)))
    add("state-sha-changed", c, "state_hash", _edit(lambda b: b["state"].update(state_sha256="ef" * 32)))

    # -- key substitution --------------------------------------------------------------------------------
    c = "key_substitution"
    attacker = TestKey("attacker-key")
    evil = _b()
    _snap(evil)["payload"]["graph_snapshot"]["paper"]["title"] = "EVIL forged"
    add("forged-attacker-key-embedded", c, "key_pinned", to_bytes(sign_bundle(evil, attacker)))
    add("attacker-claims-pinned-id-and-fingerprint", c, "key_pinned", to_bytes(sign_bundle(
        evil, attacker, claim_key_id=pinned_id, claim_fingerprint=pinned_fp, embed=dict(attacker.document(), key_id=pinned_id))))
    add("attacker-signs-with-genuine-key-embedded", c, "receipt_signature", to_bytes(sign_bundle(
        evil, attacker, claim_key_id=pinned_id, claim_fingerprint=pinned_fp, embed=REAL[0]["public_keys"][0])))
    add("attacker-claims-pinned-id-own-fingerprint", c, "key_pinned", to_bytes(sign_bundle(evil, attacker, claim_key_id=pinned_id)))

    def valid_sig_over_tampered(b):
        b["links"]["resolver"] = "https://EVIL.example/"
        _rehash_bundle(b)
    add("valid-bundle-signature-over-tampered-content", c, "bundle_signature", _edit(valid_sig_over_tampered))
    add("unknown-signer-key-id", c, "key_pinned", _edit(lambda b: _snap(b)["signature"].update(key_id="someone-else")))

    # -- events: spliced, dropped, duplicated, reordered ----------------------------------------------------
    c = "events"
    add("event-spliced-from-another-record", c, "event_subject", _edit(lambda b: b["events"].append(copy.deepcopy(_snap(REAL[1])))))
    add("snapshot-replaced-by-another-records", c, "event_subject", _edit(lambda b: b["events"].__setitem__(1, copy.deepcopy(_snap(REAL[2])))))
    add("event-dropped", c, "state_recomputed", _edit(lambda b: b["events"].pop(1)))
    add("event-duplicated", c, "event_id", _edit(lambda b: b["events"].append(copy.deepcopy(b["events"][1]))))
    add("events-reordered", c, "state_recomputed", _edit(lambda b: b["events"].reverse()))

    # -- state ------------------------------------------------------------------------------------------
    c = "state"
    add("state-edited", c, "state_hash", _edit(lambda b: b["state"]["current"]["graph_snapshots"][0]["payload"]["graph_snapshot"]["paper"].update(title="EVIL state")))
    add("state-edited-and-rehashed", c, "state_recomputed", _edit(lambda b: (b["state"]["current"]["graph_snapshots"][0]["payload"]["graph_snapshot"]["paper"].update(title="EVIL state"), _rehash_state(b))))
    add("state-from-another-record", c, "state_recomputed", _edit(lambda b: b.update(state=copy.deepcopy(REAL[1]["state"]))))
    add("state-naming-another-record", c, "state_recomputed", _edit(lambda b: (b["state"].update(pith_number=REAL[1]["pith_number"]), _rehash_state(b))))

    # -- duplicate keys at several depths ------------------------------------------------------------------
    c = "duplicate_keys"
    add("dupkey-top", c, "json_duplicate_key", b'{"bundle_type":"EVIL",' + REAL_BYTES[0][1:])
    add("dupkey-depth2", c, "json_duplicate_key", _raw_replace(b'"canonical_record":{', b'"canonical_record":{"schema_version":"EVIL",'))
    add("dupkey-depth5", c, "json_duplicate_key", _raw_replace(b'"current":{', b'"current":{"corrections":["EVIL"],'))
    add("dupkey-in-event-signature", c, "json_duplicate_key", _raw_replace(b'"signature":{', b'"signature":{"key_id":"EVIL",'))

    # -- JSON edge cases ---------------------------------------------------------------------------------
    c = "json"
    add("nan", c, "json_number", _raw_replace(b'"event_count":2', b'"event_count":NaN'))
    add("infinity", c, "json_number", _raw_replace(b'"event_count":2', b'"event_count":-Infinity'))
    add("1e400", c, "json_number", _raw_replace(b'"event_count":2', b'"event_count":1e400'))
    add("huge-integer", c, "json_number", _raw_replace(b'"event_count":2', b'"event_count":' + b"9" * 5000))
    add("beyond-2^53", c, "json_number", _raw_replace(b'"event_count":2', b'"event_count":9007199254740993'))
    add("lone-surrogate", c, "json_encoding", _raw_replace(b'"bundle_version":"1.0"', b'"bundle_version":"1.0\\udc00"'))
    add("bom", c, "json_encoding", b"\xef\xbb\xbf" + REAL_BYTES[0])
    add("utf16", c, "json_encoding", REAL_BYTES[0].decode().encode("utf-16-le"))
    add("invalid-utf8", c, "json_encoding", _raw_replace(b'"bundle_version":"1.0"', b'"bundle_version":"1.0\xff"'))
    add("trailing-data", c, "json_syntax", REAL_BYTES[0] + b'{"EVIL":1}')
    add("truncated", c, "json_syntax", REAL_BYTES[0][: len(REAL_BYTES[0]) // 2])
    add("deep-nesting-100000", c, "json_depth", b"[" * 100_000 + b"]" * 100_000)
    add("empty", c, "json_syntax", b"")

    def huge(folder: Path, _outside: Path) -> None:
        with open(folder / "huge-200MB.json", "wb") as f:
            f.truncate(200 * 1024 * 1024)
    add("huge-200MB", c, "file_size", make=huge)

    # -- structure ---------------------------------------------------------------------------------------
    c = "structure"
    add("missing-events", c, "structure", _edit(lambda b: b.pop("events")))
    add("missing-state", c, "structure", _edit(lambda b: b.pop("state")))
    add("pith-number-not-string", c, "structure", _edit(lambda b: b.update(pith_number=2020)))
    add("events-not-list", c, "structure", _edit(lambda b: b.update(events={"0": b["events"][0]})))
    add("version-as-string", c, "structure", _edit(lambda b: b["canonical_record"]["source"].update(version="1")))
    add("unknown-bundle-version", c, "structure", _edit(lambda b: b.update(bundle_version="2.0")))
    add("not-an-object", c, "structure", b'["EVIL"]')
    # (a second record_created event, another record's creation signed as this one's: the one record is which?)
    add("two-record-created-events", c, "structure", _edit(lambda b: b["events"].insert(1, copy.deepcopy(_created(b)))))

    # -- identifiers that try to escape the output folder ----------------------------------------------------
    c = "identifiers"
    add("pith-id-dotdot", c, "identifiers", _edit(lambda b: b.update(pith_number="pith:2020:../../../EVIL")))
    add("arxiv-id-dotdot", c, "identifiers", _edit(lambda b: b["canonical_record"]["source"].update(id="../../EVIL")))
    add("arxiv-id-absolute", c, "identifiers", _edit(lambda b: b["canonical_record"]["source"].update(id="/etc/EVIL")))
    add("arxiv-id-nul", c, "identifiers", _edit(lambda b: b["canonical_record"]["source"].update(id="2004.10856\x00EVIL")))
    add("arxiv-id-windows-reserved", c, "identifiers", _edit(lambda b: b["canonical_record"]["source"].update(id="con/0305021")))
    add("arxiv-id-not-an-archive", c, "identifiers", _edit(lambda b: b["canonical_record"]["source"].update(id="search/0305021")))
    add("category-windows-reserved", c, "identifiers", _edit(lambda b: b["canonical_record"]["metadata"].update(primary_cat="aux")))
    add("category-a-site-name", c, "identifiers", _edit(lambda b: b["canonical_record"]["metadata"].update(primary_cat="index.html")))
    add("category-other-case", c, "identifiers", _edit(lambda b: b["canonical_record"]["metadata"].update(cross_cats_sorted=["cs.ai"])))
    add("category-dotdot", c, "identifiers", _edit(lambda b: b["canonical_record"]["metadata"].update(cross_cats_sorted=["../EVIL"])))
    add("pith-id-case-collision", c, "identifiers", _edit(lambda b: b.update(pith_number=b["pith_number"].lower().replace("pith:", "pith:", 1))))

    # -- filesystem oddities ----------------------------------------------------------------------------------
    c = "filesystem"

    def symlink_out(folder: Path, outside: Path) -> None:
        target = outside / "secret.json"
        target.write_bytes(REAL_BYTES[0])
        (folder / "symlink-out.json").symlink_to(target)
    add("symlink-out-of-folder", c, "file_type", make=symlink_out)
    add("fifo", c, "file_type", make=lambda folder, _o: __import__("os").mkfifo(folder / "fifo.json"))

    def unreadable(folder: Path, _outside: Path) -> None:
        p = folder / "unreadable.json"
        p.write_bytes(REAL_BYTES[0])
        p.chmod(0)
    add("unreadable", c, "file_read", make=unreadable)
    add("vanishes-mid-build", c, "file_read", make=None)  # simulated by the test (listed, then gone)
    return cases


# Text a paper's author may write into what the resolver signs (a title, a claim, a license), and which every page
# and feed must still hold validly: Markdown that makes odd links, markup, long unbroken words, controls.
ODD_TEXT = ["", " ", "a" * 400, "x " * 700, "<b>&amp;</b>", "\u202eRTL", "中文 😀 \U0010fffd", "a\u2028b", "]]> -->",
            "% 100%", "![i](x.png)", "# heading\n\n- list\n\n> quote", "`code` *em*", "[](https://e.example/)",
            "[x](https://)", "[y](https://[::1)", "<https://>", "[z](https://a.example:99999/)", "[w](https://a..b/)",
            "[q](https://e.example/%zz)", "[r](https://e.example/a#b#c)", "[s](https://exa mple.org)", "[p](fig.png)",
            "[u](https://u:p@e.example/)", "[t](https://e.example/<x>)", "http://", "https://a.example/x y",
            "ctrl\x00\x1b[31m\x85\ufffe\U0001fffe end", "bom\ufeffand\ufeff and x", "x*y*z and 2*3*4", "R&amp;D &#106; &eacute;",
            "A and\nB,\n C", "[](https://bücher.example/ä)", "<https://bücher.example/>", "1) one\n2) two", "~~~\ncode\n~~~",
            "$\\mathcal{O}(n \\log n)$ for x_1, x_2", "p < 0.05 & q > 1", "\\&amp; a\\*b\\*c __init__",
            "[a]: https://ref.example/\n\nsee [a]", "[b][]\n\n[b]: https://ref.example/b", "&#99999999; &unknown;",
            "9.5 % (p ≤ 0.01 ± 0.3; −2 °C, €4, $5)", "1. one.\n2. two...", "1\\. not a list. v2.0", "a=b+c|d~e^f",
            "[" * 1001 + " too many brackets to render: *plain* 1.5 %",  # (a page shows it as plain text, with a note)
            "foo\n2. bar and [text][ref] 3.5\n\n[ref]: https://r.example/", "[t][undefined] x.y", " \n\ufeff "]
ODD_CATEGORIES = ["cs.LG", "math.CO", "hep-th", "cs", "physics.optics", "q-fin.CP", "astro-ph", "math.AG"]


def odd_bundle(rng, base: dict, i: int) -> dict:
    """*base* with every field a page shows set to odd but valid values drawn by *rng*."""
    def text() -> str:
        return rng.choice(ODD_TEXT) + rng.choice(["", " tail", " " + rng.choice(ODD_TEXT)])
    b = copy.deepcopy(base)
    b["canonical_record"]["source"].update(id=rng.choice([f"2401.{10000 + i:05d}", f"hep-th/{9901000 + i:07d}"]),
                                          version=rng.choice([1, 2, 999]))
    metadata = b["canonical_record"]["metadata"]
    metadata.update(primary_cat=rng.choice(ODD_CATEGORIES), license=text(),
                    cross_cats_sorted=[rng.choice(ODD_CATEGORIES) for _ in range(rng.randrange(4))],
                    submitted_at=rng.choice(["2007-01-01T00:00:00Z", "2016-02-29T12:00:00.5Z"]))
    for event in b["events"]:
        if event["event_type"] == "graph_snapshot":
            snapshot = event["payload"]["graph_snapshot"]
            snapshot["paper"].update(title=text(), abstract_excerpt=text(), headline=text(),
                                     authors_text=rng.choice(["", ", , ,", "A and B", ",".join("P" * 30), text()]))
            snapshot["claims"] = {"count": 2, "items": [{"claim_id": text()[:9], "kind": text()[:20], "text": text(),
                                                         "status": text()[:20]} for _ in range(rng.randrange(3))]}
            if i < len(ODD_TEXT):  # (the first records hold every odd text once: as title, authors, abstract, claim)
                paper = snapshot["paper"]
                paper["title"] = paper["authors_text"] = paper["abstract_excerpt"] = ODD_TEXT[i]
                snapshot["claims"]["items"].append({"claim_id": "C", "kind": "k", "text": ODD_TEXT[i], "status": "s"})
            snapshot["verdict"]["one_line_summary"] = text()
            snapshot["references"] = rng.choice([{}, {"count": "7", "resolved_work": None}, {"count": 3}])
    b["source_aliases"].append({"alias_kind": text()[:15] or "k", "alias_value": text(),
                                "created_at": "2026-01-01T00:00:00Z"})
    return b


def odd_site(root: Path, count: int, seed: int, base_url: str = "/"):
    """*count* records of odd text (``odd_bundle``, drawn with *seed*), signed with a key made here, in
    ``root/bundles``, built into ``root/site`` without the search index: (the site, the build's report)."""
    import random

    from site_builder.build import BuildOptions, build
    from site_builder.keys import load_trust_set
    from site_builder.settings import SiteConfig

    rng, key = random.Random(seed), TestKey()
    (root / "bundles").mkdir()
    for i in range(count):
        odd = sign_bundle(odd_bundle(rng, rng.choice(REAL), i), key)
        (root / "bundles" / f"odd{i:02d}.json").write_bytes(to_bytes(odd))
    report = build(BuildOptions(bundles=root / "bundles", output=root / "site", search=False,
                                trust=load_trust_set([key.write(root / "k.json")]), config=SiteConfig(base_url=base_url)))
    return root / "site", report
