"""verification.json: written in pieces, named by what its lines are made of, its lines kept only for the next build."""

import json
from dataclasses import replace

from site_builder.inspection import inspect_bytes, rejected
from site_builder.keys import TrustSet, key_from_document, load_trust_set
from site_builder import report as report_module
from site_builder.incremental import IncrementalStore
from site_builder.report import PUBLISHED, REJECTED, SUPERSEDED, BuildReport, FileOutcome, ReportRows
from site_builder.verification import VerificationWarning

from conftest import REAL_FILES
from signing import TestKey, sign_bundle, to_bytes, with_unmergeable_event


def _report() -> BuildReport:
    trust = load_trust_set()
    report = BuildReport()
    for n, path in enumerate(REAL_FILES):
        result = inspect_bytes(f"{n}-{path.name}", path.read_bytes(), trust)
        report.outcomes.append(FileOutcome(result, PUBLISHED if n else SUPERSEDED, "" if n else "by a newer bundle"))
    report.outcomes.append(FileOutcome(rejected("z-broken.json", "json_syntax", "line 1: bad"), REJECTED))
    report.outcomes.append(FileOutcome(rejected("a-unread.json", "file_read", "cannot read: Permission denied"),
                                       REJECTED))
    return report


def test_the_report_written_in_pieces_is_one_json_document_in_path_order(monkeypatch):
    report = _report()
    doc = report.document(["k1"], "2026-01-01T00:00:00Z")
    whole, identity = b"".join(doc.chunks()), doc.identity()
    for per_piece in (1, 2, 3, 1000):
        monkeypatch.setattr(report_module, "PIECE_LINES", per_piece)
        assert b"".join(doc.chunks()) == whole and doc.identity() == identity
    parsed = json.loads(whole)
    assert [f["path"] for f in parsed["files"]] == sorted(o.inspection.rel for o in report.outcomes)
    assert parsed["counts"] == {"read": 6, "published": 3, "rejected": 2, "superseded": 1}
    by_path = {f["path"]: f for f in parsed["files"]}
    assert by_path["z-broken.json"]["rejected_by"] == "json_syntax"
    assert by_path[report.outcomes[0].inspection.rel]["note"] == "by a newer bundle"
    # One line per file: the report stays readable and diffable.
    assert whole.count(b"\n") == len(report.outcomes) + 3


def test_the_report_is_dated_only_by_the_date_it_is_given():
    """``generated_at`` is SOURCE_DATE_EPOCH's date when the build has one, and absent without it: no wall-clock
    time, so that the same inputs give the same report."""
    report = _report()
    assert json.loads(b"".join(report.document(["k1"], "2026-01-01T00:00:00Z").chunks()))["generated_at"] == (
        "2026-01-01T00:00:00Z")
    assert "generated_at" not in json.loads(b"".join(report.document(["k1"], None).chunks()))


def test_the_identity_changes_with_anything_a_line_shows():
    report = _report()
    base = report.document([], None).identity()
    first = report.outcomes[1]
    changes = [
        FileOutcome(first.inspection, SUPERSEDED, "by another file"),  # status
        FileOutcome(first.inspection, PUBLISHED, "kept from the previous site"),  # note
        FileOutcome(rejected(first.inspection.rel, "file_changed", "changed"), REJECTED),  # result
        FileOutcome(rejected(first.inspection.rel, "file_read", "cannot read: No such file"), REJECTED),
    ]
    seen = {base}
    for changed in changes:
        other = BuildReport(outcomes=[changed if o is first else o for o in report.outcomes])
        identity = other.document([], None).identity()
        assert identity not in seen
        seen.add(identity)
    # A different reason for the same check is another line, so another identity.
    unread = report.outcomes[-1]
    other = BuildReport(outcomes=[*report.outcomes[:-1], FileOutcome(rejected(unread.inspection.rel, "file_read",
                                                                              "cannot read: I/O error"), REJECTED)])
    assert other.document([], None).identity() != base


def test_lines_are_kept_by_the_saver_not_while_writing():
    report = _report()
    store = IncrementalStore()
    rows = ReportRows(store)
    doc = report.document([], None, rows)
    written, identity = b"".join(doc.chunks()), doc.identity()
    first = report.outcomes[0]
    assert ReportRows(store).line_unkept(first) is not ReportRows(store).line_unkept(first)  # nothing kept
    rows.keep_lines(report.outcomes[:2])
    kept_line = ReportRows(store).line_unkept(first)
    assert ReportRows(store).line_unkept(first) is kept_line  # and a later build reuses them
    assert ReportRows(store).identity_line(first) is ReportRows(store).identity_line(first)
    assert ReportRows(store).outcome(first.inspection, first.status, first.note) is first
    later = report.document([], None, ReportRows(store))
    assert b"".join(later.chunks()) == written and later.identity() == identity  # (kept or made: the same)
    store.start_build()
    ReportRows(store).keep_lines(report.outcomes[1:3])
    store.forget_unused()  # the lines of results no longer in the build are dropped
    assert ReportRows(store).line_unkept(first) is not ReportRows(store).line_unkept(first)
    second = report.outcomes[1]
    assert ReportRows(store).line_unkept(second) is ReportRows(store).line_unkept(second)
    # A line is kept for its result, status and note: another note is another line.
    assert ReportRows(store).outcome(second.inspection, second.status, second.note + " (again)") is not second


def test_serve_remakes_only_the_pieces_whose_outcomes_changed_and_writes_what_a_fresh_build_writes(monkeypatch):
    """Serve keeps each piece of the report (its lines, its identity) with the outcomes it was made of: a build
    with the very same outcomes reuses it, one where an outcome changed makes that piece again, and either way
    the report is the one a build that keeps nothing writes."""
    monkeypatch.setattr(report_module, "PIECE_LINES", 2)  # six outcomes: three pieces
    report = _report()
    store = IncrementalStore()

    def served(outcomes: list[FileOutcome]) -> tuple[bytes, str, list]:
        store.start_build()
        doc = BuildReport(outcomes=outcomes).document([], None, ReportRows(store))
        written, identity = b"".join(doc.chunks()), doc.identity()
        pieces = [store.last(f"report-lines:verification.json:{start}")[1] for start in (0, 2, 4)]
        fresh = BuildReport(outcomes=outcomes).document([], None)  # (a store that keeps nothing)
        assert written == b"".join(fresh.chunks()) and identity == fresh.identity()
        store.forget_unused()
        return written, identity, pieces

    written, identity, pieces = served(report.outcomes)
    again, identity_again, pieces_again = served(list(report.outcomes))
    assert again == written and identity_again == identity
    assert all(a is b for a, b in zip(pieces, pieces_again))  # all three reused
    ordered = sorted(report.outcomes, key=lambda o: o.inspection.rel)
    changed = ordered[3]  # in the second piece
    edited = [FileOutcome(changed.inspection, changed.status, changed.note + " (edited)") if o is changed else o
              for o in report.outcomes]
    written_now, identity_now, pieces_now = served(edited)
    assert b"(edited)" in written_now and identity_now != identity
    assert pieces_now[0] is pieces[0] and pieces_now[2] is pieces[2] and pieces_now[1] != pieces[1]


def test_every_line_is_its_outcome_as_json_even_holding_text_the_fast_encoder_refuses():
    report = _report()
    report.outcomes.append(FileOutcome(rejected("odd.json", "json_syntax", "bad \ud800 and “quotes” \u2028"), REJECTED))
    parsed = json.loads(b"".join(report.document([], None).chunks()))
    assert parsed["files"] == [o.as_json() for o in sorted(report.outcomes, key=lambda o: o.inspection.rel)]


def test_an_outcome_comes_back_from_its_brief_as_the_no_op_answer_shows_it():
    published = FileOutcome(inspect_bytes(REAL_FILES[0].name, REAL_FILES[0].read_bytes(), load_trust_set()),
                            PUBLISHED, "a note")
    refused = FileOutcome(inspect_bytes("bad.json", b"{", load_trust_set()), REJECTED)
    for outcome in (published, refused):
        brief = json.loads(json.dumps(outcome.brief()))  # (as the cache keeps it)
        back = FileOutcome.from_brief(brief)
        assert (back.status, back.note, back.pith_number) == (outcome.status, outcome.note, outcome.pith_number)
        i, j = back.inspection, outcome.inspection
        assert (i.rel, i.check, i.reason, i.verified) == (j.rel, j.check, j.reason, j.verified)
        assert back.brief() == brief
    assert published.pith_number is not None
    # (and a value of another type in any place: even under the user's tag, as a builder's bug could leave it)
    typed = [[*brief[:n], wrong, *brief[n + 1:]] for n, wrong in ((0, 5), (1, None), (3, 7), (4, ["x"]), (5, {}),
                                                                   (6, 42))]
    for damaged in (brief[:-1], [*brief, "more"], {"rel": "x.json"}, [*brief[:2], "accepted", *brief[3:]], *typed):
        try:
            FileOutcome.from_brief(damaged)
        except (TypeError, ValueError):
            continue
        raise AssertionError(f"{damaged!r} was taken")


def test_a_published_file_whose_state_was_not_recomputed_names_the_skipped_check(real_bundle):
    """verification.json is what an auditor reads: a bundle published with its state checked by its hash alone (an
    event type the merge has no rule for) names the check it skipped in its line, as a rejected file's does."""
    key = TestKey()
    raw = to_bytes(sign_bundle(with_unmergeable_event(real_bundle), key, keep_state=True))
    published = inspect_bytes("a.json", raw, TrustSet((key_from_document(key.document()),)))
    assert published.verified
    line = FileOutcome(published, PUBLISHED).as_json()
    assert line["skipped_checks"] == ["state_recomputed"] and line["failed_checks"] == []
    assert "state_not_recomputed" in [w["code"] for w in line["warnings"]]


def test_a_line_lists_every_failed_and_skipped_check_and_a_passed_file_none():
    raw = REAL_FILES[0].read_bytes()
    passed = inspect_bytes("a.json", raw, load_trust_set())
    bad = bytearray(raw)
    bad[bad.index(b'"signature_b64":"') + 20] ^= 1  # one flipped bit: several checks fail
    failed = inspect_bytes("b.json", bytes(bad), load_trust_set())
    line = FileOutcome(failed, REJECTED).as_json()
    assert [c["check"] for c in line["failed_checks"]] == [c.name for c in failed.checks if c.status == "failed"]
    assert len(line["failed_checks"]) > 1 and line["rejected_by"] == failed.check
    skipped = replace(failed, checks=tuple(replace(c, status="skipped") if c.name == "bundle_signature" else c
                                           for c in failed.checks))
    skipped_line = FileOutcome(skipped, REJECTED).as_json()
    assert skipped_line["skipped_checks"] == ["bundle_signature"]
    assert "bundle_signature" not in [c["check"] for c in skipped_line["failed_checks"]]  # (skipped is not failed)
    clean = FileOutcome(passed, PUBLISHED).as_json()
    assert clean["failed_checks"] == [] and "skipped_checks" not in clean and "rejected_by" not in clean


def test_a_file_rejected_before_any_check_names_its_reason_and_counts_in_its_class():
    """A file that is no JSON, or could not be read, ran none of the bundle's checks: its line still names what
    rejected it, and the head counts it in that class."""
    not_json = inspect_bytes("a.json", b"{not json", load_trust_set())
    unreadable = rejected("b.json", "file_type", "a FIFO, not a regular file")
    report = BuildReport([FileOutcome(not_json, REJECTED), FileOutcome(unreadable, REJECTED)])
    line = report.outcomes[0].as_json()
    assert line["failed_checks"] == [{"check": "json_syntax", "reason": not_json.reason}] and not_json.reason
    assert (line["rejected_by"], line["class"]) == ("json_syntax", "json")
    assert report.outcomes[1].as_json()["failed_checks"] == [{"check": "file_type",
                                                               "reason": "a FIFO, not a regular file"}]
    assert list(report.class_counts().items()) == [("filesystem", 1), ("json", 1)]  # (by class, as written)


def test_past_1000_others_the_rest_go_to_pages_of_10000_lines_as_readme_says():
    def paging(others: int):
        report = BuildReport()
        report.outcomes = [FileOutcome(rejected(f"junk{n:05d}.json", "json_syntax", "line 1: bad"), REJECTED)
                           for n in range(others)]
        doc = report.document([], None)
        return len(doc.inline), doc.head.get("more_files", {}).get("pages")

    assert paging(1_000) == (1_000, None)  # (no "more_files" at all)
    assert paging(1_001) == (1_000, ["verification/files-0001.json"])
    assert paging(11_000) == (1_000, ["verification/files-0001.json"])
    assert paging(11_001) == (1_000, ["verification/files-0001.json", "verification/files-0002.json"])


def test_a_build_names_up_to_5000_files_it_rendered_and_says_when_there_were_more():
    report = BuildReport()
    report.note_rendered([f"p{n}.html" for n in range(4_000)])
    report.note_rendered([f"q{n}.html" for n in range(1_000)])
    assert len(report.rendered) == 5_000 and not report.rendered_more
    report.note_rendered(["one-more.html"])
    assert len(report.rendered) == 5_000 and report.rendered_more
    report = BuildReport()
    report.note_rendered([f"p{n}.html" for n in range(5_001)])
    assert report.rendered[-1] == "p4999.html" and report.rendered_more


def test_the_stage_line_names_the_stages_of_10_ms_or_more():
    report = BuildReport(timings={"discover": 0.009, "verify": 0.01, "plan": 0.02, "render_records": 2.5},
                         cpu={"render_records": (0.2, 4.0), "verify": (0.01, 0.01), "plan": (0.02, 0.009)})
    assert report.stage_line() == ("stages: verify 0.01s (CPU 0.01s, workers 0.01s); plan 0.02s; "
                                   "render_records 2.50s (CPU 0.20s, workers 4.00s)")
    assert BuildReport(timings={"discover": 0.004}).stage_line() == "stages: none took 10 ms"
    fresh = BuildReport()
    assert not (fresh.rendered_more or fresh.search_behind or fresh.saved_in_background) and fresh.changed


def test_the_report_draws_attention_to_the_files_not_published_then_to_published_files_with_warnings():
    report = _report()
    warning = VerificationWarning("unknown_fields", "unknown top-level fields: x")
    warned = replace(report.outcomes[2], inspection=replace(report.outcomes[2].inspection, warnings=(warning,)))
    report.outcomes[2] = warned
    doc = report.document([], None)
    assert [a["path"] for a in doc.attention] == ["0-" + REAL_FILES[0].name, "a-unread.json", "z-broken.json",
                                                  warned.inspection.rel]
    # The HTML report lists at most 1,000 (README): the files not published first, then published ones with
    # warnings, however many (a mirror whose every bundle embeds a key it does not pin).
    many = BuildReport()
    many.outcomes = [FileOutcome(rejected(f"junk{n:04d}.json", "json_syntax", "line 1: bad"), REJECTED)
                     for n in range(600)]
    many.outcomes += [replace(warned, inspection=replace(warned.inspection, rel=f"w{n:04d}.json"))
                      for n in range(700)]
    attention = [a["path"] for a in many.document([], None).attention]
    assert attention == [f"junk{n:04d}.json" for n in range(600)] + [f"w{n:04d}.json" for n in range(400)]
