"""Real parts for tests: a static HTTP server on 127.0.0.1 and a headless Chromium driven by Playwright.

The Chromium is Debian's package where it is installed, and otherwise the build Playwright installs for itself
(scripts/install-test-tools does that on Ubuntu, whose chromium package is a snap that cannot run in a container)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import ssl
import threading
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote, urlsplit

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else None)
if CHROMIUM is None:
    # Playwright looks for its own build under the cache home, which each test sets to a folder of its own
    # (conftest's user_cache_home): pin the folder the build was installed in, as this process found it.
    os.environ.setdefault("PLAYWRIGHT_BROWSERS_PATH",
                          str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ms-playwright"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder under a URL prefix, with 404.html for missing paths (as GitHub Pages does)."""

    prefix = "/"

    def log_message(self, *args):
        pass

    def translate_path(self, path):
        path = unquote(urlsplit(path).path)
        if not path.startswith(self.prefix):
            return str(Path(self.directory) / "__outside_prefix__")
        return super().translate_path("/" + path[len(self.prefix):])

    def send_error(self, code, message=None, explain=None):
        page = Path(self.directory) / "404.html"
        if code == 404 and page.is_file():
            body = page.read_bytes()
            self.send_response(404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            return
        super().send_error(code, message, explain)


_Handler.extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".json": "application/json",
                           ".js": "text/javascript", ".svg": "image/svg+xml", ".xml": "application/xml"}


@contextlib.contextmanager
def serving(handler, tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """Answer requests on 127.0.0.1 with *handler* (a request handler class, or a factory of one) in a thread;
    yields http://127.0.0.1:<port>, or https://localhost:<port> with a server-side *tls* context."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    # (polled often: shutdown() waits for the next poll, half a second by default, in every test that serves)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    try:
        yield f"{'https://localhost' if tls else 'http://127.0.0.1'}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def serve(folder: Path, prefix: str = "/"):
    """Serve *folder* at http://127.0.0.1:<port><prefix>; yields the base URL."""
    handler = type("Handler", (_Handler,), {"prefix": prefix})
    with serving(functools.partial(handler, directory=str(folder))) as url:
        yield url + prefix


# The screens pages are checked on.  The phone is emulated as one (``is_mobile``): Chromium then lays a page out at
# the width its viewport meta tag asks for, as a phone does, and at 980 px shrunk to fit where it asks for none; a
# narrow desktop window would lay out any page at its own width.
SCREENS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 800}}


def new_page(browser, screen: str = "desktop", scheme: str = "light", height: int | None = None):
    """A page in *browser* on *screen* ("desktop" or "phone") in the colour *scheme* ("light" or "dark")."""
    phone = screen == "phone"
    return browser.new_page(viewport={**SCREENS[screen], **({"height": height} if height else {})},
                            color_scheme=scheme, is_mobile=phone, has_touch=phone,
                            device_scale_factor=3 if phone else 1)


@contextlib.contextmanager
def chromium():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
