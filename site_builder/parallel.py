"""Work spread over worker processes: the pool, its start method, workers that leave with their build, and
the progress of a stage.  Stages hand it a function and its items; this is the one module that knows about
processes.
"""

from __future__ import annotations

import functools
import gc
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Callable, Iterator, Sequence

import orjson

from site_builder.loading import Prefetcher

PARALLEL_THRESHOLD = 64
# The most worker processes a build or check starts (``--jobs``): each is a copy of the build holding tens of
# megabytes once it works, and a pool starts them all at once, so a slip of the keyboard (``--jobs 10000``) would
# take the machine's memory and process table rather than speed anything up.
MAX_JOBS = 256


@dataclass(frozen=True)
class Workers:
    """How per-bundle work is spread: worker processes (0: one per usable core, ``usable_cores``; 1: this
    process), the progress callback (stage, done, total) and the processes' start method."""

    jobs: int = 0
    progress: Callable[[str, int, int | None], None] | None = None  # (total None: not known, as for Pagefind)
    mp_context: str = "fork"

    @property
    def processes(self) -> int:
        """How many processes work at once (worker processes, or Pagefinds side by side)."""
        return self.jobs or usable_cores()


class WorkerLostError(Exception):
    """A worker process ended without handing back its results (killed: by the out-of-memory killer, most
    often): the stage cannot finish, so the build stops, and the output stays as it was."""

    def __init__(self, stage: str):
        doing = {"verify": "verifying", "render": "rendering"}.get(stage, f"at the {stage} stage")
        super().__init__(f"a worker process ended abruptly while {doing} (killed by the system: out of memory? "
                         f"see dmesg)")


# The state of this worker process, made by the stage's init function when the pool starts it (the
# ``initializer``).  Only worker processes set it: a stage working in the build's own process keeps its state
# in a local variable (``imap_in_workers``).
_worker_state: object = None


def _start_worker(build_pid: int, init: Callable, initargs: tuple) -> None:
    """A worker process's start: render thousands of pages with short-lived cyclic garbage, so keep the
    collector on; leave when the build process is gone; make the stage's state."""
    global _worker_state
    gc.enable()
    leave_with_parent(build_pid)
    _worker_state = init(*initargs)


def _in_worker(fn: Callable, item):
    return fn(_worker_state, item)


PARENT_CHECK_SECONDS = 0.5


def leave_with_parent(build_pid: int | None = None) -> None:
    """End this worker soon after the process that started it is gone.  A build killed outright (SIGKILL, the
    out-of-memory killer) cannot shut its pool down, and its workers would wait for work forever, holding their
    memory and the output's lock, which they inherited with the rest of the build's open files: every later
    build of that output would stop with "another site-builder build is writing this output".  A thread notes
    the parent at start and exits the process once it has another (orphans are adopted by another process).
    The parent is the build process (fork) or the forkserver, which ends with it.  A worker forked just as the
    build was killed may start after it is gone, already adopted: it knows the build's pid (*build_pid*, passed
    to forked workers only: a forkserver's children have the forkserver for parent), and leaves at once if its
    parent is another process."""
    parent = os.getppid()
    if build_pid is not None and parent != build_pid:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(1)  # (nothing of this process's to clean up: the next build removes what a killed one left)

    threading.Thread(target=watch, name="site-builder parent watch", daemon=True).start()


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system has one (``taskset``, a container's
    cpuset), which ``os.cpu_count()`` ignores; else every core."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# What a forkserver's children run, imported once by the server as it starts rather than by each child as it
# unpickles its work (~40 ms a child: serve's lookups ahead, ``WorkAhead``, start in ~7 ms with it).
FORKSERVER_PRELOAD = ["site_builder.build"]


def start_context(start_method: str):
    """The multiprocessing context that starts processes by *start_method* (a forkserver's preloading the
    package's modules: effective once, for the server the first such context starts)."""
    context = get_context(start_method)
    if start_method == "forkserver":
        context.set_forkserver_preload(FORKSERVER_PRELOAD)
        _start_forkserver()
    return context


def _start_forkserver() -> None:
    """Start the forkserver (and its resource tracker) now, unless they run.  Both are new interpreters started
    with ``python -c``, which puts the working folder first on the import path: serve, run in a project holding
    a multiprocessing.py (a pull request's file), would run that file.  PYTHONSAFEPATH (Python 3.11) keeps it
    off; it is set only while they start, as other programs this process starts may rely on the working folder."""
    from multiprocessing import forkserver

    before = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        forkserver.ensure_running()
    finally:
        if before is None:
            del os.environ["PYTHONSAFEPATH"]
        else:
            os.environ["PYTHONSAFEPATH"] = before


def map_in_workers(fn, init, initargs, items: list, workers: Workers, stage: str, reads: Sequence = (),
                   local_initargs: tuple | None = None) -> list:
    """Map in worker processes (fork) when there is enough work, else in this process; order kept.  *reads*:
    the file each item reads, in order, for the kernel to read ahead (``Prefetcher``)."""
    return list(imap_in_workers(fn, init, initargs, items, workers, stage, reads, local_initargs))


def imap_in_workers(fn, init, initargs, items: list, workers: Workers, stage: str, reads: Sequence = (),
                    local_initargs: tuple | None = None) -> Iterator:
    """``map_in_workers`` yielding each result as it comes (in order), so a caller that digests results one by one does
    not hold them all: 100,000 records' lists of written files are ~100 MB.

    ``init(*initargs)`` makes the state each process works with, and ``fn(state, item)`` does one item; both are
    module-level functions (a worker started by a forkserver receives them pickled).  Working in this process,
    ``init`` gets *local_initargs* if given: objects the build already holds that need not cross to a worker
    (the renderer with its compiled templates)."""
    pool = None
    progress = workers.progress
    processes = min(workers.processes, len(items))  # (a worker with no item would only be started and ended)
    if len(items) >= PARALLEL_THRESHOLD and processes > 1:  # (one worker would only add the hand-over)
        build_pid = os.getpid() if workers.mp_context == "fork" else None  # (leave_with_parent)
        try:
            pool = ProcessPoolExecutor(processes, mp_context=start_context(workers.mp_context),
                                       initializer=_start_worker, initargs=(build_pid, init, initargs))
        except (NotImplementedError, OSError):
            pool = None  # no usable semaphores here (some sandboxes, some users): work in this process
    if pool is None:
        state = init(*(initargs if local_initargs is None else local_initargs))
        for i, item in enumerate(items):
            yield fn(state, item)
            if progress:
                progress(stage, i + 1, len(items))
        return
    chunk = max(1, min(256, len(items) // (processes * 8) or 1))
    # Forked workers share this process's memory (100,000 records: ~1 GB) until they touch it; their garbage
    # collector would touch every object and so copy it all.  Frozen objects are left alone by it.
    gc.freeze()
    prefetcher = None
    try:
        with pool:
            # (the workers are forked by now: a thread may start)
            results = pool.map(functools.partial(_in_worker, fn), items, chunksize=chunk)
            # Ahead of the results taken by what the workers may be working on (a chunk each, in order), and two
            # chunks more.
            prefetcher = Prefetcher(reads, ahead=chunk * (processes + 2)).start()
            for i, result in enumerate(results):
                prefetcher.taken = i
                yield result
                if progress and (i % 100 == 0 or i + 1 == len(items)):
                    progress(stage, i + 1, len(items))
    except BrokenProcessPool:
        raise WorkerLostError(stage) from None
    finally:
        if prefetcher is not None:
            prefetcher.stop()
        gc.unfreeze()


def cpu_seconds() -> tuple[float, float]:
    """CPU time so far (user + system) of this process, and of the child processes it has waited for: the worker
    pools, which a stage shuts down (and so waits for) before it ends, and Pagefind."""
    t = os.times()
    return t.user + t.system, t.children_user + t.children_system


class WorkAhead:
    """Steps worked out in a child process while this one goes on with the build, each step's result handed
    back over a pipe as plain JSON (never pickled: nothing but data comes back).  With no *start_method*, or
    where no child can be started or it ends without handing a result back, the step runs in this process when
    its result is asked for.  So the results are the same either way, as long as each step returns plain JSON
    data (dicts with text keys, lists, text, numbers, None).

    *start_method* is the build's (``Workers.mp_context``): "fork" where the process runs no threads (the
    command line), "forkserver" where it does (serve), whose steps must then be picklable (module-level
    functions and their arguments, as a worker's).  Only for steps that wait on the system and read nothing this
    process changes meanwhile: the child works from the arguments as they were when it started."""

    def __init__(self, steps: dict[str, Callable[[], object]], start_method: str | None):
        self.steps = steps
        self._order = list(steps)
        self._results: dict[str, object] = {}
        self._process = None
        self._reader = None
        if start_method is not None and steps:
            self._start(start_method)

    def _start(self, start_method: str) -> None:
        try:
            context = start_context(start_method)
            reader, writer = context.Pipe(duplex=False)
        except (OSError, ValueError):
            return
        try:
            process = context.Process(target=_hand_back, args=(list(self.steps.values()), writer), daemon=True)
            process.start()
        except Exception:  # (no process here, or a step that cannot cross to a forkserver: the steps run here)
            reader.close()
            return
        finally:
            writer.close()
        self._process, self._reader = process, reader

    def result(self, name: str) -> object:
        """The result of the step *name* (from the child if it has handed it back, else worked out here)."""
        while name not in self._results and self._reader is not None:  # (the child hands them back in order)
            try:
                got = orjson.loads(self._reader.recv_bytes())
            except (EOFError, OSError, orjson.JSONDecodeError):
                self.close()
                break
            self._results[self._order[len(self._results)]] = got
        if name not in self._results:
            self._results[name] = self.steps[name]()
        return self._results[name]

    def close(self) -> None:
        """Stop the child if it still works (its results are not needed), and reap it."""
        if self._process is not None:
            if self._process.is_alive():
                self._process.kill()
            self._process.join()
            self._process = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def _hand_back(steps: list[Callable[[], object]], writer) -> None:
    """(the child of a ``WorkAhead``) Each step's result, in order, to the pipe: as much as the build waits for."""
    try:
        for step in steps:
            writer.send_bytes(orjson.dumps(step()))
    except Exception:  # (the build has gone on without: its pipe is closed; or a step failed, which the build
        pass           # then works itself, and meets the same error where it can say it)
    finally:
        writer.close()
