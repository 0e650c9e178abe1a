"""The gather stage's helpers: the static files the site may take, and the deployed mirror's manifest.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path

from site_builder.live_site import LiveManifest, LiveSite, LiveSiteUnavailable
from site_builder.loading import (
    InputFile,
    SkippedFile,
    StaticFile,
    discover,
    read_static_files,
)
from site_builder.options import BuildOptions
from site_builder.pages import Unit, refused_static_path, static_unit
from site_builder.rendering import template_assets
from site_builder.settings import SettingsError, SiteConfig
from site_builder.stages.context import BuildContext, digest_of
from site_builder.terminal import printable
from site_builder.urls import credentials_left_out, is_url, unfetchable
from site_builder.writing import MARKER


def allowed_static_files(folder: Path | None) -> tuple[list[StaticFile], list[str]]:
    """The static folder's files the site may take, and a warning for each one it may not (its name shown as
    ``printable`` shows it: a name may hold a newline, or bytes that are not UTF-8, which the report cannot)."""
    files, problems = read_static_files(folder)
    warnings = [f"{folder.name}/{printable(problem)}; not copied" for problem in problems]
    allowed = []
    seen: dict[str, str] = {}  # case-folded path -> the file that has it (one per name on a case-insensitive host)
    for f in files:
        refused = refused_static_path(f.rel)
        other = seen.get(f.rel.casefold())
        if refused is None and other is not None:
            refused = f"differs from {other} only in letter case (one file on a case-insensitive host)"
        if refused is None:
            allowed.append(f)
            seen[f.rel.casefold()] = f.rel
        else:
            warnings.append(f"{folder.name}/{printable(f.rel)}: {refused}; not copied")
    return allowed, warnings


def no_bundles(folder: Path, found: list[InputFile], skipped: list[SkippedFile]) -> list[str]:
    """A warning where the bundles folder holds no bundle file at all: a site without papers replaces the
    output, which a wrong ``--bundles`` (or a pull that wrote nothing) would otherwise do in silence."""
    if found or skipped:
        return []
    return [f"{printable(str(folder))}: no bundle files (*.json) in it or its subfolders; the site lists no papers"]


def sites_passed_over(folder: Path, sites: list[str]) -> list[str]:
    """A warning for each site this builder wrote that the bundles folder holds (``discover``), which the build
    does not read: said, since a copy of a mirror put there on purpose offers nothing."""
    return [f"{printable(str(folder / rel))}: a site this builder wrote ({MARKER}); its files are not read as "
            f"bundles (to take its records' bundles, name it with --bundles)" for rel in sites]


def missing_project_paths(options: BuildOptions) -> list[str]:
    """A warning for an about page or static folder that the settings name (not the defaults, which a project
    need not have) and that is not there: a typo would otherwise leave the site without it in silence."""
    warnings, defaults = [], SiteConfig()
    for key, path, is_there, kind, missing in (
            ("about_file", options.about_file, Path.is_file, "file", "the site has no about page"),
            ("static_dir", options.static_dir, Path.is_dir, "folder", "no static file is copied")):
        named = getattr(options.config, key)
        if path is not None and named != getattr(defaults, key) and not is_there(path):
            warnings.append(f"{key} = {printable(repr(named))} in the settings names no {kind}; {missing}")
    return warnings


def read_deployed(options: BuildOptions) -> tuple[LiveSite | None, LiveManifest | None, list[str]]:
    """The deployed mirror and its manifest, and what to warn about; nothing there, or unreachable, is no error."""
    if options.deployed is None:
        return None, None, []
    if is_url(options.deployed) and (problem := unfetchable(options.deployed)) is not None:
        raise SettingsError(f"--live {printable(options.deployed)}: no usable URL ({problem})")
    if is_url(options.deployed) and (said := credentials_left_out(options.deployed)) is not None:
        raise SettingsError(f"--live {said}: must not hold a user name or password (each warning names the URL, "
                            f"and no request would send them)")
    fetcher = options.policy.deployed_fetcher
    if fetcher is None and is_url(options.deployed):
        from site_builder.fetching import Fetcher  # (only here: the HTTP stack costs a no-op build ~30 ms to import)
        # Every request of the check within 20 s, and all of them within 5 minutes.
        fetcher = Fetcher(timeout=20, retries=2, deadline=time.monotonic() + 300)
    site = LiveSite(options.deployed, fetcher)
    shown = printable(options.deployed)
    try:
        manifest = site.manifest()
    except LiveSiteUnavailable as exc:
        return None, None, [f"live site {shown}: {printable(str(exc))}; no rollback check against it"]
    if manifest is None:
        return None, None, [f"live site {shown}: nothing published there yet ({MARKER} not found); "
                            f"no rollback check against it"]
    lines = []
    if manifest.malformed:
        lines.append(f"live site {shown}: {manifest.malformed} published entries of its {MARKER} are malformed; "
                     f"they prove nothing and are ignored")
    if manifest.repeated:
        lines.append(f"live site {shown}: {manifest.repeated} published entries of its {MARKER} name a record "
                     f"listed before; such a record is looked at where any of its entries says it is newer")
    return site, manifest, lines


@dataclass(frozen=True)
class Inputs:
    """What the build reads besides the bundles' bytes: the files found (by stat), the static files and the
    deployed mirror's manifest.  (The mirrored bundles edited in the output are the context's ``mirrors``:
    looked up while the build goes on, and checked where first needed.)"""

    found: list[InputFile]
    skipped: list[SkippedFile]
    static_unit: Unit | None  # the static files, as a unit of the site
    warnings: list[str]  # static files refused, the deployed mirror unreadable
    deployed: LiveSite | None
    deployed_manifest: LiveManifest | None
    site_key: str  # the build key and every template (``BuildContext.site_key``)
    indexer: str | None
    about: str | None  # the about page's Markdown

    @functools.cached_property
    def fingerprint(self) -> str:
        """The inputs by stat, for the no-op check; computed only when needed, once (10,000 entries)."""
        return digest_of(self.site_key, self.about, [(f.rel, f.sig) for f in self.found],
                         [(x.rel, x.reason) for x in self.skipped],
                         self.static_unit.material if self.static_unit else None, self.warnings,
                         self.indexer, self.deployed_manifest.sha256 if self.deployed_manifest else None)

    @property
    def paths(self) -> dict[str, Path]:
        return {f.rel: f.path for f in self.found}


def gather(ctx: BuildContext) -> Inputs:
    options = ctx.options
    if options.listing is not None:
        found, skipped, sites = options.listing.found, options.listing.skipped, options.listing.sites
    else:
        sites = []
        found, skipped = discover(options.bundles, leave_out=options.not_bundles, sites=sites)
    static, static_warnings = allowed_static_files(options.static_dir)
    asset_warnings = template_assets(ctx.dirs)[1]
    deployed, manifest, deployed_lines = read_deployed(options)
    ctx.clock.lap("discover")
    return Inputs(found, skipped, static_unit(static) if static else None,
                  no_bundles(options.bundles, found, skipped) + sites_passed_over(options.bundles, sites)
                  + missing_project_paths(options) + static_warnings
                  + asset_warnings + deployed_lines,
                  deployed, manifest, ctx.site_key, ctx.indexer, ctx.about)


