"""The output slot: retired trees and leftovers of earlier builds are deleted beside the build and gone when it
lets go of the output (a tree being deleted by another process is left to it); and only plain relative paths
are ever written."""

import errno
import fcntl
import os
import re
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import open_descriptors, run_unprivileged
from site_builder.writing import (FOLDER_MODE, OutputError, OutputSlot, StagingTree, TreeChanged, check_relative_path,
                                  is_builder_output, owned_privately, remove_tree)


def wait_gone(path: Path, seconds: float = 10) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not path.exists():
            return True
        time.sleep(0.05)
    return False


def make_tree(path: Path, files: int = 20) -> None:
    for i in range(files):
        (path / f"d{i % 4}").mkdir(parents=True, exist_ok=True)
        (path / f"d{i % 4}" / f"f{i}.html").write_text("x")


def test_background_removal_deletes_the_tree(tmp_path):
    tree = tmp_path / ".site.old-1"
    make_tree(tree)
    remover = remove_tree(tree, wait=False)
    assert wait_gone(tree)
    assert remover.wait(10) == 0


def test_background_removal_runs_nothing_from_the_folder_the_build_runs_in(tmp_path, monkeypatch):
    """``python -c`` puts its working folder first on the import path: a project's shutil.py (a pull request's
    file) ran in place of the standard library's in every build that deleted a tree."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "ran"
    for module in ("shutil", "fcntl", "os", "sys"):
        (tmp_path / f"{module}.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    tree = tmp_path / ".site.old-1"
    make_tree(tree)
    remove_tree(tree, wait=False).wait()
    assert not tree.exists() and not marker.exists()


@pytest.mark.slow
def test_a_tree_being_deleted_is_left_to_its_deleter(tmp_path):
    tree = tmp_path / f".site.old-99999-{time.monotonic_ns()}"  # (as a build names one)
    make_tree(tree)
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a running deleter holds it
    try:
        slot = OutputSlot(tmp_path / "site")
        started = time.perf_counter()
        slot.acquire()
        slot.release()
        assert time.perf_counter() - started < 1.0
        time.sleep(0.5)
        assert (tree / "d0" / "f0.html").exists()  # nobody else deleted it
    finally:
        os.close(fd)
    # The deleter died without finishing: the next build starts a new one.
    slot.acquire()
    slot.release()
    assert wait_gone(tree)


def test_a_killed_builds_staging_tree_is_removed_by_the_next_build(tmp_path):
    staging = tmp_path / ".site.staging-99999"
    make_tree(staging)
    slot = OutputSlot(tmp_path / "site")
    slot.acquire()
    assert not staging.exists()  # renamed out of the way at once
    slot.release()
    assert not list(tmp_path.glob(".site.old-*"))


def test_only_what_a_killed_build_names_is_removed_beside_the_output(tmp_path):
    """A copy the user keeps beside the site under a name that merely starts as a build's do (``.site.old-backup``)
    is theirs: only the names a build makes are a killed build's leftovers."""
    ours = [".site.staging-99999", ".site.staging-99999-spare", f".site.old-99999-{time.monotonic_ns()}"]
    theirs = [".site.old-backup", ".site.staging-notes", ".site.old-2026-12", ".site.staging-1.bak",
              ".other.staging-99999"]
    for name in ours + theirs:
        make_tree(tmp_path / name)
    slot = OutputSlot(tmp_path / "site")
    slot.acquire()
    slot.release()
    deadline = time.monotonic() + 10  # (old trees go in a process of their own)
    while time.monotonic() < deadline and any((tmp_path / name).exists() for name in ours):
        time.sleep(0.05)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name not in (".site.lock",)) == sorted(theirs)


@pytest.mark.slow
def test_a_retired_tree_is_gone_before_the_build_lets_go(tmp_path, monkeypatch):
    """A retired tree may share files with the live site, and deleting them changes their status: the deletion
    runs beside the build, but the build does not end before it does (a slow deleter shows the wait)."""
    from site_builder import writing

    monkeypatch.setattr(writing, "_DELETER", "import time; time.sleep(0.5)\n" + writing._DELETER)
    slot = OutputSlot(tmp_path / "site")
    make_tree(slot.prev)
    slot.acquire()
    slot.retire_prev()
    assert not slot.prev.exists() and len(list(tmp_path.glob(".site.old-*"))) == 1  # renamed, being deleted
    slot.release()
    assert not list(tmp_path.glob(".site.old-*"))


@pytest.mark.slow
def test_a_tree_sharing_no_file_is_left_to_its_deleter_unless_the_build_cannot_tell(tmp_path, monkeypatch):
    from site_builder import writing

    monkeypatch.setattr(writing, "_DELETER", "import time; time.sleep(0.5)\n" + writing._DELETER)
    for cannot_tell in (False, True):
        slot = OutputSlot(tmp_path / "site")
        make_tree(slot.prev)
        slot.acquire()
        slot.retire_prev(shares_files=False)
        if cannot_tell:  # (the build planned its units again)
            slot.assume_shared()
        slot.release()
        assert bool(list(tmp_path.glob(".site.old-*"))) is not cannot_tell
        assert wait_gone(next(iter(tmp_path.glob(".site.old-*")), tmp_path / "none"))


@pytest.mark.slow
def test_a_deletion_left_running_raises_no_resource_warning(tmp_path, monkeypatch):
    """The deleter of a tree the build need not wait for outlives the build by design; letting go of it must
    not warn (``python -X dev``, ``-W default``: "ResourceWarning: subprocess ... is still running")."""
    import warnings

    from site_builder import writing

    monkeypatch.setattr(writing, "_DELETER", "import time; time.sleep(1)\n" + writing._DELETER)
    slot = OutputSlot(tmp_path / "site")
    make_tree(slot.prev)
    slot.acquire()
    slot.retire_prev(shares_files=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        slot.release()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert list(tmp_path.glob(".site.old-*"))  # (still being deleted when the build let go)
    assert wait_gone(next(iter(tmp_path.glob(".site.old-*")), tmp_path / "none"))


def test_a_twin_is_a_hard_link_or_else_a_copy(tmp_path, monkeypatch):
    tree = StagingTree(tmp_path / "t")
    tree.root.mkdir()
    tree.write("pith/A/bundle.json", b"{}")
    tree.write_twin(".well-known/pith/A/bundle.json", "pith/A/bundle.json", b"{}")
    assert (tree.root / ".well-known/pith/A/bundle.json").samefile(tree.root / "pith/A/bundle.json")

    def no_links(*args, **kwargs):
        raise OSError(1, "Operation not permitted")  # as on a file system without hard links
    monkeypatch.setattr(os, "link", no_links)
    tree.write("pith/B/bundle.json", b"[]")
    tree.write_twin(".well-known/pith/B/bundle.json", "pith/B/bundle.json", b"[]")
    copy = tree.root / ".well-known/pith/B/bundle.json"
    assert copy.read_bytes() == b"[]" and not copy.samefile(tree.root / "pith/B/bundle.json")


def _reference_check(rel: str) -> bool:
    """The rule part by part, as written before it became one expression."""
    if not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel:
        return False
    for part in rel.split("/"):
        if part in (".well-known", ".nojekyll"):
            continue
        if part in ("", ".", "..") or not re.match(r"[A-Za-z0-9][A-Za-z0-9._\-]*\Z", part) \
                or re.match(r"(CON|PRN|AUX|NUL|COM[0-9]|LPT[0-9])(\..*)?\Z", part, re.IGNORECASE):
            return False
    return True


_PATH_PIECES = st.sampled_from(["/", ".", "..", "a", "Z", "9", "-", "_", "con", "COM1", "lpt9", "nul.txt", ".well-known",
                                ".nojekyll", "\\", "\x00", "é", " ", "\n", "index.html", "K", "ſ"])


@pytest.mark.slow
@settings(max_examples=3000, deadline=None)
@given(st.lists(_PATH_PIECES, max_size=8).map("".join))
def test_output_paths_are_plain_components(rel):
    accepted = True
    try:
        assert check_relative_path(rel) == rel
    except ValueError:
        accepted = False
    assert accepted == _reference_check(rel)


@pytest.mark.parametrize("rel", ["../x", "a/../b", "/etc/passwd", "a//b", "a/", "./a", "a\\b", "CON/x", "x/aux.html",
                                 "x/.git/config", "é/index.html", ""])
def test_unsafe_output_paths_are_refused(rel):
    with pytest.raises(ValueError, match="unsafe output path"):
        check_relative_path(rel)


@pytest.mark.parametrize("rel", ["pith/ABC/index.html", ".well-known/pith/ABC/bundle.json", ".nojekyll",
                                 "arxiv/2401.00001v2/index.html", "console/index.html", "com10/x"])
def test_plain_output_paths_are_accepted(rel):
    assert check_relative_path(rel) == rel


def _tree_with_a_link(tmp_path):
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "index.html").write_text("not the site's")
    root = tmp_path / "tree"
    (root / "pith").mkdir(parents=True)
    (root / "pith" / "LINKED").symlink_to(outside)
    (root / "pith" / "REAL").mkdir()
    (root / "pith" / "REAL" / "index.html").write_text("the site's")
    return root, outside


def test_a_tree_an_earlier_build_left_is_never_followed_through_a_link(tmp_path):
    root, outside = _tree_with_a_link(tmp_path)
    tree = StagingTree(root, existing=True)
    for act in (lambda: tree.remove("pith/LINKED/index.html"), lambda: tree.write("pith/LINKED/new.html", b"x"),
                lambda: tree.write("pith/LINKED/deep/new.html", b"x"),
                lambda: tree.reuse("pith/LINKED/linked.html", root / "pith" / "REAL" / "index.html")):
        with pytest.raises(TreeChanged, match="LINKED: not a folder site-builder made"):
            act()
    tree.remove_empty_folders({"pith/LINKED/deep"})
    assert sorted(p.name for p in outside.iterdir()) == ["deep", "index.html"]
    tree.remove("pith/REAL/index.html")  # (its own files and folders it removes as ever)
    tree.remove_empty_folders({"pith/REAL"})
    assert sorted(p.name for p in (root / "pith").iterdir()) == ["LINKED"]
    tree.write("pith/NEW/index.html", b"new")  # (and a folder it makes is its own)
    assert (root / "pith" / "NEW" / "index.html").read_bytes() == b"new"


def test_folders_a_removal_empties_go_with_it_up_to_the_first_that_holds_something(tmp_path):
    """A listing's last page removed from a tree updated in place leaves no empty folder above it (the same
    tree written afresh would not have it): up to the first folder that still holds a file."""
    tree = StagingTree(tmp_path / "tree")
    for rel in ("category/hep-th/page/2/index.html", "category/hep-th/index.html", "other/index.html"):
        tree.write(rel, b"x")
    tree.remove("category/hep-th/page/2/index.html")
    tree.remove_empty_folders({"category/hep-th/page/2"})
    assert sorted(str(p.relative_to(tree.root)) for p in tree.root.rglob("*")) == [
        "category", "category/hep-th", "category/hep-th/index.html", "other", "other/index.html"]


def test_a_file_where_a_folder_should_be_is_refused_too(tmp_path):
    root = tmp_path / "tree"
    root.mkdir()
    (root / "pith").write_text("a file")
    with pytest.raises(TreeChanged):
        StagingTree(root, existing=True).write("pith/X/index.html", b"x")


def test_every_folder_of_a_tree_is_its_owners_alone_whatever_the_umask(tmp_path):
    old = os.umask(0o002)  # (a user private group's umask: folders would be group-writable)
    try:
        slot = OutputSlot(tmp_path / "site")
        tree = slot.new_staging()
        tree.write("a/b/c/index.html", b"x")
        os.umask(0)  # (none at all: a file is made with the very mode asked for)
        tree.write("a/d/index.html", b"x")
    finally:
        os.umask(old)
    for folder in (tree.root, tree.root / "a", tree.root / "a" / "b", tree.root / "a" / "b" / "c", tree.root / "a" / "d"):
        assert folder.stat().st_mode & 0o777 == FOLDER_MODE, folder
    assert owned_privately(tree.root)
    for page in (tree.root / "a" / "b" / "c" / "index.html", tree.root / "a" / "d" / "index.html"):
        assert page.stat().st_mode & 0o777 == 0o644, page  # (readable by the web server, written by no one else)


def test_a_folder_others_may_write_to_or_a_link_is_not_owned_privately(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir(mode=0o755)
    assert owned_privately(folder)
    for mode in (0o775, 0o757):
        folder.chmod(mode)
        assert not owned_privately(folder)
    folder.chmod(0o755)
    (tmp_path / "link").symlink_to(folder)
    assert not owned_privately(tmp_path / "link") and not owned_privately(tmp_path / "missing")
    (tmp_path / "file").write_text("not a folder")
    (tmp_path / "file").chmod(0o700)
    assert not owned_privately(tmp_path / "file")
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o755)
        os.chown(theirs, 1, -1)
    else:
        theirs = Path("/")  # (root's, and no one else may write to it: only its owner is not this user)
    assert not owned_privately(theirs)


def test_a_link_planted_where_a_staging_tree_goes_is_removed_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the site's")
    slot = OutputSlot(tmp_path / "site")
    slot.staging_path().symlink_to(outside)
    tree = slot.new_staging()
    tree.write("index.html", b"x")
    assert not tree.root.is_symlink() and (tree.root / "index.html").exists()
    assert [p.name for p in outside.iterdir()] == ["keep.txt"]


def test_a_link_planted_as_the_outputs_lock_is_refused_with_one_line_not_followed(tmp_path):
    from site_builder.writing import OutputError
    elsewhere = tmp_path / "elsewhere" / "created"
    elsewhere.parent.mkdir()
    (tmp_path / ".site.lock").symlink_to(elsewhere)
    slot = OutputSlot(tmp_path / "site")
    with pytest.raises(OutputError, match="cannot write beside the output folder"):
        slot.acquire()
    assert not elsewhere.exists()


def test_mount_points_are_read_from_the_mount_table(tmp_path):
    """/proc is a mount point on every Linux system, a container's included; a temporary folder is not.  The
    table's escapes (a space is ``\\040``) are undone, and a line too short to name a mount point (a blank one, a
    damaged one) is passed over, not an error that would stop every build."""
    from site_builder.writing import is_mount_point, mount_points

    assert is_mount_point(Path("/proc")) and not is_mount_point(tmp_path)
    line = "36 35 98:0 /mnt1 /srv/my\\040site rw,noatime master:1 - ext3 /dev/root rw,errors=continue"
    assert mount_points(line + "\n" + line.replace("/srv/my\\040site", "/srv/b\\134ack")) == {"/srv/my site",
                                                                                             "/srv/b\\ack"}
    assert mount_points("\n36 35 98:0 /mnt1\n" + line) == {"/srv/my site"}
    with open("/proc/self/mountinfo") as f:
        assert "/proc" in mount_points(f.read())


def test_an_output_that_is_a_file_is_refused_and_left_as_it_was(tmp_path):
    output = tmp_path / "site"
    output.write_text("someone's notes")
    with pytest.raises(OutputError, match=f"^{re.escape(str(output))}: exists and is not a folder$"):
        OutputSlot(output).check_usable()
    assert output.read_text() == "someone's notes"


def test_an_output_in_a_folder_this_user_may_not_search_is_refused_whatever_pathlib_says(tmp_path,
                                                                                         pathlib_of_python_3_14):
    """Not taken for a folder not there yet (pathlib's word for it from Python 3.14 on), to be made beside it: the
    check says why it cannot look, before anything is tried."""
    locked = tmp_path / "locked"
    (locked / "site").mkdir(parents=True)

    def check():
        locked.chmod(0o600)
        assert not (locked / "site").exists()  # (what pathlib says of it here, as Python 3.14 does)
        with pytest.raises(OutputError, match=f"^{re.escape(str(locked / 'site'))}: cannot look at the output "
                                              f"folder: Permission denied$"):
            OutputSlot(locked / "site").check_usable()
    try:
        run_unprivileged(check)
    finally:
        locked.chmod(0o755)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["locked"]  # (nothing made beside it)


@pytest.mark.parametrize("inner", ["x", "pith/new/site"])
def test_an_output_inside_a_site_the_builder_wrote_is_refused_before_anything_is_made(tmp_path, project, inner):
    """``--output site/x``: the outer site's next build would find x, and the cache and lock beside it, in the
    site, and stop; every build of it replaces the folder x is in."""
    from conftest import both_keys, opts
    from site_builder.build import build
    outer = tmp_path / "outer"
    build(opts(project, outer, both_keys()))
    before = sorted(p.relative_to(outer).as_posix() for p in outer.rglob("*"))
    with pytest.raises(OutputError, match=f"^{re.escape(str(outer / inner))}: inside {re.escape(str(outer))}, a "
                                          f"site this builder wrote"):
        build(opts(project, outer / inner, both_keys()))
    assert sorted(p.relative_to(outer).as_posix() for p in outer.rglob("*")) == before
    assert not build(opts(project, outer, both_keys())).changed  # (the outer site builds as before)


@pytest.mark.parametrize("below", ["site", "a/b/site"])
def test_an_output_below_a_file_names_the_file_in_the_way(tmp_path, below):
    """``--output notes/site`` where ``notes`` is a file: the line names that file (mkdir's own word for it is
    "File exists"), and the file is left as it was."""
    (tmp_path / "notes").write_text("someone's notes")
    output = tmp_path / "notes" / below
    with pytest.raises(OutputError, match=f"^{re.escape(str(tmp_path / 'notes'))}: not a folder, so the output "
                                          f"folder {re.escape(str(output))} cannot be made in it$"):
        OutputSlot(output).acquire()
    assert (tmp_path / "notes").read_text() == "someone's notes"


def test_the_root_folder_as_output_is_refused_with_a_folder_to_use_instead():
    """``--output /``: the root is a mount point, and the folder suggested instead is /site (not //site)."""
    with pytest.raises(OutputError, match="is a mount point") as caught:
        OutputSlot(Path("/")).check_usable()
    assert str(caught.value).endswith("(--output /site)")


def test_an_output_that_is_a_mount_point_is_refused_at_once(tmp_path, monkeypatch, project):
    """A folder a file system is mounted at (a container's volume) cannot be renamed, so the new tree cannot be
    swapped in: said at once, in one line, before the build verifies and renders anything, and the folder is
    left as it was.  Where the mount table does not show it, the swap's failure says the same."""
    from conftest import both_keys, opts
    from site_builder import writing
    from site_builder.build import build

    out = tmp_path / "mounted"
    out.mkdir()
    table = tmp_path / "mountinfo"
    table.write_text(f"36 35 98:0 / {str(out).replace(' ', chr(92) + '040')} rw - tmpfs tmpfs rw\n")
    monkeypatch.setattr(writing, "MOUNT_TABLE", str(table))
    with pytest.raises(writing.OutputError, match="is a mount point: a build replaces the output folder") as caught:
        build(opts(project, out, both_keys()))
    assert "\n" not in str(caught.value) and list(out.iterdir()) == []
    assert str(caught.value).endswith(f"(--output {out / 'site'})")
    assert not [p for p in tmp_path.iterdir() if ".staging-" in p.name]

    table.write_text("")  # (not in the table: the swap is what fails, and nothing of the output was moved)
    build(opts(project, out, both_keys()))
    before = sorted(p.relative_to(out) for p in out.rglob("*"))

    def busy(a, b):
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(a))

    monkeypatch.setattr(writing, "exchange", busy)
    (project / "templates" / "home.html").write_text("{% extends 'base.html' %}")  # (a change to swap in)
    with pytest.raises(writing.OutputError, match="cannot be replaced .*: a build replaces the output folder"):
        build(opts(project, out, both_keys()))
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_new_file_is_never_written_through_a_link_even_one_planted_after_the_old_name_went(tmp_path, monkeypatch,
                                                                                          link):
    """``create_new`` removes what is at the name, then creates the file; another process may plant a link in
    between (the race is played here by unlinking and planting the link again): a symbolic link, or a hard link
    to a file of the user's, which is a file like any other.  The open then fails: nothing is written through
    the link, and what it leads to is untouched."""
    from site_builder import writing

    target = tmp_path / "elsewhere.txt"
    target.write_text("keep me")
    name = tmp_path / "new.json"
    plant = (lambda path: Path(path).symlink_to(target)) if link == "symbolic" else (lambda path: os.link(target, path))
    plant(name)
    real_unlink = os.unlink

    def unlink_then_plant(path):
        real_unlink(path)
        plant(path)

    with monkeypatch.context() as race:  # (undone on leaving: the test's other patches, its cache home, stay)
        race.setattr(writing.os, "unlink", unlink_then_plant)
        with pytest.raises(OSError):  # (the name exists, or is a link: either way the open is refused)
            writing.create_new(name)
    assert target.read_text() == "keep me"
    fd = writing.create_new(name)  # (no race: the link is removed and a file of its own made)
    os.close(fd)
    assert not name.is_symlink() and name.read_bytes() == b"" and target.read_text() == "keep me"


def test_two_folders_are_swapped_atomically_in_one_call(tmp_path):
    """The swap that publishes a site is one ``renameat2(RENAME_EXCHANGE)`` (Linux, on its local file systems):
    there is no moment without a site at the output's path."""
    from site_builder.writing import exchange

    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        (folder / "which").write_text(folder.name)
    assert exchange(a, b)
    assert (a / "which").read_text() == "b" and (b / "which").read_text() == "a"


def test_where_the_system_cannot_swap_atomically_the_site_is_still_replaced(project, tmp_path, monkeypatch):
    """A file system without RENAME_EXCHANGE (NFS, some FUSE mounts) says so with EINVAL: the swap then falls
    back to three renames, and each build's site is the one a clean build makes."""
    import ctypes

    from conftest import both_keys, opts, tree
    from site_builder import writing
    from site_builder.build import build

    calls = []

    def unsupported(*args):
        calls.append(args)
        ctypes.set_errno(errno.EINVAL)
        return -1

    monkeypatch.setattr(writing, "_libc_renameat2", lambda: unsupported)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    assert not writing.exchange(a, b) and calls
    out, clean = tmp_path / "site", tmp_path / "clean"
    build(opts(project, out, both_keys()))
    (project / "templates" / "home.html").write_text("{% extends 'base.html' %}")  # (a change to swap in)
    build(opts(project, out, both_keys()))
    build(opts(project, clean, both_keys(), use_cache=False))
    assert len(calls) >= 2 and tree(out) == tree(clean)


def test_a_copy_is_made_only_of_a_regular_file_and_never_left_half_made(tmp_path, monkeypatch):
    """A fresh tree copies the few files it keeps of the live site (stages/publish.py): what stands there in a
    file's place, a link (to a secret, say) or a FIFO (which would stall the build), is not copied, and a copy
    that fails leaves nothing behind, so that the unit can be rendered in its place."""
    import shutil

    live = tmp_path / "live"
    live.mkdir()
    (live / "page.html").write_bytes(b"<p>kept</p>")
    (live / "secret").write_bytes(b"not the site's")
    (live / "link.html").symlink_to(live / "secret")
    os.mkfifo(live / "fifo.html")
    (live / "folder.html").mkdir()
    tree = StagingTree(tmp_path / "tree")
    assert tree.copy_from("a/page.html", live / "page.html")
    copied = tmp_path / "tree" / "a" / "page.html"
    assert copied.read_bytes() == b"<p>kept</p>" and not copied.samefile(live / "page.html")
    assert not tree.holds_older_files  # (a copy shares nothing with the live site)
    for name in ("link.html", "fifo.html", "folder.html", "missing.html"):
        assert not tree.copy_from(name, live / name) and not os.path.lexists(tmp_path / "tree" / name)
    assert not tree.copy_from("a/page.html", live / "page.html")  # (never over a file already there)

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(shutil, "copyfileobj", full_disk)
    assert not tree.copy_from("b/page.html", live / "page.html")
    assert not (tmp_path / "tree" / "b" / "page.html").exists()


def test_linking_a_file_of_an_older_tree_never_takes_what_a_link_there_leads_to(tmp_path):
    """A tree takes files of the live site, or of the tree it twins, by hard link (``reuse``, ``mirror``), or a
    copy (``mirror(copy=True)``): a link planted there in a file's place (to a secret of the user's, say) stays a
    link at most, which a deploy step reads only if told to follow links; the file it leads to never becomes one of
    the site's."""
    live = tmp_path / "live"
    live.mkdir()
    secret = tmp_path / "secret"
    secret.write_bytes(b"not the site's")
    (live / "page.html").symlink_to(secret)
    for n, take in enumerate((lambda tree: tree.reuse("page.html", live / "page.html"),
                              lambda tree: tree.mirror(["page.html"], live),
                              lambda tree: tree.mirror(["page.html"], live, copy=True))):
        tree = StagingTree(tmp_path / f"tree{n}")
        tree.root.mkdir()
        take(tree)
        taken = tree.root / "page.html"
        assert taken.is_symlink() and not os.path.samestat(os.lstat(taken), os.stat(secret)), n


@pytest.mark.parametrize("live", [True, False])
def test_publishing_with_a_spare_twin_keeps_the_twin_and_deletes_the_old_trees(tmp_path, live):
    """A build that wrote a fresh site and a twin of it publishes the site, keeps the twin as the tree beside
    (the next build updates it in place), and deletes the trees it replaces: the old site, where there was one,
    and the old tree beside.  Nothing of theirs is left behind, and the twin is not mistaken for either."""
    slot = OutputSlot(tmp_path / "site")
    if live:
        make_tree(slot.output)
    make_tree(slot.prev)
    slot.acquire()
    staging, spare = slot.new_staging(), slot.new_staging("-twin")
    staging.write("index.html", b"new site")
    spare.write("index.html", b"its twin")
    slot.publish(staging, spare)
    slot.release()
    assert (slot.output / "index.html").read_bytes() == b"new site" and not (slot.output / "d0").exists()
    assert (slot.prev / "index.html").read_bytes() == b"its twin" and not (slot.prev / "d0").exists()
    assert all(wait_gone(tree) for tree in tmp_path.glob(".site.*-*"))  # (the old trees, being deleted)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".site.lock", ".site.prev", "site"]


def test_a_site_that_links_files_of_the_old_one_is_published_only_once_the_old_is_deleted(tmp_path):
    """Deleting one name of a hard-linked file changes the file's status, and a deploy step that archives the site
    right after the build (tar) fails on a file whose status changes as it reads it.  So where the new site took
    files of the old one by link, the old site is gone when the build lets go of the output, twin or no twin."""
    slot = OutputSlot(tmp_path / "site")
    make_tree(slot.output, files=200)
    (slot.output / "kept.html").write_bytes(b"unchanged page")
    slot.acquire()
    staging, spare = slot.new_staging(), slot.new_staging("-twin")
    assert staging.reuse("kept.html", slot.output / "kept.html")
    staging.write("index.html", b"new site")
    spare.write("index.html", b"its twin")
    slot.publish(staging, spare)
    slot.release()
    assert [p.name for p in tmp_path.glob(".site.*-*")] == []  # (not being deleted still: deleted)
    assert (slot.output / "kept.html").read_bytes() == b"unchanged page"


def test_writing_a_site_leaves_no_file_descriptor_open(tmp_path):
    """A site of 100,000 records is a million files: a descriptor left open for each file written, copied or
    looked at would stop the build at the process's limit (1,024 by default) with "Too many open files"."""
    live = tmp_path / "live"
    live.mkdir()
    (live / "page.html").write_bytes(b"<p>kept</p>")
    os.mkfifo(live / "fifo.html")
    (live / "verification.json").write_bytes(b'{"build_id": "' + b"0" * 64 + b'", "generator": "site-builder"}')
    before = open_descriptors()
    tree = StagingTree(tmp_path / "tree")
    tree.root.mkdir()
    for n in range(50):
        tree.write(f"pith/{n}/bundle.json", b"{}")
        tree.write_twin(f".well-known/pith/{n}/bundle.json", f"pith/{n}/bundle.json", b"{}")
        assert tree.copy_from(f"kept/{n}.html", live / "page.html")
        assert not tree.copy_from(f"fifo/{n}.html", live / "fifo.html")
        assert is_builder_output(live)
    held = OutputSlot(tmp_path / "site")
    held.acquire()
    for _ in range(20):
        with pytest.raises(OutputError, match="another site-builder build"):
            OutputSlot(tmp_path / "site").acquire()
    held.release()
    assert open_descriptors() == before


def test_an_updated_tree_beside_is_published_though_the_output_was_deleted_since(tmp_path):
    """A change updates the tree beside the output in place and swaps it in; an output deleted by hand since the
    last build (or while this one ran) leaves nothing to swap with, and the updated tree is simply put there."""
    slot = OutputSlot(tmp_path / "site")
    make_tree(slot.prev)
    (slot.prev / "index.html").write_text("updated")
    slot.acquire()
    slot.publish_prev()
    slot.release()
    assert (slot.output / "index.html").read_text() == "updated" and not os.path.lexists(slot.prev)


@pytest.mark.parametrize("leads_to", ["a folder", "nothing"])
def test_a_link_planted_where_the_tree_beside_goes_is_removed_not_followed(tmp_path, leads_to):
    """Publishing keeps the old site beside the output (``.site.prev``); a link planted at that name, leading to
    a folder or to nothing, is moved out of the way and removed like a tree of the builder's, and what it leads
    to is left as it was."""
    elsewhere = tmp_path / "elsewhere"
    make_tree(elsewhere, files=4)
    target = elsewhere if leads_to == "a folder" else tmp_path / "gone"
    slot = OutputSlot(tmp_path / "site")
    make_tree(slot.output)
    (slot.output / "index.html").write_text("old site")
    slot.prev.symlink_to(target, target_is_directory=True)
    slot.acquire()
    staging = slot.new_staging()
    staging.write("index.html", b"new site")
    slot.publish(staging)
    slot.release()
    assert (slot.output / "index.html").read_bytes() == b"new site"
    assert not slot.prev.is_symlink() and (slot.prev / "index.html").read_text() == "old site"
    assert sorted(str(p.relative_to(elsewhere)) for p in elsewhere.rglob("*")) == [
        "d0", "d0/f0.html", "d1", "d1/f1.html", "d2", "d2/f2.html", "d3", "d3/f3.html"]
