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

With ``--pages`` the files hold what a build puts in them: the record's pages rendered by site-builder's own
renderer from the built-in Jinja templates (its page, badge, short-address pages and list row), and its
``state.json``.  Still no check beyond the signatures, no digest, nothing sent back: the floor of a builder
whose pages are Jinja templates, as this project's are.

    python benchmarks/bench_floor.py --bundles /tmp/sbbench/10000/bundles --out /dev/shm/floor [--pages]
"""

from __future__ import annotations

import argparse
import base64
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

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # (--pages: this checkout's site_builder)
from site_builder.keys import TrustedKey, TrustSet  # noqa: E402
from site_builder.pages import ALL_ADDRESSES, paper_files  # noqa: E402
from site_builder.records import paper_text, summarize  # noqa: E402
from site_builder.rendering import SiteRenderer, template_dirs  # noqa: E402
from site_builder.settings import SiteConfig  # noqa: E402
from site_builder.verification import ALL_PASSED  # noqa: E402

# Mean sizes of a record's files on a 10,000-record site built with the built-in templates.
PAGE_BYTES, STATE_BYTES, BADGE_BYTES, REDIRECT_BYTES = 17_657, 6_157, 417, 741
SIGNATURES = 4

_signed: tuple[bytes, bytes, VerifyKey] | None = None
_out = ""
_renderer = None  # with --pages: site-builder's renderer over the built-in templates


def _init(out: str, pages: bool = False) -> None:
    global _signed, _out, _renderer
    key = SigningKey(bytes(range(32)))
    message = hashlib.sha256(b"a digest is what pith signs").hexdigest().encode()
    _signed = (key.sign(message).signature, message, key.verify_key)
    _out = out
    if pages:
        trust = TrustSet((TrustedKey("bench", key.verify_key.encode(), {}),))
        _renderer = SiteRenderer(SiteConfig(), template_dirs(None), trust)


def _rendered(raw: bytes, bundle: dict) -> list[tuple[str, bytes]]:
    """The record's files as a build makes them (every short address its own), without a check."""
    summary = summarize(bundle).with_words(paper_text(bundle))
    files = list(paper_files(_renderer, raw, bundle, summary, ALL_PASSED, (), ALL_ADDRESSES))
    _renderer.row_of(summary)
    return files


def _record(task: tuple[int, str]) -> int:
    """One record's unavoidable work; returns how many files it made."""
    n, path = task
    fd = os.open(path, os.O_RDONLY)
    try:
        raw = os.read(fd, 1 << 20)
    finally:
        os.close(fd)
    hashlib.sha256(raw).digest()
    bundle = orjson.loads(raw)
    signature, message, public = _signed
    for _ in range(SIGNATURES):  # (as verification calls PyNaCl)
        public.verify(message, signature)
    # A name shaped like a pith id (26 base32 characters, spread as digests are), numbered so that any bundles
    # will do: the order names arrive in a folder of 400,000 entries is part of what the kernel does.
    name = base64.b32encode(hashlib.sha256(b"%d" % n).digest()).decode()[:26]
    folders = [f"pith/{name}", f".well-known/pith/{name}",
               *(f"pith/{name[:k]}" for k in (8, 12, 16)), f"arxiv/{n}v1", f"arxiv/{n}"]
    for folder in folders:
        os.mkdir(os.path.join(_out, folder))
    if _renderer is None:
        files = [(f"pith/{name}/index.html", b"p" * PAGE_BYTES), (f"pith/{name}/bundle.json", raw),
                 (f"pith/{name}/state.json", b"s" * STATE_BYTES), (f"pith/{name}/badge.svg", b"b" * BADGE_BYTES)]
        redirects = [b"r" * REDIRECT_BYTES] * 5
    else:  # the same paths, holding the rendered files
        page, _, state, _, badge, *redirects = [data for _, data in _rendered(raw, bundle)]
        files = [(f"pith/{name}/index.html", page), (f"pith/{name}/bundle.json", raw),
                 (f"pith/{name}/state.json", state), (f"pith/{name}/badge.svg", badge)]
    files += [(f"{folder}/index.html", data) for folder, data in zip(folders[2:], redirects, strict=True)]
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


def measure(bundles: list[str], out: Path, jobs: int, pages: bool = False) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    for top in ("pith", ".well-known/pith", "arxiv"):
        (out / top).mkdir(parents=True)
    cpu, started = _cpu(), time.perf_counter()
    with get_context("fork").Pool(jobs, _init, (str(out), pages)) as pool:
        files = sum(pool.imap_unordered(_record, enumerate(bundles), chunksize=64))
    seconds = time.perf_counter() - started
    cpu = _cpu() - cpu
    return {"bundles": len(bundles), "files": files, "jobs": jobs, "pages": pages, "seconds": round(seconds, 3),
            "bundles_per_second": round(len(bundles) / seconds), "cpu_ms_per_bundle": round(cpu / len(bundles) * 1000, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundles", type=Path, help="a folder of bundles (default: --n generated ones)")
    parser.add_argument("--n", type=int, default=2000, help="bundles to generate when --bundles is not given")
    parser.add_argument("--out", type=Path, help="where to write (default: a temporary folder in /tmp; the "
                                                 "file system is what is measured: try tmpfs and a disk)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="worker processes")
    parser.add_argument("--pages", action="store_true", help="render the record's pages with the built-in "
                        "templates, as a build does, instead of writing placeholder bytes of their size")
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
            runs.append(measure(bundles, out, args.jobs, args.pages))
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
