"""Slurm with 0 GPUs: the Gres a node registers comes from the GPUs it has when the scheduler stage runs
(slurm_node), not from preflight's local fact, which was recorded before the driver existed and which gathering=smart
with the fact cache never reads again; a node whose GPUs are expected and present but that would offer none fails."""

from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, load_module
from tests.helpers import modules

COLLECTION = ROOT / "ansible_collections" / "megaprov" / "cluster"
ROLE = COLLECTION / "roles" / "slurm"
slurm_node = load_module(COLLECTION / "plugins" / "modules" / "slurm_node.py", "slurm_node_gres_under_test")

SLURMD_C = "NodeName=gpu1 CPUs=8 Boards=1 SocketsPerBoard=2 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=64000\nUpTime=0-01:00:00\n"
OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16-I3-D08-1-2)\n"


def render(names, **variables):
    """The role's defaults and vars, templated by Ansible with these variables."""
    return modules.role_vars(ROLE, names, **variables)


def node_tree(root: Path, pci_gpus: int = 0, device_files: int = 0, driver: str = "") -> dict:
    """A fake node: NVIDIA GPUs on the PCI bus (and an NVSwitch, which is no GPU), /dev/nvidiaN files, the driver file."""
    pci = root / "sys" / "bus" / "pci" / "devices"
    pci.mkdir(parents=True)
    for i in range(pci_gpus):
        dev = pci / f"0000:{0x18 + i:02x}:00.0"
        dev.mkdir()
        (dev / "vendor").write_text("0x10de\n")
        (dev / "class").write_text("0x030200\n")
    switch = pci / "0000:05:00.0"
    switch.mkdir()
    (switch / "vendor").write_text("0x10de\n")
    (switch / "class").write_text("0x068000\n")
    dev_dir = root / "dev"
    dev_dir.mkdir()
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-modeset"):
        (dev_dir / name).write_text("")
    for i in range(device_files):
        (dev_dir / f"nvidia{i}").write_text("")
    version = root / "proc" / "driver" / "nvidia" / "version"
    version.parent.mkdir(parents=True)
    if driver:
        version.write_text(driver)
    return {"root": str(root)}


@pytest.fixture
def slurmd(tmp_path, monkeypatch):
    """slurmd -C as the module runs it, from a stand-in on PATH."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "slurmd").write_text(f"#!/bin/sh\nprintf '%s' '{SLURMD_C}'\n")
    (tools / "slurmd").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")


def run(tree: dict, capsys, **args) -> tuple[int, dict]:
    return modules.run_module(slurm_node.main, {**tree, **args}, capsys)


def test_the_default_gpu_count_is_auto_not_the_preflight_fact():
    # preflight ran before the driver: its fact lists no GPU (nvidia-smi found none) on a fresh node
    got = render(["slurm_gpus_per_node"], ansible_local={"megaprov_preflight": {"gpus": [], "pci_gpus": ["0000:18:00.0"] * 8}})
    assert got["slurm_gpus_per_node"] == "auto"
    assert "ansible_local" not in (ROLE / "defaults" / "main.yml").read_text()


def test_auto_counts_the_gpus_on_the_pci_bus_now_and_offers_their_device_files(tmp_path, capsys, slurmd):
    tree = node_tree(tmp_path, pci_gpus=8, device_files=8, driver=OPEN)
    rc, result = run(tree, capsys, gpus="auto", gpu_expected=True)
    assert rc == 0, result
    assert result["gpus"] == 8 and result["driver"] == "580.95.05"
    assert [d["file"] for d in result["devices"]] == [f"{tree['root']}/dev/nvidia{i}" for i in range(8)]


def test_auto_without_a_pci_bus_counts_the_device_files_as_in_the_lab(tmp_path, capsys, slurmd):
    # the lab's containers: no NVIDIA PCI device, /dev/nvidia0 and /dev/nvidia1 stand-ins (megaprov/cluster/lab.py)
    tree = node_tree(tmp_path, device_files=2)
    rc, result = run(tree, capsys, gpus="auto", gpu_expected=False)
    assert rc == 0 and result["gpus"] == 2 and result["driver"] == ""
    rc, result = run(tree, capsys, gpus="2", gpu_expected=False)  # what the lab's inventory sets
    assert rc == 0 and result["gpus"] == 2 and len(result["devices"]) == 2


def test_auto_with_gpus_on_the_bus_but_no_driver_says_to_load_it(tmp_path, capsys, slurmd):
    tree = node_tree(tmp_path, pci_gpus=4)
    rc, result = run(tree, capsys, gpus="auto", gpu_expected=True)
    assert rc == 1 and result["msg"].startswith("gpu1: 4 GPU(s) expected (slurm_gpus_per_node=auto) but ")
    assert "load the NVIDIA driver (the gpu stage)" in result["msg"]


def test_a_node_with_expected_gpus_that_would_offer_none_fails_in_one_line(tmp_path, capsys, slurmd):
    tree = node_tree(tmp_path, pci_gpus=8, device_files=8, driver=OPEN)
    rc, result = run(tree, capsys, gpus="0", gpu_expected=True)
    assert rc == 1
    assert result["msg"] == (
        "gpu1: slurm_gpus_per_node=0 gives this node no Gres, but it has 8 NVIDIA GPU(s) and megaprov_gpu_expected is true: "
        "jobs asking for GPUs (--gpus-per-node) would be refused; set slurm_gpus_per_node: auto (or 8), "
        "or megaprov_gpu_expected: false for nodes that must not offer GPUs"
    )
    assert "\n" not in result["msg"]
    # the same node where GPUs are not expected, and a node with none at all, offer no Gres and pass
    assert run(tree, capsys, gpus="0", gpu_expected=False)[1]["gpus"] == 0
    assert run(node_tree(tmp_path / "cpu"), capsys, gpus="auto", gpu_expected=True)[1]["gpus"] == 0


@pytest.mark.parametrize("wanted", ["-1", "eight", "1.5"])
def test_a_count_that_is_not_auto_or_a_number_is_refused(tmp_path, capsys, slurmd, wanted):
    rc, result = run(node_tree(tmp_path), capsys, gpus=wanted)
    assert rc == 1 and result["msg"].startswith(f"slurm_gpus_per_node={wanted} must be auto or a count")


def test_device_numbers_are_the_gpu_files_only(tmp_path):
    tree = node_tree(tmp_path, device_files=3)
    (Path(tree["root"], "dev") / "nvidia10").write_text("")
    (Path(tree["root"], "dev") / "nvidia-caps").mkdir()
    assert slurm_node.device_numbers(str(Path(tree["root"], "dev"))) == [0, 1, 2, 10]
    assert slurm_node.device_numbers(str(tmp_path / "absent")) == []
    assert slurm_node.gpus_to_offer("auto", 8, [0, 1]) == 8 and slurm_node.gpus_to_offer(" AUTO ", 0, [0, 1]) == 2
    assert slurm_node.gpus_to_offer(4, 8, []) == 4 and slurm_node.gpus_to_offer("x", 8, []) is None


@pytest.mark.parametrize(
    ("node", "gpu_type", "gres"),
    [
        ({"gpus": 8}, "h100", "gpu:h100:8"),
        ({"gpus": 2}, "", "gpu:2"),
        ({"gpus": 0}, "h100", ""),
        ({"skipped": True}, "h100", ""),  # the controller that runs no slurmd, or check mode before Slurm is installed
    ],
)
def test_the_gres_is_what_slurm_node_counted(node, gpu_type, gres):
    got = render(["__slurm_node_gres"], __slurm_node=node, slurm_gpu_type=gpu_type, megaprov_gpu_model="")
    assert got["__slurm_node_gres"] == gres


def test_the_role_takes_gres_and_driver_from_slurm_node_not_from_preflight():
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    names = [t["name"] for t in tasks]
    read = tasks[names.index("Read this node's shape (slurmd -C) and its GPU devices")]
    assert read["megaprov.cluster.slurm_node"]["gpus"] == "{{ slurm_gpus_per_node | string }}"
    assert "megaprov_gpu_expected" in read["megaprov.cluster.slurm_node"]["gpu_expected"]
    assert "slurm_check" in read["tags"]  # --tags slurm_check compares the registered Gres with this count
    noted = tasks[names.index("Note the Gres this node offers")]
    assert names.index("Note the Gres this node offers") == names.index("Read this node's shape (slurmd -C) and its GPU devices") + 1
    assert noted["ansible.builtin.set_fact"]["__slurm_gres"] == "{{ __slurm_node_gres }}"
    health = (ROLE / "templates" / "slurm-health.conf.j2").read_text()
    assert "megaprov_preflight.gpus" not in health and "__slurm_node.driver" in health


def test_the_inventory_takes_auto_or_a_count_before_any_host_is_contacted():
    from megaprov.cluster import inventory as inv
    from megaprov.errors import InventoryError

    specs, prefixes = inv.all_specs(COLLECTION / "roles")
    for good in ("auto", "AUTO", 0, 2, "8", 64):
        inv.validate_vars({"slurm_gpus_per_node": good}, "group_vars/all.yml", specs, prefixes)
    for bad in ("eight", -1, 65, "1.5", True, [8], "{{ my_gpus }}"):  # literal only, as every value megaprov types
        with pytest.raises(InventoryError) as info:
            inv.validate_vars({"slurm_gpus_per_node": bad}, "group_vars/all.yml", specs, prefixes)
        assert "slurm_gpus_per_node" in str(info.value)
