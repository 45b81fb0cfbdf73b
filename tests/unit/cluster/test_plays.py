"""A job playbook's run (megaprov.cluster.plays.run: what it hands ansible-runner) and the one error a failed run
becomes (plays.failure), with ansible-runner's run stood in: everything else (paths, the state directory, the
errors) is real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from megaprov import paths
from megaprov.cluster import plays, runner
from megaprov.errors import ExitCode, HostsUnreachable, RunFailed, UsageError


class Progress:
    def __init__(self, hosts: int) -> None:
        self.hosts = hosts
        self.stopped = 0

    def stop(self) -> None:
        self.stopped += 1


class Report:
    """A Reporter that keeps the progress it made."""

    def __init__(self) -> None:
        self.made: list[Progress] = []

    def run(self, total_hosts: int) -> Progress:
        self.made.append(Progress(total_hosts))
        return self.made[-1]


def result(failures: list[runner.Failure], *, status: str = "failed", error_line: str = "", artifacts: str = "/state/runs/r1") -> runner.RunResult:
    return runner.RunResult(
        status=status, rc=2, hosts=[], failures=failures, results=[], artifacts=Path(artifacts), seconds=1.0, error_line=error_line
    )


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[runner.RunSpec, Any, Any]]:
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    seen: list[tuple[runner.RunSpec, Any, Any]] = []

    def fake_run(spec: runner.RunSpec, on_event: Any = None, collect: Any = ()) -> runner.RunResult:
        seen.append((spec, on_event, collect))
        return result([], status="successful")

    monkeypatch.setattr(runner, "run", fake_run)
    return seen


def test_run_hands_ansible_runner_the_playbook_inventory_and_settings(calls, tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[nodes]\nn1\n")
    extravars = {"megaprov_job": "gpt", "megaprov_job_nodes": ["n1", "n2"]}
    report = Report()
    got = plays.run("job_launch.yml", inventory, extravars, report, hosts=2, collect=("job_facts",), strategy="free")
    assert got.status == "successful"
    [(spec, on_event, collect)] = calls
    assert spec.playbook == paths.playbook("job_launch.yml") and spec.playbook.is_file()
    assert spec.inventories == (inventory,)
    assert spec.collections_root == paths.collections_root()
    assert spec.fact_cache_dir == paths.fact_cache_dir(inventory)
    # one private directory per run under the state's runs/, named after the playbook without its suffix
    assert spec.private_data_dir.parent == tmp_path / "state" / "runs" and spec.private_data_dir.is_dir()
    assert spec.private_data_dir.name.endswith("-job_launch")
    assert spec.options.extravars == extravars and spec.options.extravars is not extravars
    assert spec.options.strategy == "free"
    assert spec.options.check is False and spec.options.limit is None
    # the progress line is sized by the hosts, receives every event and stops when the run ends
    [progress] = report.made
    assert progress.hosts == 2 and on_event is progress
    assert collect == ("job_facts",)


def test_run_defaults_to_the_linear_strategy_and_collects_nothing(calls, tmp_path: Path) -> None:
    plays.run("job_stop.yml", tmp_path / "hosts.ini", {}, Report(), hosts=1)
    [(spec, _, collect)] = calls
    assert spec.options.strategy == "linear" and spec.options.extravars == {}
    assert collect == () and spec.private_data_dir.name.endswith("-job_stop")


def test_a_playbook_name_without_the_suffix_is_kept_whole(calls, tmp_path: Path) -> None:
    plays.run("job_status", tmp_path / "hosts.ini", {}, Report(), hosts=1)
    assert calls[0][0].private_data_dir.name.endswith("-job_status")


def test_the_progress_line_stops_when_the_run_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))

    def broken(spec: runner.RunSpec, on_event: Any = None, collect: Any = ()) -> runner.RunResult:
        assert on_event.stopped == 0
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run", broken)
    report = Report()
    with pytest.raises(KeyboardInterrupt):
        plays.run("job_launch.yml", tmp_path / "hosts.ini", {}, report, hosts=3)
    assert report.made[0].stopped == 1


def test_the_progress_line_stops_after_a_run_that_returns(calls, tmp_path: Path) -> None:
    report = Report()
    plays.run("job_launch.yml", tmp_path / "hosts.ini", {}, report, hosts=1)
    assert report.made[0].stopped == 1


# --- failure ------------------------------------------------------------------------------------------------------


def test_a_run_without_failed_tasks_says_its_error_line_and_where_its_output_is() -> None:
    error = plays.failure(result([], error_line="ERROR! the playbook could not be parsed", artifacts="/s/runs/7"), "job start")
    assert isinstance(error, RunFailed) and error.exit_code == ExitCode.RUN_FAILED
    assert error.one_line() == "job start: ERROR! the playbook could not be parsed: see /s/runs/7/stdout"


def test_a_run_without_failed_tasks_or_error_line_says_its_status() -> None:
    error = plays.failure(result([], status="timeout", artifacts="/s/runs/8"), "job stop")
    assert error.one_line() == "job stop: ansible-playbook ended with status timeout: see /s/runs/8/stdout"


def test_unreachable_nodes_are_named_sorted_and_the_hint_says_nothing_was_started() -> None:
    failures = [
        runner.Failure(
            host="n3", task="Gathering Facts", play="start", message="ssh: connect to host n3 port 22: Connection refused", unreachable=True
        ),
        runner.Failure(host="n1", task="Gathering Facts", play="start", message="timed out", unreachable=True),
        runner.Failure(host="n2", task="start the unit", play="start", message="unit failed", unreachable=False),
    ]
    error = plays.failure(result(failures), "job start")
    assert isinstance(error, HostsUnreachable)
    assert error.message == "job start: node(s) n1, n3 unreachable (ssh: connect to host n3 port 22: Connection refused)"
    assert error.hint == "check that they run and answer SSH; nothing was started"


def test_a_refusal_of_the_jobs_settings_is_a_usage_error_without_a_hint() -> None:
    failures = [
        runner.Failure(host="n1", task="check the job", play="start", message="nodes: 3 is more than the 2 hosts", unreachable=False, usage=True)
    ]
    error = plays.failure(result(failures), "job start")
    assert isinstance(error, UsageError) and error.exit_code == ExitCode.USAGE
    assert error.one_line() == "job start: nodes: 3 is more than the 2 hosts"


def test_the_first_failed_task_names_its_node_and_task() -> None:
    failures = [
        runner.Failure(host="n2", task="start the unit", play="start", message="Unit failed to start", unreachable=False),
        runner.Failure(host="n1", task="other", play="start", message="later", unreachable=False, usage=True),
    ]
    error = plays.failure(result(failures, artifacts="/s/runs/9"), "job start")
    assert isinstance(error, RunFailed)
    assert error.one_line() == "job start: n2: task 'start the unit' failed: Unit failed to start: see /s/runs/9/stdout"
