import contextlib
import http.server
import json
import os
import copy
import dataclasses
import itertools
import shutil
import signal
import socket
import sqlite3
import ssl
import sys
import threading
import time
from pathlib import Path

import pytest
import trustme

from site_builder.build import BuildOptions
from site_builder.cache_database import cache_context
from site_builder.cache_key import user_cache_key
from site_builder.incremental import IncrementalStore
from site_builder.options import BuildPolicy
from site_builder.report import BuildReport
from site_builder.keys import TrustSet, key_from_document, load_trust_set
from site_builder.stages import write
from site_builder.stages.context import opened_context
from site_builder.stages.gather import gather
from site_builder.stages.verify import verify

from browser import serving
from generate import benchmark_key, edited_visibly, make_bundle
from signing import TestKey, sign_bundle, to_bytes, with_paper

ROOT = Path(__file__).resolve().parent.parent
BUNDLES = ROOT / "bundles"
VECTORS = ROOT / "tests" / "vectors"
REAL_FILES = sorted(BUNDLES.glob("*.json"))


def record_id(bundle: bytes | dict | Path) -> str:
    """The 26-character ID of a bundle's record (the last part of its pith number), from its bytes, its parsed
    JSON or its file: the name the site gives the record's folder, ``pith/<ID>/``."""
    if isinstance(bundle, Path):
        bundle = bundle.read_bytes()
    if isinstance(bundle, (bytes, str)):
        bundle = json.loads(bundle)
    return bundle["pith_number"].rsplit(":", 1)[1]


# A suite started in the background (``pytest &``) inherits SIGINT ignored, and so would every serve it starts: the
# tests stop serve as a user does, with Ctrl-C's signal, which a terminal delivers.  Python's own handler here is
# reset to the default in each child at exec, so serve stops on it as it does for the user.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config):
    """On CPython 3.11.0-3.11.4 (Debian 12's python3 is 3.11.2) a failure raised across a greenlet (Playwright's
    sync API, when its driver or browser does not start) leaves the interpreter's recursion count wrong, and
    pytest's own tracebacks, which parse the source, then stop the whole run ("SystemError: AST constructor
    recursion depth mismatch", python/cpython#106905) instead of reporting the tests that failed.  Python's own
    traceback style parses nothing; an explicit ``--tb`` is kept."""
    if (3, 11) <= sys.version_info[:3] < (3, 11, 5) and config.option.tbstyle == "auto":
        config.option.tbstyle = "native"


def free_port() -> int:
    """A port on the loopback that nobody listens on (as the kernel hands out: free when asked)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree(root: Path) -> dict[str, bytes]:
    """Every file under *root* by its relative path: two sites are the same when these are equal."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def generated_bundles(folder: Path, count: int, prefix: str = "gen") -> Path:
    """Make *folder* hold *count* benchmark bundles (``<prefix>0.json``, ...), signed with the benchmark key."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"{prefix}{i}.json").write_bytes(make_bundle(i))
    return folder


def real_and_generated_bundles(folder: Path, generated: int) -> Path:
    """Make *folder* hold the real bundles and *generated* benchmark bundles (``gen0.json``, ...)."""
    folder.mkdir(parents=True)
    for p in REAL_FILES:
        shutil.copy(p, folder / p.name)
    return generated_bundles(folder, generated)


def stand_in_pagefind(folder: Path, main: str) -> str:
    """A ``pagefind`` package under *folder* whose ``python -m pagefind`` runs *main* (the source of its
    ``__main__``); returns the ``PYTHONPATH`` that finds it before the real one."""
    package = folder / "pagefind"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(main)
    return str(folder)


def open_descriptors() -> list[str]:
    """This process's open file descriptors (as ``/proc`` lists them), to compare before and after the code
    under test: a descriptor left open per call ends a long build or serve session in EMFILE."""
    return sorted(os.listdir("/proc/self/fd"))


def drop_read_override() -> None:
    """Drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from this process, so root obeys file modes."""
    import ctypes
    import platform
    numbers = {"x86_64": (125, 126), "aarch64": (90, 91)}[platform.machine()]

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    header, data = Header(0x20080522, 0), (Data * 2)()
    assert libc.syscall(numbers[0], ctypes.byref(header), data) == 0
    for d in data:
        d.effective &= ~((1 << 1) | (1 << 2))
        d.permitted &= ~((1 << 1) | (1 << 2))
    assert libc.syscall(numbers[1], ctypes.byref(header), data) == 0, ctypes.get_errno()


def run_unprivileged(fn):
    """Run *fn* in a forked child that cannot override file modes (so an unreadable file is really unreadable)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if os.geteuid() == 0:
                drop_read_override()
            fn()
            code = 0
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.fixture
def pathlib_of_python_3_14(monkeypatch):
    """``Path.exists()``, ``is_dir()``, ``is_file()`` and ``is_symlink()`` as Python 3.14 has them: False of a path
    that cannot be looked at (in a folder this user may not search), where 3.11 to 3.13 raise.  Code that tells
    "not there" from "may not look" must ask the OS itself; under this fixture, on any Python, it is seen to."""
    for name in ("exists", "is_dir", "is_file", "is_symlink"):
        def says_false_of_errors(self, *args, _asked=getattr(Path, name), **kwargs):
            try:
                return _asked(self, *args, **kwargs)
            except OSError:
                return False
        monkeypatch.setattr(Path, name, says_false_of_errors)


def search_page_counts(site: Path) -> dict[str, int]:
    """Pages in each search index of *site*, by the index's folder."""
    return {str(entry.parent.relative_to(site)): json.loads(entry.read_text())["languages"]["en"]["page_count"]
            for entry in sorted(site.glob("pagefind/**/pagefind-entry.json"))}


def pairwise(**factors: list) -> list:
    """Every combination of *factors* as ``pytest.param`` values, for ``@pytest.mark.parametrize`` over their
    names: the quick loop runs a few combinations in which every pair of two factors' values meets at least once
    (chosen greedily, in order), the full suite all of them (the others are marked ``slow``)."""
    names = list(factors)
    combos = list(itertools.product(*factors.values()))

    def pairs(combo):
        return {(i, combo[i], j, combo[j]) for i, j in itertools.combinations(range(len(names)), 2)}
    needed = set().union(*map(pairs, combos))
    quick = []
    while needed:
        best = max(combos, key=lambda c: len(pairs(c) & needed))
        quick.append(best)
        needed -= pairs(best)
    return [pytest.param(*combo, marks=() if combo in quick else pytest.mark.slow) for combo in combos]


@pytest.fixture(autouse=True)
def user_cache_home(tmp_path_factory, monkeypatch) -> Path:
    """Each test's own cache home, where its builds keep their cache key: the user's real one is never read or
    written, and a test's builds (its subprocesses too) share one key."""
    home = tmp_path_factory.mktemp("cache-home")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def real_raw() -> dict[str, bytes]:
    """name -> the real bundle's bytes."""
    return {p.name: p.read_bytes() for p in REAL_FILES}


@pytest.fixture
def real_bundle() -> dict:
    """A fresh parsed copy of one real bundle (safe to mutate)."""
    return json.loads(REAL_FILES[0].read_bytes())


@pytest.fixture
def real_bundles() -> list[dict]:
    return [json.loads(p.read_bytes()) for p in REAL_FILES]


@pytest.fixture(scope="session")
def pinned():
    return load_trust_set()


@pytest.fixture
def bundles_dir(tmp_path) -> Path:
    d = tmp_path / "bundles"
    d.mkdir()
    for p in REAL_FILES:
        shutil.copy(p, d / p.name)
    return d


DEEP = 1000  # (folders nested this deep: past what a walk by recursion follows, Python's limit being 1,000 calls)


@pytest.fixture
def nest_deep():
    """Makes *DEEP* folders named ``d``, one in the other, under a folder it is given, and returns the deepest;
    removes them after the test, bottom up (``shutil.rmtree``, which recurses, would stop at them)."""
    made = []

    def nest(under: Path) -> Path:
        under.mkdir(parents=True, exist_ok=True)
        folder = under
        for _ in range(DEEP):
            folder = folder / "d"
            folder.mkdir()
        made.append(under)
        return folder

    yield nest
    for under in made:
        deepest = under / "/".join(["d"] * DEEP)
        for folder in [deepest, *deepest.parents]:
            if folder == under:
                break
            for name in os.listdir(folder):
                if not (folder / name).is_dir() or (folder / name).is_symlink():
                    os.unlink(folder / name)
            os.rmdir(folder)


@pytest.fixture
def free_inodes(monkeypatch) -> dict[str, int]:
    """``os.statvfs`` reporting an inode budget of ``free_inodes["total"]`` with ``free_inodes["count"]`` free (the
    rest as it is): a build links its twin only where the output's file system has the inodes for it (tmpfs counts
    hard links)."""
    real_statvfs = os.statvfs
    free = {"count": 10**6, "total": 10**7}

    def statvfs(path):
        fs = real_statvfs(path)
        return os.statvfs_result((fs.f_bsize, fs.f_frsize, fs.f_blocks, fs.f_bfree, fs.f_bavail, free["total"],
                                  free["count"], free["count"], fs.f_flag, fs.f_namemax))

    monkeypatch.setattr(os, "statvfs", statvfs)
    return free


@pytest.fixture
def project(tmp_path) -> Path:
    """A project folder: the real bundles and six generated ones in ``bundles/``, an empty ``templates/``."""
    real_and_generated_bundles(tmp_path / "bundles", 6)
    (tmp_path / "templates").mkdir()
    return tmp_path


def verified(options: BuildOptions, scratch: Path):
    """The verify stage's answer for *options*' inputs, as a build would have it (the gather stage before it), with
    the build's cache and store: what it took from them and what it checked anew (``fresh``)."""
    with opened_context(options, scratch, BuildReport(), lambda: "pagefind 0") as ctx:
        return verify(ctx, gather(ctx))


@pytest.fixture
def serve_store():
    """A store that keeps what builds make, as serve's does between them; the build cache it holds open is closed
    when the test ends, as serve closes it when it stops."""
    store = IncrementalStore()
    yield store
    store.close()


def edit_every_template(project: Path, mark: str = "edited") -> None:
    """Give *project* a copy of every built-in template (and asset) with a comment added: what renders every page
    again (each unit keys on the templates it uses, and none uses them all).  Pages show the comment where it
    lies in what they render (a layout's end, a row)."""
    for source in sorted((ROOT / "templates").rglob("*")):
        if source.is_file():
            target = project / "templates" / source.relative_to(ROOT / "templates")
            target.parent.mkdir(parents=True, exist_ok=True)
            comment = "/* %s */\n" if source.suffix in (".css", ".js") else "<!-- %s -->\n"
            target.write_text(source.read_text() + comment % mark)


def edit_visibly(project: Path, name: str, mark: str = "edited") -> None:
    """Give *project* a copy of the built-in template *name* with a comment where its pages show it
    (``generate.edited_visibly``)."""
    (project / "templates" / name).write_text(edited_visibly((ROOT / "templates" / name).read_text(), mark))


def planned(options: BuildOptions, scratch: Path, pagefind: str = "pagefind 0", report=None):
    """The plan a build of *options* makes (gather, verify, choose, plan), without writing anything."""
    from site_builder.report import BuildReport
    from site_builder.stages.context import opened_context
    from site_builder.stages.gather import gather
    from site_builder.stages.plan import plan
    from site_builder.stages.select import choose
    from site_builder.stages.verify import verify

    with opened_context(options, scratch, report or BuildReport(), lambda: pagefind) as ctx:
        inputs = gather(ctx)
        verified = verify(ctx, inputs)
        return plan(ctx, inputs, verified, choose(ctx, inputs, verified))


def both_keys() -> TrustSet:
    """The resolver's pinned key and the benchmark key the generated bundles are signed with."""
    return TrustSet(tuple(sorted(load_trust_set().keys + (key_from_document(benchmark_key().document()),),
                                 key=lambda k: k.key_id)))


POLICY_FIELDS = frozenset(f.name for f in dataclasses.fields(BuildPolicy))


def build_options(bundles: Path, output: Path, trust: TrustSet, **kw) -> BuildOptions:
    """BuildOptions, the keywords that name a ``BuildPolicy`` field (``use_cache``, ``jobs``...) handed to its
    policy."""
    policy = BuildPolicy(**{name: kw.pop(name) for name in list(kw) if name in POLICY_FIELDS})
    return BuildOptions(bundles=bundles, output=output, trust=trust, policy=policy, **kw)


def opts(project: Path, output: Path, trust: TrustSet, **kw) -> BuildOptions:
    """Build options for *project* into *output* (no search index unless asked; ``build_options``)."""
    return build_options(project / "bundles", output, trust, templates=project / "templates",
                         search=kw.pop("search", False), **kw)


def signed_version(base: dict, key: TestKey, title: str, built_at: str, extra_events: int = 0) -> bytes:
    """*base* re-signed with *key*, with another title and built_at, and *extra_events* more graph snapshots."""
    b = with_paper(base, title=title)
    b["built_at"] = built_at
    snap = next(e for e in b["events"] if e["event_type"] == "graph_snapshot")
    for n in range(extra_events):
        e = copy.deepcopy(snap)
        e["payload"]["graph_snapshot"]["paper"]["headline"] = f"revision {n}"
        e["created_at"] = f"2026-10-0{n + 1}T00:00:00Z"
        b["events"].append(e)
    return to_bytes(sign_bundle(b, key))


def signed_project(tmp_path: Path) -> tuple[TestKey, TrustSet, Path, dict]:
    """A test key, the trust set of it alone, an empty bundles folder, and a real bundle to make versions of."""
    key = TestKey()
    trust = load_trust_set([key.write(tmp_path / "k.json")])
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    return key, trust, bundles, json.loads(REAL_FILES[0].read_bytes())


def resigned_real_bundles(root: Path) -> tuple[TestKey, TrustSet, Path]:
    """A test key (its file at ``root/k.json``), its trust set, and ``root/bundles`` holding the real bundles
    re-signed with it."""
    key, trust, bundles, _ = signed_project(root)
    for p in REAL_FILES:
        (bundles / p.name).write_bytes(to_bytes(sign_bundle(json.loads(p.read_bytes()), key)))
    return key, trust, bundles


def cache_document(db, name: str) -> tuple[dict, str]:
    """The build cache's document *name* (``files``: input file -> [stat signature, sha256]; ``mirrored``) as
    stored, and its tag."""
    data, tag = db.execute("SELECT data, tag FROM documents WHERE name=?", (name,)).fetchone()
    return json.loads(data), tag


def plant_document(db, name: str, entries: dict, tag: str | None) -> None:
    """Store *entries* as the cache's document *name* under *tag* (as anyone who can write the file can)."""
    data = json.dumps(entries).encode()
    db.execute("INSERT OR REPLACE INTO documents VALUES (?, ?, ?)", (name, data, tag))


@contextlib.contextmanager
def write_lock_held(database: Path):
    """Another program holding the SQLite *database*'s write lock while the block runs: a save waits SQLite's 5 s
    for it, then fails, as a full disk or an I/O error makes it fail."""
    db = sqlite3.connect(database, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        yield
    finally:
        db.close()  # (rolls the lock's transaction back)


@contextlib.contextmanager
def exclusive_lock_held(database: Path):
    """Another program holding the SQLite *database* exclusively while the block runs (its locking mode
    EXCLUSIVE, in a transaction): even a read waits SQLite's 5 s for it, then fails ("database is locked")."""
    db = sqlite3.connect(database, isolation_level=None)
    try:
        db.execute("PRAGMA locking_mode=EXCLUSIVE")
        db.execute("BEGIN EXCLUSIVE")
        yield
    finally:
        db.close()


def document_tag(key, name: str, entries: dict) -> str:
    """The tag *key* (a cache key bound to the cache's context) makes for *entries* as document *name*."""
    return key.tag("document", name, json.dumps(entries).encode())


def own_document_tag(name: str, entries: dict) -> str:
    """The tag this user's builder makes for *entries* as document *name* (with the test's own cache key): what
    a builder's bug, not an attacker, could leave in the cache."""
    return document_tag(user_cache_key().bound_to(cache_context()), name, entries)


def calls_of(monkeypatch, module, name: str) -> list:
    """The first argument of each call of *module*'s function *name* from now on, noted as the calls happen
    (the function still does its work)."""
    calls = []
    real = getattr(module, name)

    def noted(first, *args, **kwargs):
        calls.append(first)
        return real(first, *args, **kwargs)
    monkeypatch.setattr(module, name, noted)
    return calls


def keyword_of_calls(monkeypatch, module, name: str, keyword: str) -> list:
    """The keyword argument *keyword* (None where not given) of each call of *module*'s function *name* from now
    on, noted as the calls happen (the function still does its work)."""
    given = []
    real = getattr(module, name)

    def noted(*args, **kwargs):
        given.append(kwargs.get(keyword))
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, noted)
    return given


def returns_past_fifos(call, fifos, seconds: float = 30) -> list:
    """``[call()]`` where *call*, run in a thread of its own, returns within *seconds*; else ``[]``, once it is
    let go: a call that opened one of *fifos* to read waits for a writer, and opening each for writing (then
    closing it at once) ends that wait, so that a failing test does not hang."""
    done: list = []
    worker = threading.Thread(target=lambda: done.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    if not worker.is_alive():
        return done
    for fifo in fifos:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    worker.join(10)
    return []


def recording_writers(monkeypatch, fail_at: str | None = None) -> list[tuple[str, list[str], object]]:
    """The output kinds as they are, each writer noting (kind, the units it was handed, the plan) first; the
    writer of the kind *fail_at* then fails as a full disk would."""
    calls = []

    def noted(kind):
        def write_noted(ctx, site, out, names):
            calls.append((kind.name, list(names), site))
            if kind.name == fail_at:
                raise OSError(28, "No space left on device")
            return kind.write(ctx, site, out, names)
        return dataclasses.replace(kind, write=write_noted)
    monkeypatch.setattr(write, "OUTPUT_KINDS", tuple(noted(kind) for kind in write.OUTPUT_KINDS))
    return calls


# --- An HTTP server that answers as a test scripts it (pull and its HTTP client) ---------------------------------

REAL_BY_ID = {record_id(p): p.read_bytes() for p in REAL_FILES}
QUICK_RETRIES = dict(timeout=1.0, retries=3, backoff=0.05)  # (a Fetcher's, for tests that wait out its tries)


class ScriptedServer:
    """Routes: path -> list of responses consumed in order (the last one repeats)."""

    def __init__(self):
        self.routes: dict[str, list[dict]] = {}
        self.requests: list[tuple[str, dict]] = []
        self.in_flight = self.most_in_flight = 0  # (bundle requests being answered at once)
        self.lock = threading.Lock()

    def add(self, path, *responses):
        self.routes[path] = list(responses)

    def handler(self):
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                server.requests.append((self.path, dict(self.headers)))
                queue = server.routes.get(self.path)
                if not queue:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                r = queue.pop(0) if len(queue) > 1 else queue[0]
                if r.get("sleep"):
                    with server.lock:
                        server.in_flight += 1
                        server.most_in_flight = max(server.most_in_flight, server.in_flight)
                    time.sleep(r["sleep"])
                    with server.lock:
                        server.in_flight -= 1
                etag = r.get("etag")
                if etag and self.headers.get("If-None-Match") == etag:
                    self.send_response(304)
                    self.end_headers()
                    return
                body = r.get("body", b"")
                self.send_response(r.get("status", 200))
                for k, v in r.get("headers", {}).items():
                    self.send_header(k, v)
                if etag:
                    self.send_header("ETag", etag)
                self.send_header("Content-Length", str(r.get("length", len(body))))
                self.end_headers()
                try:
                    # (a drip sends its first 25 bytes one at a time, then the rest at once)
                    pieces = [body[i:i + 1] for i in range(25)] + [body[25:]] if r.get("drip") else [body]
                    for piece in pieces:
                        self.wfile.write(piece)
                        self.wfile.flush()
                        time.sleep(r.get("drip", 0))
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                    pass  # the client gave up (a timeout test)

        return Handler


def running(server: ScriptedServer, tls: ssl.SSLContext | None = None):
    return serving(server.handler(), tls)


def https_certificate(tmp_path, monkeypatch, certified_for: str = "localhost", trusted: bool = True
                      ) -> ssl.SSLContext:
    """A server's TLS context with a certificate for *certified_for* from an authority of the test's own, which
    this process trusts (through OpenSSL's SSL_CERT_FILE, as a company's own authority is) if *trusted*."""
    authority = trustme.CA()
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert(certified_for).configure_cert(tls)
    if trusted:
        authority.cert_pem.write_to_path(str(tmp_path / "authority.pem"))
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "authority.pem"))
    return tls


class FailingDisk:
    """The SQLite connection *db* over a disk that fails from now on, as a dying disk fails a read (SQLITE_IOERR):
    what no test can make a real disk do on cue."""

    def __init__(self, db):
        self.db = db

    def execute(self, *args):
        error = sqlite3.OperationalError("disk I/O error")
        error.sqlite_errorcode = sqlite3.SQLITE_IOERR_READ
        raise error

    def close(self):
        self.db.close()
