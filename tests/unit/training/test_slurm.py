"""The Slurm launcher's and the Slurm modules' pure parts, on what Slurm 22.05 really prints (taken on the lab):
``scontrol show job -o``, the pending queue, ``sbatch --parsable``, ``slurmd -C``, ``sinfo`` and ``scontrol show
node -o``; and job.json's Slurm fields read as the hostile input they are."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from megaprov.errors import UsageError
from megaprov.training import jobmeta
from megaprov.training.launchers import slurm
from tests.conftest import ROOT, load_module
from tests.helpers import modules

MODULES = ROOT / "ansible_collections" / "megaprov" / "cluster" / "plugins" / "modules"
slurm_node = load_module(MODULES / "slurm_node.py", "slurm_node_under_test")
slurm_check = load_module(MODULES / "slurm_check.py", "slurm_check_under_test")

PENDING = (
    "JobId=39 JobName=wrap UserId=megaprov(2000) GroupId=megaprov(2000) MCS_label=N/A Priority=4294901731 Nice=0 Account=(null) "
    "QOS=(null) JobState=PENDING Reason=Resources Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 "
    "RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-12-01T02:16:14 EligibleTime=2026-12-01T02:16:14 "
    "StartTime=Unknown EndTime=Unknown Partition=gpu AllocNode:Sid=node1:12181 ReqNodeList=(null) ExcNodeList=(null) NodeList= "
    "NumNodes=2-2 NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=2,mem=46162M,node=2,billing=2 WorkDir=/tmp Power= "
)
RUNNING = (
    PENDING.replace("JobId=39", "JobId=38")
    .replace("JobState=PENDING Reason=Resources", "JobState=RUNNING Reason=None")
    .replace("NodeList= ", "NodeList=node[1-2] BatchHost=node1 ")
)


def test_a_pending_job_shows_its_reason_and_place_in_the_queue():
    found = slurm.parse_state("39", PENDING + "\n--- pending\n41\n39\n")
    assert (found.state, found.reason, found.position, found.pending, found.nodes) == ("PENDING", "Resources", 2, 2, "")
    assert found.alive and found.describe() == "slurm job 39 PENDING (Resources, 2 of 2 in the queue)"


def test_a_running_job_shows_its_nodes():
    found = slurm.parse_state("38", RUNNING + "\n--- pending\n")
    assert (found.state, found.reason, found.nodes, found.position) == ("RUNNING", "", "node[1-2]", None)
    assert found.describe() == "slurm job 38 RUNNING on node[1-2]"


def test_a_controller_that_does_not_answer_says_nothing_about_the_job():
    # a timeout is not the end of the job: the follower and job status must not judge it over
    found = slurm.parse_state("38", "slurm_load_jobs error: Socket timed out on send/recv operation\n--- pending\n")
    assert found.state == "UNKNOWN" and found.alive and "Socket timed out" in found.reason


# squeue(1), JOB STATE CODES (Slurm 22.05 to 24.11): every state a job can be in
SLURM_STATES = (
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "CONFIGURING", "COMPLETING", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PENDING",
    "PREEMPTED", "RUNNING", "RESV_DEL_HOLD", "REQUEUE_FED", "REQUEUE_HOLD", "REQUEUED", "RESIZING", "REVOKED", "SIGNALING", "SPECIAL_EXIT",
    "STAGE_OUT", "STOPPED", "SUSPENDED", "TIMEOUT",
)  # fmt: skip
OVER = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "REVOKED", "TIMEOUT"}


@pytest.mark.parametrize("state", SLURM_STATES)
def test_every_slurm_state_is_either_over_or_alive(state):
    found = slurm.parse_state("38", RUNNING.replace("JobState=RUNNING", f"JobState={state}") + "\n--- pending\n")
    assert found.state == state
    assert found.alive == (state not in OVER), state
    assert (state in slurm.ENDED) == (state in OVER) and (state in slurm.ALIVE) != (state in OVER)


def test_a_cancelled_job_is_over_whoever_cancelled_it():
    found = slurm.parse_state("38", RUNNING.replace("JobState=RUNNING", "JobState=CANCELLED by 1000") + "\n--- pending\n")
    assert found.state == "CANCELLED" and not found.alive


def test_a_job_slurmctld_forgot_is_gone_and_not_alive():
    found = slurm.parse_state("15", "slurm_load_jobs error: Invalid job id specified\n--- pending\n")
    assert found.state == "GONE" and not found.alive
    ended = slurm.parse_state(
        "38", RUNNING.replace("JobState=RUNNING", "JobState=FAILED").replace("ExitCode=0:0", "ExitCode=1:0") + "\n--- pending\n"
    )
    assert not ended.alive and ended.describe() == "slurm job 38 FAILED on node[1-2], exit 1:0"


def test_state_words_slurm_did_not_write_are_not_believed():
    # the reason is shown to the operator: control characters are made visible, the length bounded
    hostile = PENDING.replace("Reason=Resources", "Reason=\x1b[2Jx" + "y" * 500).replace("JobState=PENDING", "JobState=pending;rm")
    found = slurm.parse_state("39", hostile + "\n--- pending\n39; rm -rf /\n")
    assert found.state == "UNKNOWN" and "\x1b" not in found.reason and len(found.reason) <= 200
    assert found.pending == 0  # a queue line that is not a bare id is no job


def test_sbatch_parsable_output_is_a_job_id_or_refused():
    assert slurm.job_id("123\n", "sbatch") == "123"
    assert slurm.job_id("sbatch: warning: x\n456;cluster\n", "sbatch") == "456"
    for bad in ("", "abc", "12 13", "1" * 13):
        with pytest.raises(UsageError):
            slurm.job_id(bad, "sbatch")


def test_the_current_slurm_id_is_the_last_continuation(tmp_path):
    job = SimpleNamespace(local_dir=tmp_path, slurm_id="17")
    assert slurm.current_id(job) == "17"  # no continuation yet
    (tmp_path / "launch").mkdir()
    (tmp_path / "launch" / "slurm-jobs").write_text("18\n19; scancel -u root\n../x\n20\n")
    assert slurm.current_id(job) == "20"
    (tmp_path / "launch" / "slurm-jobs").write_text("garbage only\n")
    assert slurm.current_id(job) == "17"


def test_a_state_is_the_state_of_the_job_it_asked_about(tmp_path, monkeypatch):
    """A continuation submitted while the status play ran is not the job the answer is about: the answer keeps the id
    it asked with, so that the follower (which compares it with the current id) does not judge the new job over."""
    from megaprov.cluster import runner

    job = SimpleNamespace(local_dir=tmp_path, slurm_id="17", inventory=tmp_path / "inv.ini")
    asked = []

    def run(self, job, action, report, slurm_id, **extra):
        asked.append(slurm_id)
        (tmp_path / "launch").mkdir(exist_ok=True)
        (tmp_path / "launch" / "slurm-jobs").write_text("18\n")  # the batch script continued meanwhile
        said = RUNNING.replace("JobState=RUNNING", "JobState=FAILED") + "\n--- pending\n"
        return runner.RunResult("successful", 0, [], [], [], tmp_path, 1.0, data={slurm.STATE: said}, stats_seen=True)

    monkeypatch.setattr(slurm.SlurmLauncher, "_run", run)
    found = slurm.SlurmLauncher().state(job)
    assert asked == ["17"] and found.job_id == "17" and not found.alive
    assert slurm.current_id(job) == "18"  # what the follower compares with: a continuation, the job goes on


def test_the_submit_host_is_read_from_the_inventory_once_per_launcher(tmp_path, monkeypatch):
    loads = []
    monkeypatch.setattr(slurm.inv, "load", lambda *a: loads.append(a) or "found")
    monkeypatch.setattr(slurm, "submit_host", lambda found: "head")
    launcher = slurm.SlurmLauncher()
    job = SimpleNamespace(inventory=tmp_path / "inv.ini")
    assert [launcher._submit_host(job) for _ in range(3)] == ["head"] * 3 and len(loads) == 1


def _meta(**changes):
    data = {
        "name": "j",
        "shared_dir": "/shared",
        "job_dir": "/shared/jobs/j",
        "checkpoint_dir": "/shared/checkpoints/j",
        "hosts": ["node1", "node2"],
        "launcher": "slurm",
        "slurm_job_id": "17",
        "submit_host": "node1",
    }
    data.update(changes)
    return json.dumps(data)


def test_job_json_slurm_fields_are_checked():
    meta = jobmeta.parse(_meta(), "job.json", "j")
    assert (meta.launcher, meta.slurm_id, meta.submit_host) == ("slurm", "17", "node1")
    assert jobmeta.parse(_meta(launcher="systemd", submit_host="x y"), "job.json", "j").launcher == "systemd"
    for field, value, words in (
        ("launcher", "kubernetes", "is not systemd or slurm"),
        ("slurm_job_id", "17; scancel -u root", "is not a Slurm job id"),
        ("slurm_job_id", 17, "is not a Slurm job id"),
        ("submit_host", "node1,evil", "submit_host"),
        ("submit_host", "", "submit_host"),
    ):
        with pytest.raises(UsageError) as info:
            jobmeta.parse(_meta(**{field: value}), "job.json", "j")
        assert words in str(info.value), (field, value, str(info.value))


def test_slurmd_c_is_parsed_into_the_node_line():
    text = "NodeName=node1 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105\nUpTime=0-14:28:39\n"
    assert slurm_node.parse_slurmd_c(text) == {
        "NodeName": "node1", "CPUs": 2, "Boards": 1, "SocketsPerBoard": 1, "CoresPerSocket": 2, "ThreadsPerCore": 1, "RealMemory": 24105,
    }  # fmt: skip
    with pytest.raises(ValueError, match="RealMemory"):
        slurm_node.parse_slurmd_c("NodeName=n CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1\n")


def test_gpu_cores_are_numbered_as_slurm_numbers_them():
    # 2 sockets x 4 cores x 2 threads, numbered as on many dual-socket servers: CPUs 0-3 on socket 0, 4-7 on socket 1,
    # 8-15 their second threads (CPU n and n+8 share a core).
    topology = {cpu: (cpu // 4 % 2, (cpu % 4) * 2) for cpu in range(16)}  # core ids 0,2,4,6 per socket (gaps, as on Xeons)
    # A GPU on socket 1 lists CPUs 4-7 and 12-15: Slurm's cores 4-7 (socket 0's four first), whatever the core ids
    assert slurm_node.slurm_cores(topology, slurm_node.cpu_list("4-7,12-15")) == [4, 5, 6, 7]
    assert slurm_node.ranges(slurm_node.slurm_cores(topology, slurm_node.cpu_list("0-3,8-11"))) == "0-3"
    assert slurm_node.ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert slurm_node.cpu_list("0-2,5\n") == [0, 1, 2, 5]


def test_sinfo_and_node_gres_are_read_as_slurm_prints_them():
    states = slurm_check.parse_sinfo("node1|idle|none\nnode2|drained|megaprov health: /dev/nvidia1 missing\nnode3|down*|Not responding\n")
    assert states == {"node1": ("idle", ""), "node2": ("drained", "megaprov health: /dev/nvidia1 missing"), "node3": ("down*", "Not responding")}
    assert slurm_check.is_up("idle") and slurm_check.is_up("mixed") and not slurm_check.is_up("idle*") and not slurm_check.is_up("drained")
    shown = (
        "NodeName=node1 Arch=x86_64 CoresPerSocket=2  CPUAlloc=0 Gres=gpu:2 NodeAddr=10.90.154.2 State=IDLE\n"
        "NodeName=node2 Arch=x86_64 Gres=gpu:h100:8(S:0-1) State=IDLE\n"
        "NodeName=node3 Arch=x86_64 Gres=(null) State=IDLE\n"
        "NodeName=node4 Arch=x86_64 State=IDLE\n"  # no Gres word at all
        "NodeName=node5 Gres= State=IDLE\n"
        "Arch=x86_64 Gres=gpu:1\n"  # no node name: not a node's line
    )
    assert slurm_check.parse_gres(shown) == {"node1": "gpu:2", "node2": "gpu:h100:8", "node3": "", "node4": "", "node5": ""}
    # a reason may hold the separator; lines of another shape and an empty node name are not nodes
    text = "node1|drained|megaprov health: nvidia-smi|pipe\nnode2|idle\njunk\n|idle|none\n  node3|mixed|none  \n"
    assert slurm_check.parse_sinfo(text) == {"node1": ("drained", "megaprov health: nvidia-smi|pipe"), "node3": ("mixed", "")}


def test_the_lab_gives_each_node_stand_in_gpu_devices_for_gres():
    from megaprov.cluster import lab

    argv = lab.node_create_argv("ci", 1, "10.90.7.0/24", "img", None, Path("/w"))
    devices = [argv[i + 1] for i, word in enumerate(argv) if word == "--device"]
    assert "/dev/null:/dev/nvidia0" in devices and "/dev/zero:/dev/nvidia1" in devices
    _, group_vars = lab.render_inventory("ci", [lab.Node("node1", "megaprov-ci-node1", "10.90.7.2", "running")], Path("/k"), Path("/kh"), "/s")
    assert "megaprov_scheduler: slurm\nslurm_profile: container\nslurm_gpus_per_node: 2\n" in group_vars
    assert "\nenroot_disabled_hooks: [10-cgroups.sh]\n" in group_vars  # the nodes' /proc/self/cgroup names this host's paths


def test_slurm_times_in_seconds():
    from megaprov.training.render import slurm_seconds

    cases = {"90": 5400, "10:30": 630, "4:00:00": 14400, "2-00:00:00": 172800, "1-12": 129600, "1-2:30": 95400, "0-0:5:7": 307}
    assert {t: slurm_seconds(t) for t in cases} == cases


def test_loading_an_ansible_module_in_process_leaves_sys_intern_a_builtin():
    """ansible-core's module_utils patch sys.intern with a callable object; torch's dynamo (imported by the data tests
    after this file) refuses anything but a function there, and the data tests failed to import after this file."""
    import inspect
    import sys

    load_module(MODULES / "slurm_check.py", "slurm_check_loaded_again")
    assert inspect.isbuiltin(sys.intern), sys.intern
    assert sys.intern("megaprov") == "megaprov"


def _slurm_job(tmp_path, **recorded):
    local = tmp_path / "shared" / "jobs" / "j1"
    (local / "launch").mkdir(parents=True)
    meta = {"name": "j1", "shared_dir": "/shared", "job_dir": "/shared/jobs/j1", "checkpoint_dir": "/shared/checkpoints/j1"}
    (local / "job.json").write_text(json.dumps({**meta, "hosts": ["node1", "node2"], "state": "running", **recorded}))
    return SimpleNamespace(local_dir=local, name="j1", slurm_id="17")


@pytest.mark.parametrize(
    ("grace", "waited"),
    [(None, 60), (0, 60), (59, 60), (60, 60), (61, 61), (900, 900), (6 * 3600 + 120, 6 * 3600 + 120), (10**7, 6 * 3600 + 120), ("900", 60)],
)
def test_job_stop_waits_the_rendered_grace_at_least_a_minute_and_at_most_six_hours(tmp_path, grace, waited):
    """A minute is the least a rank needs to begin its save; six hours (and the two minutes Slurm's KillWait adds) the
    most any checkpoint is waited for. A grace job.json does not hold as a number is the minimum, never an error."""
    job = _slurm_job(tmp_path, **({} if grace is None else {"stop_grace_s": grace}))
    assert slurm._grace(job) == waited


def test_a_missing_job_file_waits_the_minimum(tmp_path):
    job = _slurm_job(tmp_path)
    (job.local_dir / "job.json").unlink()
    assert slurm._grace(job) == 60


def test_the_allocations_log_hosts_are_host_names_only(tmp_path):
    job = _slurm_job(tmp_path)
    nodes = job.local_dir / "launch" / "nodes"
    nodes.write_text("node1\n  node2 \n../../etc/passwd\nnode3;rm\n\x1b]0;x\x07\n\nnode-4.cluster\n")
    assert slurm.SlurmLauncher().log_hosts(job) == ["node1", "node2", "node-4.cluster"]
    nodes.unlink()
    assert slurm.SlurmLauncher().log_hosts(job) == []  # before any allocation
    nodes.symlink_to("/etc/hostname")
    assert slurm.SlurmLauncher().log_hosts(job) == []  # the cluster user's link is not followed


def slurm_tools(tmp_path, monkeypatch, srun_script):
    """sinfo, scontrol, runuser and srun stand-ins on PATH, printing what Slurm 22.05 prints on a 3-node lab;
    ``srun_script`` is srun's body (its calls are counted in srun.calls)."""
    tools = tmp_path / "tools"
    tools.mkdir()
    scripts = {
        "sinfo": "printf 'node1|idle|\\nnode2|idle|\\nnode3|idle|\\n'",
        "scontrol": "printf 'NodeName=node1 Gres=(null)\\nNodeName=node2 Gres=(null)\\nNodeName=node3 Gres=(null)\\n'",
        "runuser": 'shift 3; exec "$@"',  # runuser -u USER -- srun ...
        "srun": f"echo x >> {tmp_path}/srun.calls\n{srun_script}",
    }
    for name, body in scripts.items():
        (tools / name).write_text(f"#!/bin/sh\n{body}\n")
        (tools / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    monkeypatch.setattr(slurm_check.time, "sleep", lambda _s: None)
    return tmp_path / "srun.calls"


LAUNCH_TIMEOUT = (
    "echo node1; echo 'srun: error: timeout waiting for task launch, started 1 of 3 tasks' >&2;"
    " echo 'srun: launch/slurm: launch_p_step_launch: StepId=1.0 aborted before step completely launched.' >&2; exit 0"
)
ARGS = {"nodes": ["node1", "node2", "node3"], "user": "megaprov", "timeout": 5}


def test_a_step_whose_tasks_launched_late_is_tried_again(tmp_path, monkeypatch, capsys):
    """The lab's CI met it under load: srun exits 0 with one of three nodes answered and 'timeout waiting for task
    launch'; a second step on the same nodes answers from all three."""
    calls = slurm_tools(
        tmp_path, monkeypatch, f'if [ "$(wc -l < {tmp_path}/srun.calls)" -lt 2 ]; then {LAUNCH_TIMEOUT}; fi; printf "node1\\nnode2\\nnode3\\n"'
    )
    code, result = modules.run_module(slurm_check.main, ARGS, capsys)
    assert code == 0, result
    assert "answered from node1, node2, node3" in result["summary"] and "(attempt 2: the tasks did not launch in time before)" in result["summary"]
    assert len(calls.read_text().split()) == 2


def test_a_step_that_never_launches_fails_after_three_tries_and_another_failure_at_once(tmp_path, monkeypatch, capsys):
    calls = slurm_tools(tmp_path, monkeypatch, LAUNCH_TIMEOUT)
    code, result = modules.run_module(slurm_check.main, ARGS, capsys)
    assert code == 1 and len(calls.read_text().split()) == 3
    assert result["msg"].startswith("srun -N3 hostname as megaprov: rc=0, answered node1 (attempt 3): srun: error: timeout waiting for task launch")
    calls.unlink()
    denied = "echo 'srun: error: Unable to allocate resources: Invalid account or account/partition combination specified' >&2; exit 1"
    slurm_tools_again = tmp_path / "again"
    slurm_tools_again.mkdir()
    calls = slurm_tools(slurm_tools_again, monkeypatch, denied)
    code, result = modules.run_module(slurm_check.main, ARGS, capsys)
    assert code == 1 and len(calls.read_text().split()) == 1  # not a launch timeout: no second try
    assert "answered nobody: srun: error: Unable to allocate resources" in result["msg"]
