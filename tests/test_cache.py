"""The build cache is untrusted input: nothing planted in a trust_project's cache folder publishes a forgery or runs code.

Each attack is made of real bytes: a bundle that claims the pinned key's id and fingerprint, embeds the pinned
key and carries correct hashes, but is signed by another key (so only the signature checks reject it), and cache
files as an attacker would plant them.  In every case the genuine build rejects the forgery, publishes the
genuine bundles, runs no payload, and exits as it would with no cache at all: 0 without ``--strict``, 1 with it.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest

from site_builder.cache import BuildCache
from site_builder.cache_database import cache_context
from site_builder.cache_key import user_cache_key
from site_builder.inspection import compact, inspect_bytes, inspection_to_json
from site_builder.keys import load_trust_set
from site_builder.loading import stat_signature
from site_builder.pages import ALL_ADDRESSES
from site_builder.rendering import template_dirs
from site_builder.verification import Verdict

from conftest import (REAL_FILES, ROOT, both_keys, cache_document, document_tag, opts, own_document_tag,
                      plant_document, tree)
from generate import make_bundle
from signing import TestKey, sign_bundle, to_bytes, with_paper

PINNED = json.loads((ROOT / "site_builder" / "data" / "pith-signing-key.json").read_text())
FORGED_TITLE = "FORGED: the method is safe"


def forged_bytes() -> bytes:
    """A bundle whose every hash is right and which names and embeds the pinned key, signed by another key."""
    bundle = with_paper(json.loads(REAL_FILES[0].read_bytes()), title=FORGED_TITLE)
    return to_bytes(sign_bundle(bundle, TestKey("attacker"), claim_key_id=PINNED["key_id"],
                                claim_fingerprint=PINNED["fingerprint_sha256_hex"], embed=PINNED))


@pytest.fixture
def trust_project(tmp_path) -> Path:
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    for p in REAL_FILES[1:]:
        shutil.copy(p, bundles / p.name)
    (bundles / "forged.json").write_bytes(forged_bytes())
    return tmp_path


def cache_folder(trust_project: Path) -> Path:
    return trust_project / ".site-builder-cache" / "site"


def cli_build(trust_project: Path, *flags: str, env: dict | None = None, output: str = "site",
              code: str | None = None) -> subprocess.CompletedProcess:
    """``site-builder build`` in a real process (*code*: run first, in that process, as a patched builder)."""
    argv = ["build", "--bundles", str(trust_project / "bundles"), "--output", str(trust_project / output), "--no-search", *flags]
    program = f"{code or ''}\nimport sys\nfrom site_builder.cli import main\nsys.exit(main({argv!r}))"
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=trust_project,
                          env=env, timeout=300)


def wait_for_saver(trust_project: Path) -> None:
    """The detached saver of the last command-line build has finished (it holds the cache's lock)."""
    import fcntl
    lock = cache_folder(trust_project) / "cache.lock"
    if lock.exists():
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        finally:
            os.close(fd)


def assert_as_without_cache(trust_project: Path, result: subprocess.CompletedProcess, strict: bool) -> None:
    """The build rejected the forgery for its signature, published the genuine bundles, and left exactly the
    tree a build with no cache at all leaves."""
    assert result.returncode == (1 if strict else 0), result.stderr
    assert "REJECTED forged.json: receipt_signature:" in result.stderr
    summary = result.stdout.strip().splitlines()[-1]
    assert summary.startswith(f"{len(REAL_FILES)} bundles read, {len(REAL_FILES) - 1} published, 1 rejected"), summary
    site = tree(trust_project / "site")
    assert not any(FORGED_TITLE.encode() in data for data in site.values())
    clean = cli_build(trust_project, "--no-cache", output="clean")
    assert clean.returncode == 0, clean.stderr
    assert site == tree(trust_project / "clean")


class _RunsCode:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def payloads(marker: Path) -> dict[str, bytes]:
    """Pickles an attacker would plant: one that runs a command, and one whose BUILD opcode applied to a package
    class replaces ``Verdict.first_failure`` (after it, every bundle would pass)."""
    build_opcode = b"csite_builder.verification\nVerdict\n(N}Vfirst_failure\nNstb."
    return {"code-execution": pickle.dumps(_RunsCode(marker), protocol=2), "build-opcode": build_opcode}


def test_the_payloads_do_what_they_claim(tmp_path):
    """The planted pickles are real attacks: unpickled, one runs its command, the other disables a check."""
    marker = tmp_path / "ran"
    attacks = payloads(marker)
    pickle.loads(attacks["code-execution"])
    assert marker.exists()
    saved = Verdict.__dict__["first_failure"]
    try:
        pickle.loads(attacks["build-opcode"])
        assert Verdict.first_failure is None
    finally:
        setattr(Verdict, "first_failure", saved)
    assert isinstance(Verdict.__dict__["first_failure"], property)


@pytest.mark.parametrize("payload", ["code-execution", "build-opcode"])
@pytest.mark.parametrize("strict", [pytest.param(False, marks=pytest.mark.slow), True])
def test_planted_pickles_in_the_cache_folder_are_never_loaded(trust_project, payload, strict):
    """A fork that force-adds a snapshot, or a cache file, holding a pickle: under every name a cache file has
    had (the snapshot, with and without the header builders wrote; the SQLite file itself; its journal)."""
    marker = trust_project / "payload-ran"
    data = payloads(marker)[payload]
    folder = cache_folder(trust_project)
    folder.mkdir(parents=True)
    header = b"site-builder memory " + b"0" * 12 + b"/4\n"
    for name, content in [("memory.pickle", header + data), ("memory.pickle.raw", data), ("cache.sqlite", data),
                          ("cache.sqlite-wal", data)]:
        (folder / name).write_bytes(content)
    flags = ("--strict", "--no-twin") if strict else ()
    result = cli_build(trust_project, *flags)
    assert not marker.exists()
    assert_as_without_cache(trust_project, result, strict)


@pytest.mark.slow
def test_a_pickle_planted_over_a_genuine_cache_is_never_loaded(trust_project):
    marker = trust_project / "payload-ran"
    first = cli_build(trust_project)
    assert first.returncode == 0, first.stderr
    wait_for_saver(trust_project)
    for name, data in payloads(marker).items():
        (cache_folder(trust_project) / "memory.pickle").write_bytes(data)
        (trust_project / "bundles" / REAL_FILES[1].name).touch()  # (not a no-op: the build plans)
        result = cli_build(trust_project, "--strict")
        wait_for_saver(trust_project)
        assert not marker.exists(), name
        assert_as_without_cache(trust_project, result, strict=True)


def _template_cache_names() -> list[tuple[str, str]]:
    """(name, Jinja's cache key) of every built-in template: the key is predictable (sha1 of name and path)."""
    dirs = template_dirs(None)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([str(d) for d in dirs]))
    names = env.list_templates(extensions=["html", "xml", "txt", "svg"])
    finder = jinja2.FileSystemBytecodeCache()
    return [(name, finder.get_cache_key(name, env.loader.get_source(env, name)[1])) for name in names]


@pytest.mark.slow  # (a second or more: left to the full suite)
def test_planted_compiled_templates_never_run(trust_project):
    """Jinja's bytecode format starts with a pickled checksum and holds marshalled code: files planted under the
    predictable names, in Jinja's own file format and in the builder's (with a made-up tag), run nothing."""
    marker = trust_project / "payload-ran"
    rce = pickle.dumps(_RunsCode(marker), protocol=2)
    code = compile(f"open({str(marker)!r}, 'w').close()", "<planted>", "exec")
    import marshal
    jinja_file = jinja2.bccache.bc_magic + rce
    code_file = jinja2.bccache.bc_magic + pickle.dumps("checksum", 2) + marshal.dumps(code)
    folder = cache_folder(trust_project) / "templates"
    folder.mkdir(parents=True)
    names = _template_cache_names()
    assert len(names) > 10
    for _, key in names:
        (folder / f"__jinja2_{key}.cache").write_bytes(jinja_file)
        (folder / f"{key}.jbc").write_bytes(b"0" * 64 + jinja_file)
    first = cli_build(trust_project, "--strict")
    assert not marker.exists()
    assert_as_without_cache(trust_project, first, strict=True)
    wait_for_saver(trust_project)
    for _, key in names:  # and once more, with the other payload over the files the build wrote
        (folder / f"{key}.jbc").write_bytes(b"f" * 64 + code_file)
    (trust_project / "bundles" / REAL_FILES[1].name).touch()
    again = cli_build(trust_project, "--strict")
    assert not marker.exists()
    assert_as_without_cache(trust_project, again, strict=True)


def test_compiled_templates_are_kept_and_the_next_build_loads_them(trust_project):
    """A command-line build keeps the templates it compiled beside the cache, under this user's tag, and the next
    one that renders loads them instead of compiling them again (about 0.1 s of every rebuild)."""
    folder = cache_folder(trust_project) / "templates"
    (trust_project / "site.toml").write_text('title = "First"\n')
    assert cli_build(trust_project).returncode == 0
    kept = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.glob("*.jbc")}
    assert len(kept) > 10
    wait_for_saver(trust_project)
    (trust_project / "site.toml").write_text('title = "Second"\n')  # (every page rendered again)
    assert cli_build(trust_project).returncode == 0
    assert "Second" in (trust_project / "site" / "index.html").read_text()
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.glob("*.jbc")} == kept


def _patched_verifier_result(trust_project: Path) -> tuple[str, str]:
    """(sha256, cache data) of what a builder whose signature checks accept anything says of the forgery."""
    from site_builder import verification
    raw = (trust_project / "bundles" / "forged.json").read_bytes()
    real = verification._verify_ed25519
    verification._verify_ed25519 = lambda *args: None
    try:
        inspection = compact(inspect_bytes("forged.json", raw, load_trust_set()))
    finally:
        verification._verify_ed25519 = real
    assert inspection.check is None  # passed: the forgery fails only signature checks
    return inspection.sha256, json.dumps(inspection_to_json(inspection), ensure_ascii=False)


@pytest.mark.parametrize("tags", ["another-users-key", *(pytest.param(t, marks=pytest.mark.slow)
                                                         for t in ("none", "made-up", "copied-from-genuine-rows"))])
@pytest.mark.slow  # (a second or more: left to the full suite)
def test_forged_passed_rows_with_matching_stat_rows_publish_nothing(trust_project, tags, tmp_path_factory):
    """Rows saying "passed" for the forgery's digest, and a stat row pointing the file at that digest, planted
    into a genuine cache: with no tag, a made-up tag, tags taken from genuine rows, or tags made with another
    user's key."""
    first = cli_build(trust_project, "--strict")
    assert first.returncode == 1
    wait_for_saver(trust_project)
    sha, data = _patched_verifier_result(trust_project)
    trust = load_trust_set().identity()
    sig = stat_signature((trust_project / "bundles" / "forged.json").stat())
    db = sqlite3.connect(cache_folder(trust_project) / "cache.sqlite")
    files, genuine_files_tag = cache_document(db, "files")
    files["forged.json"] = [sig, sha]
    part = f"inspections/{sha[0]}"  # (the results of the digests that start as the forgery's)
    results, genuine_result_tag = cache_document(db, part)  # (its result of the first build: rejected)
    results["results"][sha] = json.loads(data)
    assert results["trust"] == trust
    if tags == "another-users-key":
        other = user_cache_key({"XDG_CACHE_HOME": str(tmp_path_factory.mktemp("other"))}).bound_to(cache_context())
        files_tag, result_tag = document_tag(other, "files", files), document_tag(other, part, results)
    else:
        files_tag, result_tag = {"none": (None, None), "made-up": ("0" * 64, "1" * 64),
                                 "copied-from-genuine-rows": (genuine_files_tag, genuine_result_tag)}[tags]
    plant_document(db, "files", files, files_tag)
    plant_document(db, part, results, result_tag)
    db.execute("DELETE FROM meta WHERE key LIKE 'quick%'")  # (the last build's no-op answer would say "rejected")
    db.commit()
    db.close()
    result = cli_build(trust_project, "--strict")
    assert_as_without_cache(trust_project, result, strict=True)


def test_documents_stored_as_text_under_their_genuine_tags_change_nothing(trust_project):
    """Whoever may write the cache file, with no key, can still change what type a row holds: a document's bytes
    stored as TEXT keep their tag (the same bytes).  The build neither stops nor publishes otherwise: it leaves
    the site a build without a cache leaves (such a document is none)."""
    assert cli_build(trust_project, "--strict").returncode == 1
    wait_for_saver(trust_project)
    db = sqlite3.connect(cache_folder(trust_project) / "cache.sqlite")
    changed = db.execute("UPDATE documents SET data = CAST(data AS TEXT)").rowcount
    db.execute("DELETE FROM meta WHERE key LIKE 'quick%'")  # (the no-op answer: another test's)
    db.commit()
    assert changed > 0
    assert db.execute("SELECT count(*) FROM documents WHERE typeof(data) != 'text'").fetchone() == (0,)
    db.close()
    result = cli_build(trust_project, "--strict")
    assert_as_without_cache(trust_project, result, strict=True)


def _plant_no_op_answer(trust_project: Path, tags: str) -> None:
    """The last build's no-op answer (its outcomes, for inputs and an output as they are now) changed to say the
    forgery was published, tagged as *tags* says."""
    db = sqlite3.connect(cache_folder(trust_project) / "cache.sqlite")
    (key,), (doc,), (genuine_tag,) = (db.execute(f"SELECT value FROM meta WHERE key='{name}'").fetchone()
                                      for name in ("quick_key", "quick", "quick_tag"))
    answer = json.loads(doc)
    forged = [o for o in answer["outcomes"] if o[0] == "forged.json"]
    assert forged and forged[0][2] == "rejected"
    forged[0][2:5] = ["published", None, ""]
    doc = json.dumps(answer)
    if tags in ("none", "copied-from-genuine"):
        tag = None if tags == "none" else genuine_tag
    else:  # made with a key: this user's ("own-key"), or another user's
        environ = {"XDG_CACHE_HOME": str(trust_project / "other-home")} if tags == "another-users-key" else None
        tag = user_cache_key(environ).bound_to(cache_context()).tag("quick", key, doc)
    db.execute("UPDATE meta SET value=? WHERE key='quick'", (doc,))
    db.execute("UPDATE meta SET value=? WHERE key='quick_tag'", (tag,))
    db.commit()
    db.close()


@pytest.mark.parametrize("tags", ["another-users-key", "copied-from-genuine", "none"])
def test_a_changed_no_op_answer_is_not_taken(trust_project, tags):
    """The no-op answer is the one part of the cache a build takes without planning: one that says the
    forgery was published, without this user's tag on it, is no answer (the build plans, and rejects it)."""
    assert cli_build(trust_project, "--strict").returncode == 1
    wait_for_saver(trust_project)
    _plant_no_op_answer(trust_project, tags)
    result = cli_build(trust_project, "--strict")
    assert_as_without_cache(trust_project, result, strict=True)


def test_the_no_op_answer_is_taken_under_the_users_own_tag(trust_project):
    """(What the test above rests on: the changed answer, tagged with this user's key, is taken as it stands.)"""
    assert cli_build(trust_project, "--strict").returncode == 1
    wait_for_saver(trust_project)
    _plant_no_op_answer(trust_project, "own-key")
    result = cli_build(trust_project, "--strict")
    assert result.returncode == 0 and "REJECTED" not in result.stderr, result.stderr


PATCHED_BUILDER = "import site_builder.verification as v; v._verify_ed25519 = lambda *args: None"


@pytest.mark.parametrize("strict", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_a_cache_and_site_left_by_another_users_patched_builder_count_for_nothing(trust_project, tmp_path_factory,
                                                                                  strict):
    """Someone else (another HOME: another key) builds in the trust_project with a builder whose signature checks
    accept anything: its cache says the forgery passed, its site publishes it, and its no-op answer says that
    site is current.  The owner's next build trusts none of it."""
    other_home = tmp_path_factory.mktemp("other-user")
    env = {**os.environ, "XDG_CACHE_HOME": str(other_home)}
    theirs = cli_build(trust_project, "--strict", env=env, code=PATCHED_BUILDER)
    assert theirs.returncode == 0, theirs.stderr  # the patched builder published the forgery...
    assert any(FORGED_TITLE.encode() in data for data in tree(trust_project / "site").values())
    again = cli_build(trust_project, env=env, code=PATCHED_BUILDER)
    assert "output is up to date" in again.stderr  # ... and its cache vouches for that site
    wait_for_saver(trust_project)
    flags = ("--strict", "--no-twin") if strict else ()
    result = cli_build(trust_project, *flags)
    assert "output is up to date" not in result.stderr
    assert_as_without_cache(trust_project, result, strict)


def test_a_cache_copied_under_a_fresh_home_recomputes_everything(trust_project, tmp_path_factory, monkeypatch):
    """With a fresh HOME, a cache from elsewhere (here: this user's own, from before) saves no work at all."""
    from site_builder.build import BuildOptions, build
    options = BuildOptions(bundles=trust_project / "bundles", output=trust_project / "site", trust=load_trust_set(),
                           search=False)
    build(options)
    (trust_project / "bundles" / REAL_FILES[1].name).unlink()
    reused = build(options)
    assert reused.changed and reused.files_reused > 0
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("fresh-home")))
    (trust_project / "bundles" / REAL_FILES[2].name).unlink()
    fresh = build(options)
    assert fresh.changed and fresh.files_reused == 0  # every unit rendered again: no unit list was trusted
    assert fresh.count("rejected") == 1 and fresh.count("published") == len(REAL_FILES) - 3


@pytest.mark.slow  # (a second or more: left to the full suite)
def test_without_a_safe_key_the_build_keeps_no_cache_and_says_why(trust_project, tmp_path):
    home = tmp_path / "cache-home"
    env = {**os.environ, "XDG_CACHE_HOME": str(home)}
    (home / "site-builder").mkdir(parents=True)
    (home / "site-builder").chmod(0o777)
    result = cli_build(trust_project, env=env)
    assert result.returncode == 0, result.stderr
    assert "NOTE no build cache:" in result.stderr and "writable by other users" in result.stderr
    assert not cache_folder(trust_project).exists()  # (no cache file, lock or compiled template: no folder)
    again = cli_build(trust_project, env=env)
    assert "output is up to date" not in again.stderr
    assert_as_without_cache(trust_project, again, strict=False)


@pytest.mark.parametrize("start_method", ["fork", "forkserver", None])
def test_the_mirrored_record_read_where_it_is_asked_for_is_the_record_as_stored(tmp_path, start_method):
    """A command-line build hands the lookups of the mirrored bundles a record not yet read, which the child
    making them reads over a connection of its own: they find what a record read here finds, and where the
    stored record's tag does not check, or it is gone, or the cache file is, the record proves nothing (the
    child's lookups say there is none, and the build's own read agrees)."""
    from site_builder.mirrors import MirrorLookups, mirror_signatures

    live = tmp_path / "live"
    for pid in ("AAAA", "BBBB"):
        for folder in ("pith", ".well-known/pith"):
            (live / folder / pid).mkdir(parents=True)
            (live / folder / pid / "bundle.json").write_bytes(b"{}")
    now = dict(mirror_signatures(live, ["AAAA", "BBBB"]))
    entries = {pid: (sig, "0" * 64) for pid, sig in now.items()}
    entries["AAAA"] = ("1:2:3 4:5:6", "0" * 64)  # (not the file there now)
    path = tmp_path / "a cache?#%41" / "cache.sqlite"  # (read by a URI: each of these escaped)
    cache = BuildCache(path, key=user_cache_key())
    cache.save_mirrored(entries)
    cache.close()

    def looked_up(flaw: str | None) -> tuple:
        cache = BuildCache(path, key=user_cache_key())
        try:
            record = cache.mirrored(read_now=False)
            if flaw is not None:
                db = sqlite3.connect(path)
                if flaw == "planted":  # (the file there now, as if recorded, under a made-up tag)
                    data, _ = cache_document(db, "mirrored")
                    data["AAAA"][0] = now["AAAA"]
                    plant_document(db, "mirrored", data, "0" * 64)
                else:
                    db.execute("DELETE FROM documents WHERE name='mirrored'")
                db.commit()
                db.close()
            lookups = MirrorLookups(live, tmp_path / "none", record, start_method)
            try:
                return lookups.live(), lookups.recorded, lookups.edited(), cache.mirrored() is None
            finally:
                lookups.close()
        finally:
            cache.close()

    assert looked_up(None) == ({"AAAA": now["AAAA"]}, entries, frozenset({"AAAA"}), False)
    for flaw in ("planted", "deleted"):
        assert looked_up(flaw) == (None, None, frozenset({"AAAA", "BBBB"}), True)


def _files_added(path: str):
    """An edit of a unit list's line: *path* added to the files of the static files' unit (kept as it is by the
    next build: its files linked) and of the report's (made again: its files removed from a tree updated in
    place)."""
    return lambda line: line + "\t" + path if line.startswith(("static\t", "report\t")) else line


def _arxiv_id_of_records(arxiv_id: str):
    """An edit of a unit list's line: a record's files kept as its four values, with *arxiv_id* and its one
    address ``arxiv/<arXiv id>/``."""
    def edit(line: str) -> str:
        if not line.startswith("record:"):
            return line
        name, key, files = line.split("\t")
        pith_id, _, version, _ = files.split(" ")
        return f"{name}\t{key}\t{pith_id} {arxiv_id} {version} 1"
    return edit


DAMAGED_UNIT_LISTS = {
    "a path out of the site": _files_added("../victim/index.html"),
    "a record's arXiv id out of the site": _arxiv_id_of_records("../../victim"),
    "a path in and out of the site": _files_added("../site/../victim/index.html"),
    "an absolute path": _files_added("/VICTIM"),
    "a record's arXiv id that Windows reserves": _arxiv_id_of_records("aux/1234567"),
}


@pytest.mark.parametrize("twin", [False, True])
@pytest.mark.parametrize("damage", [*list(DAMAGED_UNIT_LISTS)[:2], *(pytest.param(d, marks=pytest.mark.slow)
                                                                      for d in list(DAMAGED_UNIT_LISTS)[2:])])
def test_a_unit_list_naming_a_file_outside_the_site_is_never_acted_on_even_under_the_users_own_tag(trust_project,
                                                                                                    damage, twin):
    """The build links, and in a tree it updates in place removes, the files its cache names for each unit: a
    unit list that names one outside the site or one no build writes (here with this user's own tag, as a
    damaged or hand-edited cache would carry it) is never acted on, and never stops the build.  The cache is
    thrown away, and the site built as without one."""
    from site_builder.build import BuildOptions, build
    from site_builder.options import BuildPolicy
    options = BuildOptions(bundles=trust_project / "bundles", output=trust_project / "site", trust=load_trust_set(),
                           search=False, policy=BuildPolicy(link_twin=twin))
    build(options)
    victim = trust_project / "victim" / "index.html"
    victim.parent.mkdir()
    victim.write_text("not the site's")
    db = sqlite3.connect(cache_folder(trust_project) / "cache.sqlite")
    ((build_id, data),) = db.execute("SELECT build_id, data FROM units").fetchall()
    edit = DAMAGED_UNIT_LISTS[damage]
    data = "\n".join(edit(line) for line in data.split("\n")).replace("/VICTIM", str(victim))
    tag = user_cache_key().bound_to(cache_context()).tag("units", build_id, data)
    db.execute("UPDATE units SET data=?, tag=? WHERE build_id=?", (data, tag, build_id))
    db.commit()
    db.close()
    (trust_project / "bundles" / REAL_FILES[1].name).unlink()
    again = build(options)
    assert victim.read_text() == "not the site's"
    assert again.changed and again.files_reused == 0  # (nothing reused: the cache was thrown away)
    build(BuildOptions(bundles=trust_project / "bundles", output=trust_project / "clean", trust=load_trust_set(),
                       search=False))
    assert tree(trust_project / "site") == tree(trust_project / "clean")


def _leaves(doc: object, value: object) -> object:
    """*doc* with each value that is no object or array replaced by *value* (its shape kept, its types not)."""
    if isinstance(doc, dict):
        return {k: _leaves(v, value) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_leaves(v, value) for v in doc]
    return value


@pytest.mark.parametrize("leaf", [[1, 2], *(pytest.param(v, marks=pytest.mark.slow) for v in (-1, None, {"a": 1}))],
                         ids=["array", "number", "null", "object"])
@pytest.mark.parametrize("name", ["files", "mirrored", "addresses", "previous_site", "inspections/", "rows/",
                                  "template_references", "no-op answer"])
def test_a_cache_document_of_another_shape_under_the_users_own_tag_costs_only_work(project, name, leaf):
    """Every document the cache keeps (all its parts), its values of another type but tagged with this user's
    key, as a builder's bug could leave it: the next build neither stops nor publishes anything else than a
    build without a cache, and where it cannot read such an entry, makes the cache anew rather than go without it
    (which every later build would do too, for the same entry)."""
    from site_builder.build import build, default_cache_dir
    out = project / "site"
    build(opts(project, out, both_keys()))
    (project / "bundles" / "gen4.json").write_bytes(make_bundle(4, variant=1))  # (the previous site now recorded)
    build(opts(project, out, both_keys()))
    key = user_cache_key().bound_to(cache_context())
    db = sqlite3.connect(default_cache_dir(out) / "cache.sqlite")
    if name == "no-op answer":
        (quick_key,), (doc,) = (db.execute("SELECT value FROM meta WHERE key=?", (n,)).fetchone()
                                for n in ("quick_key", "quick"))
        doc = json.dumps(_leaves(json.loads(doc), leaf))
        db.execute("UPDATE meta SET value=? WHERE key='quick'", (doc,))
        db.execute("UPDATE meta SET value=? WHERE key='quick_tag'", (key.tag("quick", quick_key, doc),))
    else:
        parts = [n for (n,) in db.execute("SELECT name FROM documents")
                 if n == name or name.endswith("/") and n.startswith(name)]  # (a document kept in parts: all)
        assert parts
        for part in parts:
            genuine = cache_document(db, part)[0]
            matched_by = {k: genuine[k] for k in ("marker", "trust", "build_key") if k in genuine}
            damaged = {**_leaves(genuine, leaf), **matched_by}  # (still the document for this output, keys, templates)
            plant_document(db, part, damaged, document_tag(key, part, damaged))
    db.commit()
    db.close()
    if name != "no-op answer":  # (the no-op answer is taken for inputs as they are)
        (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=1))
    report = build(opts(project, out, both_keys()))
    assert report.summary_line() and all(o.as_json() for o in report.outcomes)
    assert report.cache_note == ""  # (a cache holding an entry it cannot read is made anew, not gone without)
    build(opts(project, project / "clean", both_keys(), use_cache=False))
    assert tree(out) == tree(project / "clean")


def _every_mask(plan: dict, mask: int) -> None:
    for pid in plan["per_record"]:
        plan["per_record"][pid] = mask


PLAN_EDITS = {
    # a record's own addresses are a mask of five bits: -1 has every bit (addresses it shares, whose list pages
    # it would take), and a bit past the five names no address
    "mask-negative": lambda plan: _every_mask(plan, -1),
    "mask-past-the-five-addresses": lambda plan: _every_mask(plan, 1 << 5),
    # a shared address becomes a list page the build writes (and a later build removes): a plain path in the site
    "folder-outside": lambda plan: plan["shared"][0].__setitem__(0, "../escaped/"),
    "folder-out-through-another": lambda plan: plan["shared"][0].__setitem__(0, "arxiv/../../escaped/"),
    "folder-empty-part": lambda plan: plan["shared"][0].__setitem__(0, "arxiv//0903.10000/"),
    # the records a list page shows, by pith id: a number is none of them, and a string is no list of them
    "record-a-number": lambda plan: plan["shared"][0][2].__setitem__(0, 1),
    "records-a-string": lambda plan: plan["shared"][0].__setitem__(2, "".join(plan["shared"][0][2])),
}


@pytest.mark.parametrize("edit", list(PLAN_EDITS))
def test_a_short_address_plan_of_another_shape_is_planned_again_even_under_the_users_own_tag(project, edit):
    """The short-address plan the last build recorded, with values no build records (tagged with this user's
    key, as a builder's bug could leave it): the build neither stops nor writes outside the site, and the site
    matches one built without a cache."""
    from site_builder.build import build, default_cache_dir
    out = project / "site"
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, version=1))
    (project / "bundles" / "same-arxiv-version.json").write_bytes(make_bundle(2, record=1002, version=1))
    build(opts(project, out, both_keys()))
    db = sqlite3.connect(default_cache_dir(out) / "cache.sqlite")
    plan, _ = cache_document(db, "addresses")
    assert plan["shared"] and min(plan["per_record"].values()) < ALL_ADDRESSES  # (records that share addresses)
    PLAN_EDITS[edit](plan)
    plant_document(db, "addresses", plan, own_document_tag("addresses", plan))
    db.execute("DELETE FROM meta WHERE key LIKE 'quick%'")  # (the no-op answer would be taken before any plan)
    db.commit()
    db.close()
    build(opts(project, out, both_keys()))
    assert not (project / "escaped").exists()
    build(opts(project, project / "clean", both_keys(), use_cache=False))
    assert tree(out) == tree(project / "clean")


def _every_published(doc: dict, field: int, value: object) -> None:
    for entry in doc["published"].values():
        entry[field] = value


PREVIOUS_SITE_EDITS = {  # (each entry of "published": [sha256, built_at, event count])
    "built_at-a-number": lambda doc: _every_published(doc, 1, 20990101),
    "event-count-text": lambda doc: _every_published(doc, 2, "99"),
}


@pytest.mark.parametrize("edit", list(PREVIOUS_SITE_EDITS))
def test_a_record_of_the_previous_site_of_another_shape_is_read_from_its_manifest_even_under_the_users_own_tag(
        project, edit):
    """What the site in the output published is taken from the cache's record while its verification.json is the
    file that record was made for.  A record whose values are of another type (tagged with this user's key, as a
    builder's bug could leave it) is not taken: the manifest is read instead, so the build neither stops nor lets
    an older bundle replace the published one."""
    from site_builder.build import build, default_cache_dir
    out = project / "site"
    newer = make_bundle(4, variant=1)
    (project / "bundles" / "gen4.json").write_bytes(newer)
    build(opts(project, out, both_keys()))
    db = sqlite3.connect(default_cache_dir(out) / "cache.sqlite")
    doc, _ = cache_document(db, "previous_site")
    PREVIOUS_SITE_EDITS[edit](doc)
    plant_document(db, "previous_site", doc, own_document_tag("previous_site", doc))
    db.commit()
    db.close()
    (project / "bundles" / "gen4.json").write_bytes(make_bundle(4))  # (an older bundle of the record)
    report = build(opts(project, out, both_keys()))
    assert [w for w in report.warnings if "rollback refused" in w]
    assert newer in [p.read_bytes() for p in (out / "pith").glob("*/bundle.json")]


def test_a_result_filed_under_another_digest_is_not_taken_for_it_even_under_the_users_own_tag(project):
    """A verification result is taken for a file only where it is that file's digest's: one filed under another
    digest (tagged with this user's key, as a builder's bug could leave it) would publish one record's result
    for another's bytes.  It costs work only: the build matches one without a cache."""
    from site_builder.build import build, default_cache_dir
    out = project / "site"
    build(opts(project, out, both_keys()))
    db = sqlite3.connect(default_cache_dir(out) / "cache.sqlite")
    files, _ = cache_document(db, "files")
    victim, other = files["gen0.json"][1], files["gen1.json"][1]
    part = f"inspections/{victim[0]}"
    results, _ = cache_document(db, part)
    results["results"][victim] = cache_document(db, f"inspections/{other[0]}")[0]["results"][other]
    plant_document(db, part, results, own_document_tag(part, results))
    db.execute("DELETE FROM meta WHERE key LIKE 'quick%'")  # (the no-op answer would be taken before any result)
    db.commit()
    db.close()
    build(opts(project, out, both_keys()))
    build(opts(project, project / "clean", both_keys(), use_cache=False))
    assert tree(out) == tree(project / "clean")


def test_the_builders_own_cache_folder_is_made_private_and_links_at_its_names_are_removed(trust_project):
    """The folder beside the output is the builder's own: found writable by others (a umask of 002, a copy), it
    is made private and used; a link planted there at one of the cache's names (the database, its lock) is
    removed, never followed, so the build opens no file elsewhere and changes nothing the link leads to."""
    from site_builder.build import BuildOptions, build
    folder = cache_folder(trust_project)
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    elsewhere = trust_project / "elsewhere"
    elsewhere.mkdir()
    targets = {name: elsewhere / name for name in ("cache.sqlite", "cache.lock")}
    for name, target in targets.items():
        target.write_bytes(b"not the cache's")
        (folder / name).symlink_to(target)
    options = BuildOptions(bundles=trust_project / "bundles", output=trust_project / "site", trust=load_trust_set(),
                           search=False)
    report = build(options)
    assert report.cache_note == "" and folder.stat().st_mode & 0o777 == 0o755
    assert all(not (folder / name).is_symlink() for name in targets)
    assert all(target.read_bytes() == b"not the cache's" for target in targets.values())
    assert (folder / "cache.sqlite").stat().st_size > 0
    assert build(options).changed is False  # (the cache the first build kept answers the second)


def test_the_cache_keeps_only_what_the_two_trees_and_the_inputs_still_use(project):
    """A mirror's cache does not grow with its history: the verification result of a file that is gone (deleted,
    or changed to other bytes) is dropped from the cache, the list rows kept are those of the records shown now,
    and the unit lists kept are those of the two trees in the output folder (the site and the tree beside it
    that the next build updates), not of every build."""
    from site_builder.build import build, default_cache_dir
    from site_builder.stages.plan import read_build_id

    out = project / "site"
    build(opts(project, out, both_keys()))
    db_path = default_cache_dir(out) / "cache.sqlite"

    def stored() -> tuple[dict, set[str], set[str], set[str]]:
        """The file index, the digests whose results are kept, the build ids whose unit lists are, and the
        digests of the list rows kept."""
        db = sqlite3.connect(db_path)
        try:
            results, rows = set(), set()
            for (name,) in db.execute("SELECT name FROM documents WHERE name LIKE 'inspections/%'"):
                results |= set(cache_document(db, name)[0]["results"])
            for (name,) in db.execute("SELECT name FROM documents WHERE name LIKE 'rows/%'"):
                rows |= set(cache_document(db, name)[0]["rows"])
            return (cache_document(db, "files")[0], results,
                    {b for (b,) in db.execute("SELECT build_id FROM units")}, rows)
        finally:
            db.close()

    files, results, _, _ = stored()
    deleted, changed = files["gen0.json"][1], files["gen1.json"][1]
    assert {deleted, changed} <= results
    (project / "bundles" / "gen0.json").unlink()
    build(opts(project, out, both_keys()))
    (project / "bundles" / "gen1.json").write_bytes(make_bundle(1, variant=5))
    build(opts(project, out, both_keys()))
    (project / "bundles" / "gen2.json").write_bytes(make_bundle(2, variant=5))
    report = build(opts(project, out, both_keys()))
    files, results, build_ids, rows = stored()
    assert results == {sha for _, sha in files.values()} and deleted not in results and changed not in results
    assert build_ids == {read_build_id(out), read_build_id(project / ".site.prev")}
    assert len(rows) == report.count("published") == 9  # (one row a record shown; none of the records gone)
