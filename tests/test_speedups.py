"""The speed-ups (speedups.py) change no byte of output, and leave alone what they do not name."""

from __future__ import annotations

import jinja2
import orjson
import pytest

from generate import benchmark_key, make_bundle
from site_builder.inspection import inspect_bytes
from site_builder.keys import TrustSet, key_from_document
from site_builder.pages import paper_files
from site_builder.rendering import SiteRenderer, template_dirs
from site_builder.settings import SiteConfig
from site_builder.speedups import call_helpers_directly

TRUST = TrustSet((key_from_document(benchmark_key().document()),))


def record_files(direct_calls: bool = True, sitewide_once: bool = True) -> list[tuple[str, bytes]]:
    renderer = SiteRenderer(SiteConfig(base_url="https://m.example/sub/"), template_dirs(None), TRUST, True,
                            direct_calls=direct_calls, sitewide_once=sitewide_once)
    files = []
    for i in range(3):
        raw = make_bundle(i)
        inspection = inspect_bytes(f"{i}.json", raw, TRUST)
        files += list(paper_files(renderer, raw, orjson.loads(raw), inspection.summary, inspection.checks,
                                  inspection.warnings, 31, ()))
        files.append(("row", renderer.paper_row(inspection.summary)))
    return files


def test_direct_helper_calls_render_the_same_bytes():
    assert record_files(direct_calls=True) == record_files(direct_calls=False)


def test_sitewide_partials_rendered_once_give_the_same_bytes_as_on_every_page():
    assert record_files(sitewide_once=True) == record_files(sitewide_once=False)


def test_a_sitewide_partial_sees_the_sites_globals_and_no_pages_values(tmp_path):
    """Rendered once and shown on every page, a partial must not show one page's data on another: it sees only
    the globals, and one naming a page's value fails to render instead of showing the first page's."""
    (tmp_path / "_footer.html").write_text("{{ site.title }}: {{ p.title }}")
    (tmp_path / "page.html").write_text("{{ p.title }} | {{ sitewide('_footer.html') }}")
    renderer = SiteRenderer(SiteConfig(title="Mirror"), template_dirs(tmp_path), TRUST, True)
    with pytest.raises(jinja2.UndefinedError, match="'p' is undefined"):
        renderer.render_text("page.html", p={"title": "First"})
    (tmp_path / "_header.html").write_text("<h1>{{ site.title }}</h1> {{ url('papers/') }}")
    (tmp_path / "headed.html").write_text("{{ sitewide('_header.html') }}")
    for once in (True, False):
        renderer = SiteRenderer(SiteConfig(title="A & B"), template_dirs(tmp_path), TRUST, True, sitewide_once=once)
        sitewide = renderer.env.globals["sitewide"]
        assert sitewide("_header.html") == "<h1>A &amp; B</h1> /papers/"
        assert renderer.render_text("headed.html") == "<h1>A &amp; B</h1> /papers/"  # (its markup not escaped again)
        assert (sitewide("_header.html") is sitewide("_header.html")) is once  # (kept, or rendered each time)


def test_only_the_named_helpers_skip_jinjas_look_over():
    env = jinja2.Environment()
    env.globals["plain"] = lambda x: x * 2
    env.globals["wants_context"] = jinja2.pass_context(lambda ctx, x: f"{ctx['who']}:{x}")
    call_helpers_directly(env, ["plain"])
    template = env.from_string("{% for i in [1] %}{{ plain(i) }} {{ wants_context(i) }}{% endfor %}")
    assert template.render(who="me") == "2 me:1"
