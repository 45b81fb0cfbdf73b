"""What an operator's inventory makes of the ssh argv (cluster/sshcmd.py) and what ops/remote.py returns or raises
for each outcome of its playbook run: the exact values, so that a changed option, flag or message fails a test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from megaprov.cluster import inventory as inv
from megaprov.cluster import plays, runner
from megaprov.cluster.sshcmd import ssh_argv
from megaprov.errors import HostsUnreachable, RunFailed
from megaprov.ops import remote
from megaprov.output import SILENT

BASE = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=15"]
PINNED = "-o UserKnownHostsFile=/etc/megaprov/known_hosts -o StrictHostKeyChecking=yes"


def inventory(host_vars: dict[str, Any], group_vars: dict[str, dict[str, Any]] | None = None) -> inv.Inventory:
    host = inv.Host("head1", groups={"head"}, vars=host_vars)
    return inv.Inventory(Path("inventory.ini"), {"head1": host}, {"head": ["head1"]}, group_vars or {})


def test_every_connection_setting_of_the_inventory_reaches_ssh_in_order() -> None:
    found = inventory(
        {
            "ansible_host": "10.0.0.5",
            "ansible_port": 2222,
            "ansible_user": "ops",
            "ansible_ssh_private_key_file": "/home/ops/.ssh/cluster",
            "ansible_ssh_common_args": f"{PINNED} -J ops@bastion",
            "ansible_ssh_extra_args": "-o 'ProxyCommand=nc %h %p'",
        }
    )
    assert ssh_argv(found, "head1", "-L", "9090:localhost:9090") == [
        *BASE,
        "-L",
        "9090:localhost:9090",
        "-p",
        "2222",
        "-l",
        "ops",
        "-i",
        "/home/ops/.ssh/cluster",
        "-o",
        "UserKnownHostsFile=/etc/megaprov/known_hosts",
        "-o",
        "StrictHostKeyChecking=yes",
        "-J",
        "ops@bastion",
        "-o",
        "ProxyCommand=nc %h %p",
        "--",
        "10.0.0.5",
    ]


def test_a_host_without_connection_settings_is_reached_by_its_name() -> None:
    assert ssh_argv(inventory({}), "head1") == [*BASE, "--", "head1"]


def test_empty_settings_add_no_flag() -> None:
    found = inventory({"ansible_port": "", "ansible_user": "", "ansible_ssh_private_key_file": None, "ansible_ssh_common_args": ""})
    assert ssh_argv(found, "head1") == [*BASE, "--", "head1"]


def test_group_settings_apply_and_the_host_overrides_them() -> None:
    found = inventory({"ansible_user": "admin"}, {"all": {"ansible_user": "ops", "ansible_ssh_common_args": PINNED}, "head": {"ansible_port": 22}})
    argv = ssh_argv(found, "head1")
    pinned = ["-o", "UserKnownHostsFile=/etc/megaprov/known_hosts", "-o", "StrictHostKeyChecking=yes"]
    assert argv == [*BASE, "-p", "22", "-l", "admin", *pinned, "--", "head1"]
    assert "StrictHostKeyChecking=no" not in argv


def test_only_extra_args_are_split_like_a_shell() -> None:
    found = inventory({"ansible_ssh_extra_args": "-o 'ProxyJump=ops@bastion:2200'"})
    assert ssh_argv(found, "head1") == [*BASE, "-o", "ProxyJump=ops@bastion:2200", "--", "head1"]


# ops/remote.py


class FakeRun:
    def __init__(self, result: runner.RunResult) -> None:
        self.result = result
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> runner.RunResult:
        self.calls.append((args, kwargs))
        return self.result


def run_result(
    tmp_path: Path, *, rc: int = 0, status: str = "successful", failures: list[runner.Failure] | None = None, **kw: Any
) -> runner.RunResult:
    return runner.RunResult(status, rc, [], failures or [], kw.pop("results", []), tmp_path / "art", 0.1, **kw)


def command_output(monkeypatch: pytest.MonkeyPatch, result: runner.RunResult, limit: int = 100) -> tuple[str, FakeRun]:
    fake = FakeRun(result)
    monkeypatch.setattr(plays, "run", fake)
    text = remote.command_output(
        Path("inv.ini"),
        "cluster_status.yml",
        {"x": 1},
        command="status",
        role="the head",
        host="head1",
        doing="sinfo failed",
        limit=limit,
        report=SILENT,
    )
    return text, fake


def task(stdout: Any = None) -> runner.TaskResult:
    return runner.TaskResult("head1", "run", "ansible.builtin.command", {} if stdout is None else {"stdout": stdout})


def test_the_run_is_sized_for_one_host_and_collects_command_tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, fake = command_output(monkeypatch, run_result(tmp_path, results=[task("x")]))
    assert fake.calls == [
        (("cluster_status.yml", Path("inv.ini"), {"x": 1}, SILENT), {"hosts": 1, "collect": ("ansible.builtin.command", "command")}),
    ]


def test_the_stdout_of_every_command_task_is_joined_then_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = [task("ab"), task(), task(12), task("cdef")]
    assert command_output(monkeypatch, run_result(tmp_path, results=results))[0] == "ab12cdef"
    assert command_output(monkeypatch, run_result(tmp_path, results=results), limit=5)[0] == "ab12c"


def test_an_unreachable_host_names_the_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failures = [runner.Failure("head1", "Gathering Facts", "p", "ssh: connect refused", unreachable=True)]
    with pytest.raises(HostsUnreachable) as caught:
        command_output(monkeypatch, run_result(tmp_path, rc=4, status="failed", failures=failures, error_line="other"))
    assert caught.value.message == "status: the head head1 is unreachable: ssh: connect refused"
    assert caught.value.hint == "check that it runs and answers SSH"


def test_a_failed_task_is_a_failed_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failures = [runner.Failure("head1", "run", "p", "rc 1: sinfo: not found", unreachable=False)]
    with pytest.raises(RunFailed) as caught:
        command_output(monkeypatch, run_result(tmp_path, rc=2, status="failed", failures=failures))
    assert (caught.value.message, caught.value.hint) == ("status: sinfo failed on head1: rc 1: sinfo: not found", f"see {tmp_path / 'art'}/stdout")


@pytest.mark.parametrize(("error_line", "why"), [("ERROR! the playbook could not be read", "ERROR! the playbook could not be read"), ("", "timeout")])
def test_a_run_without_failures_says_its_error_line_or_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error_line: str, why: str) -> None:
    with pytest.raises(RunFailed) as caught:
        command_output(monkeypatch, run_result(tmp_path, rc=1, status="timeout", error_line=error_line))
    assert (caught.value.message, caught.value.hint) == (f"status: sinfo failed on head1: {why}", f"see {tmp_path / 'art'}/stdout")


def test_a_play_that_reached_no_host_is_unreachable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(HostsUnreachable) as caught:
        command_output(monkeypatch, run_result(tmp_path))
    assert caught.value.message == "status: the head head1 returned nothing: the play reached no host"
    assert caught.value.hint == "check that head1 is a host of inv.ini as Ansible reads it (ansible-inventory -i inv.ini --graph)"
