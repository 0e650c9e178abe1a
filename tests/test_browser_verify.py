"""In-browser verification: the JavaScript canonical form equals Python's, and the control reports real results."""

import json
import random
import shutil

import pytest

from site_builder.build import BuildOptions, build
from site_builder.canonical import canon
from site_builder.keys import load_trust_set

from browser import chromium, serve
from conftest import REAL_FILES, ROOT

pytestmark = pytest.mark.slow  # (headless Chromium)

REAL = [json.loads(p.read_bytes()) for p in REAL_FILES]
IDS = [b["pith_number"].rsplit(":", 1)[1] for b in REAL]


def edge_values(seed: int = 11, count: int = 150) -> list:
    rng = random.Random(seed)
    chars = ["a", "Z", "é", "ß", "中", "\u2028", "\u2029", "\x7f", "\x00", "\x1f", "\n", "\t", '"', "\\", "/",
             "\U0001F600", "\uFF5E", "\uE000", "\U00010000", "\u00A0", "\u200F", "<", "&", "'"]
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
             {"z": {"y": {"x": [{}, [], "", 0]}}}, "\x00\x01\x1f\x7f\u2028", [1.0, 1, -0.0, 1e-7, 1e16]]
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


def test_browser_without_ed25519_says_so_and_never_claims_verified(site):
    with serve(site) as url, chromium() as browser:
        page = browser.new_page()
        page.add_init_script("""
            const original = crypto.subtle.importKey.bind(crypto.subtle);
            crypto.subtle.importKey = (format, data, algorithm, ...rest) =>
                (algorithm && (algorithm.name || algorithm) === 'Ed25519')
                    ? Promise.reject(new DOMException('Unrecognized name', 'NotSupportedError'))
                    : original(format, data, algorithm, ...rest);
        """)
        state, checks, message = run_verify(page, url + f"pith/{IDS[0]}/")
    assert state == "unsupported" and checks == []
    assert "no Ed25519" in message and "Nothing was verified" in message
