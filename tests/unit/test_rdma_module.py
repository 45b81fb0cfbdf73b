"""The infiniband role's detection on fake sysfs trees: which ports NCCL gets (exact list, compute fabric only),
RoCE GIDs, GPUDirect RDMA (nvidia-peermem only with MLNX/DOCA OFED, DMA-BUF elsewhere), and ib_write_bw's argv."""

import os
from pathlib import Path

import pytest
import yaml

from tests.conftest import load_module

ROOT = Path(__file__).resolve().parents[2]
rdma = load_module(ROOT / "roles" / "infiniband" / "library" / "megaprov_rdma_facts.py", "megaprov_rdma_facts")


def pci_device(root: Path, chain: list[str], numa: int = 0, vendor: str = "", klass: str = "") -> Path:
    """A PCI device under root/devices/pci0000:00/<chain...>, linked from root/bus/pci/devices like the kernel does."""
    path = root / "devices" / "pci0000:00" / Path(*chain)
    path.mkdir(parents=True, exist_ok=True)
    (path / "numa_node").write_text(f"{numa}\n")
    if vendor:
        (path / "vendor").write_text(vendor + "\n")
        (path / "class").write_text(klass + "\n")
    link = root / "bus" / "pci" / "devices" / chain[-1]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(path, link.parent))
    return path


def fake_port(root: Path, dev: str, port: int, state: str, rate: str, layer: str, pci: Path | None = None) -> Path:
    d = root / "class" / "infiniband" / dev / "ports" / str(port)
    d.mkdir(parents=True)
    (d / "state").write_text(state + "\n")
    (d / "rate").write_text(rate + "\n")
    (d / "link_layer").write_text(layer + "\n")
    if pci is not None and not (root / "class" / "infiniband" / dev / "device").exists():
        (root / "class" / "infiniband" / dev / "device").symlink_to(os.path.relpath(pci, root / "class" / "infiniband" / dev))
    return d


def sysfs(root: Path) -> str:
    return str(root / "class" / "infiniband")


def gpu(root: Path, chain: list[str], numa: int = 0) -> Path:
    return pci_device(root, chain, numa, "0x10de", "0x030200")


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
    env, summary, _ = rdma.nccl_env(rdma.ports(sysfs(tmp_path)), "eth0", -1, {}, rdma.gpus(str(tmp_path / "bus" / "pci" / "devices")))
    assert env["NCCL_IB_HCA"] == "=mlx5_1:1" and "NUMA" in summary


def test_inventory_list_of_compute_hcas_wins(tmp_path):
    hgx_like(tmp_path)
    found = rdma.ports(sysfs(tmp_path))
    env, summary, error = rdma.nccl_env(found, "eth0", -1, {}, [], ["mlx5_1:1", "mlx5_0"])
    assert env["NCCL_IB_HCA"] == "=mlx5_1:1,mlx5_0:1" and "(InfiniBand; infiniband_nccl_hcas)" in summary and error == ""


def test_inventory_list_naming_a_missing_port_is_a_one_line_error(tmp_path):
    hgx_like(tmp_path)
    _, _, error = rdma.nccl_env(rdma.ports(sysfs(tmp_path)), "eth0", -1, {}, [], ["mlx5_7:1"])
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
    env, summary, _ = rdma.nccl_env(found, "ens1f0", -1, {})
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
    env, summary, _ = rdma.nccl_env(rdma.ports(sysfs(tmp_path)), "bond0", -1, {"NCCL_IB_QPS_PER_CONNECTION": 4})
    # NCCL 2.21+ picks the RoCE v2 GID itself (NCCL_IB_GID_INDEX defaults to -1); a forced 3 is wrong on many fabrics.
    assert "NCCL_IB_GID_INDEX" not in env and env["NCCL_IB_HCA"] == "=mlx5_bond_0:1"
    assert env["NCCL_IB_QPS_PER_CONNECTION"] == "4"
    assert "(RoCE;" in summary


def test_roce_gid_index_when_the_inventory_forces_one(tmp_path):
    roce_port(tmp_path)
    env, _, _ = rdma.nccl_env(rdma.ports(sysfs(tmp_path)), "bond0", 5, {})
    assert env["NCCL_IB_GID_INDEX"] == "5"


def test_roce_v2_ipv4_gid_for_ib_write_bw(tmp_path):
    roce_port(tmp_path)
    assert rdma.ports(sysfs(tmp_path))[0]["roce_v2_gid_index"] == 3


def test_devices_with_no_active_port_fall_back_to_sockets_and_say_so(tmp_path):
    fake_port(tmp_path, "mlx5_0", 1, "1: DOWN", "10 Gb/sec", "InfiniBand")
    env, summary, _ = rdma.nccl_env(rdma.ports(sysfs(tmp_path)), "eth0", -1, {})
    assert env["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_HCA" not in env
    assert summary == "RDMA devices present but no port is ACTIVE (mlx5_0:1 DOWN): NCCL will use TCP sockets on eth0"


def test_no_device(tmp_path):
    env, summary, _ = rdma.nccl_env(rdma.ports(str(tmp_path / "absent")), "eth0", -1, {})
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


bw = load_module(ROOT / "roles" / "infiniband" / "library" / "megaprov_ib_write_bw.py", "megaprov_ib_write_bw")

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


IB_ROLE = ROOT / "roles" / "infiniband"


def test_doca_path_installs_its_prerequisites_first_and_restarts_openibd_without_a_reboot():
    """deb822_repository imports python3-debian on the node; DOCA's modules are DKMS builds for the running kernel;
    the new modules go live by restarting openibd, not by rebooting."""
    defaults = yaml.safe_load((IB_ROLE / "defaults" / "main.yml").read_text())
    assert set(defaults["infiniband_ofed_prerequisites"]) == {"linux-headers-{{ ansible_kernel }}", "python3-debian"}
    tasks = yaml.safe_load((IB_ROLE / "tasks" / "install.yml").read_text())
    modules = [next(k for k in t if k.startswith("ansible.builtin.")) for t in tasks]
    repo = modules.index("ansible.builtin.deb822_repository")
    prereq = next(i for i, t in enumerate(tasks) if t.get("ansible.builtin.apt", {}).get("name") == "{{ infiniband_ofed_prerequisites }}")
    assert prereq < repo
    packages = next(t for t in tasks if t["name"] == "Install the RDMA packages")
    assert packages["notify"] == "Restart openibd"
    assert modules[-1] == "ansible.builtin.meta" and tasks[-1]["ansible.builtin.meta"] == "flush_handlers"
    handlers = {h["name"]: h for h in yaml.safe_load((IB_ROLE / "handlers" / "main.yml").read_text())}
    assert "systemctl restart openibd" in handlers["Restart openibd"]["ansible.builtin.shell"]["cmd"]
    everything = "".join(p.read_text() for p in IB_ROLE.rglob("*.yml"))
    assert "ansible.builtin.reboot" not in everything
