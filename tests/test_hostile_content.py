"""Validly signed but hostile content: no script from any bundle runs on any page, no page asks another host for
anything, and pages stay readable."""

import copy
import json

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from site_builder.build import BuildOptions, build
from site_builder.keys import load_trust_set

from browser import chromium, serve
from conftest import REAL_FILES
from signing import TestKey, sign_bundle, to_bytes

pytestmark = pytest.mark.slow  # (headless Chromium)

PWN = "window.__pwned=(window.__pwned||0)+1"
PAYLOADS = [
    f"<script>{PWN}</script>",
    f'<img src=x onerror="{PWN}">',
    f'"><svg onload="{PWN}">',
    f"</title><script>{PWN}</script>",
    f"</script><script>{PWN}</script>",
    f"[click me](javascript:{PWN})",
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "![pixel](https://tracker.invalid/pixel.png?reader=1)",  # (a paper's author would learn each reader's address)
    f"<a href=\"javascript:{PWN}\">link</a>",
    "{{ 7*7 }} {% raw %}",
    "\u202eevil\u202c \u2066isolate\u2069 \u200f",
    "W" * 20000,
]


def hostile(base: dict, i: int, payload: str) -> dict:
    b = copy.deepcopy(base)
    b["canonical_record"]["source"]["id"] = f"2401.{10000 + i:05d}"
    for event in b["events"]:
        if event["event_type"] == "graph_snapshot":
            g = event["payload"]["graph_snapshot"]
            g["paper"].update(title=f"Title {i} {payload}", authors_text=f"Mallory {payload}, Eve",
                              headline=f"Headline {payload}", abstract_excerpt=f"Abstract {payload}")
            g["claims"] = {"count": 1, "snapshot_sha256": "0" * 64, "items": [
                {"claim_id": f"C1{payload}", "kind": f"strongest_claim{payload}", "text": f"Claim **{payload}**",
                 "status": f"machine_extracted{payload}", "source": "verdict", "attestation": "unclaimed"}]}
            g["verdict"]["one_line_summary"] = f"Summary {payload}"
    return b


@pytest.fixture(scope="module")
def hostile_site(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    bundles = root / "bundles"
    bundles.mkdir()
    key = TestKey()
    base = json.loads(REAL_FILES[0].read_bytes())
    for i, payload in enumerate(PAYLOADS):
        (bundles / f"hostile{i}.json").write_bytes(to_bytes(sign_bundle(hostile(base, i, payload), key)))
    bad_cat = hostile(base, 99, "x")
    bad_cat["canonical_record"]["metadata"]["primary_cat"] = "<script>cs.AI</script>"
    (bundles / "hostile-category.json").write_bytes(to_bytes(sign_bundle(bad_cat, key)))
    report = build(BuildOptions(bundles=bundles, output=root / "site", trust=load_trust_set([key.write(root / "k.json")]),
                                search=True))
    return root / "site", report


def test_hostile_category_is_rejected_not_rendered(hostile_site):
    _, report = hostile_site
    assert {o.inspection.rel: o.inspection.check for o in report.rejected} == {"hostile-category.json": "identifiers"}
    assert report.count("published") == len(PAYLOADS)


def test_no_raw_payload_in_any_page(hostile_site):
    site, _ = hostile_site
    for page in site.rglob("*.html"):
        html = page.read_text()
        assert "onerror=\"window" not in html and "<script>window" not in html, page
        assert 'href="javascript:' not in html.lower() and 'href="data:' not in html.lower(), page
        assert "<svg onload" not in html, page
        assert "<img src=\"https://tracker" not in html, page  # (it would load from another host)


def test_no_script_runs_and_pages_stay_readable(hostile_site):
    site, _ = hostile_site
    pages = sorted(str(p.relative_to(site)) for p in site.rglob("*.html"))
    assert len(pages) > 3 * len(PAYLOADS)
    problems = []
    with serve(site) as url, chromium() as browser:
        context = browser.new_context(viewport={"width": 1024, "height": 800})
        page = context.new_page()
        page.on("dialog", lambda d: (problems.append(f"dialog {d.message}"), d.dismiss()))
        page.on("request", lambda r: None if r.url.startswith(url) else problems.append(f"request to {r.url}"))
        for rel in pages:
            start = url + rel.removesuffix("index.html")
            page.goto(start)
            if 'http-equiv="refresh"' in (site / rel).read_text():
                page.wait_for_url(lambda u, start=start: u != start)  # the short address moves on to the paper page
            page.wait_for_load_state("load")
            if page.evaluate("window.__pwned || 0"):
                problems.append(f"script ran on {rel}")
            width = page.evaluate("document.documentElement.scrollWidth")
            if width > 1024 + 2:
                problems.append(f"{rel} overflows horizontally ({width}px)")
        for i in range(len(PAYLOADS)):
            page.goto(url)
            link = page.locator("ol.papers a.title", has_text=f"Title {i} ").first
            link.click()
            page.wait_for_load_state("load")
            assert page.locator("h1").first.is_visible()
            assert f"Title {i}" in page.locator("h1").first.inner_text()
            if page.evaluate("window.__pwned || 0"):
                problems.append(f"script ran after navigating to paper {i}")
    assert problems == []


def test_search_results_of_hostile_text_run_no_script(hostile_site):
    """Pagefind's results show titles, authors and excerpts of the pages it indexed: a query that finds every
    hostile record (and one that finds the payloads' own words) shows them as text, and nothing runs.  While the
    results load, the count the page shows is never a smaller one (a result whose excerpt has not come yet is
    not taken for a near miss)."""
    site, _ = hostile_site
    problems = []
    with serve(site) as url, chromium() as browser:
        page = browser.new_page()
        page.on("dialog", lambda d: (problems.append(f"dialog {d.message}"), d.dismiss()))
        page.on("request", lambda r: None if r.url.startswith(url) else problems.append(f"request to {r.url}"))
        page.add_init_script("""window.__said = []; new MutationObserver(() => {
            const m = document.querySelector('.pagefind-ui__message');
            if (m && window.__said[window.__said.length - 1] !== m.textContent) window.__said.push(m.textContent);
        }).observe(document, {childList: true, subtree: true, characterData: true});""")
        for query, every in (("Mallory", True), ("onerror", False), ("script", False)):
            page.goto(url + "search/?q=" + query)
            page.wait_for_function("document.querySelectorAll('.pagefind-ui__result').length > 0")
            page.wait_for_load_state("networkidle")  # (the results' fragments are fetched one by one)
            if every:  # (the first five are shown, then "Load more"; the message counts them all)
                try:
                    page.wait_for_function("document.querySelector('.pagefind-ui__message').textContent"
                                           f".startsWith('{len(PAYLOADS)} results')", timeout=15_000)
                except PlaywrightTimeout:
                    problems.append(f"{query}: {page.inner_text('.pagefind-ui__message')}")
                problems += [f"{query}: said {said!r}" for said in page.evaluate("window.__said")
                             if said[:1].isdigit() and not said.startswith(f"{len(PAYLOADS)} results")]
            if page.evaluate("window.__pwned || 0"):
                problems.append(f"script ran on the results for {query}")
            if page.evaluate("document.querySelectorAll('#search img, #search svg, #search script').length"):
                problems.append(f"markup from a bundle in the results for {query}")
    assert problems == []


def test_what_no_signature_covers_never_reaches_a_page(tmp_path):
    """A signature block's ``signed_at`` is outside every signature, so a mirror may change it and the bundle
    still verifies: no page may show it (only the mirrored JSON, byte for byte, carries it)."""
    from conftest import tree

    raw = REAL_FILES[0].read_bytes()
    bundle = json.loads(raw)
    stamp = bundle["bundle_signature"]["signed_at"]
    forged = raw.replace(stamp.encode(), b"3026" + stamp[4:].encode())
    assert forged != raw
    sites = {}
    for name, data in (("real", raw), ("forged", forged)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "b.json").write_bytes(data)
        report = build(BuildOptions(bundles=tmp_path / name, output=tmp_path / f"site-{name}", trust=load_trust_set(),
                                    search=False))
        assert report.count("published") == 1
        sites[name] = tree(tmp_path / f"site-{name}")
    differing = {rel for rel in sites["real"] if sites["real"][rel] != sites["forged"].get(rel)}
    assert differing and all(rel.endswith((".json")) for rel in differing)
    assert not any(rel.endswith((".html", ".xml", ".txt")) for rel in differing)
