"""Command line: ``site-builder build | verify`` (see README.md)."""

from __future__ import annotations

import argparse
import collections
import contextlib
import errno
import json
import os
import stat
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

import jinja2

from site_builder import builder_identity
from site_builder.build import BuildOptions, WorkerLostError, build, inspect_files
from site_builder.inspection import Inspection, rejected
from site_builder.keys import KeyFileError, load_trust_set
from site_builder.loading import (
    BundlesFolderError,
    BundlesFolderMissing,
    InputFile,
    MirrorListingError,
    check_bundles_folder,
    discover,
    status_of,
    unlistable_folder,
)
from site_builder.mirror_audit import audit_records, mirror_records
from site_builder.options import SERVE_HOST, SERVE_PORT, BuildPolicy
from site_builder.parallel import MAX_JOBS
from site_builder.rendering import describe_template_error
from site_builder.search_index import SearchIndexError
from site_builder.settings import SETTINGS_FILE, SettingsError, load_settings, normalize_base_url, project_paths
from site_builder.terminal import printable
from site_builder.writing import OutputError, OutputSlot

EXIT_OK, EXIT_REJECTED, EXIT_USAGE = 0, 1, 2
EXIT_INTERNAL = 70  # (sysexits' EX_SOFTWARE) the builder's own error: not 1, which a CI job takes for rejections
EXIT_BROKEN_PIPE = 128 + 13  # (what a shell reports for a program SIGPIPE ended: its output's reader stopped)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse exits 2 on usage errors, as we want; keep its message
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


# (a thread and a connection to the source each: more is no longer polite to a server, nor faster through one)
MAX_DOWNLOADS_AT_ONCE = 64


def _count(least: int, most: int | None = None):
    """An argparse type: a whole number of at least *least* and at most *most* (a clear usage error, not a
    traceback later)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{value} is less than {least}")
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f"{value} is more than {most}")
        return value
    return parse


def _port(text: str) -> int:
    value = _count(0)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (0-65535; 0: any free port)")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


class _Formatter(argparse.HelpFormatter):
    """Every option's help names its default, unless the help says it already or there is none to name."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        nothing = action.default is None or action.default is False or action.default == [] \
            or action.default == argparse.SUPPRESS
        if "default" in text or nothing or not action.option_strings:
            return text
        return f"{text} (default: {action.default})"


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="site-builder", description="Verify pith bundles and build a static mirror.",
                     epilog="Run 'site-builder COMMAND --help' for a command's options. "
                            "Example: site-builder build --bundles bundles --output output")
    parser.add_argument("--version", action="version", version=f"site-builder {builder_identity()}",
                        help="show the version, with a digest of the code (what the build cache is keyed on)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")

    def command(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".",
                              formatter_class=_Formatter)

    _build_arguments(command("build", "verify bundles and build the site"))
    sv = command("serve", "build, serve on localhost, rebuild on changes and reload the browser")
    _site_arguments(sv)
    sv.add_argument("--host", default=SERVE_HOST,
                    help="interface to listen on: a name, an IPv4 or an IPv6 address (0.0.0.0: every IPv4 interface)")
    sv.add_argument("--port", type=_port, default=SERVE_PORT, metavar="N", help="TCP port (0: any free port)")
    sv.add_argument("--open", action="store_true", help="open the site in a web browser")
    _pull_arguments(command("pull", "fetch bundles from a resolver or mirror, verified before they are written"))
    v = command("verify", "check bundle files or folders without building")
    v.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="bundle files or folders of them")
    _keys_argument(v)
    v.add_argument("--json", action="store_true", help="print the results as one JSON document")
    v.add_argument("--jobs", type=_count(0, MAX_JOBS), default=0, metavar="N",
                   help=f"worker processes (0: one per core this process may use; at most {MAX_JOBS})")
    return parser


def _keys_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trusted-keys", action="append", type=Path, default=[], metavar="FILE",
                   help="JSON key document (or list) to pin; repeatable; replaces the built-in key "
                        "(default: the resolver's key)")


def _site_arguments(p: argparse.ArgumentParser) -> None:
    """What build and serve share."""
    p.add_argument("--bundles", type=Path, default=Path("bundles"), metavar="DIR",
                   help="folder of bundle files (*.json, searched recursively)")
    p.add_argument("--output", type=Path, default=Path("output"), metavar="DIR",
                   help="where the site is written (replaced atomically)")
    _keys_argument(p)
    p.add_argument("--base-url", default=None, metavar="URL",
                   help="where the site will be served, e.g. https://user.github.io/mirror/ "
                        "(default: base_url in the settings file, else /)")
    p.add_argument("--templates", type=Path, default=Path("templates"), metavar="DIR",
                   help="templates overriding the built-in ones, used when the folder exists")
    p.add_argument("--settings", type=Path, default=Path(SETTINGS_FILE), metavar="FILE",
                   help="site settings (TOML), used when the file exists")
    p.add_argument("--no-search", action="store_true", help="skip the Pagefind search index")


def _build_arguments(b: argparse.ArgumentParser) -> None:
    _site_arguments(b)
    b.add_argument("--strict", action="store_true", help="exit 1 if any bundle was rejected")
    b.add_argument("--jobs", type=_count(0, MAX_JOBS), default=0, metavar="N",
                   help=f"worker processes (0: one per core this process may use; at most {MAX_JOBS})")
    b.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                   help="build cache folder (default: .site-builder-cache/<output name> beside the output)")
    b.add_argument("--no-cache", action="store_true", help="verify and render everything from scratch")
    b.add_argument("--no-twin", action="store_true",
                   help="when every file is written afresh, do not also link the twin tree the next build updates "
                        "in place (saves ~5-20%% of such a build; for one-off builds, as in CI)")
    b.add_argument("--live", default=None, metavar="URL|DIR",
                   help="the deployed mirror (its base URL, or a folder holding it): a record it publishes a newer "
                        "bundle of, one that verifies, is never rolled back to an older input (an unreachable or "
                        "empty live site is a warning)")
    volume = b.add_mutually_exclusive_group()
    volume.add_argument("--quiet", "-q", action="store_true", help="only the summary line and errors")
    volume.add_argument("--verbose", "-v", action="store_true",
                        help="also list every published bundle, and the time and CPU of each stage")


def _pull_arguments(pl: argparse.ArgumentParser) -> None:
    pl.add_argument("targets", nargs="+", metavar="ID_OR_LIST",
                    help="pith numbers, 26-character IDs, records' URLs (https://pith.science/pith/<ID>: the ID is "
                         "taken, the bundle fetched from --from), or files listing them one per line")
    pl.add_argument("--from", dest="source", default="https://pith.science", metavar="URL",
                    help="resolver or mirror to fetch /pith/<ID>/bundle.json from")
    pl.add_argument("--bundles", type=Path, default=Path("bundles"), metavar="DIR",
                    help="folder the verified bundles are written to: each as <ID>.json, or into the file "
                         "that already holds its record")
    _keys_argument(pl)
    pl.add_argument("--concurrency", type=_count(1, MAX_DOWNLOADS_AT_ONCE), default=4, metavar="N",
                    help=f"downloads at once (at most {MAX_DOWNLOADS_AT_ONCE})")
    pl.add_argument("--timeout", type=_seconds, default=20.0, metavar="SECONDS",
                    help="bound on each whole request, from connecting to the last byte")
    pl.add_argument("--retries", type=_count(0), default=4, metavar="N",
                    help="retries of a failed request (with backoff; a server's Retry-After is waited for at most "
                         "30 s, and the output says so)")
    pl.add_argument("--deadline", type=_seconds, default=None, metavar="SECONDS",
                    help="bound on the whole run: what is not fetched by then is reported as failed (default: none)")
    pl.add_argument("--quiet", "-q", action="store_true", help="only the summary line and errors")


def _progress_bar(enabled: bool):
    """A rich progress bar on a terminal; None when stderr is not a terminal or output is quiet."""
    if not enabled or not sys.stderr.isatty():
        return None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    from rich.text import Text

    class CountOrElapsed(MofNCompleteColumn):
        """The count "done/total", or for a stage of unknown length (Pagefind's) the seconds it has taken."""

        def render(self, task) -> Text:
            if task.total is None:
                return Text(f"{task.elapsed or 0:.0f} s", style="progress.elapsed")
            return super().render(task)

    # Refreshed from the build's own calls (at most ten times a second), not by rich's refresh thread: the
    # build forks its cache saver at the end, which is only safe in a process without other threads.
    progress = Progress(TextColumn("{task.description}"), BarColumn(), CountOrElapsed(), TimeRemainingColumn(),
                        transient=True, console=None, auto_refresh=False)
    tasks: dict[str, int] = {}
    last_refresh = [0.0]

    def update(stage: str, done: int, total: int | None) -> None:  # (total None: a pulsing bar, as for Pagefind)
        if stage not in tasks:
            tasks[stage] = progress.add_task(stage, total=total)
        progress.update(tasks[stage], completed=done, total=total)
        now = time.monotonic()
        if done == total or now - last_refresh[0] >= 0.1:
            progress.refresh()
            last_refresh[0] = now

    return progress, update


def _settings_file_missing(args) -> bool:
    """Whether the settings file named on the command line is not there, or cannot be looked at, said on stderr
    (the default one is optional; a named one that is not there is a typo, not a wish for the defaults)."""
    if args.settings == Path(SETTINGS_FILE):
        return False
    try:
        if status_of(args.settings) is not None:
            return False
        what = "settings file does not exist"
    except OSError as exc:
        what = f"cannot open the settings file: {exc.strerror}"
    say(f"error: {args.settings}: {what}", err=True)
    return True


def _templates_folder_missing(args) -> bool:
    """Whether the templates folder named on the command line is not a folder, said on stderr (the default one
    is optional, as the settings file is)."""
    if args.templates == Path("templates"):
        return False
    try:
        found = status_of(args.templates)
    except OSError as exc:
        what = f"cannot be opened: {exc.strerror}"
    else:
        if found is not None and stat.S_ISDIR(found.st_mode):
            return False
        if found is None:
            what = "is a link to nothing" if os.path.islink(args.templates) else "does not exist"
        else:
            what = "is a file, not a folder" if stat.S_ISREG(found.st_mode) else "is not a folder"
    say(f"error: {args.templates}: templates folder {what}", err=True)
    return True


# What a first run in a project without bundles is told: where they come from.
NO_BUNDLES_FOLDER_HINT = ("name the folder of bundles with --bundles DIR, or fetch records into it with "
                          "site-builder pull")


def _bundles_folder_unusable(exc: BundlesFolderError) -> int:
    """Say why the bundles folder cannot be read (where there is none, where bundles come from)."""
    hint = f"; {NO_BUNDLES_FOLDER_HINT}" if isinstance(exc, BundlesFolderMissing) else ""
    say(f"error: {exc}{hint}", err=True)
    return EXIT_USAGE


def cmd_build(args, left_for_exit: list | None = None) -> int:
    if _settings_file_missing(args) or _templates_folder_missing(args):
        return EXIT_USAGE
    try:
        trust = load_trust_set(args.trusted_keys)
        config = load_settings(args.settings)
        if args.base_url is not None:
            config = replace(config, base_url=normalize_base_url(args.base_url))
        about, static = project_paths(args.settings, config)
    except (KeyFileError, SettingsError) as exc:
        say(f"error: {exc}", err=True)
        return EXIT_USAGE
    templates = args.templates if os.path.isdir(args.templates) else None
    progress, update = _progress_bar(not args.quiet)
    options = BuildOptions(bundles=args.bundles, output=args.output, trust=trust, config=config, templates=templates,
                           about_file=about, static_dir=static, search=not args.no_search, deployed=args.live,
                           policy=BuildPolicy(jobs=args.jobs, progress=update, cache_dir=args.cache_dir,
                                              use_cache=not args.no_cache, one_shot=True,
                                              left_for_exit=left_for_exit, link_twin=not args.no_twin))
    try:
        with progress or contextlib.nullcontext():
            report = build(options)
    except BundlesFolderError as exc:
        return _bundles_folder_unusable(exc)
    except (OutputError, SearchIndexError) as exc:
        say(f"error: {exc}", err=True)
        return EXIT_USAGE
    except SettingsError as exc:  # (the about page, read as the build starts)
        say(f"error: {exc}; previous output left untouched", err=True)
        return EXIT_USAGE
    except WorkerLostError as exc:
        say(f"error: {exc}; previous output left untouched", err=True)
        return EXIT_USAGE
    except jinja2.TemplateError as exc:
        say(f"error: {describe_template_error(exc)}; previous output left untouched", err=True)
        return EXIT_USAGE
    except OSError as exc:  # (after TemplateError: a missing template is an OSError too)
        # the disk full, a folder not writable: the staging tree is gone, the old site kept
        where = f"{exc.filename}: " if exc.filename else ""
        # (out of inodes looks the same as out of bytes; on tmpfs a site's hard links take inodes too)
        hint = " (of bytes or inodes: see df -h and df -i)" if exc.errno == errno.ENOSPC else ""
        say(f"error: {where}{exc.strerror or exc}{hint}; previous output left untouched", err=True)
        return EXIT_USAGE
    _tell(report, args, config)
    say(report.summary_line())
    if args.strict and report.rejected:
        return EXIT_REJECTED
    return EXIT_OK


def _tell(report, args, config) -> None:
    """What a build has to say besides its summary line: rejections, caveats and notes (on stderr)."""
    for outcome in report.rejected:
        say(f"REJECTED {outcome.inspection.error_line()}", err=True)
    if not args.quiet:
        for outcome in report.outcomes:
            if outcome.status == "superseded":
                say(f"SUPERSEDED {outcome.inspection.rel}: {outcome.note}", err=True)
    for warning in report.warnings:
        say(f"WARNING {warning}", err=True)
    if report.twin_note and not args.quiet:
        say(f"NOTE {report.twin_note}", err=True)
    if report.cache_note and not args.quiet:
        say(f"NOTE {report.cache_note}", err=True)
    if report.reuse_note and not args.quiet:
        say(f"NOTE {report.reuse_note}", err=True)
    if not config.has_origin and not args.quiet:
        say(f"NOTE base_url {config.base_url} is not a full URL: feeds, the sitemap and social links hold "
            f"site-internal addresses, and copied snippets are completed in the reader's browser; build a "
            f"deployed site with --base-url https://... (its own address)", err=True)
    if args.verbose:
        for outcome in report.outcomes:
            if outcome.status == "published":
                say(f"OK {outcome.pith_number} {outcome.inspection.rel}")
    if not report.changed and not args.quiet:
        say("output is up to date: nothing to write", err=True)
    if args.verbose:
        say(report.stage_line(), err=True)
    if args.verbose and report.saved_in_background:
        say("the build cache is being saved in the background (a next build waits for it)", err=True)


def _verify_items(path: Path, records: list[InputFile]) -> list[Inspection | InputFile]:
    """What *path* names, in the order it is reported: a file, or a folder's bundles (sorted), each an
    InputFile to verify, or an Inspection already (a file the folder listing skipped, and why).  A site this
    builder wrote inside the folder is checked as a mirror, its records going into *records*, as a build takes no
    bundle from it and its pages' JSON is no bundle."""
    if os.path.isdir(path) and not os.path.islink(path):
        sites: list[str] = []
        found, skipped = discover(path, sites=sites)
        items = [rejected(str(path / s.rel), s.check, s.reason) for s in skipped]
        items += [InputFile(f.path, f.path, f.sig) for f in found]
        for rel in sites:
            try:
                held = mirror_records(path / rel)
            except MirrorListingError as exc:  # (as the walk reports a folder it cannot list)
                unlisted = unlistable_folder(str(path / rel / "pith"), exc.strerror)
                items.append(rejected(unlisted.rel, unlisted.check, unlisted.reason))
                continue
            if held is None:  # (a site without the mirror's layout: its JSON files, as in any folder)
                items += _verify_items(path / rel, records)
            else:
                records += held
        return sorted(items, key=lambda i: i.rel)
    return [InputFile(str(path), str(path), None)]


def _trust(paths: list[Path]):
    """The pinned keys, or None after printing why the key files cannot be used."""
    try:
        return load_trust_set(paths)
    except KeyFileError as exc:
        say(f"error: {exc}", err=True)
        return None


def cmd_verify(args) -> int:
    trust = _trust(args.trusted_keys)
    if trust is None:
        return EXIT_USAGE
    items: list[Inspection | InputFile] = []
    records: list[InputFile] = []  # of the folders that are mirrors (mirror_audit.py), checked after the rest
    for path in args.paths:
        try:
            there = status_of(path, follow_links=False) is not None  # (a link is there: it is reported as one)
        except OSError as exc:
            say(f"error: {path}: cannot open: {exc.strerror}", err=True)
            return EXIT_USAGE
        if not there:
            say(f"error: {path}: no such file or folder", err=True)
            return EXIT_USAGE
        try:
            before = len(items) + len(records)
            if (held := mirror_records(path)) is not None:
                records += held
            else:
                items.extend(_verify_items(path, records))
            if len(items) + len(records) == before:  # (a check of nothing passes: a typo must not)
                say(f"error: {path}: no bundle files (*.json) in it or its subfolders", err=True)
                return EXIT_USAGE
        except BundlesFolderError as exc:
            say(f"error: {exc}", err=True)
            return EXIT_USAGE
    files = [i for i in items if isinstance(i, InputFile)]
    progress, update = _progress_bar(True)
    try:
        with progress or contextlib.nullcontext():  # (on all cores: a folder of 10,000 bundles takes seconds)
            inspected = iter(inspect_files(files, trust, jobs=args.jobs, progress=update))
            audited = audit_records(records, trust, jobs=args.jobs, progress=update)
    except WorkerLostError as exc:
        say(f"error: {exc}", err=True)
        return EXIT_USAGE
    results = [next(inspected) if isinstance(i, InputFile) else i for i in items] + audited
    if args.json:
        doc = {"trusted_keys": [k.key_id for k in trust.keys], "results": [
            {"path": i.rel, "sha256": i.sha256, "status": "ok" if i.verified else "rejected",
             "pith_number": i.summary.pith_number if i.summary else None, "check": i.check, "reason": i.reason or None,
             "failed_checks": [{"check": c.name, "reason": c.detail} for c in i.checks if c.status == "failed"],
             "warnings": [{"code": w.code, "message": w.message} for w in i.warnings]} for i in results]}
        print(json.dumps(doc, indent=2, ensure_ascii=True))  # (ASCII: nothing in it can act on a terminal)
    else:
        for i in results:
            say(f"OK {i.summary.pith_number} {i.rel}" if i.verified else f"REJECTED {i.error_line()}")
    return EXIT_REJECTED if any(not i.verified for i in results) else EXIT_OK


def cmd_pull(args) -> int:
    from site_builder.fetching import Fetcher
    from site_builder.pulling import PullError, pull

    trust = _trust(args.trusted_keys)
    if trust is None:
        return EXIT_USAGE
    progress, update = _progress_bar(not args.quiet)
    deadline = time.monotonic() + args.deadline if args.deadline is not None else None
    fetcher = Fetcher(timeout=args.timeout, retries=args.retries, deadline=deadline)
    try:
        with progress or contextlib.nullcontext():
            report = pull(args.targets, args.source, args.bundles, trust, args.concurrency, fetcher,
                          (lambda done, total: update("pull", done, total)) if update else None)
    except PullError as exc:
        say(f"error: {exc}", err=True)
        return EXIT_USAGE
    if not args.quiet:
        for note in report.notes:
            say(f"note: {note}", err=True)
    for o in report.outcomes:
        if not o.tried:
            continue
        if o.status in ("rejected", "failed"):
            say(f"{o.status.upper()} {o.pith_id}: {o.detail}", err=True)
        elif not args.quiet and o.status in ("fetched", "kept"):
            say(f"{o.status.upper()} {o.pith_id}: {o.detail}", err=True)
    untried = collections.Counter(o.detail for o in report.outcomes if not o.tried)  # (one line for each reason)
    for why, count in untried.items():
        say(f"FAILED {count} record{'s' if count != 1 else ''}, {'none' if report.unreachable else 'not'} tried: "
            f"{why}", err=True)
    say(report.summary_line())
    return EXIT_REJECTED if report.count("rejected") or report.count("failed") else EXIT_OK


def cmd_serve(args) -> int:
    import signal

    from site_builder.serving import ListenError, ServeOptions, serve
    from site_builder.watching import WatchError

    if _trust(args.trusted_keys) is None:
        return EXIT_USAGE
    if _settings_file_missing(args) or _templates_folder_missing(args):
        return EXIT_USAGE
    try:
        check_bundles_folder(args.bundles)  # (said as a build says it)
    except BundlesFolderError as exc:
        return _bundles_folder_unusable(exc)
    try:  # (an output folder that is not a site is not served, with a banner over it: it is no site of ours)
        OutputSlot(args.output).check_usable()
    except OutputError as exc:
        say(f"error: {exc}", err=True)
        return EXIT_USAGE
    if args.base_url is not None:
        try:
            normalize_base_url(args.base_url)  # (a bad one is a usage error at once, not a banner in the browser)
        except SettingsError as exc:
            say(f"error: {exc}", err=True)
            return EXIT_USAGE
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    options = ServeOptions(bundles=args.bundles, output=args.output, templates=args.templates, settings=args.settings,
                           trusted_keys=args.trusted_keys, base_url=args.base_url, host=args.host, port=args.port,
                           search=not args.no_search)
    try:
        return serve(options, open_browser=args.open)
    except (ListenError, WatchError) as exc:
        say(f"error: {exc}", err=True)
        return EXIT_USAGE


def main(argv: list[str] | None = None, left_for_exit: list | None = None) -> int:
    """Run one command; *left_for_exit*: where a build leaves its objects for the process's exit to drop."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "build":
            return cmd_build(args, left_for_exit)
        if args.command == "pull":
            return cmd_pull(args)
        if args.command == "serve":
            return cmd_serve(args)
        return cmd_verify(args)
    except KeyboardInterrupt:
        say("interrupted", err=True)
        return 130


def say(text: str, err: bool = False) -> None:
    """Print a line, every character from an input that could act on a terminal shown as an escape, and every
    one the stream's encoding cannot hold as well (``LC_ALL=en_US.ISO-8859-1``, ``PYTHONIOENCODING=ascii``: a
    file named in Chinese must not end ``verify`` with a UnicodeEncodeError)."""
    stream = sys.stderr if err else sys.stdout
    encoding = getattr(stream, "encoding", None) or "utf-8"
    print(printable(text).encode(encoding, "backslashreplace").decode(encoding), file=stream)


def run() -> None:
    """The console entry point: ``main()``, then exit without tearing down the build's objects one by one
    (a one-shot build leaves them, see BuildPolicy.left_for_exit; the cache saver is a detached process)."""
    left_for_exit: list = []
    try:
        code = main(left_for_exit=left_for_exit)
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # (``verify ... | head``: the reader stopped; end as a program SIGPIPE ends would)
        code = EXIT_BROKEN_PIPE
    except Exception:  # (not a bad input, which is one line and exit 2 or a rejection: a bug of the builder's)
        traceback.print_exc()
        say("error: an internal error of site-builder (a bug, not a problem with your files): the traceback above "
            "says where; please report it", err=True)
        sys.stderr.flush()
        code = EXIT_INTERNAL
    os._exit(code)


if __name__ == "__main__":
    run()
