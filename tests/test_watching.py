"""The watcher serve rebuilds on (watching.py): a burst of file events is one batch, and only the project's
inputs count, never the build's own writes."""

from __future__ import annotations

import os
import threading
import time

import pytest
from watchdog.events import (
    DirModifiedEvent,
    FileClosedEvent,
    FileClosedNoWriteEvent,
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileOpenedEvent,
)

from site_builder import watching
from site_builder.watching import DEBOUNCE_SECONDS, SETTLED_DEBOUNCE_SECONDS, Watcher, follow


def _batch(watcher: Watcher, started=lambda: None) -> bool:
    """``wait_for_batch``, given up after 5 s (a watcher that lost the change fails the test, not hangs it)."""
    given_up = threading.Event()
    timer = threading.Timer(5, given_up.set)
    timer.start()
    try:
        return watcher.wait_for_batch(given_up, started)
    finally:
        timer.cancel()


def _watcher(tmp_path, bundles=None) -> Watcher:
    return Watcher(tmp_path / "output", {tmp_path / "site.toml"}, bundles or tmp_path / "bundles",
                   tmp_path / "templates", tmp_path / "static")


def test_a_burst_of_events_becomes_one_rebuild(tmp_path):
    """200 files written back to back (as by cp -r) make one batch; the batch ends once writing stops."""
    watcher = _watcher(tmp_path)
    stop = threading.Event()
    batches = []

    started = []  # when each batch's first change was seen (serve starts its lookups then)

    def consume():
        while not stop.is_set():
            if watcher.wait_for_batch(stop, lambda: started.append(time.monotonic())):
                batches.append(time.monotonic())

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    for i in range(200):
        path = str(tmp_path / "bundles" / f"b{i}.json")
        for event in (FileCreatedEvent(path), FileModifiedEvent(path), FileClosedEvent(path)):
            watcher.on_any_event(event)
        finished = time.monotonic()  # the last write so far (measured before the pause, which may oversleep)
        time.sleep(0.001)
    time.sleep(0.5)
    stop.set()
    consumer.join(2)
    # One batch (two if this machine stalled the writer for longer than the quiet period): not 200.
    assert 1 <= len(batches) <= 2
    assert len(started) == len(batches) and all(s <= b for s, b in zip(started, batches))
    assert batches[-1] - finished >= SETTLED_DEBOUNCE_SECONDS * 0.9  # waited for quiet, then went at once
    assert batches[-1] - finished < 0.2


@pytest.mark.parametrize("bundles_at_root", [False, True])
def test_the_watcher_takes_bundles_templates_and_settings_not_the_builds_own_files(tmp_path, bundles_at_root):
    """Which file events start a rebuild, with the bundles in their own folder and in the project root
    (``--bundles .``, where the output and the build's hidden folders are inside the bundles folder)."""
    bundles = tmp_path if bundles_at_root else tmp_path / "bundles"
    for folder in ["bundles/sub", "templates/assets", "output/pith/X", ".output.prev/pith/X", "sub/deeper"]:
        (tmp_path / folder).mkdir(parents=True)
    watcher = Watcher(tmp_path / "output", {tmp_path / "site.toml", tmp_path / "about.md"}, bundles,
                      tmp_path / "templates", tmp_path / "static")
    if bundles_at_root:  # around the output: the root for its own files, each other folder with its subfolders
        assert watcher.watched() == [(tmp_path, False), (tmp_path / "bundles", True), (tmp_path / "static", True),
                                     (tmp_path / "sub", True), (tmp_path / "templates", True)]
    else:
        assert watcher.watched() == [(tmp_path, False), (bundles, True), (tmp_path / "static", True),
                                     (tmp_path / "templates", True)]
    for rel in ["x.json", "sub/deeper/x.json", "X.JSON", "x.Json"]:  # (the build reports the others as not read)
        assert watcher.relevant(str(bundles / rel)), rel
    for rel in ["templates/paper.html", "templates/assets/style.css", "site.toml", "about.md", "static/CNAME",
                "static/img/logo.png", "static/.well-known/security.txt"]:
        assert watcher.relevant(str(tmp_path / rel)), rel
    for rel in ["output/pith/X/index.html", "output/pith/X/bundle.json", "output", ".output.prev/pith/X/index.html",
                ".output.staging-12/pith/X/bundle.json", ".site-builder-cache/output/cache.sqlite",
                "templates/.paper.html.swp", "templates/assets/.#style.css", "static/.CNAME.swp",
                "static/.well-known/.security.txt.swp"]:
        assert not watcher.relevant(str(tmp_path / rel)), rel
    assert not watcher.relevant(str(bundles / "sub" / ".hidden" / "x.json"))
    # (a .well-known folder is published only from the static folder: elsewhere it is hidden like any other)
    assert not watcher.relevant(str(bundles / ".well-known" / "x.json"))
    assert not watcher.relevant(str(tmp_path / "templates" / ".well-known" / "paper.html"))
    assert watcher.relevant(str(bundles / "new-folder"), is_directory=True)
    for name in ["serve.log", "notes.txt", "x.json.part"]:  # files no build reads: a log there must not loop
        assert not watcher.relevant(str(bundles / name)), name


def test_an_output_deeper_inside_the_bundles_folder_is_watched_around_all_the_way_down(tmp_path):
    """``--bundles . --output public/site``: every folder on the way down to the output is watched for its own
    entries, each folder beside that way with its subfolders, and the output never."""
    for folder in ["public/site/pith", "public/drafts", "public/.site.prev", "papers"]:
        (tmp_path / folder).mkdir(parents=True)
    watcher = Watcher(tmp_path / "public" / "site", {tmp_path / "site.toml"}, tmp_path, tmp_path / "templates",
                      tmp_path / "static")
    assert watcher.watched() == [(tmp_path, False), (tmp_path / "papers", True), (tmp_path / "public", False),
                                 (tmp_path / "public" / "drafts", True), (tmp_path / "static", True),
                                 (tmp_path / "templates", True)]
    assert watcher.relevant(str(tmp_path / "public" / "drafts" / "x.json"))
    assert not watcher.relevant(str(tmp_path / "public" / "site" / "pith" / "bundle.json"))


def test_an_about_page_in_a_folder_of_its_own_is_watched_there(tmp_path):
    """site.toml may put the about page in a folder (``about_file = "pages/about.md"``): that folder is watched
    for it (the project root only for its own files was, and an edit of the page went unseen), and a folder
    made on the way to it starts a rebuild, after which it is watched."""
    (tmp_path / "pages").mkdir()
    about = tmp_path / "pages" / "about.md"
    watcher = Watcher(tmp_path / "output", {tmp_path / "site.toml", about}, tmp_path / "bundles",
                      tmp_path / "templates", tmp_path / "static")
    assert (tmp_path / "pages", False) in watcher.watched() and (tmp_path, False) in watcher.watched()
    assert watcher.relevant(str(about)) and watcher.relevant(str(tmp_path / "site.toml"))
    for rel in ["pages/notes.md", "about.md", "pages"]:  # (another file there; a file, not a folder, named pages)
        assert not watcher.relevant(str(tmp_path / rel)), rel
    assert watcher.relevant(str(tmp_path / "pages"), is_directory=True)
    assert not watcher.relevant(str(tmp_path / "node_modules"), is_directory=True)  # (on the way to none)


def test_a_project_file_inside_a_watched_tree_adds_no_watch_of_its_own(tmp_path):
    """An about page that site.toml puts inside the templates folder is seen through that folder's watch: a
    second watch of its folder would only report each of its events twice."""
    (tmp_path / "templates" / "pages").mkdir(parents=True)
    about = tmp_path / "templates" / "pages" / "about.md"
    watcher = Watcher(tmp_path / "output", {tmp_path / "site.toml", about}, tmp_path / "bundles",
                      tmp_path / "templates", tmp_path / "static")
    assert watcher.watched() == [(tmp_path, False), (tmp_path / "bundles", True), (tmp_path / "static", True),
                                 (tmp_path / "templates", True)]
    assert watcher.relevant(str(about))


def test_the_watcher_follows_the_about_page_and_static_folder_that_site_toml_names_now(tmp_path):
    """site.toml edited while serve runs may name another about page or static folder: retargeted, the watcher
    takes their files (and no longer the old ones') and names their folders to watch."""
    for folder in ("static", "public", "pages"):
        (tmp_path / folder).mkdir()
    watcher = _watcher(tmp_path)
    assert watcher.relevant(str(tmp_path / "static" / "CNAME")) and not watcher.relevant(str(tmp_path / "public" / "a"))
    watcher.retarget({tmp_path / "site.toml", tmp_path / "pages" / "about.md"}, tmp_path / "public")
    assert watcher.relevant(str(tmp_path / "public" / "CNAME")) and not watcher.relevant(str(tmp_path / "static" / "a"))
    assert watcher.relevant(str(tmp_path / "pages" / "about.md")) and watcher.relevant(str(tmp_path / "site.toml"))
    assert {(tmp_path / "public", True), (tmp_path / "pages", False)} <= set(watcher.watched())
    assert (tmp_path / "static", True) not in watcher.watched()


def test_a_batch_says_when_its_first_change_is_seen_before_it_settles(tmp_path):
    """``wait_for_batch`` calls its *started* as soon as a batch's first change is seen (serve starts the
    lookups of the output's mirrored bundles then), not once the batch has settled: a change made from there
    on is still in that batch."""
    watcher = _watcher(tmp_path)
    first, second = str(tmp_path / "bundles" / "a.json"), str(tmp_path / "bundles" / "b.json")
    watcher.on_any_event(FileClosedEvent(first))
    calls = []

    def started():
        calls.append(True)
        watcher.on_any_event(FileClosedEvent(second))  # (while the batch waits for quiet)

    assert _batch(watcher, started)
    assert calls == [True] and not watcher.pending.is_set()  # (the second change did not start another batch)
    assert watcher.take_changes() == {first, second}


def test_reads_a_folders_own_stamp_and_the_builds_writes_start_no_batch(tmp_path):
    """The build reads every bundle and writes a bundle.json per record into the output; with the bundles in the
    project root (``--bundles .``) those are events about *.json files in the bundles folder, and each would
    start a rebuild that starts another.  A file moved into place counts by its new name."""
    watcher = _watcher(tmp_path, bundles=tmp_path)
    bundle = str(tmp_path / "a.json")
    for event in (FileOpenedEvent(bundle), FileClosedNoWriteEvent(bundle), DirModifiedEvent(str(tmp_path)),
                  FileCreatedEvent(str(tmp_path / "output" / "pith" / "X" / "bundle.json")),
                  FileClosedEvent(str(tmp_path / "output" / "pith" / "X" / "bundle.json")),
                  FileModifiedEvent(str(tmp_path / "notes.txt"))):
        watcher.on_any_event(event)
        assert not watcher.pending.is_set(), event
    assert watcher.take_changes() == set()
    hidden, placed = str(tmp_path / ".a.json.tmp"), str(tmp_path / "b.json")
    watcher.on_any_event(FileMovedEvent(hidden, placed))
    assert watcher.pending.is_set() and watcher.settled  # (complete once moved into place: the short quiet)
    assert watcher.take_changes() == {hidden, placed}


def test_a_change_waits_for_quiet_and_a_change_that_goes_on_is_cut_into_batches(tmp_path, monkeypatch):
    """A lone change that did not finish a write waits DEBOUNCE_SECONDS of quiet, a serve's very first one
    too; changes that never stop (a long copy) still make a batch every MAX_BATCH_SECONDS."""
    watcher = _watcher(tmp_path)
    watcher.on_any_event(FileModifiedEvent(str(tmp_path / "bundles" / "a.json")))
    began = time.monotonic()
    assert _batch(watcher)
    assert time.monotonic() - began >= DEBOUNCE_SECONDS * 0.9

    monkeypatch.setattr(watching, "MAX_BATCH_SECONDS", 0.4)
    monkeypatch.setattr(watching, "DEBOUNCE_SECONDS", 4.0)  # (a writer stalled by a busy machine is no quiet)
    writing = threading.Event()

    def write_on():
        while not writing.is_set():
            watcher.on_any_event(FileModifiedEvent(str(tmp_path / "bundles" / "b.json")))
            time.sleep(0.01)
    writer = threading.Thread(target=write_on, daemon=True)
    writer.start()
    try:
        began = time.monotonic()
        assert _batch(watcher)
        took = time.monotonic() - began
    finally:
        writing.set()
        writer.join(2)
    assert 0.4 * 0.9 <= took < 3.0  # (quiet never came: cut at the most a batch may wait)


def test_a_poke_asks_for_a_batch_of_unknown_changes(tmp_path):
    """serve pokes the watcher when a change may have been missed: a batch follows, and its changes are
    unknown (None: the next build lists the bundles folder in full), after which they are counted afresh."""
    watcher = _watcher(tmp_path)
    watcher.on_any_event(FileClosedEvent(str(tmp_path / "bundles" / "a.json")))
    watcher.poke()
    assert watcher.pending.is_set() and not watcher.settled
    assert _batch(watcher)
    assert watcher.take_changes() is None
    assert watcher.take_changes() == set()


class _Observer:
    """The two calls ``follow`` makes of watchdog's Observer, noted."""

    def __init__(self):
        self.scheduled: list[tuple[str, bool]] = []
        self.unscheduled: list[tuple[str, bool]] = []

    def schedule(self, handler, path, recursive):
        if not os.path.isdir(path):
            raise FileNotFoundError(path)
        self.scheduled.append((path, recursive))
        return (path, recursive)

    def unschedule(self, watch):
        self.unscheduled.append(watch)


def test_follow_watches_the_folders_that_come_and_stops_watching_those_that_go(tmp_path):
    """With the bundles in the project root every folder beside the output is watched on its own: one made
    after serve started is watched from the next build on, one removed is no longer watched, and the rest are
    not scheduled twice."""
    for folder in ["output", "old", "templates"]:
        (tmp_path / folder).mkdir()
    watcher, observer, watches = _watcher(tmp_path, bundles=tmp_path), _Observer(), {}
    follow(observer, watcher, watches)
    first = [(str(tmp_path), False), (str(tmp_path / "old"), True), (str(tmp_path / "templates"), True)]
    assert sorted(observer.scheduled) == first
    (tmp_path / "old").rmdir()
    assert follow(observer, watcher, watches) is False  # (a folder gone: nothing new is watched)
    (tmp_path / "new").mkdir()
    assert follow(observer, watcher, watches) is True  # (what was made in it before now was not seen)
    assert observer.scheduled[3:] == [(str(tmp_path / "new"), True)]
    assert observer.unscheduled == [(str(tmp_path / "old"), True)]
    assert sorted(watches) == [(tmp_path, False), (tmp_path / "new", True), (tmp_path / "templates", True)]


def test_a_folder_too_deep_to_watch_is_said_once_and_the_others_are_watched(tmp_path):
    """A folder whose watch fails for its depth (Python 3.11's watcher walks folders by recursion) is named in
    one error, and the folders beside it are watched all the same; the builds after it neither try it again nor
    say it again while it is there, and once it is gone and made again it is tried again."""
    for folder in ["output", "deep", "templates"]:
        (tmp_path / folder).mkdir()

    class TooDeep(_Observer):
        def schedule(self, handler, path, recursive):
            if path.endswith("deep"):
                raise RecursionError("maximum recursion depth exceeded")
            return super().schedule(handler, path, recursive)

    watcher, observer, watches = _watcher(tmp_path, bundles=tmp_path), TooDeep(), {}
    with pytest.raises(watching.WatchError, match=f"{tmp_path / 'deep'}: cannot watch it for changes"):
        follow(observer, watcher, watches)
    assert sorted(observer.scheduled) == [(str(tmp_path), False), (str(tmp_path / "templates"), True)]
    assert follow(observer, watcher, watches) is False  # (no error, nothing new)
    (tmp_path / "deep").rmdir()
    follow(observer, watcher, watches)
    (tmp_path / "deep").mkdir()
    with pytest.raises(watching.WatchError):
        follow(observer, watcher, watches)
