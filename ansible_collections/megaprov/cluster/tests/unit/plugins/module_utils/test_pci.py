"""module_utils/pci.py: which NVIDIA PCI functions are GPUs (node_facts, gpu_state and rdma_facts all ask it)."""

import pytest

from ansible_collections.megaprov.cluster.plugins.module_utils import pci


def device(root, address, vendor, pci_class):
    path = root / address
    path.mkdir(parents=True)
    (path / "vendor").write_text(vendor + "\n")
    (path / "class").write_text(pci_class + "\n")


@pytest.fixture
def bus(tmp_path):
    """An 8-GPU HGX board as sysfs shows it, trimmed: 3D controllers, a workstation board with its HD audio function, NVSwitches,
    a ConnectX HCA and the BMC's VGA (ASPEED) that is not NVIDIA's."""
    root = tmp_path / "devices"
    device(root, "0000:1b:00.0", "0x10de", "0x030200")  # H100 SXM: 3D controller
    device(root, "0000:03:00.0", "0x10de", "0x030000")  # a workstation board: VGA controller
    device(root, "0000:03:00.1", "0x10de", "0x040300")  # its HD audio function
    device(root, "0000:05:00.0", "0x10de", "0x068000")  # NVSwitch: bridge, other
    device(root, "0000:02:00.0", "0x1a03", "0x030000")  # ASPEED BMC VGA
    device(root, "0000:17:00.0", "0x15b3", "0x020700")  # ConnectX-7 (InfiniBand controller)
    (root / "0000:99:00.0").mkdir()  # a function whose attributes cannot be read
    return root


def test_gpus_are_nvidias_display_and_3d_controllers_in_address_order(bus):
    assert pci.nvidia_gpus(str(bus)) == ["0000:03:00.0", "0000:1b:00.0"]


def test_every_nvidia_function_is_listed_with_its_class(bus):
    assert pci.nvidia_functions(str(bus)) == [
        ("0000:03:00.0", "0x030000"),
        ("0000:03:00.1", "0x040300"),
        ("0000:05:00.0", "0x068000"),
        ("0000:1b:00.0", "0x030200"),
    ]


@pytest.mark.parametrize(
    ("pci_class", "gpu"), [("0x030000", True), ("0x030200", True), ("0x030100", False), ("0x068000", False), ("0x040300", False), ("", False)]
)
def test_gpu_classes(pci_class, gpu):
    """PCI class codes: 0x0300 VGA, 0x0302 3D controller are GPUs; 0x0301 XGA, NVSwitch (0x0680) and audio are not."""
    assert pci.is_gpu(pci_class) is gpu


def test_a_machine_without_a_pci_bus_in_sysfs_has_no_gpu(tmp_path):
    assert pci.nvidia_functions(str(tmp_path / "absent")) == [] and pci.nvidia_gpus(str(tmp_path / "absent")) == []


def test_an_unreadable_attribute_reads_as_empty(tmp_path):
    assert pci.read(str(tmp_path / "nothing")) == ""
    (tmp_path / "v").write_text("  0x10de\n")
    assert pci.read(str(tmp_path / "v")) == "0x10de"
