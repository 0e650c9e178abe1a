"""The watcher serve rebuilds on (watching.py): a burst of file events is one batch, and only the project's
inputs count, never the build's own writes."""

from __future__ import annotations

import threading
import time

import pytest
from watchdog.events import FileClosedEvent, FileCreatedEvent, FileModifiedEvent

from site_builder.watching import SETTLED_DEBOUNCE_SECONDS, Watcher


def test_a_burst_of_events_becomes_one_rebuild(tmp_path):
    """200 files written back to back (as by cp -r) make one batch; the batch ends once writing stops."""
    watcher = Watcher(tmp_path / "output", tmp_path, {"site.toml"}, tmp_path / "bundles", tmp_path / "templates",
                       tmp_path / "static")
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
    watcher = Watcher(tmp_path / "output", tmp_path, {"site.toml", "about.md"}, bundles, tmp_path / "templates",
                       tmp_path / "static")
    if bundles_at_root:  # around the output: the root for its own files, each other folder with its subfolders
        assert watcher.watched() == [(tmp_path, False), (tmp_path / "bundles", True), (tmp_path / "static", True),
                                     (tmp_path / "sub", True), (tmp_path / "templates", True)]
    else:
        assert watcher.watched() == [(tmp_path, False), (bundles, True), (tmp_path / "static", True),
                                     (tmp_path / "templates", True)]
    for rel in ["x.json", "sub/deeper/x.json"]:
        assert watcher.relevant(str(bundles / rel)), rel
    for rel in ["templates/paper.html", "templates/assets/style.css", "site.toml", "about.md", "static/CNAME",
                "static/img/logo.png", "static/.well-known/security.txt"]:
        assert watcher.relevant(str(tmp_path / rel)), rel
    for rel in ["output/pith/X/index.html", "output", ".output.prev/pith/X/index.html",
                ".output.staging-12/pith/X/bundle.json", ".site-builder-cache/output/cache.sqlite",
                "templates/.paper.html.swp", "templates/assets/.#style.css", "static/.CNAME.swp"]:
        assert not watcher.relevant(str(tmp_path / rel)), rel
    assert not watcher.relevant(str(bundles / "sub" / ".hidden" / "x.json"))
    assert watcher.relevant(str(bundles / "new-folder"), is_directory=True)
    for name in ["serve.log", "notes.txt", "x.json.part"]:  # files no build reads: a log there must not loop
        assert not watcher.relevant(str(bundles / name)), name


def test_a_batch_says_when_its_first_change_is_seen_before_it_settles(tmp_path):
    """``wait_for_batch`` calls its *started* as soon as a batch's first change is seen (serve starts the
    lookups of the output's mirrored bundles then), not once the batch has settled: a change made from there
    on is still in that batch."""
    watcher = Watcher(tmp_path / "output", tmp_path, {"site.toml"}, tmp_path / "bundles", tmp_path / "templates",
                      tmp_path / "static")
    first, second = str(tmp_path / "bundles" / "a.json"), str(tmp_path / "bundles" / "b.json")
    watcher.on_any_event(FileClosedEvent(first))
    calls = []

    def started():
        calls.append(True)
        watcher.on_any_event(FileClosedEvent(second))  # (while the batch waits for quiet)

    assert watcher.wait_for_batch(threading.Event(), started)
    assert calls == [True] and not watcher.pending.is_set()  # (the second change did not start another batch)
    assert watcher.take_changes() == {first, second}
