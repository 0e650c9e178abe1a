"""End-to-end builds of the example bundles: the output tree is a contract."""

import copy
import hashlib
import json
import re
from pathlib import Path
from types import SimpleNamespace

import jinja2
import pytest

import site_builder.report
from site_builder.build import BuildOptions, build
from site_builder.cache import BuildCache
from site_builder.cache_key import user_cache_key
from site_builder.canonical import resolver_json
from site_builder.keys import load_trust_set
from site_builder.options import BuildPolicy
from site_builder.serving import Site
from site_builder.settings import SiteConfig

from conftest import REAL_FILES, ROOT, build_options, record_id, tree
from signing import TestKey, sign_bundle, snapshot_of, to_bytes, with_paper


def run(bundles: Path, output: Path, trust=None, **kw) -> object:
    return build(BuildOptions(bundles=bundles, output=output, trust=trust or load_trust_set(), search=False, **kw))


def test_output_tree_of_the_example_bundles(bundles_dir, tmp_path):
    out = tmp_path / "site"
    report = run(bundles_dir, out)
    assert report.count("published") == 4 and report.count("rejected") == 0
    for path in REAL_FILES:
        raw = path.read_bytes()
        pith_id = record_id(raw)
        assert (out / "pith" / pith_id / "bundle.json").read_bytes() == raw
        assert (out / ".well-known" / "pith" / pith_id / "bundle.json").read_bytes() == raw
        assert (out / ".well-known" / "pith" / pith_id / "bundle.json").samefile(out / "pith" / pith_id / "bundle.json")
        state = json.loads(raw)["state"]
        assert (out / "pith" / pith_id / "state.json").read_bytes() == resolver_json(state)
        page = (out / "pith" / pith_id / "index.html").read_text()
        assert "Verified by this mirror" in page and pith_id in page
        assert f'<link rel="canonical" href="https://pith.science/pith/{pith_id}">' in page
    for name in ("index.html", "404.html", ".nojekyll", "robots.txt", "assets/style.css", "verification.json",
                 "verification/index.html", "pith-signing-key.json", "pith-mirrors.json"):
        assert (out / name).is_file(), name
    key = json.loads((out / "pith-signing-key.json").read_text())
    assert key["key_id"] == "pith-v1-2026-05"
    mirrors = json.loads((out / "pith-mirrors.json").read_text())
    assert mirrors["manifest_type"] == "pith_mirror_manifest"
    assert mirrors["mirrors"][0]["public_key"]["public_key_hex"] == key["public_key_hex"]
    # A client (pull, another mirror) following the manifest's patterns for a record gets that record's files.
    raw = REAL_FILES[0].read_bytes()
    pith_id = record_id(raw)
    for pattern, expected in (("bundle_pattern", raw), ("well_known_pattern", raw),
                              ("state_pattern", resolver_json(json.loads(raw)["state"]))):
        path = mirrors["mirrors"][0][pattern].replace("{suffix}", pith_id)
        assert path.startswith("/") and (out / path[1:]).read_bytes() == expected, pattern
    report_doc = json.loads((out / "verification.json").read_text())
    assert {f["path"] for f in report_doc["files"]} == {p.name for p in REAL_FILES}
    for f in report_doc["files"]:
        data = (bundles_dir / f["path"]).read_bytes()
        assert (f["sha256"], f["size"]) == (hashlib.sha256(data).hexdigest(), len(data))
        assert f["status"] == "published"
        bundle = json.loads(data)  # (what a later build's rollback check reads)
        assert (f["pith_number"], f["built_at"], f["event_count"]) == (bundle["pith_number"], bundle["built_at"],
                                                                      len(bundle["events"]))
    home = (out / "index.html").read_text()
    assert "4</strong> papers published" in home and "0</strong> bundles rejected" in home
    # newest submission first
    order = [home.index(t) for t in ("RAF: Holistic", "PipeTune", "Daydream", "TensorOpt")]
    assert order == sorted(order)


def test_second_build_is_byte_identical(bundles_dir, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    run(bundles_dir, a)
    run(bundles_dir, b)
    assert tree(a) == tree(b)
    run(bundles_dir, a)  # rebuilding over an existing site changes nothing either
    assert tree(a) == tree(b)


def test_builds_with_search_index_are_byte_identical(bundles_dir, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        build(BuildOptions(bundles=bundles_dir, output=out, trust=load_trust_set(), search=True))
    assert (a / "pagefind" / "pagefind-entry.json").is_file()
    assert tree(a) == tree(b)


def test_source_date_epoch_is_the_only_clock(bundles_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    run(bundles_dir, tmp_path / "s")
    assert json.loads((tmp_path / "s" / "verification.json").read_text())["generated_at"] == "2026-01-01T00:00:00Z"


def test_a_site_with_no_records_yet_dates_its_feed_by_source_date_epoch_or_the_epoch(tmp_path, monkeypatch):
    """A mirror's first build may publish nothing (every bundle rejected, or none pulled yet): its feed is still
    valid Atom, stamped with SOURCE_DATE_EPOCH where it is set and with 1970-01-01 otherwise, never the clock."""
    (tmp_path / "bundles").mkdir()
    for out, epoch in ((tmp_path / "dated", "1767225600"), (tmp_path / "undated", None)):
        if epoch is None:
            monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
        else:
            monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
        assert run(tmp_path / "bundles", out).count("published") == 0
    assert b"<updated>2026-01-01T00:00:00Z</updated>" in (tmp_path / "dated" / "feed.xml").read_bytes()
    assert b"<updated>1970-01-01T00:00:00Z</updated>" in (tmp_path / "undated" / "feed.xml").read_bytes()


def test_a_home_page_says_what_it_has_and_offers_a_search_its_own_records_answer(bundles_dir, tmp_path):
    """Nothing published: one sentence (and where the reasons are, if every bundle was rejected), not empty
    headings, nor a search box over an index with nothing in it; the listings say it too.  Otherwise the search box's example is the
    newest record's arXiv id and short pith number, which this mirror's search finds."""
    (tmp_path / "none").mkdir()
    (tmp_path / "rejected").mkdir()
    (tmp_path / "rejected" / "b.json").write_bytes(REAL_FILES[0].read_bytes().replace(b'"title":"', b'"title":"X', 1))
    said = {}
    for name in ("none", "rejected"):
        run(tmp_path / name, tmp_path / f"site-{name}")
        home = (tmp_path / f"site-{name}" / "index.html").read_text()
        assert "Most recent papers" not in home and "<form" not in home and "<h2>Categories" not in home
        said[name] = " ".join(re.search(r'<p class="empty">(.*?)</p>', home, re.S).group(1).split())
        for listing in ("papers", "category", "year"):  # (the header's links lead to these)
            page = (tmp_path / f"site-{name}" / listing / "index.html").read_text()
            assert '<p class="empty">No papers are published here yet.</p>' in page and "<ol" not in page \
                and '<ul class="groups' not in page, listing
    assert said["none"] == "No papers are published here yet."
    assert said["rejected"].startswith("No papers are published here yet: every bundle read was rejected") \
        and 'href="/verification/"' in said["rejected"]
    run(bundles_dir, tmp_path / "site")
    home = (tmp_path / "site" / "index.html").read_text()
    newest = max((json.loads(p.read_bytes()) for p in REAL_FILES),
                 key=lambda b: b["canonical_record"]["metadata"]["submitted_at"])
    example = f'placeholder="e.g. {newest["source"]["id"]} or pith:{record_id(newest)[:8]}"'
    assert example in home and 'class="empty"' not in home and "Most recent papers" in home


def test_rejected_bundle_leaves_no_trace_and_others_build(bundles_dir, tmp_path):
    victim = REAL_FILES[0]
    b = json.loads(victim.read_bytes())
    b["events"][1]["payload"]["graph_snapshot"]["paper"]["title"] = "Tampered title XYZZY"
    (bundles_dir / victim.name).write_bytes(to_bytes(b))
    out = tmp_path / "site"
    report = run(bundles_dir, out)
    assert report.count("published") == 3
    [bad] = report.rejected
    assert bad.inspection.check == "event_hash"
    pith_id = record_id(b)
    assert not (out / "pith" / pith_id).exists()
    assert not (out / ".well-known" / "pith" / pith_id).exists()
    for rel, data in tree(out).items():
        assert b"XYZZY" not in data, rel
        if rel != "verification.json" and not rel.startswith("verification/"):
            assert pith_id.encode() not in data, rel


def test_removed_bundle_disappears(bundles_dir, tmp_path):
    out = tmp_path / "site"
    run(bundles_dir, out)
    gone = record_id(REAL_FILES[0])
    (bundles_dir / REAL_FILES[0].name).unlink()
    run(bundles_dir, out)
    assert not (out / "pith" / gone).exists()
    assert not (out / ".well-known" / "pith" / gone).exists()
    assert gone not in (out / "index.html").read_text()


def test_a_file_that_is_no_bundle_added_beside_unchanged_bundles_is_reported_by_the_next_build(bundles_dir, tmp_path):
    """No bundle changed, but a ``*.json`` that cannot be read (a link, not followed) came: the build is no no-op,
    and its report (and so ``--strict``) names the file; so does the next, once it is gone, no longer."""
    out = tmp_path / "site"
    run(bundles_dir, out)
    (bundles_dir / "linked.json").symlink_to(REAL_FILES[0])
    report = run(bundles_dir, out)
    assert [(o.inspection.rel, o.inspection.check) for o in report.rejected] == [("linked.json", "file_type")]
    assert "linked.json" in (out / "verification.json").read_text()
    (bundles_dir / "linked.json").unlink()
    report = run(bundles_dir, out)
    assert report.rejected == [] and "linked.json" not in (out / "verification.json").read_text()


def test_failing_render_leaves_previous_output_intact(bundles_dir, tmp_path):
    out = tmp_path / "site"
    run(bundles_dir, out)
    before = tree(out)
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "paper.html").write_text("{% extends 'base.html' %}{% block main %}{{ p.no_such_field }}{% endblock %}")
    (bundles_dir / REAL_FILES[0].name).unlink()
    with pytest.raises(jinja2.UndefinedError):
        run(bundles_dir, out, templates=templates)
    assert tree(out) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".site.")] in ([], [".site.lock"])


def test_trusted_test_key_publishes_its_bundles_and_rejects_real_ones(bundles_dir, tmp_path):
    key = TestKey()
    signed = sign_bundle(with_paper(json.loads(REAL_FILES[0].read_bytes()), title="Signed by the test key"), key)
    (bundles_dir / "mine.json").write_bytes(to_bytes(signed))
    trust = load_trust_set([key.write(tmp_path / "key.json")])
    out = tmp_path / "site"
    report = run(bundles_dir, out, trust=trust)
    assert report.count("published") == 1
    assert {o.inspection.check for o in report.rejected} == {"key_pinned"}
    assert json.loads((out / "pith-signing-key.json").read_text())["key_id"] == key.key_id


def test_a_site_pinning_two_keys_publishes_both_as_its_key_document(bundles_dir, tmp_path):
    """With more than one pinned key, the site's key document and its mirror manifest list every one, in the
    trust set's order, each as its key file has it: a reader checks the mirror's signatures against them."""
    key_files = [ROOT / "site_builder" / "data" / "pith-signing-key.json", TestKey().write(tmp_path / "key.json")]
    trust = load_trust_set(key_files)
    out = tmp_path / "site"
    run(bundles_dir, out, trust=trust)
    published = json.loads((out / "pith-signing-key.json").read_text())
    pinned = {doc["key_id"]: doc for doc in (json.loads(f.read_text()) for f in key_files)}
    assert published == [pinned[k.key_id] for k in trust.keys] and len(pinned) == 2
    assert json.loads((out / "pith-mirrors.json").read_text())["mirrors"][0]["public_key"] == published


def test_duplicate_record_newest_built_at_wins(bundles_dir, tmp_path):
    key = TestKey()
    base = json.loads(REAL_FILES[0].read_bytes())
    old = sign_bundle(with_paper(base, title="Old version"), key)
    new = sign_bundle(dict(with_paper(base, title="New version"), built_at="2026-12-01T00:00:00Z"), key)
    for f in bundles_dir.iterdir():
        f.unlink()
    (bundles_dir / "a.json").write_bytes(to_bytes(new))
    (bundles_dir / "b.json").write_bytes(to_bytes(old))
    out = tmp_path / "site"
    report = run(bundles_dir, out, trust=load_trust_set([key.write(tmp_path / "k.json")]))
    statuses = {o.inspection.rel: o.status for o in report.outcomes}
    assert statuses == {"a.json": "published", "b.json": "superseded"}
    pith_id = record_id(new)
    assert "New version" in (out / "pith" / pith_id / "index.html").read_text()


def test_sub_path_base_url_links(bundles_dir, tmp_path):
    out = tmp_path / "site"
    run(bundles_dir, out, config=SiteConfig(base_url="https://user.github.io/mirror/"))
    home = (out / "index.html").read_text()
    assert 'href="/mirror/assets/style.css"' in home
    assert 'href="/mirror/pith/' in home
    assert "https://user.github.io/mirror/sitemap.xml" in (out / "robots.txt").read_text()


def test_refuses_to_replace_a_folder_it_did_not_make(bundles_dir, tmp_path):
    from site_builder.writing import OutputError
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("do not delete")
    with pytest.raises(OutputError):
        run(bundles_dir, out)
    assert (out / "thesis.tex").read_text() == "do not delete"


def test_the_report_names_a_bounded_number_of_rendered_files(bundles_dir, tmp_path, monkeypatch):
    """serve reloads the pages a build rendered; past a few hundred it reloads everything, so a full build of
    100,000 records need not keep a million paths."""
    monkeypatch.setattr(site_builder.report, "RENDERED_KEPT", 5)
    out = tmp_path / "site"
    report = run(bundles_dir, out)
    assert len(report.rendered) == 5 and report.rendered_more
    assert set(report.rendered) <= {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    published = []
    live = SimpleNamespace(base_path="/", publish=lambda event, data: published.append((event, data)))
    Site._announce(SimpleNamespace(live=live, builds=0), report)
    assert published[0][0] == "reload" and published[0][1]["all"] is True

    monkeypatch.setattr(site_builder.report, "RENDERED_KEPT", 5000)
    report = run(bundles_dir, tmp_path / "other")
    assert not report.rendered_more and len(report.rendered) == report.files_written
    html = [rel for rel in report.rendered if rel.endswith(".html")]  # (the summary's "N pages written")
    assert report.pages_written == len(html) == sum(1 for p in (tmp_path / "other").rglob("*.html"))
    published.clear()
    (bundles_dir / REAL_FILES[0].name).unlink()  # one record goes: its listings and the home page change
    report = run(bundles_dir, tmp_path / "other")
    Site._announce(SimpleNamespace(live=live, builds=1), report)
    assert published[0][1]["all"] is False and "/" in published[0][1]["paths"]


@pytest.mark.slow
def test_worker_processes_build_what_one_process_builds_and_render_the_list_rows(tmp_path, monkeypatch):
    """Over the worker threshold the records (their pages and their rows in lists) are rendered by worker
    processes, one per usable core; the site is byte for byte the one a single process builds, and the main
    process renders no row.  The report counts the CPU of each stage where it was spent."""
    import os

    from site_builder.parallel import PARALLEL_THRESHOLD
    from site_builder.rendering import SiteRenderer

    from generate import generate

    bundles = generate(tmp_path / "bundles", PARALLEL_THRESHOLD + 16)
    trust = load_trust_set([tmp_path / "bench-key.json"])
    rows_here = []
    render = SiteRenderer.render

    def counting(self, template, **context):
        if template == "_paper_row.html":
            rows_here.append(os.getpid())  # a worker appends to its own copy of the list
        return render(self, template, **context)

    monkeypatch.setattr(SiteRenderer, "render", counting)
    pooled, single = tmp_path / "pooled", tmp_path / "single"
    report = build(BuildOptions(bundles=bundles, output=pooled, trust=trust, search=False, policy=BuildPolicy(jobs=2)))
    assert rows_here == []
    # The report says where the CPU went (build --verbose, the benchmark): verifying and rendering ~80 records
    # takes ~0.15 s of the workers' CPU
    assert report.cpu["verify"][1] + report.cpu["render_records"][1] > 0.05
    report = build(BuildOptions(bundles=bundles, output=single, trust=trust, search=False, policy=BuildPolicy(jobs=1)))
    assert len(rows_here) == PARALLEL_THRESHOLD + 16  # in one process every row is rendered here, once
    assert tree(pooled) == tree(single)
    assert report.cpu["verify"][0] + report.cpu["render_records"][0] > 0.05
    assert all(workers == 0 for _, workers in report.cpu.values())
    assert set(report.cpu) == set(report.timings)
    # Each stage timed on its own, in the order run (--verbose prints them), within the build's own time
    assert list(report.timings)[:5] == ["start", "discover", "check_live", "verify", "previous_site"]
    assert 0 < sum(report.timings.values()) <= report.seconds < 60
    # By default one worker per core this process may use (taskset, a container's cpuset): on one, none at all
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    rows_here.clear()
    report = build(BuildOptions(bundles=bundles, output=tmp_path / "one-core", trust=trust, search=False))
    assert len(rows_here) == PARALLEL_THRESHOLD + 16 and all(workers == 0 for _, workers in report.cpu.values())
    assert tree(tmp_path / "one-core") == tree(single)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    rows_here.clear()
    build(BuildOptions(bundles=bundles, output=tmp_path / "two-cores", trust=trust, search=False))
    assert rows_here == []


def test_a_records_files_are_remembered_as_four_values(tmp_path, bundles_dir):
    """The cache keeps a record's ten output paths as what makes them (pith id, arXiv id, version, short
    addresses): what it expands them to are the files the build wrote for the record."""
    from site_builder.unit_files import split_files

    out = tmp_path / "site"
    report = build(BuildOptions(bundles=bundles_dir, output=out, trust=load_trust_set()))
    build_id = json.loads((out / "verification.json").read_text())["build_id"]
    cache = BuildCache(tmp_path / ".site-builder-cache" / "site" / "cache.sqlite", key=user_cache_key())
    records = {name: files for name, (_, files) in cache.units(build_id).items() if name.startswith("record:")}
    cache.close()
    assert len(records) == report.count("published") == len(REAL_FILES)
    written = set()
    for name, files in records.items():
        assert files.startswith("@" + name.removeprefix("record:") + " ")
        written.update(split_files(files))
    on_disk = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert written <= on_disk
    assert {rel for rel in on_disk if rel.startswith(("pith/", ".well-known/", "arxiv/"))} - written == set()


def test_a_template_may_show_words_outside_the_row(tmp_path, bundles_dir):
    """The build holds records' words by reference; a user's template that shows them on a page the build's own
    process renders (here the home page) gets them read back from the verified bundles."""
    from markupsafe import escape

    from site_builder.records import summarize

    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "home.html").write_text(
        "{% for p in recent %}<p>{{ p.title }} | {{ p.authors|join(', ') }} | {{ p.abstract }}</p>\n{% endfor %}")
    out = tmp_path / "site"
    build(BuildOptions(bundles=bundles_dir, output=out, trust=load_trust_set(), templates=templates))
    home = (out / "index.html").read_text()
    for path in REAL_FILES:
        words = summarize(json.loads(path.read_bytes())).words
        assert f"<p>{escape(words.title)} | {escape(', '.join(words.authors))} | {escape(words.abstract)}</p>" in home


@pytest.mark.parametrize("output_name", ["output", "public"])
def test_an_output_inside_the_bundles_folder_is_not_read_back_as_input(bundles_dir, tmp_path, output_name):
    """``--bundles .`` with the output in the same folder: the site's mirrored bundles, state files and report are
    its own copies, and the next build must read the same four inputs, not forty.  Nor are the static and
    templates folders searched: their files are the site's (a web app's manifest.json is no bundle)."""
    project = tmp_path / "project"
    project.mkdir()
    for p in bundles_dir.iterdir():
        (project / p.name).write_bytes(p.read_bytes())
    (project / "notes").mkdir()
    (project / "notes" / output_name).mkdir()  # a folder of the same name elsewhere is read as ever
    (project / "notes" / output_name / "x.json").write_bytes(b"{}")
    for folder in ("static", "templates/assets"):
        (project / folder).mkdir(parents=True)
        (project / folder / "manifest.json").write_bytes(b'{"name": "mirror"}')
    options = BuildOptions(bundles=project, output=project / output_name, trust=load_trust_set(), search=False,
                           static_dir=project / "static", templates=project / "templates")
    first = build(options)
    assert (project / output_name / "pith").is_dir()
    assert (project / output_name / "manifest.json").read_bytes() == b'{"name": "mirror"}'
    (project / "5KDARQNDDYME4KO7AJIJ4ADESI.json").touch()  # (not a no-op: the inputs are listed again)
    second = build(options)
    for report in (first, second):
        assert sorted(o.inspection.rel for o in report.outcomes) == sorted(
            [p.name for p in bundles_dir.iterdir()] + [f"notes/{output_name}/x.json"])
        assert report.count("published") == 4 and report.count("superseded") == 0
        assert report.warnings == []  # (the build's own output is not another site inside the bundles folder)


def test_a_bundle_deleted_does_not_come_back_from_an_earlier_site_inside_the_bundles_folder(bundles_dir, tmp_path):
    """A site built into the bundles folder once (``--output bundles/site``), then built elsewhere: its mirrored
    copies are not inputs, so a record whose bundle was deleted is gone from the new site, its state files and
    report are not forty rejections, and a warning names the folder passed over."""
    trust = load_trust_set()
    build(BuildOptions(bundles=bundles_dir, output=bundles_dir / "site", trust=trust, search=False))
    deleted = sorted(bundles_dir.glob("*.json"))[0]
    deleted.unlink()
    out = tmp_path / "out"
    report = build(BuildOptions(bundles=bundles_dir, output=out, trust=trust, search=False))
    assert sorted(o.inspection.rel for o in report.outcomes) == sorted(p.name for p in bundles_dir.glob("*.json"))
    assert report.count("published") == 3 and not report.rejected
    assert not (out / "pith" / deleted.stem).exists() and (bundles_dir / "site" / "pith" / deleted.stem).is_dir()
    assert [w for w in report.warnings if "site this builder wrote" in w] == [
        f"{bundles_dir / 'site'}: a site this builder wrote (verification.json); its files are not read as bundles "
        f"(to take its records' bundles, name it with --bundles)"]


def test_static_files_are_copied_as_they_are_and_never_over_the_sites_own_paths(bundles_dir, tmp_path):
    """The static folder (a CNAME, images, .well-known/security.txt) is copied byte for byte; a file that would
    stand where the site puts its own pages, or where only verified records may be (pith/, .well-known/pith/),
    is refused with a warning, as is a link; an edited, added or removed static file is an incremental build
    like any other, equal to a clean one."""
    import os

    from site_builder.pages import refused_static_path
    static = tmp_path / "static"
    wanted = {"CNAME": b"mirror.example.org\n", "img/logo.png": bytes(range(256)) * 4,
              ".well-known/security.txt": b"Contact: mailto:security@example.org\n"}
    refused = {"index.html": b"<p>not the home page</p>", "pith/AAAAAAAAAAAAAAAAAAAAAAAAAA/bundle.json": b"{}",
               ".well-known/pith/AAAAAAAAAAAAAAAAAAAAAAAAAA/bundle.json": b"{}", "sitemap.xml": b"<x/>",
               "arxiv": b"a file where the site has a folder",
               "assets/style.css": b"body{}"}
    hidden = {".hidden-notes": b"skipped, as hidden files are",
              "docs/.well-known/x.txt": b"a .well-known folder below the top is hidden like any other"}
    for rel, data in {**wanted, **refused, **hidden}.items():
        (static / rel).parent.mkdir(parents=True, exist_ok=True)
        (static / rel).write_bytes(data)
    os.symlink("/etc/passwd", static / "passwd.txt")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key.txt").write_bytes(b"not for the site")
    os.symlink(tmp_path / "secret", static / "secret")  # (a link to a folder is not walked either)
    out = tmp_path / "site"

    def build_static(output, **options):
        return build(build_options(bundles_dir, output, load_trust_set(), search=False, static_dir=static, **options))
    report = build_static(out)
    for rel, data in wanted.items():
        assert (out / rel).read_bytes() == data
    assert not (out / ".hidden-notes").exists() and not (out / "passwd.txt").exists()
    assert not (out / "docs").exists() and not (out / "secret").exists()
    assert not (out / "pith" / "AAAAAAAAAAAAAAAAAAAAAAAAAA").exists()
    assert not (out / ".well-known" / "pith" / "AAAAAAAAAAAAAAAAAAAAAAAAAA").exists()
    assert b"not the home page" not in (out / "index.html").read_bytes()
    assert (out / "assets" / "style.css").read_bytes() != b"body{}"
    assert sorted(report.warnings) == sorted(
        [f"static/{rel}: {refused_static_path(rel)}; not copied" for rel in refused]
        + ["static/passwd.txt: a symbolic link (not followed); not copied",
           "static/secret: a symbolic link (not followed); not copied"])

    (static / "CNAME").write_bytes(b"other.example.org\n")
    (static / "img" / "logo.png").unlink()
    (static / "robots-extra.txt").write_bytes(b"more\n")
    report = build_static(out)
    assert report.changed and 0 < report.files_written < 10  # the static files, the report, not every page
    assert (out / "CNAME").read_bytes() == b"other.example.org\n" and not (out / "img").exists()
    clean = tmp_path / "clean"
    build_static(clean, use_cache=False)
    assert tree(out) == tree(clean)
    assert not build_static(out).changed  # unchanged: nothing to do


def test_every_path_a_build_writes_is_refused_to_static_files(bundles_dir, tmp_path):
    """SITE_OWNED is the list of what the site makes: a build with every optional page (about, sitemaps, search)
    writes nothing a static file could take."""
    from site_builder.pages import refused_static_path
    about = tmp_path / "about.md"
    about.write_text("# About\n")
    out = tmp_path / "site"
    build(BuildOptions(bundles=bundles_dir, output=out, trust=load_trust_set(), about_file=about,
                       config=SiteConfig(base_url="https://mirror.example.org/")))
    written = [p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()]
    assert "about/index.html" in written and "sitemap.xml" in written and any(w.startswith("pagefind/") for w in written)
    assert [rel for rel in written if refused_static_path(rel) is None] == []
    # (nor a file standing where the site has a folder, nor a name a host would not serve as it is)
    assert all(refused_static_path(rel) for rel in [".well-known/pith", "pith", "sitemap-3.xml", "a/../b", "NUL"])
    # (nor one in other letters: a host on a case-insensitive file system, as macOS's and Windows' are by default,
    # serves it at the site's own path)
    assert all(refused_static_path(rel) for rel in ["PITH/AAAAAAAAAAAAAAAAAAAAAAAAAA/bundle.json", "Index.html",
                                                    ".Well-Known/Pith/AAAAAAAAAAAAAAAAAAAAAAAAAA/bundle.json",
                                                    "Sitemap.XML"])
    assert not any(refused_static_path(rel) for rel in [".well-known/security.txt", "CNAME", "img/sitemap.xml"])


def test_the_about_page_shows_its_images_and_paths_and_a_bundles_text_neither(tmp_path):
    """The site's own about page may show an image (a logo from the static folder) and link within the site; an
    image in a bundle's text (a claim, the headline, the summary: a paper's own words) is a link to it, so that no
    reader's browser asks the paper's author's server for it, and a path there is shown as written."""
    from conftest import signed_project
    key, trust, bundles, base = signed_project(tmp_path)
    pixel = "![pixel](https://tracker.example/p.png)"
    b = with_paper(base, headline=f"Headline {pixel}")
    snapshot = snapshot_of(b)
    snapshot["claims"] = {"count": 1, "items": [{"claim_id": "C1", "kind": "strongest_claim", "text": f"Claim {pixel}",
                                                 "status": "machine_extracted"}]}
    snapshot["verdict"]["one_line_summary"] = f"Summary {pixel} [figure 2](fig2.png)"
    signed = sign_bundle(b, key)
    (bundles / "r.json").write_bytes(to_bytes(signed))
    about = tmp_path / "about.md"
    about.write_text("# About\n\n![our logo](/logo.png) [All papers](../papers/)\n")
    out = tmp_path / "site"
    build(BuildOptions(bundles=bundles, output=out, trust=trust, about_file=about, search=False))
    assert '<img src="/logo.png" alt="our logo" /> <a href="../papers/">All papers</a>' in \
        (out / "about" / "index.html").read_text()
    assert '· <a href="/about/">about</a></p>' in (out / "index.html").read_text()  # (the home page leads to it)
    html = (out / "pith" / record_id(signed) / "index.html").read_text()
    assert "tracker.example" in html and '<img src="https://tracker' not in html
    assert html.count('!<a href="https://tracker.example/p.png">pixel</a>') == 3
    assert "[figure 2](fig2.png)" in html and 'href="fig2.png"' not in html  # (a path: written for no page here)


def test_a_signed_bundle_whose_snapshot_parts_have_another_shape_is_published_and_the_rest_built(tmp_path):
    """A verdict, claims or references that are no object (signed: they pass every check) are shown as absent
    on the record's page; they made the worker rendering it raise, which stopped the whole build."""
    from conftest import signed_project
    key, trust, bundles, base = signed_project(tmp_path)
    odd = copy.deepcopy(base)
    snapshot_of(odd).update(verdict=["a list"], claims="text", references=7)
    odd = sign_bundle(odd, key)
    other = sign_bundle(json.loads(REAL_FILES[1].read_bytes()), key)
    (bundles / "odd.json").write_bytes(to_bytes(odd))
    (bundles / "other.json").write_bytes(to_bytes(other))
    out = tmp_path / "site"
    report = build(BuildOptions(bundles=bundles, output=out, trust=trust, search=False))
    assert (report.count("published"), report.count("rejected")) == (2, 0)
    html = (out / "pith" / record_id(odd) / "index.html").read_text()
    assert snapshot_of(odd)["paper"]["title"] in html
    assert (out / "pith" / record_id(other) / "index.html").is_file()


def test_the_collector_is_paused_while_the_cache_loads_and_left_as_it_was(bundles_dir, tmp_path, monkeypatch):
    """Loading 100,000 records' worth of cache makes millions of objects, none garbage, which the cyclic garbage
    collector would walk again and again: a build pauses it, and leaves it as the caller had it (a library caller
    may have it off)."""
    import gc

    seen = []
    load = BuildCache.load
    monkeypatch.setattr(BuildCache, "load", lambda self: seen.append(gc.isenabled()) or load(self))
    assert gc.isenabled()
    run(bundles_dir, tmp_path / "site")
    (bundles_dir / REAL_FILES[0].name).unlink()
    run(bundles_dir, tmp_path / "site")
    assert seen == [False, False] and gc.isenabled()
    gc.disable()
    try:
        run(bundles_dir, tmp_path / "site2")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_files_an_editor_saved_with_a_byte_order_mark_are_read_as_their_text(bundles_dir, tmp_path):
    """Some editors on Windows save UTF-8 with a byte-order mark (and CRLF line ends): site.toml was a TOML error
    ("Invalid statement"), the about page lost its heading to an invisible character, and a template put one
    into every page it is in."""
    from site_builder.settings import load_settings
    bom = b"\xef\xbb\xbf"
    (tmp_path / "site.toml").write_bytes(bom + b'title = "Saved on Windows"\r\nabout_file = "about.md"\r\n')
    (tmp_path / "about.md").write_bytes(bom + b"# About us\r\n\r\nText.\r\n")
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "_site_footer.html").write_bytes(bom + b"<footer>Ours</footer>\r\n")
    config = load_settings(tmp_path / "site.toml")
    assert config.title == "Saved on Windows"
    out = tmp_path / "site"
    build(build_options(bundles_dir, out, load_trust_set(), search=False, config=config,
                        about_file=tmp_path / "about.md", templates=tmp_path / "templates"))
    about = (out / "about" / "index.html").read_text()
    assert "<h1>About us</h1>" in about and "<footer>Ours</footer>" in about
    assert not [p for p in out.rglob("*.html") if "\ufeff" in p.read_text()]
