import os
from pathlib import Path

import pytest

from megaprov.cluster import lab
from megaprov.errors import UsageError


def test_inventory_puts_the_first_node_in_head_and_all_in_gpu_nodes():
    members = [lab.Node("node1", "megaprov-x-node1", "10.89.0.2", "running"), lab.Node("node2", "megaprov-x-node2", "10.89.0.3", "running")]
    inventory, group_vars = lab.render_inventory(
        "x", members, Path("/l/id_ed25519"), Path("/l/known_hosts"), "/var/lib/containers/storage/volumes/v/_data"
    )
    assert "[head]\nnode1\n" in inventory
    assert "[gpu_nodes]\nnode1 ansible_host=10.89.0.2\nnode2 ansible_host=10.89.0.3\n" in inventory
    assert "megaprov_gpu_expected: false" in group_vars
    assert "UserKnownHostsFile=/l/known_hosts -o StrictHostKeyChecking=yes" in group_vars
    # the head's package cache is on, and indexes the wheelhouse every node mounts
    assert "megaprov_package_cache: true\npackage_cache_wheelhouse: /srv/megaprov/wheelhouse\n" in group_vars


def test_the_lab_inventory_passes_validation(tmp_path):
    from megaprov.cluster import inventory as inv

    members = [lab.Node(f"node{i}", f"c{i}", f"10.89.0.{i + 1}", "running") for i in range(1, 4)]
    text, group_vars = lab.render_inventory("t", members, tmp_path / "k", tmp_path / "kh", str(tmp_path / "shared"))
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text(group_vars)
    (tmp_path / "inventory.ini").write_text(text)
    root = Path(__file__).resolve().parents[3]
    loaded = inv.load(
        tmp_path / "inventory.ini",
        root / "ansible_collections/megaprov/cluster/roles",
        root / "ansible_collections/megaprov/cluster/roles/megaprov/defaults/main.yml",
    )
    assert loaded.host_var("node2", "megaprov_gpu_expected") is False
    # node1's Ganesha exports the raw volume; the nodes train on /shared (megaprov_shared_dir), root-squashed
    assert loaded.host_var("node1", "nfs_server_export_dir") == lab.LAB_EXPORT_DIR != lab.LAB_SHARED_DIR


@pytest.mark.parametrize("name", ["", "Lab", "-x", "a_b", "x" * 21, "1lab"])
def test_bad_lab_names_are_refused(name):
    with pytest.raises(UsageError, match="is not a valid lab name"):
        lab.validate_name(name)


def test_names_are_derived_from_the_lab_name():
    assert lab.container_name("ci", 3) == "megaprov-ci-node3"
    assert lab.network_name("ci") == "megaprov-ci"


def test_image_tag_follows_the_build_files():
    tag = lab.image_tag()
    assert tag.startswith("localhost/megaprov-node:") and len(tag.rsplit(":", 1)[1]) == 12
    # every file the Containerfile copies is hashed: a changed squash daemon builds a new image
    copied = {line.split()[1] for line in (lab.LAB_FILES / "Containerfile").read_text().splitlines() if line.startswith("COPY ")}
    assert copied <= set(lab.IMAGE_FILES)


def test_a_lab_gets_the_subnet_its_name_hashes_to_whatever_else_exists():
    first = lab.choose_subnet("rs", [])
    assert first == lab.choose_subnet("rs", ["10.88.0.0/16", "10.89.0.0/24", "192.0.2.2/24"])
    assert first.startswith("10.90.") and first.endswith(".0/24")


def test_a_subnet_in_use_is_skipped_so_two_labs_never_collide():
    first = lab.choose_subnet("rs", [])
    second = lab.choose_subnet("rs", [first])
    assert second != first
    # A wider network or a host interface address inside the candidate counts as in use too.
    assert lab.choose_subnet("rs", ["10.90.0.0/17", "10.90.128.0/18"]).startswith("10.90.")
    assert lab.choose_subnet("rs", [first.replace(".0/24", ".7/24")]) == second
    taken = [str(n) for n in lab.LAB_POOL.subnets(new_prefix=24)]
    free = taken.pop(200)
    assert lab.choose_subnet("rs", taken) == free


def test_names_spread_over_the_pool():
    chosen = {lab.choose_subnet(f"lab{i}", []) for i in range(50)}
    assert len(chosen) > 40


def test_every_subnet_taken_is_an_environment_problem():
    from megaprov.errors import EnvironmentProblem

    with pytest.raises(EnvironmentProblem, match="in use"):
        lab.choose_subnet("rs", ["10.90.0.0/16"])


def test_node_addresses_are_fixed_in_the_subnet():
    assert lab.node_address("10.90.53.0/24", 1) == "10.90.53.2"
    assert lab.node_address("10.90.53.0/24", 3) == "10.90.53.4"
    with pytest.raises(UsageError):
        lab.node_address("10.90.53.0/24", lab.MAX_NODES + 1)


def test_the_network_is_created_with_its_own_subnet_and_label():
    assert lab.network_create_argv("ci", "10.90.7.0/24") == [
        "network", "create", "--subnet", "10.90.7.0/24", "--label", "io.megaprov.lab=ci", "megaprov-ci",
    ]  # fmt: skip


def test_a_node_is_created_at_its_fixed_address():
    assert lab.node_create_argv("ci", 2, "10.90.7.0/24", "localhost/megaprov-node:abc", None, Path("/w")) == [
        "create", "--name", "megaprov-ci-node2", "--hostname", "node2",
        "--label", "io.megaprov.lab=ci", "--label", "io.megaprov.lab.address=10.90.7.3",
        "--network", "megaprov-ci", "--ip", "10.90.7.3", "--network-alias", "node2",
        "--no-hosts", "--systemd", "always",
        "-v", "/w:/srv/megaprov/wheelhouse:ro",
        # the raw volume at the export path; /shared is the root-squashed FUSE view (it mounts /dev/fuse)
        "-v", "megaprov-lab-ci-shared:/srv/megaprov/export", "--device", "/dev/fuse", "--cap-add", "SYS_ADMIN",
        "--cap-add", "SYS_PTRACE",  # Slurm's epilog reads the job user's /proc/PID/environ as root
        "--security-opt", "unmask=/proc/*",  # a container in the node, as the cluster user, mounts its own /proc
        # two character devices where GPUs would be, for Slurm's gres (File= must be a device)
        "--device", "/dev/null:/dev/nvidia0", "--device", "/dev/zero:/dev/nvidia1",
        "localhost/megaprov-node:abc",
    ]  # fmt: skip
    head = lab.node_create_argv("ci", 1, "10.90.7.0/24", "img", "/etc/ca.crt", Path("/w"))
    assert head[head.index("--ip") + 1] == "10.90.7.2" and head[-1] == "img"
    assert head[-7:-5] == ["--cap-add", "DAC_READ_SEARCH"] and "SYS_PTRACE" in head
    assert "/etc/ca.crt:/etc/host-ca.crt:ro" in head


def test_the_share_volume_is_a_bind_of_a_directory_the_cluster_user_can_reach():
    # podman's own volume storage is 0700 root: root writing as the cluster user (data prepare) could not reach it
    assert lab.volume_create_argv("ci") == [
        "volume", "create", "--label", "io.megaprov.lab=ci",
        "--opt", "type=none", "--opt", "o=bind", "--opt", "device=/var/lib/megaprov/labs/ci/shared",
        "megaprov-lab-ci-shared",
    ]  # fmt: skip


def test_pinned_keys_and_inventory_addresses_are_read_back():
    known = "10.90.7.2,node1 ssh-ed25519 AAAA1\n10.90.7.3,node2 ssh-ed25519 AAAA2\n"
    assert lab.pinned_keys(known)["node2"] == "ssh-ed25519 AAAA2"
    assert lab.pinned_keys(known)["10.90.7.2"] == "ssh-ed25519 AAAA1"
    members = [lab.Node("node1", "c1", "10.90.7.2", "running"), lab.Node("node2", "c2", "10.90.7.3", "running")]
    inventory, _ = lab.render_inventory("x", members, Path("/k"), Path("/kh"), "/s")
    assert lab.inventory_addresses(inventory) == {"node1": "10.90.7.2", "node2": "10.90.7.3"}


def test_stop_and_start_refuse_an_unknown_lab_or_node(monkeypatch):
    members = [lab.Node("node1", "megaprov-x-node1", "10.90.7.2", "running")]
    monkeypatch.setattr(lab, "nodes", lambda name: members if name == "x" else [])
    with pytest.raises(UsageError, match="lab 'nope' does not exist"):
        lab.stop("nope", "node1")
    with pytest.raises(UsageError, match="lab 'x' has no node 'node9'.*use one of: node1"):
        lab.start(Path("/nonexistent"), "x", "node9")
    with pytest.raises(UsageError, match="not a valid lab name"):
        lab.stop("Bad_Name", "node1")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["lab", "stop", "node9", "--name", "x"], "megaprov: error: lab 'x' has no node 'node9': use one of: node1\n"),
        (["lab", "start", "node1", "--name", "nope"], "megaprov: error: lab 'nope' does not exist: see `megaprov lab status`"),
    ],
)
def test_the_cli_exits_2_with_one_line_for_an_unknown_node_or_lab(monkeypatch, capsys, argv, message):
    from megaprov import cli

    members = [lab.Node("node1", "megaprov-x-node1", "10.90.7.2", "running")]
    monkeypatch.setattr(lab, "nodes", lambda name: members if name == "x" else [])
    assert cli.main([*argv, "--output", "json"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(message) and err.count("\n") == 1
    assert '"ok": false' in out


def test_the_lab_checks_out_megatron_lm_from_the_tree_it_was_given(tmp_path, monkeypatch):
    """The lab clones Megatron-LM's real tree. With MEGAPROV_MEGATRON_LM (an air-gapped machine, this
    project's CI) every node mounts the remote `lab up` made of it and the head's cache mirrors it from there;
    without it the lab clones GitHub's like any cluster."""
    members = [lab.Node("node1", "c1", "10.89.0.2", "running")]
    _, plain = lab.render_inventory("t", members, Path("/k"), Path("/kh"), "/s")
    assert "megatron_checkout: true\n" in plain and "package_cache_git_repos" not in plain
    _, given = lab.render_inventory("t", members, Path("/k"), Path("/kh"), "/s", "/srv/megaprov/git/Megatron-LM.git")
    assert "megatron_checkout: true\n" in given and "package_cache_git_repos: {megatron: /srv/megaprov/git/Megatron-LM.git}\n" in given
    argv = lab.node_create_argv("ci", 1, "10.90.7.0/24", "img", None, Path("/w"), Path("/cache/git/abc"))
    assert argv[argv.index("/cache/git/abc:/srv/megaprov/git:ro") - 1] == "-v"
    monkeypatch.setenv(lab.MEGATRON_SOURCE_ENV, str(tmp_path / "nothing"))
    with pytest.raises(UsageError, match="MEGAPROV_MEGATRON_LM=.* is neither a Megatron-LM tree nor an archive"):
        lab.megatron_source()
    monkeypatch.delenv(lab.MEGATRON_SOURCE_ENV)
    assert lab.megatron_source() is None


def test_the_labs_megatron_tag_is_the_roles():
    import yaml

    defaults = Path(__file__).resolve().parents[3] / "ansible_collections/megaprov/cluster/roles/megatron/defaults/main.yml"
    assert yaml.safe_load(defaults.read_text())["megatron_version"] == lab.LAB_MEGATRON_TAG


def test_a_lab_is_reused_only_with_the_megatron_tree_its_nodes_mount(tmp_path, monkeypatch):
    """Nodes keep the mounts they were made with: an inventory naming a tree they do not mount (or the reverse) would
    fail the python stage with a clone error; `lab up` says so first."""
    made = [lab.Node("node1", "megaprov-t-node1", "10.90.1.2", "running")]
    monkeypatch.setattr(lab, "nodes", lambda name: made)
    monkeypatch.setattr(lab, "ensure_image", lambda progress: "img")
    monkeypatch.setattr(lab.wheelhouse, "build", lambda: tmp_path / "wheels")
    monkeypatch.setattr(lab, "_mount_source", lambda container, destination: "/cache/git/old")
    monkeypatch.delenv(lab.MEGATRON_SOURCE_ENV, raising=False)
    with pytest.raises(UsageError, match="was made with Megatron-LM from /cache/git/old, and MEGAPROV_MEGATRON_LM now asks for GitHub"):
        lab.up(tmp_path, "t", 1)
    monkeypatch.setattr(lab, "_mount_source", lambda container, destination: None)
    tree = tmp_path / "mlm"
    (tree / "megatron").mkdir(parents=True)
    (tree / "pretrain_gpt.py").write_text("")
    monkeypatch.setenv(lab.MEGATRON_SOURCE_ENV, str(tree))
    monkeypatch.setattr(lab, "cache_dir", lambda: tmp_path / "cache")
    with pytest.raises(UsageError, match="was made with no Megatron-LM tree \\(GitHub\\)"):
        lab.up(tmp_path, "t", 1)


def test_a_container_removed_between_listing_and_inspecting_is_left_out(tmp_path, monkeypatch):
    # `lab down` beside `lab status`: podman lists node1 and node2, then no longer knows node2 (or has it stuck in its
    # removal, "container not known"); status shows the lab as it is, and does not fail on the other lab's removal.
    fake = tmp_path / "podman"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = ps ]; then printf "megaprov-x-node1\\nmegaprov-x-node2\\n"; exit 0; fi\n'
        'if [ "$1" = inspect ]; then\n'
        "  for a; do case \"$a\" in megaprov-x-node2) echo 'Error: container not known' >&2; exit 125;; esac; done\n"
        '  for a; do case "$a" in megaprov-x-node1) echo "x|megaprov-x-node1|running|10.90.7.2|node1|10.90.7.2";; esac; done\n'
        "  exit 0\n"
        "fi\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert lab.nodes("x") == [lab.Node("node1", "megaprov-x-node1", "10.90.7.2", "running")]
