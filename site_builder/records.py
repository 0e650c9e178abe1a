"""What the site shows about a verified bundle: typed views built from its JSON.

``PaperSummary`` is small (listings, feeds, search, sitemaps need it for every
record at once), and a build holds its words (``PaperText``) by reference
(``TextOf``); ``PaperDetail`` is built only while rendering a record's own page,
from the verified bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import InitVar, dataclass, field, fields
from typing import Sequence

from site_builder.canonical import pretty_json
from site_builder.merge import KNOWN_EVENT_TYPES
from site_builder.terminal import printable
from site_builder.urls import RESOLVER, linkable, on_resolver
from site_builder.verification import is_utc_timestamp


@dataclass(frozen=True, slots=True)
class PaperText:
    """A record's words (title, authors, abstract): what its page, its list row and the feeds show of it, and
    most of a summary's size (~1.5 KB of ~2.5)."""

    title: str
    authors: tuple[str, ...]
    abstract: str


@dataclass(frozen=True, slots=True)
class TextOf:
    """A record's words held by reference: the sha256 of the verified bundle they are read from again.

    A build holds every published record's summary at once, but only a few of them are shown with their words
    in the build's own process (feeds; the rows of list pages are rendered with the record's pages, in the
    workers).  Holding this instead is 1.5 KB less a record (150 MB at 100,000 records); the words are read back
    from the bundle the output tree holds for the record, and the bytes must still have this digest
    (``SiteRenderer.full``)."""

    sha256: str


_SENTENCE_ENDS = (".", "!", "?", ".)", '."', ".”", "…")


class WordsHeldByReference(LookupError):
    """A summary's words were asked for where the summary holds only the digest of the bundle they are in."""


@dataclass(frozen=True, slots=True)
class PaperSummary:
    """Slotted, like the other classes a build keeps one of per record (result, outcome, candidate): without an
    instance dict each takes 100-300 bytes less (summary 352 -> 152, result 352 -> 96, outcome 352 -> 64)."""

    pith_id: str
    pith_number: str
    year: str
    arxiv_id: str
    version: int
    # The words themselves where the record is rendered (worker processes, ``verify``), a reference to them in
    # the build's own process (``TextOf``).  Not compared: the row digest below covers them.
    text: PaperText | TextOf = field(compare=False)
    primary_cat: str
    cross_cats: tuple[str, ...]
    submitted_at: str
    built_at: str
    event_count: int
    license: str
    # A digest of every field above, the words included: a listing page that shows the same digests shows the
    # same thing.  Computed once per record (in the worker that verified it, and kept in the build cache), so
    # keying 10,000 listing rows costs a string join, not 10,000 reprs.  Not a field one sets: ``replace()``
    # computes it anew.
    row_digest: str = field(init=False, repr=False)
    # The row digest as computed before, of these same values (the build cache's copy, or the summary this one
    # differs from only in how it holds its words); computing it again is most of what making a summary costs.
    # Where the words are held by reference it cannot be computed, so it must be given.
    known_digest: InitVar[str | None] = None

    def __post_init__(self, known_digest: str | None) -> None:
        if known_digest is None:
            values = tuple(getattr(self, name) for name in DIGESTED_FIELDS)
            known_digest = hashlib.sha256(repr(values).encode("utf-8")).hexdigest()[:32]
        object.__setattr__(self, "row_digest", known_digest)

    @property
    def words(self) -> PaperText:
        text = self.text
        if type(text) is PaperText:
            return text
        raise WordsHeldByReference(f"pith:{self.pith_id}: its words are held by reference: read them with "
                                   f"with_words() (SiteRenderer.full does, from the verified bundle)")

    @property
    def title(self) -> str:
        return self.words.title

    @property
    def authors(self) -> tuple[str, ...]:
        return self.words.authors

    @property
    def abstract(self) -> str:
        return self.words.abstract

    @property
    def abstract_cut(self) -> bool:
        """Whether the abstract stops mid-sentence: the resolver cuts ``abstract_excerpt`` short (at 600
        characters), often mid-word, and pages then say so ("…") instead of showing a broken sentence as whole."""
        return bool(self.abstract) and not self.abstract.rstrip().endswith(_SENTENCE_ENDS)

    def with_words(self, words: PaperText) -> PaperSummary:
        """The same summary holding its words (a render worker has the bundle at hand)."""
        return self._holding(words)

    def by_reference(self, sha256: str) -> PaperSummary:
        """The same summary holding its words by reference to the verified bundle with digest *sha256*."""
        return self._holding(TextOf(sha256))

    def _holding(self, text: PaperText | TextOf) -> PaperSummary:
        """The same summary with *text* for its words (and the same row digest: the words are the same)."""
        return PaperSummary(*(text if name == "text" else getattr(self, name) for name in SUMMARY_FIELDS),
                            known_digest=self.row_digest)

    @property
    def short_id(self) -> str:
        return self.pith_id[:8]

    @property
    def categories(self) -> tuple[str, ...]:
        """The primary category, then the cross-lists, each once: a signed bundle may repeat one (or name the
        primary again), and a record listed twice in one category is two entries with one id in its feed."""
        return tuple(dict.fromkeys((self.primary_cat, *self.cross_cats)))

    @property
    def submitted_date(self) -> str:
        return self.submitted_at[:10]

    @property
    def arxiv_version_id(self) -> str:
        return f"{self.arxiv_id}v{self.version}"

    @property
    def license_url(self) -> str:
        """The license where it is an http(s) URL a page can link to as it is (``urls.linkable``), else "" (shown
        as text): a signed license is free text, and ``https://example.org/a b`` in an ``href`` is invalid HTML."""
        return self.license if linkable(self.license) else ""

    @property
    def display_title(self) -> str:
        return self.title or f"arXiv:{self.arxiv_version_id}"

    # Bounded views.  A signed bundle may hold 20,000 authors or a 100 KB title, and a record is shown in many
    # places (each of its categories' lists and feeds, meta tags, the citation): every place but the record's own
    # page shows a bounded part, so that a record's output stays within a few times its bundle's size.

    @property
    def short_title(self) -> str:
        """The title in lists, feeds and meta tags: at most SHORT_TITLE characters."""
        return _shortened(self.display_title, SHORT_TITLE)

    @property
    def short_abstract(self) -> str:
        """The abstract in feeds and meta tags: at most SHORT_ABSTRACT characters."""
        return _shortened(self.abstract, SHORT_ABSTRACT)

    @property
    def listed_authors(self) -> tuple[str, ...]:
        """The authors a list row or a feed entry names; the rest are counted as "et al. (N more)"."""
        return self.authors[:LISTED_AUTHORS]

    @property
    def cited_authors(self) -> tuple[str, ...]:
        """The authors in citation meta tags, structured data and BibTeX ("and others" past them)."""
        return self.authors[:CITED_AUTHORS]

    @property
    def listed_categories(self) -> tuple[str, ...]:
        """The categories whose lists and feeds show the record (the primary first): each is a page of the
        site, so a bundle naming thousands of categories makes no thousands of pages."""
        return self.categories[:LISTED_CATEGORIES]


SHORT_TITLE = 300
SHORT_ABSTRACT = 1_000
LISTED_AUTHORS = 10
CITED_AUTHORS = 100
LISTED_CATEGORIES = 12


def _shortened(text: str, limit: int) -> str:
    """*text* cut at a word boundary to at most *limit* characters, "…" marking the cut."""
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip() + "…"


SUMMARY_FIELDS = tuple(f.name for f in fields(PaperSummary) if f.init)
# What the row digest covers (in this order): every field, the words as theirs (title, authors, abstract).
DIGESTED_FIELDS = tuple(digested for name in SUMMARY_FIELDS
                        for digested in ((f.name for f in fields(PaperText)) if name == "text" else (name,)))


def summary_from_values(values: Sequence, row_digest: str) -> PaperSummary:
    """A summary from its field values (in ``SUMMARY_FIELDS`` order) and the digest computed of them before (in
    the worker, kept in the cache)."""
    return PaperSummary(*values, known_digest=row_digest)


@dataclass(frozen=True)
class Claim:
    claim_id: str
    kind: str
    text: str
    status: str


@dataclass(frozen=True)
class TimelineEvent:
    event_type: str
    target: str
    created_at: str
    signer_id: str
    key_id: str
    event_id: str
    known: bool
    dated: bool  # created_at is a real UTC date and time (``is_utc_timestamp``), which ``<time>`` may hold

    @property
    def short_event_id(self) -> str:
        return self.event_id.removeprefix("sha256:")[:12]


@dataclass(frozen=True)
class Receipt:
    first_computed_at: str
    signed_at: str
    builder_version: str
    receipt_version: str
    key_id: str
    fingerprint: str
    signature_b64: str


@dataclass(frozen=True)
class PaperDetail:
    summary: PaperSummary
    short_pith_number: str
    canonical_sha256: str
    doi: str
    headline: str
    one_line_summary: str
    claims: tuple[Claim, ...]
    events: tuple[TimelineEvent, ...]
    receipt: Receipt
    aliases: tuple[tuple[str, str], ...]
    canonical_record_pretty: str
    resolver_url: str
    completeness: tuple[tuple[str, int], ...]
    references_resolved: int
    status_chips: tuple[tuple[str, bool], ...] = ()  # the resolver's: author attested, anchored, stored, refs
    references_count: int = 0
    integrity: Integrity | None = None  # the integrity scan the graph snapshot carries, when it ran


@dataclass(frozen=True)
class Integrity:
    clean: bool | None
    critical: int
    advisory: int
    informational: int
    findings: int
    detectors: tuple[str, ...]


def _count(value: object) -> int:
    return value if type(value) is int and value >= 0 else 0


# A signed bundle's snapshot and state are checked for the fields the verifier needs, not for every part a page
# shows: a part of another shape (a list where an object is, a number where a list is) is shown as absent.
def _object(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def _integrity(scan: object) -> Integrity | None:
    if not isinstance(scan, dict) or scan.get("available") is not True:
        return None
    summary, findings = _object(scan.get("summary")), _list(scan.get("findings"))
    detectors = _list(scan.get("detectors_run"))
    return Integrity(scan.get("clean") if isinstance(scan.get("clean"), bool) else None, _count(summary.get("critical")),
                     _count(summary.get("advisory")), _count(summary.get("informational")), len(findings),
                     tuple(_text(d) for d in detectors if isinstance(d, str)))


# Characters no page or feed may hold: control characters but tab, line feed and carriage return (XML 1.0 has
# no place for them, and one NUL in a title made every feed listing the record ill-formed for every reader), and
# the noncharacters (U+FFFE, U+FFFF, U+FDD0-U+FDEF and their like in every plane).  A bundle's text is shown
# without them; its bytes, mirrored as they are, keep them.
NOT_SHOWN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufdd0-\ufdef"
                        + "".join(f"{chr(plane << 16 | 0xFFFE)}{chr(plane << 16 | 0xFFFF)}" for plane in range(17))
                        + "]")


def shown_text(value: str) -> str:
    """*value* without the characters no page or feed may hold (``NOT_SHOWN``)."""
    if value.isprintable():  # (nearly every field: one C-level pass, no expression)
        return value
    return NOT_SHOWN.sub("", value)


def _text(value: object) -> str:
    """A bundle's text field as a page shows it: text without ``NOT_SHOWN``, "" for anything else."""
    return shown_text(value) if isinstance(value, str) else ""


def _escaped_json(text: str) -> str:
    """JSON text with each character of ``NOT_SHOWN`` written as its escape (the same JSON, shown whole)."""
    return NOT_SHOWN.sub(lambda m: json.dumps(m.group())[1:-1], text)  # (ASCII: "\ufffe", "\ud83f\udffe")


_AUTHOR_SPLIT = re.compile(r",\s*|\s+and\s+")


def split_authors(authors_text: str) -> tuple[str, ...]:
    return tuple(a.strip() for a in _AUTHOR_SPLIT.split(authors_text) if a.strip())


def _latest_snapshot(bundle: dict) -> dict:
    snapshots = [e for e in bundle["events"] if e.get("event_type") == "graph_snapshot"]
    return snapshots[-1]["payload"]["graph_snapshot"] if snapshots else {}


def paper_text(bundle: dict) -> PaperText:
    """A verified bundle's words, from its latest graph snapshot."""
    paper = _latest_snapshot(bundle).get("paper", {})
    return PaperText(" ".join(_text(paper.get("title")).split()), split_authors(_text(paper.get("authors_text"))),
                     _text(paper.get("abstract_excerpt")))


def summarize(bundle: dict) -> PaperSummary:
    """Listing data for a bundle that passed verification."""
    record = bundle["canonical_record"]
    metadata = record["metadata"]
    pith_number = bundle["pith_number"]
    return PaperSummary(
        pith_id=pith_number.rsplit(":", 1)[1],
        pith_number=pith_number,
        year=pith_number.split(":")[1],
        arxiv_id=record["source"]["id"],
        version=record["source"]["version"],
        text=paper_text(bundle),
        primary_cat=metadata["primary_cat"],
        cross_cats=tuple(metadata["cross_cats_sorted"]),
        submitted_at=metadata["submitted_at"],
        built_at=bundle["built_at"],
        event_count=len(bundle["events"]),
        license=_text(metadata.get("license")),
    )


_COMPLETENESS = (
    ("Bitcoin timestamp (OpenTimestamps)", "timestamp_anchors"),
    ("Internet Archive copy", "storage_attestations"),
    ("Author claim", "author_attestations"),
    ("Signed citations", "citation_signatures"),
    ("Replications", "replication_records"),
    ("Corrections", "corrections"),
)


def _timeline_event(e: dict) -> TimelineEvent:
    return TimelineEvent(event_type=_text(e.get("event_type")), target=_text(e.get("target")),
                         created_at=_text(e.get("created_at")), signer_id=_text(e["signer"].get("signer_id")),
                         key_id=_text(e["signer"].get("key_id")), event_id=_text(e.get("event_id")),
                         known=e.get("event_type") in KNOWN_EVENT_TYPES, dated=is_utc_timestamp(e.get("created_at")))


def _receipt(created: dict) -> Receipt:
    r = created["payload"]["receipt"]
    return Receipt(first_computed_at=_text(r.get("first_computed_at")), signed_at=_text(r.get("signed_at")),
                   builder_version=_text(r.get("builder_version")), receipt_version=_text(r.get("receipt_version")),
                   key_id=_text(r.get("key_id")), fingerprint=_text(r.get("public_key_fingerprint")),
                   signature_b64=_text(r.get("signature_b64")))


def detail(bundle: dict, summary: PaperSummary, resolver: str = RESOLVER) -> PaperDetail:
    """Everything the record page shows, from a verified bundle; *resolver*: the resolver the site mirrors
    (``resolver_url``), whose address of the record the page links to."""
    snapshot = _latest_snapshot(bundle)
    verdict = _object(snapshot.get("verdict"))
    claims = tuple(
        Claim(_text(c.get("claim_id")), _text(c.get("kind")), _text(c.get("text")), _text(c.get("status")))
        for c in _list(_object(snapshot.get("claims")).get("items"))
        if isinstance(c, dict)
    )
    events = tuple(_timeline_event(e) for e in bundle["events"])
    receipt = _receipt(next(e for e in bundle["events"] if e["event_type"] == "record_created"))
    # (the verifier checks the value of each kind it knows; any other kind is shown as text: its kind escaped, so
    # that none reads as a known one, and its value without what no page may hold)
    aliases = tuple((printable(a["alias_kind"]), _text(a["alias_value"])) for a in bundle["source_aliases"])
    doi = next((v for k, v in aliases if k == "doi"), "") or f"10.48550/arxiv.{summary.arxiv_id}"
    current = _object(bundle["state"].get("current"))
    completeness = tuple((label, len(_list(current.get(key)))) for label, key in _COMPLETENESS)
    references = _object(snapshot.get("references"))
    resolved = _count(references.get("resolved_work"))
    have = lambda key: bool(_list(current.get(key)))  # noqa: E731
    chips = (("author attested", have("author_attestations")), ("externally anchored", have("timestamp_anchors")),
             ("storage verified", have("storage_attestations")),
             ("references resolved", resolved > 0))
    return PaperDetail(
        summary=summary,
        short_pith_number=bundle["short_pith_number"],
        canonical_sha256=bundle["canonical_sha256"],
        doi=doi,
        headline=(_text(_object(snapshot.get("paper")).get("headline"))
                  or _text(verdict.get("pith_extraction_headline"))),
        one_line_summary=_text(verdict.get("one_line_summary")),
        claims=claims,
        events=events,
        receipt=receipt,
        aliases=aliases,
        canonical_record_pretty=_escaped_json(pretty_json(bundle["canonical_record"])),
        resolver_url=on_resolver(resolver, f"pith/{summary.pith_id}"),
        completeness=completeness,
        references_resolved=resolved,
        status_chips=chips,
        references_count=_count(references.get("count")),
        integrity=_integrity(snapshot.get("integrity")),
    )
