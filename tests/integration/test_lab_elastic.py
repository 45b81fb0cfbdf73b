"""launch.elastic on the lab, under both launchers at once: two 3-node jobs (systemd units and Slurm) lose node3
(`podman stop`) mid-run, continue on node1 and node2 from their latest checkpoint with the same global batch, and after
`podman start` a `megaprov job grow` brings each back to 3 nodes; both pass, with the loss continuous across every
change and every sample consumed once."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, megaprov, podman_exec

pytestmark = pytest.mark.lab

NODE = "node3"


@pytest.fixture(scope="module")
def cluster(bootstrapped, tmp_path_factory):
    """The README run's lab (Slurm up, data/lab prepared by run-lab.sh)."""
    inventory = bootstrapped["inventory"]
    shared = yaml.safe_load((Path(inventory).parent / "group_vars" / "all.yml").read_text())["megaprov_controller_shared_dir"]
    return {**bootstrapped, "shared": Path(shared), "head": bootstrapped["nodes"][0]["container"], "lab": Path(inventory).parent.name}


def job_file(tmp_path, name, launcher, port):
    spec = yaml.safe_load((ROOT / "examples" / "jobs" / "lab-elastic.yml").read_text())
    spec["name"] = name
    # A model ~25x lab-tiny's work (0.36 s an iteration on 3 lab nodes, measured): the minute or so of losing node3
    # and growing back lands mid-run whatever the machine's pace, and the run is over a few minutes after.
    spec["model"].update({"num_layers": 6, "hidden_size": 192, "num_attention_heads": 6})
    spec["train"]["train_iters"] = 300
    spec["checkpoint"]["save_interval"] = 20
    spec["launch"].update({"launcher": launcher, "master_port": port})  # both jobs share node1: their own rendezvous ports
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(0.5)
    pytest.fail(f"{what} did not happen within {seconds} s")


def logged(cluster, name):
    path = cluster["shared"] / "jobs" / name / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.is_file() else 0


def events(cluster, name, launcher):
    path = cluster["shared"] / "jobs" / name / "logs" / ("slurm.log" if launcher == "slurm" else "elastic.log")
    return path.read_text().splitlines() if path.is_file() else []


def iterations_on(cluster, name, host, nodes):
    """Iteration lines host logged while its torchrun ran on ``nodes`` nodes."""
    path = cluster["shared"] / "jobs" / name / "logs" / f"{host}.log"
    count, current = 0, None
    for line in path.read_text().splitlines() if path.is_file() else []:
        if "torchrun starting at" in line:
            current = line.rsplit(" on ", 1)[1].split()[0] if " on " in line else None
        elif "| lm loss:" in line and current == str(nodes):
            count += 1
    return count


def slurm_idle(cluster, nodes=("node1", "node2", "node3")):
    """Every one of ``nodes`` idle in Slurm (none allocated, down or drained)."""
    out = podman_exec(cluster["head"], "sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%n %t").stdout.splitlines()
    states = dict(line.split()[:2] for line in out if len(line.split()) >= 2)
    return all(states.get(n) == "idle" for n in nodes)


def test_both_launchers_lose_a_node_continue_on_two_and_grow_back(cluster, tmp_path):
    wait_for(lambda: slurm_idle(cluster), 300, "every Slurm node idle")  # the Slurm job starts on all three
    stamp = time.strftime("%H%M%S")  # a finished job keeps its directory: a new name per run
    units, batch = f"el-units-{stamp}", f"el-slurm-{stamp}"
    jobs = {units: ("torchrun", 29530), batch: ("slurm", 29540)}
    procs = {}
    for name, (launcher, port) in jobs.items():
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "megaprov", "train", "--job", job_file(tmp_path, name, launcher, port), "-i", cluster["inventory"], "-o", "json"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    container = f"megaprov-{cluster['lab']}-{NODE}"
    try:
        wait_for(lambda: all(logged(cluster, n) >= 30 or procs[n].poll() is not None for n in jobs), 600, "iteration 30 of both jobs")
        assert all(p.poll() is None for p in procs.values()), {n: p.communicate() for n, p in procs.items() if p.poll() is not None}
        assert iterations_on(cluster, units, NODE, 3) >= 25 and iterations_on(cluster, batch, NODE, 3) >= 25
        subprocess.run(["podman", "stop", container], check=True, capture_output=True)
        lost_at = time.monotonic()
        # each continues on node1 and node2: the last rank is node2's now
        shrunk = {n: wait_for(lambda n=n: iterations_on(cluster, n, "node2", 2) >= 5, 600, f"{n} training on 2 nodes") - lost_at for n in jobs}
        print("from the loss to 5 iterations on 2 nodes: " + ", ".join(f"{n} {s:.0f} s" for n, s in shrunk.items()))
        assert any("lost node3 (unreachable): continues on 2 node(s) (node1, node2)" in e for e in events(cluster, units, "torchrun"))
        assert any("(training on 2 of its 2 nodes)" in e for e in events(cluster, batch, "slurm"))
        subprocess.run(["podman", "start", container], check=True, capture_output=True)
        wait_for(lambda: podman_exec(container, "systemctl", "is-active", "ssh").stdout.strip() == "active", 180, "node3's SSH")
        wait_for(lambda: slurm_idle(cluster, (NODE,)), 180, "node3 back in Slurm")
        before = {n: iterations_on(cluster, n, NODE, 3) for n in jobs}  # node3's lines of the first segment
        for name in jobs:
            code, doc, err = megaprov("job", "grow", name, "--output", "json")
            assert code == 0, err
        for name in jobs:
            wait_for(lambda n=name: iterations_on(cluster, n, NODE, 3) >= before[n] + 5 or procs[n].poll() is not None, 600, f"{name} back on 3")
        outs = {n: p.communicate(timeout=900) for n, p in procs.items()}
    finally:
        subprocess.run(["podman", "start", container], capture_output=True)
        for p in procs.values():
            p.kill()
    for name, (launcher, _) in jobs.items():
        assert procs[name].returncode == 0, outs[name][1][-3000:]
        report = json.loads((cluster["shared"] / "jobs" / name / "report.json").read_text())
        assert report["verdict"] == "passed", report["checks"]
        checks = {c["name"]: c for c in report["checks"]}
        assert checks["elastic continuity"]["status"] == "pass" and checks["sample order"]["status"] == "pass"
        assert checks["segment throughput"]["status"] == "pass"
        segments = report["segments"]
        assert [g["nodes"] for g in segments] == [3, 2, 3], segments
        assert segments[0]["first"] == 1 and segments[-1]["last"] == 300
        assert all(segments[i]["last"] + 1 == segments[i + 1]["first"] for i in range(2))
        changes = report["changes"]
        assert [(c["nodes_before"], c["nodes_after"]) for c in changes] == [(3, 2), (2, 3)]
        assert changes[0]["lost_iterations"] < 20  # fewer than a save interval
        assert changes[1]["lost_iterations"] == 0  # a grow saves first
        # the global batch was kept: every iteration consumed 12 more samples (3 nodes x 2 x 2, then 2 nodes x 2 x 3)
        rows = [json.loads(line) for line in (cluster["shared"] / "jobs" / name / "metrics.jsonl").read_text().splitlines()]
        assert all(r["consumed_samples"] == 12 * r["iteration"] for r in rows)  # re-run iterations included
        assert sorted({r["iteration"] for r in rows}) == list(range(1, 301))
        for c in changes:
            print(
                f"{name} ({launcher}): {c['nodes_before']}->{c['nodes_after']} nodes at iteration {c['first_iteration']}, resumed from"
                f" {c['resumed_from']} ({c['lost_iterations']} lost), loss {c['loss_before']:.4f} before, {c['loss_after']:.4f} after"
                f" (same iteration before: {c['loss_before_same_iteration']})"
            )
        for g in segments:
            print(f"{name}: {g['nodes']} nodes, iterations {g['first']}-{g['last']}, {g['tokens_per_second']:.0f} tokens/s of {g['expected']:.0f}")
    assert any("grows from 2 to 3 nodes" in e for e in events(cluster, units, "torchrun"))
    assert any("grows (saved; asks for 2-3 nodes)" in e for e in events(cluster, batch, "slurm"))
    job = json.loads((cluster["shared"] / "jobs" / units / "job.json").read_text())
    assert [len(s["hosts"]) for s in job["segments"]] == [3, 2, 3] and job["job_hosts"] == ["node1", "node2", "node3"]
