"""What ``serve`` keeps between its rebuilds: the planning results of ``BuildMemory``, in the process only.

Nothing here is written to disk: a memo read back from a file would be untrusted input (see cache_key.py), and
a separate ``build`` starts from the authenticated build cache alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from site_builder.report import ReportRows

if TYPE_CHECKING:
    from site_builder.cache import BuildCache
    from site_builder.inspection import Inspection
    from site_builder.pages import Catalogue, RedirectPlan
    from site_builder.rendering import SiteRenderer
    from site_builder.selection import Candidate, PreviousSite, Selection


@dataclass
class BuildMemory:
    """What serve keeps from one build for the next: the open build cache, which then holds every verification result
    in memory, the compiled templates, and the intermediate results of planning (selection, short addresses,
    listing order, unit keys, report rows).  Each entry is keyed by what it was computed from (file stats,
    digests, the build key, or the very objects it was made of), so it can only save work, never change the
    output (tests/test_incremental.py builds with and without it)."""

    cache: BuildCache | None = None
    renderer: tuple[str, SiteRenderer] | None = None
    report_rows: ReportRows = field(default_factory=ReportRows)
    previous_site: tuple[str | None, PreviousSite] | None = None  # keyed by the stat of verification.json
    redirects: tuple[list, RedirectPlan] | None = None  # keyed by the records' ids and versions
    catalogue: tuple[list, Catalogue] | None = None  # keyed by the records' ids, dates and categories
    unit_rows: dict[str, tuple[list, str]] = field(default_factory=dict)  # listing unit -> (its records, digests)
    unit_keys: dict[str, tuple[str, object, str]] = field(default_factory=dict)  # unit -> (build key, material, key)
    inputs: dict[str, tuple[str, str, Inspection]] = field(default_factory=dict)  # rel -> (stat, trust, result)
    selection: tuple[list[Candidate], Selection] | None = None  # last candidates and what select() made of them
    record_keys: tuple[str, dict[str, tuple]] | None = None  # build key; pith id -> (sha256, addresses, versions, key)
    list_rows: tuple[str, dict[str, bytes]] | None = None  # build key; row digest -> a record's list row (UTF-8)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
            self.cache = None
