"""Role templates rendered by Ansible's own templating (ansible-core's Templar, in this process) with the role's
defaults and vars, where the fast tiers see them: slurm.conf (partitions, the default one, nodes and their GPUs,
accounting, the health check) and the NFS exports (root_squash last, the clients' network). Molecule renders them on
a host too; a change to a template or a default that breaks them fails here in seconds."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import ROOT, load_module

ROLES = ROOT / "ansible_collections" / "megaprov" / "cluster" / "roles"


def role_vars(role: str) -> dict[str, Any]:
    """The role's defaults and vars as Ansible loads them (its loader marks them trusted: templates in them render)."""
    from ansible.parsing.dataloader import DataLoader

    found: dict[str, Any] = {}
    for part in ("defaults", "vars"):
        path = ROLES / role / part / "main.yml"
        if path.is_file():
            found.update(DataLoader().load_from_file(str(path), trusted_as_template=True) or {})
    return found


def render(role: str, template: str, **variables: Any) -> str:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    context = {**role_vars(role), "ansible_managed": "Ansible managed", **variables}
    text = (ROLES / role / "templates" / template).read_text()
    return str(Templar(loader=DataLoader(), variables=context).template(trust_as_template(text)))


def _node(name: str, gres: str = "gpu:h100:8") -> dict[str, Any]:
    shape = {"NodeName": name, "CPUs": 16, "Boards": 1, "SocketsPerBoard": 2, "CoresPerSocket": 4, "ThreadsPerCore": 2, "RealMemory": 250000}
    return {"__slurm_addr": f"10.0.0.{int(name[-1]) + 10}", "__slurm_node": {"node": shape}, "__slurm_gres": gres}


def slurm_conf(**variables: Any) -> dict[str, list[str]]:
    hostvars = {"head": {"ansible_hostname": "head", "__slurm_addr": "10.0.0.1"}, "gpu1": _node("gpu1"), "gpu2": _node("gpu2"), "gpu3": _node("gpu3")}
    hostvars["gpu3"].pop("__slurm_node")  # slurmd -C has not answered there yet: the node is left out, not half-written
    base = {
        "hostvars": hostvars,
        "slurm_controller_host": "head",
        "slurm_compute_hosts": ["gpu1", "gpu2", "gpu3"],
        "slurm_cluster_name": "megaprov",
    }
    text = render("slurm", "slurm.conf.j2", **{**base, **variables})
    keys: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            keys.setdefault(key, []).append(value)
    return keys


def test_the_default_slurm_conf_has_one_default_partition_of_every_node_that_answered():
    conf = slurm_conf()
    assert conf["ClusterName"] == ["megaprov"] and conf["SlurmctldHost"] == ["head(10.0.0.1)"]
    assert conf["PartitionName"] == ["gpu Nodes=gpu1,gpu2 Default=YES MaxTime=INFINITE State=UP"]
    nodes = conf["NodeName"]
    assert [n.split()[0] for n in nodes] == ["gpu1", "gpu2"]
    assert all("Gres=gpu:h100:8" in n and "RealMemory=250000" in n and n.endswith("State=UNKNOWN") for n in nodes)
    assert conf["GresTypes"] == ["gpu"] and conf["SelectType"] == ["select/cons_tres"]
    assert conf["JobRequeue"] == ["1"] and conf["AccountingStorageType"] == ["accounting_storage/none"]
    assert conf["HealthCheckInterval"] == [str(role_vars("slurm")["slurm_health_check_interval"])]
    assert conf["SlurmdTimeout"] == ["300"] and conf["ReturnToService"] == ["2"]  # Slurm's default; a returning node comes back
    assert slurm_conf(slurm_slurmd_timeout=30)["SlurmdTimeout"] == ["30"]  # the lab's: a lost node's job continues sooner


def test_partitions_as_the_inventory_gives_them_and_only_the_marked_one_default():
    partitions = [
        {"name": "debug", "nodes": ["gpu1"], "max_time": "01:00:00"},
        {"name": "batch", "default": True},
        {"name": "long", "nodes": ["gpu2"], "default": False, "max_time": "7-00:00:00"},
    ]
    conf = slurm_conf(slurm_partitions=partitions)
    assert conf["PartitionName"] == [
        "debug Nodes=gpu1 Default=NO MaxTime=01:00:00 State=UP",
        "batch Nodes=gpu1,gpu2 Default=YES MaxTime=INFINITE State=UP",
        "long Nodes=gpu2 Default=NO MaxTime=7-00:00:00 State=UP",
    ]


def test_a_node_without_gpus_has_no_gres_and_accounting_and_the_health_check_follow_their_switches():
    conf = slurm_conf(slurm_accounting=True, slurm_health_check_interval=0)
    assert conf["AccountingStorageType"] == ["accounting_storage/slurmdbd"] and conf["AccountingStorageHost"] == ["127.0.0.1"]
    assert "HealthCheckProgram" not in conf and "HealthCheckInterval" not in conf
    hostvars = {"head": {"ansible_hostname": "head", "__slurm_addr": "10.0.0.1"}, "gpu1": _node("gpu1", gres="")}
    cpu_only = slurm_conf(hostvars=hostvars, slurm_compute_hosts=["gpu1"])
    assert cpu_only["NodeName"] == [
        "gpu1 NodeAddr=10.0.0.11 CPUs=16 Boards=1 SocketsPerBoard=2 CoresPerSocket=4 ThreadsPerCore=2 RealMemory=250000 State=UNKNOWN"
    ]


def test_the_slurm_profile_sets_the_process_tracking_of_its_target():
    profiles = role_vars("slurm")["__slurm_profiles"]
    assert set(profiles) >= {"metal"}
    for name, settings in profiles.items():
        conf = slurm_conf(slurm_profile=name)
        assert {k: conf[k] for k in settings} == {k: [str(v)] for k, v in settings.items()}, name
    assert slurm_conf()["ProctrackType"] == ["proctrack/cgroup"]  # the default (metal): jobs are contained


def exports(**variables: Any) -> str:
    network = load_module(ROOT / "ansible_collections/megaprov/cluster/plugins/filter/nfs_network.py", "nfs_network_templates")
    given = {**role_vars("nfs_server"), **variables}
    cidr = given.get("nfs_server_clients_cidr") or network.nfs_supernet(given.get("nfs_server_client_addresses", []))
    text = render("nfs_server", "exports.j2", megaprov_shared_dir="/shared", __nfs_server_cidr=cidr, **variables)
    return "\n".join(line for line in text.splitlines() if line and not line.startswith("#"))


@pytest.mark.parametrize(
    ("variables", "line"),
    [
        ({"nfs_server_client_addresses": ["10.0.0.2", "10.0.0.3"]}, "/shared 10.0.0.2/31(rw,sync,no_subtree_check,root_squash)"),
        ({"nfs_server_client_addresses": ["10.0.0.2", "10.0.1.9"]}, "/shared 10.0.0.0/23(rw,sync,no_subtree_check,root_squash)"),
        (
            {"nfs_server_clients_cidr": "10.0.0.0/16", "nfs_server_export_dir": "/srv/export"},
            "/srv/export 10.0.0.0/16(rw,sync,no_subtree_check,root_squash)",
        ),
        # squash comes last, so an option list that says otherwise does not win (exportfs takes the last of a pair)
        (
            {"nfs_server_clients_cidr": "10.0.0.0/24", "nfs_server_kernel_options": "rw,async,no_root_squash"},
            "/shared 10.0.0.0/24(rw,async,no_root_squash,root_squash)",
        ),
        ({"nfs_server_clients_cidr": "10.0.0.0/24", "nfs_server_squash": "all_squash"}, "/shared 10.0.0.0/24(rw,sync,no_subtree_check,all_squash)"),
    ],
)
def test_the_export_is_the_shared_directory_to_the_clients_network_root_squashed(variables, line):
    assert exports(**variables) == line
    assert re.fullmatch(r"/\S+ \d+\.\d+\.\d+\.\d+/\d+\([a-z_,=0-9]+\)", line)


def test_root_squash_is_the_default():
    assert role_vars("nfs_server")["nfs_server_squash"] == "root_squash"
    assert exports(nfs_server_clients_cidr="10.0.0.0/24").endswith(",root_squash)")
