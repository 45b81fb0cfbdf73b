"""A lab node stopped and started again, as a real node is powered off and on: it keeps its address and its host
key, the inventory stays right, and while it is down the SSH mesh leaves it out and says so."""

import re
import time
from pathlib import Path

import pytest
from conftest import LAB, megaprov, podman_exec

pytestmark = pytest.mark.lab

NODE = "node3"


def inventory_address(inventory: Path, name: str) -> str:
    match = re.search(rf"^{name} .*ansible_host=(\S+)", inventory.read_text(), re.MULTILINE)
    assert match, f"{name} has no ansible_host in {inventory}"
    return match.group(1)


def status() -> dict:
    code, doc, err = megaprov("lab", "status", "--output", "json")
    assert code == 0, err
    return {n["name"]: n for n in doc["result"][LAB]}


def stop(name: str) -> float:
    began = time.monotonic()
    code, doc, err = megaprov("lab", "stop", name, "--name", LAB, "--output", "json")
    assert code == 0, err
    assert doc["result"]["node"]["name"] == name and doc["result"]["node"]["state"] != "running"
    return time.monotonic() - began


def start(name: str) -> dict:
    code, doc, err = megaprov("lab", "start", name, "--name", LAB, "--output", "json")
    assert code == 0, err
    return doc["result"]["node"]


def test_a_restarted_node_keeps_its_address_and_host_key(lab3):
    inventory = Path(lab3["inventory"])
    before = inventory_address(inventory, NODE)
    container = f"megaprov-{LAB}-{NODE}"
    key = podman_exec(container, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[:2]
    try:
        stop_seconds = stop(NODE)
        nodes = status()
        assert nodes[NODE]["state"] in ("exited", "stopped"), nodes[NODE]
        assert nodes[NODE]["address"] == before, "a stopped node shows its fixed address"
        assert [nodes[n]["state"] for n in ("node1", "node2")] == ["running", "running"]
    finally:
        began = time.monotonic()
        node = start(NODE)
        start_seconds = time.monotonic() - began
    print(f"lab stop {stop_seconds:.1f}s, lab start {start_seconds:.1f}s")
    assert node["state"] == "running"
    assert node["address"] == before == inventory_address(inventory, NODE)
    assert status()[NODE]["address"] == before
    assert podman_exec(container, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[:2] == key
    # Real SSH with the pinned host keys, to every node.
    code, doc, err = megaprov("preflight", "-i", str(inventory), "--output", "json")
    assert code == 0, err
    assert sorted(doc["result"]["nodes"]) == ["node1", "node2", "node3"]
    assert not doc["result"]["failures"]


def test_the_ssh_mesh_leaves_an_unreachable_node_out_and_says_so(lab3):
    inventory = Path(lab3["inventory"])
    stop(NODE)
    try:
        code, doc, err = megaprov("bootstrap", "-i", str(inventory), "--tags", "base,ssh_mesh", "--output", "json")
        assert code == 4, err
        assert "node3" in doc["error"]["message"] and "unreachable" in doc["error"]["message"]
        report = doc["result"]
        assert {f["host"] for f in report["failures"]} == {NODE} and all(f["unreachable"] for f in report["failures"])
        # Only the pairs among the reachable nodes were tried, and all of them connect.
        assert [(p["source"], p["peer"]) for p in report["mesh"]] == [("node1", "node2"), ("node2", "node1")]
        assert all(p["ok"] for p in report["mesh"]), report["mesh"]
        assert report["mesh_left_out"] == [NODE]
        # The role's own message says so too.
        stdout = (Path(report["artifacts"]) / "stdout").read_text()
        assert "all 2 SSH pairs connect as megaprov without a prompt; left out as unreachable: node3" in stdout
        assert "-> node3" not in stdout
    finally:
        node = start(NODE)
    assert node["address"] == inventory_address(inventory, NODE)
