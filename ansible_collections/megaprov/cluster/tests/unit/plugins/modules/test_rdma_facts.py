"""The infiniband role's detection on fake sysfs trees: which ports NCCL gets (exact list, compute fabric only),
RoCE GIDs, GPUDirect RDMA (nvidia-peermem only with MLNX/DOCA OFED, DMA-BUF elsewhere), and ib_write_bw's argv."""

import os
from pathlib import Path

import pytest
import yaml

from ansible_collections.megaprov.cluster.plugins.modules import ib_write_bw as bw
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules.rdma_sysfs import (
    COLLECTION,
    fake_port,
    gpu,
    pci_device,
    rdma,
    run_module,
    sysfs,
    tree_args,
)


def hgx_like(root: Path) -> None:
    """Two GPUs, each with a compute HCA on its PCIe switch; a storage HCA and a front-end NIC on other root ports.
    Names chosen so prefix matching bites: mlx5_1 is a prefix of mlx5_10."""
    gpu(root, ["0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"])
    gpu(root, ["0000:00:02.0", "0000:11:00.0", "0000:12:00.0", "0000:13:00.0"], numa=1)
    pci_device(root, ["0000:00:04.0", "0000:41:00.0"], numa=0, vendor="0x10de", klass="0x068000")  # NVSwitch: not a GPU
    ib = "400 Gb/sec (4X NDR)"
    fake_port(root, "mlx5_0", 1, "4: ACTIVE", ib, "InfiniBand", pci_device(root, ["0000:00:01.0", "0000:01:00.0", "0000:02:01.0", "0000:04:00.0"]))
    fake_port(
        root, "mlx5_1", 1, "4: ACTIVE", ib, "InfiniBand", pci_device(root, ["0000:00:02.0", "0000:11:00.0", "0000:12:01.0", "0000:14:00.0"], numa=1)
    )
    fake_port(root, "mlx5_10", 1, "4: ACTIVE", "200 Gb/sec (4X HDR)", "InfiniBand", pci_device(root, ["0000:00:03.0", "0000:21:00.0"]))  # storage
    fake_port(root, "mlx5_11", 1, "4: ACTIVE", "100 Gb/sec", "Ethernet", pci_device(root, ["0000:00:05.0", "0000:31:00.0"], numa=1))  # front end


def test_only_the_ports_on_the_gpus_pcie_switches_as_an_exact_list(tmp_path):
    hgx_like(tmp_path)
    found = rdma.ports(sysfs(tmp_path))
    gpus = rdma.gpus(str(tmp_path / "bus" / "pci" / "devices"))
    assert [g["address"] for g in gpus] == ["0000:03:00.0", "0000:13:00.0"]
    env, summary, error = rdma.nccl_env(found, "ens1f0", -1, {}, gpus, [])
    assert error == ""
    # '=': exact names. A bare "mlx5_0:1,mlx5_1:1" would be prefixes, and mlx5_1 would also select mlx5_10 (storage).
    assert env == {"NCCL_SOCKET_IFNAME": "ens1f0", "GLOO_SOCKET_IFNAME": "ens1f0", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"}
    assert "2 of 4 active port(s) for NCCL (InfiniBand; ports on the GPUs' PCIe switches): mlx5_0:1,mlx5_1:1" in summary
    assert "not for NCCL: mlx5_10:1,mlx5_11:1" in summary


def test_same_numa_node_when_no_port_shares_a_switch(tmp_path):
    gpu(tmp_path, ["0000:00:01.0", "0000:01:00.0"], numa=1)
    fake_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "400", "InfiniBand", pci_device(tmp_path, ["0000:00:02.0", "0000:02:00.0"], numa=0))
    fake_port(tmp_path, "mlx5_1", 1, "4: ACTIVE", "400", "InfiniBand", pci_device(tmp_path, ["0000:00:03.0", "0000:03:00.0"], numa=1))
    env, summary, dummy = rdma.nccl_env(rdma.ports(sysfs(tmp_path)), "eth0", -1, {}, rdma.gpus(str(tmp_path / "bus" / "pci" / "devices")))
    assert env["NCCL_IB_HCA"] == "=mlx5_1:1" and "NUMA" in summary


def test_inventory_list_of_compute_hcas_wins(tmp_path):
    hgx_like(tmp_path)
    found = rdma.ports(sysfs(tmp_path))
    env, summary, error = rdma.nccl_env(found, "eth0", -1, {}, [], ["mlx5_1:1", "mlx5_0"])
    assert env["NCCL_IB_HCA"] == "=mlx5_1:1,mlx5_0:1" and "(InfiniBand; infiniband_nccl_hcas)" in summary and error == ""


def test_inventory_list_naming_a_missing_port_is_a_one_line_error(tmp_path):
    hgx_like(tmp_path)
    dummy, dummy, error = rdma.nccl_env(rdma.ports(sysfs(tmp_path)), "eth0", -1, {}, [], ["mlx5_7:1"])
    assert error == (
        "infiniband_nccl_hcas names mlx5_7:1, which is not an active RDMA port here "
        "(active: mlx5_0:1, mlx5_1:1, mlx5_10:1, mlx5_11:1); fix the list or the port"
    )


def test_no_gpu_on_the_bus_takes_every_active_port(tmp_path):
    fake_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand")
    fake_port(tmp_path, "mlx5_1", 1, "4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand")
    fake_port(tmp_path, "mlx5_2", 1, "1: DOWN", "10 Gb/sec (4X SDR)", "InfiniBand")
    found = rdma.ports(sysfs(tmp_path))
    assert [(p["device"], p["state"]) for p in found] == [("mlx5_0", "ACTIVE"), ("mlx5_1", "ACTIVE"), ("mlx5_2", "DOWN")]
    env, summary, dummy = rdma.nccl_env(found, "ens1f0", -1, {})
    assert env == {"NCCL_SOCKET_IFNAME": "ens1f0", "GLOO_SOCKET_IFNAME": "ens1f0", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"}
    assert summary.startswith("RDMA: 2 of 2 active port(s) for NCCL (InfiniBand; no GPU on the PCI bus: every active port): mlx5_0:1,mlx5_1:1")


def roce_port(root: Path, dev: str = "mlx5_bond_0") -> Path:
    d = fake_port(root, dev, 1, "4: ACTIVE", "200 Gb/sec (4X HDR)", "Ethernet")
    gids = {
        0: ("fe80:0000:0000:0000:0e42:a1ff:fe00:0001", "IB/RoCE v1"),
        1: ("fe80:0000:0000:0000:0e42:a1ff:fe00:0001", "RoCE v2"),
        2: ("0000:0000:0000:0000:0000:ffff:0a00:0005", "IB/RoCE v1"),
        3: ("0000:0000:0000:0000:0000:ffff:0a00:0005", "RoCE v2"),
    }
    (d / "gids").mkdir()
    (d / "gid_attrs" / "types").mkdir(parents=True)
    for index, (gid, kind) in gids.items():
        (d / "gids" / str(index)).write_text(gid + "\n")
        (d / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
    return d


def test_roce_leaves_the_gid_index_to_nccl(tmp_path):
    roce_port(tmp_path)
    env, summary, dummy = rdma.nccl_env(rdma.ports(sysfs(tmp_path)), "bond0", -1, {"NCCL_IB_QPS_PER_CONNECTION": 4})
    # NCCL 2.21+ picks the RoCE v2 GID itself (NCCL_IB_GID_INDEX defaults to -1); a forced 3 is wrong on many fabrics.
    assert "NCCL_IB_GID_INDEX" not in env and env["NCCL_IB_HCA"] == "=mlx5_bond_0:1"
    assert env["NCCL_IB_QPS_PER_CONNECTION"] == "4"
    assert "(RoCE;" in summary


def test_roce_gid_index_when_the_inventory_forces_one(tmp_path):
    roce_port(tmp_path)
    env, dummy, dummy = rdma.nccl_env(rdma.ports(sysfs(tmp_path)), "bond0", 5, {})
    assert env["NCCL_IB_GID_INDEX"] == "5"


def test_roce_v2_ipv4_gid_for_ib_write_bw(tmp_path):
    roce_port(tmp_path)
    assert rdma.ports(sysfs(tmp_path))[0]["roce_v2_gid_index"] == 3


def test_devices_with_no_active_port_fall_back_to_sockets_and_say_so(tmp_path):
    fake_port(tmp_path, "mlx5_0", 1, "1: DOWN", "10 Gb/sec", "InfiniBand")
    env, summary, dummy = rdma.nccl_env(rdma.ports(sysfs(tmp_path)), "eth0", -1, {})
    assert env["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_HCA" not in env
    assert summary == "RDMA devices present but no port is ACTIVE (mlx5_0:1 DOWN): NCCL will use TCP sockets on eth0"


def test_no_device(tmp_path):
    env, summary, dummy = rdma.nccl_env(rdma.ports(str(tmp_path / "absent")), "eth0", -1, {})
    assert env == {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1"}
    assert summary == "no RDMA device: NCCL will use TCP sockets on eth0"


# GPUDirect RDMA: nvidia-peermem needs the peer-memory API of MLNX/DOCA OFED's ib_core; Debian 12's own rdma-core
# stack has none (modprobe nvidia-peermem fails). DMA-BUF needs the open kernel modules and Linux 5.12+.
OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build"
PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Release Build"


def test_distribution_stack_with_open_modules_uses_dmabuf_not_peermem():
    plan = rdma.gpudirect(8, 4, "distribution", rdma.open_kernel_modules(OPEN), "6.1.0-28-amd64", "auto")
    assert plan["method"] == "dmabuf" and plan["peermem"] is False
    assert "DMA-BUF (open kernel modules, kernel 6.1.0-28-amd64)" in plan["reason"] and "no peer-memory API" in plan["reason"]


def test_distribution_stack_without_dmabuf_says_gpudirect_is_unavailable():
    plan = rdma.gpudirect(8, 4, "distribution", rdma.open_kernel_modules(PROPRIETARY), "6.1.0-28-amd64", "auto")
    assert plan["method"] == "none" and plan["peermem"] is False
    assert "proprietary kernel modules" in plan["reason"] and "DOCA-OFED" in plan["reason"]
    old_kernel = rdma.gpudirect(8, 4, "distribution", True, "5.10.0-30-amd64", "auto")
    assert old_kernel["method"] == "none" and "older than 5.12" in old_kernel["reason"]


@pytest.mark.parametrize("modules", [OPEN, PROPRIETARY])
def test_mlnx_or_doca_ofed_loads_peermem(modules):
    plan = rdma.gpudirect(8, 4, "mlnx_ofed", rdma.open_kernel_modules(modules), "5.15.0-126-generic", "auto")
    assert plan["method"] == "peermem" and plan["peermem"] is True


def test_peermem_switches():
    assert rdma.gpudirect(8, 4, "distribution", False, "6.1.0", "always")["peermem"] is True
    assert rdma.gpudirect(8, 4, "mlnx_ofed", True, "6.1.0", "never") == {
        "method": "dmabuf",
        "peermem": False,
        "reason": "infiniband_peermem=never; DMA-BUF (open kernel modules, kernel 6.1.0)",
    }
    assert rdma.gpudirect(0, 4, "mlnx_ofed", True, "6.1.0", "auto")["method"] == "none"
    assert rdma.gpudirect(8, 0, "mlnx_ofed", True, "6.1.0", "always")["peermem"] is False


def test_rdma_stack_detection(tmp_path):
    modules, peers = tmp_path / "module", tmp_path / "memory_peers"
    modules.mkdir()
    assert rdma.rdma_stack(str(modules), str(peers), None) == "distribution"
    assert rdma.rdma_stack(str(modules), str(peers), "/usr/bin/ofed_info") == "mlnx_ofed"
    (modules / "mlx_compat").mkdir()
    assert rdma.rdma_stack(str(modules), str(peers), None) == "mlnx_ofed"
    assert rdma.open_kernel_modules("") is None


# perftest's result table (ib_write_bw -D 5 -F --report_gbits), as printed by the client.
IB_WRITE_BW_OUTPUT = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : mlx5_0
 Number of qps   : 1            Transport type : IB
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      3741120          0.00               392.27               0.748204
---------------------------------------------------------------------------------------
"""


def test_ib_write_bw_average_is_parsed():
    assert bw.parse_average_gbps(IB_WRITE_BW_OUTPUT) == 392.27


def test_ib_write_bw_without_a_table():
    assert bw.parse_average_gbps(" Couldn't connect to 10.0.0.2:18515\n") is None


def test_ib_write_bw_on_roce_names_the_gid():
    assert bw.argv("mlx5_bond_0", 18515, 5, 3, "10.0.0.2") == [
        "ib_write_bw", "-d", "mlx5_bond_0", "-i", "1", "-p", "18515", "-D", "5", "-F", "--report_gbits", "-x", "3", "10.0.0.2",
    ]  # fmt: skip
    assert bw.argv("mlx5_0", 18515, 5, None, None, 2) == ["ib_write_bw", "-d", "mlx5_0", "-i", "2", "-p", "18515", "-D", "5", "-F", "--report_gbits"]


IB_ROLE = COLLECTION / "roles" / "infiniband"


def test_doca_path_installs_its_prerequisites_first_and_restarts_openibd_without_a_reboot():
    """deb822_repository imports python3-debian on the node; DOCA's modules are DKMS builds for the running kernel;
    the new modules go live by restarting openibd, not by rebooting."""
    defaults = yaml.safe_load((IB_ROLE / "defaults" / "main.yml").read_text())
    assert set(defaults["infiniband_ofed_prerequisites"]) == {"linux-headers-{{ ansible_kernel | default('unknown-kernel') }}", "python3-debian"}
    tasks = yaml.safe_load((IB_ROLE / "tasks" / "install.yml").read_text())
    modules = [next(k for k in t if k.startswith(("ansible.builtin.", "megaprov.cluster."))) for t in tasks]
    repo = modules.index("ansible.builtin.deb822_repository")
    prereq = next(i for i, t in enumerate(tasks) if t.get("megaprov.cluster.apt", {}).get("name") == "{{ infiniband_ofed_prerequisites }}")
    assert prereq < repo
    packages = next(t for t in tasks if t["name"] == "Install the RDMA packages")
    assert packages["notify"] == "Restart openibd"
    assert modules[-1] == "ansible.builtin.meta" and tasks[-1]["ansible.builtin.meta"] == "flush_handlers"
    handlers = {h["name"]: h for h in yaml.safe_load((IB_ROLE / "handlers" / "main.yml").read_text())}
    assert "systemctl restart openibd" in handlers["Restart openibd"]["ansible.builtin.shell"]["cmd"]
    everything = "".join(p.read_text() for p in IB_ROLE.rglob("*.yml"))
    assert "ansible.builtin.reboot" not in everything


# Smaller pieces, with values read off the kernel's sysfs layout.


def test_pci_chain_is_the_pci_addresses_below_the_host_bridge(tmp_path):
    nic = pci_device(tmp_path, ["0000:00:01.0", "0000:01:00.0", "0000:04:00.0"])
    (nic / "infiniband" / "mlx5_0").mkdir(parents=True)
    assert rdma.pci_chain(str(tmp_path / "bus" / "pci" / "devices" / "0000:04:00.0")) == ["0000:00:01.0", "0000:01:00.0", "0000:04:00.0"]
    # a path below the device (not a PCI address) is left out; no host bridge (a virtual device): no chain
    assert rdma.pci_chain(str(nic / "infiniband" / "mlx5_0")) == ["0000:00:01.0", "0000:01:00.0", "0000:04:00.0"]
    (tmp_path / "devices" / "virtual" / "net" / "lo").mkdir(parents=True)
    assert rdma.pci_chain(str(tmp_path / "devices" / "virtual" / "net" / "lo")) == []


def test_ports_in_numeric_order_with_defaults_for_missing_files(tmp_path):
    for port in (10, 2, 1):
        fake_port(tmp_path, "hfi1_0", port, "4: ACTIVE", "100 Gb/sec (4X EDR)", "InfiniBand")
    bare = tmp_path / "class" / "infiniband" / "mlx5_9" / "ports" / "1"
    bare.mkdir(parents=True)  # a port whose attributes cannot be read
    (tmp_path / "class" / "infiniband" / "bnxt_re0").mkdir()  # a device without ports/ (listed before the others)
    found = rdma.ports(sysfs(tmp_path))
    assert [(p["device"], p["port"]) for p in found] == [("hfi1_0", 1), ("hfi1_0", 2), ("hfi1_0", 10), ("mlx5_9", 1)]
    assert found[3] == {
        "device": "mlx5_9",
        "port": 1,
        "state": "UNKNOWN",
        "rate": "",
        "link_layer": "InfiniBand",
        "pci": [],
        "numa_node": "-1",
        "roce_v2_gid_index": None,
    }
    assert found[0]["state"] == "ACTIVE" and found[0]["rate"] == "100 Gb/sec (4X EDR)"


def test_roce_v2_gid_index_in_numeric_order_and_only_ipv4_mapped(tmp_path):
    port = fake_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "200", "Ethernet")
    (port / "gids").mkdir()
    (port / "gid_attrs" / "types").mkdir(parents=True)
    for index, gid, kind in [
        (0, "fe80:0000:0000:0000:0e42:a1ff:fe00:0001", "RoCE v2"),  # link-local IPv6
        (2, "0000:0000:0000:0000:0000:FFFF:0A00:0006", "RoCE V2"),  # sysfs case varies
        (10, "0000:0000:0000:0000:0000:ffff:0a00:0005", "RoCE v2"),
        (3, "0000:0000:0000:0000:0000:ffff:0a00:0005", "IB/RoCE v1"),
    ]:
        (port / "gids" / str(index)).write_text(gid + "\n")
        (port / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
    assert rdma.roce_v2_gid_index(str(port)) == 2
    (port / "gids" / "2").write_text("0000:0000:0000:0000:0000:0000:0000:0000\n")  # unused slot
    assert rdma.roce_v2_gid_index(str(port)) == 10
    assert rdma.roce_v2_gid_index(str(tmp_path)) is None


def test_gpus_skip_other_devices_and_default_the_numa_node(tmp_path):
    gpu(tmp_path, ["0000:00:01.0", "0000:03:00.0"], numa=1)
    pci_device(tmp_path, ["0000:00:02.0", "0000:05:00.0"], vendor="0x10de", klass="0x040300")  # NVIDIA audio function
    pci_device(tmp_path, ["0000:00:03.0", "0000:06:00.0"], vendor="0x1002", klass="0x030200")  # another vendor's GPU
    vga = pci_device(tmp_path, ["0000:00:04.0", "0000:07:00.0"], vendor="0x10de", klass="0x030000")
    (vga / "numa_node").unlink()
    assert rdma.gpus(str(tmp_path / "bus" / "pci" / "devices")) == [
        {"address": "0000:03:00.0", "pci": ["0000:00:01.0", "0000:03:00.0"], "numa_node": "1"},
        {"address": "0000:07:00.0", "pci": ["0000:00:04.0", "0000:07:00.0"], "numa_node": "-1"},
    ]
    assert rdma.gpus(str(tmp_path / "absent")) == []


def port_row(device: str, pci: list[str], numa: str = "0", layer: str = "InfiniBand", state: str = "ACTIVE", port: int = 1) -> dict:
    return {"device": device, "port": port, "state": state, "link_layer": layer, "pci": pci, "numa_node": numa}


def test_compute_ports_by_switch_then_numa_then_all():
    a = port_row("mlx5_0", ["0000:00:01.0", "0000:02:00.0"], "0")
    b = port_row("mlx5_1", ["0000:00:02.0", "0000:03:00.0"], "1")
    on_switch = [{"pci": ["0000:00:01.0", "0000:04:00.0"], "numa_node": "1"}]
    assert rdma.compute_ports([a, b], on_switch) == ([a], "ports on the GPUs' PCIe switches")
    numa_only = [{"pci": ["0000:00:09.0", "0000:09:00.0"], "numa_node": "1"}]
    assert rdma.compute_ports([a, b], numa_only) == ([b], "ports on the GPUs' NUMA nodes (none shares a PCIe switch with a GPU)")
    # a GPU and ports whose chains are unknown (no host bridge) share nothing; NUMA -1 means unknown, not a node
    unknown = [{"pci": [], "numa_node": "-1"}]
    c = port_row("mlx5_2", [], "-1")
    assert rdma.compute_ports([c], unknown) == ([c], "every active port (no port shares a PCIe switch or NUMA node with a GPU)")
    assert rdma.compute_ports([a], [{"pci": [], "numa_node": ""}]) == (
        [a],
        "every active port (no port shares a PCIe switch or NUMA node with a GPU)",
    )


def test_a_named_device_selects_its_active_ports_once():
    p1, p2 = port_row("mlx5_0", [], port=1), port_row("mlx5_0", [], port=2)
    down = port_row("mlx5_1", [], state="DOWN")
    assert rdma.select_ports([p1, p2, down], [], ["mlx5_0:2", "mlx5_0"]) == ([p2, p1], "infiniband_nccl_hcas", "")
    dummy, dummy, error = rdma.select_ports([p1, p2, down], [], ["mlx5_1"])
    assert error == "infiniband_nccl_hcas names mlx5_1, which is not an active RDMA port here (active: mlx5_0:1, mlx5_0:2); fix the list or the port"
    dummy, dummy, error = rdma.select_ports([down], [], ["mlx5_1:1"])
    assert error.endswith("(active: none); fix the list or the port")


@pytest.mark.parametrize(
    ("release", "ok"),
    [("5.12.0", True), ("5.11.22-100.fc32.x86_64", False), ("6.1.0-28-amd64", True), ("4.18.0-553.el8_10.x86_64", False), ("", False), ("6", False)],
)
def test_kernel_at_least_5_12(release, ok):
    assert rdma.kernel_at_least(release, (5, 12)) is ok


def test_memory_peers_mean_mlnx_ofed(tmp_path):
    (tmp_path / "memory_peers").mkdir()
    assert rdma.rdma_stack(str(tmp_path / "module"), str(tmp_path / "memory_peers"), None) == "mlnx_ofed"


def test_gpudirect_reasons_in_full():
    assert rdma.gpudirect(8, 0, "mlnx_ofed", True, "6.1.0", "auto") == {
        "method": "none",
        "peermem": False,
        "reason": "GPUDirect RDMA needs both NVIDIA GPUs and RDMA devices",
    }
    assert rdma.gpudirect(8, 4, "distribution", None, "6.1.0-28-amd64", "auto") == {
        "method": "none",
        "peermem": False,
        "reason": "GPUDirect RDMA unavailable: no DMA-BUF (no NVIDIA driver loaded), and the distribution's RDMA stack has no "
        "peer-memory API for nvidia-peermem; NCCL stages through host memory (use the open kernel modules on Linux 5.12+, or DOCA-OFED)",
    }
    assert rdma.gpudirect(8, 4, "distribution", True, "6.1.0-28-amd64", "auto") == {
        "method": "dmabuf",
        "peermem": False,
        "reason": "DMA-BUF (open kernel modules, kernel 6.1.0-28-amd64); "
        "nvidia-peermem not loaded: the distribution's RDMA stack has no peer-memory API",
    }
    assert rdma.gpudirect(8, 4, "mlnx_ofed", False, "5.4.0-200-generic", "auto") == {
        "method": "peermem",
        "peermem": True,
        "reason": "nvidia-peermem (MLNX/DOCA OFED provides the peer-memory API); no DMA-BUF (kernel 5.4.0-200-generic is older than 5.12)",
    }
    assert rdma.gpudirect(8, 4, "distribution", False, "6.1.0", "always") == {
        "method": "peermem",
        "peermem": True,
        "reason": "nvidia-peermem (infiniband_peermem=always); no DMA-BUF (the proprietary kernel modules are loaded)",
    }
    assert rdma.gpudirect(8, 4, "mlnx_ofed", False, "6.1.0", "never") == {
        "method": "none",
        "peermem": False,
        "reason": "infiniband_peermem=never; no DMA-BUF (the proprietary kernel modules are loaded)",
    }


def test_roce_gid_index_only_with_an_ethernet_port_among_those_chosen(tmp_path):
    hgx_like(tmp_path)
    env, dummy, dummy = rdma.nccl_env(rdma.ports(sysfs(tmp_path)), "eth0", 3, {}, [], ["mlx5_0"])
    assert "NCCL_IB_GID_INDEX" not in env  # InfiniBand only: GIDs are not RoCE's
    env, summary, dummy = rdma.nccl_env(rdma.ports(sysfs(tmp_path)), "eth0", 0, {}, [], ["mlx5_0", "mlx5_11"])
    assert env["NCCL_IB_GID_INDEX"] == "0" and "(InfiniBand, RoCE; infiniband_nccl_hcas)" in summary
    assert summary == (
        "RDMA: 2 of 4 active port(s) for NCCL (InfiniBand, RoCE; infiniband_nccl_hcas): mlx5_0:1,mlx5_11:1; "
        "not for NCCL: mlx5_1:1,mlx5_10:1; sockets on eth0"
    )
    env, summary, dummy = rdma.nccl_env(rdma.ports(sysfs(tmp_path)), "eth0", -1, {}, [], ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11"])
    assert summary.endswith("mlx5_0:1,mlx5_1:1,mlx5_10:1,mlx5_11:1; sockets on eth0")  # nothing left out


def test_overrides_win_and_an_error_keeps_only_the_sockets(tmp_path):
    hgx_like(tmp_path)
    env, dummy, dummy = rdma.nccl_env(rdma.ports(sysfs(tmp_path)), "eth0", -1, {"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_IB_TIMEOUT": 22}, [], [])
    assert env["NCCL_IB_HCA"] == "=mlx5_0:1" and env["NCCL_IB_TIMEOUT"] == "22"
    env, summary, error = rdma.nccl_env(rdma.ports(sysfs(tmp_path)), "eth0", -1, {"X": 1}, [], ["mlx5_7"])
    assert (
        env == {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}
        and summary == ""
        and error.startswith("infiniband_nccl_hcas names mlx5_7")
    )


@pytest.fixture
def no_ofed_info(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))


def test_module_on_an_hgx_like_node(tmp_path, capsys, no_ofed_info):
    hgx_like(tmp_path)
    gpus_dir = tmp_path / "proc" / "driver" / "nvidia" / "gpus"
    for address in ("0000:03:00.0", "0000:13:00.0"):
        (gpus_dir / address).mkdir(parents=True)
    (tmp_path / "proc" / "driver" / "nvidia" / "version").write_text(OPEN + "\n")
    rc, result = run_module(tree_args(tmp_path), capsys)
    assert rc == 0, result
    del result["invocation"], result["ports"]
    assert result == {
        "changed": False,
        "hcas": ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11"],
        "gpus": 2,
        "gpu_pci": ["0000:03:00.0", "0000:13:00.0"],
        "nccl_env": {"NCCL_SOCKET_IFNAME": "ens1f0", "GLOO_SOCKET_IFNAME": "ens1f0", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"},
        "summary": "RDMA: 2 of 4 active port(s) for NCCL (InfiniBand; ports on the GPUs' PCIe switches): mlx5_0:1,mlx5_1:1; "
        "not for NCCL: mlx5_10:1,mlx5_11:1; sockets on ens1f0",
        "rdma_stack": "distribution",
        "gpudirect": {
            "method": "dmabuf",
            "peermem": False,
            "reason": "DMA-BUF (open kernel modules, kernel 6.1.0-28-amd64); "
            "nvidia-peermem not loaded: the distribution's RDMA stack has no peer-memory API",
        },
        "bw_port": {"device": "mlx5_0", "port": 1, "link_layer": "InfiniBand", "gid_index": None},
    }


def test_module_counts_the_driver_gpus_when_more_than_on_the_bus(tmp_path, capsys, no_ofed_info):
    """Under a container the PCI bus may be hidden while the driver lists its GPUs: the larger count wins."""
    fake_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "400", "InfiniBand")
    for i in range(4):
        (tmp_path / "proc" / "driver" / "nvidia" / "gpus" / f"0000:0{i}:00.0").mkdir(parents=True)
    rc, result = run_module(tree_args(tmp_path, ofed_wanted=True), capsys)
    assert rc == 0 and result["gpus"] == 4 and result["gpu_pci"] == [] and result["rdma_stack"] == "mlnx_ofed"
    assert result["gpudirect"]["method"] == "peermem"


def test_module_roce_bw_port_takes_the_ipv4_roce_v2_gid_or_the_forced_one(tmp_path, capsys, no_ofed_info):
    roce_port(tmp_path)
    rc, result = run_module(tree_args(tmp_path, socket_interface="bond0"), capsys)
    assert rc == 0 and result["bw_port"] == {"device": "mlx5_bond_0", "port": 1, "link_layer": "Ethernet", "gid_index": 3}
    assert result["gpus"] == 0 and result["gpudirect"]["method"] == "none"
    rc, result = run_module(tree_args(tmp_path, socket_interface="bond0", roce_gid_index=1), capsys)
    assert result["bw_port"]["gid_index"] == 1 and result["nccl_env"]["NCCL_IB_GID_INDEX"] == "1"
    rc, result = run_module(tree_args(tmp_path, socket_interface="bond0", roce_gid_index=0), capsys)
    assert result["bw_port"]["gid_index"] == 0


def test_module_bw_port_is_the_first_chosen_port_in_sysfs_order(tmp_path, capsys, no_ofed_info):
    hgx_like(tmp_path)
    rc, result = run_module(tree_args(tmp_path, compute_hcas=["mlx5_1:1", "mlx5_0:1"], overrides={"NCCL_IB_TIMEOUT": 22}), capsys)
    assert result["nccl_env"]["NCCL_IB_HCA"] == "=mlx5_1:1,mlx5_0:1" and result["nccl_env"]["NCCL_IB_TIMEOUT"] == "22"
    # the bw port is the first chosen port as sysfs lists them (the chosen set, not the inventory's order)
    assert result["bw_port"]["device"] == "mlx5_0"


def test_module_without_rdma_has_no_bw_port(tmp_path, capsys, no_ofed_info):
    rc, result = run_module(tree_args(tmp_path), capsys)
    assert rc == 0 and result["bw_port"] is None and result["hcas"] == [] and result["ports"] == []
    assert result["nccl_env"] == {"NCCL_SOCKET_IFNAME": "ens1f0", "GLOO_SOCKET_IFNAME": "ens1f0", "NCCL_IB_DISABLE": "1"}
    assert result["summary"] == "no RDMA device: NCCL will use TCP sockets on ens1f0"


def test_module_fails_on_a_wrong_inventory_list(tmp_path, capsys, no_ofed_info):
    hgx_like(tmp_path)
    rc, result = run_module(tree_args(tmp_path, compute_hcas=["mlx5_7:1"]), capsys)
    assert rc == 1 and result["msg"].startswith("infiniband_nccl_hcas names mlx5_7:1, which is not an active RDMA port here")


def test_module_finds_ofed_info_on_path_and_defaults_the_kernel(tmp_path, capsys, monkeypatch):
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "ofed_info").write_text("#!/bin/sh\necho MLNX_OFED_LINUX-24.10\n")
    (tools / "ofed_info").chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))
    real = os.uname()
    ubuntu_2004 = os.uname_result((real.sysname, real.nodename, "5.4.0-200-generic", real.version, real.machine))  # no DMA-BUF
    monkeypatch.setattr(rdma.os, "uname", lambda: ubuntu_2004)
    fake_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "400", "InfiniBand")
    gpu(tmp_path, ["0000:00:01.0", "0000:03:00.0"])
    (tmp_path / "proc" / "driver" / "nvidia").mkdir(parents=True)
    (tmp_path / "proc" / "driver" / "nvidia" / "version").write_text(OPEN + "\n")
    args = tree_args(tmp_path)
    del args["kernel"]
    rc, result = run_module(args, capsys)
    assert rc == 0 and result["rdma_stack"] == "mlnx_ofed" and result["gpus"] == 1
    assert result["gpudirect"] == {
        "method": "peermem",
        "peermem": True,
        "reason": "nvidia-peermem (MLNX/DOCA OFED provides the peer-memory API); no DMA-BUF (kernel 5.4.0-200-generic is older than 5.12)",
    }


def test_a_state_without_its_number_and_a_port_that_is_not_a_number(tmp_path):
    fake_port(tmp_path, "mlx5_0", 1, "ACTIVE", "400", "InfiniBand")
    odd = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "extra"
    odd.mkdir()
    found = rdma.ports(sysfs(tmp_path))
    assert [(p["port"], p["state"]) for p in found] == [("extra", "UNKNOWN"), (1, "ACTIVE")]


def test_an_unknown_numa_node_matches_nothing():
    port = port_row("mlx5_0", ["0000:00:02.0", "0000:02:00.0"], "")
    gpu_far = {"pci": ["0000:00:01.0", "0000:01:00.0"], "numa_node": ""}
    assert rdma.compute_ports([port], [gpu_far]) == ([port], "every active port (no port shares a PCIe switch or NUMA node with a GPU)")


def test_every_inactive_port_is_named(tmp_path):
    fake_port(tmp_path, "mlx5_0", 1, "1: DOWN", "10 Gb/sec", "InfiniBand")
    fake_port(tmp_path, "mlx5_1", 1, "2: INIT", "10 Gb/sec", "InfiniBand")
    dummy, summary, dummy = rdma.nccl_env(rdma.ports(sysfs(tmp_path)), "eth0", -1, {})
    assert summary == "RDMA devices present but no port is ACTIVE (mlx5_0:1 DOWN, mlx5_1:1 INIT): NCCL will use TCP sockets on eth0"


def test_module_with_inactive_ports_only(tmp_path, capsys, no_ofed_info):
    fake_port(tmp_path, "mlx5_0", 1, "1: DOWN", "10 Gb/sec", "InfiniBand")
    rc, result = run_module(tree_args(tmp_path), capsys)
    assert rc == 0 and result["bw_port"] is None and result["nccl_env"]["NCCL_IB_DISABLE"] == "1" and result["hcas"] == ["mlx5_0"]


def test_module_gpudirect_needs_gpus_and_hcas_and_honours_never(tmp_path, capsys, no_ofed_info):
    fake_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "400", "InfiniBand")
    rc, result = run_module(tree_args(tmp_path, ofed_wanted=True), capsys)  # RDMA, no GPU
    assert result["gpudirect"]["method"] == "none" and result["gpudirect"]["reason"] == "GPUDirect RDMA needs both NVIDIA GPUs and RDMA devices"
    rc, result = run_module(tree_args(tmp_path, ofed_wanted=True, peermem="never"), capsys)
    assert result["gpudirect"]["peermem"] is False
    gpus_only = tmp_path / "gpus-only"
    gpu(gpus_only, ["0000:00:01.0", "0000:03:00.0"])
    rc, result = run_module(tree_args(gpus_only, ofed_wanted=True), capsys)  # GPU, no RDMA
    assert result["gpus"] == 1 and result["gpudirect"]["method"] == "none" and result["gpudirect"]["peermem"] is False
    gpu(tmp_path, ["0000:00:01.0", "0000:03:00.0"])
    rc, result = run_module(tree_args(tmp_path, ofed_wanted=True, peermem="never"), capsys)
    assert result["gpudirect"] == {"method": "none", "peermem": False, "reason": "infiniband_peermem=never; no DMA-BUF (no NVIDIA driver loaded)"}


def test_module_an_infiniband_bw_port_has_no_gid_even_when_one_is_forced(tmp_path, capsys, no_ofed_info):
    fake_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "400", "InfiniBand")
    rc, result = run_module(tree_args(tmp_path, roce_gid_index=3), capsys)
    assert result["bw_port"] == {"device": "mlx5_0", "port": 1, "link_layer": "InfiniBand", "gid_index": None}
