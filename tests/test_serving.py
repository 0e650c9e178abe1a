"""``site-builder serve`` with real files, the real watcher, real HTTP and a real browser."""

import contextlib
import http.client
import os
import queue
import json
import multiprocessing
import multiprocessing.forkserver
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from browser import chromium
from conftest import (REAL_FILES, ROOT, calls_of, free_port, keyword_of_calls, open_descriptors, record_id, tree,
                      write_lock_held)
from signing import TestKey, sign_bundle, to_bytes, with_paper
from site_builder.parallel import start_context

IDS = [record_id(p) for p in REAL_FILES]
# The tests that start serve (processes, the real watcher, a browser) are marked slow; those of the request
# handler alone, over a plain folder, run in the quick loop.
DEADLINE = 10.0  # a bound on waiting, not a speed target (bench_serve.py measures that): loaded CI machines are slow


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type"), exc.read().decode()


def eventually(check, deadline=DEADLINE):
    """Poll until check() is truthy; returns the seconds it took (fails after the deadline)."""
    start = time.perf_counter()
    while True:
        result = check()
        if result:
            return time.perf_counter() - start
        if time.perf_counter() - start > deadline:
            raise AssertionError(f"not observed within {deadline}s")
        time.sleep(0.05)


class Events:
    """A connected server-sent-events client, collecting (event, data) pairs."""

    def __init__(self, host, port, path):
        self.items = []
        self.conn = http.client.HTTPConnection(host, port, timeout=30)
        self.conn.request("GET", path)
        self.response = self.conn.getresponse()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        event = None
        try:
            for raw in self.response:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    self.items.append((event, json.loads(line[6:])))
        except Exception:
            pass


@pytest.fixture
def served_project(tmp_path):
    key = TestKey()
    (tmp_path / "bundles").mkdir()
    for p in REAL_FILES[:3]:
        shutil.copy(p, tmp_path / "bundles" / p.name)
    (tmp_path / "templates").mkdir()
    shutil.copy(ROOT / "templates" / "home.html", tmp_path / "templates" / "home.html")
    key.write(tmp_path / "test-key.json")
    shutil.copy(ROOT / "site_builder" / "data" / "pith-signing-key.json", tmp_path / "pith-key.json")
    return tmp_path, key


@pytest.fixture
def server(served_project):
    root, key = served_project
    port = free_port()
    base = f"http://127.0.0.1:{port}/mirror/"
    with subprocess.Popen([sys.executable, "-m", "site_builder", "serve", "--port", str(port), "--no-search",
                           "--trusted-keys", "pith-key.json", "--trusted-keys", "test-key.json",
                           "--base-url", "/mirror/"],
                          cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            eventually(lambda: _up(base), deadline=30)
            yield root, key, base, port, proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()


def _up(url):
    try:
        return get(url)[0] == 200
    except OSError:
        return False


@pytest.mark.slow
def test_json_is_served_to_other_origins_as_github_pages_does(server):
    """A verifier on another origin (the standalone one, opened from disk) may fetch a record's bundle."""
    _, _, base, _, _ = server
    with urllib.request.urlopen(base + f"pith/{IDS[0]}/bundle.json", timeout=5) as r:
        assert r.headers.get("Access-Control-Allow-Origin") == "*"
    with urllib.request.urlopen(base + f"pith/{IDS[0]}/", timeout=5) as r:
        assert r.headers.get("Access-Control-Allow-Origin") is None


@pytest.mark.slow
def test_changes_are_served_live(server):
    root, key, base, port, _ = server
    bundles = root / "bundles"
    # Right after start the server links the twin tree that incremental rebuilds update in place.
    eventually(lambda: (root / ".output.prev" / "verification.json").is_file())
    page = f"pith/{IDS[0]}/index.html"
    assert (root / ".output.prev" / page).stat().st_ino == (root / "output" / page).stat().st_ino  # links
    assert get(base + f"pith/{IDS[3]}/")[0] == 404
    shutil.copy(REAL_FILES[3], bundles / REAL_FILES[3].name)  # add
    eventually(lambda: get(base + f"pith/{IDS[3]}/")[0] == 200)
    new_id = _retitle(root, key, "Edited while serving").parent.name  # modify (now a test-key record)
    eventually(lambda: "Edited while serving" in get(base + f"pith/{new_id}/")[2])
    (bundles / REAL_FILES[1].name).unlink()  # delete
    eventually(lambda: get(base + f"pith/{IDS[1]}/")[0] == 404)
    home = root / "templates" / "home.html"
    home.write_text(home.read_text().replace("<h2>Most recent papers</h2>", "<h2>Newest arrivals</h2>"))  # template
    eventually(lambda: "Newest arrivals" in get(base)[2])
    (root / "site.toml").write_text('title = "Renamed mirror"\n')  # (settings every page shows)
    eventually(lambda: "Renamed mirror" in get(base + f"pith/{IDS[0]}/")[2])
    # Every page was written anew: the twin is linked again while the user reads, and the next change updates it.
    prev = root / ".output.prev"

    def relinked() -> bool:
        try:
            return "Renamed mirror" in (prev / page).read_text() \
                and (prev / page).stat().st_ino == (root / "output" / page).stat().st_ino
        except FileNotFoundError:  # (the old twin moved away, the new one not yet in its place)
            return False
    eventually(relinked)
    twin = prev.stat().st_ino
    edited = _retitle(root, key, "Edited after the template").parent.name
    eventually(lambda: "Edited after the template" in get(base + f"pith/{edited}/")[2])
    assert (root / "output").stat().st_ino == twin  # updated in place and swapped in


@pytest.mark.slow
def test_content_types_404_and_base_path(server):
    _, _, base, port, _ = server
    status, ctype, body = get(base + f"pith/{IDS[0]}/bundle.json")
    assert status == 200 and ctype == "application/json" and json.loads(body)["pith_number"].endswith(IDS[0])
    status, ctype, body = get(base + "no/such/page/")
    assert status == 404 and "text/html" in ctype and "Not found" in body
    status, _, body = get(base)
    assert status == 200 and 'href="/mirror/papers/"' in body
    assert '/mirror/__site_builder__/live.js' in body
    # the files on disk are exactly what `build` writes: no live-reload script
    assert "__site_builder__" not in (server[0] / "output" / "index.html").read_text()


@pytest.mark.slow
def test_a_folder_is_redirected_to_its_slash_as_the_browser_asked_for_it(server):
    """A folder asked for without its slash is redirected to the very path asked, with the slash: quoted as it
    came (a folder of the static files may be named in any script), never the decoded name, and with the query
    asked for."""
    root, _, base, port, _ = server
    (root / "output" / "日本").mkdir()
    (root / "output" / "日本" / "index.html").write_text("<p>folder page</p>")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/mirror/%E6%97%A5%E6%9C%AC")
    response = conn.getresponse()
    response.read()
    assert response.status == 301 and response.getheader("Location") == "/mirror/%E6%97%A5%E6%9C%AC/"
    conn.close()
    status, _, body = get(f"http://127.0.0.1:{port}" + response.getheader("Location"))
    assert status == 200 and "folder page" in body
    for asked, location in (("/mirror/search?q=graph", "/mirror/search/?q=graph"), ("/?q=x", "/mirror/?q=x")):
        conn.request("GET", asked)  # (the query goes with the redirect, as a static host sends it on)
        response = conn.getresponse()
        response.read()
        assert response.status in (301, 302) and response.getheader("Location") == location
    conn.close()


@pytest.mark.slow
def test_broken_template_shows_banner_and_recovers(server):
    root, _, base, port, _ = server
    events = Events("127.0.0.1", port, "/mirror/__site_builder__/events")
    eventually(lambda: events.items)
    assert events.items[0] == ("status", {"error": None})
    home = root / "templates" / "home.html"
    good = home.read_text()
    home.write_text(good.replace("{% block main %}", "{% block main %}{% if %}"))
    eventually(lambda: any(e == "status" and d["error"] and "home.html" in d["error"] for e, d in events.items))
    status, _, body = get(base)
    assert status == 200 and "Most recent papers" in body  # the last good page is still served
    home.write_text(good.replace("Most recent papers", "Fixed again"))
    eventually(lambda: events.items[-1][0] in ("status", "reload") and "Fixed again" in get(base)[2])
    eventually(lambda: any(e == "status" and d["error"] is None for e, d in events.items[2:]))


@pytest.mark.slow
def test_rejected_bundle_is_reported_in_the_browser(server):
    root, _, base, port, _ = server
    events = Events("127.0.0.1", port, "/mirror/__site_builder__/events")
    eventually(lambda: events.items)
    (root / "bundles" / "broken.json").write_text('{"a": 1, "a": 2}')
    eventually(lambda: any(e == "status" and d["error"] and "broken.json: json_duplicate_key" in d["error"]
                           for e, d in events.items))
    (root / "bundles" / "broken.json").unlink()
    eventually(lambda: events.items[-1] == ("status", {"error": None}) or
               any(e == "status" and d["error"] is None for e, d in events.items[2:]))


@pytest.mark.slow
def test_bad_settings_file_is_reported_and_recovers(server):
    root, _, base, port, _ = server
    events = Events("127.0.0.1", port, "/mirror/__site_builder__/events")
    eventually(lambda: events.items)
    (root / "site.toml").write_text('title = "unterminated\n')
    eventually(lambda: any(e == "status" and d["error"] and "site.toml" in d["error"] for e, d in events.items))
    assert get(base)[0] == 200  # the last good site is still served
    (root / "site.toml").write_text('title = "Settings fixed"\n')
    eventually(lambda: "Settings fixed" in get(base)[2])
    eventually(lambda: any(e == "status" and d["error"] is None for e, d in events.items[2:]))


@pytest.mark.slow
def test_reload_signal_reaches_client_and_browser_reloads(server):
    root, key, base, port, _ = server
    events = Events("127.0.0.1", port, "/mirror/__site_builder__/events")
    eventually(lambda: events.items)
    with chromium() as browser:
        page = browser.new_page()
        page.goto(base + f"pith/{IDS[2]}/")
        page.evaluate("window.__before_reload = 1")
        page.wait_for_timeout(300)  # let the page's own event stream connect
        b = json.loads(REAL_FILES[2].read_bytes())
        b["events"][1]["payload"]["graph_snapshot"]["paper"]["title"] = "tampered"  # now rejected: page disappears
        (root / "bundles" / REAL_FILES[2].name).write_bytes(to_bytes(b))
        eventually(lambda: any(e == "reload" and f"/mirror/pith/{IDS[2]}/" in d["paths"] for e, d in events.items))
        def reloaded():
            try:
                return page.evaluate("window.__before_reload") is None
            except Exception:  # the page is in the middle of reloading
                return False
        eventually(reloaded, deadline=DEADLINE)
        page.wait_for_load_state("load")
        assert "Not found" in page.content()


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_stops_cleanly(server, stop):
    """Ctrl-C, or SIGTERM (a service manager, ``docker stop``, a CI step's timeout), stops serve as cleanly."""
    root, _, base, port, proc = server
    proc.send_signal(stop)
    proc.wait(10)
    out, err = proc.communicate()
    assert proc.returncode == 0
    assert "Traceback" not in err and "stopped" in err
    assert [p.name for p in root.iterdir() if ".staging-" in p.name] == []
    # Replaced trees are deleted by a detached process that outlives the server.
    eventually(lambda: [p.name for p in root.iterdir() if ".old-" in p.name] == [], deadline=10)


def _site(root: Path, search: bool = True, live=None, log=lambda line: None):
    """A serve ``Site`` over the served_project, as ``serve`` runs it (search on unless told), and the list its requests
    for another build go to."""
    from site_builder.serving import LiveState, Site

    site = Site(_serve_options(root, search=search, log=log), live or LiveState())
    asked = []
    site.request_rebuild = lambda: asked.append(True)
    return site, asked


def _serve_options(root: Path, settings: str = "site.toml", **options):
    """serve's options over the served_project (*settings*: the settings file's name in it)."""
    from site_builder.serving import ServeOptions

    return ServeOptions(bundles=root / "bundles", output=root / "output", templates=root / "templates",
                        settings=root / settings, trusted_keys=_keys(root), **options)


def _keys(root: Path) -> list[Path]:
    return [root / "pith-key.json", root / "test-key.json"]


def _retitle(root: Path, key, title: str) -> Path:
    """Give the first real record a newer bundle with *title* (in place, as an editor saves); its page's path."""
    newer = sign_bundle(dict(with_paper(json.loads(REAL_FILES[0].read_bytes()), title=title),
                             built_at="2026-12-01T00:00:00Z"), key)
    (root / "bundles" / REAL_FILES[0].name).write_bytes(to_bytes(newer))
    return root / "output" / "pith" / record_id(newer) / "index.html"


def _build_options(root: Path, output: Path):
    from site_builder.build import BuildOptions
    from site_builder.keys import load_trust_set
    from site_builder.settings import load_settings

    return BuildOptions(bundles=root / "bundles", output=output, trust=load_trust_set(_keys(root)),
                        templates=root / "templates", about_file=root / "about.md",
                        config=load_settings(root / "site.toml"))


def _assert_as_a_clean_build(root: Path, tmp_path: Path) -> None:
    from site_builder.build import build

    clean = tmp_path / "clean"
    build(_build_options(root, clean))
    assert tree(root / "output") == tree(clean)


@pytest.mark.slow
@pytest.mark.parametrize("with_twin", [False, True])
def test_the_lookups_started_at_a_changes_first_event_see_the_output_as_it_was_then(served_project, with_twin,
                                                                                     monkeypatch):
    """serve starts the lookups of the output's mirrored bundles at a change's first event, before the quiet
    time the watcher waits for (``Site.look_ahead``), and the rebuild takes them over: a live bundle.json
    edited before then is written over by that rebuild, one edited after them by the next."""
    from site_builder import serving
    from site_builder.stages import context

    root, key = served_project
    site, _ = _site(root, search=False)
    assert site.rebuild("start")
    if with_twin:
        site.prepare_spare_tree(lambda: False)
        assert (root / ".output.prev" / "pith" / IDS[1] / "bundle.json").is_file()
    mirrored = root / "output" / "pith" / IDS[1] / "bundle.json"
    verified = REAL_FILES[1].read_bytes()

    with open(mirrored, "ab") as f:  # edited in place, before the change is seen
        f.write(b" ")
    asked = keyword_of_calls(monkeypatch, serving, "MirrorLookups", "twin_first")
    site.look_ahead()
    assert site.ahead is not None and asked == [True]  # (the tree beside first: ``MirrorLookups``)
    _retitle(root, key, "First change")
    made = calls_of(monkeypatch, context, "MirrorLookups")
    assert site.rebuild("change", None)
    assert site.ahead is None and mirrored.read_bytes() == verified
    assert made == []  # (the build took the lookups over: it made none of its own)

    site.look_ahead()
    site.ahead.live()  # (the lookups are made now)
    with open(mirrored, "ab") as f:  # edited after them, while the change settles
        f.write(b" ")
    _retitle(root, key, "Second change")
    site.rebuild("change", None)  # (it may stop at the file, read back where it keeps it: "not the bundle ...")
    assert site.rebuild("change", set())  # the next rebuild, whatever starts it
    assert mirrored.read_bytes() == verified
    site.store.close()


@pytest.mark.slow
def test_serve_without_look_ahead_starts_no_lookups_before_the_build(served_project):
    from site_builder.serving import LiveState, ServeOptions, Site

    root, _ = served_project
    site = Site(ServeOptions(bundles=root / "bundles", output=root / "output", templates=root / "templates",
                             settings=root / "site.toml", trusted_keys=_keys(root), search=False,
                             log=lambda line: None, look_ahead=False), LiveState())
    assert site.rebuild("start")
    site.look_ahead()
    assert site.ahead is None
    site.store.close()


@pytest.mark.slow
def test_a_change_the_watcher_missed_is_caught_after_the_build(served_project):
    """Rebuilds trust the watcher's list of changed files; a full listing after each build catches a lost event."""
    root, key = served_project
    site, asked = _site(root, search=False)
    bundles = root / "bundles"
    old = os.stat(bundles).st_mtime - 60
    os.utime(bundles, (old, old))  # a folder that has been quiet for a while: its listing is trusted
    assert site.rebuild("start")
    assert not asked
    page = _retitle(root, key, "Edited unseen")  # in place, and no event reaches the server
    assert site.rebuild("change", set())  # "nothing changed", says the watcher
    assert "Edited unseen" not in page.read_text()
    assert asked  # ... but the listing after the build saw it and asked for another rebuild
    assert site.rebuild("change", None)
    assert "Edited unseen" in page.read_text()
    site.store.close()


@pytest.mark.slow
@pytest.mark.parametrize("sharded", [False, True])
def test_a_change_is_live_before_the_search_index_which_follows(served_project, tmp_path, sharded):
    """With search on, serve publishes a change with the previous index (Pagefind makes the index of the
    record's shard again: ~2.5 s for 2,500 records) and asks for the next build at once, which makes the index
    anew and tells the search page to reload; then the site is what a clean build makes.  *sharded*: a search
    index per shard of records (here 2 of 4 hold the 3 records): the changed record's shard follows, the other is
    never made again."""
    from site_builder.serving import LiveState

    root, key = served_project
    if sharded:
        (root / "site.toml").write_text("search_shard_size = 1\n")
    live = LiveState()
    events = queue.Queue()
    live.clients.append(events)
    site, asked = _site(root, live=live)
    entry = root / "output" / "pagefind" / ("4-of-4/" if sharded else "") / "pagefind-entry.json"
    other = root / "output" / "pagefind" / "1-of-4" / "pagefind-entry.json"  # (the other two records' shard)
    assert site.rebuild("start") and entry.is_file() and not asked  # nothing to follow: indexed at once
    indexed = entry.read_bytes()
    other_inode = other.stat().st_ino if sharded else None
    page = _retitle(root, key, "Searchable later")
    assert site.rebuild("change", None)
    assert "Searchable later" in page.read_text() and entry.read_bytes() == indexed  # live, with the old index
    assert asked == [True]
    while not events.empty():
        events.get()
    assert site.rebuild("change", set())  # the build asked for
    assert entry.read_bytes() != indexed and asked == [True]  # indexed anew; nothing more to follow
    reloads = [data for event, data in list(events.queue) if event == "reload"]
    assert any("/search/" in data["paths"] for data in reloads)
    assert site.rebuild("change", set()) and asked == [True]  # and then nothing changes
    if sharded:
        assert other.stat().st_ino == other_inode
    site.store.close()
    _assert_as_a_clean_build(root, tmp_path)


@pytest.mark.slow  # (indexes the site four times)
def test_a_file_bringing_a_second_bundle_of_a_published_record_is_chosen_between(served_project, tmp_path):
    """serve patches its last selection with the files that came and went: a new file holding an older bundle of
    a record already published goes to the choice between the two (the newer stays), as a clean build has it."""
    root, key = served_project
    lines: list[str] = []
    site, _ = _site(root, log=lines.append)

    def rebuild(reason: str) -> str:
        """Rebuild, then let the build that follows with the search index run; the first one's summary line."""
        lines.clear()
        assert site.rebuild(reason, None)
        said = next(line for line in lines if line.startswith(f"[{reason}]"))
        while site.index_next:
            assert site.rebuild("change", set())
        return said
    rebuild("start")
    page = _retitle(root, key, "The newer bundle")
    rebuild("change")
    assert "The newer bundle" in page.read_text()
    shutil.copy(REAL_FILES[0], root / "bundles" / "older-copy.json")
    assert ", 1 superseded," in rebuild("change")
    assert "The newer bundle" in page.read_text()
    site.store.close()
    _assert_as_a_clean_build(root, tmp_path)


def test_serve_says_when_a_build_could_not_save_the_cache_and_the_next_saves_it(served_project):
    """serve saves the cache itself after each build: a save that fails (here another program holds the
    database's write lock, as a full disk would stop it) is said in the terminal, once while it lasts, and the
    next build saves."""
    root, key = served_project
    lines: list[str] = []
    site, _ = _site(root, search=False, log=lines.append)
    assert site.rebuild("start")
    path = root / ".site-builder-cache" / "output" / "cache.sqlite"
    said = f"NOTE the build cache was not saved ({path}: database is locked); the next build cannot reuse what " \
           f"this one did"
    for title, notes in (("Not remembered", [said]), ("Not remembered either", [])):  # (said while it lasts)
        lines.clear()
        with write_lock_held(path):
            _retitle(root, key, title)
            assert site.rebuild("change", None)
        assert [line for line in lines if line.startswith("NOTE ")] == notes
    lines.clear()
    page = _retitle(root, key, "Remembered")
    assert site.rebuild("change", None) and "Remembered" in page.read_text()
    assert not [line for line in lines if line.startswith("NOTE ")]
    site.store.close()


def test_serve_says_why_it_reuses_nothing_from_a_site_others_may_write_to(served_project):
    """A build writes every file again where others may write to the live site or the tree beside it, and says
    why (the command line in a NOTE): serve says it too."""
    root, key = served_project
    lines: list[str] = []
    site, _ = _site(root, search=False, log=lines.append)
    assert site.rebuild("start")
    (root / "output").chmod(0o775)
    said = []
    for title in ("Shared", "Beside", "Replaced"):
        lines.clear()
        _retitle(root, key, title)
        assert site.rebuild("change", None)
        said.append([line for line in lines if line.startswith("NOTE ")])
    why = ("others may write to it (or it is not yours), so nothing in it is reused and every file is written "
           "again; make it yours alone (chmod go-w) for incremental builds")
    # (the shared tree is written anew, then lies beside the output, then is replaced: said as it goes)
    assert said == [[f"NOTE {root / 'output'}: {why}"], [f"NOTE {root / '.output.prev'}: {why}"], []]
    site.store.close()


@pytest.mark.slow
def test_the_build_that_follows_with_the_search_index_says_no_problem_twice(served_project):
    """A save is built at once and its search index follows in a second build: the rejections and warnings of
    the first are not said again by the second, while a change saved again says them again."""
    root, key = served_project
    tampered = REAL_FILES[1].read_bytes().replace(b'"built_at":"', b'"built_at":"1', 1)
    (root / "bundles" / "tampered.json").write_bytes(tampered)
    lines: list[str] = []
    site, _ = _site(root, log=lines.append)
    assert site.rebuild("start")
    rejected = [line for line in lines if line.startswith("REJECTED ")]
    assert len(rejected) == 1 and "tampered.json" in rejected[0]
    for title in ("Said once", "Said once again"):
        lines.clear()
        _retitle(root, key, title)
        assert site.rebuild("change", None) and site.index_next  # on screen; the search index follows
        assert [line for line in lines if line.startswith("REJECTED ")] == rejected
        lines.clear()
        assert site.rebuild("change", set()) and not site.index_next  # the build asked for
        assert lines and not [line for line in lines if line.startswith(("REJECTED ", "WARNING "))]
    (root / "bundles" / "also-tampered.json").write_bytes(tampered)
    lines.clear()
    assert site.rebuild("change", None)
    assert len([line for line in lines if line.startswith("REJECTED ")]) == 2  # the change after says them all
    site.store.close()


@pytest.mark.slow
def test_a_change_is_indexed_at_once_when_the_live_index_is_gone(served_project, tmp_path):
    """The previous index can only be published if it is there; else the build makes the index itself (under the
    key of what it indexes, so that a later build never takes it for the old one)."""
    root, key = served_project
    site, asked = _site(root)
    assert site.rebuild("start")
    for site_tree in (root / "output", root / ".output.prev"):
        shutil.rmtree(site_tree / "pagefind", ignore_errors=True)
    _retitle(root, key, "Indexed at once")
    assert site.rebuild("change", None) and not asked and not site.index_next
    assert site.rebuild("change", set()) and not asked  # nothing behind: nothing to do
    site.store.close()
    _assert_as_a_clean_build(root, tmp_path)


@pytest.mark.slow
def test_a_build_after_serve_stopped_before_the_index_followed_makes_it(served_project, tmp_path):
    """Stopped between a change and its search index, serve leaves the previous index live: the next `build`
    (a separate process, which answers a no-op from its inputs alone) must not take the site as up to date."""
    from site_builder.build import build

    root, key = served_project
    site, _ = _site(root)
    assert site.rebuild("start")
    _retitle(root, key, "Stopped too soon")
    assert site.rebuild("change", None) and site.index_next  # live; its index still the previous one
    site.store.close()  # Ctrl-C
    options = _build_options(root, root / "output")
    assert build(options).changed
    _assert_as_a_clean_build(root, tmp_path)
    assert not build(options).changed  # and now it is up to date


@pytest.mark.slow
def test_serve_with_the_bundles_in_the_project_root(tmp_path):
    """``serve --bundles .``: the output lies inside the bundles folder. Its own writes start no rebuild (no loop,
    not even from a log written beside the bundles), a bundle saved in a folder made while serving is built, and
    the site.toml in the root still counts."""
    from site_builder.serving import ServeOptions, serve

    shutil.copy(REAL_FILES[0], tmp_path / REAL_FILES[0].name)
    lines: list[str] = []
    log_file = tmp_path / "serve.log"

    def log(line):
        lines.append(line)
        with log_file.open("a") as f:  # as `serve > serve.log` in the served_project root would
            f.write(line + "\n")
    urls: queue.Queue = queue.Queue()
    stop = threading.Event()
    options = ServeOptions(bundles=tmp_path, output=tmp_path / "output", templates=tmp_path / "templates",
                           settings=tmp_path / "site.toml", trusted_keys=[], port=0, search=False, log=log)
    server = threading.Thread(target=serve, args=(options,), kwargs={"ready": urls.put, "stop": stop}, daemon=True)
    server.start()
    try:
        base = urls.get(timeout=60)

        def builds():
            return sum(1 for line in lines if line.startswith("[change]"))
        time.sleep(1.5)
        assert builds() == 0, lines  # idle: the start build's own writes and log lines start nothing
        (tmp_path / "more").mkdir()
        eventually(lambda: builds() >= 1)
        shutil.copy(REAL_FILES[1], tmp_path / "more" / "b.json")
        pid = json.loads(REAL_FILES[1].read_bytes())["pith_number"].rpartition(":")[2]
        eventually(lambda: get(base + f"pith/{pid}/")[0] == 200)
        (tmp_path / "site.toml").write_text('title = "Root mirror"\n')
        eventually(lambda: "<title>Root mirror</title>" in get(base)[2])
        # (the page is live a moment before its build's line is logged) No loop: the builds stop and stay stopped.
        deadline = time.monotonic() + 15
        while True:
            settled = builds()
            time.sleep(1.5)
            if builds() == settled:
                break
            assert time.monotonic() < deadline, f"rebuilds do not stop: {lines[-5:]}"
        last = [line for line in lines if line.startswith("[change]")][-1]
        assert "] 2 bundles read, 2 published, 0 rejected" in last, lines  # not the output's copies
        # The static folder is watched too, and what it may not publish is said in the terminal.
        (tmp_path / "static").mkdir()
        (tmp_path / "static" / "index.html").write_text("<p>not the home page</p>")
        (tmp_path / "static" / "CNAME").write_text("mirror.example.org\n")
        eventually(lambda: get(base + "CNAME")[2] == "mirror.example.org\n")
        # (said once the build is done, a moment after its site went live)
        eventually(lambda: any(line.startswith("WARNING static/index.html: the site makes this path itself")
                               for line in lines))
        assert "not the home page" not in get(base)[2]
        (tmp_path / "static" / "manifest.json").write_text('{"name": "mirror"}')  # a static file, not a bundle
        eventually(lambda: get(base + "manifest.json")[2] == '{"name": "mirror"}')
        assert not any("manifest.json" in line for line in lines), lines
    finally:
        stop.set()
        server.join(30)


@pytest.mark.slow
def test_the_error_banner_shows_over_the_last_good_page_in_a_browser(server):
    """Catches serve's error banner never inserted (live.js): in headless Chromium, a rejected bundle and then a
    template syntax error each put the banner over the last good page, and the next good save clears it."""
    root, _, base, port, _ = server
    home = root / "templates" / "home.html"
    good = home.read_text()
    with chromium() as browser:
        page = browser.new_page()
        page.goto(base)
        page.wait_for_timeout(300)  # (the page's event stream connects)
        banner = page.locator("#site-builder-error")
        assert banner.count() == 0

        (root / "bundles" / "broken.json").write_text('{"a": 1, "a": 2}')
        banner.wait_for(state="visible", timeout=DEADLINE * 1000)
        assert "broken.json: json_duplicate_key" in banner.inner_text()
        assert banner.get_attribute("role") == "alert"
        assert "Most recent papers" in page.inner_text("body")  # over the last good page
        (root / "bundles" / "broken.json").unlink()
        banner.wait_for(state="detached", timeout=DEADLINE * 1000)

        home.write_text(good.replace("{% block main %}", "{% block main %}{% if %}"))
        banner.wait_for(state="visible", timeout=DEADLINE * 1000)
        assert "home.html" in banner.inner_text()
        assert "Most recent papers" in page.inner_text("body")
        home.write_text(good.replace("Most recent papers", "Fixed again"))
        banner.wait_for(state="detached", timeout=DEADLINE * 1000)
        page.wait_for_function("document.body.innerText.includes('Fixed again')", timeout=DEADLINE * 1000)


# --- the request handler alone, over a plain folder (no build, no watcher: the quick loop) ----------------------


@contextlib.contextmanager
def handler_over(output: Path, base_path: str = "/", live=None):
    """serve's HTTP server over *output* as it is, under *base_path* (or *live*'s); yields its port."""
    from site_builder.serving import LiveState, ServeOptions, _make_handler, _Server

    options = ServeOptions(bundles=output / "no-bundles", output=output, templates=output / "no-templates",
                           settings=output / "site.toml", trusted_keys=[])
    httpd = _Server(("127.0.0.1", 0), _make_handler(options, live or LiveState(base_path=base_path)))
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def raw_get(port: int, path: str) -> tuple[int, str]:
    """GET *path* sent as it is written (urllib would resolve its dot segments first)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        conn.close()


@pytest.fixture
def plain_site(tmp_path):
    """A site folder, and a secret beside it that no request may reach."""
    output = tmp_path / "output"
    (output / "pith").mkdir(parents=True)
    (output / "index.html").write_text("<html><body>home</body></html>")
    (output / "404.html").write_text("<html><body>Not found here</body></html>")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.txt").write_text("private")
    (tmp_path / "key.txt").write_text("private")
    return output, secret


def _has_ipv6_loopback() -> bool:
    import socket
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_serve_listens_on_an_ipv6_address_and_names_it_in_brackets(plain_site):
    """``--host ::1`` listens on the IPv6 loopback (it failed: "Address family for hostname not supported"),
    and the address serve prints is a URL a browser takes."""
    from site_builder.serving import LiveState, ServeOptions, _make_handler, listening_server, url_host

    assert url_host("::1") == "[::1]" and url_host("127.0.0.1") == "127.0.0.1" and url_host("localhost") == "localhost"
    if not _has_ipv6_loopback():
        pytest.skip("this machine's kernel has no IPv6 loopback to listen on")
    output, _ = plain_site
    options = ServeOptions(bundles=output / "no-bundles", output=output, templates=output / "no-templates",
                           settings=output / "site.toml", trusted_keys=[])
    httpd = listening_server("::1", 0, _make_handler(options, LiveState()))
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    try:
        conn = http.client.HTTPConnection("::1", httpd.server_address[1], timeout=5)
        conn.request("GET", "/")
        response = conn.getresponse()
        assert response.status == 200 and "home" in response.read().decode()
        conn.close()
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("base_path", ["/", "/mirror/"])
def test_no_request_leads_out_of_the_output(plain_site, base_path):
    """Dot segments, quoted or not, in any letter case, never climb out of the site (http.client sends the
    path as written, as an attacker's client would)."""
    output, _ = plain_site
    with handler_over(output, base_path) as port:
        status, body = raw_get(port, base_path)
        assert status == 200 and "home" in body
        for climb in ("../key.txt", "%2e%2e/key.txt", "%2E%2E/key.txt", "pith/../../key.txt", ".%2e/secret/key.txt",
                      "..%2fkey.txt", "pith/%2e%2e/%2e%2e/secret/key.txt", "./../key.txt",
                      "%00", "index.html%00.txt"):  # (a NUL: no path the kernel takes, not a handler's traceback)
            status, body = raw_get(port, base_path + climb)
            assert status == 404 and "private" not in body and "Not found here" in body, climb


def test_a_request_target_that_is_no_url_is_a_bad_request_and_the_server_goes_on(plain_site, capsys):
    """An absolute-form target urllib cannot parse (``http://[::1/``) made the handler raise: no answer, and a
    traceback in the terminal serve writes its builds to."""
    output, _ = plain_site
    with handler_over(output) as port:
        for target in (b"http://[::1/", b"http://[/index.html"):  # (http.client refuses to send these)
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                conn.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                answer = b""
                while chunk := conn.recv(4096):
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 400 ") and answer.endswith(b"\r\n\r\nBad request\n"), target
        assert raw_get(port, "http://127.0.0.1/index.html")[0] == 200  # (the absolute form, parsed)
        assert raw_get(port, "/")[0] == 200
    assert "Traceback" not in capsys.readouterr().err


def test_a_link_or_a_pipe_in_the_output_is_never_served(plain_site):
    """The builder makes no link: one in the output was put there, and what it leads to is not the site's (any
    user of the machine may ask).  A pipe is no file either: answered at once, not waited on."""
    output, secret = plain_site
    (output / "planted").symlink_to(secret)
    (output / "planted.txt").symlink_to(secret / "key.txt")
    (output / "planted-folder").mkdir()
    (output / "planted-folder" / "index.html").symlink_to(secret / "key.txt")  # (a folder's page)
    os.mkfifo(output / "pipe.html")
    with handler_over(output) as port:
        for path in ("/planted/key.txt", "/planted/", "/planted.txt", "/planted-folder/", "/pipe.html"):
            status, body = raw_get(port, path)
            assert status == 404 and "private" not in body, path
        (output / "404.html").unlink()
        (output / "404.html").symlink_to(secret / "key.txt")  # (what every missing path is answered with)
        status, body = raw_get(port, "/no/such/page/")
        assert status == 404 and "private" not in body and "Not found" in body


def test_the_root_and_the_base_path_without_its_slash_lead_to_the_site_under_its_base_path(plain_site):
    """With ``--base-url /mirror/``, the address serve prints is under /mirror/: "/" and "/mirror" (typed by hand)
    are sent there, and any other path outside it is not found."""
    output, _ = plain_site
    with handler_over(output, "/mirror/") as port:
        for path in ("/", "/mirror"):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
            conn.close()
            assert (response.status, response.getheader("Location")) == (302, "/mirror/"), path
        assert raw_get(port, "/index.html")[0] == 404 and raw_get(port, "/mirror/")[0] == 200


@pytest.mark.parametrize("base_url", ["/my%20mirror/", "/caf\u00e9/", "https://e.example/%7Eme/caf\u00e9/"])
def test_a_base_path_with_percent_escapes_is_served_at_the_address_serve_prints(plain_site, base_url):
    """The base path is a URI's path (escaped, as the site's links are); the path a request asks for is
    compared once unescaped: "/my%20mirror/" was served nothing but 404, at the very address serve printed."""
    from site_builder.settings import SiteConfig, normalize_base_url

    output, _ = plain_site
    base_path = SiteConfig(base_url=normalize_base_url(base_url)).base_path
    assert base_path.isascii()
    with handler_over(output, base_path) as port:
        status, body = raw_get(port, base_path)
        assert status == 200 and "home" in body
        status, body = raw_get(port, base_path + "__site_builder__/live.js")  # (serve's own, under it too)
        assert status == 200 and "EventSource" in body
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/")
        response = conn.getresponse()
        response.read()
        conn.close()
        assert (response.status, response.getheader("Location")) == (302, base_path)


def test_open_pages_are_told_which_pages_changed_and_to_reload_all_past_500_or_when_none_is_named():
    from types import SimpleNamespace

    from site_builder.serving import Site

    def told(rendered, more=False):
        published = []
        live = SimpleNamespace(base_path="/m/", publish=lambda event, data: published.append((event, data)))
        Site._announce(SimpleNamespace(live=live, builds=2),
                       SimpleNamespace(rendered=rendered, removed=[], rendered_more=more))
        [(event, data)] = published
        assert event == "reload" and data["build"] == 3
        return data["all"], data["paths"]

    assert told(["pith/X/index.html", "pith/X/bundle.json", "index.html"]) == (False, ["/m/", "/m/pith/X/"])
    pages = [f"p/{n:04}/index.html" for n in range(501)]
    assert told(pages[:500]) == (False, [f"/m/p/{n:04}/" for n in range(500)])
    assert told(pages) == (True, [f"/m/p/{n:04}/" for n in range(500)])
    assert told(["pith/X/bundle.json"]) == (True, [])  # (no page named: every page may show it)
    assert told(["index.html"], more=True)[0] is True  # (the report named only some of what it wrote)


def _serve_in_thread(root: Path, lines: list, stop: threading.Event, open_browser: bool = False,
                     ready=None, settings: str = "site.toml", port: int | None = None, host: str = "127.0.0.1"):
    """``serve`` run as the command line runs it, in a thread of this process, stopped by *stop*; returns the
    thread, the port (a free one unless given) and the list its return value goes to."""
    from site_builder.serving import serve

    port = port or free_port()
    options = _serve_options(root, settings, port=port, search=False, log=lines.append, host=host)
    returned = []
    thread = threading.Thread(target=lambda: returned.append(serve(options, open_browser, ready, stop)), daemon=True)
    thread.start()
    return thread, port, returned


def _port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.slow
def test_an_edit_of_an_about_page_that_site_toml_puts_in_a_folder_is_served(served_project):
    """``about_file = "pages/about.md"``: serve watches that folder for the page, and an edit of it is live."""
    root, _ = served_project
    (root / "pages").mkdir()
    (root / "pages" / "about.md").write_text("# About\n\nFirst words.\n")
    (root / "site.toml").write_text('about_file = "pages/about.md"\n')
    lines, stop = [], threading.Event()
    thread, port, returned = _serve_in_thread(root, lines, stop)
    try:
        eventually(lambda: _up(f"http://127.0.0.1:{port}/about/"), deadline=30)
        assert "First words." in get(f"http://127.0.0.1:{port}/about/")[2]
        (root / "pages" / "about.md").write_text("# About\n\nSecond words.\n")
        eventually(lambda: "Second words." in get(f"http://127.0.0.1:{port}/about/")[2])
    finally:
        stop.set()
        thread.join(DEADLINE * 3)
    assert returned == [0]


@pytest.mark.slow
def test_a_static_folder_that_site_toml_names_while_serve_runs_is_watched(served_project):
    """site.toml edited while serve runs to name a static folder: its files are published, and a file added to it
    afterwards is too (the watcher followed the folders site.toml named when serve started)."""
    root, _ = served_project
    lines, stop = [], threading.Event()
    thread, port, returned = _serve_in_thread(root, lines, stop)
    notice = f"http://127.0.0.1:{port}/notice.txt"
    try:
        eventually(lambda: _up(f"http://127.0.0.1:{port}/"), deadline=30)
        (root / "public").mkdir()
        (root / "public" / "first.txt").write_text("first\n")
        (root / "site.toml").write_text('static_dir = "public"\n')
        eventually(lambda: get(f"http://127.0.0.1:{port}/first.txt")[0] == 200)
        (root / "public" / "notice.txt").write_text("Mirrored hourly.\n")
        eventually(lambda: get(notice)[0] == 200 and get(notice)[2] == "Mirrored hourly.\n")
    finally:
        stop.set()
        thread.join(DEADLINE * 3)
    assert returned == [0]


@pytest.mark.slow
def test_a_file_made_in_a_static_folder_before_serve_watches_it_is_published(served_project, monkeypatch):
    """A static folder that site.toml names is watched once the build that read the settings is done; a file
    made in it in between (here, just before the watch begins) makes no event of its own, so serve builds once
    more after it begins to watch a folder."""
    from site_builder import serving

    root, _ = served_project
    follow = serving.follow

    def late(observer, watcher, watches):
        public = root / "public"
        if public.is_dir() and not (public / "late.txt").exists():
            (public / "late.txt").write_text("made before the watch\n")
        return follow(observer, watcher, watches)
    monkeypatch.setattr(serving, "follow", late)
    lines, stop = [], threading.Event()
    thread, port, returned = _serve_in_thread(root, lines, stop)
    try:
        eventually(lambda: _up(f"http://127.0.0.1:{port}/"), deadline=30)
        (root / "public").mkdir()
        (root / "site.toml").write_text('static_dir = "public"\n')
        eventually(lambda: get(f"http://127.0.0.1:{port}/late.txt")[2] == "made before the watch\n")
    finally:
        stop.set()
        thread.join(DEADLINE * 3)
    assert returned == [0]


@pytest.mark.parametrize("error, reported", [
    (ConnectionResetError(), False), (BrokenPipeError(), False), (TimeoutError(), False),
    (ValueError("a bug in the handler"), True),
])
def test_a_browser_leaving_is_not_reported_and_an_error_of_the_servers_is(error, reported, capsys):
    """A tab closed or a page reloaded mid-answer breaks the connection: no traceback in the terminal for
    that, but one for anything else that goes wrong answering a request."""
    from site_builder.serving import _PreviewHandler, listening_server

    server = listening_server("127.0.0.1", 0, _PreviewHandler)
    try:
        try:
            raise error
        except Exception:
            server.handle_error(None, ("127.0.0.1", 50000))
    finally:
        server.server_close()
    assert ("Traceback" in capsys.readouterr().err) is reported


@pytest.mark.parametrize("open_browser", [False, True])
def test_serve_stopped_once_it_is_up_frees_its_port_and_opens_a_browser_only_when_asked(served_project, monkeypatch,
                                                                                        open_browser):
    from site_builder import serving

    root, _ = served_project
    opened, lines, stop = [], [], threading.Event()
    monkeypatch.setattr(serving.webbrowser, "open", opened.append)
    urls = []
    thread, port, returned = _serve_in_thread(root, lines, stop, open_browser,
                                              ready=lambda url: (urls.append(url), stop.set()))
    thread.join(DEADLINE * 3)
    assert returned == [0] and lines[-1] == "stopped"
    assert opened == (urls if open_browser else []) and urls == [f"http://127.0.0.1:{port}/"]
    assert _port_is_free(port)
    assert not [t for t in threading.enumerate() if "serve_forever" in t.name]  # the server's thread is done


def test_serve_on_every_address_names_and_opens_one_a_browser_takes(served_project, monkeypatch):
    """``--host 0.0.0.0`` listens on every address; http://0.0.0.0/ is no page to open (some browsers refuse
    it), so the address said and opened is this machine's own, and the line says where else it listens."""
    from site_builder import serving

    root, _ = served_project
    opened, lines, stop, urls = [], [], threading.Event(), []
    monkeypatch.setattr(serving.webbrowser, "open", opened.append)
    thread, port, returned = _serve_in_thread(root, lines, stop, True, host="0.0.0.0",
                                              ready=lambda url: (urls.append(url), stop.set()))
    thread.join(DEADLINE * 3)
    assert returned == [0] and urls == opened == [f"http://127.0.0.1:{port}/"]
    assert any(line.startswith(f"serving {root / 'output'} at http://127.0.0.1:{port}/ and every address of this "
                               f"machine (0.0.0.0) (Ctrl-C to stop)") for line in lines), lines


def test_serve_links_the_second_tree_giving_way_to_a_change_or_to_ctrl_c(served_project, monkeypatch):
    """serve links the second tree while the user reads, holding the build lock and asking all along whether to
    stop: not while nothing happens, but at once for a change saved, which is then built, or for Ctrl-C."""
    from site_builder import serving

    root, key = served_project
    asked, gave_way = [], threading.Event()

    def linking(site, cancelled):  # (as the real one does: the lock held, asked between files)
        with site.build_lock:
            asked.append(cancelled)
            deadline = time.monotonic() + DEADLINE
            while time.monotonic() < deadline:
                if cancelled():
                    gave_way.set()
                    return
                time.sleep(0.02)

    monkeypatch.setattr(serving.Site, "prepare_spare_tree", linking)
    lines, stop = [], threading.Event()
    thread, _, returned = _serve_in_thread(root, lines, stop)
    eventually(lambda: asked)
    time.sleep(0.3)
    assert not gave_way.is_set()  # (nothing changed)
    _retitle(root, key, "Saved while linking")
    assert gave_way.wait(DEADLINE)
    eventually(lambda: any(line.startswith("[change]") for line in lines))  # (built once the linking gave way)
    stop.set()
    assert asked[0]() is True
    thread.join(DEADLINE)
    assert returned == [0]


def files_and_sockets() -> set[str]:
    """This process's descriptors of files and sockets (the cache, the build lock, the server's socket), each
    with what it is open on (a number used again for another file is another descriptor): not its pipes and
    inotify instances, since the watch library keeps one of those, with its wake-up pipe, for the whole process,
    and lets it go on a schedule of its own."""
    def target(fd: str) -> str:
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # (closed since it was listed)
            return "pipe:"
    return {f"{fd} {opened}" for fd in open_descriptors()
            if not (opened := target(fd)).startswith(("pipe:", "anon_inode:"))}


def test_serve_stops_with_a_page_open_and_the_next_one_has_its_port_at_once(served_project):
    """Ctrl-C while a page listens for reloads stops serve without waiting for the browser to close the page;
    and serve started again at once gets the same port, which the last one's closed connections leave waiting
    in the kernel for a minute.  A serve stopped leaves no thread, file or child process of its own behind."""
    root, _ = served_project
    lines, stop, up = [], threading.Event(), threading.Event()
    thread, port, returned = _serve_in_thread(root, lines, stop, ready=lambda url: up.set())
    assert up.wait(DEADLINE * 3)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=DEADLINE) as home:
        home.read()  # (a connection the server closes first: it leaves the port waiting in the kernel)
    page = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE)
    page.request("GET", "/__site_builder__/events")
    assert page.getresponse().readline() == b"event: status\n"
    stop.set()
    thread.join(DEADLINE)
    assert returned == [0]  # (the page still open)
    page.close()
    start_context("forkserver")  # (the server serve starts its helpers from: one a process, kept for the next)
    multiprocessing.forkserver.ensure_running()
    # (what the first serve's request threads and sockets still held may end meanwhile: nothing new may stay)
    threads, descriptors = set(threading.enumerate()), files_and_sockets()
    children = set(multiprocessing.active_children())  # (another test's, on this test process: not serve's)
    lines, stop = [], threading.Event()
    thread, _, returned = _serve_in_thread(root, lines, stop, port=port, ready=lambda url: stop.set())
    thread.join(DEADLINE * 3)
    assert returned == [0] and not [line for line in lines if line.startswith("ERROR")], lines  # (built: unlocked)
    assert set(threading.enumerate()) <= threads
    assert files_and_sockets() <= descriptors  # (closed by serve itself, not left to the collector)
    assert set(multiprocessing.active_children()) <= children


def test_ctrl_c_during_the_first_build_stops_serve_at_once(served_project, monkeypatch):
    """Ctrl-C may come before the server thread runs: stopping then must not wait for a server that never
    started.  What the interrupted build had written (its staging folder) is removed as serve stops."""
    from site_builder import serving

    root, _ = served_project
    staging = root / ".output.staging-99999"

    def interrupted(site, reason, changed=None):
        (staging / "pith").mkdir(parents=True)
        (staging / "index.html").write_text("half a site")
        raise KeyboardInterrupt

    monkeypatch.setattr(serving.Site, "rebuild", interrupted)
    lines = []
    thread, port, returned = _serve_in_thread(root, lines, threading.Event())
    thread.join(DEADLINE)
    assert returned == [0] and lines == ["stopped"]
    assert _port_is_free(port)
    eventually(lambda: not staging.exists(), deadline=DEADLINE)  # (by a process of its own: a large tree)


def test_a_first_build_that_fails_prepares_no_second_tree(served_project):
    """The tree incremental builds update in place is linked after a first build that worked; after one that
    failed (here a broken site.toml) serve says the error and waits for the fix, with nothing else to say."""
    root, _ = served_project
    (root / "broken.toml").write_text("title = \n")
    lines, stop = [], threading.Event()
    thread, _, returned = _serve_in_thread(root, lines, stop, settings="broken.toml",
                                           ready=lambda url: threading.Timer(0.5, stop.set).start())
    thread.join(DEADLINE * 3)
    assert returned == [0]
    assert any("broken.toml" in line for line in lines) and not [line for line in lines if "second tree" in line]


def test_a_rebuild_that_fails_says_so_and_keeps_the_last_good_site(served_project):
    root, _ = served_project
    lines = []
    site, _ = _site(root, search=False, log=lines.append)
    assert site.rebuild("start")
    page = (root / "output" / "index.html").read_bytes()
    (root / "site.toml").write_text('title = "unterminated\n')
    assert not site.rebuild("change", None)
    assert lines[-1].startswith("ERROR ") and "site.toml" in lines[-1]
    assert lines[-1].endswith("(serving the last good site)") and "site.toml" in site.live.error
    assert (root / "output" / "index.html").read_bytes() == page
    site.store.close()


def test_a_rebuild_that_fails_for_an_unforeseen_reason_says_so_and_serves_on(served_project, monkeypatch):
    """A bug in the builder (any exception) must not stop the server or pass in silence: serve says what it was,
    with where it came from, and keeps the last good site."""
    from site_builder import serving

    root, _ = served_project
    lines = []
    site, _ = _site(root, search=False, log=lines.append)
    assert site.rebuild("start")
    page = (root / "output" / "index.html").read_bytes()

    def broken(options):
        raise RuntimeError("a bug of the builder's")
    monkeypatch.setattr(serving, "build", broken)
    assert not site.rebuild("change", None)
    assert lines[-1] == "ERROR build failed: RuntimeError: a bug of the builder's (serving the last good site)"
    assert site.live.error.startswith("build failed: RuntimeError: a bug of the builder's\nTraceback")
    assert (root / "output" / "index.html").read_bytes() == page
    site.store.close()


@pytest.mark.slow
def test_serve_started_on_a_site_that_is_behind_is_up_before_its_search_index(served_project, tmp_path):
    """The first build of a serve session is a change like any other: with records changed since the site was
    built, it is up with the previous search index, and the build that follows makes the index."""
    root, key = served_project
    site, _ = _site(root)
    assert site.rebuild("start")
    indexed = (root / "output" / "pagefind" / "pagefind-entry.json").read_bytes()
    site.store.close()  # serve stopped
    page = _retitle(root, key, "Changed while serve was stopped")
    site, asked = _site(root)
    assert site.rebuild("start") and site.index_next and asked == [True]
    assert "Changed while serve was stopped" in page.read_text()
    assert (root / "output" / "pagefind" / "pagefind-entry.json").read_bytes() == indexed
    assert site.rebuild("change", set()) and not site.index_next
    site.store.close()
    _assert_as_a_clean_build(root, tmp_path)


def test_lookups_ahead_start_once_a_cache_is_open_and_once_per_change(served_project):
    """serve starts the lookups of the mirrored bundles when a change is first seen: not before the first build
    opened the cache, and not again for the same change's later events (the first lookups would be lost)."""
    from site_builder.serving import LiveState

    root, key = served_project
    live = LiveState()
    events = queue.Queue()
    live.clients.append(events)
    site, _ = _site(root, search=False, live=live)
    site.look_ahead()
    assert site.ahead is None
    assert site.rebuild("start")
    site.look_ahead()
    ahead = site.ahead
    site.look_ahead()
    assert ahead is not None and site.ahead is ahead
    _retitle(root, key, "Looked up ahead")
    assert site.rebuild("change", None) and site.ahead is None  # taken over by the build
    assert [data["build"] for event, data in list(events.queue) if event == "reload"] == [1, 2]
    site.store.close()


def test_serve_says_when_the_second_tree_is_ready_and_only_then(served_project):
    root, _ = served_project
    lines = []
    site, _ = _site(root, search=False, log=lines.append)
    assert site.rebuild("start")
    lines.clear()
    site.prepare_spare_tree(lambda: True)  # a change came first: given up
    assert lines == [] and not (root / ".output.prev").exists()
    site.prepare_spare_tree(lambda: False)
    site.prepare_spare_tree(lambda: False)  # there is one already
    assert len(lines) == 1 and lines[0].startswith("ready for fast rebuilds (linked a second tree in ")
    assert (root / ".output.prev" / "index.html").is_file()
    site.store.close()


def test_a_change_saved_while_the_second_tree_is_linked_makes_the_linking_give_way(served_project):
    """Linking the second tree holds the build lock for seconds on a large mirror; a change saved meanwhile asks
    it to stop (serve's ``give_way`` reads ``rebuild_waiting``), so the change is built at once, not after it."""
    root, key = served_project
    lines = []
    site, _ = _site(root, search=False, log=lines.append)
    assert site.rebuild("start")
    linking, answers = threading.Event(), []

    def cancelled() -> bool:  # (the linking asks before its first file: here, once a rebuild waits for the lock)
        linking.set()
        answers.append(answers[-1] if answers else site.rebuild_waiting.wait(timeout=DEADLINE))
        return answers[-1]

    linker = threading.Thread(target=site.prepare_spare_tree, args=(cancelled,))
    linker.start()
    assert linking.wait(timeout=DEADLINE)
    page = _retitle(root, key, "Saved while linking")
    assert site.rebuild("change", None)
    linker.join(timeout=DEADLINE * 3)
    assert answers[0] is True and not any(line.startswith("ready for fast rebuilds") for line in lines)
    assert b"Saved while linking" in page.read_bytes()
    site.store.close()


def test_a_page_closed_gives_up_its_reload_events(plain_site):
    """Each open page has a queue of events; a page closed (a tab, a reload) gives its queue up, so that hours of
    edits do not feed ever more queues of pages long gone."""
    from site_builder.serving import LiveState

    output, _ = plain_site
    live = LiveState()
    with handler_over(output, live=live) as port:
        page = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE)
        page.request("GET", "/__site_builder__/events")
        assert page.getresponse().readline() == b"event: status\n" and len(live.clients) == 1
        page.close()

        def given_up() -> bool:
            live.publish("reload", {"all": True, "paths": [], "build": 2})  # (its writes fail once it is closed)
            return live.clients == []
        eventually(given_up)


@pytest.mark.slow
def test_an_open_page_reloads_when_it_changed_or_all_did_and_not_otherwise(plain_site):
    """In Chromium, serve's pages reload on what the server tells them: a page the build changed reloads (also
    one opened as its folder's ``index.html``), one it did not change stays as the reader left it, and every
    page reloads when the server says all changed (a template every page uses, past 500 pages)."""
    from site_builder.serving import LiveState

    output, _ = plain_site
    (output / "pith" / "X").mkdir()
    (output / "pith" / "X" / "index.html").write_text("<html><body>record X</body></html>")
    live = LiveState()
    with handler_over(output, live=live) as port, chromium() as browser:
        base = f"http://127.0.0.1:{port}/"
        pages = {path: browser.new_page() for path in ("pith/X/", "pith/X/index.html", "")}
        for path, page in pages.items():
            page.goto(base + path)

        def told(data: dict, expected: set[str]) -> set[str]:
            """The pages reloaded when the server publishes *data* (waited for until *expected* did)."""
            for page in pages.values():
                page.evaluate("window.__as_left = 1")

            counts = []

            def listening() -> bool:
                """Each page listens: as many listeners as pages, three times running, none of them a page gone
                by a reload (the second write to one fails, and its listener goes)."""
                live.publish("status", {"error": None})
                counts.append(len(live.clients))
                time.sleep(0.05)
                return counts[-3:] == [len(pages)] * 3
            eventually(listening)
            live.publish("reload", data)

            def reloaded() -> set[str]:
                found = set()
                for path, page in pages.items():
                    try:
                        if page.evaluate("window.__as_left") is None:
                            found.add(path)
                    except Exception:  # (in the middle of reloading)
                        pass
                return found
            eventually(lambda: reloaded() >= expected)
            time.sleep(0.5)  # (a page that should not reload has had the time to)
            for page in pages.values():
                page.wait_for_load_state("load")
            return reloaded()
        for data, expected in (({"all": False, "paths": ["/pith/X/"], "build": 2}, {"pith/X/", "pith/X/index.html"}),
                               ({"all": False, "paths": ["/pith/Y/", "/"], "build": 3}, {""}),
                               ({"all": False, "paths": ["/pith/Y/"], "build": 4}, set()),
                               ({"all": True, "paths": [], "build": 5}, set(pages))):
            assert told(data, expected) == expected, data


def test_the_live_reload_tag_keeps_a_quote_of_the_base_path_inside_its_attributes():
    """The base path comes from the command line or site.toml; the settings refuse a double quote in it, and
    the tag escapes one all the same."""
    from site_builder.serving import live_reload_tag

    tag = live_reload_tag("/a\"b'c&d/").decode()
    assert tag == ('<script src="/a&quot;b&#x27;c&amp;d/__site_builder__/live.js" '
                   'data-events="/a&quot;b&#x27;c&amp;d/__site_builder__/events"></script>')


def test_a_second_tree_that_cannot_be_linked_is_said_and_serve_goes_on(served_project, monkeypatch):
    """Linking the second tree only saves the next change time: a failure there (a full disk) is said, and the
    site is served and rebuilt as before."""
    from site_builder import serving

    def no_room(options, cancelled):
        raise OSError(28, "No space left on device")

    root, key = served_project
    lines = []
    site, _ = _site(root, search=False, log=lines.append)
    assert site.rebuild("start")
    monkeypatch.setattr(serving, "prepare_spare_tree", no_room)
    site.prepare_spare_tree(lambda: False)
    assert lines[-1] == "could not prepare the second tree: OSError: [Errno 28] No space left on device"
    page = _retitle(root, key, "Built all the same")
    assert site.rebuild("change", None) and "Built all the same" in page.read_text()
    site.store.close()


def test_every_page_served_carries_the_live_reload_script_before_its_body_ends(plain_site):
    """Pages get the script that listens for changes: before ``</body>``, or at the end of a page (a template of
    the user's) that has none; other files are served as they are."""
    from site_builder.serving import live_reload_tag

    output, _ = plain_site
    (output / "bare.html").write_text("<p>no body end")
    (output / "data.json").write_text('{"a": "</body>"}')
    (output / "twice.html").write_text("<body>a</body><body>b</body>")
    tag = live_reload_tag("/").decode()
    with handler_over(output) as port:
        assert raw_get(port, "/")[1] == f"<html><body>home{tag}</body></html>"
        assert raw_get(port, "/bare.html")[1] == f"<p>no body end{tag}"
        assert raw_get(port, "/twice.html")[1] == f"<body>a{tag}</body><body>b</body>"  # (one script a page)
        assert raw_get(port, "/__site_builder__/live.js")[0] == 200
        assert raw_get(port, "/data.json")[1] == '{"a": "</body>"}'
        (output / "feed.xml").write_text("<feed><title>x</title></feed>")  # (a feed reader gets the feed as built)
        assert raw_get(port, "/feed.xml")[1] == "<feed><title>x</title></feed>"
        # the site's 404 page too: a page not built yet reloads once it is
        assert raw_get(port, "/pith/NOTYETBUILT/") == (404, f"<html><body>Not found here{tag}</body></html>")


def test_a_404_html_that_is_a_folder_is_not_the_not_found_page(plain_site):
    """The builder writes ``404.html`` as a file: a folder of that name, with an ``index.html`` put in it, is not
    the site's; the server's own page answers instead."""
    output, _ = plain_site
    (output / "404.html").unlink()
    (output / "404.html").mkdir()
    (output / "404.html" / "index.html").write_text("<html><body>planted</body></html>")
    with handler_over(output) as port:
        status, body = raw_get(port, "/missing")
    assert status == 404 and "planted" not in body and "Not found" in body


def test_head_answers_with_the_headers_alone_and_the_connection_goes_on(plain_site):
    """``curl -I`` and link checkers ask with HEAD: the answer is GET's status and headers without its body.  A
    body sent anyway would be read as the next answer on the same connection (HTTP/1.1 keeps it open)."""
    output, _ = plain_site
    with handler_over(output) as port:
        page = raw_get(port, "/")[1].encode()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            for path, status in (("/", 200), ("/no/such/page/", 404)):
                conn.request("HEAD", path)
                response = conn.getresponse()
                assert response.status == status and response.read() == b"", path
                if status == 200:
                    assert response.getheader("Content-Length") == str(len(page))
            conn.request("GET", "/")
            response = conn.getresponse()
            assert (response.status, response.read()) == (200, page)
        finally:
            conn.close()


def test_no_answer_is_kept_by_the_browser(plain_site):
    """A page, a bundle's JSON, a stylesheet and a 404 each change with the next build: an answer the browser
    kept would show the old one when the live-reload script reloads the page (``Cache-Control: no-store``)."""
    output, _ = plain_site
    (output / "assets").mkdir(exist_ok=True)
    (output / "assets" / "site.css").write_text("body {}")
    (output / "data.json").write_text("{}")
    with handler_over(output) as port:
        for path in ("/", "/data.json", "/assets/site.css", "/no/such/page/"):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                conn.request("GET", path)
                response = conn.getresponse()
                response.read()
                assert response.getheader("Cache-Control") == "no-store", path
            finally:
                conn.close()


def test_the_sites_other_files_are_served_with_their_types(plain_site):
    """A static file of the user's (a logo, a paper's PDF) is served with its type, as a browser needs to show
    it; a file of no known type as bytes to download."""
    output, _ = plain_site
    (output / "assets").mkdir()
    for name in ("logo.png", "paper.pdf", "data.unknownsuffix"):
        (output / "assets" / name).write_bytes(b"\x89bytes")
    with handler_over(output) as port:
        for name, ctype in (("logo.png", "image/png"), ("paper.pdf", "application/pdf"),
                            ("data.unknownsuffix", "application/octet-stream")):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", f"/assets/{name}")
            response = conn.getresponse()
            assert (response.status, response.getheader("Content-Type"), response.read()) == (200, ctype, b"\x89bytes")
            conn.close()


def test_a_path_that_goes_on_past_a_file_is_not_found(plain_site):
    """``/index.html/more`` names nothing (as on GitHub Pages): not the file before it."""
    output, _ = plain_site
    (output / "pith" / "bundle.json").write_text("{}")
    with handler_over(output) as port:
        for path in ("/index.html/more", "/index.html/", "/pith/bundle.json/x/index.html"):
            status, body = raw_get(port, path)
            assert status == 404 and "Not found here" in body, path


def test_serving_pages_for_a_long_session_keeps_no_file_open(plain_site):
    """Each request opens the folders on its path and the file it answers with; all are closed again, or a
    long serve session would run out of file descriptors (1,024 by default) and answer nothing more."""
    output, _ = plain_site
    (output / "pith" / "index.html").write_text("<body>list</body>")
    open_files = Path("/proc/self/fd")
    with handler_over(output) as port:
        raw_get(port, "/pith/")
        before = len(list(open_files.iterdir()))
        for _ in range(100):
            for path in ("/", "/pith/", "/pith", "/404.html", "/no/such/page/"):
                raw_get(port, path)
        assert len(list(open_files.iterdir())) < before + 20


def test_serve_names_where_it_serves_and_the_first_three_folders_it_watches(served_project):
    root, _ = served_project
    for folders in (3, 4):
        if folders == 4:
            (root / "static").mkdir()  # (watched too: its files are copied into the site)
        lines, stop, urls = [], threading.Event(), []
        thread, _, returned = _serve_in_thread(root, lines, stop, ready=lambda url: (urls.append(url), stop.set()))
        thread.join(DEADLINE * 3)
        assert returned == [0]
        watched = f"{root}, {root / 'bundles'}, {root / 'static' if folders == 4 else root / 'templates'}"
        assert f"serving {root / 'output'} at {urls[0]} (Ctrl-C to stop); watching {watched}" + (
            " and more" if folders == 4 else "") in lines


@pytest.mark.parametrize("broken, what", [("{% if %}", "Expected an expression, got 'end of statement block'"),
                                          ("{{ recnet|length }}", "'recnet' is undefined")])
def test_a_broken_template_is_named_by_its_path_and_line(served_project, broken, what):
    """A syntax error, or a name that is not defined (known only as the page renders), is said with the
    template's file and line, in the terminal and in the browser's banner."""
    from site_builder.serving import LiveState

    root, _ = served_project
    lines = []
    live = LiveState()
    site, _ = _site(root, search=False, live=live, log=lines.append)
    home = root / "templates" / "home.html"
    text = home.read_text().replace("{% block main %}", "{% block main %}\n" + broken)
    home.write_text(text)
    line = text[:text.index(broken)].count("\n") + 1
    assert not site.rebuild("start")
    assert lines[-1] == f"ERROR template error: {home}:{line}: {what} (serving the last good site)"
    assert live.error == f"template error: {home}:{line}: {what}"
    site.store.close()


def test_the_second_tree_is_wanted_after_serves_first_build_and_after_one_that_wrote_everything(served_project):
    """The tree the next change updates in place may be missing after serve's first build, whatever that build
    wrote (the site may have been built without one), and after a build that rendered nearly every file anew."""
    root, key = served_project
    site, _ = _site(root, search=False)
    assert site.rebuild("start") and site.twin_wanted
    site.twin_wanted = False  # (serve's loop takes the wish when it starts linking)
    assert site.rebuild("change", set()) and not site.twin_wanted  # nothing to write
    site.store.close()
    site, _ = _site(root, search=False)  # serve started again on the site it built
    assert site.rebuild("start") and site.twin_wanted
    site.twin_wanted = False
    _retitle(root, key, "One record changed")
    assert site.rebuild("change", None) and not site.twin_wanted  # the other records' files reused
    (root / "templates" / "badge.svg").write_text((ROOT / "templates" / "badge.svg").read_text() + "<!-- x -->")
    assert site.rebuild("change", None) and not site.twin_wanted  # the records' badges anew, the rest kept
    assert all(b"<!-- x -->" in badge.read_bytes() for badge in (root / "output" / "pith").glob("*/badge.svg"))
    (root / "site.toml").write_text('title = "Another title"\n')
    assert site.rebuild("change", None) and site.twin_wanted  # the settings, which every page shows: all new
    site.store.close()
