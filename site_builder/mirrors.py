"""The mirrored bundles in a tree: each record's verified bytes, served at two paths, and the check that they
still are those bytes.

A tree in the output folder, the live one or the one beside it that the next build updates in place, is
untrusted input like every file a build finds: anyone who can write there can edit a record's bundle.json or put
another file in its place, and a build that takes the record's files over unchecked would publish that file as
the verified one.  So the build cache records, for each published record, the stat signature of both its paths
(``pith/<id>/bundle.json`` and ``.well-known/pith/<id>/bundle.json``: one file with two names, where the file
system has hard links) as the build left them, and the next build compares: a record whose signature differs
is hashed again (live tree) or written again (the tree beside it), and where the cache holds no record that
checks, nothing in the tree counts as proven.

A signature is size, mtime and inode of each path (not the ctime, which the hard links of a tree's twin
change); 10,000 records are 20,000 lookups, ~60 ms on a 2-core VM.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import orjson

from site_builder.loading import file_sha256
from site_builder.parallel import WorkAhead

MIRROR_FOLDERS = ("pith", ".well-known/pith")  # where a record's bundle.json is: <folder>/<pith id>/bundle.json


def mirror_signatures(tree: Path, pith_ids: Iterable[str]) -> Iterator[tuple[str, str | None]]:
    """Each record's mirrored bundle in *tree*: the signatures of its two paths, or None where either is
    missing or one of the two folders holding them is a link.  (A record's own folder that is a link is looked
    through: its bundle.json must still be the very file recorded, which only a hard link to it can be.)

    One loop for the two folders of ``MIRROR_FOLDERS``, one string a record: a no-op build may wait for these
    lookups (20,000 at 10,000 records), and a loop over the folders joining their signatures took a fifth of
    their time (the child's lookups against the record, alone in a process: 71-83 ms against 65-70)."""
    first, second = folders = [_open_folder(tree, folder) for folder in MIRROR_FOLDERS]
    lstat = os.lstat
    try:
        if first is None or second is None:  # (a folder missing or a link: no lookup is made at all)
            yield from ((pid, None) for pid in pith_ids)
            return
        for pid in pith_ids:
            name = f"{pid}/bundle.json"
            try:
                a = lstat(name, dir_fd=first)
                b = lstat(name, dir_fd=second)
            except OSError:
                yield pid, None
                continue
            yield pid, f"{a.st_size}:{a.st_mtime_ns}:{a.st_ino} {b.st_size}:{b.st_mtime_ns}:{b.st_ino}"
    finally:
        for folder in folders:
            if folder is not None:
                os.close(folder)


def _open_folder(tree: Path, folder: str) -> int | None:
    """*folder* in *tree*, held open so that each lookup is relative to it (27 ms against 42 ms for 10,000
    full paths); None where it is missing or a link."""
    fd = None
    try:
        fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
        for part in folder.split("/"):
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        return fd
    except OSError:
        if fd is not None:
            os.close(fd)
        return None


def holds_verified_bytes(tree: Path, pith_id: str, sha256: str) -> bool:
    """Whether both of the record's paths in *tree* hold bytes with digest *sha256* (the slow way: read)."""
    digests = (file_sha256(Path(tree, folder, pith_id, "bundle.json")) for folder in MIRROR_FOLDERS)
    return all(found is not None and found == sha256 for found in digests)  # (unreadable: never verified bytes)


@dataclass(frozen=True, eq=False)
class MirrorRecord:
    """The cache's record of the mirrored bundles (``BuildCache.mirrored``): *stored*, the JSON as stored (its
    tag checked), or the function that reads it so (and says None where there is none that checks), called
    where the bytes are first asked for: in the child that looks the files up, for a no-op build, which never
    needs more than that child's answer.  The JSON is parsed where the entries are needed (~10 ms at 10,000
    records).  *known*: the entries, where whoever made the record has them already (the cache that wrote
    them: serve, which builds again and again)."""

    stored: bytes | Callable[[], bytes | None]
    known: dict[str, tuple[str, str]] | None = None

    @functools.cached_property
    def document(self) -> bytes | None:
        """The record as stored; None where there is none whose tag checks."""
        return self.stored if isinstance(self.stored, bytes) else self.stored()

    @functools.cached_property
    def entries(self) -> dict[str, tuple[str, str]] | None:
        """Pith id -> (stat signature, sha256) of the record's bundle.json; None where it is no such record."""
        if self.known is not None:
            return self.known
        return recorded_in(self.document) if self.document is not None else None

    def for_child(self) -> MirrorRecord:
        """The record to hand the child: its bytes alone where they are known (the child parses them once, for
        both trees), else the function that reads them."""
        known = self.stored if isinstance(self.stored, bytes) else self.__dict__.get("document")
        return MirrorRecord(known if known is not None else self.stored)


@dataclass(frozen=True)
class MirrorCheck:
    """The live site's mirrored bundles against the cache's record of them (``check_live``)."""

    edited: frozenset[str]  # records whose mirrored bundle may not be the verified bytes: written again
    touched: dict[str, str]  # pith id -> the signature now, where it changed but the bytes did not
    recorded: dict[str, tuple[str, str]]  # the record checked against: pith id -> (signature, sha256)


def recorded_in(document: bytes) -> dict[str, tuple[str, str]] | None:
    """The cache's record of the mirrored bundles (``MirrorRecord.document``): pith id -> (signature, sha256);
    None where it is no such record."""
    try:
        return {pid: (sig, sha) for pid, (sig, sha) in orjson.loads(document).items()}
    except (ValueError, TypeError, AttributeError):
        return None


def differing_in(tree: Path, record: MirrorRecord) -> dict[str, str | None] | None:
    """``differing_signatures`` against *record*, parsed where this runs: the child that makes the lookups
    parses it (once for both trees, which share the object), and the build need not where it is told that
    nothing differs.  None where it holds no record."""
    recorded = record.entries
    return None if recorded is None else differing_signatures(tree, recorded)


def differing_signatures(tree: Path, recorded: dict[str, tuple[str, str]],
                         pith_ids: Iterable[str] | None = None) -> dict[str, str | None]:
    """Of the records the cache *recorded* (or of *pith_ids*, each one it recorded), those whose mirrored bundle
    in *tree* has another signature now: pith id -> the signature now (None: missing, or behind a link).  Plain
    data (``MirrorLookups``)."""
    looked_up = recorded if pith_ids is None else pith_ids
    return {pid: sig for pid, sig in mirror_signatures(tree, looked_up) if sig != recorded[pid][0]}


def check_live(tree: Path, recorded: dict[str, tuple[str, str]] | None,
               differing: dict[str, str | None] | None = None) -> MirrorCheck:
    """The records of *tree* whose mirrored bundle may not be the verified bytes any more, by what the cache
    *recorded* (pith id -> (signature, sha256)): one whose signature differs (*differing*, looked up here if
    not given) is read and hashed, and counts only if a path's digest differs.  With nothing recorded, every
    record in the tree counts."""
    if recorded is None:
        return MirrorCheck(frozenset(records_in(tree)), {}, {})
    if differing is None:
        differing = differing_signatures(tree, recorded)
    edited, touched = set(), {}
    for pid, sig in differing.items():
        if sig is not None and holds_verified_bytes(tree, pid, recorded[pid][1]):
            touched[pid] = sig
        else:
            edited.add(pid)
    return MirrorCheck(frozenset(edited), touched, recorded)


def unproven(tree: Path, pith_ids: Iterable[str], recorded: dict[str, tuple[str, str]] | None,
             differing: dict[str, str | None] | None = None) -> set[str]:
    """Of *pith_ids*, the records whose mirrored bundle in *tree* is not the very file the cache *recorded*
    (the tree beside the output shares each unchanged record's file with the live one): a tree updated in place
    keeps only the others' files (one the cache has no record of never counts as proven).  *differing*:
    ``differing_signatures(tree, recorded)``, if already looked up."""
    recorded = recorded or {}
    if differing is None:
        differing = differing_signatures(tree, recorded)
    return {pid for pid in pith_ids if pid not in recorded or pid in differing}


class MirrorLookups:
    """A build's lookups of the mirrored bundles in the output (``live``) and in the tree beside it (``twin``),
    against what the cache recorded, and the live site's check made of them (``check``).  With a
    *start_method*, a child process makes them while the build goes on (the live tree's while the bundles
    folder is listed and, in serve, the bundles verified and the site planned; the twin's before it is
    updated), else each is made when first asked for.

    Measured at 10,000 records (40,000 lookups, ~0.12 s; ``BuildPolicy(look_ahead=False)`` switches it off;
    ``bench_build.py`` and ``--no-look-ahead``, three rounds side by side): a no-op build 0.14-0.19 s against
    0.17-0.26 s, one bundle changed 0.57-0.63 s against 0.72-0.93 s; serve's save to reload 302-343 ms against
    423-463 ms (``bench_serve.py``, against the commit before).  The lookups are made when the build starts
    (in serve, when the change is first seen: ``Site.look_ahead``) instead of when each tree is first used, a
    fraction of a second earlier: a file edited after them is one the next build finds, as one edited after the
    build would be (the record keeps the signature checked; a kept file is read back by its digest).

    The child looks up the live tree first, which a build with nothing to do waits on (its quick no-op check),
    or with *twin_first* the tree beside first (serve, which has no quick check: a change updates that tree in
    place and waits on its lookups, and on the live tree's only for a plan equal to the live site's or a fresh
    tree, ``check_among``).  Measured at 10,000 records (``bench_serve.py``, rounds side by side with the same
    commit before and after, BENCHMARKS.md): save to reload 149-171 ms against 193-206 ms with the live tree
    looked up first and in full."""

    def __init__(self, output: Path, twin: Path, record: MirrorRecord | None, start_method: str | None,
                 twin_first: bool = False):
        self.output = output
        self.twin_path = twin
        self._record = record
        if not os.path.isdir(output):  # (a first build: what little there is to look up is looked up here)
            start_method = None
        steps = {}
        if record is not None:
            handed = record.for_child() if start_method is not None else record
            steps["live"] = functools.partial(differing_in, output, handed)
            if os.path.isdir(twin):  # (none after a first build: its lookups would only say so 10,000 times)
                steps["twin"] = functools.partial(differing_in, twin, handed)
                if twin_first:
                    steps = {"twin": steps["twin"], "live": steps["live"]}
        self._work = WorkAhead(steps, start_method)
        self._check: MirrorCheck | None = None

    @property
    def recorded(self) -> dict[str, tuple[str, str]] | None:
        """The record the lookups are made against (pith id -> (signature, sha256)), parsed here when first
        needed; None where there is none."""
        return self._record.entries if self._record is not None else None

    def live(self) -> dict[str, str | None] | None:
        """``differing_signatures`` of the output (None: nothing recorded, ``check_live`` looks at the tree)."""
        return self._work.result("live") if self._record is not None else None  # type: ignore[return-value]

    def twin(self) -> dict[str, str | None] | None:
        """``differing_signatures`` of the tree beside the output (None: nothing recorded, or no such tree)."""
        if "twin" not in self._work.steps:
            return None
        return self._work.result("twin")  # type: ignore[return-value]

    def check(self) -> MirrorCheck:
        """The live site's mirrored bundles checked against the record (``check_live``), once a build."""
        if self._check is None:
            self._check = check_live(self.output, self.recorded, self.live())
        return self._check

    def edited(self) -> frozenset[str]:
        """The records whose mirrored bundle in the output may have been edited since the last build."""
        if self._check is None and self.live() == {}:  # (nothing differs from a record: not parsed here)
            return frozenset()
        return self.check().edited

    def check_among(self, pith_ids: Iterable[str]) -> MirrorCheck:
        """The live site's check (``check``) of the records *pith_ids* alone, looked up here: all a build needs
        that takes only their files from the live site, as one that updates the tree beside in place does (the
        records it keeps there are proven by that tree's own lookups: a live file edited in place is the same
        inode there, and one put in its place is not taken).  A record the cache has no record of counts as
        edited.  The whole check where it is made already."""
        if self._check is not None or self.recorded is None:
            return self.check()
        pith_ids = list(pith_ids)
        known = [pid for pid in pith_ids if pid in self.recorded]
        differing = differing_signatures(self.output, self.recorded, known)
        found = check_live(self.output, self.recorded, differing)
        return MirrorCheck(found.edited.union(pid for pid in pith_ids if pid not in self.recorded), found.touched,
                           found.recorded)

    def made_for(self, output: Path, twin: Path, record: MirrorRecord | None) -> bool:
        """Whether these are the lookups of *output* and *twin* against this record (the same bytes: serve starts
        them when it first sees a change, before the build that takes them over, ``ServeSession.lookups``)."""
        def stored(r: MirrorRecord | None) -> bytes | None:
            return r.document if r is not None else None
        return self.output == output and self.twin_path == twin and stored(self._record) == stored(record)

    def close(self) -> None:
        self._work.close()


def records_in(tree: Path) -> set[str]:
    """Every name in *tree*'s folders of mirrored bundles: each record the tree may hold (and names that are
    none, which no unit has)."""
    names = set()
    for folder in MIRROR_FOLDERS:
        try:
            with os.scandir(os.path.join(tree, folder)) as entries:
                names.update(entry.name for entry in entries)
        except OSError:
            pass
    return names


def record_after(tree: Path, check: MirrorCheck, published: dict[str, str], written: set[str]
                 ) -> dict[str, tuple[str, str]]:
    """What the next build checks the live site against: each record's signature and digest as this build
    leaves *tree* (*published*: pith id -> verified sha256).  A record whose files this build took over (kept in
    the tree beside, or linked from the live site: proven to be the recorded files, or touched only) keeps the
    signature it was checked by; only those it wrote (*written*, or with no signature) are looked up, here in
    the build's own process, before the build returns, so that an edit made after ``build`` returned is one the
    next build finds (looking up every record afterwards, in the background, took such an edit for the
    build's own)."""
    record, look_up = {}, []
    for pid, sha in published.items():
        known = check.touched.get(pid) or (check.recorded[pid][0] if pid in check.recorded
                                            and check.recorded[pid][1] == sha else None)
        if pid in written or pid in check.edited or known is None:
            look_up.append(pid)
        else:
            record[pid] = (known, sha)
    record.update((pid, (sig, published[pid])) for pid, sig in mirror_signatures(tree, look_up) if sig is not None)
    return dict(sorted(record.items()))
