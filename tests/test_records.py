"""What a page shows of a record (records.py): the verified bundle's words, and bounded views of them."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from signing import snapshot_of, with_paper
from site_builder import records
from site_builder.records import PaperText, WordsHeldByReference, detail, paper_text, split_authors, summarize


def test_a_summary_is_made_of_the_bundles_signed_values(real_bundle):
    summary = summarize(real_bundle)
    record = real_bundle["canonical_record"]
    assert summary.pith_number == real_bundle["pith_number"] and summary.pith_id == summary.pith_number[-26:]
    assert (summary.arxiv_id, summary.version) == (record["source"]["id"], record["source"]["version"])
    assert summary.event_count == len(real_bundle["events"]) and summary.built_at == real_bundle["built_at"]
    assert summary.title == paper_text(real_bundle).title and summary.categories[0] == summary.primary_cat
    # The short forms the pages show: the year and id of the pith number, its 8-character short address (the
    # badge, list rows, page titles), the submission date, and the first 12 hex digits of each event id.
    assert f"pith:{summary.year}:{summary.pith_id}" == real_bundle["pith_number"]
    aliases = {a["alias_kind"]: a["alias_value"] for a in real_bundle["source_aliases"]}
    assert summary.short_id == aliases["pith_short_8"]
    assert summary.submitted_date == record["metadata"]["submitted_at"].partition("T")[0]
    for event in detail(real_bundle, summary).events:
        assert event.event_id == "sha256:" + event.short_event_id + event.event_id[19:]
        assert len(event.short_event_id) == 12


def test_the_row_digest_follows_the_words_too(real_bundle):
    summary = summarize(real_bundle)
    retitled = summarize(with_paper(real_bundle, title="Another title"))
    assert retitled.row_digest != summary.row_digest
    assert replace(summary, event_count=summary.event_count + 1).row_digest != summary.row_digest
    held = summary.by_reference("0" * 64)  # the words held by reference keep the digest of the words
    assert held.row_digest == summary.row_digest
    with pytest.raises(WordsHeldByReference):
        held.title
    assert held.with_words(summary.words).title == summary.title


def test_bounded_views_cut_at_a_word_and_count_the_rest(real_bundle):
    """The bounds README promises ("Bounded output per record"), as numbers: a change of one is a change of
    README."""
    many = ", ".join(f"Author {i}" for i in range(250))
    bundle = with_paper(real_bundle, title="word " * 200, authors_text=many, abstract_excerpt="sentence " * 400)
    categories = [f"math.{a}{b}" for a in "AB" for b in "ABCDEFGHIJ"]
    bundle["canonical_record"]["metadata"]["cross_cats_sorted"] = categories
    summary = summarize(bundle)
    assert len(summary.short_title) <= 300 and summary.short_title.endswith("word…")
    assert len(summary.short_abstract) <= 1_000 and summary.short_abstract.endswith("sentence…")
    assert len(summary.listed_authors) == 10 and summary.listed_authors[0] == "Author 0"
    assert len(summary.cited_authors) == 100
    assert len(summary.authors) == 250  # (the record's own page shows them all)
    assert summary.listed_categories == (summary.primary_cat, *[c for c in categories if c != summary.primary_cat][:11])
    assert summarize(with_paper(real_bundle, title="t" * 300)).short_title == "t" * 300  # (at the bound: whole)
    assert summarize(with_paper(real_bundle, title="t" * 301)).short_title == "t" * 299 + "…"  # (one over: cut)
    assert summarize(with_paper(real_bundle, abstract_excerpt="a" * 1_000)).short_abstract == "a" * 1_000
    assert summarize(with_paper(real_bundle, abstract_excerpt="a" * 1_001)).short_abstract == "a" * 999 + "…"


def test_each_category_is_listed_once_though_the_bundle_repeats_it(real_bundle):
    """``cross_cats_sorted`` is signed, not checked for repeats: a record is shown, listed and fed once per
    category, its primary first, whatever the list holds."""
    bundle = copy.deepcopy(real_bundle)
    primary = bundle["canonical_record"]["metadata"]["primary_cat"]
    bundle["canonical_record"]["metadata"]["cross_cats_sorted"] = ["math.CO", "hep-th", "math.CO", primary]
    summary = summarize(bundle)
    assert summary.categories == summary.listed_categories == (primary, "math.CO", "hep-th")


def test_a_cut_falls_at_the_last_word_unless_that_would_lose_over_half_the_text(real_bundle):
    """A long title is cut after its last whole word; one whose last space is in its first half (a long chemical
    name, a URL) is cut mid-word instead, rather than shown as a stub."""
    def short(title: str) -> str:
        return summarize(with_paper(real_bundle, title=title)).short_title

    assert short("a" * 151 + " " + "b" * 200) == "a" * 151 + "…"
    assert short("a" * 150 + " " + "b" * 200) == ("a" * 150 + " " + "b" * 200)[:299] + "…"


@pytest.mark.parametrize("abstract, cut", [("We show that it holds.", False), ("It holds (as shown.)", False),
                                           ("Is it? It is!", False), ("We show that it ho", True),
                                           ("We show that it holds.  ", False), ("", False)])
def test_an_abstract_is_cut_where_it_stops_mid_sentence(real_bundle, abstract, cut):
    """Pages mark an abstract the resolver cut short ("…" and a link to the full one), and only such a one."""
    assert summarize(with_paper(real_bundle, abstract_excerpt=abstract)).abstract_cut is cut


def test_the_arxiv_version_id_is_the_id_and_version(real_bundle):
    summary = summarize(real_bundle)
    assert summary.arxiv_version_id == f"{summary.arxiv_id}v{summary.version}"
    assert replace(summary, arxiv_id="2101.00001", version=3).arxiv_version_id == "2101.00001v3"


def test_authors_are_split_on_commas_and_and():
    assert split_authors("Ada Lovelace, Alan Turing and Grace Hopper") == ("Ada Lovelace", "Alan Turing",
                                                                         "Grace Hopper")
    assert split_authors("") == ()


def test_a_missing_snapshot_gives_empty_words_not_an_error(real_bundle):
    bundle = copy.deepcopy(real_bundle)
    bundle["events"] = [e for e in bundle["events"] if e["event_type"] != "graph_snapshot"]
    assert paper_text(bundle) == PaperText("", (), "")


@pytest.mark.parametrize("license, linked", [
    ("http://creativecommons.org/licenses/by/4.0/", True), ("https://example.org:8080/terms?v=2#use", True),
    ("https://example.org/caf%C3%A9", True), ("https://example.org/terms of use", False), ("http://", False),
    ("https://example.org/100%", False), ("https://example.org/a#b#c", False), ("https://a..b/", False),
    ("https://example.org:99999/", False),
    ('https://example.org/"><script>', False), ("javascript:alert(1)", False), ("CC BY 4.0", False), ("", False),
])
def test_a_license_is_linked_only_where_it_is_a_url_an_href_may_hold(real_bundle, license, linked):
    """The signed license is free text: the page links it only where it is an http(s) URL as it stands."""
    real_bundle["canonical_record"]["metadata"]["license"] = license
    summary = summarize(real_bundle)
    assert (summary.license, summary.license_url) == (license, license if linked else "")


def test_the_latest_snapshot_is_what_the_summary_and_the_page_show(real_bundle):
    """A bundle gains a graph snapshot each time the resolver reviews the paper again: its list row and its page
    show the last one's words, headline and claims, not the first's."""
    bundle = copy.deepcopy(real_bundle)
    first = next(e for e in bundle["events"] if e["event_type"] == "graph_snapshot")
    later = copy.deepcopy(first)
    paper = later["payload"]["graph_snapshot"]["paper"]
    paper.update(authors_text="Ada Lovelace and Grace Hopper", abstract_excerpt="A revised abstract.",
                 headline="The revised headline")
    later["payload"]["graph_snapshot"]["claims"] = {"count": 1, "items": [{"claim_id": "c9", "kind": "result",
                                                                           "text": "A revised claim", "status": "ok"}]}
    bundle["events"].append(later)
    summary = summarize(bundle)
    assert (summary.authors, summary.abstract) == (("Ada Lovelace", "Grace Hopper"), "A revised abstract.")
    info = detail(bundle, summary)
    assert info.headline == "The revised headline"
    assert [claim.text for claim in info.claims] == ["A revised claim"]
    assert summarize(real_bundle).authors != summary.authors  # (the first snapshot's words differ)


def test_the_detail_lists_what_the_record_has_and_lacks(real_bundle):
    """The record page's completeness list counts the state's entries of each kind, and its chips say which
    the record has: the real bundle has none, this one two author claims, an anchor and resolved references."""
    info = detail(real_bundle, summarize(real_bundle))
    assert info.summary.pith_id == summarize(real_bundle).pith_id
    assert set(dict(info.completeness).values()) == {0}
    assert not any(on for _, on in info.status_chips)

    bundle = copy.deepcopy(real_bundle)
    bundle["state"]["current"].update(author_attestations=[{}, {}], timestamp_anchors=[{}], corrections=None)
    snapshot_of(bundle)["references"] = {"count": 7, "resolved_work": 3}
    info = detail(bundle, summarize(bundle))
    assert dict(info.completeness) == {"Bitcoin timestamp (OpenTimestamps)": 1, "Internet Archive copy": 0,
                                       "Author claim": 2, "Signed citations": 0, "Replications": 0,
                                       "Corrections": 0}
    assert dict(info.status_chips) == {"author attested": True, "externally anchored": True,
                                       "storage verified": False, "references resolved": True}
    assert (info.references_count, info.references_resolved) == (7, 3)

    snapshot_of(bundle)["references"] = {"count": 7, "resolved_work": 0}  # listed, none resolved
    assert dict(detail(bundle, summarize(bundle)).status_chips)["references resolved"] is False
    snapshot_of(bundle)["references"] = {"count": 7, "resolved_work": 1}  # one is enough
    assert dict(detail(bundle, summarize(bundle)).status_chips)["references resolved"] is True
    bundle["state"]["current"] = None  # (a state with nothing merged yet)
    info = detail(bundle, summarize(bundle))
    assert set(dict(info.completeness).values()) == {0} and dict(info.status_chips)["author attested"] is False


@pytest.mark.parametrize("other", [["x"], 7, "text", True])
def test_a_part_of_the_snapshot_or_state_of_another_shape_is_shown_as_absent(real_bundle, other):
    """The verifier checks the snapshot's paper and the state's shape, not every part a page shows: a signed
    verdict, claims list, reference count or state list of another shape (a list where an object is, a number
    where a list is) is shown as absent, where it stopped the whole build (a worker's AttributeError)."""
    bundle = copy.deepcopy(real_bundle)
    snapshot = snapshot_of(bundle)
    snapshot.update(verdict=other, claims=other, references=other)
    not_a_list = other if not isinstance(other, list) else {"an": "object"}
    bundle["state"]["current"].update(author_attestations=not_a_list, timestamp_anchors=not_a_list)
    info = detail(bundle, summarize(bundle))
    assert info.claims == () and info.one_line_summary == ""
    assert info.headline == snapshot["paper"]["headline"]  # (its own, not the verdict's)
    assert (info.references_count, info.references_resolved) == (0, 0)
    assert set(dict(info.completeness).values()) == {0} and not any(on for _, on in info.status_chips)
    snapshot.update(claims={"items": not_a_list}, integrity={"available": True, "summary": other,
                                                             "findings": not_a_list, "detectors_run": not_a_list})
    info = detail(bundle, summarize(bundle))
    assert info.claims == () and (info.integrity.critical, info.integrity.findings, info.integrity.detectors) == (
        0, 0, ())


def test_the_doi_is_the_records_own_else_arxivs(real_bundle):
    """The page's DOI (its citation meta tag, link and BibTeX) is the record's doi alias where it has one (a
    journal's), else the DOI arXiv gives every paper."""
    bundle = copy.deepcopy(real_bundle)
    for alias in bundle["source_aliases"]:
        if alias["alias_kind"] == "doi":
            alias["alias_value"] = "10.1103/PhysRevLett.1.1"
    assert detail(bundle, summarize(bundle)).doi == "10.1103/PhysRevLett.1.1"
    bundle["source_aliases"] = [a for a in bundle["source_aliases"] if a["alias_kind"] != "doi"]
    summary = summarize(bundle)
    assert detail(bundle, summary).doi == f"10.48550/arxiv.{summary.arxiv_id}"


def test_an_integrity_scan_is_shown_only_where_it_ran(real_bundle):
    """A snapshot whose integrity scan is not available (or is no object) shows no scan, whatever else it
    claims: "clean" must not be read from a scan that did not run."""
    bundle = copy.deepcopy(real_bundle)
    snapshot_of(bundle)["integrity"] = {"available": True, "clean": False, "summary": {"critical": 2},
                                      "findings": [{}, {}], "detectors_run": ["d1"]}
    scan = detail(bundle, summarize(bundle)).integrity
    assert (scan.clean, scan.critical, scan.findings, scan.detectors) == (False, 2, 2, ("d1",))
    # A count that is no whole number of at least zero (a bool is not one) is shown as none, and a verdict that
    # is no true or false as no verdict (the text "false" would read as clean).
    snapshot_of(bundle)["integrity"] = {"available": True, "clean": "false",
                                        "summary": {"critical": -3, "advisory": True, "informational": "2"}}
    scan = detail(bundle, summarize(bundle)).integrity
    assert (scan.clean, scan.critical, scan.advisory, scan.informational) == (None, 0, 0, 0)
    for not_run in ({"available": False, "clean": True}, {"clean": True}, "clean", None):
        snapshot_of(bundle)["integrity"] = not_run
        assert detail(bundle, summarize(bundle)).integrity is None, not_run


def test_an_event_of_a_type_the_merge_does_not_know_is_marked_so(real_bundle):
    bundle = copy.deepcopy(real_bundle)
    extra = copy.deepcopy(bundle["events"][-1])
    extra["event_type"] = "future_kind"
    bundle["events"].append(extra)
    events = detail(bundle, summarize(bundle)).events
    assert [e.known for e in events] == [True] * (len(events) - 1) + [False]


def test_the_detail_takes_the_review_verdict_and_its_headline_when_the_paper_has_none(real_bundle):
    bundle = with_paper(real_bundle, headline="")
    snapshot = snapshot_of(bundle)
    snapshot["verdict"] = {"one_line_summary": "It holds.", "pith_extraction_headline": "The verdict's headline"}
    info = detail(bundle, summarize(bundle))
    assert (info.one_line_summary, info.headline) == ("It holds.", "The verdict's headline")
    snapshot["verdict"] = None  # (a snapshot without a verdict)
    assert detail(bundle, summarize(bundle)).one_line_summary == ""


NOT_SHOWN = "\x00\x01\x08\x0b\x0c\x0e\x1b\x7f\x85\x9f\ufdd0\ufdef\ufffe\uffff\U0001fffe\U0010ffff"


def test_text_no_page_or_feed_may_hold_is_left_out_and_the_rest_kept(real_bundle):
    """A signed bundle's text may hold control characters and noncharacters, which XML 1.0 (the feeds) and HTML
    have no place for: every text field a page shows is without them, and tab, line ends and any other character
    are kept."""
    dirty = f"Title{NOT_SHOWN} é\u2014漢字 😀"
    bundle = with_paper(real_bundle, title=dirty, authors_text=f"Ada{NOT_SHOWN}, Alan",
                        abstract_excerpt=f"a\tb\nc{NOT_SHOWN}", headline=f"Head{NOT_SHOWN}")
    snapshot = snapshot_of(bundle)
    snapshot["claims"] = {"items": [{"claim_id": f"C1{NOT_SHOWN}", "kind": "k", "text": f"A claim{NOT_SHOWN}",
                                     "status": "s"}]}
    snapshot["integrity"] = {"available": True, "clean": True, "detectors_run": [f"det{NOT_SHOWN}ector"]}
    words = paper_text(bundle)
    assert words == PaperText("Title é\u2014漢字 😀", ("Ada", "Alan"), "a\tb\nc")
    info = detail(bundle, summarize(bundle))
    assert info.headline == "Head" and info.summary.title == words.title
    assert (info.claims[0].claim_id, info.claims[0].text) == ("C1", "A claim")
    assert info.integrity.detectors == ("detector",)
    assert records.shown_text("plain ASCII") == "plain ASCII"


def test_the_canonical_record_is_shown_whole_with_such_characters_escaped(real_bundle):
    import json

    bundle = copy.deepcopy(real_bundle)
    bundle["canonical_record"]["metadata"]["license"] = f"CC{NOT_SHOWN}"
    shown = detail(bundle, summarize(bundle)).canonical_record_pretty
    assert records.NOT_SHOWN.search(shown) is None
    assert json.loads(shown) == bundle["canonical_record"]  # (the same JSON: each one written as its escape)
    assert "\\u0000" in shown and "\\ufffe" in shown and "\\udbff\\udfff" in shown


def test_an_alias_of_a_kind_the_verifier_does_not_know_is_shown_as_text_and_never_as_a_known_kind(real_bundle):
    """The verifier checks the value of each alias kind it knows (arxiv, doi, ...) and lets others pass: such an
    alias is shown with its kind escaped (so "do\\x00i" never becomes the doi the page links to) and its value
    without the characters no page may hold."""
    bundle = copy.deepcopy(real_bundle)
    bundle["source_aliases"].append({"alias_kind": "do\x00i", "alias_value": "10.9999/forged"})
    bundle["source_aliases"].append({"alias_kind": "handle", "alias_value": f"hdl{NOT_SHOWN}/1"})
    info = detail(bundle, summarize(bundle))
    assert info.doi == detail(real_bundle, summarize(real_bundle)).doi != "10.9999/forged"
    assert info.aliases[-2:] == (("do\\x00i", "10.9999/forged"), ("handle", "hdl/1"))


def test_a_record_without_a_title_is_named_by_its_arxiv_version(real_bundle):
    """A snapshot that gives no title (or only spaces) names the record by its arXiv version wherever a title
    goes: a page, a list row, a feed entry never show an empty name."""
    summary = summarize(with_paper(real_bundle, title=" \n "))
    source = real_bundle["canonical_record"]["source"]
    assert summary.title == ""
    assert summary.display_title == summary.short_title == f"arXiv:{source['id']}v{source['version']}"
