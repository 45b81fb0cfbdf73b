"""megaprov.cluster.runner, edge by edge: how ansible-runner's events fold into host stats, failures and task results,
the one line a failed task is explained by, extra vars made data, the first playbook error, where programs are found,
and what ``run`` hands back.

Stood in: ansible-runner itself (a module in sys.modules that replays ansible-runner 2.4 event dicts), the clock of a
run, the interpreter's bin directory and PATH (temporary directories), and importlib's answer for ansible_mitogen.
Everything else is real.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import types
from pathlib import Path

import pytest

from megaprov.cluster import runner
from megaprov.errors import EnvironmentProblem, UsageError

T0 = "2026-01-01T00:00:00"


def _ev(kind, created=None, **event_data):
    """An event as ansible-runner 2.4 hands it to event_handler."""
    event = {"uuid": "u", "counter": 1, "event": kind, "event_data": event_data, "runner_ident": "r"}
    if created is not None:
        event["created"] = created
    return event


def _on(kind, host, task, res, start=None, end=None, **more):
    data = {"playbook": "p.yml", "play": "P", "task": task, "task_action": "ansible.builtin.command", "host": host, "res": res, **more}
    if start:
        data["start"] = start
    if end:
        data["end"] = end
    return _ev(kind, **data)


# ---- EventFolder -----------------------------------------------------------------------------------------------


def test_a_fresh_folder_knows_nothing_yet():
    folder = runner.EventFolder()
    assert (folder.play, folder.plays, folder.data, folder.stats_seen) == ("", [], {}, False)
    assert folder.host_stats() == [] and folder.failures == [] and folder.results == []


def test_plays_are_named_and_stamped_in_order():
    folder = runner.EventFolder()
    folder(_ev("playbook_on_play_start", created="2026-01-01T00:00:10", play="Base"))
    folder(_ev("playbook_on_play_start", created="2026-01-01T00:00:20Z", play="Slurm"))
    folder(_ev("playbook_on_play_start", created="not a time", play="Unstamped"))
    folder(_ev("playbook_on_play_start"))
    base = runner.epoch("2026-01-01T00:00:10")
    assert folder.plays == [("Base", base), ("Slurm", 1767225620.0)]
    assert folder.play == ""  # a play start without a name: the failures after it are not the previous play's


def test_failures_carry_host_task_play_message_and_whether_unreachable():
    folder = runner.EventFolder()
    folder(_ev("playbook_on_play_start", created=T0, play="Preflight"))
    folder(_on("runner_on_failed", "n1", "Install", {"msg": "boom", "usage_error": True}))
    folder(_on("runner_on_failed", "n1", "Probe", {"msg": "soft", "usage_error": "yes"}))
    folder(_on("runner_on_failed", "n1", "Ignored", {"msg": "x"}, ignore_errors=True))
    folder(_ev("runner_on_failed", res={"msg": "no host, no task"}))
    folder(_ev("runner_on_unreachable", res={"msg": "Failed to connect"}))
    folder(_on("runner_on_unreachable", "n2", "Gather", {"msg": "ssh: refused"}, ignore_errors=True))
    assert folder.failures == [
        runner.Failure("n1", "Install", "Preflight", "boom", False, True),
        runner.Failure("n1", "Probe", "Preflight", "soft", False, False),
        runner.Failure("?", "", "Preflight", "no host, no task", False, False),
        runner.Failure("?", "", "Preflight", "Failed to connect", True, False),
        runner.Failure("n2", "Gather", "Preflight", "ssh: refused", True, False),
    ]


def test_a_failure_without_a_result_says_so():
    folder = runner.EventFolder()
    folder({"event": "runner_on_failed", "event_data": None})
    folder({"event_data": {"host": "n1"}})  # no kind: nothing
    assert folder.failures == [runner.Failure("?", "", "", "failed (no message)", False)]


def test_collected_results_keep_task_action_window_and_role():
    folder = runner.EventFolder(collect=("megaprov.cluster.node_facts",))
    start, end = "2026-01-01T00:00:01.500000", "2026-01-01T00:00:04"
    folder(_on("runner_on_ok", "n1", "Facts", {"a": 1}, start, end, task_action="megaprov.cluster.node_facts", role="base"))
    folder(_on("runner_on_ok", "n2", "Facts", {"b": 2}, start, None, task_action="megaprov.cluster.node_facts", role=None))
    folder(_on("runner_on_ok", "n3", "Facts", {}, None, end, task_action="megaprov.cluster.node_facts"))
    folder(_ev("runner_on_ok", task_action="megaprov.cluster.node_facts"))
    folder(_on("runner_on_ok", "n1", "Other", {"c": 3}, start, end))  # not collected
    folder(_on("runner_on_skipped", "n1", "Facts", {}, start, end, task_action="megaprov.cluster.node_facts"))
    window = (runner.epoch(start), runner.epoch(end))
    assert window[1] - window[0] == 2.5
    assert folder.results == [
        runner.TaskResult("n1", "Facts", "megaprov.cluster.node_facts", {"a": 1}, window, "base"),
        runner.TaskResult("n2", "Facts", "megaprov.cluster.node_facts", {"b": 2}, None, ""),
        runner.TaskResult("n3", "Facts", "megaprov.cluster.node_facts", {}, None, ""),
        runner.TaskResult("?", "", "megaprov.cluster.node_facts", {}, None, ""),
    ]


def test_a_malformed_window_is_unknown():
    folder = runner.EventFolder(collect=("x",))
    folder(_on("runner_on_ok", "n1", "T", {}, "yesterday", "2026-01-01T00:00:04", task_action="x"))
    assert folder.results[0].window is None
    assert folder.host_stats() == []  # no span either


def test_playbook_stats_fill_every_counter_and_what_the_play_said():
    folder = runner.EventFolder()
    folder(
        _ev(
            "playbook_on_stats",
            ok={"n1": 5, "n2": "1"},
            changed={"n1": 2},
            failures={"n2": 1},
            dark={"n3": 1},
            skipped={"n1": 3},
            rescued={"n2": 4},
            ignored={"n1": 6},
            processed={"n1": 1, "n2": 1, "n3": 1},
            artifact_data={"k": "v"},
        )
    )
    assert folder.stats_seen is True and folder.data == {"k": "v"}
    assert folder.host_stats() == [
        runner.HostStats("n1", ok=5, changed=2, skipped=3, ignored=6),
        runner.HostStats("n2", ok=1, failed=1, rescued=4),
        runner.HostStats("n3", unreachable=1),
    ]


def test_stats_without_artifact_data_leave_data_empty():
    folder = runner.EventFolder()
    folder(_ev("playbook_on_stats", ok={"n1": 1}, artifact_data="not a dict", changed=None))
    assert folder.data == {} and folder.stats_seen is True
    assert folder.host_stats() == [runner.HostStats("n1", ok=1)]


def test_host_seconds_span_from_the_first_start_to_the_last_end_of_its_tasks():
    folder = runner.EventFolder()
    folder(_on("runner_on_start", "n1", "A", {}, "2026-01-01T00:00:00", "2026-01-01T00:01:00"))  # not a result
    folder(_on("runner_on_ok", "n1", "B", {}, "2026-01-01T00:00:10", "2026-01-01T00:00:11.234567"))
    folder(_on("runner_on_ok", "n1", "C", {}, "2026-01-01T00:00:05", "2026-01-01T00:00:06"))
    folder(_on("runner_on_failed", "n1", "D", {"msg": "x"}, "2026-01-01T00:00:07", "2026-01-01T00:00:08"))
    folder(_on("runner_on_ok", "n2", "B", {}, "2026-01-01T00:00:00", "2026-01-01T00:00:01.234567"))
    folder(_on("runner_on_ok", "n3", "B", {}, "2026-01-01T00:00:00", None))
    folder(_ev("playbook_on_stats", ok={"n1": 2}))
    assert folder.host_stats() == [runner.HostStats("n1", ok=2, seconds=6.23), runner.HostStats("n2", seconds=1.23)]


def test_a_span_that_grows_at_both_ends():
    folder = runner.EventFolder()
    folder(_on("runner_on_ok", "n1", "B", {}, "2026-01-01T00:00:10", "2026-01-01T00:00:12"))
    folder(_on("runner_on_ok", "n1", "C", {}, "2026-01-01T00:00:11", "2026-01-01T00:00:11.500000"))
    assert folder.host_stats()[0].seconds == 2.0
    folder(_on("runner_on_ok", "n1", "A", {}, "2026-01-01T00:00:02", "2026-01-01T00:00:03"))
    assert folder.host_stats()[0].seconds == 10.0


# ---- _message ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("res", "line"),
    [
        ({"msg": "  two\n   lines  "}, "two lines"),
        ({"stderr": "first\nlast\n"}, "last"),
        ({"reason": "a  reason\nhere"}, "a reason here"),
        ({"module_stderr": "Traceback\n  File x\nKeyError: 'a'\n", "module_stdout": ""}, "KeyError: 'a'"),
        ({"stdout": "out  put\nmore"}, "out put more"),
        ({"msg": "", "stderr": "", "stdout": "only stdout"}, "only stdout"),
        ({"msg": "the msg", "stderr": "err", "reason": "r", "module_stderr": "m", "stdout": "o"}, "the msg"),
        ({"stderr": "err\nlast err", "reason": "r"}, "last err"),
        ({"reason": "r", "module_stderr": "m", "stdout": "o"}, "r"),
        ({"module_stderr": "m1\nm2", "stdout": "o"}, "m2"),
        ({"exception": "Traceback..."}, "failed (no message)"),
        ({}, "failed (no message)"),
        ({"msg": "non-zero return code", "stderr": "e1\ne2", "stdout": "o"}, "e2"),
        ({"msg": "non-zero return code", "stderr": "", "stdout": "o1\no2 x"}, "o1 o2 x"),
        ({"msg": "non-zero return code", "stderr": "", "stdout": ""}, "non-zero return code"),
        ({"msg": "non-zero return code", "reason": "r"}, "non-zero return code"),
    ],
)
def test_the_line_a_failed_task_is_explained_by(res, line):
    assert runner._message(res) == line


def test_a_failed_loop_is_explained_by_its_first_failed_item():
    res = {
        "msg": "One or more items failed",
        "results": [
            "not a dict",
            {"item": "ok-one", "failed": False, "msg": "fine"},
            {"item": "pkg-a", "failed": True, "msg": "non-zero return code", "stderr": "E: a\nE: no pkg-a"},
            {"item": "pkg-b", "failed": True, "msg": "second"},
        ],
    }
    assert runner._message(res) == "item pkg-a: E: no pkg-a"
    long_item = {"item": "x" * 100, "failed": True, "msg": "m"}
    assert runner._message({"msg": "One or more items failed", "results": [long_item]}) == "item " + "x" * 80 + ": m"


def test_a_loop_with_no_failed_item_or_no_list_says_its_msg():
    assert runner._message({"msg": "One or more items failed", "results": [{"item": 1, "failed": False}]}) == "One or more items failed"
    assert runner._message({"msg": "One or more items failed", "results": "x"}) == "One or more items failed"
    assert runner._message({"msg": "other", "results": [{"item": 1, "failed": True, "msg": "m"}]}) == "other"
    assert runner._message({"results": [{"item": 1, "failed": True, "msg": "m"}], "stdout": "s"}) == "s"


# ---- as_data -----------------------------------------------------------------------------------------------------


def test_values_become_data_all_the_way_down():
    value = {"a": ("x", 1, None, True, 2.5), "b": {"c-d": {"e": {"f"}}, 3: "three"}, "g": frozenset()}
    assert runner.as_data(value) == {
        "a": [{"__ansible_unsafe": "x"}, 1, None, True, 2.5],
        "b": {"c-d": {"e": [{"__ansible_unsafe": "f"}]}, "3": {"__ansible_unsafe": "three"}},
        "g": [],
    }
    assert runner.as_data("s") == {"__ansible_unsafe": "s"}
    assert runner.as_data(None) is None and runner.as_data(7) == 7
    assert runner.as_data([{"a-b": 1}]) == [{"a-b": 1}]  # names below the top are data, not variables


@pytest.mark.parametrize(
    ("value", "kwargs", "message", "hint"),
    [
        ({"a-b": 1}, {}, "extra vars: 'a-b' is not a variable name", "use letters, digits and _ (not starting with a digit)"),
        ({1: 1}, {"where": "job.json"}, "job.json: 1 is not a variable name", "use letters, digits and _ (not starting with a digit)"),
        ({"9x": 1}, {}, "extra vars: '9x' is not a variable name", "use letters, digits and _ (not starting with a digit)"),
        ({"a" * 200: 1}, {}, "extra vars: '" + "a" * 59 + " is not a variable name", "use letters, digits and _ (not starting with a digit)"),
        ({"__ansible_unsafe": "x"}, {}, "extra vars: key '__ansible_unsafe' is reserved by Ansible", "rename the variable"),
        ({"a": {"__ansible_vault": "x"}}, {"where": "job spec"}, "job spec: key '__ansible_vault' is reserved by Ansible", "rename the variable"),
        ({"a": [{"__ansible_x": 1}]}, {"where": "-e"}, "-e: key '__ansible_x' is reserved by Ansible", "rename the variable"),
        (b"bytes", {}, "extra vars: a value of type bytes cannot be passed to Ansible", "write it as a string"),
        ({"a": {"b": object()}}, {"where": "inventory"}, "inventory: a value of type object cannot be passed to Ansible", "write it as a string"),
        ({"a": [b"x"]}, {"where": "inventory"}, "inventory: a value of type bytes cannot be passed to Ansible", "write it as a string"),
        ({"a-b": 1}, {"top": True}, "extra vars: 'a-b' is not a variable name", "use letters, digits and _ (not starting with a digit)"),
    ],
)
def test_what_cannot_be_passed_is_refused_with_the_reason(value, kwargs, message, hint):
    with pytest.raises(UsageError) as caught:
        runner.as_data(value, **kwargs)
    assert (caught.value.message, caught.value.hint) == (message, hint)


# ---- first_error_line / _a_tasks_failure --------------------------------------------------------------------------


def test_a_tasks_own_error_is_not_the_playbook_error():
    stdout = "TASK [x] ***\n[ERROR]: Task failed: boom\nOrigin: /p/t.yml:3:3\n\nfatal: [n1]: FAILED! => {}\n[ERROR]:later\n"
    assert runner.first_error_line(stdout) == "later"
    assert runner.first_error_line("[ERROR]: loop\n  failed: [n1] (item=a)\n") == ""
    assert runner._a_tasks_failure(["[ERROR]: x", "fatal: [n1]: FAILED!"]) is True
    assert runner._a_tasks_failure(["[ERROR]: x", "  failed: [n1] (item=a)"]) is True
    assert runner._a_tasks_failure(["fatal: [n1]"]) is False
    assert runner._a_tasks_failure(["[ERROR]: x", "noise", "PLAY RECAP ***", "fatal: [n1]"]) is False
    assert runner._a_tasks_failure(["[ERROR]: x", "RUNNING HANDLER [h]", "fatal: [n1]"]) is False
    assert runner._a_tasks_failure(["[ERROR]: x", "noise"]) is False
    assert runner._a_tasks_failure(["[ERROR]: x", "FATAL: [n1]", "FAILED: [n1]"]) is False


def test_an_error_followed_by_the_next_task_is_the_playbook_error():
    stdout = "[ERROR]: undefined variable: x\nTASK [next] ***\nfatal: [n1]: FAILED!\n"
    assert runner.first_error_line(stdout) == "undefined variable: x"


def test_the_origin_is_looked_for_only_in_the_three_lines_after_the_error():
    assert runner.first_error_line("[ERROR]: a\n\n\n\nOrigin: /far\n") == "a"
    assert runner.first_error_line("[ERROR]: a\n\n\nOrigin: /near\n") == "a (Origin: /near)"
    assert runner.first_error_line("Origin: /before\n[ERROR]: a\n") == "a"
    assert runner.first_error_line("x\nOrigin: /before\nERROR! b\n") == "b"
    assert runner.first_error_line("[ERROR]:tight: colon\n") == "tight: colon"
    assert runner.first_error_line("[error]: lower\n") == ""


# ---- mitogen_strategy_dir / find_program / search_path ----------------------------------------------------------


def test_the_mitogen_strategy_directory_comes_from_the_installed_package(monkeypatch):
    spec = importlib.util.spec_from_loader("ansible_mitogen", loader=None, is_package=True)
    spec.submodule_search_locations = ["/site/ansible_mitogen"]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec if name == "ansible_mitogen" else None)
    assert runner.mitogen_strategy_dir() == Path("/site/ansible_mitogen/plugins/strategy")


@pytest.mark.parametrize("locations", [None, []])
def test_without_mitogen_the_strategy_is_refused(monkeypatch, locations):
    if locations is None:
        monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    else:
        spec = importlib.util.spec_from_loader("ansible_mitogen", loader=None, is_package=True)
        spec.submodule_search_locations = locations
        monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    with pytest.raises(EnvironmentProblem) as caught:
        runner.mitogen_strategy_dir()
    assert (caught.value.message, caught.value.hint) == ("--strategy mitogen needs the mitogen package", "pip install 'mitogen>=0.3.54,<0.4'")


@pytest.fixture
def venv(tmp_path, monkeypatch):
    """An interpreter in tmp/venv/bin and a PATH of tmp/path only."""
    bin_dir, on_path = tmp_path / "venv" / "bin", tmp_path / "path"
    bin_dir.mkdir(parents=True)
    on_path.mkdir()
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", str(on_path))
    return bin_dir, on_path


def _tool(where: Path, name: str) -> Path:
    path = where / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_programs_beside_the_interpreter_win_over_path(venv):
    bin_dir, on_path = venv
    assert runner.find_program("tool") is None
    _tool(on_path, "tool")
    assert runner.find_program("tool") == str(on_path / "tool")
    _tool(bin_dir, "tool")
    assert runner.find_program("tool") == str(bin_dir / "tool")


def test_the_search_path_puts_megaprovs_bin_first(venv, monkeypatch):
    bin_dir, on_path = venv
    _tool(on_path, "ansible-playbook")
    assert runner.search_path() == f"{bin_dir}:{on_path}"
    _tool(bin_dir, "ansible-playbook")
    monkeypatch.delenv("PATH")
    assert runner.search_path() == f"{bin_dir}:/usr/bin:/bin"


def test_without_ansible_playbook_there_is_no_search_path(venv):
    with pytest.raises(EnvironmentProblem) as caught:
        runner.search_path()
    assert (caught.value.message, caught.value.hint) == ("ansible-playbook is not installed", "pip install megaprov (it depends on ansible-core)")


# ---- epoch / new_private_dir ----------------------------------------------------------------------------------------


def test_epoch_reads_iso_stamps_and_nothing_else():
    assert runner.epoch("2026-01-01T00:00:00Z") == 1767225600.0
    assert runner.epoch("2026-01-01T00:00:00.250+00:00") == 1767225600.25
    assert runner.epoch("2026-01-01T00:00:00.%3N") is None
    assert runner.epoch(1767225600) is None


def test_private_dirs_are_named_by_time_and_label_and_pruning_survives_what_it_cannot_remove(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("k")
    runs = tmp_path / "state" / "runs"
    runs.mkdir(parents=True)
    (runs / "00000000-000000-000000-link").symlink_to(outside)  # sorts first: pruned, and rmtree refuses a link
    for i in range(runner.KEEP_RUNS):
        (runs / f"00000001-000000-{i:06d}-old").mkdir()
    made = runner.new_private_dir(tmp_path / "state", "bootstrap")
    assert re.fullmatch(r"20\d{6}-\d{6}-\d{6}-bootstrap", made.name), made.name
    assert (outside / "keep").read_text() == "k"
    assert not (runs / "00000001-000000-000000-old").exists() and made.is_dir()


# ---- run (ansible-runner stood in) ----------------------------------------------------------------------------------


def _fake_ansible_runner(monkeypatch, tmp_path, events, status="successful", rc=0, stdout: bytes | None = None):
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    if stdout is not None:
        (artifacts / "stdout").write_bytes(stdout)
    calls = []

    def run(event_handler, **kwargs):
        calls.append(kwargs)
        answers = [event_handler(dict(e)) for e in events]
        calls.append(answers)
        return types.SimpleNamespace(status=status, rc=rc, config=types.SimpleNamespace(artifact_dir=str(artifacts)))

    monkeypatch.setitem(sys.modules, "ansible_runner", types.SimpleNamespace(run=run))
    ticks = iter([100.0, 103.456])
    monkeypatch.setattr(runner, "time", types.SimpleNamespace(monotonic=lambda: next(ticks)))
    return artifacts, calls


def _spec(tmp_path, **options):
    return runner.RunSpec(
        tmp_path / "play.yml", (tmp_path / "inv.ini",), tmp_path / "run", tmp_path, tmp_path / "state" / "facts" / "abc", runner.RunOptions(**options)
    )


EVENTS = [
    _ev("playbook_on_play_start", created="2026-01-01T00:00:00", play="P"),
    _on("runner_on_ok", "n1", "Facts", {"f": 1}, "2026-01-01T00:00:01", "2026-01-01T00:00:03", task_action="x.facts"),
    _on("runner_on_failed", "n2", "Install", {"msg": "E: nope"}),
    _ev("playbook_on_stats", ok={"n1": 1}, failures={"n2": 1}, artifact_data={"said": 1}),
]


def test_run_folds_the_events_and_reports_what_happened(tmp_path, venv, monkeypatch):
    _tool(venv[0], "ansible-playbook")
    artifacts, calls = _fake_ansible_runner(monkeypatch, tmp_path, EVENTS, status="failed", rc=2, stdout=b"PLAY\n[ERROR]: bad \xff byte\n")
    (tmp_path / "state" / "facts" / "abc").mkdir(parents=True)  # already there: fine
    seen = []
    result = runner.run(_spec(tmp_path), on_event=seen.append, collect=("x.facts",))
    assert seen == EVENTS and calls[1] == [True] * len(EVENTS)
    assert calls[0] == runner.build_run_kwargs(_spec(tmp_path), None, f"{venv[0]}:{venv[1]}")
    assert result == runner.RunResult(
        status="failed",
        rc=2,
        hosts=[runner.HostStats("n1", ok=1, seconds=2.0), runner.HostStats("n2", failed=1)],
        failures=[runner.Failure("n2", "Install", "P", "E: nope", False)],
        results=[runner.TaskResult("n1", "Facts", "x.facts", {"f": 1}, (runner.epoch("2026-01-01T00:00:01"), runner.epoch("2026-01-01T00:00:03")))],
        artifacts=artifacts,
        seconds=3.46,
        error_line="bad \ufffd byte",
        plays=[("P", runner.epoch("2026-01-01T00:00:00"))],
        data={"said": 1},
        stats_seen=True,
    )
    assert not result.ok and result.changed == 0


def test_a_run_that_never_started_has_rc_1_and_no_error_line(tmp_path, venv, monkeypatch):
    _tool(venv[0], "ansible-playbook")
    _fake_ansible_runner(monkeypatch, tmp_path, [], status="canceled", rc=None)
    result = runner.run(_spec(tmp_path))
    assert (result.status, result.rc, result.error_line, result.stats_seen, result.hosts) == ("canceled", 1, "", False, [])
    assert (tmp_path / "state" / "facts" / "abc").is_dir()


def test_a_mitogen_run_points_ansible_at_mitogens_strategy(tmp_path, venv, monkeypatch):
    _tool(venv[0], "ansible-playbook")
    _, calls = _fake_ansible_runner(monkeypatch, tmp_path, [], stdout=b"ok\n")
    spec = importlib.util.spec_from_loader("ansible_mitogen", loader=None, is_package=True)
    spec.submodule_search_locations = ["/site/ansible_mitogen"]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    result = runner.run(_spec(tmp_path, strategy="mitogen"))
    assert calls[0]["envvars"]["ANSIBLE_STRATEGY_PLUGINS"] == "/site/ansible_mitogen/plugins/strategy"
    assert result.ok and result.error_line == ""


def test_a_linear_run_does_not_need_mitogen(tmp_path, venv, monkeypatch):
    _tool(venv[0], "ansible-playbook")
    _, calls = _fake_ansible_runner(monkeypatch, tmp_path, [])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert runner.run(_spec(tmp_path, strategy="free")).ok
    assert calls[0]["envvars"]["ANSIBLE_STRATEGY"] == "free" and "ANSIBLE_STRATEGY_PLUGINS" not in calls[0]["envvars"]


def test_free_strategy_and_skip_tags_reach_the_kwargs():
    spec = runner.RunSpec(Path("/p.yml"), (), Path("/r"), Path("/c"), Path("/f"), runner.RunOptions(strategy="free", skip_tags=("a", "b")))
    kwargs = runner.build_run_kwargs(spec)
    assert kwargs["envvars"]["ANSIBLE_STRATEGY"] == "free" and kwargs["skip_tags"] == "a,b"
