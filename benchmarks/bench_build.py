"""Benchmark site-builder on N generated bundles (see BENCHMARKS.md for recorded figures).

    python benchmarks/bench_build.py --n 10000 [--workdir /tmp/sb-bench] [--json results.json] [--search]

Generates N realistic bundles signed with a benchmark key (cached in the work folder), then, each in a fresh
process: a full build into an empty output, a no-op rebuild, and rebuilds after changing one bundle (a newer
bundle of the same record), replacing one (the file now holds another record), adding one, deleting one,
touching every bundle (new times, the same bytes: a checkout or a copy without its times), giving 40 % of the
bundles a newer version and editing one template (``--rounds N``: the no-op, change, add
and delete builds N times each, with their medians).  Prints wall time, bundles/second, files written and
reused, how long the scenario first waited (untimed) for the previous build's detached cache saver, peak RSS of
the main process and of the largest worker, and the time of each build stage.  Builds save their cache in the
background and link a twin of a site written afresh, as the command line does (``--no-twin``: as ``build
--no-twin``).  An earlier run's output is deleted after this run's builds, or before them where the work folder
is in memory (tmpfs), as it holds RAM.  To compare checkouts side by side, see ``bench_compare.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

from generate import generate, make_bundle  # noqa: E402  (beside this script)

sys.path.insert(0, str(ROOT))  # this checkout's site_builder, as the builds it times
from site_builder.settings import SiteConfig  # noqa: E402
from site_builder.writing import remove_tree  # noqa: E402

RUNNER = r"""
import json, resource, sys, time
from pathlib import Path
from site_builder.build import BuildOptions, build
from site_builder.keys import load_trust_set
from site_builder.options import BuildPolicy
from site_builder.settings import SiteConfig
args = json.loads(sys.argv[1])
opts = BuildOptions(bundles=Path(args["bundles"]), output=Path(args["output"]),
                    trust=load_trust_set([Path(args["key"])]), templates=Path(args["templates"]),
                    search=args["search"], config=SiteConfig(search_shard_size=args["shard_size"]),
                    policy=BuildPolicy(jobs=args["jobs"], one_shot=True, left_for_exit=[],  # as the CLI does
                                       link_twin=args["twin"], look_ahead=args["look_ahead"]))
# A build hands the cache save to a detached process; the next build waits for it (the cache lock).  Wait here,
# untimed, so each scenario measures itself; the wait is reported as "saver_wait".
import fcntl, os
from site_builder.build import default_cache_dir
lock = default_cache_dir(Path(args["output"])) / "cache.lock"
t = time.perf_counter()
if lock.exists():
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.close(fd)
saver_wait = time.perf_counter() - t
t = time.perf_counter()
r = build(opts)
wall = time.perf_counter() - t
print(json.dumps({"wall": wall, "written": r.files_written, "reused": r.files_reused, "pages": r.pages_written,
                  "published": r.count("published"), "changed": r.changed, "timings": r.timings, "cpu": r.cpu,
                  "saver_wait": saver_wait,
                  "rss_main_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rss_worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def run_build(work: Path, search: bool, jobs: int, twin: bool = True, shard_size: int = SiteConfig.search_shard_size,
              look_ahead: bool = True, checkout: Path = ROOT, runner: str = RUNNER) -> dict:
    """One build of *work* in a fresh process by *checkout*'s code through *runner* (another checkout's own, for
    ``bench_compare.py``): what the runner says of it."""
    args = {"bundles": str(work / "bundles"), "output": str(work / "site"), "key": str(work / "bench-key.json"),
            "templates": str(work / "templates"), "search": search, "jobs": jobs, "twin": twin,
            "look_ahead": look_ahead,
            "shard_size": shard_size}
    # The code measured is *checkout*'s (``python -c`` puts the working folder first on the import path).
    out = subprocess.run([sys.executable, "-c", runner, json.dumps(args)], capture_output=True, text=True,
                         cwd=checkout)
    if out.returncode != 0:  # say why, not only that it failed
        sys.exit(f"{checkout}: the build failed (exit {out.returncode}):\n{out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def file_system_type(path: Path, mounts: str | None = None) -> str:
    """The type of the file system *path* is on (its mount point's, the longest that holds it, from
    /proc/mounts or *mounts*), or "" where not known."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return ""
    real = os.path.realpath(path)
    best, kind = "", ""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def in_memory(path: Path, mounts: str | None = None) -> bool:
    """Whether *path* is on a file system held in memory, where files cost RAM (tmpfs, ramfs)."""
    return file_system_type(path, mounts) in ("tmpfs", "ramfs")


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/site-builder-bench"))
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--search", action="store_true", help="include the Pagefind index in every build")
    parser.add_argument("--jobs", type=int, default=0)
    parser.add_argument("--search-shard-size", type=int, default=SiteConfig.search_shard_size,
                        help="records per search index at most (the search_shard_size setting)")
    parser.add_argument("--no-look-ahead", action="store_true",
                        help="builds look up the trees' mirrored bundles as they go, not ahead in a child process "
                             "(BuildPolicy(look_ahead=False))")
    parser.add_argument("--no-twin", action="store_true",
                        help="build as `build --no-twin` does (no twin linked by builds that write every file)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the no-op, change, add and delete scenarios this many times each, in rounds, and "
                             "print each one's median (single builds of a few tenths of a second vary by more "
                             "than the differences worth measuring on a busy machine)")
    parser.add_argument("--only", help="comma-separated scenario names to run (default: all), e.g. "
                                       "'full build,no-op rebuild' for a quick run at 100,000 bundles; every "
                                       "scenario builds on 'full build', and 'delete one bundle' on 'add one "
                                       "bundle'")
    args = parser.parse_args()
    wanted = _wanted(parser, args.only) if args.only else None
    if args.rounds < 1:
        parser.error("--rounds: at least 1")

    work = args.workdir / str(args.n)
    bundles = work / "bundles"
    (bundles / "zz-added.json").unlink(missing_ok=True)  # left by an interrupted run
    if not bundles.is_dir() or len(list(bundles.iterdir())) != args.n:
        shutil.rmtree(bundles, ignore_errors=True)
        t = time.perf_counter()
        generate(bundles, args.n)
        print(f"generated {args.n} bundles in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    # The files the scenarios edit start as generated (an interrupted run, or a hand edit, must not turn a
    # "newer bundle" scenario into a refused rollback).
    for i in (4, 5, 6):
        (bundles / f"b{i:07d}.json").write_bytes(make_bundle(i))
    many = range(10, 10 + args.n * 2 // 5)  # the files "change 40 %" rewrites (not the three above)
    _restore(work, bundles, many)
    # A previous run's trees hold up to two million entries at 100,000 bundles: deleting them took longer than the
    # run.  They are moved aside now (a rename) and deleted once this run's builds are done -- except in memory
    # (tmpfs), where they hold it: a 100,000-record site and its twin are ~7 GB there, and with the last run's
    # beside it the next full build was killed by the kernel's out-of-memory killer.  There they go first.
    for stale in [work / "site", work / ".site.prev", work / ".site-builder-cache", work / "templates"]:
        if stale.exists():
            stale.rename(work / f".stale-{time.time_ns()}")
    stale_trees = sorted(work.glob(".stale-*"))
    if stale_trees and in_memory(work):
        print(f"deleting what an earlier run left ({len(stale_trees)} folder{'s' if len(stale_trees) > 1 else ''}) "
              f"first: {work} is in memory "
              f"({file_system_type(work)})", file=sys.stderr)
        for stale in stale_trees:
            remove_tree(stale, wait=True)
    shutil.copytree(ROOT / "templates", work / "templates")
    size = sum(p.stat().st_size for p in bundles.iterdir()) / args.n

    steps = []

    def step(name: str, action=None) -> None:
        if wanted is not None and name not in wanted:
            return
        if action:
            action()
        result = run_build(work, args.search, args.jobs, not args.no_twin, args.search_shard_size,
                           not args.no_look_ahead)
        result["name"] = name
        steps.append(result)
        print(f"{name:<22} {result['wall']:8.2f}s  written {result['written']:>7}  reused {result['reused']:>7}",
              file=sys.stderr)

    extra = bundles / "zz-added.json"
    step("full build")
    step("no-op rebuild")
    # The first incremental build has no second tree to update yet: it writes a fresh one (by hard links).
    step("first incremental", lambda: (bundles / "b0000004.json").write_bytes(make_bundle(4, variant=3)))
    # A newer bundle of the same record (what a resolver publishes after new events).
    step("change one bundle", lambda: (bundles / "b0000005.json").write_bytes(make_bundle(5, variant=3)))
    # The file now holds another paper: its old record's pages go, the new one's come, listings shift.
    step("replace one record", lambda: (bundles / "b0000006.json").write_bytes(make_bundle(6, record=args.n + 7)))
    step("add one bundle", lambda: extra.write_bytes(make_bundle(args.n + 1)))
    step("delete one bundle", extra.unlink)
    paired = wanted is None or "delete one bundle" in wanted  # (another add needs the last one deleted)
    for later in range(1, args.rounds):  # (each change a newer bundle again: a later variant, never a rollback)
        step("no-op rebuild")
        step("change one bundle", lambda: (bundles / "b0000005.json").write_bytes(make_bundle(5, variant=3 + later)))
        if paired:
            step("add one bundle", lambda: extra.write_bytes(make_bundle(args.n + 1)))
            step("delete one bundle", extra.unlink)
    # Every bundle's times new and its bytes the same (checked out again, copied without its times).
    step("touch every bundle", lambda: _touch(bundles))
    # A newer bundle for 40 % of the records (a day's pull after the resolver re-signed many): the twin is updated
    # in place (most listing pages change too).
    step("change 40 %", lambda: _rewrite(work, bundles, many))
    step("edit one template", lambda: (work / "templates" / "paper.html").write_text(
        (work / "templates" / "paper.html").read_text() + "\n{# edited #}\n"))
    # The list pages' own template: those pages again, the records' pages kept (each unit keys on its templates).
    step("edit a list template", lambda: (work / "templates" / "listing.html").write_text(
        (work / "templates" / "listing.html").read_text() + "\n{# edited #}\n"))
    for i in (4, 5, 6):
        (bundles / f"b{i:07d}.json").write_bytes(make_bundle(i))
    _restore(work, bundles, many)
    for stale in work.glob(".stale-*"):  # in a detached, idle-priority process: the command returns now
        remove_tree(stale, wait=False)

    print(f"\n{args.n} bundles (~{size / 1024:.1f} KB each); {machine()}; search index "
          f"{f'on, in shards of at most {args.search_shard_size:,} records' if args.search else 'off'}")
    # CPU: seconds of the build's own process and of its worker processes, over its stages (where the time
    # goes: on N cores a build is CPU-bound when the two add up to nearly N times its wall time).
    print(f"{'scenario':<22}{'wall s':>8}{'bundles/s':>11}{'written':>9}{'reused':>9}{'waited':>8}{'CPU main s':>12}"
          f"{'CPU workers s':>15}{'RSS main MB':>13}{'RSS worker MB':>15}  stages (s)")
    for s in steps:
        rate = f"{args.n / s['wall']:.0f}" if s["name"] == "full build" else "–"  # a rate of the whole set only
        stages = " ".join(f"{k}={v:.2f}" for k, v in s["timings"].items())
        main_cpu, worker_cpu = (sum(cpu[i] for cpu in s["cpu"].values()) for i in (0, 1))
        print(f"{s['name']:<22}{s['wall']:8.2f}{rate:>11}{s['written']:9}{s['reused']:9}{s['saver_wait']:8.2f}"
              f"{main_cpu:12.2f}{worker_cpu:15.2f}{s['rss_main_mb']:13.0f}{s['rss_worker_mb']:15.0f}  {stages}")
    if args.rounds > 1:
        walls: dict[str, list[float]] = {}
        for s in steps:
            walls.setdefault(s["name"], []).append(s["wall"])
        print(f"\nmedians over {args.rounds} rounds (wall s, each build in the order run):")
        for name, times in walls.items():
            if len(times) > 1:
                print(f"{name:<22}{statistics.median(times):8.3f}  " + " / ".join(f"{t:.3f}" for t in times))
    if args.search:  # (the build's children include Pagefind, which holds the whole index in memory)
        print("with the search index, \"CPU workers\" and \"RSS worker\" include Pagefind's (its stage: search_index)")
    if args.json:
        args.json.write_text(json.dumps({"n": args.n, "machine": machine(), "search": args.search,
                                         "search_shard_size": args.search_shard_size,
                                         "bundle_kb": size / 1024, "steps": steps}, indent=2))


SCENARIOS = ("full build", "no-op rebuild", "first incremental", "change one bundle", "replace one record",
             "add one bundle", "delete one bundle", "touch every bundle", "change 40 %", "edit one template",
             "edit a list template")
# Each run starts from an empty output, and "delete one bundle" deletes the bundle "add one bundle" added: without
# what they build on, the figures would be of other work (a full build; a build with nothing to do).
NEEDS = {name: ("full build",) for name in SCENARIOS[1:]} | {"delete one bundle": ("full build", "add one bundle")}


def _wanted(parser: argparse.ArgumentParser, only: str) -> set[str]:
    """The scenarios named by ``--only``, checked: known names, and what each builds on named too."""
    wanted = {name.strip() for name in only.split(",") if name.strip()}
    unknown = sorted(wanted - set(SCENARIOS))
    if unknown:
        parser.error(f"--only: no scenario named {', '.join(map(repr, unknown))} "
                     f"(scenarios: {', '.join(SCENARIOS)})")
    for name in sorted(wanted, key=SCENARIOS.index):
        missing = [need for need in NEEDS.get(name, ()) if need not in wanted]
        if missing:
            parser.error(f"--only: {name!r} builds on {' and '.join(map(repr, missing))}: name it too")
    return wanted


def _touch(bundles: Path) -> None:
    """Every bundle given a modification time a minute ahead of now, its bytes as they are."""
    stamp = time.time() + 60
    for path in bundles.glob("*.json"):
        os.utime(path, (stamp, stamp))


def _rewrite(work: Path, bundles: Path, numbers: range) -> None:
    (work / "rewritten").touch()  # (until _restore puts them back, also after an interrupted run)
    for i in numbers:
        (bundles / f"b{i:07d}.json").write_bytes(make_bundle(i, variant=3))


def _restore(work: Path, bundles: Path, numbers: range) -> None:
    """Put back the generated bundles ``_rewrite`` rewrote."""
    if (work / "rewritten").exists():
        for i in numbers:
            (bundles / f"b{i:07d}.json").write_bytes(make_bundle(i))
        (work / "rewritten").unlink()


if __name__ == "__main__":
    main()
