"""`megaprov status`: the record each bootstrap leaves (per node, per stage) and sinfo's answer, read offline."""

from types import SimpleNamespace

from megaprov.cluster import history
from megaprov.cluster.runner import Failure, HostStats
from megaprov.ops import status


def report(stages, failures=(), ok=True):
    hosts = [HostStats("localhost"), HostStats("n1"), HostStats("n2")]
    ran = [{"stage": s, "seconds": 1.0} for s in stages]
    return SimpleNamespace(hosts=hosts, stages=ran, failures=list(failures), ok=ok, exit_code=0, error=None)


def test_each_bootstrap_adds_the_stages_it_ran(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("")
    stage_of = {"Base": "base", "Mesh": "ssh_mesh", "Validate": "validate"}
    history.record_bootstrap(inventory, report(["validate", "base", "ssh_mesh"]), stage_of, check=False)
    failed = Failure("n2", "Check every pair", "Mesh", "2 of 2 pairs failed", False)
    history.record_bootstrap(inventory, report(["validate", "ssh_mesh"], [failed], ok=False), stage_of, check=False)
    history.record_bootstrap(inventory, report(["base"], [Failure("n1", "x", "Base", "down", True)]), stage_of, check=True)  # a dry run
    data = history.read_status(history.status_file(inventory))
    assert data["stages"]["base"]["hosts"] == {"n1": "ok", "n2": "ok"}  # the dry run changed nothing
    assert data["stages"]["ssh_mesh"]["hosts"] == {"n1": "ok", "n2": "failed"} and "validate" not in data["stages"]
    assert data["last"]["ok"] is False


def test_sinfo_lines_are_node_states():
    text = "node1|idle|none\nnode2|drained|Xid 79\nnode2|drained|Xid 79\nnode3|down*|Not responding\n"
    assert status.parse_sinfo(text) == {
        "node1": {"state": "idle", "reason": "none"},
        "node2": {"state": "drained", "reason": "Xid 79"},
        "node3": {"state": "down*", "reason": "Not responding"},
    }
    # what a node reports reaches the terminal as text, never as an escape sequence
    assert not any("\x1b" in key for key in status.parse_sinfo("n\x1b]0;x\x07|idle|none\n"))
