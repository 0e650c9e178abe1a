"""Time the small builds of two or more checkouts side by side, interleaved build by build (see BENCHMARKS.md).

    python benchmarks/bench_compare.py --n 10000 --workdir /dev/shm/sb-compare --rounds 12 CHECKOUT [CHECKOUT ...]

A no-op build of 10,000 bundles takes about a tenth of a second and a one-bundle change a few tenths; on a
shared machine, single runs of them vary by more than the differences worth measuring, and a machine that gets
busier between one checkout's runs and the next's shows up as a difference between the checkouts.  So each round
here runs every scenario once in every checkout, one build after the other (A B C, A B C, ...), each in a fresh
process as ``bench_build.py`` runs it (with that checkout's own runner, so an older checkout is timed through its
own interface) once the build before it has saved its cache (untimed), and the medians over the rounds are
compared, as are the builds of each round (each checkout's over the first's: the median and middle half of
those ratios).

Each checkout builds its own copy of the same generated bundles, with its own templates, in its own work folder
(``<workdir>/<n>-<i>``), after an untimed full build.  The scenarios of a round: a no-op rebuild, one bundle
changed (a newer bundle of the same record: a later variant each round, never a rollback), one added, and that
one deleted again.  Prints each scenario's median per checkout, its ratio to the first checkout's, the ratios
round by round, and every build's wall time in the order run.

With ``--serve CHANGES``, the live preview's save to reload instead: each round runs every checkout's own
``bench_serve.py`` in turn (a ``serve`` started afresh, then CHANGES bundles saved one after the other), in its own
work folder (``<workdir>/serve-<i>``), and the latencies of all rounds are pooled per checkout: one serve session's
changes vary by tens of milliseconds from one session to the next, more than the differences worth measuring.

    python benchmarks/bench_compare.py --n 10000 --workdir /dev/shm/sb-compare --rounds 5 --serve 9 CHECKOUT ...

With ``--command``, whole commands as a user runs them instead, each a fresh Python process with Python's
bytecode cache on (as an installed package has it): the command line's start alone (``import site_builder.cli``),
and a no-op ``site-builder build`` (that start, the build, and the process's exit).  The scenarios above time
``build()`` inside a process that has imported everything already.

    python benchmarks/bench_compare.py --n 10000 --workdir /dev/shm/sb-compare --rounds 12 --command CHECKOUT ...
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_build import run_build  # (beside this script)
from generate import generate, make_bundle

SCENARIOS = ("no-op rebuild", "change one bundle", "add one bundle", "delete one bundle")
COMMAND_SCENARIOS = ("command line start", "no-op command")
COMMAND = "import sys; from site_builder.cli import main; sys.exit(main())"  # (the checkout's, first on the path)


def runner_of(checkout: Path) -> str:
    """The build runner of *checkout*'s own ``bench_build.py`` (what it times a build with, through the
    interface that checkout has)."""
    source = (checkout / "benchmarks" / "bench_build.py").read_text()
    start = source.find('RUNNER = r"""')
    if start < 0:
        sys.exit(f"{checkout}: no benchmarks/bench_build.py with a RUNNER to time its builds with")
    return source[start + len('RUNNER = r"""'):].split('"""', 1)[0]


def timed_build(checkout: Path, runner: str, work: Path, jobs: int) -> dict:
    """One build of *work* by *checkout*'s code in a fresh process (``bench_build.run_build``), once the cache
    is saved: what the runner says of it (``wall``, its time in seconds; ``written``, the files it wrote; ...)."""
    result = run_build(work, False, jobs, checkout=checkout, runner=runner)
    saved(work)
    return result


def timed_command(checkout: Path, work: Path, jobs: int, scenario: str, no_op: bool = True) -> float:
    """The wall time of one of ``COMMAND_SCENARIOS`` by *checkout*'s code, in a fresh process (``--command``), once
    the cache is saved; exits where the command fails, or a build that is to be a no-op (*no_op*) wrote pages."""
    if scenario == "command line start":
        argv = [sys.executable, "-c", "import site_builder.cli"]
    else:
        argv = [sys.executable, "-c", COMMAND, "build", "--bundles", str(work / "bundles"), "--output",
                str(work / "site"), "--trusted-keys", str(work / "bench-key.json"), "--templates",
                str(work / "templates"), "--no-search", "--quiet", "--jobs", str(jobs)]
    with_bytecode = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    started = time.perf_counter()
    run = subprocess.run(argv, cwd=checkout, env=with_bytecode, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if run.returncode != 0:
        sys.exit(f"{checkout}: the {scenario!r} command failed (exit {run.returncode}):\n{run.stderr.strip()}")
    written = re.search(r"\b(\d+) pages written", run.stdout + run.stderr)
    if scenario == "no-op command" and no_op and (written is None or written[1] != "0"):
        sys.exit(f"{checkout}: the {scenario!r} wrote pages: {(run.stdout + run.stderr).strip()[-300:]}")
    saved(work)
    return wall


def saved(work: Path) -> None:
    """Wait (untimed) until the build in *work* has saved its cache: a build hands that to a detached process,
    which would otherwise run beside the next checkout's build and slow it down instead of its own."""
    lock = work / ".site-builder-cache" / "site" / "cache.lock"  # (where every checkout keeps it, beside "site")
    if lock.exists():
        with open(lock, "rb") as held:  # (the lock is released as the file is closed)
            fcntl.flock(held, fcntl.LOCK_EX)


def prepare(work: Path, source: Path, checkout: Path) -> None:
    """*work* holding a copy of the bundles in *source* and *checkout*'s templates, and nothing built yet."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    shutil.copytree(source / "bundles", work / "bundles")
    shutil.copy2(source / "bench-key.json", work / "bench-key.json")
    shutil.copytree(checkout / "templates", work / "templates")


def serve_latencies(checkout: Path, work: Path, n: int, changes: int) -> list[int]:
    """Save to reload of *changes* changes, in ms, as *checkout*'s own ``bench_serve.py`` times them in *work*."""
    run = subprocess.run([sys.executable, str(checkout / "benchmarks" / "bench_serve.py"), "--n", str(n),
                          "--workdir", str(work), "--repeat", str(changes)], capture_output=True, text=True)
    found = [int(ms) for ms in re.findall(r"^change \d+: reload event after (\d+) ms$", run.stderr, re.M)]
    if run.returncode != 0 or len(found) != changes:
        sys.exit(f"{checkout}: bench_serve.py timed {len(found)} of {changes} changes (exit {run.returncode}): "
                 f"{run.stderr.strip()[-300:]}")
    return found


def compare_serve(checkouts: list[Path], source: Path, args: argparse.Namespace) -> None:
    """``--serve``: every checkout's save to reload, round by round, pooled (see the module's docstring)."""
    works = [args.workdir / f"serve-{i}" for i in range(len(checkouts))]
    for work in works:  # (bench_serve.py takes the bundles it finds there, as many as it is asked for)
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(source / "bundles", work / f"serve-{args.n}" / "bundles")
        shutil.copy2(source / "bench-key.json", work / f"serve-{args.n}" / "bench-key.json")
    pooled: dict[int, list[int]] = {i: [] for i in range(len(checkouts))}
    for later in range(args.rounds):
        for i, (checkout, work) in enumerate(zip(checkouts, works)):
            found = serve_latencies(checkout, work, args.n, args.serve)
            pooled[i] += found
            print(f"round {later + 1} {checkout}: " + " / ".join(map(str, found)), file=sys.stderr)
    first = statistics.median(pooled[0])
    print(f"{args.n} bundles, {args.rounds} rounds of {args.serve} changes, checkouts in turn; save to reload, "
          f"the median of every change (ms):")
    for i, checkout in enumerate(checkouts):
        median = statistics.median(pooled[i])
        print(f"{str(checkout):<40} {median:>6.0f}" + ("" if i == 0 else f" ({median / first:.2f}x)")
              + f"   {len(pooled[i])} changes, {min(pooled[i])}-{max(pooled[i])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkouts", type=Path, nargs="+", help="the source trees to compare (the first is the "
                        "one the others' ratios are against)")
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/site-builder-compare"))
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--serve", type=int, metavar="CHANGES", help="time serve's save to reload instead of the "
                        "builds: each round, CHANGES changes in each checkout's own serve session")
    parser.add_argument("--command", action="store_true", help="time whole commands instead of the builds: the "
                        "command line's start, and a no-op site-builder build, each a fresh process")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    if args.serve is not None and args.serve < 1:
        parser.error("--serve: at least 1 change")
    checkouts = [c.resolve() for c in args.checkouts]
    if args.serve is not None and args.command:
        parser.error("--serve and --command: one at a time")
    runners = [runner_of(c) for c in checkouts] if args.serve is None else []

    source = args.workdir / f"{args.n}-bundles"
    if not (source / "bundles").is_dir() or len(list((source / "bundles").glob("b*.json"))) != args.n:
        shutil.rmtree(source, ignore_errors=True)
        generate(source / "bundles", args.n)
    (source / "bundles" / "b0000005.json").write_bytes(make_bundle(5))  # (as generated: each change is newer)
    (source / "bundles" / "zz-added.json").unlink(missing_ok=True)
    if args.serve is not None:
        compare_serve(checkouts, source, args)
        return
    works = [args.workdir / f"{args.n}-{i}" for i in range(len(checkouts))]
    for checkout, runner, work in zip(checkouts, runners, works):
        prepare(work, source, checkout)
        for _ in range(2):  # (the full build each scenario starts from, and the first no-op: untimed)
            if args.command:
                timed_command(checkout, work, args.jobs, "no-op command", no_op=False)
            else:
                timed_build(checkout, runner, work, args.jobs)
    scenarios = COMMAND_SCENARIOS if args.command else SCENARIOS
    walls = {(i, name): [] for i in range(len(checkouts)) for name in scenarios}
    for later in range(args.rounds):
        for name in scenarios:
            for i, (checkout, runner, work) in enumerate(zip(checkouts, runners, works)):
                if args.command:
                    walls[i, name].append(timed_command(checkout, work, args.jobs, name))
                else:
                    walls[i, name].append(timed_scenario(checkout, runner, work, args, name, later))
        print(f"round {later + 1} of {args.rounds} done", file=sys.stderr)
    report(checkouts, scenarios, walls, args)


def timed_scenario(checkout: Path, runner: str, work: Path, args: argparse.Namespace, name: str, later: int) -> float:
    """The wall time of one of ``SCENARIOS`` in round *later*, its input changed as the scenario says first."""
    extra = work / "bundles" / "zz-added.json"
    if name == "change one bundle":
        (work / "bundles" / "b0000005.json").write_bytes(make_bundle(5, variant=3 + later))
    elif name == "add one bundle":
        extra.write_bytes(make_bundle(args.n + 1))
    elif name == "delete one bundle":
        extra.unlink()
    result = timed_build(checkout, runner, work, args.jobs)
    if (result["written"] == 0) != (name == "no-op rebuild"):  # (it would time other work)
        sys.exit(f"{checkout}: the {name!r} build wrote {result['written']} files")
    return result["wall"]


def report(checkouts: list[Path], scenarios: tuple[str, ...], walls: dict, args: argparse.Namespace) -> None:
    what = "commands" if args.command else "builds"
    print(f"{args.n} bundles, {args.rounds} rounds, {what} interleaved checkout by checkout; medians (wall s):")
    print(f"{'scenario':<20}" + "".join(f"{str(c):>28}" for c in checkouts))
    for name in scenarios:
        first = statistics.median(walls[0, name])
        cells = [f"{statistics.median(walls[i, name]):.3f}" + ("" if i == 0 else
                 f" ({statistics.median(walls[i, name]) / first:.2f}x)") for i in range(len(checkouts))]
        print(f"{name:<20}" + "".join(f"{cell:>28}" for cell in cells))
    if len(checkouts) > 1:
        print(f"\neach {what[:-1]} over the first checkout's in the same round (a few seconds apart): median, middle "
              "half")
        print(f"{'scenario':<20}" + "".join(f"{str(c):>28}" for c in checkouts[1:]))
        for name in scenarios:
            cells = [paired_ratios(walls[i, name], walls[0, name]) for i in range(1, len(checkouts))]
            print(f"{name:<20}" + "".join(f"{cell:>28}" for cell in cells))
    print(f"\nevery {what[:-1]}, in the order run:")
    for (i, name), times in walls.items():
        print(f"{name:<20} {str(checkouts[i])}: " + " / ".join(f"{t:.3f}" for t in times))


def paired_ratios(times: list[float], first: list[float]) -> str:
    """Each round's build over the first checkout's of the same round, as "median (lowest quarter-highest
    quarter)": a machine that gets busier for a few rounds moves both builds of a round, and the medians of the
    two columns can then differ by more than these ratios do (a no-op run of 12 rounds: 1.05 times by the
    medians, 1.13 times by the rounds, 1.02-1.38 in the middle half)."""
    ratios = [t / f for t, f in zip(times, first)]
    if len(ratios) < 2:
        return f"{ratios[0]:.2f}x"
    low, _, high = statistics.quantiles(ratios, n=4, method="inclusive")  # (within the ratios measured)
    return f"{statistics.median(ratios):.2f}x ({low:.2f}-{high:.2f})"


if __name__ == "__main__":
    main()
