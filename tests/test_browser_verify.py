"""In-browser verification: the JavaScript canonical form equals Python's, and the control reports real results."""

import json
import random
import shutil

import pytest

from site_builder.build import BuildOptions, build
from site_builder.canonical import canon
from site_builder.keys import load_trust_set

from browser import chromium, new_page, serve
from conftest import REAL_FILES, ROOT, record_id

pytestmark = pytest.mark.slow  # (headless Chromium)

REAL = [json.loads(p.read_bytes()) for p in REAL_FILES]
IDS = [record_id(b) for b in REAL]


def edge_values(seed: int = 11, count: int = 150) -> list:
    rng = random.Random(seed)
    chars = ["a", "Z", "é", "ß", "中", "\u2028", "\u2029", "\x7f", "\x00", "\x1f", "\n", "\t", '"', "\\", "/",
             "\U0001F600", "\uFF5E", "\uE000", "\U00010000", "\u00A0", "\u200F", "<", "&", "'", "\b", "\f", "\r"]
    floats = [0.1, -0.0, 0.0, 1.0, 1e-7, 1e-5, 0.0001, 1e16, 1e15, 123456789.125, 5e-324, 1.7976931348623157e308,
              -2.5e-10, 3.14159, 1e22, 1e21, 100.0, 2 ** -30]
    ints = [0, 1, -1, 2 ** 53 - 1, -(2 ** 53 - 1), 10 ** 15, 42]

    def text(n=6):
        return "".join(rng.choice(chars) for _ in range(rng.randrange(n + 1)))

    def value(depth=0):
        kind = rng.randrange(9 if depth < 4 else 6)
        if kind == 0: return text()
        if kind == 1: return rng.choice(floats)
        if kind == 2: return rng.choice(ints)
        if kind == 3: return rng.choice([True, False, None])
        if kind == 4: return rng.choice([{}, [], "", [[]], {"": {}}])
        if kind == 5: return rng.uniform(-1e6, 1e6)
        if kind == 6: return [value(depth + 1) for _ in range(rng.randrange(4))]
        return {text(4): value(depth + 1) for _ in range(rng.randrange(5))}

    fixed = [{"\U0001F600": 1, "\uFF5E": 2, "a": 3, "\uE000": 4},  # UTF-16 order differs from code-point order
             {"z": {"y": {"x": [{}, [], "", 0]}}}, "\x00\x01\x1f\x7f\u2028", [1.0, 1, -0.0, 1e-7, 1e16],
             [2 ** 64, -(10 ** 21), 10 ** 30, 2 ** 53 + 1]]  # (integers a double cannot hold: Python writes each digit)
    return fixed + [value() for _ in range(count)]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("verify") / "site"
    build(BuildOptions(bundles=ROOT / "bundles", output=out, trust=load_trust_set(), search=False))
    return out


def run_verify(page, url):
    page.goto(url)
    page.click("#verify-in-browser button")
    page.wait_for_function("!['idle', 'running'].includes(document.getElementById('verify-in-browser').dataset.state)")
    state = page.eval_on_selector("#verify-in-browser", "e => e.dataset.state")
    checks = page.eval_on_selector_all("#verify-in-browser li", "els => els.map(e => [e.dataset.check, e.className])")
    return state, checks, page.inner_text("#verify-in-browser output")


def test_javascript_and_python_canonical_forms_agree(site):
    values = [*REAL, *[b["state"] for b in REAL], *edge_values()]
    # Several spellings of the same JSON: the parser must not depend on formatting or escaping.
    texts = []
    for v in values:
        texts.append(json.dumps(v, ensure_ascii=False))
        texts.append(json.dumps(v, ensure_ascii=True, indent=1))
    with serve(site) as url, chromium() as browser:
        page = browser.new_page()
        page.goto(url + f"pith/{IDS[0]}/")
        got = page.evaluate("""texts => texts.map(t => {
            const s = PithVerify.canonical(PithVerify.parseJSON(t));
            return Array.from(new TextEncoder().encode(s), b => b.toString(16).padStart(2, '0')).join('');
        })""", texts)
    for text, hexed in zip(texts, got, strict=True):
        assert bytes.fromhex(hexed) == canon(json.loads(text)), text[:200]


def test_parser_refuses_what_python_refuses(site):
    bad = ['{"a":1,"a":2}', '[NaN]', '{"a":"\\ud800"}', '[1] x', '{"a":01}']
    with serve(site) as url, chromium() as browser:
        page = browser.new_page()
        page.goto(url + f"pith/{IDS[0]}/")
        outcomes = page.evaluate("""texts => texts.map(t => { try { PithVerify.parseJSON(t); return 'accepted'; }
                                                           catch (e) { return 'refused'; } })""", bad)
    assert outcomes == ["refused"] * len(bad)


def test_every_real_bundle_page_verifies_in_the_browser(site):
    with serve(site) as url, chromium() as browser:
        page = browser.new_page()
        for pith_id in IDS:
            state, checks, message = run_verify(page, url + f"pith/{pith_id}/")
            assert state == "verified", message
            names = {name for name, _ in checks}
            assert {"canonical_hash", "pith_number", "receipt_signature", "event_hash", "event_signature",
                    "state_hash", "bundle_hash", "bundle_signature"} <= names
            assert all(cls == "passed" for _, cls in checks)


@pytest.mark.parametrize("alteration, failing", [
    ("title", {"event_hash", "bundle_hash"}),
    ("signature", {"bundle_signature"}),
    ("receipt", {"receipt_signature"}),
])
def test_bundle_altered_after_the_build_is_reported(site, tmp_path, alteration, failing):
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    target = copy / "pith" / IDS[1] / "bundle.json"
    b = json.loads(target.read_bytes())
    if alteration == "title":
        b["events"][1]["payload"]["graph_snapshot"]["paper"]["title"] = "A title the resolver never signed"
    elif alteration == "signature":
        sig = b["bundle_signature"]["signature_b64"]
        b["bundle_signature"]["signature_b64"] = ("A" if sig[0] != "A" else "B") + sig[1:]
    else:
        r = b["events"][0]["payload"]["receipt"]
        r["signature_b64"] = ("A" if r["signature_b64"][0] != "A" else "B") + r["signature_b64"][1:]
    target.write_bytes(json.dumps(b, separators=(",", ":"), ensure_ascii=False).encode())
    with serve(copy) as url, chromium() as browser:
        state, checks, message = run_verify(browser.new_page(), url + f"pith/{IDS[1]}/")
    assert state == "failed"
    assert {name for name, cls in checks if cls == "failed"} >= failing
    assert message.startswith("FAILED") and "Verified" not in message


@pytest.fixture(scope="module")
def signed_here(tmp_path_factory):
    """A site of one record signed with a key the test makes, which its pages pin: (the site, the record's ID,
    the key, the bundle as signed), so that a test can sign what the real key never would."""
    from signing import TestKey, sign_bundle, to_bytes
    root = tmp_path_factory.mktemp("signed-here")
    key = TestKey()
    b = sign_bundle(REAL[0], key)
    (root / "bundles").mkdir()
    (root / "bundles" / "r.json").write_bytes(to_bytes(b))
    build(BuildOptions(bundles=root / "bundles", output=root / "site", search=False,
                       trust=load_trust_set([key.write(root / "k.json")])))
    return root / "site", record_id(b), key, b


def _subject_elsewhere(b, key):
    from signing import sign_bundle
    other = json.loads(json.dumps(b))
    other["events"][-1]["subject_pith_number"] = "pith:2020:AAAAAAAAAAAAAAAAAAAAAAAAAA"
    return sign_bundle(other, key, keep_subject=True)


def _event_id_elsewhere(b, key):
    b["events"][0]["event_id"] = "sha256:" + "0" * 64
    from signing import seal
    return seal(b, key)


def _receipt_of_another_digest(b, key):
    from signing import sign_bundle
    b["events"][0]["payload"]["receipt"]["canonical_sha256"] = "0" * 64  # (its signature is over the record's)
    return sign_bundle(b, key, keep_receipt=True)


def _fingerprint_of_another_key(b, key):
    b["bundle_signature"]["public_key_fingerprint"] = "0" * 64  # (no digest covers a signature block)
    return b


def _signature_not_base64(b, key):
    b["bundle_signature"]["signature_b64"] = "not base64!"
    return b


@pytest.mark.parametrize("alter, failing", [
    (_subject_elsewhere, "event_subject"), (_event_id_elsewhere, "event_id"),
    (_receipt_of_another_digest, "receipt_digest"), (_fingerprint_of_another_key, "bundle_signature"),
    (_signature_not_base64, "bundle_signature")])
def test_a_bundle_the_pinned_key_signed_that_breaks_a_rule_is_reported(signed_here, tmp_path, alter, failing):
    """The pinned key's signatures hold, but the bundle breaks a rule the verifier keeps besides them (PITH_FORMAT.md
    §2-3): an event about another record, an event_id not its content's, a receipt for another digest, a
    signature block naming another key's fingerprint or holding no base64.  The one check fails, named."""
    from signing import to_bytes
    site, pith_id, key, signed = signed_here
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    (copy / "pith" / pith_id / "bundle.json").write_bytes(to_bytes(alter(json.loads(json.dumps(signed)), key)))
    with serve(copy) as url, chromium() as browser:
        state, checks, message = run_verify(browser.new_page(), url + f"pith/{pith_id}/")
    assert state == "failed" and {name for name, cls in checks if cls == "failed"} == {failing}, checks
    assert message.startswith("FAILED") and "Verified" not in message
    assert not [name for name, _ in checks if name.startswith("page: ")]  # (the page is held only to a verified bundle)


NO_ED25519 = """
    const original = crypto.subtle.importKey.bind(crypto.subtle);
    crypto.subtle.importKey = (format, data, algorithm, ...rest) =>
        (algorithm && (algorithm.name || algorithm) === 'Ed25519')
            ? Promise.reject(new DOMException('Unrecognized name', 'NotSupportedError'))
            : original(format, data, algorithm, ...rest);
"""  # (a browser whose Web Crypto has no Ed25519)


def test_browser_without_ed25519_says_so_and_never_claims_verified(site):
    with serve(site) as url, chromium() as browser:
        page = browser.new_page()
        page.add_init_script(NO_ED25519)
        state, checks, message = run_verify(page, url + f"pith/{IDS[0]}/")
    assert state == "unsupported" and checks == []
    assert "no Ed25519" in message and "Nothing was verified" in message


def _edited_page(site, tmp_path, pith_id, edit):
    """A copy of the site where only the record's page was edited (its bundle.json left as it was)."""
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    page = copy / "pith" / pith_id / "index.html"
    html = page.read_text("utf-8")
    edited = edit(html)
    assert edited != html
    page.write_text(edited, "utf-8")
    return copy


@pytest.mark.parametrize("field, edit", [
    ("title", lambda html: html.replace('data-field="title" data-pagefind-meta="title">',
                                        'data-field="title" data-pagefind-meta="title">Nightmare: ', 1)),
    ("authors", lambda html: html.replace('<p class="authors" data-field="authors">',
                                          '<p class="authors" data-field="authors">Mallory Evil, ', 1)),
    ("abstract", lambda html: html.replace('<span data-field="abstract">', '<span data-field="abstract">Not ', 1)),
    ("categories", lambda html: html.replace('<span class="cat-code">', '<span class="cat-code">hep-th ', 1)),
    ("submitted", lambda html: __import__("re").sub(r'(data-field="submitted" datetime="[^"]*">)\d{4}',
                                                   r"\g<1>1999", html, count=1)),
])
def test_a_page_edited_by_the_host_fails_and_names_the_field(site, tmp_path, field, edit):
    """The bundle still verifies; what the reader sees does not match it."""
    copy = _edited_page(site, tmp_path, IDS[0], edit)
    with serve(copy) as url, chromium() as browser:
        page = browser.new_page()
        state, checks, message = run_verify(page, url + f"pith/{IDS[0]}/")
        chip = page.inner_text("#mirror-chip")
        panel = page.get_attribute("#verification-panel", "class")
        # drawn in the page's colour for "bad" (red), the chip, the panel's frame and the verdict alike
        bad, drawn = page.evaluate("""() => [getComputedStyle(document.documentElement).getPropertyValue('--bad'),
            [getComputedStyle(document.getElementById('mirror-chip')).color,
             getComputedStyle(document.getElementById('mirror-chip')).borderTopColor,
             getComputedStyle(document.getElementById('verification-panel')).borderTopColor,
             getComputedStyle(document.querySelector('#verify-in-browser output')).color]]""")
    assert state == "failed"
    assert f"page: {field}" in {name for name, cls in checks if cls == "failed"}
    assert message.startswith("FAILED") and f"page: {field}" in message
    assert "failed" in chip and "✓" not in chip and "failed" in panel.split()
    red = tuple(int(bad.strip()[i:i + 2], 16) for i in (1, 3, 5))
    assert set(drawn) == {"rgb(%d, %d, %d)" % red}, (bad, drawn)


def test_an_intact_page_verifies_with_every_field_compared_and_shows_the_signed_values(site):
    with serve(site) as url, chromium() as browser:
        page = browser.new_page()
        for pith_id, bundle in zip(IDS, REAL):
            state, checks, message = run_verify(page, url + f"pith/{pith_id}/")
            assert state == "verified", (message, checks)
            compared = {name for name, cls in checks if name.startswith("page: ") and cls == "passed"}
            assert {"page: title", "page: authors", "page: pith number", "page: arXiv id and version",
                    "page: submitted", "page: categories", "page: abstract", "page: claims"} <= compared
            shown = page.inner_text("#verify-in-browser dl.verified-values")
            assert bundle["pith_number"] in shown and bundle["canonical_record"]["source"]["id"] in shown


@pytest.fixture(scope="module")
def site_with_claims(tmp_path_factory):
    """A record whose claims hold Markdown (emphasis, a link, code, a list), signed with a key the test makes."""
    from signing import TestKey, sign_bundle, snapshot_of, to_bytes
    root = tmp_path_factory.mktemp("claims")
    key = TestKey()
    trust = load_trust_set([key.write(root / "k.json")])
    b = json.loads(REAL_FILES[0].read_bytes())
    snapshot = snapshot_of(b)
    snapshot["claims"]["items"] = [
        {"claim_id": "C1", "kind": "main_result", "status": "supported",
         "text": "The **scheduler** cuts training time by *30 %* on [eight GPUs](https://example.org/gpus)."},
        {"claim_id": "C2", "kind": "limitation", "status": "not_checked",
         "text": "Needs `NCCL` and:\n\n- a fast network\n- 1. fixed batch sizes"},
        {"claim_id": "C3", "kind": "main_result", "status": "supported",
         "text": "Error falls by 9.5 % (p ≤ 0.01, ±0.3; −2 °C at €40, $5)\\.\n\n1. first.\n2. second..."},
    ]
    snapshot["claims"]["count"] = 3
    (root / "bundles").mkdir()
    (root / "bundles" / "r.json").write_bytes(to_bytes(sign_bundle(b, key)))
    build(BuildOptions(bundles=root / "bundles", output=root / "site", trust=trust, search=False))
    pith_id = record_id((root / "bundles" / "r.json"))
    return root / "site", pith_id


def test_claims_in_markdown_are_compared_with_what_the_page_shows(site_with_claims, tmp_path):
    site, pith_id = site_with_claims
    with serve(site) as url, chromium() as browser:
        state, checks, message = run_verify(browser.new_page(), url + f"pith/{pith_id}/")
    assert state == "verified" and ["page: claims", "passed"] in checks, message
    copy = _edited_page(site, tmp_path, pith_id,
                        lambda html: html.replace("<strong>scheduler</strong>", "<strong>optimizer</strong>", 1))
    with serve(copy) as url, chromium() as browser:
        state, checks, _ = run_verify(browser.new_page(), url + f"pith/{pith_id}/")
    assert state == "failed" and ["page: claims", "failed"] in checks


@pytest.mark.parametrize("shown, edited", [("9.5 %", "95 %"), ("p ≤ 0.01", "p ≥ 0.01"), ("−2", "2"),
                                           ("€40", "£40")])
def test_a_claims_number_or_sign_edited_on_the_page_fails(site_with_claims, tmp_path, shown, edited):
    """A claim is compared by more than its letters and digits: a decimal point moved, a comparison turned, a
    minus sign or a currency changed says something else, though its letters and digits are the same."""
    site, pith_id = site_with_claims
    copy = _edited_page(site, tmp_path, pith_id, lambda html: html.replace(shown, edited, 1))
    with serve(copy) as url, chromium() as browser:
        state, checks, message = run_verify(browser.new_page(), url + f"pith/{pith_id}/")
    assert state == "failed" and ["page: claims", "failed"] in checks, message


def test_a_record_whose_cross_lists_repeat_shows_and_checks_each_category_once(tmp_path):
    """A signed bundle may repeat a cross-list and name its primary category among them: its page, its category's
    listing and feed show it once per category, and the reader's browser, which reads the categories from the
    bundle, agrees with the page."""
    from signing import TestKey, sign_bundle, to_bytes
    key = TestKey()
    trust = load_trust_set([key.write(tmp_path / "k.json")])
    b = json.loads(REAL_FILES[0].read_bytes())
    metadata = b["canonical_record"]["metadata"]
    primary = metadata["primary_cat"]
    metadata["cross_cats_sorted"] = ["math.CO", "math.CO", primary]
    (tmp_path / "bundles").mkdir()
    (tmp_path / "bundles" / "r.json").write_bytes(to_bytes(sign_bundle(b, key)))
    build(BuildOptions(bundles=tmp_path / "bundles", output=tmp_path / "site", trust=trust, search=False))
    pith_id = record_id((tmp_path / "bundles" / "r.json"))
    site = tmp_path / "site"
    listing = (site / "category" / "math.CO" / "index.html").read_text("utf-8")
    assert listing.count(f'href="/pith/{pith_id}/"') == 1
    assert (site / "category" / "math.CO" / "feed.xml").read_text("utf-8").count("<entry>") == 1
    with serve(site) as url, chromium() as browser:
        page = browser.new_page()
        state, checks, message = run_verify(page, url + f"pith/{pith_id}/")
        shown = page.eval_on_selector_all('[data-field="categories"] .cat-code', "es => es.map(e => e.textContent)")
    assert shown == [primary, "math.CO"]
    assert state == "verified" and ["page: categories", "passed"] in checks, message


def test_pages_of_validly_signed_odd_text_verify_in_the_browser(tmp_path):
    """What the page shows of text a paper's author wrote oddly is what the bundle signs, as the reader's
    browser compares them: Markdown (emphasis inside words, entities, links not made, an empty link showing its
    address), characters no page shows, authors split over lines.  A mismatch here is a false alarm: the reader
    is told the mirror edited the page."""
    from adversarial import ODD_TEXT, odd_site

    site, _ = odd_site(tmp_path, len(ODD_TEXT), seed=5)  # (each odd text once as title, authors, abstract, claim)
    ids = sorted(p.parent.name for p in site.glob("pith/*/badge.svg"))
    assert len(ids) == len(ODD_TEXT)
    failed = []
    with serve(site) as url, chromium() as browser:
        page = browser.new_page()
        for pith_id in ids:
            state, checks, message = run_verify(page, url + f"pith/{pith_id}/")
            if state != "verified":
                failed.append(f"{pith_id}: {message[:300]}")
    assert failed == []


def _verify_in_standalone(page, bundle_path=None, url=None):
    page.eval_on_selector("#result", "e => { e.dataset.state = 'idle'; }")  # (not the last check's outcome)
    if bundle_path is not None:
        page.set_input_files("#file", str(bundle_path))
    else:
        page.fill("#url", url)
        page.click("#fetch")
    # (a function, not an expression: the verifier's CSP forbids eval)
    page.wait_for_function("() => !['idle', 'running'].includes(document.getElementById('result').dataset.state)")
    return page.eval_on_selector("#result", "e => e.dataset.state"), page.inner_text("#result")


def test_the_standalone_verifier_names_what_failed_and_keeps_nothing_of_the_last_check(site, tmp_path):
    """A bundle that fails is named with the checks it failed, and the signed values of the bundle verified
    before it are gone from the page; a bundle dropped on the page is checked as one chosen."""
    tampered = tmp_path / "tampered.json"
    tampered.write_bytes(REAL_FILES[1].read_bytes().replace(b'"title":"', b'"title":"X', 1))
    with chromium() as browser:
        page = browser.new_page()
        page.goto((site / "verify" / "index.html").as_uri())
        assert _verify_in_standalone(page, REAL_FILES[0])[0] == "verified"
        assert page.eval_on_selector_all("#result dl.values dt", "els => els.length") > 3
        state, text = _verify_in_standalone(page, tampered)
        failed = page.eval_on_selector_all("#result ol.checks li.failed", "els => els.map(e => e.dataset.check)")
        assert state == "failed" and failed
        said = page.inner_text("#result output")
        assert said.startswith("FAILED: ") and said.endswith(" — tampered.json is not what the pinned key signed.")
        assert said.removeprefix("FAILED: ").split(" — ")[0].split(", ") == failed
        assert page.eval_on_selector_all("#result dl.values > *", "els => els.length") == 0
        page.eval_on_selector("#result", "e => { e.dataset.state = 'idle'; }")
        page.evaluate("""text => { const files = new DataTransfer();
            files.items.add(new File([text], "dropped.json", {type: "application/json"}));
            document.getElementById("drop").dispatchEvent(new DragEvent("drop", {dataTransfer: files, bubbles: true,
                                                                               cancelable: true})); }""",
                      REAL_FILES[2].read_text())
        page.wait_for_function("() => !['idle', 'running'].includes(document.getElementById('result').dataset.state)")
        assert page.eval_on_selector("#result", "e => e.dataset.state") == "verified"
        assert REAL[2]["pith_number"] in page.inner_text("#result") and "dropped.json" in page.inner_text("#result")


def test_the_standalone_verifier_without_ed25519_or_a_bundle_at_the_url_gives_no_verdict(site, tmp_path):
    """A browser without Ed25519 checks nothing and says so, never that a bundle is forged; an address that
    answers with an error is said to be one, not a web page or a forgery."""
    with serve(site) as url, chromium() as browser:
        page = browser.new_page()
        page.goto(url + "verify/")
        state, text = _verify_in_standalone(page, url=url + f"pith/{'A' * 26}/")
        missing = f"{url}pith/{'A' * 26}/bundle.json"
        assert state == "failed" and f"could not fetch {missing}: HTTP 404" in text
        page.add_init_script(NO_ED25519)
        page.goto(url + "verify/")
        state, text = _verify_in_standalone(page, REAL_FILES[0])
        assert state == "unsupported" and "no Ed25519" in text and "Nothing was verified" in text
        assert "FAILED" not in text and "Verified" not in text
        assert page.eval_on_selector_all("#result ol.checks li", "els => els.length") == 0


@pytest.mark.parametrize("screen, scheme", [("desktop", "light"), ("phone", "dark")])
def test_the_standalone_verifier_works_from_disk_with_no_request_but_the_bundle(site, tmp_path, screen, scheme):
    saved = tmp_path / "pith-verifier.html"
    shutil.copy(site / "verify" / "index.html", saved)
    tampered = tmp_path / "tampered.json"
    tampered.write_bytes(REAL_FILES[1].read_bytes().replace(b'"title":"', b'"title":"X', 1))
    with chromium() as browser:
        page = new_page(browser, screen, scheme)
        requests = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(saved.as_uri())
        state, text = _verify_in_standalone(page, REAL_FILES[0])
        assert state == "verified", text
        assert REAL[0]["pith_number"] in text and REAL[0]["canonical_record"]["source"]["id"] in text
        state, text = _verify_in_standalone(page, tampered)
        assert state == "failed" and "FAILED" in text
    assert requests == [saved.as_uri()]


def test_the_standalone_verifier_fetches_a_record_by_its_page_url(site, tmp_path):
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    bundle = copy / "pith" / IDS[2] / "bundle.json"
    with serve(copy) as url, chromium() as browser:
        page = browser.new_page()
        page.goto(url + "verify/")
        state, text = _verify_in_standalone(page, url=url + f"pith/{IDS[2]}/")
        assert state == "verified" and REAL[2]["pith_number"] in text
        # the page's address as the resolver writes it (no "/"), in other letter case, with a fragment
        for address in (f"pith/{IDS[2]}", f"pith/{IDS[2].lower()}/index.html#claims"):
            state, text = _verify_in_standalone(page, url=url + address)
            assert state == "verified" and REAL[2]["pith_number"] in text, (address, text)
        # a page that is no record's (a short address's) is said to be a page: no verdict on a signature
        state, text = _verify_in_standalone(page, url=url + f"pith/{IDS[2][:8]}/")
        assert state == "failed" and "is a web page, not a bundle" in text and "signed" not in text, text
        bundle.write_bytes(bundle.read_bytes().replace(b'"built_at":"2', b'"built_at":"1', 1))
        state, text = _verify_in_standalone(page, url=url + f"pith/{IDS[2]}/")
        assert state == "failed"
