"""Where a mirror really runs, a careless or hostile input costs nothing: a folder that is not a site is never
replaced, names that are not UTF-8 or that hold terminal controls are reported (escaped), not crashed on or
printed raw, and serve's base URL cannot inject script."""

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys

import pytest

from generate import make_bundle
from linkcheck import broken_links
from site_builder.build import build
from site_builder.mirrors import mirror_signatures
from site_builder.search_index import SEARCH_STAGE
from site_builder.serving import live_reload_tag
from site_builder.stages.context import default_cache_dir
from site_builder.settings import SettingsError, normalize_base_url
from site_builder.terminal import printable
from site_builder.writing import is_builder_output

from conftest import (REAL_FILES, ROOT, both_keys, build_options, cache_document, opts, pairwise, plant_document,
                      real_and_generated_bundles, record_id, tree)

ROOT_KEY = ROOT / "site_builder" / "data" / "pith-signing-key.json"


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "site_builder", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.mark.parametrize("marker, ours", [
    (b'{"build_id": "' + b"a" * 64 + b'", "generator": "site-builder", "built_at": null}', True),
    (b'{"build_id": "' + b"a" * 64 + b'", "generator": "site-builder"}', True),
    (b'{"build_id": "' + b"a" * 64 + b'", "generator": "another-tool"}', False),
    (b'{"build_id": "' + b"a" * 64 + b'"}', False),
    (b'{"build_id": "' + b"a" * 64 + b'", "generator": "site-builder-fork"}', False)])
def test_a_site_is_this_builders_only_where_its_marker_names_this_builder(tmp_path, marker, ours):
    """Another tool's report may start with a build id too: only one that names site-builder as its generator
    makes the folder a site this builder may replace."""
    (tmp_path / "verification.json").write_bytes(marker)
    assert is_builder_output(tmp_path) == ours


@pytest.mark.parametrize("marker", [b'{"ok": true}\n', *(pytest.param(m, marks=pytest.mark.slow) for m in (
    None, b'{"build_id": "not hex", "generator": "site-builder"}',
    b'{"generator": "site-builder", "build_id": "' + b"a" * 64 + b'"}'))])
def test_a_folder_that_is_not_a_site_is_refused_and_left_as_it_was(bundles_dir, tmp_path, marker):
    """A project folder given as --output, holding its own verification.json (or none): one line, exit 2, and
    every file of it still there."""
    folder = tmp_path / "project"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "main.py").write_text("print('mine')\n")
    (folder / "NOTES.md").write_text("my notes\n")
    if marker is not None:
        (folder / "verification.json").write_bytes(marker)
    before = tree(folder)
    result = cli("build", "--bundles", bundles_dir, "--output", folder, "--no-search")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "was not made by site-builder" in lines[0] and "nothing was changed" in lines[0]
    assert tree(folder) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".project.")]


def test_an_output_folder_that_is_a_link_is_refused_and_left_as_it_was(bundles_dir, tmp_path):
    """The swap renames a new tree into the output's place, which would replace the link, not the site it leads
    to: one line, exit 2, and the link and the site behind it as they were."""
    site = tmp_path / "site"
    assert cli("build", "--bundles", bundles_dir, "--output", site, "--no-search").returncode == 0
    link = tmp_path / "public"
    link.symlink_to(site)
    before = tree(site)
    result = cli("build", "--bundles", bundles_dir, "--output", link, "--no-search")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is a symbolic link" in lines[0]
    assert link.is_symlink() and os.readlink(link) == str(site) and tree(site) == before


def test_a_site_the_builder_wrote_is_replaced(bundles_dir, tmp_path):
    out = tmp_path / "site"
    assert cli("build", "--bundles", bundles_dir, "--output", out, "--no-search").returncode == 0
    assert is_builder_output(out)
    (bundles_dir / REAL_FILES[0].name).unlink()
    again = cli("build", "--bundles", bundles_dir, "--output", out, "--no-search")
    assert again.returncode == 0, again.stderr
    assert "3 published" in again.stdout


def test_the_marker_must_be_a_regular_file(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    real = tmp_path / "real.json"
    real.write_bytes(b'{"build_id": "' + b"a" * 64 + b'", "generator": "site-builder", "x": 1}')
    (site / "verification.json").symlink_to(real)
    assert not is_builder_output(site)
    (site / "verification.json").unlink()
    shutil.copy(real, site / "verification.json")
    assert is_builder_output(site)


def test_a_marker_that_is_a_fifo_fed_the_builders_first_bytes_is_no_marker(bundles_dir, tmp_path):
    """A verification.json that is a FIFO (another program writing into it as the builder writes its report)
    makes its folder no site of the builder's: a build refuses the folder, and every file of it is left."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "NOTES.md").write_text("my notes\n")
    os.mkfifo(folder / "verification.json")
    feeder = os.open(folder / "verification.json", os.O_RDWR | os.O_NONBLOCK)  # (writes without waiting for a reader)
    try:
        own = b'{"build_id": "' + b"a" * 64 + b'", "generator": "site-builder", "x": 1}'
        os.write(feeder, own * 100)  # (each look at the folder reads some of them: enough for every look)
        assert not is_builder_output(folder)
        result = cli("build", "--bundles", bundles_dir, "--output", folder, "--no-search")
        assert result.returncode == 2 and "was not made by site-builder" in result.stderr
        assert (folder / "NOTES.md").read_text() == "my notes\n"
    finally:
        os.close(feeder)


def test_the_marker_counts_only_where_the_file_starts_as_the_builder_writes_it(tmp_path):
    """A project's own verification.json may quote a site's (a list of the builds it made, say): only a file that
    starts as the builder writes one makes its folder a site the builder may replace."""
    site = tmp_path / "site"
    site.mkdir()
    own = b'{"build_id": "' + b"a" * 64 + b'", "generator": "site-builder", "x": 1}'
    for quoted in (b"[" + own + b"]", b'{"builds": [' + own + b"]}", b" " + own):
        (site / "verification.json").write_bytes(quoted)
        assert not is_builder_output(site), quoted
    (site / "verification.json").write_bytes(own)
    assert is_builder_output(site)


def test_names_that_are_not_utf8_are_rejected_not_crashed_on(bundles_dir, tmp_path):
    """``bad\\xff.json`` (and a folder so named) crashed the build with a traceback and left no site."""
    (bundles_dir / os.fsdecode(b"bad\xff.json")).write_bytes(REAL_FILES[0].read_bytes())
    (bundles_dir / os.fsdecode(b"dir\xfe")).mkdir()
    shutil.copy(REAL_FILES[1], bundles_dir / os.fsdecode(b"dir\xfe") / "x.json")
    out = tmp_path / "site"
    result = cli("build", "--bundles", bundles_dir, "--output", out, "--no-search")
    assert result.returncode == 0, result.stderr
    assert "REJECTED bad\\xff.json: file_name: the name is not valid UTF-8" in result.stderr
    assert "REJECTED dir\\xfe: file_name: the name is not valid UTF-8" in result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads((out / "verification.json").read_bytes())
    assert {"bad\\xff.json", "dir\\xfe"} <= {f["path"] for f in report["files"]}
    assert "4 published, 2 rejected" in result.stdout
    verify = cli("verify", bundles_dir)
    assert "Traceback" not in verify.stderr


@pytest.mark.parametrize("name", ["evil\nOK pith:2099:FAKEFAKEFAKEFAKEFAKEFAKE00.json", *(
    pytest.param(name, marks=pytest.mark.slow) for name in ("clear\x1b[2J\x1b[H.json", "rtl\u202enosj.exe.json",
                                                           "bell\x07\x9b31m.json"))])
def test_names_that_could_act_on_a_terminal_are_printed_escaped(bundles_dir, tmp_path, name):
    """A file name with a newline could fake an ``OK pith:...`` line; escape codes could clear the screen."""
    (bundles_dir / name).write_text('{"a": 1, "a": 2}')
    for args in (["build", "--bundles", bundles_dir, "--output", tmp_path / "site", "--no-search", "--verbose"],
                 ["verify", bundles_dir]):
        result = cli(*args)
        printed = result.stdout + result.stderr
        for char in name:
            if not char.isprintable() and char != "\n":  # (a newline is checked by the lines printed)
                assert char not in printed, (args[0], repr(char))
        assert printable(name) in printed
        assert not any(line.startswith("OK pith:2099") for line in printed.splitlines())


@pytest.mark.parametrize("base", ['/x"><script>alert(1)</script>/', "/a b/", "/x<y/", "https://e.example/\x00/"])
def test_a_base_url_that_could_break_out_of_an_attribute_is_refused(base):
    with pytest.raises(SettingsError, match="must not contain"):
        normalize_base_url(base)


def test_serve_refuses_such_a_base_url_in_one_line(bundles_dir, tmp_path):
    result = subprocess.run([sys.executable, "-m", "site_builder", "serve", "--bundles", bundles_dir, "--output",
                             tmp_path / "site", "--port", "0", "--no-search",
                             "--base-url", '/m"><script>window.pwned=1</script>/'],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "must not contain" in result.stderr


def test_the_live_reload_tag_escapes_its_attributes():
    """Even a base path that got past the settings cannot end the attribute: serve writes it escaped."""
    tag = live_reload_tag('/m"><script>alert(1)</script>/').decode()
    assert tag.count("<script") == 1 and "&quot;&gt;&lt;script&gt;" in tag
    assert live_reload_tag("/mirror/") == (b'<script src="/mirror/__site_builder__/live.js" '
                                           b'data-events="/mirror/__site_builder__/events"></script>')


@pytest.mark.parametrize("category", ["index.html", "cs.ai", "CS.AI", "page", "feed.xml", "astro-ph.ga",
                                      "physics.Optics", "made-up.XX", "cond-mat." + "a" * 32])
def test_a_validly_signed_category_that_is_no_arxiv_category_is_rejected_and_the_rest_builds(tmp_path, category):
    """A category becomes a folder (category/<cat>/): ``index.html`` made every build fail with "File exists",
    and ``cs.ai`` beside ``cs.AI`` collides on a case-insensitive host.  Only arXiv's spelling passes."""
    from site_builder.build import BuildOptions, build
    from site_builder.keys import load_trust_set
    from signing import TestKey, sign_bundle, to_bytes
    key = TestKey()
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    for p in REAL_FILES:
        shutil.copy(p, bundles / p.name)
    bad = json.loads(REAL_FILES[0].read_bytes())
    bad["canonical_record"]["metadata"]["cross_cats_sorted"] = [category]
    (bundles / "odd-category.json").write_bytes(to_bytes(sign_bundle(bad, key)))
    trust = load_trust_set([ROOT_KEY, key.write(tmp_path / "test-key.json")])
    report = build(BuildOptions(bundles=bundles, output=tmp_path / "site", trust=trust, search=False))
    rejected = {o.inspection.rel: o.inspection.check for o in report.rejected}
    assert rejected == {"odd-category.json": "identifiers"}
    assert report.count("published") == len(REAL_FILES)
    assert not (tmp_path / "site" / "category" / category).is_dir()  # (category/index.html is the site's own page)


def test_static_files_that_shadow_the_site_or_each_other_in_another_case_are_refused(bundles_dir, tmp_path):
    """On a case-insensitive host (GitHub Pages' CDN is not, but S3 behind some proxies, macOS and Windows
    hosts are) PITH/<ID>/bundle.json is pith/<ID>/bundle.json: a static file there could stand in for a verified
    record.  Two static files that differ only in case are one file there: the second is refused."""
    from site_builder.build import BuildOptions, build
    from site_builder.keys import load_trust_set
    pid = record_id(REAL_FILES[0])
    static = tmp_path / "static"
    shadows = [f"PITH/{pid}/bundle.json", f".well-known/Pith/{pid}/bundle.json", "Index.html", "SiteMap.xml",
               "Sitemap-3.xml", "Verification.JSON"]  # (sitemap-<n>.xml: the parts of a sitemap over 50,000 pages)
    for rel in [*shadows, "img/Logo.png", "img/logo.png", "CNAME", "sitemaps/more.xml"]:
        (static / rel).parent.mkdir(parents=True, exist_ok=True)
        (static / rel).write_bytes(b'{"forged": true}')
    out = tmp_path / "site"
    report = build(BuildOptions(bundles=bundles_dir, output=out, trust=load_trust_set(), search=False,
                                static_dir=static))
    for rel in shadows:
        assert not (out / rel).exists(), rel
        assert any(w.startswith(f"static/{rel}: the site makes this path itself") for w in report.warnings), rel
    assert (out / "img" / "Logo.png").exists() and not (out / "img" / "logo.png").exists()
    assert "static/img/logo.png: differs from img/Logo.png only in letter case (one file on a case-insensitive " \
           "host); not copied" in report.warnings
    assert (out / "CNAME").exists() and (out / "sitemaps" / "more.xml").exists()


def _builds(bundles_dir, out, **fixed):
    """Builds of *bundles_dir* into *out* (or the output named) with the pinned keys and no search index."""
    from site_builder.build import build
    from site_builder.keys import load_trust_set

    def run(output=out, **kw):
        return build(build_options(bundles_dir, output, load_trust_set(), search=False, **fixed, **kw))
    return run


def _tamper(path, how: str) -> None:
    genuine = path.read_bytes()
    if how == "in-place":
        with open(path, "r+b") as f:
            f.seek(genuine.index(b'"title":"') + 9)
            f.write(b"EVIL")
    else:  # another file in its place
        path.unlink()
        path.write_bytes(genuine.replace(b'"title":"', b'"title":"EVIL ', 1))


@pytest.mark.parametrize("twin, where, tree_beside, how, look_ahead", pairwise(
    twin=[False, True], where=["pith", ".well-known/pith"], tree_beside=[False, True], how=["in-place", "replaced"],
    look_ahead=[True, False]))
def test_a_mirrored_bundle_edited_at_either_path_in_either_tree_is_never_published(bundles_dir, tmp_path, twin,
                                                                                   where, tree_beside, how,
                                                                                   look_ahead):
    """Both paths of a record's bundle.json, in the live site and in the tree beside it (which the next build
    updates in place and swaps in), must hold the verified bytes.  A file put in place of the tree-beside's copy
    went live with the next change, and stayed; one put in place of the live .well-known copy survived the
    no-op build; an edit of the live file shared with the tree beside failed the build after the repair.  The
    same whether the lookups are made by a child process ahead of the build or as it goes."""
    from site_builder.writing import OutputSlot
    out = tmp_path / "site"

    run = _builds(bundles_dir, out, link_twin=twin, look_ahead=look_ahead)
    run()
    (bundles_dir / REAL_FILES[3].name).unlink()
    run()
    pid = record_id(REAL_FILES[0])
    genuine = (out / "pith" / pid / "bundle.json").read_bytes()
    _tamper((OutputSlot(out).prev if tree_beside else out) / where / pid / "bundle.json", how)
    run()  # (no input changed)
    shutil.copy(REAL_FILES[3], bundles_dir / REAL_FILES[3].name)
    run()  # (the tree beside is updated in place and swapped in)
    run(output=tmp_path / "clean", use_cache=False)
    assert tree(out) == tree(tmp_path / "clean")
    assert all((out / folder / pid / "bundle.json").read_bytes() == genuine for folder in ("pith", ".well-known/pith"))
    assert not run().changed


@pytest.mark.parametrize("where", ["pith", ".well-known/pith"])
def test_a_mirrored_bundle_edited_in_the_live_site_is_written_again_when_only_an_inputs_date_changed(
        bundles_dir, tmp_path, where):
    """A bundle whose date alone changed (a fresh checkout, a copy) makes the build plan the site, and the plan is
    the live site's: the build must still find the live bundle.json edited and write it again, not keep it."""
    out = tmp_path / "site"
    run = _builds(bundles_dir, out)
    run()
    pid = record_id(REAL_FILES[0])
    genuine = (out / where / pid / "bundle.json").read_bytes()
    _tamper(out / where / pid / "bundle.json", "in-place")
    touched = bundles_dir / REAL_FILES[1].name
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10 ** 9))
    assert run().changed
    assert (out / where / pid / "bundle.json").read_bytes() == genuine
    run(output=tmp_path / "clean", use_cache=False)
    assert tree(out) == tree(tmp_path / "clean")


class _HeldDeletion:
    """A deletion the build started in a process of its own, held until the build waits for it (then done at
    once) or the test lets it go (as if it ended after the build returned)."""

    def __init__(self, path):
        self.path, self.returncode = path, None

    def wait(self, timeout=None):
        if self.returncode is None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.returncode = 0
        return 0

    def poll(self):
        return self.returncode


@pytest.mark.parametrize("twin", [False, True])
def test_no_file_of_the_site_changes_status_after_the_build_returns(tmp_path, monkeypatch, twin):
    """A deploy step archives the site as soon as build returns, and tar fails on a file whose status (ctime,
    link count) changes while it reads it, which deleting an old tree that shares the file (a hard link) does.
    So the build waits for the deletion of every tree that may share a file with the new site and lets only the
    others go on after it.  Each kind of build is run with the deletions it did not wait for held until it
    returned; letting them go then must change no file of the site, whose every link leads to a page, and which
    ends as a clean build's.  (A listing kept in the tree beside, then planned again without records changed
    while the build ran, once stopped the build with "File exists".)"""
    from site_builder import writing
    held: list[_HeldDeletion] = []

    def remove_tree(path, wait=True, idle=True):
        if wait:
            shutil.rmtree(path, ignore_errors=True)
            return None
        held.append(_HeldDeletion(path))
        return held[-1]
    monkeypatch.setattr(writing, "remove_tree", remove_tree)
    bundles = real_and_generated_bundles(tmp_path / "bundles", 24)
    templates = tmp_path / "templates"
    templates.mkdir()
    out = tmp_path / "site"

    def status():
        return {str(p): (st.st_ino, st.st_nlink, st.st_ctime_ns) for p in sorted(out.rglob("*"))
                if not stat.S_ISDIR((st := p.lstat()).st_mode)}

    originals = {p: p.read_bytes() for p in bundles.glob("gen1*.json")}

    def changed_while_built():  # (the build plans the site again without those records: ``without_changed``)
        (templates / "badge.svg").write_text((ROOT / "templates" / "badge.svg").read_text())  # (all rendered)

        def progress(stage, count, total):
            if stage == "render" and count == 1:
                for path, raw in originals.items():
                    path.write_bytes(raw + b" ")
        return progress

    def plant_link():  # (the tree beside, updated in place, is given up for a fresh one: ``TreeChanged``)
        prev = writing.OutputSlot(out).prev
        if prev.is_dir():
            victim = sorted(p for p in (prev / "pith").iterdir() if len(p.name) == 26)[0]
            shutil.rmtree(victim)
            victim.symlink_to(tmp_path / "elsewhere")
        (bundles / "gen2.json").unlink()

    steps = {
        "first build": lambda: None,
        "one bundle newer": lambda: (bundles / "gen0.json").write_bytes(make_bundle(0, variant=1)),
        "one bundle removed": lambda: (bundles / "gen3.json").unlink(),
        "one bundle added": lambda: (bundles / "gen24.json").write_bytes(make_bundle(24)),
        "a template every record uses edited": lambda: (templates / "badge.svg").write_text(
            (ROOT / "templates" / "badge.svg").read_text() + "<!-- edited -->\n"),
        "a link planted in the tree beside": plant_link,
        "a bundle changed while the build ran": changed_while_built,
        "the bundles changed back": lambda: [path.write_bytes(raw) for path, raw in originals.items()],
        "no input changed": lambda: None,
    }
    for step, change in steps.items():
        progress = change()
        build(build_options(bundles, out, both_keys(), templates=templates, search=False, link_twin=twin, jobs=1,
                            progress=progress if callable(progress) else None))
        returned = status()
        for deletion in held:
            deletion.wait()
        held.clear()
        assert status() == returned, step
        assert broken_links(out, "https://mirror.example.org", "/") == [], step
    clean = tmp_path / "clean"
    build(build_options(bundles, clean, both_keys(), templates=templates, search=False, use_cache=False))
    assert tree(out) == tree(clean)


def _outside(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("index.html", "bundle.json", "state.json", "badge.svg", "precious.txt"):
        (outside / name).write_text(f"not the site's {name}")
    return outside


@pytest.mark.parametrize("twin", [False, True])
def test_a_link_planted_in_the_tree_beside_the_site_leads_nothing_outside_the_output(bundles_dir, tmp_path, twin):
    """The tree beside the site is updated in place: a link put where a record's folder was must not make the
    build remove (or write) the files it leads to.  It removed them, and the site then served the link.  The
    build writes a fresh tree instead, which takes every record from the live site, so every live bundle.json is
    checked: one edited there, of a record the tree beside had kept, is not taken (the build that starts in place
    checks only those it does not keep)."""
    from site_builder.writing import OutputSlot
    out = tmp_path / "site"

    run = _builds(bundles_dir, out, link_twin=twin)
    run()
    (bundles_dir / REAL_FILES[3].name).unlink()
    run()  # (the tree beside still holds that record: its files are stale there)
    pid = record_id(REAL_FILES[3])
    folder = OutputSlot(out).prev / "pith" / pid
    shutil.rmtree(folder)
    outside = _outside(tmp_path)
    folder.symlink_to(outside)
    kept = record_id(REAL_FILES[0])
    genuine = (out / "pith" / kept / "bundle.json").read_bytes()
    _tamper(out / "pith" / kept / "bundle.json", "replaced")
    (bundles_dir / REAL_FILES[2].name).unlink()  # (a change: the tree beside is brought up to date, then not)
    assert run().changed
    assert len(list(outside.iterdir())) == 5
    assert not any(p.is_symlink() for p in out.rglob("*"))
    assert all((out / where / kept / "bundle.json").read_bytes() == genuine for where in ("pith", ".well-known/pith"))
    run(output=tmp_path / "clean", use_cache=False)
    assert tree(out) == tree(tmp_path / "clean")


def test_a_tree_beside_the_site_that_others_may_write_to_is_not_brought_up_to_date_but_replaced(bundles_dir,
                                                                                                 tmp_path):
    """Files of the tree beside are kept unchecked but for the mirrored bundles, so it is used only while no other
    user could have changed it: a page planted there in a group-writable tree went live."""
    from site_builder.writing import OutputSlot
    out = tmp_path / "site"

    run = _builds(bundles_dir, out)
    run()
    (bundles_dir / REAL_FILES[3].name).unlink()
    assert run().reuse_note == ""  # (the live site and the tree beside are this user's alone: nothing to say)
    prev = OutputSlot(out).prev
    pid = record_id(REAL_FILES[0])
    page = prev / "pith" / pid / "index.html"
    page.unlink()
    page.write_text("planted")
    prev.chmod(0o775)
    (bundles_dir / REAL_FILES[2].name).unlink()
    report = run()
    assert report.changed and report.reuse_note.startswith(f"{prev}: others may write to it")
    assert b"planted" not in (out / "pith" / pid / "index.html").read_bytes()
    run(output=tmp_path / "clean", use_cache=False)
    assert tree(out) == tree(tmp_path / "clean")
    # And the live site is linked from (into a fresh tree: there is none beside it) only on the same terms.
    shutil.rmtree(prev)
    page = out / "pith" / pid / "index.html"
    page.unlink()
    page.write_text("planted")
    out.chmod(0o775)
    shutil.copy(REAL_FILES[2], bundles_dir / REAL_FILES[2].name)
    report = run()
    assert report.changed and report.reuse_note.startswith(f"{out}: others may write to it")
    assert b"planted" not in (out / "pith" / pid / "index.html").read_bytes()
    (bundles_dir / REAL_FILES[2].name).unlink()  # (the site now in its place is the build's own folder; the tree
    assert run().reuse_note.startswith(f"{prev}: ")  # beside it is the one made writable above, and says so)


def test_a_link_planted_as_the_tree_beside_is_no_tree_of_the_builders(bundles_dir, tmp_path):
    """A link at ``.site.prev``, even to a site the cache knows (the live one), is not the tree beside: the build
    writes a fresh tree, says nothing of others writing to it (it is no tree to reuse), and the link is removed,
    not what it leads to."""
    from site_builder.writing import OutputSlot
    out = tmp_path / "site"
    run = _builds(bundles_dir, out)
    run()
    prev = OutputSlot(out).prev
    shutil.rmtree(prev, ignore_errors=True)
    prev.symlink_to(out)
    (bundles_dir / REAL_FILES[3].name).unlink()
    report = run()
    assert report.changed and report.reuse_note == ""
    assert not prev.is_symlink() and (out / "verification.json").is_file()
    run(output=tmp_path / "clean", use_cache=False)
    assert tree(out) == tree(tmp_path / "clean")


def test_a_link_planted_where_a_new_record_goes_fails_that_build_only(bundles_dir, tmp_path):
    """A link where the tree beside will get a new record's folder: the build stops with one line naming it,
    writes nothing through it and leaves the site as it was; the next build writes a fresh tree."""
    from site_builder.writing import OutputError, OutputSlot
    out = tmp_path / "site"

    run = _builds(bundles_dir, out)
    (bundles_dir / REAL_FILES[3].name).unlink()
    run()
    run()
    (bundles_dir / REAL_FILES[2].name).unlink()
    run()  # (now there is a tree beside, which the next change updates in place)
    before = tree(out)
    pid = record_id(REAL_FILES[3])
    outside = _outside(tmp_path)
    (OutputSlot(out).prev / "pith" / pid).symlink_to(outside)
    shutil.copy(REAL_FILES[3], bundles_dir / REAL_FILES[3].name)
    with pytest.raises(OutputError) as failed:
        run()
    assert f"pith/{pid}: not a folder site-builder made" in str(failed.value) and "\n" not in str(failed.value)
    assert len(list(outside.iterdir())) == 5
    assert tree(out) == before
    assert run().changed
    run(output=tmp_path / "clean", use_cache=False)
    assert tree(out) == tree(tmp_path / "clean")


@pytest.mark.parametrize("forgotten", ["deleted", "edited", "another-tag"])
def test_an_edited_live_bundle_json_is_written_again_when_the_cache_cannot_vouch_for_the_output(bundles_dir,
                                                                                                tmp_path, forgotten):
    """The record of what each mirrored bundle.json was is the cache's, and the cache is untrusted: where that
    record is gone or does not check, no mirrored file in the output is proven, and every record's files are
    written again (an edit in place, with the record deleted, survived every later build, the no-op included)."""
    out = tmp_path / "site"

    run = _builds(bundles_dir, out)
    run()
    pid = record_id(REAL_FILES[0])
    live = out / "pith" / pid / "bundle.json"
    genuine = live.read_bytes()
    with open(live, "r+b") as f:
        f.seek(genuine.index(b'"title":"') + 9)
        f.write(b"EVIL")
    db = sqlite3.connect(default_cache_dir(out) / "cache.sqlite")
    mirrored, tag = cache_document(db, "mirrored")
    if forgotten == "deleted":
        db.execute("DELETE FROM documents WHERE name='mirrored'")
    else:  # the edited file's new signature (both its paths), under the genuine tag or another made-up one
        mirrored[pid][0] = dict(mirror_signatures(out, [pid]))[pid]
        assert mirrored[pid][0] is not None
        plant_document(db, "mirrored", mirrored, tag if forgotten == "edited" else "0" * 64)
    db.commit()
    db.close()
    assert run().changed
    assert live.read_bytes() == genuine
    run(output=tmp_path / "clean", use_cache=False)
    assert tree(out) == tree(tmp_path / "clean")
    assert not run().changed


@pytest.mark.parametrize("twin", [False, True])
@pytest.mark.parametrize("how", ["same-size", "appended", "replaced-file"])
def test_an_edit_of_a_live_bundle_json_does_not_survive_the_next_build(bundles_dir, tmp_path, twin, how):
    """The mirrored bundle.json must be the verified bytes.  An edit in place of the live file (which its
    .well-known twin and the tree beside the site may share) used to survive incremental builds, the no-op one
    included; the next build now writes that record's files again."""
    out = tmp_path / "site"

    run = _builds(bundles_dir, out, link_twin=twin)
    run()
    (bundles_dir / REAL_FILES[1].name).unlink()
    run()  # (now the tree beside the site is a twin, or the site before, sharing files)
    pid = record_id(REAL_FILES[0])
    live = out / "pith" / pid / "bundle.json"
    genuine = live.read_bytes()
    if how == "appended":
        with open(live, "ab") as f:
            f.write(b" ")
    else:
        _tamper(live, "in-place" if how == "same-size" else "replaced")
    assert live.read_bytes() != genuine
    report = run()
    assert report.changed
    assert live.read_bytes() == genuine
    assert (out / ".well-known" / "pith" / pid / "bundle.json").read_bytes() == genuine
    run(output=tmp_path / "clean", use_cache=False)
    assert tree(out) == tree(tmp_path / "clean")
    assert not run().changed  # and then it is a no-op again


@pytest.mark.parametrize("how", ["in-place", "replaced"])
def test_a_tree_updated_in_place_takes_only_checked_bundles_from_the_live_site(project, how):
    """A change updates the tree beside the site in place: the records that tree keeps are proven by its own
    lookups (a live file edited in place is the same inode there), and those it does not hold as planned come
    from the live site, whose files are checked for exactly those records.  Here the live copy of a record
    renewed by the last build (so the tree beside holds it stale) is edited, and so is one the tree beside
    keeps: neither edit is published, and the tree beside is still the one updated."""
    from site_builder.writing import OutputSlot
    out = project / "site"
    run = lambda **kw: build(opts(project, out, both_keys(), link_twin=True, **kw))  # noqa: E731
    run()
    (project / "bundles" / "gen1.json").write_bytes(make_bundle(1, variant=2))
    run()  # (the tree beside now holds gen1's record as it was before)
    renewed, kept = (record_id(make_bundle(n)) for n in (1, 2))
    genuine = {pid: (out / "pith" / pid / "bundle.json").read_bytes() for pid in (renewed, kept)}
    _tamper(out / "pith" / renewed / "bundle.json", how)
    _tamper(out / ".well-known" / "pith" / kept / "bundle.json", "replaced")
    beside = OutputSlot(out).prev.stat().st_ino
    (project / "bundles" / "gen3.json").write_bytes(make_bundle(3, variant=2))
    assert run().changed
    for pid in (renewed, kept):
        assert all((out / folder / pid / "bundle.json").read_bytes() == genuine[pid]
                   for folder in ("pith", ".well-known/pith")), pid
    assert out.stat().st_ino == beside  # (updated in place and swapped in, not a fresh tree)
    build(opts(project, project / "clean", both_keys(), use_cache=False))
    assert tree(out) == tree(project / "clean")
    assert not run().changed


@pytest.mark.parametrize("twin", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_bundle_json_edited_while_a_build_runs_does_not_survive_the_next_build(project, twin):
    """A build records each mirrored bundle it took over by the signature it checked it by, not by looking it up
    again once it is published: an edit in place made while the build runs (here, once the pages are written,
    as Pagefind starts) would otherwise be recorded as the build's own, and no later build would undo it."""
    out = project / "site"
    run = lambda **kw: build(opts(project, out, both_keys(), search=True, link_twin=twin, **kw))  # noqa: E731
    run()
    (project / "bundles" / "gen1.json").write_bytes(make_bundle(1, variant=2))
    run()  # (now the tree beside the site is a twin, or the site before, sharing files)
    pid = record_id(make_bundle(2))  # a record the next build takes over
    victim = out / "pith" / pid / "bundle.json"
    genuine = victim.read_bytes()
    edited = []

    def edit_in_place_as_indexing_starts(stage, count, total):
        if stage == SEARCH_STAGE and not edited:
            _tamper(victim, "in-place")
            edited.append(stage)
    (project / "bundles" / "gen1.json").write_bytes(make_bundle(1, variant=3))
    run(progress=edit_in_place_as_indexing_starts)
    assert edited and victim.read_bytes() != genuine  # (the file the build took over, edited after its check)
    assert run().changed
    assert victim.read_bytes() == genuine
    assert (out / ".well-known" / "pith" / pid / "bundle.json").read_bytes() == genuine
