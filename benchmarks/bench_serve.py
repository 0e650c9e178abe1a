"""Save-to-reload latency of `site-builder serve` on N generated bundles (recorded in BENCHMARKS.md).

    python benchmarks/bench_serve.py --n 10000 [--workdir /tmp/site-builder-bench] [--repeat 5] [--template NAME]

Starts `site-builder serve` on a generated site, connects to its live-reload event stream like a browser
tab does, then rewrites one bundle (a newer signed version) and measures the time from the file's write to
the reload event that names the changed page.  With ``--template NAME``, saves an edit of that template instead
(a copy of the built-in one in the project's ``templates/``, a comment added where its pages show it) and
measures the time to the first reload event.  Run bench_build.py first (or let this generate the bundles).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from generate import edited_visibly, generate, make_bundle  # (beside this script)

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/site-builder-bench"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--template", metavar="NAME", help="time edits of this built-in template instead")
    parser.add_argument("--search", action="store_true", help="serve with the search index (its update is timed "
                        "too: the change is published first, the index follows)")
    args = parser.parse_args()
    work = args.workdir / f"serve-{args.n}"
    bundles = work / "bundles"
    if not bundles.is_dir() or len(list(bundles.iterdir())) != args.n:
        shutil.rmtree(work, ignore_errors=True)
        generate(bundles, args.n)
    for tree in (work / "output", work / ".output.prev", work / "templates"):  # each run starts from an empty
        shutil.rmtree(tree, ignore_errors=True)                                  # output, as a first serve
    if args.template:
        (work / "templates").mkdir()
        shutil.copy(ROOT / "templates" / args.template, work / "templates" / args.template)
    port = free_port()
    log = open(work / "serve.log", "w")
    # The code measured is this checkout's: ``python -m`` in another folder would import the installed package.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "site_builder", "serve", "--port", str(port),
                             *([] if args.search else ["--no-search"]),
                             "--trusted-keys", str(work / "bench-key.json")], cwd=work,
                            stdout=subprocess.DEVNULL, stderr=log, text=True, env=env)
    try:
        deadline = time.time() + 900
        while time.time() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        events: list[tuple[float, dict]] = []
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        conn.request("GET", "/__site_builder__/events")
        response = conn.getresponse()

        def read():
            event = None
            for raw in response:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == "reload":
                    events.append((time.perf_counter(), json.loads(line[6:])))
        threading.Thread(target=read, daemon=True).start()
        time.sleep(1.0)
        # serve links the tree that changes update in place while the user reads the first page (a change saved
        # meanwhile would cancel it and link its own); time the changes that come after, as a reader's would.
        deadline = time.time() + 300
        while "ready for fast rebuilds" not in (work / "serve.log").read_text() and time.time() < deadline:
            time.sleep(0.2)
        latencies = []
        for i in range(args.repeat):
            if args.template:
                latencies.append(template_edit(work / "templates" / args.template, i, events))
                time.sleep(1.0)
                continue
            n = 10 + i
            # A newer bundle of the same record (as when the resolver adds an event); never bytes already there.
            data = make_bundle(n, variant=int(time.time()) - 1_700_000_000 + i)
            pith_id = json.loads(data)["pith_number"].rsplit(":", 1)[1]
            seen = len(events)
            start = time.perf_counter()
            (bundles / f"b{n:07d}.json").write_bytes(data)
            while not any(f"/pith/{pith_id}/" in d["paths"] or d["all"] for _, d in events[seen:]):
                if time.perf_counter() - start > 600:
                    raise SystemExit(f"no reload event within 600 s; see {work / 'serve.log'}")
                time.sleep(0.005)
            latency = next(t for t, d in events[seen:] if f"/pith/{pith_id}/" in d["paths"] or d["all"]) - start
            latencies.append(latency)
            print(f"change {i + 1}: reload event after {latency * 1000:.0f} ms", file=sys.stderr)
            if args.search:  # the search page is told to reload once the index follows
                while not any("/search/" in d["paths"] for _, d in events[seen:]):
                    if time.perf_counter() - start > 600:
                        raise SystemExit(f"no search index within 600 s; see {work / 'serve.log'}")
                    time.sleep(0.01)
                indexed = next(t for t, d in events[seen:] if "/search/" in d["paths"]) - start
                print(f"change {i + 1}: search index updated after {indexed:.1f} s", file=sys.stderr)
            time.sleep(1.0)
        print(f"{args.n} bundles: save-to-reload median {statistics.median(latencies) * 1000:.0f} ms, "
              f"min {min(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms over {len(latencies)} changes")
    finally:
        proc.terminate()
        proc.wait(30)


def template_edit(template: Path, i: int, events: list[tuple[float, dict]]) -> float:
    """Save an edit of *template* its pages show (``generate.edited_visibly``) and wait for the reload event that
    follows: the seconds from the write to it."""
    source = edited_visibly(template.read_text(), f"edit {i}")
    seen = len(events)
    start = time.perf_counter()
    template.write_text(source)
    while len(events) == seen:
        if time.perf_counter() - start > 600:
            raise SystemExit("no reload event within 600 s; see serve.log")
        time.sleep(0.005)
    latency = events[seen][0] - start
    print(f"edit {i + 1} of {template.name}: pages told to reload {round(latency * 1000)} ms after it", file=sys.stderr)
    return latency


if __name__ == "__main__":
    main()
