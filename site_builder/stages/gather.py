"""The gather stage's helpers: the static files the site may take, and the deployed mirror's manifest.
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from site_builder.cache import BuildCache
from site_builder.live_site import LiveManifest, LiveSite, LiveSiteUnavailable, is_url
from site_builder.loading import (
    FileReadError,
    InputFile,
    SkippedFile,
    StaticFile,
    discover,
    read_bytes,
    read_static_files,
)
from site_builder.options import BuildOptions
from site_builder.pages import Unit, refused_static_path, static_unit
from site_builder.selection import Selection
from site_builder.stages.context import BuildContext, digest_of
from site_builder.terminal import printable
from site_builder.writing import MARKER


def allowed_static_files(folder: Path | None) -> tuple[list[StaticFile], list[str]]:
    """The static folder's files the site may take, and a warning for each one it may not."""
    files, problems = read_static_files(folder)
    warnings = [f"{folder.name}/{problem}; not copied" for problem in problems]
    allowed = []
    seen: dict[str, str] = {}  # case-folded path -> the file that has it (one per name on a case-insensitive host)
    for f in files:
        refused = refused_static_path(f.rel)
        other = seen.get(f.rel.casefold())
        if refused is None and other is not None:
            refused = f"differs from {other} only in letter case (one file on a case-insensitive host)"
        if refused is None:
            allowed.append(f)
            seen[f.rel.casefold()] = f.rel
        else:
            warnings.append(f"{folder.name}/{f.rel}: {refused}; not copied")
    return allowed, warnings


def read_deployed(options: BuildOptions) -> tuple[LiveSite | None, LiveManifest | None, list[str]]:
    """The deployed mirror and its manifest, and what to warn about; nothing there, or unreachable, is no error."""
    if options.deployed is None:
        return None, None, []
    fetcher = options.deployed_fetcher
    if fetcher is None and is_url(options.deployed):
        from site_builder.pulling import Fetcher  # (only here: the HTTP stack costs a no-op build ~30 ms to import)
        # Every request of the check within 20 s, and all of them within 5 minutes.
        fetcher = Fetcher(timeout=20, retries=2, deadline=time.monotonic() + 300)
    site = LiveSite(options.deployed, fetcher)
    shown = printable(options.deployed)
    try:
        manifest = site.manifest()
    except LiveSiteUnavailable as exc:
        return None, None, [f"live site {shown}: {printable(str(exc))}; no rollback check against it"]
    if manifest is None:
        return None, None, [f"live site {shown}: nothing published there yet ({MARKER} not found); "
                            f"no rollback check against it"]
    lines = []
    if manifest.malformed:
        lines.append(f"live site {shown}: {manifest.malformed} published entries of its {MARKER} are malformed; "
                     f"they prove nothing and are ignored")
    return site, manifest, lines


@dataclass(frozen=True)
class Inputs:
    """What the build reads besides the bundles' bytes: the files found (by stat), the static files, the
    deployed mirror's manifest, and the mirrored bundles edited in the output since the last build."""

    found: list[InputFile]
    skipped: list[SkippedFile]
    static_unit: Unit | None  # the static files, as a unit of the site
    warnings: list[str]  # static files refused, the deployed mirror unreadable
    deployed: LiveSite | None
    deployed_manifest: LiveManifest | None
    edited: set[str]  # pith ids
    build_key: str
    indexer: str | None

    @functools.cached_property
    def fingerprint(self) -> str:
        """The inputs by stat, for the no-op check; computed only when needed, once (10,000 entries)."""
        return digest_of(self.build_key, [(f.rel, f.sig) for f in self.found],
                         [(x.rel, x.reason) for x in self.skipped],
                         self.static_unit.material if self.static_unit else None, self.warnings,
                         self.indexer, self.deployed_manifest.sha256 if self.deployed_manifest else None)

    @property
    def paths(self) -> dict[str, Path]:
        return {f.rel: f.path for f in self.found}


def gather(ctx: BuildContext) -> Inputs:
    options = ctx.options
    if options.listing is not None:
        found, skipped = options.listing.found, options.listing.skipped
    else:
        found, skipped = discover(options.bundles, output=ctx.slot.output)
    static, static_warnings = allowed_static_files(options.static_dir)
    deployed, manifest, deployed_lines = read_deployed(options)
    edited = edited_mirrors(ctx.cache, ctx.slot.output)
    ctx.clock.lap("discover")
    return Inputs(found, skipped, static_unit(static) if static else None, static_warnings + deployed_lines,
                  deployed, manifest, edited, ctx.build_key, ctx.indexer)


def mirror_signatures(output: Path, pith_ids: Iterable[str]) -> Iterator[tuple[str, str | None]]:
    """Each record's mirrored bundle.json in *output* and what changes when it is edited in place: size, mtime
    and inode (not the ctime, which the twin's hard links change); None where there is no such file.

    Looked up relative to the ``pith`` folder held open (10,000 lookups a build at 10,000 records: 27 ms
    against 42 ms joining and looking up each full path)."""
    try:
        folder = os.open(os.path.join(output, "pith"), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        folder = None
    lstat = os.lstat
    try:
        for pid in pith_ids:
            try:
                st = lstat(f"{pid}/bundle.json", dir_fd=folder) if folder is not None else None
            except OSError:
                st = None
            yield pid, None if st is None else f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
    finally:
        if folder is not None:
            os.close(folder)


def edited_mirrors(cache: BuildCache, output: Path) -> set[str]:
    """The records whose mirrored bundle.json in the output no longer holds the verified bytes: a file whose
    signature differs from the one recorded is hashed, and only one whose digest differs counts.  Where the
    cache holds no record of them that checks, every record in the output counts: nothing there is proven."""
    edited = set()
    recorded = cache.mirrored()
    if recorded is None:
        return mirrored_in(output)
    for pid, sig in mirror_signatures(output, recorded):
        expected_sig, sha = recorded[pid]
        if sig == expected_sig:
            continue
        try:
            data = read_bytes(os.path.join(output, "pith", pid, "bundle.json"))
        except FileReadError:
            data = None
        if data is None or hashlib.sha256(data).hexdigest() != sha:
            edited.add(pid)
    return edited


def mirrored_in(output: Path) -> set[str]:
    """The names of the folders in the output's ``pith`` folder that hold a bundle.json (its records)."""
    try:
        with os.scandir(os.path.join(output, "pith")) as entries:
            names = [entry.name for entry in entries]
    except OSError:
        return set()
    return {name for name, sig in mirror_signatures(output, names) if sig is not None}


def mirrored_now(output: Path, selection: Selection, changed: dict) -> dict[str, tuple[str, str]]:
    """Each published record's mirrored bundle.json as this build left it: its signature and verified digest."""
    published = selection.published
    return {pid: (sig, published[pid].inspection.sha256)
            for pid, sig in mirror_signatures(output, (pid for pid in published if pid not in changed))
            if sig is not None}
