"""Work spread over worker processes: the pool, its start method, workers that leave with their build, and
the progress of a stage.  Stages hand it a function and its items; this is the one module that knows about
processes.
"""

from __future__ import annotations

import functools
import gc
import os
import signal
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
    processes = workers.processes
    if len(items) >= PARALLEL_THRESHOLD and processes > 1:  # (one worker would only add the hand-over)
        build_pid = os.getpid() if workers.mp_context == "fork" else None  # (leave_with_parent)
        try:
            pool = ProcessPoolExecutor(processes, mp_context=get_context(workers.mp_context),
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
    """Steps worked out in a forked child process while this one goes on with the build, each step's result
    handed back over a pipe as plain JSON (never pickled: nothing but data comes back); with ``fork=False``, or
    where no child can be forked or it ends without handing a result back, the step runs in this process when
    its result is asked for.  So the results are the same either way, as long as each step returns plain JSON
    data (dicts with text keys, lists, text, numbers, None).

    Only for steps that wait on the system and read nothing this process changes meanwhile: the child works on
    a copy of this process's memory as it was when forked.  A process that runs threads (serve) forks nothing
    (``fork=False``): a child forked there could inherit a lock another thread holds."""

    def __init__(self, steps: dict[str, Callable[[], object]], fork: bool):
        self.steps = steps
        self._order = list(steps)
        self._results: dict[str, object] = {}
        self._pid: int | None = None
        self._pipe: int | None = None
        if fork and steps:
            self._fork()

    def _fork(self) -> None:
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_end)
            os.close(write_end)
            return
        if pid == 0:  # the child: each result in order, then gone (no cleanup of the build's to run here)
            status = 1
            try:
                os.close(read_end)
                for step in self.steps.values():
                    data = orjson.dumps(step())
                    _write_all(write_end, len(data).to_bytes(8, "big") + data)
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)
        self._pid, self._pipe = pid, read_end

    def result(self, name: str) -> object:
        """The result of the step *name* (from the child if it has handed it back, else worked out here)."""
        while name not in self._results and self._pipe is not None:  # (the child hands them back in order)
            got = self._next_message()
            if got is None:
                self.close()
                break
            self._results[self._order[len(self._results)]] = got
        if name not in self._results:
            self._results[name] = self.steps[name]()
        return self._results[name]

    def _next_message(self) -> object | None:
        head = _read_exactly(self._pipe, 8)
        body = _read_exactly(self._pipe, int.from_bytes(head, "big")) if head is not None else None
        try:
            return orjson.loads(body) if body is not None else None
        except orjson.JSONDecodeError:
            return None

    def close(self) -> None:
        """Stop the child if it still works (its results are not needed), and reap it."""
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None
        if self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(self._pid, 0)
            except ChildProcessError:
                pass
            self._pid = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exactly(fd: int, size: int) -> bytes | None:
    """*size* bytes from the pipe, or None if it ends first."""
    parts, left = [], size
    while left:
        part = os.read(fd, min(left, 1 << 20))
        if not part:
            return None
        parts.append(part)
        left -= len(part)
    return b"".join(parts)
