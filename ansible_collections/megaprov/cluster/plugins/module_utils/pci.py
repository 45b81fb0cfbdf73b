# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""NVIDIA functions on the PCI bus, read from sysfs: the one definition of which PCI classes are GPUs.

Used by the node_facts, gpu_state and rdma_facts modules, which must agree on what a GPU is.
"""

from __future__ import annotations

import os

NVIDIA_VENDOR = "0x10de"
# VGA controller (some workstation boards) and 3D controller (datacenter GPUs)
GPU_CLASSES = ("0x0300", "0x0302")
# "Bridge, other": NVSwitch
NVSWITCH_CLASS = "0x0680"


def read(path):
    """A sysfs attribute, stripped; '' when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def is_gpu(pci_class):
    return pci_class.startswith(GPU_CLASSES)


def nvidia_functions(devices_dir):
    """(address, class) of every NVIDIA function under a sysfs devices directory (/sys/bus/pci/devices), by address."""
    if not os.path.isdir(devices_dir):
        return []
    found = []
    for address in sorted(os.listdir(devices_dir)):
        path = os.path.join(devices_dir, address)
        if read(os.path.join(path, "vendor")) == NVIDIA_VENDOR:
            found.append((address, read(os.path.join(path, "class"))))
    return found


def nvidia_gpus(devices_dir):
    """Addresses of the NVIDIA GPUs under a sysfs devices directory, whether or not a driver is bound."""
    return [address for address, pci_class in nvidia_functions(devices_dir) if is_gpu(pci_class)]
