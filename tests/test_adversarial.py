"""The adversarial corpus in one folder with the good bundles: every attack rejected by the right check,
every good bundle published, nothing written outside the output, nothing of a rejected bundle published."""

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from site_builder.stages import gather as gather_stage
from site_builder.build import BuildOptions, build
from site_builder.keys import load_trust_set
from site_builder.loading import InputFile

from adversarial import REAL_BYTES, corpus
from conftest import REAL_FILES, run_unprivileged

REPORT_FILES = {"verification.json", "verification/index.html"}


def snapshot(root: Path, skip: set[str]) -> dict[str, bytes]:
    found = {}
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if rel.parts[0] in skip or rel.parts[0].startswith(".site.") or p.is_symlink() or not p.is_file() or p.name == "fifo.json":
            continue
        try:
            found[str(rel)] = b"" if p.stat().st_size > 1 << 20 else p.read_bytes()
        except PermissionError:  # (the unreadable attack, for a user who cannot read it either: its stat stands in)
            st = p.stat()
            found[str(rel)] = f"unreadable, {st.st_size} bytes, changed {st.st_mtime_ns}".encode()
    return found


@pytest.fixture(scope="module")
def attacked():
    root = Path(tempfile.mkdtemp(prefix="site-builder-adversarial-"))
    bundles, outside = root / "bundles", root / "outside"
    bundles.mkdir()
    outside.mkdir()
    for p in REAL_FILES:
        shutil.copy(p, bundles / p.name)
    cases = corpus()
    expected = {}
    for case in cases:
        if case.data is not None:
            (bundles / f"{case.name}.json").write_bytes(case.data)
            expected[f"{case.name}.json"] = case.expected
        elif case.make is not None:
            before = set(os.listdir(bundles))
            case.make(bundles, outside)
            [made] = set(os.listdir(bundles)) - before
            expected[made] = case.expected
    expected["vanishes-mid-build.json"] = "file_read"
    (bundles / "unreadable.json").chmod(0)
    before = snapshot(root, {"site", ".site-builder-cache"})

    real_discover = gather_stage.discover

    def discover_with_a_vanishing_file(folder, **options):
        found, skipped = real_discover(folder, **options)
        return found + [InputFile("vanishes-mid-build.json", folder / "vanishes-mid-build.json", "gone")], skipped

    def go():
        gather_stage.discover = discover_with_a_vanishing_file
        report = build(BuildOptions(bundles=bundles, output=root / "site", trust=load_trust_set(), search=False))
        (root / "outcomes.json").write_text(json.dumps(
            {o.inspection.rel: [o.status, o.inspection.check, o.inspection.reason] for o in report.outcomes}))

    run_unprivileged(go)
    outcomes = json.loads((root / "outcomes.json").read_text())
    (root / "outcomes.json").unlink()
    yield root, cases, expected, outcomes, before
    shutil.rmtree(root, ignore_errors=True)


def test_corpus_is_large_and_grouped():
    cases = corpus()
    assert len(cases) >= 40
    assert {c.cls for c in cases} >= {"hash_and_signature", "key_substitution", "events", "state", "duplicate_keys",
                                      "json", "structure", "identifiers", "filesystem"}


def test_every_attack_rejected_by_its_check(attacked):
    _, _, expected, outcomes, _ = attacked
    wrong = {rel: (outcomes.get(rel), check) for rel, check in expected.items()
             if outcomes.get(rel, [None, None])[:2] != ["rejected", check]}
    assert not wrong


def test_good_bundles_all_published(attacked):
    _, _, _, outcomes, _ = attacked
    for p in REAL_FILES:
        assert outcomes[p.name][0] == "published"
    assert sum(1 for o in outcomes.values() if o[0] == "published") == len(REAL_FILES)


def test_nothing_written_outside_the_output(attacked):
    """Only the builder's own bookkeeping (lock, cache, staging) lives beside the output."""
    root, _, _, _, before = attacked
    assert snapshot(root, {"site", ".site-builder-cache"}) == before
    assert not (root / "EVIL").exists() and not Path("/etc/EVIL").exists()
    leftovers = [p.name for p in root.iterdir() if p.name.startswith(".site.") and p.name not in (".site.lock", ".site.prev")]
    assert leftovers == []


def test_nothing_from_a_rejected_bundle_is_published(attacked):
    root, _, _, _, _ = attacked
    site = root / "site"
    published = {p.read_bytes() for p in site.glob("pith/*/bundle.json")}
    assert published == set(REAL_BYTES)
    assert {p.read_bytes() for p in site.glob(".well-known/pith/*/bundle.json")} == set(REAL_BYTES)
    for rel, data in snapshot(site, set()).items():
        if rel not in REPORT_FILES:
            assert b"EVIL" not in data, rel
    report = (site / "verification" / "index.html").read_text()
    assert "<script" not in report.split("</footer>")[0].split("<main")[1]


def test_report_counts_rejections_by_class(attacked):
    root, _, expected, _, _ = attacked
    doc = json.loads((root / "site" / "verification.json").read_text())
    assert doc["counts"]["rejected"] == len(expected)
    assert sum(doc["rejected_by_class"].values()) == len(expected)
    assert {"json", "signature", "key", "hash", "structure", "identifiers", "filesystem", "events", "state"} <= \
        set(doc["rejected_by_class"])
