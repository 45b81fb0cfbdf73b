import json
from dataclasses import dataclass

from megaprov.output import RunProgress, envelope


def test_progress_announces_only_stages_that_run_and_names_failures(capsys):
    progress = RunProgress(total_hosts=2)
    events = [
        {"event": "playbook_on_play_start", "event_data": {"play": "Preflight"}},  # skipped by --tags: no task starts
        {"event": "playbook_on_play_start", "event_data": {"play": "SSH mesh"}},
        {"event": "playbook_on_task_start", "event_data": {"task": "Create the cluster user"}},
        {"event": "runner_on_ok", "event_data": {"host": "n1"}},
        {"event": "runner_on_failed", "event_data": {"host": "n2", "res": {"msg": "useradd: UID 2000 is not unique\nmore"}}},
    ]
    for event in events:
        progress(event)
    progress.stop()
    err = capsys.readouterr().err
    assert "Preflight" not in err
    assert err.count("stage: SSH mesh") == 1
    assert "FAILED n2: Create the cluster user: useradd: UID 2000 is not unique" in err
    assert progress.failed == {"n2"} and progress.done == {"n1", "n2"}


def test_envelope_is_versioned_and_plain():
    @dataclass
    class Row:
        host: str
        seconds: float

    doc = json.loads(envelope("bootstrap", True, {"hosts": [Row("n1", 1.5)]}))
    assert doc == {"megaprov": 2, "command": "bootstrap", "ok": True, "result": {"hosts": [{"host": "n1", "seconds": 1.5}]}}
