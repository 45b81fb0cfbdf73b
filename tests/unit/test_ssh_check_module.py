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


def test_hosts_left_out_as_unreachable_are_never_tried():
    peers = {"node2": "node2", "node3": "node3", "node4": "n4"}
    assert check.to_probe(peers, ["node3"]) == [("node2", "node2"), ("node4", "n4")]
    assert check.to_probe(peers, []) == [("node2", "node2"), ("node3", "node3"), ("node4", "n4")]


def test_the_module_documents_and_accepts_left_out():
    import yaml

    options = yaml.safe_load(check.DOCUMENTATION)["options"]
    assert options["left_out"]["type"] == "list" and options["left_out"]["default"] == []
    assert "left_out" in yaml.safe_load(check.RETURN)


def test_the_mesh_is_the_reachable_hosts_and_the_rest_is_left_out():
    """roles/ssh_mesh/vars/main.yml evaluated as Ansible does: a host removed from the play is left out."""
    import jinja2
    import yaml

    role_vars = yaml.safe_load((ROOT / "roles/ssh_mesh/vars/main.yml").read_text())
    env = jinja2.Environment()
    context = {"ssh_mesh_hosts": ["node1", "node2", "node3"], "ansible_play_hosts": ["node1", "node2"]}
    members = env.from_string(role_vars["__ssh_mesh_members"]).render(context)
    left_out = env.from_string(role_vars["__ssh_mesh_left_out"]).render(context)
    assert (members, left_out) == ("['node1', 'node2']", "['node3']")
    context["ansible_play_hosts"] = ["node1", "node2", "node3"]
    assert env.from_string(role_vars["__ssh_mesh_left_out"]).render(context) == "[]"


def test_the_report_names_the_pairs_tried_and_the_hosts_left_out():
    from megaprov.provision import mesh_lines

    mesh = [check.classify(a, b, b, 0, b, "", 0.2) for a, b in (("node1", "node2"), ("node2", "node1"))]
    assert mesh_lines(mesh, ["node3"]) == [
        "ssh mesh: 2/2 pairs among node1, node2 connect without a prompt (slowest 0.20s)",
        "ssh mesh: left out as unreachable (no pair with them was tried): node3",
    ]
    assert mesh_lines(mesh, []) == ["ssh mesh: 2/2 pairs among node1, node2 connect without a prompt (slowest 0.20s)"]
    mesh[1] = check.classify("node2", "node1", "node1", 255, "", "Connection refused", 0.1)
    assert mesh_lines(mesh, [])[1:] == ["  node2 -> node1: Connection refused"]
