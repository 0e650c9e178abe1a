"""SIGKILL the build at many random points: the output is always the complete old or the complete new site.
A killed build's workers leave by themselves, and a killed worker stops its build cleanly."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import generated_bundles, tree

from generate import benchmark_key, make_bundle  # noqa: E402

pytestmark = pytest.mark.slow  # (kill loops)

KILLS = 50


@pytest.fixture(autouse=True)
def scratch_in_the_test_folder(tmp_path, monkeypatch):
    """A build killed outright cleans nothing up, its scratch folder included: the builds started here keep theirs
    in the test's own folder (through TMPDIR, which the processes they start inherit), not in the system's
    temporary folder, which every run of this file would leave ~60 more."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))


def build_cmd(bundles: Path, output: Path, key: Path) -> list[str]:
    return [sys.executable, "-m", "site_builder", "build", "--bundles", str(bundles), "--output", str(output),
            "--trusted-keys", str(key), "--no-search", "--quiet"]


def test_sigkill_never_leaves_a_mixed_site(tmp_path):
    key = benchmark_key().write(tmp_path / "key.json")
    sets = [tmp_path / "set0", tmp_path / "set1"]
    for n, folder in enumerate(sets):
        folder.mkdir()
        for i in range(40):
            if (i + n) % 5:  # each set lacks some records the other has
                (folder / f"g{i}.json").write_bytes(make_bundle(i, record=i + 1000 * n))
    expected = []
    for folder in sets:
        out = tmp_path / f"expected-{folder.name}"
        subprocess.run(build_cmd(folder, out, key), check=True, cwd=tmp_path)
        expected.append(tree(out))
    assert expected[0] != expected[1]

    site = tmp_path / "site"
    subprocess.run(build_cmd(sets[0], site, key), check=True, cwd=tmp_path)
    durations = []  # (a build from one set to the other, each way: the kills' window is made of the slower)
    for folder in (sets[1], sets[0], sets[1]):
        t = time.perf_counter()
        subprocess.run(build_cmd(folder, site, key), check=True, cwd=tmp_path)
        durations.append(time.perf_counter() - t)
    duration = max(durations)
    rng = random.Random(7)
    current = 1
    seen = {0: 0, 1: 0}
    for kill in range(KILLS):
        target = 1 - current
        proc = subprocess.Popen(build_cmd(sets[target], site, key), cwd=tmp_path)
        time.sleep(rng.uniform(0.05, duration * 1.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        now = tree(site)
        assert now in (expected[0], expected[1]), f"kill {kill}: mixed or damaged site"
        current = 0 if now == expected[0] else 1
        seen[current] += 1
    # Kills landed both before and after the swap.
    assert seen[0] and seen[1]
    subprocess.run(build_cmd(sets[0], site, key), check=True, cwd=tmp_path)
    assert tree(site) == expected[0]
    deadline = time.time() + 30
    while time.time() < deadline:
        leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".site.") and p.name not in (".site.lock", ".site.prev")]
        if not leftovers:
            break
        time.sleep(0.2)
    assert leftovers == []


def test_sigkill_inside_an_in_place_update_never_leaves_a_mixed_site(tmp_path):
    """Three sets of 160 files share most records (48 files hold another record in each set, and a few come or
    go), built in turn: each build updates the tree beside the site, which holds the set before, in place
    rather than writing a fresh one.  Kills land while that tree is half updated, and the next build must
    neither serve it nor trust it."""
    key = benchmark_key().write(tmp_path / "key.json")
    sets = [tmp_path / f"set{n}" for n in range(3)]
    for n, folder in enumerate(sets):
        folder.mkdir()
        for i in range(160):
            if i % 40 == n:
                continue  # a few records only some sets have
            other = i % 10 < 3  # (not a newer version of the same record: that would be refused as a rollback)
            (folder / f"g{i}.json").write_bytes(make_bundle(i, record=i + 1000 * n if other else i))
    expected = []
    for folder in sets:
        out = tmp_path / f"expected-{folder.name}"
        subprocess.run(build_cmd(folder, out, key) + ["--no-cache"], check=True, cwd=tmp_path)
        expected.append(tree(out))
    assert len({frozenset(t.items()) for t in expected}) == 3
    site, prev = tmp_path / "site", tmp_path / ".site.prev"
    durations = []
    for n in (0, 1, 2, 0, 1, 2):
        twin = prev.stat().st_ino if prev.exists() else None
        t = time.perf_counter()
        subprocess.run(build_cmd(sets[n], site, key), check=True, cwd=tmp_path)
        durations.append(time.perf_counter() - t)
        if twin is not None:
            assert site.stat().st_ino == twin  # updated in place and swapped in, not written afresh
    duration = max(durations[3:])
    rng = random.Random(11)
    current, inside = 2, 0
    for kill in range(3 * KILLS):  # (at least KILLS, and on until enough landed inside an update)
        if kill >= KILLS and inside >= 3:
            break
        target = (current + 1) % 3
        if not prev.is_dir():
            # Nothing beside the site to update in place (a kill before the last swap took it): this build may
            # finish, so that the next has one.  Otherwise, on a loaded machine, every build after a kill was
            # slower than ``duration`` and killed before its swap, and no in-place update ever came back.
            subprocess.run(build_cmd(sets[target], site, key), check=True, cwd=tmp_path)
            assert tree(site) == expected[target]
            current = target
            continue
        proc = subprocess.Popen(build_cmd(sets[target], site, key), cwd=tmp_path)
        if kill % 3 == 0 or not (prev / "verification.json").exists():  # anywhere in the build
            time.sleep(rng.uniform(0.2, duration * 1.2))
        else:  # once the in-place update has begun (the tree's marker goes first), a little later
            deadline = time.monotonic() + 3 * duration + 5
            while (prev / "verification.json").exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002)
            time.sleep(rng.uniform(0, 0.05))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if prev.is_dir() and not (prev / "verification.json").exists():
            inside += 1  # killed between the start of the in-place update and the swap
        _wait_for_the_lock(tmp_path / ".site.lock")  # (the killed build's workers leave within a second)
        now = tree(site)
        assert now in expected, f"kill {kill}: mixed or damaged site"
        current = expected.index(now)
    assert inside >= 3, f"only {inside} of {kill + 1} kills landed inside an in-place update"
    for n in ((current + 1) % 3, (current + 2) % 3, current):
        subprocess.run(build_cmd(sets[n], site, key), check=True, cwd=tmp_path)
        assert tree(site) == expected[n]


def _holders(path: Path) -> list[str]:
    """The processes with *path* open, and their command lines (to say who holds a lock)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and any(os.readlink(fd) == str(path) for fd in (proc / "fd").iterdir()):
                found.append(f"{proc.name}: {(proc / 'cmdline').read_bytes().replace(bytes(1), b' ')[:200]!r}")
        except OSError:
            pass
    return found


def _wait_for_the_lock(lock: Path) -> None:
    """Wait until no process holds the output's lock (a killed build's workers leave within a second or so).
    A worker still holding it after 15 s is killed, so that the kills this test is about go on; such stragglers
    are rare and are the subject of test_workers_leave_with_a_killed_build_and_the_next_build_runs, not this test."""
    import fcntl
    import signal as signals
    deadline = time.monotonic() + 15
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                for holder in _holders(lock):
                    pid = int(holder.split(":")[0])
                    if pid != os.getpid():
                        try:
                            os.kill(pid, signals.SIGKILL)
                        except ProcessLookupError:
                            pass
                deadline = time.monotonic() + 15
            time.sleep(0.05)
        finally:
            os.close(fd)


HOLD_IN_PROGRESS = r"""
import sys, time
from pathlib import Path
from site_builder.build import BuildOptions, build
from site_builder.keys import load_trust_set
from site_builder.options import BuildPolicy

def progress(stage, done, total):  # the workers are running: say so, and hold the build here until killed
    print("working", stage, flush=True)
    time.sleep(600)

build(BuildOptions(bundles=Path(sys.argv[1]), output=Path(sys.argv[2]), trust=load_trust_set([Path(sys.argv[3])]),
                   search=False, policy=BuildPolicy(progress=progress, jobs=2)))  # (two workers even where one core is usable)
"""


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(pid):
                found.append(int(entry.name))
        except (OSError, IndexError):
            pass  # (it ended meanwhile)
    return found


def _running(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_workers_leave_with_a_killed_build_and_the_next_build_runs(tmp_path):
    """A build killed outright (SIGKILL, the out-of-memory killer) cannot stop its worker processes.  They leave by
    themselves, releasing the output's lock they inherited: the next build of that output runs instead of
    stopping with "another site-builder build is writing this output"."""
    from site_builder.parallel import PARALLEL_THRESHOLD, PARENT_CHECK_SECONDS

    key = benchmark_key().write(tmp_path / "key.json")
    bundles = generated_bundles(tmp_path / "bundles", PARALLEL_THRESHOLD + 36, "g")  # enough for worker processes
    site = tmp_path / "site"
    proc = subprocess.Popen([sys.executable, "-c", HOLD_IN_PROGRESS, str(bundles), str(site), str(key)],
                            stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    workers = []
    try:
        assert proc.stdout.readline().startswith("working verify")
        # (the children still running: a child that has ended already is a zombie until the build reaps it, and
        # has nothing to leave)
        workers = [w for w in _children(proc.pid) if _running(w)]
        assert len(workers) >= 1
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.time() + 10 * PARENT_CHECK_SECONDS + 5
        while any(_running(w) for w in workers) and time.time() < deadline:
            time.sleep(0.1)
        assert not any(_running(w) for w in workers), "the killed build's workers are still running"
        result = subprocess.run(build_cmd(bundles, site, key), capture_output=True, text=True, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert f"{PARALLEL_THRESHOLD + 36} published" in result.stdout
    finally:
        proc.kill()
        proc.stdout.close()
        for worker in workers:
            try:
                os.kill(worker, signal.SIGKILL)
            except ProcessLookupError:
                pass


DIE_IN_A_WORKER = r"""
import os, signal, sys
import site_builder.stages.render as render_stage
import site_builder.stages.verify as verify_stage
from site_builder.cli import main

stage, victim = sys.argv[1], sys.argv[2]
module, name = {"verify": (verify_stage, "inspect_file"), "render": (render_stage, "render_record")}[stage]
real = getattr(module, name)

def dying(state, item):  # as the out-of-memory killer ends a worker: at once, without a word
    if (item.rel if stage == "verify" else item.inspection.rel) == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(state, item)

setattr(module, name, dying)
sys.exit(main(sys.argv[3:]))
"""


def test_a_worker_killed_mid_build_stops_it_with_one_line_and_the_site_kept(tmp_path):
    """When the system kills a worker process (out of memory), the build cannot finish: one line says so, exit 2,
    the previous site is left as it was, and the next build runs; `verify` says so too."""
    from site_builder.parallel import PARALLEL_THRESHOLD

    key = benchmark_key().write(tmp_path / "key.json")
    count = PARALLEL_THRESHOLD + 36
    bundles = generated_bundles(tmp_path / "bundles", count, "g")
    site = tmp_path / "site"
    subprocess.run(build_cmd(bundles, site, key), check=True, cwd=tmp_path)
    before = tree(site)
    (bundles / "g7.json").write_bytes(make_bundle(7, variant=3))  # a change, for the build that finally runs
    for stage in ("verify", "render"):  # (--no-cache: every bundle again, so that workers do the work)
        args = ["build", "--bundles", str(bundles), "--output", str(site), "--trusted-keys", str(key), "--no-search",
                "--no-cache", "--jobs", "2"]
        result = subprocess.run([sys.executable, "-c", DIE_IN_A_WORKER, stage, "g7.json", *args],
                                capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert result.returncode == 2, result.stderr
        doing = "verifying" if stage == "verify" else "rendering"
        assert result.stderr.splitlines() == [f"error: a worker process ended abruptly while {doing} (killed by the "
                                              f"system: out of memory? see dmesg); previous output left untouched"]
        assert tree(site) == before
    verify = subprocess.run([sys.executable, "-c", DIE_IN_A_WORKER, "verify", str(bundles / "g9.json"), "verify",
                             str(bundles), "--trusted-keys", str(key), "--jobs", "2"],
                            capture_output=True, text=True, timeout=120)
    assert verify.returncode == 2 and verify.stdout == ""
    assert verify.stderr.splitlines() == ["error: a worker process ended abruptly while verifying (killed by the "
                                          "system: out of memory? see dmesg)"]
    result = subprocess.run(build_cmd(bundles, site, key), capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0 and f"{count} published" in result.stdout
    assert tree(site) != before
