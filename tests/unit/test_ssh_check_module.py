from tests.conftest import ROOT, load_module

check = load_module(ROOT / "roles/ssh_mesh/library/megaprov_ssh_check.py", "megaprov_ssh_check")


def test_ssh_is_never_interactive_and_always_strict():
    argv = check.ssh_argv("node2", 7)
    assert argv[:1] == ["ssh"] and argv[-2:] == ["node2", "hostname"]
    assert "BatchMode=yes" in argv and "StrictHostKeyChecking=yes" in argv and "ConnectTimeout=7" in argv
    assert not any("StrictHostKeyChecking=no" in a for a in argv)


def test_a_good_pair():
    row = check.classify("node1", "node2", "node2", 0, "node2\n", "", 0.12)
    assert row == {"source": "node1", "peer": "node2", "ok": True, "seconds": 0.12, "line": "node1 -> node2: ok (0.12s)"}


def test_a_refused_host_key_names_the_reason():
    row = check.classify("node1", "node3", "node3", 255, "", "Warning: x\nHost key verification failed.\n", 0.1)
    assert not row["ok"] and row["line"] == "node1 -> node3: Host key verification failed."


def test_the_wrong_machine_answering_fails():
    row = check.classify("node1", "node2", "node2", 0, "node7\n", "", 0.1)
    assert not row["ok"] and "answered as 'node7', expected 'node2'" in row["line"]
