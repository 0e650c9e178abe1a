"""What every stage shares (stages/context.py): a build key naming all the output depends on besides the
inputs, and a context that holds the output's lock for the build's length."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import both_keys, opts
from site_builder.build import build
from site_builder.keys import load_trust_set
from site_builder.rendering import template_dirs
from site_builder.report import BuildReport
from site_builder.settings import SiteConfig
from site_builder.stages.context import build_key_of, digest_of, opened_context
from site_builder.writing import OutputError


def test_the_build_key_names_templates_settings_keys_about_page_and_search(project):
    options = opts(project, project / "site", both_keys())
    dirs = template_dirs(options.templates)
    base = build_key_of(options, dirs, None)
    assert build_key_of(options, template_dirs(options.templates), None) == base
    assert build_key_of(replace(options, config=SiteConfig(title="Another")), dirs, None) != base
    assert build_key_of(replace(options, trust=load_trust_set()), dirs, None) != base
    assert build_key_of(options, dirs, "# About") != base
    assert build_key_of(replace(options, search=True), dirs, None) != base
    (project / "templates" / "home.html").write_text("{% extends 'base.html' %}")
    assert build_key_of(options, template_dirs(options.templates), None) != base


def test_the_source_date_is_part_of_the_build_key(project, monkeypatch):
    options = opts(project, project / "site", both_keys())
    dirs = template_dirs(options.templates)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    first = build_key_of(options, dirs, None)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000001")
    assert build_key_of(options, dirs, None) != first


def test_digests_of_parts_are_unambiguous():
    assert digest_of("ab", "c") != digest_of("a", "bc") and digest_of("a", b"b") == digest_of("a", "b")


def test_the_context_holds_the_outputs_lock_until_it_is_left(project, tmp_path):
    options = opts(project, project / "site", both_keys())
    with opened_context(options, tmp_path, BuildReport(), lambda: "pagefind 0") as ctx:
        assert ctx.indexer is None and not ctx.serving and not ctx.store.keeps
        with pytest.raises(OutputError, match="another site-builder build is writing this output"):
            with opened_context(options, tmp_path, BuildReport(), lambda: "pagefind 0"):
                pass
    with opened_context(replace(options, search=True), tmp_path, BuildReport(), lambda: "pagefind 0") as ctx:
        assert ctx.indexer == "pagefind 0"  # (asked only when the build makes search indexes)


def test_an_output_that_holds_the_bundles_is_refused(project, tmp_path):
    build(opts(project, project / "site", both_keys()))
    (project / "bundles").rename(project / "site" / "bundles")
    options = replace(opts(project, project / "site", both_keys()), bundles=project / "site" / "bundles")
    with pytest.raises(OutputError, match="must not contain the bundles folder"):
        with opened_context(options, tmp_path, BuildReport(), lambda: "pagefind 0"):
            pass
