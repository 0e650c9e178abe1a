"""Check every internal link and asset reference of a built site against its files."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        for name in ("href", "src"):
            if a.get(name) and not (tag == "link" and a.get("rel") in ("canonical", "alternate") and
                                    a[name].startswith("http")):
                self.refs.append(a[name])
        if tag == "meta" and a.get("http-equiv", "").lower() == "refresh":
            self.refs.append(a["content"].split("url=", 1)[1])


def broken_links(site: Path, origin: str, base_path: str) -> list[str]:
    """Internal references (same origin, under base_path) that do not resolve to a file; [] when all do."""
    problems = []
    pages = sorted(site.rglob("*.html"))
    id_cache: dict[Path, set[str]] = {}

    def parse(path: Path) -> _Refs:
        parser = _Refs()
        parser.feed(path.read_text("utf-8"))
        return parser

    for page in pages:
        rel = page.relative_to(site).as_posix()
        page_url = origin + base_path + rel
        refs = parse(page)
        id_cache[page] = refs.ids
        for ref in refs.refs:
            absolute = urljoin(page_url, ref)
            parts = urlsplit(absolute)
            if parts.scheme not in ("http", "https") or f"{parts.scheme}://{parts.netloc}" != origin:
                continue
            path = unquote(parts.path)
            if not path.startswith(unquote(base_path)):  # (a base path with escapes: "/caf%C3%A9/")
                problems.append(f"{rel}: {ref} leaves the site's base path {base_path}")
                continue
            target = site / path[len(unquote(base_path)):]
            if path.endswith("/"):
                target = target / "index.html"
            if not target.is_file():
                problems.append(f"{rel}: {ref} -> missing {target.relative_to(site)}")
            elif parts.fragment and target.suffix == ".html":
                ids = id_cache.get(target) or parse(target).ids
                if parts.fragment not in ids:
                    problems.append(f"{rel}: {ref} -> no id {parts.fragment!r}")
    return problems
