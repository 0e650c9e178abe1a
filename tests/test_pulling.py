"""``site-builder pull``: what it takes as records, the source's manifest, verification before anything is
written, the rollback rule, validators, the bundles folder, and a source or host that gives no answer (the HTTP
client under it: ``test_fetching.py``)."""

import json
import re
import subprocess
import sys
import time

import pytest

from site_builder.cli import main
from site_builder.fetching import Fetcher
from site_builder.keys import TrustSet, key_from_document, load_trust_set
from site_builder.loading import DEFAULT_MAX_BYTES
from site_builder.pulling import STATE_FILE, PullError, bundle_url_pattern, parse_targets, pith_id_of, pull

from conftest import (QUICK_RETRIES, REAL_BY_ID, REAL_FILES, ROOT, ScriptedServer, free_port, https_certificate,
                      record_id, returns_past_fifos, run_unprivileged, running)
from generate import benchmark_key
from signing import TestKey, sign_bundle, to_bytes, with_paper

REAL = REAL_BY_ID
IDS = sorted(REAL)


FAST = QUICK_RETRIES


def test_fetches_verifies_and_writes(tmp_path):
    s = ScriptedServer()
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


@pytest.mark.parametrize("certified_for, trusted", [("localhost", True), ("localhost", False),
                                                    ("mirror.example", True)])
def test_an_https_source_is_fetched_only_with_a_certificate_for_its_name_from_a_trusted_authority(
        tmp_path, monkeypatch, certified_for, trusted):
    """The default source is https: a server is fetched from when a trusted authority certified its name, and
    otherwise refused with the reason, nothing written, and not tried again: the server shows the same
    certificate every time, so the run stops at its manifest (a pull of many records would wait out every
    record's retries)."""
    tls = https_certificate(tmp_path, monkeypatch, certified_for, trusted)
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]]})
    waits = []
    with running(s, tls) as url:
        assert url.startswith("https://localhost:")
        report = pull([IDS[0]], url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST, sleep=waits.append))
    target = tmp_path / "b" / f"{IDS[0]}.json"
    if certified_for == "localhost" and trusted:
        assert [o.status for o in report.outcomes] == ["fetched"], report.outcomes
        assert target.read_bytes() == REAL[IDS[0]]
    else:
        [outcome] = report.outcomes
        why = "unable to get local issuer certificate" if not trusted else "Hostname mismatch"
        assert outcome.status == "failed" and "CERTIFICATE_VERIFY_FAILED" in outcome.detail, outcome
        assert why in outcome.detail and not target.exists()
        assert waits == [] and "attempts" not in outcome.detail
        assert not outcome.tried and report.unreachable.startswith(f"{url}/pith-mirrors.json: ")


def test_a_list_file_as_editors_save_it_and_ids_in_any_letter_case(tmp_path):
    """A list saved with a byte-order mark and Windows line ends, and IDs in lower case (base32 has one case of
    letters), name the records they name; what is no ID is one failed line each."""
    listed = tmp_path / "records.txt"
    listed.write_bytes(f"\ufeffpith:2020:{IDS[0]}\r\n{IDS[1].lower()}  # ours\r\n\r\n# a comment\r\n"
                       f"PITH:2020:{IDS[2]}\r\nnot-an-id\r\n".encode())
    ids, bad = parse_targets([str(listed), IDS[3].lower(), IDS[0], "typed-wrong"])
    assert ids == IDS[:4]
    # (a file's line is named by its number, never echoed; what was typed is said as typed)
    assert [(o.pith_id, o.status) for o in bad] == [(f"{listed}:6", "failed"), ("typed-wrong", "failed")]


@pytest.mark.parametrize("url", [
    "https://pith.science/pith/{id}", "https://pith.science/pith/{id}/", "http://pith.science/pith/{lower}",
    "HTTPS://Mirror.Example/pith/{id}#abstract", "https://u.github.io/mirror/pith/{id}/index.html?ref=feed",
    "https://u.github.io/mirror/pith/{id}/bundle.json", "https://pith.science/pith/{id}/state.json",
    "https://m.example/.well-known/pith/{lower}/bundle.json", "https://m.example/pith/{id}/badge.svg",
])
def test_a_records_url_names_its_id(url):
    """A record's address as a reader copies it from the address bar, or of one of its files, names the record."""
    assert pith_id_of(url.format(id=IDS[0], lower=IDS[0].lower())) == IDS[0]


@pytest.mark.parametrize("text", [
    "https://pith.science/pith/{short}",          # a short address: it names no record by itself
    "https://pith.science/{id}",                  # no record folder
    "https://pith.science/pith/{id}/other.json",  # a file no record folder holds
    "https://pith.science/pith/{id}//", "https://pith.science/pith/{id}/bundle.json/",
    "https://pith.science/papers/?q={id}",        # the ID in the query
    "ftp://pith.science/pith/{id}", "file:///srv/pith/{id}/bundle.json", "pith.science/pith/{id}",
    "https://[::1/pith/{id}", "https://pith.science/pith/{id}x", "pith:20:{id}", "{id}{id}",
])
def test_what_names_no_record_is_none(text):
    assert pith_id_of(text.format(id=IDS[0], short=IDS[0][:8])) is None


def test_an_id_is_taken_as_one_though_a_file_of_that_name_is_in_the_folder(tmp_path, monkeypatch):
    """``pull <ID>`` run where a file happens to have the ID's name (a bundle saved without its .json) names the
    record, not a list to read."""
    monkeypatch.chdir(tmp_path)
    for name in (IDS[0], f"pith:2020:{IDS[1]}"):
        (tmp_path / name).write_text(f"pith:2020:{IDS[2]}\n")
    assert parse_targets([IDS[0], f"pith:2020:{IDS[1]}"]) == (IDS[:2], [])


def test_a_list_file_that_is_not_text_stops_the_pull_naming_it(tmp_path):
    listed = tmp_path / "records.txt"
    listed.write_bytes(b"pith:2020:\xff\xfe not UTF-8\n")
    with pytest.raises(PullError, match=f"^{re.escape(str(listed))}: cannot read list: 'utf-8' codec can't decode"):
        parse_targets([str(listed)])


def test_a_target_too_long_for_a_file_name_is_one_failed_line_not_a_traceback():
    """A target is looked for as a list file first: one longer than a file name may be ("File name too long")
    ended the pull with a traceback."""
    ids, bad = parse_targets(["x" * 5000, IDS[0]])
    assert ids == [IDS[0]] and [(o.pith_id, o.status) for o in bad] == [("x" * 200, "failed")]


def test_a_list_file_in_a_folder_this_user_may_not_search_stops_the_pull_naming_it(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "records.txt").write_text(f"{IDS[0]}\n")
    locked.chmod(0o600)

    def check() -> None:
        with pytest.raises(PullError, match=f"^{re.escape(str(locked / 'records.txt'))}: cannot read list: "
                                            f"Permission denied$"):
            parse_targets([str(locked / "records.txt")])
    try:
        run_unprivileged(check)
    finally:
        locked.chmod(0o700)


def test_tampered_bundle_is_not_written(tmp_path):
    b = json.loads(REAL[IDS[0]])
    b["links"]["resolver"] = "https://evil.example/"
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": to_bytes(b)})
    s.add(f"/pith/{IDS[1]}/bundle.json", {"body": REAL[IDS[2]]})  # a different, valid record
    with running(s) as url:
        report = pull(IDS[:2], url, tmp_path, load_trust_set(), fetcher=Fetcher(**FAST))
    assert [(o.pith_id, o.status) for o in report.outcomes] == [(IDS[0], "rejected"), (IDS[1], "rejected")]
    assert "bundle_hash" in report.outcomes[0].detail and "different" not in report.outcomes[0].detail
    assert not (tmp_path / f"{IDS[0]}.json").exists() and not (tmp_path / f"{IDS[1]}.json").exists()


@pytest.mark.parametrize("concurrency", [1, 2])
def test_no_more_requests_than_the_concurrency_are_in_flight_at_once(tmp_path, concurrency):
    """Politeness to the source: --concurrency bounds the requests it answers at any one time."""
    s = ScriptedServer()
    for pid in IDS:
        s.add(f"/pith/{pid}/bundle.json", {"body": REAL[pid], "sleep": 0.3})
    with running(s) as url:
        report = pull(IDS, url, tmp_path, load_trust_set(), concurrency=concurrency, fetcher=Fetcher(**FAST))
    assert report.count("fetched") == len(IDS) > concurrency
    assert s.most_in_flight == concurrency


def test_a_host_name_that_is_not_found_stops_the_pull_at_once_with_one_reason(tmp_path):
    """Not found is the answer every try would get (a misspelt --from, or no network): the run stops at the
    source's manifest without the backoff's waits (at four retries, 7.5 s a request) and tries no bundle, each
    of which would get the same answer; the reason says what to look at, and every record is counted failed."""
    waits = []
    report = pull(IDS[:2], "http://no-such-host.invalid", tmp_path, load_trust_set(),
                  fetcher=Fetcher(timeout=5, retries=4, sleep=waits.append))
    assert waits == []
    reason = "http://no-such-host.invalid/pith-mirrors.json: host name not found (a misspelt URL, or no network)"
    assert report.unreachable == reason
    assert [(o.pith_id, o.status, o.tried) for o in report.outcomes] == [(i, "failed", False) for i in IDS[:2]]
    assert report.count("failed") == 2 and list(tmp_path.iterdir()) == []


def test_a_source_that_does_not_answer_is_tried_once_for_the_run_not_once_a_bundle(tmp_path):
    """A refused connection is tried again with backoff, as it may be a server restarting; after the last try on
    the manifest, no bundle is tried (four records would have cost four times the waits, to the same end)."""
    waits = []
    report = pull(IDS, f"http://127.0.0.1:{free_port()}", tmp_path, load_trust_set(),
                  fetcher=Fetcher(**FAST, sleep=waits.append))
    assert waits == [0.05, 0.1, 0.2]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/pith-mirrors\.json: URLError: .*refused.* after 4 attempts",
                        report.unreachable), report.unreachable
    assert [(o.status, o.tried) for o in report.outcomes] == [("failed", False)] * 4


def test_a_source_that_answers_its_manifest_with_an_error_still_has_each_bundle_tried(tmp_path):
    """A server error on the manifest is an answer: the source is there, and its bundles may well be served."""
    s = ScriptedServer()
    s.add("/pith-mirrors.json", {"status": 500})
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]]})
    with running(s) as url:
        report = pull(IDS[:1], url, tmp_path, load_trust_set(), fetcher=Fetcher(**FAST, sleep=lambda _: None))
    assert report.unreachable is None
    assert [(o.status, o.tried) for o in report.outcomes] == [("fetched", True)]


def _manifest_naming(pattern: str) -> dict:
    return {"body": json.dumps({"mirrors": [{"base_url": "https://elsewhere.example",
                                             "bundle_pattern": pattern}]}).encode()}


def test_a_bundle_host_that_gives_no_answer_is_tried_for_one_record_not_for_each(tmp_path):
    """The source answers, but its manifest serves the bundles from another host (a CDN) that refuses every
    connection: the first record waits out its tries, and the others fail untried, saying which host and why,
    instead of each waiting out the same tries.  The folder the pull made, holding nothing, is not left behind."""
    s = ScriptedServer()
    cdn = f"http://127.0.0.1:{free_port()}"
    s.add("/pith-mirrors.json", _manifest_naming(cdn + "/b/{suffix}.json"))
    waits = []
    with running(s) as url:
        report = pull(IDS, url, tmp_path / "new" / "bundles", load_trust_set(), concurrency=1,
                      fetcher=Fetcher(**FAST, sleep=waits.append))
    assert waits == [0.05, 0.1, 0.2]  # (one record's tries, not four)
    first, *others = report.outcomes
    assert (first.status, first.tried) == ("failed", True) and first.detail.startswith(f"{cdn}/b/{IDS[0]}.json: ")
    assert report.unreachable is None and [(o.status, o.tried) for o in others] == [("failed", False)] * 3
    assert {o.detail for o in others} == {f"{cdn} gave no answer to {first.detail}"}, others[0].detail
    assert list(tmp_path.iterdir()) == []


def test_a_bundle_host_that_answers_with_an_error_has_each_record_tried(tmp_path):
    """An error status is an answer, as for the manifest: the next record may well be served."""
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"status": 503})
    s.add(f"/pith/{IDS[1]}/bundle.json", {"body": REAL[IDS[1]]})
    with running(s) as url:
        report = pull(IDS[:2], url, tmp_path, load_trust_set(), concurrency=1,
                      fetcher=Fetcher(**FAST, sleep=lambda _: None))
    assert [(o.status, o.tried) for o in report.outcomes] == [("failed", True), ("fetched", True)]


def test_a_pull_that_writes_nothing_leaves_no_folder_it_made_and_no_state_in_one_it_did_not(tmp_path):
    """A pull whose every record failed (a misspelt --bundles, IDs the source does not have) leaves the disk as
    it found it: the folders it made are removed, and a folder that was there is left as it was, without a
    ``.pull-state.json``.  One that fetched something keeps its folder, its bundle and what it remembers."""
    s = ScriptedServer()
    s.add(f"/pith/{IDS[1]}/bundle.json", {"body": REAL[IDS[1]], "etag": '"v1"'})
    (tmp_path / "there").mkdir()
    with running(s) as url:
        missing = pull(IDS[:1], url, tmp_path / "made" / "deeper", load_trust_set(), fetcher=Fetcher(**FAST))
        kept = pull(IDS[:1], url, tmp_path / "there", load_trust_set(), fetcher=Fetcher(**FAST))
        fetched = pull(IDS[1:2], url, tmp_path / "new", load_trust_set(), fetcher=Fetcher(**FAST))
    assert missing.count("failed") == kept.count("failed") == 1 and fetched.count("fetched") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "there"]
    assert list((tmp_path / "there").iterdir()) == []
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == [STATE_FILE, f"{IDS[1]}.json"]
    assert json.loads((tmp_path / "new" / STATE_FILE).read_text())[IDS[1]]["etag"] == '"v1"'


def test_redirects_and_mirror_manifest_patterns(tmp_path):
    s = ScriptedServer()
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


def test_a_mirror_manifest_cannot_point_pull_at_local_files_and_no_redirect_leaves_http(tmp_path):
    """A source's pith-mirrors.json and its redirects are the source's to write: a pattern that is not an http(s)
    URL (here, a folder of this machine holding a valid bundle) is ignored for the resolver's own layout, and a
    redirect to another scheme (ftp, which urllib would follow) is refused, with that said."""
    local = tmp_path / "local"
    local.mkdir()
    (local / f"{IDS[0]}.json").write_bytes(REAL[IDS[0]])
    s = ScriptedServer()
    s.add("/pith-mirrors.json", {"body": json.dumps({"mirrors": [
        {"base_url": "x", "bundle_pattern": local.as_uri() + "/{suffix}.json"}]}).encode()})
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]]})
    s.add(f"/pith/{IDS[1]}/bundle.json", {"status": 302, "headers": {"Location": f"ftp://127.0.0.1:9/{IDS[1]}.json"}})
    with running(s) as url:
        report = pull(IDS[:2], url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST))
    assert [o.status for o in report.outcomes] == ["fetched", "failed"]
    assert any(path == f"/pith/{IDS[0]}/bundle.json" for path, _ in s.requests)  # (fetched from the source)
    assert f"redirect to a non-HTTP URL refused (HTTP 302 to ftp://127.0.0.1:9/{IDS[1]}.json)" in report.outcomes[1].detail


@pytest.mark.parametrize("manifest, why", [
    (b"[" * 100_000, "nesting is deeper than"),
    (b'{"mirrors": 5}', "no list of mirrors in it"),
    (b'{"mirrors": []}', "no list of mirrors in it"),
    (b'{"mirrors": ["https://m.example/"]}', "no list of mirrors in it"),
    (b'{"mirrors": [{"base_url": "x", "bundle_pattern": 5}]}', "its bundle_pattern is not a URL holding {suffix}"),
    (b'{"mirrors": [{"bundle_pattern": "https://m.example/b.json"}]}', "not a URL holding {suffix}"),
    (b'{"mirrors": [{"bundle_pattern": "file:///srv/{suffix}.json"}]}', "its bundle_pattern is not an http(s) URL"),
    (b'{"mirrors": [], "mirrors": [{"bundle_pattern": "https://m.example/{suffix}"}]}', "duplicate key"),
    (b'\xff\xfe{}', "UTF-8"),
])
def test_a_mirror_manifest_that_gives_no_pattern_is_said_and_the_resolver_layout_used(tmp_path, manifest, why):
    """The source's pith-mirrors.json is read as the untrusted input it is (strict JSON, its shape checked):
    one that gives no usable bundle pattern never stops the pull, which fetches from the resolver's layout and
    says why in a note."""
    s = ScriptedServer()
    s.add("/pith-mirrors.json", {"body": manifest})
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]]})
    with running(s) as url:
        report = pull([IDS[0]], url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST))
    assert [o.status for o in report.outcomes] == ["fetched"]
    assert len(report.notes) == 1
    assert report.notes[0].startswith(f"{url}/pith-mirrors.json: ") and why in report.notes[0]
    assert report.notes[0].endswith(f"; fetching from {url}/pith/<ID>/bundle.json")


def test_no_note_where_the_source_has_no_manifest_or_a_usable_one(tmp_path):
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]]})
    with running(s) as url:
        without = pull([IDS[0]], url, tmp_path / "a", load_trust_set(), fetcher=Fetcher(**FAST))
        s.add("/pith-mirrors.json", {"body": json.dumps({"mirrors": [
            {"base_url": "https://elsewhere.example", "bundle_pattern": "https://elsewhere.example/{suffix}"},
            {"base_url": url + "/", "bundle_pattern": url + "/pith/{suffix}/bundle.json"}]}).encode()})
        with_manifest = pull([IDS[0]], url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST))
    assert without.notes == [] == with_manifest.notes
    assert [o.status for o in with_manifest.outcomes] == ["fetched"]  # (its own entry chosen, not the first)


@pytest.mark.parametrize("pattern", ["/data/{suffix}.json", "data/{suffix}.json", "./data/{suffix}.json"])
def test_a_relative_bundle_pattern_is_taken_against_the_manifests_own_url(tmp_path, pattern):
    """A mirror built without a full base URL writes its pattern as a path: it is resolved against the URL the
    manifest was read from, as a browser resolves a link, and used without a note."""
    s = ScriptedServer()
    s.add("/m/pith-mirrors.json", {"body": json.dumps({"mirrors": [{"base_url": "/", "bundle_pattern": pattern}]})
           .encode()})
    prefix = "" if pattern.startswith("/") else "/m"
    s.add(f"{prefix}/data/{IDS[0]}.json", {"body": REAL[IDS[0]]})
    with running(s) as url:
        report = pull([IDS[0]], url + "/m/", tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST))
    assert [o.status for o in report.outcomes] == ["fetched"] and report.notes == []
    assert [path for path, _ in s.requests] == ["/m/pith-mirrors.json", f"{prefix}/data/{IDS[0]}.json"]


def test_a_site_this_builder_made_without_a_full_base_url_is_pulled_from_without_a_note(tmp_path):
    """The pith-mirrors.json of a site built with the default ``--base-url /``, served as it is, with the
    site's files."""
    site = tmp_path / "site"
    assert main(["build", "--bundles", str(REAL_FILES[0].parent), "--output", str(site), "--no-search", "--no-cache",
                 "--quiet"]) == 0
    s = ScriptedServer()
    for path in [site / "pith-mirrors.json", *site.glob("pith/*/bundle.json")]:
        s.add("/" + path.relative_to(site).as_posix(), {"body": path.read_bytes()})
    with running(s) as url:
        report = pull(IDS, url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST))
    assert [o.status for o in report.outcomes] == ["fetched"] * 4 and report.notes == []


def test_into_a_copy_of_a_mirror_a_record_goes_where_its_build_reads_it(tmp_path):
    """A copy of a mirror given as the bundles folder is read by the build as its records' ``pith/<ID>/
    bundle.json`` alone: a record pulled into it goes there (an ``<ID>.json`` at its top would never be built),
    one it holds is compared where it is, and a link at a record's folder is never written through."""
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    for pid in IDS[:2]:
        (bundles / f"{pid}.json").write_bytes(REAL[pid])
    copy = tmp_path / "copy"
    assert main(["build", "--bundles", str(bundles), "--output", str(copy), "--no-search", "--no-cache",
                 "--quiet"]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "bundle.json").write_bytes(REAL[IDS[3]])  # (what the link leads to is no copy of the mirror's)
    (copy / "pith" / IDS[3]).symlink_to(elsewhere)
    s = ScriptedServer()
    for pid in IDS:
        s.add(f"/pith/{pid}/bundle.json", {"body": REAL[pid]})
    with running(s) as url:
        report = pull(IDS, url, copy, load_trust_set(), fetcher=Fetcher(**FAST))
    assert [(o.status, o.detail) for o in report.outcomes] == [
        ("unchanged", "same bytes"), ("unchanged", "same bytes"),
        ("fetched", json.loads(REAL[IDS[2]])["pith_number"]),
        ("failed", f"{copy / 'pith' / IDS[3]}: is not a folder (a link is never written through)")]
    assert (copy / "pith" / IDS[2] / "bundle.json").read_bytes() == REAL[IDS[2]]
    assert not list(copy.glob("*.json.tmp-*")) and not (copy / f"{IDS[2]}.json").exists()
    assert [p.read_bytes() for p in elsewhere.iterdir()] == [REAL[IDS[3]]]
    (copy / "pith" / IDS[3]).unlink()
    lines = _build_lines(copy, ROOT / "site_builder" / "data" / "pith-signing-key.json")
    assert lines[0].startswith("3 bundles read, 3 published, 0 rejected"), lines


def test_a_link_made_at_a_records_folder_in_a_copy_of_a_mirror_while_its_bundle_is_fetched_is_not_written_through(
        tmp_path):
    """The record's folder is looked at before the request and again once it is made, after the answer: a link
    put there in between (the folder is anyone's who can write the copy) is not written through either."""
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    (bundles / f"{IDS[0]}.json").write_bytes(REAL[IDS[0]])
    copy, elsewhere = tmp_path / "copy", tmp_path / "elsewhere"
    assert main(["build", "--bundles", str(bundles), "--output", str(copy), "--no-search", "--no-cache",
                 "--quiet"]) == 0
    elsewhere.mkdir()

    class LinkingOnTheWay(Fetcher):
        def get(self, url, *args, **kwargs):
            answer = super().get(url, *args, **kwargs)
            if url.endswith("/bundle.json"):
                (copy / "pith" / IDS[1]).symlink_to(elsewhere)
            return answer

    s = ScriptedServer()
    s.add(f"/pith/{IDS[1]}/bundle.json", {"body": REAL[IDS[1]]})
    with running(s) as url:
        report = pull([IDS[1]], url, copy, load_trust_set(), fetcher=LinkingOnTheWay(**FAST))
    assert [(o.status, o.detail) for o in report.outcomes] == [
        ("failed", f"{copy / 'pith' / IDS[1]}: is not a folder (a link is never written through)")]
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("source", ["https://me:secret@mirror.example", "https://secret@mirror.example/"])
def test_a_source_with_a_user_name_or_password_is_refused_without_printing_them(tmp_path, source):
    """Every failure line names the URL it fetched, and urllib sends no password written in one: such a --from
    is one error line that leaves the secret out (a CI log is often public)."""
    with pytest.raises(PullError) as caught:
        pull([IDS[0]], source, tmp_path / "b", load_trust_set(), fetcher=Fetcher(retries=0))
    assert str(caught.value) == ("--from https://…@mirror.example: must not hold a user name or password (each "
                                 "failure line names the URL, and no request would send them)")
    assert not (tmp_path / "b").exists()


def test_a_bundles_folder_that_is_a_file_or_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("not a folder")
    with pytest.raises(PullError, match="afile: --bundles names a file, not a folder"):
        pull([IDS[0]], "http://127.0.0.1:9", tmp_path / "afile", load_trust_set(), fetcher=Fetcher(retries=0))
    with pytest.raises(PullError, match="afile/sub: cannot make the bundles folder: Not a directory"):
        pull([IDS[0]], "http://127.0.0.1:9", tmp_path / "afile" / "sub", load_trust_set(), fetcher=Fetcher(retries=0))
    assert (tmp_path / "afile").read_text() == "not a folder"


def test_a_pull_whose_validators_cannot_be_kept_still_keeps_its_bundles_and_says_so(tmp_path):
    """The file of validators (for conditional requests next time) cannot be written, here because a folder
    stands at its name: the fetched bundles stay, and a note says the next pull downloads every bundle again."""
    (tmp_path / "b" / STATE_FILE).mkdir(parents=True)
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]]})
    with running(s) as url:
        report = pull([IDS[0]], url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST))
    assert [o.status for o in report.outcomes] == ["fetched"]
    assert (tmp_path / "b" / f"{IDS[0]}.json").read_bytes() == REAL[IDS[0]]
    assert [n.split(": ", 1)[1] for n in report.notes] == [
        "cannot remember what was fetched (Is a directory); the next pull downloads each bundle again"]
    assert not [p.name for p in (tmp_path / "b").iterdir() if ".tmp-" in p.name]  # (its temporary file removed)


def pull_one(tmp_path, trust, local: bytes, served: bytes):
    """Pull the record of *local*, which the bundles folder holds, from a server serving *served* for it: the
    report, and the bundle file."""
    pid = record_id(local)
    folder = tmp_path / "b"
    folder.mkdir(exist_ok=True)
    (folder / f"{pid}.json").write_bytes(local)
    s = ScriptedServer()
    s.add(f"/pith/{pid}/bundle.json", {"body": served})
    with running(s) as url:
        return pull([pid], url, folder, trust, fetcher=Fetcher(**FAST)), folder / f"{pid}.json"


def test_older_bundle_never_replaces_newer(tmp_path):
    key = TestKey()
    trust = load_trust_set([key.write(tmp_path / "k.json")])
    base = json.loads(REAL[IDS[0]])
    newer = to_bytes(sign_bundle(dict(with_paper(base, title="New"), built_at="2026-11-01T00:00:00Z"), key))
    older = to_bytes(sign_bundle(dict(with_paper(base, title="Old"), built_at="2026-01-01T00:00:00Z"), key))
    newest = to_bytes(sign_bundle(dict(with_paper(base, title="Newest"), built_at="2026-12-01T00:00:00Z"), key))
    report, path = pull_one(tmp_path, trust, newer, older)
    assert report.outcomes[0].status == "kept" and path.read_bytes() == newer
    report, path = pull_one(tmp_path, trust, newer, newest)
    assert report.outcomes[0].status == "fetched" and path.read_bytes() == newest


def test_a_bundle_with_fewer_events_never_replaces_one_with_more_even_if_built_later(tmp_path):
    """pull's rule is the build's rollback rule: a served bundle that is older or has fewer events than the local
    one is no newer (events are only ever added), so the local one stays, and the line says both."""
    from conftest import signed_version
    key = TestKey()
    trust = load_trust_set([key.write(tmp_path / "k.json")])
    base = json.loads(REAL[IDS[0]])
    more = signed_version(base, key, "More events", "2026-09-01T00:00:00Z", extra_events=2)
    report, path = pull_one(tmp_path, trust, more, signed_version(base, key, "Fewer", "2026-10-01T00:00:00Z"))
    assert [o.status for o in report.outcomes] == ["kept"] and path.read_bytes() == more
    assert report.outcomes[0].detail == ("the local bundle (built_at 2026-09-01T00:00:00Z, 4 events) is newer than "
                                         "the served one (built_at 2026-10-01T00:00:00Z, 2 events)")


def test_an_equally_new_bundle_in_other_bytes_is_taken_from_the_source(tmp_path):
    """The same bundle written out another way (indented here, compact on the server): neither is newer, and the
    source's bytes are written, so that the mirror serves what its source serves, byte for byte."""
    local = json.dumps(json.loads(REAL[IDS[0]]), indent=2).encode()
    report, path = pull_one(tmp_path, load_trust_set(), local, REAL[IDS[0]])
    assert [o.status for o in report.outcomes] == ["fetched"]
    assert path.read_bytes() == REAL[IDS[0]] != local


def _versions(tmp_path):
    """A test key's trust set, the key, and three versions of the first real record signed with it, oldest
    first."""
    key = TestKey()
    base = json.loads(REAL[IDS[0]])
    return load_trust_set([key.write(tmp_path / "k.json")]), key, [
        to_bytes(sign_bundle(dict(with_paper(base, title=title), built_at=f"2026-{month}-01T00:00:00Z"), key))
        for title, month in (("Old", "01"), ("New", "06"), ("Newest", "11"))]


def _pulled_into(folder, trust, served: bytes):
    """The record of *served* pulled into *folder* from a server serving *served*: the one outcome."""
    s = ScriptedServer()
    s.add(f"/pith/{record_id(served)}/bundle.json", {"body": served})
    with running(s) as url:
        [outcome] = pull([record_id(served)], url, folder, trust, fetcher=Fetcher(**FAST)).outcomes
    return outcome


def _build_lines(folder, trust_file) -> list[str]:
    built = subprocess.run([sys.executable, "-m", "site_builder", "build", "--bundles", folder, "--output",
                            folder.parent / "site", "--no-search", "--no-cache", "--trusted-keys", trust_file],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    return built.stdout.splitlines() + built.stderr.splitlines()


def test_a_record_kept_under_a_name_of_the_users_is_updated_there_not_copied_beside_it(tmp_path):
    """A bundles folder that keeps a record as ``2020/attention.json``: pull compares the served bundle with that
    file and replaces it there (a copy under the record's ID beside it would be a second file of one record,
    which every build reports as superseded); an older served one leaves it; the same bytes are unchanged."""
    trust, _, (old, new, newest) = _versions(tmp_path)
    folder = tmp_path / "b"
    (folder / "2020").mkdir(parents=True)
    mine = folder / "2020" / "attention.json"
    mine.write_bytes(new)
    assert (o := _pulled_into(folder, trust, old)).status == "kept" and mine.read_bytes() == new
    assert o.detail.startswith("the local bundle (in 2020/attention.json) (built_at 2026-06-01T00:00:00Z, ")
    assert (o := _pulled_into(folder, trust, newest)).status == "fetched" and mine.read_bytes() == newest
    assert o.detail == f"{json.loads(newest)['pith_number']} (in 2020/attention.json)"
    assert (o := _pulled_into(folder, trust, newest)).status == "unchanged"
    assert o.detail == "same bytes (in 2020/attention.json)"
    assert sorted(p.name for p in folder.rglob("*.json")) == [STATE_FILE, "attention.json"]
    lines = _build_lines(folder, tmp_path / "k.json")
    assert lines[0].startswith("1 bundles read, 1 published, 0 rejected, 0 superseded"), lines


def test_of_several_files_of_one_record_the_newest_is_compared_and_replaced(tmp_path):
    """The copy a build publishes (the newest) is the one pull compares with and replaces; a file that only names
    the record and does not verify as it is no copy of it (a bundle of another record, signed, naming the record
    as a ``pith_number`` in its text before its own; one tampered with) and is left as it is."""
    trust, key, (old, new, newest) = _versions(tmp_path)
    folder = tmp_path / "b"
    folder.mkdir()
    other = to_bytes(sign_bundle({"note": {"pith_number": f"pith:2020:{IDS[0]}"}, **json.loads(REAL[IDS[1]])}, key))
    assert re.search(rb'"pith_number":"pith:2020:([A-Z2-7]{26})"', other).group(1).decode() == IDS[0]
    files = {"a-old.json": old, "b-new.json": new, "c-tampered.json": new.replace(b'"New"', b'"Forged"'),
             "d-other.json": other}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    assert _pulled_into(folder, trust, newest).status == "fetched"
    assert {p.name: p.read_bytes() for p in folder.glob("[!.]*.json")} == {**files, "b-new.json": newest}

    for name in ("a-old.json", "b-new.json"):  # (the two that verify gone: nothing is a copy of the record)
        (folder / name).unlink()
    assert _pulled_into(folder, trust, newest).detail == json.loads(newest)["pith_number"]
    assert (folder / f"{IDS[0]}.json").read_bytes() == newest


@pytest.mark.slow  # (a second or more: left to the full suite)
def test_cli_with_list_file_summary_and_exit_code(tmp_path):
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]]})
    s.add("/pith-mirrors.json", {"body": b'{"mirrors": 5}'})
    listing = tmp_path / "records.txt"
    listing.write_text(f"# my records\nhttps://pith.science/pith/{IDS[0]}\n\n{IDS[1]}  # missing on the server\n"
                       f"not-an-id\n")
    with running(s) as url:
        r, quiet = (subprocess.run([sys.executable, "-m", "site_builder", "pull", "--from", url, "--bundles",
                                    str(tmp_path / folder), "--retries", "0", str(listing), *flags],
                                   capture_output=True, text=True) for folder, flags in (("b", []), ("q", ["-q"])))
    assert r.returncode == 1
    assert r.stdout.strip() == "1 fetched, 0 unchanged, 0 kept (local copy newer), 0 rejected, 2 failed"
    assert f"FAILED {IDS[1]}: {url}/pith/{IDS[1]}/bundle.json: not found" in r.stderr.splitlines()
    assert f"FAILED {listing}:5: not a pith number" in r.stderr
    assert f"note: {url}/pith-mirrors.json: no list of mirrors in it; fetching from {url}/pith/<ID>/bundle.json" \
        in r.stderr.splitlines()
    assert [line for line in r.stderr.splitlines() if line.startswith(f"FETCHED {IDS[0]}: ")]
    assert (tmp_path / "b" / f"{IDS[0]}.json").read_bytes() == REAL[IDS[0]]
    # --quiet: the failures and the summary line only
    assert quiet.returncode == 1 and quiet.stdout == r.stdout
    assert sorted(quiet.stderr.splitlines()) == sorted(line for line in r.stderr.splitlines()
                                                       if line.startswith("FAILED "))


def test_cli_says_of_one_record_not_tried_that_it_is_one(tmp_path, capsys):
    source = f"http://127.0.0.1:{free_port()}"  # (nothing listens: the connection is refused)
    assert main(["pull", "--from", source, "--retries", "0", "--bundles", str(tmp_path / "b"), IDS[0]]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"FAILED 1 record, none tried: {source}/pith-mirrors.json: "), line


@pytest.mark.slow  # (a process started)
def test_cli_says_once_that_the_source_gave_no_answer(tmp_path):
    """Not one line per record, all the same: one saying how many records were not tried and why, then the
    summary, and exit 1."""
    listing = tmp_path / "records.txt"
    listing.write_text("".join(f"{i}\n" for i in IDS) + "not-an-id\n")
    r = subprocess.run([sys.executable, "-m", "site_builder", "pull", "--from", "https://no-such-host.invalid",
                        "--bundles", str(tmp_path / "b"), str(listing)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stdout == "0 fetched, 0 unchanged, 0 kept (local copy newer), 0 rejected, 5 failed\n"
    assert sorted(r.stderr.splitlines()) == sorted([
        "FAILED 4 records, none tried: https://no-such-host.invalid/pith-mirrors.json: host name not found (a "
        "misspelt URL, or no network)",
        f"FAILED {listing}:5: not a pith number, 26-character ID, record URL or list file"])


def test_cli_says_once_which_bundle_host_gave_no_answer(tmp_path, capsys):
    """The records that were not tried are one line with their count and the reason, after the line of the one
    record that was tried; the exit code is 1."""
    s = ScriptedServer()
    cdn = f"http://127.0.0.1:{free_port()}"
    s.add("/pith-mirrors.json", _manifest_naming(cdn + "/b/{suffix}.json"))
    with running(s) as url:
        code = main(["pull", "--from", url, "--bundles", str(tmp_path / "b"), "--retries", "0", "--concurrency", "1",
                     *IDS])
    out, err = capsys.readouterr()
    assert code == 1 and out == "0 fetched, 0 unchanged, 0 kept (local copy newer), 0 rejected, 4 failed\n"
    tried, untried = err.splitlines()
    assert tried.startswith(f"FAILED {IDS[0]}: {cdn}/b/{IDS[0]}.json: URLError: "), err
    assert untried == f"FAILED 3 records, not tried: {cdn} gave no answer to {tried.removeprefix(f'FAILED {IDS[0]}: ')}"


def test_a_304_to_an_unconditional_request_is_an_error(tmp_path):
    server = ScriptedServer()
    server.add(f"/pith/{IDS[0]}/bundle.json", {"status": 304})
    with running(server) as url:
        report = pull([IDS[0]], url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(retries=0))
    assert report.outcomes[0].status == "failed" and "named no version" in report.outcomes[0].detail


@pytest.mark.slow  # (a second or more: left to the full suite)
def test_something_other_than_a_file_at_the_target_is_one_line(tmp_path):
    bundles = tmp_path / "bundles"
    (bundles / f"{IDS[0]}.json").mkdir(parents=True)
    server = ScriptedServer()
    server.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]]})
    with running(server) as url:
        result = subprocess.run([sys.executable, "-m", "site_builder", "pull", "--from", url, "--bundles",
                                 str(bundles), IDS[0]], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert any(line.startswith(f"FAILED {IDS[0]}:") and "is not a file" in line for line in result.stderr.splitlines())
    assert (bundles / f"{IDS[0]}.json").is_dir()


def test_a_link_at_the_target_is_never_replaced_nor_written_through(tmp_path):
    """A bundles folder may hold links (to an archive kept elsewhere, say): pull leaves a link where it is, and
    the file it leads to as it was, and says why for that record."""
    bundles, elsewhere = tmp_path / "bundles", tmp_path / "elsewhere.json"
    bundles.mkdir()
    elsewhere.write_bytes(b"kept")
    (bundles / f"{IDS[0]}.json").symlink_to(elsewhere)
    server = ScriptedServer()
    server.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]]})
    with running(server) as url:
        report = pull([IDS[0]], url, bundles, load_trust_set(), fetcher=Fetcher(retries=0))
    outcome = report.outcomes[0]
    assert outcome.status == "failed" and "is not a file" in outcome.detail, outcome
    assert (bundles / f"{IDS[0]}.json").readlink() == elsewhere and elsewhere.read_bytes() == b"kept"


def _pulled_as_a_user(bundles, mode: int, outcomes: list[tuple[str, str]]) -> list[str]:
    """The first two records pulled into *bundles*, its mode made *mode*, by a user who cannot override file
    modes: their outcomes asserted to be *outcomes*; the paths the server was asked for."""
    server = ScriptedServer()
    for pid in IDS[:2]:
        server.add(f"/pith/{pid}/bundle.json", {"body": REAL[pid]})

    def pull_unprivileged():
        bundles.chmod(mode)
        report = pull(IDS[:2], url, bundles, load_trust_set(), fetcher=Fetcher(retries=0))
        assert [(o.status, o.detail) for o in report.outcomes] == outcomes

    with running(server) as url:
        try:
            run_unprivileged(pull_unprivileged)
        finally:
            bundles.chmod(0o755)
    return [path for path, _ in server.requests]


def test_a_bundles_folder_that_cannot_be_searched_fails_each_record_with_why_and_asks_for_none(tmp_path):
    """A bundles folder whose files cannot be looked at (no search permission): whether a newer bundle is there
    cannot be told, so none is fetched, and each record fails with why, the pull going on to its end."""
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    asked = _pulled_as_a_user(bundles, 0o600, [("failed", f"{bundles / pid}.json: cannot read: Permission denied")
                                               for pid in IDS[:2]])
    assert not [path for path in asked if path.endswith("bundle.json")]


def test_a_bundle_that_cannot_be_written_is_that_records_failure_with_why_not_a_traceback(tmp_path):
    """A bundles folder this user may read but not write to (or a full disk): the verified bundle that cannot be
    written is one failed line naming the file and why, and the pull goes on to its end (the record already
    there in the served bytes is unchanged), where it stopped with a traceback."""
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    (bundles / f"{IDS[1]}.json").write_bytes(REAL[IDS[1]])
    _pulled_as_a_user(bundles, 0o555, [("failed", f"{bundles / IDS[0]}.json: cannot write: Permission denied"),
                                       ("unchanged", "same bytes")])
    assert sorted(p.name for p in bundles.iterdir()) == [f"{IDS[1]}.json"]


def test_a_bundle_is_written_through_a_file_of_its_own_not_a_link_found_at_the_temporary_name(tmp_path):
    """The bundles folder is untrusted: a link planted at the temporary name must not be written through."""
    import os
    import threading
    from site_builder import pulling
    outside = tmp_path / "outside.txt"
    outside.write_text("not the bundles'")
    target = tmp_path / f"{IDS[0]}.json"
    (tmp_path / f".{target.name}.tmp-{os.getpid()}-{threading.get_ident()}").symlink_to(outside)
    pulling._write_atomically(target, REAL[IDS[0]])
    assert outside.read_text() == "not the bundles'"
    assert target.read_bytes() == REAL[IDS[0]] and not target.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name, outside.name])


def test_a_tampered_pull_state_is_ignored_not_sent_or_waited_on(tmp_path):
    """``.pull-state.json`` is the builder's own earlier output, so untrusted input: entries of the wrong shape, a
    validator that would split the request's headers, a FIFO or a link in its place are ignored (each bundle is
    fetched in full and found unchanged), and never stop the run."""
    import os

    s = ScriptedServer()
    for pid in IDS:
        s.add(f"/pith/{pid}/bundle.json", {"body": REAL[pid], "etag": f'"{pid[:6]}"'})
    bundles = tmp_path / "b"
    state = bundles / ".pull-state.json"
    with running(s) as url:
        assert pull(IDS, url, bundles, load_trust_set(), fetcher=Fetcher(**FAST)).count("fetched") == 4
        good = json.loads(state.read_text())
        tampered = {IDS[0]: "not an entry", IDS[1]: [1, 2],
                    IDS[2]: {**good[IDS[2]], "etag": f'"{IDS[2][:6]}"\r\nX-Injected: 1'},
                    IDS[3]: {**good[IDS[3]], "etag": 5, "last_modified": ["Mon"]}}
        plants = [lambda: state.write_text(json.dumps(tampered)),
                  lambda: state.write_text('{"a": 1, "a": 2}'),  # (not strict JSON: a key twice)
                  lambda: state.write_text(json.dumps([good])),  # (strict JSON, but no object)
                  lambda: os.mkfifo(state),
                  lambda: state.symlink_to(tmp_path / "elsewhere.json")]
        (tmp_path / "elsewhere.json").write_text(json.dumps(good))
        for plant in plants:
            state.unlink()
            plant()
            s.requests.clear()
            done = returns_past_fifos(lambda: pull(IDS, url, bundles, load_trust_set(), fetcher=Fetcher(**FAST)),
                                      [state])
            assert done, "the pull stopped on its state file"
            assert done[0].count("unchanged") == 4, done[0].outcomes
            sent = [h for p, h in s.requests if p.endswith("bundle.json")]
            assert len(sent) == 4 and not any("If-None-Match" in h or "X-Injected" in h for h in sent)
            assert state.is_file() and not state.is_symlink()  # (written anew, as a file of its own)


def test_a_mirror_manifest_of_up_to_one_megabyte_is_read_and_a_larger_one_is_not():
    """pith-mirrors.json is the source's to write: read up to 1 MB, and past that the resolver's layout is used,
    with a note saying why (as for any manifest that gives no usable pattern)."""
    s = ScriptedServer()
    with running(s) as url:
        doc = json.dumps({"mirrors": [{"base_url": url, "bundle_pattern": url + "/b/{suffix}.json"}]}).encode()
        s.add("/pith-mirrors.json", {"body": doc + b" " * ((1 << 20) - len(doc))})
        assert bundle_url_pattern(url, Fetcher(**FAST)) == (url + "/b/{suffix}.json", None)
        s.add("/pith-mirrors.json", {"body": doc + b" " * ((1 << 20) + 1 - len(doc))})
        assert bundle_url_pattern(url, Fetcher(**FAST)) == (
            url + "/pith/{suffix}/bundle.json", f"{url}/pith-mirrors.json: response of 1048577 bytes is over the "
                                                f"1048576-byte limit; fetching from {url}/pith/<ID>/bundle.json")


def test_a_kept_validator_is_sent_only_for_the_local_copy_it_was_kept_for(tmp_path):
    """A local bundle replaced since the last pull (here by the same record written out again, indented) is not
    the one the kept ETag names: the request names no version, and the served bundle is fetched in full and
    written, so the folder holds its source's bytes (a 304 would have kept the other file as "unchanged")."""
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]], "etag": '"v1"'})
    bundles = tmp_path / "b"
    with running(s) as url:
        pull(IDS[:1], url, bundles, load_trust_set(), fetcher=Fetcher(**FAST))
        local = bundles / f"{IDS[0]}.json"
        local.write_bytes(json.dumps(json.loads(REAL[IDS[0]]), indent=2).encode())
        s.requests.clear()
        report = pull(IDS[:1], url, bundles, load_trust_set(), fetcher=Fetcher(**FAST))
    [headers] = [h for path, h in s.requests if path.endswith("bundle.json")]
    assert "If-None-Match" not in headers and "If-Modified-Since" not in headers
    assert report.count("fetched") == 1 and local.read_bytes() == REAL[IDS[0]]


def test_a_kept_validator_vouches_for_nothing_once_the_local_copy_no_longer_verifies(tmp_path):
    """The pinned keys changed since the last pull, and the local copy's key is not among them: the request
    names no version, and the served bundle is judged under the keys pinned now (a 304 would have reported the
    copy no pinned key vouches for as "unchanged")."""
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]], "etag": '"v1"'})
    bundles = tmp_path / "b"
    with running(s) as url:
        pull(IDS[:1], url, bundles, load_trust_set(), fetcher=Fetcher(**FAST))
        s.requests.clear()
        report = pull(IDS[:1], url, bundles, TrustSet((key_from_document(benchmark_key().document()),)),
                      fetcher=Fetcher(**FAST))
    [headers] = [h for path, h in s.requests if path.endswith("bundle.json")]
    assert "If-None-Match" not in headers and "If-Modified-Since" not in headers
    assert [o.status for o in report.outcomes] == ["rejected"]


def test_a_local_copy_already_in_the_served_bytes_is_asked_for_conditionally_next_time(tmp_path):
    """Bundles copied in from elsewhere, then pulled: the served bytes are the same, nothing is written, and the
    validators are kept all the same, so the next pull does not download the bundle again."""
    bundles = tmp_path / "b"
    bundles.mkdir()
    (bundles / f"{IDS[0]}.json").write_bytes(REAL[IDS[0]])
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]], "etag": '"v1"'})
    with running(s) as url:
        first = pull(IDS[:1], url, bundles, load_trust_set(), fetcher=Fetcher(**FAST))
        s.requests.clear()
        second = pull(IDS[:1], url, bundles, load_trust_set(), fetcher=Fetcher(**FAST))
    assert [(o.status, o.detail) for o in first.outcomes] == [("unchanged", "same bytes")]
    assert [(o.status, o.detail) for o in second.outcomes] == [("unchanged", "not modified")]
    [headers] = [h for path, h in s.requests if path.endswith("bundle.json")]
    assert headers.get("If-None-Match") == '"v1"'


@pytest.mark.parametrize("served_newer", [False, True])
def test_a_bundle_of_another_record_under_the_records_name_is_neither_replaced_nor_compared(tmp_path,
                                                                                             served_newer):
    """A verified bundle saved under another record's file name is a record the build publishes: the bundle
    fetched for that name never replaces it (served_newer: it was overwritten), nor is it taken as an older copy
    of the record asked for (it was "kept", the line comparing two records); it is one failure naming both."""
    built = {pid: json.loads(REAL[pid])["built_at"] for pid in IDS}
    asked, other = sorted(IDS[:2], key=built.get, reverse=served_newer)  # (the served one newer, or older)
    assert (built[asked] > built[other]) == served_newer
    bundles = tmp_path / "b"
    bundles.mkdir()
    target = bundles / f"{asked}.json"
    target.write_bytes(REAL[other])
    s = ScriptedServer()
    s.add(f"/pith/{asked}/bundle.json", {"body": REAL[asked]})
    with running(s) as url:
        report = pull([asked], url, bundles, load_trust_set(), fetcher=Fetcher(**FAST))
    assert [(o.status, o.detail) for o in report.outcomes] == [("failed", (
        f"{target}: holds the bundle of another record ({json.loads(REAL[other])['pith_number']}); not replaced "
        f"(rename it to {other}.json)"))]
    assert target.read_bytes() == REAL[other]
    assert not [path for path, _ in s.requests if path.endswith("bundle.json")]  # (nothing asked for in vain)


@pytest.mark.parametrize("local", ["too large", "not a bundle"])
def test_a_local_file_that_is_no_readable_bundle_is_replaced_by_the_verified_one(tmp_path, local):
    """What stands at a record's file name and is no bundle the build could read (over the byte limit, or not
    one) is nothing to keep: the verified bundle from the source takes its place."""
    bundles = tmp_path / "b"
    bundles.mkdir()
    target = bundles / f"{IDS[0]}.json"
    if local == "too large":
        with open(target, "wb") as f:
            f.truncate(DEFAULT_MAX_BYTES + 1)  # (sparse: no disk spent)
    else:
        target.write_bytes(b"<html>a captive portal's page</html>")
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]]})
    with running(s) as url:
        report = pull(IDS[:1], url, bundles, load_trust_set(), fetcher=Fetcher(**FAST))
    assert [o.status for o in report.outcomes] == ["fetched"], report.outcomes
    assert target.read_bytes() == REAL[IDS[0]]


@pytest.mark.parametrize("source", ["ftp://mirror.example/", "file:///srv/mirror", "/srv/mirror"])
def test_a_source_that_is_no_http_url_is_refused_before_anything_is_made(tmp_path, source):
    with pytest.raises(PullError, match="--from must be an http\\(s\\) URL$"):
        pull(IDS[:1], source, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST))
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("source, why", [("https://[::1/", "invalid IPv6 URL"),
                                         ("https://mirror.example:99999/", "port out of range 0-65535"),
                                         ("https://mirror..example/", "host 'mirror..example' is not a host name")])
def test_a_source_urllib_cannot_use_is_one_error_line_before_anything_is_made(tmp_path, source, why):
    """urllib raises ValueError, not OSError, for these: they were a traceback."""
    with pytest.raises(PullError, match=re.escape(f"{source}: --from is no usable URL ({why})") + "$"):
        pull(IDS[:1], source, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST))
    assert not (tmp_path / "b").exists()


def test_a_source_pointing_pull_at_a_url_urllib_cannot_use_is_that_bundle_failing(tmp_path):
    """What a source sends is its to write: a redirect to a URL urllib cannot parse, or a manifest's pattern
    that makes one, is a failed bundle or a note, never the command's traceback (urllib raises ValueError or
    UnicodeError for them, not OSError)."""
    s = ScriptedServer()
    s.add("/pith-mirrors.json", {"body": json.dumps({"mirrors": [
        {"base_url": "x", "bundle_pattern": "https://[mirror/{suffix}.json"}]}).encode()})
    s.add(f"/pith/{IDS[0]}/bundle.json", {"status": 302, "headers": {"Location": "http://mirror..example/b.json"}})
    s.add(f"/pith/{IDS[1]}/bundle.json", {"status": 301, "headers": {"Location": "http://[::1/b.json"}})
    s.add(f"/pith/{IDS[2]}/bundle.json", {"body": REAL[IDS[2]]})
    with running(s) as url:
        report = pull(IDS[:3], url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST))
    assert [o.status for o in report.outcomes] == ["failed", "failed", "fetched"]
    assert report.notes == [f"{url}/pith-mirrors.json: its bundle_pattern is no usable URL (invalid IPv6 URL); "
                            f"fetching from {url}/pith/<ID>/bundle.json"]
    assert report.outcomes[0].detail.endswith("redirect to no usable URL (host 'mirror..example' is not a host "
                                              "name) (HTTP 302 to http://mirror..example/b.json)")
    assert report.outcomes[1].detail.endswith("no usable URL (Invalid IPv6 URL)")
    assert sum(path == f"/pith/{IDS[1]}/bundle.json" for path, _ in s.requests) == 1  # (not tried again)


def test_a_server_that_gives_only_a_date_is_asked_since_that_date(tmp_path):
    """Without an ETag, the Last-Modified date kept from the last pull is sent back as If-Modified-Since."""
    date = "Wed, 02 Dec 2026 10:00:00 GMT"
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]], "headers": {"Last-Modified": date}})
    with running(s) as url:
        pull(IDS[:1], url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST))
        s.requests.clear()
        assert pull(IDS[:1], url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST)).count("unchanged") == 1
    [headers] = [h for path, h in s.requests if path.endswith("bundle.json")]
    assert headers.get("If-Modified-Since") == date and "If-None-Match" not in headers


@pytest.mark.parametrize("names", [("ETag", "Last-Modified"), ("Etag", "last-modified"), ("etag", "LAST-MODIFIED")])
def test_validators_are_kept_whatever_the_letter_case_of_their_header_names(tmp_path, names):
    """HTTP's header names are in any letter case (a server behind a proxy that speaks HTTP/2 to it sends them in
    lower case): the ETag and date kept are sent back on the next pull all the same."""
    date = "Wed, 02 Dec 2026 10:00:00 GMT"
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]], "headers": dict(zip(names, ('"v1"', date)))})
    with running(s) as url:
        pull(IDS[:1], url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST))
        s.requests.clear()
        pull(IDS[:1], url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST))
    [headers] = [h for path, h in s.requests if path.endswith("bundle.json")]
    assert (headers.get("If-None-Match"), headers.get("If-Modified-Since")) == ('"v1"', date)


@pytest.mark.parametrize("etag, sent", [('"' + "a" * 1022 + '"', True), ('"' + "a" * 1023 + '"', False),
                                        ('W/"a ~\tb"', True), ('"a\x7fb"', False), ('"a\x1fb"', False)])
def test_a_kept_validator_is_sent_only_as_one_plain_header_value(tmp_path, etag, sent):
    """A validator from the pull state is sent back only where it is visible ASCII, spaces or tabs, of at most
    1,024 characters; any other is left out (the bundle is fetched in full)."""
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": REAL[IDS[0]], "etag": '"v1"'})
    bundles = tmp_path / "b"
    state = bundles / STATE_FILE
    with running(s) as url:
        pull(IDS[:1], url, bundles, load_trust_set(), fetcher=Fetcher(**FAST))
        kept = json.loads(state.read_text())
        state.write_text(json.dumps({IDS[0]: {**kept[IDS[0]], "etag": etag}}))
        s.requests.clear()
        assert pull(IDS[:1], url, bundles, load_trust_set(), fetcher=Fetcher(**FAST)).count("unchanged") == 1
    [headers] = [h for path, h in s.requests if path.endswith("bundle.json")]
    assert headers.get("If-None-Match") == (etag if sent else None)


def test_a_pull_within_its_deadline_fetches_everything_into_a_folder_it_makes_and_counts_each_record(tmp_path):
    """``--deadline`` bounds the run; a run that has time left fetches as one without it, and waits as asked.
    The bundles folder is made with its parents (as ``mkdir -p``); progress counts each record once."""
    s = ScriptedServer()
    for pid in IDS:
        s.add(f"/pith/{pid}/bundle.json", {"body": REAL[pid]})
    s.add(f"/pith/{IDS[1]}/bundle.json", {"status": 503, "headers": {"Retry-After": "2"}}, {"body": REAL[IDS[1]]})
    waited, counted = [], []
    bundles = tmp_path / "new" / "mirror" / "bundles"
    with running(s) as url:
        fetcher = Fetcher(**FAST, sleep=waited.append, deadline=time.monotonic() + 120)
        report = pull(IDS, url, bundles, load_trust_set(), fetcher=fetcher,
                      progress=lambda done, total: counted.append((done, total)))
    assert [o.status for o in report.outcomes] == ["fetched"] * len(IDS), report.outcomes
    assert waited == [2.0]
    assert sorted(counted) == [(n, len(IDS)) for n in range(1, len(IDS) + 1)]
    assert sorted(p.name for p in bundles.glob("[!.]*")) == sorted(f"{pid}.json" for pid in IDS)


@pytest.mark.parametrize("page", [b"<!DOCTYPE html><title>Sign in to the Wi-Fi</title>", b"\n  <html>Home</html>"])
def test_a_web_page_where_the_bundle_should_be_is_a_failure_that_says_so(tmp_path, page):
    """A captive portal's login page, or a site that answers every path with its home page: a failure naming
    a web page (not a JSON syntax error to puzzle over), and nothing written."""
    s = ScriptedServer()
    s.add(f"/pith/{IDS[0]}/bundle.json", {"body": page})
    with running(s) as url:
        report = pull(IDS[:1], url, tmp_path / "b", load_trust_set(), fetcher=Fetcher(**FAST))
    [outcome] = report.outcomes
    assert outcome.status == "failed" and outcome.detail.endswith(
        "bundle.json: a web page, not a bundle (a login or error page on the way, or --from names no pith resolver "
        "or mirror)"), outcome
    assert not (tmp_path / "b" / f"{IDS[0]}.json").exists()
