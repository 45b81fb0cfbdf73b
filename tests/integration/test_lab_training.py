"""megaprov train on the lab: real systemd units on 2 container nodes, torchrun across them, the lab trainer on
megatron-core, checkpoints on the shared directory, a killed rank, a verdict that must fail, and bad input."""

import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, megaprov, podman_exec, train_and_kill_a_rank

from megaprov.training import jobs
from megaprov.training.launchers import systemd

pytestmark = pytest.mark.lab

UNIT = "megaprov-job-{}.service"


@pytest.fixture(scope="module")
def cluster(bootstrapped, tmp_path_factory):
    """The README run's lab (bootstrapped from a fresh clone, trained once), with this module's prepared data."""
    corpus = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    code, _, err = megaprov("data", "corpus", "--output-file", str(corpus), "--documents", "1500")
    assert code == 0, err
    inventory = bootstrapped["inventory"]
    code, doc, err = megaprov("data", "prepare", "--input", str(corpus), "--output-prefix", "data/lab", "-i", inventory, "--output", "json")
    assert code == 0, err
    shared = yaml.safe_load((Path(inventory).parent / "group_vars" / "all.yml").read_text())["megaprov_controller_shared_dir"]
    assert doc["result"]["prefixes"]["text"] == f"{shared}/data/lab_text_document"
    return {**bootstrapped, "shared": Path(shared)}


def job_file(tmp_path, name, **changes):
    spec = yaml.safe_load((ROOT / "examples" / "jobs" / "lab-tiny.yml").read_text())
    spec["name"] = name
    for path, value in changes.items():
        section, key = path.split(".")
        spec[section][key] = value
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def losses(cluster, name):
    lines = (cluster["shared"] / "jobs" / name / "metrics.jsonl").read_text().splitlines()
    return {r["iteration"]: r["loss"] for r in map(json.loads, lines)}


def unit_active(cluster, name):
    return [podman_exec(n["container"], "systemctl", "is-active", UNIT.format(name)).stdout.strip() for n in cluster["nodes"]]


def test_two_nodes_train_and_pass_the_verdict(cluster, tmp_path):
    code, doc, err = megaprov("train", "--job", job_file(tmp_path, "tiny-dp2"), "-i", cluster["inventory"], "--output", "json")
    assert code == 0, err[-3000:]
    result = doc["result"]
    assert result["verdict"] == "passed", result["checks"]
    checks = {c["name"]: c for c in result["checks"]}
    assert checks["GPU utilisation and memory"]["detail"] == "skipped: no GPU (CPU nodes)"
    job = cluster["shared"] / "jobs" / "tiny-dp2"
    report = json.loads((job / "report.json").read_text())
    assert report["iterations"] == {"logged": 60, "last": 60, "total": 60}
    assert report["loss"]["last"] < report["loss"]["first"] - 1.0
    assert report["job"]["hosts"] == ["node1", "node2"]  # data parallel across two nodes
    assert (job / "report.png").read_bytes()[:4] == b"\x89PNG" and "torch.distributed.run" in (job / "report.md").read_text()
    assert 'megaprov_job_iteration{job="tiny-dp2",node="node2"} 60' in (job / "metrics.prom").read_text()
    ckpt = cluster["shared"] / "checkpoints" / "tiny-dp2"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "60"
    assert sorted(p.name for p in ckpt.glob("iter_*")) == ["iter_0000020", "iter_0000040", "iter_0000060"]
    assert unit_active(cluster, "tiny-dp2")[:2] == ["inactive", "inactive"]
    # the ranks ran as the cluster user under systemd, not as root: they wrote the checkpoint
    owner = podman_exec(
        cluster["nodes"][0]["container"], "stat", "-c", "%U", "/shared/checkpoints/tiny-dp2/iter_0000020/mp_rank_00/model_optim_rng.pt"
    )
    assert owner.stdout.strip() == "megaprov", owner
    code, doc, err = megaprov("job", "status", "tiny-dp2", "--output", "json")
    assert code == 0, err
    assert doc["result"]["iteration"] == 60 and doc["result"]["verdict"] == "passed"
    assert {n["ActiveState"] for n in doc["result"]["nodes"].values()} == {"inactive"}
    code, doc, _ = megaprov("jobs", "--output", "json")
    assert "tiny-dp2" in {j["name"] for j in doc["result"]["jobs"]}
    # the same name again: refused before anything starts
    code, doc, err = megaprov("train", "--job", job_file(tmp_path, "tiny-dp2"), "-i", cluster["inventory"], "--output", "json")
    assert code == 2 and "job tiny-dp2 already exists" in err and "--resume tiny-dp2" in err


def test_tensor_parallel_gives_the_same_losses_as_data_parallel_alone(cluster, tmp_path):
    # TP=2 inside each node x DP=2 across the nodes against the TP=1 x DP=2 run above: the same model (TP=1 pads the
    # 257-token vocabulary to 384, divisible by 128; TP=2 with 64 x 2 pads to 384 too), seed, data and schedule.
    changes = {
        "parallel.tensor": 2,
        "launch.gpus_per_node": 2,
        "model.make_vocab_size_divisible_by": 64,
        "train.train_iters": 12,
        "train.lr_decay_iters": 60,
    }
    code, doc, err = megaprov("train", "--job", job_file(tmp_path, "tiny-tp2", **changes), "-i", cluster["inventory"], "--output", "json")
    assert code == 6, err[-3000:]  # 12 iterations are too few for the loss-trend window (and 4 ranks on 2 cores are slow)
    checks = {c["name"]: c["status"] for c in doc["result"]["checks"]}
    assert checks["loss falling"] == "fail" and checks["every rank alive"] == "pass" and checks["no nan"] == "pass"
    tp1, tp2 = losses(cluster, "tiny-dp2"), losses(cluster, "tiny-tp2")
    assert sorted(tp2) == list(range(1, 13))
    for it in tp2:
        assert tp2[it] == pytest.approx(tp1[it], rel=2e-4), (it, tp1[it], tp2[it])


def test_a_killed_rank_restarts_and_resumes_from_the_last_checkpoint(cluster, tmp_path):
    name = "tiny-kill"
    spec = job_file(tmp_path, name, **{"train.train_iters": 60, "checkpoint.save_interval": 10})
    node2 = cluster["nodes"][1]["container"]
    # the pattern matches the rank's and its torchrun agent's command lines
    code, err, _ = train_and_kill_a_rank(
        cluster["inventory"], spec, cluster["shared"] / "jobs" / name, node2, "megaprov.trainer", systemd.RESTART_SEC + 8
    )
    assert code == 0, err[-3000:]
    report = json.loads((cluster["shared"] / "jobs" / name / "report.json").read_text())
    assert report["verdict"] == "passed"
    assert len(report["restarts"]) == 1
    restart = report["restarts"][0]
    assert restart["resumed_from"] in (20, 30) and 0 <= restart["lost_iterations"] < 10
    assert restart["seconds_to_resumed_iteration"] is not None
    assert report["iterations"]["last"] == 60


def test_a_loss_that_cannot_fall_fails_the_verdict_with_the_reason(cluster, tmp_path):
    spec = job_file(tmp_path, "tiny-lr0", **{"train.lr": 0.0, "train.min_lr": 0.0, "train.train_iters": 30})
    code, doc, err = megaprov("train", "--job", spec, "-i", cluster["inventory"], "--output", "json")
    assert code == 6, err[-3000:]
    checks = {c["name"]: c for c in doc["result"]["checks"]}
    assert checks["loss falling"]["status"] == "fail" and "no falling trend" in checks["loss falling"]["detail"]
    assert checks["every rank alive"]["status"] == "pass"
    assert "failed its verdict: loss falling: no falling trend" in err


def test_checkpoints_of_another_model_are_refused_and_nothing_starts(cluster, tmp_path):
    spec = job_file(tmp_path, "tiny-wide", **{"model.hidden_size": 96, "checkpoint.directory": "checkpoints/tiny-dp2"})
    code, _, err = megaprov("train", "--job", spec, "-i", cluster["inventory"], "--output", "json")
    assert code == 2, err
    assert "holds checkpoints of another model" in err and "hidden_size=64" in err
    assert unit_active(cluster, "tiny-wide")[:2] == ["inactive", "inactive"]
    assert not (cluster["shared"] / "jobs" / "tiny-wide").exists()


def test_an_unreachable_node_at_launch_starts_nothing(cluster, tmp_path):
    node1 = cluster["nodes"][0]
    (tmp_path / "group_vars").mkdir()
    source = Path(cluster["inventory"]).parent / "group_vars" / "all.yml"
    (tmp_path / "group_vars" / "all.yml").write_text(source.read_text())
    (tmp_path / "inventory.ini").write_text(
        textwrap.dedent(f"""
        [head]
        node1 ansible_host={node1["address"]}
        [gpu_nodes]
        node1 ansible_host={node1["address"]}
        ghost ansible_host={node1["address"]} ansible_port=2299
    """)
    )
    code, _, err = megaprov("train", "--job", job_file(tmp_path, "tiny-ghost"), "-i", str(tmp_path / "inventory.ini"), "--output", "json")
    assert code == 4, err
    assert "ghost" in err and "unreachable" in err and "nothing was started" in err
    assert podman_exec(node1["container"], "test", "-e", "/etc/systemd/system/" + UNIT.format("tiny-ghost")).returncode != 0
    assert not (cluster["shared"] / "jobs" / "tiny-ghost").exists()


def test_an_inventory_without_enough_nodes_is_refused(cluster, tmp_path):
    spec = job_file(tmp_path, "tiny-big", **{"launch.nodes": 4, "train.global_batch_size": 16})
    code, _, err = megaprov("train", "--job", spec, "-i", cluster["inventory"], "--output", "json")
    assert code == 2 and "the job needs 4 nodes but the inventory has 3 in [gpu_nodes]" in err


def test_stop_saves_a_checkpoint_and_resume_continues_to_the_verdict(cluster, tmp_path):
    name = "tiny-resume"
    code, doc, err = megaprov("train", "--job", job_file(tmp_path, name), "-i", cluster["inventory"], "--detach", "--output", "json")
    assert code == 0 and doc["result"]["state"] == "running", err
    log = cluster["shared"] / "jobs" / name / "logs" / "node2.log"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (not log.is_file() or log.read_text().count("| lm loss:") < 8):
        time.sleep(0.2)
    assert unit_active(cluster, name)[:2] == ["active", "active"]
    code, doc, err = megaprov("job", "stop", name, "--output", "json")
    assert code == 0, err
    assert unit_active(cluster, name)[:2] == ["inactive", "inactive"]
    # SIGTERM reached the ranks: they saved the iteration they were at (not a multiple of save_interval 20)
    marker = cluster["shared"] / "checkpoints" / name / "latest_checkpointed_iteration.txt"
    stopped_at = int(marker.read_text())
    assert 8 <= stopped_at < 60
    code, doc, err = megaprov("train", "--resume", name, "--output", "json")
    assert code == 0, err[-3000:]
    report = json.loads((cluster["shared"] / "jobs" / name / "report.json").read_text())
    assert report["verdict"] == "passed" and report["iterations"]["last"] == 60
    assert report["job"]["resumes"] == 1
    assert [r["resumed_from"] for r in report["restarts"]] == [stopped_at]


def test_a_detached_job_gets_its_verdict_when_its_state_is_read(cluster, tmp_path):
    name = "tiny-detached"
    spec = job_file(tmp_path, name, **{"train.train_iters": 30})
    code, doc, err = megaprov("train", "--job", spec, "-i", cluster["inventory"], "--detach", "--output", "json")
    assert code == 0 and doc["result"]["state"] == "running", err
    logs = [cluster["shared"] / "jobs" / name / "logs" / f"{n}.log" for n in ("node1", "node2")]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not all(p.is_file() and "torchrun exited with 0" in p.read_text() for p in logs):
        time.sleep(0.5)
    assert not (cluster["shared"] / "jobs" / name / "report.json").exists(), "nobody followed the job, yet it has a report"
    code, doc, err = megaprov("jobs", "--output", "json")
    assert code == 0, err
    row = next(j for j in doc["result"]["jobs"] if j["name"] == name)
    assert row["state"] == "finished" and row["verdict"] == "passed", row
    code, doc, err = megaprov("job", "status", name, "--output", "json")
    assert code == 0 and doc["result"]["verdict"] == "passed" and doc["result"]["state"] == "finished", err


def test_resuming_a_running_job_says_it_runs_and_how_to_follow_it(cluster, tmp_path):
    name = "tiny-running"
    code, doc, err = megaprov("train", "--job", job_file(tmp_path, name), "-i", cluster["inventory"], "--detach", "--output", "json")
    assert code == 0, err
    try:
        code, _, err = megaprov("train", "--resume", name, "--output", "json")
        assert code == 2, err
        assert re.search(rf"job {name} is running on node[12] \(megaprov-job-{name}\.service is active\)", err), err
        assert f"megaprov job status {name}" in err and f"megaprov job logs {name}" in err, err
        assert "port" not in err.split(":", 1)[0] and "another job" not in err
    finally:
        megaprov("job", "stop", name, "--output", "json")


def laptop_inventory(cluster, tmp_path):
    """The lab's inventory as an operator's laptop has it: the same nodes and settings, but this machine does not
    mount the shared directory (no megaprov_controller_shared_dir, and /shared does not exist here)."""
    assert not Path("/shared").exists(), "this machine has a /shared: it would be read as the mount"
    source = Path(cluster["inventory"])
    laptop = tmp_path / "laptop"
    (laptop / "group_vars").mkdir(parents=True)
    (laptop / "inventory.ini").write_text(source.read_text())
    kept = [line for line in (source.parent / "group_vars" / "all.yml").read_text().splitlines() if "megaprov_controller_shared_dir" not in line]
    (laptop / "group_vars" / "all.yml").write_text("\n".join(kept) + "\n")
    return str(laptop / "inventory.ini")


def test_a_controller_without_the_shared_mount_trains_through_the_head(cluster, tmp_path):
    """From a laptop: the job starts, is re-attached after --detach and followed to its verdict, its log is followed
    with -f, and `jobs` lists it, all through the head; what the controller writes (job.json, the report) is on the
    shared directory as if it had been written there."""
    inventory = laptop_inventory(cluster, tmp_path)
    name = "tiny-laptop"
    spec = job_file(tmp_path, name, **{"train.train_iters": 30})
    code, doc, err = megaprov("train", "-f", spec, "-i", inventory, "--detach", "-o", "json")
    assert code == 0 and doc["result"]["state"] == "running", err[-3000:]
    record = json.loads((jobs._index() / f"{name}.json").read_text())
    assert "/remote/" in record["local_dir"], record  # the mirror kept through the head, not a mount
    code, doc, err = megaprov("job", "attach", name, "-o", "json")
    assert code == 0, err[-3000:]
    assert doc["command"] == "job attach" and doc["result"]["verdict"] == "passed", doc["result"]
    shared = cluster["shared"] / "jobs" / name  # what the nodes' shared directory holds, seen through the lab's volume
    assert json.loads((shared / "report.json").read_text())["verdict"] == "passed"
    assert json.loads((shared / "job.json").read_text())["state"] == "finished"
    proc = subprocess.run(
        [sys.executable, "-m", "megaprov", "job", "logs", name, "--node", "node2", "-f", "--lines", "20"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the job is over: the last lines, and -f returns instead of waiting for more
    assert "torchrun exited with 0" in proc.stdout and len(proc.stdout.splitlines()) <= 20, proc.stdout
    code, doc, err = megaprov("jobs", "-i", inventory, "-o", "json")
    row = next(j for j in doc["result"]["jobs"] if j["name"] == name)
    assert code == 0 and row["verdict"] == "passed" and "/remote/" in row["job_dir"], row
