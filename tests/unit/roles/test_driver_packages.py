"""nvidia_driver's package names, kernel module flavour and repository path, as Ansible renders the role's own vars.

The expectations are NVIDIA's, not the role's: Driver Installation Guide "Recent Updates" (Ubuntu 590 and later:
cuda-drivers-<branch> removed, the branch dropped from the package names), NVIDIA/gpu-driver-container
(from 580 Fabric Manager and NSCQ are the unversioned nvidia-fabricmanager and libnvidia-nscq), the open GPU kernel
modules' support (Turing and later; Blackwell and Grace Hopper open only; open by default from R560) and NVIDIA's
repository layout (x86_64, sbsa for aarch64 servers).
"""

from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from tests.helpers.modules import trusted

ROLE = Path(__file__).resolve().parents[3] / "ansible_collections/megaprov/cluster/roles" / "nvidia_driver"

OS_FACTS = {
    "Debian": {"ansible_distribution": "Debian", "ansible_distribution_version": "12.8", "ansible_distribution_major_version": "12"},
    "Ubuntu": {"ansible_distribution": "Ubuntu", "ansible_distribution_version": "24.04", "ansible_distribution_major_version": "24"},
}


def render(names, *, os="Debian", arch="x86_64", gpu_ids=(), live_ids=None, nvswitch=False, **settings):
    """The role's defaults and vars, templated by Ansible for a node with these facts and settings."""
    loader = DataLoader()
    variables = {**trusted(loader.load_from_file(str(ROLE / "defaults" / "main.yml")))}
    variables.update(trusted(loader.load_from_file(str(ROLE / "vars" / "main.yml"))))
    facts = {"pci_gpus": ["0000:18:00.0"] * max(1, len(gpu_ids)), "nvswitches": ["0000:05:00.0"] if nvswitch else [], "gpus": []}
    if gpu_ids:
        facts["pci_gpu_ids"] = list(gpu_ids)
    variables.update(OS_FACTS[os])
    variables.update(
        ansible_os_family="Debian", ansible_architecture=arch, ansible_kernel="6.1.0-28-amd64", ansible_local={"megaprov_preflight": facts}
    )
    if live_ids is not None:
        variables["__nvidia_driver_before"] = {"pci_gpu_devices": list(live_ids)}
    variables.update(settings)
    templar = Templar(loader=loader, variables=variables)
    return {name: templar.template(variables[name]) for name in names}


# (branch, distribution, flavour) -> driver packages from NVIDIA's CUDA repository.
DRIVER = {
    ("550", "Debian", "proprietary"): ["cuda-drivers-550", "nvidia-kernel-dkms", "nvidia-persistenced"],
    ("550", "Debian", "open"): ["cuda-drivers-550", "nvidia-kernel-open-dkms", "nvidia-persistenced"],
    ("570", "Debian", "proprietary"): ["cuda-drivers-570", "nvidia-kernel-dkms", "nvidia-persistenced"],
    ("570", "Debian", "open"): ["cuda-drivers-570", "nvidia-kernel-open-dkms", "nvidia-persistenced"],
    ("580", "Debian", "proprietary"): ["cuda-drivers-580", "nvidia-kernel-dkms", "nvidia-persistenced"],
    ("580", "Debian", "open"): ["cuda-drivers-580", "nvidia-kernel-open-dkms", "nvidia-persistenced"],
    ("590", "Debian", "proprietary"): ["cuda-drivers-590", "nvidia-kernel-dkms", "nvidia-persistenced"],
    ("590", "Debian", "open"): ["cuda-drivers-590", "nvidia-kernel-open-dkms", "nvidia-persistenced"],
    ("550", "Ubuntu", "proprietary"): ["cuda-drivers-550"],
    ("550", "Ubuntu", "open"): ["nvidia-driver-550-open"],
    ("570", "Ubuntu", "proprietary"): ["cuda-drivers-570"],
    ("570", "Ubuntu", "open"): ["nvidia-driver-570-open"],
    ("580", "Ubuntu", "proprietary"): ["cuda-drivers-580"],
    ("580", "Ubuntu", "open"): ["nvidia-driver-580-open"],
    ("590", "Ubuntu", "proprietary"): ["cuda-drivers"],
    ("590", "Ubuntu", "open"): ["nvidia-open"],
}
FABRIC = {
    "550": ["nvidia-fabricmanager-550", "libnvidia-nscq-550"],
    "570": ["nvidia-fabricmanager-570", "libnvidia-nscq-570"],
    "580": ["nvidia-fabricmanager", "libnvidia-nscq"],
    "590": ["nvidia-fabricmanager", "libnvidia-nscq"],
}


@pytest.mark.parametrize("nvswitch", [False, True], ids=["pcie", "nvswitch"])
@pytest.mark.parametrize(("branch", "os", "flavour"), sorted(DRIVER))
def test_cuda_repo_package_names_per_branch(branch, os, flavour, nvswitch):
    got = render(["__nvidia_driver_packages"], os=os, nvidia_driver_branch=branch, nvidia_driver_open=flavour == "open", nvswitch=nvswitch)
    assert got["__nvidia_driver_packages"] == DRIVER[branch, os, flavour] + (FABRIC[branch] if nvswitch else [])


@pytest.mark.parametrize("branch", sorted(FABRIC))
def test_ubuntu_archive_keeps_the_branch_in_fabric_manager_names(branch):
    got = render(
        ["__nvidia_driver_packages"], os="Ubuntu", nvidia_driver_method="distro", nvidia_driver_branch=branch, nvidia_driver_open=True, nvswitch=True
    )
    assert got["__nvidia_driver_packages"] == [f"nvidia-driver-{branch}-server-open", f"nvidia-fabricmanager-{branch}", f"libnvidia-nscq-{branch}"]


def test_debian_archive_flavours():
    names = ["__nvidia_driver_packages"]
    assert render(names, nvidia_driver_method="distro", nvidia_driver_open=False)[names[0]] == [
        "nvidia-driver",
        "nvidia-kernel-dkms",
        "nvidia-persistenced",
        "firmware-misc-nonfree",
    ]
    assert "nvidia-open-kernel-dkms" in render(names, nvidia_driver_method="distro", nvidia_driver_open=True)[names[0]]


def test_the_pin_covers_the_unversioned_metapackages():
    patterns = render(["__nvidia_driver_pin_patterns"])["__nvidia_driver_pin_patterns"]
    assert {"cuda-drivers", "cuda-drivers-*", "nvidia-*", "libnvidia-*"} <= set(patterns)


H100, B200, GH200, V100, T4 = "0x2330", "0x2901", "0x2342", "0x1db1", "0x1eb8"
FLAVOUR = ["__nvidia_driver_open", "__nvidia_driver_pre_turing", "__nvidia_driver_open_only"]


@pytest.mark.parametrize(
    ("ids", "branch", "open_", "pre_turing", "open_only"),
    [
        ([H100] * 8, "580", True, False, False),  # Hopper: open recommended
        ([T4], "550", True, False, False),  # Turing is the first open generation, whatever the branch
        ([B200], "580", True, False, True),  # Blackwell: open only
        ([GH200], "580", True, False, True),  # Grace Hopper: open only
        ([V100], "580", False, True, False),  # Volta: proprietary only
        ([V100, H100], "580", False, True, False),  # mixed: NVIDIA says proprietary
        ([], "550", False, False, False),  # nothing known: NVIDIA's default by branch
        ([], "580", True, False, False),
    ],
)
def test_auto_flavour_follows_the_gpu_generation(ids, branch, open_, pre_turing, open_only):
    got = render(FLAVOUR, gpu_ids=ids, nvidia_driver_branch=branch)
    assert (got["__nvidia_driver_open"], got["__nvidia_driver_pre_turing"], got["__nvidia_driver_open_only"]) == (open_, pre_turing, open_only)


def test_device_id_spellings_and_garbage():
    assert render(["__nvidia_driver_gpu_ids"], gpu_ids=["0x2330", "2901", "10DE:1DB1", "n/a", "0x12345"])["__nvidia_driver_gpu_ids"] == [
        0x2330,
        0x2901,
        0x1DB1,
    ]
    # An unreadable ID is not taken for a pre-Turing GPU: no ID known means NVIDIA's default by branch.
    assert render(FLAVOUR, gpu_ids=["unknown"], nvidia_driver_branch="580")["__nvidia_driver_open"] is True


def test_the_node_pci_bus_wins_over_the_facts_and_the_flag_is_honoured():
    assert render(FLAVOUR, gpu_ids=[H100], live_ids=[V100])["__nvidia_driver_open"] is False
    assert render(FLAVOUR, gpu_ids=[H100], nvidia_driver_open=False)["__nvidia_driver_open"] is False
    assert render(FLAVOUR, gpu_ids=[V100], nvidia_driver_open="true")["__nvidia_driver_open"] is True
    ubuntu_open = render(["__nvidia_driver_packages"], os="Ubuntu", gpu_ids=[H100], nvidia_driver_branch="550")
    assert ubuntu_open["__nvidia_driver_packages"] == ["nvidia-driver-550-open"], "nvidia_driver_open must not be ignored on Ubuntu"


@pytest.mark.parametrize(("arch", "directory"), [("x86_64", "x86_64"), ("aarch64", "sbsa")])
def test_repository_directory_follows_the_architecture(arch, directory):
    got = render(["nvidia_driver_repo_url", "nvidia_driver_keyring_url"], os="Ubuntu", arch=arch)
    assert got["nvidia_driver_repo_url"] == f"https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/{directory}/"
    assert got["nvidia_driver_keyring_url"].endswith(f"/ubuntu2404/{directory}/cuda-keyring_1.1-1_all.deb")


def test_default_branch_is_580():
    assert render(["nvidia_driver_branch"])["nvidia_driver_branch"] == "580"
