"""`megaprov init` (megaprov.cluster.scaffold.init): the exact inventory and group_vars it writes for each way of
naming the head and nodes (NAME=ADDRESS, an address named for its place, a name, a range), the GPU model set or left
as a commented hint, the fabric, the head among the GPU nodes; the files' modes; each refusal before anything is
written; and a written inventory that does not read back is taken back whole. Real files, the real inventory loader
and the roles' argument specs; nothing is stood in."""

import os
import stat
from pathlib import Path

import pytest

from megaprov import values
from megaprov.cluster import scaffold
from megaprov.errors import UsageError

ROOT = Path(__file__).resolve().parents[3]

HEADER = (
    "# Written by `megaprov init`. Check it offline with `megaprov inventory check -i THIS_DIRECTORY`, then\n"
    "# `megaprov preflight -i THIS_DIRECTORY` (contacts the nodes) and `megaprov bootstrap -i THIS_DIRECTORY`.\n"
    "# megaprov connects as ansible_user over SSH with your key (ssh-agent or ~/.ssh), and needs sudo on every node.\n"
    "\n"
    "# The head: rendezvous, NFS server of the shared directory, Slurm controller, Prometheus, package cache.\n"
    "[head]\n"
)
NODES = "\n# The training nodes (a range such as gpu[01:04] expands). The head may be one of them too.\n[gpu_nodes]\n"


def request(**changes):
    fields = {
        "head": "10.0.0.1",
        "nodes": "10.0.0.2, gpu02=10.0.0.3,gpu[03:04]",
        "gpu": "H200",
        "gpus_per_node": 8,
        "user": "ubuntu",
        "shared_dir": "/shared",
        "fabric": "infiniband",
        "scheduler": "slurm",
    }
    return scaffold.InitRequest(**{**fields, **changes})


def test_init_writes_the_inventory_and_group_vars_as_asked(tmp_path):
    target = tmp_path / "cluster"
    written = scaffold.init(target, request())
    names = ["inventory.ini", "group_vars/all.yml", "group_vars/gpu_nodes.yml", "group_vars/head.yml"]
    assert written == [target / n for n in names]
    assert (target / "inventory.ini").read_text() == (
        HEADER
        + "head01 ansible_host=10.0.0.1\n"
        + NODES
        + "gpu01 ansible_host=10.0.0.2\ngpu02 ansible_host=10.0.0.3\ngpu[03:04]\n\n[all:vars]\nansible_user=ubuntu\n"
    )
    assert (target / "group_vars/all.yml").read_text() == (
        "---\n"
        "# Cluster-wide settings: every variable is checked against the roles' argument specs before any host is\n"
        "# contacted (`megaprov inventory check`); each role's README lists its variables.\n"
        "megaprov_cluster_user: megaprov   # the account jobs run as; megaprov creates it and its SSH mesh\n"
        "megaprov_shared_dir: /shared   # NFS from the head (root_squash), mounted on every node\n"
        "ansible_become: true\n"
        "megaprov_scheduler: slurm   # none: jobs run as systemd units; slurm: munge, slurmctld, slurmd, GPU gres\n"
        "megaprov_observe: false   # true: Prometheus, Grafana, alerting and central logs on the head\n"
    )
    assert (target / "group_vars/gpu_nodes.yml").read_text() == (
        "---\n"
        "megaprov_gpu_model: H200\n"
        "megaprov_gpus_per_node: 8   # preflight fails a node that shows fewer\n"
        "# The training network: true fails a GPU node whose InfiniBand/RoCE ports are down (NCCL would fall back to\n"
        "# TCP sockets silently); false lets NCCL use sockets knowingly.\n"
        "infiniband_required: true\n"
    )
    assert (target / "group_vars/head.yml").read_text() == (
        "---\n# The head is a CPU machine (false: preflight does not ask it for GPUs).\nmegaprov_gpu_expected: false\n"
    )
    umask = os.umask(0)
    os.umask(umask)
    assert {n: stat.S_IMODE((target / n).stat().st_mode) for n in ["", "group_vars", *names]} == {
        "": 0o755 & ~umask,
        "group_vars": 0o755 & ~umask,
        **dict.fromkeys(names, 0o644 & ~umask),
    }


def test_without_a_gpu_model_the_setting_is_a_hint_and_ethernet_does_not_require_infiniband(tmp_path):
    scaffold.init(tmp_path / "c", request(gpu=None, fabric="ethernet", scheduler="none", gpus_per_node=4, shared_dir="/srv/share"))
    assert (tmp_path / "c/group_vars/gpu_nodes.yml").read_text().splitlines()[1:3] == [
        "# megaprov_gpu_model: H100-SXM   # set it: plan and train size the job by it, the nccl role its bandwidth floor",
        "megaprov_gpus_per_node: 4   # preflight fails a node that shows fewer",
    ]
    assert (tmp_path / "c/group_vars/gpu_nodes.yml").read_text().splitlines()[-1] == "infiniband_required: false"
    all_vars = (tmp_path / "c/group_vars/all.yml").read_text().splitlines()
    assert "megaprov_scheduler: none   # none: jobs run as systemd units; slurm: munge, slurmctld, slurmd, GPU gres" in all_vars
    assert "megaprov_shared_dir: /srv/share   # NFS from the head (root_squash), mounted on every node" in all_vars


def test_names_are_kept_an_address_alone_is_named_for_its_place(tmp_path):
    scaffold.init(tmp_path / "c", request(head="ctl=192.168.1.5", nodes="node7,fd00::2,10.1.0.9"))
    text = (tmp_path / "c/inventory.ini").read_text()
    assert text.split("[head]\n")[1].split("\n")[0] == "ctl ansible_host=192.168.1.5"
    assert text.split("[gpu_nodes]\n")[1].split("\n\n")[0] == "node7\ngpu02 ansible_host=fd00::2\ngpu03 ansible_host=10.1.0.9"


def test_a_head_that_is_also_a_gpu_node_is_not_told_it_has_no_gpus(tmp_path):
    scaffold.init(tmp_path / "c", request(head="gpu01=10.0.0.2", nodes="gpu01=10.0.0.2,gpu02=10.0.0.3"))
    assert (tmp_path / "c/group_vars/head.yml").read_text() == "---\n# The head is also a GPU node.\n"


def test_an_empty_directory_is_used(tmp_path):
    (tmp_path / "c").mkdir()
    assert len(scaffold.init(tmp_path / "c", request())) == 4


@pytest.mark.parametrize(
    ("changes", "message", "fix"),
    [
        ({"nodes": " , "}, "--nodes names 0 hosts", f"give 1 to {values.MAX_HOSTS:,} GPU nodes, comma separated"),
        ({"nodes": ",".join(f"n{i}" for i in range(values.MAX_HOSTS + 1))}, f"--nodes names {values.MAX_HOSTS + 1} hosts", None),
    ],
)
def test_a_node_count_out_of_range_is_refused_before_anything_is_written(tmp_path, changes, message, fix):
    with pytest.raises(UsageError) as refused:
        scaffold.init(tmp_path / "c", request(**changes))
    assert refused.value.message == message
    assert fix is None or refused.value.hint == fix
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"user": "bad user"}, "--user"),
        ({"shared_dir": "shared"}, "--shared-dir"),
        ({"head": "a b=10.0.0.1"}, "--head"),
        ({"head": "ctl=not an address"}, "--head"),
        ({"nodes": "10.0.0.2,bad name"}, "--nodes"),
    ],
)
def test_a_bad_value_is_refused_by_its_flag_before_anything_is_written(tmp_path, changes, field):
    with pytest.raises(UsageError) as refused:
        scaffold.init(tmp_path / "c", request(**changes))
    assert str(refused.value).startswith(field)
    assert not (tmp_path / "c").exists()


def test_a_directory_in_use_or_without_its_parent_is_refused(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    (tmp_path / "file").write_text("")
    for target in (tmp_path / "full", tmp_path / "file"):
        with pytest.raises(UsageError) as refused:
            scaffold.init(target, request())
        assert (refused.value.message, refused.value.hint) == (
            f"--dir {target} exists and is not empty",
            "give a new directory (init never writes over an inventory)",
        )
    with pytest.raises(UsageError) as refused:
        scaffold.init(tmp_path / "no" / "c", request())
    assert (refused.value.message, refused.value.hint) == (
        f"--dir {tmp_path / 'no' / 'c'}: {tmp_path / 'no'} does not exist",
        "create the parent directory first",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "full"]


def test_an_inventory_that_does_not_read_back_is_taken_back_whole(tmp_path):
    target = tmp_path / "c"
    with pytest.raises(UsageError) as refused:
        scaffold.init(target, request(nodes="gpu[04:02]"))
    assert "empty host range in 'gpu[04:02]'" in refused.value.message
    assert list(target.iterdir()) == []  # the directory stays, empty: init can be run again into it
    assert len(scaffold.init(target, request())) == 4


def test_the_summary_of_a_written_inventory_says_its_settings_and_what_is_unset(tmp_path):
    from megaprov.cluster import inventory as inv

    scaffold.init(tmp_path / "c", request(gpu=None, gpus_per_node=0, nodes="gpu01=10.0.0.2,gpu02=10.0.0.3"))
    found = scaffold.summary(inv.load(tmp_path / "c" / "inventory.ini", *scaffold.sources()))
    assert found["inventory"] == str(tmp_path / "c" / "inventory.ini")
    assert (found["contacted"], found["head"], found["gpu_nodes"], found["hosts"]) == (False, "head01", ["gpu01", "gpu02"], 3)
    assert found["groups"]["gpu_nodes"] == 2 and found["groups"]["head"] == 1
    assert found["settings"]["megaprov_gpus_per_node"] == 0 and found["settings"]["megaprov_gpu_model"] == ""
    assert found["settings"]["megaprov_shared_dir"] == "/shared" and found["settings"]["infiniband_required"] is True
    assert found["notes"] == [
        "megaprov_gpu_model is unset: `plan` and `train` need it (or --gpu); set it in group_vars/gpu_nodes.yml",
        "megaprov_gpus_per_node is 0 (any): preflight then accepts a node that lost a GPU",
    ]


def test_the_sources_are_the_roles_and_the_cluster_defaults():
    collection = ROOT / "ansible_collections" / "megaprov" / "cluster"
    assert scaffold.sources() == (collection / "roles", collection / "roles" / "megaprov" / "defaults" / "main.yml")


def test_ten_thousand_nodes_pass_the_flag_and_the_head_makes_one_host_too_many_for_the_inventory(tmp_path):
    """--nodes takes up to MAX_HOSTS entries; with the head that is one more host than an inventory may hold, which
    the read-back refuses (and init takes its files back)."""
    nodes = ",".join(f"n{i}" for i in range(values.MAX_HOSTS))
    with pytest.raises(UsageError) as refused:
        scaffold.init(tmp_path / "c", request(nodes=nodes))
    assert refused.value.message == f"{tmp_path / 'c' / 'inventory.ini'}:{values.MAX_HOSTS + 10}: more than 10,000 hosts"
    assert list((tmp_path / "c").iterdir()) == []


def test_addresses_are_written_as_the_inventory_reads_them_a_zone_included(tmp_path):
    scaffold.init(tmp_path / "c", request(head="fe80::1%eth0", nodes="FD00::2,::ffff:10.0.0.7"))
    text = (tmp_path / "c/inventory.ini").read_text()
    assert text.split("[head]\n")[1].split("\n")[0] == "head01 ansible_host=fe80::1%eth0"
    assert text.split("[gpu_nodes]\n")[1].split("\n\n")[0] == "gpu01 ansible_host=fd00::2\ngpu02 ansible_host=::ffff:a00:7"


def test_a_name_and_address_with_a_second_equals_sign_is_refused_as_the_address(tmp_path):
    with pytest.raises(UsageError) as refused:
        scaffold.init(tmp_path / "c", request(nodes="gpu01=10.0.0.2=x"))
    assert refused.value.message == "--nodes='10.0.0.2=x' is not an IP address or host name"


def test_the_directories_are_made_0755_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        scaffold.init(tmp_path / "c", request())
    finally:
        os.umask(old)
    assert [stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "c", tmp_path / "c" / "group_vars")] == [0o755, 0o755]
    assert stat.S_IMODE((tmp_path / "c" / "inventory.ini").stat().st_mode) == 0o644


def test_the_summary_reads_the_settings_as_the_first_gpu_node_sees_them(tmp_path):
    from megaprov.cluster import inventory as inv

    scaffold.init(tmp_path / "c", request(nodes="gpu01=10.0.0.2,gpu02=10.0.0.3"))
    path = tmp_path / "c" / "inventory.ini"
    path.write_text(path.read_text().replace("gpu02 ansible_host=10.0.0.3", "gpu02 ansible_host=10.0.0.3 megaprov_gpus_per_node=4"))
    assert scaffold.summary(inv.load(path, *scaffold.sources()))["settings"]["megaprov_gpus_per_node"] == 8


def test_a_first_gpu_node_that_expects_no_gpus_is_not_told_to_set_a_model(tmp_path):
    from megaprov.cluster import inventory as inv

    scaffold.init(tmp_path / "c", request(gpu=None, nodes="gpu01=10.0.0.2"))
    (tmp_path / "c" / "host_vars").mkdir()
    (tmp_path / "c" / "host_vars" / "gpu01.yml").write_text("megaprov_gpu_expected: false\n")
    assert scaffold.summary(inv.load(tmp_path / "c" / "inventory.ini", *scaffold.sources()))["notes"] == []
