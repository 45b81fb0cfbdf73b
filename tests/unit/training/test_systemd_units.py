"""The systemd launcher as systemd and an operator see it: the unit file read by systemd's own rules (and by
systemd-analyze where it exists), its ExecStop script run by bash, what `stage` writes into the job directory, how the
units' states are read and said, and the launcher chosen for a job. The plays are replaced by the results Ansible
would report (tests/unit/training/test_systemd_launcher.py pins the decisions taken on them)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from megaprov import values
from megaprov.cluster import inventory as inv
from megaprov.cluster import plays as cluster_plays
from megaprov.cluster import runner
from megaprov.errors import MegaprovError
from megaprov.output import SILENT
from megaprov.training import follow, jobs, jobspec, launchers, render
from megaprov.training.launchers import systemd
from megaprov.training.launchers.slurm import SlurmLauncher
from megaprov.training.planner import GPUS, Cluster

ROOT = Path(__file__).resolve().parents[3]
LAB_TINY = ROOT / "examples" / "jobs" / "lab-tiny.yml"
UNIT = "megaprov-job-tiny.service"


def _spec(max_restarts: int | None = None) -> jobspec.JobSpec:
    spec = jobspec.parse(LAB_TINY.read_text())
    if max_restarts is None:
        return spec
    return spec.model_copy(update={"launch": spec.launch.model_copy(update={"max_restarts": max_restarts})})


def _job(**changes: Any) -> jobs.Job:
    hosts = ["node1", "node2"]
    job = jobs.Job("tiny", Path("/inv/inventory.ini"), hosts, "/shared", "/shared/jobs/tiny", Path("/x"), "/shared/checkpoints/tiny", UNIT)
    return replace(job, **changes)


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """A unit file read as systemd.syntax(7) says: ``[Section]`` headers, ``Key=Value`` lines (whitespace around both
    stripped), ``#``/``;`` comments and blank lines ignored. Every value of a key, in order, per section. A line
    systemd would warn about and ignore (no ``=``, a key before any section) fails here: a unit that loses a setting
    silently is the failure to catch; so does a trailing backslash (it would join the next line)."""
    assert text.endswith("\n"), "a unit ends with a newline"
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for number, line in enumerate(text.split("\n")[:-1], 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        assert not stripped.endswith("\\"), f"line {number} continues on the next one: {line!r}"
        if stripped.startswith("[") and stripped.endswith("]"):
            assert stripped[1:-1] not in sections, f"line {number}: section {stripped} twice"
            current = sections.setdefault(stripped[1:-1], {})
            continue
        key, equals, value = stripped.partition("=")
        assert equals and key.strip(), f"line {number} is no Key=Value setting: {line!r}"
        assert current is not None, f"line {number}: a setting before any section: {line!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def _single(unit: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, str]]:
    """Each key's value, every key set exactly once (a second line would add to or replace the first)."""
    for section, keys in unit.items():
        twice = {k: v for k, v in keys.items() if len(v) != 1}
        assert not twice, f"[{section}] sets {twice} more than once"
    return {section: {k: v[0] for k, v in keys.items()} for section, keys in unit.items()}


def _unit(spec: jobspec.JobSpec | None = None, job: jobs.Job | None = None, host: str = "node2", rank: int = 1, user: str = "megaprov", **kw: Any):
    text = systemd.unit_text(spec or _spec(), job or _job(), host, rank, user, kw.pop("lab", False), **kw)
    return _single(parse_unit(text))


# ---- the unit


def test_the_unit_says_who_wrote_it_and_how_to_stop_it_then_unit_and_service_sections():
    text = systemd.unit_text(_spec(), _job(), "node2", 1, "megaprov", False)
    assert text.splitlines()[0] == "# Written by megaprov train; megaprov job stop stops it."
    assert list(parse_unit(text)) == ["Unit", "Service"]
    assert [line for line in text.splitlines() if line.startswith("[")] == ["[Unit]", "[Service]"]


def test_every_setting_of_the_unit_and_what_systemd_does_with_it():
    spec = _spec()
    unit = _unit(spec)
    assert unit["Unit"] == {
        # what `systemctl status` and the journal show for the unit: the job, the node and its place in the job
        "Description": "megaprov job tiny on node2 (node rank 1 of 2)",
        # the rendezvous needs the network and the node script, logs and checkpoints are on the shared mount
        "Wants": "network-online.target",
        "After": "network-online.target remote-fs.target",
        "StartLimitIntervalSec": "3600",
        "StartLimitBurst": str(spec.launch.max_restarts + 1),
    }
    service = unit["Service"]
    assert service == {
        "Type": "simple",
        "User": "megaprov",
        "Group": "megaprov",
        "Environment": "MEGAPROV_JOB_UNIT=megaprov-job-tiny.service",
        "WorkingDirectory": "/shared/jobs/tiny",
        "ExecStart": "/bin/bash /shared/jobs/tiny/launch/node2.sh",
        "ExecStop": "/bin/bash /shared/jobs/tiny/launch/stop.sh $MAINPID",
        "StandardOutput": "journal",
        "StandardError": "inherit",
        "Restart": "on-failure",
        "RestartSec": "10",
        "KillMode": "mixed",
        "SuccessExitStatus": "143",  # 128 + SIGTERM: a node script stopped by ExecStop did not fail
        "TimeoutStopSec": str(render.stop_grace(spec).unit_s),
        "LimitMEMLOCK": "infinity",  # RDMA registers pinned memory
    }
    # read as systemd reads them: one assignment (JOB_MARKER=<unit>), argv words, $MAINPID left for systemd to expand
    assert shlex.split(service["Environment"]) == [f"{render.JOB_MARKER}={UNIT}"]
    assert shlex.split(service["ExecStart"]) == ["/bin/bash", "/shared/jobs/tiny/launch/node2.sh"]
    *stop, pid = shlex.split(service["ExecStop"])
    assert stop == ["/bin/bash", f"/shared/jobs/tiny/{systemd.STOP_SCRIPT_FILE}"] and pid == "$MAINPID"
    assert int(service["RestartSec"]) == systemd.RESTART_SEC and int(unit["Unit"]["StartLimitIntervalSec"]) == systemd.START_LIMIT_INTERVAL


@pytest.mark.parametrize(("restarts", "starts"), [(0, 1), (1, 2), (3, 4), (20, 21)])
def test_start_limit_burst_counts_the_first_start_and_each_restart(restarts, starts):
    """max_restarts 0 is one start (never StartLimitBurst=0, which systemd reads as no limit)."""
    assert _unit(_spec(restarts))["Unit"]["StartLimitBurst"] == str(starts)


def test_a_lab_node_gets_no_memlock_limit_it_could_not_raise():
    lab, site = _unit(lab=True)["Service"], _unit(lab=False)["Service"]
    assert "LimitMEMLOCK" not in lab and site["LimitMEMLOCK"] == "infinity"
    assert {k: v for k, v in site.items() if k != "LimitMEMLOCK"} == lab
    assert systemd.unit_limits(True) == [] and systemd.unit_limits(False) == ["LimitMEMLOCK=infinity"]


def test_the_stop_timeout_is_the_grace_passed_else_the_specs_default():
    spec = _spec()
    measured = render.StopGrace(10**9, 2000.0, "measured", 4321, 4381)
    assert measured.unit_s != render.stop_grace(spec).unit_s
    assert _unit(spec, stop=measured)["Service"]["TimeoutStopSec"] == "4381"
    assert _unit(spec, stop=None)["Service"]["TimeoutStopSec"] == str(render.stop_grace(spec).unit_s)


def test_the_rank_the_node_count_the_host_and_the_user_are_the_units_own():
    job = _job(name="big", hosts=["a1", "a2", "a3"], job_dir="/data/jobs/big", unit="megaprov-job-big.service")
    unit = _unit(job=job, host="a3", rank=2, user="trainer")
    assert unit["Unit"]["Description"] == "megaprov job big on a3 (node rank 2 of 3)"
    service = unit["Service"]
    assert (service["User"], service["Group"]) == ("trainer", "trainer")
    assert service["Environment"] == "MEGAPROV_JOB_UNIT=megaprov-job-big.service" and service["WorkingDirectory"] == "/data/jobs/big"
    assert service["ExecStart"] == "/bin/bash /data/jobs/big/launch/a3.sh"
    assert service["ExecStop"] == "/bin/bash /data/jobs/big/launch/stop.sh $MAINPID"


@pytest.mark.parametrize(
    ("changes", "host", "user", "field"),
    [
        ({"name": "ti\nny"}, "node2", "megaprov", "Description"),  # a newline would start a setting of its own
        ({}, "node\x1b2", "megaprov", "Description"),
        ({"unit": "megaprov-job-tiny\n.service"}, "node2", "megaprov", "Environment"),
        ({"job_dir": "/shared/jobs/tiny\\"}, "node2", "megaprov", "WorkingDirectory"),  # would join the next line
        # longer than a value may be only in ExecStop (launch/stop.sh is two characters longer than launch/n1.sh)
        ({"job_dir": "/" + "d" * (values.MAX_TEXT - len("/launch/n1.sh") - 2)}, "n1", "megaprov", "ExecStop"),
        ({}, "node2", "Mega Prov", "megaprov_cluster_user"),
    ],
)
def test_a_value_systemd_would_misread_is_refused_naming_the_setting(changes, host, user, field):
    with pytest.raises(values.BadValue) as exc:
        systemd.unit_text(_spec(), _job(**changes), host, 1, user, False)
    assert exc.value.field == field and exc.value.message.startswith(f"{field}=")


def test_systemd_analyze_verifies_the_unit(tmp_path):
    """systemd's own parser, where this machine has it (it needs no running systemd): no setting it would warn about
    and ignore. A misspelt value shows that it does look."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed here")

    def verify(text: str) -> str:
        path = tmp_path / UNIT
        path.write_text(text)
        out = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        return "\n".join(line for line in (out.stdout + out.stderr).splitlines() if str(path) in line)

    for lab in (False, True):
        assert verify(systemd.unit_text(_spec(0), _job(), "node2", 1, "megaprov", lab)) == ""
    broken = systemd.unit_text(_spec(), _job(), "node2", 1, "megaprov", False).replace("KillMode=mixed", "KillMode=mix")
    assert "mix" in verify(broken)


# ---- the ExecStop script, run by bash


def _marked(unit: str | None, *argv: str) -> subprocess.Popen:
    """A process of the job (marked as the unit marks every process of it), or of none (``unit`` None)."""
    env = {k: v for k, v in os.environ.items() if k != render.JOB_MARKER}
    if unit is not None:
        env[render.JOB_MARKER] = unit
    proc = subprocess.Popen(list(argv), env=env, start_new_session=True)
    mark = f"{render.JOB_MARKER}={unit}".encode()
    deadline = time.monotonic() + 10
    while unit is not None and time.monotonic() < deadline and proc.poll() is None:  # until exec shows the mark
        try:
            if mark in Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0"):
                break
        except OSError:
            break
        time.sleep(0.01)
    return proc


def _run_stop(tmp_path: Path, unit: str | None, mainpid: str, path: str | None = None) -> subprocess.CompletedProcess:
    script = tmp_path / "stop.sh"
    script.write_text(systemd.STOP_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != render.JOB_MARKER}
    if unit is not None:
        env[render.JOB_MARKER] = unit
    if path is not None:
        env["PATH"] = path
    return subprocess.run(["bash", str(script), mainpid], env=env, capture_output=True, text=True, timeout=60)


def test_the_stop_script_terms_the_node_script_waits_for_it_then_reaps_what_the_job_left(tmp_path):
    unit = f"megaprov-job-s{os.getpid()}.service"
    saved = tmp_path / "saved"
    # The node script: on SIGTERM it "saves a checkpoint" for half a second, then exits 143. Started in the background
    # of a shell that exits, so that it is nobody's child here (as systemd's main process is not the stop script's).
    node_script = f"trap 'sleep 0.5; touch {saved}; exit 143' TERM; while :; do sleep 0.1; done"
    pidfile = tmp_path / "main.pid"
    _marked(unit, "bash", "-c", f"bash -c {shlex.quote(node_script)} & echo $! > {pidfile}").wait(timeout=10)
    main = pidfile.read_text().strip()
    rank = _marked(unit, "sleep", "300")  # a rank the killed torchrun left behind
    other = _marked(unit.replace(".service", "-other.service"), "sleep", "300")
    # `sleep`, as the stop script finds it, records whether it was started as part of the job
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "sleep.env"
    stand_in = bin_dir / "sleep"
    stand_in.write_text(f'#!/bin/bash\necho "${{{render.JOB_MARKER}-unset}}" >> {seen}\nexec {shutil.which("sleep")} "$@"\n')
    stand_in.chmod(0o755)
    time.sleep(0.3)  # the trap is set
    try:
        out = _run_stop(tmp_path, unit, main, f"{bin_dir}:{os.environ['PATH']}")
        assert out.returncode == 0, out.stderr
        assert saved.exists(), "the stop script did not hand SIGTERM to the node script or did not wait for it"
        assert not Path(f"/proc/{main}").exists()
        assert rank.wait(timeout=10) == -9
        assert f"megaprov: {unit}: killing 1 process(es) of the job left behind: {rank.pid}" in out.stdout.splitlines()
        assert other.poll() is None, "the stop script killed a process of another job"
        waits = seen.read_text().split()
        assert waits and set(waits) == {"unset"}, "what the stop script starts must not carry the job's mark"
    finally:
        for proc in (rank, other):
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.parametrize("unit", [None, ""])
def test_without_a_main_pid_or_a_unit_the_stop_script_kills_nothing_and_exits_0(tmp_path, unit):
    """$MAINPID is empty once the node script exited; a script run without the unit's mark must not take every
    process with an empty mark for the job's."""
    unmarked = _marked("", "sleep", "300")
    try:
        out = _run_stop(tmp_path, unit, "")
        assert out.returncode == 0 and out.stdout == "", out.stdout + out.stderr
        assert unmarked.poll() is None
    finally:
        unmarked.kill()
        unmarked.wait(timeout=10)


def test_the_stop_script_is_bash_and_reaps_with_the_render_function():
    assert systemd.STOP_SCRIPT.startswith("#!/bin/bash\n") and render.REAP_FUNCTION in systemd.STOP_SCRIPT
    assert systemd.STOP_SCRIPT.rstrip().splitlines()[-2:] == ['reap_job "$unit"', "exit 0"]
    subprocess.run(["bash", "-n"], input=systemd.STOP_SCRIPT, text=True, check=True)


# ---- stage: what travels to the nodes


def _inventory(node1: dict[str, Any], node2: dict[str, Any]) -> inv.Inventory:
    hosts = {"node1": inv.Host("node1", {"gpu_nodes"}, node1), "node2": inv.Host("node2", {"gpu_nodes"}, node2)}
    return inv.Inventory(Path("/inv/inventory.ini"), hosts, {"gpu_nodes": ["node1", "node2"], "ungrouped": []}, {})


def _staged(tmp_path: Path, found: inv.Inventory, stop: render.StopGrace | None = None):
    spec = _spec()
    rendered = render.render(spec, Cluster(2, 1, GPUS["cpu"], "/shared"), [("node1", "10.0.0.1"), ("node2", "10.0.0.2")])
    if stop is not None:
        rendered = replace(rendered, stop=stop)
    job = _job(name=spec.name, job_dir=rendered.job_dir, unit=f"megaprov-job-{spec.name}.service")
    staging = tmp_path / "staging"
    (staging / "launch").mkdir(parents=True)
    return spec, rendered, job, staging, systemd.SystemdLauncher().stage(job, spec, rendered, found, staging)


def test_stage_writes_each_nodes_script_and_unit_and_the_stop_script(tmp_path):
    grace = render.StopGrace(10**9, 2000.0, "measured", 4321, 4381)
    spec, rendered, job, staging, extra = _staged(tmp_path, _inventory({}, {}), grace)
    assert [n.host for n in rendered.nodes] == ["node1", "node2"]
    assert sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file()) == [
        "launch/node1.service",
        "launch/node1.sh",
        "launch/node2.service",
        "launch/node2.sh",
        "launch/stop.sh",
    ]
    assert (staging / systemd.STOP_SCRIPT_FILE).read_text() == systemd.STOP_SCRIPT
    assert list(extra) == ["units"] and list(extra["units"]) == ["node1", "node2"]
    for node in rendered.nodes:
        assert (staging / "launch" / f"{node.host}.sh").read_text() == node.script
        text = extra["units"][node.host]
        assert (staging / "launch" / f"{node.host}.service").read_text() == text
        assert text == systemd.unit_text(spec, job, node.host, node.node_rank, "megaprov", False, grace)
        unit = _single(parse_unit(text))
        assert unit["Unit"]["Description"] == f"megaprov job lab-tiny on {node.host} (node rank {node.node_rank} of 2)"
        service = unit["Service"]
        # no megaprov_cluster_user, no megaprov_lab: the default user, a site node (its memlock raised)
        assert (service["User"], service["Group"], service.get("LimitMEMLOCK")) == ("megaprov", "megaprov", "infinity")
        assert service["ExecStart"] == f"/bin/bash {rendered.job_dir}/launch/{node.host}.sh"
        assert service["TimeoutStopSec"] == "4381"  # the render's grace, not the spec's default
    assert [_single(parse_unit(extra["units"][h]))["Unit"]["Description"].split("(")[1] for h in ("node1", "node2")] == [
        "node rank 0 of 2)",
        "node rank 1 of 2)",
    ]


def test_stage_takes_the_cluster_user_and_the_lab_flag_from_the_first_host(tmp_path):
    found = _inventory({"megaprov_cluster_user": "trainer", "megaprov_lab": "yes"}, {"megaprov_cluster_user": "other", "megaprov_lab": "false"})
    *_, extra = _staged(tmp_path, found)
    for text in extra["units"].values():
        service = _single(parse_unit(text))["Service"]
        assert (service["User"], service["Group"]) == ("trainer", "trainer") and "LimitMEMLOCK" not in service
    found = _inventory({"megaprov_lab": False}, {"megaprov_cluster_user": "other", "megaprov_lab": True})
    *_, extra = _staged(tmp_path / "second", found)
    for text in extra["units"].values():
        service = _single(parse_unit(text))["Service"]
        assert service["User"] == "megaprov" and service["LimitMEMLOCK"] == "infinity"


@pytest.mark.parametrize(("setting", "lab"), [(None, False), (True, True), ("true", True), ("no", False), ("0", False), (False, False)])
def test_is_lab_reads_megaprov_lab_as_ansible_does(setting, lab):
    host_vars = {} if setting is None else {"megaprov_lab": setting}
    assert systemd.is_lab(_inventory({}, host_vars), "node2") is lab
    assert systemd.is_lab(_inventory(host_vars, {}), "node2") is False


# ---- the units' states, read through job_status.yml


class Plays:
    """plays.run replaced: every call recorded with its arguments; each playbook answers with the result set for it."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.answers: dict[str, runner.RunResult] = {}

    def run(self, playbook, inventory, extravars, report, hosts, collect=(), strategy="linear"):
        called = {"playbook": playbook, "inventory": inventory, "extravars": extravars, "report": report, "hosts": hosts}
        self.calls.append({**called, "collect": collect, "strategy": strategy})
        return self.answers.get(playbook, _result())


@pytest.fixture
def plays(monkeypatch):
    recorder = Plays()
    monkeypatch.setattr(cluster_plays, "run", recorder.run)
    return recorder


def _result(*failures: runner.Failure, results: list[runner.TaskResult] | None = None) -> runner.RunResult:
    status, rc = ("failed", 2) if failures else ("successful", 0)
    return runner.RunResult(status, rc, [], list(failures), results or [], Path("/tmp/run"), 1.0, stats_seen=True)


def _shown(host: str, stdout: str | None) -> runner.TaskResult:
    """What `systemctl show --property ActiveState,SubState UNIT` answered on ``host`` (no stdout: the key absent)."""
    return runner.TaskResult(host, "Read the unit's state", "ansible.builtin.command", {} if stdout is None else {"stdout": stdout, "rc": 0})


FAILED = runner.Failure("node2", "Read the unit's state", "Job status", "ssh: connection reset", False)
REPORT = object()  # a reporter of the caller's, passed through to the play as it is


def test_states_are_each_nodes_systemctl_show_properties(plays):
    plays.answers["job_status.yml"] = _result(
        results=[
            _shown("node2", "ActiveState=failed\nSubState=failed\nStatusText=rc=1 at step=3"),
            _shown("node1", "ActiveState=active\nSubState=running"),
        ]
    )
    job = _job()
    states = systemd.SystemdLauncher().states(job, REPORT)
    assert states == {
        "node2": {"ActiveState": "failed", "SubState": "failed", "StatusText": "rc=1 at step=3"},  # split at the first '='
        "node1": {"ActiveState": "active", "SubState": "running"},
    }
    assert plays.calls == [
        {
            "playbook": "job_status.yml",
            "inventory": job.inventory,
            "extravars": {"megaprov_job": job.vars()},
            "report": REPORT,
            "hosts": 2,
            "collect": ("ansible.builtin.command", "command"),  # the results of command tasks, under either name
            "strategy": "linear",
        }
    ]


def test_a_node_that_answered_nothing_has_no_properties(plays):
    plays.answers["job_status.yml"] = _result(results=[_shown("node1", None), _shown("node2", "")])
    assert systemd.SystemdLauncher().states(_job(), SILENT) == {"node1": {}, "node2": {}}


def test_states_that_could_not_be_read_raise_with_the_nodes_reason(plays):
    plays.answers["job_status.yml"] = _result(FAILED)
    with pytest.raises(MegaprovError) as exc:
        systemd.SystemdLauncher().states(_job(), SILENT)
    assert exc.value.message == "job tiny: unit state unknown: node2: task 'Read the unit's state' failed: ssh: connection reset"


@pytest.mark.parametrize(
    ("shown", "state", "reason"),
    [
        ({"node2": "ActiveState=failed", "node1": "ActiveState=active"}, "RUNNING", "node1 active, node2 failed"),
        ({"node2": "ActiveState=activating", "node1": "ActiveState=failed"}, "RUNNING", "node1 failed, node2 activating"),
        ({"node2": "ActiveState=reloading", "node1": "ActiveState=inactive"}, "RUNNING", "node1 inactive, node2 reloading"),
        ({"node2": "ActiveState=failed", "node1": "ActiveState=inactive"}, "ENDED", "node1 inactive, node2 failed"),
        ({"node2": "ActiveState=deactivating", "node1": "SubState=dead"}, "ENDED", "node1 unknown, node2 deactivating"),
    ],
)
def test_the_units_together_run_while_one_runs_or_will_start_again(plays, shown, state, reason):
    plays.answers["job_status.yml"] = _result(results=[_shown(h, out) for h, out in shown.items()])
    said = systemd.SystemdLauncher().state(_job(), REPORT)
    assert (said.job_id, said.state, said.reason) == (UNIT, state, reason)  # the nodes in name order
    assert said.alive is (state == "RUNNING")
    assert said.describe() == f"unit {UNIT} {state} ({reason})"
    assert plays.calls[0]["report"] is REPORT


def test_state_asks_silently_unless_given_a_reporter(plays):
    plays.answers["job_status.yml"] = _result(results=[_shown("node1", "ActiveState=active")])
    systemd.SystemdLauncher().state(_job())
    assert plays.calls[0]["report"] is SILENT


def test_a_state_without_a_reason_is_said_without_brackets():
    assert systemd.UnitsState(UNIT, "ENDED").describe() == f"unit {UNIT} ENDED"
    assert systemd.UnitsState(UNIT, "RUNNING", "node1 active").describe() == f"unit {UNIT} RUNNING (node1 active)"
    assert systemd.UnitsState(UNIT, "RUNNING").alive and not systemd.UnitsState(UNIT, "ENDED").alive


# ---- start and stop: the plays and their arguments


def test_start_runs_the_launch_play_with_the_jobs_bundle_and_strategy(plays):
    job = _job()
    systemd.SystemdLauncher().start(job, {"name": "tiny", "units": {}}, REPORT, "free")
    assert plays.calls == [
        {
            "playbook": "job_launch.yml",
            "inventory": job.inventory,
            "extravars": {"megaprov_job": {"name": "tiny", "units": {}}},
            "report": REPORT,
            "hosts": 2,
            "collect": (),
            "strategy": "free",
        }
    ]


def test_a_failed_start_stops_the_units_it_may_have_started_with_the_callers_reporter(plays):
    """The operator sees the stop's progress as they saw the start's."""
    job = _job()
    plays.answers["job_launch.yml"] = replace(_result(FAILED), data={systemd.UNITS_MAY_RUN: True})
    with pytest.raises(MegaprovError):
        systemd.SystemdLauncher().start(job, {"name": "tiny"}, REPORT, "linear")
    stop = {"playbook": "job_stop.yml", "inventory": job.inventory, "extravars": {"megaprov_job": job.vars()}, "report": REPORT, "hosts": 2}
    assert plays.calls[1:] == [{**stop, "collect": (), "strategy": "linear"}]


def test_a_failed_start_says_the_job_was_not_started(plays):
    plays.answers["job_launch.yml"] = _result(FAILED)
    with pytest.raises(MegaprovError) as exc:
        systemd.SystemdLauncher().start(_job(), {}, SILENT, "linear")
    assert exc.value.message == "job tiny not started: node2: task 'Read the unit's state' failed: ssh: connection reset"


def test_stop_runs_the_stop_play_on_every_node_and_raises_only_when_it_failed(plays):
    job = _job()
    launcher = systemd.SystemdLauncher()
    assert launcher.stop(job, REPORT) is None
    stop = {"playbook": "job_stop.yml", "inventory": job.inventory, "extravars": {"megaprov_job": job.vars()}, "report": REPORT, "hosts": 2}
    assert plays.calls == [{**stop, "collect": (), "strategy": "linear"}]
    plays.answers["job_stop.yml"] = failed = _result(FAILED)
    assert launcher.stop_units(job, SILENT) is failed  # the caller decides on the result
    with pytest.raises(MegaprovError) as exc:
        launcher.stop(job, SILENT)
    assert exc.value.message == "job tiny: stop failed: node2: task 'Read the unit's state' failed: ssh: connection reset"


# ---- what the follower asks


def test_the_units_are_known_by_their_name_and_every_nodes_log_is_read():
    job = _job()
    launcher = systemd.SystemdLauncher()
    assert launcher.current_id(job) == UNIT
    hosts = launcher.log_hosts(job)
    assert hosts == ["node1", "node2"] and hosts is not job.hosts  # the follower's list, not the job's own
    hosts.append("node3")
    assert job.hosts == ["node1", "node2"]


def test_gave_up_is_asked_a_restart_interval_and_a_margin_after_every_torchrun_exited():
    assert systemd.SystemdLauncher.restart_wait_s == 25.0 == systemd.RESTART_SEC + 15
    assert systemd.RESTART_SEC == 10 and systemd.START_LIMIT_INTERVAL == 3600


def test_the_launchers_story_is_the_job_lines_of_the_elastic_log(tmp_path):
    local = tmp_path / "jobs" / "tiny"
    (local / "logs").mkdir(parents=True)
    job = SimpleNamespace(name="tiny", local_dir=local)
    launcher = systemd.SystemdLauncher()
    assert launcher.events(job) == []  # no elastic.log: nothing to tell
    (local / render.ELASTIC_EVENTS).write_text(
        "megaprov: job tiny lost node2 (unreachable): continues on 1 node(s)\n"
        "megaprov: jobs are listed elsewhere\n"
        "job tiny written by someone else\n"
        "megaprov: job tiny grows back to 2 nodes\n"
    )
    assert launcher.events(job) == ["job tiny lost node2 (unreachable): continues on 1 node(s)", "job tiny grows back to 2 nodes"]


def _log(**exits: int) -> follow.JobLog:
    log = follow.JobLog(128)
    for rank, (host, rc) in enumerate(exits.items()):
        log.feed(host, f"megaprov: node {host} (node rank {rank}): torchrun exited with {rc} at 2026-12-02T10:00:00Z", 0.0)
    return log


def test_gave_up_names_the_nodes_that_did_not_end_well():
    units = {"node1": {"ActiveState": "inactive"}, "node2": {"ActiveState": "failed"}, "node3": {"ActiveState": "failed"}}
    log = _log(node1=0, node2=1)
    said = systemd.gave_up(units, ["node1", "node2", "node3"], log)
    assert said == "torchrun ended on node2 (failed-1), node3 (waiting) and the units gave up"  # node1 ended with 0


def test_gave_up_waits_while_a_unit_is_in_a_going_state():
    units = {"node1": {"ActiveState": "deactivating"}, "node2": {"ActiveState": "failed"}}
    log = _log(node1=1, node2=1)
    assert systemd.gave_up(units, ["node1", "node2"], log) == "torchrun ended on node1 (failed-1), node2 (failed-1) and the units gave up"
    assert systemd.gave_up(units, ["node1", "node2"], log, going=("deactivating",)) is None
    assert systemd.gave_up({"node1": {"ActiveState": "activating"}, "node2": {}}, ["node1", "node2"], log) is None
    assert systemd.gave_up({"node1": {}, "node2": {}}, ["node1", "node2"], log) is not None  # no state: not running


def test_nodes_that_all_exited_0_before_the_end_are_named_not_an_empty_list():
    """Every torchrun exited 0 short of the last iteration (an exit interval, a trainer that returned early): the
    units do not restart a clean exit, and the reason once read "torchrun ended on  and the units gave up"."""
    units = {"node1": {"ActiveState": "inactive"}, "node2": {"ActiveState": "inactive"}}
    said = systemd.gave_up(units, ["node1", "node2"], _log(node1=0, node2=0))
    assert said == "torchrun exited with 0 on every node (node1, node2) before training finished, and the units do not restart a clean exit"


def test_the_launchers_gave_up_reads_the_states_silently(plays):
    plays.answers["job_status.yml"] = _result(results=[_shown("node1", "ActiveState=failed"), _shown("node2", "ActiveState=failed")])
    said = systemd.SystemdLauncher().gave_up(_job(), _log(node1=0, node2=2), REPORT)
    assert said == "torchrun ended on node2 (failed-2) and the units gave up"
    assert plays.calls[0]["report"] is SILENT and plays.calls[0]["playbook"] == "job_status.yml"


# ---- the launcher of a job


@pytest.mark.parametrize(("name", "kind"), [("slurm", SlurmLauncher), ("systemd", systemd.SystemdLauncher), ("torchrun", systemd.SystemdLauncher)])
def test_the_launcher_of_a_job(name, kind):
    """launch.launcher slurm is Slurm's; torchrun (and every job written before launchers had names) is the units'."""
    chosen = launchers.of(name)
    assert type(chosen) is kind and chosen.name == ("slurm" if name == "slurm" else "systemd")
