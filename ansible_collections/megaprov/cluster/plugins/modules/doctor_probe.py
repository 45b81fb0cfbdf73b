#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Read what `megaprov doctor` judges on one node, without changing anything."""

from __future__ import annotations

DOCUMENTATION = r"""
module: doctor_probe
short_description: Read a node's health state for megaprov doctor (GPUs, kernel log, IB ports, names, clock, versions, disks, services)
description:
  - Returns raw outputs and readings; megaprov's controller judges them (megaprov/ops/doctor/health.py), so that the
    parsers are tested on recorded outputs there.
  - "Reads: nvidia-smi's per-GPU query (ECC, PCIe link) and its remapped rows query, the NVIDIA GPUs on the PCI bus, the kernel log
    lines of the NVIDIA driver, the OOM killer and the HCAs, ibstat and perfquery per port (or sysfs), what the host
    name resolves to and the cluster interface's addresses, the clock and chrony's tracking, the versions of the driver,
    CUDA, NCCL, torch and megatron-core, free space of the given directories and the state of the given units."
  - Read-only; supports check mode.
options:
  paths:
    description: Directory name (shared, scratch) to its path; free space is measured where the path exists.
    type: dict
    default: {}
  interface:
    description: The cluster (NCCL socket) interface; empty means the interface of the default route.
    type: str
    default: ""
  venv:
    description: The training environment (its torch, megatron-core and nvidia-nccl versions are read).
    type: path
    default: /opt/megaprov/venv
  cuda_home:
    description: CUDA toolkit (its version.json is read).
    type: path
    default: /usr/local/cuda
  services:
    description: Units whose state is read (those not installed are reported as not found).
    type: list
    elements: str
    default: []
  kernel_lines:
    description: Most kernel log lines returned (the last ones).
    type: int
    default: 400
  pci_devices:
    description: PCI devices (NVIDIA GPUs are counted here).
    type: path
    default: /sys/bus/pci/devices
  sysfs_infiniband:
    description: RDMA devices.
    type: path
    default: /sys/class/infiniband
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the node's health state
  megaprov.cluster.doctor_probe:
    paths: {shared: /shared, scratch: /var/tmp}
    interface: ib0
    services: [chrony, nvidia-persistenced]
  register: probe
"""

RETURN = r"""
time:
  description: The node's clock (epoch seconds) when the probe ran.
  type: float
  returned: always
hostname:
  description: The node's host name and the addresses it resolves to (getaddrinfo), and the interface's addresses.
  type: dict
  returned: always
chrony:
  description: "chronyc -n tracking's output ({rc, stdout}), null where chrony is not installed."
  type: dict
  returned: always
versions:
  description: driver, cuda, cuda_runtime, nccl, torch and megatron_core versions ('' where absent).
  type: dict
  returned: always
disks:
  description: "Name to {path, total, free} in bytes, or {path, missing: true}."
  type: dict
  returned: always
services:
  description: "Unit to {load, active, sub, enabled}."
  type: dict
  returned: always
nvidia_smi:
  description: "nvidia-smi's query ({rc, stdout, stderr, fields, remapped: its row remapping query}), null where nvidia-smi is absent."
  type: dict
  returned: always
pci_gpus:
  description: NVIDIA GPUs on the PCI bus.
  type: int
  returned: always
kernel:
  description: The kernel log lines of the NVIDIA driver, the OOM killer and the HCAs (the last kernel_lines), and where they came from.
  type: dict
  returned: always
infiniband:
  description: "{ibstat (output or null), perfquery (CA:port to output), sysfs (CA to port to {state, phys_state, rate, link_layer, counters})}."
  type: dict
  returned: always
"""

import glob
import json
import os
import re
import shutil
import socket
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.megaprov.cluster.plugins.module_utils import gpu_query, pci

# The nvidia-smi fields doctor judges, reported with the answers: megaprov/ops/doctor/parsers.py reads them by name.
SMI_FIELDS = ",".join(gpu_query.HEALTH)
REMAP_FIELDS = ",".join(gpu_query.REMAPPED)
KERNEL_PATTERN = re.compile(
    r"NVRM|Xid|[Oo]ut of memory|oom-kill|oom_reaper|mlx5|ib_core|\bibp\w*:|nvidia-peermem|NVSwitch|nvidia-fabricmanager", re.IGNORECASE
)
COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors", "local_link_integrity_errors", "excessive_buffer_overrun_errors")
MAX_OUTPUT = 512 * 1024


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _run(module, argv, timeout=30):
    """(rc, stdout, stderr) of a command, bounded in time and size; rc 127 where it is not installed."""
    if not shutil.which(argv[0]) and not os.path.isfile(argv[0]):
        return 127, "", f"{argv[0]}: not installed"
    try:
        rc, out, err = module.run_command(["timeout", str(timeout)] + list(argv))
    except OSError as exc:
        return 126, "", str(exc)
    return rc, out[-MAX_OUTPUT:], err[-4096:]


def _json_list(rc, out):
    """ip -j's JSON array; [] where ip failed or printed something else (an ip without -j, an answer cut off)."""
    if rc != 0 or not out.strip().startswith("["):
        return []
    try:
        return json.loads(out)
    except ValueError:
        return []


def hostname_info(module, interface):
    name = socket.gethostname()
    resolved = []
    try:
        for info in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP):
            address = info[4][0]
            if address not in resolved:
                resolved.append(address)
    except OSError as exc:
        resolved = []
        error = str(exc)
    else:
        error = ""
    rc, out, dummy = _run(module, ["ip", "-j", "addr", "show"], 10)
    links = _json_list(rc, out)
    if not interface:
        rc2, route, dummy = _run(module, ["ip", "-j", "route", "show", "default"], 10)
        routes = _json_list(rc2, route)
        interface = routes[0].get("dev", "") if routes else ""
    addresses = [a.get("local", "") for link in links if link.get("ifname") == interface for a in link.get("addr_info", [])]
    return {"name": name, "resolved": resolved, "error": error, "interface": interface, "interface_addresses": [a for a in addresses if a],
            "interface_found": any(link.get("ifname") == interface for link in links)}


def versions(module, venv, cuda_home):
    found = {"driver": "", "cuda": "", "cuda_runtime": "", "nccl": "", "torch": "", "megatron_core": ""}
    text = _read("/proc/driver/nvidia/version")
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    found["driver"] = m.group(1) if m else ""
    try:
        with open(os.path.join(cuda_home, "version.json"), encoding="utf-8") as handle:
            found["cuda"] = str(json.load(handle).get("cuda", {}).get("version", ""))
    except (OSError, ValueError, AttributeError):
        pass
    python = os.path.join(venv, "bin", "python")
    if os.path.isfile(python):
        script = (
            "import importlib.metadata as m, json\n"
            "def v(*names):\n"
            "    for n in names:\n"
            "        try:\n"
            "            return m.version(n)\n"
            "        except m.PackageNotFoundError:\n"
            "            pass\n"
            "    return ''\n"
            "print(json.dumps({'torch': v('torch'), 'megatron_core': v('megatron-core', 'megatron_core'),"
            " 'nccl': v('nvidia-nccl-cu13', 'nvidia-nccl-cu12', 'nvidia-nccl-cu11'),"
            " 'cuda_runtime': v('nvidia-cuda-runtime', 'nvidia-cuda-runtime-cu13', 'nvidia-cuda-runtime-cu12')}))\n"
        )
        rc, out, dummy = _run(module, [python, "-I", "-c", script], 60)
        if rc == 0:
            try:
                found.update({k: str(v) for k, v in json.loads(out.strip().splitlines()[-1]).items()})
            except (ValueError, IndexError):
                pass
    return found


def disks(paths):
    out = {}
    for name, path in sorted(paths.items()):
        try:
            st = os.statvfs(path)
        except OSError:
            out[name] = {"path": path, "missing": True}
            continue
        out[name] = {"path": path, "total": st.f_blocks * st.f_frsize, "free": st.f_bavail * st.f_frsize}
    return out


def services(module, units):
    found = {}
    if not units:
        return found
    rc, out, dummy = _run(module, ["systemctl", "show", "--property=Id,LoadState,ActiveState,SubState,UnitFileState", "--"] + list(units), 30)
    blocks = [b for b in out.strip().split("\n\n") if b.strip()] if rc == 0 else []
    for unit, block in zip(units, blocks):  # noqa: B905 (Python 3.9 nodes)
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        found[unit] = {"load": fields.get("LoadState", ""), "active": fields.get("ActiveState", ""), "sub": fields.get("SubState", ""),
                       "enabled": fields.get("UnitFileState", "")}
    return found


def kernel_log(module, limit):
    rc, out, err = _run(module, ["journalctl", "-k", "-b", "--no-pager", "-o", "short-iso", "-q"], 60)
    source = "journalctl -k -b"
    if rc != 0 or not out.strip():
        rc, out, err = _run(module, ["dmesg", "--time-format", "iso"], 30)
        source = "dmesg"
    lines = [line for line in out.splitlines() if KERNEL_PATTERN.search(line)]
    return {"source": source, "rc": rc, "readable": rc == 0, "error": err.strip()[:300] if rc else "", "lines": lines[-limit:]}


def infiniband(module, sysfs):
    ports = {}
    for port_dir in sorted(glob.glob(os.path.join(sysfs, "*", "ports", "*"))):
        ca, port = port_dir.split(os.sep)[-3], port_dir.split(os.sep)[-1]
        counters = {}
        for name in COUNTERS:
            value = _read(os.path.join(port_dir, "counters", name))
            if value.isdigit():
                counters[name] = int(value)
        ports.setdefault(ca, {})[port] = {
            "state": _read(os.path.join(port_dir, "state")), "phys_state": _read(os.path.join(port_dir, "phys_state")),
            "rate": _read(os.path.join(port_dir, "rate")), "link_layer": _read(os.path.join(port_dir, "link_layer")), "counters": counters,
        }
    found = {"sysfs": ports, "ibstat": None, "perfquery": {}}
    if ports:
        rc, out, dummy = _run(module, ["ibstat"], 30)
        found["ibstat"] = out if rc == 0 else None
        for ca, by_port in ports.items():
            for port, state in by_port.items():
                if state["link_layer"] == "InfiniBand":
                    rc, out, dummy = _run(module, ["perfquery", "-C", ca, "-P", port], 15)
                    if rc == 0:
                        found["perfquery"][f"{ca}:{port}"] = out
    return found


def main():
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "dict", "default": {}},
            "interface": {"type": "str", "default": ""},
            "venv": {"type": "path", "default": "/opt/megaprov/venv"},
            "cuda_home": {"type": "path", "default": "/usr/local/cuda"},
            "services": {"type": "list", "elements": "str", "default": []},
            "kernel_lines": {"type": "int", "default": 400},
            "pci_devices": {"type": "path", "default": "/sys/bus/pci/devices"},
            "sysfs_infiniband": {"type": "path", "default": "/sys/class/infiniband"},
        },
        supports_check_mode=True,
    )
    p = module.params
    now = time.time()
    result = {"changed": False, "time": now}
    result["hostname"] = hostname_info(module, p["interface"])
    rc, out, dummy = _run(module, ["chronyc", "-n", "tracking"], 10)
    result["chrony"] = None if rc == 127 else {"rc": rc, "stdout": out}
    result["versions"] = versions(module, p["venv"], p["cuda_home"])
    result["disks"] = disks(p["paths"])
    result["services"] = services(module, p["services"])
    rc, out, err = _run(module, gpu_query.query_gpu(gpu_query.HEALTH), 60)
    result["nvidia_smi"] = None if rc == 127 else {"rc": rc, "stdout": out, "stderr": err, "fields": SMI_FIELDS}
    if rc == 0:
        rc, out, err = _run(module, gpu_query.query_remapped(), 60)
        result["nvidia_smi"]["remapped"] = {"rc": rc, "stdout": out, "fields": REMAP_FIELDS}
    result["pci_gpus"] = len(pci.nvidia_gpus(p["pci_devices"]))
    result["kernel"] = kernel_log(module, max(1, min(p["kernel_lines"], 5000)))
    result["infiniband"] = infiniband(module, p["sysfs_infiniband"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
