"""The renderer's template helpers, as templates (built-in or a user's) call them."""

import pickle
from dataclasses import replace

import pytest

from markupsafe import Markup

from site_builder.keys import load_trust_set
from site_builder.parallel import PARALLEL_THRESHOLD
from site_builder.rendering import SiteRenderer, template_assets, template_dirs
from site_builder.settings import SiteConfig


def test_helpers_answer_alike_in_loops_blocks_macros_and_with_keywords():
    """The renderer calls its own helpers directly (Jinja's call path looks every callable over): inside a loop
    or a block Jinja hands them loop and block variables meant for context-taking callables, which they must
    not receive; any other callable still takes Jinja's path."""
    renderer = SiteRenderer(SiteConfig(base_url="https://h.org/m/"), template_dirs(None), load_trust_set())
    template = renderer.env.from_string(
        "{% macro link(x) %}{{ url(x) }}{% endmacro %}"
        "{% for c in ['a', 'b'] %}{{ url(c) }} {{ absolute_url(path=c ~ '/') }} {{ link(c) }} {% endfor %}"
        "{% set held %}{{ url('z') }}{% endset %}{{ held }} {{ ' x '.strip() }} {{ cycler('p', 'q').next() }} "
        "{{ check_descriptions.get('structure', '')[:8] }} {{ url() }}")
    assert template.render() == ("/m/a https://h.org/m/a/ /m/a /m/b https://h.org/m/b/ /m/b "
                                 "/m/z x p required /m/")


def test_links_follow_the_settings_they_were_made_from():
    """Links are worked out once per settings object; settings made from others (``replace``, as the command
    line's flags do, or a copy sent to a worker) get their own."""
    config = SiteConfig(base_url="/mirror/")
    assert config.url("x/") == "/mirror/x/" and config.absolute_url("/x/") == "/mirror/x/" and not config.has_origin
    moved = replace(config, base_url="https://user.github.io/m/")
    assert moved.url("x/") == "/m/x/" and moved.absolute_url("x/") == "https://user.github.io/m/x/"
    assert config.url("x/") == "/mirror/x/" and moved != config
    sent = pickle.loads(pickle.dumps(moved))
    assert sent == moved and sent.absolute_url("") == "https://user.github.io/m/" and sent.has_origin
    for base, expected in [("/", "/x/ /"), ("https://user.github.io/mirror/", "/mirror/x/ https://user.github.io/mirror/"),
                           ("http://localhost:8000/a/b/", "/a/b/x/ http://localhost:8000/a/b/")]:
        renderer = SiteRenderer(SiteConfig(base_url=base), template_dirs(None), load_trust_set())
        assert renderer.env.from_string("{{ url('x/') }} {{ absolute_url('') }}").render() == expected


def test_templates_escape_values_and_keep_markup():
    renderer = SiteRenderer(SiteConfig(), template_dirs(None), load_trust_set())
    template = renderer.env.from_string("{{ a }}|{{ b }}|{{ c }}")
    assert template.render(a="<script>&'\"", b=Markup("<b>kept</b>"), c=3) == \
        "&lt;script&gt;&amp;&#39;&#34;|<b>kept</b>|3"


# How listing.html named its pages before page_links: a loop over every page of the listing, on every page.
EVERY_PAGE_LOOP = """{% for pg in pages %}{% if pg.number == page.number %}<span aria-current="page">{{ pg.number }}</span>\
{% elif pg.number <= 2 or pg.number > pages|length - 2 or (pg.number - page.number)|abs <= 2 %}\
<a href="{{ url(pg.url) }}">{{ pg.number }}</a>{% elif (pg.number - page.number)|abs == 3 %}<span class="gap">…</span>\
{% endif %}
  {% endfor %}"""
PAGE_LINKS = """{% for pg in page_links(pages, page) %}{% if pg is none %}<span class="gap">…</span>\
{% elif pg.number == page.number %}<span aria-current="page">{{ pg.number }}</span>\
{% else %}<a href="{{ url(pg.url) }}">{{ pg.number }}</a>{% endif %}
  {% endfor %}"""


def test_a_listing_has_one_page_per_page_size_and_one_when_empty():
    from site_builder.rendering import Page, pagination

    assert pagination("papers/", 0, 100) == [Page(1, "papers/")]  # (an empty site's listing is one page)
    assert pagination("papers/", 100, 100) == [Page(1, "papers/")]
    assert pagination("papers/", 101, 100) == [Page(1, "papers/"), Page(2, "papers/page/2/")]


def test_a_url_to_copy_is_absolute_with_a_full_base_url_and_completed_in_the_browser_without():
    """The snippets a reader copies (citations, the record's address) hold the site's full address where
    base_url gives one; otherwise the path, marked for the page's script to complete."""
    full = SiteRenderer(SiteConfig(base_url="https://m.example/pith/"), template_dirs(None), load_trust_set())
    assert full.site_url("/a/b/") == "https://m.example/pith/a/b/"
    path = SiteRenderer(SiteConfig(base_url="/pith/"), template_dirs(None), load_trust_set())
    assert path.site_url("/a/b/") == Markup('<span class="site-url">/pith/a/b/</span>')


def test_page_links_name_what_a_loop_over_every_page_named():
    """A list page's navigation is picked from a few candidates (page_links) instead of a loop over every page,
    which made a listing's pages quadratic in its length; for every page of listings of 1 to 40 pages, the
    navigation is the same, byte for byte, and the built-in template uses it."""
    from site_builder.rendering import page_links, pagination

    renderer = SiteRenderer(SiteConfig(), template_dirs(None), load_trust_set())
    old, new = renderer.env.from_string(EVERY_PAGE_LOOP), renderer.env.from_string(PAGE_LINKS)
    for count in range(1, 41):
        pages = pagination("papers/", count * 100, 100)
        for page in pages:
            assert new.render(pages=pages, page=page) == old.render(pages=pages, page=page), (count, page.number)
    pages = pagination("papers/", 100_000, 100)
    assert [p and p.number for p in page_links(pages, pages[499])] == [1, 2, None, 498, 499, 500, 501, 502, None,
                                                                       999, 1000]
    assert "page_links(pages, page)" in (template_dirs(None)[-1] / "listing.html").read_text()


@pytest.mark.parametrize("text", ["[" * 1_000_000, "![" * 200_000, "[a](" * 100_000, "x" * 200_001])
def test_pathological_markdown_is_shown_as_plain_text_in_bounded_time(text):
    """1 MB of ``[`` in one Markdown field took 42 s for one record; past the bounds a field is shown as plain
    text, escaped, with a note saying so."""
    import time

    renderer = SiteRenderer(SiteConfig(), template_dirs(None), load_trust_set())
    started = time.perf_counter()
    html = str(renderer.markdown(text + "<script>"))
    assert time.perf_counter() - started < 1.0
    assert "too complex to render as Markdown" in html and "<script>" not in html and "&lt;script&gt;" in html


def test_a_field_at_the_markdown_bounds_is_markdown_and_one_past_them_is_plain_text():
    """README's bounds: up to 100,000 characters and 1,000 square brackets a field is Markdown."""
    renderer = SiteRenderer(SiteConfig(), template_dirs(None), load_trust_set())
    link = "[a](https://example.org/) "  # (two brackets)
    for text, markdown in [(link * 500, True), (link * 500 + "[", False),
                           ("*x* " + "y" * 99_996, True), ("*x* " + "y" * 99_997, False)]:
        html = str(renderer.markdown(text))
        assert ("too complex to render as Markdown" not in html) == markdown, (len(text), text.count("["))
        assert ('<a href="https://example.org/"' in html or "<em>x</em>" in html) == markdown


def test_ordinary_markdown_is_still_rendered():
    renderer = SiteRenderer(SiteConfig(), template_dirs(None), load_trust_set())
    html = str(renderer.markdown("We show *that* [the method](https://example.org/) [1] works."))
    assert "<em>that</em>" in html and 'href="https://example.org/"' in html and "plain text" not in html


def test_markdown_shows_the_signed_words_as_written():
    """The page shows what the bundle signs: no curly quotes, dashes or symbols made of the author's characters,
    and no link the author did not write (a bare address stays text)."""
    renderer = SiteRenderer(SiteConfig(), template_dirs(None), load_trust_set())
    html = str(renderer.markdown('A "quoted" word -- and (c) 1990... see https://example.org/x'))
    assert html == '<p>A &quot;quoted&quot; word -- and (c) 1990... see https://example.org/x</p>\n'


@pytest.mark.parametrize("title, shown", [
    ("On the {O}(n) bound", "On the {O}(n) bound"),  # (LaTeX grouping, balanced: kept)
    ("Sets {x | x > 0", "Sets x | x > 0"), ("a } b { c", "a  b  c"), ("{{nested}", "{nested}"), ("}{", ""),
    ("closed } only", "closed  only"),
])
def test_the_bibtex_entry_keeps_balanced_braces_and_leaves_out_unpartnered_ones(real_bundle, title, shown):
    """A BibTeX value is written between braces: a brace of the title with no partner would end the field (or
    leave the entry open) for whoever pastes it into a .bib file."""
    import html
    import re

    from signing import with_paper
    from site_builder.pages import paper_files
    from site_builder.records import summarize

    bundle = with_paper(real_bundle, title=title, authors_text="Ada Lovelace}, Alan {Turing")
    renderer = SiteRenderer(SiteConfig(), template_dirs(None), load_trust_set())
    page = dict(paper_files(renderer, b"{}", bundle, summarize(bundle), (), ()))[
        f"pith/{summarize(bundle).pith_id}/index.html"].decode()
    entry = html.unescape(re.search(r'id="bibtex"><code>(.*?)</code>', page, re.S).group(1))
    assert f"  title = {{{shown}}},\n" in entry
    assert "  author = {Ada Lovelace and Alan Turing},\n" in entry
    depth = 0
    for char in entry:
        depth += {"{": 1, "}": -1}.get(char, 0)
        assert depth >= 0
    assert depth == 0


def test_the_bibtex_author_field_names_the_cited_authors_then_and_others(real_bundle):
    """Past ``CITED_AUTHORS`` the entry says "and others", BibTeX's word for the rest, closed by its brace."""
    import html
    import re

    from signing import with_paper
    from site_builder.pages import paper_files
    from site_builder.records import CITED_AUTHORS, summarize

    names = [f"Author {n}" for n in range(CITED_AUTHORS + 3)]
    bundle = with_paper(real_bundle, authors_text=", ".join(names))
    renderer = SiteRenderer(SiteConfig(), template_dirs(None), load_trust_set())
    page = dict(paper_files(renderer, b"{}", bundle, summarize(bundle), (), ()))[
        f"pith/{summarize(bundle).pith_id}/index.html"].decode()
    entry = html.unescape(re.search(r'id="bibtex"><code>(.*?)</code>', page, re.S).group(1))
    cited = " and ".join(names[:CITED_AUTHORS])
    assert f"  author = {{{cited} and others}},\n" in entry


def test_the_templates_identity_tells_every_two_trees_apart(tmp_path):
    """An edited template renders pages again because the identity of the templates changes: no two trees may
    share one, whatever their files hold (file boundaries were marked with NULs, which a file may hold too), and
    a file name that is not UTF-8 is named, not an error."""
    import os

    from site_builder.rendering import templates_identity
    one, two, three = tmp_path / "one", tmp_path / "two", tmp_path / "three"
    for folder in (one, two, three):
        folder.mkdir()
    (one / "a").write_bytes(b"1\0b\x002")
    (two / "a").write_bytes(b"1")
    (two / "b").write_bytes(b"2")
    (three / os.fsdecode(b"\xff.html")).write_bytes(b"x")
    assert templates_identity([one]) != templates_identity([two])
    assert templates_identity([three]) != templates_identity([tmp_path / "none"])
    joined, first, second = tmp_path / "joined", tmp_path / "first", tmp_path / "second"
    for folder in (joined, first, second):
        folder.mkdir()
    (joined / "a").write_bytes(b"1b2")  # (a name and its bytes run on into the next file's: "a" "1" "b" "2")
    assert templates_identity([joined]) != templates_identity([two])
    (first / "a").write_bytes(b"1")  # (the same files, in the project's folder and the built-in one in turn)
    (second / "b").write_bytes(b"2")
    assert templates_identity([first, second]) != templates_identity([two, tmp_path / "empty"])
    before = templates_identity([two])
    (two / "b").write_bytes(b"3")  # (an edit: the same names, other bytes)
    assert templates_identity([two]) != before
    (two / "b").write_bytes(b"2")
    (two / "b").rename(two / "c")  # (a rename: the same bytes under another name)
    assert templates_identity([two]) != before
    (two / "feed.xml").symlink_to("a")  # (a link inside the folder is a template like the file it names)
    linked = templates_identity([two])
    (two / "feed.xml").unlink()
    (two / "feed.xml").symlink_to("c")
    assert templates_identity([two]) != linked
    (two / "assets").mkdir()  # (files in folders count as well: the stylesheet a site copies, a partial)
    (two / "assets" / "site.css").write_text("body {}")
    before = templates_identity([two])
    (two / "assets" / "site.css").write_text("body { color: red }")
    assert templates_identity([two]) != before
    before = templates_identity([two])
    for hidden in (".git", "__pycache__"):  # (what a version control system or Python keeps there is no template)
        (two / hidden).mkdir()
        (two / hidden / "index").write_text("anything")
    (two / ".home.html.swp").write_text("an editor's")  # (nor is an editor's file, which the watcher passes over)
    (two / "elsewhere").symlink_to(one, target_is_directory=True)  # (a link to a folder is not entered)
    assert templates_identity([two]) == before


def test_a_templates_folder_nested_past_any_recursion_is_read_to_its_depth(tmp_path, nest_deep):
    """Folders a thousand deep in the templates folder (a pull request's) were a RecursionError that stopped
    every build; a file at the bottom counts like any other."""
    from site_builder.rendering import templates_identity
    deepest = nest_deep(tmp_path / "templates")
    (deepest / "partial.html").write_text("one")
    before = templates_identity([tmp_path / "templates"])
    (deepest / "partial.html").write_text("two")
    assert templates_identity([tmp_path / "templates"]) != before


def test_a_template_saved_with_a_byte_order_mark_renders_without_it(tmp_path):
    """Some editors (Notepad) begin a UTF-8 file with a byte-order mark: it is no text of the template, and in a
    page it would come before the doctype, or in the middle of a page that includes the template."""
    (tmp_path / "home.html").write_bytes(b"\xef\xbb\xbf<!DOCTYPE html>{% include 'part.html' %}")
    (tmp_path / "part.html").write_bytes(b"\xef\xbb\xbf<p>{{ 6 * 7 }}</p>")
    renderer = SiteRenderer(SiteConfig(), [tmp_path], load_trust_set())
    assert renderer.render("home.html") == b"<!DOCTYPE html><p>42</p>"


def test_a_template_or_settings_file_that_is_no_regular_file_is_never_read(tmp_path):
    """A project may come from someone else (a pull request): a template, or site.toml, that is a link to
    /dev/zero (or a FIFO) would be read for ever.  The templates' identity leaves it out, a page that names it
    gets a template error naming it, and site.toml is a settings error."""
    import os

    import jinja2

    from site_builder.rendering import templates_identity
    from site_builder.settings import SettingsError, load_settings
    (tmp_path / "page.html").write_text("x")
    before = templates_identity([tmp_path])
    (tmp_path / "zero.html").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo.html")
    outside = tmp_path.parent / f"{tmp_path.name}-secret.txt"
    outside.write_text("a regular file, but not the project's")
    (tmp_path / "secret.html").symlink_to(outside)
    assert templates_identity([tmp_path]) == before
    renderer = SiteRenderer(SiteConfig(), [tmp_path], load_trust_set())
    for name in ("zero.html", "fifo.html"):
        with pytest.raises(jinja2.TemplateSyntaxError, match="not a regular file"):
            renderer.render(name)
    (tmp_path / "site.toml").symlink_to("/dev/zero")
    with pytest.raises(SettingsError, match="site.toml: a device, not a regular file"):
        load_settings(tmp_path / "site.toml")


def test_a_projects_asset_stands_in_for_the_builtin_one_of_its_name_and_hidden_files_and_folders_are_passed_over(
        tmp_path):
    """A project's ``templates/assets/style.css`` is the site's stylesheet (the first folder's file wins, as
    with templates); its dot files and subfolders are not assets, and are left without a warning."""
    assets = tmp_path / "templates" / "assets"
    (assets / "fonts").mkdir(parents=True)
    (assets / "style.css").write_text("body { color: teal }\n")
    (assets / "extra.js").write_text("// ours\n")
    (assets / ".DS_Store").write_bytes(b"\0")
    (assets / "fonts" / "a.woff2").write_bytes(b"\0")
    chosen, warnings = template_assets(template_dirs(tmp_path / "templates"))
    assert chosen["style.css"] == assets / "style.css" and chosen["extra.js"] == assets / "extra.js"
    assert chosen["copy.js"].parent.parent == template_dirs(None)[0]  # (the built-in ones it does not replace)
    assert ".DS_Store" not in chosen and "fonts" not in chosen and warnings == []


def test_an_asset_that_links_out_of_the_templates_folder_or_has_no_plain_name_is_not_copied(tmp_path):
    """A link planted in a project's assets (a pull request may bring one) would publish what it leads to, such as
    a key file beside the project: never copied, and said; nor a file whose name a static host would not serve."""
    secret = tmp_path / "deploy-key"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    assets = tmp_path / "templates" / "assets"
    assets.mkdir(parents=True)
    (assets / "key.txt").symlink_to(secret)
    (assets / "my style.css").write_text("body { color: teal }\n")
    (assets / "inside.css").write_text("p { margin: 0 }\n")
    (assets / "alias.css").symlink_to(assets / "inside.css")  # (a link within the folder is fine)
    chosen, warnings = template_assets(template_dirs(tmp_path / "templates"))
    assert "key.txt" not in chosen and "my style.css" not in chosen
    assert chosen["alias.css"] == assets / "alias.css" and chosen["inside.css"] == assets / "inside.css"
    assert warnings == ["templates/assets/key.txt: a link leading out of the templates folder, or not a regular file; "
                        "not copied",
                        "templates/assets/my style.css: not a plain file name a static host serves; not copied"]


@pytest.mark.parametrize("template, jobs, generated", [("home.html", 1, 0), ("paper.html", 1, 0),
                                                       ("paper.html", 2, PARALLEL_THRESHOLD)])
@pytest.mark.parametrize("broken, what", [("{{ no_such_name.title }}", "'no_such_name' is undefined"),
                                          ("{{ 1 / 0 }}", "ZeroDivisionError: division by zero"),
                                          ("{% for x in 5 %}{% endfor %}", "TypeError: 'int' object is not iterable")])
def test_a_template_that_fails_as_it_runs_is_named_by_its_file_and_line(tmp_path, template, jobs, generated, broken,
                                                                          what):
    """A mistake in a user's template (an undefined name, a division by zero, a loop over a number) shows only
    when a page renders, in the build's process or in a worker's: it is a template error naming the template's
    file and line, as a syntax error is (it said only "'no_such_name' is undefined", with no file, and the
    others stopped the build with a traceback)."""
    import jinja2

    from conftest import ROOT, both_keys, build_options, real_and_generated_bundles
    from site_builder.build import build
    from site_builder.rendering import describe_template_error

    real_and_generated_bundles(tmp_path / "bundles", generated)
    templates = tmp_path / "templates"
    templates.mkdir()
    text = (ROOT / "templates" / template).read_text().replace("{% block main %}", "{% block main %}\n" + broken, 1)
    (templates / template).write_text(text)
    line = text[:text.index(broken)].count("\n") + 1
    with pytest.raises(jinja2.TemplateError) as raised:
        build(build_options(tmp_path / "bundles", tmp_path / "site", both_keys(), templates=templates, jobs=jobs,
                            search=False))
    assert describe_template_error(raised.value) == f"{templates / template}:{line}: {what}"


def test_a_fault_in_a_helper_a_template_calls_is_the_builders_not_the_templates(tmp_path):
    """Only what a template's own code raises is a template error: a helper of the builder's that fails keeps its
    exception and traceback (a bug to report, not a line of the user's to fix)."""
    import jinja2

    (tmp_path / "page.html").write_text("{{ boom() }}")
    (tmp_path / "fine.html").write_text("{{ 1 // 0 }}")
    renderer = SiteRenderer(SiteConfig(), [tmp_path], load_trust_set())
    renderer.env.globals["boom"] = lambda: 1 // 0
    with pytest.raises(ZeroDivisionError):
        renderer.render("page.html")
    with pytest.raises(jinja2.TemplateRuntimeError, match="ZeroDivisionError"):
        renderer.render("fine.html")


def test_a_template_error_without_a_known_place_is_still_one_line():
    import jinja2

    from site_builder.rendering import describe_template_error

    assert describe_template_error(jinja2.UndefinedError("'x' is undefined\nmore")) == "template: 'x' is undefined"
    syntax = jinja2.TemplateSyntaxError("unexpected '}'", 3, name="home.html", filename="/t/home.html")
    assert describe_template_error(syntax) == "/t/home.html:3: unexpected '}'"
