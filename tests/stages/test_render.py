"""The render stage (stages/render.py): each record's files written from its verified bytes, never from other
bytes, and the words read back only from the verified bundle in the tree being written."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3

import pytest

from conftest import REAL_FILES, both_keys, cache_document, edit_visibly, opts
from generate import make_bundle
from site_builder.build import build
from site_builder.inspection import inspect_bytes
from site_builder.keys import load_trust_set
from site_builder.mirrors import mirror_signatures
from site_builder.rendering import ROW_TEMPLATE, SiteRenderer, template_dirs
from site_builder.settings import SiteConfig
from site_builder.stages.context import default_cache_dir
from site_builder.stages.render import RecordTask, RecordWriter, render_record
from site_builder.writing import StagingTree


def test_a_bundle_changed_after_it_was_verified_is_not_written(tmp_path):
    """The worker reads the file again to write it: bytes that are not the verified ones (the file changed in
    between) write nothing and say why; the verified bytes write the record's files."""
    trust = load_trust_set()
    source = tmp_path / "b.json"
    shutil.copy(REAL_FILES[0], source)
    inspection = inspect_bytes("b.json", source.read_bytes(), trust)
    renderer = SiteRenderer(SiteConfig(), template_dirs(None), trust, False)
    writer = RecordWriter(renderer, StagingTree(tmp_path / "tree"), None)
    task = RecordTask(source, inspection, 0)
    done = render_record(writer, task)
    assert done.error is None and done.pages >= 1 and done.row
    assert (tmp_path / "tree" / "pith" / inspection.pith_id / "bundle.json").read_bytes() == source.read_bytes()
    source.write_bytes(REAL_FILES[1].read_bytes())
    changed = render_record(RecordWriter(renderer, StagingTree(tmp_path / "tree2"), None), task)
    assert changed.files == "" and changed.error.startswith("file_changed")
    assert not (tmp_path / "tree2").exists() or not list((tmp_path / "tree2").rglob("*.html"))


def test_a_row_the_build_holds_is_not_rendered_again(tmp_path):
    trust = load_trust_set()
    inspection = inspect_bytes("b.json", REAL_FILES[0].read_bytes(), trust)
    renderer = SiteRenderer(SiteConfig(), template_dirs(None), trust, False)
    done = render_record(RecordWriter(renderer, StagingTree(tmp_path / "t"), None),
                         RecordTask(REAL_FILES[0], inspection, 0, row_known=True))
    assert done.error is None and done.row is None


def test_words_are_read_back_only_from_the_verified_bundle_in_the_tree(tmp_path):
    """The build holds records' words by reference and reads them back, for the feeds, from the bundle its own
    tree holds; bytes that are not the verified ones (the output was edited by hand) stop the build with advice."""
    from site_builder.records import paper_text
    from site_builder.stages.render import words_in
    from site_builder.writing import OutputError

    raw = REAL_FILES[0].read_bytes()
    tree = StagingTree(tmp_path / "tree")
    tree.write("pith/ABC/bundle.json", raw)
    read = words_in(tree, 1 << 20)
    assert read("ABC", hashlib.sha256(raw).hexdigest()) == paper_text(json.loads(raw))
    with pytest.raises(OutputError, match=r"pith/ABC/bundle.json: not the bundle that was verified \(the output "
                                          r"was changed outside site-builder: build again with --no-cache\)"):
        read("ABC", "0" * 64)
    with pytest.raises(OutputError, match=r"pith/XYZ/bundle.json: .*build again with --no-cache"):
        read("XYZ", hashlib.sha256(raw).hexdigest())


@pytest.mark.parametrize("twin", [False, True])
def test_the_cache_records_each_mirrored_bundle_as_the_build_left_it(project, twin):
    """The next build proves the live site's mirrored bundles by their signatures as this build left them: the
    records it rendered (all of them on a first build or a template edit, one on a change) are recorded by the
    files it wrote, not by those they replaced.  Recorded by the old files' signatures, every later no-op would
    hash every one of them again (the files then differ from the record) and never record them anew."""
    out = project / "site"

    def recorded_as_left() -> bool:
        db = sqlite3.connect(default_cache_dir(out) / "cache.sqlite")
        try:
            recorded = cache_document(db, "mirrored")[0]
        finally:
            db.close()
        now = dict(mirror_signatures(out, list(recorded)))
        published = {p.parent.name for p in (out / "pith").glob("*/bundle.json")}
        return recorded.keys() == published and all(now[pid] == sig for pid, (sig, _) in recorded.items())

    run = lambda: build(opts(project, out, both_keys(), link_twin=twin))  # noqa: E731
    run()
    assert recorded_as_left()
    (project / "bundles" / "gen1.json").write_bytes(make_bundle(1, variant=2))
    assert run().files_written and recorded_as_left()
    edit_visibly(project, "paper.html")
    assert run().files_written and recorded_as_left()


def test_each_records_list_row_is_rendered_once_a_build(project, monkeypatch):
    """The render stage keeps the list row each record's worker rendered beside its pages, so the listings (a
    record is on three or four) only join rows: none is rendered again for them."""
    rendered = []
    render = SiteRenderer.render

    def counting(self, name, **values):
        if name == ROW_TEMPLATE:
            rendered.append(values["p"].pith_id)
        return render(self, name, **values)
    monkeypatch.setattr(SiteRenderer, "render", counting)
    report = build(opts(project, project / "site", both_keys(), jobs=1))
    published = {o.pith_number.rsplit(":", 1)[1] for o in report.outcomes if o.status == "published"}
    assert len(published) >= 8 and sorted(rendered) == sorted(published)
