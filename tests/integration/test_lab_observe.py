"""The observe stage on the README run's lab: the training series in Prometheus with their job label, and the alerts
that fire when a job stalls (its ranks stopped, as a NCCL hang leaves them) and when a node's exporter stops, with
the latency from the fault to the lab's alert recorder."""

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, megaprov, podman_exec

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab(bootstrapped):
    inventory = Path(bootstrapped["inventory"])
    shared = yaml.safe_load((inventory.parent / "group_vars" / "all.yml").read_text())["megaprov_controller_shared_dir"]
    head = bootstrapped["nodes"][0]
    return {**bootstrapped, "shared": Path(shared), "prometheus": f"http://{head['address']}:9090", "head": head["container"]}


def query(lab, expr):
    url = f"{lab['prometheus']}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as response:
        doc = json.loads(response.read())
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def recorded(lab, alertname):
    out = podman_exec(lab["head"], "cat", "/var/lib/megaprov-alerts/alerts.jsonl").stdout
    return [a for a in map(json.loads, out.splitlines()) if a["labels"].get("alertname") == alertname and a["status"] == "firing"]


def test_the_readme_run_s_training_series_are_in_prometheus_with_the_job_label(lab):
    jobs = {p.parent.name for p in (lab["shared"] / "jobs").glob("*/metrics.prom")}
    assert jobs, "the README run left no job metrics"
    found = query(lab, "megaprov_job_iteration")
    labelled = {r["metric"]["job"]: r for r in found}
    assert set(labelled) >= jobs, (sorted(labelled), sorted(jobs))
    names = {n["name"] for n in lab["nodes"]}
    for job in jobs:
        series = labelled[job]
        assert series["metric"]["node"] in names
        written = (lab["shared"] / "jobs" / job / "metrics.prom").read_text()
        assert f'megaprov_job_iteration{{job="{job}",node="{series["metric"]["node"]}"}} {series["value"][1]}' in written
    first = sorted(jobs)[0]
    assert query(lab, f'megaprov_job_metrics_age_seconds{{job="{first}"}}')


def test_a_stalled_job_and_a_stopped_exporter_fire_their_alerts(lab, tmp_path, capsys):
    spec = yaml.safe_load((ROOT / "examples" / "jobs" / "lab-tiny.yml").read_text())
    spec["name"], spec["train"]["train_iters"] = "tiny-stall", 2000
    path = tmp_path / "tiny-stall.yml"
    path.write_text(yaml.safe_dump(spec))
    metrics = lab["shared"] / "jobs" / "tiny-stall" / "metrics.prom"
    proc = subprocess.Popen(
        [sys.executable, "-m", "megaprov", "train", "--job", str(path), "-i", lab["inventory"], "--output", "json"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    victim = lab["nodes"][-1]
    nodes = [n["container"] for n in lab["nodes"]]
    try:
        deadline = time.monotonic() + 300
        while not (metrics.is_file() and "megaprov_job_last_progress_timestamp_seconds" in metrics.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.5)
        # every rank stopped where it is, as ranks hung in a collective are: no iteration, no exit
        for container in nodes:
            podman_exec(container, "pkill", "-STOP", "-f", "megaprov.trainer")
        podman_exec(victim["container"], "systemctl", "stop", "prometheus-node-exporter")
        faulted = time.monotonic()
        fired: dict[str, float] = {}
        while time.monotonic() - faulted < 300 and len(fired) < 2:
            for alertname in ("TrainingStalled", "NodeDown"):
                if alertname not in fired and recorded(lab, alertname):
                    fired[alertname] = time.monotonic() - faulted
            time.sleep(2)
        with capsys.disabled():  # the measured latencies belong in the suite's log, pass or fail
            print(f"\nalert latency from the fault to the lab's receiver: {fired}")
        assert "NodeDown" in fired and "TrainingStalled" in fired, f"fired within 300 s: {fired}"
        stalled = recorded(lab, "TrainingStalled")[-1]
        assert stalled["labels"]["job"] == "tiny-stall" and stalled["labels"]["severity"] == "critical"
        down = recorded(lab, "NodeDown")[-1]
        assert down["labels"]["node"] == victim["name"]
        # the stall threshold (10 x the median step, at least 60 s), the rule's for, a scrape, an evaluation, group_wait
        assert fired["TrainingStalled"] < 60 + 15 + 30 + 15 + 10 + 30
        assert fired["NodeDown"] < 60 + 15 + 15 + 10 + 30
    finally:
        for container in nodes:
            podman_exec(container, "pkill", "-CONT", "-f", "megaprov.trainer")
        podman_exec(victim["container"], "systemctl", "start", "prometheus-node-exporter")
        code, _, err = megaprov("job", "stop", "tiny-stall", "-i", lab["inventory"], "--output", "json")
        proc.kill()
        proc.communicate()
    assert code == 0, err


def test_top_tunnels_through_the_head_where_prometheus_is_out_of_reach(lab):
    """An operator's laptop is not on the cluster network: top opens its own SSH tunnel to the head (with the
    inventory's connection settings) and closes it. Here this machine's firewall rejects its own connections to the
    head's Prometheus port (SSH still passes), as a laptop outside the cluster network would find it; the head
    reaches its Prometheus as before. The rule is this test's alone and is removed after it."""
    head, address = lab["nodes"][0]["name"], lab["nodes"][0]["address"]
    rule = ["OUTPUT", "-p", "tcp", "-d", address, "--dport", "9090", "-j", "REJECT", "--reject-with", "tcp-reset"]
    subprocess.run(["iptables", "-w", "-I", *rule], check=True, capture_output=True)
    try:
        from megaprov.ops import top

        assert not top.answers(address, 9090), "the firewall rule did not take: Prometheus would be reached directly"
        proc = subprocess.run(
            [sys.executable, "-m", "megaprov", "top", "-i", lab["inventory"], "--once"],
            capture_output=True, text=True, cwd=ROOT, timeout=120,
        )  # fmt: skip
    finally:
        subprocess.run(["iptables", "-w", "-D", *rule], check=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"through an SSH tunnel to {head}" in proc.stderr, proc.stderr
    for node in lab["nodes"]:
        assert node["name"] in proc.stdout, proc.stdout
    time.sleep(1)
    tunnels = subprocess.run(["pgrep", "-f", f"ExitOnForwardFailure=yes -L 127.0.0.1:[0-9]*:{address}:9090"], capture_output=True, text=True)
    assert tunnels.stdout.strip() == "", "top left its tunnel open"
