#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What slurm.conf and gres.conf must say about this node: slurmd's own view of its hardware, its GPU device
files (counted on the node when the scheduler stage runs, not taken from preflight's facts, recorded before the
driver existed) and, where the NVIDIA driver is loaded, the cores next to each GPU in Slurm's numbering."""

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_node
short_description: A node's Slurm NodeName line and gres.conf lines, from slurmd -C and the GPU devices
description:
  - Runs C(slurmd -C) (what slurmd will register with, CPUs, sockets, cores, threads, memory) and parses it.
  - Lists the GPU device files C(/dev/nvidiaN) (N a number) and, where the NVIDIA driver is loaded, maps each to
    its PCI device (C(/proc/driver/nvidia/gpus/*/information), Device Minor) and that device's C(local_cpulist),
    turned into Slurm's abstract core numbers (cores counted socket by socket), for gres.conf C(Cores=).
  - O(gpus=auto) counts the NVIDIA GPUs now, the PCI bus's (vendor 0x10de, class 0x0300/0x0302), or where the bus shows
    none (a container) the C(/dev/nvidiaN) device files.
  - Fails on a node whose GPUs are expected (O(gpu_expected)) and present but that would offer none (an empty Gres).
  - Changes nothing; runs in check mode.
options:
  gpus:
    description:
      - GPUs the node must offer to Slurm, a count or C(auto) (the NVIDIA GPUs the node has now).
      - Their device files C(/dev/nvidia0) .. C(/dev/nvidia{gpus-1}) must exist.
    type: str
    required: true
  gpu_expected:
    description: The node must offer its GPUs (megaprov_gpu_expected); one with NVIDIA GPUs that would offer none fails.
    type: bool
    default: false
  root:
    description:
      - File system root under which everything the module reads lies (dev/, sys/bus/pci/devices, sys/devices/system/cpu,
        proc/driver/nvidia); tests use a fake tree.
    type: path
    default: /
  mem_reserve_mb:
    description: Memory kept from Slurm for the system (RealMemory is slurmd's figure less this).
    type: int
    default: 1024
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read this node's shape for slurm.conf
  megaprov.cluster.slurm_node:
    gpus: auto
    gpu_expected: true
"""

RETURN = r"""
node:
  description: NodeName, CPUs, Boards, SocketsPerBoard, CoresPerSocket, ThreadsPerCore and RealMemory as slurm.conf takes them.
  returned: always
  type: dict
slurmd_memory_mb:
  description: RealMemory as slurmd -C reports it.
  returned: always
  type: int
devices:
  description: One entry per GPU device file offered, with file and cores (Slurm core numbers, "" when unknown).
  returned: always
  type: list
  elements: dict
gpus:
  description: GPUs offered to Slurm (the Gres count; 0 = no Gres).
  returned: always
  type: int
driver:
  description: Version of the loaded NVIDIA driver ("" without one).
  returned: always
  type: str
"""

import glob
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.megaprov.cluster.plugins.module_utils import pci
from ansible_collections.megaprov.cluster.plugins.module_utils.nvidia_driver import loaded_version

KEYS = ("NodeName", "CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")


def parse_slurmd_c(text):
    """The first line of ``slurmd -C`` as a dict of its KEY=VALUE words (numbers as int)."""
    first = next((line for line in text.splitlines() if line.startswith("NodeName=")), "")
    out = {}
    for word in first.split():
        key, sep, value = word.partition("=")
        if sep:
            out[key] = int(value) if value.isdigit() else value
    missing = [k for k in KEYS if k not in out]
    if missing:
        raise ValueError("slurmd -C printed no %s (got %r)" % (", ".join(missing), first[:200]))
    return out


def cpu_list(text):
    """A Linux CPU list ("0-3,8,10-11") as a sorted list of ints."""
    cpus = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, sep, high = part.partition("-")
        cpus.update(range(int(low), int(high) + 1) if sep else [int(low)])
    return sorted(cpus)


def ranges(numbers):
    """Sorted ints as Slurm's compact list: [0,1,2,5] -> "0-2,5"."""
    out, numbers = [], sorted(set(numbers))
    i = 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        out.append(str(numbers[i]) if i == j else "%d-%d" % (numbers[i], numbers[j]))
        i = j + 1
    return ",".join(out)


def slurm_cores(topology, cpus):
    """Slurm's abstract core numbers of the OS CPUs ``cpus``. ``topology`` maps an OS CPU to (package id, core id).
    Slurm numbers cores socket by socket (sockets and cores in ascending id order), whatever the OS numbering."""
    sockets = sorted({pkg for pkg, _core in topology.values()})
    cores_of = {pkg: sorted({core for p, core in topology.values() if p == pkg}) for pkg in sockets}
    base, index = 0, {}
    for pkg in sockets:
        for n, core in enumerate(cores_of[pkg]):
            index[(pkg, core)] = base + n
        base += len(cores_of[pkg])
    return sorted({index[topology[cpu]] for cpu in cpus if cpu in topology})


def read_topology(root="/sys/devices/system/cpu"):
    topology = {}
    for path in glob.glob(os.path.join(root, "cpu[0-9]*", "topology")):
        cpu = int(re.search(r"cpu(\d+)/topology$", path).group(1))
        try:
            with open(os.path.join(path, "physical_package_id")) as f:
                pkg = int(f.read())
            with open(os.path.join(path, "core_id")) as f:
                core = int(f.read())
        except (OSError, ValueError):
            continue
        topology[cpu] = (pkg, core)
    return topology


def driver_minors(root):
    """Device minor (the N of /dev/nvidiaN) -> PCI address, from the loaded NVIDIA driver under ``root``
    (/proc/driver/nvidia/gpus); {} without it."""
    out = {}
    for info in sorted(glob.glob(os.path.join(root, "*", "information"))):
        try:
            with open(info) as f:
                found = re.search(r"^Device Minor:\s*(\d+)", f.read(), re.M)
        except OSError:
            continue
        if found:
            out[int(found.group(1))] = os.path.basename(os.path.dirname(info)).lower()
    return out


def device_numbers(dev_dir):
    """The N of every nvidiaN in ``dev_dir`` (nvidiactl, nvidia-uvm and the like are not GPUs), sorted."""
    try:
        names = os.listdir(dev_dir)
    except OSError:
        return []
    return sorted(int(m.group(1)) for m in (re.match(r"^nvidia(\d+)$", name) for name in names) if m)


def gpus_to_offer(wanted, pci_gpus, numbers):
    """The GPU count for Gres: ``wanted`` as a number, or for ``auto`` the NVIDIA GPUs on the PCI bus, else (a container
    that shows no PCI bus) the device files. None when ``wanted`` is neither."""
    text = str(wanted).strip().lower()
    if text == "auto":
        return pci_gpus if pci_gpus else len(numbers)
    return int(text) if text.isdigit() else None


def empty_gres_problem(name, wanted, offered, pci_gpus, numbers, gpu_expected):
    """'' or the one line that fails a node whose GPUs are expected and present but that would register without Gres
    (jobs asking --gpus-per-node would then be refused while every check passed)."""
    present = max(pci_gpus, len(numbers))
    if not gpu_expected or offered > 0 or present == 0:
        return ""
    return (
        "%s: slurm_gpus_per_node=%s gives this node no Gres, but it has %d NVIDIA GPU(s) and megaprov_gpu_expected is true: "
        "jobs asking for GPUs (--gpus-per-node) would be refused; set slurm_gpus_per_node: auto (or %d), "
        "or megaprov_gpu_expected: false for nodes that must not offer GPUs" % (name, wanted, present, present)
    )


def main():
    module = AnsibleModule(
        argument_spec={
            "gpus": {"type": "str", "required": True},
            "gpu_expected": {"type": "bool", "default": False},
            "mem_reserve_mb": {"type": "int", "default": 1024},
            "root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    p = module.params
    reserve = p["mem_reserve_mb"]
    dev_dir = os.path.join(p["root"], "dev")
    pci_gpus = len(pci.nvidia_gpus(os.path.join(p["root"], "sys/bus/pci/devices")))
    numbers = device_numbers(dev_dir)
    gpus = gpus_to_offer(p["gpus"], pci_gpus, numbers)
    if gpus is None or reserve < 0:
        module.fail_json(
            msg="slurm_gpus_per_node=%s must be auto or a count of 0 or more, slurm_mem_reserve_mb=%d not negative" % (p["gpus"], reserve)
        )
    rc, out, err = module.run_command(["slurmd", "-C"])
    if rc != 0:
        module.fail_json(msg="slurmd -C failed (%d): %s" % (rc, (err or out).strip()[-300:]))
    try:
        found = parse_slurmd_c(out)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    memory = int(found["RealMemory"])
    if memory - reserve < 1024:
        module.fail_json(msg="slurmd -C reports RealMemory=%d MB: less than 1 GB is left after slurm_mem_reserve_mb=%d" % (memory, reserve))
    node = {k: found[k] for k in KEYS}
    node["RealMemory"] = memory - reserve
    minors = driver_minors(os.path.join(p["root"], "proc/driver/nvidia/gpus"))
    topology = read_topology(os.path.join(p["root"], "sys/devices/system/cpu")) if minors else {}
    devices, missing = [], []
    problem = empty_gres_problem(found["NodeName"], p["gpus"], gpus, pci_gpus, numbers, p["gpu_expected"])
    if problem:
        module.fail_json(msg=problem)
    for n in range(gpus):
        path = os.path.join(dev_dir, "nvidia%d" % n)
        if not os.path.exists(path):
            missing.append(path)
            continue
        cores = ""
        if n in minors and topology:
            try:
                with open(os.path.join(p["root"], "sys/bus/pci/devices", minors[n], "local_cpulist")) as f:
                    cores = ranges(slurm_cores(topology, cpu_list(f.read())))
            except (OSError, ValueError):
                cores = ""
        devices.append({"file": path, "cores": cores})
    if missing:
        module.fail_json(
            msg="%s: %d GPU(s) expected (slurm_gpus_per_node=%s) but %s missing: load the NVIDIA driver (the gpu stage) "
            "or set slurm_gpus_per_node to the GPUs this node has" % (node["NodeName"], gpus, p["gpus"], ", ".join(missing))
        )
    module.exit_json(
        changed=False, node=node, slurmd_memory_mb=memory, devices=devices, gpus=gpus, driver=loaded_version(p["root"])
    )


if __name__ == "__main__":
    main()
