"""Fake sysfs trees for the infiniband role's detection module (rdma_facts), and the module run as Ansible runs it."""

from __future__ import annotations

import os
from pathlib import Path

from ansible_collections.megaprov.cluster.plugins.modules import rdma_facts as rdma
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules import utils

COLLECTION = Path(__file__).resolve().parents[4]


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


# main() as Ansible runs it, on a fake tree (every path is an option of the module).
def run_module(args: dict, capsys) -> tuple[int, dict]:
    return utils.run_module(rdma.main, args, capsys)


def tree_args(root: Path, **extra) -> dict:
    return {
        "sysfs": sysfs(root),
        "pci_devices": str(root / "bus" / "pci" / "devices"),
        "gpu_dir": str(root / "proc" / "driver" / "nvidia" / "gpus"),
        "driver_version_file": str(root / "proc" / "driver" / "nvidia" / "version"),
        "module_dir": str(root / "module"),
        "memory_peers_dir": str(root / "memory_peers"),
        "kernel": "6.1.0-28-amd64",
        "socket_interface": "ens1f0",
        **extra,
    }
