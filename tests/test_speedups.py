"""The speed-ups (speedups.py) change no byte of output, and leave alone what they do not name."""

from __future__ import annotations

import jinja2
import orjson

from generate import benchmark_key, make_bundle
from site_builder.inspection import inspect_bytes
from site_builder.keys import TrustSet, key_from_document
from site_builder.pages import paper_files
from site_builder.rendering import SiteRenderer, template_dirs
from site_builder.settings import SiteConfig
from site_builder.speedups import call_helpers_directly

TRUST = TrustSet((key_from_document(benchmark_key().document()),))


def record_files(direct_calls: bool) -> list[tuple[str, bytes]]:
    renderer = SiteRenderer(SiteConfig(base_url="https://m.example/sub/"), template_dirs(None), TRUST, True,
                            direct_calls=direct_calls)
    files = []
    for i in range(3):
        raw = make_bundle(i)
        inspection = inspect_bytes(f"{i}.json", raw, TRUST)
        files += list(paper_files(renderer, raw, orjson.loads(raw), inspection.summary, inspection.checks,
                                  inspection.warnings, 31, ()))
        files.append(("row", renderer.paper_row(inspection.summary)))
    return files


def test_direct_helper_calls_render_the_same_bytes():
    assert record_files(True) == record_files(False)


def test_only_the_named_helpers_skip_jinjas_look_over():
    env = jinja2.Environment()
    env.globals["plain"] = lambda x: x * 2
    env.globals["wants_context"] = jinja2.pass_context(lambda ctx, x: f"{ctx['who']}:{x}")
    call_helpers_directly(env, ["plain"])
    template = env.from_string("{% for i in [1] %}{{ plain(i) }} {{ wants_context(i) }}{% endfor %}")
    assert template.render(who="me") == "2 me:1"
