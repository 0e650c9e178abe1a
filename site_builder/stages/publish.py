"""The publish stage's tree: the folder units are written into (the previous tree updated in place, or a
fresh one), units reused from the live site by hard link, the twin the next build updates, and the swap.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from site_builder.cache import BuildCache
from site_builder.loading import FileReadError, read_bytes
from site_builder.mirrors import MirrorCheck, MirrorLookups, unproven
from site_builder.options import BuildOptions
from site_builder.pages import made_by_the_site, report_files
from site_builder.report import BuildReport
from site_builder.stages.context import BuildContext, open_cache, put_cache_back
from site_builder.stages.gather import Inputs
from site_builder.stages.plan import SitePlan, identified, read_build_id
from site_builder.terminal import printable
from site_builder.unit_files import file_count, join_files, split_files
from site_builder.writing import MARKER, OutputError, OutputSlot, StagingTree, TreeChanged, owned_privately

# Update the previous tree in place unless more than this share of its files is stale.  Unlinking a stale file
# costs what linking an unchanged one into a fresh tree does, and a fresh tree also has the old one deleted, which
# the build waits for when the two share files: with 40 % of 10,000 records changed, in place took 9-12 s, a
# fresh tree 25-34 s.  A fresh tree wins where nearly everything is rewritten (an edit of the record's page).
IN_PLACE_LIMIT = 0.9
# A fresh tree copies the files it takes from the live site, instead of linking them, while they are at most this
# share of the live site's (``takes_little``).
COPY_LIMIT = 0.1


# What a file manager leaves in any folder it shows (Finder, Windows Explorer): no one's page, and not worth
# stopping a build for.  It goes with the old tree it is in (from a tree updated in place, before its swap).
DESKTOP_LEFTOVERS = frozenset({".DS_Store", "Thumbs.db", "desktop.ini"})


def check_only_the_site(ctx: BuildContext, inputs: Inputs) -> None:
    """OutputError naming what lies at the top of the output folder besides the site (a ``CNAME`` or a ``.git``
    put there): every build swaps a new tree in for the folder, and the old tree, kept beside it, is the next
    build's to update or delete, so such a file would be lost, or come and go from one build to the next.  The
    static folder's files are the site's, and so is what the build that made the output wrote, as the cache
    recorded it (a static file since removed).  Only the top of the output is looked at: one listing, whatever
    the site's size."""
    output = ctx.slot.output

    def written_before() -> set[str]:
        static = {rel.partition("/")[0] for rel, _ in inputs.static_unit.material} if inputs.static_unit else set()
        ctx.cache.load()  # (as the verify stage would: read only where a name is not the site's own)
        return static | top_names(tree_units(ctx.cache, output))

    foreign = foreign_names(output, written_before)
    if foreign:
        others = f" (also found: {', '.join(foreign[1:4])}{', ...' if len(foreign) > 4 else ''})" if foreign[1:] else ""
        raise OutputError(f"{output / foreign[0]}: not part of the site nor of the static folder{others}; every "
                          f"build replaces the output folder, which would lose it: nothing was changed; move it out "
                          f"(a file to publish belongs in the static folder; delete it if you removed it from there)")


def foreign_names(tree: Path, written_before: Callable[[], set[str]]) -> list[str]:
    """The names at the top of *tree* that the site does not make, in order, leaving out those *written_before*
    gives (asked only where there is such a name); [] where there is no such folder."""
    try:
        names = os.listdir(tree)
    except OSError:
        return []
    foreign = sorted(name for name in names if not made_by_the_site(name) and name not in DESKTOP_LEFTOVERS)
    if foreign:
        known = written_before()
        foreign = [name for name in foreign if name not in known]
    return foreign


def top_names(units: dict | None) -> set[str]:
    """The names at the top of the site that the files of *units* (as the cache keeps them) have; a record's
    are all the site's own."""
    return {rel.partition("/")[0] for name, (_, files) in (units or {}).items() if not name.startswith("record:")
            for rel in split_files(files)}


def prepare_spare_tree(options: BuildOptions, cancelled: Callable[[], bool] = lambda: False) -> bool:
    """Give the output a twin made of hard links, so that the next change updates it in place.

    Incremental builds update the tree beside the output (the previous site) and swap it in.  Right after a
    first build there is no such tree, and the next change would have to link a whole new one (100,000 files:
    seconds); ``serve`` calls this while the user is still reading, so that the first edit is fast.
    Returns True if a twin was made.  Safe to interrupt: an unfinished twin is a staging folder, removed later.
    """
    slot = OutputSlot(options.output)
    slot.check_usable()
    slot.acquire()
    cache, report = None, BuildReport()  # (what it would say of the cache: serve's builds say it)
    try:
        cache = open_cache(options, report)
        units = cache.units(read_build_id(slot.output))
        if units is None:
            return False
        prev_units = twin_units(slot, cache)
        if prev_units is not None and not mostly_stale(prev_units, kept_and_stale(prev_units, units)[1]):
            return False  # a twin the next change can update in place (after a template edit it could not)
        records = sum(1 for name in units if name.startswith("record:"))
        if twin_shortfall(slot, records, len(units) - records):
            return False
        staging = slot.new_staging()
        try:
            if not link_twin(slot, units, staging, cancelled):
                raise OSError("cancelled, or a file could not be linked")
            slot.retire_prev()
            staging.root.rename(slot.prev)
        except OSError:
            slot.discard(staging)
            return False
        except BaseException:
            slot.discard(staging)
            raise
        return True
    finally:
        if cache is not None:
            put_cache_back(options, cache, report)
        slot.release()


def link_twin(slot: OutputSlot, units: dict, staging: StagingTree, cancelled: Callable[[], bool]) -> bool:
    """Fill *staging* with hard links to every file of the live tree (made of *units*); False if cancelled or
    a file could not be linked (the caller discards *staging*).  The report's files are copied instead: a link
    would change the live verification.json's ctime, by which the next build recognises the live site (its
    no-op check, its memory of what the site published)."""
    for n, (name, (_, files)) in enumerate(units.items()):
        if n % 256 == 0 and cancelled():
            return False
        try:
            staging.mirror(split_files(files), slot.output, copy=name == "report")
        except OSError:
            return False
    return True


def prepare_tree(slot: OutputSlot, cache: BuildCache, units: dict, live_units: dict, mirrors: MirrorLookups
                 ) -> tuple[StagingTree, dict, set[str], MirrorCheck, bool]:
    """The tree to build into: the previous tree, updated in place when the cache knows exactly what it holds
    (its stale files are removed here), else a fresh staging folder -- also when nearly every file changes, as
    after an edit of the settings or of a template every record uses, where writing afresh beats removing the
    whole tree first.  Also the live site's check of the mirrored bundles the build may take from it (*mirrors*:
    the build's lookups): of every record for a fresh tree, of those the tree beside does not keep for one updated
    in place (``linked_records``).  Last, whether the tree copies what it takes from the live site
    (``takes_little``)."""
    prev = slot.prev
    prev_units = twin_units(slot, cache)
    if prev_units is not None and foreign_names(prev, lambda: top_names(prev_units)):
        prev_units = None  # (something was put in it: a tree updated in place would publish it)
    kept, stale = kept_and_stale(prev_units or {}, units)
    if prev_units is not None:  # (a record's mirrored bundle kept there must be the live one's, proven file)
        doubtful = unproven(prev, [name[7:] for name in kept if name.startswith("record:")], mirrors.recorded,
                            mirrors.twin())
        stale += [kept.pop(f"record:{pid}")[1] for pid in sorted(doubtful)]
    if prev_units is None or mostly_stale(prev_units, stale):
        # Of no use: its deletion starts now, beside the build.  The new site takes old files only from the live
        # one (its units whose key did not change), and the live site shares a file with this tree only through
        # a unit the two have alike (same key); a tree the cache does not know may share any.
        check = mirrors.check()
        live_units = without_edited(live_units, check.edited)
        copies = takes_little(units, live_units)  # (then it shares no file with any older tree)
        shares = not copies and (prev_units is None or any(
            units.get(name, (None,))[0] == key == live_units.get(name, (None,))[0]
            for name, (key, _) in prev_units.items() if name != "report"))
        slot.retire_prev(shares_files=shares)
        return slot.new_staging(), {}, set(), check, copies
    check = mirrors.check_among(linked_records(units, kept, live_units))
    (prev / MARKER).unlink()  # from here on the previous tree counts as unknown until it is swapped in
    tree = StagingTree(prev, existing=True)
    stale_dirs: set[str] = set()
    try:
        remove_stale(tree, stale, stale_dirs)
    except TreeChanged:  # (a link where a folder was: nothing of that tree is used, nothing it leads to touched)
        slot.retire_prev(shares_files=True)
        return slot.new_staging(), {}, set(), mirrors.check(), False  # (every record may come from the live site)
    for name in DESKTOP_LEFTOVERS:  # (left in the live site, swapped out with it: not to come back with this tree)
        try:
            os.unlink(prev / name)  # (a link there is removed, not followed)
        except OSError:
            pass
    return tree, kept, stale_dirs, check, False


def remove_stale(tree: StagingTree, stale: list[str], stale_dirs: set[str]) -> None:
    """Remove the files of the *stale* units (joined per unit) from *tree*, adding their folders to *stale_dirs*
    (removed once empty, ``write_report``)."""
    for files in stale:
        for rel in split_files(files):
            tree.remove(rel)
            stale_dirs.add(rel.rpartition("/")[0])


def linked_records(units: dict, kept: dict, live_units: dict) -> list[str]:
    """The records whose files a build that keeps *kept* in the tree beside may take from the live site (its
    *live_units*): those it does not keep whose key is the live one's (``place_unit``)."""
    return [name[7:] for name, (key, _) in units.items()
            if name.startswith("record:") and name not in kept and live_units.get(name, (None,))[0] == key]


def without_edited(live_units: dict, edited: frozenset[str]) -> dict:
    """*live_units* with the *edited* records' keys made unequal to any plan's: their files are written again."""
    if not edited:
        return live_units
    return {name: ("(edited in the output)", files) if name.removeprefix("record:") in edited else (key, files)
            for name, (key, files) in live_units.items()}


def takes_little(units: dict, live_units: dict) -> bool:
    """Whether a fresh tree of *units* takes at most COPY_LIMIT of the live site's files (a first build; an edit of
    the settings, or of a template every record's page uses).  It then copies them instead of linking them: it
    shares no file with an older tree, whose deletion the build need not wait for (2 s of a 10,000-record build
    after an edit of the record's page template), and it is worth a twin (``open_tree``).  A fresh tree made
    mostly of the live site's files (the first change after a build without a twin) links them."""
    taken = total = 0
    for name, (key, files) in live_units.items():
        if name != "report":
            count = file_count(files)
            total += count
            if units.get(name, (None,))[0] == key:
                taken += count
    return taken <= COPY_LIMIT * total


# What a record puts in the tree (``pages.record_files``): ten files, one a link, in seven folders.
RECORD_ENTRIES = 17


def twin_shortfall(slot: OutputSlot, records: int, other_units: int) -> str:
    """Why the output's file system cannot take a twin of a site of *records* records and *other_units* other
    units ("" if it can): it needs the inodes for the site and its twin, and as much again.  On tmpfs every hard
    link takes an inode of its budget: a 100,000-record site and its twin need ~3.4 million, more than this VM's
    /dev/shm allowed, and the site's own files then failed for the twin's links.  A twin only saves the next
    build time, so where it might not fit it is not made."""
    try:
        fs = os.statvfs(slot.output.parent)
    except OSError:
        return ""
    needed = 2 * (RECORD_ENTRIES * records + 2 * other_units)
    if fs.f_files == 0 or fs.f_favail >= needed:  # (0: no inode budget, as on btrfs)
        return ""
    return (f"no twin linked: {slot.output.parent} has {fs.f_favail:,} inodes free, and a site this size with its "
            f"twin wants {needed:,}; the next build, which needs room for a second tree, may run out of them "
            f"(on tmpfs every hard link takes one: see df -i)")


def new_twin(slot: OutputSlot) -> StagingTree | None:
    """An empty folder for the twin, or None where it cannot be made (the twin only saves the next build time)."""
    try:
        return slot.new_staging("-spare")  # (beside the tree being built)
    except OSError:
        return None


def mirror_into_twin(slot: OutputSlot, spare: StagingTree | None, tree: StagingTree, files: str,
            copy: bool = False) -> StagingTree | None:
    """Give *spare* (if the build links one) the unit's files of *tree* (hard links; copies with *copy*: the
    report's files, whose status the next build reads); None if one cannot be linked: the spare is then deleted
    before the build goes on, as deleting its links later would change the status of the site's files after the
    build returned."""
    if spare is None:
        return None
    try:
        spare.mirror(split_files(files), tree.root, copy)
    except OSError:
        slot.discard(spare)
        return None
    return spare


def not_reused(ctx: BuildContext, live_known: bool, live_private: bool) -> str:
    """Why nothing is taken over from the live site or the tree beside it, which the cache knows (*live_known*:
    the live one; *live_private*: whether it is ``owned_privately``, as the caller found it), where others may
    write to them (writing.py); "" where it is not so."""
    prev = ctx.slot.prev
    shared = [printable(str(ctx.slot.output))] if live_known and not live_private else []
    if tree_units(ctx.cache, prev) is not None and not owned_privately(prev):
        shared.append(printable(str(prev)))
    if not shared:
        return ""
    return (f"{' and '.join(shared)}: others may write to it (or it is not yours), so nothing in it is reused and "
            f"every file is written again; make it yours alone (chmod go-w) for incremental builds")


def tree_units(cache: BuildCache, tree: Path) -> dict | None:
    """The units of the tree at *tree*, by the build id its verification.json names, if the cache knows them;
    None for no such folder, or a tree it does not know (left half-updated by a killed build, not made by a
    build)."""
    return cache.units(read_build_id(tree)) if tree.is_dir() and not tree.is_symlink() else None


def twin_units(slot: OutputSlot, cache: BuildCache) -> dict | None:
    """The units the twin tree (``.<output>.prev``) holds (``tree_units``), unless others may write to it."""
    return tree_units(cache, slot.prev) if owned_privately(slot.prev) else None


def kept_and_stale(prev_units: dict, units: dict) -> tuple[dict, list[str]]:
    """Of a tree holding *prev_units*: the units it holds as *units* has them (by key), and the files of the
    others (joined per unit)."""
    kept = {name: (key, files) for name, (key, files) in prev_units.items()
            if name != "report" and units.get(name, (None,))[0] == key}
    return kept, [files for name, (_, files) in prev_units.items() if name not in kept]


def mostly_stale(prev_units: dict, stale: list[str]) -> bool:
    """Whether more than IN_PLACE_LIMIT of a tree's files are *stale*: then a fresh tree beats updating it.  The
    tree's files are counted only until they outnumber the stale ones enough: for a small change, a few units
    instead of all of them (counting 100,000 records' took 0.1 s of a one-bundle change)."""
    stale_files = sum(map(file_count, stale))
    total = 0
    for _, files in prev_units.values():
        total += file_count(files)
        if IN_PLACE_LIMIT * total >= stale_files:
            return False
    return stale_files > IN_PLACE_LIMIT * total


def place_unit(name: str, key: str, tree: StagingTree, kept: dict, live_units: dict, output: Path,
               copy: bool = False) -> str | None:
    """Files of an unchanged unit (joined): already in the tree, or hard-linked (with *copy*, copied) from the live
    output; None: render it."""
    have = kept.get(name)
    if have is not None and have[0] == key:
        return have[1]
    live = live_units.get(name)
    if live is None or live[0] != key:
        return None
    linked = []
    live_root = os.path.join(os.fspath(output), "")
    copied: dict[tuple[int, int], str] = {}  # (a record's bundle.json has two names: one file, copied once)
    for rel in split_files(live[1]):
        if copy:
            taken = copy_once(tree, rel, live_root + rel, copied)
        else:
            taken = tree.reuse(rel, live_root + rel)
        if not taken:  # (rel is checked before anything is made)
            for done in linked:  # could not reuse all of it: render the unit instead
                os.unlink(tree.path_for(done))
            return None
        linked.append(rel)
    return live[1]


def copy_once(tree: StagingTree, rel: str, source: str, copied: dict[tuple[int, int], str]) -> bool:
    """Copy *source* to *rel*, or where a unit's file has another name already copied (*copied*: the source's
    device and inode -> that name), link *rel* to that copy; False if impossible."""
    try:
        st = os.lstat(source)
    except OSError:
        return False
    again = copied.get((st.st_dev, st.st_ino))
    if again is not None:
        return tree.link_from(rel, tree.path_for(again))
    copied[(st.st_dev, st.st_ino)] = rel
    return tree.copy_from(rel, source)


@dataclass
class OutputTree:
    """The tree a build writes into, what of it is already right, and the twin it links as it goes.

    *kept*: the units the previous tree, updated in place, already holds as planned; *live_units*: the live
    site's, which unchanged units are hard-linked from (an edited record's with a key no plan has); *check*: the
    live site's mirrored bundles checked, as far as the build takes them (``prepare_tree``); *spare*: the twin
    (None when none is linked)."""

    slot: OutputSlot
    tree: StagingTree
    kept: dict
    live_units: dict
    stale_dirs: set[str]
    check: MirrorCheck
    spare: StagingTree | None = None
    copies: bool = False  # the live site's files are copied, not linked (``takes_little``)
    records_written: set[str] = field(default_factory=set)  # pith ids of the records whose files were written

    def place(self, name: str, key: str) -> str | None:
        """The files of an unchanged unit (joined), in the tree now; None: it is to be rendered."""
        return place_unit(name, key, self.tree, self.kept, self.live_units, self.slot.output, self.copies)

    def drop_replanned(self, units: dict) -> None:
        """Remove the kept units that the plan made again mid-build (``plan.without_changed``: *units*) holds
        under another key, or not at all (a listing that showed a record dropped): their files are stale, and stand
        where the unit is written anew."""
        self.kept, stale = kept_and_stale(self.kept, units)
        remove_stale(self.tree, stale, self.stale_dirs)

    def link_in_twin(self, files: str, copy: bool = False) -> None:
        self.spare = mirror_into_twin(self.slot, self.spare, self.tree, files, copy)

    def drop_twin(self) -> None:
        if self.spare is not None:
            self.slot.discard(self.spare)
            self.spare = None

    def discard(self) -> None:
        """Undo a build that failed: the tree (unless it is the previous one) and the twin are removed."""
        if self.tree.root != self.slot.prev:
            self.slot.discard(self.tree)
        self.drop_twin()


def reuse_units(ctx: BuildContext, site: SitePlan, out: OutputTree, names: Iterable[str]) -> list[str]:
    """The one reuse rule, for every kind of unit: a unit whose planned key is that of files the tree already
    holds (the previous tree, updated in place) or the live site has (hard-linked in) keeps those files.  Returns
    the others, in plan order, for their kind to write."""
    units, report = site.units, ctx.report
    to_write = []
    for name in names:
        key = units[name][0]
        files = out.place(name, key)
        if files is None:
            to_write.append(name)
            continue
        units[name] = (key, files)
        report.files_reused += file_count(files)
        out.link_in_twin(files)
    return to_write


def open_tree(ctx: BuildContext, site: SitePlan) -> OutputTree:
    """The tree to write *site* into, and a twin when the build writes everything afresh and is asked to."""
    live_units = ctx.cache.units(site.chosen.previous.build_id) or {}
    live_private = owned_privately(ctx.slot.output)  # (linked from only while no other user could change it)
    ctx.report.reuse_note = not_reused(ctx, bool(live_units), live_private)
    if not live_private:
        live_units = {}
    tree, kept, stale_dirs, check, copies = prepare_tree(ctx.slot, ctx.cache, site.units, live_units, ctx.mirrors)
    out = OutputTree(ctx.slot, tree, kept, without_edited(live_units, check.edited), stale_dirs, check, copies=copies)
    policy = ctx.options.policy
    if policy.link_twin and policy.use_cache and copies:  # (a fresh tree written nearly all anew: worth a twin)
        ctx.report.twin_note = twin_shortfall(ctx.slot, len(site.selection.published), len(site.collection))
        out.spare = None if ctx.report.twin_note else new_twin(ctx.slot)
    ctx.clock.lap("prepare_tree")
    return out


def write_report(ctx: BuildContext, site: SitePlan, out: OutputTree, names: list[str]) -> SitePlan:
    """The report unit (*names* is ``["report"]``): verification.json (and its pages) and the pages that show
    this build's outcome, under the build id that names the plan as it was carried out."""
    if site.renamed:  # (records dropped out, or a search index was made under another key)
        site = identified(ctx, site)
    report, tree = ctx.report, out.tree
    tree.write_chunks(MARKER, site.report_doc.chunks())  # (its build id differs from the live one's)
    report.note_rendered([MARKER])
    written = [MARKER]
    for rel, chunks in site.report_doc.pages():
        tree.write_chunks(rel, chunks)
        written.append(rel)
    for rel, data in report_files(site.renderer, site.catalog, site.report_doc, ctx.about is not None):
        tree.write(rel, data)
        written.append(rel)
        report.pages_written += rel.endswith(".html")
        if differs(ctx.slot.output / rel, data):
            report.note_rendered([rel])
    report.files_written += len(written)
    site.units["report"] = ("", join_files(written))
    out.link_in_twin(site.units["report"][1], copy=True)
    report.removed = sorted(f"pith/{pid}/index.html" for pid in site.chosen.previous.published
                            if pid not in site.selection.published)
    tree.remove_empty_folders(out.stale_dirs)
    return site


def swap(ctx: BuildContext, out: OutputTree) -> None:
    """Put the written tree in the output's place, atomically."""
    slot = ctx.slot
    if out.tree.root == slot.prev:
        slot.publish_prev()
    else:
        slot.publish(out.tree, out.spare)
        out.spare = None
        # Unless this build linked in files of the old site, all of the new one's are new: deleting an
        # older tree cannot change any (the build need not wait for it).
        slot.shares_files = out.tree.holds_older_files
    ctx.clock.lap("swap")
    if ctx.options.on_published is not None:
        ctx.options.on_published(ctx.report)


def differs(path: Path, data: bytes) -> bool:
    """Whether the live site's file at *path* is not *data*: read as any input is (``read_bytes``: a link is not
    followed, a FIFO put there not waited on; either differs)."""
    try:
        return read_bytes(path, len(data)) != data
    except FileReadError:
        return True
