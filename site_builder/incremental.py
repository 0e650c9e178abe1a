"""The incremental store: what a build may reuse from an earlier one, in one place and under one rule.

An entry is a value and the *material* it was made from (file stats, digests, the build key, the records a
listing shows).  A build reuses the value only when the material it has now is equal (``==``) to the entry's;
otherwise it makes the value again and the new entry replaces the old.  So an entry can save work but never
change the output (tests/test_incremental.py builds with and without one, and compares the trees).

The store has two layers:

* **this process**: the entries below, for ``serve``, which builds again and again.  They are never written to
  disk: bytes read back from a file are untrusted input, and unpickling them would run code;
* **the build cache** (``cache.py``): SQLite rows (most of them plain-JSON documents) that any later build may
  read.  They hold the inputs' digests, the verification results, the units of the trees in the output folder,
  the records' list rows, what the live site published and the last short-address plan.  Every row is tagged
  with this user's cache key, and a row whose tag does not check counts as absent.

A one-shot build (``build`` on the command line) has a store that keeps nothing in the process: every recall
misses, and the build starts from the cache alone.

Entry names say what the value is: ``addresses``, ``catalogue``, ``selection``, ``previous_site``,
``renderer``, ``inspections`` (every input file's stat and result, under one trust set), ``unit-keys`` (every
unit's key and material, under one build key), ``report-lines`` (every input file's outcome and report lines),
one entry each for ``unit-rows:<unit>``, and the report's pieces of ``report.PIECE_LINES`` files each: their
outcomes (``report-outcomes:<first>``), their lines in a report file (``report-lines:<file>:<first>``) and in
the report's identity (``report-identity:<first>``).  A build that finishes drops the entries it did not use
(``forget_unused``), which would otherwise hold records that are gone; the entries of every file or unit hold
this build's alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol, TypeVar

T = TypeVar("T")


class OpenCache(Protocol):
    """The build cache as the store holds it open between builds (``cache.BuildCache``; named by what is used,
    since the cache's module sits above this one)."""

    path: Path | None
    db: object

    def take_lock(self) -> None: ...

    def close(self) -> None: ...


class IncrementalStore:
    """Serve keeps one of these across its builds (``ServeSession``); every other build makes an empty one
    that keeps nothing (``keeps=False``)."""

    def __init__(self, keeps: bool = True):
        self.keeps = keeps
        self.cache: OpenCache | None = None  # the open build cache (serve keeps it open between builds)
        self._entries: dict[str, tuple[object, object]] = {}  # name -> (material, value)
        self._used: set[str] = set()

    def recall(self, name: str, material: object) -> object | None:
        """The value kept under *name* if it was made from material equal to *material*; else None."""
        entry = self._entries.get(name)
        if entry is None:
            return None
        self._used.add(name)
        return entry[1] if entry[0] == material else None

    def last(self, name: str) -> tuple[object, object] | None:
        """(material, value) as kept under *name*, whatever it was made from: for a value a build patches where
        a few records changed, instead of making it again (the short addresses, the listings' order)."""
        entry = self._entries.get(name)
        if entry is not None:
            self._used.add(name)
        return entry

    def keep(self, name: str, material: object, value: T) -> T:
        """Keep *value*, made from *material*, under *name* (in a store that keeps anything); returns *value*."""
        if self.keeps:
            self._entries[name] = (material, value)
            self._used.add(name)
        return value

    def reuse(self, name: str, material: object, make: Callable[[], T]) -> T:
        """The value kept for *material* under *name*, or ``make()``, kept."""
        value = self.recall(name, material)
        return value if value is not None else self.keep(name, material, make())  # type: ignore[return-value]

    def start_build(self) -> None:
        """From here on, count what the build uses."""
        self._used = set()

    def forget_unused(self) -> None:
        """Drop the entries the build that just finished did not use (of records and units that are gone)."""
        self._entries = {name: entry for name, entry in self._entries.items() if name in self._used}

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def close(self) -> None:
        """Close the build cache (the entries stay: a later build in this process may still use them)."""
        if self.cache is not None:
            self.cache.close()
            self.cache = None
