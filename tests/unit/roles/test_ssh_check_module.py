"""The ssh_mesh role's check module (ansible_collections/megaprov/cluster/plugins/modules/ssh_check.py): the ssh command it runs, how
one pair is judged, which hosts are tried, and main() end to end against a fake ssh on PATH."""

import stat
from pathlib import Path

import pytest

from tests.conftest import ROOT, load_module
from tests.helpers import modules

check = load_module(ROOT / "ansible_collections/megaprov/cluster/plugins/modules/ssh_check.py", "megaprov_ssh_check")


def options(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """ssh's argv read as ssh reads it: '-o Key=Value' pairs, then the destination and the remote command."""
    opts, rest = {}, argv[1:]
    while rest and rest[0] == "-o":
        key, _, value = rest[1].partition("=")
        assert key not in opts, f"{key} given twice"
        opts[key] = value
        rest = rest[2:]
    return opts, rest


def test_ssh_is_never_interactive_and_always_strict():
    argv = check.ssh_argv("node2", 7)
    assert argv[0] == "ssh"
    opts, rest = options(argv)
    # ssh_config(5): BatchMode=yes never prompts (password, passphrase, host key); StrictHostKeyChecking=yes refuses
    # an unknown or changed host key instead of adding it (accept-new / no would not test the pinned keys);
    # ConnectTimeout bounds a dead peer; LogLevel=ERROR keeps warnings off stderr, whose last line is the reason shown.
    assert opts == {"BatchMode": "yes", "StrictHostKeyChecking": "yes", "ConnectTimeout": "7", "LogLevel": "ERROR"}
    assert rest == ["node2", "hostname"]


def test_a_good_pair():
    row = check.classify("node1", "node2", "node2", 0, "node2\n", "", 0.12)
    assert row == {"source": "node1", "peer": "node2", "ok": True, "seconds": 0.12, "line": "node1 -> node2: ok (0.12s)"}


def test_a_refused_host_key_names_the_reason():
    row = check.classify("node1", "node3", "node3", 255, "", "Warning: x\nHost key verification failed.\n", 0.1)
    assert not row["ok"] and row["line"] == "node1 -> node3: Host key verification failed."


def test_the_wrong_machine_answering_fails():
    row = check.classify("node1", "node2", "node2", 0, "node7\n", "", 0.1)
    assert not row["ok"] and "answered as 'node7', expected 'node2'" in row["line"]


def test_without_an_expected_name_any_answer_is_ok():
    row = check.classify("node1", "10.0.0.2", "", 0, "gpu-a-02\n", "", 0.5)
    assert row == {"source": "node1", "peer": "10.0.0.2", "ok": True, "seconds": 0.5, "line": "node1 -> 10.0.0.2: ok (0.50s)"}


def test_a_failure_without_error_output_names_the_exit_status():
    row = check.classify("node1", "node3", "node3", 255, "", "\n  \n", 3.0)
    assert row == {"source": "node1", "peer": "node3", "ok": False, "seconds": 3.0, "line": "node1 -> node3: ssh exited 255"}


def test_the_reason_is_the_last_non_blank_error_line():
    row = check.classify("node1", "node3", "node3", 255, "node3\n", "ssh: connect to host node3 port 22: Connection timed out\n\n   \n", 10.0)
    assert row["line"] == "node1 -> node3: ssh: connect to host node3 port 22: Connection timed out" and row["ok"] is False


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

    role_vars = yaml.safe_load((ROOT / "ansible_collections/megaprov/cluster/roles/ssh_mesh/vars/main.yml").read_text())
    env = jinja2.Environment()
    context = {"ssh_mesh_hosts": ["node1", "node2", "node3"], "ansible_play_hosts": ["node1", "node2"]}
    members = env.from_string(role_vars["__ssh_mesh_members"]).render(context)
    left_out = env.from_string(role_vars["__ssh_mesh_left_out"]).render(context)
    assert (members, left_out) == ("['node1', 'node2']", "['node3']")
    context["ansible_play_hosts"] = ["node1", "node2", "node3"]
    assert env.from_string(role_vars["__ssh_mesh_left_out"]).render(context) == "[]"


def test_the_report_names_the_pairs_tried_and_the_hosts_left_out():
    from megaprov.cluster.provision import mesh_lines

    mesh = [check.classify(a, b, b, 0, b, "", 0.2) for a, b in (("node1", "node2"), ("node2", "node1"))]
    assert mesh_lines(mesh, ["node3"]) == [
        "ssh mesh: 2/2 pairs among node1, node2 connect without a prompt (slowest 0.20s)",
        "ssh mesh: left out as unreachable (no pair with them was tried): node3",
    ]
    assert mesh_lines(mesh, []) == ["ssh mesh: 2/2 pairs among node1, node2 connect without a prompt (slowest 0.20s)"]
    mesh[1] = check.classify("node2", "node1", "node1", 255, "", "Connection refused", 0.1)
    assert mesh_lines(mesh, [])[1:] == ["  node2 -> node1: Connection refused"]


# main() end to end: a fake ssh (first on PATH) records its argv and answers as the peer named in it would.
FAKE_SSH = """#!/bin/sh
for last in "$@"; do peer=$prev; prev=$last; done
printf '%s\\0' "$@" > "$0.$peer.args"
case "$peer" in
  node2) sleep 0.3; echo node2 ;;
  node3) echo "Host key verification failed." >&2; exit 255 ;;
  node4) echo somewhere-else ;;
  *) echo "ssh: Could not resolve hostname $peer" >&2; exit 255 ;;
esac
"""


@pytest.fixture
def fake_ssh(tmp_path, monkeypatch) -> Path:
    ssh = tmp_path / "ssh"
    ssh.write_text(FAKE_SSH)
    ssh.chmod(ssh.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    return ssh


def run_module(args: dict, capsys) -> dict:
    code, result = modules.run_module(check.main, args, capsys)
    assert code == 0
    return result


def test_module_tries_every_reachable_peer_and_reports_each_pair(fake_ssh, capsys):
    peers = {"node4": "node4", "node2": "node2", "node3": "node3", "node5": "node5"}
    result = run_module({"source": "node1", "peers": peers, "timeout": 4, "left_out": ["node5", "node9", "node5"]}, capsys)
    assert result["changed"] is False and result["left_out"] == ["node5", "node9"]
    lines = [(p["peer"], p["ok"], p["line"].split(": ", 1)[1]) for p in result["pairs"]]
    assert lines[0] == ("node2", True, f"ok ({result['pairs'][0]['seconds']:.2f}s)")
    assert lines[1:] == [("node3", False, "Host key verification failed."), ("node4", False, "answered as 'somewhere-else', expected 'node4'")]
    assert {p["source"] for p in result["pairs"]} == {"node1"}
    # measured per pair, in hundredths: node2's fake ssh takes 0.3 s
    assert all(0 <= p["seconds"] < 30 and p["seconds"] == round(p["seconds"], 2) for p in result["pairs"])
    assert 0.3 <= result["pairs"][0]["seconds"] < 30 and result["pairs"][0]["seconds"] != int(result["pairs"][0]["seconds"])
    assert not Path(f"{fake_ssh}.node5.args").exists()  # left out: never tried
    argv = ["ssh", *Path(f"{fake_ssh}.node3.args").read_text().split("\0")[:-1]]
    opts, rest = options(argv)
    assert opts["ConnectTimeout"] == "4" and opts["StrictHostKeyChecking"] == "yes" and rest == ["node3", "hostname"]


def test_module_default_timeout_and_no_peers(fake_ssh, capsys):
    result = run_module({"source": "node1", "peers": {"node2": "node2"}}, capsys)
    assert [p["ok"] for p in result["pairs"]] == [True] and result["left_out"] == []
    opts, _ = options(["ssh", *Path(f"{fake_ssh}.node2.args").read_text().split("\0")[:-1]])
    assert opts["ConnectTimeout"] == "10"
    assert run_module({"source": "node1", "peers": {"node2": "node2"}, "left_out": ["node2"]}, capsys)["pairs"] == []
    assert run_module({"source": "node1", "peers": {}}, capsys)["pairs"] == []
