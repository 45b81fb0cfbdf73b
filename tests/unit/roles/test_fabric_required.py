"""A GPU node with RDMA devices but no ACTIVE port got NCCL_IB_DISABLE=1 and the fabric stage passed, so
training ran over TCP sockets, silently. The fabric stage now fails there, in one line naming the node, its HCAs and
their port states and the fix, unless the inventory says sockets are intended (infiniband_required: false); a node
without RDMA devices (the lab, CPU nodes, Ethernet-only sites) is never failed for it."""

import pytest
import yaml

from ansible_collections.megaprov.cluster.tests.unit.plugins.modules.rdma_sysfs import fake_port, gpu, rdma, run_module, tree_args
from tests.conftest import ROOT

ROLE = ROOT / "ansible_collections" / "megaprov" / "cluster" / "roles" / "infiniband"


@pytest.fixture
def no_ofed_info(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))


@pytest.fixture
def node(monkeypatch):
    monkeypatch.setattr("platform.node", lambda: "gpu7")


def dead_ports_gpu_node(root):
    gpu(root, ["0000:00:01.0", "0000:03:00.0"])
    gpu(root, ["0000:00:02.0", "0000:13:00.0"], numa=1)
    fake_port(root, "mlx5_0", 1, "1: DOWN", "10 Gb/sec (4X SDR)", "InfiniBand")
    fake_port(root, "mlx5_1", 1, "2: INIT", "400 Gb/sec (4X NDR)", "InfiniBand")


def test_a_gpu_node_whose_hcas_have_no_active_port_fails_in_one_line(tmp_path, capsys, no_ofed_info, node):
    dead_ports_gpu_node(tmp_path)
    rc, result = run_module(tree_args(tmp_path, required=True), capsys)
    assert rc == 1
    assert result["msg"] == (
        "gpu7: 2 GPU(s) and RDMA device(s) mlx5_0, mlx5_1 but no ACTIVE port (mlx5_0:1 DOWN, mlx5_1:1 INIT): NCCL would use TCP sockets; "
        "bring a port up (cabling, switch, a subnet manager for InfiniBand: ibstat shows the state) "
        "or set infiniband_required: false for this node if sockets are intended"
    )


def test_infiniband_required_false_uses_sockets_knowingly(tmp_path, capsys, no_ofed_info, node):
    dead_ports_gpu_node(tmp_path)
    rc, result = run_module(tree_args(tmp_path, required=False), capsys)
    assert rc == 0 and result["nccl_env"]["NCCL_IB_DISABLE"] == "1"
    assert result["summary"].startswith("RDMA devices present but no port is ACTIVE (mlx5_0:1 DOWN, mlx5_1:1 INIT)")


def test_nodes_without_rdma_devices_or_gpus_and_nodes_with_an_active_port_pass(tmp_path, capsys, no_ofed_info, node):
    gpu(tmp_path / "no-hca", ["0000:00:01.0", "0000:03:00.0"])  # the lab, an Ethernet-only site: sockets, never failed
    rc, result = run_module(tree_args(tmp_path / "no-hca", required=True), capsys)
    assert rc == 0 and result["summary"] == "no RDMA device: NCCL will use TCP sockets on ens1f0"
    fake_port(tmp_path / "cpu", "mlx5_0", 1, "1: DOWN", "10", "InfiniBand")  # no GPU: NCCL is not the fabric's user
    assert run_module(tree_args(tmp_path / "cpu", required=True), capsys)[0] == 0
    dead_ports_gpu_node(tmp_path / "one-up")
    fake_port(tmp_path / "one-up", "mlx5_2", 1, "4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand")
    rc, result = run_module(tree_args(tmp_path / "one-up", required=True), capsys)
    assert rc == 0 and result["nccl_env"]["NCCL_IB_HCA"] == "=mlx5_2:1"


def test_the_rule_in_full():
    port = {"device": "mlx5_0", "port": 1, "state": "DOWN"}
    assert rdma.no_active_port_error([], 8, "n") == ""
    assert rdma.no_active_port_error([port], 0, "n") == ""
    assert rdma.no_active_port_error([port, {**port, "port": 2, "state": "ACTIVE"}], 8, "n") == ""
    assert rdma.no_active_port_error([port], 8, "n").startswith("n: 8 GPU(s) and RDMA device(s) mlx5_0 but no ACTIVE port (mlx5_0:1 DOWN)")


def test_the_role_passes_infiniband_required_and_defaults_it_to_true():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["infiniband_required"] is True
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    detect = next(t for t in tasks if t["name"] == "Detect RDMA devices and GPUs")
    assert detect["megaprov.cluster.rdma_facts"]["required"] == "{{ infiniband_required | bool }}"
    # megaprov doctor reads the ports and reports: it does not fail a node for them
    doctor = yaml.safe_load((ROLE / "tasks" / "doctor.yml").read_text())
    assert "required" not in doctor[0]["megaprov.cluster.rdma_facts"]
