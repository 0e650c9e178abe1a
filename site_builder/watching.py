"""What ``serve`` watches: the project's file events, batched so that a burst (an editor's save, a copy of 1,000
bundles) becomes one rebuild, and never the build's own writes in the output."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from watchdog.events import FileSystemEventHandler
from watchdog.observers import Observer

from site_builder.loading import named_json
from site_builder.terminal import printable

DEBOUNCE_SECONDS = 0.1
# After a file was closed from writing or renamed into place its new content is complete, so a short quiet
# period is enough; a longer one still gathers bursts (a copy of 1,000 files closes them back to back).
SETTLED_DEBOUNCE_SECONDS = 0.03
MAX_BATCH_SECONDS = 2.0


class Watcher(FileSystemEventHandler):
    """Collects file events; a burst (an editor's save, a copy of 1,000 files) becomes one rebuild."""

    def __init__(self, output: Path, project_files: set[Path], bundles: Path, templates: Path, static: Path):
        self.output = Path(os.path.abspath(output))
        # The folders watched with their subfolders: in the bundles folder its *.json files and folders matter,
        # in the templates and static folders every file.  The project root may be the bundles folder
        # (``--bundles .``).
        self.bundles = Path(os.path.abspath(bundles))
        self.templates = Path(os.path.abspath(templates))
        self.retarget(project_files, static)
        self.pending = threading.Event()
        self.first = 0.0
        self.last = 0.0
        self.settled = False  # the last event finished a write (closed or moved into place)
        self.changed: set[str] | None = set()  # paths the events named since the last batch; None: unknown
        self.lock = threading.Lock()

    def retarget(self, project_files: set[Path], static: Path) -> None:
        """Follow the settings file and the about page (which site.toml may put in a folder of its own: in their
        folders only they matter) and the static folder as site.toml names them now (an edit of it may move
        them); ``follow`` then watches their folders.  Each is replaced whole: the observer's thread reads them."""
        self.project_files = frozenset(Path(os.path.abspath(f)) for f in project_files)
        self.static = Path(os.path.abspath(static))
        self.trees = (self.bundles, self.templates, self.static)

    def watched(self) -> list[tuple[Path, bool]]:
        """The folders to watch now and whether with their subfolders: the trees, and the folders of the settings
        file and the about page for those files, unless a tree covers them.  A tree that holds the output
        (``--bundles .``) is watched around it: the folders on the way down to it for their own entries, every
        other subfolder with its subfolders.  The output and the trees beside it are 100,000s of folders the
        build itself rewrites: watching them would cost a watch per folder and report the build's own writes."""
        folders: dict[Path, bool] = {}
        for tree in self.trees:
            if tree not in self.output.parents:
                folders.setdefault(tree, True)
                continue
            level = tree
            for part in self.output.relative_to(tree).parts:  # down to the output
                folders[level] = False
                try:
                    with os.scandir(level) as entries:
                        for entry in entries:
                            if entry.name != part and not entry.name.startswith(".") and entry.is_dir():
                                folders.setdefault(Path(entry.path), True)
                except OSError:
                    pass
                level = level / part
        for folder in {f.parent for f in self.project_files}:
            if not any(folder == tree or tree in folder.parents for tree in self.trees):
                folders.setdefault(folder, False)
        return sorted(folders.items())

    def relevant(self, raw_path, is_directory: bool = False) -> bool:
        path = Path(os.path.abspath(os.fsdecode(raw_path)))
        if path == self.output or self.output in path.parents:
            return False  # the build's own writes
        if path in self.project_files or (is_directory and any(path in f.parents for f in self.project_files)):
            return True  # (a folder on the way to one, made or renamed: watched from the rebuild on)
        for tree in (self.templates, self.static, self.bundles):  # (the others may be inside the bundles folder)
            if path == tree or tree in path.parents:
                # Hidden names anywhere below the tree are editors' swap files, a cache, our lock, staging and
                # retired trees; the build never reads them either (but for a static .well-known).  Nor does it
                # read the bundles folder's other files (a log written there would start a rebuild per line),
                # but a bundle named .json in another letter case, which the build reports as not read.
                parts = path.relative_to(tree).parts
                if tree == self.static and parts[:1] == (".well-known",):
                    parts = parts[1:]
                if any(part.startswith(".") for part in parts):
                    return False
                return tree != self.bundles or is_directory or named_json(path.name)
        return False

    def on_any_event(self, event):
        # Reads (ours included) and a folder's own "modified" stamp are not changes.
        if event.event_type in ("opened", "closed_no_write") or (event.is_directory and event.event_type == "modified"):
            return
        paths = [event.src_path] + ([event.dest_path] if getattr(event, "dest_path", "") else [])
        if not any(self.relevant(p, event.is_directory) for p in paths):
            return
        with self.lock:
            self._note(settled=event.event_type in ("closed", "moved"))
            if self.changed is not None:
                self.changed.update(os.path.abspath(os.fsdecode(p)) for p in paths)

    def poke(self) -> None:
        """Ask for a rebuild that lists the bundles folder in full (a change may have been missed)."""
        with self.lock:
            self._note(settled=False)
            self.changed = None

    def _note(self, settled: bool) -> None:
        """Something changed now (call with the lock held): start or extend the current batch."""
        now = time.monotonic()
        if not self.pending.is_set():
            self.first = now
        self.last = now
        self.settled = settled
        self.pending.set()

    def take_changes(self) -> set[str] | None:
        with self.lock:
            changed, self.changed = self.changed, set()
            return changed

    def wait_for_batch(self, stop: threading.Event, started: Callable[[], None] = lambda: None) -> bool:
        """Wait until a batch of changes has settled (True), or *stop* (False); *started* is called once, as
        soon as the batch's first change is seen."""
        seen = False
        while not stop.is_set():
            if not self.pending.wait(0.1):
                continue
            if not seen:
                seen = True
                started()
            with self.lock:
                now = time.monotonic()
                debounce = SETTLED_DEBOUNCE_SECONDS if self.settled else DEBOUNCE_SECONDS
                quiet = now - self.last >= debounce
                overdue = now - self.first >= MAX_BATCH_SECONDS
                if quiet or overdue:
                    self.pending.clear()
                    return True
                wait = debounce - (now - self.last)
            time.sleep(max(0.005, min(wait, 0.05)))
        return False


class WatchError(Exception):
    """A folder that cannot be watched: its folders nest deeper than the watcher follows (it walks them by
    recursion)."""


def follow(observer: Observer, watcher: Watcher, watches: dict) -> bool:
    """Watch the folders *watcher* names now, and stop watching those it no longer names.  Returns whether it
    began to watch one: what was made in it before then (after the build that named it read it) was not seen.
    WatchError where one cannot be watched (the others are)."""
    wanted = [(folder, recursive) for folder, recursive in watcher.watched() if folder.is_dir()]
    for key in [key for key in watches if key not in wanted]:
        try:
            observer.unschedule(watches.pop(key))
        except (KeyError, OSError):
            pass
    began, deep = False, []
    for folder, recursive in wanted:
        if (folder, recursive) not in watches:
            try:
                watches[folder, recursive] = observer.schedule(watcher, str(folder), recursive=recursive)
                began = True
            except OSError:
                pass  # (gone again already; the full listing after each build still sees its files)
            except RecursionError:
                watches[folder, recursive] = None  # (not tried again while it is named)
                deep.append(folder)
    if deep:
        raise WatchError(f"{printable(str(deep[0]))}: cannot watch it for changes: its folders nest too deep "
                         f"(over ~{sys.getrecursionlimit() - 100:,} levels); move what is that deep out of it")
    return began
