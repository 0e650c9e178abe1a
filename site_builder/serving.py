"""``site-builder serve``: build, serve on localhost, watch, rebuild incrementally, reload open pages.

The HTTP server reads from the output folder, which each build replaces atomically, so a request never
sees a half-written tree.  Pages are served with a small live-reload script injected into the HTML on the
way out; the files on disk are exactly what ``build`` writes, so the served folder can be deployed as is.
"""

from __future__ import annotations

import html
import http.server
import json
import mimetypes
import os
import queue
import socket
import stat
import sys
import threading
import time
import traceback
import webbrowser
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Callable
from urllib.parse import unquote, urlsplit

import jinja2
from watchdog.observers import Observer

from site_builder.build import BuildOptions, WorkerLostError, build, prepare_spare_tree
from site_builder.keys import KeyFileError, load_trust_set
from site_builder.loading import BundleListing, BundlesFolderError, list_bundles, rediscover
from site_builder.mirrors import MirrorLookups
from site_builder.incremental import IncrementalStore
from site_builder.options import SERVE_HOST, SERVE_PORT, BuildPolicy, ServeSession
from site_builder.rendering import describe_template_error
from site_builder.search_index import SearchIndexError
from site_builder.stages.publish import IN_PLACE_LIMIT
from site_builder.settings import SettingsError, SiteConfig, load_settings, normalize_base_url, project_paths
from site_builder.terminal import printable
from site_builder.watching import Watcher, WatchError, follow
from site_builder.writing import OutputError, OutputSlot

EVENTS_PATH = "__site_builder__/events"
LIVE_JS_PATH = "__site_builder__/live.js"
CONTENT_TYPES = {".json": "application/json", ".js": "text/javascript", ".css": "text/css",
                 ".svg": "image/svg+xml", ".xml": "application/xml", ".html": "text/html; charset=utf-8",
                 ".txt": "text/plain; charset=utf-8", ".wasm": "application/wasm"}


@dataclass
class ServeOptions:
    bundles: Path
    output: Path
    templates: Path
    settings: Path
    trusted_keys: list[Path]
    base_url: str | None = None
    host: str = SERVE_HOST
    port: int = SERVE_PORT
    search: bool = True
    look_ahead: bool = True  # check the output's mirrored bundles beside the build, from the change's first event
    log: Callable[[str], None] = lambda line: print(printable(line), file=sys.stderr, flush=True)


@dataclass
class LiveState:
    """What the browser should know: the last error (or None) and a stream of reload events."""

    error: str | None = None
    base_path: str = "/"
    clients: list[queue.Queue] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def publish(self, event: str, data: dict) -> None:
        with self.lock:
            for q in self.clients:
                q.put((event, data))

    def set_error(self, error: str | None) -> None:
        self.error = error
        self.publish("status", {"error": error})


def live_reload_tag(base_path: str) -> bytes:
    """The script tag serve adds to pages, its attributes escaped: the base path comes from the command line or
    site.toml, and a quote in it must not end the attribute."""
    src = html.escape(base_path + LIVE_JS_PATH, quote=True)
    events = html.escape(base_path + EVENTS_PATH, quote=True)
    return f'<script src="{src}" data-events="{events}"></script>'.encode()


def page_paths(rels: list[str], base_path: str) -> list[str]:
    """Output files -> the URL paths of the pages showing them ("pith/X/index.html" -> "/base/pith/X/")."""
    paths = set()
    for rel in rels:
        if rel.endswith(".html"):
            paths.add(base_path + rel.removesuffix("index.html"))
    return sorted(paths)


class Site:
    """Builds on demand and remembers the outcome for the browser."""

    def __init__(self, options: ServeOptions, live: LiveState):
        self.options = options
        self.live = live
        self.build_lock = threading.Lock()
        self.builds = 0
        # The tree the next change updates in place may be missing: after the first build (the output may have
        # been built without one) and after any that wrote every file anew (a template edit).
        self.twin_wanted = False
        self.rebuild_waiting = threading.Event()
        self.store = IncrementalStore()  # the cache, compiled templates and planning results stay between rebuilds
        self.listing: BundleListing | None = None  # the bundles folder as listed after the last build
        self.request_rebuild: Callable[[], None] = lambda: None
        self.index_next = False  # the live site has the previous search index: the next build makes it anew
        self.ahead: MirrorLookups | None = None  # started when a change was first seen (``look_ahead``)
        self.said: frozenset[str] = frozenset()  # the REJECTED and WARNING lines of the last build

    def _build_options(self) -> BuildOptions:
        o = self.options
        config = load_settings(o.settings)
        if o.base_url is not None:
            config = replace(config, base_url=normalize_base_url(o.base_url))
        self.live.base_path = config.base_path
        about, static = project_paths(o.settings, config)
        return BuildOptions(bundles=o.bundles, output=o.output, trust=load_trust_set(o.trusted_keys), config=config,
                            templates=o.templates if os.path.isdir(o.templates) else None,
                            about_file=about, static_dir=static, search=o.search,
                            policy=BuildPolicy(mp_context="forkserver", look_ahead=o.look_ahead),
                            session=ServeSession(self.store, defer_search=o.search and not self.index_next,
                                                 on_published=self._announce))

    def _listing(self, options: BuildOptions, changed: set[str] | None) -> BundleListing:
        """The bundles folder now: the last listing updated by the watcher's events (only the changed files
        are stat-ed again), or a full listing when the events cannot tell (a folder's entries changed)."""
        root = options.bundles.resolve()
        if self.listing is not None and changed is not None and self.listing.root == str(root):
            inside = str(root) + os.sep  # template and settings edits say nothing about the bundles folder
            updated = rediscover(self.listing, {p for p in changed if p.startswith(inside)})
            if updated is not None:
                return updated
        return list_bundles(root, options.not_bundles)

    def _check_listing(self, options: BuildOptions, used: BundleListing) -> None:
        """After the site is live: list the folder in full and rebuild again if the build missed a change
        (a lost file event); this listing is also where the next rebuild starts from."""
        try:
            self.listing = list_bundles(options.bundles.resolve(), options.not_bundles)
        except (BundlesFolderError, OSError):
            self.listing = None  # the next rebuild reports it
            return
        if not self.listing.same_files(used):
            self.request_rebuild()

    def rebuild(self, reason: str, changed: set[str] | None = None) -> bool:
        self.rebuild_waiting.set()  # (the twin being linked gives way)
        with self.build_lock:
            self.rebuild_waiting.clear()
            started = time.perf_counter()
            indexing = self.index_next  # (this build follows the last one with its search index)
            listing = None
            try:
                options = self._build_options()
                listing = self._listing(options, changed)
                ahead, self.ahead = self.ahead, None
                try:
                    report = build(replace(options, session=replace(options.session, listing=listing,
                                                                    lookups=ahead)))
                finally:
                    if ahead is not None:  # (taken over or not, it has done its work)
                        ahead.close()
            except jinja2.TemplateError as exc:
                return self._fail(f"template error: {describe_template_error(exc)}")
            except (SettingsError, KeyFileError, BundlesFolderError, OutputError, SearchIndexError,
                    WorkerLostError) as exc:
                return self._fail(str(exc))
            except Exception as exc:  # never let a bad edit stop the server
                return self._fail(f"build failed: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
            self.builds += 1
            # (after a build that wrote nearly every file anew, the tree beside is nearly all stale)
            self.twin_wanted = self.builds == 1 or (report.changed and report.files_written > IN_PLACE_LIMIT * (
                report.files_written + report.files_reused))
            self.index_next = report.search_behind
            self._check_listing(options, listing)
            if report.search_behind:  # on screen now; the search index follows in the next build
                self.request_rebuild()
            rejected = [o.inspection.error_line() for o in report.rejected]
            notes = [note for note in (report.cache_note, report.reuse_note, report.twin_note) if note]
            self._say_problems(rejected, report.warnings, notes, repeat=not indexing)
            behind = "; the search index follows" if report.search_behind else ""
            self.options.log(f"[{reason}] {report.summary_line()} (rebuild {time.perf_counter() - started:.2f}s{behind})")
            self.live.set_error("Rejected bundles:\n" + "\n".join(rejected) if rejected else None)
            return True

    def _say_problems(self, rejected: list[str], warnings: list[str], notes: list[str], repeat: bool) -> None:
        """Each rejected file and warning, as the command line says them; the build that only follows the last
        one with its search index leaves out the lines that one said a moment ago, so that a save says each once.
        A note (no cache kept or one not saved, nothing reused from a tree others may write to, no twin for lack
        of inodes) is said when it is not the last build's: a state, not news of each save."""
        lines = [f"REJECTED {line}" for line in rejected] + [f"WARNING {warning}" for warning in warnings]
        said_notes = [f"NOTE {note}" for note in notes]
        for line in lines:
            if repeat or line not in self.said:
                self.options.log(line)
        for line in said_notes:
            if line not in self.said:
                self.options.log(line)
        self.said = frozenset(lines + said_notes)

    def look_ahead(self) -> None:
        """Start the lookups of the mirrored bundles in the output and in the tree beside it as soon as a change
        is first seen: the rebuild waits on them (40,000 lookups at 10,000 records), and the watcher waits for
        the change to settle first (30-100 ms).  Measured at 10,000 records (``bench_serve.py``, five rounds
        side by side with the commit before, which started them with the build, as ``ServeOptions(look_ahead=
        False)`` does): save to reload, median of 5, 193-256 ms (median 220) against 226-291 ms (248).  As
        with lookups made when the build starts, a file edited after them is one the next build finds.  Made
        after the tree beside the output is linked, if that was going on."""
        if not self.options.look_ahead:
            return
        with self.build_lock:  # (the twin being linked gives way: ``give_way``)
            cache = self.store.cache
            if self.ahead is None and cache is not None and cache.db is not None:
                slot = OutputSlot(self.options.output)
                self.ahead = MirrorLookups(slot.output, slot.prev, cache.mirrored(), "forkserver", twin_first=True)

    def prepare_spare_tree(self, cancelled: Callable[[], bool]) -> None:
        """Link the second tree incremental builds update in place, while the user is still reading (given up as
        soon as *cancelled*: a change waiting to be built goes first, and links what it needs itself)."""
        with self.build_lock:
            started = time.perf_counter()
            try:
                if prepare_spare_tree(self._build_options(), cancelled):
                    self.options.log(f"ready for fast rebuilds (linked a second tree in "
                                     f"{time.perf_counter() - started:.1f}s)")
            except Exception as exc:  # only an optimisation: the next build does it if this could not
                self.options.log(f"could not prepare the second tree: {type(exc).__name__}: {exc}")

    def _announce(self, report) -> None:
        """Tell open pages to reload the moment the new site is live (before the build cache is saved)."""
        changed = page_paths(report.rendered + report.removed, self.live.base_path)
        everything = report.rendered_more or len(changed) > 500 or any(p.endswith("/assets/") for p in changed)
        self.live.publish("reload", {"all": everything or not changed, "paths": changed[:500],
                                     "build": self.builds + 1})

    def _fail(self, message: str) -> bool:
        self.listing = None  # list everything again next time
        self.options.log(f"ERROR {message.splitlines()[0]} (serving the last good site)")
        self.live.set_error(message)
        return False


class _PreviewHandler(http.server.BaseHTTPRequestHandler):
    """Serves the output folder under the base path, with the live-reload script in every page and the event
    stream it listens to; ``_make_handler`` binds it to one serve session."""

    protocol_version = "HTTP/1.1"
    live: LiveState
    output: Path
    live_js: bytes

    def log_message(self, *args):
        pass

    def _send(self, status: int, body: bytes, content_type: str, extra: dict | None = None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if content_type.startswith("application/json"):  # (as GitHub Pages does: verifiers elsewhere may fetch it)
            self.send_header("Access-Control-Allow-Origin", "*")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _inject(self, html: bytes) -> bytes:
        tag = live_reload_tag(self.live.base_path)  # the event stream sends the current error (if any) on connect
        return html.replace(b"</body>", tag + b"</body>", 1) if b"</body>" in html else html + tag

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        try:
            asked = urlsplit(self.path)
        except ValueError:  # (a target urllib cannot parse, "http://[::1/": a bad request, not a traceback)
            return self._send(400, b"Bad request\n", "text/plain; charset=utf-8")
        path = unquote(asked.path)
        base = unquote(self.live.base_path)  # (as the path asked is: "/my%20mirror/" is "/my mirror/")
        if path == base + EVENTS_PATH:
            return self._events()
        if path == base + LIVE_JS_PATH:
            return self._send(200, self.live_js, "text/javascript")
        if not path.startswith(base):
            if path == "/" or path + "/" == base:
                return self._send(302, b"", "text/plain", {"Location": _keeping_query(self.live.base_path, asked.query)})
            return self._not_found()
        rel = path[len(base):]
        parts = [p for p in rel.split("/") if p]
        if any(p in ("..", ".") or "\x00" in p for p in parts):
            return self._not_found()
        found = site_file(self.output, parts)
        if found is None:  # (missing, or through a link: the builder makes none, so one in the output was put there)
            return self._not_found()
        name, data = found
        if name != "" and path.endswith("/"):  # a file asked for as a folder (as a static host answers it)
            return self._not_found()
        if name == "":  # a folder: its index.html
            if not path.endswith("/"):  # (the path as asked, still quoted: a header holds ASCII only)
                return self._send(301, b"", "text/plain",
                                  {"Location": _keeping_query(asked.path + "/", asked.query)})
            if data is None:
                return self._not_found()
            name = "index.html"
        suffix = os.path.splitext(name)[1]
        ctype = CONTENT_TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
        if suffix == ".html":
            data = self._inject(data)
        self._send(200, data, ctype)

    def _not_found(self):
        found = site_file(self.output, ["404.html"])
        if found is not None and found[0] and found[1] is not None:
            body = self._inject(found[1])
        else:
            body = b"<!DOCTYPE html><title>Not found</title><h1>Not found</h1>"
        self._send(404, body, "text/html; charset=utf-8")

    def _events(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        q: queue.Queue = queue.Queue()
        with self.live.lock:
            self.live.clients.append(q)
        q.put(("status", {"error": self.live.error}))
        try:
            while True:
                try:
                    event, data = q.get(timeout=15)
                    chunk = f"event: {event}\ndata: {json.dumps(data)}\n\n"
                except queue.Empty:
                    chunk = ": keep-alive\n\n"
                self.wfile.write(chunk.encode())
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        finally:
            with self.live.lock:
                self.live.clients.remove(q)
            self.close_connection = True


def site_file(root: Path, parts: list[str]) -> tuple[str, bytes | None] | None:
    """What the site at *root* holds at the path *parts*: (its name, its bytes) for a file, ("", the bytes of its
    index.html or None) for a folder; None for nothing there, or something else.  Each part is opened in the
    folder before it and never through a link, a folder's index.html included: the server shows the site's
    files, never what a link planted in it leads to (any user of the machine may ask), even one swapped in."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        for i, part in enumerate(parts):
            inner = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
            os.close(fd)
            fd = inner
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                if i != len(parts) - 1:  # a file where a folder was asked for
                    return None
                data = _regular_file(fd, None)
                return None if data is None else (part, data)
        return "", _regular_file(fd, "index.html")
    except OSError:
        return None
    finally:
        os.close(fd)


def _regular_file(fd: int, name: str | None) -> bytes | None:
    """The bytes of the regular file *name* in the folder *fd* (not through a link), or of *fd* itself (*name*
    None); None where it is no regular file."""
    inner = None
    try:
        if name is not None:
            inner = fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    except OSError:
        return None
    finally:
        if inner is not None:
            os.close(inner)


def _keeping_query(location: str, query: str) -> str:
    """*location* with the query asked for (``search?q=x`` leads to ``search/?q=x``, as static hosts answer)."""
    return f"{location}?{query}" if query else location


def _make_handler(options: ServeOptions, live: LiveState) -> type[_PreviewHandler]:
    live_js = resources.files("site_builder").joinpath("data/live.js").read_bytes()
    return type("Handler", (_PreviewHandler,), {"live": live, "output": options.output, "live_js": live_js})


class ListenError(OSError):
    """The server cannot listen on the address asked for (port in use, no such interface, no permission)."""


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)  # a browser closing a tab is not an error


class _ServerOverIPv6(_Server):
    address_family = socket.AF_INET6


def listening_server(host: str, port: int, handler) -> _Server:
    """A server on *host* (a name, an IPv4 or an IPv6 address: ``::1``) and *port*; OSError where it cannot
    listen there (the address family is the one the host's first address has)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    return (_ServerOverIPv6 if family == socket.AF_INET6 else _Server)((host, port), handler)


def url_host(host: str) -> str:
    """*host* as a URL names it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


# The address a browser on this machine opens for a server listening on every address (http://0.0.0.0/ is no
# page to open: some browsers refuse it).
_EVERY_ADDRESS = {"0.0.0.0": "127.0.0.1", "::": "::1"}


def watcher_for(options: ServeOptions) -> Watcher:
    """What the watcher follows: the bundles, templates, settings, about page and static folder."""
    files, static = project_files(options)
    return Watcher(options.output.resolve(), files, options.bundles.resolve(), options.templates.resolve(), static)


def project_files(options: ServeOptions) -> tuple[set[Path], Path]:
    """The settings file and the about page, and the static folder, as site.toml names them now."""
    try:
        about, static = project_paths(options.settings, load_settings(options.settings))
    except SettingsError:  # (the build says what is wrong; the defaults are watched meanwhile)
        about, static = project_paths(options.settings, SiteConfig())
    return {f.parent.resolve() / f.name for f in (options.settings, about)}, static.resolve()  # (a link: as named)


def _listen(options: ServeOptions, live: LiveState) -> _Server:
    """The server, listening; ListenError naming the address where it cannot (a busy port, a host that is no
    name: "a..b", for which IDNA raises UnicodeError, not OSError)."""
    try:
        return listening_server(options.host, options.port, _make_handler(options, live))
    except (OSError, UnicodeError) as exc:
        why = (exc.strerror or exc) if isinstance(exc, OSError) else "not a host name"
        raise ListenError(f"cannot listen on {url_host(options.host)}:{options.port}: {why}") from None


def _addresses(options: ServeOptions, port: int, base_path: str) -> tuple[str, str]:
    """The URL a browser on this machine opens, and where else the server listens (words to add to it, or "")."""
    shown = _EVERY_ADDRESS.get(options.host, options.host)
    also = f" and every address of this machine ({options.host})" if shown != options.host else ""
    return f"http://{url_host(shown)}:{port}{base_path}", also


def serve(options: ServeOptions, open_browser: bool = False, ready: Callable[[str], None] | None = None,
          stop: threading.Event | None = None) -> int:
    live = LiveState()
    site = Site(options, live)
    stop = stop or threading.Event()

    spare = httpd = None
    serving = False
    observer = Observer()
    try:  # Ctrl-C may come at any point, even during the first build: always stop the same clean way
        # The port first: a busy port is said at once, not after the first build (seconds on a large mirror).
        httpd = _listen(options, live)
        site.rebuild("start")
        url, also = _addresses(options, httpd.server_address[1], live.base_path)

        watcher = watcher_for(options)
        site.request_rebuild = watcher.poke
        watches: dict[tuple[Path, bool], object] = {}
        # (started before the first page is served, the watches made one by one after: an edit made once the site
        # is up is always seen, and a folder that cannot be watched is named)
        observer.start()
        follow(observer, watcher, watches)
        # (shutdown() waits for the server's next poll: every 50 ms, not the default half second, so that Ctrl-C
        # stops at once)
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        serving = True
        watched = sorted({folder for folder, _ in watches})
        options.log(f"serving {options.output} at {url}{also} (Ctrl-C to stop); "
                    f"watching {', '.join(map(str, watched[:3]))}{' and more' if len(watched) > 3 else ''}")
        if ready:
            ready(url)
        if open_browser:
            webbrowser.open(url)

        def give_way() -> bool:  # a change is being collected or waits to be built, or the server stops
            return stop.is_set() or watcher.pending.is_set() or site.rebuild_waiting.is_set()

        while not stop.is_set():
            # The tree the next change updates in place is linked while the user reads the result.
            if site.twin_wanted and (spare is None or not spare.is_alive()):
                site.twin_wanted = False
                spare = threading.Thread(target=site.prepare_spare_tree, args=(give_way,), daemon=True)
                spare.start()
            if watcher.wait_for_batch(stop, site.look_ahead):
                site.rebuild("change", watcher.take_changes())
                watcher.retarget(*project_files(options))  # (site.toml may name another about page or static folder)
                try:
                    if follow(observer, watcher, watches):  # (a folder watched from now on: its files since the
                        watcher.poke()                       # build read it are seen by one more)
                except WatchError as exc:
                    options.log(f"ERROR {exc}")
    except KeyboardInterrupt:
        pass
    finally:
        _shut_down(options, site, stop, observer, httpd, serving, spare)
    return 0


def _shut_down(options: ServeOptions, site: Site, stop: threading.Event, observer, httpd, serving: bool,
               spare: threading.Thread | None) -> None:
    """Stop everything serve started, in the order that lets each part finish, and remove its leftovers."""
    stop.set()
    if observer.is_alive():
        observer.stop()
        observer.join(timeout=5)
    if httpd is not None:
        if serving:
            httpd.shutdown()
        httpd.server_close()
    if spare is not None:
        spare.join(timeout=30)
    if site.ahead is not None:  # (a change seen, then Ctrl-C before its rebuild)
        site.ahead.close()
    site.store.close()
    _remove_leftovers(options.output)
    if httpd is not None:  # (nothing to say "stopped" of when the port could not be had)
        options.log("stopped")


def _remove_leftovers(output: Path) -> None:
    """Clear an interrupted build's staging tree and retired trees the way the next build would (taking the
    build lock, so a build another process is running keeps its files)."""
    slot = OutputSlot(output)
    try:
        slot.acquire()
    except OutputError:
        return
    slot.release()
