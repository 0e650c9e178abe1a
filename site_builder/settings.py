"""Site settings: ``site.toml`` at the project root, overridden by command-line flags."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, fields, replace
from functools import cached_property
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from site_builder.loading import FileReadError, read_bytes, status_of
from site_builder.records import NOT_SHOWN
from site_builder.urls import RESOLVER, credentials_left_out, on_resolver, unfetchable

SETTINGS_FILE = "site.toml"
SETTINGS_MAX_BYTES = 1 << 20


class SettingsError(ValueError):
    pass


@dataclass(frozen=True)
class SiteConfig:
    title: str = "Pith mirror"
    description: str = "A verified static mirror of pith paper records."
    base_url: str = "/"
    page_size: int = 100
    about_file: str = "about.md"
    static_dir: str = "static"  # files copied into the site as they are (beside the settings file; optional)
    resolver_url: str = RESOLVER
    # Records per search index at most (search_index.py): a larger site is indexed in shards, each re-made alone
    # and within the memory of its own size (~90 KB a record), which the search page merges in the browser; but
    # in no more than search_max_shards of them, as a query fetches from every one.
    search_shard_size: int = 2500
    search_max_shards: int = 8

    # Worked out once (a record's pages ask for ~50 links): the settings are frozen.  ``cached_property`` keeps
    # them in the instance's dict, which the frozen dataclass's fields, equality and ``replace`` do not look at.
    @cached_property
    def base_path(self) -> str:
        """Path part of base_url, always starting and ending with '/'."""
        path = urlsplit(self.base_url).path or "/"
        return path if path.endswith("/") else path + "/"

    @cached_property
    def has_origin(self) -> bool:
        parts = urlsplit(self.base_url)
        return bool(parts.scheme and parts.netloc)

    @cached_property
    def _absolute_base(self) -> str:
        """What an absolute URL starts with: the origin and base path, or the base path alone."""
        if not self.has_origin:
            return self.base_path
        parts = urlsplit(self.base_url)
        return f"{parts.scheme}://{parts.netloc}{self.base_path}"

    def url(self, path: str = "") -> str:
        """Site-internal link for a path relative to the site root."""
        return self.base_path + path.lstrip("/")

    def absolute_url(self, path: str = "") -> str:
        """Full URL when base_url has an origin; otherwise the site-internal link."""
        return self._absolute_base + path.lstrip("/")

    @cached_property
    def resolver_name(self) -> str:
        """What the pages call the resolver they link to: its host (``pith.science``), so that a link's words
        name where it leads whatever ``resolver_url`` names."""
        return urlsplit(self.resolver_url).netloc

    def resolver(self, path: str) -> str:
        """The address of *path* on the resolver the site mirrors (``resolver_url``), as the pages link to it."""
        return on_resolver(self.resolver_url, path)


# Characters a URL never holds as they are (RFC 3986), and that would end an HTML attribute or a Markdown link.
_NOT_IN_A_BASE_URL = set(' "<>\\^`{|}')


def _not_in_a_url(value: str) -> list[str]:
    """The characters of *value* a URL never holds as they are (``_NOT_IN_A_BASE_URL``, controls), in order."""
    return sorted({c for c in value if c in _NOT_IN_A_BASE_URL or ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0})


def normalize_base_url(value: str) -> str:
    value = value.strip()
    try:
        parts = urlsplit(value)
    except ValueError:  # ("https://[::1/")
        raise SettingsError(f"base URL {value!r}: {unfetchable(value)}") from None
    if parts.username is not None or parts.password is not None:  # (first: the messages below show the value)
        raise SettingsError(f"base URL of {parts.hostname!r}: must not hold a user name or password (every "
                            f"absolute link would publish them)")
    if parts.scheme and parts.scheme not in ("http", "https"):
        raise SettingsError(f"base URL {value!r}: only http and https are supported")
    if parts.query or parts.fragment:
        raise SettingsError(f"base URL {value!r}: must not have a query or fragment")
    if not parts.scheme and not value.startswith("/"):
        raise SettingsError(f"base URL {value!r}: must be a full URL or start with '/'")
    if not parts.scheme and parts.netloc:
        raise SettingsError(f"base URL {value!r}: names a host but no scheme; write https://{parts.hostname}/...")
    if parts.scheme and not parts.hostname:
        raise SettingsError(f"base URL {value!r}: a full URL with no host")
    if parts.scheme and (problem := unfetchable(value)) is not None:
        raise SettingsError(f"base URL {value!r}: {problem}")
    if any(segment in (".", "..") for segment in parts.path.split("/")):  # (a browser resolves them away)
        raise SettingsError(f"base URL {value!r}: must not hold a '.' or '..' segment (the links would lead "
                            f"elsewhere); write the path it means")
    bad = _not_in_a_url(value)
    if bad:
        raise SettingsError(f"base URL {value!r}: must not contain {', '.join(repr(c) for c in bad)} "
                            f"(percent-encode it)")
    value = _as_uri(parts)
    return value if value.endswith("/") else value + "/"


_ASCII_SHOWN = "".join(chr(c) for c in range(0x21, 0x7f))


def _as_uri(parts) -> str:
    """The base URL with what is not ASCII written as a URI writes it (an IRI's host by IDNA, its path
    percent-encoded): a sitemap's ``<loc>`` and a feed's links must be URIs, and a browser's
    ``location.pathname``, which live reload compares the pages' paths with, is one."""
    netloc = parts.netloc
    if not netloc.isascii():  # (no user name or password: refused above)
        netloc = parts.hostname.encode("idna").decode("ascii") + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, quote(parts.path, safe=_ASCII_SHOWN), "", ""))


def check_resolver_url(value: str) -> str:
    """*value* if it is an http(s) URL with a host, and nothing a link on every page must not hold: it is the
    footer's link to the resolver, and site.toml may come from someone else (``javascript:`` would run)."""
    if (problem := unfetchable(value)) is not None:
        raise SettingsError(f"resolver URL {value!r}: must be an http(s) URL with a host ({problem})")
    parts = urlsplit(value)
    if credentials_left_out(value) is not None:
        raise SettingsError(f"resolver URL of {parts.hostname!r}: must not hold a user name or password")
    if _not_in_a_url(value):
        raise SettingsError(f"resolver URL {value!r}: holds a character a URL never holds as it is "
                            f"(percent-encode it)")
    return value


# The integer settings, and their bounds.
_COUNTS = {"page_size": (1, 10_000), "search_shard_size": (1, 10_000_000), "search_max_shards": (1, 1024)}


def load_settings(path: Path) -> SiteConfig:
    """Read settings from *path* if it exists; unknown keys are an error (typos should not pass silently)."""
    config = SiteConfig()
    try:
        if status_of(path) is None:
            return config
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read: {exc.strerror}") from None
    try:  # (a regular file of at most 1 MB: a site.toml that a pull request makes a link to /dev/zero is no hang)
        # (a byte-order mark, as some editors on Windows save one, is taken off: TOML's parser refuses it)
        data = tomllib.loads(read_bytes(path, SETTINGS_MAX_BYTES, follow_links=True).decode("utf-8-sig"))
    except FileReadError as exc:
        raise SettingsError(f"{path}: {exc.reason}") from None
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: {exc}") from None
    known = [f.name for f in fields(SiteConfig)]  # (every setting is a field; all but the counts are text)
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise SettingsError(f"{path}: unknown setting(s): {', '.join(unknown)}")
    for key in known:
        if key not in _COUNTS and key in data and not isinstance(data[key], str):
            raise SettingsError(f"{path}: {key} must be a string")
        # (what no page or feed may hold, as of a bundle's text: a title is in every page and feed)
        if key not in _COUNTS and key in data and (bad := NOT_SHOWN.search(data[key])):
            raise SettingsError(f"{path}: {key} holds the control character U+{ord(bad.group()):04X}, which no page "
                                f"or feed may hold")
    if "title" in data and not data["title"].strip():  # (an HTML <title> and a feed's title may not be empty)
        raise SettingsError(f"{path}: title is empty; it names the site in every page's title and every feed")
    for key, (low, high) in _COUNTS.items():
        value = data.get(key, low)
        if type(value) is not int or not low <= value <= high:
            raise SettingsError(f"{path}: {key} must be an integer from {low:,} to {high:,}")
    try:
        if "base_url" in data:
            data["base_url"] = normalize_base_url(data["base_url"])
        if "resolver_url" in data:
            check_resolver_url(data["resolver_url"])
    except SettingsError as exc:
        raise SettingsError(f"{path}: {exc}") from None
    config = replace(config, **data)
    project_paths(path, config)  # (a path out of the project is refused as the file is read)
    return config


_PROJECT_PATHS = ("about_file", "static_dir")


def project_paths(settings_file: Path, config: SiteConfig) -> tuple[Path, Path]:
    """The about file and the static folder *config* names, under the settings file's folder; SettingsError
    where one leads out of that folder (absolute, through "..", or by a link): site.toml is input like the
    bundles (a fork's pull request may bring one), and the about page and the static files are published, so
    ``about_file = "/proc/self/environ"`` or a ``static`` link to ``~/.ssh`` would publish what they lead to."""
    folder = settings_file.parent
    real_folder = os.path.realpath(folder)
    found = []
    for key in _PROJECT_PATHS:
        value = getattr(config, key)
        path = folder / value
        real = os.path.realpath(path)
        if value.strip() in ("", ".") or real == real_folder:
            raise SettingsError(f"{settings_file}: {key} = {value!r} is the folder the settings file is in itself; "
                                f"name a file or folder inside it")
        inside = os.path.commonpath([real_folder, real]) == real_folder
        if os.path.isabs(value) and inside:  # (said as it is: "leads out" would send the user looking for a link)
            raise SettingsError(f"{settings_file}: {key} = {value!r} is an absolute path; name it relative to the "
                                f"folder the settings file is in, which may be checked out anywhere")
        if os.path.isabs(value) or ".." in Path(value).parts or not inside:
            raise SettingsError(f"{settings_file}: {key} = {value!r} leads out of the folder the settings file is "
                                f"in; name a file or folder inside it")
        found.append(path)
    return found[0], found[1]
