"""Rollback protection against the deployed mirror (`build --live URL|DIR`), as on a fresh CI runner: the build has
no previous output, only the live site, served here by a local HTTP server or read from a folder."""

import hashlib
import json
import shutil
import subprocess
import sys

import pytest

from site_builder.build import BuildOptions, build
from site_builder.options import BuildPolicy
from site_builder.fetching import Fetcher

from browser import serve, serving
from conftest import REAL_FILES, free_port, record_id, run_unprivileged
from signing import sign_bundle, to_bytes
from conftest import signed_project as setup, signed_version as make


@pytest.fixture
def deployed(tmp_path):
    """A live site that publishes record R's newer bundle, and R's older (validly signed) bundle as the only input."""
    key, trust, bundles, base = setup(tmp_path)
    newer = make(base, key, "CORRECTED: the method is unsafe", "2026-10-10T00:00:00Z")
    older = make(base, key, "The method is safe", "2026-09-01T00:00:00Z")
    (bundles / "r.json").write_bytes(newer)
    live = tmp_path / "live"
    build(BuildOptions(bundles=bundles, output=live, trust=trust, search=False))
    (bundles / "r.json").write_bytes(older)
    pith_id = record_id(newer)
    return dict(key=key, trust=trust, bundles=bundles, base=base, live=live, newer=newer, older=older,
                pith_id=pith_id, tmp=tmp_path)


def fresh_build(d, source, **extra):
    """A build on a machine with no previous output and no cache, checked against *source*."""
    fetcher = Fetcher(timeout=5, retries=0)
    return build(BuildOptions(bundles=d["bundles"], output=d["tmp"] / "fresh", trust=d["trust"], search=False,
                              deployed=source, policy=BuildPolicy(use_cache=False, deployed_fetcher=fetcher),
                              **extra))


def published_bundle(d) -> bytes:
    return (d["tmp"] / "fresh" / "pith" / d["pith_id"] / "bundle.json").read_bytes()


def test_the_newer_live_bundle_stays_published_when_served_over_http(deployed):
    d = deployed
    with serve(d["live"], "/mirror/") as url:
        report = fresh_build(d, url)
    assert published_bundle(d) == d["newer"]
    assert "CORRECTED" in (d["tmp"] / "fresh" / "pith" / d["pith_id"] / "index.html").read_text()
    assert any("rollback refused" in w and "live site" in w for w in report.warnings)
    assert {o.inspection.rel: o.status for o in report.outcomes}["r.json"] == "superseded"
    kept = [o for o in report.outcomes if o.note == "kept from the live site"]
    assert len(kept) == 1 and kept[0].status == "published"


def test_the_newer_live_bundle_stays_published_when_read_from_a_folder(deployed):
    report = fresh_build(deployed, str(deployed["live"]))
    assert published_bundle(deployed) == deployed["newer"]
    assert any("rollback refused" in w for w in report.warnings)


def test_a_record_the_live_site_does_not_publish_yet_is_published_without_a_word(deployed):
    """The everyday case: a paper added since the last deploy has no claim on the live site to weigh."""
    d = deployed
    added = sign_bundle(json.loads(REAL_FILES[1].read_bytes()), d["key"])
    (d["bundles"] / "added.json").write_bytes(to_bytes(added))
    report = fresh_build(d, str(d["live"]))
    added_id = record_id(added)
    assert (d["tmp"] / "fresh" / "pith" / added_id / "bundle.json").read_bytes() == to_bytes(added)
    assert {o.inspection.rel: o.status for o in report.outcomes}["added.json"] == "published"
    assert [w for w in report.warnings if "added.json" in w or added_id in w] == []
    assert published_bundle(d) == d["newer"]  # (and the record it does publish is still kept)


def test_without_the_live_check_the_older_bundle_is_published(deployed):
    """The attack the check is for: a fresh machine has nothing else to compare with."""
    fresh_build(deployed, None)
    assert published_bundle(deployed) == deployed["older"]


def test_a_live_bundle_that_does_not_verify_proves_nothing(deployed):
    d = deployed
    live_copy = d["live"] / "pith" / d["pith_id"] / "bundle.json"
    live_copy.write_bytes(live_copy.read_bytes().replace(b"CORRECTED", b"CORRECTeD"))
    report = fresh_build(d, str(d["live"]))
    assert published_bundle(d) == d["older"]
    assert any("does not verify" in w and "proves nothing" in w for w in report.warnings)


def test_a_manifest_entry_whose_bundle_is_missing_proves_nothing(deployed):
    d = deployed
    with serve(d["live"]) as url:
        (d["live"] / "pith" / d["pith_id"] / "bundle.json").unlink()
        report = fresh_build(d, url)
    assert published_bundle(d) == d["older"]
    assert any("is missing" in w and "proves nothing" in w for w in report.warnings)


def test_a_manifest_that_overstates_what_is_live_proves_nothing(deployed):
    """The live bundle verifies but is older than the input; only the manifest says otherwise."""
    d = deployed
    oldest = make(d["base"], d["key"], "Oldest", "2026-08-01T00:00:00Z")
    live_copy = d["live"] / "pith" / d["pith_id"] / "bundle.json"
    live_copy.write_bytes(oldest)
    report = fresh_build(d, str(d["live"]))
    assert published_bundle(d) == d["older"]
    assert any("is not newer than the input" in w for w in report.warnings)


def test_another_records_bundle_at_the_live_path_proves_nothing(deployed):
    d = deployed
    another = to_bytes(sign_bundle(json.loads(REAL_FILES[1].read_bytes()), d["key"]))  # validly signed, not R
    assert json.loads(another)["pith_number"] != json.loads(d["older"])["pith_number"]
    (d["live"] / "pith" / d["pith_id"] / "bundle.json").write_bytes(another)
    report = fresh_build(d, str(d["live"]))
    assert published_bundle(d) == d["older"]
    assert any("is another record's" in w for w in report.warnings)


def test_malformed_manifest_entries_are_counted_and_ignored(deployed):
    d = deployed
    assert not any("malformed" in w for w in fresh_build(d, str(d["live"])).warnings)  # (none: nothing said)
    manifest = d["live"] / "verification.json"
    doc = json.loads(manifest.read_text())
    doc["files"].append({"status": "published", "pith_number": "../../etc", "sha256": "x"})
    manifest.write_text(json.dumps(doc))
    report = fresh_build(d, str(d["live"]))
    assert published_bundle(d) == d["newer"]
    assert any("1 published entries" in w and "malformed" in w for w in report.warnings)


def test_a_newer_bundle_listed_before_a_stale_entry_of_its_record_stays_published(deployed):
    """A hand-merged manifest naming the record twice, the live (newer) entry first and an older one after it:
    the newer entry still has the live bundle looked at, and the build says the record is listed twice."""
    d = deployed
    manifest = d["live"] / "verification.json"
    doc = json.loads(manifest.read_text())
    [live_entry] = [e for e in doc["files"] if e.get("status") == "published"]
    stale = dict(live_entry, sha256=hashlib.sha256(d["older"]).hexdigest(), built_at="2026-09-01T00:00:00Z")
    doc["files"].append(stale)
    manifest.write_text(json.dumps(doc))
    report = fresh_build(d, str(d["live"]))
    assert published_bundle(d) == d["newer"]
    assert any("rollback refused" in w for w in report.warnings)
    assert any("1 published entries" in w and "name a record listed before" in w for w in report.warnings)
    assert not any("malformed" in w for w in report.warnings)


def test_each_malformed_part_of_a_manifest_entry_makes_it_no_claim():
    """A live manifest is anyone's text: an entry is a claim only if every field has its exact shape (a number
    with more after it, a digest in capitals, a negative or textual event count are each no claim)."""
    from site_builder.live_site import manifest_claims

    pid = "A" * 26
    good = {"status": "published", "pith_number": f"pith:2020:{pid}", "sha256": "a" * 64,
            "built_at": "2026-09-01T00:00:00Z", "event_count": 2}
    bad = [{"pith_number": f"pith:2020:{pid}X"}, {"pith_number": f"pith:2020:{pid}\n"},
           {"pith_number": f"pith:20:{pid}"}, {"pith_number": f"pith:2020:{pid.lower()}"},
           {"sha256": "A" * 64}, {"sha256": "a" * 63}, {"sha256": "a" * 64 + "\n"},
           {"event_count": -1}, {"event_count": "2"}, {"event_count": True}, {"event_count": 2.0},
           {"built_at": 20260901}]
    read = manifest_claims(json.dumps({"build_id": "b", "files": [good]}).encode())
    assert (read.build_id, read.malformed, read.repeated) == ("b", 0, 0)
    assert read.claims[pid].sha256 == "a" * 64 and read.claims[pid].event_count == 2
    for change in bad:
        read = manifest_claims(json.dumps({"files": [dict(good, **change)]}).encode())
        assert (read.claims, read.malformed) == ({}, 1), change
    for status in ("rejected", "superseded", "Published", None):  # (only what the live site publishes is a claim)
        read = manifest_claims(json.dumps({"files": [dict(good, status=status)]}).encode())
        assert (read.claims, read.malformed) == ({}, 0), status


def test_a_record_listed_twice_is_claimed_as_newer_wherever_either_entry_is():
    """A manifest naming a record twice (by hand: the builder writes one entry a record) claims the later
    ``built_at`` of the two and the larger event count, whichever entry comes first, so an input older than either
    by either measure has the live bundle looked at; the digest is the newer entry's."""
    from site_builder.live_site import manifest_claims

    pid = "A" * 26
    entry = {"status": "published", "pith_number": f"pith:2020:{pid}"}
    later = dict(entry, sha256="a" * 64, built_at="2026-09-01T00:00:00.5Z", event_count=2)
    more_events = dict(entry, sha256="b" * 64, built_at="2026-09-01T00:00:00Z", event_count=5)
    for files in ([later, more_events], [more_events, later]):
        read = manifest_claims(json.dumps({"files": files}).encode())
        assert (read.malformed, read.repeated) == (0, 1)
        claim = read.claims[pid]
        assert (claim.pith_id, claim.sha256, claim.built_at, claim.event_count) == (
            pid, "a" * 64, "2026-09-01T00:00:00.5Z", 5)
    read = manifest_claims(json.dumps({"files": [later, later, dict(later, status="rejected")]}).encode())
    assert (read.repeated, read.claims[pid].sha256) == (1, "a" * 64)


def test_a_manifest_of_another_shape_is_none_and_entries_that_are_no_objects_are_passed_over():
    """A live manifest that is no object, or whose files are no list, is no manifest (a ValueError, which the
    build reports as a warning), and entries that are no objects are passed over: none makes the check crash."""
    from site_builder.live_site import manifest_claims

    for doc in ([], "text", {"files": {}}, {"files": "published"}, {"build_id": "b"}):
        with pytest.raises(ValueError):
            manifest_claims(json.dumps(doc).encode())
    read = manifest_claims(json.dumps(
        {"build_id": "b", "files": ["published", 3, None, [{"status": "published"}]]}).encode())
    assert (read.build_id, read.claims, read.malformed, read.repeated) == ("b", {}, 0, 0)
    for build_id in (["b"], 7, {"b": 1}, None):  # (no build id: nothing compared or looked up by it)
        assert manifest_claims(json.dumps({"build_id": build_id, "files": []}).encode()).build_id is None


def test_a_live_site_with_nothing_published_is_a_warning_not_an_error(deployed):
    d = deployed
    empty = d["tmp"] / "empty-site"
    empty.mkdir()
    with serve(empty) as url:
        report = fresh_build(d, url)
    assert published_bundle(d) == d["older"]
    assert any("nothing published there yet" in w for w in report.warnings)


def test_a_live_url_with_a_user_name_or_password_is_refused_without_printing_them(project):
    from site_builder.build import build
    from site_builder.settings import SettingsError
    from conftest import both_keys, opts
    options = opts(project, project / "site", both_keys(), deployed="https://me:secret@mirror.example/")
    with pytest.raises(SettingsError) as caught:
        build(options)
    assert str(caught.value) == ("--live https://…@mirror.example: must not hold a user name or password (each "
                                 "warning names the URL, and no request would send them)")
    assert not (project / "site").exists()


@pytest.mark.parametrize("live, why", [("https://[::1/", "invalid IPv6 URL"),
                                       ("https://mirror.example:99999/", "port out of range 0-65535")])
def test_a_live_url_urllib_cannot_use_is_one_error_line(project, live, why):
    """urllib raises ValueError for these, not OSError: the build stopped with a traceback."""
    from site_builder.build import build
    from site_builder.settings import SettingsError
    from conftest import both_keys, opts
    with pytest.raises(SettingsError) as caught:
        build(opts(project, project / "site", both_keys(), deployed=live))
    assert str(caught.value) == f"--live {live}: no usable URL ({why})"
    assert not (project / "site").exists()


def test_a_live_site_redirecting_to_a_url_urllib_cannot_use_is_unreachable_not_a_crash(deployed):
    """The live site's answers are untrusted: a redirect to a URL urllib cannot parse is the warning an
    unreachable live site gets."""
    import http.server

    class Redirecting(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(302)
            self.send_header("Location", "https://live..example/verification.json")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    with serving(Redirecting) as url:
        report = fresh_build(deployed, url)
    assert published_bundle(deployed) == deployed["older"]
    assert [w for w in report.warnings if w.startswith("live site")] == [
        f"live site {url}: redirect to no usable URL (host 'live..example' is not a host name) (HTTP 302 to "
        f"https://live..example/verification.json); no rollback check against it"]


def test_a_live_manifest_is_read_whole_and_is_known_by_all_its_bytes(tmp_path):
    """The manifest of a mirror of 20,000 records is megabytes long: it is read whole (up to GitHub Pages' limit
    of 100 MB for a file), and its digest, by which the no-op check knows the live site changed, covers every
    byte (an edit of the last entry is another manifest)."""
    from site_builder.live_site import LiveSite

    ids = ["".join("ABCDEFGHIJ"[int(digit)] for digit in f"{n:026d}") for n in range(20_000)]  # (26 letters each)
    entries = [{"status": "published", "pith_number": f"pith:2020:{pid}", "sha256": "a" * 64,
                "built_at": "2026-09-01T00:00:00Z", "event_count": 2} for pid in ids]
    manifest = tmp_path / "verification.json"
    manifest.write_text(json.dumps({"build_id": "b" * 64, "files": entries}))
    assert manifest.stat().st_size > 2 << 20
    read = LiveSite(str(tmp_path)).manifest()
    assert (len(read.claims), read.malformed) == (20_000, 0)
    assert read.sha256 == hashlib.sha256(manifest.read_bytes()).hexdigest()
    entries[-1]["event_count"] = 3
    manifest.write_text(json.dumps({"build_id": "b" * 64, "files": entries}))
    assert LiveSite(str(tmp_path)).manifest().sha256 not in (read.sha256, None)


def test_a_live_folder_with_nothing_published_is_a_first_deploy(tmp_path):
    """An empty folder (or one without a manifest) has nothing live; a manifest that cannot be read is another
    matter: it says so."""
    from site_builder.live_site import LiveSite, LiveSiteUnavailable
    assert LiveSite(str(tmp_path)).manifest() is None
    (tmp_path / "verification.json").mkdir()  # (there, and no file)
    with pytest.raises(LiveSiteUnavailable, match="^verification.json: "):
        LiveSite(str(tmp_path)).manifest()


def test_a_live_folder_this_user_may_not_look_at_is_an_error_not_a_first_deploy(tmp_path, pathlib_of_python_3_14):
    """A folder not there is a first deploy (a warning, and no rollback check); one in a folder this user may not
    search is there, and unreadable: an error, as from Python 3.11 to 3.13, also where pathlib says False of it."""
    from site_builder.live_site import LiveSite, LiveSiteUnavailable
    with pytest.raises(LiveSiteUnavailable, match="^no such folder$"):
        LiveSite(str(tmp_path / "gone")).manifest()
    locked = tmp_path / "locked"
    (locked / "site").mkdir(parents=True)
    (locked / "site" / "verification.json").write_text('{"build_id": "' + "b" * 64 + '", "files": []}')

    def check():
        locked.chmod(0o600)
        with pytest.raises(PermissionError):
            LiveSite(str(locked / "site")).manifest()
        locked.chmod(0o700)
        (locked / "site").chmod(0o600)  # (the folder itself listed, not entered: the error line names it)
        with pytest.raises(PermissionError) as caught:
            LiveSite(str(locked / "site")).manifest()
        assert caught.value.filename == str(locked / "site")
    try:
        run_unprivileged(check)
    finally:
        locked.chmod(0o755)
        (locked / "site").chmod(0o755)


@pytest.mark.parametrize("locked", ["pith", "bundle.json"])
def test_a_live_bundle_this_user_may_not_read_is_unavailable_not_missing(tmp_path, locked, pathlib_of_python_3_14):
    """Whether the file or a folder on its way is closed to this user, the live bundle is there and cannot be read
    (the build says so and publishes its input), not missing, whatever pathlib says of it."""
    from site_builder.live_site import LiveSite, LiveSiteUnavailable
    pid = record_id(REAL_FILES[0])
    (tmp_path / "pith" / pid).mkdir(parents=True)
    (tmp_path / "pith" / pid / "bundle.json").write_bytes(REAL_FILES[0].read_bytes())
    closed = tmp_path / "pith" if locked == "pith" else tmp_path / "pith" / pid / "bundle.json"

    def check():
        closed.chmod(0o600 if locked == "pith" else 0)
        with pytest.raises(LiveSiteUnavailable, match=f"^pith/{pid}/bundle.json: .*Permission denied"):
            LiveSite(str(tmp_path)).bundle(pid, 1 << 20)
        if locked == "bundle.json":  # (another record's folder is searched as before: not there is missing)
            assert LiveSite(str(tmp_path)).bundle("A" * 26, 1 << 20) is None
    try:
        run_unprivileged(check)
    finally:
        closed.chmod(0o755)


def test_a_live_manifest_that_is_not_one_says_so(tmp_path):
    from site_builder.live_site import LiveSite, LiveSiteUnavailable
    (tmp_path / "verification.json").write_bytes(b'{"published": [1, 2,]}')
    with pytest.raises(LiveSiteUnavailable, match="^verification.json is not a manifest: "):
        LiveSite(str(tmp_path)).manifest()


@pytest.mark.parametrize("status", [304, 403, 500, 503])
def test_a_live_server_answering_with_an_error_is_unavailable_not_read_as_a_manifest(status):
    """An error page is not the site, nor is "not modified" to a request that named no version: the build warns
    that the live site could not be read, naming the status (HTTP 404 alone means nothing is published there
    yet)."""
    import http.server

    from site_builder.live_site import LiveSite, LiveSiteUnavailable

    class Failing(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"build_id": "an error page that is JSON too", "files": []}'
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with serving(Failing) as url:
        with pytest.raises(LiveSiteUnavailable, match=f"^HTTP {status}\\b"):
            LiveSite(url, Fetcher(timeout=5, retries=0)).manifest()


def test_a_live_folder_that_is_missing_or_a_file_is_a_warning_saying_which(tmp_path):
    from site_builder.live_site import LiveSite, LiveSiteUnavailable
    (tmp_path / "a-file").write_text("x")
    for name, why in (("missing", "no such folder"), ("a-file", "not a folder")):
        with pytest.raises(LiveSiteUnavailable, match=f"^{why}$"):
            LiveSite(str(tmp_path / name)).manifest()


@pytest.mark.slow  # (waits out the command line's retries)
def test_an_unreachable_live_site_is_a_warning_and_strict_still_exits_0(deployed):
    d = deployed
    port = free_port()
    proc = subprocess.run([sys.executable, "-m", "site_builder", "build", "--strict", "--no-search", "--no-cache",
                           "--bundles", d["bundles"], "--output", d["tmp"] / "fresh", "--trusted-keys",
                           d["tmp"] / "k.json", "--live", f"http://127.0.0.1:{port}/"],
                          capture_output=True, text=True, cwd=d["tmp"])
    assert proc.returncode == 0, proc.stderr
    assert "WARNING live site http://127.0.0.1:" in proc.stderr and "no rollback check" in proc.stderr
    assert published_bundle(d) == d["older"]


@pytest.mark.slow  # (a second or more: left to the full suite)
def test_the_command_line_keeps_the_live_bundle(deployed):
    d = deployed
    with serve(d["live"]) as url:
        proc = subprocess.run([sys.executable, "-m", "site_builder", "build", "--strict", "--no-search",
                               "--bundles", d["bundles"], "--output", d["tmp"] / "fresh", "--trusted-keys",
                               d["tmp"] / "k.json", "--live", url], capture_output=True, text=True, cwd=d["tmp"])
    assert proc.returncode == 0, proc.stderr
    assert "rollback refused" in proc.stderr
    assert published_bundle(d) == d["newer"]


def test_a_newer_live_site_is_seen_even_when_the_inputs_did_not_change(deployed):
    """The live manifest is an input of the build: the no-op shortcut must not skip the check."""
    d = deployed
    out = d["tmp"] / "fresh"
    empty = d["tmp"] / "empty-site"
    empty.mkdir()
    build(BuildOptions(bundles=d["bundles"], output=out, trust=d["trust"], search=False, deployed=str(empty)))
    assert published_bundle(d) == d["older"]
    build(BuildOptions(bundles=d["bundles"], output=out, trust=d["trust"], search=False, deployed=str(d["live"])))
    assert published_bundle(d) == d["newer"]


def test_a_live_site_that_published_since_the_last_build_is_seen_though_nothing_else_changed(deployed):
    """The same live folder, the same inputs: the live site's manifest is what changed (another runner
    deployed a newer bundle), so the build is no no-op, and the newer live bundle stays published."""
    d = deployed
    out, live = d["tmp"] / "fresh", d["tmp"] / "live-here"
    (d["tmp"] / "older").mkdir()
    (d["tmp"] / "older" / "r.json").write_bytes(d["older"])
    build(BuildOptions(bundles=d["tmp"] / "older", output=live, trust=d["trust"], search=False))
    build(BuildOptions(bundles=d["bundles"], output=out, trust=d["trust"], search=False, deployed=str(live)))
    assert published_bundle(d) == d["older"]
    shutil.rmtree(live)
    shutil.copytree(d["live"], live)
    report = build(BuildOptions(bundles=d["bundles"], output=out, trust=d["trust"], search=False,
                                deployed=str(live)))
    assert report.changed and published_bundle(d) == d["newer"]


def test_a_live_bundle_newer_than_the_previous_sites_copy_wins_and_says_so(deployed):
    """Input older than the previous site's copy, which is older than the live one: the live copy is published,
    and each refusal is reported; the one file superseded is the input, its note (and the last refusal) naming
    the copy that stays published, not the previous site's, which does not, and which no refusal says stays."""
    d = deployed
    out = d["tmp"] / "fresh"
    middle = make(d["base"], d["key"], "Middle", "2026-09-15T00:00:00Z")
    (d["bundles"] / "r.json").write_bytes(middle)
    build(BuildOptions(bundles=d["bundles"], output=out, trust=d["trust"], search=False))
    (d["bundles"] / "r.json").write_bytes(d["older"])
    report = build(BuildOptions(bundles=d["bundles"], output=out, trust=d["trust"], search=False,
                                deployed=str(d["live"])))
    assert published_bundle(d) == d["newer"]
    refusals = [w for w in report.warnings if "rollback refused" in w]
    assert any("the published bundle" in w for w in refusals)
    assert [w for w in refusals if "stays published" in w] == [w for w in refusals if "the live site's" in w]
    refused = ("rollback refused: built_at 2026-09-01T00:00:00Z with 2 events is older than the live site's verified "
               "bundle (built_at 2026-10-10T00:00:00Z, 2 events), which stays published")
    assert [w for w in refusals if "the live site's verified" in w] == [f"r.json: pith:{d['pith_id']}: {refused}"]
    files = json.loads((out / "verification.json").read_text())["files"]
    assert [(f["path"], f["status"], f["note"]) for f in files if f["status"] != "published"] == [
        ("r.json", "superseded", refused)]


def test_each_live_read_has_its_own_size_limit_and_the_fetcher_is_left_as_it_was(deployed):
    """The manifest and a bundle are read with limits of their own (a bundle's is the build's max_bytes): a live
    bundle over it is refused, and the fetcher the caller handed in keeps its own limit."""
    from site_builder.live_site import LiveSite, LiveSiteUnavailable

    d = deployed
    fetcher = Fetcher(timeout=5, retries=0, max_bytes=123)
    with serve(d["live"], "/mirror/") as url:
        site = LiveSite(url, fetcher)
        assert site.manifest() is not None  # (the manifest is far over 123 bytes: its own limit applies)
        assert site.bundle(d["pith_id"], len(d["newer"])) == d["newer"]
        with pytest.raises(LiveSiteUnavailable, match="limit"):
            site.bundle(d["pith_id"], len(d["newer"]) - 1)
    assert fetcher.max_bytes == 123
