"""The throughput verdict against measured compute on the lab: a busy machine passes, a throttled node fails by name.

Runs on the README run's lab (bootstrapped), or on an already bootstrapped lab named by MEGAPROV_TEST_INVENTORY
(``megaprov lab inventory --name NAME`` prints its path), which saves its ten-minute bootstrap.
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import CONTAINERS_CONF, ROOT, megaprov, podman_exec

pytestmark = pytest.mark.lab


def podman(*argv):
    return subprocess.run(["podman", *argv], capture_output=True, text=True, env={**os.environ, "CONTAINERS_CONF": CONTAINERS_CONF}, check=False)


@pytest.fixture(scope="module")
def lab(request):
    """A lab as ``lab up`` describes it ({"inventory", "nodes": [{"name", "container"}, ...]})."""
    inventory = os.environ.get("MEGAPROV_TEST_INVENTORY")
    if not inventory:  # the README run's lab: bootstrapped from a fresh clone
        return request.getfixturevalue("bootstrapped")
    code, doc, err = megaprov("lab", "status", "--output", "json")
    assert code == 0, err
    name = Path(inventory).resolve().parent.name
    assert name in doc["result"], f"MEGAPROV_TEST_INVENTORY={inventory}: no lab {name} in `megaprov lab status`"
    return {"inventory": str(Path(inventory).resolve()), "nodes": doc["result"][name]}


@pytest.fixture(scope="module")
def cluster(lab, tmp_path_factory):
    """The lab bootstrapped, with each node's compute rate measured and the lab's data prepared."""
    from megaprov.cluster import rates

    nodes, inventory = lab["nodes"], lab["inventory"]
    if any(podman_exec(n["container"], "test", "-x", "/opt/megaprov/venv/bin/python").returncode for n in nodes):
        code, _, err = megaprov("bootstrap", "-i", inventory, "--output", "json")
        assert code == 0, err
    hosts = [n["name"] for n in nodes]
    if len(rates.known(Path(inventory), hosts)) < len(hosts):  # a lab bootstrapped before the python stage measured
        megaprov("preflight", "-i", inventory, "--output", "json")
    measured = {r.host: r.tflops_per_device for r in rates.known(Path(inventory), hosts)}
    assert set(measured) == set(hosts), measured
    corpus = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    code, _, err = megaprov("data", "corpus", "--output-file", str(corpus), "--documents", "1500")
    assert code == 0, err
    code, _, err = megaprov("data", "prepare", "--input", str(corpus), "--output-prefix", "data/lab", "-i", inventory, "--output", "json")
    assert code == 0, err
    shared = yaml.safe_load((Path(inventory).parent / "group_vars" / "all.yml").read_text())["megaprov_controller_shared_dir"]
    return {**lab, "shared": Path(shared), "rates": measured}


def unique(name):
    """Job names stay taken on a lab that outlives the test session (MEGAPROV_TEST_INVENTORY)."""
    return f"{name}-{int(time.time()) % 1_000_000}"


def job_file(tmp_path, name, **train):
    spec = yaml.safe_load((ROOT / "examples" / "jobs" / "lab-tiny.yml").read_text())
    spec["name"] = name
    spec["train"].update(train)
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def throughput(doc):
    return next(c for c in doc["result"]["checks"] if c["name"] == "throughput")


def report_numbers(cluster, name):
    report = json.loads((cluster["shared"] / "jobs" / name / "report.json").read_text())
    return report["throughput"]["tokens_per_second_median"]


def test_the_plan_estimates_from_the_measured_rate_of_the_slowest_node(cluster, tmp_path):
    code, doc, err = megaprov("plan", "--job", job_file(tmp_path, "tp-plan"), "-i", cluster["inventory"], "--output", "json")
    assert code == 0, err
    estimate = doc["result"]["estimate"]
    # The job runs on the inventory's first launch.nodes hosts: a faster or slower node outside it plays no part.
    spec = yaml.safe_load((ROOT / "examples" / "jobs" / "lab-tiny.yml").read_text())
    used = [n["name"] for n in cluster["nodes"][: spec["launch"]["nodes"]]]
    slowest = min(used, key=cluster["rates"].get)
    assert estimate["peak_source"] == "measured" and estimate["peak_tflops_per_rank"] == cluster["rates"][slowest]
    assert f"measured rate of {slowest}" in estimate["peak"]


def test_a_busy_machine_passes_the_throughput_check(cluster, tmp_path):
    """One core of the machine kept busy for the whole run: slower, but what the measured nodes can do."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        code, doc, err = megaprov("train", "--job", job_file(tmp_path, unique("tp-busy")), "-i", cluster["inventory"], "--output", "json")
    finally:
        busy.kill()
        busy.wait()
    assert doc is not None, err[-3000:]
    check = throughput(doc)
    print(f"busy: {check['detail']}")
    assert code == 0 and doc["result"]["verdict"] == "passed", doc["result"]["checks"]
    assert "measured rate of" in check["detail"] and "compute per iteration: node1" in check["detail"]


def test_a_throttled_node_fails_the_throughput_check_by_name(cluster, tmp_path):
    """The job's last node held to 10 % of a CPU (its container's CFS quota): the run is far slower than the nodes were
    measured at, and the verdict names that node from its ranks' compute times and start-up GEMM rate."""
    spec = yaml.safe_load((ROOT / "examples" / "jobs" / "lab-tiny.yml").read_text())
    slow = cluster["nodes"][spec["launch"]["nodes"] - 1]  # the job's last node (a session lab may have more)
    throttled = podman("update", "--cpus", "0.1", slow["container"])
    assert throttled.returncode == 0, throttled.stderr
    try:
        name = unique("tp-throttled")
        code, doc, err = megaprov("train", "--job", job_file(tmp_path, name, train_iters=20), "-i", cluster["inventory"], "--output", "json")
    finally:
        podman("update", "--cpus", str(os.cpu_count() or 1), slow["container"])
    assert doc is not None, err[-3000:]
    check = throughput(doc)
    print(f"throttled: {check['detail']}")
    assert code == 6 and doc["result"]["verdict"] == "failed", doc["result"]["checks"]
    # below the floor "too slow"; above it, failed because the others waited for the throttled node: "held back"
    figures = re.match(r"^(too slow|held back by a slow node): median ([0-9,]+) tokens/s, expected .*? x [0-9.]+ = ([0-9,]+)", check["detail"])
    assert check["status"] == "fail" and figures, check["detail"]
    measured, floor = (int(figures.group(i).replace(",", "")) for i in (2, 3))
    if measured < floor:
        assert figures.group(1) == "too slow", check["detail"]
    else:
        assert figures.group(1) == "held back by a slow node" and f"ran at the pace of {slow['name']}" in check["detail"], check["detail"]
    assert f"{slow['name']} is " in check["detail"] or f"{slow['name']} computed " in check["detail"], check["detail"]
    others = [c for c in doc["result"]["checks"] if c["name"] in ("no nan", "every rank alive")]
    assert all(c["status"] == "pass" for c in others), others
    assert report_numbers(cluster, name) > 0
