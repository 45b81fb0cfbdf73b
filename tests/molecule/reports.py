"""Machine-readable results of a `molecule test` run, for the Molecule wrapper (test_molecule.py).

Two kinds of JUnit XML, both written without any change to a scenario:
- the testinfra verifier's: pytest's own `--junitxml`, passed through `PYTEST_ADDOPTS` (Molecule runs the verifier
  with its own environment, which holds ours);
- one per ansible-playbook run: ansible-core's `junit` callback (`ANSIBLE_CALLBACKS_ENABLED=ansible.builtin.junit`,
  `JUNIT_OUTPUT_DIR`). It is a notification callback, so Molecule's own stdout (which its idempotence step parses)
  is unchanged. Each task result is a test case whose system-out is the task's result as JSON, `changed` included;
  the file is named `<playbook>-<time.time()>.xml`.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

# The steps of a test sequence that run the converge playbook, in the order they appear in the sequence.
CONVERGE_STEPS = ("converge", "idempotence", "check")


@dataclass(frozen=True)
class Totals:
    tests: int
    failures: int
    errors: int
    skipped: int


def junit_totals(path: Path) -> Totals:
    """Sum of the test suites' counts in a JUnit XML file (the root is <testsuites> or a single <testsuite>)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    return Totals(*(sum(int(s.get(key, "0")) for s in suites) for key in ("tests", "failures", "errors", "skipped")))


def changed_tasks(path: Path) -> list[str]:
    """Names ("[host] play: task") of the task results that reported changed in one playbook run's JUnit report."""
    changed = []
    for case in ET.parse(path).getroot().iter("testcase"):
        out = case.findtext("system-out")
        if not out:
            continue  # skipped and failed results carry no result dump
        try:
            result = json.loads(out)
        except ValueError:
            continue  # an included file: its system-out is not a task result
        if isinstance(result, dict) and result.get("changed") is True:
            changed.append(case.get("name", "?"))
    return changed


def run_time(report: Path) -> float | None:
    """The time.time() in a junit callback report's name (``<playbook>-<time>.xml``), or None for another file."""
    when = report.stem.rpartition("-")[2]
    return float(when) if when.replace(".", "", 1).isdigit() else None


def playbook_runs(directory: Path, playbook: str) -> list[Path]:
    """The JUnit reports of one playbook's runs, oldest first (by the time in the file name)."""
    stem = Path(playbook).stem
    runs = [p for p in directory.glob(f"{stem}-*.xml") if p.stem.rpartition("-")[0] == stem and run_time(p) is not None]
    return sorted(runs, key=lambda p: run_time(p) or 0.0)


def idempotence_run(sequence: list[str], directory: Path, playbook: str = "converge.yml") -> Path:
    """The report of the idempotence step: the converge playbook's n-th run, n its place among the steps that run it."""
    steps = [step for step in sequence if step in CONVERGE_STEPS]
    if "idempotence" not in steps:
        raise ValueError(f"the test sequence {sequence} has no idempotence step")
    runs = playbook_runs(directory, playbook)
    if len(runs) != len(steps):
        raise ValueError(f"{len(steps)} runs of {playbook} expected ({', '.join(steps)}), {len(runs)} reports found in {directory}")
    return runs[steps.index("idempotence")]


def failed_tasks(directory: Path, limit: int = 2000) -> list[str]:
    """The failed and errored task results of every playbook run reported in a directory, oldest run first: each as
    "playbook: [host] play: task: message" and the result's text, clipped to `limit` characters. What a failed
    Molecule step's output tail (its destroy step's) no longer shows."""
    found = []
    runs = [p for p in directory.glob("*-*.xml") if run_time(p) is not None] if directory.is_dir() else []
    for run in sorted(runs, key=lambda p: run_time(p) or 0.0):
        try:
            root = ET.parse(run).getroot()
        except ET.ParseError:
            continue
        for case in root.iter("testcase"):
            for bad in (*case.findall("failure"), *case.findall("error")):
                text = " ".join(filter(None, [bad.get("message"), (bad.text or "").strip(), case.findtext("system-out") or ""]))
                found.append(f"{run.stem.rpartition('-')[0]}: {case.get('name', '?')}: {text[:limit]}")
    return found
