"""The mirrored bundles in a tree (mirrors.py): a record counts as proven only while both of its paths are the
file the cache recorded, and nothing counts without a record."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import time

import orjson
import pytest

from site_builder.mirrors import (
    MirrorCheck,
    MirrorLookups,
    MirrorRecord,
    check_live,
    mirror_signatures,
    record_after,
    records_in,
    unproven,
)

from conftest import open_descriptors

RAW = b'{"a": 1}'
SHA = hashlib.sha256(RAW).hexdigest()
NOTHING_CHECKED = MirrorCheck(frozenset(), {}, {})


def signatures_now(tree, published):
    """Every record's signature looked up (as after a build that wrote them all)."""
    return record_after(tree, NOTHING_CHECKED, published, set(published))


def edited_in(tree, recorded):
    return set(check_live(tree, recorded).edited)


def _tree(root, ids=("AAAA", "BBBB"), linked=True):
    for pid in ids:
        first = root / "pith" / pid / "bundle.json"
        second = root / ".well-known" / "pith" / pid / "bundle.json"
        for path in (first, second):
            path.parent.mkdir(parents=True, exist_ok=True)
        first.write_bytes(RAW)
        if linked:
            os.link(first, second)
        else:
            second.write_bytes(RAW)
    return root


def test_a_record_is_signed_by_both_paths_and_missing_either_is_no_signature(tmp_path):
    tree = _tree(tmp_path)
    signatures = dict(mirror_signatures(tree, ["AAAA", "BBBB", "CCCC"]))
    first, second = signatures["AAAA"].split(" ")
    assert first == second  # (one file, two names)
    assert signatures["CCCC"] is None
    (tree / ".well-known" / "pith" / "BBBB" / "bundle.json").unlink()
    assert dict(mirror_signatures(tree, ["BBBB"])) == {"BBBB": None}


def test_a_folder_of_mirrors_that_is_a_link_proves_nothing(tmp_path):
    tree = _tree(tmp_path / "site")
    elsewhere = tmp_path / "elsewhere"
    (tree / ".well-known" / "pith").rename(elsewhere)
    (tree / ".well-known" / "pith").symlink_to(elsewhere)
    assert dict(mirror_signatures(tree, ["AAAA"])) == {"AAAA": None}


@pytest.mark.parametrize("missing", ["pith", ".well-known/pith"])
def test_a_missing_folder_of_mirrors_proves_nothing_whatever_the_working_folder_holds(tmp_path, monkeypatch,
                                                                                         missing):
    """Lookups are made relative to the two folders held open: with one of them missing, none is made (never
    relative to the working folder, where a bundle.json by that name would be another file altogether)."""
    tree = _tree(tmp_path / "site")
    lookalike = _tree(tmp_path / "elsewhere", linked=False)
    os.replace(tree / missing, tmp_path / "gone")
    monkeypatch.chdir(lookalike / "pith")  # (holds AAAA/bundle.json)
    assert dict(mirror_signatures(tree, ["AAAA", "BBBB"])) == {"AAAA": None, "BBBB": None}


def test_looking_up_leaves_no_folder_open(tmp_path):
    """serve looks up both trees on every change, for hours: each lookup closes the folders it opened, when it
    ends early, when a tree is missing and when a folder on the way is a link."""
    tree = _tree(tmp_path / "site")
    before = open_descriptors()
    assert dict(mirror_signatures(tree, ["AAAA"]))["AAAA"] is not None
    looking = mirror_signatures(tree, ["AAAA", "BBBB"])
    next(looking)
    looking.close()
    assert dict(mirror_signatures(tmp_path / "missing", ["AAAA"])) == {"AAAA": None}
    (tree / ".well-known" / "pith").rename(tmp_path / "elsewhere")
    (tree / ".well-known" / "pith").symlink_to(tmp_path / "elsewhere")
    assert dict(mirror_signatures(tree, ["AAAA"])) == {"AAAA": None}
    assert open_descriptors() == before


def test_edited_counts_only_a_changed_digest_and_everything_without_a_record(tmp_path):
    tree = _tree(tmp_path)
    recorded = signatures_now(tree, {"AAAA": SHA, "BBBB": SHA})
    assert edited_in(tree, recorded) == set()
    os.utime(tree / "pith" / "AAAA" / "bundle.json", ns=(0, 10**9))  # touched only: hashed, still the bytes
    second = tree / ".well-known" / "pith" / "BBBB" / "bundle.json"
    second.unlink()
    second.write_bytes(b'{"a": 2}')  # another file at one path
    check = check_live(tree, recorded)
    assert set(check.edited) == {"BBBB"}
    # the touched record is the next build's to record by its signature now, so that it is not hashed again
    assert check.touched == {"AAAA": dict(mirror_signatures(tree, ["AAAA"]))["AAAA"]} != {"AAAA": recorded["AAAA"][0]}
    assert edited_in(tree, None) == records_in(tree) == {"AAAA", "BBBB"}


def test_a_tree_beside_proves_only_the_recorded_files_themselves(tmp_path):
    live = _tree(tmp_path / "live")
    beside = tmp_path / "beside"
    for pid in ("AAAA", "BBBB"):  # a twin: the same files under both trees
        for folder in ("pith", ".well-known/pith"):
            (beside / folder / pid).mkdir(parents=True)
            os.link(live / folder / pid / "bundle.json", beside / folder / pid / "bundle.json")
    recorded = signatures_now(live, {"AAAA": SHA, "BBBB": SHA})
    assert unproven(beside, ["AAAA", "BBBB"], recorded) == set()
    copy = beside / "pith" / "BBBB" / "bundle.json"
    copy.unlink()
    copy.write_bytes(RAW)  # the same bytes, but not the file the cache recorded
    assert unproven(beside, ["AAAA", "BBBB"], recorded) == {"BBBB"}
    assert unproven(beside, ["AAAA"], None) == {"AAAA"}


def test_a_file_put_in_place_with_the_same_size_and_mtime_is_still_another_file(tmp_path):
    """What one who can write the tree does to hide an edit: a forged bundle of the same size, its mtime set to
    the recorded file's, renamed over it.  Its inode tells it apart (it was made while the file it replaced still
    was, so it cannot have that file's number): the live check hashes it, and the tree beside does not keep it."""
    tree = _tree(tmp_path)
    recorded = signatures_now(tree, {"AAAA": SHA, "BBBB": SHA})
    target = tree / "pith" / "AAAA" / "bundle.json"
    forged = target.with_name("forged.json")
    forged.write_bytes(b'{"a": 9}')
    was = target.stat()
    os.utime(forged, ns=(was.st_atime_ns, was.st_mtime_ns))
    assert (forged.stat().st_size, forged.stat().st_mtime_ns) == (was.st_size, was.st_mtime_ns)
    os.replace(forged, target)
    assert edited_in(tree, recorded) == {"AAAA"}
    assert unproven(tree, ["AAAA", "BBBB"], recorded) == {"AAAA"}


def test_without_hard_links_each_path_is_its_own_file_and_still_checked(tmp_path):
    tree = _tree(tmp_path, linked=False)
    recorded = signatures_now(tree, {"AAAA": SHA, "BBBB": SHA})
    assert edited_in(tree, recorded) == set()
    with open(tree / ".well-known" / "pith" / "AAAA" / "bundle.json", "r+b") as f:
        f.write(b"[")
    assert edited_in(tree, recorded) == {"AAAA"}


def test_lookups_made_ahead_by_a_child_are_those_made_here(tmp_path):
    live = _tree(tmp_path / "live", ids=("AAAA", "BBBB", "CCCC"))
    beside = tmp_path / "beside"
    for pid in ("AAAA", "BBBB"):  # a twin of two records: the same files under both trees
        for folder in ("pith", ".well-known/pith"):
            (beside / folder / pid).mkdir(parents=True)
            os.link(live / folder / pid / "bundle.json", beside / folder / pid / "bundle.json")
    recorded = signatures_now(live, {"AAAA": SHA, "BBBB": SHA, "CCCC": SHA})
    os.utime(live / "pith" / "AAAA" / "bundle.json", ns=(0, 10**9))  # (the file both trees share)
    (live / ".well-known" / "pith" / "CCCC" / "bundle.json").unlink()
    copy = beside / "pith" / "BBBB" / "bundle.json"
    copy.unlink()
    copy.write_bytes(RAW)  # the same bytes in the tree beside, but not the file recorded
    found = []
    for start_method in ("fork", "forkserver", None):
        lookups = MirrorLookups(live, beside, MirrorRecord(orjson.dumps(recorded)), start_method)
        try:
            found.append((lookups.live(), lookups.twin()))
        finally:
            lookups.close()
    assert found[0] == found[1] == found[2]
    live_now, twin_now = found[0]
    assert set(live_now) == {"AAAA", "CCCC"} and live_now["CCCC"] is None
    assert set(check_live(live, recorded, live_now).edited) == edited_in(live, recorded) == {"CCCC"}
    assert set(twin_now) == {"AAAA", "BBBB", "CCCC"} and twin_now["CCCC"] is None
    assert unproven(beside, ["AAAA", "BBBB", "DDDD"], recorded, twin_now) == \
        unproven(beside, ["AAAA", "BBBB", "DDDD"], recorded) == {"AAAA", "BBBB", "DDDD"}


def test_lookups_with_no_tree_beside_or_no_record_leave_the_checks_to_look(tmp_path):
    live = _tree(tmp_path / "live")
    stored = MirrorRecord(orjson.dumps(signatures_now(live, {"AAAA": SHA, "BBBB": SHA})))
    for lookups, made in ((MirrorLookups(live, tmp_path / "none", stored, "fork"), lambda m: m.twin()),
                          (MirrorLookups(live, tmp_path / "none", None, "fork"), lambda m: m.live())):
        try:
            assert made(lookups) is None
        finally:
            lookups.close()


def test_no_child_looks_up_an_output_not_made_yet(tmp_path):
    """A first build has no output to look up: no process is started for it, and a record the cache holds
    (the output deleted since) finds each of its files missing, as a child would."""
    live = _tree(tmp_path / "live")
    stored = MirrorRecord(orjson.dumps(signatures_now(live, {"AAAA": SHA, "BBBB": SHA})))
    others = set(multiprocessing.active_children())
    for record in (stored, None):
        lookups = MirrorLookups(tmp_path / "site", tmp_path / ".site.old", record, "fork")
        try:
            assert not set(multiprocessing.active_children()) - others
            assert lookups.live() == ({"AAAA": None, "BBBB": None} if record is not None else None)
        finally:
            lookups.close()


@pytest.mark.parametrize("start_method", ["fork", None])
def test_a_stored_record_that_is_no_record_proves_nothing(tmp_path, start_method):
    """The record is parsed where it is used (the lookups' child, or the build); bytes that are no record (of
    another shape) count as no record at all, in either place: every record in the tree counts as edited."""
    live = _tree(tmp_path / "live")
    for document in (b"[1, 2]", b'{"AAAA": ["1:2:3"]}', b'{"AAAA": 7}', b"{"):
        lookups = MirrorLookups(live, tmp_path / "none", MirrorRecord(document), start_method)
        try:
            assert lookups.live() is None and lookups.recorded is None
            assert lookups.edited() == {"AAAA", "BBBB"}
        finally:
            lookups.close()


def test_the_record_after_a_build_looks_up_only_what_it_cannot_carry_over(tmp_path):
    """What the next build checks the output against: a record the build took over keeps the signature it was
    checked by (the recorded one, or the one it was found touched with); one it wrote, found edited, recorded
    for other bytes or not recorded at all is looked up in the tree as it is now; a record missing there, or no
    longer published, is left out."""
    tree = _tree(tmp_path, ids=("AAAA", "BBBB", "CCCC", "DDDD", "EEEE", "FFFF"))
    now = dict(mirror_signatures(tree, ["AAAA", "BBBB", "CCCC", "DDDD", "EEEE", "FFFF"]))
    (tree / "pith" / "FFFF" / "bundle.json").unlink()
    other = hashlib.sha256(b"other bytes").hexdigest()
    recorded = {pid: ("as-checked", SHA) for pid in ("AAAA", "BBBB", "CCCC", "FFFF", "GONE")}
    recorded["DDDD"] = ("as-checked", other)
    check = MirrorCheck(frozenset({"CCCC"}), {"BBBB": "touched"}, recorded)
    published = {pid: SHA for pid in ("AAAA", "BBBB", "CCCC", "DDDD", "EEEE", "FFFF")}
    assert record_after(tree, check, published, set()) == {
        "AAAA": ("as-checked", SHA),  # taken over: not looked up (its signature now differs)
        "BBBB": ("touched", SHA),
        "CCCC": (now["CCCC"], SHA),  # edited: looked up
        "DDDD": (now["DDDD"], SHA),  # recorded for other bytes
        "EEEE": (now["EEEE"], SHA),  # no record
        "FFFF": ("as-checked", SHA)}  # (taken over: its record stands until a build looks)
    after_writing = record_after(tree, check, published, {"AAAA", "FFFF"})
    assert after_writing["AAAA"] == (now["AAAA"], SHA) and "FFFF" not in after_writing  # written, then gone


def test_lookups_are_taken_over_only_for_the_same_trees_and_record_and_close_their_child(tmp_path):
    """serve starts the lookups when it first sees a change; the build takes them over only when they were made
    of its output and the tree beside it against the record it read (the same bytes), and closing them stops
    their child."""
    live = _tree(tmp_path / "live")
    recorded = signatures_now(live, {"AAAA": SHA, "BBBB": SHA})
    recorded.update((f"X{n:06d}", ("gone", SHA)) for n in range(300_000))  # (a child still at work when closed)
    beside = tmp_path / "beside"
    others = set(multiprocessing.active_children())
    stored = MirrorRecord(orjson.dumps(recorded))
    lookups = MirrorLookups(live, beside, stored, "fork")
    try:
        assert set(multiprocessing.active_children()) - others
        assert lookups.made_for(live, beside, stored) and lookups.made_for(live, beside, MirrorRecord(
            orjson.dumps(recorded), recorded))  # (the same record, read again or written)
        assert not lookups.made_for(tmp_path / "other", beside, stored)
        assert not lookups.made_for(live, tmp_path / "other", stored)
        assert not lookups.made_for(live, beside, MirrorRecord(orjson.dumps(recorded | {"AAAA": ("0:0:0", SHA)})))
        assert not lookups.made_for(live, beside, None)
    finally:
        lookups.close()
    assert not set(multiprocessing.active_children()) - others


def test_a_check_among_some_records_looks_at_them_alone(tmp_path):
    """What a build that updates the tree beside in place checks of the live site: only the records it may take
    from it, an unrecorded one counting as edited; the whole check where that is made already, and where
    nothing is recorded."""
    live = _tree(tmp_path / "live", ids=("AAAA", "BBBB", "CCCC", "EEEE"))
    recorded = signatures_now(live, {"AAAA": SHA, "BBBB": SHA, "CCCC": SHA, "EEEE": SHA})
    for pid in ("AAAA", "BBBB"):  # another file in each one's place
        path = live / "pith" / pid / "bundle.json"
        path.unlink()
        path.write_bytes(b'{"a": 2}')
    os.utime(live / "pith" / "CCCC" / "bundle.json", ns=(0, 10**9))  # (the same bytes, touched)
    lookups = MirrorLookups(live, tmp_path / "none", MirrorRecord(orjson.dumps(recorded)), None)
    try:
        some = lookups.check_among(["AAAA", "CCCC", "DDDD", "EEEE"])  # (EEEE: as recorded)
        assert some.edited == {"AAAA", "DDDD"} and set(some.touched) == {"CCCC"} and some.recorded == recorded
        assert lookups.check().edited == {"AAAA", "BBBB"}
        assert lookups.check_among(["CCCC"]) is lookups.check()
    finally:
        lookups.close()
    nothing = MirrorLookups(live, tmp_path / "none", None, None)
    assert nothing.check_among([]).edited == {"AAAA", "BBBB", "CCCC", "EEEE"}  # (every record in the tree)


@pytest.mark.parametrize("twin_first", [True, False])
def test_the_lookups_hand_back_first_the_tree_the_build_waits_on_first(tmp_path, monkeypatch, twin_first):
    """serve's build waits on the tree beside's lookups (it updates that tree in place) and on the live tree's
    only for a plan equal to the live site's: its child looks up the tree beside first.  A build from the
    command line, whose quick no-op check waits on the live tree, has it the other way round."""
    from site_builder import mirrors

    live = _tree(tmp_path / "live")
    beside = _tree(tmp_path / "beside")
    recorded = signatures_now(live, {"AAAA": SHA, "BBBB": SHA})
    looked_up = mirrors.differing_signatures
    slow = live if twin_first else beside

    def slow_for_one_tree(tree, record):
        if tree == slow:
            time.sleep(20)
        return looked_up(tree, record)
    monkeypatch.setattr(mirrors, "differing_signatures", slow_for_one_tree)
    lookups = MirrorLookups(live, beside, MirrorRecord(orjson.dumps(recorded)), "fork", twin_first=twin_first)
    try:
        started = time.perf_counter()
        first = lookups.twin() if twin_first else lookups.live()
        assert time.perf_counter() - started < 10
    finally:
        lookups.close()
    assert set(first) == ({"AAAA", "BBBB"} if twin_first else set())  # (the tree beside: other files)
