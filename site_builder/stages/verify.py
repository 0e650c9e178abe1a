"""The verify stage: every found file read and checked against the pinned keys (in worker processes),
unless the build cache holds an authenticated result for the same bytes and keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from site_builder.cache import BuildCache
from site_builder.incremental import IncrementalStore
from site_builder.inspection import Inspection, by_reference, compact, inspect_bytes, rejected
from site_builder.keys import TrustSet
from site_builder.loading import DEFAULT_MAX_BYTES, FileReadError, InputFile, file_sha256, read_bytes
from site_builder.options import BuildOptions
from site_builder.parallel import Workers, map_in_workers
from site_builder.stages.context import BuildContext
from site_builder.stages.gather import Inputs


@dataclass(frozen=True)
class Inspector:
    """What each process verifying files works with."""

    trust: TrustSet
    max_bytes: int


def inspect_file(inspector: Inspector, item: InputFile) -> Inspection:
    try:
        raw = read_bytes(item.path, inspector.max_bytes)
    except FileReadError as exc:
        return rejected(item.rel, exc.check, exc.reason)
    return by_reference(inspect_bytes(item.rel, raw, inspector.trust))  # the words stay out of the build


def inspect_files(items: list[InputFile], trust: TrustSet, max_bytes: int = DEFAULT_MAX_BYTES, jobs: int = 0,
                  progress: Callable[[str, int, int], None] | None = None) -> list[Inspection]:
    """Verify *items* on all cores (or *jobs* processes), results in order, as a build does but without building
    (``site-builder verify``).  An inspection's words are left out, as in a build."""
    return map_in_workers(inspect_file, Inspector, (trust, max_bytes), items, Workers(jobs, progress), "verify",
                [i.path for i in items])


def inspect_all(options: BuildOptions, cache: BuildCache, store: IncrementalStore,
                found: list[InputFile]) -> tuple[list[Inspection], list[Inspection], dict]:
    """Inspections for every found file (from the store or the cache where the bytes and keys are unchanged);
    also the new ones."""
    trust_id = options.trust.identity()
    kept: dict[str, tuple[str, Inspection]] = store.recall("inspections", trust_id) or {}  # rel -> (stat, result)
    results: dict[str, Inspection] = {}
    rest = []
    for f in found:  # (serve) a file with the stat it had last build has the result it had
        hit = kept.get(f.rel)
        if hit is not None and hit[0] == f.sig:
            results[f.rel] = hit[1]
        else:
            rest.append(f)
    known_sha = {f.rel: cache.file_sha(f.rel, f.sig) for f in rest}
    # A file of a known name and size whose stat alone changed (touched, checked out or copied without its times)
    # is hashed: where its bytes are ones the cache holds a result for, it is not verified again.
    known_sha.update((f.rel, file_sha256(f.path, options.max_bytes)) for f in rest
                     if known_sha[f.rel] is None and cache.same_size(f.rel, f.sig))
    cached = cache.inspections([s for s in known_sha.values() if s], trust_id)
    todo = []
    for f in rest:
        hit = cached.get(known_sha[f.rel] or "")
        if hit is not None and hit.rel == f.rel:
            results[f.rel] = hit
        elif hit is not None:
            results[f.rel] = Inspection(f.rel, hit.sha256, hit.size, hit.check, hit.reason, hit.checks, hit.warnings,
                                        hit.summary)
        else:
            todo.append(f)
    fresh = [compact(i) for i in map_in_workers(inspect_file, Inspector, (options.trust, options.max_bytes), todo,
                                                 options.policy.workers, "verify", [f.path for f in todo])]
    for inspection in fresh:
        results[inspection.rel] = inspection
    file_index = {f.rel: (f.sig, results[f.rel].sha256) for f in found if results[f.rel].sha256}
    if store.keeps:
        store.keep("inspections", trust_id, {f.rel: (f.sig, results[f.rel]) for f in found})
    return [results[f.rel] for f in found], fresh, file_index


@dataclass(frozen=True)
class Verified:
    """Every input file's result, in path order (the files gather skipped included, as rejected), and what
    the cache is to learn of them."""

    inspections: list[Inspection]
    fresh: list[Inspection]  # verified by this build, not known to the cache
    file_index: dict  # rel -> (stat signature, sha256) of every file read


def verify(ctx: BuildContext, inputs: Inputs) -> Verified:
    ctx.cache.load()  # (~2 million objects at 100,000 records: build() has paused the cyclic collector)
    inspections, fresh, file_index = inspect_all(ctx.options, ctx.cache, ctx.store, inputs.found)
    inspections = sorted([rejected(s.rel, s.check, s.reason) for s in inputs.skipped] + inspections,
                         key=lambda i: i.rel)
    ctx.clock.lap("verify")
    return Verified(inspections, fresh, file_index)
