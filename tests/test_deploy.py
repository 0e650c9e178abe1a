"""Publishing: the ready GitHub Pages workflow, and a sub-path site served the way Pages serves it."""

import re
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request

import pytest
import yaml

from browser import serve
from conftest import REAL_FILES, ROOT, record_id

WORKFLOW = ROOT / ".github" / "workflows" / "pages.yml"


def test_pages_workflow_has_the_required_steps_and_minimal_permissions():
    wf = yaml.safe_load(WORKFLOW.read_text())
    triggers = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads the key `on` as true
    assert "push" in triggers and "schedule" in triggers
    assert wf["permissions"] == {"contents": "read"}
    build, deploy = wf["jobs"]["build"], wf["jobs"]["deploy"]
    uses = [s.get("uses", "") for s in build["steps"]]
    runs = " ".join(s.get("run", "") for s in build["steps"])
    assert any(u.startswith("actions/checkout@") for u in uses)
    assert "pip install ." in runs and "site-builder pull" in runs
    assert "site-builder build --strict" in runs and "--base-url" in runs
    assert any(u.startswith("actions/configure-pages@") for u in uses)
    upload = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert upload["with"]["include-hidden-files"] is True and upload["with"]["path"] == "output"
    assert deploy["needs"] == "build"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in deploy["steps"])
    assert "pages" not in build.get("permissions", {})


# The first major of each action the workflows use that runs on Node.js 24: GitHub's runners run no Node.js 20
# since 2026-09-16 (an action made for it is forced onto Node.js 24 with a warning, "may not work as expected").
NODE_24_MAJORS = {"actions/checkout": 5, "actions/setup-python": 6, "actions/configure-pages": 6,
                  "actions/upload-pages-artifact": 5, "actions/deploy-pages": 5, "actions/cache": 5}


@pytest.mark.parametrize("workflow", ["pages.yml", "tests.yml"])
def test_the_workflows_use_only_actions_made_for_the_runners_node(workflow):
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / workflow).read_text())
    uses = [step["uses"] for job in wf["jobs"].values() for step in job["steps"] if "uses" in step]
    assert uses
    for use in uses:
        action, _, version = use.partition("@")
        assert action in NODE_24_MAJORS and int(version.lstrip("v").split(".")[0]) >= NODE_24_MAJORS[action], use


def test_the_test_workflow_runs_on_every_system_readmes_set_up_commands_are_for():
    """README promises its two set-up commands on a fresh Debian 12 or 13 and Ubuntu 24.04 or 26.04: the test
    workflow runs README's test command in a container of each."""
    promised = re.search(r"Both are for a fresh (.+?), with the system Python", (ROOT / "README.md").read_text(),
                         re.S).group(1)
    systems = {f"{name.lower()}:{version}" for name, versions in re.findall(r"(Debian|Ubuntu) ([\d.]+(?: or [\d.]+)*)",
                                                                          promised)
               for version in versions.split(" or ")}
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "tests.yml").read_text())
    assert systems == {"debian:12", "debian:13", "ubuntu:24.04", "ubuntu:26.04"}
    assert set(wf["jobs"]["test"]["strategy"]["matrix"]["image"]) == systems


def fetch(url):
    try:
        with urllib.request.urlopen(url) as r:
            return r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type"), exc.read()


@pytest.mark.slow  # (a second or more: left to the full suite)
def test_sub_path_site_served_end_to_end(tmp_path):
    out = tmp_path / "output"
    r = subprocess.run([sys.executable, "-m", "site_builder", "build", "--strict", "--bundles", str(ROOT / "bundles"),
                        "--output", str(out), "--base-url", "https://octo.github.io/mirror/"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    raw = REAL_FILES[0].read_bytes()
    pith_id = record_id(raw)
    with serve(out, "/mirror/") as url:
        status, ctype, body = fetch(url + f"pith/{pith_id}/")
        assert status == 200 and b"Verified by this mirror" in body and b'href="/mirror/assets/style.css"' in body
        status, ctype, body = fetch(url + f".well-known/pith/{pith_id}/bundle.json")
        assert status == 200 and ctype == "application/json" and body == raw
        status, _, body = fetch(url + f"pith/{pith_id[:8]}/")
        assert status == 200 and f'url=/mirror/pith/{pith_id}/'.encode() in body
        status, _, body = fetch(url + "no/such/page/")
        assert status == 404 and b"Not found" in body
    assert (out / ".nojekyll").is_file()


def test_pages_artifact_holds_every_file_in_full(tmp_path):
    """The output shares inodes (a record's bundle is one file at two paths); a Pages artifact must hold no
    links.  Pack it with the command actions/upload-pages-artifact runs and read it back."""
    out = tmp_path / "output"
    r = subprocess.run([sys.executable, "-m", "site_builder", "build", "--no-search", "--bundles",
                        str(ROOT / "bundles"), "--output", str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    artifact = tmp_path / "artifact.tar"
    subprocess.run(["tar", "--dereference", "--hard-dereference", "--directory", str(out), "-cf", str(artifact),
                    "--exclude=.git", "--exclude=.github", "."], check=True)
    with tarfile.open(artifact) as tar:
        members = tar.getmembers()
        assert all(m.isfile() or m.isdir() for m in members), [m.name for m in members if m.islnk() or m.issym()]
        for path in REAL_FILES:
            pith_id = record_id(path)
            for name in (f"./pith/{pith_id}/bundle.json", f"./.well-known/pith/{pith_id}/bundle.json"):
                assert tar.extractfile(name).read() == path.read_bytes()
