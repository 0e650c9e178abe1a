"""The build cache is saved by a detached process once the site is live; the next build waits for that save,
and nothing the save does changes the output after ``build`` returns."""

import fcntl
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from site_builder.build import build
from site_builder.cache import BuildCache
from site_builder.cache_folder import SAVE_FAILED
from site_builder.cache_key import user_cache_key
from site_builder.incremental import IncrementalStore
from site_builder.keys import load_trust_set
from site_builder.options import ServeSession
from site_builder.settings import SiteConfig
from site_builder.stages.remember import SAVE_STOPPED

from conftest import ROOT
from conftest import (FailingDisk, both_keys, cache_document, document_tag, edit_every_template,
                      exclusive_lock_held, opts, plant_document, run_unprivileged, tree, verified, write_lock_held)

from generate import benchmark_key, make_bundle  # noqa: E402


def cache_dir(project):
    return project / ".site-builder-cache" / "site"


def test_a_build_leaves_its_cache_and_compiled_templates_for_the_next(project):
    """The next separate build verifies and renders only what changed, and no file of the cache is a pickle."""
    trust = both_keys()
    build(opts(project, project / "site", trust))
    assert list((cache_dir(project) / "templates").glob("*.jbc"))  # compiled templates, each tagged
    assert not [p for p in cache_dir(project).rglob("*") if p.suffix in (".pickle", ".cache")]

    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=4))
    report = build(opts(project, project / "site", trust))
    assert report.files_written < report.files_reused
    site_files = [p for p in (project / "site").rglob("*") if p.is_file()]
    assert report.files_written + report.files_reused == len(site_files)  # each file counted once
    assert report.timings["verify"] < 5
    build(opts(project, project / "clean", trust, use_cache=False))
    assert tree(project / "site") == tree(project / "clean")


@pytest.mark.slow
def test_cache_waits_for_a_background_saver(tmp_path):
    """A build opening the cache while the previous build's saver holds its lock reads what the saver wrote."""
    path = tmp_path / "cache" / "cache.sqlite"
    BuildCache(path, key=user_cache_key()).close()
    saver = textwrap.dedent(f"""
        import fcntl, os, sqlite3, sys, time
        from site_builder.cache_database import cache_context
        from site_builder.cache_key import user_cache_key
        fd = os.open({str(path.parent / "cache.lock")!r}, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("locked", flush=True)
        time.sleep(0.5)
        data = b'{{"late.json": ["sig", "abc"]}}'
        tag = user_cache_key().bound_to(cache_context()).tag("document", "files", data)
        db = sqlite3.connect({str(path)!r}, isolation_level=None)
        db.execute("INSERT INTO documents VALUES ('files', ?, ?)", (data, tag))
        db.close()
    """)
    with subprocess.Popen([sys.executable, "-c", saver], stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout.readline().strip() == "locked"
            cache = BuildCache(path, key=user_cache_key())
            assert cache.file_sha("late.json", "sig") == "abc"
            cache.close()
        finally:
            proc.wait(10)


def _key_files(project):
    """The key files a command-line build of *project* trusts: the resolver's, and the generated bundles'."""
    return [ROOT / "site_builder" / "data" / "pith-signing-key.json", benchmark_key().write(project / "bench-key.json")]


def _wait_for_saver(project):
    fd = os.open(cache_dir(project) / "cache.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the detached saver finishes and lets go
    finally:
        os.close(fd)


def _cli_line(project, out, *args):
    r = subprocess.run([sys.executable, "-m", "site_builder", "build", "--bundles", project / "bundles",
                        "--output", out, "--no-search", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_command_line_builds_save_in_the_background_and_stay_exact(project):
    """Two `build` runs back to back: the second waits for the first one's saver and reuses its cache."""
    first = _cli_line(project, project / "site")
    (project / "bundles" / "gen3.json").write_bytes(make_bundle(3, variant=2))
    second = _cli_line(project, project / "site")
    pages = lambda line: int(line.split(" pages written")[0].rsplit(", ", 1)[1])  # noqa: E731
    assert pages(second) < pages(first) / 2  # a cache read before the saver finished would re-render everything
    _cli_line(project, project / "clean", "--no-cache")
    assert tree(project / "site") == tree(project / "clean")
    third = subprocess.run([sys.executable, "-m", "site_builder", "build", "--bundles", project / "bundles",
                            "--output", project / "site", "--no-search"], capture_output=True, text=True, timeout=300)
    assert "output is up to date" in third.stderr  # the saver's cache answered the no-op check


def _statuses(root):
    return {str(p.relative_to(root)): p.stat().st_ctime_ns for p in root.rglob("*") if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("flags", [(), ("--no-twin",)])
def test_the_site_is_final_when_build_returns(project, flags):
    """Nothing a build started changes a file of the output after ``build`` returns: a deploy step archives the
    site at once, and tar fails on a file whose status changes while it reads it.  Hard links change a file's
    status (ctime) as they are made and removed, so no twin is linked in the background (the command line links
    it during a build that writes every file afresh), and a retired tree that may share files with the site is
    deleted before the build returns.  Checked after a full build (with its twin), two in-place rebuilds, a
    template edit (a fresh site and its twin; the old site and the old twin are deleted after the build) and the
    first change after it (in place); and with ``--no-twin``, where the first rebuild after each of those links a
    tree from the live one (the old twin, from before the edit, shares nothing with it and is deleted after the
    build): every status is unchanged once the saver and every deletion are done."""
    site = project / "site"
    edits = [lambda: None,
             lambda: (project / "bundles" / "gen3.json").write_bytes(make_bundle(3, variant=2)),
             lambda: (project / "bundles" / "gen4.json").write_bytes(make_bundle(4, variant=2)),
             lambda: edit_every_template(project),
             lambda: (project / "bundles" / "gen5.json").write_bytes(make_bundle(5, variant=2))]
    for edit in edits:
        edit()
        _cli_line(project, site, "--templates", project / "templates", *flags)
        at_return = _statuses(site)
        assert not list(project.glob(".site.staging-*"))
        subprocess.run(["tar", "--hard-dereference", "-C", site, "-cf", project / "site.tar", "."], check=True)
        _wait_for_saver(project)
        deadline = time.monotonic() + 30
        while list(project.glob(".site.old-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _statuses(site) == at_return
    _cli_line(project, project / "clean", "--no-cache", "--templates", project / "templates")
    assert tree(site) == tree(project / "clean")


@pytest.mark.slow
def test_the_build_waits_only_for_deletions_that_could_change_the_site(project, monkeypatch):
    """A retired tree's deletion is waited for only if the new site may share files with it: not when the site
    was written afresh (a template edit renders every page), nor when the retired tree has no unit (with its
    key) in common with the live site the new one took its unchanged files from."""
    from site_builder.stages import publish as publish_stage
    from site_builder import writing

    monkeypatch.setattr(writing, "_DELETER", "import time; time.sleep(3)\n" + writing._DELETER)
    trust, site, twin = both_keys(), project / "site", project / ".site.prev"

    def being_deleted():
        return list(project.glob(".site.old-*"))

    def edit(*numbers, variant):
        for i in numbers:
            (project / "bundles" / f"gen{i}.json").write_bytes(make_bundle(i, variant=variant))

    build(opts(project, site, trust))
    edit(3, variant=2)
    build(opts(project, site, trust))  # links the unchanged files from the live site; the old site is the twin
    assert not being_deleted()
    edit(*range(6), variant=3)
    with monkeypatch.context() as m:  # a fresh tree, as when nearly every file changes
        m.setattr(publish_stage, "IN_PLACE_LIMIT", 0.3)
        prev = twin.stat().st_ino
        build(opts(project, site, trust))  # the real records' files are linked from the site, which shares them
    assert site.stat().st_ino != prev and not being_deleted()  # with the twin: retired, and waited for
    edit_every_template(project)
    build(opts(project, site, trust))  # every page new: the twin is left to its deleter
    assert len(being_deleted()) == 1
    deadline = time.monotonic() + 30
    while being_deleted() and time.monotonic() < deadline:
        time.sleep(0.05)
    edit(0, variant=4)
    prev = twin.stat().st_ino
    build(opts(project, site, trust))  # the twin (before the template edit) has nothing in common with the site
    assert site.stat().st_ino != prev and len(being_deleted()) == 1
    build(opts(project, project / "clean", trust, use_cache=False))
    assert tree(site) == tree(project / "clean")


def _plant_rows(project, html: bytes, made_up_tag: str | None = None) -> int:
    """Every stored list row replaced by *html*, each part tagged with this user's key (or *made_up_tag*)."""
    from site_builder.cache_database import cache_context
    key = user_cache_key().bound_to(cache_context())
    db = sqlite3.connect(cache_dir(project) / "cache.sqlite")
    planted = 0
    for name, in db.execute("SELECT name FROM documents WHERE name LIKE 'rows/%'").fetchall():
        doc = cache_document(db, name)[0]
        doc["rows"] = {digest: html.decode() for digest in doc["rows"]}
        plant_document(db, name, doc, made_up_tag or document_tag(key, name, doc))
        planted += len(doc["rows"])
    db.commit()
    db.close()
    return planted


def test_list_rows_come_from_the_cache_only_under_the_same_templates(project):
    """A separate build reuses the list rows the last build rendered (a new record shifts ~100 rows per
    listing page it joins), also after an edit of a template the rows do not use, and renders them again once
    their template, a setting or a key changed."""
    trust = both_keys()
    out = project / "site"
    build(opts(project, out, trust))
    assert _plant_rows(project, b"<li>row from the cache</li>\n") == 10
    (project / "bundles" / "gen50.json").write_bytes(make_bundle(50))  # page 1 of "All papers" changes
    build(opts(project, out, trust))
    assert "row from the cache" in (out / "papers" / "index.html").read_text()

    (project / "templates" / "listing.html").write_text((ROOT / "templates" / "listing.html").read_text() + "\n")
    build(opts(project, out, trust))  # (the list pages render again, from the rows kept)
    assert "row from the cache" in (out / "papers" / "index.html").read_text()

    row_template = ROOT / "templates" / "_paper_row.html"
    (project / "templates" / "_paper_row.html").write_text(row_template.read_text().replace("<li", "<li data-x", 1))
    build(opts(project, out, trust))
    assert "row from the cache" not in (out / "papers" / "index.html").read_text()
    assert "data-x" in (out / "papers" / "index.html").read_text()
    build(opts(project, project / "clean", trust, use_cache=False))
    assert tree(out) == tree(project / "clean")

    # The rows rendered under the edited templates are the ones kept: the build after reuses them again.
    assert _plant_rows(project, b"<li>row kept since the edit</li>\n") == 11
    (project / "bundles" / "gen51.json").write_bytes(make_bundle(51))
    build(opts(project, out, trust))
    assert "row kept since the edit" in (out / "papers" / "index.html").read_text()


def test_the_cache_keeps_the_list_rows_of_the_records_shown_alone(project):
    """A removed record's list row is not kept: the rows stored would otherwise grow with every record a
    mirror ever showed."""
    trust = both_keys()
    out = project / "site"
    build(opts(project, out, trust))
    assert _plant_rows(project, b"<li>kept</li>\n") == 10
    removed = sorted((project / "bundles").glob("*.json"))[0]
    removed.unlink()
    build(opts(project, out, trust))
    assert _plant_rows(project, b"<li>kept</li>\n") == 9


def test_a_planted_list_row_is_never_shown(project):
    """A row is HTML that list pages show as it is: one whose tag this user's builder did not make is rendered
    again from the verified record."""
    trust = both_keys()
    out = project / "site"
    build(opts(project, out, trust))
    assert _plant_rows(project, b"<li><script>alert(1)</script></li>\n", made_up_tag="0" * 64)
    (project / "bundles" / "gen50.json").write_bytes(make_bundle(50))
    build(opts(project, out, trust))
    assert "<script>alert(1)" not in (out / "papers" / "index.html").read_text()
    build(opts(project, project / "clean", trust, use_cache=False))
    assert tree(out) == tree(project / "clean")


def test_a_one_shot_build_leaves_its_objects_only_where_the_caller_asked(project):
    """The command line ends its process without freeing a build's million objects one by one: the build leaves
    them in the list it is handed, and keeps no reference of its own (serve and tests build again and again)."""
    from site_builder.stages import remember

    held: list = []
    build(opts(project, project / "site", both_keys(), one_shot=True, left_for_exit=held))
    assert held
    build(opts(project, project / "other", both_keys(), one_shot=True))
    assert not [name for name, value in vars(remember).items() if isinstance(value, list) and value]


# A one-shot build of the project (argv[1], the trusted keys after it) in a process of its own: only a process
# running no other thread forks the saver (a test process that ran ``serve`` keeps its file watcher's thread).
# The scripts below put their own lines before and after it.
ONE_SHOT_IMPORTS = """
import json, os, sys, threading, time
from pathlib import Path
from site_builder.build import BuildOptions, build
from site_builder.cache import BuildCache
from site_builder.keys import load_trust_set
from site_builder.options import BuildPolicy
project, keys = Path(sys.argv[1]), [Path(k) for k in sys.argv[2:]]
"""
ONE_SHOT_BUILD = """
report = build(BuildOptions(bundles=project / "bundles", output=project / "site", trust=load_trust_set(keys),
                            templates=project / "templates", search=False,
                            policy=BuildPolicy(one_shot=True, left_for_exit=[])))
"""

# The build, and edits its caller makes as soon as it returns.
BUILD_THEN_EDIT = ONE_SHOT_IMPORTS + ONE_SHOT_BUILD + """
for path in sorted((project / "site").glob("pith/*/bundle.json")):  # at once, while the saver may be at work
    with open(path, "r+b") as f:
        f.seek(path.read_bytes().index(b'"pith_number"'))
        f.write(b" ")
print(json.dumps({"saved_in_background": report.saved_in_background, "changed": report.changed}))
"""


@pytest.mark.parametrize("changed_first", [False, True])
def test_a_mirrored_bundle_edited_as_soon_as_the_build_returns_is_found_by_the_next(project, changed_first):
    """The cache is saved in the background after ``build`` returns; what it records of the mirrored bundles
    must be the files as the build left them, not as they are by the time the saver gets to them (a
    post-processing step run right after the build had its edits taken for the build's own)."""
    keys = _key_files(project)
    options = opts(project, project / "site", load_trust_set(keys))
    if changed_first:  # (a build that wrote some records and took the others over)
        build(options)
        victim = sorted((project / "bundles").glob("gen*.json"))[1]
        victim.write_bytes(victim.read_bytes().replace(b'"built_at"', b' "built_at"', 1))
    edited = subprocess.run([sys.executable, "-c", BUILD_THEN_EDIT, project, *keys], capture_output=True, text=True,
                            timeout=300)
    assert edited.returncode == 0, edited.stderr
    assert json.loads(edited.stdout) == {"saved_in_background": True, "changed": True}
    build(opts(project, project / "clean", load_trust_set(keys), use_cache=False))

    def mirrored(root):
        return {p.relative_to(root): p.read_bytes() for p in root.glob("pith/*/bundle.json")}
    genuine = mirrored(project / "clean")
    assert len(genuine) == 10 and not set(mirrored(project / "site").items()) & set(genuine.items())  # (all edited)
    _wait_for_saver(project)
    assert build(options).changed
    assert mirrored(project / "site") == genuine


# The build, the way its cache gets saved set up by the environment's SAVE: "held", the saver waits until the
# caller lets it go (so the caller sees whether build waited for it); "thread", another thread runs (no fork is
# safe); "no fork", no process can be started (a process limit reached); "no grandchild", the saver's parent
# starts but cannot start the saver.
BUILD_AND_SAVE = ONE_SHOT_IMPORTS + """
how = os.environ["SAVE"]
if how == "held":
    save_quick = BuildCache.save_quick
    def held(self, *args):
        deadline = time.monotonic() + 60
        while not (project / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        save_quick(self, *args)
        (project / "saved").write_text(str(os.getsid(0)))
    BuildCache.save_quick = held
elif how == "thread":
    threading.Thread(target=threading.Event().wait, daemon=True).start()
elif how in ("no fork", "no grandchild"):
    fork, forks = os.fork, []
    def failing_fork():
        if sys._getframe(1).f_code.co_name == "start_detached":
            forks.append(1)
            if how == "no fork" or len(forks) == 2:
                (project / "fork refused").touch()
                raise BlockingIOError(11, "Resource temporarily unavailable")
        return fork()
    os.fork = failing_fork
""" + ONE_SHOT_BUILD + """
print(json.dumps({"saved_in_background": report.saved_in_background, "saved": (project / "saved").exists(),
                  "session": os.getsid(0)}))
"""


@pytest.mark.parametrize("how", ["held", "thread", "no fork", "no grandchild"])
def test_a_one_shot_build_returns_before_its_cache_is_saved_or_saves_it_itself(project, how):
    """The command line returns as soon as the site is live, its cache still being saved by a detached process
    (the build does not wait for it, nor does a caller reading its output; a Ctrl-C or the end of a CI step,
    which stops the caller's session, does not stop the saver); where no process can be forked safely (another
    thread runs), or the saver cannot be started, the build saves the cache itself before it returns.  Either way
    the next build finds the site up to date."""
    keys = _key_files(project)
    built = subprocess.run([sys.executable, "-c", BUILD_AND_SAVE, project, *keys], capture_output=True,
                           text=True, timeout=300, env=dict(os.environ, SAVE=how))
    assert built.returncode == 0, built.stderr
    result = json.loads(built.stdout)
    session = result.pop("session")
    if how == "held":
        assert result == {"saved_in_background": True, "saved": False}
        assert not (project / "saved").exists()  # (a saver holding the caller's output pipe would have been waited for)
        (project / "release").touch()
        _wait_for_saver(project)
        assert int((project / "saved").read_text()) != session  # (a Ctrl-C or a CI step's end kills the caller's)
    else:
        assert result == {"saved_in_background": False, "saved": False}
        assert (project / "fork refused").exists() == (how != "thread")
    again = build(opts(project, project / "site", load_trust_set(keys)))
    assert not again.changed and "verify" not in again.timings  # the no-op answer the save left
    assert again.cache_note == "" and not (cache_dir(project) / SAVE_FAILED).exists()  # (nor word of a save)


# The build, its saver held up right after it is forked (as a loaded machine may hold it before its first
# steps), and then at once what the next build of the output does first: take the output's lock.
OUTPUT_FREE_AT_RETURN = ONE_SHOT_IMPORTS + """
import fcntl
setsid = os.setsid
def slow_setsid():
    time.sleep(2)
    return setsid()
os.setsid = slow_setsid
""" + ONE_SHOT_BUILD + """
fd = os.open(project / ".site.lock", os.O_RDWR)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    free = True
except BlockingIOError:
    free = False
print(json.dumps({"saved_in_background": report.saved_in_background, "output_free": free}))
"""


def test_the_output_is_free_for_the_next_build_as_soon_as_a_build_returns(project):
    """The saver is forked while the build holds the output's lock, so a copy of it held by the saver until it
    let go of its caller's descriptors kept the output locked: a next build started at once (a script's next
    line, a test) stopped with "another site-builder build is writing this output".  The saver's parent lets go
    of them before the saver starts, and the build returns once that parent has ended."""
    keys = _key_files(project)
    built = subprocess.run([sys.executable, "-c", OUTPUT_FREE_AT_RETURN, project, *keys], capture_output=True,
                           text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    assert json.loads(built.stdout) == {"saved_in_background": True, "output_free": True}
    _wait_for_saver(project)


def test_the_detached_saver_holds_no_descriptor_of_its_caller_but_the_cache_lock(tmp_path):
    """The saver outlives the build: a pipe of the caller's it held open (its output, captured by a CI step or
    a script) would keep the caller waiting until the save ended.  It keeps the cache lock and nothing else, with
    its standard streams on /dev/null."""
    from site_builder.stages.remember import keep_only_fd

    read_end, write_end = os.pipe()
    lock = os.open(tmp_path / "cache.lock", os.O_CREAT | os.O_RDWR)
    pid = os.fork()
    if pid == 0:  # (the child reports by its exit code alone: its streams are gone once the call returns)
        code = 1
        try:
            for fd in (0, 1, 2, 3, 9, 11):  # the caller's pipe as its streams, right before and right after the lock
                os.dup2(write_end, fd)
            os.dup2(lock, 10)
            keep_only_fd(10)
            listing = set(map(int, os.listdir("/proc/self/fd")))  # (with the descriptor that lists them)
            streams = [os.readlink(f"/proc/self/fd/{fd}") for fd in (0, 1, 2)]
            code = 0 if len(listing) == 5 and {0, 1, 2, 10} <= listing and streams == ["/dev/null"] * 3 else 2
        finally:
            os._exit(code)
    os.close(write_end)
    os.close(lock)
    assert os.waitpid(pid, 0)[1] == 0
    assert os.read(read_end, 1) == b""  # (no process holds the pipe's write end any longer)
    os.close(read_end)


def test_inputs_touched_but_the_same_make_the_live_site_again_and_say_nothing_changed(project):
    """An input file touched (a checkout, a copy) no longer matches the no-op answer; verified and planned, the
    site is the live one: nothing is written, and the build says nothing changed (serve reloads no page)."""
    out = project / "site"
    build(opts(project, out, both_keys()))
    before = tree(out)
    touched = sorted((project / "bundles").glob("*.json"))[0]
    os.utime(touched, ns=(0, 1_000_000_000))
    again = build(opts(project, out, both_keys()))
    assert again.changed is False and again.files_written == 0 and tree(out) == before
    third = build(opts(project, out, both_keys()))  # the touched file's new date was remembered:
    assert third.changed is False and "verify" not in third.timings  # the no-op answer, nothing verified or planned
    assert third.count("published") == again.count("published") == 10


def test_a_serve_build_that_left_the_search_index_behind_is_no_no_op_answer(project):
    """serve puts a change live with the last search index while its next build makes the new one.  Stopped
    between the two (Ctrl-C), the next ``build`` with the same inputs must make the index, not find the site up
    to date."""
    config = SiteConfig(search_shard_size=12)  # (the project's records fit in one shard)
    out = project / "site"
    build(opts(project, out, both_keys(), search=True, config=config))
    (project / "bundles" / "gen1.json").write_bytes(make_bundle(1, variant=2))
    store = IncrementalStore()
    try:
        behind = build(opts(project, out, both_keys(), search=True, config=config,
                            session=ServeSession(store, defer_search=True)))
    finally:
        store.close()
    assert behind.changed and behind.search_behind
    again = build(opts(project, out, both_keys(), search=True, config=config))
    assert again.changed and again.search_seconds > 0
    build(opts(project, project / "clean", both_keys(), search=True, config=config, use_cache=False))
    assert tree(out) == tree(project / "clean")


def _stored_files(project):
    """The cache's file index as stored now (over a connection of its own: the file at the cache's name)."""
    db = sqlite3.connect(cache_dir(project) / "cache.sqlite")
    try:
        return cache_document(db, "files")
    finally:
        db.close()


def _build_cli(project, *flags, output="site"):
    """``build`` of *project* into *output* on the command line, trusting the keys its bundles are signed with."""
    keys = _key_files(project)
    return subprocess.run([sys.executable, "-m", "site_builder", "build", "--bundles", project / "bundles",
                           "--output", project / output, "--no-search", *flags,
                           *(arg for key in keys for arg in ("--trusted-keys", key))],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_detached_save_that_cannot_write_keeps_the_cache_and_the_next_build_says_why_once(project):
    """A saver whose writes fail (here another program holds the database's write lock: a full disk or an I/O
    error stops it the same way) leaves the cache as the last save left it, not thrown away, and the next build,
    which has the terminal the saver lacks, says why, once."""
    assert _build_cli(project).returncode == 0
    _wait_for_saver(project)
    saved = _stored_files(project)
    (project / "bundles" / "gen3.json").unlink()
    with write_lock_held(cache_dir(project) / "cache.sqlite"):
        second = _build_cli(project)
        _wait_for_saver(project)  # (which waits SQLite's 5 s for the lock held here, then gives up)
    assert second.returncode == 0 and "not saved" not in second.stderr  # (the build itself knew nothing yet)
    assert _stored_files(project) == saved

    third = _build_cli(project)
    assert third.returncode == 0, third.stderr
    said = f"NOTE the last build's cache was not saved ({cache_dir(project) / 'cache.sqlite'}: database is locked); "
    assert [line for line in third.stderr.splitlines() if "not saved" in line] == [
        said + "this build could not reuse what that one did"]
    _wait_for_saver(project)
    fourth = _build_cli(project)
    assert fourth.returncode == 0 and "not saved" not in fourth.stderr and "up to date" in fourth.stderr
    assert _build_cli(project, "--no-cache", output="clean").returncode == 0
    assert tree(project / "site") == tree(project / "clean")


def test_a_save_in_place_that_cannot_write_keeps_the_cache_and_the_build_says_why(project):
    """serve saves the cache itself, and a build that cannot fork does: their report says why a save failed."""
    trust = both_keys()
    build(opts(project, project / "site", trust))
    saved = _stored_files(project)
    (project / "bundles" / "gen3.json").unlink()
    with write_lock_held(cache_dir(project) / "cache.sqlite"):
        report = build(opts(project, project / "site", trust))
    assert report.cache_note == (f"the build cache was not saved ({cache_dir(project) / 'cache.sqlite'}: database "
                                 f"is locked); the next build cannot reuse what this one did")
    assert _stored_files(project) == saved
    again = build(opts(project, project / "site", trust))
    assert again.cache_note == "" and again.changed  # (nothing left for it to say: this build said it)


@pytest.mark.slow
def test_a_cache_another_program_holds_is_gone_without_kept_as_it_was_and_said(project):
    """A build that finds the cache held by another program (a lock it keeps, as a database browser's does)
    builds without it and says so: the cache is not deleted and made anew under that program, and no saver
    writes to it once the build is done; the next build, the lock gone, has nothing to say."""
    assert _build_cli(project).returncode == 0
    _wait_for_saver(project)
    saved = _stored_files(project)
    (project / "bundles" / "gen3.json").unlink()
    path = cache_dir(project) / "cache.sqlite"
    with exclusive_lock_held(path):
        second = _build_cli(project)
        _wait_for_saver(project)
    assert second.returncode == 0, second.stderr
    assert [line for line in second.stderr.splitlines() if "cache" in line] == [
        f"NOTE no build cache: {path}: database is locked; every bundle is verified and every page rendered"]
    assert _stored_files(project) == saved
    third = _build_cli(project)
    assert third.returncode == 0 and "cache" not in third.stderr, third.stderr
    assert _build_cli(project, "--no-cache", output="clean").returncode == 0
    assert tree(project / "site") == tree(project / "clean")


def test_a_cache_that_fails_part_way_through_a_build_is_gone_without_kept_as_it_was_and_said(project, monkeypatch):
    """A read of the cache that fails once the build is under way (an I/O error) leaves the cache as it was,
    and the build, which goes on without it, says so in its report."""
    trust = both_keys()
    build(opts(project, project / "site", trust))
    saved = _stored_files(project)
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=4))
    reading = BuildCache.inspections

    def on_a_failing_disk(cache, *args):
        cache.db = FailingDisk(cache.db)
        return reading(cache, *args)
    with monkeypatch.context() as patched:
        patched.setattr(BuildCache, "inspections", on_a_failing_disk)
        report = build(opts(project, project / "site", trust))
    assert report.cache_note == (f"the build cache could not be read ({cache_dir(project) / 'cache.sqlite'}: disk "
                                 f"I/O error); this build went on without it, and left it as it was")
    assert _stored_files(project) == saved
    build(opts(project, project / "clean", trust, use_cache=False))
    assert tree(project / "site") == tree(project / "clean")


# A one-shot build whose detached saver meets a builder's bug, then the next build (after the saver is done).
SAVER_RAISES = ONE_SHOT_IMPORTS + """
import fcntl
def broken(self, *args):
    raise RuntimeError("a builder's bug")
BuildCache.save_rows = broken
""" + ONE_SHOT_BUILD + """
assert report.saved_in_background and not report.cache_note
fd = os.open(project / ".site-builder-cache" / "site" / "cache.lock", os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)  # (the saver is done)
os.close(fd)
""" + ONE_SHOT_BUILD + """
print(report.cache_note)
"""


def test_a_detached_saver_that_raises_has_the_next_build_say_what(project):
    """What a detached saver raises would go to /dev/null with it: the next build says it."""
    keys = _key_files(project)
    built = subprocess.run([sys.executable, "-c", SAVER_RAISES, project, *keys], capture_output=True, text=True,
                           timeout=300)
    assert built.returncode == 0, built.stderr
    assert built.stdout.strip() == ("the last build's cache was not saved (RuntimeError: a builder's bug); this "
                                    "build could not reuse what that one did")


# A one-shot build whose detached saver is held, and says so with its process id, so that it can be stopped.
SAVER_HELD = ONE_SHOT_IMPORTS + """
def held(self, *args):
    (project / "saver").write_text(str(os.getpid()))
    time.sleep(600)
BuildCache.save_quick = held
""" + ONE_SHOT_BUILD + """
print(json.dumps({"saved_in_background": report.saved_in_background}))
"""


def test_a_detached_save_stopped_before_it_ends_is_said_by_the_next_build(project):
    """A saver killed before it ends (out of memory, the machine turned off, a CI job's end) cannot say so: it
    finds word of its save under way already left, which only a save that ended replaces or removes."""
    keys = _key_files(project)
    assert _build_cli(project).returncode == 0
    _wait_for_saver(project)
    assert not (cache_dir(project) / SAVE_FAILED).exists()  # (a save that ended leaves no word)
    (project / "bundles" / "gen3.json").unlink()
    built = subprocess.run([sys.executable, "-c", SAVER_HELD, project, *keys], capture_output=True, text=True,
                           timeout=300)
    assert built.returncode == 0 and json.loads(built.stdout) == {"saved_in_background": True}, built.stderr
    deadline = time.monotonic() + 60
    while not (project / "saver").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(int((project / "saver").read_text()), signal.SIGKILL)
    _wait_for_saver(project)
    trust = load_trust_set(keys)
    said = build(opts(project, project / "site", trust)).cache_note
    assert said == f"the last build's cache was not saved ({SAVE_STOPPED}); this build could not reuse what that " \
                   f"one did"
    assert build(opts(project, project / "site", trust)).cache_note == ""


def test_where_no_word_of_a_save_can_be_left_the_build_saves_in_place_and_says_why_at_once(project):
    """Where the build cannot leave word of its save for the next (a disk too full for a few bytes; here something
    else stands at the word's name), it saves the cache itself, and says at once that the save failed."""
    trust = both_keys()
    build(opts(project, project / "site", trust))
    (project / "bundles" / "gen3.json").unlink()
    (cache_dir(project) / SAVE_FAILED).mkdir()
    with write_lock_held(cache_dir(project) / "cache.sqlite"):
        built = subprocess.run([sys.executable, "-c", ONE_SHOT_IMPORTS + ONE_SHOT_BUILD + """
print(json.dumps({"saved_in_background": report.saved_in_background, "cache_note": report.cache_note}))
""", project, *_key_files(project)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    assert json.loads(built.stdout) == {"saved_in_background": False, "cache_note": (
        f"the build cache was not saved ({cache_dir(project) / 'cache.sqlite'}: database is locked); the next build "
        f"cannot reuse what this one did")}


def test_a_cache_folder_this_user_may_not_write_to_is_no_cache_and_the_build_says_so(project):
    """The cache cannot be opened in a folder this user may read but not write to (SQLite makes its files beside
    the database): the build keeps no cache, and says so, as where no cache key can be kept."""
    trust = both_keys()
    build(opts(project, project / "site", trust))
    folder = cache_dir(project)

    def build_unprivileged():
        folder.chmod(0o555)
        report = build(opts(project, project / "site", trust, one_shot=True))
        assert report.cache_note.startswith(f"no build cache: {folder / 'cache.sqlite'}: ")
        assert report.cache_note.endswith("; every bundle is verified and every page rendered")

    try:
        run_unprivileged(build_unprivileged)
    finally:
        folder.chmod(0o755)


def test_a_no_op_rebuild_says_the_warnings_the_build_before_said(project):
    """Nothing changed, so the build answers from what the last one recorded: with its outcomes, the warnings it
    gave, which hold as much now (an input older than the bundle published is still refused), not silence."""
    out = project / "site"
    (project / "bundles" / "gen1.json").write_bytes(make_bundle(1, variant=5))
    build(opts(project, out, both_keys()))
    (project / "bundles" / "gen1.json").write_bytes(make_bundle(1, variant=2))
    refused = build(opts(project, out, both_keys()))
    assert refused.changed and any("rollback refused" in w for w in refused.warnings)
    again = build(opts(project, out, both_keys()))
    assert not again.changed and again.warnings == refused.warnings


def test_what_a_build_verified_for_a_site_that_did_not_change_is_kept(project, tmp_path):
    """The cache's verification results lost (a part that no longer checks, say) while it still knows the site:
    the next build verifies those files again and finds the site as it is, writing nothing; what it verified is
    kept all the same, so that the builds after it do not verify them again."""
    options = opts(project, project / "site", both_keys())
    build(options)
    db = sqlite3.connect(project / ".site-builder-cache" / "site" / "cache.sqlite")
    assert db.execute("DELETE FROM documents WHERE name LIKE 'inspections/%'").rowcount > 0
    db.commit()
    db.close()
    (project / "bundles" / "gen1.json").touch()  # (not the no-op answer: the build verifies)
    assert build(options).changed is False
    assert verified(options, tmp_path).fresh == []
