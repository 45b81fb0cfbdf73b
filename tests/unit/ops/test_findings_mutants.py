"""doctor's findings (megaprov/ops/doctor/findings.py): an evidence line bounded at its limit exactly (cut with one
ellipsis character), a finding's cause and fix bounded at twice that, and a report's order (errors, warnings, infos,
then a severity doctor does not know; by node, code, source and line within one)."""

import pytest

from megaprov.ops.doctor.findings import CODES, MAX_EVIDENCE, Report, clip, finding


@pytest.mark.parametrize(("length", "kept"), [(9, "a" * 9), (10, "a" * 10), (11, "a" * 9 + "…"), (12, "a" * 9 + "…")])
def test_a_line_up_to_the_limit_is_kept_and_a_longer_one_cut_to_it_with_an_ellipsis(length, kept):
    assert clip("a" * length, 10) == kept and len(clip("a" * length, 10)) <= 10
    assert clip(" x\ty\nz ", 10) == "x y z"  # tabs and line ends are spaces, the ends trimmed


def test_a_findings_cause_and_fix_are_bounded_at_twice_an_evidence_line():
    code = next(iter(CODES))
    long = "c" * (3 * MAX_EVIDENCE)
    made = finding(code, "n1", "e" * (3 * MAX_EVIDENCE), cause=long, fix=long)
    assert made.evidence == "e" * (MAX_EVIDENCE - 1) + "…"
    assert made.cause == made.fix == "c" * (2 * MAX_EVIDENCE - 1) + "…"
    just = "d" * (2 * MAX_EVIDENCE)
    assert finding(code, cause=just, fix=just).cause == just and finding(code, cause=just, fix=just).fix == just
    assert finding(code).cause == CODES[code].cause and finding(code).severity == CODES[code].severity


def test_a_report_lists_errors_warnings_infos_then_unknown_severities_by_node_code_source_and_line():
    code = next(iter(CODES))
    odd = finding(code, "a", severity="fatal")
    info = finding(code, "a", severity="info")
    warn_b = finding(code, "b", severity="warn")
    warn_a2 = finding(code, "a", severity="warn", source="log", line=2)
    warn_a1 = finding(code, "a", severity="warn", source="log", line=1)
    error = finding(code, "z", severity="error")
    report = Report()
    report.add(odd, info, warn_b, warn_a2, warn_a1, error)
    assert report.sorted() == [error, warn_a1, warn_a2, warn_b, info, odd]
    assert report.wrong and not Report([info, odd]).wrong
