"""Bad files are each rejected with a one-line reason while the good bundles still build."""

import contextlib
import os
import re
import shutil
from pathlib import Path

import pytest

from site_builder.build import BuildOptions, build
from site_builder.keys import load_trust_set
from site_builder.loading import (BundlesFolderError, FileReadError, discover, is_mirror, list_bundles, read_bytes,
                                  read_static_files, rediscover)

from conftest import REAL_FILES, open_descriptors, run_unprivileged

BAD_FILES = {
    "dupkey.json": (b'{"bundle_type": "a", "bundle_type": "b"}', "json_duplicate_key"),
    "nan.json": (b'{"x": NaN}', "json_number"),
    "utf8.json": (b'{"x": "\xc3\x28"}', "json_encoding"),
    "truncated.json": (REAL_FILES[0].read_bytes()[:5000], "json_syntax"),
    "deep.json": (b"[" * 100_000 + b"]" * 100_000, "json_depth"),
    "empty.json": (b"", "json_syntax"),
    "array.json": (b"[1, 2]", "structure"),
}


def test_bad_files_rejected_with_reason_good_ones_published(bundles_dir, tmp_path):
    for name, (data, _) in BAD_FILES.items():
        (bundles_dir / name).write_bytes(data)
    outside = tmp_path / "secret.json"
    outside.write_bytes(REAL_FILES[0].read_bytes())
    os.symlink(outside, bundles_dir / "link.json")
    os.mkfifo(bundles_dir / "pipe.json")
    (bundles_dir / ".hidden.json").write_bytes(b"not even json")
    (bundles_dir / "notes.txt").write_text("ignored")
    (bundles_dir / "notes.jsonl").write_text("ignored")
    (bundles_dir / "SAVED.JSON").write_bytes(REAL_FILES[0].read_bytes())  # (a real bundle, wrongly named)
    report = build(BuildOptions(bundles=bundles_dir, output=tmp_path / "site", trust=load_trust_set(), search=False))
    got = {o.inspection.rel: o.inspection.check for o in report.rejected}
    expected = {name: check for name, (_, check) in BAD_FILES.items()}
    expected.update({"link.json": "file_type", "pipe.json": "file_type", "SAVED.JSON": "file_name"})
    assert got == expected
    assert report.count("published") == 4
    for o in report.rejected:
        line = o.inspection.error_line()
        assert "\n" not in line and line.startswith(o.inspection.rel + ": ")


def test_discover_is_recursive_sorted_and_skips_hidden(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / ".git").mkdir()
    (tmp_path / "b" / "z.json").write_text("{}")
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / ".git" / "x.json").write_text("{}")
    found, skipped = discover(tmp_path)
    assert [f.rel for f in found] == ["a.json", "b/z.json"] and skipped == []


def test_discover_and_the_static_files_walk_folders_nested_past_any_recursion_depth_first(tmp_path, nest_deep):
    """A pull request's folders nested a thousand deep were a RecursionError that stopped build and verify: they
    are walked as any others, each folder's entries in name order, a subfolder's where it stands among them."""
    deepest = nest_deep(tmp_path / "m")
    (deepest / "deep.json").write_text("{}")
    for rel in ("a.json", "m/l.json", "m/n/k.json", "z.json"):
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text("{}")
    found, skipped = discover(tmp_path)
    assert [f.rel for f in found] == ["a.json", "m/" + "d/" * 1000 + "deep.json", "m/l.json", "m/n/k.json",
                                      "z.json"] and skipped == []
    files, problems = read_static_files(tmp_path)
    assert [f.rel for f in files] == [f.rel for f in found] and problems == []


def test_discover_and_list_bundles_leave_out_the_folders_they_are_told_to(tmp_path):
    for folder in ("site", "b/site"):
        (tmp_path / folder / "pith").mkdir(parents=True)
        (tmp_path / folder / "pith" / "bundle.json").write_text("{}")
    (tmp_path / "a.json").write_text("{}")
    expected = ["a.json", "b/site/pith/bundle.json"]  # only the output itself is left out, found by its real path
    assert [f.rel for f in discover(tmp_path, leave_out=[tmp_path / "site"])[0]] == expected
    assert [f.rel for f in discover(tmp_path, leave_out=[tmp_path / "b" / ".." / "site"])[0]] == expected
    assert [f.rel for f in list_bundles(tmp_path.resolve(), [tmp_path / "site"]).found] == expected
    assert len(discover(tmp_path)[0]) == 3
    assert discover(tmp_path, leave_out=[tmp_path / "site", tmp_path / "b" / "site"])[0][0].rel == "a.json"
    assert len(discover(tmp_path, leave_out=[tmp_path / "site", tmp_path / "b" / "site"])[0]) == 1


def test_a_site_this_builder_wrote_inside_the_bundles_folder_is_named_not_entered_by_a_builds_walk(bundles_dir):
    """An earlier build's output inside the bundles folder: a build's walk (*sites* given, as ``gather``,
    ``list_bundles`` and ``verify`` give it) does not enter it and names it; a walk without *sites* reads it as
    the copy of a mirror it is (its records' bundles alone).  A folder whose verification.json is not the
    builder's is entered: as a copy of a mirror where it is laid out as one, else file by file."""
    build(BuildOptions(bundles=bundles_dir, output=bundles_dir / "old" / "site", trust=load_trust_set(),
                       search=False))
    inputs = sorted(p.name for p in bundles_dir.glob("*.json"))
    sites = []
    found, skipped = discover(bundles_dir, sites=sites)
    assert ([f.rel for f in found], skipped, sites) == (inputs, [], ["old/site"])
    ids = sorted(p.name for p in (bundles_dir / "old" / "site" / "pith").iterdir() if len(p.name) == 26)
    mirrored = [f"old/site/pith/{pid}/bundle.json" for pid in ids]
    assert [f.rel for f in discover(bundles_dir)[0]] == inputs + mirrored and len(ids) == 4
    for folder in (bundles_dir, bundles_dir / "old"):  # (changed well before it is listed: rediscover can tell)
        os.utime(folder, (os.stat(folder).st_mtime - 60,) * 2)
    listing = list_bundles(bundles_dir.resolve())
    assert [f.rel for f in listing.found] == inputs and listing.sites == ["old/site"]
    assert rediscover(listing, set()).sites == ["old/site"]
    (bundles_dir / "old" / "site").rename(bundles_dir / "old" / "site2")  # (the same files found: serve builds again)
    renamed = list_bundles(bundles_dir.resolve())
    assert renamed.found == listing.found and renamed.sites == ["old/site2"] and not renamed.same_files(listing)
    (bundles_dir / "old" / "site2").rename(bundles_dir / "old" / "site")
    (bundles_dir / "old" / "site" / "verification.json").write_bytes(b'{"files": []}')
    sites = []
    assert [f.rel for f in discover(bundles_dir, sites=sites)[0]] == inputs + mirrored and sites == []
    assert not list_bundles(bundles_dir.resolve()).same_files(listing)
    (bundles_dir / "old" / "site" / "pith-mirrors.json").unlink()  # (no longer laid out as a mirror)
    assert "old/site/verification.json" in [f.rel for f in discover(bundles_dir, sites=[])[0]]


def plant_kinds(folder):
    """One file of each kind that is not a bundle, named *.json: a link, a FIFO, a socket, a device, a folder."""
    import socket

    target = folder / "target.txt"
    target.write_text("the link's target")
    os.symlink(target, folder / "link.json")
    os.mkfifo(folder / "fifo.json")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(folder / "socket.json"))
    os.symlink("/dev/null", folder / "device-link")  # (a device node needs mknod's privilege: /dev/null is one)
    (folder / "folder.json").mkdir()
    return listener


LINK, FIFO = "a symbolic link (not followed)", "a FIFO, not a regular file"


def test_a_file_named_json_in_other_letter_case_is_said_not_passed_over(tmp_path):
    """A bundle saved as ``.JSON`` (by a tool on a case-insensitive system) is no bundle file, as the watcher,
    the cache and the report know them; it is named with the reason rather than left out without a word."""
    for name in ("a.json", "B.JSON", "c.Json", "d.txt", "e.jsonl", "f.json.bak", "JSON"):
        (tmp_path / name).write_text("{}")
    found, skipped = discover(tmp_path)
    assert [f.rel for f in found] == ["a.json"]
    assert [(s.rel, s.check, s.reason) for s in skipped] == [
        (name, "file_name", f"ends in {name[1:]}: a bundle file's name ends in .json, in lower case; not read")
        for name in ("B.JSON", "c.Json")]


def test_each_kind_of_file_that_is_no_bundle_is_named_in_its_reason(tmp_path):
    """discover skips what is not a regular file, and read_bytes (for every file the build did not list itself: a
    previous site's bundle, a live copy, a key) refuses it without following or waiting; both say what it is."""
    listener = plant_kinds(tmp_path)
    try:
        found, skipped = discover(tmp_path)
        assert [f.rel for f in found] == []
        assert {s.rel: (s.check, s.reason) for s in skipped} == {
            "link.json": ("file_type", LINK), "fifo.json": ("file_type", FIFO),
            "socket.json": ("file_type", "a socket, not a regular file")}
        read = {"link.json": LINK, "fifo.json": FIFO, "folder.json": "a folder, not a regular file"}
        for name, reason in read.items():
            with pytest.raises(FileReadError) as info:
                read_bytes(tmp_path / name)
            assert (info.value.check, info.value.reason) == ("file_type", reason), name
        with pytest.raises(FileReadError) as info:
            read_bytes(tmp_path / "device-link", follow_links=True)
        assert (info.value.check, info.value.reason) == ("file_type", "a device, not a regular file")
    finally:
        listener.close()


def test_a_bundles_folder_that_is_missing_or_a_file_stops_the_build_with_a_reason(tmp_path):
    (tmp_path / "a-file").write_text("{}")
    for name, reason in (("missing", "bundles folder does not exist"), ("a-file", "not a folder")):
        with pytest.raises(BundlesFolderError, match=f"^{re.escape(str(tmp_path / name))}: {reason}$"):
            discover(tmp_path / name)


def test_a_bundle_removed_between_the_listing_and_its_stat_is_named_not_passed_over(tmp_path, monkeypatch):
    """A file listed and gone before its stat (removed by a checkout that runs beside the build) is reported,
    with why, where the other files are still found; a file that is no bundle, gone the same way, is not said."""
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "gone.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("notes")
    real_scandir = os.scandir

    @contextlib.contextmanager
    def listing_then_removing(path):
        with real_scandir(path) as it:
            entries = list(it)  # (real entries, listed while the files were there: none is stat'ed yet)
        for name in ("gone.json", "notes.txt"):
            (tmp_path / name).unlink()
        yield iter(entries)

    monkeypatch.setattr(os, "scandir", listing_then_removing)
    found, skipped = discover(tmp_path)
    assert [f.rel for f in found] == ["a.json"]
    assert [(s.rel, s.check, s.reason) for s in skipped] == [
        ("gone.json", "file_read", "cannot stat: No such file or directory")]


def test_size_limit_and_vanished_file(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2048)
    with pytest.raises(FileReadError) as info:
        read_bytes(big, max_bytes=1024)
    assert (info.value.check, info.value.reason) == ("file_size", "2048 bytes is over the 1024-byte limit")
    big.write_bytes(b" " * 1024)  # the limit itself is allowed; a byte more is over it, as its size says
    assert read_bytes(big, max_bytes=1024) == b" " * 1024
    big.write_bytes(b" " * 1025)
    with pytest.raises(FileReadError) as info:
        read_bytes(big, max_bytes=1024)
    assert (info.value.check, info.value.reason) == ("file_size", "1025 bytes is over the 1024-byte limit")
    # A file whose stat says less than it holds (as /proc's files say 0 bytes) is cut off at the limit all the same.
    with pytest.raises(FileReadError) as info:
        read_bytes("/proc/self/status", max_bytes=64)
    assert (info.value.check, info.value.reason) == ("file_size", "file grew over the 64-byte limit while reading")
    with pytest.raises(FileReadError) as info:
        read_bytes(tmp_path / "gone.json")
    assert info.value.reason == "file vanished during the build"


def test_reading_a_file_leaves_no_descriptor_open_whatever_it_finds(tmp_path):
    """A worker reads thousands of bundles in one process: a descriptor left open per read, on success or on
    refusal, would end in EMFILE ("too many open files") part-way through a large build."""
    (tmp_path / "good.json").write_text("{}")
    (tmp_path / "big.json").write_bytes(b" " * 2048)
    (tmp_path / "folder.json").mkdir()
    before = open_descriptors()
    for _ in range(3):
        assert read_bytes(tmp_path / "good.json", max_bytes=1024) == b"{}"
        for refused in ("big.json", "folder.json"):
            with pytest.raises(FileReadError):
                read_bytes(tmp_path / refused, max_bytes=1024)
    assert open_descriptors() == before


def test_unreadable_file_is_reported_not_raised(tmp_path):
    """Read in a child that obeys file modes (root reads every file)."""
    locked = tmp_path / "locked.json"
    locked.write_text("{}")
    locked.chmod(0)

    def read():
        with pytest.raises(FileReadError) as info:
            read_bytes(locked)
        assert info.value.check == "file_read" and "Permission denied" in info.value.reason
    run_unprivileged(read)


def _quiet_folder(tmp_path, names=("a.json", "b.json", "sub/c.json")):
    """A bundles folder whose folders last changed well before it is listed (as in a long editing session)."""
    root = tmp_path / "bundles"
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("{}")
    old = os.stat(root).st_mtime - 60
    for folder in (root, root / "sub"):
        os.utime(folder, (old, old))
    return root.resolve()


def test_rediscover_restats_only_the_files_a_watcher_named(tmp_path):
    root = _quiet_folder(tmp_path)
    before = list_bundles(root)
    assert [f.rel for f in before.found] == ["a.json", "b.json", "sub/c.json"]
    (root / "sub" / "c.json").write_text('{"changed": true}')  # in place: the folder does not change
    after = rediscover(before, {str(root / "sub" / "c.json")})
    assert after is not None and after.same_files(list_bundles(root))
    assert after.found[2].sig != before.found[2].sig and after.found[:2] == before.found[:2]
    # A file the events did not name keeps its old stat here; serve lists the folder in full after each build
    # and rebuilds again if that finds a difference.
    (root / "a.json").write_text('{"unreported": 1}')
    assert rediscover(before, set()).found[0] == before.found[0]
    assert not list_bundles(root).same_files(before)


@pytest.mark.parametrize("change", ["add", "remove", "rename", "recent", "unlisted folder", "now a folder",
                                    "added, the folder's time set back"])
def test_rediscover_lists_again_when_events_cannot_tell(tmp_path, change):
    root = _quiet_folder(tmp_path)
    before = list_bundles(root)
    changed = set()
    if change == "add":
        (root / "sub" / "d.json").write_text("{}")
    elif change == "remove":
        (root / "b.json").unlink()
    elif change == "rename":
        (root / "b.json").rename(root / "e.json")
    elif change == "recent":  # the folder changed within the racy window before the scan
        os.utime(root, None)
        before = list_bundles(root)
    elif change == "unlisted folder":
        changed = {str(root / ".hidden" / "x.json")}
    elif change == "now a folder":  # the folder's ctime changes even if its mtime is set back
        (root / "a.json").unlink()
        (root / "a.json").mkdir()
        os.utime(root, (os.stat(root).st_mtime - 60,) * 2)
        changed = {str(root / "a.json")}
    elif change == "added, the folder's time set back":  # (``rsync -a``, ``cp -p``: its ctime still changes)
        stamp = os.stat(root / "sub")
        (root / "sub" / "d.json").write_text("{}")
        os.utime(root / "sub", ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        changed = {str(root / "sub" / "d.json")}
    assert rediscover(before, changed) is None


def test_prefetcher_reads_ahead_only_so_far_and_never_waits_on_a_fifo_or_follows_a_link(tmp_path, monkeypatch):
    """The kernel is asked to read each regular file ahead, at most *ahead* files past the results taken."""
    import threading
    import time

    from site_builder.loading import Prefetcher

    paths = []
    for i in range(8):
        (tmp_path / f"{i}.json").write_text("{}")
        paths.append(str(tmp_path / f"{i}.json"))
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "link.json").symlink_to(tmp_path / "0.json")
    paths[3:3] = [str(tmp_path / "fifo.json"), str(tmp_path / "link.json"), str(tmp_path / "gone.json")]
    advised, lock = [], threading.Lock()

    def record(fd, offset, length, advice):
        with lock:
            advised.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(os, "posix_fadvise", record)
    prefetcher = Prefetcher(paths, ahead=2).start()
    deadline = time.time() + 5
    while len(advised) < 3 and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # time to go further, if it would
    with lock:
        assert advised == paths[:3]  # files 0..2 (taken 0, two ahead), and no further
    prefetcher.taken = len(paths)
    deadline = time.time() + 5
    while len(advised) < 8 and time.time() < deadline:
        time.sleep(0.01)
    prefetcher.stop()
    assert advised == [p for p in paths if p.endswith(tuple(f"/{i}.json" for i in range(8)))]  # not the FIFO, the
    # link or the missing file, and the FIFO did not block it


def test_a_folder_that_cannot_be_listed_is_skipped_with_its_reason_unless_it_is_the_bundles_folder(tmp_path):
    """A subfolder the build may not list is one line (``file_read``) and the rest is found; the bundles folder
    itself unlisted, or not to be entered, is an error: a build from it would publish an empty site in place of the
    last one."""
    root = tmp_path / "bundles"
    (root / "locked").mkdir(parents=True)
    (root / "open").mkdir()
    for folder in ("locked", "open"):
        shutil.copy(REAL_FILES[0], root / folder / "a.json")

    def check():
        (root / "locked").chmod(0)
        found, skipped = discover(root)
        assert [f.rel for f in found] == ["open/a.json"]
        assert [(s.rel, s.check) for s in skipped] == [("locked", "file_read")]
        assert skipped[0].reason == "cannot list folder: Permission denied"
        root.chmod(0o300)  # (entered, not listed)
        with pytest.raises(BundlesFolderError, match="cannot list bundles folder: Permission denied"):
            discover(root)
        root.chmod(0o600)  # (listed, not entered: every file in it would be rejected, and the site emptied)
        with pytest.raises(BundlesFolderError, match="cannot open bundles folder: Permission denied"):
            discover(root)
    try:
        run_unprivileged(check)
    finally:
        root.chmod(0o755)
        (root / "locked").chmod(0o755)


def test_a_static_subfolder_that_cannot_be_listed_is_named_and_the_rest_is_read(tmp_path):
    """Its files cannot be published; the user is told which folder and why, and every other file is read."""
    static = tmp_path / "static"
    (static / "locked").mkdir(parents=True)
    (static / "locked" / "hidden-from-us.txt").write_text("x")
    (static / "kept.txt").write_text("y")

    def check():
        (static / "locked").chmod(0)
        files, problems = read_static_files(static)
        assert [(f.rel, f.data) for f in files] == [("kept.txt", b"y")]
        assert problems == ["locked/: cannot list folder: Permission denied"]
    try:
        run_unprivileged(check)
    finally:
        (static / "locked").chmod(0o755)


def test_a_copy_of_a_mirror_offers_its_records_bundles_alone(bundles_dir, tmp_path):
    """A mirror fetched whole (``wget --mirror``, ``rsync``) as the bundles folder: its records' bundles at
    ``pith/<ID>/bundle.json`` are the candidates, not the JSON of its pages and manifests (each a REJECTED line,
    and a failed ``--strict`` build); the site made from it shows the same records as the one it copies."""
    trust = load_trust_set()
    first = tmp_path / "first"
    build(BuildOptions(bundles=bundles_dir, output=first, trust=trust, search=False))
    ids = sorted(p.name for p in (first / "pith").iterdir() if len(p.name) == 26)
    copy = tmp_path / "copy"
    shutil.copytree(first, copy)
    folders = []
    found, skipped = discover(copy, folders)
    assert [f.rel for f in found] == [f"pith/{pid}/bundle.json" for pid in ids] and skipped == []
    assert {str(copy), str(copy / "pith")} <= set(folders)
    second = tmp_path / "second"
    report = build(BuildOptions(bundles=copy, output=second, trust=trust, search=False))
    assert report.count("published") == len(ids) == 4 and not report.rejected
    for pid in ids:
        for name in ("index.html", "bundle.json", "state.json"):
            assert (second / "pith" / pid / name).read_bytes() == (first / "pith" / pid / name).read_bytes()
    (copy / "pith" / ids[0] / "bundle.json").unlink()  # (what stands at a record's bundle and is no file is named)
    os.mkfifo(copy / "pith" / ids[0] / "bundle.json")
    found, skipped = discover(copy)
    assert [f.rel for f in found] == [f"pith/{pid}/bundle.json" for pid in ids[1:]]
    assert [(s.rel, s.check) for s in skipped] == [(f"pith/{ids[0]}/bundle.json", "file_type")]
    old = copy / "pith" / f"{ids[1]}.old"  # (a folder named not as one ID exactly, and a file that is: no records)
    old.mkdir()
    shutil.copy(copy / "pith" / ids[1] / "bundle.json", old / "bundle.json")
    (copy / "pith" / ("A" * 26)).write_text("not a record's folder")
    assert discover(copy) == (found, skipped)
    (copy / "pith-mirrors.json").unlink()  # (no longer laid out as a mirror: every JSON file is a candidate)
    assert len(discover(copy)[0]) > len(ids)
    (copy / "pith-mirrors.json").write_text("{}")  # (a mirror's layout again, but its pith/ a link: never followed)
    (copy / "pith").rename(tmp_path / "elsewhere")
    (copy / "pith").symlink_to(tmp_path / "elsewhere")
    assert not is_mirror(copy) and not [f for f in discover(copy)[0] if f.rel.startswith("pith/")]


def test_a_copy_of_a_mirror_inside_the_bundles_folder_offers_its_records_bundles_alone(bundles_dir, tmp_path):
    """A copy of another mirror put inside the bundles folder (laid out as one, not a site this builder wrote):
    its records' bundles are candidates, named under its folder, not the JSON of its pages and manifests; where
    its ``pith/`` cannot be listed, that is skipped with why and the rest is read."""
    trust = load_trust_set()
    build(BuildOptions(bundles=bundles_dir, output=tmp_path / "first", trust=trust, search=False))
    copy = bundles_dir / "copies" / "mirror"
    shutil.copytree(tmp_path / "first", copy)
    (copy / "verification.json").unlink()  # (another mirror's layout, not this builder's site)
    ids = sorted(p.name for p in (copy / "pith").iterdir() if len(p.name) == 26)
    inputs = sorted(p.name for p in bundles_dir.glob("*.json"))
    sites = []
    found, skipped = discover(bundles_dir, sites=sites)
    assert [f.rel for f in found] == inputs + [f"copies/mirror/pith/{pid}/bundle.json" for pid in ids]
    assert (skipped, sites, len(ids)) == ([], [], 4)
    report = build(BuildOptions(bundles=bundles_dir, output=tmp_path / "second", trust=trust, search=False))
    assert report.count("published") == 4 and report.count("superseded") == 4 and not report.rejected
    (copy / "pith").chmod(0)

    def check():
        found, skipped = discover(bundles_dir, sites=[])
        assert [f.rel for f in found] == inputs and [(s.rel, s.check, s.reason) for s in skipped] == [
            ("copies/mirror/pith", "file_read", "cannot list folder: Permission denied")]
    try:
        run_unprivileged(check)
    finally:
        (copy / "pith").chmod(0o755)


def test_a_folder_with_a_mirror_manifest_but_no_records_folder_is_walked_as_any_folder(tmp_path):
    """Only the manifest *and* ``pith/`` make a folder a copy of a mirror: a folder holding bundles beside a file
    that merely has the manifest's name (a download of one) keeps its bundles."""
    for rel in ["sub/pith-mirrors.json", "sub/a.json", "sub/deeper/b.json"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    found, skipped = discover(tmp_path, sites=[])
    assert [f.rel for f in found] == ["sub/a.json", "sub/deeper/b.json", "sub/pith-mirrors.json"]
    assert skipped == []


def test_rediscover_of_a_mirror_copy_follows_its_records(tmp_path, bundles_dir):
    first = tmp_path / "first"
    build(BuildOptions(bundles=bundles_dir, output=first, trust=load_trust_set(), search=False))
    copy = tmp_path / "copy"
    shutil.copytree(first, copy)
    for folder in (copy, copy / "pith", *(p for p in (copy / "pith").iterdir() if p.is_dir())):
        os.utime(folder, (os.stat(folder).st_mtime - 60,) * 2)
    before = list_bundles(copy.resolve())
    changed = before.found[0].path
    Path(changed).write_bytes(Path(changed).read_bytes() + b" ")  # in place: its folder does not change
    after = rediscover(before, {changed})
    assert after is not None and after.found[0].sig != before.found[0].sig and after.same_files(list_bundles(copy))
    shutil.copytree(copy / "pith" / Path(changed).parent.name, copy / "pith" / ("A" * 26))  # a record comes
    assert rediscover(before, {str(copy / "pith" / ("A" * 26) / "bundle.json")}) is None
