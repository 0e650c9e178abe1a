"""Loading: find bundle files and read their bytes safely.

Only regular ``*.json`` files are read.  Symlinks are never followed (a link
could point outside the bundles folder), FIFOs and devices are skipped without
blocking, hidden entries are ignored, and size is capped before reading.
"""

from __future__ import annotations

import errno
import hashlib
import operator
import os
import re
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, NamedTuple, Sequence

from site_builder.writing import MARKER, is_builder_output

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
# How a bundle is opened, for reading and for reading ahead: no symlink followed, no FIFO waited for.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


class BundlesFolderError(Exception):
    """The bundles folder itself is unusable (missing, not a folder, unreadable)."""


class BundlesFolderMissing(BundlesFolderError):
    """There is no bundles folder at that path (or a link to nothing): a first run, or a misspelt ``--bundles``."""


class MirrorListingError(BundlesFolderError):
    """A mirror's ``pith/`` folder cannot be listed; *strerror* says why (a mirror found inside a folder being
    checked is then one rejection among its results, not the end of the check)."""

    def __init__(self, message: str, strerror: str):
        super().__init__(message)
        self.strerror = strerror


class InputFile(NamedTuple):
    """A candidate bundle file (a named tuple: discover() makes one per file, 10,000 at a time)."""

    rel: str  # path relative to the bundles folder, POSIX separators
    path: str | Path  # a plain string from discover(): 10,000 Path objects cost a tenth of a second
    sig: str = ""  # size, mtime, inode and ctime: unchanged means the cached digest still applies


@dataclass(frozen=True)
class SkippedFile:
    rel: str
    check: str
    reason: str


def unlistable_folder(rel: str, strerror: str | None) -> SkippedFile:
    """A folder inside the bundles folder that cannot be listed: reported as a file the walk skipped, so that
    its bundles are not left out in silence."""
    return SkippedFile(rel, "file_read", f"cannot list folder: {strerror}")


class FileReadError(Exception):
    def __init__(self, check: str, reason: str):
        super().__init__(reason)
        self.check = check
        self.reason = reason


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link (not followed)"
    if stat.S_ISFIFO(mode):
        return "a FIFO, not a regular file"
    if stat.S_ISSOCK(mode):
        return "a socket, not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device, not a regular file"
    if stat.S_ISDIR(mode):
        return "a folder, not a regular file"
    return "not a regular file"


_entry_name = operator.attrgetter("name")


def stat_signature(st: os.stat_result) -> str:
    """Size, mtime, inode and ctime: while they are unchanged, so are the file's bytes (for caching)."""
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}:{st.st_ctime_ns}"


def signature_size(sig: str) -> str:
    """The size a stat signature (``stat_signature``) records, as it records it."""
    return sig.partition(":")[0]


def _folder_stamp(st: os.stat_result) -> tuple[int, int, int]:
    """What changes when a folder's entries do (an entry created, deleted or renamed)."""
    return st.st_ino, st.st_mtime_ns, st.st_ctime_ns


def is_utf8(name: str) -> bool:
    """Whether a name from the file system (or a variable from the environment) is valid UTF-8 (Python keeps
    each byte that is not as a lone surrogate, which no UTF-8 text can hold)."""
    try:
        name.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _shown_name(rel: str) -> str:
    """*rel* as UTF-8 text, each byte that was not UTF-8 as ``\\xNN``: what the report and the terminal show."""
    return rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


MIRROR_MANIFEST = "pith-mirrors.json"


def is_mirror(folder: Path) -> bool:
    """Whether *folder* is laid out as a mirror (PITH_FORMAT.md §5): the mirror manifest at its top, and a
    ``pith/`` folder.  (``os.path``'s tests say False of what cannot be looked at, where ``Path``'s raise: a
    folder this user may not search is no mirror, and is reported as the walk finds it.)"""
    return (not os.path.islink(folder) and os.path.isdir(folder) and os.path.isdir(folder / "pith")
            and not os.path.islink(folder / "pith") and os.path.isfile(folder / MIRROR_MANIFEST))


def discover(root: Path, folders: list[str] | None = None, leave_out: Sequence[Path] = (),
             sites: list[str] | None = None) -> tuple[list[InputFile], list[SkippedFile]]:
    """Every candidate ``*.json`` under *root* in a stable order, and what was skipped and why (and, into
    *folders*, every folder listed).  The folders *leave_out* names are not entered where they lie inside
    *root* (``--bundles .``; ``BuildOptions.not_bundles``), each found by its real path.  Of a copy of a
    mirror, at *root* or inside it, its records' bundles alone (``mirror_bundles``).

    Where *sites* is a list (a build's walk, and ``verify``'s), a subfolder that is a site this builder wrote (an
    earlier build's output, a site copied in) is not entered either, and its path relative to *root* goes into
    *sites*: its files are that site's, and a bundle deleted from the bundles folder would come back from its
    copy there."""
    left_out: dict[str, set[str]] = {}
    for path in leave_out:
        real = os.path.realpath(path)
        left_out.setdefault(os.path.basename(real), set()).add(real)
    check_bundles_folder(root)
    if is_mirror(Path(root)):
        return mirror_bundles(Path(root), folders)
    return _walk_bundles(Path(root), left_out, folders, sites)


def _is_site(folder: Path, entries: list[os.DirEntry]) -> bool:
    """Whether *folder*, listed as *entries*, is a site this builder wrote: told from the listing the walk makes
    anyway, not by opening a file in every folder (10,000 record folders took 0.15 s longer so).  The walk does
    not count a site among the folders it listed, so that any change in it has a watcher's build list the
    bundles folder again."""
    return any(e.name == MARKER for e in entries) and is_builder_output(folder)


def _walk_bundles(root: Path, left_out: dict[str, set[str]], folders: list[str] | None,
                  sites: list[str] | None) -> tuple[list[InputFile], list[SkippedFile]]:
    """``discover``'s walk of a bundles folder that is no mirror: depth first, each folder's entries in name
    order, a subfolder's files where it stands among them; with a stack of its own, not by recursion, so that
    folders nested a thousand deep (a pull request's) are no RecursionError."""
    found: list[InputFile] = []
    skipped: list[SkippedFile] = []

    def listing(folder: Path, prefix: str, top: bool) -> Iterator[os.DirEntry] | None:
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=_entry_name)
        except OSError as exc:
            if top:
                raise BundlesFolderError(f"{folder}: cannot list bundles folder: {exc.strerror}") from None
            skipped.append(unlistable_folder(prefix.rstrip("/"), exc.strerror))
            return None
        if not top and _taken_whole(folder, prefix, entries, sites, found, skipped, folders):
            return None
        if folders is not None:
            folders.append(str(folder))
        return iter(entries)

    stack = [(listing(root, "", True), "")]
    while stack:
        entries, prefix = stack[-1]
        for entry in entries:  # (left for a subfolder, and taken up again where it stopped once that is done)
            if entry.name.startswith("."):
                continue
            rel = prefix + entry.name
            if not is_utf8(entry.name):  # (it could be neither shown, nor written into the report, as it is)
                if entry.name.endswith(".json") or entry.is_dir(follow_symlinks=False):
                    skipped.append(SkippedFile(_shown_name(rel), "file_name", "the name is not valid UTF-8"))
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                mode = st.st_mode
            except OSError as exc:
                if entry.name.endswith(".json"):
                    skipped.append(SkippedFile(rel, "file_read", f"cannot stat: {exc.strerror}"))
                continue
            if stat.S_ISDIR(mode):
                if entry.name in left_out and os.path.realpath(entry.path) in left_out[entry.name]:
                    continue
                inner = listing(Path(entry.path), rel + "/", False)
                if inner is not None:
                    stack.append((inner, rel + "/"))
                    break
            elif entry.name.endswith(".json"):
                if stat.S_ISREG(mode):
                    found.append(InputFile(rel, entry.path, stat_signature(st)))
                else:
                    skipped.append(SkippedFile(rel, "file_type", _kind(mode)))
            elif named_json(entry.name):  # (a bundle saved as .JSON is said, not passed over in silence)
                skipped.append(SkippedFile(rel, "file_name", f"ends in {entry.name[-5:]}: a bundle file's name ends "
                                                             f"in .json, in lower case; not read"))
        else:
            stack.pop()
    return found, skipped


def named_json(name: str) -> bool:
    """Whether *name* ends in .json in any letter case: a bundle file's name, or one the walk reports as not read
    (a bundle is read only from a name in lower case)."""
    return name[-5:].lower() == ".json"


def check_bundles_folder(root: Path) -> None:
    """BundlesFolderError where *root* is no folder (BundlesFolderMissing: nothing there), or one this process may
    not enter (it, or a folder on the way to it, without search permission)."""
    try:
        st = os.stat(root)
    except FileNotFoundError:
        raise BundlesFolderMissing(f"{root}: bundles folder does not exist") from None
    except OSError as exc:
        raise BundlesFolderError(f"{root}: cannot open bundles folder: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise BundlesFolderError(f"{root}: not a folder")
    try:  # (a folder that can be listed but not searched: each file in it would be rejected, and the site emptied)
        check_enterable(root)
    except OSError as exc:
        raise BundlesFolderError(f"{root}: cannot open bundles folder: {exc.strerror}") from None


def check_enterable(folder: Path | str) -> None:
    """OSError, naming *folder*, where this process may list the folder but not enter it (no search permission):
    then every file in it is unreadable, which is no reason to treat each as missing or rejected."""
    try:
        os.stat(os.path.join(folder, os.curdir))
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(folder)) from None


def _taken_whole(folder: Path, prefix: str, entries: list[os.DirEntry], sites: list[str] | None,
                 found: list[InputFile], skipped: list[SkippedFile], folders: list[str] | None) -> bool:
    """Whether the walk does not enter the subfolder *folder* (listed as *entries*, its files named under
    *prefix*) entry by entry: a site this builder wrote, where *sites* is a list (``discover``), goes into it
    (and not into *folders*: see ``_is_site``); a copy of a mirror is read as at the top, its records' bundles
    alone (``mirror_bundles``), and a ``pith/`` of it that cannot be listed is skipped with why, as any folder
    the walk cannot list."""
    if sites is not None and _is_site(folder, entries):
        sites.append(prefix.rstrip("/"))
        return True
    if not any(e.name == MIRROR_MANIFEST for e in entries) or not is_mirror(folder):
        return False
    try:
        more_found, more_skipped = mirror_bundles(folder, folders, prefix)
    except MirrorListingError as exc:
        skipped.append(unlistable_folder(prefix + "pith", exc.strerror))
        return True
    found += more_found
    skipped += more_skipped
    return True


def mirror_bundles(root: Path, folders: list[str] | None = None,
                   prefix: str = "") -> tuple[list[InputFile], list[SkippedFile]]:
    """The bundle of each record folder ``pith/<ID>/`` of the mirror at *root* (``is_mirror``: a site this
    builder made, fetched whole), in ID order, each named under *prefix*, and what stands there and is no
    regular file: the JSON of its pages and manifests is not bundles.  The folders whose entries decide the
    answer go into *folders*: the mirror's top (its manifest), ``pith/`` and each record's folder."""
    pith = root / "pith"
    ids = mirror_record_ids(root)
    found: list[InputFile] = []
    skipped: list[SkippedFile] = []
    if folders is not None:
        folders += [str(root), str(pith), *(str(pith / pid) for pid in ids)]
    for pid in ids:
        rel, path = f"{prefix}pith/{pid}/bundle.json", pith / pid / "bundle.json"
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError as exc:
            skipped.append(SkippedFile(rel, "file_read", f"cannot stat: {exc.strerror}"))
            continue
        if stat.S_ISREG(st.st_mode):
            found.append(InputFile(rel, str(path), stat_signature(st)))
        else:
            skipped.append(SkippedFile(rel, "file_type", _kind(st.st_mode)))
    return found, skipped


def mirror_record_ids(root: Path) -> list[str]:
    """The IDs of the record folders ``pith/<ID>/`` of the mirror at *root*, sorted (MirrorListingError where
    ``pith/`` cannot be listed).  The other entries of ``pith/`` are pages (the short addresses ``pith/<8>/``...)."""
    try:
        with os.scandir(root / "pith") as entries:
            return sorted(e.name for e in entries if is_record_id(e.name) and e.is_dir(follow_symlinks=False))
    except OSError as exc:
        raise MirrorListingError(f"{root / 'pith'}: cannot list the mirror's records: {exc.strerror}",
                                 exc.strerror) from None


def is_record_id(name: str) -> bool:
    """Whether *name* names a record's folder in a mirror's ``pith/``: a 26-character pith ID."""
    return _RECORD_FOLDER.match(name) is not None


_RECORD_FOLDER = re.compile(r"[A-Z2-7]{26}\Z")


class Prefetcher:
    """Asks the kernel to read the next files ahead while worker processes verify the ones before them.

    Each worker reads one file at a time, so from a cold disk (bundles pushed out of the page cache by a large
    output, or a fresh checkout) the disk sees one request per worker and the CPUs wait: 10,000 bundles took
    ~10 s to verify cold against ~7 s warm.  A thread opens each file in order (as ``read_bytes`` does: no
    symlink followed, no FIFO waited for) and advises the kernel it will be needed (``POSIX_FADV_WILLNEED``, an
    asynchronous read); it stays at most *ahead* files ahead of the results taken, so that a small page cache
    is not filled with files read too early.  Cold, the same 10,000 bundles took ~7-8 s.  Reads nothing itself:
    a file that changes meanwhile is only read by the worker, and checked as ever."""

    def __init__(self, paths: Sequence[str | Path], ahead: int):
        self._paths = paths
        self._ahead = ahead
        self.taken = 0  # results the caller has taken (set by the caller as it goes)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="site-builder prefetch", daemon=True)

    def start(self) -> Prefetcher:
        if hasattr(os, "posix_fadvise") and self._paths:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop reading ahead; never waits long (a daemon thread stuck in an ``open`` of a hung file system is
        left behind rather than holding up the build)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        for index, path in enumerate(self._paths):
            while index > self.taken + self._ahead:
                if self._stop.wait(0.002):
                    return
            if self._stop.is_set():
                return
            try:
                fd = os.open(path, _OPEN_FLAGS)
            except OSError:
                continue
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
            finally:
                os.close(fd)


def status_of(path: Path | str, follow_links: bool = True) -> os.stat_result | None:
    """The status of what *path* names, None where nothing is there (or a link leads nowhere); OSError where it
    cannot be looked at (a folder on the way this user may not search, a name too long).  ``Path.exists()``
    says False of some of these and raises for others."""
    try:
        return os.stat(path, follow_symlinks=follow_links)
    except (FileNotFoundError, NotADirectoryError):
        return None


def read_bytes(path: Path, max_bytes: int = DEFAULT_MAX_BYTES, follow_links: bool = False) -> bytes:
    """Read a regular file without following symlinks (unless *follow_links*: a file the user named, such as a
    key or settings file) or blocking on FIFOs; raise FileReadError."""
    try:
        fd = os.open(path, _OPEN_FLAGS & ~getattr(os, "O_NOFOLLOW", 0) if follow_links else _OPEN_FLAGS)
    except FileNotFoundError:
        raise FileReadError("file_read", "file vanished during the build") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileReadError("file_type", "a symbolic link (not followed)") from None
        raise FileReadError("file_read", f"cannot read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileReadError("file_type", _kind(st.st_mode))
        if st.st_size > max_bytes:
            raise FileReadError("file_size", f"{st.st_size} bytes is over the {max_bytes}-byte limit")
        chunks = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise FileReadError("file_size", f"file grew over the {max_bytes}-byte limit while reading")
        return data
    except OSError as exc:
        raise FileReadError("file_read", f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)


def file_sha256(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> str | None:
    """The sha256 of the regular file at *path* (read as ``read_bytes`` reads it), None where it cannot be read."""
    try:
        return hashlib.sha256(read_bytes(path, max_bytes)).hexdigest()
    except FileReadError:
        return None


@dataclass
class BundleListing:
    """What discover() found, with the stat of every folder it listed and when (for rediscover())."""

    root: str
    found: list[InputFile]
    skipped: list[SkippedFile]
    folders: dict[str, tuple[int, int, int]]  # path -> (st_ino, st_mtime_ns, st_ctime_ns)
    scanned_at_ns: int
    sites: list[str]  # the sites this builder wrote found inside and not entered (``discover``)

    def same_files(self, other: BundleListing) -> bool:
        return self.found == other.found and self.skipped == other.skipped and self.sites == other.sites


RACY_NS = 2_000_000_000  # a folder changed this close to a scan may change again within the same timestamp


def list_bundles(root: Path, leave_out: Sequence[Path] = ()) -> BundleListing:
    """discover(), remembering the folders' stats so that a later rediscover() can skip listing them.

    *root* should be absolute and resolved, as a file watcher reports paths."""
    scanned_at = time.time_ns()
    listed: list[str] = []
    sites: list[str] = []
    found, skipped = discover(root, listed, leave_out, sites)
    folders = {}
    for folder in listed:
        try:
            st = os.stat(folder)
        except OSError:
            st = None
        # A folder that cannot be stat-ed now is marked so that rediscover() lists everything again.
        folders[folder] = _folder_stamp(st) if st else (0, 0, 0)
    return BundleListing(str(root), found, skipped, folders, scanned_at, sites)


def rediscover(before: BundleListing, changed: set[str]) -> BundleListing | None:
    """The listing after changes to the files named in *changed* (absolute paths, as a file watcher reports
    them), without listing folders whose entries did not change; None when a full discover() is needed.

    A folder's entries are unchanged while its inode, mtime and ctime are (creating, deleting or renaming an
    entry updates them) and it had not changed within RACY_NS of the last scan (a coarse timestamp could hide
    a second change).  Files changed in place do not touch their folder: those are the ones *changed* names,
    and only they are stat-ed again.
    """
    for folder, known in before.folders.items():
        try:
            st = os.stat(folder)
        except OSError:
            return None
        if _folder_stamp(st) != known or st.st_mtime_ns >= before.scanned_at_ns - RACY_NS:
            return None
    if any(os.path.dirname(p) not in before.folders and p not in before.folders for p in changed):
        return None  # something in a folder discover() did not list (a new, hidden or unreadable one)
    by_path = {f.path: i for i, f in enumerate(before.found)} if changed else {}
    found = list(before.found)
    for path in changed:
        i = by_path.get(path)
        if i is None:
            continue  # not a candidate bundle (hidden, not .json, a folder)
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        found[i] = found[i]._replace(sig=stat_signature(st))
    return BundleListing(before.root, found, before.skipped, before.folders, before.scanned_at_ns, before.sites)


STATIC_MAX_BYTES = 100 * 1024 * 1024  # GitHub Pages refuses files over 100 MB


class StaticFile(NamedTuple):
    """A file of the static folder, to be copied into the site as it is."""

    rel: str  # its path in the site, "/"-separated
    data: bytes


def read_static_files(folder: Path | None) -> tuple[list[StaticFile], list[str]]:
    """The files under *folder* (none if it does not exist) in a stable order, and a line for each one that
    cannot be copied.  Hidden names are skipped, as in the bundles folder, except ``.well-known`` at the top
    (``security.txt`` lives there); links are not followed, so that nothing outside the folder is published."""
    if folder is None or not folder.is_dir():
        return [], []
    files: list[StaticFile] = []
    problems: list[str] = []

    def listing(path: Path, prefix: str) -> Iterator[os.DirEntry]:
        try:
            with os.scandir(path) as it:
                return iter(sorted(it, key=_entry_name))
        except OSError as exc:
            problems.append(f"{prefix or folder.name + '/'}: cannot list folder: {exc.strerror}")
            return iter(())

    stack = [(listing(folder, ""), "")]  # (depth first, in name order, by a stack: see ``_walk_bundles``)
    while stack:
        entries, prefix = stack[-1]
        for entry in entries:
            if entry.name.startswith(".") and not (prefix == "" and entry.name == ".well-known"):
                continue
            rel = prefix + entry.name
            if entry.is_dir(follow_symlinks=False):
                stack.append((listing(Path(entry.path), rel + "/"), rel + "/"))
                break
            try:
                files.append(StaticFile(rel, read_bytes(Path(entry.path), STATIC_MAX_BYTES)))
            except FileReadError as exc:
                problems.append(f"{rel}: {exc.reason}")
        else:
            stack.pop()
    return files, problems
