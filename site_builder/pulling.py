"""``site-builder pull``: fetch bundles from a resolver or mirror without trusting the transport.

Every fetched bundle is verified against the pinned keys before it is written; a newer valid bundle
replaces an older one atomically (write to a temporary file, then rename); an older one never
replaces a newer one.  Requests are polite: a concurrency limit, timeouts, retries with backoff on
429/5xx honouring ``Retry-After`` (``fetching``), conditional requests so an unchanged bundle is not downloaded
again, and no more requests to a host that gave one no answer after its tries.
"""

from __future__ import annotations

import json
import os
import re
import stat
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from site_builder.fetching import Fetcher, ResponseTooLarge, Unreachable
from site_builder.inspection import inspect_bytes
from site_builder.keys import TrustSet
from site_builder.loading import BundlesFolderError, FileReadError, discover, is_mirror, read_bytes
from site_builder.selection import is_rollback, published_record
from site_builder.strict_json import StrictJSONError, parse_strict
from site_builder.urls import credentials_left_out, is_url, unfetchable
from site_builder.writing import create_new

# (in any letter case: the ID is base32, whose letters are one case, as the site's 404 page takes it too)
PITH_ID_RE = re.compile(r"(?:pith:[0-9]{4}:)?([A-Z2-7]{26})\Z", re.IGNORECASE)
STATE_FILE = ".pull-state.json"
# A bundle's record as its text names it: where the bundles folder keeps a record under a name of the user's is
# found without parsing every bundle (what a match claims, its verification confirms: ``_newest_copy``).
_NAMED_RECORD = re.compile(rb'"pith_number"\s*:\s*"pith:[0-9]+:([A-Z2-7]{26})"')


class PullError(Exception):
    """A usage problem (bad list file, bad URL); the message names it."""


@dataclass
class PullOutcome:
    pith_id: str
    status: str  # fetched | unchanged | kept | rejected | failed
    detail: str = ""
    tried: bool = True  # (False: failed unasked, its host having given no answer; *detail* then says why)


@dataclass
class PullReport:
    outcomes: list[PullOutcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the run did otherwise than asked, and why
    unreachable: str | None = None  # why no bundle was tried: the source gave no answer at all

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    def summary_line(self) -> str:
        return (f"{self.count('fetched')} fetched, {self.count('unchanged')} unchanged, "
                f"{self.count('kept')} kept (local copy newer), {self.count('rejected')} rejected, "
                f"{self.count('failed')} failed")


# The files a record's folder holds on the resolver and on a mirror (its page is the folder itself).
RECORD_FILES = frozenset({"index.html", "bundle.json", "state.json", "badge.svg"})
ID_SEGMENT_RE = re.compile(r"[A-Z2-7]{26}\Z", re.IGNORECASE)


def pith_id_of(text: str) -> str | None:
    """The pith ID *text* names, in upper case: a pith number, a 26-character ID in any letter case, or the
    http(s) URL of a record's page or file on the resolver or a mirror (``https://pith.science/pith/<ID>``, as a
    reader copies it from the address bar, ``.../pith/<ID>/bundle.json``); ``None`` for anything else.  Only the
    ID is taken from a URL: the bundle is fetched from the pull's source and verified like any other."""
    text = text.strip()
    match = PITH_ID_RE.match(text)
    if match:
        return match.group(1).upper()
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError:  # (an unclosed "[": no URL)
        return None
    if parts.scheme not in ("http", "https"):  # (urlsplit gives the scheme in lower case)
        return None
    segments = parts.path.split("/")
    if segments[-1] == "" or segments[-1] in RECORD_FILES:
        segments.pop()
    if len(segments) >= 2 and segments[-2] == "pith" and ID_SEGMENT_RE.match(segments[-1]):
        return segments[-1].upper()
    return None


def parse_targets(items: list[str]) -> tuple[list[str], list[PullOutcome]]:
    """Pith IDs from full pith numbers, 26-character IDs (in any letter case), records' URLs (``pith_id_of``), or
    files listing them one per line (# comments; a byte-order mark, as some editors save, and Windows line ends
    are fine)."""
    ids: list[str] = []
    bad: list[PullOutcome] = []
    for item in items:
        lines = [(item, item)]  # (where it is said, what it says)
        if pith_id_of(item) is None and _names_a_list(item):
            try:
                text = Path(item).read_text("utf-8-sig")
            except (OSError, UnicodeDecodeError) as exc:
                raise PullError(f"{item}: cannot read list: {exc}") from None
            # (a line of a file is named by its number, not echoed: a list linked to /proc/self/environ would
            # print the environment)
            lines = [(f"{item}:{n}", line.split("#", 1)[0]) for n, line in enumerate(text.splitlines(), 1)]
        for where, line in lines:
            if not line.strip():
                continue
            pith_id = pith_id_of(line)
            if pith_id:
                ids.append(pith_id)
            else:
                bad.append(PullOutcome(where.strip()[:200], "failed",
                                       "not a pith number, 26-character ID, record URL or list file"))
    return list(dict.fromkeys(ids)), bad


def _names_a_list(item: str) -> bool:
    """Whether the target *item* names a file (a list of records to read); PullError where a folder on its way
    may not be searched (it may well be one).  A target too long to be a file name, or naming nothing, is none."""
    try:
        return stat.S_ISREG(os.stat(item).st_mode)
    except PermissionError as exc:
        raise PullError(f"{item}: cannot read list: {exc.strerror}") from None
    except (OSError, ValueError):  # (ValueError: a NUL in it)
        return False


def bundle_url_pattern(base: str, fetcher: Fetcher) -> tuple[str, str | None]:
    """The mirror's own bundle URL pattern from its pith-mirrors.json, else the resolver's layout; and, where the
    source serves a manifest that gives no usable pattern, a note saying why.  The manifest is the source's to
    write: it is read as strict JSON, and only an http(s) URL holding ``{suffix}`` is taken from it (a relative
    one resolved against the manifest's own URL, as a site built with ``--base-url /`` writes it).  Raises
    ``Unreachable`` (its message names the manifest's URL) when the source gives no answer at all."""
    base = base.rstrip("/")
    default = base + "/pith/{suffix}/bundle.json"

    def falling_back(problem: str) -> tuple[str, str]:
        return default, f"{base}/pith-mirrors.json: {problem}; fetching from {default.replace('{suffix}', '<ID>')}"

    try:
        status, body, _ = fetcher.get(base + "/pith-mirrors.json", {}, MANIFEST_MAX_BYTES)
    except ResponseTooLarge as exc:
        return falling_back(str(exc))
    except Unreachable as exc:
        raise Unreachable(f"{base}/pith-mirrors.json: {exc}") from None
    except OSError:  # (the source refusing this path, say with a 5xx: each bundle's own line says how it fares)
        return default, None
    if status != 200:
        return default, None
    pattern, problem = _manifest_pattern(base, body)
    return (pattern, None) if pattern is not None else falling_back(problem)


MANIFEST_MAX_BYTES = 1 << 20


def _relative(reference: str) -> bool:
    """Whether *reference* is a relative URL (no scheme); False for one urllib cannot split (said below)."""
    try:
        return not urllib.parse.urlsplit(reference).scheme
    except ValueError:
        return False


def _manifest_pattern(base: str, body: bytes) -> tuple[str | None, str]:
    """The bundle pattern of the manifest *body* (its entry for *base*, else its first), or None and why not."""
    try:
        manifest = parse_strict(body)
    except StrictJSONError as exc:
        return None, exc.reason
    mirrors = manifest.get("mirrors") if isinstance(manifest, dict) else None
    if not isinstance(mirrors, list) or not mirrors or not all(isinstance(m, dict) for m in mirrors):
        return None, "no list of mirrors in it"
    chosen = next((m for m in mirrors if isinstance(m.get("base_url"), str) and m["base_url"].rstrip("/") == base),
                  mirrors[0])
    pattern = chosen.get("bundle_pattern")
    if not isinstance(pattern, str) or "{suffix}" not in pattern:
        return None, "its bundle_pattern is not a URL holding {suffix}"
    if _relative(pattern):  # (a mirror built without a full base URL: resolved as a browser would)
        pattern = urllib.parse.urljoin(base + "/pith-mirrors.json", pattern)
    if not is_url(pattern):
        return None, "its bundle_pattern is not an http(s) URL"
    if (problem := unfetchable(pattern.replace("{suffix}", "ID"))) is not None:
        return None, f"its bundle_pattern is no usable URL ({problem})"
    return pattern, ""


def _write_atomically(path: Path, data: bytes) -> None:
    """Write *path* through a temporary file this call creates itself (never one found at that name, nor what a
    link there leads to: the bundles folder is untrusted), renamed into place."""
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        with open(create_new(tmp), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


@dataclass
class _PullRun:
    """What every download of one ``pull`` shares: the keys, the fetcher, the URL pattern, the target folder, the
    validators remembered for conditional requests (written back when the run ends) and the hosts that gave no
    answer at all (a manifest's ``bundle_pattern`` may name another host than the source, such as a CDN)."""

    trust: TrustSet
    fetcher: Fetcher
    pattern: str
    bundles: Path
    state: dict
    mirror: bool  # the bundles folder is a copy of a mirror (``record_file``)
    elsewhere: dict[str, list[str]]  # record -> the files holding it under other names (``held_elsewhere``)
    lock: threading.Lock = field(default_factory=threading.Lock)
    silent: dict[str, str] = field(default_factory=dict)  # origin -> why no more of its requests are made

    def remember(self, pith_id: str, meta: dict) -> None:
        with self.lock:
            self.state[pith_id] = meta

    def why_not_asked(self, url: str) -> str | None:
        """Why *url* is not requested (its host gave an earlier request no answer after every try), or None."""
        with self.lock:
            return self.silent.get(_origin(url))

    def gave_no_answer(self, url: str, exc: Unreachable) -> None:
        """Every later request to *url*'s host fails untried: each would wait out its own tries to the same end
        (7.5 s of backoff for a refused connection at four retries, minutes for timeouts)."""
        with self.lock:
            self.silent.setdefault(_origin(url), f"{_origin(url)} gave no answer to {url}: {exc}")


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def _read_state(path: Path) -> dict[str, dict[str, str | None]]:
    """The validators an earlier pull remembered (pith id -> sha256, etag, last_modified), read as the untrusted
    input it is: strict JSON from a file of its own (no link followed, no FIFO waited on), and only entries whose
    values are each one header value (no line break in them) or null."""
    try:
        state = parse_strict(read_bytes(path, STATE_MAX_BYTES))
    except (FileReadError, ValueError):
        return {}
    if not isinstance(state, dict):
        return {}
    return {pid: meta for pid, meta in state.items()
            if isinstance(meta, dict) and all(value is None or _header_value(value) for value in meta.values())}


STATE_MAX_BYTES = 64 << 20  # ~150 bytes a bundle remembered


def _header_value(value: object) -> bool:
    """Whether *value* can be sent as it is as one HTTP header value: visible ASCII, spaces and tabs."""
    return isinstance(value, str) and len(value) <= 1024 and all(" " <= c <= "~" or c == "\t" for c in value)


def _local_copy(target: Path, trust: TrustSet):
    """The bundle already at *target*, inspected (None if there is none, or it cannot be read), and why the
    target cannot be written (None if it can): something other than a file there is never replaced."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"{target}: cannot read: {exc.strerror}"
    if not stat.S_ISREG(mode):
        return None, f"{target}: is not a file (a folder or a link is never replaced)"
    try:
        return inspect_bytes(target.name, read_bytes(target), trust), None
    except FileReadError:
        return None, None


def _not_a_folder(folder: Path) -> str | None:
    """Why a record's folder in a copy of a mirror is not written into (a link is never written through), or
    None: it is a folder, or there is none yet."""
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{folder}: cannot read: {exc.strerror}"
    return None if stat.S_ISDIR(mode) else f"{folder}: is not a folder (a link is never written through)"


def _make_record_folder(folder: Path) -> str | None:
    """Make a record's folder in a copy of a mirror, where there is none; why it cannot be written into, or
    None (one made a link since it was looked at is not written through either)."""
    try:
        os.mkdir(folder)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"{folder}: cannot make the record's folder: {exc.strerror}"
    return _not_a_folder(folder)


def _validators(run: _PullRun, pith_id: str, local) -> dict[str, str]:
    """Conditional-request headers, when the local copy is the verified one they were remembered for."""
    remembered = run.state.get(pith_id, {}) if local is not None and local.verified else {}
    headers = {}
    if remembered.get("sha256") == (local.sha256 if local else None):
        if remembered.get("etag"):
            headers["If-None-Match"] = remembered["etag"]
        if remembered.get("last_modified"):
            headers["If-Modified-Since"] = remembered["last_modified"]
    return headers


def record_file(bundles: Path, pith_id: str, mirror: bool) -> Path:
    """The file of record *pith_id* in *bundles*: ``<ID>.json``, or in a copy of a mirror (``mirror``), whose
    build reads its records' ``pith/<ID>/bundle.json`` alone, that file."""
    return bundles / "pith" / pith_id / "bundle.json" if mirror else bundles / f"{pith_id}.json"


def held_elsewhere(bundles: Path, ids: list[str], mirror: bool) -> dict[str, list[str]]:
    """For each of *ids* with no file of its own in *bundles* (``record_file``), the files a build of the folder
    reads whose text names that record: a record the user keeps under a name of their own
    (``2020/attention.json``) is compared with, and updated, where it is, not copied beside it under its ID (a
    build would then read two files of one record, and say so every time).  A mirror's records are in their
    own files."""
    if mirror:
        return {}
    wanted = {pid for pid in ids if not os.path.lexists(record_file(bundles, pid, mirror))}
    if not wanted:
        return {}
    try:
        files, _ = discover(bundles, sites=[])
    except (BundlesFolderError, OSError):
        return {}
    found: dict[str, list[str]] = {}
    for file in files:
        try:
            named = _NAMED_RECORD.search(read_bytes(Path(file.path)))
        except FileReadError:
            continue
        if named is not None and named.group(1).decode() in wanted:
            found.setdefault(named.group(1).decode(), []).append(os.fspath(file.path))
    return found


def _newest_copy(paths: list[str], pith_id: str, trust: TrustSet):
    """Of *paths*, the file holding the copy of record *pith_id* a build publishes (verified, and none of the
    others newer by the rollback rule) and that copy inspected; None where none verifies as that record."""
    newest = None
    for path in paths:
        local, unwritable = _local_copy(Path(path), trust)
        if unwritable or local is None or not local.verified or local.pith_id != pith_id:
            continue
        if newest is None or is_rollback(newest[1], published_record(local)):
            newest = (Path(path), local)
    return newest


def _local_record(run: _PullRun, pith_id: str, own: Path):
    """The file the record *pith_id* is compared with and written to, the bundle there inspected (or None), and
    why that file cannot be written (or None): its own file *own* (``record_file``), or where there is none, the
    newest of the files holding it under other names (``held_elsewhere``)."""
    if run.mirror and (unwritable := _not_a_folder(own.parent)) is not None:
        return own, None, unwritable
    local, unwritable = _local_copy(own, run.trust)
    if local is None and not unwritable:
        kept = _newest_copy(run.elsewhere.get(pith_id, []), pith_id, run.trust)
        if kept is not None:
            return *kept, None
    return own, local, unwritable


def _pull_one(run: _PullRun, pith_id: str) -> PullOutcome:
    own = record_file(run.bundles, pith_id, run.mirror)
    target, local, unwritable = _local_record(run, pith_id, own)
    where = "" if target == own else f" (in {target.relative_to(run.bundles).as_posix()})"
    if unwritable:
        return PullOutcome(pith_id, "failed", unwritable)
    if local is not None and local.verified and local.pith_id != pith_id:  # (never compared with, nor replaced)
        its_own = record_file(run.bundles, local.pith_id, run.mirror).relative_to(run.bundles).as_posix()
        return PullOutcome(pith_id, "failed", f"{target}: holds the bundle of another record "
                                              f"({local.summary.pith_number}); not replaced (rename it to "
                                              f"{its_own})")
    headers = _validators(run, pith_id, local)
    url = run.pattern.replace("{suffix}", pith_id)
    if (why := run.why_not_asked(url)) is not None:
        return PullOutcome(pith_id, "failed", why, tried=False)
    try:
        status, body, response_headers = run.fetcher.get(url, headers)
    except OSError as exc:
        if isinstance(exc, Unreachable):
            run.gave_no_answer(url, exc)
        notes = "".join(f" ({note})" for note in run.fetcher.notes())
        return PullOutcome(pith_id, "failed", f"{url}: {exc}{notes}")
    if status == 304 and not headers:
        return PullOutcome(pith_id, "failed", f"{url}: 304 Not Modified to a request that named no version "
                                              f"(no If-None-Match or If-Modified-Since)")
    if status == 304:
        return PullOutcome(pith_id, "unchanged", "not modified")
    if status == 404:
        return PullOutcome(pith_id, "failed", f"{url}: not found")
    if body.lstrip()[:1] == b"<":  # (no JSON starts so: a portal's login page, a site's page for every path)
        return PullOutcome(pith_id, "failed", f"{url}: a web page, not a bundle (a login or error page on the "
                                              f"way, or --from names no pith resolver or mirror)")
    fetched = inspect_bytes(f"{url}", body, run.trust)
    if not fetched.verified:
        return PullOutcome(pith_id, "rejected", f"{fetched.check}: {fetched.reason}")
    if fetched.pith_id != pith_id:
        return PullOutcome(pith_id, "rejected", f"pith_number: server returned pith:{fetched.pith_id}")
    meta = {"sha256": fetched.sha256, "etag": response_headers.get("etag"),
            "last_modified": response_headers.get("last-modified")}
    if local is not None and local.verified:
        if local.sha256 == fetched.sha256:
            run.remember(pith_id, meta)
            return PullOutcome(pith_id, "unchanged", "same bytes" + where)
        if is_rollback(fetched, published_record(local)):  # (the build's rule: an older built_at or fewer events)
            mine, theirs = local.summary, fetched.summary
            return PullOutcome(pith_id, "kept", f"the local bundle{where} (built_at {mine.built_at}, "
                                                f"{mine.event_count} events) is newer than the served one (built_at "
                                                f"{theirs.built_at}, {theirs.event_count} events)")
    if target == own and run.mirror and (unwritable := _make_record_folder(target.parent)) is not None:
        return PullOutcome(pith_id, "failed", unwritable)
    try:
        _write_atomically(target, body)
    except OSError as exc:  # (a folder this user may not write to, a full disk: that record's line, not a traceback)
        return PullOutcome(pith_id, "failed", f"{target}: cannot write: {exc.strerror or exc}")
    run.remember(pith_id, meta)
    notes = "".join(f" ({note})" for note in run.fetcher.notes())
    return PullOutcome(pith_id, "fetched", fetched.summary.pith_number + where + notes)


def pull(targets: list[str], source: str, bundles: Path, trust: TrustSet, concurrency: int = 4,
         fetcher: Fetcher | None = None, progress: Callable[[int, int], None] | None = None) -> PullReport:
    if not is_url(source):
        raise PullError(f"{source}: --from must be an http(s) URL")
    if (problem := unfetchable(source)) is not None:
        raise PullError(f"{source}: --from is no usable URL ({problem})")
    if (said := credentials_left_out(source)) is not None:  # (the message leaves them out: a CI log)
        raise PullError(f"--from {said}: must not hold a user name or password (each failure line names the URL, "
                        f"and no request would send them)")
    ids, bad = parse_targets(targets)
    report = PullReport(list(bad))
    if os.path.lexists(bundles) and not bundles.is_dir():
        raise PullError(f"{bundles}: --bundles names a file, not a folder")
    made = _missing_folders(bundles)
    try:
        bundles.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PullError(f"{bundles}: cannot make the bundles folder: {exc.strerror}") from None
    try:
        _pull_into(report, ids, source, bundles, trust, concurrency, fetcher or Fetcher(), progress)
    finally:
        _remove_if_empty(made)  # (a pull that wrote nothing, say to a misspelt --bundles, leaves nothing behind)
    return report


def _missing_folders(folder: Path) -> list[Path]:
    """*folder* and those above it that do not exist, the deepest first: what ``mkdir(parents=True)`` makes."""
    missing = []
    while not os.path.lexists(folder) and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    return missing


def _remove_if_empty(folders: list[Path]) -> None:
    """The folders the pull made (the deepest first) removed, up to the first that holds anything."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # (not empty: it holds what the pull wrote)
            return


def _pull_into(report: PullReport, ids: list[str], source: str, bundles: Path, trust: TrustSet, concurrency: int,
               fetcher: Fetcher, progress: Callable[[int, int], None] | None) -> None:
    """*ids* fetched from *source* into the folder *bundles*, their outcomes added to *report*."""
    state_path = bundles / STATE_FILE
    try:
        pattern, note = bundle_url_pattern(source, fetcher)
    except Unreachable as exc:  # (not each bundle tried in turn, each with its retries' waits, to the same end)
        report.unreachable = str(exc)
        report.outcomes.extend(PullOutcome(pith_id, "failed", str(exc), tried=False) for pith_id in ids)
        return
    if note is not None:
        report.notes.append(note)
    remembered = _read_state(state_path)
    mirror = is_mirror(bundles)
    run = _PullRun(trust, fetcher, pattern, bundles, dict(remembered), mirror, held_elsewhere(bundles, ids, mirror))
    done = [0]

    def counted(pith_id: str) -> PullOutcome:
        outcome = _pull_one(run, pith_id)
        with run.lock:
            done[0] += 1
            if progress:
                progress(done[0], len(ids))
        return outcome

    with ThreadPoolExecutor(max(1, concurrency)) as pool:
        report.outcomes.extend(pool.map(counted, ids))
    if run.state == remembered:  # (nothing new to remember: the file, or its absence, says it already)
        return
    try:
        _write_atomically(state_path, (json.dumps(run.state, indent=1, sort_keys=True) + "\n").encode())
    except OSError as exc:  # (the bundles are written: only the next pull's conditional requests are lost)
        report.notes.append(f"{state_path}: cannot remember what was fetched ({exc.strerror or exc}); the next "
                            f"pull downloads each bundle again")
