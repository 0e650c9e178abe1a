"""The gather stage (stages/gather.py): every input file by its stat, files that cannot be bundles set aside with
a reason, and a fingerprint that changes whenever an input does."""

from __future__ import annotations

import os

import pytest

from conftest import both_keys, opts
from site_builder.build import build
from site_builder.report import BuildReport
from site_builder.stages.context import opened_context
from site_builder.stages.gather import gather


def gathered(options, scratch):
    with opened_context(options, scratch, BuildReport(), lambda: "pagefind 0") as ctx:
        return gather(ctx)


def edited_in_output(options, scratch):
    """The records the build's lookups (started with the build, made while it gathers) find edited."""
    with opened_context(options, scratch, BuildReport(), lambda: "pagefind 0") as ctx:
        gather(ctx)
        return ctx.mirrors.edited()


def test_every_bundle_file_is_found_in_path_order_and_what_cannot_be_one_set_aside(project, tmp_path):
    os.mkfifo(project / "bundles" / "pipe.json")
    (project / "bundles" / os.fsdecode(b"bad\xff.json")).write_bytes(b"{}")
    inputs = gathered(opts(project, project / "site", both_keys()), tmp_path)
    names = [f.rel for f in inputs.found]
    assert names == sorted(names) and len(names) == 10
    assert sorted((s.check, s.rel) for s in inputs.skipped) == [("file_name", "bad\\xff.json"),
                                                                 ("file_type", "pipe.json")]


def test_the_fingerprint_follows_every_inputs_stat(project, tmp_path):
    options = opts(project, project / "site", both_keys())
    first = gathered(options, tmp_path).fingerprint
    assert gathered(options, tmp_path).fingerprint == first
    victim = project / "bundles" / "gen0.json"
    stat = victim.stat()
    os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert gathered(options, tmp_path).fingerprint != first


def test_a_mirrored_bundle_edited_in_the_output_is_noticed(project, tmp_path):
    options = opts(project, project / "site", both_keys())
    build(options)
    assert edited_in_output(options, tmp_path) == set()
    mirrored = sorted((project / "site" / "pith").glob("*/bundle.json"))[0]
    mirrored.write_bytes(mirrored.read_bytes().replace(b"}", b" }", 1))
    assert edited_in_output(options, tmp_path) == {mirrored.parent.name}


def test_a_mirrored_bundle_removed_or_replaced_counts_as_edited_and_one_only_touched_does_not(project, tmp_path):
    options = opts(project, project / "site", both_keys())
    build(options)
    first, second, third = sorted((project / "site" / "pith").glob("*/bundle.json"))[:3]
    first.unlink()
    second.unlink()
    second.symlink_to(third)  # (the same verified bytes, but not the file the build left there)
    os.utime(third, ns=(0, 1_000_000_000))  # changed by stat only: hashed again, and the bytes are the same
    assert edited_in_output(options, tmp_path) == {first.parent.name, second.parent.name}


def test_without_the_pith_folder_every_mirrored_bundle_counts_as_edited(project, tmp_path):
    options = opts(project, project / "site", both_keys())
    build(options)
    published = {p.parent.name for p in (project / "site" / "pith").glob("*/bundle.json")}
    (project / "site" / "pith").rename(project / "site" / "elsewhere")
    assert edited_in_output(options, tmp_path) == published


def test_a_static_file_whose_name_is_no_plain_text_is_refused_and_the_build_goes_on(project):
    """A static file's name may hold bytes that are not UTF-8 or a newline (copied from another system): it is
    refused with a warning that shows the name escaped, and the build, whose report (JSON in UTF-8) holds the
    warning, publishes the rest (such a name stopped the build with a UnicodeEncodeError)."""
    static = project / "static"
    (static / os.fsdecode(b"\xfe-folder")).mkdir(parents=True)
    for name in (b"\xff-latin1.txt", b"new\nline.txt", b"\xfe-folder/inside.txt", b"kept.txt"):
        (static / os.fsdecode(name)).write_bytes(b"x")
    report = build(opts(project, project / "site", both_keys(), static_dir=static))
    refused = "not a plain file name a static host serves; not copied"
    assert sorted(report.warnings) == [f"static/\\xfe-folder/inside.txt: {refused}",
                                       f"static/\\xff-latin1.txt: {refused}", f"static/new\\nline.txt: {refused}"]
    assert (project / "site" / "kept.txt").read_bytes() == b"x"
    assert f"static/\\\\xff-latin1.txt: {refused}" in (project / "site" / "verification.json").read_text("utf-8")


def test_a_template_asset_whose_name_is_no_plain_file_name_is_refused_and_the_build_goes_on(project):
    """``templates/assets/`` is copied to ``/assets/``: a file there named with a space or bytes that are not
    UTF-8 is left out with a warning (it stopped the build with a ValueError), and the others are copied."""
    assets = project / "templates" / "assets"
    assets.mkdir()
    for name in (b"my logo.png", b"\xfe.css", b"logo.png"):
        (assets / os.fsdecode(name)).write_bytes(b"x")
    (project / "templates" / os.fsdecode(b"\xff.html")).write_bytes(b"unused")  # (a template no page names)
    report = build(opts(project, project / "site", both_keys()))
    refused = "not a plain file name a static host serves; not copied"
    assert sorted(report.warnings) == [f"templates/assets/\\xfe.css: {refused}",
                                       f"templates/assets/my logo.png: {refused}"]
    assert (project / "site" / "assets" / "logo.png").read_bytes() == b"x"
    assert (project / "site" / "assets" / "style.css").is_file()  # (the built-in assets too)


def test_a_template_or_asset_linking_out_of_the_templates_folder_publishes_nothing(project, monkeypatch):
    """A project's templates may come from someone else (a pull request): an asset that is a link to
    /proc/self/environ published the build's environment, secrets included, at /assets/.  Such an asset is left
    out with a warning, a template that is such a link is a template error, and a link inside the folder works."""
    import jinja2

    monkeypatch.setenv("PLANTED_SECRET", "hunter2-secret")
    templates = project / "templates"
    (templates / "assets").mkdir()
    (templates / "assets" / "env.txt").symlink_to("/proc/self/environ")
    (templates / "assets" / "mine.css").write_text("body{}")
    (templates / "assets" / "alias.css").symlink_to("mine.css")
    report = build(opts(project, project / "site", both_keys()))
    assert report.warnings == ["templates/assets/env.txt: a link leading out of the templates folder, or not a "
                               "regular file; not copied"]
    assert not (project / "site" / "assets" / "env.txt").exists()
    assert (project / "site" / "assets" / "alias.css").read_text() == "body{}"
    assert not [p for p in (project / "site").rglob("*") if p.is_file() and b"hunter2-secret" in p.read_bytes()]
    (templates / "paper.html").symlink_to("/proc/self/environ")
    with pytest.raises(jinja2.TemplateSyntaxError, match="a link leading out of the templates folder"):
        build(opts(project, project / "other", both_keys()))


def test_an_about_page_or_static_folder_the_settings_name_that_is_not_there_is_warned_of(project, tmp_path):
    """``about_file`` or ``static_dir`` set in site.toml to something that is not there (a typo) is a WARNING,
    not a site without it in silence; the defaults, which a project need not have, are not warned of."""
    from site_builder.settings import SiteConfig, project_paths

    def warnings(settings: SiteConfig) -> list[str]:
        about, static = project_paths(project / "site.toml", settings)
        return gathered(opts(project, project / "site", both_keys(), config=settings, about_file=about,
                             static_dir=static), tmp_path).warnings

    assert warnings(SiteConfig()) == []
    typos = SiteConfig(about_file="pages/abuot.md", static_dir="publc")
    assert warnings(typos) == [
        "about_file = 'pages/abuot.md' in the settings names no file; the site has no about page",
        "static_dir = 'publc' in the settings names no folder; no static file is copied"]
    (project / "pages").mkdir()
    (project / "pages" / "abuot.md").write_text("# About\n")
    (project / "publc").mkdir()
    assert warnings(typos) == []
    (project / "pages" / "abuot.md").unlink()
    about, static = project_paths(project / "site.toml", typos)
    report = build(opts(project, project / "site", both_keys(), config=typos, about_file=about, static_dir=static))
    assert report.warnings == ["about_file = 'pages/abuot.md' in the settings names no file; the site has no about "
                               "page"]  # (said by the build, as the command line and serve print it)


def test_a_bundles_folder_with_no_bundle_file_is_warned_of(project, tmp_path):
    """A wrong ``--bundles`` (or a pull that wrote nothing) would replace the site with one without papers in
    silence: the build says so, once; a folder whose files are all set aside has its REJECTED lines instead."""
    for f in (project / "bundles").iterdir():
        f.unlink()
    (project / "bundles" / "notes.txt").write_text("not a bundle\n")
    (project / "bundles" / ".hidden.json").write_text("{}")
    report = build(opts(project, project / "site", both_keys()))
    assert report.warnings == [f"{project / 'bundles'}: no bundle files (*.json) in it or its subfolders; the site "
                               f"lists no papers"]
    (project / "bundles" / "broken.json").write_text("{")
    assert gathered(opts(project, project / "site", both_keys()), tmp_path).warnings == []
    (project / "bundles" / "broken.json").unlink()
    os.mkfifo(project / "bundles" / "pipe.json")  # (set aside as the folder is listed: no file to read at all)
    assert gathered(opts(project, project / "site", both_keys()), tmp_path).warnings == []


def test_a_static_file_refused_after_a_build_is_warned_of_by_the_next(project):
    """A file put in the static folder where the site makes its own page (``index.html``, to override the home
    page) is not copied, so the static files the site takes are unchanged: the next build must still not take
    itself for a no-op, which would skip the warning and leave the report without it."""
    static = project / "static"
    static.mkdir()
    (static / "CNAME").write_text("mirror.example.org\n")
    build(opts(project, project / "site", both_keys(), static_dir=static))
    (static / "index.html").write_text("<p>my own home page</p>\n")
    report = build(opts(project, project / "site", both_keys(), static_dir=static))
    said = "static/index.html: the site makes this path itself (override a page with a template instead); not copied"
    assert report.changed and report.warnings == [said]
    assert said in (project / "site" / "verification.json").read_text("utf-8")


def test_the_fingerprint_follows_the_pagefind_that_makes_the_search_index(project, tmp_path):
    """A site's search shards must all be made by one Pagefind (the search page's reads the others' indexes):
    an upgraded one makes the next build no no-op."""
    options = opts(project, project / "site", both_keys(), search=True)

    def fingerprint(pagefind: str) -> str:
        with opened_context(options, tmp_path, BuildReport(), lambda: pagefind) as ctx:
            return gather(ctx).fingerprint
    assert fingerprint("pagefind 1.3.0") == fingerprint("pagefind 1.3.0") != fingerprint("pagefind 1.4.0")


def test_static_files_whose_names_differ_only_in_letter_case_are_one_file_copied(project):
    """A case-insensitive host serves one file for both names: the first is copied, the other refused by name."""
    static = project / "static"
    (static / "img").mkdir(parents=True)
    for name in ("LOGO.png", "Logo.png", "logo.png"):
        (static / "img" / name).write_bytes(name.encode())
    report = build(opts(project, project / "site", both_keys(), static_dir=static))
    assert report.warnings == [f"static/img/{name}: differs from img/LOGO.png only in letter case (one file on a "
                               f"case-insensitive host); not copied" for name in ("Logo.png", "logo.png")]
    assert [p.name for p in (project / "site" / "img").iterdir()] == ["LOGO.png"]
