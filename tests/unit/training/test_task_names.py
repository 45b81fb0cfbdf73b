"""Renaming a task changes nothing megaprov decides. The events ansible-runner reports for the real job playbooks
(their tasks, modules and what the plays hand over with set_stats) are folded by the runner and read by the
launchers twice: once with the playbooks' task names, once with every task renamed. The exit code, the Slurm job id,
the job's state and the plays run must be the same, and the expected ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from megaprov.cluster import plays, runner
from megaprov.errors import MegaprovError
from megaprov.output import SILENT
from megaprov.training import jobs
from megaprov.training.launchers import slurm, systemd

PLAYBOOKS = Path(__file__).resolve().parents[3] / "ansible_collections" / "megaprov" / "cluster" / "playbooks"
KEYWORDS = {"name", "when", "register", "changed_when", "failed_when", "check_mode", "become", "become_user", "run_once", "loop", "vars", "tags"}


def _tasks(playbook: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, module, arguments) of every task a playbook runs, blocks and imported task files flattened, in order."""
    out: list[tuple[str, str, dict[str, Any]]] = []

    def walk(tasks: list[dict[str, Any]], base: Path) -> None:
        for task in tasks:
            if "block" in task:
                walk(task["block"], base)
                continue
            module = next(k for k in task if k not in KEYWORDS)
            if module.endswith("import_tasks"):
                walk(yaml.safe_load((base / task[module]).read_text()), base)
                continue
            out.append((task["name"], module, task[module] if isinstance(task[module], dict) else {}))

    for play in yaml.safe_load((PLAYBOOKS / playbook).read_text()):
        walk(play.get("tasks", []), PLAYBOOKS)
    return out


def _pick(playbook: str, module: str, **args: Any) -> str:
    """The name of the one task of ``playbook`` that calls ``module`` with ``args`` (and, for set_stats, hands
    over the key ``data``)."""
    data = args.pop("data", None)
    found = [
        name
        for name, mod, arguments in _tasks(playbook)
        if mod == module and all(arguments.get(k) == v for k, v in args.items()) and (data is None or data in arguments.get("data", {}))
    ]
    assert len(found) == 1, (playbook, module, args, found)
    return found[0]


def _events(steps: list[tuple[str, str, str, dict[str, Any]]], said: dict[str, Any]) -> list[dict[str, Any]]:
    """ansible-runner's events: a play start, one event per (kind, host, task, res), the stats with set_stats' data."""
    events: list[dict[str, Any]] = [{"event": "playbook_on_play_start", "event_data": {"play": "the play"}}]
    for kind, host, task, res in steps:
        action = res.pop("_action", "")
        events.append({"event": kind, "event_data": {"host": host, "task": task, "task_action": action, "res": res}})
    events.append({"event": "playbook_on_stats", "event_data": {"artifact_data": said}})
    return events


def folded(events: list[dict[str, Any]], collect: tuple[str, ...], artifacts: Path) -> runner.RunResult:
    """The result ansible-runner's events make, folded by the runner's own EventFolder as a real run folds them."""
    folder = runner.EventFolder(collect)
    for event in events:
        folder(event)
    failed = bool(folder.failures)
    return runner.RunResult(
        "failed" if failed else "successful",
        2 if failed else 0,
        folder.host_stats(),
        folder.failures,
        folder.results,
        artifacts,
        1.0,
        data=folder.data,
        stats_seen=folder.stats_seen,
    )


def _renamed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names: dict[str, str] = {}
    out = []
    for event in events:
        data = dict(event["event_data"])
        if "task" in data:
            data["task"] = names.setdefault(data["task"], f"renamed task {len(names) + 1}")
        out.append({**event, "event_data": data})
    assert all(e["event_data"].get("task", "").startswith("renamed") for e in out if "task" in e["event_data"])
    return out


def _job() -> jobs.Job:
    return jobs.Job(
        "tiny", Path("/inv"), ["node1", "node2"], "/shared", "/shared/jobs/tiny", Path("/x"), "/shared/checkpoints/tiny", "megaprov-job-tiny.service"
    )


def _outcome(monkeypatch, streams: dict[str, list[dict[str, Any]]], act) -> tuple[Any, ...]:
    """Run ``act(job)`` with each playbook answered by folding its event stream; (what it returned or the exit code
    it raised, the job's Slurm id, the plays run)."""
    ran: list[str] = []

    def play(playbook, inventory, extravars, report, hosts, collect=(), strategy="linear"):
        ran.append(playbook)
        return folded(streams.get(playbook, _events([], {})), collect, Path("/r"))

    monkeypatch.setattr(plays, "run", play)
    monkeypatch.setattr(slurm.inv, "load", lambda *a, **k: None)
    monkeypatch.setattr(slurm, "submit_host", lambda found: "head")
    monkeypatch.setattr(slurm, "current_id", lambda job: job.slurm_id or "0")
    job = _job()
    try:
        value = act(job)
    except MegaprovError as exc:
        value = int(exc.exit_code)
    return value, job.slurm_id, ran


def _both(monkeypatch, playbook: str, events: list[dict[str, Any]], act) -> tuple[Any, ...]:
    with_names = _outcome(monkeypatch, {playbook: events}, act)
    renamed = _outcome(monkeypatch, {playbook: _renamed(events)}, act)
    assert renamed == with_names
    return with_names


def _ok(host: str, task: str, action: str = "") -> tuple[str, str, str, dict[str, Any]]:
    return ("runner_on_ok", host, task, {"_action": action})


def test_a_start_that_failed_after_units_started_stops_them_whatever_the_tasks_are_called(monkeypatch):
    check = _pick("job_launch.yml", "megaprov.cluster.job_step", step="check")
    prepare = _pick("job_launch.yml", "megaprov.cluster.job_step", step="dir")
    say = _pick("job_launch.yml", "ansible.builtin.set_stats", data=systemd.UNITS_MAY_RUN)
    start = _pick("job_launch.yml", "megaprov.cluster.job_step", step="start")
    steps = [_ok("node1", check), _ok("node2", check), _ok("node1", prepare), _ok("node1", say), _ok("node1", start)]
    steps.append(("runner_on_failed", "node2", start, {"msg": "systemctl restart megaprov-job-tiny.service failed: no"}))
    events = _events(steps, {systemd.UNITS_MAY_RUN: True})
    code, _, ran = _both(monkeypatch, "job_launch.yml", events, lambda job: systemd.SystemdLauncher().start(job, {}, SILENT, "linear"))
    assert (code, ran) == (3, ["job_launch.yml", "job_stop.yml"])


def test_a_refused_launch_is_a_usage_error_and_stops_nothing_whatever_the_tasks_are_called(monkeypatch):
    check = _pick("job_launch.yml", "megaprov.cluster.job_step", step="check")
    refusal = {"msg": "job tiny is running on node2 (megaprov-job-tiny.service is active)", "usage_error": True}
    events = _events([_ok("node1", check), ("runner_on_failed", "node2", check, refusal)], {})
    code, _, ran = _both(monkeypatch, "job_launch.yml", events, lambda job: systemd.SystemdLauncher().start(job, {}, SILENT, "linear"))
    assert (code, ran) == (2, ["job_launch.yml"])


def test_a_cluster_without_slurm_is_a_usage_error_whatever_the_tasks_are_called(monkeypatch):
    sinfo = _tasks("job_slurm.yml")[0][0]
    refuse = [name for name, module, _ in _tasks("job_slurm.yml") if module == "megaprov.cluster.refuse"]
    assert len(refuse) == 3  # no Slurm here; a request Slurm cannot satisfy; a grow with no idle node
    steps = [
        _ok("head", sinfo, "ansible.builtin.command"),
        ("runner_on_failed", "head", refuse[0], {"msg": "Slurm does not answer", "usage_error": True}),
    ]
    code, slurm_id, _ = _both(monkeypatch, "job_slurm.yml", _events(steps, {}), lambda job: slurm.SlurmLauncher().start(job, {}, SILENT, "linear"))
    assert (code, slurm_id) == (2, "")


def test_a_submitted_job_gets_its_slurm_id_whatever_the_tasks_are_called(monkeypatch):
    say = _pick("job_slurm.yml", "ansible.builtin.set_stats", data=slurm.SUBMITTED)
    sbatch = [name for name, module, args in _tasks("job_slurm.yml") if module == "ansible.builtin.command" and "--parsable" in args.get("argv", [])]
    steps = [_ok("head", n, "ansible.builtin.command") for n, m, _ in _tasks("job_slurm.yml")[:1]]
    steps += [("runner_on_ok", "head", sbatch[0], {"_action": "ansible.builtin.command", "stdout": "4242"}), _ok("head", say)]
    value, slurm_id, _ = _both(
        monkeypatch, "job_slurm.yml", _events(steps, {slurm.SUBMITTED: "4242"}), lambda job: slurm.SlurmLauncher().start(job, {}, SILENT, "linear")
    )
    assert (value, slurm_id) == (None, "4242")


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("JobId=4242 JobState=PENDING Reason=Priority NodeList= \n--- pending\n4241\n4242\n", ("PENDING", "Priority", 2, True)),
        (
            "JobId=4242 JobState=FAILED Reason=NonZeroExitCode NodeList=node[1-2] ExitCode=1:0\n--- pending\n",
            ("FAILED", "NonZeroExitCode", None, False),
        ),
    ],
)
def test_the_job_state_is_read_whatever_the_tasks_are_called(monkeypatch, said, expected):
    read = _pick("job_slurm.yml", "ansible.builtin.set_stats", data=slurm.STATE)
    steps = [_ok("head", _tasks("job_slurm.yml")[0][0], "ansible.builtin.command"), _ok("head", read)]

    def state(job):
        job.slurm_id = "4242"
        found = slurm.SlurmLauncher().state(job, SILENT)
        return found.state, found.reason, found.position, found.alive

    value, _, ran = _both(monkeypatch, "job_slurm.yml", _events(steps, {slurm.STATE: said}), state)
    assert (value, ran) == (expected, ["job_slurm.yml"])
