"""A mirror never goes back: an older bundle (earlier built_at, or fewer events) does not replace a newer one."""

import hashlib
import json
import sqlite3

import pytest

from site_builder import report as report_module
from site_builder.build import BuildOptions, build, default_cache_dir
from site_builder.incremental import IncrementalStore
from site_builder.inspection import inspect_bytes
from site_builder.options import ServeSession
from site_builder.report import BuildReport
from site_builder.selection import Candidate, select
from site_builder.stages import select as select_stage
from site_builder.stages.select import select_bundles

from conftest import (cache_document, calls_of, own_document_tag, plant_document, record_id, resigned_real_bundles,
                      signed_project, signed_version)
from signing import sign_bundle, to_bytes


make = signed_version
setup = signed_project


def build_with(bundles, out, trust, data: bytes):
    """Make *data* the record's only input file and build."""
    (bundles / "r.json").write_bytes(data)
    return build(BuildOptions(bundles=bundles, output=out, trust=trust, search=False))


def newer_published(tmp_path, newer_title, older_title):
    """A site that published a newer bundle of a record, and an older bundle of the same record to offer next."""
    key, trust, bundles, base = setup(tmp_path)
    newer = make(base, key, newer_title, "2026-10-10T00:00:00Z")
    older = make(base, key, older_title, "2026-09-01T00:00:00Z")
    out = tmp_path / "site"
    build_with(bundles, out, trust, newer)
    return key, trust, bundles, base, out, newer, older, record_id(newer)


def test_older_built_at_is_refused_and_newer_kept(tmp_path):
    key, trust, bundles, base, out, newer, older, pith_id = newer_published(tmp_path, "Newer title", "Older title")
    report = build_with(bundles, out, trust, older)
    assert (out / "pith" / pith_id / "bundle.json").read_bytes() == newer
    assert "Newer title" in (out / "pith" / pith_id / "index.html").read_text()
    assert any("rollback refused" in w for w in report.warnings)
    statuses = {o.inspection.rel: o.status for o in report.outcomes}
    assert statuses["r.json"] == "superseded"
    doc = json.loads((out / "verification.json").read_text())
    assert any("rollback refused" in w for w in doc["warnings"])
    # The report names the copy published in the input's place (the manifest a later build and --live read).
    kept = [f for f in doc["files"] if f["status"] == "published"]
    assert [(f["path"], f["note"]) for f in kept] == [(f"(previous site) pith/{pith_id}/bundle.json",
                                                       "kept from the previous site")]
    assert kept[0]["sha256"] == hashlib.sha256(newer).hexdigest()
    # Once a genuinely newer bundle arrives, it is published.
    newest = make(base, key, "Newest title", "2026-11-01T00:00:00Z")
    report = build_with(bundles, out, trust, newest)
    assert (out / "pith" / pith_id / "bundle.json").read_bytes() == newest
    assert not report.warnings


def test_fewer_events_is_a_rollback(tmp_path):
    key, trust, bundles, base = setup(tmp_path)
    more = make(base, key, "T", "2026-10-10T00:00:00Z", extra_events=2)
    fewer = make(base, key, "T", "2026-10-10T00:00:00Z")
    out = tmp_path / "site"
    build_with(bundles, out, trust, more)
    report = build_with(bundles, out, trust, fewer)
    pith_id = record_id(more)
    assert (out / "pith" / pith_id / "bundle.json").read_bytes() == more
    assert any("rollback refused" in w for w in report.warnings)


def test_rolled_back_copy_that_no_longer_verifies_is_not_kept(tmp_path):
    _, trust, bundles, _, out, newer, older, pith_id = newer_published(tmp_path, "Newer", "Older")
    # Someone edits the published copy on the host: it must not be trusted just because we wrote it once.
    published = out / "pith" / pith_id / "bundle.json"
    data = published.read_bytes().replace(b"Newer", b"Evil!")
    published.unlink()
    published.write_bytes(data)
    report = build_with(bundles, out, trust, older)
    assert (out / "pith" / pith_id / "bundle.json").read_bytes() == older
    assert any("no longer verifies" in w for w in report.warnings)


def test_a_copy_the_previous_sites_manifest_does_not_name_is_not_kept(tmp_path):
    """The previous site's copy of the record is swapped for another signed bundle of it, newer than the input
    but not the one verification.json names: the swap proves nothing, so the input is published, with a
    warning saying why."""
    key, trust, bundles, base, out, newer, older, pith_id = newer_published(tmp_path, "Newer", "Older")
    swapped = make(base, key, "Swapped in", "2026-10-05T00:00:00Z")
    for published in (out / "pith" / pith_id / "bundle.json", out / ".well-known" / "pith" / pith_id / "bundle.json"):
        published.unlink()
        published.write_bytes(swapped)
    report = build_with(bundles, out, trust, older)
    assert (out / "pith" / pith_id / "bundle.json").read_bytes() == older
    assert any("is not the one its manifest names" in w for w in report.warnings)


def test_two_bundles_one_record_newest_valid_wins_even_if_newest_is_invalid(tmp_path):
    key, trust, bundles, base = setup(tmp_path)
    valid_old = make(base, key, "Valid", "2026-09-01T00:00:00Z")
    invalid_new = json.loads(make(base, key, "Invalid", "2026-12-01T00:00:00Z"))
    invalid_new["links"]["resolver"] = "https://tampered.example/"
    (bundles / "a.json").write_bytes(valid_old)
    (bundles / "b.json").write_bytes(to_bytes(invalid_new))
    report = build(BuildOptions(bundles=bundles, output=tmp_path / "site", trust=trust, search=False))
    assert {o.inspection.rel: o.status for o in report.outcomes} == {"a.json": "published", "b.json": "rejected"}


def _claim_in_the_sites_manifest(out, pith_id, **claim):
    """Edit what the site's verification.json says it published for *pith_id* (the output is untrusted input)."""
    manifest = out / "verification.json"
    doc = json.loads(manifest.read_text())
    for entry in doc["files"]:
        if entry.get("pith_number", "").endswith(pith_id):
            entry.update(claim)
    manifest.write_text(json.dumps(doc))


def test_a_previous_site_claiming_its_copy_is_newer_proves_nothing_against_the_copys_own_values(tmp_path):
    """The previous site published the older bundle; its manifest is edited to say that copy was built in 2099.
    The copy's own signed values say it is older than the input, so the input is published."""
    key, trust, bundles, base = setup(tmp_path)
    older = make(base, key, "Older title", "2026-09-01T00:00:00Z")
    newer = make(base, key, "Newer title", "2026-10-10T00:00:00Z")
    out = tmp_path / "site"
    build_with(bundles, out, trust, older)
    pith_id = record_id(older)
    _claim_in_the_sites_manifest(out, pith_id, built_at="2099-01-01T00:00:00Z")
    report = build_with(bundles, out, trust, newer)
    assert (out / "pith" / pith_id / "bundle.json").read_bytes() == newer
    assert {o.inspection.rel: o.status for o in report.outcomes}["r.json"] == "published"
    assert not any("rollback refused" in w for w in report.warnings)


def test_another_records_bundle_at_the_previous_sites_path_proves_nothing(tmp_path):
    """The previous site's copy of record R is replaced by record S's verified bundle, and the manifest names it:
    S must not stand in for R, nor R's input be dropped."""
    key, trust, bundles, base = setup(tmp_path)
    older = make(base, key, "Older title", "2026-09-01T00:00:00Z")
    newer = make(base, key, "Newer title", "2026-10-10T00:00:00Z")
    other = json.loads(make(base, key, "Other", "2026-12-01T00:00:00Z"))
    other["canonical_record"]["source"]["version"] = 2  # (another version of the paper: another record)
    from signing import sign_bundle, with_paper
    other = to_bytes(sign_bundle(with_paper(other, title="Other"), key))
    out = tmp_path / "site"
    (bundles / "s.json").write_bytes(other)
    build_with(bundles, out, trust, newer)
    pith_id = record_id(newer)
    other_id = record_id(other)
    assert other_id != pith_id
    planted = out / "pith" / pith_id / "bundle.json"
    planted.unlink()
    planted.write_bytes(other)
    _claim_in_the_sites_manifest(out, pith_id, sha256=hashlib.sha256(other).hexdigest(),
                                 built_at="2099-01-01T00:00:00Z")
    report = build_with(bundles, out, trust, older)
    assert {o.inspection.rel: o.status for o in report.outcomes}["r.json"] == "published"
    assert (out / "pith" / pith_id / "bundle.json").read_bytes() == older
    assert (out / "pith" / other_id / "bundle.json").read_bytes() == other


def _count_parses(monkeypatch) -> list:
    """Each reading of a live site's claims from its verification.json (the output folder read from)."""
    return calls_of(monkeypatch, select_stage, "read_previous_site")


def test_the_live_sites_claims_come_from_the_cache_while_its_verification_json_is_the_one_written(tmp_path,
                                                                                                  monkeypatch):
    """The build that wrote verification.json records what it published (from its own outcomes); the next build
    takes the claims from that record, not from parsing the file again (~0.7 s at 100,000 records), and they
    refuse the same rollback."""
    key, trust, bundles, base, out, newer, older, pith_id = newer_published(tmp_path, "Newer title", "Older title")
    parsed = _count_parses(monkeypatch)
    report = build_with(bundles, out, trust, older)
    assert parsed == []
    assert (out / "pith" / pith_id / "bundle.json").read_bytes() == newer
    assert any("rollback refused" in w for w in report.warnings)


def test_a_verification_json_that_is_not_the_one_written_is_read_for_its_claims(tmp_path, monkeypatch):
    """Edited by hand (or replaced), the live verification.json is no longer the file the record was made for:
    its own claims are read, as before there was a record."""
    key, trust, bundles, base, out, newer, older, pith_id = newer_published(tmp_path, "Newer title", "Older title")
    marker = out / "verification.json"
    data = marker.read_bytes()
    marker.unlink()
    marker.write_bytes(data)  # (the same claims, another file)
    parsed = _count_parses(monkeypatch)
    report = build_with(bundles, out, trust, older)
    assert parsed == [out]
    assert any("rollback refused" in w for w in report.warnings)


# Records of what the live site published that this user's builder did not write as it writes them: without its
# tag (one that would let an older bundle back in by claiming nothing was published), or of another shape under
# this user's own tag, as a builder's bug could leave them (the rollback rule compares the values).
PLANTED_RECORDS = {
    "no tag": ("none", lambda doc, pid: doc.update(published={})),
    "a made-up tag": ("made-up", lambda doc, pid: doc.update(published={})),
    "a digest that is no string": ("own", lambda doc, pid: doc["published"][pid].__setitem__(0, 7)),
    "a date that is no string": ("own", lambda doc, pid: doc["published"][pid].__setitem__(1, 20991231)),
    "an event count that is no number": ("own", lambda doc, pid: doc["published"][pid].__setitem__(2, "2")),
    "a build id that is no string": ("own", lambda doc, pid: doc.update(build_id=1)),
}


@pytest.mark.parametrize("planted", list(PLANTED_RECORDS))
def test_a_record_of_the_live_site_not_as_this_builder_writes_it_is_not_taken(tmp_path, monkeypatch, planted):
    """Such a record counts for nothing: the file's claims are read, and the older bundle is still refused."""
    key, trust, bundles, base, out, newer, older, pith_id = newer_published(tmp_path, "Newer title", "Older title")
    db = sqlite3.connect(default_cache_dir(out) / "cache.sqlite")
    doc, _ = cache_document(db, "previous_site")
    assert pith_id in doc["published"]
    tag, change = PLANTED_RECORDS[planted]
    change(doc, pith_id)
    own = own_document_tag("previous_site", doc)
    plant_document(db, "previous_site", doc, {"none": None, "made-up": "0" * 64, "own": own}[tag])
    db.commit()
    db.close()
    parsed = _count_parses(monkeypatch)
    report = build_with(bundles, out, trust, older)
    assert parsed == [out]
    assert (out / "pith" / pith_id / "bundle.json").read_bytes() == newer
    assert any("rollback refused" in w for w in report.warnings)


def test_serve_refuses_a_rollback_behind_what_a_build_in_another_terminal_published(tmp_path, serve_store):
    """serve keeps what the live site published between its builds; ``build`` run meanwhile in another terminal
    publishes a newer bundle, and serve's next build must refuse the older one the inputs hold again, as any
    build would: the live site is the one that build left, not the one serve made last."""
    key, trust, bundles, base = setup(tmp_path)
    older = make(base, key, "Older title", "2026-09-01T00:00:00Z")
    newer = make(base, key, "Newer title", "2026-10-10T00:00:00Z")
    pith_id = record_id(newer)
    out = tmp_path / "site"
    store = serve_store

    def serve_build(data: bytes) -> BuildReport:
        (bundles / "r.json").write_bytes(data)
        return build(BuildOptions(bundles=bundles, output=out, trust=trust, search=False,
                                  session=ServeSession(store)))
    serve_build(older)
    build_with(bundles, out, trust, newer)  # (the other terminal)
    report = serve_build(older)
    assert (out / "pith" / pith_id / "bundle.json").read_bytes() == newer
    assert "Newer title" in (out / "pith" / pith_id / "index.html").read_text()
    assert any("rollback refused" in w for w in report.warnings)


@pytest.mark.parametrize("second", ["older", "newer"])
def test_serve_patches_its_selection_as_select_would_choose(tmp_path, second):
    """serve patches its last selection with the files that came and went; a new file holding a second bundle of
    a record already published goes to the choice between the two (the newer is published, the other
    superseded), as a selection made afresh has it; and with the newer gone, the other is published again."""
    key, trust, bundles, base = setup(tmp_path)
    other = make(base, key, "Another title", "2026-10-01T00:00:00Z")
    files = {"a.json": make(base, key, "A title", "2026-10-10T00:00:00Z")}
    store = IncrementalStore()
    results = {}  # (as serve has them: the same result for a file that did not change)

    def selected():
        inspections = [results.setdefault(rel, inspect_bytes(rel, raw, trust)) for rel, raw in sorted(files.items())]
        assert all(i.verified for i in inspections)
        paths = {rel: bundles / rel for rel in files}
        return (select_bundles(store, inspections, paths),
                select([Candidate(i, paths[i.rel]) for i in inspections]))
    patched, afresh = selected()
    files["b.json"] = other if second == "older" else make(base, key, "Newer title", "2026-11-01T00:00:00Z")
    patched, afresh = selected()
    winner = "a.json" if second == "older" else "b.json"
    assert [c.inspection.rel for c in patched.published.values()] == [winner]
    assert patched.published.keys() == afresh.published.keys() and patched.superseded == afresh.superseded
    assert list(patched.superseded) == [{"a.json": "b.json", "b.json": "a.json"}[winner]]
    del files[winner]  # and with the winner gone, the other is the record's bundle again
    patched, afresh = selected()
    assert [c.inspection.rel for c in patched.published.values()] == list(files)
    assert not patched.superseded and not afresh.superseded


def test_a_few_files_changed_or_gone_patch_the_last_selection_to_what_select_chooses(tmp_path):
    """serve's patch (``patched_selection``): a file rewritten with a newer bundle of its record, and one
    deleted, give the selection ``select`` makes afresh, without falling back to it (None)."""
    key, trust, bundles = resigned_real_bundles(tmp_path)
    paths = sorted(bundles.iterdir())
    before = [Candidate(inspect_bytes(p.name, p.read_bytes(), trust), p) for p in paths]
    last = select(before)
    changed = json.loads(paths[0].read_bytes())
    changed["built_at"] = "2026-11-30T00:00:00Z"
    renewed = inspect_bytes(paths[0].name, to_bytes(sign_bundle(changed, key)), trust)
    now = [Candidate(renewed, paths[0]), *before[1:-1]]  # the first file renewed, the last one gone
    patched = select_stage.patched_selection({c.inspection.rel: c for c in before}, last, now)
    assert patched is not None
    assert list(patched.published.items()) == list(select(now).published.items())
    assert patched.published[renewed.pith_id].inspection is renewed and len(patched.published) == len(paths) - 1


def test_outcomes_kept_in_pieces_follow_every_change_of_what_they_are_made_of(tmp_path, monkeypatch):
    """serve keeps the files' outcomes a piece at a time (``record_outcomes``): the same results give the very
    same outcomes again, and a file newly superseded, or a record whose bundle changed after it was verified,
    gives the outcomes a build that keeps nothing gives."""
    monkeypatch.setattr(report_module, "PIECE_LINES", 2)
    key, trust, bundles = resigned_real_bundles(tmp_path)
    inspections = [inspect_bytes(p.name, p.read_bytes(), trust) for p in sorted(bundles.iterdir())]
    inspections.append(inspect_bytes("zz-broken.json", b"{", trust))  # five files: three pieces
    selection = select([Candidate(i, bundles / i.rel) for i in inspections if i.verified])
    store = IncrementalStore()

    def outcomes(changed: dict, keeping: bool = True) -> list:
        report = BuildReport()
        select_stage.record_outcomes(report, inspections, selection, changed, store if keeping else
                                     IncrementalStore(keeps=False))
        return report.outcomes

    def shown(found: list) -> list:
        return [(o.inspection.rel, o.status, o.note, o.inspection.check, o.inspection.reason) for o in found]

    first = outcomes({})
    assert all(a is b for a, b in zip(outcomes({}), first)) and shown(first) == shown(outcomes({}, keeping=False))
    victim = inspections[2]
    selection.superseded[victim.rel] = "by a newer bundle of its record"
    now = outcomes({})
    assert shown(now) == shown(outcomes({}, keeping=False)) and ("by a newer bundle of its record" in
                                                                  [o.note for o in now])
    changed = {inspections[0].pith_id: "file_changed: changed after it was verified"}
    now = outcomes(changed)
    assert shown(now) == shown(outcomes(changed, keeping=False)) and now[0].inspection.check == "file_changed"


def test_a_kept_copy_whose_bytes_changed_after_it_was_verified_is_not_reported_published(tmp_path):
    """A copy kept from the previous site (a rollback refused) is published with a note saying so; where its
    bytes changed before its files were written, it is not on the site, and the report must not say it is."""
    key, trust, bundles = resigned_real_bundles(tmp_path)
    inspections = [inspect_bytes(p.name, p.read_bytes(), trust) for p in sorted(bundles.iterdir())]
    selection = select([Candidate(i, bundles / i.rel) for i in inspections])
    kept, other = inspections[0], inspections[1]
    for i in (kept, other):
        selection.published[i.pith_id] = Candidate(i, tmp_path / "previous.json", kept_from="the previous site")
    report = BuildReport()
    select_stage.record_outcomes(report, inspections, selection,
                                 {kept.pith_id: "file_changed: changed after it was verified"}, IncrementalStore())
    notes = [(o.inspection.pith_id, o.status, o.note) for o in report.outcomes if o.note]
    assert notes == [(other.pith_id, "published", "kept from the previous site")]
