"""Writing: prepare the new site beside the output and swap it in atomically.

The output folder always holds a complete site.  The new tree is prepared in a
folder beside it and exchanged with the old one in a single
``renameat2(RENAME_EXCHANGE)`` call on Linux (renames elsewhere).  The old tree
is kept as ``.<name>.prev``: the next build brings that tree up to date in
place (only the files that changed since it was live) and swaps again, so a
small change costs a few files, not a copy of the whole site (double
buffering).  When ``.prev`` cannot be trusted (unknown, or left half-updated by
a killed build), a fresh ``.<name>.staging-<pid>`` is built instead.  Every
path is checked before it is created: nothing is written outside these folders.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

# A path is plain components joined by "/": each starts with a letter or digit and holds only letters, digits, ".",
# "_" and "-" (so never "", "." or ".."), or is one of the two dot-names a static host needs.  One expression for
# the whole path (a record writes ten files; checking them part by part was ~8 µs a file).
_COMPONENT = r"(?:[A-Za-z0-9][A-Za-z0-9._\-]*|\.well-known|\.nojekyll)"
_SAFE_PATH = re.compile(rf"(?:{_COMPONENT}/)*{_COMPONENT}")
_WINDOWS_RESERVED = re.compile(r"(?:\A|/)(?:CON|PRN|AUX|NUL|COM[0-9]|LPT[0-9])(?:\.[^/]*)?(?:/|\Z)", re.IGNORECASE)
MARKER = "verification.json"


class OutputError(Exception):
    """The output folder cannot be used; the message says why."""


def check_relative_path(rel: str) -> str:
    """Return *rel* if it is a safe relative path of plain components, else raise ValueError."""
    if not is_plain_path(rel):
        raise ValueError(f"unsafe output path {rel!r}")
    return rel


def is_plain_path(rel: str) -> bool:
    """Whether *rel* is a safe relative path of plain components (``_SAFE_PATH``, no Windows device name)."""
    return _SAFE_PATH.fullmatch(rel) is not None and _WINDOWS_RESERVED.search(rel) is None


# Every folder of a site is made writable by its owner alone, whatever the umask allows: a folder another user
# could add an entry to (a link leading out of the site, a page) is one whose contents no build could vouch for.
# A tree beside the output is brought up to date in place only if its own folder is such a folder of this user's
# (``owned_privately``), since its files are kept unchecked but for the mirrored bundles.
FOLDER_MODE = 0o755


def not_private(path: Path, others_may_write: bool = False) -> str | None:
    """Why *path* is not a real folder of this user's that no other user may write to, or None where it is;
    *others_may_write*: the last point is not asked (of a folder the caller is about to make private)."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"cannot read {path}: {e.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder (a link, or another file)"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to another user"
    if st.st_mode & 0o022 and not others_may_write:
        return f"{path} is writable by other users"
    return None


def owned_privately(path: Path) -> bool:
    """Whether *path* is a real folder of this user's that no other user may write to."""
    return not_private(path) is None


def create_new(path: Path, mode: int = 0o644) -> int:
    """A file descriptor for writing *path* as a new file this call creates: whatever was at that name (a killed
    run's leftover, or a link) is removed first, the name and not what a link leads to, and the file is never
    opened through a link."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)


def make_folders(path: str) -> None:
    """*path* and the folders above it that are missing, each with FOLDER_MODE."""
    parent = os.path.dirname(path)
    if parent and parent != path and not os.path.isdir(parent):
        make_folders(parent)
    try:
        os.mkdir(path, FOLDER_MODE)
    except FileExistsError:
        pass


class TreeChanged(OutputError):
    """A tree an earlier build left holds something no build makes where the build was to use a folder of it."""


class StagingTree:
    """A folder that receives the new site; files are created, never overwritten.

    *existing*: a tree an earlier build left (the one beside the output, brought up to date in place), which is
    untrusted like every file a build finds: before the build makes or removes anything in a folder of it, each
    part of that folder's path is checked to be a real folder, since a link there would lead the build outside
    the output (TreeChanged otherwise).  In a fresh tree every folder is the build's own."""

    def __init__(self, root: Path, existing: bool = False):
        self.root = root
        self.existing = existing
        self._prefix = os.path.join(os.fspath(root), "")  # paths are joined as strings: a record writes ten files
        self._dirs: set[str] = set()
        self._real_folders: set[str] = {""}  # (existing trees) folders checked to be real folders, or made
        self.holds_older_files = False  # whether ``reuse`` linked in a file of another tree

    def path_for(self, rel: str) -> str:
        return self._prefix + check_relative_path(rel)

    def _ensure_parent(self, rel: str, made: set[str] | None = None) -> None:
        """Make *rel*'s folder unless it is in *made* (default: the folders this tree remembers), and note it."""
        made = self._dirs if made is None else made
        parent = rel.rpartition("/")[0]
        if parent and parent not in made:
            if self.existing:
                self.check_folder(parent)
            try:
                os.mkdir(self._prefix + parent, FOLDER_MODE)  # (one call: the parent's parent mostly exists)
            except FileExistsError:
                pass
            except FileNotFoundError:
                make_folders(self._prefix + parent)
            made.add(parent)

    def check_folder(self, folder: str) -> None:
        """Raise TreeChanged unless each part of *folder* (relative) is a real folder of this tree, or missing
        (then made as one)."""
        if folder in self._real_folders:
            return
        self.check_folder(folder.rpartition("/")[0])
        try:
            mode = os.lstat(self._prefix + folder).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not stat.S_ISDIR(mode):
            raise TreeChanged(f"{self._prefix + folder}: not a folder site-builder made (a link or another file): "
                              f"the tree was changed outside site-builder")
        self._real_folders.add(folder)

    def remove(self, rel: str) -> None:
        """Remove the file *rel* (not what a link there leads to), if it is there."""
        self.check_folder(rel.rpartition("/")[0])
        try:
            os.unlink(self.path_for(rel))
        except FileNotFoundError:
            pass

    def remove_empty_folders(self, folders: Iterable[str]) -> None:
        """Remove those of *folders* (relative) that are empty, deepest first, and the folders above them that
        this empties, up to the tree's root."""
        for folder in sorted(folders, key=lambda f: f.count("/"), reverse=True):
            while folder:
                try:
                    self.check_folder(folder)
                    os.rmdir(self._prefix + folder)
                except (OSError, TreeChanged):
                    break
                self._real_folders.discard(folder)
                folder = folder.rpartition("/")[0]

    def write(self, rel: str, data: bytes) -> None:
        self.write_chunks(rel, (data,))

    def _create(self, rel: str) -> int:
        """A new file at *rel* (its folder made already), opened for writing; OSError where anything is there."""
        return os.open(self.path_for(rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)

    def write_chunks(self, rel: str, chunks: Iterable[bytes]) -> None:
        """Write a file made piece by piece (verification.json: ~50 MB at 100,000 records, never held whole)."""
        self._ensure_parent(rel)
        fd = self._create(rel)
        try:
            for data in chunks:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
        except OSError as exc:  # (os.write names no file: a full disk's error line says which it was writing)
            if exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror, self.path_for(rel)) from None
        finally:
            os.close(fd)

    def write_twin(self, rel: str, twin: str, data: bytes) -> None:
        """Write *data*, which this tree already holds at *twin*, as a hard link to it: the mirrored bundle is
        served at two paths, and a link costs a directory entry instead of another ~14 KB (a quarter of a
        site's bytes).  Files in a tree are never rewritten in place (a changed file is unlinked and created
        anew), so the two names cannot drift apart.  Written out where links are impossible."""
        if not self.link_from(rel, self.path_for(twin)):
            self.write(rel, data)

    def reuse(self, rel: str, source: str | Path) -> bool:
        """Take an unchanged file of the previous site by hard link; False if impossible."""
        self.holds_older_files = True  # (even a failed attempt may have linked the unit's other files)
        return self.link_from(rel, source)

    def copy_from(self, rel: str, source: str | Path) -> bool:
        """Make *rel* a copy of *source*, a regular file (a link is not followed, a FIFO not waited on); False if
        impossible, with no half-copied file left.  A tree that copies an older site's files shares none with it."""
        try:
            fd = os.open(source, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            return False
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # (before the file object: io raises for a folder's descriptor)
            os.close(fd)
            return False
        with open(fd, "rb") as src:
            try:
                self._ensure_parent(rel)
                target = self._create(rel)
            except OSError:
                return False
            try:
                with open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            except OSError:
                os.unlink(self.path_for(rel))
                return False
        return True

    def mirror(self, rels: Iterable[str], source_root: str | Path, copy: bool = False) -> None:
        """Make each of *rels* a hard link to (with *copy*, a copy of) the same path under *source_root*, the root
        of the tree this one mirrors; raises OSError if one is impossible.  The folders are made as needed and
        not remembered past the call, as ``write`` remembers them: a twin of a whole site is 700,000 folders at
        100,000 records.  A call's files (a unit's) share a few folders, each made once, before its first file:
        trying the link first and making the folder when it failed took a third more calls (and time) for a
        twin."""
        place = shutil.copyfile if copy else os.link
        source = os.path.join(os.fspath(source_root), "")
        made: set[str] = set()
        for rel in rels:
            target = self.path_for(rel)
            self._ensure_parent(rel, made)
            place(source + rel, target, follow_symlinks=False)

    def link_from(self, rel: str, source: str | Path) -> bool:
        """Make *rel* a hard link to *source*; False if impossible."""
        target = self.path_for(rel)
        self._ensure_parent(rel)
        try:
            os.link(source, target, follow_symlinks=False)
            return True
        except OSError:
            return False


# A detached deleter: it holds a lock on the folder while ``rm -rf`` runs, so a later build that finds the folder
# still there knows it is being deleted (and does not start a second deletion, or wait for it).
_DELETER = """
import fcntl, os, shutil, sys
path = sys.argv[1]
try:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    sys.exit(0)
os.set_inheritable(fd, True)
if shutil.which("rm"):
    os.execvp("rm", ["rm", "-rf", "--", path])
shutil.rmtree(path, ignore_errors=True)
"""


def remove_tree(path: Path, wait: bool = True, idle: bool = True) -> subprocess.Popen | None:
    """Delete a folder now, or in a process of its own, returned; at low CPU priority, and with *idle* at idle
    I/O priority, so that deleting 100,000 files slows the build beside it as little as it can (but the disk
    serves an idle process only when nobody else asks: no good for a deletion the build will wait for)."""
    if wait:
        shutil.rmtree(path, ignore_errors=True)
        return None
    polite = ((["ionice", "-c3"] if idle and shutil.which("ionice") else [])
              + (["nice", "-n19"] if shutil.which("nice") else []))
    # -I: isolated from the working folder (``-c`` puts it first on the import path: a project's shutil.py would
    # run instead of the standard library's) and from PYTHON* variables; the deleter needs the standard library.
    return subprocess.Popen([*polite, sys.executable, "-I", "-c", _DELETER, str(path)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


@functools.cache
def _libc_renameat2():
    """The C library's ``renameat2``, or None where it has none.  Looked up at the first swap rather than on
    import: loading ctypes is ~10 ms of every command's start.  The process's own symbols hold the C library it
    runs on (``CDLL(None)``), which spares ``ctypes.util.find_library`` its run of ``ldconfig``."""
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths; False where the system cannot."""
    renameat2 = _libc_renameat2()
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    import ctypes  # (loaded by _libc_renameat2)

    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a))


@dataclass
class _Deletion:
    """A tree being deleted by a process of this build, and whether it may share files with the new site."""

    process: subprocess.Popen
    shares_files: bool


def _mounted(output: Path, why: str) -> OutputError:
    return OutputError(f"{output}: {why}: a build replaces the output folder as a whole, atomically, which a mount "
                       f"point cannot be; mount the folder above it instead, or build into a folder inside it "
                       f"(--output {output / 'site'})")


MOUNT_TABLE = "/proc/self/mountinfo"


def mount_points(mount_table: str) -> set[str]:
    """The mount points a mount table lists (the text of /proc/self/mountinfo: each line's fifth field, with the
    kernel's octal escapes of space, tab, newline and backslash undone)."""
    points = set()
    for line in mount_table.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            points.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return points


def is_mount_point(path: Path) -> bool:
    """Whether a file system is mounted at *path*, a bind mount of a folder of the same one included (which
    ``os.path.ismount`` cannot tell): such a folder cannot be renamed, so it cannot be swapped for a new tree."""
    if os.path.ismount(path):
        return True
    try:
        with open(MOUNT_TABLE, encoding="utf-8", errors="surrogateescape") as f:
            return os.path.realpath(path) in mount_points(f.read())
    except OSError:
        return False


# The start of every verification.json a build writes (report.py: the build id comes first, then the generator).
_OWN_MARKER = re.compile(rb'\{"build_id": "[0-9a-f]{64}", "generator": "site-builder"[,}]')


def marker_head(folder: Path, size: int = 300) -> bytes:
    """The first *size* bytes of *folder*'s verification.json where it is a regular file of the folder's own: b""
    for none, a link (not followed) or anything else there (a FIFO is not waited on)."""
    try:
        fd = os.open(folder / MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        return os.read(fd, size) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


def is_builder_output(folder: Path) -> bool:
    """Whether *folder* is a site this builder wrote: its verification.json is a regular file that starts as the
    builder writes it.  A file that merely has the name (a project's own report, say) does not count, so the
    folder it is in is never replaced, nor its files deleted."""
    return _OWN_MARKER.match(marker_head(folder, 200)) is not None


class OutputSlot:
    """The output folder and its hidden siblings (staging, old, lock)."""

    def __init__(self, output: Path):
        self.output = Path(os.path.abspath(output))
        self.parent = self.output.parent
        self.name = self.output.name
        self._lock_fd: int | None = None
        self._deleting: list[_Deletion] = []
        self.shares_files = True  # whether the live tree may share files with any tree being deleted

    def staging_path(self, suffix: str = "") -> Path:
        """A staging folder of this process (*suffix*: a second one); a killed build's are removed as leftovers."""
        return self.parent / f".{self.name}.staging-{os.getpid()}{suffix}"

    def _trash_path(self) -> Path:
        """A unique name for a tree on its way out (several may be being deleted at once)."""
        return self.parent / f".{self.name}.old-{os.getpid()}-{time.monotonic_ns()}"

    @property
    def prev(self) -> Path:
        """The tree that was live before the current one (or nothing)."""
        return self.parent / f".{self.name}.prev"

    def _leftovers(self) -> list[Path]:
        """What killed builds of this output left beside it: a name as ``staging_path`` or ``_trash_path`` make
        one, and no other (``.site.old-backup``, a copy the user put there, is theirs)."""
        ours = re.compile(rf"\.{re.escape(self.name)}\.(?:staging-[0-9]+(?:-spare)?|old-[0-9]+-[0-9]{{6,}})")
        try:
            return [p for p in self.parent.iterdir() if ours.fullmatch(p.name)]
        except OSError:
            return []

    def check_usable(self) -> None:
        """OutputError where the output folder is no place for the site (see the messages), or cannot be looked
        at (a folder on the way this user may not search)."""
        try:
            self._check_usable()
        except OSError as exc:
            raise OutputError(f"{self.output}: cannot look at the output folder: {exc.strerror or exc}") from None

    def _check_usable(self) -> None:
        outer = next((up for up in self.output.parents if is_builder_output(up)), None)
        if outer is not None:  # (its next build would find this folder in it, not its own, and stop)
            raise OutputError(f"{self.output}: inside {outer}, a site this builder wrote, which every build of it "
                              f"replaces; choose an output folder outside it")
        try:  # (not ``Path.exists()``: from Python 3.14 on, it says False of what this user may not look at)
            found = os.lstat(self.output)
        except (FileNotFoundError, NotADirectoryError):
            return  # (nothing there yet: ``acquire`` makes the folders)
        if stat.S_ISLNK(found.st_mode):
            raise OutputError(f"{self.output}: output folder is a symbolic link; refusing to replace it")
        if not stat.S_ISDIR(found.st_mode):
            raise OutputError(f"{self.output}: exists and is not a folder")
        if is_mount_point(self.output):  # (found now, not after the whole build, when the swap fails)
            raise _mounted(self.output, "is a mount point")
        if any(self.output.iterdir()) and not is_builder_output(self.output):
            raise OutputError(f"{self.output}: folder is not empty and was not made by site-builder "
                              f"(no {MARKER} of its own); nothing was changed: choose another --output or "
                              f"empty it")

    def acquire(self) -> None:
        """Take the build lock, then remove what an interrupted build left behind."""
        try:
            self.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.parent / f".{self.name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            nearest = next((up for up in (self.parent, *self.parent.parents) if os.path.lexists(up)), None)
            if nearest is not None and not nearest.is_dir():  # (mkdir says "File exists" of it)
                raise OutputError(f"{nearest}: not a folder, so the output folder {self.output} cannot be made "
                                  f"in it") from None
            raise OutputError(f"{self.output}: cannot write beside the output folder: "
                              f"{exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputError(f"{self.output}: another site-builder build is writing this output") from None
        self._lock_fd = fd
        for leftover in self._leftovers():
            if leftover.name.startswith(f".{self.name}.staging-"):  # from a build that was killed
                aside = self._trash_path()
                try:
                    leftover.rename(aside)
                except OSError:
                    continue
                leftover = aside
            self._delete(leftover)  # (a no-op if another process is deleting it)

    def _delete(self, tree: Path, shares_files: bool = True) -> None:
        deleter = remove_tree(tree, wait=False, idle=not shares_files)
        if deleter is not None:
            self._deleting.append(_Deletion(deleter, shares_files))

    def assume_shared(self) -> None:
        """Wait for every deletion started so far (the build can no longer tell which trees share files)."""
        for deletion in self._deleting:
            deletion.shares_files = True

    def release(self) -> None:
        """Let go of the output, once the trees this build retired that may share files with the live one are
        deleted (none may when the site was written afresh: ``shares_files``).  Deleting one name of a file
        (a hard link) changes the file's status (ctime), and a deploy step that archives the site right after
        the build (tar) fails on a file whose status changes as it reads it.  Deletions start as early as
        possible, so most of them end while the build still works."""
        try:
            if self.shares_files:  # (the loop holds only processes it waits for: see below)
                for process in [d.process for d in self._deleting if d.shares_files]:
                    process.wait()
        finally:
            with warnings.catch_warnings():
                # A deletion not waited for goes on after the build, by design: dropping its Popen hands it to
                # the subprocess module, which reaps it later.  Not a leak to warn of (python -X dev would).
                warnings.simplefilter("ignore", ResourceWarning)
                self._deleting.clear()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def new_staging(self, suffix: str = "") -> StagingTree:
        path = self.staging_path(suffix)
        if path.is_symlink():  # (rmtree refuses a link, and the folder must be made here, by this build)
            path.unlink()
        shutil.rmtree(path, ignore_errors=True)
        os.mkdir(path, FOLDER_MODE)  # (FileExistsError: something the build could not remove is in the way)
        return StagingTree(path)

    def _swap_in(self, tree: Path) -> None:
        """Exchange *tree* and the output: afterwards *tree*'s path holds the old site, if there was one (an
        output deleted since the last build, by hand or while this one ran, leaves nothing to exchange)."""
        if not os.path.lexists(self.output):
            tree.rename(self.output)
            return
        try:
            if exchange(tree, self.output):
                return
            aside = self._trash_path()
            self.output.rename(aside)
        except OSError as exc:  # (a mount point the mount table did not show: nothing was moved)
            if exc.errno in (errno.EBUSY, errno.EXDEV):
                raise _mounted(self.output, f"cannot be replaced ({exc.strerror})") from None
            raise
        tree.rename(self.output)
        aside.rename(tree)

    def retire_prev(self, shares_files: bool = True) -> None:
        """Move the kept previous tree out of the way and start deleting it (``release`` waits for the end):
        once renamed, it is safe to delete beside the build's own work."""
        if self.prev.exists() or self.prev.is_symlink():
            old = self._trash_path()
            self.prev.rename(old)
            self._delete(old, shares_files)

    def publish(self, staging: StagingTree, spare: StagingTree | None = None) -> None:
        """Make the staging tree the output; the old output is kept as the previous tree, or, given a *spare*
        twin of the new site, deleted (it shares no file with the new site) and the spare kept instead."""
        if self.output.exists():
            self._swap_in(staging.root)
            self.retire_prev()
            if spare is None:
                staging.root.rename(self.prev)
                return
            old = self._trash_path()
            staging.root.rename(old)
            self._delete(old, shares_files=staging.holds_older_files)
        else:
            staging.root.rename(self.output)
            if spare is None:
                return
            self.retire_prev()
        spare.root.rename(self.prev)

    def publish_prev(self) -> None:
        """Make the (updated) previous tree the output; the old output becomes the previous tree."""
        self._swap_in(self.prev)

    def discard(self, staging: StagingTree) -> None:
        """Remove a failed build's staging tree before returning: a failure must leave no trace behind."""
        remove_tree(staging.root, wait=True)
