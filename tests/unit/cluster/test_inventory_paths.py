"""An inventory path means the same in every command. A relative ``-i`` is read from the current directory,
once, where the flag is read (ansible-runner runs Ansible in the collection's directory, where a relative path names
nothing: the play matched no host and doctor said "nothing wrong"); and a check that reached no node is an error,
never health."""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from megaprov.cluster import runner
from megaprov.commands import base, build_parser, leaf
from megaprov.errors import ExitCode, HostsUnreachable
from megaprov.ops import logs, remote
from megaprov.ops.doctor import health
from megaprov.output import SILENT

ROOT = Path(__file__).resolve().parents[3]


def unreachable(directory: Path) -> Path:
    """A cluster whose one host refuses SSH at once (127.0.0.1, port 1), with the observe stage on (for logs)."""
    (directory / "group_vars").mkdir(parents=True, exist_ok=True)
    (directory / "group_vars" / "all.yml").write_text("megaprov_observe: true\nmegaprov_gpu_expected: false\n")
    path = directory / "inventory.ini"
    path.write_text("[head]\nhead ansible_host=127.0.0.1 ansible_port=1\n[gpu_nodes]\nhead\n")
    return path


def cli(cwd: Path, state: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "HOME": str(state), "MEGAPROV_STATE": str(state)}
    return subprocess.run([sys.executable, "-m", "megaprov", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("command", [["doctor"], ["logs"]], ids=["doctor", "logs"])
def test_a_relative_inventory_is_the_same_cluster_as_its_absolute_path(tmp_path: Path, command: list[str]) -> None:
    path = unreachable(tmp_path / "site" / "cluster")
    relative = cli(tmp_path, tmp_path / "state", *command, "-i", "site/cluster/inventory.ini")
    absolute = cli(tmp_path, tmp_path / "state", *command, "-i", str(path))
    assert absolute.returncode == ExitCode.UNREACHABLE, absolute.stderr[-2000:]
    assert relative.returncode == absolute.returncode, relative.stdout + relative.stderr[-2000:]
    assert "nothing wrong" not in relative.stdout


# ---- the flag, read once


FLAGGED = sorted(
    " ".join(path)
    for path, parser in (
        (p, leaf(build_parser(), list(p))[0]) for p in (("bootstrap",), ("preflight",), ("doctor",), ("logs",), ("top",), ("status",), ("train",))
    )
    if any("-i" in a.option_strings for a in parser._actions)
)


@pytest.mark.parametrize("command", FLAGGED)
@pytest.mark.parametrize("given", ["inventory.ini", "site/../site/inventory.ini", "./x/inv.yml"])
def test_every_command_reads_a_relative_inventory_from_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, given: str
) -> None:
    monkeypatch.chdir(tmp_path)
    parser, _ = leaf(build_parser(), command.split())
    action = next(a for a in parser._actions if "-i" in a.option_strings)
    value = action.type(given) if callable(action.type) else given
    assert value == os.path.normpath(tmp_path / given), value


@pytest.mark.parametrize("given", ["inventory.ini", "sub/hosts.yml"])
def test_the_default_inventory_and_the_old_positional_form_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEGAPROV_INVENTORY", given)
    assert base.default_inventory() == (str(tmp_path / given), "MEGAPROV_INVENTORY")
    args = argparse.Namespace(inventory=None, inventory_positional=given, command_path="bootstrap")
    assert base.need_inventory(args) == str(tmp_path / given)


@pytest.mark.parametrize("given", ["inventory.ini", "a/b/hosts", "../x.ini"])
def test_ansible_runner_is_given_an_absolute_inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    monkeypatch.chdir(tmp_path)
    spec = runner.RunSpec(Path("/p/play.yml"), (Path(given),), Path("/state/runs/x"), Path("/p"), Path("/state/facts/x"))
    assert runner.build_run_kwargs(spec)["inventory"] == [os.path.normpath(tmp_path / given)]


# ---- a check that reached no node


def empty_run(tmp_path: Path) -> runner.RunResult:
    """What ansible-runner returns for a play that matched no host: rc 0, no host, no task."""
    return runner.RunResult(status="successful", rc=0, hosts=[], failures=[], results=[], artifacts=tmp_path, seconds=0.1)


@pytest.mark.parametrize("level", ["passive", "quick"])
def test_a_doctor_run_that_reached_no_node_is_not_health(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: str) -> None:
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    monkeypatch.setattr(runner, "run", lambda *a, **k: empty_run(tmp_path))
    path = unreachable(tmp_path)
    with pytest.raises(HostsUnreachable, match="reached none of the 1 node"):
        health.examine(health.Request(str(path), level, report=SILENT))


def test_a_doctor_run_that_missed_one_node_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    path = tmp_path / "inventory.ini"
    path.write_text("[head]\nh1\n[gpu_nodes]\nn1\n[all:vars]\nmegaprov_gpu_expected=false\n")
    probe = runner.TaskResult("h1", "probe", "megaprov.cluster.doctor_probe", {})
    monkeypatch.setattr(runner, "run", lambda *a, **k: runner.RunResult("successful", 0, [], [], [probe], tmp_path, 0.1))
    report = health.examine(health.Request(str(path), report=SILENT))
    assert [(f.code, f.node) for f in report.findings if f.severity == "error"] == [("NODE_UNREACHABLE", "n1")]


@pytest.mark.parametrize("what", ["logs", "status"])
def test_a_command_on_the_head_that_reached_no_host_is_unreachable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str) -> None:
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    monkeypatch.setattr(runner, "run", lambda *a, **k: empty_run(tmp_path))
    path = unreachable(tmp_path)
    if what == "logs":
        from megaprov.cluster import inventory as inv
        from megaprov.paths import cluster_defaults, roles_dir

        query = logs.build(inv.load(path, roles_dir(), cluster_defaults()), None, None, None, 10)
        with pytest.raises(HostsUnreachable, match="the head head returned nothing"):
            logs.read(str(path), query, SILENT)
    else:
        with pytest.raises(HostsUnreachable, match="returned nothing"):
            remote.command_output(
                path, "cluster_status.yml", {}, command="status", role="the Slurm controller", host="head", doing="x", limit=10, report=SILENT
            )


UNREACHABLE_STDOUT = """PLAY [Doctor - read every node] ****

TASK [Gathering Facts] ****
[ERROR]: Task failed: Failed to connect to the host via ssh: ssh: connect to host 127.0.0.1 port 1: Connection refused

Task failed.

<<< caused by >>>

Failed to connect to the host via ssh: ssh: connect to host 127.0.0.1 port 1: Connection refused

fatal: [head]: UNREACHABLE! => {"changed": false, "unreachable": true}

PLAY RECAP ****
head : ok=0 changed=0 unreachable=1 failed=0
"""


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        # without a terminal (cron, CI, a subprocess) ansible-core prints a host's failure as [ERROR] too: doctor called
        # an unreachable node "the play did not run" (exit 3) there, and NODE_UNREACHABLE (exit 4) on a terminal
        (UNREACHABLE_STDOUT, ""),
        (UNREACHABLE_STDOUT.replace("fatal: [head]: UNREACHABLE!", "failed: [head] (item=x)"), ""),
        ("PLAY [x] ****\n[ERROR]: the field 'hosts' is required\nOrigin: /p/x.yml:1:3\n", "the field 'hosts' is required (Origin: /p/x.yml:1:3)"),
        ("[ERROR]: bad pattern\n\nTASK [x] ****\nfatal: [h]: FAILED! => {}\n", "bad pattern"),
    ],
)
def test_a_hosts_failure_is_not_a_play_that_did_not_run(stdout: str, expected: str) -> None:
    assert runner.first_error_line(stdout) == expected
