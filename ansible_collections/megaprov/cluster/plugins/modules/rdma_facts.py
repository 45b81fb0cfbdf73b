#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Read-only: RDMA ports, NVIDIA GPUs and the PCIe paths between them, the RDMA stack, and what they imply:
the NCCL/Gloo network environment, how GPUDirect RDMA can work (DMA-BUF or nvidia-peermem), and the RoCE GID
an ib_write_bw check must name."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rdma_facts
short_description: HCAs, ports, GPUDirect RDMA path and the NCCL environment for a node
description:
  - Reads the RDMA ports (InfiniBand or RoCE) and the NVIDIA GPUs of a node from sysfs, with the PCIe paths between
    them, and the RDMA stack in use (MLNX/DOCA OFED or the distribution's).
  - Returns what they imply, the NCCL and Gloo network environment, how GPUDirect RDMA can work (DMA-BUF or
    nvidia-peermem) and the port and RoCE GID an ib_write_bw check must name.
  - Read-only; supports check mode.
options:
  sysfs:
    description: RDMA devices.
    type: path
    default: /sys/class/infiniband
  pci_devices:
    description: PCI devices (NVIDIA GPUs are found here).
    type: path
    default: /sys/bus/pci/devices
  gpu_dir:
    description: The NVIDIA driver's GPU list (one entry per GPU the loaded driver handles).
    type: path
    default: /proc/driver/nvidia/gpus
  driver_version_file:
    description: Tells open from proprietary kernel modules.
    type: path
    default: /proc/driver/nvidia/version
  module_dir:
    description: Loaded kernel modules (C(mlx_compat) there tells MLNX/DOCA OFED).
    type: path
    default: /sys/module
  memory_peers_dir:
    description: Peer-memory API of MLNX/DOCA OFED's ib_core.
    type: path
    default: /sys/kernel/mm/memory_peers
  kernel:
    description: Kernel release; the running one when not given.
    type: str
  socket_interface:
    description: Interface of the cluster network.
    type: str
    required: true
  compute_hcas:
    description: NCCL's HCA ports (device or device:port); empty means the active ports near the GPUs.
    type: list
    elements: str
    default: []
  roce_gid_index:
    description: C(-1) lets NCCL choose (2.21+); a value of 0 or more is written as C(NCCL_IB_GID_INDEX).
    type: int
    default: -1
  peermem:
    description:
      - Whether nvidia-peermem is used, C(auto) (where MLNX/DOCA OFED provides the peer-memory API), C(always) or C(never).
    type: str
    default: auto
    choices: [auto, always, never]
  ofed_wanted:
    description: The role installs MLNX/DOCA OFED on this node.
    type: bool
    default: false
  overrides:
    description: NCCL environment variables that replace the computed ones.
    type: dict
    default: {}
  required:
    description:
      - Fail a node with NVIDIA GPUs whose RDMA devices have no ACTIVE port (NCCL would fall back to TCP sockets).
      - A node without RDMA devices is never failed; C(false) lets such a node use sockets knowingly.
    type: bool
    default: false
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the RDMA ports and the NCCL environment they imply
  megaprov.cluster.rdma_facts:
    socket_interface: eth0
    peermem: auto
  register: rdma

- name: Show the NCCL environment
  ansible.builtin.debug:
    var: rdma.nccl_env
"""

RETURN = r"""
ports:
  description: Every port of every RDMA device (device, port, state, rate, link_layer, pci, numa_node, roce_v2_gid_index).
  type: list
  elements: dict
  returned: always
hcas:
  description: Names of the RDMA devices.
  type: list
  elements: str
  returned: always
gpus:
  description: Number of NVIDIA GPUs (the driver's count or the PCI bus's, whichever is larger).
  type: int
  returned: always
gpu_pci:
  description: PCI addresses of the NVIDIA GPUs.
  type: list
  elements: str
  returned: always
nccl_env:
  description: The NCCL and Gloo environment (NCCL_SOCKET_IFNAME, NCCL_IB_HCA or NCCL_IB_DISABLE, ...).
  type: dict
  returned: always
summary:
  description: One line for the report.
  type: str
  returned: always
rdma_stack:
  description: C(mlnx_ofed) or C(distribution).
  type: str
  returned: always
gpudirect:
  description: How GPU memory reaches the HCA, as method (C(dmabuf), C(peermem) or C(none)), peermem and reason.
  type: dict
  returned: always
bw_port:
  description: Device, port, link layer and GID index an ib_write_bw check uses; null when no port is chosen.
  type: dict
  returned: always
"""

import os
import platform
import re
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.megaprov.cluster.plugins.module_utils import pci

HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
DMABUF_MIN_KERNEL = (5, 12)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def pci_chain(device_dir: str) -> list[str]:
    """PCI addresses from the root port down to the device, from the sysfs path its ``device`` link resolves to."""
    parts = os.path.realpath(device_dir).split(os.sep)
    for i, part in enumerate(parts):
        if HOST_BRIDGE.match(part):
            return [p for p in parts[i + 1 :] if PCI_ADDRESS.match(p)]
    return []


def ports(sysfs: str) -> list[dict]:
    """Every port of every RDMA device: name, port, state, rate, link layer, PCI chain, NUMA node, RoCE v2 GIDs."""
    found: list[dict] = []
    if not os.path.isdir(sysfs):
        return found
    for dev in sorted(os.listdir(sysfs)):
        base = os.path.join(sysfs, dev, "ports")
        if not os.path.isdir(base):
            continue
        device = os.path.join(sysfs, dev, "device")
        for port in sorted(os.listdir(base), key=lambda p: int(p) if p.isdigit() else 0):
            state = _read(os.path.join(base, port, "state"))  # "4: ACTIVE"
            found.append(
                {
                    "device": dev,
                    "port": int(port) if port.isdigit() else port,
                    "state": state.split(":", 1)[-1].strip() if state else "UNKNOWN",
                    "rate": _read(os.path.join(base, port, "rate")),
                    "link_layer": _read(os.path.join(base, port, "link_layer")) or "InfiniBand",
                    "pci": pci_chain(device),
                    "numa_node": _read(os.path.join(device, "numa_node")) or "-1",
                    "roce_v2_gid_index": roce_v2_gid_index(os.path.join(base, port)),
                }
            )
    return found


def roce_v2_gid_index(port_dir: str) -> int | None:
    """The first GID of a port whose type is RoCE v2 and whose address is IPv4-mapped (what ib_write_bw -x needs)."""
    gids = os.path.join(port_dir, "gids")
    if not os.path.isdir(gids):
        return None
    for index in sorted((int(i) for i in os.listdir(gids) if i.isdigit())):
        kind = _read(os.path.join(port_dir, "gid_attrs", "types", str(index)))
        gid = _read(os.path.join(gids, str(index))).lower()
        if kind.lower() == "roce v2" and gid.startswith("0000:0000:0000:0000:0000:ffff:"):
            return index
    return None


def gpus(pci_devices: str) -> list[dict]:
    """NVIDIA GPUs on the PCI bus (whether or not a driver is loaded): address, PCI chain, NUMA node."""
    found: list[dict] = []
    for addr in pci.nvidia_gpus(pci_devices):
        path = os.path.join(pci_devices, addr)
        found.append({"address": addr, "pci": pci_chain(path), "numa_node": _read(os.path.join(path, "numa_node")) or "-1"})
    return found


def _shares_switch(a: list[str], b: list[str]) -> bool:
    """Two devices below one root port: their traffic turns in a PCIe switch and never crosses the CPU."""
    return bool(a) and bool(b) and a[0] == b[0]


def compute_ports(active: list[dict], gpu_list: list[dict]) -> tuple[list[dict], str]:
    """The active ports NCCL should use: those on a GPU's PCIe switch; else those on a GPU's NUMA node; else all."""
    if not gpu_list:
        return active, "no GPU on the PCI bus: every active port"
    near = [p for p in active if any(_shares_switch(p["pci"], g["pci"]) for g in gpu_list)]
    if near:
        return near, "ports on the GPUs' PCIe switches"
    numa = {g["numa_node"] for g in gpu_list if g["numa_node"] not in ("", "-1")}
    same = [p for p in active if p["numa_node"] in numa]
    if same:
        return same, "ports on the GPUs' NUMA nodes (none shares a PCIe switch with a GPU)"
    return active, "every active port (no port shares a PCIe switch or NUMA node with a GPU)"


def _name(p: dict) -> str:
    return f"{p['device']}:{p['port']}"


def select_ports(found: list[dict], gpu_list: list[dict], wanted: list[str]) -> tuple[list[dict], str, str]:
    """(ports for NCCL, why, error). ``wanted`` names ports (mlx5_0:1) or devices (mlx5_0: its active ports)."""
    active = [p for p in found if p["state"] == "ACTIVE"]
    if not wanted:
        chosen, why = compute_ports(active, gpu_list)
        return chosen, why, ""
    chosen: list[dict] = []
    for entry in wanted:
        device, sep, port = entry.partition(":")
        match = [p for p in active if p["device"] == device and (not port or str(p["port"]) == port)]
        if not match:
            have = ", ".join(_name(p) for p in active) or "none"
            return [], "", f"infiniband_nccl_hcas names {entry}, which is not an active RDMA port here (active: {have}); fix the list or the port"
        chosen += [p for p in match if p not in chosen]
    return chosen, "infiniband_nccl_hcas", ""


def kernel_at_least(release: str, minimum: tuple[int, int]) -> bool:
    numbers = re.match(r"^(\d+)\.(\d+)", release or "")
    return bool(numbers) and (int(numbers.group(1)), int(numbers.group(2))) >= minimum


def open_kernel_modules(version_text: str) -> bool | None:
    """True/False from /proc/driver/nvidia/version ("NVIDIA UNIX Open Kernel Module ..."); None without a loaded driver."""
    if not version_text:
        return None
    return "open kernel module" in version_text.lower()


def rdma_stack(module_dir: str, memory_peers_dir: str, ofed_info: str | None) -> str:
    """mlnx_ofed (MLNX_OFED or DOCA-OFED: its ib_core has the peer-memory API nvidia-peermem needs) or distribution."""
    if os.path.isdir(memory_peers_dir) or os.path.isdir(os.path.join(module_dir, "mlx_compat")) or ofed_info:
        return "mlnx_ofed"
    return "distribution"


def gpudirect(gpu_count: int, hca_count: int, stack: str, open_modules: bool | None, kernel: str, peermem: str) -> dict:
    """How GPU memory reaches the HCA. nvidia-peermem needs the peer-memory API of MLNX/DOCA OFED's ib_core (a
    distribution's ib_core lacks it: the module does not load); DMA-BUF needs the open kernel modules and Linux 5.12+,
    and NCCL uses it by itself (NCCL_DMABUF_ENABLE defaults to 1)."""
    if gpu_count == 0 or hca_count == 0:
        return {"method": "none", "peermem": False, "reason": "GPUDirect RDMA needs both NVIDIA GPUs and RDMA devices"}
    dmabuf = bool(open_modules) and kernel_at_least(kernel, DMABUF_MIN_KERNEL)
    dmabuf_text = (
        "DMA-BUF (open kernel modules, kernel %s)" % kernel
        if dmabuf
        else "no DMA-BUF (%s)"
        % (
            "kernel %s is older than 5.12" % kernel
            if not kernel_at_least(kernel, DMABUF_MIN_KERNEL)
            else "the proprietary kernel modules are loaded" if open_modules is False else "no NVIDIA driver loaded"
        )
    )
    if peermem == "never":
        return {"method": "dmabuf" if dmabuf else "none", "peermem": False, "reason": "infiniband_peermem=never; " + dmabuf_text}
    if peermem == "always" or stack == "mlnx_ofed":
        why = "infiniband_peermem=always" if peermem == "always" else "MLNX/DOCA OFED provides the peer-memory API"
        return {"method": "peermem", "peermem": True, "reason": f"nvidia-peermem ({why}); {dmabuf_text}"}
    if dmabuf:
        return {
            "method": "dmabuf",
            "peermem": False,
            "reason": f"{dmabuf_text}; nvidia-peermem not loaded: the distribution's RDMA stack has no peer-memory API",
        }
    return {
        "method": "none",
        "peermem": False,
        "reason": (
            f"GPUDirect RDMA unavailable: {dmabuf_text}, and the distribution's RDMA stack has no peer-memory API for "
            "nvidia-peermem; NCCL stages through host memory (use the open kernel modules on Linux 5.12+, or DOCA-OFED)"
        ),
    }


def nccl_env(
    found: list[dict],
    interface: str,
    gid_index: int,
    overrides: dict,
    gpu_list: list[dict] | None = None,
    wanted: list[str] | None = None,
) -> tuple[dict, str, str]:
    """The environment NCCL and Gloo need on this node, the line the report shows, and an error (empty = none).

    NCCL_IB_HCA is an exact list (a leading '=': without it every entry is a prefix, and mlx5_1 also selects
    mlx5_10..mlx5_19). NCCL_IB_GID_INDEX is written only when set: since NCCL 2.21 NCCL picks the RoCE v2 GID itself.
    """
    env = {"NCCL_SOCKET_IFNAME": interface, "GLOO_SOCKET_IFNAME": interface}
    active = [p for p in found if p["state"] == "ACTIVE"]
    chosen, why, error = select_ports(found, gpu_list or [], wanted or [])
    if error:
        return env, "", error
    if chosen:
        env["NCCL_IB_HCA"] = "=" + ",".join(_name(p) for p in chosen)
        if gid_index >= 0 and any(p["link_layer"] == "Ethernet" for p in chosen):
            env["NCCL_IB_GID_INDEX"] = str(gid_index)
        kinds = sorted({"RoCE" if p["link_layer"] == "Ethernet" else "InfiniBand" for p in chosen})
        left = [_name(p) for p in active if p not in chosen]
        summary = (
            f"RDMA: {len(chosen)} of {len(active)} active port(s) for NCCL ({', '.join(kinds)}; {why}): "
            f"{env['NCCL_IB_HCA'][1:]}" + (f"; not for NCCL: {','.join(left)}" if left else "") + f"; sockets on {interface}"
        )
    elif found:
        env["NCCL_IB_DISABLE"] = "1"
        states = ", ".join(f"{_name(p)} {p['state']}" for p in found)
        summary = f"RDMA devices present but no port is ACTIVE ({states}): NCCL will use TCP sockets on {interface}"
    else:
        env["NCCL_IB_DISABLE"] = "1"
        summary = f"no RDMA device: NCCL will use TCP sockets on {interface}"
    env.update({str(k): str(v) for k, v in overrides.items()})
    return env, summary, ""


def no_active_port_error(found: list[dict], gpu_count: int, node: str) -> str:
    """'' or the one line that fails a GPU node whose RDMA devices have no ACTIVE port: NCCL would set
    NCCL_IB_DISABLE=1 and train over TCP sockets, every check passing. A node without RDMA devices is not failed."""
    if not found or gpu_count == 0 or any(p["state"] == "ACTIVE" for p in found):
        return ""
    hcas = ", ".join(sorted({p["device"] for p in found}))
    states = ", ".join(f"{_name(p)} {p['state']}" for p in found)
    return (
        f"{node}: {gpu_count} GPU(s) and RDMA device(s) {hcas} but no ACTIVE port ({states}): NCCL would use TCP sockets; "
        "bring a port up (cabling, switch, a subnet manager for InfiniBand: ibstat shows the state) "
        "or set infiniband_required: false for this node if sockets are intended"
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "sysfs": {"type": "path", "default": "/sys/class/infiniband"},
            "pci_devices": {"type": "path", "default": "/sys/bus/pci/devices"},
            "gpu_dir": {"type": "path", "default": "/proc/driver/nvidia/gpus"},
            "driver_version_file": {"type": "path", "default": "/proc/driver/nvidia/version"},
            "module_dir": {"type": "path", "default": "/sys/module"},
            "memory_peers_dir": {"type": "path", "default": "/sys/kernel/mm/memory_peers"},
            "kernel": {"type": "str"},
            "socket_interface": {"type": "str", "required": True},
            "compute_hcas": {"type": "list", "elements": "str", "default": []},
            "roce_gid_index": {"type": "int", "default": -1},
            "peermem": {"type": "str", "default": "auto", "choices": ["auto", "always", "never"]},
            "ofed_wanted": {"type": "bool", "default": False},
            "overrides": {"type": "dict", "default": {}},
            "required": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    found = ports(p["sysfs"])
    gpu_list = gpus(p["pci_devices"])
    driver_gpus = len(os.listdir(p["gpu_dir"])) if os.path.isdir(p["gpu_dir"]) else 0
    env, summary, error = nccl_env(found, p["socket_interface"], p["roce_gid_index"], p["overrides"], gpu_list, p["compute_hcas"])
    if error:
        module.fail_json(msg=error)
    if p["required"]:
        inactive = no_active_port_error(found, max(driver_gpus, len(gpu_list)), platform.node())
        if inactive:
            module.fail_json(msg=inactive)
    stack = "mlnx_ofed" if p["ofed_wanted"] else rdma_stack(p["module_dir"], p["memory_peers_dir"], shutil.which("ofed_info"))
    kernel = p["kernel"] or os.uname().release
    direct = gpudirect(
        max(driver_gpus, len(gpu_list)), len({x["device"] for x in found}), stack, open_kernel_modules(_read(p["driver_version_file"])), kernel, p["peermem"]
    )
    chosen = [x for x in found if env.get("NCCL_IB_HCA", "=")[1:].split(",").count(_name(x))]
    first = chosen[0] if chosen else None
    bw = None
    if first:
        gid = p["roce_gid_index"] if p["roce_gid_index"] >= 0 else first["roce_v2_gid_index"]
        bw = {
            "device": first["device"], "port": first["port"], "link_layer": first["link_layer"], "gid_index": gid if first["link_layer"] == "Ethernet" else None
        }
    module.exit_json(
        changed=False,
        ports=found,
        hcas=sorted({x["device"] for x in found}),
        gpus=max(driver_gpus, len(gpu_list)),
        gpu_pci=[g["address"] for g in gpu_list],
        nccl_env=env,
        summary=summary,
        rdma_stack=stack,
        gpudirect=direct,
        bw_port=bw,
    )


if __name__ == "__main__":
    main()
