"""The systemd launcher's decisions around the plays it runs: when a failed start stops what it started, and when the
units have given up. The plays themselves run on the lab (tests/integration/test_lab_training.py); here the play is
replaced by the result Ansible reported, to pin the decision taken on it (tests/unit/training/test_task_names.py
feeds it the events of the real playbooks, with every task renamed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from megaprov.cluster import plays as cluster_plays
from megaprov.cluster import runner
from megaprov.errors import MegaprovError, UsageError
from megaprov.output import SILENT
from megaprov.training import follow, jobs
from megaprov.training.launchers.systemd import UNITS_MAY_RUN, SystemdLauncher

PLAYBOOKS = Path(__file__).resolve().parents[3] / "ansible_collections" / "megaprov" / "cluster" / "playbooks"


def _job() -> jobs.Job:
    return jobs.Job(
        "tiny", Path("/inv"), ["node1", "node2"], "/shared", "/shared/jobs/tiny", Path("/x"), "/shared/checkpoints/tiny", "megaprov-job-tiny.service"
    )


def _result(*failures: runner.Failure, data: dict | None = None, status: str = "", stats_seen: bool = True) -> runner.RunResult:
    """A run that ended with the playbook's stats (``stats_seen``), as every run that ansible-playbook finished does."""
    status = status or ("failed" if failures else "successful")
    return runner.RunResult(status, 2 if failures else 0, [], list(failures), [], Path("/tmp/run"), 1.0, data=data or {}, stats_seen=stats_seen)


def _tasks(playbook: str) -> list[dict]:
    import yaml

    return [t for play in yaml.safe_load((PLAYBOOKS / playbook).read_text()) for t in play.get("tasks", [])]


@pytest.fixture
def plays(monkeypatch):
    """The playbooks the launcher ran, in order; each answers with the result set for it in `answers`, else success."""
    ran: list[str] = []
    answers: dict[str, runner.RunResult] = {}

    def play(playbook, inventory, extravars, report, hosts, collect=(), strategy="linear"):
        ran.append(playbook)
        return answers.get(playbook, _result())

    monkeypatch.setattr(cluster_plays, "run", play)
    return ran, answers


def test_the_launch_play_says_units_may_run_right_before_it_starts_them():
    """The decision below rests on the play: its set_stats comes after every check and the job directory, and just
    before the start step."""
    tasks = _tasks("job_launch.yml")
    says = [i for i, t in enumerate(tasks) if t.get("ansible.builtin.set_stats", {}).get("data", {}).get(UNITS_MAY_RUN) is True]
    steps = [t.get("megaprov.cluster.job_step", {}).get("step") for t in tasks]
    assert says == [steps.index("start") - 1] and steps.index("check") < says[0]
    assert any("import_tasks" in k for t in tasks[: says[0]] for k in t)  # the job directory (tasks/job_dir.yml) is before it


def test_a_start_that_failed_on_one_node_stops_the_units_that_did_start(plays):
    ran, answers = plays
    answers["job_launch.yml"] = _result(runner.Failure("node2", "any task", "any play", "unit failed", False), data={UNITS_MAY_RUN: True})
    with pytest.raises(MegaprovError) as exc:
        SystemdLauncher().start(_job(), {}, SILENT, "linear")
    assert ran == ["job_launch.yml", "job_stop.yml"] and "not started" in exc.value.message


@pytest.mark.parametrize("usage", [True, False])
def test_a_launch_refused_before_any_unit_started_stops_nothing(plays, usage):
    """A refusal (this job already runs on a node, the port is taken) or a failed job directory must leave a running
    job alone: no stop play."""
    ran, answers = plays
    answers["job_launch.yml"] = _result(runner.Failure("node1", "any task", "any play", "refused", False, usage=usage))
    with pytest.raises(MegaprovError) as exc:
        SystemdLauncher().start(_job(), {}, SILENT, "linear")
    assert ran == ["job_launch.yml"]
    assert isinstance(exc.value, UsageError) == usage


@pytest.mark.parametrize("status", ["canceled", "timeout", "failed"])
def test_a_launch_that_ended_without_its_stats_stops_the_units(plays, status):
    """Cancelled, timed out, or ansible-playbook gone mid-run: no stats, so the play could not say whether it had
    reached the start step; units may run, and are stopped."""
    ran, answers = plays
    answers["job_launch.yml"] = _result(runner.Failure("node1", "any task", "any play", "interrupted", False), status=status, stats_seen=False)
    with pytest.raises(MegaprovError):
        SystemdLauncher().start(_job(), {}, SILENT, "linear")
    assert ran == ["job_launch.yml", "job_stop.yml"]


def test_a_start_that_succeeded_runs_one_play(plays):
    ran, _ = plays
    SystemdLauncher().start(_job(), {}, SILENT, "linear")
    assert ran == ["job_launch.yml"]


@pytest.mark.parametrize(
    ("states", "gave_up"),
    [
        ({"node1": "active", "node2": "active"}, False),
        ({"node1": "failed", "node2": "activating"}, False),  # RestartSec: systemd is about to start it again
        ({"node1": "failed", "node2": "reloading"}, False),
        ({"node1": "failed", "node2": "inactive"}, True),
        ({"node1": "failed", "node2": "failed"}, True),
        ({"node1": "deactivating", "node2": "failed"}, True),  # stopping: it will not start again
    ],
)
def test_the_units_gave_up_only_when_none_of_them_will_start_again(monkeypatch, states, gave_up):
    launcher = SystemdLauncher()
    monkeypatch.setattr(launcher, "states", lambda job, report: {h: {"ActiveState": s} for h, s in states.items()})
    log = follow.JobLog(128)
    log.feed("node1", "megaprov: node node1 (node rank 0): torchrun exited with 1 at 2026-12-02T10:00:00Z", 0.0)
    said = launcher.gave_up(_job(), log, SILENT)
    assert (said is not None) == gave_up
    if gave_up:
        assert said == "torchrun ended on node1 (failed-1), node2 (waiting) and the units gave up"
