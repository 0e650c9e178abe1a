"""Work over worker processes (parallel.py): results in order, each process with the state its stage's init made,
the build's own process given what it already holds, and workers that never outlive their build."""

from __future__ import annotations

import functools
import gc
import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import generated_bundles, open_descriptors
from site_builder import parallel
from site_builder.parallel import (PARALLEL_THRESHOLD, WorkAhead, WorkerLostError, Workers, imap_in_workers,
                                   map_in_workers, usable_cores)


class Offset:
    """A stage's state: what each process works with."""

    def __init__(self, offset: int, where: str = "worker"):
        self.offset, self.where, self.pid = offset, where, os.getpid()


def add(state: Offset, item: int) -> tuple[int, str, int]:
    return item + state.offset, state.where, state.pid


@pytest.mark.parametrize("count", [3, PARALLEL_THRESHOLD * 2])
def test_results_come_in_order_from_the_state_each_process_made(count):
    results = map_in_workers(add, Offset, (10,), list(range(count)), Workers(jobs=2), "test",
                             local_initargs=(10, "here"))
    assert [r[0] for r in results] == [i + 10 for i in range(count)]
    pids = {r[2] for r in results}
    if count < PARALLEL_THRESHOLD:  # a little work stays in this process, with what it was handed
        assert {r[1] for r in results} == {"here"} and pids == {os.getpid()}
    else:
        assert {r[1] for r in results} == {"worker"} and os.getpid() not in pids


class Started:
    """A stage's state that leaves a mark for each process that made it."""

    def __init__(self, folder: str):
        open(os.path.join(folder, str(os.getpid())), "x").close()


def nothing(state: Started, item: int) -> int:
    return item


def test_no_more_workers_are_started_than_there_are_items(tmp_path):
    """Asked for more workers than there is work (``--jobs 80`` for 64 bundles), a pool starts one per item:
    a pool forks all its workers at once, and the rest would only be started and ended."""
    items = list(range(PARALLEL_THRESHOLD))
    assert map_in_workers(nothing, Started, (str(tmp_path),), items, Workers(jobs=len(items) + 16), "test") == items
    assert len(os.listdir(tmp_path)) == len(items)


def test_one_job_works_in_this_process():
    results = map_in_workers(add, Offset, (1,), list(range(PARALLEL_THRESHOLD * 2)), Workers(jobs=1), "test")
    assert {r[2] for r in results} == {os.getpid()}


@pytest.mark.parametrize("count", [3, PARALLEL_THRESHOLD * 2])  # (in this process, in workers)
def test_the_progress_is_reported_to_the_end(count):
    seen = []
    map_in_workers(add, Offset, (0,), list(range(count)),
                   Workers(jobs=2, progress=lambda stage, done, total: seen.append((stage, done, total))), "test")
    assert seen[-1] == ("test", count, count) and [done for _, done, _ in seen] == sorted({d for _, d, _ in seen})


def test_a_worker_that_starts_after_its_build_was_killed_leaves_at_once():
    """A worker forked just as its build was killed starts already adopted by another process: it must not take
    that process for its parent and wait for work forever, holding the output's lock (seen: a killed build's
    worker still held it 30 s later).  It knows the build's pid from before the fork, and leaves."""
    script = ("import os, time\n"
              "import site_builder.parallel as p\n"
              "p.leave_with_parent(os.getppid() + 1)  # (not this process's parent: the build is gone)\n"
              "time.sleep(30)\n")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", script], timeout=60)
    assert result.returncode == 1 and time.monotonic() - started < 10


@pytest.mark.slow
def test_a_build_whose_workers_start_from_a_forkserver_as_serves_do(tmp_path):
    """``serve`` starts its workers from a forkserver, which receives what each worker's state is made of
    pickled (the settings, the keys, the compiled templates' folder and key): all of it must cross, and the
    records it renders are what a forked worker renders."""
    from conftest import both_keys, real_and_generated_bundles, tree
    from site_builder.build import BuildOptions, build
    from site_builder.options import BuildPolicy

    bundles = real_and_generated_bundles(tmp_path / "bundles", PARALLEL_THRESHOLD + 4)
    made = {}
    for method in ("forkserver", "fork"):
        report = build(BuildOptions(bundles=bundles, output=tmp_path / method, trust=both_keys(), search=False,
                                    policy=BuildPolicy(jobs=2, mp_context=method)))
        assert report.count("published") == PARALLEL_THRESHOLD + 8
        made[method] = tree(tmp_path / method)
    assert made["forkserver"] == made["fork"]


def pid_and(value):
    """(a step) The process it runs in, and *value*."""
    return [os.getpid(), value]


def dies_outside(parent: int):
    """(a step) Ends the process it runs in, unless that is *parent*."""
    if os.getpid() != parent:
        os._exit(3)
    return "made here"


@pytest.mark.parametrize("start_method", ["fork", "forkserver"])
def test_work_ahead_hands_back_each_step_from_a_child_in_any_order_asked(start_method):
    work = WorkAhead({"first": functools.partial(pid_and, {"a": None}),
                      "second": functools.partial(pid_and, ["x", 2])}, start_method)
    try:
        child, second = work.result("second")  # (asked out of order: the first is read on the way)
        assert child != os.getpid() and second == ["x", 2]
        assert work.result("first") == [child, {"a": None}]
    finally:
        work.close()


def test_work_ahead_without_a_start_method_works_each_step_here_when_asked():
    asked = []
    work = WorkAhead({"one": lambda: asked.append("one") or 1, "two": lambda: asked.append("two") or 2}, None)
    assert asked == []
    assert work.result("two") == 2 and asked == ["two"]
    assert work.result("two") == 2 and asked == ["two"]  # (once)
    work.close()


@pytest.mark.parametrize("start_method", ["fork", "forkserver"])
def test_work_ahead_works_a_step_here_when_the_child_hands_nothing_back(start_method):
    work = WorkAhead({"first": functools.partial(pid_and, 1), "second": functools.partial(dies_outside, os.getpid())},
                     start_method)
    try:
        assert work.result("first")[0] != os.getpid()
        assert work.result("second") == "made here"
    finally:
        work.close()


def test_work_ahead_whose_step_cannot_cross_to_a_forkserver_works_it_here():
    work = WorkAhead({"here": lambda: "made here"}, "forkserver")  # (a lambda cannot be pickled)
    try:
        assert work.result("here") == "made here"
    finally:
        work.close()


def test_work_ahead_closed_early_stops_and_reaps_its_child():
    work = WorkAhead({"slow": functools.partial(time.sleep, 30)}, "fork")
    process = work._process
    started = time.monotonic()
    work.close()
    assert time.monotonic() - started < 5
    assert process.exitcode is not None  # (stopped and reaped: no zombie left)


def test_a_forkserver_child_finds_the_package_imported_by_its_server(tmp_path):
    """Each child of a forkserver would import what it runs on its own (~40 ms a child of serve's).  Run in a
    process of its own (a process has one forkserver, which another test's may have started already), with a
    step whose module imports nothing (this module imports the package through its fixtures)."""
    (tmp_path / "probe.py").write_text("import sys\n\n\ndef imported(name):\n    return name in sys.modules\n")
    script = ("import functools\n"
              "from site_builder.parallel import WorkAhead\n"
              "from probe import imported\n"
              "work = WorkAhead({'loaded': functools.partial(imported, 'site_builder.build')}, 'forkserver')\n"
              "try:\n"
              "    print(work.result('loaded'), work._process is not None)\n"
              "finally:\n"
              "    work.close()\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])})
    assert (r.returncode, r.stdout) == (0, "True True\n"), r


def test_a_worker_lost_says_what_it_was_doing():
    assert "while verifying (killed by the system: out of memory? see dmesg)" in str(WorkerLostError("verify"))
    assert "while rendering (" in str(WorkerLostError("render"))
    assert "while at the search stage (" in str(WorkerLostError("search"))


def test_the_usable_cores_are_those_this_process_may_run_on():
    assert usable_cores() == len(os.sched_getaffinity(0)) >= 1
    assert Workers().processes == usable_cores() and Workers(jobs=3).processes == 3


def test_work_in_workers_leaves_nothing_frozen_nor_open():
    """The workers' map freezes the build's objects for the collector while they run (forked workers would
    otherwise copy them), and thaws them after: a serve session builds again and again in one process."""
    before = open_descriptors()
    map_in_workers(add, Offset, (0,), list(range(PARALLEL_THRESHOLD * 2)), Workers(jobs=2), "test")
    assert gc.get_freeze_count() == 0
    work = WorkAhead({"made": functools.partial(str, "made")}, "fork")
    work.close()
    assert open_descriptors() == before  # (the closed one still held: its pipe is closed, not just collected)


def test_a_stage_that_stops_early_leaves_no_thread_reading_ahead(tmp_path):
    """The files a stage reads are read ahead by a thread as its results are taken; a stage stopped early (an
    error, a build given up) must stop that thread, or it would poll for results that never come for as long as
    the process lives: serve's, for its whole session."""
    files = []
    for i in range(PARALLEL_THRESHOLD * 8):
        files.append(tmp_path / f"{i}.json")
        files[-1].write_bytes(b"{}")
    results = imap_in_workers(add, Offset, (0,), list(range(len(files))), Workers(jobs=2), "test", reads=files)
    assert next(results)[0] == 0
    results.close()
    assert not [t for t in threading.enumerate() if t.name == "site-builder prefetch"]


def test_the_usable_cores_are_those_of_the_processs_affinity_not_the_machines(monkeypatch):
    """A container's cpuset or ``taskset`` leaves the process fewer cores than the machine has: one worker per
    machine core would crowd them."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert usable_cores() == 1 and Workers().processes == 1


def collector_on(state: Offset, item: int) -> bool:
    return gc.isenabled()


def test_workers_collect_their_garbage_while_the_build_pauses_the_collector():
    """A build pauses the cyclic collector in its own process (its long-lived objects); its workers render
    thousands of pages of short-lived cycles, and without the collector their memory only grows."""
    gc.disable()
    try:
        on = map_in_workers(collector_on, Offset, (0,), list(range(PARALLEL_THRESHOLD * 2)), Workers(jobs=2), "test")
    finally:
        gc.enable()
    assert set(on) == {True}


def test_where_no_worker_process_can_be_started_the_work_is_done_in_this_process(monkeypatch):
    """Some sandboxes give a user no semaphores (``ProcessPoolExecutor`` raises OSError): the build works in its
    own process rather than failing."""
    def no_pool(*args, **kwargs):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", no_pool)
    results = map_in_workers(add, Offset, (1,), list(range(PARALLEL_THRESHOLD * 2)), Workers(jobs=2), "test")
    assert [r[0] for r in results] == [i + 1 for i in range(PARALLEL_THRESHOLD * 2)]
    assert {r[2] for r in results} == {os.getpid()}


FORKS_LOGGED = r"""
import os, sys
from site_builder.cli import main

log, args = sys.argv[1], sys.argv[2:]
real_fork = os.fork


def fork():  # (multiprocessing's fork and the cache saver's both call os.fork)
    with open("/proc/self/status") as status:
        threads = next(int(line.split()[1]) for line in status if line.startswith("Threads:"))
    pid = real_fork()
    if pid:
        with open(log, "a") as out:
            out.write(f"{threads}\n")
    return pid


os.fork = fork
sys.exit(main(args))
"""


@pytest.mark.slow
def test_the_command_line_forks_only_while_it_runs_no_other_thread(tmp_path):
    """A process forked while another thread runs may inherit a lock that thread held, and wait on it forever
    (Python 3.12 and later warn of it: "This process is multi-threaded, use of fork() may lead to deadlocks in the
    child").  The command line's build forks its workers, its lookups ahead and its cache saver: each with no
    other thread running (the read-ahead thread starts after the workers are forked and is stopped before the
    saver; serve, which runs threads, starts its processes from a forkserver).  The thread count is the
    kernel's, which counts every thread, not only Python's."""
    from generate import benchmark_key, make_bundle

    key = benchmark_key().write(tmp_path / "key.json")
    bundles = generated_bundles(tmp_path / "bundles", PARALLEL_THRESHOLD + 4, "g")
    log = tmp_path / "forks.log"
    command = [sys.executable, "-c", FORKS_LOGGED, str(log), "build", "--bundles", str(bundles), "--output",
               str(tmp_path / "site"), "--trusted-keys", str(key), "--no-search", "--quiet", "--jobs", "2"]
    subprocess.run(command, check=True, cwd=tmp_path)  # workers verify and render every record
    (bundles / "g1.json").write_bytes(make_bundle(1, variant=1))
    subprocess.run(command, check=True, cwd=tmp_path)  # one changed: the lookups ahead, the saver
    threads = [int(line) for line in log.read_text().split()]
    assert len(threads) >= 6  # (two pools of two workers, the lookups, the saver: or the test proves nothing)
    assert threads == [1] * len(threads)


def test_a_forkserver_runs_nothing_from_the_folder_it_was_started_in(tmp_path):
    """The forkserver and its resource tracker are interpreters started with ``python -c``, which puts the
    working folder first on the import path: serve, run in a project holding a multiprocessing.py (a pull
    request's file), ran that file."""
    from conftest import ROOT
    project, marker = tmp_path / "project", tmp_path / "ran"
    project.mkdir()
    for module in ("multiprocessing", "site_builder"):
        (project / f"{module}.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    script = tmp_path / "start.py"  # (a script's own folder, not the working one, is first on its import path)
    script.write_text(f"import os, sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                      "from site_builder.parallel import start_context\n"
                      "if __name__ == '__main__':\n"
                      "    process = start_context('forkserver').Process(target=print, args=('started',))\n"
                      "    process.start()\n    process.join()\n"
                      "    print('PYTHONSAFEPATH' in os.environ)\n    sys.exit(process.exitcode)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONPATH")}
    result = subprocess.run([sys.executable, str(script)], cwd=project, env=env, capture_output=True, text=True,
                            timeout=60)
    # (and PYTHONSAFEPATH, set while they start, is not left for the other programs serve starts)
    assert (result.returncode, result.stdout) == (0, "started\nFalse\n"), result.stderr
    assert not marker.exists()
