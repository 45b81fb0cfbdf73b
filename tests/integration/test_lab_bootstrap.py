"""megaprov against real container nodes over real SSH: lab, bootstrap, preflight, failures."""

import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import LAB, megaprov, podman_exec

pytestmark = pytest.mark.lab


def containers(lab):
    return [n["container"] for n in lab["nodes"]]


def test_lab_up_pins_each_nodes_own_host_key(lab3):
    inventory = Path(lab3["inventory"])
    # in megaprov's state directory (the test run keeps it in the checkout: tests/conftest.py), as `lab inventory` says
    assert inventory == Path(os.environ["MEGAPROV_STATE"]) / "lab" / LAB / "inventory.ini"
    code, doc, _ = megaprov("lab", "inventory", "--name", LAB, "--output", "json")
    assert code == 0 and doc["result"]["inventory"] == str(inventory)
    text = inventory.read_text()
    assert "[head]\nnode1\n" in text and text.count("ansible_host=") == 3
    pins = (inventory.parent / "known_hosts").read_text().splitlines()
    keys = set()
    for node, line in zip(lab3["nodes"], pins, strict=True):
        real = podman_exec(node["container"], "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1]
        assert line.startswith(f"{node['address']},{node['name']} ssh-ed25519 {real}")
        keys.add(real)
    assert len(keys) == 3, "every node must have its own host key"
    assert (inventory.parent / "id_ed25519").stat().st_mode & 0o777 == 0o600


def test_lab_status_lists_the_nodes(lab3):
    code, doc, _ = megaprov("lab", "status", "--output", "json")
    assert code == 0
    assert [n["state"] for n in doc["result"][LAB]] == ["running"] * 3


def test_check_mode_on_fresh_nodes_changes_nothing(lab3):
    code, doc, err = megaprov("bootstrap", "-i", lab3["inventory"], "--check", "--output", "json")
    assert code == 0, err
    for container in containers(lab3):
        assert podman_exec(container, "id", "megaprov").returncode != 0, "check mode created the cluster user"
        assert podman_exec(container, "test", "-e", "/etc/security/limits.d/90-megaprov.conf").returncode != 0
        assert podman_exec(container, "test", "-e", "/opt/megaprov/venv").returncode != 0, "check mode created the venv"


def test_bootstrap_after_a_training_run_changes_nothing(bootstrapped):
    # The README run bootstrapped this lab from a fresh clone and trained on it; bootstrapping again must find
    # nothing to do (a training job writes into the shared directory as the cluster user), also after a node was
    # powered off and on: it keeps its address (the lab belongs to the clone, so the clone's megaprov restarts it).
    for action in ("stop", "start"):
        proc = subprocess.run(
            [bootstrapped["megaprov"], "lab", action, "node3", "--name", bootstrapped["lab"]], env=bootstrapped["env"], capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
    code, again, err = megaprov("bootstrap", "-i", bootstrapped["inventory"], "--output", "json")
    assert code == 0, err
    assert again["result"]["changed"] == 0, [h for h in again["result"]["hosts"] if h["changed"]]
    assert {h["host"] for h in again["result"]["hosts"]} >= {"node1", "node2", "node3"}
    assert Path(again["result"]["artifacts"]).is_dir()
    # where the time went, stage by stage, in order
    assert [s["stage"] for s in again["result"]["stages"]] == [
        "validate",
        "preflight",
        "cache",
        "base",
        "ssh_mesh",
        "storage",
        "gpu",
        "fabric",
        "python",
        "nccl",
        "scheduler",
        "containers",
        "observe",
    ]
    assert all(s["seconds"] >= 0 for s in again["result"]["stages"])
    # the observe stage (the lab enables it): every node's exporter scraped and up, node3 too after its restart
    (observe,) = again["result"]["observe"]
    assert "scrapes 3 node-exporter(s), all up" in observe and "alert rule(s)" in observe, observe
    # Slurm (the lab enables the scheduler stage): every node up, a step on all of them, their stand-in GPUs as gres
    [slurm] = again["result"]["slurm"]
    # The step ran when the lab was bootstrapped; nothing it depends on changed since, so its proof stands (test_proofs below).
    assert slurm.startswith("3/3 node(s) up (node1 idle, node2 idle, node3 idle); gres gpu:2; srun step verified at "), slurm
    assert slurm.endswith(", inputs unchanged; --verify re-proves"), slurm
    # Every slow verification proved nothing new: each stands on its recorded proof, and the report shows its result.
    proofs = again["result"]["proofs"]
    assert {p["name"] for p in proofs} == {"ssh_mesh", "shared_dir", "compute_rate", "munge", "slurm_step", "torch", "python_stack", "megatron_model"}
    assert [p for p in proofs if not p["valid"]] == []
    assert len(again["result"]["mesh"]) == 6 and all(p["ok"] and p["cached"] for p in again["result"]["mesh"])
    assert len(again["result"]["shared"]) == 9 and all(c["ok"] and c["cached"] for c in again["result"]["shared"])
    # GPU stack on GPU-less nodes: the driver stage says so per node, nothing NVIDIA is installed, and the
    # training environment is real (torch's CPU build and megatron-core 0.16.1 from the lab wheelhouse).
    assert again["result"]["gpu"] == {h: "skipped: no GPU on the PCI bus" for h in ("node1", "node2", "node3")}
    for container in containers(bootstrapped):
        assert podman_exec(container, "test", "-e", "/etc/apt/sources.list.d/megaprov-cuda.sources").returncode != 0
        probe = "import torch, megatron.core as m; print(torch.__version__, torch.version.cuda, m.__version__)"
        out = podman_exec(container, "/opt/megaprov/venv/bin/python", "-c", probe)
        assert out.stdout.split() == ["2.13.0+cpu", "None", "0.16.1"], out.stderr[-2000:]
    # The mesh is real: node3 reaches node1 as the cluster user by name.
    out = podman_exec(containers(bootstrapped)[2], "su", "-", "megaprov", "-c", "ssh -o BatchMode=yes node1 hostname")
    assert out.returncode == 0 and out.stdout.strip() == "node1", out.stderr


def test_proofs_run_again_when_an_input_changes_and_all_of_them_with_verify(bootstrapped):
    inventory, nodes = bootstrapped["inventory"], containers(bootstrapped)
    tags = "ssh_mesh,storage,scheduler"

    def proofs(*flags):
        code, doc, err = megaprov("bootstrap", "-i", inventory, "--tags", tags, *flags, "--output", "json")
        assert code == 0, err
        return {(p["host"], p["name"]): (p["valid"], p["reason"]) for p in doc["result"]["proofs"]}, doc["result"]

    # node2 loses its SSH proof, and node3's /etc/hosts (an input of the SSH proof) is touched in content: both run,
    # and so do their peers (each node is the other end of its peers' pairs); the other proofs stand.
    assert podman_exec(nodes[1], "rm", "/var/lib/megaprov/proofs/ssh_mesh.json").returncode == 0
    assert podman_exec(nodes[2], "sh", "-c", "echo '# a comment' >> /etc/hosts").returncode == 0
    try:
        found, result = proofs()
    finally:
        podman_exec(nodes[2], "sed", "-i", "$d", "/etc/hosts")
    assert found[("node2", "ssh_mesh")] == (False, "no record")
    assert found[("node3", "ssh_mesh")] == (False, "inputs changed: path /etc/hosts")
    assert found[("node1", "ssh_mesh")] == (False, "ran with its peers, whose inputs changed")
    assert all(found[(h, "shared_dir")] == (True, "inputs unchanged") for h in ("node1", "node2", "node3"))
    assert found[("node1", "slurm_step")] == (True, "inputs unchanged")
    assert len(result["mesh"]) == 6 and not any(p["cached"] for p in result["mesh"]), "the pairs ran: they are not the recorded ones"
    assert podman_exec(nodes[1], "test", "-f", "/var/lib/megaprov/proofs/ssh_mesh.json").returncode == 0, "the passing check was not recorded"
    mode = podman_exec(nodes[1], "stat", "-c", "%a %U", "/var/lib/megaprov/proofs", "/var/lib/megaprov/proofs/ssh_mesh.json").stdout.split()
    assert mode == ["700", "root", "600", "root"]

    # --verify: every proof runs, whatever is recorded, and the report says so.
    found, result = proofs("--verify")
    assert found and all(v == (False, "forced (--verify)") for v in found.values()), found
    assert result["verify"] is True
    assert result["slurm"][0].count("srun -N3 hostname as megaprov answered from node1, node2, node3") == 1


def test_check_mode_after_converge_reports_no_change(bootstrapped):
    code, doc, err = megaprov("bootstrap", "-i", bootstrapped["inventory"], "--check", "--output", "json")
    assert code == 0, err
    assert doc["result"]["changed"] == 0


def test_storage_and_fabric_are_in_the_report(bootstrapped):
    code, doc, err = megaprov("bootstrap", "-i", bootstrapped["inventory"], "--tags", "storage,fabric", "--output", "json")
    assert code == 0, err
    shared = doc["result"]["shared"]
    assert sorted((c["reader"], c["writer"]) for c in shared) == [(r, w) for r in ("node1", "node2", "node3") for w in ("node1", "node2", "node3")]
    assert all(c["ok"] for c in shared), shared
    fabric = doc["result"]["fabric"]
    line = "no RDMA device: NCCL will use TCP sockets on eth0"
    assert {h: f["summary"] for h, f in fabric.items()} == {h: line for h in ("node1", "node2", "node3")}
    env = podman_exec(containers(bootstrapped)[1], "cat", "/etc/megaprov/nccl.env").stdout
    assert "NCCL_SOCKET_IFNAME=eth0" in env and "GLOO_SOCKET_IFNAME=eth0" in env and "NCCL_IB_DISABLE=1" in env


def test_kernel_nfs_fails_fast_where_the_kernel_has_none(bootstrapped):
    inventory = bootstrapped["inventory"]
    code, doc, err = megaprov("bootstrap", "-i", inventory, "--tags", "storage", "-e", "nfs_server_implementation=kernel", "--output", "json")
    assert code == 3
    assert "node1" in doc["error"]["message"] and "this kernel has no NFS server support" in doc["error"]["message"]
    assert "set nfs_server_implementation: ganesha" in doc["error"]["message"]


def test_preflight_reports_every_node_gpu_less_and_passing(bootstrapped):
    code, doc, err = megaprov("preflight", "-i", bootstrapped["inventory"], "--output", "json")
    assert code == 0, err
    checks = doc["result"]["checks"]
    gpu_rows = [c for c in checks if c["check"] == "gpus"]
    assert [(c["host"], c["status"], c["value"]) for c in gpu_rows] == [(f"node{i}", "pass", "no GPU") for i in (1, 2, 3)]
    assert not [c for c in checks if c["status"] == "fail"]
    node = doc["result"]["nodes"]["node2"]
    assert node["os"]["id"] == "debian" and node["disk"]["write_mb_s"] > 0


def test_preflight_fails_a_gpu_node_without_gpus(bootstrapped):
    code, doc, err = megaprov("preflight", "-i", bootstrapped["inventory"], "-e", "megaprov_gpu_expected=true", "--output", "json")
    assert code == 6
    assert "node1: gpus: no NVIDIA GPU found on a gpu_nodes host" in doc["error"]["message"]


def test_a_broken_pair_is_reported_by_name(bootstrapped):
    node3 = containers(bootstrapped)[2]
    podman_exec(node3, "sh", "-c", "echo 'DenyUsers megaprov' > /etc/ssh/sshd_config.d/deny.conf && systemctl reload ssh")
    try:
        code, doc, err = megaprov("bootstrap", "-i", bootstrapped["inventory"], "--tags", "ssh_mesh", "--output", "json")
        assert code == 3
        assert "2 of 6 SSH pairs failed as megaprov" in doc["error"]["message"]
        assert "node1 -> node3" in doc["error"]["message"] and "node2 -> node3" in doc["error"]["message"]
    finally:
        podman_exec(node3, "sh", "-c", "rm -f /etc/ssh/sshd_config.d/deny.conf && systemctl reload ssh")


def test_an_unreachable_host_stops_before_any_change(lab3, tmp_path):
    node1 = lab3["nodes"][0]
    (tmp_path / "group_vars").mkdir()
    source = Path(lab3["inventory"]).parent / "group_vars" / "all.yml"
    (tmp_path / "group_vars" / "all.yml").write_text(source.read_text() + "megaprov_cluster_user: other\n")
    (tmp_path / "inventory.ini").write_text(
        textwrap.dedent(f"""
        [head]
        node1 ansible_host={node1["address"]}
        [gpu_nodes]
        node1
        ghost ansible_host={node1["address"]} ansible_port=2299
    """)
    )
    code, doc, err = megaprov("bootstrap", "-i", str(tmp_path / "inventory.ini"), "--output", "json")
    assert code == 4
    assert "ghost" in doc["error"]["message"] and "unreachable" in doc["error"]["message"]
    assert podman_exec(node1["container"], "id", "other").returncode != 0, "a stage ran on node1 after ghost was unreachable"


@pytest.mark.last
def test_lab_down_removes_exactly_what_up_made(lab3):
    code, doc, _ = megaprov("lab", "down", "--name", LAB, "--output", "json")
    assert code == 0
    from megaprov.cluster.lab import LAB_SHARES

    share = LAB_SHARES / LAB  # the training share's directory (the nodes see it through the root-squashing FUSE mount)
    expected = set(containers(lab3)) | {f"megaprov-{LAB}", f"megaprov-lab-{LAB}-shared", str(Path(lab3["inventory"]).parent), str(share)}
    assert set(doc["result"]["removed"]) == expected
    assert not share.exists()
    names = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
    assert not [n for n in names.split() if n.startswith(f"megaprov-{LAB}-")]
    assert not Path(lab3["inventory"]).exists()
    volumes = subprocess.run(["podman", "volume", "ls", "--format", "{{.Name}}"], capture_output=True, text=True).stdout
    assert f"megaprov-lab-{LAB}-shared" not in volumes.split()


def _as_ansible_sees_it(source: Path) -> dict:
    """The lab's inventory as a YAML inventory has it: every group with its hosts, each host's own variables."""
    from megaprov import paths
    from megaprov.cluster import inventory as inv

    found = inv.load(source, paths.roles_dir(), paths.cluster_defaults())
    children = {
        group: {"hosts": {name: dict(found.hosts[name].vars) or None for name in members}}
        for group, members in found.groups.items()
        if members and group not in ("all", "ungrouped")
    }
    return {"all": {"children": children}}


def test_a_yaml_and_a_dynamic_inventory_bootstrap_the_lab(bootstrapped, tmp_path):
    """Inventories as Ansible users keep them: the lab's, written as YAML and as an inventory script (each with the
    lab's group_vars/ beside it), are read through ansible-core, checked as strictly as INI, and bootstrap the lab."""
    import json
    import shutil
    import sys

    import yaml

    source = Path(bootstrapped["inventory"])
    doc = _as_ansible_sees_it(source)
    nodes = sorted({name for group in doc["all"]["children"].values() for name in group["hosts"]})
    yaml_dir, script_dir = tmp_path / "yaml", tmp_path / "script"
    for directory in (yaml_dir, script_dir):
        shutil.copytree(source.parent / "group_vars", directory / "group_vars")
    (yaml_dir / "cluster.yml").write_text(yaml.safe_dump(doc))
    listing = {group: {"hosts": list(entry["hosts"])} for group, entry in doc["all"]["children"].items()}
    hostvars = {name: vars_ for entry in doc["all"]["children"].values() for name, vars_ in entry["hosts"].items() if vars_}
    script = script_dir / "cluster.py"
    # a script as Ansible runs one: --list prints the groups and _meta.hostvars as one JSON object, --host HOST an object
    answer = json.dumps({**listing, "_meta": {"hostvars": hostvars}})
    script.write_text(f"#!{sys.executable}\nimport sys\nprint('{{}}' if '--host' in sys.argv else {answer!r})\n")
    script.chmod(0o755)
    # the YAML inventory runs every stage (a converged lab: what a re-run checks; 322 s measured), the script the SSH
    # mesh (its all-pairs check uses every host against every other)
    for inventory, tags in ((yaml_dir / "cluster.yml", []), (script, ["--tags", "ssh_mesh"])):
        code, checked, err = megaprov("inventory", "check", "-i", str(inventory), "--output", "json")
        assert code == 0 and checked["result"]["contacted"] is False, err
        assert sorted(checked["result"]["gpu_nodes"]) == sorted(n for n in nodes if n in listing["gpu_nodes"]["hosts"])
        code, run, err = megaprov("bootstrap", "-i", str(inventory), *tags, "--output", "json")
        assert code == 0, err[-3000:]
        ran = [h for h in run["result"]["hosts"] if h["host"] != "localhost"]  # localhost: the validate play
        assert sorted(h["host"] for h in ran) == nodes and not any(h["failed"] or h["unreachable"] for h in ran), ran
    # the same strict checks as for INI: a bad variable in the YAML inventory is refused before any host is contacted
    doc["all"]["vars"] = {"megaprov_gpus_per_node": "many"}
    (yaml_dir / "cluster.yml").write_text(yaml.safe_dump(doc))
    code, refused, err = megaprov("bootstrap", "-i", str(yaml_dir / "cluster.yml"), "--output", "json")
    assert code == 2 and "megaprov_gpus_per_node='many' must be a whole number" in refused["error"]["message"], err


def test_status_shows_the_cluster_at_a_glance(bootstrapped):
    """Each node's last bootstrap result per stage (recorded by the bootstrap), Slurm's node states and Prometheus's
    view (asked now), the jobs; --recorded asks no host."""
    inventory = bootstrapped["inventory"]
    code, _, err = megaprov("bootstrap", "-i", inventory, "--tags", "ssh_mesh", "--output", "json")
    assert code == 0, err[-3000:]
    code, doc, err = megaprov("status", "-i", inventory, "-o", "json")
    assert code == 0, err[-3000:]
    result = doc["result"]
    names = [n["name"] for n in bootstrapped["nodes"]]
    assert sorted(result["nodes"]) == sorted(names) and result["last_bootstrap"]["ok"] is True
    for name in names:
        node = result["nodes"][name]
        assert node["stages"]["ssh_mesh"] == "ok", node
        assert node["slurm"]["state"] in ("idle", "mixed", "allocated", "completing"), node  # sinfo on the controller, now
        assert node["up"] is True, node  # Prometheus's node-exporter target
    assert result["asked"] == ["alerts", "slurm"] and result["problems"] == [], result["problems"]
    code, recorded, err = megaprov("status", "-i", inventory, "--recorded", "-o", "json")
    assert code == 0 and recorded["result"]["asked"] == [] and "slurm" not in recorded["result"]["nodes"][names[0]], err
    assert recorded["result"]["nodes"][names[0]]["stages"]["ssh_mesh"] == "ok"
