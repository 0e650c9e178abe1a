"""Which templates each unit uses (template_uses.py): read from the templates' syntax, so that an edited template
renders again every page that uses it, and no other."""

from __future__ import annotations

import json
import sqlite3

import jinja2
import pytest

from conftest import ROOT, both_keys, cache_document, edit_visibly, opts, plant_document, planned, tree
from generate import make_bundle
from site_builder.build import build, default_cache_dir
from site_builder.incremental import IncrementalStore
from site_builder.records import paper_text
from site_builder.settings import SiteConfig
from site_builder.stages.render import words_in
from site_builder.writing import StagingTree
from site_builder.pages import RECORD_TEMPLATES, collection_units, paper_files
from site_builder.rendering import HELPER_TEMPLATES, SiteRenderer, TemplateLoader, template_dirs, templates_identity
from site_builder.template_uses import EVERY_TEMPLATE, TemplateUses, references

BUILT_IN = sorted(str(p.relative_to(ROOT / "templates")) for p in (ROOT / "templates").glob("*") if p.is_file())


def refs(source: str) -> list[str] | None:
    return references(jinja2.Environment(), source, HELPER_TEMPLATES)


def test_a_template_uses_what_it_extends_includes_imports_and_asks_its_helpers_for():
    assert refs('{% extends "base.html" %}{% block main %}{% include "a.html" %}{% endblock %}') == [
        "a.html", "base.html"]
    assert refs('{% import "m.html" as m %}{% from "n.html" import x %}{% include ["p.html", "q.html"] %}') == [
        "m.html", "n.html", "p.html", "q.html"]
    assert refs('{% if never %}{% include "in-a-branch.html" %}{% endif %}') == ["in-a-branch.html"]
    assert refs('{{ sitewide("_footer.html") }}') == ["_footer.html"]
    assert refs("{{ paper_rows(papers) }}{{ check_rows(checks) }}") == ["_check_rows.html", "_paper_row.html"]
    assert refs("<p>{{ title }}</p>") == []


@pytest.mark.parametrize("source", [
    "{% include name %}", "{% extends layout %}", '{% include "a" ~ ".html" %}', "{% import name as m %}",
    "{{ sitewide(name) }}", '{{ sitewide("a.html" ~ x) }}', "{% set s = sitewide %}{{ s('a.html') }}",
    "{{ sitewide(*names) }}", "{{ sitewide(1) }}", '{{ sitewide("a.html", "b.html") }}',
    '{{ sitewide("a.html", x=1) }}', "{% if %}",
])
def test_a_template_that_names_one_by_an_expression_or_does_not_parse_may_use_any(source):
    assert refs(source) is None


def uses_of(folder, known=None) -> TemplateUses:
    dirs = template_dirs(folder)
    env = jinja2.Environment(loader=TemplateLoader([str(d) for d in dirs]))
    return TemplateUses(env, templates_identity(dirs), HELPER_TEMPLATES, {} if known is None else known)


def test_a_units_templates_are_what_its_roots_use_with_the_users_over_the_built_in_ones(tmp_path):
    uses = uses_of(tmp_path)
    used = uses.uses(RECORD_TEMPLATES)
    assert {"paper.html", "base.html", "badge.svg", "redirect.html", "_check_rows.html", "_site_footer.html",
            "_pinned_keys_checked.html"} <= set(used) and "listing.html" not in used
    before = uses.digest(RECORD_TEMPLATES)
    assert uses_of(tmp_path).digest(RECORD_TEMPLATES) == before != uses.digest(("listing.html",))
    (tmp_path / "_site_footer.html").write_text("<footer>mine</footer>")  # (the user's, over the built-in one)
    assert uses_of(tmp_path).digest(RECORD_TEMPLATES) != before
    assert uses_of(tmp_path).digest(("feed.xml",)) == uses.digest(("feed.xml",))


def test_a_template_in_a_subfolder_is_found_by_its_path(tmp_path):
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "note.html").write_text("<p>note</p>")
    (tmp_path / "page.html").write_text('{% include "parts/note.html" %}')
    before = uses_of(tmp_path)
    assert set(before.uses(("page.html",))) == {"page.html", "parts/note.html"}
    (tmp_path / "parts" / "note.html").write_text("<p>another note</p>")
    assert uses_of(tmp_path).digest(("page.html",)) != before.digest(("page.html",))


def test_templates_that_include_each_other_are_each_counted_once(tmp_path):
    """A template may include itself, or one that includes it back (a tree of comments, say): legal in Jinja,
    and its units' templates are still found, each once."""
    (tmp_path / "tree.html").write_text('{% if node.children %}{% include "branch.html" %}{% endif %}')
    (tmp_path / "branch.html").write_text('{% for node in node.children %}{% include "tree.html" %}{% endfor %}')
    (tmp_path / "self.html").write_text('{% if depth %}{% include "self.html" %}{% endif %}')
    uses = uses_of(tmp_path)
    assert set(uses.uses(("tree.html",))) == {"tree.html", "branch.html"}
    assert set(uses.uses(("self.html",))) == {"self.html"}


def test_a_template_not_there_is_part_of_the_key_and_its_coming_changes_it(tmp_path):
    (tmp_path / "page.html").write_text('{% include "optional.html" ignore missing %}')
    before = uses_of(tmp_path).digest(("page.html",))
    (tmp_path / "optional.html").write_text("now here")
    assert uses_of(tmp_path).digest(("page.html",)) != before


def test_what_is_not_known_keys_on_every_template(tmp_path):
    (tmp_path / "page.html").write_text("{% include chosen %}")
    (tmp_path / "broken.html").write_text("{% if %}")
    uses = uses_of(tmp_path)
    assert uses.digest(("page.html",)) == uses.digest(("broken.html",)) == uses.digest(EVERY_TEMPLATE) \
        == uses.identity == templates_identity(template_dirs(tmp_path))
    assert uses.uses(("page.html",)) is None


def test_references_are_parsed_once_per_source_and_kept_for_the_next_build(tmp_path):
    uses = uses_of(tmp_path)
    uses.digest(RECORD_TEMPLATES)
    assert uses.learned and uses.to_keep()
    kept = uses.to_keep()
    again = uses_of(tmp_path, dict(kept))
    assert again.digest(RECORD_TEMPLATES) == uses.digest(RECORD_TEMPLATES) and not again.learned
    # (what the cache says a source uses is what is used: it holds only entries this user's builder tagged)
    told = uses_of(tmp_path, {sha: [] for sha in kept})
    assert set(told.uses(RECORD_TEMPLATES)) == set(RECORD_TEMPLATES) and not told.learned
    # (a template edited since: its new source is kept, its old one no longer)
    (tmp_path / "_site_footer.html").write_text("<footer>mine</footer>")
    edited = uses_of(tmp_path, dict(kept))
    edited.digest(RECORD_TEMPLATES)
    assert len(edited.to_keep()) == len(kept) and len(set(edited.to_keep()) - set(kept)) == 1


class Recording(TemplateLoader):
    """The templates loader, noting every template a render loads."""

    loaded: set[str] = set()

    def get_source(self, environment, template):
        self.loaded.add(template)
        return super().get_source(environment, template)


def test_every_template_a_unit_renders_is_one_its_templates_use(project):
    """The templates a unit names, with those they use, are every one its files are rendered from: a unit that
    renders another without naming it would keep its old pages after that one's edit.  A record's files and every
    unit of the collection rendered, each by a renderer of its own (none kept from another render), through a
    loader that notes what it loads."""
    trust, out = both_keys(), project / "site"
    for name, record in (("same-a.json", None), ("same-b.json", 77)):  # (one arXiv id and version: a shared address)
        (project / "bundles" / name).write_bytes(make_bundle(40, record=record, version=1))
    config = SiteConfig(base_url="https://mirror.example/")
    build(opts(project, out, trust, config=config))
    site = planned(opts(project, out, trust, config=config), project / "scratch")
    uses = uses_of(project / "templates")

    def rendered(render) -> set[str]:
        renderer = SiteRenderer(config, template_dirs(project / "templates"), trust, False)
        renderer.env.loader = Recording([str(d) for d in template_dirs(project / "templates")])
        renderer.env.loader.loaded = set()
        renderer.read_words = words_in(StagingTree(out, existing=True), 10**7)
        render(renderer)
        return renderer.env.loader.loaded

    pid = next(pid for pid in site.selection.published if site.addresses.per_record.get(pid))  # (with redirects)
    inspection = site.selection.published[pid].inspection
    raw = (out / "pith" / pid / "bundle.json").read_bytes()
    bundle = json.loads(raw)
    summary = inspection.summary.with_words(paper_text(bundle))
    loaded = rendered(lambda r: list(paper_files(r, raw, bundle, summary, inspection.checks, inspection.warnings,
                                                 site.addresses.per_record[pid])))
    assert {"paper.html", "redirect.html", "_check_rows.html"} <= loaded <= set(uses.uses(RECORD_TEMPLATES))

    def units(renderer):
        return collection_units(renderer, site.catalog, site.addresses.shared, trust, None, "# About",
                                IncrementalStore(keeps=False))
    names = [unit.name for unit in units(SiteRenderer(config, template_dirs(None), trust, False))]
    assert {"listing", "feed", "shared", "groups", "sitemap", "static", "manifest"} <= {n.split(":")[0] for n in names}
    for name in names:
        def render(renderer, name=name):
            next(unit for unit in units(renderer) if unit.name == name).render()
        loaded = rendered(render)
        unit = next(unit for unit in units(site.renderer) if unit.name == name)
        if unit.templates is not EVERY_TEMPLATE:
            assert loaded <= set(uses.uses(unit.templates)), name
            assert loaded or not unit.templates, name  # (the loader sees them: the check can fail)


@pytest.mark.slow
@pytest.mark.parametrize("template", BUILT_IN)
def test_an_edit_of_any_template_gives_the_site_a_clean_build_gives(project, template):
    """Each built-in template edited where its pages show it: the incremental build, which renders again only the
    units that use it, equals a clean build of the edited templates, and the edit shows."""
    trust = both_keys()
    out, clean = project / "site", project / "clean"
    config = SiteConfig(base_url="https://mirror.example/")  # (with sitemaps)
    build(opts(project, out, trust, config=config))
    before = tree(out)
    edit_visibly(project, template)
    build(opts(project, out, trust, config=config))
    build(opts(project, clean, trust, config=config, use_cache=False))
    after = tree(out)
    assert after == tree(clean)
    assert after != before


def test_what_the_cache_says_templates_use_counts_only_under_this_users_tag(project):
    """The cache keeps what each template uses between builds; a document saying the record's templates use none
    (so that an edit of the layout would keep every record's old page) counts only with this user's tag, which
    only this user's builder makes: a planted one counts for nothing, and the edit shows everywhere."""
    trust, out = both_keys(), project / "site"
    build(opts(project, out, trust))
    db = sqlite3.connect(default_cache_dir(out) / "cache.sqlite")
    genuine, _ = cache_document(db, "template_references")
    assert genuine["references"]  # (kept by the first build)
    plant_document(db, "template_references", {**genuine, "references": {sha: [] for sha in genuine["references"]}},
                   None)
    db.commit()
    db.close()
    edit_visibly(project, "base.html")
    build(opts(project, out, trust))
    build(opts(project, project / "clean", trust, use_cache=False))
    assert tree(out) == tree(project / "clean")
