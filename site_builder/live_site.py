"""The deployed mirror, read back so that a build on a fresh machine cannot roll it back.

A CI runner starts with no previous site, so the only record of what the mirror published is the mirror itself:
its ``verification.json`` (the manifest) and its ``pith/<ID>/bundle.json`` files, fetched from its URL or read from
a folder.  None of it is trusted.  The manifest only says which records are worth a look; a live bundle proves
that something newer is live only once it verifies against the pinned keys, and then by its own signed
``built_at`` and event count, never by the manifest's figures.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from site_builder.loading import FileReadError, check_enterable, read_bytes, status_of
from site_builder.selection import PublishedBefore, instant
from site_builder.strict_json import StrictJSONError, parse_strict
from site_builder.urls import is_url
from site_builder.writing import MARKER

MAX_MANIFEST_BYTES = 100 * 1024 * 1024  # GitHub Pages' limit for one file
_PITH_NUMBER = re.compile(r"pith:[0-9]{4}:([A-Z2-7]{26})\Z")
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")


class LiveSiteUnavailable(Exception):
    """The live site could not be read (unreachable, an HTTP error, an unreadable folder, not a manifest)."""


@dataclass(frozen=True)
class ManifestClaims:
    """What a ``verification.json`` claims: its build id; by pith ID, what it published; how many published
    entries are malformed; and how many name a record an earlier entry named."""

    build_id: str | None
    claims: dict[str, PublishedBefore]
    malformed: int
    repeated: int


@dataclass(frozen=True)
class LiveManifest(ManifestClaims):
    """What the live site's manifest claims (``ManifestClaims``), and the digest of its bytes."""

    sha256: str  # an input of the build, like the bundles


def either_claim(one: PublishedBefore, other: PublishedBefore) -> PublishedBefore:
    """One claim for a record a manifest lists twice, which an input is older than wherever it is older than
    either (a later ``built_at`` *or* more events): a claim only says where to look, so the live bundle is looked
    at whenever one entry would have it looked at.  Its digest is the newer entry's."""
    newer = max(one, other, key=lambda c: (instant(c.built_at), c.event_count, c.sha256))  # (the later built_at)
    return PublishedBefore(one.pith_id, newer.sha256, newer.built_at, max(one.event_count, other.event_count))


def manifest_claims(raw: bytes) -> ManifestClaims:
    """A ``verification.json``'s claims.  Raises StrictJSONError or ValueError when *raw* is not a manifest."""
    doc = parse_strict(raw)
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise ValueError("not a site-builder verification.json (no list of files)")
    claims, malformed, repeated = {}, 0, 0
    for entry in doc["files"]:
        if not isinstance(entry, dict) or entry.get("status") != "published":
            continue
        number, sha256 = entry.get("pith_number"), entry.get("sha256")
        built_at, events = entry.get("built_at"), entry.get("event_count")
        match = _PITH_NUMBER.match(number) if isinstance(number, str) else None
        if (match is None or not isinstance(sha256, str) or not _SHA256.match(sha256)
                or not isinstance(built_at, str) or type(events) is not int or events < 0):
            malformed += 1
            continue
        claim = PublishedBefore(match.group(1), sha256, built_at, events)
        if claim.pith_id in claims:
            repeated += 1
            claim = either_claim(claims[claim.pith_id], claim)
        claims[claim.pith_id] = claim
    build_id = doc.get("build_id")
    return ManifestClaims(build_id if isinstance(build_id, str) else None, claims, malformed, repeated)


class LiveSite:
    """Reads the live mirror at *source*: an http(s) base URL (fetched with *fetcher*) or a folder."""

    def __init__(self, source: str, fetcher=None):
        self.source = source
        self.fetcher = fetcher
        self._base = source.rstrip("/") + "/" if is_url(source) else None

    def _read(self, rel: str, max_bytes: int) -> bytes | None:
        """The bytes at *rel*, or None when nothing is there; LiveSiteUnavailable when it cannot be read."""
        if self._base is not None:
            try:
                status, body, _ = self.fetcher.get(self._base + rel, {}, max_bytes)
            except OSError as exc:
                raise LiveSiteUnavailable(str(exc)) from None
            if status == 404:
                return None
            if status != 200:
                raise LiveSiteUnavailable(f"HTTP {status} for {rel}")
            return body
        # (``status_of``, not ``Path.is_dir()``: from Python 3.14 on, that says False of a folder this user may
        # not look at, which is an error, not a live site that is not there yet)
        folder = Path(self.source)
        found = status_of(folder)
        if found is None or not stat.S_ISDIR(found.st_mode):
            raise LiveSiteUnavailable("not a folder" if os.path.lexists(folder) else "no such folder")
        check_enterable(folder)  # (an error too, as above)
        try:
            return read_bytes(folder / rel, max_bytes)
        except FileReadError as exc:
            try:
                if status_of(folder / rel) is None:
                    return None
            except OSError:  # (in a folder of the site this user may not search: there, and unreadable)
                pass
            raise LiveSiteUnavailable(f"{rel}: {exc}") from None

    def manifest(self) -> LiveManifest | None:
        """The live manifest, or None when nothing is published there yet (a first deploy)."""
        raw = self._read(MARKER, MAX_MANIFEST_BYTES)
        if raw is None:
            return None
        try:
            read = manifest_claims(raw)
        except (StrictJSONError, ValueError) as exc:
            raise LiveSiteUnavailable(f"{MARKER} is not a manifest: {exc}") from None
        return LiveManifest(read.build_id, read.claims, read.malformed, read.repeated, hashlib.sha256(raw).hexdigest())

    def bundle(self, pith_id: str, max_bytes: int) -> bytes | None:
        """The live ``pith/<ID>/bundle.json``, or None when it is missing; *pith_id* is a checked ID."""
        assert re.fullmatch(r"[A-Z2-7]{26}", pith_id)
        return self._read(f"pith/{pith_id}/bundle.json", max_bytes)
