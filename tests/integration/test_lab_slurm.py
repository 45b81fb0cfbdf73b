"""megaprov train through Slurm on the lab: the README run's bootstrap brought Slurm up (the lab's group_vars set
megaprov_scheduler: slurm). Real slurmctld and slurmd on 2 container nodes, the batch script submitted as the
cluster user, the lab trainer under srun; a killed rank, the time limit, a queued job, a stop, a refused request."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, megaprov, podman_exec

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def cluster(bootstrapped, tmp_path_factory):
    """The README run's lab with this module's prepared data (data/lab, as the example job names it)."""
    corpus = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    code, _, err = megaprov("data", "corpus", "--output-file", str(corpus), "--documents", "1500")
    assert code == 0, err
    inventory = bootstrapped["inventory"]
    code, doc, err = megaprov("data", "prepare", "--input", str(corpus), "--output-prefix", "data/lab", "-i", inventory, "--output", "json")
    assert code == 0, err
    shared = yaml.safe_load((Path(inventory).parent / "group_vars" / "all.yml").read_text())["megaprov_controller_shared_dir"]
    return {**bootstrapped, "shared": Path(shared), "head": bootstrapped["nodes"][0]["container"]}


def job_file(tmp_path, name, **changes):
    spec = yaml.safe_load((ROOT / "examples" / "jobs" / "lab-tiny-slurm.yml").read_text())
    spec["name"] = name
    for path, value in changes.items():
        section, *keys = path.split(".")
        target = spec[section]
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def events(cluster, name):
    path = cluster["shared"] / "jobs" / name / "logs" / "slurm.log"
    return path.read_text().splitlines() if path.is_file() else []


def slurm(cluster, *argv):
    return podman_exec(cluster["head"], *argv)


def squeue_state(cluster, slurm_id):
    return slurm(cluster, "squeue", "-h", "-j", slurm_id, "-o", "%T|%r").stdout.strip()


def wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    pytest.fail(f"{what} did not happen within {seconds} s")


def iterations(cluster, name, node="node2"):
    log = cluster["shared"] / "jobs" / name / "logs" / f"{node}.log"
    return log.read_text().count("| lm loss:") if log.is_file() else 0


def test_the_slurm_lab_job_passes_its_verdict(cluster, tmp_path):
    name = "slurm-tiny"
    code, doc, err = megaprov("train", "--job", job_file(tmp_path, name), "-i", cluster["inventory"], "--output", "json")
    assert code == 0, err[-3000:]
    assert doc["result"]["verdict"] == "passed"
    job = json.loads((cluster["shared"] / "jobs" / name / "job.json").read_text())
    assert job["launcher"] == "slurm" and job["slurm_job_id"].isdigit() and job["state"] == "finished"
    # Slurm ran it: its accounting of the job (still in slurmctld), the batch script's lines, both nodes' logs
    shown = slurm(cluster, "scontrol", "show", "job", "-o", job["slurm_job_id"]).stdout
    assert "JobState=COMPLETED" in shown and f"JobName={name}" in shown and "NodeList=node[1-2]" in shown
    lines = events(cluster, name)
    assert lines[0].startswith(f"megaprov: slurm job {job['slurm_job_id']} running on node[1-2]") and "finished" in lines[-1]
    report = json.loads((cluster["shared"] / "jobs" / name / "report.json").read_text())
    assert report["iterations"]["last"] == 60 and not report["restarts"]
    for node in ("node1", "node2"):
        assert "torchrun exited with 0" in (cluster["shared"] / "jobs" / name / "logs" / f"{node}.log").read_text()
    # The batch script ran as the cluster user, not root
    assert "UserId=megaprov(" in shown
    code, doc, err = megaprov("jobs", "--output", "json")
    row = next(j for j in doc["result"]["jobs"] if j["name"] == name)
    assert row["slurm_job_id"] == job["slurm_job_id"] and row["verdict"] == "passed" and row["launcher"] == "slurm"


def test_one_task_per_gpu_with_slurms_rank_variables_trains_the_same_model(cluster, tmp_path):
    """launch.slurm.shape per-gpu: no torchrun, srun starts the trainer itself with RANK/LOCAL_RANK/WORLD_SIZE from
    Slurm; the same data, seed and model give the same losses as the torchrun shape above."""
    name = "slurm-pergpu"
    code, doc, err = megaprov(
        "train", "--job", job_file(tmp_path, name, **{"launch.slurm.shape": "per-gpu"}), "-i", cluster["inventory"], "--output", "json"
    )
    assert code == 0, err[-3000:]
    node = (cluster["shared"] / "jobs" / name / "launch" / "slurm-node.sh").read_text()
    assert "export RANK=$SLURM_PROCID" in node and "torch.distributed.run" not in node

    def losses(job):
        rows = (cluster["shared"] / "jobs" / job / "metrics.jsonl").read_text().splitlines()
        return {r["iteration"]: r["loss"] for r in map(json.loads, rows)}

    # slurm-tiny (the test above, on this module's data) ran the torchrun shape: the same losses, iteration by iteration
    # (measured identical on the lab)
    assert len(losses(name)) == 60
    assert losses(name) == pytest.approx(losses("slurm-tiny"), rel=1e-5)


def test_a_killed_rank_continues_in_a_new_job_and_resumes_from_the_last_checkpoint(cluster, tmp_path):
    name = "slurm-kill"
    spec = job_file(tmp_path, name, **{"train.train_iters": 60, "checkpoint.save_interval": 10})
    metrics = cluster["shared"] / "jobs" / name / "metrics.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "megaprov", "train", "--job", spec, "-i", cluster["inventory"], "--output", "json"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: (metrics.is_file() and len(metrics.read_text().splitlines()) >= 22) or proc.poll() is not None, 300, "iteration 22")
        assert proc.poll() is None, proc.communicate()
        killed = podman_exec(cluster["nodes"][1]["container"], "pkill", "-9", "-f", "megaprov.trainer")
        assert killed.returncode == 0, "no rank process to kill on node2"
        out, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    report = json.loads((cluster["shared"] / "jobs" / name / "report.json").read_text())
    assert report["verdict"] == "passed" and report["iterations"]["last"] == 60
    assert len(report["restarts"]) == 1
    restart = report["restarts"][0]
    assert restart["resumed_from"] in (20, 30) and 0 <= restart["lost_iterations"] < 10, restart
    lines = events(cluster, name)
    first = json.loads((cluster["shared"] / "jobs" / name / "job.json").read_text())["slurm_job_id"]
    failed = [line for line in lines if "failed with status" in line]
    assert len(failed) == 1 and failed[0].startswith(f"megaprov: slurm job {first} failed") and "(restart 1 of 3)" in failed[0], lines
    second = failed[0].split("continues as slurm job ")[1].split()[0]
    assert (cluster["shared"] / "jobs" / name / "launch" / "slurm-jobs").read_text().split() == [second]
    assert lines[-1].startswith(f"megaprov: slurm job {second} finished"), lines


def test_the_time_limit_saves_continues_and_passes(cluster, tmp_path):
    """Slurm signals the batch script (--signal=B:USR1@grace) before the time limit; the same signal is sent here
    with scancel --batch, as slurmctld sends it, so that the test does not wait out a real limit of minutes."""
    name = "slurm-limit"
    code, doc, err = megaprov("train", "--job", job_file(tmp_path, name), "-i", cluster["inventory"], "--detach", "--output", "json")
    assert code == 0, err
    first = doc["result"]["slurm_job_id"]
    script = (cluster["shared"] / "jobs" / name / "launch" / "job.sbatch").read_text()
    assert "#SBATCH --signal=B:USR1@" in script and "#SBATCH --time=00:30:00" in script
    wait_for(lambda: iterations(cluster, name) >= 15, 300, "15 iterations")
    assert slurm(cluster, "scancel", "--batch", "--signal=USR1", first).returncode == 0
    wait_for(lambda: any("continues as" in line for line in events(cluster, name)), 120, "the continuation")
    saved = int((cluster["shared"] / "checkpoints" / name / "latest_checkpointed_iteration.txt").read_text())
    assert 15 <= saved < 60, "the ranks saved where SIGTERM found them (not at a save_interval of 20)"
    # follow it to the end through job status, as an operator who detached would
    wait_for(lambda: any("finished" in line for line in events(cluster, name)), 300, "the continuation to finish")
    code, doc, err = megaprov("job", "status", name, "--output", "json")
    assert code == 0, err
    assert doc["result"]["verdict"] == "passed" and doc["result"]["state"] == "finished", doc["result"]
    lines = events(cluster, name)
    assert any(line.startswith(f"megaprov: slurm job {first} reached its time limit (saved): continues as") for line in lines), lines
    assert not (cluster["shared"] / "jobs" / name / "launch" / "failures").exists(), "a time limit is not a failure"
    report = json.loads((cluster["shared"] / "jobs" / name / "report.json").read_text())
    assert report["iterations"]["last"] == 60 and [r["resumed_from"] for r in report["restarts"]] == [saved]


def test_a_second_job_waits_pending_with_its_reason_then_runs(cluster, tmp_path):
    first, second = "slurm-first", "slurm-second"
    code, doc, err = megaprov("train", "--job", job_file(tmp_path, first), "-i", cluster["inventory"], "--detach", "--output", "json")
    assert code == 0, err
    code, doc, err = megaprov("train", "--job", job_file(tmp_path, second), "-i", cluster["inventory"], "--detach", "--output", "json")
    assert code == 0, err
    second_id = doc["result"]["slurm_job_id"]
    assert squeue_state(cluster, second_id).startswith("PENDING|"), "both jobs want both nodes exclusively"
    code, doc, err = megaprov("job", "status", second, "--output", "json")
    assert code == 0, err
    pending = doc["result"]["slurm"]
    assert pending["state"] == "PENDING" and pending["reason"] in ("Resources", "Priority") and pending["position"] == "1", pending
    text = subprocess.run([sys.executable, "-m", "megaprov", "job", "status", second], capture_output=True, text=True, cwd=ROOT, check=False).stdout
    assert f"slurm job {second_id} PENDING ({pending['reason']}, 1 of" in text, text
    # It runs once the first is done, and both pass
    wait_for(lambda: any("finished" in line for line in events(cluster, second)), 400, "the second job to finish")
    for name in (first, second):
        code, doc, err = megaprov("job", "status", name, "--output", "json")
        assert code == 0 and doc["result"]["verdict"] == "passed", (name, doc and doc["result"])
    started = [json.loads((cluster["shared"] / "jobs" / n / "report.json").read_text()) for n in (first, second)]
    assert all(r["verdict"] == "passed" for r in started)


def test_job_stop_saves_a_checkpoint_and_ends_the_slurm_job(cluster, tmp_path):
    name = "slurm-stop"
    code, doc, err = megaprov("train", "--job", job_file(tmp_path, name), "-i", cluster["inventory"], "--detach", "--output", "json")
    assert code == 0, err
    slurm_id = doc["result"]["slurm_job_id"]
    wait_for(lambda: iterations(cluster, name) >= 8, 300, "8 iterations")
    code, doc, err = megaprov("job", "stop", name, "--output", "json")
    assert code == 0, err
    stopped_at = int((cluster["shared"] / "checkpoints" / name / "latest_checkpointed_iteration.txt").read_text())
    assert 8 <= stopped_at < 60
    assert squeue_state(cluster, slurm_id) == "", "the Slurm job is over"
    lines = events(cluster, name)
    assert any(f"slurm job {slurm_id} stopped (megaprov job stop)" in line for line in lines), lines
    assert not any("continues as" in line for line in lines), "a stopped job is not continued"
    code, doc, err = megaprov("train", "--resume", name, "--output", "json")
    assert code == 0, err[-3000:]
    report = json.loads((cluster["shared"] / "jobs" / name / "report.json").read_text())
    assert report["verdict"] == "passed" and report["iterations"]["last"] == 60
    assert [r["resumed_from"] for r in report["restarts"]] == [stopped_at]


def test_a_request_slurm_cannot_satisfy_is_refused_before_submitting(cluster, tmp_path):
    queued = slurm(cluster, "squeue", "-h", "-o", "%i").stdout.split()
    code, doc, err = megaprov(
        "train", "--job", job_file(tmp_path, "slurm-nope", **{"launch.slurm.partition": "nope"}), "-i", cluster["inventory"], "--output", "json"
    )
    assert code == 2, err
    message = doc["error"]["message"]
    assert message.startswith("job slurm-nope not submitted: Slurm refuses job slurm-nope: invalid partition specified: nope"), message
    assert "\n" not in doc["error"]["message"]
    assert slurm(cluster, "squeue", "-h", "-o", "%i").stdout.split() == queued, "nothing was submitted"
