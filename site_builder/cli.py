"""Command line: ``site-builder build | verify`` (see README.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import jinja2

from site_builder import __version__
from site_builder.build import BuildOptions, SearchIndexError, build
from site_builder.inspection import Inspection, inspect_bytes, rejected
from site_builder.keys import KeyFileError, load_trust_set
from site_builder.loading import BundlesFolderError, FileReadError, discover, read_bytes
from site_builder.settings import SETTINGS_FILE, SettingsError, load_settings, normalize_base_url
from site_builder.writing import OutputError

EXIT_OK, EXIT_REJECTED, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse exits 2 on usage errors, as we want; keep its message
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="site-builder", description="Verify pith bundles and build a static mirror.")
    parser.add_argument("--version", action="version", version=f"site-builder {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def keys_arg(p):
        p.add_argument("--trusted-keys", action="append", type=Path, default=[], metavar="FILE",
                       help="JSON key document (or list) to pin; repeatable; replaces the built-in resolver key")

    b = sub.add_parser("build", help="verify bundles and build the site")
    b.add_argument("--bundles", type=Path, default=Path("bundles"), metavar="DIR")
    b.add_argument("--output", type=Path, default=Path("output"), metavar="DIR")
    keys_arg(b)
    b.add_argument("--base-url", default=None, metavar="URL", help="where the site will be served (default /)")
    b.add_argument("--templates", type=Path, default=Path("templates"), metavar="DIR",
                   help="templates overriding the built-in ones (default: ./templates when present)")
    b.add_argument("--settings", type=Path, default=Path(SETTINGS_FILE), metavar="FILE")
    b.add_argument("--strict", action="store_true", help="exit 1 if any bundle was rejected")
    b.add_argument("--jobs", type=int, default=0, metavar="N", help="worker processes (default: all cores)")
    b.add_argument("--no-search", action="store_true", help="skip the Pagefind search index")
    b.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                   help="build cache folder (default: .site-builder-cache/<output name> beside the output)")
    b.add_argument("--no-cache", action="store_true", help="verify and render everything from scratch")
    b.add_argument("--quiet", "-q", action="store_true", help="only the summary line and errors")
    b.add_argument("--verbose", "-v", action="store_true", help="also list every published bundle")

    sv = sub.add_parser("serve", help="build, serve on localhost, rebuild on changes and reload the browser")
    sv.add_argument("--bundles", type=Path, default=Path("bundles"), metavar="DIR")
    sv.add_argument("--output", type=Path, default=Path("output"), metavar="DIR")
    sv.add_argument("--templates", type=Path, default=Path("templates"), metavar="DIR")
    sv.add_argument("--settings", type=Path, default=Path(SETTINGS_FILE), metavar="FILE")
    keys_arg(sv)
    sv.add_argument("--base-url", default=None, metavar="URL")
    sv.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: 127.0.0.1 only)")
    sv.add_argument("--port", type=int, default=8000, metavar="N")
    sv.add_argument("--open", action="store_true", help="open the site in a web browser")
    sv.add_argument("--no-search", action="store_true", help="skip the Pagefind search index")

    pl = sub.add_parser("pull", help="fetch bundles from a resolver or mirror, verified before they are written")
    pl.add_argument("targets", nargs="+", metavar="ID_OR_LIST",
                    help="pith numbers, 26-character IDs, or files listing them one per line")
    pl.add_argument("--from", dest="source", default="https://pith.science", metavar="URL")
    pl.add_argument("--bundles", type=Path, default=Path("bundles"), metavar="DIR")
    keys_arg(pl)
    pl.add_argument("--concurrency", type=int, default=4, metavar="N")
    pl.add_argument("--timeout", type=float, default=20.0, metavar="SECONDS")
    pl.add_argument("--retries", type=int, default=4, metavar="N")
    pl.add_argument("--quiet", "-q", action="store_true")

    v = sub.add_parser("verify", help="check bundle files or folders without building")
    v.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    keys_arg(v)
    v.add_argument("--json", action="store_true", help="print the results as one JSON document")
    return parser


def _progress_bar(enabled: bool):
    """A rich progress bar on a terminal; None when stderr is not a terminal or output is quiet."""
    if not enabled or not sys.stderr.isatty():
        return None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    # Refreshed from the build's own calls (at most ten times a second), not by rich's refresh thread: the
    # build forks its cache saver at the end, which is only safe in a process without other threads.
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                        transient=True, console=None, auto_refresh=False)
    tasks: dict[str, int] = {}
    last_refresh = [0.0]

    def update(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = progress.add_task(stage, total=total)
        progress.update(tasks[stage], completed=done)
        now = time.monotonic()
        if done == total or now - last_refresh[0] >= 0.1:
            progress.refresh()
            last_refresh[0] = now

    return progress, update


def cmd_build(args) -> int:
    try:
        trust = load_trust_set(args.trusted_keys)
        config = load_settings(args.settings)
        if args.base_url is not None:
            config = replace(config, base_url=normalize_base_url(args.base_url))
    except (KeyFileError, SettingsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    templates = args.templates if args.templates.is_dir() else None
    if templates is None and args.templates != Path("templates"):
        print(f"error: {args.templates}: templates folder does not exist", file=sys.stderr)
        return EXIT_USAGE
    about = args.settings.parent / config.about_file
    progress, update = _progress_bar(not args.quiet)
    options = BuildOptions(bundles=args.bundles, output=args.output, trust=trust, config=config, templates=templates,
                           about_file=about, jobs=args.jobs, progress=update,
                           search=not args.no_search, cache_dir=args.cache_dir, use_cache=not args.no_cache,
                           one_shot=True)
    try:
        with progress or contextlib.nullcontext():
            report = build(options)
    except (BundlesFolderError, OutputError, SearchIndexError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except jinja2.TemplateError as exc:
        where = f"{getattr(exc, 'filename', None) or getattr(exc, 'name', None) or 'template'}"
        line = getattr(exc, "lineno", None)
        print(f"error: {where}{f':{line}' if line else ''}: {exc.message if hasattr(exc, 'message') else exc}; "
              f"previous output left untouched", file=sys.stderr)
        return EXIT_USAGE
    for outcome in report.rejected:
        print(f"REJECTED {outcome.inspection.error_line()}", file=sys.stderr)
    if not args.quiet:
        for outcome in report.outcomes:
            if outcome.status == "superseded":
                print(f"SUPERSEDED {outcome.inspection.rel}: {outcome.note}", file=sys.stderr)
    for warning in report.warnings:
        print(f"WARNING {warning}", file=sys.stderr)
    if args.verbose:
        for outcome in report.outcomes:
            if outcome.status == "published":
                print(f"OK {outcome.pith_number} {outcome.inspection.rel}")
    if not report.changed and not args.quiet:
        print("output is up to date: nothing to write", file=sys.stderr)
    if args.verbose and report.saved_in_background:
        print("the build cache is being saved in the background (a next build waits for it)", file=sys.stderr)
    print(report.summary_line())
    if args.strict and report.rejected:
        return EXIT_REJECTED
    return EXIT_OK


def _verify_path(path: Path, trust) -> list[Inspection]:
    if path.is_dir() and not path.is_symlink():
        found, skipped = discover(path)
        results = [rejected(str(path / s.rel), s.check, s.reason) for s in skipped]
        for f in found:
            results.extend(_verify_path(Path(f.path), trust))
        return sorted(results, key=lambda i: i.rel)
    try:
        raw = read_bytes(path)
    except FileReadError as exc:
        return [rejected(str(path), exc.check, exc.reason)]
    return [inspect_bytes(str(path), raw, trust)]


def _trust(paths: list[Path]):
    """The pinned keys, or None after printing why the key files cannot be used."""
    try:
        return load_trust_set(paths)
    except KeyFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def cmd_verify(args) -> int:
    trust = _trust(args.trusted_keys)
    if trust is None:
        return EXIT_USAGE
    results: list[Inspection] = []
    for path in args.paths:
        if not path.exists() and not path.is_symlink():
            print(f"error: {path}: no such file or folder", file=sys.stderr)
            return EXIT_USAGE
        try:
            results.extend(_verify_path(path, trust))
        except BundlesFolderError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if args.json:
        doc = {"trusted_keys": [k.key_id for k in trust.keys], "results": [
            {"path": i.rel, "sha256": i.sha256, "status": "ok" if i.verified else "rejected",
             "pith_number": i.summary.pith_number if i.summary else None, "check": i.check, "reason": i.reason or None,
             "failed_checks": [{"check": c.name, "reason": c.detail} for c in i.checks if c.status == "failed"],
             "warnings": [{"code": w.code, "message": w.message} for w in i.warnings]} for i in results]}
        print(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        for i in results:
            print(f"OK {i.summary.pith_number}" if i.verified else f"REJECTED {i.error_line()}")
    return EXIT_REJECTED if any(not i.verified for i in results) else EXIT_OK


def cmd_pull(args) -> int:
    from site_builder.pulling import Fetcher, PullError, pull

    trust = _trust(args.trusted_keys)
    if trust is None:
        return EXIT_USAGE
    progress, update = _progress_bar(not args.quiet)
    fetcher = Fetcher(timeout=args.timeout, retries=args.retries)
    try:
        with progress or contextlib.nullcontext():
            report = pull(args.targets, args.source, args.bundles, trust, args.concurrency, fetcher,
                          (lambda done, total: update("pull", done, total)) if update else None)
    except PullError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for o in report.outcomes:
        if o.status in ("rejected", "failed"):
            print(f"{o.status.upper()} {o.pith_id}: {o.detail}", file=sys.stderr)
        elif not args.quiet and o.status in ("fetched", "kept"):
            print(f"{o.status.upper()} {o.pith_id}: {o.detail}", file=sys.stderr)
    print(report.summary_line())
    return EXIT_REJECTED if report.count("rejected") or report.count("failed") else EXIT_OK


def cmd_serve(args) -> int:
    import signal

    from site_builder.serving import ServeOptions, serve

    if _trust(args.trusted_keys) is None:
        return EXIT_USAGE
    if not args.bundles.is_dir():
        print(f"error: {args.bundles}: bundles folder does not exist", file=sys.stderr)
        return EXIT_USAGE
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    options = ServeOptions(bundles=args.bundles, output=args.output, templates=args.templates, settings=args.settings,
                           trusted_keys=args.trusted_keys, base_url=args.base_url, host=args.host, port=args.port,
                           search=not args.no_search)
    try:
        return serve(options, open_browser=args.open)
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "build":
            return cmd_build(args)
        if args.command == "pull":
            return cmd_pull(args)
        if args.command == "serve":
            return cmd_serve(args)
        return cmd_verify(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """The console entry point: ``main()``, then exit without tearing down the build's objects one by one
    (a one-shot build leaves them, see BuildOptions.one_shot; the cache saver is a detached process)."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
