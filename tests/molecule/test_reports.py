"""The Molecule wrapper's report readers (tests/molecule/reports.py), on reports shaped as the tools write them."""

import pytest

from tests.molecule import reports

# As ansible-core 2.19's junit callback writes a run (trimmed): an unchanged command, a changed one, a rescued
# failure (no system-out) and an included file (system-out is not JSON).
ANSIBLE_RUN = """<?xml version="1.0" ?>
<testsuites disabled="0" errors="1" failures="0" tests="4" time="2.48">
  <testsuite disabled="0" errors="1" failures="0" name="converge" skipped="0" tests="4" time="2.48">
    <testcase classname="converge.yml:4" name="[gpu1] Converge: Read the state" time="1.4">
      <system-out>{\n&quot;changed&quot;: false,\n&quot;rc&quot;: 0\n}</system-out>
    </testcase>
    <testcase classname="converge.yml:6" name="[gpu1] Converge: Load the driver" time="0.9">
      <system-out>{\n&quot;changed&quot;: true,\n&quot;rc&quot;: 0\n}</system-out>
    </testcase>
    <testcase classname="converge.yml:8" name="[gpu1] Converge: Refuse" time="0.05">
      <error message="Task failed: Action failed: boom" type="error">(traceback missing)</error>
    </testcase>
    <testcase classname="converge.yml:9" name="[gpu1] Converge: include" time="0.01">
      <system-out>/work/roles/x/tasks/load.yml (args={} vars={}): [gpu1]</system-out>
    </testcase>
  </testsuite>
</testsuites>
"""

# As pytest 8 writes --junitxml.
PYTEST_RUN = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest" errors="0"
failures="1" skipped="2" tests="9" time="7.1" timestamp="2026-11-30T18:00:00" hostname="h"></testsuite></testsuites>"""


def test_changed_tasks_are_the_results_that_say_changed(tmp_path):
    path = tmp_path / "converge-1.5.xml"
    path.write_text(ANSIBLE_RUN)
    assert reports.changed_tasks(path) == ["[gpu1] Converge: Load the driver"]
    assert reports.junit_totals(path) == reports.Totals(tests=4, failures=0, errors=1, skipped=0)


def test_pytest_totals(tmp_path):
    path = tmp_path / "verify.xml"
    path.write_text(PYTEST_RUN)
    assert reports.junit_totals(path) == reports.Totals(tests=9, failures=1, errors=0, skipped=2)


def test_the_idempotence_run_is_picked_by_time_not_by_name(tmp_path):
    # 999.9 < 1000.2 < 1000.7, though "1000.2" sorts before "999.9" as text; prepare's report is not a converge run.
    for name in ("converge-1000.2.xml", "converge-999.9.xml", "converge-1000.7.xml", "prepare-999.1.xml"):
        (tmp_path / name).write_text(ANSIBLE_RUN)
    sequence = ["destroy", "syntax", "create", "prepare", "converge", "idempotence", "check", "verify", "destroy"]
    assert reports.idempotence_run(sequence, tmp_path).name == "converge-1000.2.xml"
    # Without the check step the idempotence run is still the second.
    sequence.remove("check")
    with pytest.raises(ValueError, match="2 runs of converge.yml expected .* 3 reports found"):
        reports.idempotence_run(sequence, tmp_path)


def test_a_sequence_without_idempotence_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no idempotence step"):
        reports.idempotence_run(["create", "converge", "verify"], tmp_path)


def test_failed_tasks_name_the_playbook_the_task_and_its_message_oldest_run_first(tmp_path):
    (tmp_path / "converge-1000.2.xml").write_text(ANSIBLE_RUN)
    (tmp_path / "prepare-999.1.xml").write_text(ANSIBLE_RUN.replace("boom", "apt-get update: 503"))
    failed = reports.failed_tasks(tmp_path)
    assert failed == [
        "prepare: [gpu1] Converge: Refuse: Task failed: Action failed: apt-get update: 503 (traceback missing)",
        "converge: [gpu1] Converge: Refuse: Task failed: Action failed: boom (traceback missing)",
    ]
    assert reports.failed_tasks(tmp_path / "absent") == []
    assert len(reports.failed_tasks(tmp_path, limit=10)[0]) == len("prepare: [gpu1] Converge: Refuse: ") + 10
