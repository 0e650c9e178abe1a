"""The HTTP client under ``pull`` and the live-site check, against local servers that misbehave in every way a
real one can: retries and their waits, ``Retry-After`` in any form, timeouts of a whole request, body limits,
status codes, and a host that gives no answer at all."""

import email.utils
import subprocess
import sys
import threading
import time
from unittest import mock

import pytest

from site_builder.fetching import Fetcher, Unreachable
from site_builder.keys import load_trust_set
from site_builder.pulling import pull

from conftest import QUICK_RETRIES as FAST, REAL_BY_ID as REAL, ScriptedServer, free_port, https_certificate, running

IDS = sorted(REAL)


def test_an_https_server_that_sends_one_byte_at_a_time_is_cut_off_at_the_timeout(tmp_path, monkeypatch):
    """Each byte comes well within the socket's timeout, so only the whole request's deadline ends it (the server
    would have sent it all after 5 s); an https connection is reached by that deadline as a plain one is (the
    default source is https)."""
    tls = https_certificate(tmp_path, monkeypatch)
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]], "drip": 0.2})
    with running(s, tls) as url:
        started = time.monotonic()
        report = pull([IDS[0]], url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(timeout=1.0, retries=0))
        took = time.monotonic() - started
    [outcome] = report.outcomes
    assert outcome.status == "failed" and "took over 1 s" in outcome.detail, outcome
    assert took < 4, f"took {took:.1f} s"


def test_retries_429_with_retry_after_and_500(tmp_path):
    waits = []
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"status": 429, "headers": {"Retry-After": "2"}}, {"body": REAL[IDS[0]]})
    s.add(f"/pith/{IDS[1]}/bundle.json", {"status": 500}, {"status": 503}, {"body": REAL[IDS[1]]})
    with running(s) as url:
        report = pull(IDS[:2], url, tmp_path, load_trust_set(), fetcher=Fetcher(**FAST, sleep=waits.append))
    assert report.count("fetched") == 2
    assert 2.0 in waits  # Retry-After honoured
    assert len(waits) == 3


@pytest.mark.parametrize("value, waited", [
    ("\u00b2", 0.05),  # (a Latin-1 "²", which str.isdigit() takes and float() refuses)
    ("9" * 400, 1.0),  # (its float is infinite)
    ("Fri, 01 Jan 9999 00:00:00 GMT", 1.0), ("Mon, 32 Jan 2020 00:00:00 GMT", 0.05), ("-5", 0.05), ("1e9", 0.05),
])
def test_a_retry_after_of_any_form_is_a_wait_never_a_crash(tmp_path, value, waited):
    """Retry-After is the server's to write: a number of seconds in ASCII digits or an HTTP date is waited for
    (up to the cap), and anything else is the backoff's own wait."""
    waits = []
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"status": 429, "headers": {"Retry-After": value}}, {"body": REAL[IDS[0]]})
    with running(s) as url:
        report = pull(IDS[:1], url, tmp_path, load_trust_set(),
                      fetcher=Fetcher(timeout=1.0, retries=1, backoff=0.05, max_wait=1.0, sleep=waits.append))
    assert [o.status for o in report.outcomes] == ["fetched"] and waits == [waited]
    assert ("capped at 1 s" in report.outcomes[0].detail) == (waited == 1.0)


@pytest.mark.parametrize("seconds_ahead, waited", [(20, (18.0, 20.0)), (-3600, (0.0, 0.0))])
def test_a_retry_after_date_is_waited_for_until_then(tmp_path, seconds_ahead, waited):
    """An HTTP date in Retry-After is a time to wait until (a past one, not at all), not a number of seconds."""
    waits = []
    s = ScriptedServer()
    when = email.utils.formatdate(time.time() + seconds_ahead, usegmt=True)
    s.add(f"/pith/{IDS[0]}/bundle.json", {"status": 429, "headers": {"Retry-After": when}}, {"body": REAL[IDS[0]]})
    with running(s) as url:
        report = pull(IDS[:1], url, tmp_path, load_trust_set(), fetcher=Fetcher(**FAST, sleep=waits.append))
    assert [o.status for o in report.outcomes] == ["fetched"]
    [wait] = waits
    assert waited[0] <= wait <= waited[1], wait


@pytest.mark.parametrize("length", ["\u00b2", "12abc", "-1", ""])
def test_a_content_length_that_is_no_number_is_read_to_the_end(tmp_path, length):
    """Content-Length is the server's to write: one that is not a number of bytes in ASCII digits (a Latin-1
    "²" passed str.isdigit() and stopped pull) is no length, and the body is read to the end, within the limit."""
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]], "length": length})
    with running(s) as url:
        report = pull(IDS[:1], url, tmp_path, load_trust_set(), fetcher=Fetcher(**FAST))
    assert [o.status for o in report.outcomes] == ["fetched"]
    assert (tmp_path / f"{IDS[0]}.json").read_bytes() == REAL[IDS[0]]


def test_many_retries_wait_at_most_the_cap_and_fail_with_one_line(tmp_path):
    """With more retries than the backoff stays under the cap for (0.5 s doubled past 30 s), each wait is capped
    and the bundle fails with its line; the cap is noted only where the server asked for longer."""
    waits = []
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"status": 503})
    s.add(f"/pith/{IDS[1]}/bundle.json", {"status": 429, "headers": {"Retry-After": "3600"}}, {"body": REAL[IDS[1]]})
    with running(s) as url:
        report = pull(IDS[:2], url, tmp_path, load_trust_set(),
                      fetcher=Fetcher(timeout=1.0, retries=8, backoff=0.5, sleep=waits.append))
    outcomes = {o.pith_id: o for o in report.outcomes}
    assert outcomes[IDS[0]].status == "failed" and "HTTP 503 after 9 attempts" in outcomes[IDS[0]].detail
    assert "capped" not in outcomes[IDS[0]].detail  # (the server asked for no wait: the backoff is ours)
    assert outcomes[IDS[1]].status == "fetched" and "Retry-After 3600 s capped at 30 s" in outcomes[IDS[1]].detail
    assert max(waits) == 30.0 and sorted(waits)[:6] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
    # Nine attempts with a wait between each two (eight), and none after the last; one for the 429.
    assert [path for path, _ in s.requests].count(f"/pith/{IDS[0]}/bundle.json") == 9 and len(waits) == 9


def test_a_server_that_cannot_be_reached_is_tried_again_with_a_wait_between_tries_and_none_after():
    port = free_port()
    waits = []
    with pytest.raises(Unreachable, match="refused.* after 3 attempts$"):  # (the caller asks that host no more)
        Fetcher(**{**FAST, "retries": 2}, sleep=waits.append).get(f"http://127.0.0.1:{port}/b", {})
    assert waits == [0.05, 0.1]
    with pytest.raises(OSError, match="refused.* after 1 attempt$"):  # (one, not "1 attempts")
        Fetcher(**{**FAST, "retries": 0}, sleep=waits.append).get(f"http://127.0.0.1:{port}/b", {})


@pytest.mark.parametrize("certificate", ["from an authority not trusted", "for another host"])
def test_a_certificate_that_does_not_verify_fails_at_once_and_is_not_tried_again(tmp_path, monkeypatch,
                                                                                 certificate):
    """A certificate that does not verify is the same on every try: the request fails at once, with no retry and
    no wait, and the host counts as unreachable (the caller asks it no more)."""
    tls = https_certificate(tmp_path, monkeypatch, **(
        {"trusted": False} if certificate.startswith("from") else {"certified_for": "other.example"}))
    s = ScriptedServer()
    s.add("/b", {"body": b"{}"})
    waits = []
    with running(s, tls) as url:
        assert url.startswith("https://")
        with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
            Fetcher(**{**FAST, "retries": 3}, sleep=waits.append).get(f"{url}/b", {})
    assert waits == [] and s.requests == []


def test_a_server_that_answers_every_try_with_an_error_is_no_unreachable_host():
    """An error status, or an answer cut off, is an answer: the host is there, and its next path may be served."""
    s = ScriptedServer()
    s.add("/b", {"status": 503})
    s.add("/cut", {"body": b"x" * 10, "length": 100})
    with running(s) as url:
        for path, said in (("/b", "HTTP 503 after 2 attempts"), ("/cut", "truncated response.* after 2 attempts")):
            with pytest.raises(OSError, match=said) as raised:
                Fetcher(**{**FAST, "retries": 1}, sleep=lambda _: None).get(f"{url}{path}", {})
            assert not isinstance(raised.value, Unreachable), path


@pytest.mark.parametrize("length", [None, ""])  # (stated, or read to the end)
def test_a_body_of_the_byte_limit_is_taken_and_one_byte_more_is_refused(length):
    s = ScriptedServer()
    s.add("/b", {"body": b"x" * 100, **({"length": length} if length is not None else {})})
    with running(s) as url:
        assert Fetcher(**FAST, max_bytes=100).get(f"{url}/b", {}) == (200, b"x" * 100, mock.ANY)
        with pytest.raises(OSError) as caught:
            Fetcher(**FAST, max_bytes=99).get(f"{url}/b", {})
    said = "response of 100 bytes is over the 99-byte limit" if length is None else "response is over the 99-byte limit"
    assert str(caught.value).startswith(said), caught.value


@pytest.mark.slow
def test_slow_truncated_and_persistently_failing(tmp_path):
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]], "sleep": 3})
    s.add(f"/pith/{IDS[1]}/bundle.json", {"body": REAL[IDS[1]][:4000], "length": len(REAL[IDS[1]])})
    s.add(f"/pith/{IDS[2]}/bundle.json", {"status": 500})
    with running(s) as url:
        report = pull(IDS[:3], url, tmp_path, load_trust_set(), fetcher=Fetcher(timeout=0.5, retries=1, backoff=0.01))
    assert {o.pith_id: o.status for o in report.outcomes} == {IDS[0]: "failed", IDS[1]: "failed", IDS[2]: "failed"}
    assert "truncated" in {o.pith_id: o.detail for o in report.outcomes}[IDS[1]]
    assert [p for p in tmp_path.glob("*.json") if not p.name.startswith(".")] == []


class _Misbehaving:
    """A raw TCP server on 127.0.0.1 whose every connection runs *behave(conn)*: it drips, stalls, floods or
    redirects as told, at the byte level (an HTTP server library would not misbehave this way)."""

    def __init__(self, behave):
        import socket
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.behave = behave
        self.stopped = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        try:
            conn.recv(65536)
            self.behave(conn, self)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stopped.set()
        self.sock.close()


def _drip_body(conn, server):
    body = REAL[IDS[0]]
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
    for i in range(len(body)):
        if server.stopped.is_set():
            return
        conn.sendall(body[i:i + 1])
        time.sleep(1)


def _drip_headers(conn, server):
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000:
        if server.stopped.is_set():
            return
        conn.sendall(bytes([byte]))
        time.sleep(0.5)


def _stall(conn, server):
    server.stopped.wait(60)


def _flood(conn, server):
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
    chunk = b"[" * 65536
    while not server.stopped.is_set():
        conn.sendall(chunk)


def _redirect_loop(conn, server):
    conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:%d/pith/loop/bundle.json\r\n"
                 b"Content-Length: 0\r\n\r\n" % server.port)


def _pull_cli(port, tmp_path, *args, timeout=60):
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "site_builder", "pull", "--from", f"http://127.0.0.1:{port}",
                             "--bundles", str(tmp_path / "bundles"), *args], capture_output=True, text=True,
                            timeout=timeout)
    return result, time.monotonic() - started


@pytest.mark.slow  # (each waits for its timeout)
@pytest.mark.parametrize("behave, expect", [(_drip_body, "took over 2 s"), (_drip_headers, "took over 2 s"),
                                            (_stall, "took over 2 s"), (_flood, "byte limit"),
                                            (_redirect_loop, "redirect")])
def test_timeout_bounds_each_whole_request_against_servers_that_misbehave(tmp_path, behave, expect):
    """One byte a second (of the body, or of the headers), a server that never answers, an endless body and a
    redirect loop: each is given up within the timeout (2 s here, with no retry), in one line."""
    server = _Misbehaving(behave)
    try:
        result, took = _pull_cli(server.port, tmp_path, "--timeout", "2", "--retries", "0", IDS[0])
    finally:
        server.close()
    assert result.returncode == 1
    assert took < 12, f"took {took:.1f} s"  # (the process's start, a pith-mirrors.json request, the bundle's)
    failed = [line for line in result.stderr.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and expect in failed[0].lower(), result.stderr
    assert not [p for p in (tmp_path / "bundles").glob("*.json") if not p.name.startswith(".")]


def test_retry_after_is_capped_and_the_output_says_so(tmp_path):
    waited = []
    server = ScriptedServer()
    server.add(f"/pith/{IDS[0]}/bundle.json", {"status": 429, "headers": {"Retry-After": "241"}},
               {"body": REAL[IDS[0]]})
    with running(server) as url:
        fetcher = Fetcher(retries=1, sleep=waited.append)
        report = pull([IDS[0]], url, tmp_path, load_trust_set(), fetcher=fetcher)
    assert waited == [30.0]
    assert report.outcomes[0].status == "fetched" and "Retry-After 241 s capped at 30 s" in report.outcomes[0].detail


def test_a_bundle_that_failed_after_capped_waits_says_they_were_capped(tmp_path):
    """A server that asked for an hour and never answered: the failure line says the wait asked for was not the
    one waited (else the operator reads "503 after 2 attempts" and wonders why the server's hour was ignored)."""
    waited = []
    server = ScriptedServer()
    server.add(f"/pith/{IDS[0]}/bundle.json", {"status": 503, "headers": {"Retry-After": "3600"}})
    with running(server) as url:
        report = pull([IDS[0]], url, tmp_path, load_trust_set(), fetcher=Fetcher(retries=1, sleep=waited.append))
    assert waited == [30.0]
    assert report.outcomes[0].status == "failed"
    assert report.outcomes[0].detail.endswith("HTTP 503 after 2 attempts (Retry-After 3600 s capped at 30 s)")


def test_a_wait_past_the_deadline_fails_at_once_instead_of_sleeping(tmp_path):
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"status": 429, "headers": {"Retry-After": "20"}}, {"body": REAL[IDS[0]]})
    waited = []
    with running(s) as url:
        fetcher = Fetcher(**FAST, sleep=waited.append, deadline=time.monotonic() + 10)
        report = pull([IDS[0]], url, tmp_path / "b", load_trust_set(), fetcher=fetcher)
    assert waited == []
    assert report.outcomes[0].status == "failed" and "deadline" in report.outcomes[0].detail
    assert not (tmp_path / "b" / f"{IDS[0]}.json").exists()


@pytest.mark.parametrize("status", [400, 403, 410])
def test_a_client_error_is_said_by_its_status_without_a_retry(tmp_path, status):
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"status": status})
    with running(s) as url:
        report = pull([IDS[0]], url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST))
    outcome = report.outcomes[0]
    assert outcome.status == "failed" and f"HTTP {status}" in outcome.detail and "redirect" not in outcome.detail
    assert [p for p, _ in s.requests if p.endswith("bundle.json")] == [f"/pith/{IDS[0]}/bundle.json"]


@pytest.mark.slow
def test_a_run_deadline_ends_the_whole_pull(tmp_path):
    server = _Misbehaving(_stall)
    try:
        result, took = _pull_cli(server.port, tmp_path, "--timeout", "30", "--deadline", "3", *IDS)
    finally:
        server.close()
    assert result.returncode == 1 and took < 15, (took, result.stderr)
    assert result.stdout.strip().splitlines()[-1].endswith(f"{len(IDS)} failed")


def test_every_request_names_the_builder_and_its_version(tmp_path):
    """The manifest's request and each bundle's carry the User-Agent README gives, with this version in it."""
    from site_builder import __version__
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]]})
    with running(s) as url:
        report = pull([IDS[0]], url, tmp_path, load_trust_set(), fetcher=Fetcher(**FAST))
    assert report.count("fetched") == 1
    assert [path for path, _ in s.requests] == ["/pith-mirrors.json", f"/pith/{IDS[0]}/bundle.json"]
    assert {headers["User-Agent"] for _, headers in s.requests} == {
        f"site-builder/{__version__} (+https://pith.science mirror)"}
