"""No HCA, no GPU: the RDMA stack is installed, NCCL is told to use sockets on the real interface, and says so."""

import json

from tests.molecule.inventory import scenario_hosts

testinfra_hosts = list(scenario_hosts().values())  # from Molecule's inventory


def test_rdma_packages(host):
    for name in ("rdma-core", "ibverbs-utils", "infiniband-diags", "perftest"):
        assert host.package(name).is_installed, name
    assert host.exists("ib_write_bw") and host.exists("ibv_devinfo")


def test_nccl_env_matches_the_real_interface(host):
    iface = host.check_output("ip -o -4 route show default").split(" dev ")[1].split()[0]
    env = host.file("/etc/megaprov/nccl.env")
    assert env.mode == 0o644 and env.user == "root"
    lines = {line.split("=", 1)[0]: line.split("=", 1)[1] for line in env.content_string.splitlines() if line and not line.startswith("#")}
    assert lines == {"NCCL_SOCKET_IFNAME": iface, "GLOO_SOCKET_IFNAME": iface, "NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "WARN"}
    assert f"# no RDMA device: NCCL will use TCP sockets on {iface}" in env.content_string


def test_the_env_file_is_valid_shell(host):
    out = host.check_output("bash -c 'set -a; . /etc/megaprov/nccl.env; echo $NCCL_SOCKET_IFNAME'")
    assert out.strip()


def test_no_peermem_without_gpus(host):
    assert not host.file("/etc/modules-load.d/nvidia-peermem.conf").exists


def test_gpudirect_decision_is_recorded_for_the_nccl_role(host):
    fact = host.file("/etc/ansible/facts.d/megaprov_fabric.fact")
    assert fact.mode == 0o644 and fact.user == "root"
    recorded = json.loads(fact.content_string)
    # No GPU and no HCA here: nothing to load; a distribution stack (Debian's rdma-core) never gets nvidia-peermem.
    assert recorded["gpudirect"] == "none" and recorded["rdma_stack"] == "distribution"
    assert recorded["reason"] == "GPUDirect RDMA needs both NVIDIA GPUs and RDMA devices"
