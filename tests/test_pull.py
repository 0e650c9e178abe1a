"""``site-builder pull`` against a local HTTP server that misbehaves in every way a real one can."""

import contextlib
import http.server
import json
import subprocess
import sys
import threading
import time

import pytest


from site_builder.keys import load_trust_set
from site_builder.pulling import Fetcher, pull

from conftest import REAL_FILES
from signing import to_bytes

REAL = {json.loads(p.read_bytes())["pith_number"].rsplit(":", 1)[1]: p.read_bytes() for p in REAL_FILES}
IDS = sorted(REAL)


class Server:
    """Routes: path -> list of responses consumed in order (the last one repeats)."""

    def __init__(self):
        self.routes: dict[str, list[dict]] = {}
        self.requests: list[tuple[str, dict]] = []

    def add(self, path, *responses):
        self.routes[path] = list(responses)

    def handler(self):
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                server.requests.append((self.path, dict(self.headers)))
                queue = server.routes.get(self.path)
                if not queue:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                r = queue.pop(0) if len(queue) > 1 else queue[0]
                if r.get("sleep"):
                    time.sleep(r["sleep"])
                etag = r.get("etag")
                if etag and self.headers.get("If-None-Match") == etag:
                    self.send_response(304)
                    self.end_headers()
                    return
                body = r.get("body", b"")
                self.send_response(r.get("status", 200))
                for k, v in r.get("headers", {}).items():
                    self.send_header(k, v)
                if etag:
                    self.send_header("ETag", etag)
                self.send_header("Content-Length", str(r.get("length", len(body))))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        return Handler


@contextlib.contextmanager
def running(server: Server):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), server.handler())
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


FAST = dict(timeout=1.0, retries=3, backoff=0.05)


def test_fetches_verifies_and_writes(tmp_path):
    s = Server()
    for pid in IDS:
        s.add(f"/pith/{pid}/bundle.json", {"body": REAL[pid], "etag": f'"{pid[:6]}"'})
    with running(s) as url:
        report = pull([f"pith:2020:{IDS[0]}", *IDS[1:]], url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST))
        assert report.count("fetched") == 4, report.outcomes
        for pid in IDS:
            assert (tmp_path / "b" / f"{pid}.json").read_bytes() == REAL[pid]
        # Second run: conditional requests, nothing downloaded again.
        s.requests.clear()
        report = pull(IDS, url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST))
        assert report.count("unchanged") == 4
        assert all(h.get("If-None-Match") for p, h in s.requests if p.endswith("bundle.json"))
    assert not [p for p in (tmp_path / "b").iterdir() if ".tmp-" in p.name]


def test_tampered_bundle_is_not_written(tmp_path):
    b = json.loads(REAL[IDS[0]])
    b["links"]["resolver"] = "https://evil.example/"
    s = Server()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": to_bytes(b)})
    s.add(f"/pith/{IDS[1]}/bundle.json", {"body": REAL[IDS[2]]})  # a different, valid record
    with running(s) as url:
        report = pull(IDS[:2], url, tmp_path, load_trust_set(), fetcher=Fetcher(**FAST))
    assert [(o.pith_id, o.status) for o in report.outcomes] == [(IDS[0], "rejected"), (IDS[1], "rejected")]
    assert "bundle_hash" in report.outcomes[0].detail and "different" not in report.outcomes[0].detail
    assert not (tmp_path / f"{IDS[0]}.json").exists() and not (tmp_path / f"{IDS[1]}.json").exists()


def test_retries_429_with_retry_after_and_500(tmp_path):
    waits = []
    s = Server()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"status": 429, "headers": {"Retry-After": "2"}}, {"body": REAL[IDS[0]]})
    s.add(f"/pith/{IDS[1]}/bundle.json", {"status": 500}, {"status": 503}, {"body": REAL[IDS[1]]})
    with running(s) as url:
        report = pull(IDS[:2], url, tmp_path, load_trust_set(), fetcher=Fetcher(**FAST, sleep=waits.append))
    assert report.count("fetched") == 2
    assert 2.0 in waits  # Retry-After honoured
    assert len(waits) == 3


@pytest.mark.slow
def test_slow_truncated_and_persistently_failing(tmp_path):
    s = Server()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]], "sleep": 3})
    s.add(f"/pith/{IDS[1]}/bundle.json", {"body": REAL[IDS[1]][:4000], "length": len(REAL[IDS[1]])})
    s.add(f"/pith/{IDS[2]}/bundle.json", {"status": 500})
    with running(s) as url:
        report = pull(IDS[:3], url, tmp_path, load_trust_set(), fetcher=Fetcher(timeout=0.5, retries=1, backoff=0.01))
    assert {o.pith_id: o.status for o in report.outcomes} == {IDS[0]: "failed", IDS[1]: "failed", IDS[2]: "failed"}
    assert "truncated" in {o.pith_id: o.detail for o in report.outcomes}[IDS[1]]
    assert [p for p in tmp_path.glob("*.json") if not p.name.startswith(".")] == []


def test_redirects_and_mirror_manifest_patterns(tmp_path):
    s = Server()
    s.add("/pith-mirrors.json", {"body": json.dumps({"mirrors": [
        {"base_url": "placeholder", "bundle_pattern": "PLACEHOLDER/data/{suffix}.json"}]}).encode()})
    s.add(f"/data/{IDS[0]}.json", {"status": 302, "headers": {"Location": f"/moved/{IDS[0]}.json"}})
    s.add(f"/moved/{IDS[0]}.json", {"body": REAL[IDS[0]]})
    with running(s) as url:
        s.routes["/pith-mirrors.json"][0]["body"] = s.routes["/pith-mirrors.json"][0]["body"].replace(
            b"PLACEHOLDER", url.encode()).replace(b"placeholder", url.encode())
        report = pull([IDS[0]], url, tmp_path, load_trust_set(), fetcher=Fetcher(**FAST))
    assert report.count("fetched") == 1
    assert (tmp_path / f"{IDS[0]}.json").read_bytes() == REAL[IDS[0]]


def test_older_bundle_never_replaces_newer(tmp_path):
    from signing import TestKey, sign_bundle, with_paper
    key = TestKey()
    trust = load_trust_set([key.write(tmp_path / "k.json")])
    base = json.loads(REAL[IDS[0]])
    newer = to_bytes(sign_bundle(dict(with_paper(base, title="New"), built_at="2026-11-01T00:00:00Z"), key))
    older = to_bytes(sign_bundle(dict(with_paper(base, title="Old"), built_at="2026-01-01T00:00:00Z"), key))
    pid = json.loads(newer)["pith_number"].rsplit(":", 1)[1]
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / f"{pid}.json").write_bytes(newer)
    s = Server()
    s.add(f"/pith/{pid}/bundle.json", {"body": older})
    with running(s) as url:
        report = pull([pid], url, tmp_path / "b", trust, fetcher=Fetcher(**FAST))
        assert report.outcomes[0].status == "kept"
        assert (tmp_path / "b" / f"{pid}.json").read_bytes() == newer
        s.add(f"/pith/{pid}/bundle.json", {"body": to_bytes(sign_bundle(
            dict(with_paper(base, title="Newest"), built_at="2026-12-01T00:00:00Z"), key))})
        report = pull([pid], url, tmp_path / "b", trust, fetcher=Fetcher(**FAST))
        assert report.outcomes[0].status == "fetched"
        assert b"Newest" in (tmp_path / "b" / f"{pid}.json").read_bytes()


def test_cli_with_list_file_summary_and_exit_code(tmp_path):
    s = Server()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]]})
    listing = tmp_path / "records.txt"
    listing.write_text(f"# my records\npith:2020:{IDS[0]}\n\n{IDS[1]}  # missing on the server\nnot-an-id\n")
    with running(s) as url:
        r = subprocess.run([sys.executable, "-m", "site_builder", "pull", "--from", url, "--bundles",
                            str(tmp_path / "b"), "--retries", "0", str(listing)], capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stdout.strip() == "1 fetched, 0 unchanged, 0 kept (local copy newer), 0 rejected, 2 failed"
    assert f"FAILED {IDS[1]}" in r.stderr and "FAILED not-an-id" in r.stderr
    assert (tmp_path / "b" / f"{IDS[0]}.json").read_bytes() == REAL[IDS[0]]
