"""What makes a URL one a request can be made to, or one a page may link to as it stands.

Pure functions over text: ``settings`` checks the user's URLs with them, ``pulling`` and the live-site check a
server's, and the pages a bundle's (its license, its Markdown links).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

# Characters an href holds as they are: those of a URL's path, query and fragment, and "%" only before two hex
# digits (the W3C validator refuses a space, a quote, an angle bracket, a lone "%"; a bracketed IPv6 host is
# left out with them).
_HREF = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?#]|%[0-9A-Fa-f]{2})*\Z")

RESOLVER = "https://pith.science"  # the resolver a site mirrors where its settings name no other


def on_resolver(resolver_url: str, path: str) -> str:
    """The address of *path* on the resolver at *resolver_url* (written with or without its closing "/")."""
    return resolver_url.rstrip("/") + "/" + path.lstrip("/")


def is_url(text: str) -> bool:
    """Whether *text* says it is an http(s) URL, by its scheme in any letter case (``HTTPS://``): a source or
    pattern that does is read as one, and whether it is one a request can be made to is ``unfetchable``'s to
    say; one that does not is a folder (``--live``) or refused (``--from``, a redirect, a manifest's pattern)."""
    return text.lower().startswith(("http://", "https://"))


def unfetchable(url: str) -> str | None:
    """Why *url* is no http(s) URL a request could be made to, or None where it is one.  urllib raises
    ValueError, not OSError, for such a URL (``https://[::1/``, a port over 65535, a host ``a..b``), as it
    parses it, so one given by the user is refused here, and one a server sends (a redirect, a manifest's
    pattern) is its failure, not the command's traceback."""
    try:
        parts = urlsplit(url)
        port = parts.port  # (raises for a port that is not a number from 0 to 65535)
        host = parts.hostname
    except ValueError as exc:  # ("Invalid IPv6 URL", "Port out of range 0-65535")
        return str(exc)[:1].lower() + str(exc)[1:]
    if parts.scheme not in ("http", "https"):
        return "not an http(s) URL"
    if not host:
        return "no host"
    if port == 0:
        return "port 0"
    try:
        host.encode("idna")
    except UnicodeError:
        return f"host {host!r} is not a host name"
    return None


def credentials_left_out(url: str) -> str | None:
    """*url* (one ``unfetchable`` passed) said without the user name or password it holds (``https://…@host``),
    or None where it holds none.  Such a URL is refused wherever it is given: every line naming it would print
    the secret, and no request (urllib) would send it."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return None
    return f"{parts.scheme}://…@{parts.hostname}"


def linkable(url: str) -> bool:
    """Whether *url* is an http(s) URL a page may put in an href as it stands: one ``unfetchable`` passes,
    without a user name or password, of characters an href holds (``_HREF``) and with one "#" at most.  Text from
    a bundle that is not (``http://``, ``https://a..b/``, a port over 65535, ``https://example.org/a b``) is
    shown as text, not as a link that is invalid HTML."""
    return (_HREF.match(url) is not None and url.count("#") <= 1 and unfetchable(url) is None
            and credentials_left_out(url) is None)
