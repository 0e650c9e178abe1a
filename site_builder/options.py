"""What a build is asked to do: the inputs, the output, the trust set and how to go about it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from site_builder.keys import TrustSet
from site_builder.loading import DEFAULT_MAX_BYTES, BundleListing
from site_builder.mirrors import MirrorLookups
from site_builder.incremental import IncrementalStore
from site_builder.parallel import Workers
from site_builder.report import BuildReport
from site_builder.settings import SiteConfig

# Where ``serve`` listens unless told (the command line's defaults, and ``serving.ServeOptions``'s).
SERVE_HOST = "127.0.0.1"
SERVE_PORT = 8000


@dataclass(frozen=True)
class ServeSession:
    """What a long-running process (``serve``) keeps between its builds and hands each one."""

    store: IncrementalStore  # what one build may reuse from the last, in this process, and the open cache
    listing: BundleListing | None = None  # the bundles folder as the caller already listed it; else discover()
    # When a shard of the search index would be made again, publish with the live one and say so
    # (``BuildReport.search_behind``): a change is on screen without waiting for Pagefind (~2.5 s a shard of 2,500
    # records, ~13 s one of 12,500), and the caller's next build, without this, brings the index up to date.
    defer_search: bool = False
    on_published: Callable[[BuildReport], None] | None = None  # called as soon as the new site is live
    # The lookups of the mirrored bundles in the output, started when the change was first seen (the first file
    # event, before the quiet time the watcher waits for); the build takes them over if they are of its output
    # against the cache's record as it stands, else makes its own (``MirrorLookups.made_for``).
    lookups: MirrorLookups | None = None


@dataclass(frozen=True)
class BuildPolicy:
    """How to go about a build: none of it changes what the build publishes (the build key leaves it out)."""

    jobs: int = 0  # 0: one worker per usable core (none on one)
    progress: Callable[[str, int, int | None], None] | None = None
    cache_dir: Path | None = None  # default: .site-builder-cache beside the output
    use_cache: bool = True
    mp_context: str = "fork"  # "forkserver" where the caller runs threads (serve)
    # The process ends after this build (the command line): the cache is saved by a detached process once the site
    # is live.
    one_shot: bool = False
    # A list the caller holds until its process ends with ``os._exit``: the build leaves its objects in it rather
    # than freeing them as it returns (freeing a million objects takes ~1 s at 100,000 records).
    left_for_exit: list | None = None
    # (the command line) A build that writes the whole site afresh (a first build, a template edit) links a twin
    # of it as it goes, which the next change updates in place: that change then takes well under a second
    # instead of linking a whole tree (~5 s at 10,000 records), for 6-20 % (tmpfs) to ~18 % (disk) more full build.
    link_twin: bool = False
    deployed_fetcher: object | None = None  # a fetching.Fetcher for a URL (its timeouts); a default one otherwise
    # The trees' mirrored bundles looked up in a child process (started as the workers are) while the build goes
    # on (mirrors.MirrorLookups), else as the build comes to each tree.
    look_ahead: bool = True

    @property
    def workers(self) -> Workers:
        return Workers(self.jobs, self.progress, self.mp_context)


@dataclass(frozen=True)
class BuildOptions:
    """A build: what the user asked for (inputs, output, keys, settings: what the site holds depends on these
    alone), how to go about it (``policy``), and, for serve, the session it belongs to."""

    bundles: Path
    output: Path
    trust: TrustSet
    config: SiteConfig = field(default_factory=SiteConfig)
    templates: Path | None = None
    about_file: Path | None = None
    static_dir: Path | None = None  # files copied into the site as they are (when the folder exists)
    search: bool = True
    # The deployed mirror (an http(s) base URL or a folder): none of its newer, verifying bundles is rolled back.
    deployed: str | None = None
    max_bytes: int = DEFAULT_MAX_BYTES  # a bundle over this is refused unread
    policy: BuildPolicy = field(default_factory=BuildPolicy)
    session: ServeSession | None = None  # the state serve keeps between builds

    @property
    def not_bundles(self) -> tuple[Path, ...]:
        """The folders not searched for bundles where the bundles folder holds them (``--bundles .``): the
        output, whose mirrored bundles are the build's own copies, and the static and templates folders, whose
        files are the site's (a static ``manifest.json`` is no bundle)."""
        return tuple(folder for folder in (self.output, self.static_dir, self.templates) if folder is not None)

    @property
    def store(self) -> IncrementalStore | None:
        return self.session.store if self.session is not None else None

    @property
    def listing(self) -> BundleListing | None:
        return self.session.listing if self.session is not None else None

    @property
    def defer_search(self) -> bool:
        return self.session is not None and self.session.defer_search

    @property
    def on_published(self) -> Callable[[BuildReport], None] | None:
        return self.session.on_published if self.session is not None else None
