"""HTTP GET for ``pull`` and the live-site check, as a client of servers nobody vouches for: each whole request
bounded by a timeout (a server sending a byte a second is cut off), retries with backoff on 429 and 5xx honouring
``Retry-After`` up to a cap, a body limit, redirects only to http(s), and ``Unreachable`` where no try got any
answer (the caller then asks that host no more).
"""

from __future__ import annotations

import email.utils
import http.client
import re
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Callable

from site_builder import __version__
from site_builder.loading import DEFAULT_MAX_BYTES
from site_builder.urls import is_url, unfetchable

USER_AGENT = f"site-builder/{__version__} (+https://pith.science mirror)"


class ResponseTooLarge(OSError):
    """A response over the byte limit its request allowed; the message says how large."""


class Unreachable(OSError):
    """No answer from the server at all, after every try: its host name not found, its connection refused, reset
    or timed out, its certificate not trusted.  Another request to that host would get none either."""


class _Connections(threading.local):
    """The connections the current thread's request opened (a redirect opens more than one)."""

    def __init__(self):
        self.open: list[_HTTPConnection | _HTTPSConnection] = []


class _KeepsSocket:
    """Keeps its socket: urllib lets go of a connection's socket once the headers are read (the response reads
    from it), and a request cut off at its deadline must still reach it."""

    kept: socket.socket | None = None

    def connect(self):
        super().connect()
        self.kept = self.sock


class _HTTPConnection(_KeepsSocket, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_KeepsSocket, http.client.HTTPSConnection):
    pass


def _tracked(connection_class, connections: _Connections):
    def make(host, **kwargs):
        connection = connection_class(host, **kwargs)
        connections.open.append(connection)
        return connection
    return make


class _TrackedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, connections: _Connections):
        super().__init__()
        self.connections = connections

    def http_open(self, req):
        return self.do_open(_tracked(_HTTPConnection, self.connections), req)


class _TrackedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, connections: _Connections):
        self.tls = ssl.create_default_context()
        super().__init__(context=self.tls)
        self.connections = connections

    def https_open(self, req):
        return self.do_open(_tracked(_HTTPSConnection, self.connections), req, context=self.tls)


def _cut(connections: list) -> None:
    """End every connection of a request at its deadline: a read blocked on it returns at once."""
    for connection in list(connections):
        sock = connection.kept
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _RefusedRedirect(urllib.error.HTTPError):
    """A redirect to a URL that is not http(s), refused (its ``filename`` is where it led)."""


class _NoRedirectToOtherSchemes(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if not is_url(newurl):
            raise _RefusedRedirect(newurl, code, "redirect to a non-HTTP URL refused", headers, fp)
        if (problem := unfetchable(newurl)) is not None:
            raise _RefusedRedirect(newurl, code, f"redirect to no usable URL ({problem})", headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


@dataclass
class Fetcher:
    """*timeout* bounds each whole request, from connecting to the last byte (a server that sends one byte a
    second is cut off, not waited for); *deadline* (a ``time.monotonic()`` value) bounds the whole run, waits for
    ``Retry-After`` included, which are also capped at *max_wait*."""

    timeout: float = 20.0
    retries: int = 4
    backoff: float = 0.5
    max_wait: float = 30.0
    max_bytes: int = DEFAULT_MAX_BYTES
    sleep: Callable[[float], None] = time.sleep
    deadline: float | None = None

    def __post_init__(self):
        self._connections = _Connections()
        self._notes = threading.local()
        self.opener = urllib.request.build_opener(_TrackedHTTPHandler(self._connections),
                                                  _TrackedHTTPSHandler(self._connections),
                                                  _NoRedirectToOtherSchemes())

    def notes(self) -> list[str]:
        """What the current thread's last ``get`` should tell the user (a capped wait, say)."""
        return list(getattr(self._notes, "items", []))

    def _remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def _wait(self, seconds: float) -> None:
        remaining = self._remaining()
        if remaining is not None and seconds >= remaining:
            raise OSError("the run's deadline passed")
        self.sleep(seconds)

    def _open_and_read(self, url: str, headers: dict[str, str], limit: int) -> tuple[int, bytes, dict[str, str]]:
        """One request, cut off when it has taken *timeout* seconds (or the run's deadline comes first), or
        has sent more than *limit* bytes."""
        budget = self.timeout
        remaining = self._remaining()
        if remaining is not None:
            if remaining <= 0:
                raise OSError("the run's deadline passed")
            budget = min(budget, remaining)
        self._connections.open = []
        started = time.monotonic()
        timer = threading.Timer(budget, _cut, (self._connections.open,))
        timer.daemon = True
        timer.start()
        try:
            request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **headers})
            with self.opener.open(request, timeout=budget) as response:
                stated = (response.headers.get("Content-Length") or "").strip()
                length = int(stated) if _DIGITS.fullmatch(stated) else None  # (no number: read to the end)
                if length is not None and length > limit:
                    raise ResponseTooLarge(f"response of {length} bytes is over the {limit}-byte limit")
                chunks, size = [], 0
                while chunk := response.read(min(1 << 16, limit + 1 - size)):
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > limit:
                        raise ResponseTooLarge(f"response is over the {limit}-byte limit")
                body = b"".join(chunks)
                if length is not None and len(body) != length:
                    raise http.client.IncompleteRead(body, length - len(body))
                return response.status, body, _by_name(response.headers)
        except ValueError as exc:  # (urllib's word for a URL it cannot use that ``unfetchable`` did not foresee)
            raise OSError(f"no usable URL ({exc})") from None
        except (OSError, http.client.HTTPException) as exc:
            if time.monotonic() - started >= budget * 0.99 and not isinstance(exc, urllib.error.HTTPError):
                raise TimeoutError(f"the request took over {budget:g} s") from None
            raise
        finally:
            timer.cancel()
            self._connections.open = []

    def _retry_after(self, value: str | None, attempt: int) -> float:
        wait = self.backoff * (2 ** attempt)
        asked = None
        if value:
            value = value.strip()
            if _DIGITS.fullmatch(value):  # (ASCII digits only: str.isdigit() takes "²", which float() refuses)
                wait = asked = float(min(int(value), MAX_RETRY_AFTER))
            else:
                try:
                    when = email.utils.parsedate_to_datetime(value).timestamp()
                    wait = asked = min(max(0.0, when - time.time()), MAX_RETRY_AFTER)
                except (TypeError, ValueError, OverflowError, OSError):
                    pass
        if wait > self.max_wait:  # (said only where the server asked for longer: the backoff is our own)
            if asked is not None:
                self._notes.items.append(f"Retry-After {asked:.0f} s capped at {self.max_wait:g} s")
            wait = self.max_wait
        return wait

    def get(self, url: str, headers: dict[str, str],
            max_bytes: int | None = None) -> tuple[int, bytes, dict[str, str]]:
        """GET with retries; returns (status, body, headers by lower-case name) for 200/304/404, raises OSError
        otherwise.  A body over *max_bytes* (default: the fetcher's ``max_bytes``) is refused."""
        last, answered = "no attempt", True  # (the last try's failure, and whether the server gave any answer)
        self._notes.items = []
        limit = self.max_bytes if max_bytes is None else max_bytes
        for attempt in range(self.retries + 1):
            try:
                return self._open_and_read(url, headers, limit)
            except urllib.error.HTTPError as exc:
                if exc.code in (304, 404):
                    return exc.code, b"", _by_name(exc.headers or {})
                last, answered = f"HTTP {exc.code}", True
                if 300 <= exc.code < 400:
                    last = (f"{exc.msg} (HTTP {exc.code} to {str(exc.filename)[:200]})"
                            if isinstance(exc, _RefusedRedirect) else
                            f"a redirect loop, or too many redirects (HTTP {exc.code})")
                if exc.code != 429 and exc.code < 500:
                    raise OSError(last) from None
                if attempt < self.retries:
                    self._wait(self._retry_after(exc.headers.get("Retry-After") if exc.headers else None, attempt))
            except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as exc:
                last = {"IncompleteRead": "truncated response"}.get(type(exc).__name__, type(exc).__name__)
                answered = isinstance(exc, http.client.HTTPException)  # (a bad or cut-off answer is one)
                if isinstance(exc, urllib.error.URLError):
                    last += f": {exc.reason}"
                    if isinstance(exc.reason, ssl.SSLCertVerificationError):  # (the same certificate every try)
                        raise Unreachable(last) from None
                    if isinstance(exc.reason, socket.gaierror) and exc.reason.errno == socket.EAI_NONAME:
                        # (the same answer every try: not waited on for each bundle, as a temporary failure is)
                        raise Unreachable("host name not found (a misspelt URL, or no network)") from None
                elif isinstance(exc, TimeoutError) and str(exc):
                    last = str(exc)
                if attempt < self.retries:
                    self._wait(self._retry_after(None, attempt))
        failure = OSError if answered else Unreachable
        raise failure(f"{last} after {self.retries + 1} attempt{'s' if self.retries else ''}")


def _by_name(headers) -> dict[str, str]:
    """A response's headers by lower-case name: HTTP's names are in any letter case (``ETag``, ``Etag``, and
    ``etag`` where a proxy speaks HTTP/2 to the server), and a plain dict would find only the one asked for."""
    return {name.lower(): value for name, value in headers.items()}


_DIGITS = re.compile(r"[0-9]+")  # (a number of seconds or bytes, as HTTP writes one)
MAX_RETRY_AFTER = 10 ** 9  # (what a server may ask for is said as it asked, up to this: it is waited for 30 s at most)
