"""Part of planning: which verified bundle each record publishes, with no rollback behind what the previous
site or the deployed mirror published, and every input file's outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from site_builder.cache import BuildCache
from site_builder.inspection import Inspection, inspect_bytes, rejected
from site_builder.live_site import MAX_MANIFEST_BYTES, LiveManifest, LiveSite, LiveSiteUnavailable, manifest_claims
from site_builder.loading import FileReadError, read_bytes
from site_builder.incremental import IncrementalStore
from site_builder.options import BuildOptions
from site_builder.records import PaperSummary
from site_builder.report import PUBLISHED, REJECTED, SUPERSEDED, BuildReport, FileOutcome, ReportRows, pieces
from site_builder.selection import Candidate, PreviousSite, Selection, is_rollback, published_record, select
from site_builder.stages.context import BuildContext, stat_sig
from site_builder.stages.gather import Inputs
from site_builder.stages.verify import Verified
from site_builder.terminal import printable
from site_builder.writing import MARKER, OutputSlot


def read_previous_site(output: Path) -> PreviousSite:
    """What the site in *output* published, from its verification.json (empty if unreadable)."""
    try:
        read = manifest_claims(read_bytes(output / MARKER, MAX_MANIFEST_BYTES))
        return PreviousSite(read.build_id, read.claims)
    except (FileReadError, ValueError):
        return PreviousSite(None, {})


def previous_site_of(store: IncrementalStore, cache: BuildCache, slot: OutputSlot) -> PreviousSite:
    """What the site in the output published, as the store or the cache knows it while verification.json has
    the same stat (the build that wrote it recorded it there), else as that file says."""
    sig = stat_sig(slot.output / MARKER)
    if sig is None:
        return read_previous_site(slot.output)
    return store.reuse("previous_site", sig, lambda: cache.previous_site(sig) or read_previous_site(slot.output))


def published_by(build_id: str, report: BuildReport) -> PreviousSite:
    return PreviousSite(build_id, {o.inspection.pith_id: published_record(o.inspection) for o in report.outcomes
                                   if o.status == PUBLISHED and o.inspection.summary is not None
                                   and o.inspection.sha256})


def select_bundles(store: IncrementalStore, inspections: list[Inspection], paths: dict) -> Selection:
    """select() over the verified files.  When a few files came, went or changed since the selection in the
    store and no record has two of them, that selection is patched instead of recomputed."""
    last = store.last("selection")
    memo = {c.inspection.rel: c for c in last[0]} if last is not None else {}
    candidates = []
    for i in inspections:
        if i.verified:
            c = memo.get(i.rel)
            if c is None or c.inspection is not i or c.source != paths[i.rel]:
                c = Candidate(i, paths[i.rel])
            candidates.append(c)
    if not store.keeps:
        return select(candidates)
    selection = None
    if last is not None and not last[1].superseded:
        selection = patched_selection(memo, last[1], candidates)
    if selection is None:
        selection = select(candidates)
    # Kept as a copy: the caller goes on to refuse rollbacks, which edits the selection it gets.
    store.keep("selection", candidates, Selection(dict(selection.published), dict(selection.superseded)))
    return selection


def patched_selection(was: dict[str, Candidate], selected: Selection,
                       candidates: list[Candidate]) -> Selection | None:
    """``select(candidates)`` from the last selection, which superseded nothing (so each of its candidates was
    published under its own record), when at most 64 files came, went or changed; None when a record now has
    two candidates (then select() has to choose)."""
    now = {c.inspection.rel: c for c in candidates}
    gone = [c for rel, c in was.items() if now.get(rel) is not c]
    came = [c for rel, c in now.items() if was.get(rel) is not c]
    if len(gone) + len(came) > 64:
        return None
    published = dict(selected.published)
    for c in gone:
        del published[c.inspection.pith_id]
    for c in came:
        if c.inspection.pith_id in published:
            return None
        published[c.inspection.pith_id] = c
    return Selection(dict(sorted(published.items())) if came else published)  # in pith-id order, as select()


def refuse_rollbacks(selection, previous: PreviousSite, slot: OutputSlot, options: BuildOptions,
                      report: BuildReport) -> None:
    """Never replace a newer published bundle by an older one: keep the previous site's copy (re-verified)."""
    for pith_id, chosen in list(selection.published.items()):
        prior = previous.published.get(pith_id)
        if prior is None or prior.sha256 == chosen.inspection.sha256 or not is_rollback(chosen.inspection, prior):
            continue
        kept_path = slot.output / "pith" / pith_id / "bundle.json"
        try:
            kept = inspect_bytes(f"(previous site) pith/{pith_id}/bundle.json", read_bytes(kept_path), options.trust)
        except FileReadError:
            kept = None
        problem = "is missing" if kept is None else why_not_newer(chosen.inspection, pith_id, kept)
        if problem is None and kept.sha256 != prior.sha256:
            problem = "is not the one its manifest names"
        if problem is not None:
            report.warnings.append(f"{chosen.inspection.rel}: older than the bundle published before, which no "
                                   f"longer verifies as a newer copy of the record (it {problem}); publishing the "
                                   f"input")
            continue
        _keep_newer_copy(selection, report, chosen, kept, kept_path, "the previous site", "the published bundle")


def why_not_newer(chosen: Inspection, pith_id: str, copy: Inspection) -> str | None:
    """Why *copy*, a bundle found where a site published record *pith_id*, cannot stand in for the input
    *chosen*; None when it verifies, is that record's and is newer by its own signed values.  A site's manifest
    (the previous one in the output, or the deployed one) only says where to look: nothing it claims counts."""
    if not copy.verified:
        return f"does not verify ({copy.check}: {printable(copy.reason)})"
    if copy.pith_id != pith_id:
        return f"is another record's (pith:{copy.pith_id})"
    if not is_rollback(chosen, published_record(copy)):
        return "is not newer than the input"
    return None


def refuse_deployed_rollbacks(selection, site: LiveSite, manifest: LiveManifest, options: BuildOptions,
                               report: BuildReport, scratch: Path) -> None:
    """Never publish a record older than the deployed mirror's copy, where that copy verifies.

    The manifest only says which records to look at (those it claims are newer); the live bundle then has to
    verify, be that record's and be newer by its own signed values to be kept.  A claim that is not borne out
    proves nothing: the input is published, with a warning."""
    shown = printable(options.deployed)
    for pith_id, chosen in list(selection.published.items()):
        claim = manifest.claims.get(pith_id)
        if claim is None or claim.sha256 == chosen.inspection.sha256 or not is_rollback(chosen.inspection, claim):
            continue
        where = f"(live site) pith/{pith_id}/bundle.json"
        try:
            raw = site.bundle(pith_id, options.max_bytes)
        except LiveSiteUnavailable as exc:
            raw, problem = None, f"could not be read ({printable(str(exc))})"
        else:
            problem = "is missing"
        live = inspect_bytes(where, raw, options.trust) if raw is not None else None
        if live is not None:
            problem = why_not_newer(chosen.inspection, pith_id, live)
        if problem is not None:
            report.warnings.append(f"{chosen.inspection.rel}: pith:{pith_id}: live site {shown} lists a newer bundle "
                                   f"(built_at {printable(claim.built_at)}), but that bundle {problem}: the claim "
                                   f"proves nothing; publishing the input")
            continue
        kept_path = scratch / f"live-{pith_id}.json"
        kept_path.write_bytes(raw)
        _keep_newer_copy(selection, report, chosen, live, kept_path, "the live site", "the live site's verified bundle")


_STAYS = ", which stays published"


def _keep_newer_copy(selection: Selection, report: BuildReport, chosen: Candidate, kept: Inspection,
                     kept_path: Path, kept_from: str, described: str) -> None:
    """Publish *kept*, a verified and newer copy of *chosen*'s record, in its place, and say why of the input it
    replaces (*chosen*, or the input *chosen* was itself kept in place of: the previous site's copy, then the
    live site's newer still); the refusal said then no longer says that copy stays published."""
    replaced = chosen.stands_for or chosen.inspection
    mine, theirs = replaced.summary, kept.summary
    selection.published[theirs.pith_id] = Candidate(kept, kept_path, kept_from=kept_from, stands_for=replaced)
    said = f"{replaced.rel}: pith:{theirs.pith_id}: "
    earlier = selection.superseded.get(replaced.rel)
    if earlier is not None and said + earlier in report.warnings:  # (its copy, kept before, no longer stays)
        report.warnings[report.warnings.index(said + earlier)] = said + earlier.removesuffix(_STAYS)
    note = (f"rollback refused: built_at {mine.built_at} with {mine.event_count} events is older than {described} "
            f"(built_at {theirs.built_at}, {theirs.event_count} events){_STAYS}")
    selection.superseded[replaced.rel] = note
    report.warnings.append(said + note)


def record_outcomes(report: BuildReport, inspections: list[Inspection], selection, changed: dict,
                    store: IncrementalStore) -> None:
    """Every input file's outcome (*changed*: pith id -> why its bundle changed after it was verified), made a
    piece at a time (``report.pieces``); serve keeps each piece with what it was made of and reuses it while that
    is equal (a piece of the very same results compares at once): 0.007-0.009 s less of a change's rebuild at
    10,000 files."""
    rows = ReportRows(store)
    superseded, failed = sorted(selection.superseded.items()), sorted(changed.items())

    def outcomes_of(piece: list[Inspection]) -> list[FileOutcome]:
        outcomes = []
        for i in piece:
            if not i.verified:
                outcomes.append(FileOutcome(i, REJECTED))
            elif i.rel in selection.superseded:
                outcomes.append(FileOutcome(i, SUPERSEDED, selection.superseded[i.rel]))
            elif i.pith_id in changed:
                check, _, reason = changed[i.pith_id].partition(": ")
                outcomes.append(FileOutcome(rejected(i.rel, check, reason), REJECTED))
            else:
                # The same result published again keeps its outcome (and its report line).
                outcomes.append(rows.outcome(i, PUBLISHED))
        return outcomes

    for start, piece in pieces(inspections):
        report.outcomes.extend(store.reuse(f"report-outcomes:{start}", (piece, superseded, failed),
                                           lambda piece=piece: outcomes_of(piece)))
    for c in selection.published.values():
        if c.kept_from and c.inspection.pith_id not in changed:
            report.outcomes.append(FileOutcome(c.inspection, PUBLISHED, f"kept from {c.kept_from}"))


@dataclass(frozen=True)
class Chosen:
    """The bundle each record publishes (``selection``, in pith-id order), and what the site in the output
    published before."""

    previous: PreviousSite
    selection: Selection

    @property
    def published(self) -> list[PaperSummary]:
        return [c.inspection.summary for c in self.selection.published.values()]


def choose(ctx: BuildContext, inputs: Inputs, verified: Verified) -> Chosen:
    """One bundle per record, the newest valid one; none older than the previous site's or the deployed
    mirror's verified copy."""
    previous = previous_site_of(ctx.store, ctx.cache, ctx.slot)
    ctx.clock.lap("previous_site")
    selection = select_bundles(ctx.store, verified.inspections, inputs.paths)
    refuse_rollbacks(selection, previous, ctx.slot, ctx.options, ctx.report)
    if inputs.deployed_manifest is not None:
        refuse_deployed_rollbacks(selection, inputs.deployed, inputs.deployed_manifest, ctx.options, ctx.report,
                                  ctx.scratch)
    ctx.clock.lap("select")
    return Chosen(previous, selection)
