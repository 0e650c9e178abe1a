"""Rendering: Jinja templates -> page bytes.  No file I/O besides loading templates.

Autoescaping is on for every template whatever its extension, and text that may
hold Markdown goes through markdown-it-py with raw HTML off and only http(s) and
mailto links allowed (and, in the site's own about page, links within the site and
images).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import jinja2
from markupsafe import Markup, escape

from site_builder import __version__
from site_builder.categories import category_name
from site_builder.records import PaperText, WordsHeldByReference
from site_builder.keys import TrustSet
from site_builder.settings import SiteConfig
from site_builder.speedups import SitewidePartials, call_helpers_directly
from site_builder.terminal import printable
from site_builder.urls import linkable
from site_builder.verification import CHECK_DESCRIPTIONS
from site_builder.writing import is_plain_path

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

# Rendered list rows kept per renderer (~0.8 KB each).  Large enough to hold every record of a 100,000-record
# mirror: clearing it half-way through the listings left less reuse than its overhead costs (measured: 100,000
# records' listings in 40.6 s with 50,000 rows kept, 25.5 s with no reuse at all, 17.8 s with 200,000 kept).
ROW_MEMO_LIMIT = 200_000
# Distinct lists of check results whose table rows are kept: a handful in practice (all passed; the state's
# recomputation skipped), bounded against a folder of bundles each failing differently in what it skips.
CHECK_ROWS_MEMO_LIMIT = 64
ROW_TEMPLATE = "_paper_row.html"  # a record's row in lists (``paper_row``)
CHECK_ROWS_TEMPLATE = "_check_rows.html"  # a record's table of checks (``check_rows``)
# The globals that render a template of their own, for ``template_uses``: a page that calls one uses its template.
HELPER_TEMPLATES = {"paper_row": ROW_TEMPLATE, "paper_rows": ROW_TEMPLATE, "check_rows": CHECK_ROWS_TEMPLATE}


# Bounds under which a field is rendered as Markdown (measured: 1,000 nested brackets render in ~1 ms, 10,000
# in 0.1-0.4 s, 100,000 in 1-4 s; 100,000 characters of anything else in well under 0.2 s).
MARKDOWN_MAX_CHARS = 100_000
MARKDOWN_MAX_BRACKETS = 1_000


def markdown_is_bounded(text: str) -> bool:
    """Whether rendering *text* as Markdown takes a bounded time (else it is shown as plain text)."""
    return len(text) <= MARKDOWN_MAX_CHARS and text.count("[") + text.count("]") <= MARKDOWN_MAX_BRACKETS


def _validate_link(url: str) -> bool:
    """A link of the site's own text: http(s), mailto, or within the site (a path, a query, a fragment)."""
    lowered = "".join(url.split()).lower()
    if ":" not in lowered.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]:
        return True  # relative link or fragment
    return _validate_absolute_link(url)


def _validate_absolute_link(url: str) -> bool:
    """A link of a bundle's text: http(s) or mailto alone.  A path in it was written for no page of this site
    (``x.png`` beside a record page is nothing), and would lead a reader wherever in the mirror its author chose.
    An http(s) one must be a URL an href holds as it stands (``urls.linkable``: ``https://``, ``https://a..b/``
    or a port over 65535, written in a paper, is shown as text, not as a link that is invalid HTML).  markdown-it
    asks this of the link as it normalised it (its host in ASCII, its other characters percent-encoded)."""
    return "".join(url.split()).lower().startswith("mailto:") or linkable(url)


def _name_empty_links(state) -> None:
    """A markdown-it core rule: a link whose text is empty or blank (``[](https://example.org)``) shows its
    address as its text.  Rendered as written it is a link nobody sees and no screen reader can name (axe:
    link-name); an image with its alt text names the link it is in."""
    from markdown_it.token import Token

    for block in state.tokens:
        if block.type != "inline" or not block.children:
            continue
        children, named, href = [], True, ""
        for token in block.children:
            if token.type == "link_open":
                named, href = False, str(token.attrGet("href") or "")
            elif token.type == "link_close" and not named:  # (the address as written: Unicode, not %-escaped)
                children.append(Token("text", "", 0, content=state.md.normalizeLinkText(href)))
            elif token.type in ("text", "code_inline", "image") and token.content.strip():
                named = True
            children.append(token)
        block.children = children


def make_markdown(own: bool = False) -> MarkdownIt:
    """CommonMark without raw HTML, its links checked.  A bundle's text (not *own*) gets absolute links alone
    (``_validate_absolute_link``; any other is shown as the text it is) and no images: ``![alt](url)`` is a link to
    the image, not an ``<img>``, since a paper's author writes the claims, and an image there would be fetched
    from the author's server by every reader's browser (a tracking pixel on the mirror).  The site's *own* text
    (the about page) may link within the site and show images."""
    from markdown_it import MarkdownIt  # (~40 ms to import: a build that renders no Markdown does without it)

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.validateLink = _validate_link if own else _validate_absolute_link
    if not own:
        md.disable("image")
    md.core.ruler.push("name_empty_links", _name_empty_links)
    return md


def builtin_templates_dir() -> Path:
    """The default templates: site_builder/templates in an installed wheel, the repository's templates/ otherwise."""
    here = Path(__file__).resolve().parent
    installed = here / "templates"
    return installed if (installed / "base.html").is_file() else here.parent / "templates"


def template_dirs(user_dir: Path | None) -> list[Path]:
    dirs = []
    if user_dir is not None and user_dir.is_dir():
        dirs.append(user_dir.resolve())
    builtin = builtin_templates_dir().resolve()
    if builtin not in dirs:
        dirs.append(builtin)
    return dirs


def _folders_under(top: Path) -> Iterator[tuple[str, list[str]]]:
    """Each folder under *top* (itself first) with the names of the files in it, as ``os.walk`` gives them with
    its folders in name order and hidden or ``__`` ones left out, but with a stack, not by recursion: a templates
    folder nested a thousand deep (a pull request's) is no RecursionError.  Links to folders are not entered."""
    stack = [str(top)]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            continue
        files, subfolders = [], []
        for entry in entries:
            try:
                is_folder = entry.is_dir()
            except OSError:
                is_folder = False
            if not is_folder:
                files.append(entry.name)
            elif not entry.name.startswith((".", "__")) and not entry.is_symlink():
                subfolders.append(entry.path)
        yield folder, files
        stack.extend(sorted(subfolders, reverse=True))


def templates_identity(dirs: Iterable[Path]) -> str:
    """Digest of every template and asset file: what the build id and a unit that may use any template key on
    (``template_uses``)."""
    h = hashlib.sha256()
    for d in dirs:
        for root, files in _folders_under(d):
            for name in sorted(files):
                if name.startswith("."):
                    continue
                p = Path(root, name)
                if not (is_regular_file(p) or inside_templates(d, p)):  # (no template: never read, see
                    continue                                           # ``TemplateLoader``)
                rel, data = str(p.relative_to(d)).encode("utf-8", "surrogateescape"), p.read_bytes()
                h.update(b"%d:%s%d:" % (len(rel), rel, len(data)))  # (lengths first: no two trees share a digest)
                h.update(data)
        h.update(b"\1")
    return h.hexdigest()


@dataclass(frozen=True)
class Page:
    number: int
    url: str


def pagination(base: str, total_items: int, page_size: int) -> list[Page]:
    """Page 1 lives at <base>, page n at <base>page/<n>/ (Hugo's layout)."""
    count = max(1, math.ceil(total_items / page_size))
    return [Page(n, base if n == 1 else f"{base}page/{n}/") for n in range(1, count + 1)]


def page_links(pages: list[Page], page: Page) -> list[Page | None]:
    """What a list page's navigation names, in order: the first two pages, the last two, *page* and two either
    side of it, with None for each gap next to those.  Picked from at most eleven candidates: a template loop over
    every page made each page's navigation as long to render as the listing has pages, and so a listing's pages
    together quadratic in its length (a million steps for the 1,000 pages of 100,000 records)."""
    last, current = len(pages), page.number
    links: list[Page | None] = []
    for n in sorted({1, 2, last - 1, last, *range(current - 3, current + 4)}):
        if not 1 <= n <= last:
            continue
        if n <= 2 or n > last - 2 or abs(n - current) <= 2:
            links.append(pages[n - 1])
        elif abs(n - current) == 3:
            links.append(None)
    return links


class _ShownPaper:
    """A summary held by reference, handed to a template: its fields as they are, its words read back (once)
    when the template uses them."""

    __slots__ = ("_summary", "_renderer", "_full")

    def __init__(self, summary, renderer: SiteRenderer):
        self._summary, self._renderer, self._full = summary, renderer, None

    def full(self):
        if self._full is None:
            self._full = self._renderer.full(self._summary)
        return self._full

    def __getattr__(self, name: str):
        try:
            return getattr(self._summary, name)
        except WordsHeldByReference:  # (a field made of the words: read them)
            return getattr(self.full(), name)


def is_regular_file(path: Path) -> bool:
    """Whether *path* is a regular file itself, no link: one found by walking a folder without following links
    lies inside it, as ``inside_templates`` would find at a dozen system calls more (4 ms a build for the ~70
    templates of the two folders)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def inside_templates(folder: Path, path: str | Path) -> bool:
    """Whether *path*, its links followed, is a regular file inside the templates folder *folder*: a
    link planted in a project (which a pull request may bring) must not publish what it leads to, such as
    /proc/self/environ and the secrets in the build's environment, nor make a page read /dev/zero for ever."""
    root, real = os.path.realpath(folder), os.path.realpath(path)
    return os.path.isfile(real) and os.path.commonpath([root, real]) == root


def template_assets(dirs: Iterable[Path]) -> tuple[dict[str, Path], list[str]]:
    """The files the site copies to ``/assets/`` (name -> file: the first templates folder's that has the name),
    and a warning for each one it cannot copy: a name that is not a plain file name (a space, a byte that is not
    UTF-8: ``writing.is_plain_path``), which a static host would not serve as it is, or a file that is a link
    leading out of its templates folder, or no regular file (``inside_templates``)."""
    chosen: dict[str, Path] = {}
    warnings = []
    for d in dirs:
        if not (d / "assets").is_dir():
            continue
        for p in sorted((d / "assets").iterdir()):
            if p.name.startswith(".") or p.name in chosen or (p.is_dir() and not p.is_symlink()):
                continue
            if not is_plain_path("assets/" + p.name):
                why = "not a plain file name a static host serves"
            elif not inside_templates(d, p):
                why = "a link leading out of the templates folder, or not a regular file"
            else:
                chosen[p.name] = p
                continue
            warnings.append(f"{printable(d.name)}/assets/{printable(p.name)}: {why}; not copied")
    return dict(sorted(chosen.items())), warnings


def bibtex_value(text: str) -> str:
    """*text* as the value of a BibTeX field written between braces: as it is (its LaTeX, such as ``{O}(n)``,
    included), but for a brace with no partner, which is left out (it would end the field, or leave the entry
    open, for whoever pastes it)."""
    if "{" not in text and "}" not in text:
        return text
    unmatched: list[int] = []
    open_at: list[int] = []
    for i, char in enumerate(text):
        if char == "{":
            open_at.append(i)
        elif char == "}":
            if open_at:
                open_at.pop()
            else:
                unmatched.append(i)
    dropped = set(unmatched + open_at)
    return "".join(char for i, char in enumerate(text) if i not in dropped)


class TemplateLoader(jinja2.FileSystemLoader):
    """Jinja's loader of template files, for which a file that is not UTF-8 text, or a link leading out of its
    templates folder, or no regular file (``inside_templates``: Jinja's own would show /proc/self/environ in
    every page, or read /dev/zero for ever), is a template error naming the file (Jinja's own raises a
    UnicodeDecodeError, which names none)."""

    def get_source(self, environment: jinja2.Environment, template: str):
        filename = template
        for folder in self.searchpath:  # (the file Jinja would read: the first folder's that has the name)
            path = os.path.join(folder, *template.split("/"))
            if os.path.lexists(path):
                if not inside_templates(Path(folder), path):
                    raise jinja2.TemplateSyntaxError("a link leading out of the templates folder, or not a regular "
                                                     "file", 1, template, path)
                filename = path
                break
        try:
            return super().get_source(environment, template)
        except UnicodeDecodeError as exc:
            raise jinja2.TemplateSyntaxError(f"not UTF-8 text ({exc.reason} at byte offset {exc.start:,})", 1,
                                             template, filename) from None


class SiteRenderer:
    def __init__(self, config: SiteConfig, dirs: list[Path], trust: TrustSet, search_enabled: bool = True,
                 compiled: jinja2.BytecodeCache | None = None, direct_calls: bool = True,
                 sitewide_once: bool = True):
        """*compiled*: where Jinja keeps compiled templates between processes (compiled_templates.py: keyed by
        each template's source, so an edited template is compiled again, and authenticated).
        *direct_calls*: the speed-up of ``speedups.call_helpers_directly``; *sitewide_once*: that of
        ``speedups.SitewidePartials``."""
        self.config = config
        self.trust = trust
        self.env = jinja2.Environment(
            loader=TemplateLoader([str(d) for d in dirs], encoding="utf-8-sig"),  # (a byte-order mark is no text)
            bytecode_cache=compiled,
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            # A renderer lives for one set of templates: the build keys it by their digest and makes a new one
            # when any template changes, so Jinja need not stat every template file on every page.
            auto_reload=False,
        )
        self._md: dict[bool, MarkdownIt] = {}  # by whether the text is the site's own; made when first needed
        self.env.filters["markdown"] = self.markdown
        self.env.filters["tojson_compact"] = lambda v: Markup(
            json.dumps(v, ensure_ascii=True, sort_keys=True, separators=(",", ":"))
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
        self.env.filters["slashdate"] = lambda s: s[:10].replace("-", "/")
        self.env.filters["bibtex_value"] = bibtex_value
        self.env.globals.update(
            site=config,
            url=config.url,
            absolute_url=config.absolute_url,
            generator=f"site-builder {__version__}",
            trusted_keys=trust.keys,
            pinned_keys=[{"key_id": k.key_id, "public_key_hex": k.public_key_hex,
                          "fingerprint_sha256_hex": k.fingerprint_hex} for k in trust.keys],
            check_descriptions=CHECK_DESCRIPTIONS,
            search_enabled=search_enabled,
            paper_row=self.paper_row,
            paper_rows=self.paper_rows,
            check_rows=self.check_rows,
            page_links=page_links,
            category_name=category_name,
            site_url=self.site_url,
        )
        self.env.globals["sitewide"] = SitewidePartials(self.env, sitewide_once)
        if direct_calls:
            call_helpers_directly(self.env, ("url", "absolute_url", "paper_row", "paper_rows", "check_rows",
                                             "page_links", "sitewide"))
        self.dirs = dirs
        # Row digest -> a record's list row (``paper_row``): this renderer's, and those an earlier one with the same
        # row template and settings made, which the build hands over (``plan.site_renderer``).
        self.rows: dict[str, bytes] = {}
        # (pith id, sha256) -> the record's words, read back from its verified bundle; set by the render stage
        self.read_words: Callable[[str, str], PaperText] | None = None
        self._templates: dict[str, jinja2.Template] = {}
        self._check_rows: dict[tuple, Markup] = {}

    def site_url(self, path: str) -> Markup | str:
        """A URL for the reader to copy: absolute where base_url has an origin; otherwise the site-internal path,
        marked for the page's script to complete from the address the page was loaded from."""
        if self.config.has_origin:
            return self.config.absolute_url(path)
        return Markup('<span class="site-url">%s</span>') % self.config.url(path)

    def paper_row(self, paper) -> Markup:
        """A record's row in a list of papers (``_paper_row.html``), rendered once and reused by every list page
        that shows it: a record is on three or four listings, and a page of 100 rows costs ~8 ms to render.
        Keyed by the record's row digest (every field of its summary); the templates and settings are this
        renderer's own (or, for rows handed over, the same: the build keys them by its build key and the row
        template with those it uses, ``plan.list_rows_key``), so the row cannot differ."""
        return Markup(self._row_bytes(paper).decode("utf-8"))

    def paper_rows(self, papers) -> Markup:
        """The rows of *papers*, one after the other: what a list page shows.  A loop over ``paper_row`` in the
        template gives the same bytes, but its per-row overhead made a 100-row page ~1.6 times as slow."""
        return Markup(b"".join([self._row_bytes(p) for p in papers]).decode("utf-8"))

    def _row_bytes(self, paper) -> bytes:
        """The row as UTF-8: kept for every record of the site, and a row with one character beyond Latin-1
        (the default row's "·") takes two bytes a character as a ``str``, one as UTF-8."""
        row = self.rows.get(paper.row_digest)
        if row is None:
            row = self.row_of(paper)
            self.keep_row(paper.row_digest, row)
        return row

    def row_of(self, paper) -> bytes:
        """The row, kept or rendered, without keeping it: a render worker renders the row of each record it
        renders (so that list pages only join rows) and hands it to the build, which keeps it (``keep_row``)."""
        row = self.rows.get(paper.row_digest)
        return row if row is not None else self.render(ROW_TEMPLATE, p=self.full(paper))

    def full(self, paper):
        """*paper* holding its words: a summary the build holds by reference (``records.TextOf``) reads them
        through ``read_words``, which the render stage points at the verified bundles of the tree it writes."""
        if type(paper) is _ShownPaper:
            return paper.full()
        if type(paper.text) is PaperText:
            return paper
        if self.read_words is None:
            raise LookupError(f"pith:{paper.pith_id}: its words are held by reference, and no tree is being written")
        return paper.with_words(self.read_words(paper.pith_id, paper.text.sha256))

    def shown(self, papers) -> list:
        """*papers* as a template may show them: a summary held by reference reads its words only if the
        template asks for them (list rows mostly come from the kept rows, and need none)."""
        return [p if type(p.text) is PaperText else _ShownPaper(p, self) for p in papers]

    def keep_row(self, row_digest: str, row: bytes) -> None:
        if len(self.rows) >= ROW_MEMO_LIMIT and row_digest not in self.rows:
            self.rows.clear()
        self.rows[row_digest] = row

    def check_rows(self, checks) -> Markup:
        """The rows of a record's check table (``_check_rows.html``), rendered once per distinct list of results:
        nearly every record passes the same checks, and its fifteen rows were a sixth of a paper page's time."""
        key = tuple(checks)
        rows = self._check_rows.get(key)
        if rows is None:
            if len(self._check_rows) >= CHECK_ROWS_MEMO_LIMIT:
                self._check_rows.clear()
            rows = self._check_rows[key] = Markup(self.render_text(CHECK_ROWS_TEMPLATE, checks=key))
        return rows

    def markdown(self, text: str, own: bool = False) -> Markup:
        """*text* rendered as Markdown, or as plain text, with a note saying so, where rendering it could take
        long: markdown-it's link and image parsing is quadratic in nested brackets (1 MB of ``[`` took 42 s).
        Links within the site and images only where a template says the text is the site's own
        (``markdown(own=True)``: the about page), never in a bundle's text by default (``make_markdown``)."""
        text = text or ""
        if not markdown_is_bounded(text):
            return Markup('<p class="plain-text">') + escape(text) + Markup(
                '</p><p class="note">(shown as plain text: too complex to render as Markdown)</p>')
        md = self._md.get(own)
        if md is None:
            md = self._md[own] = make_markdown(own)
        return Markup(md.render(text))

    def render(self, template: str, **context: Any) -> bytes:
        return self.render_text(template, **context).encode("utf-8")

    def render_text(self, template: str, **context: Any) -> str:
        found = self._templates.get(template)
        if found is None:  # get_template() costs ~10 µs even when cached; a record renders eight pages
            found = self._templates[template] = self.env.get_template(template)
            # Jinja keeps a template's globals as a ChainMap over the environment's and copies it into every
            # page's context: ~12 µs of a redirect page's ~40.  The environment's globals are set once, above,
            # so a plain dict of them is the same mapping.
            found.globals = dict(found.globals)
        try:
            return found.render(**context)
        except jinja2.TemplateError as exc:
            locate_template_error(exc)
            raise
        except Exception as exc:  # (a division by zero, a loop over a number: raised by the template's own code)
            if not raised_by_template(exc):
                raise  # (a fault of the builder's: its traceback)
            error = jinja2.TemplateRuntimeError(f"{type(exc).__name__}: {exc}")
            error.filename, error.lineno = template_place(exc.__traceback__) or (None, None)
            raise error from exc

    def assets(self) -> dict[str, bytes]:
        """The files the site copies to ``/assets/``, by name (``template_assets``: the folders looked at once)."""
        return {name: path.read_bytes() for name, path in template_assets(self.dirs)[0].items()}


def _template_frames(tb: TracebackType | None) -> Iterator[tuple[str, int, bool]]:
    """Each frame of a traceback from the outermost: its file, its line and whether it is a template's."""
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        yield name, tb.tb_lineno, not name.endswith(".py") and not name.startswith("<")
        tb = tb.tb_next


_JINJA = os.path.dirname(jinja2.__file__) + os.sep


def raised_by_template(exc: BaseException) -> bool:
    """Whether *exc* was raised by a template's own code: in a template's line, or in Jinja's runtime running
    one (a loop over something that is not a list); not in the builder's helpers a template calls."""
    frames = list(_template_frames(exc.__traceback__))
    return any(template for _, _, template in frames) and (frames[-1][2] or frames[-1][0].startswith(_JINJA))


def locate_template_error(exc: jinja2.TemplateError) -> None:
    """Give *exc*, raised while a template ran (an undefined name, a failed filter), the file and line of the
    template where it happened: Jinja gives them only for syntax errors, and a user editing templates needs them.
    Jinja's traceback names the templates' own lines; the innermost one is the place.  Set as attributes, which
    survive the way back from a worker process (an exception's ``__dict__`` is pickled with it)."""
    place = template_place(exc.__traceback__) if getattr(exc, "lineno", None) is None else None
    if place is not None:
        exc.filename, exc.lineno = place


def template_place(tb: TracebackType | None) -> tuple[str, int] | None:
    """The file and line of the innermost template in a traceback (Jinja's frames name the templates' own lines):
    where a template went wrong."""
    places = [(name, line) for name, line, template in _template_frames(tb) if template]
    return places[-1] if places else None


def describe_template_error(exc: jinja2.TemplateError) -> str:
    """One line for a template error: ``<file>:<line>: <what>``, with as much of the place as is known
    (``locate_template_error``; "template" where none is).  Not escaped here: whoever prints it does
    (``terminal.printable``)."""
    where = getattr(exc, "filename", None) or getattr(exc, "name", None)
    line = getattr(exc, "lineno", None)
    what = (exc.message if isinstance(exc, jinja2.TemplateSyntaxError) else str(exc)) or type(exc).__name__
    place = f"{where}{f':{line}' if line else ''}" if where else "template"
    return f"{place}: {what.splitlines()[0]}"
