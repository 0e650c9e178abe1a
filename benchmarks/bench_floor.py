"""The floor under a full build: the work no implementation of the pipeline can skip, timed on this machine.

For every bundle, on all cores, as a build does it but with nothing else:

* read the file, hash it (SHA-256) and parse it once (orjson);
* verify four Ed25519 signatures (the receipt, two events, the bundle) with PyNaCl, as verification does;
* make the seven folders and ten files a record publishes (its page, ``bundle.json`` and its hard link under
  ``.well-known``, ``state.json``, the badge, five short-address pages), at the sizes the built-in templates
  give them (measured on a 10,000-record site).

No template is rendered, no check beyond the signatures is made, no digest of a part is computed and no
result goes back to a main process: a real build does all of that as well, so its rate can only be lower
than the one printed here.  Compare ``bench_build.py``'s full-build rate with this one to see how much of a
build is the builder's own work and how much is the machine's (kernel file work and signature arithmetic).

    python benchmarks/bench_floor.py --bundles /tmp/sbbench/10000/bundles --out /dev/shm/floor
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from multiprocessing import get_context
from pathlib import Path

import orjson
from nacl.signing import SigningKey, VerifyKey

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Mean sizes of a record's files on a 10,000-record site built with the built-in templates.
PAGE_BYTES, STATE_BYTES, BADGE_BYTES, REDIRECT_BYTES = 17_657, 6_157, 417, 741
SIGNATURES = 4

_signed: tuple[bytes, bytes, VerifyKey] | None = None
_out = ""


def _init(out: str) -> None:
    global _signed, _out
    key = SigningKey(bytes(range(32)))
    message = hashlib.sha256(b"a digest is what pith signs").hexdigest().encode()
    _signed = (key.sign(message).signature, message, key.verify_key)
    _out = out


def _record(task: tuple[int, str]) -> int:
    """One record's unavoidable work; returns how many files it made."""
    n, path = task
    fd = os.open(path, os.O_RDONLY)
    try:
        raw = os.read(fd, 1 << 20)
    finally:
        os.close(fd)
    hashlib.sha256(raw).digest()
    orjson.loads(raw)
    signature, message, public = _signed
    for _ in range(SIGNATURES):  # (as verification calls PyNaCl)
        public.verify(message, signature)
    name = f"{n:026d}"
    folders = [f"pith/{name}", f".well-known/pith/{name}",
               *(f"pith/{name[-k:]}" for k in (8, 12, 16)), f"arxiv/{n}v1", f"arxiv/{n}"]
    for folder in folders:
        os.mkdir(os.path.join(_out, folder))
    files = [(f"pith/{name}/index.html", b"p" * PAGE_BYTES), (f"pith/{name}/bundle.json", raw),
             (f"pith/{name}/state.json", b"s" * STATE_BYTES), (f"pith/{name}/badge.svg", b"b" * BADGE_BYTES)]
    files += [(f"{folder}/index.html", b"r" * REDIRECT_BYTES) for folder in folders[2:]]
    for rel, data in files:
        fd = os.open(os.path.join(_out, rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    os.link(os.path.join(_out, files[1][0]), os.path.join(_out, f".well-known/pith/{name}/bundle.json"))
    return len(files) + 1


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(bundles: list[str], out: Path, jobs: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    for top in ("pith", ".well-known/pith", "arxiv"):
        (out / top).mkdir(parents=True)
    cpu, started = _cpu(), time.perf_counter()
    with get_context("fork").Pool(jobs, _init, (str(out),)) as pool:
        files = sum(pool.imap_unordered(_record, enumerate(bundles), chunksize=64))
    seconds = time.perf_counter() - started
    cpu = _cpu() - cpu
    return {"bundles": len(bundles), "files": files, "jobs": jobs, "seconds": round(seconds, 3),
            "bundles_per_second": round(len(bundles) / seconds), "cpu_ms_per_bundle": round(cpu / len(bundles) * 1000, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundles", type=Path, help="a folder of bundles (default: --n generated ones)")
    parser.add_argument("--n", type=int, default=2000, help="bundles to generate when --bundles is not given")
    parser.add_argument("--out", type=Path, help="where to write (default: a temporary folder in /tmp; the "
                                                 "file system is what is measured: try tmpfs and a disk)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="worker processes")
    parser.add_argument("--repeat", type=int, default=3, help="runs; each is reported")
    parser.add_argument("--json", type=Path, help="also write the runs as JSON")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="bench-floor-"))
    try:
        if args.bundles is None:
            from generate import generate
            args.bundles = scratch / "bundles"
            generate(args.bundles, args.n)
        bundles = sorted(str(p) for p in args.bundles.glob("*.json"))
        out = args.out or scratch / "out"
        runs = []
        for _ in range(args.repeat):
            runs.append(measure(bundles, out, args.jobs))
            shutil.rmtree(out, ignore_errors=True)
        print(f"{'run':>3} {'bundles':>8} {'files':>8} {'seconds':>8} {'bundles/s':>10} {'CPU ms/bundle':>14}")
        for i, run in enumerate(runs, 1):
            print(f"{i:>3} {run['bundles']:>8} {run['files']:>8} {run['seconds']:>8.2f} "
                  f"{run['bundles_per_second']:>10} {run['cpu_ms_per_bundle']:>14.3f}")
        if args.json:
            args.json.write_text(json.dumps({"out": str(out), "runs": runs}, indent=2) + "\n")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
