"""The benchmark scripts anyone can run: they work from a fresh checkout and measure what they say."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow  # (the benchmarks, run small)

BENCHMARKS = ROOT / "benchmarks"


def test_build_benchmark_runs_every_scenario_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run([sys.executable, str(BENCHMARKS / "bench_build.py"), "--n", "80", "--workdir",
                             str(tmp_path / "work"), "--json", str(out), "--jobs", "2"],  # (workers on any machine)
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    steps = {s["name"]: s for s in report["steps"]}
    assert list(steps) == ["full build", "no-op rebuild", "first incremental", "change one bundle",
                           "replace one record", "add one bundle", "delete one bundle", "touch every bundle",
                           "change 40 %", "edit one template", "edit a list template"]
    full = steps["full build"]
    assert report["n"] == 80 and full["published"] == 80 and full["reused"] == 0
    assert steps["no-op rebuild"]["written"] == 0  # writing no file
    for name in ("change one bundle", "replace one record", "add one bundle", "delete one bundle"):
        # a few record and listing files; everything else is reused
        assert 0 < steps[name]["written"] < 60 < steps[name]["reused"], name
    touched = steps["touch every bundle"]  # (hashed and found in the cache: no worker verified any again)
    assert touched["written"] == 0 and all(workers == 0 for _, workers in touched["cpu"].values())
    assert 80 * 2 // 5 * 5 < steps["change 40 %"]["written"] < full["written"]
    edit = steps["edit one template"]  # (paper.html: every record's files again, the rest copied from the site)
    assert edit["written"] + edit["reused"] == full["written"] and 0 < edit["reused"] <= full["written"] // 10
    listing = steps["edit a list template"]  # (the list pages and the site-wide files again; the records' kept)
    assert 0 < listing["written"] < full["written"] // 5 < listing["reused"]
    assert all(s["wall"] > 0 and s["rss_main_mb"] > 0 and s["timings"] for s in steps.values())
    # Where the CPU went: the full build's workers verified and rendered; the no-op started none.
    assert full["cpu"]["verify"][1] > 0 and full["cpu"]["render_records"][1] > 0
    assert all(workers == 0 for _, workers in steps["no-op rebuild"]["cpu"].values())
    # The table names every scenario with its figures (the CPU's two columns after "waited"); only the full build
    # has a rate.
    table = result.stdout[result.stdout.index("scenario"):]
    assert "CPU main s  CPU workers s" in table
    full_row = re.search(r"^full build +[0-9.]+ +\d+ +\d+ +\d+ +[0-9.]+ +([0-9.]+) +([0-9.]+) ", table, re.M)
    assert full_row and float(full_row[2]) > 0
    assert re.search(r"^no-op rebuild +[0-9.]+ +– +0 +0 +[0-9.]+ +[0-9.]+ +0\.00 ", table, re.M)


def test_build_benchmark_repeats_the_small_scenarios_in_rounds(tmp_path):
    """``--rounds``: the no-op, change, add and delete builds again, each a real one of its kind (a change a newer
    bundle, not a refused rollback; an add after the last delete), and each one's median printed."""
    out = tmp_path / "bench.json"
    result = subprocess.run([sys.executable, str(BENCHMARKS / "bench_build.py"), "--n", "20", "--workdir",
                             str(tmp_path / "work"), "--json", str(out), "--jobs", "2", "--rounds", "3", "--only",
                             "full build,no-op rebuild,change one bundle,add one bundle,delete one bundle"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    steps = json.loads(out.read_text())["steps"]
    small = ["no-op rebuild", "change one bundle", "add one bundle", "delete one bundle"]
    assert [s["name"] for s in steps] == ["full build"] + small * 3
    for s in steps[1:]:
        published = 21 if s["name"] == "add one bundle" else 20
        assert s["published"] == published and (s["written"] == 0) == (s["name"] == "no-op rebuild"), s
    medians = result.stdout[result.stdout.index("medians over 3 rounds"):]
    for name in small:
        walls = [s["wall"] for s in steps if s["name"] == name]
        row = re.search(rf"^{name} +([0-9.]+)  (.+)$", medians, re.M)
        assert row and float(row[1]) == pytest.approx(sorted(walls)[1], abs=0.001), medians
        assert row[2] == " / ".join(f"{t:.3f}" for t in walls)
    assert "full build" not in medians


def this_checkout_edited(folder: Path, path: str, old: str, new: str) -> Path:
    """A checkout at *folder* with this one's code, templates and benchmarks, whose file *path* (``site_builder/...``
    or ``benchmarks/...``) has *old* (once) made *new*."""
    edited = Path(path)
    folder.mkdir(parents=True)
    for name in ("site_builder", "templates", "benchmarks"):
        if name != edited.parts[0]:
            (folder / name).symlink_to(ROOT / name)
    (folder / edited.parent).mkdir()
    for other in (ROOT / edited.parent).iterdir():
        if other.name not in (edited.name, "__pycache__"):
            (folder / edited.parent / other.name).symlink_to(other)
    source = (ROOT / path).read_text()
    assert source.count(old) == 1
    (folder / path).write_text(source.replace(old, new))
    return folder


def test_compare_benchmark_interleaves_checkouts_build_by_build(tmp_path):
    """Two checkouts timed scenario by scenario, one build of each after the other, each from its own copy of the
    bundles: every scenario's median per checkout with its ratio to the first's, and every build's time.  The
    second checkout here is this one, timed through a runner of its own that says each build took five seconds
    more (more than any build of 20 bundles varies by on a busy machine)."""
    slower = this_checkout_edited(tmp_path / "slower", "benchmarks/bench_build.py",
                                  "wall = time.perf_counter() - t\n", "wall = time.perf_counter() - t + 5\n")
    result = subprocess.run([sys.executable, str(BENCHMARKS / "bench_compare.py"), "--n", "20", "--workdir",
                             str(tmp_path / "work"), "--rounds", "2", str(ROOT), str(slower)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["20-0", "20-1", "20-bundles"]
    for name in ("no-op rebuild", "change one bundle", "add one bundle", "delete one bundle"):
        row = re.search(rf"^{name} +([0-9.]+) +([0-9.]+) \(([0-9.]+)x\)$", result.stdout, re.M)
        assert row, result.stdout
        first, second, ratio = map(float, row.groups())
        assert second > first + 4 and ratio == pytest.approx(second / first, rel=0.05), result.stdout
        for checkout in (ROOT, slower):  # (a line per checkout, a time per round)
            times = re.search(rf"^{name} +{re.escape(str(checkout))}: ([0-9.]+) / ([0-9.]+)$", result.stdout, re.M)
            assert times
            if checkout == ROOT:
                firsts = list(map(float, times.groups()))
            else:  # each round's build over the first checkout's: their median and middle half, in order
                ratios = sorted(float(t) / f for t, f in zip(times.groups(), firsts))
                paired = re.search(rf"^{name} +([0-9.]+)x \(([0-9.]+)-([0-9.]+)\)$",
                                   result.stdout.split("same round")[1], re.M)
                assert paired, result.stdout
                median, low, high = map(float, paired.groups())
                # (from times printed to the millisecond: a no-op of 20 bundles takes a few hundredths)
                assert median == pytest.approx(sum(ratios) / 2, rel=0.1) and 1 < low <= median <= high
                assert low == pytest.approx(ratios[0], rel=0.1) or low > ratios[0]
                assert high == pytest.approx(ratios[1], rel=0.1) or high < ratios[1]
    assert (tmp_path / "work" / "20-1" / "site" / "pith").is_dir()  # (each checkout built its own copy)


def test_compare_benchmark_waits_for_the_last_builds_cache_save_before_the_next_build(tmp_path):
    """A build's detached cache saver would otherwise run beside the next checkout's build (and count there)."""
    import fcntl
    import threading
    import time

    from bench_compare import saved

    lock = tmp_path / ".site-builder-cache" / "site" / "cache.lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # (a saver at work)
    threading.Timer(0.5, os.close, [fd]).start()
    started = time.perf_counter()
    saved(tmp_path)
    assert time.perf_counter() - started >= 0.4
    saved(tmp_path / "nothing built yet")  # (no cache: nothing to wait for)


def test_compare_benchmark_times_whole_commands_in_fresh_processes(tmp_path):
    """``--command`` times what a user waits for: a fresh process's start (the package imported) and a whole
    no-op ``site-builder build``, checkout by checkout.  The second checkout here takes two seconds longer to
    import, which both scenarios count, and the commands ran each checkout's own code (its own output)."""
    slower = this_checkout_edited(tmp_path / "slower", "site_builder/__init__.py", '__version__ = "0.1.0"\n',
                                  '__version__ = "0.1.0"\n__import__("time").sleep(2)\n')
    result = subprocess.run([sys.executable, str(BENCHMARKS / "bench_compare.py"), "--n", "20", "--workdir",
                             str(tmp_path / "work"), "--rounds", "2", "--command", str(ROOT), str(slower)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "commands interleaved checkout by checkout" in result.stdout
    for name in ("command line start", "no-op command"):
        row = re.search(rf"^{name} +([0-9.]+) +([0-9.]+) \(([0-9.]+)x\)$", result.stdout, re.M)
        assert row, result.stdout
        first, second, ratio = map(float, row.groups())
        # (each of the slower checkout's commands sleeps 2 s; the first's median moves with the machine's load)
        assert second >= 2.0 > first and ratio == pytest.approx(second / first, rel=0.05), result.stdout
    for work in ("20-0", "20-1"):
        assert (tmp_path / "work" / work / "site" / "pith").is_dir()


def test_compare_benchmark_stops_where_a_no_op_command_wrote_pages(tmp_path):
    """A "no-op" command that wrote pages (here a checkout whose code is another in every process, so that its
    output is never up to date) would time a build under the no-op's name: the comparison stops and says so."""
    identity = 'return f"{__version__}+{digest.hexdigest()[:16]}"'
    restless = this_checkout_edited(tmp_path / "restless", "site_builder/__init__.py", identity,
                                    identity + ' + str(__import__("os").getpid())')
    result = subprocess.run([sys.executable, str(BENCHMARKS / "bench_compare.py"), "--n", "20", "--workdir",
                             str(tmp_path / "work"), "--rounds", "1", "--command", str(ROOT), str(restless)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 1 and f"{restless}: the 'no-op command' wrote pages" in result.stderr


def test_compare_benchmark_stops_where_a_build_did_not_do_its_scenarios_work(tmp_path):
    """A "change" that wrote nothing (a checkout that took the new bundle for nothing new, say) would time a
    no-op under the change's name: the comparison stops and says which."""
    idle = this_checkout_edited(tmp_path / "idle", "benchmarks/bench_build.py", '"written": r.files_written',
                                '"written": 0')
    result = subprocess.run([sys.executable, str(BENCHMARKS / "bench_compare.py"), "--n", "20", "--workdir",
                             str(tmp_path / "work"), "--rounds", "1", str(ROOT), str(idle)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 1 and f"{idle}: the 'change one bundle' build wrote 0 files" in result.stderr


def test_compare_benchmark_pools_each_checkouts_serve_sessions_round_by_round(tmp_path):
    """``--serve``: each round, every checkout's own serve benchmark in turn, in its own work folder; the median of
    all its changes, with the ratio to the first checkout's.  The second checkout is this one, its serve
    benchmark reporting a second more than it measures."""
    slower = this_checkout_edited(tmp_path / "slower", "benchmarks/bench_serve.py", "{latency * 1000:.0f} ms",
                                  "{latency * 1000 + 1000:.0f} ms")
    result = subprocess.run([sys.executable, str(BENCHMARKS / "bench_compare.py"), "--n", "20", "--workdir",
                             str(tmp_path / "work"), "--rounds", "2", "--serve", "2", str(ROOT), str(slower)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["20-bundles", "serve-0", "serve-1"]
    first = re.search(rf"^{re.escape(str(ROOT))} +(\d+) +4 changes, \d+-\d+$", result.stdout, re.M)
    second = re.search(rf"^{re.escape(str(slower))} +(\d+) \(([0-9.]+)x\) +4 changes, \d+-\d+$", result.stdout,
                       re.M)
    assert first and second, result.stdout
    shown_first, shown_second, ratio = int(first.group(1)), int(second.group(1)), float(second.group(2))
    assert shown_second > shown_first + 700  # (a second more, whatever the two sessions took)
    # (the medians are shown to the millisecond, the ratio made of them unrounded, to the hundredth)
    lowest, highest = (shown_second - 0.5) / (shown_first + 0.5), (shown_second + 0.5) / (shown_first - 0.5)
    assert lowest - 0.005 <= ratio <= highest + 0.005
    for checkout in (ROOT, slower):  # (a line per round and checkout, in turn)
        assert len(re.findall(rf"^round [12] {re.escape(str(checkout))}: \d+ / \d+$", result.stderr, re.M)) == 2
    lost = this_checkout_edited(tmp_path / "lost", "benchmarks/bench_serve.py", "reload event after",
                                "reload after")
    result = subprocess.run([sys.executable, str(BENCHMARKS / "bench_compare.py"), "--n", "20", "--workdir",
                             str(tmp_path / "work"), "--rounds", "1", "--serve", "1", str(lost)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 1 and f"{lost}: bench_serve.py timed 0 of 1 changes (exit 0)" in result.stderr


@pytest.mark.parametrize("arguments, error", [
    (["--only", "full build,noop"], "no scenario named 'noop'"),
    (["--only", "no-op rebuild"], "'no-op rebuild' builds on 'full build': name it too"),
    (["--only", "full build,delete one bundle"], "'delete one bundle' builds on 'add one bundle': name it too"),
    (["--rounds", "0"], "--rounds: at least 1"),
])
def test_build_benchmark_refuses_a_scenario_without_what_it_builds_on(tmp_path, arguments, error):
    """A scenario run without the one it builds on would time other work (a full build, or a build with nothing
    to do) under its name, and no rounds would time nothing: refused before anything is generated or built."""
    result = subprocess.run([sys.executable, str(BENCHMARKS / "bench_build.py"), "--n", "20", "--workdir",
                             str(tmp_path / "work"), *arguments], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and error in result.stderr, result.stderr
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize("search", [False, True])
def test_serve_benchmark_times_each_reload(tmp_path, search):
    result = subprocess.run([sys.executable, str(BENCHMARKS / "bench_serve.py"), "--n", "40", "--workdir",
                             str(tmp_path / "work"), "--repeat", "2", *(["--search"] if search else [])],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert len(re.findall(r"^change \d: reload event after \d+ ms$", result.stderr, re.M)) == 2  # progress
    indexed = re.findall(r"^change \d: search index updated after [0-9.]+ s$", result.stderr, re.M)
    assert len(indexed) == (2 if search else 0)
    assert re.search(r"^40 bundles: save-to-reload median \d+ ms", result.stdout, re.M)


def test_floor_benchmark_does_a_records_unavoidable_file_work(tmp_path):
    out = tmp_path / "floor.json"
    result = subprocess.run([sys.executable, str(BENCHMARKS / "bench_floor.py"), "--n", "30", "--repeat", "2",
                             "--out", str(tmp_path / "out"), "--json", str(out)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    runs = json.loads(out.read_text())["runs"]
    assert len(runs) == 2
    for run in runs:  # ten files a record, as a build writes (bundle.json twice, one of them a link)
        assert run["bundles"] == 30 and run["files"] == 300
        assert run["bundles_per_second"] > 0 and run["cpu_ms_per_bundle"] > 0
    assert len(re.findall(r"^ +\d +30 +300 +[0-9.]+ +\d+ +[0-9.]+$", result.stdout, re.M)) == 2
    assert not (tmp_path / "out").exists()  # cleaned up after itself


@pytest.mark.parametrize("pages", [False, True])
def test_floor_with_pages_writes_the_records_rendered_files(tmp_path, pages):
    """``--pages``: the floor's files hold the record's pages as the built-in templates render them, not
    placeholder bytes of their size (what makes it the floor of a builder with Jinja pages)."""
    import orjson
    from html import escape

    from conftest import REAL_FILES
    from site_builder.records import summarize
    import bench_floor

    out = tmp_path / "out"
    for top in ("pith", ".well-known/pith", "arxiv"):
        (out / top).mkdir(parents=True)
    bench_floor._init(str(out), pages)
    try:
        assert bench_floor._record((7, str(REAL_FILES[0]))) == 10
    finally:
        bench_floor._renderer = None
    raw = REAL_FILES[0].read_bytes()
    [folder] = (out / "pith").glob("?" * 26)
    assert (out / ".well-known/pith" / folder.name / "bundle.json").read_bytes() == raw
    page, state = (folder / "index.html").read_bytes(), (folder / "state.json").read_bytes()
    redirects = [p for p in (out / "pith").glob("*/index.html") if p.parent != folder]
    redirects += out.glob("arxiv/*/index.html")
    assert len(redirects) == 5
    if not pages:
        assert set(page) == {ord("p")} and set(state) == {ord("s")}
        return
    bundle = orjson.loads(raw)
    title = summarize(bundle).display_title
    assert page.startswith(b"<!DOCTYPE html>") and escape(title).encode() in page
    assert orjson.loads(state) == bundle["state"]
    assert all(escape(title).encode() in p.read_bytes() for p in redirects)


def test_file_system_type_is_the_longest_mount_point_holding_the_path():
    from bench_build import file_system_type, in_memory

    mounts = ("/dev/vda / ext4 rw 0 0\n"
              "tmpfs /dev/shm tmpfs rw,nosuid 0 0\n"
              "/dev/vdb /dev/shm/disk ext4 rw 0 0\n"
              "tmpfs /mnt/with\\040space tmpfs rw 0 0\n")
    assert file_system_type(Path("/dev/shm/sbb/100000"), mounts) == "tmpfs"
    assert in_memory(Path("/dev/shm"), mounts) and in_memory(Path("/mnt/with space/x"), mounts)
    assert not in_memory(Path("/dev/shm/disk/x"), mounts)  # a disk mounted inside the tmpfs
    assert not in_memory(Path("/dev/shmx"), mounts) and not in_memory(Path("/tmp/work"), mounts)
    assert file_system_type(Path("/tmp"), "") == ""


def test_build_benchmark_in_memory_deletes_an_earlier_runs_trees_before_building():
    """On tmpfs a run's trees are memory: with the last run's still there, a 100,000-record full build was killed
    by the out-of-memory killer.  There they are deleted before the first build (elsewhere after the last)."""
    shm = Path("/dev/shm")
    from bench_build import in_memory

    assert in_memory(shm), "/dev/shm is expected to be a tmpfs on Linux"
    work = Path(tempfile.mkdtemp(prefix="sb-bench-test-", dir=shm))
    try:
        run = lambda: subprocess.run([sys.executable, str(BENCHMARKS / "bench_build.py"), "--n", "20", "--workdir",
                                      str(work), "--only", "full build", "--jobs", "1"],
                                     capture_output=True, text=True, timeout=300)  # noqa: E731
        first = run()
        assert first.returncode == 0, first.stderr
        assert (work / "20" / "site" / "index.html").is_file() and "deleting what" not in first.stderr
        second = run()
        assert second.returncode == 0, second.stderr
        assert re.search(r"deleting what an earlier run left \(\d+ folders?\) first: .* is in memory \(tmpfs\)",
                         second.stderr), second.stderr
        assert not list((work / "20").glob(".stale-*"))  # gone before the builds, not left to a detached deleter
        assert (work / "20" / "site" / "index.html").is_file()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_build_benchmark_with_the_search_index_says_whose_figures_it_counts(tmp_path):
    """With ``--search`` the build's child processes include Pagefind (8.6 GB at 100,000 records): the table says
    that its worker columns count it, and the index's stage is timed."""
    out = tmp_path / "bench.json"
    result = subprocess.run([sys.executable, str(BENCHMARKS / "bench_build.py"), "--n", "20", "--workdir",
                             str(tmp_path / "work"), "--search", "--only", "full build", "--json", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "search index on" in result.stdout
    assert '"CPU workers" and "RSS worker" include Pagefind\'s' in result.stdout
    full = json.loads(out.read_text())["steps"][0]
    assert full["timings"]["search_index"] > 0 and full["cpu"]["search_index"][1] > 0  # Pagefind's CPU, a child's


def test_the_generator_runs_as_a_script_with_nothing_put_on_its_path(tmp_path):
    """The benchmarks are scripts that import their helpers (the signing too) from their own folder: nothing of
    the tests is put on the import path, and the bundles they make verify against the key they write."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "generate.py"), str(tmp_path / "b"), "3"],
                   check=True, cwd=tmp_path, env=env, capture_output=True)
    result = subprocess.run([sys.executable, "-m", "site_builder", "verify", str(tmp_path / "b"), "--trusted-keys",
                             str(tmp_path / "bench-key.json")], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(list((tmp_path / "b").iterdir())) == 3
