"""The command line as a user runs it: a real subprocess, real exit codes and messages."""

import errno
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import REAL_FILES, ROOT, free_port, record_id, run_unprivileged, stand_in_pagefind
from signing import TestKey, sign_bundle, to_bytes
from site_builder import cli as cli_module
from site_builder.cli import NO_BUNDLES_FOLDER_HINT
from site_builder.parallel import MAX_JOBS


def cli(*args, cwd=None, env=None):
    """A command in its own process; one that does not end (a serve that should have refused to start) fails."""
    return subprocess.run([sys.executable, "-m", "site_builder", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def test_build_summary_line_and_exit_codes(bundles_dir, tmp_path):
    (bundles_dir / "bad.json").write_bytes(b'{"a": 1, "a": 2}')
    r = cli("build", "--bundles", bundles_dir, "--output", tmp_path / "site", "--no-search")
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("5 bundles read, 4 published, 1 rejected, 0 superseded, ") and "pages written in" in last
    assert "REJECTED bad.json: json_duplicate_key: duplicate key 'a'" in r.stderr
    r = cli("build", "--bundles", bundles_dir, "--output", tmp_path / "site", "--no-search", "--strict")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "search index" not in last
    (bundles_dir / "bad.json").unlink()  # (--strict fails a build for a rejection, not for being strict)
    r = cli("build", "--bundles", bundles_dir, "--output", tmp_path / "site", "--no-search", "--strict")
    assert r.returncode == 0 and " 0 rejected, " in r.stdout, r.stderr


@pytest.mark.slow  # (a second or more: left to the full suite)
def test_build_summary_reports_the_search_index_apart(bundles_dir, tmp_path):
    """Search indexing is timed on its own (it is not the builder's: Pagefind's), only when the index is made."""
    r = cli("build", "--bundles", bundles_dir, "--output", tmp_path / "site")
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"4 bundles read, .* pages written in [0-9.]+s \(search index [0-9.]+s\)", last), last
    r = cli("build", "--bundles", bundles_dir, "--output", tmp_path / "site")
    assert r.returncode == 0 and "search index" not in r.stdout  # up to date: nothing indexed


@pytest.mark.slow  # (a second or more: left to the full suite)
def test_usage_errors_exit_2(tmp_path):
    assert cli("build", "--bundles", tmp_path / "missing", "--output", tmp_path / "o").returncode == 2
    assert cli("build", "--no-such-flag").returncode == 2
    assert cli("verify").returncode == 2
    r = cli()  # (no command)
    assert r.returncode == 2 and "required: COMMAND" in r.stderr and "Traceback" not in r.stderr
    bad_key = tmp_path / "k.json"
    bad_key.write_text('{"key_id": "x", "public_key_hex": "abcd"}')
    r = cli("build", "--trusted-keys", bad_key, "--bundles", ROOT / "bundles", "--output", tmp_path / "o")
    assert r.returncode == 2 and "32 bytes" in r.stderr
    r = cli("verify", "--trusted-keys", bad_key, REAL_FILES[1])  # (one line on stderr, for verify as for build)
    assert r.returncode == 2 and r.stdout == "" and "32 bytes" in r.stderr and len(r.stderr.splitlines()) == 1
    for command in (("pull", "A" * 26), ("serve", "--bundles", ROOT / "bundles", "--output", tmp_path / "o")):
        r = cli(*command, "--trusted-keys", bad_key)  # (as for pull and serve, before they fetch or build)
        assert r.returncode == 2 and "32 bytes" in r.stderr and len(r.stderr.splitlines()) == 1, r
    missing = tmp_path / "none"
    for flags, said in ((("--bundles", missing), f"error: {missing}: bundles folder does not exist; name the folder "
                                                 f"of bundles with --bundles DIR, or fetch records into it with "
                                                 f"site-builder pull"),
                        (("--bundles", ROOT / "bundles", "--base-url", "javascript:x"),
                         "error: base URL 'javascript:x': only http and https are supported")):
        r = cli("serve", *flags, "--output", tmp_path / "o")  # (before it listens or builds)
        assert (r.returncode, r.stdout, r.stderr) == (2, "", said + "\n"), r
    assert not (tmp_path / "o").exists()


@pytest.mark.slow  # (a second or more: left to the full suite)
def test_verify_lines_json_and_exit_code(bundles_dir, tmp_path):
    r = cli("verify", bundles_dir)
    assert r.returncode == 0
    # (each file named, as a rejection names it: a folder's lines say which file holds which record)
    assert r.stdout.splitlines() == [f"OK {json.loads(p.read_bytes())['pith_number']} {bundles_dir / p.name}"
                                     for p in REAL_FILES]
    tampered = json.loads(REAL_FILES[0].read_bytes())
    tampered["links"]["resolver"] = "https://evil.example"
    bad = tmp_path / "bad.json"
    bad.write_bytes(to_bytes(tampered))
    r = cli("verify", bad, REAL_FILES[1])
    assert r.returncode == 1
    assert f"REJECTED {bad}: bundle_hash: bundle hashes to" in r.stdout
    r = cli("verify", "--json", bad, REAL_FILES[1])
    doc = json.loads(r.stdout)
    assert [x["status"] for x in doc["results"]] == ["rejected", "ok"]
    assert doc["results"][0]["check"] == "bundle_hash"
    assert doc["results"][1]["check"] is None and doc["results"][1]["reason"] is None  # (null, not "")
    assert [c["check"] for c in doc["results"][0]["failed_checks"]] == ["bundle_hash"]
    assert doc["results"][1]["failed_checks"] == []
    shapeless = tmp_path / "shapeless.json"  # (its structure fails: every later check is skipped, none failed)
    shapeless.write_bytes(b'{"bundle_type": "pith_open_graph_bundle"}')
    doc = json.loads(cli("verify", "--json", shapeless).stdout)
    assert [(c["check"], c["reason"]) for c in doc["results"][0]["failed_checks"]] == [
        ("structure", "bundle.bundle_version is missing")]
    # A file's name is the folder's to choose: in the JSON too, nothing of it reaches the terminal as it is (a C1
    # control, U+009B, starts an escape sequence in some terminals; JSON would write it raw, but as \u009b).
    hostile = tmp_path / "a\u009b31mred.json"
    hostile.write_bytes(REAL_FILES[1].read_bytes())
    r = cli("verify", "--json", hostile)
    assert r.stdout.isascii() and json.loads(r.stdout)["results"][0]["path"] == str(hostile)


@pytest.mark.slow
def test_verify_works_on_all_cores_and_reports_in_order(tmp_path):
    """A folder big enough for worker processes gives, line for line, what one process gives: files in name
    order, skipped ones in their place, tampered ones rejected; then the files named after it."""
    folder = tmp_path / "many"
    (folder / "sub").mkdir(parents=True)
    tampered = json.loads(REAL_FILES[0].read_bytes())
    tampered["links"]["resolver"] = "https://evil.example"
    for i in range(80):
        data = to_bytes(tampered) if i % 9 == 4 else REAL_FILES[i % len(REAL_FILES)].read_bytes()
        (folder / ("sub" if i % 2 else "") / f"{i:03d}.json").write_bytes(data)
    os.mkfifo(folder / "050-fifo.json")
    outputs = [cli("verify", folder, REAL_FILES[2], "--jobs", jobs) for jobs in (1, 2)]
    assert [r.returncode for r in outputs] == [1, 1]
    assert outputs[0].stdout == outputs[1].stdout
    expected = []  # (the folder's files by path, as the folder listing orders them, then the named file)
    for path in sorted([str(p) for p in folder.rglob("*.json")]):
        if path.endswith("fifo.json") or int(Path(path).stem) % 9 == 4:
            expected.append(f"REJECTED {path}: " + ("file_type" if "fifo" in path else "bundle_hash"))
        else:
            expected.append(f"OK {json.loads(Path(path).read_bytes())['pith_number']} {path}")
    expected.append(f"OK {json.loads(REAL_FILES[2].read_bytes())['pith_number']} {REAL_FILES[2]}")
    lines = outputs[1].stdout.splitlines()
    assert len(lines) == 82
    assert [": ".join(line.split(": ")[:2]) for line in lines] == expected  # (a rejection's reason left out)


def main_unprivileged(tmp_path: Path, *args: object) -> list[str]:
    """[exit code, stdout, stderr] of the command line run in a child process without root's right to read and
    search any folder, as a user runs it (its output sent to files)."""
    from site_builder.cli import main

    said = {name: tmp_path / name for name in ("stdout", "stderr", "code")}

    def command() -> None:
        for fd, name in ((1, "stdout"), (2, "stderr")):
            os.dup2(os.open(said[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        sys.stdout, sys.stderr = (open(fd, "w", closefd=False) for fd in (1, 2))
        code = main([str(arg) for arg in args])
        sys.stdout.flush()
        sys.stderr.flush()
        said["code"].write_text(str(code))
    run_unprivileged(command)
    return [said[name].read_text() for name in ("code", "stdout", "stderr")]


def test_verify_of_a_folder_it_cannot_list_exits_2_with_one_line(tmp_path):
    """A folder that exists but cannot be listed (no read permission): one line on stderr, nothing on stdout,
    exit 2, and no file of another argument verified."""
    refused = tmp_path / "refused"
    refused.mkdir()
    refused.chmod(0o300)
    try:
        said = main_unprivileged(tmp_path, "verify", REAL_FILES[0], refused)
    finally:
        refused.chmod(0o700)
    assert said == ["2", "", f"error: {refused}: cannot list bundles folder: Permission denied\n"]


def test_a_bundles_folder_this_user_may_not_open_is_one_line_for_build_and_serve(tmp_path):
    """A bundles folder inside a folder without search permission: the same line from build and serve (serve
    ended with a traceback), and no hint to name a folder or pull records, since there is one."""
    locked = tmp_path / "locked"
    (locked / "bundles").mkdir(parents=True)
    locked.chmod(0o600)
    try:
        for command in ("build", "serve"):
            said = main_unprivileged(tmp_path, command, "--bundles", locked / "bundles", "--output", tmp_path / "site",
                                     "--no-search")
            assert said == ["2", "", f"error: {locked / 'bundles'}: cannot open bundles folder: Permission denied\n"], \
                command
    finally:
        locked.chmod(0o700)
    assert not (tmp_path / "site").exists()


@pytest.mark.parametrize("command, named, said", [
    (("build", "--templates", "{named}"), "templates", "templates folder cannot be opened: Permission denied"),
    (("build", "--settings", "{named}"), "site.toml", "cannot open the settings file: Permission denied"),
    (("build", "--trusted-keys", "{named}"), "key.json", "cannot read: Permission denied"),
    (("build", "--output", "{named}"), "site", "cannot look at the output folder: Permission denied"),
    (("serve", "--output", "{named}"), "site", "cannot look at the output folder: Permission denied"),
    (("build", "--live", "{named}"), "site", "Permission denied; previous output left untouched"),
    (("verify", "{named}"), "bundle.json", "cannot open: Permission denied"),
])
def test_a_path_in_a_folder_this_user_may_not_search_is_one_line_and_exit_2(tmp_path, command, named, said):
    """Python's ``Path.exists()`` and ``is_dir()`` raise where a folder on the way cannot be searched (up to 3.13;
    from 3.14 on they say False): each of these ended with a traceback, said a key file that is there "No such
    file or directory", or took the output or live site for a folder not there yet (3.14: serve went on serving
    nothing, and a build checked no rollback against the live site, with a warning that it was not there)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    if named in ("templates", "site"):
        (locked / named).mkdir()
    else:
        (locked / named).write_text("{}")
    locked.chmod(0o600)
    args = [arg.replace("{named}", str(locked / named)) for arg in command]
    if command[0] != "verify":
        for option, value in (("--bundles", ROOT / "bundles"), ("--output", tmp_path / "out")):
            if option not in args:
                args += [option, str(value)]
        args.append("--no-search")
    try:
        result = main_unprivileged(tmp_path, *args)
    finally:
        locked.chmod(0o700)
    assert result == ["2", "", f"error: {locked / named}: {said}\n"]


def test_pull_into_a_bundles_path_that_is_a_file_exits_2_with_one_line(tmp_path):
    """A usage error of pull (``PullError``): one line on stderr, nothing on stdout, exit 2, nothing fetched."""
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    r = cli("pull", "--from", "http://127.0.0.1:9/", "--bundles", afile, "A" * 26)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"error: {afile}: --bundles names a file, not a folder\n"), r
    assert afile.read_text() == "mine\n"


def test_verify_with_trusted_test_key(tmp_path):
    key = TestKey()
    f = tmp_path / "mine.json"
    f.write_bytes(to_bytes(sign_bundle(json.loads(REAL_FILES[0].read_bytes()), key)))
    keyfile = key.write(tmp_path / "key.json")
    assert cli("verify", "--trusted-keys", keyfile, f).returncode == 0
    r = cli("verify", "--trusted-keys", keyfile, REAL_FILES[0])
    assert r.returncode == 1 and "key_pinned" in r.stdout


@pytest.mark.slow
def test_settings_file_and_flag_precedence(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "site.toml").write_text('title = "My Mirror"\nbase_url = "https://example.org/m/"\n')
    (project / "about.md").write_text("# About\n\nRun by [us](https://example.org). <script>alert(1)</script>\n"
                                      "[bad](javascript:alert(1))\n")
    r = cli("build", "--bundles", ROOT / "bundles", "--output", "out", "--no-search", cwd=project)
    assert r.returncode == 0, r.stderr
    home = (project / "out" / "index.html").read_text()
    assert "<title>My Mirror</title>" in home and 'href="/m/papers/"' in home
    about = (project / "out" / "about" / "index.html").read_text()
    assert '<a href="https://example.org">us</a>' in about
    assert "<script>alert" not in about and 'href="javascript:' not in about
    r = cli("build", "--bundles", ROOT / "bundles", "--output", "out", "--no-search", "--base-url", "/x/", cwd=project)
    assert 'href="/x/papers/"' in (project / "out" / "index.html").read_text()
    (project / "site.toml").write_text('titel = "typo"\n')
    r = cli("build", "--bundles", ROOT / "bundles", "--output", "out", cwd=project)
    assert r.returncode == 2 and "unknown setting(s): titel" in r.stderr


@pytest.mark.parametrize("line, error", [
    ("page_size = 0", "page_size must be an integer from 1 to 10,000"),
    ("page_size = true", "page_size must be an integer from 1 to 10,000"),
    ('search_shard_size = "5000"', "search_shard_size must be an integer from 1 to 10,000,000"),
    ("search_shard_size = 2.5", "search_shard_size must be an integer from 1 to 10,000,000"),
    ("search_max_shards = 2000", "search_max_shards must be an integer from 1 to 1,024"),
    ('title = 3', "title must be a string"),
    ('about_file = "/etc/hostname"', "about_file = '/etc/hostname' leads out of the folder the settings file is in; "
                                     "name a file or folder inside it"),
])
def test_a_bad_setting_is_one_line_naming_the_file(tmp_path, line, error):
    (tmp_path / "site.toml").write_text(line + "\n")
    r = cli("build", "--bundles", ROOT / "bundles", "--output", "out", "--no-search", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr == f"error: site.toml: {error}\n" and not (tmp_path / "out").exists()


def _run_on_terminal(*args) -> str:
    """Run the command line with a pseudo-terminal as stdout and stderr; everything it wrote there."""
    import pty
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "site_builder", *map(str, args)], stdout=slave, stderr=slave,
                            env={**os.environ, "TERM": "xterm", "COLUMNS": "120"})
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(120)
    os.close(master)
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_progress_bar_only_on_a_terminal_and_cache_saved_in_the_background(bundles_dir, tmp_path):
    on_terminal = _run_on_terminal("build", "--bundles", bundles_dir, "--output", tmp_path / "site", "--no-search",
                                   "--verbose")
    assert "verify" in on_terminal and "render" in on_terminal  # the bar's stage names
    assert "4 bundles read, 4 published" in on_terminal
    # The bar stops when the site is live, so the cache is saved by a detached process even on a terminal.
    assert "saved in the background" in on_terminal
    (bundles_dir / REAL_FILES[0].name).touch()
    piped = cli("build", "--bundles", bundles_dir, "--output", tmp_path / "site2", "--no-search", "--verbose")
    assert piped.returncode == 0
    assert not re.search(r"(verify|render).*\d+/\d+", piped.stderr) and "\x1b[" not in piped.stderr + piped.stdout
    assert "saved in the background" in piped.stderr
    # --verbose also says where the time went, stage by stage, on one line
    assert len(re.findall(r"^stages: \w+ \d+\.\d\ds", piped.stderr, re.M)) == 1, piped.stderr
    assert "stages:" not in cli("build", "--bundles", bundles_dir, "--output", tmp_path / "site2", "--no-search").stderr
    quiet = _run_on_terminal("build", "--bundles", bundles_dir, "--output", tmp_path / "site3", "--no-search",
                             "--quiet")
    assert "verify" not in quiet and quiet.strip().splitlines()[-1].startswith("4 bundles read")
    # While Pagefind makes the search index (minutes at 100,000 records) the bar says so, not "render" at its end.
    indexing = _run_on_terminal("build", "--bundles", bundles_dir, "--output", tmp_path / "site4")
    assert "indexing for search" in indexing and "(search index" in indexing.strip().splitlines()[-1]
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", indexing)
    assert re.search(r"indexing for search\W+\d+ s", plain) and "0/?" not in plain  # the seconds it takes
    assert "indexing for search" not in cli("build", "--bundles", bundles_dir, "--output", tmp_path / "site5").stderr
    # A site indexed in shards (here three, of one or two records) counts them.
    (tmp_path / "sharded.toml").write_text("search_shard_size = 1\n")
    sharded = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", _run_on_terminal(
        "build", "--bundles", bundles_dir, "--output", tmp_path / "site6", "--settings", tmp_path / "sharded.toml"))
    assert re.search(r"indexing for search\W+3/3", sharded)


@pytest.mark.slow
def test_help_documents_every_option_with_its_default():
    """``--help`` is the first manual a user reads: every option says what it does, and what it is when not
    given."""
    for command in ("build", "serve", "pull", "verify"):
        r = cli(command, "--help")
        assert r.returncode == 0
        text = " ".join(r.stdout.split())  # (argparse wraps the help)
        options = set(re.findall(r"\[(--[a-z-]+)", r.stdout.split("\n\n")[0]))
        assert options, r.stdout
        for option in options:
            described = re.search(rf"{option}(?:, -\w)?(?: [A-Z_]+)? (\S+)", text)
            assert described and not described.group(1).startswith("-"), f"{command} {option} has no help"
        assert not re.search(r"\(default: (None|False|\[\])\)", text), text  # (no default to name)
    build_help = " ".join(cli("build", "--help").stdout.split())
    assert "(default: bundles)" in build_help and "(default: output)" in build_help
    assert "(default: 8000)" in cli("serve", "--help").stdout


@pytest.mark.slow
def test_the_defaults_readme_shows_in_a_usage_line_are_the_ones_help_names():
    """README's usage lines show an option's default as its value (``[--retries 4]``): the same as --help's."""
    readme = (ROOT / "README.md").read_text()
    shown = [(command, option, value) for command, rest in re.findall(r"^site-builder (\w+) (.*(?:\n {10,}.*)*)",
                                                                       readme, re.M)
             for option, value in re.findall(r"\[(--[a-z-]+) ([0-9.]+)\]", rest)]
    assert {option for _, option, _ in shown} >= {"--port", "--host", "--timeout", "--retries", "--concurrency"}
    for command, option, value in shown:
        text = " ".join(cli(command, "--help").stdout.split())
        named = re.search(rf"{option} [A-Z_]+ .*?\(default: ([^)]+)\)", text)
        assert named and named.group(1) in (value, f"{value}.0"), (command, option, value)


@pytest.mark.slow
def test_numbers_out_of_range_are_usage_errors(tmp_path):
    for args, message in [(("build", "--jobs", "-1"), "argument --jobs: -1 is less than 0"),
                          (("build", "--jobs", "two"), "argument --jobs: 'two' is not a whole number"),
                          # (a pool forks its workers at once: a slip of the keyboard would fork ten thousand)
                          (("build", "--jobs", "10000"), f"argument --jobs: 10000 is more than {MAX_JOBS}"),
                          (("verify", "--jobs", str(MAX_JOBS + 1), "x"), f"{MAX_JOBS + 1} is more than {MAX_JOBS}"),
                          (("serve", "--port", "65536"), "argument --port: 65536 is not a TCP port"),
                          (("pull", "--concurrency", "0", "x"), "argument --concurrency: 0 is less than 1"),
                          (("pull", "--concurrency", "65", "x"), "argument --concurrency: 65 is more than 64"),
                          (("pull", "--timeout", "-5", "x"), "argument --timeout: -5 is not a positive number"),
                          (("pull", "--timeout", "nan", "x"), "argument --timeout: nan is not a positive number"),
                          (("pull", "--timeout", "0", "x"), "argument --timeout: 0 is not a positive number"),
                          (("pull", "--timeout", "soon", "x"), "argument --timeout: 'soon' is not a number of seconds"),
                          (("pull", "--deadline", "inf", "x"), "argument --deadline: inf is not a positive number"),
                          (("build", "--quiet", "--verbose"), "not allowed with argument")]:
        r = cli(*args, cwd=tmp_path)
        assert r.returncode == 2 and message in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
    # The bounds themselves are taken (an option is taken as it is read: the help after it is shown, exit 0).
    for args in (("serve", "--port", "65535"), ("serve", "--port", "0"), ("build", "--jobs", "0"),
                 ("build", "--jobs", str(MAX_JOBS)),
                 ("verify", "--jobs", "0"), ("pull", "--concurrency", "1"), ("pull", "--concurrency", "64"),
                 ("pull", "--retries", "0"),
                 ("pull", "--timeout", "0.5")):
        assert cli(*args, "--help", cwd=tmp_path).returncode == 0, args


@pytest.mark.slow
def test_a_named_settings_file_that_does_not_exist_is_an_error(bundles_dir, tmp_path):
    for command in ("build", "serve"):
        r = cli(command, "--bundles", bundles_dir, "--output", tmp_path / "site", "--settings", tmp_path / "sit.toml")
        assert r.returncode == 2 and r.stderr.strip() == f"error: {tmp_path / 'sit.toml'}: settings file does not exist"
    assert not (tmp_path / "site").exists()
    r = cli("build", "--bundles", bundles_dir, "--output", tmp_path / "site", "--no-search", cwd=tmp_path)
    assert r.returncode == 0, r.stderr  # the default site.toml is optional


def test_serve_says_at_once_that_its_port_is_taken(bundles_dir, tmp_path):
    """The port is taken before the first build, which takes seconds on a large mirror."""
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = cli("serve", "--bundles", bundles_dir, "--output", tmp_path / "site", "--port", port, "--no-search")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"error: cannot listen on 127.0.0.1:{port}: Address already in use"]
    assert not (tmp_path / "site").exists()  # nothing was built


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_name_the_output_streams_encoding_cannot_hold_is_shown_escaped(bundles_dir, encoding):
    """A terminal that is not UTF-8 (``LC_ALL=en_US.ISO-8859-1``) could not hold a file name in Chinese:
    ``verify`` ended with a UnicodeEncodeError at its line."""
    (bundles_dir / "\u00e9\u4eba.json").write_text("{}")
    r = subprocess.run([sys.executable, "-m", "site_builder", "verify", str(bundles_dir)], capture_output=True,
                       env={**os.environ, "PYTHONIOENCODING": encoding}, timeout=300)
    out, err = r.stdout.decode(encoding), r.stderr.decode(encoding)
    assert r.returncode == 1 and "Traceback" not in err, err
    shown = {"ascii": "\\xe9\\u4eba.json", "latin-1": "\u00e9\\u4eba.json"}[encoding]
    assert out.splitlines()[-1] == f"REJECTED {bundles_dir}/{shown}: structure: bundle.bundle_type is missing"


# serve as Python runs it, and with room to recurse (as os.walk has from Python 3.12 on, where it recurses no more)
@pytest.mark.parametrize("recursion_limit", [None, 20_000])
def test_serve_watches_a_folder_nested_a_thousand_deep_or_says_in_one_line_that_it_cannot(bundles_dir, tmp_path,
                                                                                         nest_deep, recursion_limit):
    """The watcher walks what it watches with ``os.walk``, which recursed before Python 3.12: a folder nested a
    thousand deep was a traceback there.  The build reads it (a bundle at the bottom is one like any other); serve
    either watches it, and builds again when a bundle is saved at the bottom, or stops with one line saying
    which folder it cannot watch."""
    deepest = nest_deep(bundles_dir / "deep")
    (deepest / "x.json").write_text("{}")
    r = cli("build", "--bundles", bundles_dir, "--output", tmp_path / "site", "--no-search")
    assert r.returncode == 0 and r.stdout.startswith("5 bundles read, 4 published, 1 rejected"), r.stderr
    start = (["-m", "site_builder"] if recursion_limit is None else
             ["-c", f"import sys; sys.setrecursionlimit({recursion_limit}); from site_builder.cli import run; run()"])
    proc = subprocess.Popen([sys.executable, *start, "serve", "--bundles", bundles_dir, "--output",
                             tmp_path / "site", "--port", str(free_port()), "--no-search"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    said: queue.Queue = queue.Queue()

    def read_what_serve_says() -> None:
        with proc.stderr:  # (closed at its end, which only this thread knows)
            for line in proc.stderr:
                said.put(line.rstrip("\n"))
    threading.Thread(target=read_what_serve_says, daemon=True).start()

    def next_line(timeout=60) -> str | None:  # (None: serve ended)
        while True:
            try:
                return said.get(timeout=0.2)
            except queue.Empty:
                if proc.poll() is not None and said.empty():
                    return None
                timeout -= 0.2
                assert timeout > 0, "serve neither served nor stopped"
    try:
        lines = []
        while (line := next_line()) is not None and not line.startswith(f"serving {tmp_path / 'site'} at "):
            lines.append(line)
        if line is None:  # it cannot watch the folder: one line, naming it
            assert recursion_limit is None, lines
            assert proc.wait() == 2 and not any("Traceback" in x for x in lines), lines
            assert lines[-1] == (f"error: {bundles_dir}: cannot watch it for changes: its folders nest too deep "
                                 f"(over ~900 levels); move what is that deep out of it")
        else:  # it watches it: a bundle saved at the bottom is built
            shutil.copy(REAL_FILES[0], deepest / "y.json")
            while not ((line := next_line()) or "").startswith("[change]"):
                assert line is not None, "serve ended"
            assert "6 bundles read, 4 published, 1 rejected, 1 superseded" in line, line
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(30)


def test_serve_on_a_host_that_is_no_host_name_is_one_line(bundles_dir, tmp_path):
    """Python's resolver raises UnicodeError, not OSError, for a name with an empty label: it was a traceback."""
    r = cli("serve", "--bundles", bundles_dir, "--output", tmp_path / "site", "--host", "mirror..local", "--no-search")
    assert (r.returncode, r.stderr) == (2, "error: cannot listen on mirror..local:8000: not a host name\n"), r
    assert not (tmp_path / "site").exists()


def test_a_full_disk_is_one_line_and_the_previous_site_stays(bundles_dir, tmp_path, monkeypatch, capsys):
    """An I/O error while writing (here the disk filling up) ends the build with one line naming the file; the
    previous site is as it was and no staging tree is left behind."""
    out = tmp_path / "site"
    args = ["build", "--bundles", str(bundles_dir), "--output", str(out), "--no-search", "--no-cache"]
    assert cli_module.main(args) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    (bundles_dir / REAL_FILES[0].name).write_bytes(to_bytes(sign_bundle(json.loads(REAL_FILES[0].read_bytes()),
                                                                         TestKey())))  # a change to write

    def full(fd, data):  # (as the disk says it: no file named)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "write", full)
    capsys.readouterr()
    assert cli_module.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.fullmatch(rf"error: {re.escape(str(tmp_path))}/\.site\.\S+: No space left on device "
                                          r"\(of bytes or inodes: see df -h and df -i\); "
                                          r"previous output left untouched", err[0]), err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".site.")) == [".site.lock"]


def test_a_template_that_fails_as_it_runs_is_one_line_naming_its_file_and_line(bundles_dir, tmp_path, capsys):
    """A typo in a template of the user's (a name that is not defined) stops the build with one line naming
    the template's file and line, and the site in the output is kept."""
    (tmp_path / "templates").mkdir()
    out = tmp_path / "site"
    args = ["build", "--bundles", str(bundles_dir), "--output", str(out), "--no-search",
            "--templates", str(tmp_path / "templates")]
    assert cli_module.main(args) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    home = tmp_path / "templates" / "home.html"
    home.write_text("{% extends 'base.html' %}\n{% block main %}\n<p>{{ recnet|length }}</p>\n{% endblock %}\n")
    capsys.readouterr()
    assert cli_module.main(args) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {home}:3: 'recnet' is undefined; previous output left untouched"]
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("bad_file", ["about.md", "templates/404.html"])
def test_a_project_file_that_is_not_utf8_is_one_line_naming_it_and_the_site_is_kept(bundles_dir, tmp_path, capsys,
                                                                                    bad_file):
    """The about page and the templates are read as UTF-8 text: one that is not (saved in Latin-1, say) stops
    the build with one line naming the file and the first bad byte, and the site in the output is kept (it
    stopped the build with a UnicodeDecodeError's traceback)."""
    (tmp_path / "site.toml").write_text('title = "Mirror"\n')
    (tmp_path / "templates").mkdir()
    out = tmp_path / "site"
    args = ["build", "--bundles", str(bundles_dir), "--output", str(out), "--no-search",
            "--settings", str(tmp_path / "site.toml"), "--templates", str(tmp_path / "templates")]
    assert cli_module.main(args) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    (tmp_path / bad_file).write_bytes("<p>Café \u2014 ".encode("utf-8") + b"caf\xe9</p>\n")
    capsys.readouterr()
    assert cli_module.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    where = f"{tmp_path / bad_file}:1" if bad_file.startswith("templates") else str(tmp_path / bad_file)
    assert err == [f"error: {where}: not UTF-8 text (invalid continuation byte at byte offset 16); previous "
                   f"output left untouched"]
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.slow  # (a second or more: left to the full suite)
def test_a_build_without_a_full_base_url_says_once_that_a_deploy_should_set_one(bundles_dir, tmp_path):
    for base, said in [(None, True), ("https://mirror.example.org/", False)]:
        flags = ["--base-url", base] if base else []
        proc = cli("build", "--bundles", bundles_dir, "--output", tmp_path / f"out{said}", "--no-search", *flags)
        notes = [line for line in proc.stderr.splitlines() if line.startswith("NOTE base_url")]
        assert proc.returncode == 0 and len(notes) == (1 if said else 0), proc.stderr
    proc = cli("build", "--bundles", bundles_dir, "--output", tmp_path / "quiet", "--no-search", "--quiet")
    assert "NOTE" not in proc.stderr


def test_a_build_says_why_it_linked_no_twin(bundles_dir, tmp_path, free_inodes, capsys):
    """Where the output's file system is short of inodes (tmpfs counts hard links) the build links no twin and
    says so in one line, unless --quiet; with room, it says nothing of it."""
    free_inodes["count"] = 100
    for name, flags, said in [("a", [], True), ("b", ["--quiet"], False)]:
        args = ["build", "--bundles", str(bundles_dir), "--output", str(tmp_path / name), "--no-search", *flags]
        assert cli_module.main(args) == 0
        notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("NOTE no twin")]
        assert len(notes) == (1 if said else 0)
        assert all(re.fullmatch(rf"NOTE no twin linked: {re.escape(str(tmp_path))} has 100 inodes free, and a site "
                                r"this size with its twin wants [1-9][0-9,]*; the next build, which needs room for a "
                                r"second tree, may run out of them \(on tmpfs every hard link takes one: see df -i\)",
                                note) for note in notes), notes
        assert not (tmp_path / f".{name}.prev").exists()
    free_inodes["count"] = 10**6
    args = ["build", "--bundles", str(bundles_dir), "--output", str(tmp_path / "c"), "--no-search"]
    assert cli_module.main(args) == 0
    assert "NOTE no twin" not in capsys.readouterr().err and (tmp_path / ".c.prev").is_dir()


def test_an_output_that_cannot_be_made_is_one_line(bundles_dir):
    r = cli("build", "--bundles", bundles_dir, "--output", "/proc/no-such-site", "--no-search")
    assert r.returncode == 2
    assert r.stderr.strip() == "error: /proc/no-such-site: cannot write beside the output folder: No such file or directory"


def test_a_file_put_in_the_output_is_one_line_naming_it_escaped_and_exit_2(bundles_dir, tmp_path):
    site = tmp_path / "site"
    assert cli("build", "--bundles", bundles_dir, "--output", site, "--no-search").returncode == 0
    (site / os.fsdecode(b"CNAME\x1b[2J\xff")).write_text("mirror.example.org\n")
    r = cli("build", "--bundles", bundles_dir, "--output", site, "--no-search")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"error: {site}/CNAME\\x1b[2J\\xff: not part of the site nor of the static folder")


@pytest.mark.parametrize("cache", [True, False])
def test_an_output_whose_folders_are_missing_is_made_with_them(bundles_dir, tmp_path, cache):
    """``--output`` may name a folder whose parents do not exist yet (a fresh CI runner's ``public/site``): they
    are made, with the cache beside them or without one (``--no-cache``: nothing else makes them)."""
    out = tmp_path / "new" / "deeper" / "site"
    args = ["build", "--bundles", str(bundles_dir), "--output", str(out), "--no-search",
            *([] if cache else ["--no-cache"])]
    assert cli_module.main(args) == 0
    assert (out / "index.html").is_file() and (out / "verification.json").is_file()


def test_version_names_the_code_it_runs():
    import site_builder
    r = cli("--version")
    assert r.returncode == 0
    assert r.stdout.strip() == f"site-builder {site_builder.__version__}+{site_builder.builder_identity().split('+')[1]}"
    assert re.fullmatch(r"site-builder \d+\.\d+\.\d+\+[0-9a-f]{16}", r.stdout.strip())


@pytest.mark.parametrize("dies, line", [
    ("os.kill(os.getpid(), signal.SIGKILL)",  # as the kernel's out-of-memory killer ends it
     r"error: search index: pagefind was killed by SIGKILL \(out of memory\? Pagefind holds a whole index in "
     r"memory, ~90 KB a record page: see dmesg, index in smaller shards \(search_shard_size, search_max_shards\), "
     r"or build with --no-search\); previous output left untouched"),
    ("sys.exit('Error: cannot write the index')",
     r"error: search index: pagefind failed: Error: cannot write the index; previous output left untouched"),
])
@pytest.mark.slow
def test_a_failed_search_index_is_one_line_and_the_previous_site_stays(bundles_dir, tmp_path, dies, line):
    """Pagefind is a program of its own: when it fails, or the system kills it (at 100,000 records it peaks at
    8.6 GB), the build stops with one line saying why, exit 2, and the live site is as it was."""
    out = tmp_path / "site"
    r = cli("build", "--bundles", bundles_dir, "--output", out)
    assert r.returncode == 0, r.stderr
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    (bundles_dir / REAL_FILES[0].name).write_bytes(to_bytes(sign_bundle(json.loads(REAL_FILES[0].read_bytes()),
                                                                         TestKey())))  # a change to index
    stand_in = stand_in_pagefind(tmp_path / "fake", f"import os, signal, sys\n{dies}\n")
    r = cli("build", "--bundles", bundles_dir, "--output", out, env={**os.environ, "PYTHONPATH": stand_in})
    assert r.returncode == 2, r.stderr
    err = r.stderr.strip().splitlines()
    assert [e for e in err if e.startswith("error:")] == err[-1:] and re.fullmatch(line, err[-1]), err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert not [p.name for p in tmp_path.iterdir() if ".staging-" in p.name]


def test_a_build_says_why_it_reused_nothing_of_an_output_others_may_write_to(bundles_dir, tmp_path):
    out = tmp_path / "site"
    assert cli("build", "--bundles", bundles_dir, "--output", out, "--no-search").returncode == 0
    (bundles_dir / REAL_FILES[0].name).unlink()
    out.chmod(0o775)
    r = cli("build", "--bundles", bundles_dir, "--output", out, "--no-search")
    assert r.returncode == 0
    assert [line for line in r.stderr.splitlines() if line.startswith(f"NOTE {out}: others may write to it")]


@pytest.mark.slow  # (seven builds on the command line)
def test_what_a_build_says_by_default_with_quiet_and_with_verbose(bundles_dir, tmp_path):
    """A CI log shows what went wrong and what the build did otherwise than asked: rejections always; the files
    superseded, the notes and "up to date" unless --quiet; a line per published file only with --verbose."""
    copy = bundles_dir / "copy.json"
    copy.write_bytes(REAL_FILES[0].read_bytes())  # (the same record twice: one of the two is superseded)
    (bundles_dir / "bad.json").write_bytes(b'{"a": 1, "a": 2}')
    shared = tmp_path / "shared-cache"
    shared.mkdir()
    shared.chmod(0o1777)  # (a cache folder others may write to is not used, and a note says so)

    def run(output, *flags):
        r = cli("build", "--bundles", bundles_dir, "--output", tmp_path / output, "--no-search", *flags)
        assert r.returncode == 0, r.stderr
        return r.stdout.splitlines(), r.stderr.splitlines()

    rejected = "REJECTED bad.json: json_duplicate_key: duplicate key 'a'"
    out, err = run("site")
    superseded = [line for line in err if line.startswith("SUPERSEDED ")]
    assert rejected in err and len(superseded) == 1
    notes = [line for line in err if line.startswith("NOTE")]  # (a site without a full base URL: one note)
    assert len(notes) == 1 and notes[0].startswith("NOTE base_url / is not a full URL"), notes
    assert not [line for line in out if line.startswith("OK ")] and not [line for line in err if "stages:" in line]
    assert not [line for line in err if "saved in the background" in line]  # (said with --verbose only)
    loser = superseded[0].split()[1].rstrip(":")
    assert loser in (copy.name, REAL_FILES[0].name)
    _, err = run("site")
    assert "output is up to date: nothing to write" in err
    _, err = run("unshared", "--cache-dir", shared)
    assert any(line.startswith("NOTE no build cache: ") for line in err)

    _, err = run("quiet", "--quiet", "--cache-dir", shared)
    assert rejected in err and not [line for line in err if line.startswith(("SUPERSEDED", "NOTE"))]
    run("quiet", "--quiet")  # (built again, now with a cache)
    _, err = run("quiet", "--quiet")
    assert "output is up to date: nothing to write" not in err and rejected in err

    out, err = run("verbose", "--verbose")
    said = {line.split()[2]: line.split()[1] for line in out if line.startswith("OK ")}
    published = {p.name for p in bundles_dir.iterdir()} - {"bad.json", loser}
    assert set(said) == published and len(said) == 4
    numbers = {p.name: json.loads(p.read_bytes())["pith_number"] for p in bundles_dir.iterdir() if p.name in published}
    assert said == numbers


def test_a_path_that_is_not_there_is_one_line_and_exit_2(bundles_dir, tmp_path):
    """A folder or file named on the command line that does not exist (or a file named as a folder) is a usage
    error naming it; a link named to ``verify`` is not that (it is there): it is reported as the bundles folder
    would report it."""
    missing, empty, a_file = tmp_path / "missing", tmp_path / "empty", tmp_path / "base.html"
    a_file.write_text("<html>a template, not a folder of them</html>\n")
    (empty / "notes").mkdir(parents=True)
    (empty / "notes" / "readme.txt").write_text("no bundles here\n")
    for args, line in [(("build", "--bundles", bundles_dir, "--output", tmp_path / "site", "--templates", missing),
                        f"error: {missing}: templates folder does not exist"),
                       (("serve", "--bundles", missing, "--output", tmp_path / "site"),
                        f"error: {missing}: bundles folder does not exist; {NO_BUNDLES_FOLDER_HINT}"),
                       (("build", "--bundles", missing, "--output", tmp_path / "site"),
                        f"error: {missing}: bundles folder does not exist; {NO_BUNDLES_FOLDER_HINT}"),
                       (("serve", "--bundles", bundles_dir, "--output", tmp_path / "site", "--templates", missing),
                        f"error: {missing}: templates folder does not exist"),
                       (("build", "--bundles", bundles_dir, "--output", tmp_path / "site", "--templates", a_file),
                        f"error: {a_file}: templates folder is a file, not a folder"),
                       (("build", "--bundles", a_file, "--output", tmp_path / "site"), f"error: {a_file}: not a folder"),
                       (("serve", "--bundles", a_file, "--output", tmp_path / "site"), f"error: {a_file}: not a folder"),
                       (("serve", "--bundles", bundles_dir, "--output", bundles_dir),  # (a folder that is no site)
                        f"error: {bundles_dir}: folder is not empty and was not made by site-builder (no "
                        f"verification.json of its own); nothing was changed: choose another --output or empty it"),
                       (("verify", bundles_dir, missing), f"error: {missing}: no such file or folder"),
                       (("verify", bundles_dir, empty), f"error: {empty}: no bundle files (*.json) in it or its "
                                                        f"subfolders")]:  # (a check of nothing is no pass)
        r = cli(*args, cwd=tmp_path)
        assert r.returncode == 2 and r.stderr.splitlines() == [line] and r.stdout == "", (args, r.stderr)
    assert not (tmp_path / "site").exists()
    (tmp_path / "dangling").symlink_to(missing)
    os.mkfifo(tmp_path / "fifo")
    for templates, what in [("dangling", "is a link to nothing"), ("fifo", "is not a folder")]:
        r = cli("build", "--bundles", bundles_dir, "--output", tmp_path / "site", "--templates", tmp_path / templates)
        assert r.returncode == 2 and r.stderr.splitlines() == [
            f"error: {tmp_path / templates}: templates folder {what}"], r.stderr
    (tmp_path / "link.json").symlink_to(missing)
    (tmp_path / "linked").symlink_to(bundles_dir)  # (a link to a folder of bundles: not walked either)
    for link in ("link.json", "linked"):
        r = cli("verify", tmp_path / link)
        assert r.returncode == 1 and r.stdout.splitlines() == [
            f"REJECTED {tmp_path / link}: file_type: a symbolic link (not followed)"], r.stdout + r.stderr


def test_a_bug_of_the_builder_is_a_traceback_one_line_and_exit_70_not_strict_modes_1(bundles_dir, tmp_path):
    """An error no input explains (the builder's own) must not read as ``--strict``'s "a bundle was rejected"
    to a CI job: exit 70 (sysexits' EX_SOFTWARE), the traceback, and a line saying what it is."""
    planted = ("import sys, site_builder.cli as cli\n"
               "def build(options):\n    raise RuntimeError('planted')\n"
               "cli.build = build\ncli.run()\n")
    r = subprocess.run([sys.executable, "-c", planted, "build", "--bundles", str(bundles_dir), "--output",
                        str(tmp_path / "site"), "--strict"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 70 and r.stdout == "", r
    assert "Traceback" in r.stderr and "RuntimeError: planted" in r.stderr
    assert r.stderr.splitlines()[-1].startswith("error: an internal error of site-builder (a bug, not a problem with")


def test_ctrl_c_during_a_command_is_one_line_and_exit_130(bundles_dir, tmp_path, monkeypatch, capsys):
    def interrupted(options):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli_module, "build", interrupted)
    assert cli_module.main(["build", "--bundles", str(bundles_dir), "--output", str(tmp_path / "site")]) == 130
    said = capsys.readouterr()
    assert said.err == "interrupted\n" and said.out == ""


def test_serve_without_flags_listens_where_serve_options_say(tmp_path, monkeypatch):
    """The command line and ``ServeOptions`` name one host, port and search default (options.py), so that a
    library user and the command line serve alike."""
    from site_builder import serving

    import signal

    asked = []
    monkeypatch.setattr(serving, "serve", lambda options, open_browser: asked.append(options) or 0)
    monkeypatch.setattr(signal, "signal", lambda *handler: None)  # (this process's SIGTERM left as it is)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bundles").mkdir()
    assert cli_module.main(["serve"]) == 0
    (options,) = asked
    plain = serving.ServeOptions(options.bundles, options.output, options.templates, options.settings,
                                 options.trusted_keys)
    assert (options.host, options.port, options.search) == (plain.host, plain.port, plain.search) \
        == ("127.0.0.1", 8000, True)


def test_what_a_command_prints_reaches_a_pipe_where_python_buffers_it(bundles_dir, tmp_path):
    """A command ends with ``os._exit`` (a build's objects are not torn down one by one), which flushes nothing:
    what it printed is flushed first, or a pipe (a CI log, ``| tee``) gets nothing of what Python buffered."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    r = cli("verify", bundles_dir, env=env)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 4 and r.stdout.startswith("OK pith:"), r
    r = cli("build", "--bundles", bundles_dir, "--output", tmp_path / "site", "--no-search", env=env)
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1].startswith("4 bundles read, 4 published"), r


def test_pull_says_each_record_it_could_not_take_and_exits_1(tmp_path):
    """``pull`` prints what it fetched (unless quiet), every record rejected or failed (always), and its summary
    line last on stdout; any rejected or failed record makes the exit status 1."""
    from browser import serve

    good, tampered = (json.loads(path.read_bytes()) for path in REAL_FILES[:2])
    ids = [record_id(b) for b in (good, tampered)]
    served = tmp_path / "served"
    for pid, path in zip(ids, REAL_FILES[:2]):
        (served / "pith" / pid).mkdir(parents=True)
        raw = path.read_bytes()
        if pid == ids[1]:  # (its signature no longer holds)
            raw = raw.replace(b'"title":"', b'"title":"EVIL ', 1)
        (served / "pith" / pid / "bundle.json").write_bytes(raw)
    missing = "A" * 26
    with serve(served) as url:
        for quiet in ((), ("--quiet",)):
            r = cli("pull", "--from", url, "--bundles", tmp_path / f"pulled{len(quiet)}", "--retries", "0",
                    "--deadline", "60", *quiet, *ids, missing)
            assert r.returncode == 1, r
            told = sorted(line.split(":", 1)[0] for line in r.stderr.splitlines())
            fetched = [] if quiet else [f"FETCHED {ids[0]}"]
            assert told == sorted([f"FAILED {missing}", f"REJECTED {ids[1]}", *fetched])
            assert r.stdout.splitlines()[-1] == ("1 fetched, 0 unchanged, 0 kept (local copy newer), 1 rejected, "
                                                 "1 failed")
        failed_only = cli("pull", "--from", url, "--bundles", tmp_path / "pulled0", "--retries", "0", missing)
        r = cli("pull", "--from", url, "--bundles", tmp_path / "pulled0", "--retries", "0", ids[0])
    assert failed_only.returncode == 1 and failed_only.stdout.splitlines()[-1].endswith(" 0 rejected, 1 failed")
    assert r.returncode == 0 and r.stdout.splitlines()[-1].startswith("0 fetched, 1 unchanged"), r


def test_starting_the_command_line_runs_no_other_program(tmp_path):
    """Loading the command line (every command's start) runs nothing but this process: no helper program (the C
    library found by ``ldconfig``), no child.  Python's audit hooks see every process a module would start."""
    watch = ("import sys\n"
             "started = []\n"
             "sys.addaudithook(lambda event, args: started.append(f'{event} {args!r}') if event in\n"
             "    ('subprocess.Popen', 'os.posix_spawn', 'os.fork', 'os.exec', 'os.system') else None)\n"
             "import site_builder.cli\n"
             "print(started)\n")
    out = subprocess.run([sys.executable, "-c", watch], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("json_output", [False, True])
def test_output_read_by_a_program_that_stops_early_ends_quietly(bundles_dir, json_output):
    """``site-builder verify bundles | head -1``: once the reader has gone, the command ends as a program SIGPIPE
    ends (141, as the shell reports it), without a traceback on the terminal."""
    many = [bundles_dir] * 400  # (more than a pipe holds, so that a write finds the reader gone)
    with subprocess.Popen([sys.executable, "-m", "site_builder", "verify", *(["--json"] if json_output else []),
                           *map(str, many)], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        proc.stdout.readline()
        proc.stdout.close()
        errors = proc.stderr.read().decode()
        assert proc.wait(timeout=300) == 141
    assert "Traceback" not in errors and "BrokenPipe" not in errors, errors
