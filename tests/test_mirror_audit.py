"""``site-builder verify`` of a folder laid out as a mirror (PITH_FORMAT.md §5): each record's bundle, its second
path and its state.json, against a site the builder made of the real bundles and then tampered with."""

from __future__ import annotations

import json

import pytest
from conftest import REAL_FILES, both_keys, generated_bundles, opts, run_unprivileged

from site_builder.build import BuildOptions, build
from site_builder.cli import main
from site_builder.keys import load_trust_set
from site_builder.loading import DEFAULT_MAX_BYTES, is_mirror
from site_builder.mirror_audit import audit_records, mirror_records
from site_builder.parallel import PARALLEL_THRESHOLD

NUMBERS = sorted((json.loads(p.read_bytes())["pith_number"] for p in REAL_FILES), key=lambda n: n.rpartition(":")[2])
IDS = [number.rpartition(":")[2] for number in NUMBERS]
YEARS = [number.split(":")[1] for number in NUMBERS]


@pytest.fixture
def mirror(bundles_dir, tmp_path):
    site = tmp_path / "mirror"
    build(BuildOptions(bundles=bundles_dir, output=site, trust=load_trust_set(), search=False))
    return site


def verify(capsys, *paths) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["verify", *map(str, paths)])
    return code, capsys.readouterr().out.splitlines()


def test_a_mirror_the_builder_made_verifies_record_by_record_and_its_pages_are_not_bundles(mirror, capsys):
    assert is_mirror(mirror) and [r.rel for r in mirror_records(mirror)] == [
        str(mirror / "pith" / pid / "bundle.json") for pid in IDS]  # (its short addresses are pages: left out)
    code, lines = verify(capsys, mirror)
    assert code == 0
    assert [line.split()[0] + " " + line.split()[2] for line in lines] == [
        f"OK {mirror}/pith/{pid}/bundle.json" for pid in IDS]


def test_a_bundles_folder_is_verified_file_by_file_as_ever(bundles_dir, mirror, capsys):
    assert not is_mirror(bundles_dir)
    (mirror / "pith-mirrors.json").unlink()  # (no manifest: not laid out as a mirror, every JSON file a bundle)
    assert not is_mirror(mirror)
    code, lines = verify(capsys, mirror)
    assert code == 1
    assert f"REJECTED {mirror}/pith/{IDS[0]}/state.json: structure: bundle.bundle_type is missing" in lines


def test_a_site_the_builder_made_inside_a_folder_of_bundles_is_checked_as_a_mirror(bundles_dir, capsys):
    """``verify bundles`` where an earlier build's output lies inside it (a build takes no bundle from it): the
    bundles are checked as bundles and the site record by record, as it is served (its state.json files are
    states, not bundles); a site without the mirror's manifest has its JSON files checked as any folder's."""
    site = bundles_dir / "old" / "site"
    build(BuildOptions(bundles=bundles_dir, output=site, trust=load_trust_set(), search=False))
    code, lines = verify(capsys, bundles_dir)
    assert code == 0 and [line.split()[2] for line in lines] == sorted(
        str(p) for p in bundles_dir.glob("*.json")) + [f"{site}/pith/{pid}/bundle.json" for pid in IDS]
    (site / "pith" / IDS[0] / "state.json").write_text("{}")
    code, lines = verify(capsys, bundles_dir)
    assert code == 1 and len(lines) == 2 * len(IDS) + 1
    assert f"REJECTED {site}/pith/{IDS[0]}/state.json: state_json: not the state of the verified bundle beside it" \
        in lines
    (site / "pith").chmod(0)  # (its records cannot be listed: one rejection, and the rest is checked)

    def check_unlistable():
        code, lines = verify(capsys, bundles_dir)
        assert code == 1 and lines[-1] == f"REJECTED {site}/pith: file_read: cannot list folder: Permission denied"
        assert [line.split()[-1] for line in lines[:-1]] == sorted(str(p) for p in bundles_dir.glob("*.json"))
    try:
        run_unprivileged(check_unlistable)
    finally:
        (site / "pith").chmod(0o755)
    (site / "pith-mirrors.json").unlink()
    code, lines = verify(capsys, bundles_dir)
    assert code == 1 and f"REJECTED {site}/pith/{IDS[1]}/state.json: structure: bundle.bundle_type is missing" in lines


def test_a_mirrors_pith_folder_or_one_records_folder_is_checked_as_the_mirror_checks_it(mirror, capsys,
                                                                                       monkeypatch):
    """``verify site/pith`` or a record's folder: its ``state.json`` files are no bundles, but each the state of the
    bundle beside it; the records' other files are found where the mirror serves them, and named as the folder
    given names paths (relative to the working folder for a relative one)."""
    assert verify(capsys, mirror / "pith") == (0, [f"OK pith:{year}:{pid} {mirror}/pith/{pid}/bundle.json"
                                                   for year, pid in zip(YEARS, IDS)])
    record = mirror / "pith" / IDS[0]
    (record / "state.json").write_text("{}")
    (mirror / ".well-known" / "pith" / IDS[0] / "bundle.json").unlink()
    code, lines = verify(capsys, record)
    assert code == 1 and lines == [
        f"OK pith:{YEARS[0]}:{IDS[0]} {record}/bundle.json",
        f"REJECTED {mirror}/.well-known/pith/{IDS[0]}/bundle.json: mirror_path: missing",
        f"REJECTED {record}/state.json: state_json: not the state of the verified bundle beside it"]
    monkeypatch.chdir(record)
    assert verify(capsys, ".") == (1, [
        f"OK pith:{YEARS[0]}:{IDS[0]} bundle.json",
        f"REJECTED ../../.well-known/pith/{IDS[0]}/bundle.json: mirror_path: missing",
        "REJECTED state.json: state_json: not the state of the verified bundle beside it"])
    monkeypatch.chdir(mirror)
    code, lines = verify(capsys, "pith")
    assert code == 1 and len(lines) == len(IDS) + 2 and f"OK pith:{YEARS[1]}:{IDS[1]} pith/{IDS[1]}/bundle.json" in lines
    assert verify(capsys, f"pith/{IDS[1]}") == (0, [f"OK pith:{YEARS[1]}:{IDS[1]} pith/{IDS[1]}/bundle.json"])


def test_a_state_json_served_by_a_mirror_must_be_the_verified_bundles_state(mirror, capsys):
    """state.json is the one file of a record no signature covers: a mirror could serve any state there."""
    first, second = (mirror / "pith" / pid / "state.json" for pid in IDS[:2])
    state = json.loads(first.read_bytes())
    first.write_text(json.dumps(state, indent=2, sort_keys=True))  # (another layout of the same value: as served)
    assert verify(capsys, mirror)[0] == 0
    state["graph_snapshots"] = []
    first.write_text(json.dumps(state))
    second.write_bytes(b'{"a": 1, "a": 2}')
    third = mirror / "pith" / IDS[2] / "state.json"
    text = third.read_text()
    assert '"available":true' in text
    third.write_text(text.replace('"available":true', '"available":1', 1))  # (equal in Python, not in JSON)
    code, lines = verify(capsys, mirror)
    assert code == 1
    assert f"REJECTED {first}: state_json: not the state of the verified bundle beside it" in lines
    assert f"REJECTED {second}: state_json: not strict JSON: duplicate key 'a'" in lines
    assert f"REJECTED {third}: state_json: not the state of the verified bundle beside it" in lines
    assert sum(line.startswith("OK ") for line in lines) == len(IDS)  # (the bundles themselves verify)


def replaced(path, data: bytes) -> None:
    """Put *data* at *path* as a file of its own (a record's two bundle paths are one file, linked twice)."""
    path.unlink()
    path.write_bytes(data)


def test_each_record_folder_must_hold_its_own_bundle_at_both_paths(mirror):
    pith, well_known = mirror / "pith", mirror / ".well-known" / "pith"
    other = (pith / IDS[1] / "bundle.json").read_bytes()
    replaced(pith / IDS[0] / "bundle.json", other)  # another record's, which verifies
    own = bytearray((pith / IDS[2] / "bundle.json").read_bytes())
    own[own.index(b'"title":"') + 9] ^= 0x20  # (one letter's case: as long as the bundle, not its bytes)
    replaced(well_known / IDS[2] / "bundle.json", bytes(own))
    (well_known / IDS[3] / "bundle.json").unlink()
    raw = bytearray(other)
    raw[raw.index(b'"signature_b64":"') + 20] ^= 1  # (a signature tampered with)
    replaced(pith / IDS[1] / "bundle.json", bytes(raw))
    (pith / IDS[2] / "state.json").unlink()
    (pith / IDS[2] / "state.json").symlink_to(pith / IDS[1] / "state.json")
    (pith / IDS[3] / "state.json").unlink()
    (pith / IDS[3] / "state.json").symlink_to(pith / "nowhere.json")  # (a link to nothing is a link, not missing)
    results = {r.rel.removeprefix(f"{mirror}/"): (r.check, r.reason) for r in audit_records(mirror_records(mirror),
                                                                                            load_trust_set())}
    assert results[f"pith/{IDS[0]}/bundle.json"][0] == "mirror_path"
    assert results[f"pith/{IDS[0]}/bundle.json"][1].endswith(f"not of record {IDS[0]}")
    assert results[f"pith/{IDS[1]}/bundle.json"][0] in ("receipt_signature", "event_signature", "bundle_signature")
    assert results[f".well-known/pith/{IDS[2]}/bundle.json"] == (
        "mirror_copy", f"not the same bytes as pith/{IDS[2]}/bundle.json")
    assert results[f"pith/{IDS[2]}/state.json"] == ("file_type", "a symbolic link (not followed)")
    assert results[f"pith/{IDS[3]}/state.json"] == ("file_type", "a symbolic link (not followed)")
    assert results[f".well-known/pith/{IDS[3]}/bundle.json"] == ("mirror_path", "missing")
    assert results[f"pith/{IDS[3]}/bundle.json"] == (None, "")
    assert results[f"pith/{IDS[2]}/bundle.json"] == (None, "")
    assert len(results) == 8  # (of a record whose bundle is rejected, nothing else is checked)


def test_a_copy_or_state_over_the_size_bound_is_refused_unread(mirror):
    """The bound on a bundle holds for a record's two other files: a mirror's 20 GB file is not read whole."""
    copy = mirror / ".well-known" / "pith" / IDS[0] / "bundle.json"
    state = mirror / "pith" / IDS[1] / "state.json"
    for path in (copy, state):
        path.unlink()
        with open(path, "wb") as file:
            file.truncate(DEFAULT_MAX_BYTES + 1)  # (sparse: nothing of it is on the disk)
    results = {r.rel: (r.check, r.reason) for r in audit_records(mirror_records(mirror), load_trust_set())}
    over = ("file_size", f"{DEFAULT_MAX_BYTES + 1} bytes is over the {DEFAULT_MAX_BYTES}-byte limit")
    assert results[str(copy)] == results[str(state)] == over


def test_only_a_mirror_its_pith_folder_or_a_records_folder_is_read_as_one(mirror, tmp_path):
    """Anything else is a folder of bundles, every JSON file in it read as one: a folder of one's own bundles
    named ``pith``, a short address's folder in a mirror (a page), or a link to a mirror's folder (as
    ``is_mirror`` follows none)."""
    own = tmp_path / "pith"
    own.mkdir()
    (own / "a.json").write_bytes(REAL_FILES[0].read_bytes())
    short = next(p for p in (mirror / "pith").iterdir() if len(p.name) == 8)
    link, whole = tmp_path / "link", tmp_path / "whole"
    link.symlink_to(mirror / "pith")
    whole.symlink_to(mirror)
    others = (mirror / "assets", mirror / ".well-known" / "pith")  # (a mirror's other folders, one named pith)
    assert [mirror_records(folder) for folder in (own, short, link, whole, *others)] == [None] * 6
    assert len(mirror_records(mirror / "pith")) == len(IDS)


def test_a_large_mirror_is_checked_in_worker_processes_with_the_same_results(tmp_path):
    generated_bundles(tmp_path / "bundles", PARALLEL_THRESHOLD + 6)
    site = tmp_path / "mirror"
    build(opts(tmp_path, site, both_keys()))
    pid = sorted(p.name for p in (site / "pith").iterdir() if len(p.name) == 26)[-1]
    (site / "pith" / pid / "state.json").write_bytes(b"{}")
    records = mirror_records(site)
    in_workers = audit_records(records, both_keys(), jobs=2)
    assert in_workers == audit_records(records, both_keys(), jobs=1)
    assert [(r.rel, r.check) for r in in_workers if not r.verified] == [
        (str(site / "pith" / pid / "state.json"), "state_json")]
    assert sum(r.verified for r in in_workers) == PARALLEL_THRESHOLD + 6
