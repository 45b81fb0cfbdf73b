"""The Slurm launcher around the plays it runs (issue 36): which playbook, action and extra vars each method passes, on
which host Slurm is asked, what it makes of job_slurm.yml's answers (set_stats slurm_submitted / slurm_state /
slurm_grow), the errors a failed or garbled play becomes, and what it reads from the job directory (launch/slurm-jobs,
launch/nodes, logs/slurm.log, job.json's stop grace).

Only the Ansible play is stood in (plays.run): it answers with the events ansible-runner reports for job_slurm.yml,
folded by the real runner; the inventory, the job directory, the example spec and its render are real."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from megaprov import paths
from megaprov.cluster import inventory as inv
from megaprov.cluster import plays as cluster_plays
from megaprov.cluster import runner
from megaprov.errors import HostsUnreachable, RunFailed, UsageError
from megaprov.output import SILENT, Reporter
from megaprov.training import follow, jobs, nodefacts, planner, render
from megaprov.training.jobspec import parse
from megaprov.training.launchers import slurm
from tests.unit.training.test_task_names import folded

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOK = ROOT / "ansible_collections" / "megaprov" / "cluster" / "playbooks" / "job_slurm.yml"
SPEC = parse((ROOT / "examples" / "jobs" / "lab-tiny-slurm.yml").read_text())
NAME = SPEC.name
ARTIFACTS = Path("/state/runs/job_slurm-1")
SHOWN = Reporter(True)  # a caller's reporter: the play must get the one it was handed

RECORD = (
    "JobId=4242 JobName=lab-tiny-slurm UserId=megaprov(2000) JobState=RUNNING Reason=None Requeue=1 Restarts=1 BatchFlag=1 "
    "ExitCode=0:0 NodeList=node[1-2] BatchHost=node1 NumNodes=2-2"
)


# ---- the playbook, as the launcher relies on it


def _walk(tasks: list[dict[str, Any]], when: tuple[str, ...] = ()) -> list[tuple[dict[str, Any], tuple[str, ...]]]:
    """Every task, blocks and their rescues flattened, with the conditions it runs under (its own and its blocks')."""
    out = []
    for task in tasks:
        here = (*when, task["when"]) if "when" in task else when
        out.append((task, here))
        for key in ("block", "rescue", "always"):
            out += _walk(task.get(key, []), here)
    return out


TASKS = _walk([t for play in yaml.safe_load(PLAYBOOK.read_text()) for t in play.get("tasks", [])])


def _task(name: str) -> str:
    """A task of job_slurm.yml, by its name (which the runner reports with its events)."""
    assert [t["name"] for t, _ in TASKS].count(name) == 1, name
    return name


def test_the_playbook_hands_over_what_the_launcher_reads_one_key_per_action():
    said = {
        key: re.findall(r"megaprov_job\.action == '(\w+)'", " ".join(when))
        for task, when in TASKS
        for key in task.get("ansible.builtin.set_stats", {}).get("data", {})
    }
    assert said == {"slurm_submitted": ["submit"], "slurm_state": ["status"], "slurm_grow": ["grow"]}
    assert (slurm.SUBMITTED, slurm.STATE, slurm.GROW) == ("slurm_submitted", "slurm_state", "slurm_grow")
    actions = {a for _, when in TASKS for a in re.findall(r"megaprov_job\.action == '(\w+)'", " ".join(when))}
    assert actions == {"submit", "status", "stop", "grow"}


# ---- a real job: inventory, job directory, the example spec rendered


@pytest.fixture
def cluster(tmp_path):
    """An inventory whose Slurm controller is not the head, and the shared directory this machine sees."""
    shared = tmp_path / "shared"
    shared.mkdir()
    path = tmp_path / "inventory.ini"
    path.write_text(
        "[head]\nhead01 ansible_host=10.0.0.1\n[slurm_controller]\nctl01 ansible_host=10.0.0.9\n"
        "[gpu_nodes]\nnode1 ansible_host=10.0.0.2\nnode2 ansible_host=10.0.0.3\n"
        f"[all:vars]\nmegaprov_controller_shared_dir={shared}\nmegaprov_shared_dir=/shared\n"
    )
    return inv.load(path, paths.roles_dir(), paths.cluster_defaults())


def _rendered() -> render.Rendered:
    known = nodefacts.KnownCluster(2, 1, planner.GPUS["cpu"], "/shared", ("node1", "node2"), stack=nodefacts.ROLE_DEFAULTS)
    return render.render(SPEC, known, [("node1", "10.0.0.2"), ("node2", "10.0.0.3")])


def _job(found: inv.Inventory, slurm_id: str = "4242", **recorded: Any) -> jobs.Job:
    """The job as `megaprov train` left it: its directory with job.json (as jobs.start writes it) and launch/."""
    rendered = _rendered()
    job = jobs.locate(found, NAME, "/shared", ["node1", "node2"], rendered.checkpoint_dir)
    job.launcher, job.slurm_id = "slurm", slurm_id
    (job.local_dir / "launch").mkdir(parents=True)
    (job.local_dir / "logs").mkdir()
    meta = {
        "name": NAME,
        "state": "submitted",
        "hosts": job.hosts,
        "shared_dir": job.shared_dir,
        "job_dir": job.job_dir,
        "checkpoint_dir": job.checkpoint_dir,
        "unit": job.unit,
        "launcher": "slurm",
        "stop_grace_s": rendered.stop.unit_s if rendered.stop else 0,
        "submit_host": "ctl01",
        "slurm_job_id": slurm_id or None,
        **recorded,
    }
    (job.local_dir / "job.json").write_text(json.dumps(meta, indent=2) + "\n")
    return job


def _base(job: jobs.Job) -> dict[str, Any]:
    return {
        "name": NAME,
        "hosts": ["node1", "node2"],
        "dir": f"/shared/jobs/{NAME}",
        "unit": f"megaprov-job-{NAME}.service",
        "checkpoint_dir": job.checkpoint_dir,
    }


# ---- job_slurm.yml stood in: ansible-runner's events, folded by the runner


def _events(*steps: tuple[str, str, dict[str, Any]], said: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"event": "playbook_on_play_start", "event_data": {"play": "Slurm job"}}]
    for kind, task, res in steps:
        events.append({"event": kind, "event_data": {"host": "ctl01", "task": _task(task), "res": res}})
    events.append({"event": "playbook_on_stats", "event_data": {"artifact_data": said or {}}})
    return events


def _ok(task: str, **res: Any) -> tuple[str, str, dict[str, Any]]:
    return ("runner_on_ok", task, res)


SLURM_ANSWERS = _ok("Check that Slurm answers here", rc=0, stdout="debug*")


def _status(text: Any) -> list[dict[str, Any]]:
    return _events(SLURM_ANSWERS, _ok("Read the job's state", stdout=text), _ok("Hand the job's state to megaprov"), said={"slurm_state": text})


@pytest.fixture
def plays(monkeypatch):
    """Every call of plays.run (its arguments), answered per action of job_slurm.yml with the events set in `answers`
    (or a RunResult as is), else a play that ran every task and handed nothing over."""
    calls: list[dict[str, Any]] = []
    answers: dict[str, Any] = {}

    def run(playbook, inventory, extravars, report, hosts, collect=(), strategy="linear"):
        extra = copy.deepcopy(dict(extravars))
        calls.append(
            {
                "playbook": playbook,
                "inventory": inventory,
                "extravars": extra,
                "report": report,
                "hosts": hosts,
                "collect": collect,
                "strategy": strategy,
            }
        )
        answer = answers.get(extravars["megaprov_job"]["action"], _events(SLURM_ANSWERS))
        if isinstance(answer, runner.RunResult):
            return answer
        return folded(answer, collect, ARTIFACTS)

    monkeypatch.setattr(cluster_plays, "run", run)
    return calls, answers


def _call(job: jobs.Job, report: Reporter, **extravars: Any) -> dict[str, Any]:
    """What a call of job_slurm.yml on the job's Slurm controller looks like."""
    return {
        "playbook": "job_slurm.yml",
        "inventory": job.inventory,
        "extravars": {"megaprov_job": extravars},
        "report": report,
        "hosts": 1,
        "collect": (),
        "strategy": "linear",
    }


# ---- where Slurm jobs are submitted


def test_jobs_are_submitted_on_the_slurm_controller_else_on_the_head(tmp_path, cluster):
    assert slurm.submit_host(cluster) == "ctl01"
    head_only = tmp_path / "head-only.ini"
    head_only.write_text("[head]\nhead01\n[slurm_controller]\n[gpu_nodes]\nnode1\n")  # an empty controller group: the head
    assert slurm.submit_host(inv.load(head_only, paths.roles_dir(), paths.cluster_defaults())) == "head01"


def test_an_inventory_without_a_controller_or_head_is_refused_naming_it():
    with pytest.raises(UsageError) as info:
        slurm.submit_host(inv.Inventory(Path("/clusters/a/inventory.ini"), {}, {"head": [], "slurm_controller": []}, {}))
    assert info.value.message == "/clusters/a/inventory.ini: no [head] host to submit Slurm jobs on"
    assert info.value.hint == "add the Slurm controller as [head] or [slurm_controller]"


def test_the_launcher_reads_each_inventory_once_and_never_mixes_two(tmp_path, cluster, plays):
    launcher = slurm.SlurmLauncher()
    job = _job(cluster)
    other = tmp_path / "other.ini"
    other.write_text("[head]\nhead02\n[gpu_nodes]\nnode9\n")
    second = dataclasses.replace(job, inventory=other)
    assert (launcher._submit_host(job), launcher._submit_host(second)) == ("ctl01", "head02")
    job.inventory.write_text("[head]\nhead03\n[gpu_nodes]\nnode1\n")  # read once per launcher: a follower asks every few seconds
    assert (launcher._submit_host(job), launcher._submit_host(second)) == ("ctl01", "head02")
    assert slurm.SlurmLauncher()._submit_host(job) == "head03"


# ---- submit


def test_stage_writes_the_rendered_scripts_and_names_the_controller(tmp_path, cluster):
    job = _job(cluster, slurm_id="")
    staging = tmp_path / "staging"
    (staging / "launch").mkdir(parents=True)
    rendered = _rendered()
    assert slurm.SlurmLauncher().stage(job, SPEC, rendered, cluster, staging) == {}
    assert job.submit_host == "ctl01"
    assert (staging / "launch" / "job.sbatch").read_text() == rendered.sbatch
    assert (staging / "launch" / "slurm-node.sh").read_text() == rendered.slurm_node
    assert rendered.sbatch and rendered.sbatch.startswith("#!/bin/bash\n#SBATCH --job-name=lab-tiny-slurm\n")
    shutil.rmtree(staging / "launch")
    (staging / "launch").mkdir()
    slurm.SlurmLauncher().stage(job, SPEC, dataclasses.replace(rendered, sbatch=None, slurm_node=None), cluster, staging)
    assert (staging / "launch" / "job.sbatch").read_text() == "" and (staging / "launch" / "slurm-node.sh").read_text() == ""


def _submitted(tmp_path, cluster, plays, answer: Any) -> tuple[jobs.Job, dict[str, Any]]:
    calls, answers = plays
    answers["submit"] = answer
    job = _job(cluster, slurm_id="")
    (tmp_path / "staging" / "launch").mkdir(parents=True)
    launcher = slurm.SlurmLauncher()
    launcher.stage(job, SPEC, _rendered(), cluster, tmp_path / "staging")
    job_vars = job.vars(python=SPEC.launch.interpreter, bundle_b64="YnVuZGxl", resume=False)
    try:
        launcher.start(job, job_vars, SHOWN, "free")
    finally:
        assert calls == [_call(job, SHOWN, **job_vars, action="submit", submit_host="ctl01", slurm_id="0", grace=0)]
    return job, job_vars


def _sbatch(stdout: Any) -> list[dict[str, Any]]:
    return _events(
        SLURM_ANSWERS,
        _ok("Submit the batch script", stdout=stdout),
        _ok("Hand the Slurm job id to megaprov"),
        said={"slurm_submitted": stdout},
    )


@pytest.mark.parametrize(("printed", "read"), [("4242", "4242"), ("4242;cluster-b", "4242")])
def test_start_submits_on_the_controller_and_keeps_the_id_sbatch_printed(tmp_path, cluster, plays, printed, read):
    """The strategy is the systemd launcher's business: one host runs this play, as the linear strategy does."""
    job, _ = _submitted(tmp_path, cluster, plays, _sbatch(printed))
    assert job.slurm_id == read


def test_a_refused_submission_is_the_job_settings_error_and_no_id(tmp_path, cluster, plays):
    refused = "Slurm refuses job lab-tiny-slurm: Requested node configuration is not available (launch.nodes, ...)"
    answer = _events(
        SLURM_ANSWERS,
        ("runner_on_failed", "Refuse a request Slurm cannot satisfy", {"msg": refused, "usage_error": True}),
    )
    with pytest.raises(UsageError) as info:
        _submitted(tmp_path, cluster, plays, answer)
    assert info.value.message == f"job lab-tiny-slurm not submitted: {refused}"


def test_a_failed_sbatch_is_a_failed_run_naming_the_task_and_the_artifacts(tmp_path, cluster, plays):
    answer = _events(
        SLURM_ANSWERS,
        ("runner_on_failed", "Submit the batch script", {"msg": "non-zero return code", "stderr": "sbatch: error: Batch job submission failed"}),
    )
    with pytest.raises(RunFailed) as info:
        _submitted(tmp_path, cluster, plays, answer)
    assert type(info.value) is RunFailed
    assert info.value.message == (
        "job lab-tiny-slurm not submitted: ctl01: task 'Submit the batch script' failed: sbatch: error: Batch job submission failed"
    )
    assert info.value.hint == f"see {ARTIFACTS}/stdout"


def test_an_unreachable_controller_submits_nothing(tmp_path, cluster, plays):
    answer = [
        {
            "event": "runner_on_unreachable",
            "event_data": {"host": "ctl01", "task": _task("Check that Slurm answers here"), "res": {"msg": "ssh: timed out"}},
        }
    ]
    with pytest.raises(HostsUnreachable) as info:
        _submitted(tmp_path, cluster, plays, answer)
    assert info.value.message == "job lab-tiny-slurm not submitted: node(s) ctl01 unreachable (ssh: timed out)"


def test_a_run_that_ended_without_a_failed_task_says_its_status(tmp_path, cluster, plays):
    ended = runner.RunResult("timeout", 254, [], [], [], ARTIFACTS, 600.0, stats_seen=False)
    with pytest.raises(RunFailed) as info:
        _submitted(tmp_path, cluster, plays, ended)
    assert info.value.message == "job lab-tiny-slurm not submitted: ansible-playbook ended with status timeout"


@pytest.mark.parametrize("said", [None, 4242, ["4242"]])
def test_a_submission_without_a_printed_id_is_a_failed_run(tmp_path, cluster, plays, said):
    answer = _events(SLURM_ANSWERS, said={} if said is None else {"slurm_submitted": said})
    with pytest.raises(RunFailed) as info:
        _submitted(tmp_path, cluster, plays, answer)
    assert (info.value.message, info.value.hint) == ("job lab-tiny-slurm: sbatch printed no job id", f"see {ARTIFACTS}/stdout")


def test_what_sbatch_printed_must_be_a_job_id(tmp_path, cluster, plays):
    with pytest.raises(UsageError) as info:
        _submitted(tmp_path, cluster, plays, _sbatch("sbatch: error: invalid partition specified: gpu"))
    assert info.value.message == "sbatch --parsable: 'sbatch: error: invalid partition specified: gpu' is not a Slurm job id"


def test_a_long_sbatch_answer_is_shown_from_its_first_80_characters(tmp_path, cluster, plays):
    """Its 81st character is a quote: shown whole, the answer would be quoted with double quotes."""
    printed = "sbatch: error: Batch job submission failed: Invalid account or partition, users 'megaprov'"
    assert printed.index("'") == 80
    with pytest.raises(UsageError) as info:
        _submitted(tmp_path, cluster, plays, _sbatch(printed))
    assert info.value.message == "sbatch --parsable: 'sbatch: error: Batch job submission failed: Invalid acco... is not a Slurm job id"


# ---- the current Slurm job


def test_the_current_id_is_the_last_continuation_the_batch_script_wrote(cluster):
    job = _job(cluster, slurm_id="17")
    launcher = slurm.SlurmLauncher()
    assert slurm.current_id(job) == launcher.current_id(job) == "17"  # none yet
    jobs_file = job.local_dir / "launch" / "slurm-jobs"
    jobs_file.write_text("18\n 19 \n20;x\nabc\n")
    assert slurm.current_id(job) == launcher.current_id(job) == "19"
    jobs_file.write_text("1234567890123\n")  # 13 digits: not an id Slurm gives
    assert slurm.current_id(job) == "17"


def test_a_long_continuations_file_is_read_from_its_last_mebibyte(cluster):
    job = _job(cluster, slurm_id="17")
    jobs_file = job.local_dir / "launch" / "slurm-jobs"
    padding = ("#" * 1023 + "\n") * 1024  # exactly 1 MiB
    jobs_file.write_text("99\n" + padding + "20\n")
    assert slurm.current_id(job) == "20"  # larger than the bound: its end is read, not refused
    jobs_file.write_text("99\n" + padding)
    assert slurm.current_id(job) == "17"  # an id further back than the last MiB is not read
    jobs_file.unlink()
    (job.local_dir / "ids").write_text("99\n")
    jobs_file.symlink_to(job.local_dir / "ids")
    assert slurm.current_id(job) == "17"  # the cluster user's link is not followed


def test_state_asks_about_the_current_id_on_the_controller(cluster, plays):
    calls, answers = plays
    job = _job(cluster, slurm_id="4242")
    job.submit_host = "head01"  # what job.json says is not where megaprov goes: the inventory says
    (job.local_dir / "launch" / "slurm-jobs").write_text("4243\n")
    answers["status"] = _status(RECORD.replace("4242", "4243") + "\n--- pending\n")
    found = slurm.SlurmLauncher().state(job, SHOWN)
    assert found == slurm.SlurmState("4243", "RUNNING", "", "node[1-2]", 1, None, 0, "0:0")
    assert calls == [_call(job, SHOWN, **_base(job), action="status", submit_host="ctl01", slurm_id="4243")]
    assert job.submit_host == "ctl01"


def test_a_job_without_an_id_asks_about_id_0(cluster, plays):
    calls, answers = plays
    job = _job(cluster, slurm_id="")
    answers["status"] = _status("slurm_load_jobs error: Invalid job id specified\n--- pending\n")
    found = slurm.SlurmLauncher().state(job)
    assert calls[0]["extravars"]["megaprov_job"]["slurm_id"] == "0" and calls[0]["report"] is SILENT
    assert (found.job_id, found.state) == ("", "GONE")


def test_a_pending_job_knows_its_place_in_the_queue(cluster, plays):
    _, answers = plays
    job = _job(cluster, slurm_id="4242")
    pending = RECORD.replace("JobState=RUNNING Reason=None", "JobState=PENDING Reason=Priority").replace("NodeList=node[1-2]", "NodeList=")
    answers["status"] = _status(pending + "\n--- pending\n4240\n4242\n4244\n")
    found = slurm.SlurmLauncher().state(job)
    assert (found.state, found.reason, found.position, found.pending, found.alive) == ("PENDING", "Priority", 2, 3, True)


def test_a_status_play_that_failed_says_nothing_about_the_job(cluster, plays):
    """The controller did not answer this time (slurmctld restarting, SSH): not known to be over."""
    _, answers = plays
    job = _job(cluster, slurm_id="4242")
    words = "\x1b[2J" + "Unable to contact slurm controller " * 10
    answers["status"] = _events(("runner_on_failed", "Read the job's state", {"msg": words}))
    found = slurm.SlurmLauncher().state(job)
    assert (found.job_id, found.state, found.alive) == ("4242", "UNKNOWN", True)
    assert found.reason.startswith("\\x1b[2JUnable to contact slurm controller") and len(found.reason) == 200
    answers["status"] = runner.RunResult("canceled", 254, [], [], [], ARTIFACTS, 1.0)
    assert slurm.SlurmLauncher().state(job) == slurm.SlurmState("4242", "UNKNOWN", "ansible-playbook ended with status canceled")


def test_an_answer_without_the_jobs_record_is_kept_to_200_characters(cluster, plays):
    _, answers = plays
    answers["status"] = _status("slurm_load_jobs error: " + "Socket timed out on send/recv operation " * 10 + "\n--- pending\n4242\n")
    found = slurm.SlurmLauncher().state(_job(cluster, slurm_id="4242"))
    assert (found.state, found.pending, found.position, len(found.reason)) == ("UNKNOWN", 1, None, 200)
    assert found.reason.startswith("slurm_load_jobs error: Socket timed out")


@pytest.mark.parametrize("said", [None, ["JobId=4242 JobState=FAILED"], 4242])
def test_a_state_that_is_not_text_is_no_state(cluster, plays, said):
    _, answers = plays
    answers["status"] = _events(SLURM_ANSWERS, said={} if said is None else {"slurm_state": said})
    assert slurm.SlurmLauncher().state(_job(cluster, slurm_id="4242")) == slurm.SlurmState("4242", "UNKNOWN", "")


def test_states_is_the_state_as_text_under_slurm(cluster, plays):
    calls, answers = plays
    job = _job(cluster, slurm_id="4242")
    answers["status"] = _status(RECORD + "\n--- pending\n4250\n")
    assert slurm.SlurmLauncher().states(job, SHOWN) == {
        "slurm": {
            "slurm_job_id": "4242",
            "state": "RUNNING",
            "reason": "",
            "nodes": "node[1-2]",
            "restarts": "1",
            "position": "",
            "pending": "1",
            "exit_code": "0:0",
        }
    }
    assert calls[0]["report"] is SHOWN


def test_as_dict_names_every_field():
    state = slurm.SlurmState("7", "PENDING", "Priority", "", 3, 1, 4, "0:0")
    assert state.as_dict() == {
        "slurm_job_id": "7",
        "state": "PENDING",
        "reason": "Priority",
        "nodes": "",
        "restarts": 3,
        "position": 1,
        "pending": 4,
        "exit_code": "0:0",
    }


# ---- over or not: squeue(1), JOB STATE CODES (24 of them)

NOT_OVER = (
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED", "STOPPED",
    "SIGNALING", "STAGE_OUT", "SPECIAL_EXIT", "RESV_DEL_HOLD",
)  # fmt: skip
OVER = ("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "REVOKED", "TIMEOUT")


def test_every_state_is_over_or_not_and_only_unknown_and_gone_are_added():
    assert len(NOT_OVER) + len(OVER) == 24
    assert sorted(slurm.ALIVE) == sorted((*NOT_OVER, "UNKNOWN")) and len(set(slurm.ALIVE)) == len(slurm.ALIVE)
    assert sorted(slurm.ENDED) == sorted(OVER) and len(set(slurm.ENDED)) == len(slurm.ENDED)
    assert [s for s in (*NOT_OVER, "UNKNOWN") if not slurm.SlurmState("1", s).alive] == []
    assert [s for s in (*OVER, "GONE") if slurm.SlurmState("1", s).alive] == []


# ---- stop and grow


def test_stop_signals_the_current_job_and_waits_the_rendered_grace(cluster, plays):
    calls, _ = plays
    job = _job(cluster, slurm_id="4242")
    (job.local_dir / "launch" / "slurm-jobs").write_text("4243\n")
    slurm.SlurmLauncher().stop(job, SHOWN)
    grace = _rendered().stop.unit_s  # type: ignore[union-attr]
    assert 60 < grace < 6 * 3600
    assert calls == [_call(job, SHOWN, **_base(job), action="stop", submit_host="ctl01", slurm_id="4243", grace=grace)]


@pytest.mark.parametrize(
    ("recorded", "waited"),
    [(0, 60), (59, 60), (60, 60), (61, 61), (21600, 21600), (21720, 21720), (21721, 21720), (1 << 30, 21720), ((1 << 30) + 1, 60), (-5, 60)],
)
def test_stop_waits_at_least_a_minute_and_at_most_six_hours_and_slurms_kill_wait(cluster, plays, recorded, waited):
    calls, _ = plays
    slurm.SlurmLauncher().stop(_job(cluster, stop_grace_s=recorded), SILENT)
    assert calls[0]["extravars"]["megaprov_job"]["grace"] == waited


def test_a_stop_grace_from_a_broken_job_file_is_the_minimum(cluster, plays):
    calls, _ = plays
    job = _job(cluster)
    (job.local_dir / "job.json").write_text("{not json")
    slurm.SlurmLauncher().stop(job, SILENT)
    assert calls[0]["extravars"]["megaprov_job"]["grace"] == 60


def test_a_stop_on_a_cluster_without_slurm_is_refused_with_the_playbooks_words(cluster, plays):
    _, answers = plays
    words = "Slurm does not answer on ctl01 (sinfo: not found): set megaprov_scheduler: slurm in the inventory"
    answers["stop"] = _events(
        _ok("Check that Slurm answers here", rc=127), ("runner_on_failed", "Refuse a cluster without Slurm", {"msg": words, "usage_error": True})
    )
    with pytest.raises(UsageError) as info:
        slurm.SlurmLauncher().stop(_job(cluster), SILENT)
    assert info.value.message == f"job lab-tiny-slurm: stop failed: {words}"


def test_a_stop_whose_signal_failed_is_a_failed_run(cluster, plays):
    _, answers = plays
    task = "Send the job's steps SIGTERM (the ranks save a checkpoint) and wait for them"
    answers["stop"] = _events(
        SLURM_ANSWERS, ("runner_on_failed", task, {"msg": "non-zero return code", "stderr": "sh: 1: scancel: Permission denied"})
    )
    with pytest.raises(RunFailed) as info:
        slurm.SlurmLauncher().stop(_job(cluster), SILENT)
    assert info.value.message == f"job lab-tiny-slurm: stop failed: ctl01: task '{task}' failed: sh: 1: scancel: Permission denied"


def _grow(idle: Any) -> list[dict[str, Any]]:
    return _events(
        SLURM_ANSWERS,
        _ok("Read the idle nodes Slurm could add to the job", stdout_lines=idle),
        _ok("Hand the idle nodes to megaprov"),
        said={"slurm_grow": idle},
    )


@pytest.mark.parametrize(("partition", "passed"), [("gpu", "gpu"), (None, ""), ("", "")])
def test_grow_asks_the_current_job_in_its_partition_and_returns_slurms_idle_nodes(cluster, plays, partition, passed):
    calls, answers = plays
    job = _job(cluster, slurm_id="4242")
    (job.local_dir / "launch" / "slurm-jobs").write_text("4243\n4244\n")
    answers["grow"] = _grow(["node3", "node4.cluster"])
    assert slurm.SlurmLauncher().grow(job, partition, SHOWN) == ["node3", "node4.cluster"]
    assert calls == [_call(job, SHOWN, **_base(job), action="grow", submit_host="ctl01", slurm_id="4244", partition=passed)]


@pytest.mark.parametrize(
    ("said", "idle"),
    [
        (["node3", 7, None, "../etc", "node 4", "node;rm", "", "node5"], ["node3", "node5"]),
        ("node3", []),  # not a list: nothing known to be idle
        ({"node3": 1}, []),
        (None, []),
    ],
)
def test_grow_returns_only_host_names_slurm_said(cluster, plays, said, idle):
    _, answers = plays
    answers["grow"] = _events(SLURM_ANSWERS, said={} if said is None else {"slurm_grow": said})
    assert slurm.SlurmLauncher().grow(_job(cluster), "gpu", SILENT) == idle


def test_a_grow_with_no_idle_node_is_refused_with_the_playbooks_words(cluster, plays):
    _, answers = plays
    words = "job lab-tiny-slurm cannot grow: Slurm has no idle node in partition gpu (`sinfo -R` names the nodes out of service)"
    answers["grow"] = _events(
        SLURM_ANSWERS,
        _ok("Read the idle nodes Slurm could add to the job", stdout_lines=[]),
        ("runner_on_failed", "Refuse a grow with no idle node", {"msg": words, "usage_error": True}),
    )
    with pytest.raises(UsageError) as info:
        slurm.SlurmLauncher().grow(_job(cluster), "gpu", SILENT)
    assert info.value.message == f"job lab-tiny-slurm: grow failed: {words}"


def test_a_grow_whose_signal_failed_is_a_failed_run(cluster, plays):
    _, answers = plays
    words = "scancel could not signal slurm job 4242: scancel: error: Kill job error on job id 4242: Job/step already completing"
    answers["grow"] = _events(SLURM_ANSWERS, ("runner_on_failed", "Say why the grow failed", {"msg": words}))
    with pytest.raises(RunFailed) as info:
        slurm.SlurmLauncher().grow(_job(cluster), "gpu", SILENT)
    assert info.value.message == f"job lab-tiny-slurm: grow failed: ctl01: task 'Say why the grow failed' failed: {words}"


# ---- what the batch script leaves in the job directory


def test_the_log_hosts_are_the_current_allocations_host_names(cluster):
    """launch/nodes names log files (logs/<host>.log): a line that is not a host name is no host."""
    job = _job(cluster)
    launcher = slurm.SlurmLauncher()
    assert launcher.log_hosts(job) == []  # before any allocation
    nodes = job.local_dir / "launch" / "nodes"
    nodes.write_text("node1\n node2 \n../../../etc/passwd\n/etc/shadow\nnode3/../x\nnode4;rm\n\x1b]0;t\x07\n\n.node5\ngpu-7.cluster\n")
    assert launcher.log_hosts(job) == ["node1", "node2", "gpu-7.cluster"]
    nodes.write_text("".join(f"n{i}\n" for i in range(10_001)))
    hosts = launcher.log_hosts(job)
    assert len(hosts) == 10_000 and hosts[-1] == "n9999"
    nodes.write_text("node1\n" + "#" * (1 << 20))
    assert launcher.log_hosts(job) == []  # over 1 MiB: refused, not read in part
    nodes.write_text("node1\n" + "#" * ((1 << 20) - 6))
    assert launcher.log_hosts(job) == ["node1"]
    nodes.unlink()
    (job.local_dir / "hosts").write_text("node9\n")
    nodes.symlink_to(job.local_dir / "hosts")
    assert launcher.log_hosts(job) == []  # the cluster user's link is not followed


EVENTS = (
    "megaprov: slurm job 4241 failed with status 1 (restart 1 of 2): continues as slurm job 4242 at 2026-12-01T09:59:00.000Z\n"
    "megaprov: slurm job 4242 running on node[1-2] at 2026-12-01T10:00:00.000Z\n"
    "srun: error: node2: task 1: Exited with exit code 1\n"
    "megaprov: job lab-tiny-slurm grew\n"
    "megaprov: slurm job 4242 failed with status 1 (restart 2 of 2): continues as slurm job 4243 at 2026-12-01T10:05:00.000Z\n"
    "  megaprov: slurm job 4243 indented\n"
    "megaprov: slurm job 4243 running on node[2-3] at 2026-12-01T10:06:00.000Z\x1b[2J\n"
    "megaprov: slurm job 4243 failed with status 1: no restarts left (2) at 2026-12-01T10:09:00.000Z\n"
)


def test_events_are_the_batch_scripts_own_lines(cluster):
    job = _job(cluster)
    launcher = slurm.SlurmLauncher()
    assert launcher.events(job) == []
    (job.local_dir / "logs" / "slurm.log").write_text(EVENTS)
    assert launcher.events(job) == [
        "slurm job 4241 failed with status 1 (restart 1 of 2): continues as slurm job 4242 at 2026-12-01T09:59:00.000Z",
        "slurm job 4242 running on node[1-2] at 2026-12-01T10:00:00.000Z",
        "slurm job 4242 failed with status 1 (restart 2 of 2): continues as slurm job 4243 at 2026-12-01T10:05:00.000Z",
        "slurm job 4243 running on node[2-3] at 2026-12-01T10:06:00.000Z\\x1b[2J",
        "slurm job 4243 failed with status 1: no restarts left (2) at 2026-12-01T10:09:00.000Z",
    ]


def test_a_job_slurm_ended_gave_up_with_its_state_and_its_last_two_events(cluster, plays):
    calls, answers = plays
    job = _job(cluster, slurm_id="4242")
    (job.local_dir / "launch" / "slurm-jobs").write_text("4243\n")
    (job.local_dir / "logs" / "slurm.log").write_text(EVENTS)
    ended = RECORD.replace("4242", "4243").replace("JobState=RUNNING", "JobState=FAILED").replace("ExitCode=0:0", "ExitCode=1:0")
    answers["status"] = _status(ended + "\n--- pending\n")
    said = slurm.SlurmLauncher().gave_up(job, follow.JobLog(128), SHOWN)
    assert said == (
        "slurm job 4243 FAILED on node[1-2], exit 1:0, requeued 1 time(s); "
        "slurm job 4243 running on node[2-3] at 2026-12-01T10:06:00.000Z\\x1b[2J; "
        "slurm job 4243 failed with status 1: no restarts left (2) at 2026-12-01T10:09:00.000Z"
    )
    assert calls[0]["report"] is SILENT and calls[0]["extravars"]["megaprov_job"]["action"] == "status"
    (job.local_dir / "logs" / "slurm.log").unlink()
    answers["status"] = _status("slurm_load_jobs error: Invalid job id specified\n--- pending\n")
    said = slurm.SlurmLauncher().gave_up(job, follow.JobLog(128), SHOWN)
    # with no event line the sentence ends in its separator (jobs.follow words a Slurm job's end the same way)
    assert said is not None and said == "slurm job 4243 no longer known to slurmctld"


@pytest.mark.parametrize("state", ["RUNNING", "PENDING", "REQUEUED", "COMPLETING", "SUSPENDED"])
def test_a_job_slurm_still_holds_has_not_given_up(cluster, plays, state):
    _, answers = plays
    job = _job(cluster, slurm_id="4242")
    (job.local_dir / "logs" / "slurm.log").write_text(EVENTS)
    answers["status"] = _status(RECORD.replace("JobState=RUNNING", f"JobState={state}") + "\n--- pending\n")
    assert slurm.SlurmLauncher().gave_up(job, follow.JobLog(128), SILENT) is None


def test_a_controller_that_did_not_answer_has_not_given_up(cluster, plays):
    _, answers = plays
    answers["status"] = _events(("runner_on_failed", "Read the job's state", {"msg": "Socket timed out on send/recv operation"}))
    assert slurm.SlurmLauncher().gave_up(_job(cluster), follow.JobLog(128), SILENT) is None


def test_every_extra_var_the_playbook_reads_for_an_action_is_passed_with_it(tmp_path, cluster, plays):
    """A variable job_slurm.yml reads that the launcher does not pass fails the play on the controller (undefined)."""
    calls, answers = plays
    job, _ = _submitted(tmp_path, cluster, plays, _sbatch("4242"))
    launcher = slurm.SlurmLauncher()
    launcher.state(job)
    launcher.stop(job, SILENT)
    launcher.grow(job, "gpu", SILENT)
    passed = {c["extravars"]["megaprov_job"]["action"]: set(c["extravars"]["megaprov_job"]) for c in calls}
    assert set(passed) == {"submit", "status", "stop", "grow"}
    everywhere = set(re.findall(r"megaprov_job\.(\w+)", yaml.safe_load(PLAYBOOK.read_text())[0]["hosts"]))
    for action, keys in passed.items():
        read = set(everywhere)
        for task, when in TASKS:
            if re.findall(r"megaprov_job\.action == '(\w+)'", " ".join(when)) in ([], [action]):
                own = {k: v for k, v in task.items() if k not in ("block", "rescue", "always", "when") and not k.endswith("import_tasks")}
                read |= set(re.findall(r"megaprov_job\.(\w+)", json.dumps(own)))
        assert read <= keys, (action, read - keys)
