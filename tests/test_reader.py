"""What a reader sees, in headless Chromium at a desktop and a phone width, in light and dark: accessibility
(axe-core), no squeezed columns or sideways scrolling, long author lists folded, and links to read the paper."""

import json
from pathlib import Path

import axe_playwright_python
import pytest

from site_builder.build import BuildOptions, build
from site_builder.keys import load_trust_set
from site_builder.settings import SiteConfig

from browser import SCREENS, chromium, new_page, serve
from conftest import REAL_FILES, ROOT, record_id, resigned_real_bundles
from signing import sign_bundle, snapshot_of, to_bytes, with_paper

pytestmark = pytest.mark.slow  # (headless Chromium)

AXE = (Path(axe_playwright_python.__file__).parent / "axe.min.js").read_text("utf-8")
WIDTHS = {screen: size["width"] for screen, size in SCREENS.items()}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The real records re-signed with a test key, and one with 3,000 authors, built with the search index."""
    root = tmp_path_factory.mktemp("reader")
    key, trust, bundles = resigned_real_bundles(root)
    many = with_paper(json.loads(REAL_FILES[0].read_bytes()),
                      authors_text=", ".join(f"Author Number{i}" for i in range(3000)))
    many["canonical_record"]["source"]["id"] = "2004.99998"
    raw = to_bytes(sign_bundle(many, key))
    (bundles / "many.json").write_bytes(raw)
    (bundles / "a-rejected-file-with-a-long-name.json").write_bytes(raw.replace(b"Author Number7,", b"Author Number8,"))
    build(BuildOptions(bundles=bundles, output=root / "site", trust=trust))
    ids = [record_id(p) for p in REAL_FILES]
    return root / "site", ids, record_id(raw)


@pytest.fixture(params=[(w, c) for w in WIDTHS for c in ("light", "dark")], ids=lambda p: f"{p[0]}-{p[1]}")
def reader(request, site):
    """A browser page at a desktop or a phone width, in light or dark, over the served site: (page, site URL,
    record ids, viewport width)."""
    width, scheme = request.param
    folder, ids, _ = site
    with serve(folder) as url, chromium() as browser:
        yield new_page(browser, width, scheme), url, ids, WIDTHS[width]


def page_types(ids):
    return {"home": "", "paper": f"pith/{ids[0]}/", "listing": "papers/", "category": "category/cs.DC/",
            "groups": "category/", "search": "search/", "verification": "verification/", "stats": "stats/",
            "verifier": "verify/", "404": "no/such/page/"}


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", ["desktop", "phone"])
def test_axe_finds_no_serious_violation_on_any_page_type(site, scheme, width):
    folder, ids, _ = site
    problems = []
    with serve(folder) as url, chromium() as browser:
        page = new_page(browser, width, scheme, height=900)
        for name, path in page_types(ids).items():
            page.goto(url + path)
            if name == "search":  # with results on screen, as a reader sees them
                page.fill("input[type=search], #search input", "TensorOpt")
                page.wait_for_timeout(1500)
            page.add_script_tag(content=AXE)
            found = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']})).violations")
            problems += [f"{name}: {v['id']} ({v['impact']}, {len(v['nodes'])} nodes)" for v in found
                         if v["impact"] in ("serious", "critical")]
    assert problems == []


def test_axe_finds_no_serious_violation_on_pages_of_validly_signed_odd_text(tmp_path):
    """Records whose text a paper's author wrote oddly (Markdown making empty or broken links, markup, long
    unbroken words, no title or authors), signed: their pages and the lists showing them, at a phone's width
    in light and dark.  (An empty Markdown link was a link no screen reader could name.)"""
    from adversarial import odd_site

    out, _ = odd_site(tmp_path, 12, seed=11)
    paths = ["", "papers/", "category/"] + [f"pith/{p.parent.name}/" for p in sorted(out.glob("pith/*/badge.svg"))]
    assert len(paths) == 3 + 12
    problems = []
    with serve(out) as url, chromium() as browser:
        for scheme in ("light", "dark"):
            page = new_page(browser, "phone", scheme)
            for path in paths:
                page.goto(url + path)
                page.add_script_tag(content=AXE)
                found = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']}))"
                                      ".violations")
                problems += [f"{scheme} {path}: {v['id']} ({v['nodes'][0]['html'][:80]})" for v in found
                             if v["impact"] in ("serious", "critical")]
                if page.evaluate("document.scrollingElement.scrollWidth") > WIDTHS["phone"]:
                    problems.append(f"{scheme} {path}: scrolls sideways")
    assert problems == []


@pytest.mark.parametrize("path", ["paper", "verification"])
def test_no_table_column_is_squeezed_and_nothing_scrolls_sideways_on_a_phone(site, path):
    folder, ids, _ = site
    with serve(folder) as url, chromium() as browser:
        page = new_page(browser, "phone")
        page.goto(url + page_types(ids)[path])
        assert page.evaluate("document.scrollingElement.scrollWidth") <= WIDTHS["phone"]
        # A squeezed column breaks a short word over lines ("r/e/j/e/c/t/e/d", "2026-/07-/05"): no visible cell
        # whose text is one word of up to 30 characters may take two lines.
        narrow = page.evaluate("""() => Array.from(document.querySelectorAll('main td, main th')).filter(c => {
                const text = c.textContent.trim(), line = parseFloat(getComputedStyle(c).lineHeight) || 20;
                return c.offsetParent !== null && text && !/\\s/.test(text) && text.length <= 30
                    && getComputedStyle(c).display !== 'inline' && c.getBoundingClientRect().height > 1.8 * line;
            }).map(c => c.textContent.trim())""")
        assert narrow == []
        # each row a block of its own, labelled: the header row is for screen readers alone, and takes no room
        heads = page.eval_on_selector_all("main table thead", "els => els.map(e => e.getBoundingClientRect().height)")
        assert heads and max(heads) <= 1, heads


def test_the_skip_link_shows_when_a_key_reaches_it_and_the_words_kept_for_search_never_show(site):
    """The first Tab on a page reaches "Skip to content", which then shows on screen (it is off screen before);
    the ids and category names a record page holds for the search index take no room a reader sees."""
    folder, ids, _ = site
    with serve(folder) as url, chromium() as browser:
        page = new_page(browser, "desktop")
        page.goto(url + f"pith/{ids[0]}/")
        box = "sel => { const r = document.querySelector(sel).getBoundingClientRect(); return [r.left, r.width]; }"
        assert page.evaluate(box, ".skip")[0] < 0
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.className") == "skip"
        left, width = page.evaluate(box, ".skip")
        assert left >= 0 and width > 0
        assert page.evaluate(box, ".hidden-for-search")[1] <= 1


def test_status_headers_do_not_wrap_on_a_desktop(site):
    folder, ids, _ = site
    with serve(folder) as url, chromium() as browser:
        page = new_page(browser, "desktop")
        page.goto(url + page_types(ids)["paper"])
        heights = page.evaluate("""() => Array.from(document.querySelectorAll('th'), th => [th.textContent,
            th.getBoundingClientRect().height, parseFloat(getComputedStyle(th).lineHeight)])""")
    assert heights and all(h < 2 * line for _, h, line in heights), heights


@pytest.mark.parametrize("width", ["desktop", "phone"])
def test_a_long_author_list_is_folded_one_click_from_the_whole(site, width):
    folder, _, many = site
    html = (folder / "pith" / many / "index.html").read_bytes()
    assert len(html) < 150_000
    with serve(folder) as url, chromium() as browser:
        page = new_page(browser, width)
        page.goto(url + f"pith/{many}/")
        assert page.evaluate("document.scrollingElement.scrollHeight") < (6000 if width == "desktop" else 12000)
        assert page.inner_text("[data-field=authors]").count("Author Number") == 10
        assert page.inner_text("details.more-authors summary") == "et al. (2990 more)"
        assert not page.is_visible("text=Author Number2999")
        page.click("details.more-authors summary")
        assert page.is_visible("text=Author Number2999")
        page.goto(url + "papers/")
        row = page.inner_text(f"li:has(a[href$='pith/{many}/'])")
        assert "et al. (2990 more)" in row and "Author Number10," not in row


def test_a_paper_page_links_to_read_and_cite_the_paper(reader):
    page, url, ids, width = reader
    bundle = json.loads(REAL_FILES[0].read_bytes())
    source, meta = bundle["canonical_record"]["source"], bundle["canonical_record"]["metadata"]
    versioned = f"{source['id']}v{source['version']}"
    page.goto(url + f"pith/{ids[0]}/")
    links = page.eval_on_selector_all(".read a", "els => els.map(a => [a.textContent, a.href])")
    assert [text for text, _ in links] == ["Abstract on arXiv", "PDF", "HTML", "Source"]
    assert [href for _, href in links] == [f"https://arxiv.org/{kind}/{versioned}" for kind in
                                           ("abs", "pdf", "html", "src")]
    assert page.is_visible(".read a.primary")  # above the fold on a phone
    assert page.eval_on_selector(".read a.primary", "a => a.getBoundingClientRect().bottom") < 800
    assert page.inner_text(".cite-as") == f"Cite as: arXiv:{versioned} [{meta['primary_cat']}]"
    assert "Distributed, Parallel, and Cluster Computing" in page.inner_text("[data-field=categories]")


def test_a_category_whose_name_wraps_stays_one_box(reader):
    page, url, ids, width = reader
    page.goto(url + f"pith/{ids[0]}/")
    boxes = page.eval_on_selector_all("[data-field=categories] .cat", """els => els.map(a => [a.textContent,
        a.getClientRects().length, a.getBoundingClientRect().right])""")
    assert boxes and all(rects == 1 and right <= width for _, rects, right in boxes), boxes


@pytest.mark.parametrize("path, wait_for, least", [("search/", "#search input", 3), ("", "main form input", 2),
                                                     ("verify/", "#fetch", 3)])
def test_the_form_controls_are_made_for_a_finger_on_a_phone(site, path, wait_for, least):
    """The search page's box and filters, the home page's search form and the verifier's fields, on a phone:
    text of 16 px at least (a phone's browser zooms the page in on a smaller one as it is focused, and the page
    is then wider than the screen) and 24 px tall at least (WCAG 2.2's smallest target).  The filters, the home
    page's button and the verifier's file field were the browser's bare controls: 13 px text, 19-21 px tall;
    the verifier's URL field stuck out of its box by its padding."""
    folder, ids, _ = site
    with serve(folder) as url, chromium() as browser:
        page = new_page(browser, "phone")
        page.goto(url + path)
        page.wait_for_selector(wait_for)
        controls = page.evaluate("""() => {
            const inner_right = box => { const style = getComputedStyle(box);  // (the right edge of its content)
                return box.getBoundingClientRect().right - parseFloat(style.paddingRight)
                    - parseFloat(style.borderRightWidth); };
            return Array.from(document.querySelectorAll('main input, main select, main button'))
            .filter(c => c.offsetParent !== null)
            .map(c => [c.id || c.type, c.tagName === 'BUTTON' ? null : parseFloat(getComputedStyle(c).fontSize),
                       c.getBoundingClientRect().height,
                       c.getBoundingClientRect().right - inner_right(c.parentElement)]); }""")
    assert len(controls) >= least, controls  # (search: the box, both filters; home: the box, its button; verify:
    #                                           the file, the URL and its button)
    # (a button's text does not make a phone zoom in: only the height counts for one)
    assert [c for c in controls if (c[1] is not None and c[1] < 16) or c[2] < 24] == [], controls
    assert [c for c in controls if c[3] > 0.5] == [], controls  # (none sticks out of the box that holds it)


@pytest.mark.parametrize("width, scheme", [("desktop", "dark"), ("phone", "light")])
def test_the_statistics_charts_labels_can_be_read(site, width, scheme):
    """Each bar's label and count on the statistics page, as drawn: 10 px tall at least, in the page's text
    colour (the page's contrast, which axe does not measure in a chart).  The charts were drawn 560 wide in a
    figure's indent and scaled down to fit a phone, their 12 px labels to 6 px; and drawn black in dark mode."""
    folder, ids, _ = site
    with serve(folder) as url, chromium() as browser:
        page = new_page(browser, width, scheme)
        page.goto(url + "stats/")
        labels = page.evaluate("""() => Array.from(document.querySelectorAll('.chart svg text'),
            t => [t.textContent, t.getBoundingClientRect().height, getComputedStyle(t).fill])""")
        text_colour = page.evaluate("getComputedStyle(document.body).color")
    assert len(labels) >= 6, labels  # (each chart's bars: a label and a count each)
    assert [label for label in labels if label[1] < 10 or label[2] != text_colour] == [], (labels, text_colour)


def test_a_listings_numbers_stay_on_a_phones_screen(tmp_path):
    """A listing's numbers are drawn in the list's margin: on a phone, "100000." must still start on the screen.
    The margin had room for four digits.  (The real site, its "All papers" page rendered again by the real
    renderer as if its four records stood at 10,000 and 100,000 onwards: such a mirror takes minutes to build.)"""
    from site_builder.inspection import inspect_bytes
    from site_builder.pages import Listing
    from site_builder.rendering import SiteRenderer, pagination, template_dirs

    trust = load_trust_set()
    site = tmp_path / "site"
    build(BuildOptions(bundles=ROOT / "bundles", output=site, trust=trust, search=False))
    papers = [inspect_bytes(p.name, p.read_bytes(), trust).summary for p in REAL_FILES]
    renderer = SiteRenderer(SiteConfig(), template_dirs(None), trust, search_enabled=False)
    pages = pagination("papers/", len(papers), 100)
    firsts = [1, 997, 9_997, 99_997, 999_997]
    for first in firsts:
        (site / f"from-{first}").mkdir()
        (site / f"from-{first}" / "index.html").write_bytes(renderer.render(
            "listing.html", listing=Listing("all", "All papers", "papers/", papers), page=pages[0], pages=pages,
            papers=papers, first_index=first))
    found = {}
    with serve(site) as url, chromium() as browser:
        page = new_page(browser, "phone")
        for first in firsts:
            page.goto(url + f"from-{first}/")
            found[first] = page.evaluate("""() => {
                const list = document.querySelector('ol.papers'), item = list.querySelector('li:last-child');
                const pen = document.createElement('canvas').getContext('2d');
                pen.font = getComputedStyle(item).font;
                const number = (list.start + list.children.length - 1) + '. ';
                return [number, list.getBoundingClientRect().left + parseFloat(getComputedStyle(list).paddingLeft)
                                - pen.measureText(number).width];  // (where the last number starts)
            }""")
    assert [number for number, _ in found.values()] == [f"{first + 3}. " for first in firsts]
    assert {first: left for first, (_, left) in found.items() if left < 0} == {}, found


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_search_boxs_placeholder_can_be_read(site, scheme):
    """The word in the empty search box, its only visible label, against the box: 4.5:1 at least (WCAG AA).
    Pagefind draws it at a fifth of the text's opacity (1.3:1)."""
    folder, ids, _ = site
    with serve(folder) as url, chromium() as browser:
        page = browser.new_page(color_scheme=scheme)
        page.goto(url + "search/")
        page.wait_for_selector("#search input")
        ratio = page.evaluate("""() => {
            const box = document.querySelector('#search input'), held = getComputedStyle(box, '::placeholder');
            const rgb = c => c.match(/[\\d.]+/g).slice(0, 3).map(Number);
            const [fg, bg, alpha] = [rgb(held.color), rgb(getComputedStyle(box).backgroundColor), +held.opacity];
            const shown = fg.map((v, i) => v * alpha + bg[i] * (1 - alpha));
            const lum = c => c.map(v => v / 255).map(v => v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4)
                              .reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
            const [a, b] = [lum(shown), lum(bg)].sort((x, y) => y - x);
            return (a + 0.05) / (b + 0.05);
        }""")
    assert ratio >= 4.5, ratio


def test_dark_mode_declares_its_colour_scheme_for_form_controls(site):
    folder, ids, _ = site
    with serve(folder) as url, chromium() as browser:
        page = browser.new_page(color_scheme="dark")
        page.goto(url + "search/")
        scheme = page.evaluate("getComputedStyle(document.documentElement).colorScheme")
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert "dark" in scheme and background == "rgb(20, 20, 20)"


def _search(page, url, query):
    page.goto(url + "search/?q=" + query)
    page.wait_for_function("document.querySelector('.pagefind-ui__message') && "
                           "!/^Searching|^Loading/i.test(document.querySelector('.pagefind-ui__message').textContent)",
                           timeout=15000)
    page.wait_for_timeout(300)  # (the results of the last keystroke settle)
    return _shown_results(page)


def _shown_results(page):
    """The results a reader sees (a near miss is hidden: not merely marked so, but not drawn), each as (its link,
    its excerpt); the count the page says is theirs."""
    shown = page.eval_on_selector_all(".pagefind-ui__result", """els => els.filter(e => e.checkVisibility()).map(e => [
        e.querySelector('.pagefind-ui__result-link').getAttribute('href'),
        (e.querySelector('.pagefind-ui__result-excerpt') || {}).textContent || ''])""")
    said = page.inner_text(".pagefind-ui__message")
    assert said.startswith(f"{len(shown)} result" if shown else "No results"), (said, shown)
    return shown


def test_search_returns_the_record_meant_and_nothing_for_boilerplate(reader):
    page, url, ids, width = reader
    bundle = json.loads(REAL_FILES[0].read_bytes())
    abstract = snapshot_of(bundle)["paper"]["abstract_excerpt"]
    for query in ["xyzzyq", "completeness", "verified", "license", "bitcoin", "excerpt", "fingerprint"]:
        assert _search(page, url, query) == [], query
    results = _search(page, url, "TensorOpt")
    assert results and results[0][0].endswith(f"pith/{ids[0]}/")
    excerpt = " ".join(results[0][1].split())
    assert "pith:" not in excerpt and ids[0] not in excerpt
    assert excerpt[:30] in " ".join(abstract.split()) or "TensorOpt" in excerpt
    for query in ["cs.DC", "2004.10856", ids[0][:8]]:  # categories and ids are still found
        assert any(href.endswith(f"pith/{ids[0]}/") for href, _ in _search(page, url, query)), query
    # as the pages write them: the home page's example, a page's full pith number and its "Cite as" line
    cited = f"arXiv:{bundle['source']['id']}v{bundle['source']['version']}"
    for query in [f"pith:{ids[0][:8]}", bundle["pith_number"], cited]:
        assert [href for href, _ in _search(page, url, query)] == [f"/pith/{ids[0]}/"], query
    everything = {href for href, _ in _search(page, url, "training")}
    assert len(everything) >= 2
    page.select_option("#filter-category", "stat.ML")
    page.wait_for_timeout(200)
    in_dc = [href for href, _ in _shown_results(page)]
    assert in_dc and set(in_dc) < everything and f"/pith/{ids[0]}/" in in_dc
    page.select_option("#filter-category", "")
    page.select_option("#filter-year", bundle["canonical_record"]["metadata"]["submitted_at"][:4])
    page.wait_for_timeout(200)
    years = page.eval_on_selector_all(".pagefind-ui__result", """els => els.filter(e => e.checkVisibility()).map(e =>
        e.querySelector('[data-pagefind-ui-meta=year]').textContent.trim())""")
    assert years and set(years) == {"Year: " + bundle["canonical_record"]["metadata"]["submitted_at"][:4]}


def test_more_results_are_offered_where_they_may_be_shown_and_not_for_near_misses(tmp_path):
    """Eight records share a word, three of them from 2019, which say it less often.  A query one letter off the
    word gets eight near misses from Pagefind, five loaded, all hidden: the page says "No results" and offers no
    more of them.  The word itself finds all eight, five at a time, the five that say it more first; with the year
    2019 chosen, none of those is shown, so the page says "No results" among the first five and still offers more,
    and loading them shows the three."""
    key, trust, bundles = resigned_real_bundles(tmp_path)
    for n in range(8):
        paper = with_paper(json.loads(REAL_FILES[0].read_bytes()), title=f"Xylophone tuning, part {n}",
                           **({} if n < 3 else {"abstract_excerpt": "Xylophone, xylophone and xylophone again."}))
        paper["canonical_record"]["source"]["id"] = f"2004.9990{n}"
        if n < 3:
            paper["canonical_record"]["metadata"]["submitted_at"] = "2019-03-04T00:00:00Z"
        (bundles / f"x{n}.json").write_bytes(to_bytes(sign_bundle(paper, key)))
    build(BuildOptions(bundles=bundles, output=tmp_path / "site", trust=trust))
    more = "document.querySelector('.pagefind-ui__button')"
    loaded = ("document.querySelectorAll('.pagefind-ui__result').length === {} && "
              "!document.querySelector('.pagefind-ui__result .pagefind-ui__loading')")
    with serve(tmp_path / "site") as url, chromium() as browser:
        page = browser.new_page()
        assert _search(page, url, "xylophonq") == []
        assert page.eval_on_selector_all(".pagefind-ui__result", "els => els.length") == 5  # (loaded, not drawn)
        assert page.evaluate(f"{more} && !{more}.checkVisibility()")
        page.fill("#search input", "xylophone")
        page.wait_for_function(f"document.querySelector('.pagefind-ui__message').textContent.startsWith('8 results')"
                               f" && {more} && {more}.checkVisibility() && {loaded.format(5)}", timeout=15000)
        drawn = "els => els.filter(e => e.checkVisibility()).length"
        assert page.eval_on_selector_all(".pagefind-ui__result", drawn) == 5
        assert page.inner_text(".pagefind-ui__message") == "8 results for xylophone"  # (Pagefind's: all it found)
        page.select_option("#filter-year", "2019")
        page.wait_for_timeout(200)
        assert _shown_results(page) == [] and page.evaluate(f"{more}.checkVisibility()")
        assert page.inner_text(".pagefind-ui__message") == "No results for xylophone among the first 5"
        page.click(".pagefind-ui__button")
        page.wait_for_function(loaded.format(8), timeout=15000)
        page.wait_for_timeout(200)
        assert len(_shown_results(page)) == 3
        assert page.inner_text(".pagefind-ui__message") == "3 results for xylophone"


def test_the_404_page_finds_a_pith_number_in_other_case_and_offers_a_search(reader):
    page, url, ids, width = reader
    page.goto(url + f"pith/{ids[0][:8].lower()}/")
    page.wait_for_url(url + f"pith/{ids[0]}/")
    page.goto(url + f"pith/{ids[0].lower()}/")
    page.wait_for_url(url + f"pith/{ids[0]}/")
    page.goto(url + "papers/tensoropt-paper/")
    link = page.get_attribute("#suggest-link", "href")
    assert page.is_visible("#suggest") and link == "/search/?q=tensoropt-paper"
    page.goto(url + "nowhere/")
    assert page.inner_text("#suggest-term") == "nowhere"
    # the rest of the path kept, under /.well-known/ too (the resolver's path for the JSON)
    page.goto(url + f".well-known/pith/{ids[0].lower()}/bundle.json")
    page.wait_for_url(url + f".well-known/pith/{ids[0]}/bundle.json")
    page.goto(url + f"pith/{ids[0][:8].lower()}/state.json")
    page.wait_for_url(url + f"pith/{ids[0][:8]}/state.json")
    # a page's name is searched without its .html, and whatever it holds reaches the search as it was
    page.goto(url + "papers/Tensor%20Opt&more.html")
    assert page.inner_text("#suggest-term") == "Tensor Opt&more"
    assert page.get_attribute("#suggest-link", "href") == "/search/?q=Tensor%20Opt%26more"


def test_the_resolvers_sections_are_shown_from_the_bundle(reader):
    page, url, ids, width = reader
    bundle = json.loads(REAL_FILES[0].read_bytes())
    page.goto(url + f"pith/{ids[0]}/")
    chips = page.eval_on_selector_all(".chips li", "els => els.map(e => e.textContent.trim())")
    assert chips[0] == "✓ verified by this mirror"
    assert [c.removeprefix("✓ ").removeprefix("not ") for c in chips[1:]] == [
        "author attested", "externally anchored", "storage verified", "references resolved"]
    integrity = page.inner_text("ul.integrity")
    assert "Integrity scan: clean" in integrity and "References: 0 listed, 0 resolved" in integrity
    assert bundle["canonical_sha256"] in page.inner_text("#canonical-hash")
    assert page.inner_text("#latex") == f"\\usepackage{{pith}}\n\\pithnumber{{{ids[0]}}}"
    assert "Add to your LaTeX paper" in page.inner_text("#cite")
    assert page.get_attribute("#on-the-resolver a", "href") == f"https://pith.science/pith/{ids[0]}"


def test_copied_snippets_hold_full_urls(site, tmp_path):
    folder, ids, _ = site
    with serve(folder) as url, chromium() as browser:  # (built with base_url "/": completed in the browser)
        page = browser.new_page()
        page.goto(url + f"pith/{ids[0]}/")
        assert f"curl -s {url}pith/{ids[0]}/bundle.json -o bundle.json" in page.inner_text("pre.snippet")
        assert f'src="{url}pith/{ids[0]}/badge.svg"' in page.inner_text("#badge")
    out = tmp_path / "full"
    build(BuildOptions(bundles=REAL_FILES[0].parent, output=out, trust=load_trust_set(), search=False,
                       config=SiteConfig(base_url="https://mirror.example.org/m/")))
    pid = record_id(REAL_FILES[0])
    html = (out / "pith" / pid / "index.html").read_text()
    assert f"curl -s https://mirror.example.org/m/pith/{pid}/bundle.json" in html and "site-url" not in html
    assert f'<meta property="og:url" content="https://mirror.example.org/m/pith/{pid}/">' in html


def test_each_copy_button_copies_the_snippet_it_names_and_says_so(site):
    """The Cite block's buttons (BibTeX, LaTeX, the badge's HTML): a click puts that snippet's text on the
    clipboard, as the page shows it (the badge's address completed), and the button says "Copied" for a moment."""
    folder, ids, _ = site
    with serve(folder) as url, chromium() as browser:
        context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
        page = context.new_page()
        page.goto(url + f"pith/{ids[0]}/")
        buttons = page.eval_on_selector_all("button[data-copy]", "els => els.map(b => [b.dataset.copy, b.textContent])")
        assert [name for name, _ in buttons] == ["bibtex", "latex", "badge"]
        copied = []
        for name, label in buttons:
            button = page.locator(f"button[data-copy={name}]")
            button.click()
            page.wait_for_function("b => b.textContent === 'Copied'", arg=button.element_handle(), timeout=2000)
            copied.append(page.evaluate("navigator.clipboard.readText()"))
            assert copied[-1] == page.eval_on_selector(f"#{name}", "e => e.textContent"), name
            page.wait_for_function(f"b => b.textContent === {json.dumps(label)}", arg=button.element_handle(),
                                   timeout=3000)
    assert copied[1] == f"\\usepackage{{pith}}\n\\pithnumber{{{ids[0]}}}"
    assert f'src="{url}pith/{ids[0]}/badge.svg"' in copied[2] and "@" in copied[0]


def test_the_in_page_check_reads_and_works_at_every_width_and_scheme(reader):
    page, url, ids, width = reader
    page.goto(url + f"pith/{ids[1]}/")
    page.click("#verify-in-browser button")
    page.wait_for_function("['verified', 'failed'].includes(document.getElementById('verify-in-browser').dataset.state)")
    assert page.get_attribute("#verify-in-browser", "data-state") == "verified"
    assert page.is_visible("#verify-in-browser dl.verified-values")
    assert page.evaluate("document.scrollingElement.scrollWidth") <= width


def test_a_site_under_a_base_path_beyond_ascii_checks_itself_and_finds_its_records(tmp_path):
    """A base URL written as an IRI (``/café/``) is published escaped (``/caf%C3%A9/``): the reader's browser
    asks for the escaped paths, and the in-page check, the search index and the 404 page's links all work there."""
    from site_builder.settings import normalize_base_url

    out = tmp_path / "site"
    build(BuildOptions(bundles=ROOT / "bundles", output=out, trust=load_trust_set(),
                       config=SiteConfig(base_url=normalize_base_url("/caf\u00e9/"))))
    pid = record_id(REAL_FILES[0])
    with serve(out, "/caf\u00e9/") as url, chromium() as browser:
        page = browser.new_page()
        page.goto(url + f"pith/{pid}/")
        assert "/caf%C3%A9/pith/" in page.url
        page.click("#verify-in-browser button")
        page.wait_for_function("['verified', 'failed'].includes("
                               "document.getElementById('verify-in-browser').dataset.state)")
        assert page.get_attribute("#verify-in-browser", "data-state") == "verified"
        results = _search(page, url, "TensorOpt")
        assert results and results[0][0] == f"/caf%C3%A9/pith/{pid}/"
        page.goto(url + "no/such/page/")
        page.click("a[href='/caf%C3%A9/']")
        assert page.url.endswith("/caf%C3%A9/") and page.title() == "Pith mirror"
