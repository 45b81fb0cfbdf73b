"""One sink for text that came from outside. Every renderer that prints what the cluster wrote (log
lines, node and job names, labels, evidence, Ansible's failure messages, Slurm's reasons) is fed the same hostile
strings; nothing reaches the terminal raw (no escape byte, no C1 control, no bidirectional override), rich markup
stays text and never crashes, and emoji codes stay codes."""

import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megaprov import output, values
from megaprov.ops import doctor, top
from megaprov.ops.doctor.findings import Report, finding
from megaprov.training import jobview, verdict

HOSTILE = [
    "\x1b]52;c;ZXZpbA==\x07",
    "\x1b[2J\x1b[H",
    "\x1b]0;owned\x07",
    "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\",
    "\x9b31m",
    "\u202eexe.txt",
    "a\u200bb\u2066c",
    "[link=https://evil.example]click[/link]",
    "[/]",
    "[bold red]alarm[/]",
    ":warning:",
    "line\rover",
]
EVIL = " ".join(HOSTILE)
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"  # what reorders text on screen
RAW = ("\x1b", "\x9b", "\x07", "\u202e", "\u200b", "\u2066", "\r", "\u26a0")


def _job_status():
    meta = {"name": EVIL, "state": EVIL, "job_dir": EVIL}
    nodes = {EVIL: {"log": EVIL, "ActiveState": EVIL, "SubState": EVIL, "NRestarts": EVIL}}
    status = {"iteration": 1, "total": 2, "loss": 1.0, "checkpoint": 0, "restarts": 0, "verdict": EVIL, "nodes": nodes, "errors": [EVIL]}
    jobview.render_job_status(meta, status)


def _verdict():
    judged = verdict.Verdict(False, [verdict.Check(EVIL, verdict.FAIL, EVIL)])
    report = {"job": {"name": EVIL}, "restarts": []}
    jobview.render_verdict(judged, report, {"markdown": Path(EVIL), "json": Path("r.json"), "plot": Path("r.png")})


def _doctor_table():
    report = Report()
    report.add(finding("CUDA_OOM", EVIL, EVIL, EVIL, EVIL, source=EVIL, line=3))
    output.console().print(doctor.render(report, EVIL))


def _verdict_table():
    output.console().print(output.verdict_table([{"host": EVIL, "check": EVIL, "value": EVIL, "status": "fail", "reason": EVIL}], EVIL))


def _top():
    answers = {
        "up": [{"metric": {"node": s}, "value": [0, "1"]} for s in HOSTILE],
        "job_running": [{"metric": {"job": s, "node": s}, "value": [0, "1"]} for s in HOSTILE],
        "alerts": [{"metric": {"alertname": s, "severity": s, "node": s, "job": s}, "value": [0, "1"]} for s in HOSTILE],
    }
    output.console().print(top.render(top.fold(EVIL, answers)))


def _ansible_failure():
    progress = output.SHOWN.run(2)
    progress({"event": "playbook_on_play_start", "event_data": {"play": EVIL}})
    progress({"event": "playbook_on_task_start", "event_data": {"task": EVIL}})
    progress({"event": "runner_on_failed", "event_data": {"host": EVIL, "res": {"msg": EVIL}}})
    progress.stop()


def _say():
    output.SHOWN.say(EVIL)


def _lines():
    output.write_lines(HOSTILE)


def _error_line():
    from megaprov.cli import main

    main(["job", "logs", EVIL])  # a value echoed in an error


PATHS = {
    "job status": _job_status,
    "verdict": _verdict,
    "doctor findings table": _doctor_table,
    "preflight verdict table": _verdict_table,
    "top": _top,
    "an Ansible failure line": _ansible_failure,
    "a reporter's note": _say,
    "log lines (job logs, logs)": _lines,
    "an error line": _error_line,
}


@pytest.mark.parametrize("path", PATHS)
def test_every_printing_path_neutralises_hostile_text(capsys, path, tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path))
    PATHS[path]()
    out, err = capsys.readouterr()
    shown = out + err
    assert not [c for c in RAW if c in shown], repr(shown)
    assert "[/]" in shown or path == "an error line"
    assert "\\x1b" in shown


@given(st.text(max_size=200))
@settings(max_examples=300, deadline=None)
def test_printable_leaves_no_control_or_format_character(text):
    shown = values.printable(text)
    assert not [c for c in shown if unicodedata.category(c) in ("Cc", "Zl", "Zp") or c in BIDI], repr(shown)
    # and nothing printable is changed
    if all(c.isprintable() and c not in "\u00ad\u061c\u180e\ufeff" and not 0x200B <= ord(c) <= 0x206F for c in text):
        assert shown == text


def test_tables_are_measured_on_what_they_show(capsys):
    from rich.table import Table

    table = Table()
    table.add_column("node")
    table.add_column("state")
    table.add_row("\x1b[2Jn1", "up")
    output.console().print(table)
    lines = capsys.readouterr().out.splitlines()
    assert len({len(line) for line in lines if line.strip()}) == 1, lines  # every border as wide as the rows
