#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Collect the facts megaprov needs about a node and judge them against the requirements."""

from __future__ import annotations

DOCUMENTATION = r"""
module: node_facts
short_description: Node facts for a GPU training cluster, with a pass/warn/fail verdict
description:
  - Reads OS, kernel, CPUs, memory, free disk and the sequential write throughput of a directory,
    NVIDIA GPUs (nvidia-smi, or the PCI bus when no driver is loaded), NVLink and NVSwitch topology,
    and InfiniBand/RoCE HCAs with their port state.
  - Judges them against O(requirements) and returns every check with its verdict.
  - It never changes the node apart from the local fact file at O(facts_path) (not written in check mode) and the
    throughput test's file, which is removed.
options:
  scratch_dir:
    description: Directory whose free space and write speed are measured.
    type: path
    required: true
  write_test_mb:
    description: Megabytes written for the throughput test (0 skips it).
    type: int
    default: 256
  requirements:
    description: Thresholds (see the preflight role's defaults/main.yml).
    type: dict
    required: true
  facts_path:
    description: Where the stable facts are stored as JSON (a local fact); unchanged content is not rewritten.
    type: path
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Collect this node's facts and judge them
  megaprov.cluster.node_facts:
    scratch_dir: /var/tmp
    write_test_mb: 256
    facts_path: /etc/ansible/facts.d/megaprov_preflight.fact
    requirements:
      min_write_mb_s: 200
      write_below_min: warn
      min_memory_gb: 64
      min_disk_free_gb: 100
      min_cpus: 16
      supported_os: [debian 12, ubuntu 24.04]
      gpu_expected: true
      gpus_per_node: 8
  register: preflight
"""

RETURN = r"""
node:
  description: All facts, including measurements.
  type: dict
  returned: always
stable:
  description: The facts that do not change between runs (stored as a local fact).
  type: dict
  returned: always
checks:
  description: "List of {check, status (pass|warn|fail), value, reason}."
  type: list
  elements: dict
  returned: always
problems:
  description: "The failed checks as 'check: reason (value)'."
  type: list
  elements: str
  returned: always
warnings_list:
  description: "The warning checks as 'check: reason (value)'."
  type: list
  elements: str
  returned: always
"""

import glob
import json
import os
import tempfile
import platform
import shutil
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.megaprov.cluster.plugins.module_utils import gpu_query, pci

PCI = "/sys/bus/pci/devices"


def _read(path, default=""):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return default


def os_release(text):
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip('"')
    return {"id": values.get("ID", ""), "version": values.get("VERSION_ID", ""), "name": values.get("PRETTY_NAME", values.get("NAME", ""))}


def meminfo_mb(text):
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 0


def parse_nvidia_smi(text):
    """The GPUs in nvidia-smi's answer to the gpu_query.INVENTORY query."""
    gpus = []
    for row in gpu_query.rows(text, gpu_query.INVENTORY):
        if not row["index"].isdigit():
            continue
        memory = row["memory.total"]
        gpus.append({"index": int(row["index"]), "model": row["name"], "memory_mib": int(float(memory)) if memory.replace(".", "").isdigit() else 0,
                     "driver": row["driver_version"], "bus_id": row["pci.bus_id"]})
    return gpus


def count_nvlinks(text):
    """Active links in `nvidia-smi nvlink --status` (lines like 'Link 0: 26.562 GB/s')."""
    return sum(1 for line in text.splitlines() if line.strip().startswith("Link ") and "GB/s" in line and "inactive" not in line.lower())


def pci_nvidia(pci_root=PCI):
    functions = pci.nvidia_functions(pci_root)
    gpus = [address for address, pci_class in functions if pci.is_gpu(pci_class)]
    switches = [address for address, pci_class in functions if pci_class.startswith(pci.NVSWITCH_CLASS)]
    return gpus, switches


def rdma_devices(root="/sys/class/infiniband"):
    hcas = []
    for dev in sorted(glob.glob(os.path.join(root, "*"))):
        ports = []
        for port in sorted(glob.glob(os.path.join(dev, "ports", "*"))):
            ports.append({
                "port": int(os.path.basename(port)),
                "state": _read(os.path.join(port, "state")).split(":")[-1].strip(),
                "phys_state": _read(os.path.join(port, "phys_state")).split(":")[-1].strip(),
                "rate": _read(os.path.join(port, "rate")),
                "link_layer": _read(os.path.join(port, "link_layer")),
            })
        hcas.append({"name": os.path.basename(dev), "type": _read(os.path.join(dev, "hca_type")), "fw": _read(os.path.join(dev, "fw_ver")), "ports": ports})
    return hcas


def write_throughput(directory, megabytes):
    """Sequential write of `megabytes` MiB with fsync, in MB/s (decimal); the file is removed."""
    block = os.urandom(1 << 20) * 8
    blocks = max(1, megabytes // 8)
    path = os.path.join(directory, ".megaprov-preflight-%d" % os.getpid())
    start = time.monotonic()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for dummy in range(blocks):
                os.write(fd, block)
            os.fsync(fd)
        finally:
            os.close(fd)
        seconds = time.monotonic() - start
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return round(blocks * len(block) / 1e6 / max(seconds, 1e-6), 1)


def judge(node, req):
    """Pure: the pass/warn/fail rows for one node."""
    rows = []

    def add(check, status, value, reason):
        rows.append({"check": check, "status": status, "value": value, "reason": reason})

    os_id = "%s %s" % (node["os"]["id"], node["os"]["version"])
    supported = [s.lower() for s in req.get("supported_os", [])]
    add("os", "pass" if os_id.lower() in supported else "warn", node["os"]["name"] or os_id,
        "supported" if os_id.lower() in supported else "not a tested OS (%s)" % ", ".join(req.get("supported_os", [])))
    add("cpus", "pass" if node["cpus"] >= req["min_cpus"] else "warn", node["cpus"],
        "ok" if node["cpus"] >= req["min_cpus"] else "fewer than %d CPUs: data loading will starve the GPUs" % req["min_cpus"])
    mem_gb = node["memory_mb"] / 1024
    add("memory", "pass" if mem_gb >= req["min_memory_gb"] else "fail", "%.1f GiB" % mem_gb,
        "ok" if mem_gb >= req["min_memory_gb"] else "below %s GiB" % req["min_memory_gb"])
    free_gb = node["disk"]["free_gb"]
    add("disk", "pass" if free_gb >= req["min_disk_free_gb"] else "fail", "%.1f GB free in %s" % (free_gb, node["disk"]["path"]),
        "ok" if free_gb >= req["min_disk_free_gb"] else "below %s GB free: free space or point megaprov_scratch_dir elsewhere" % req["min_disk_free_gb"])
    speed = node["disk"].get("write_mb_s")
    if speed is None:
        add("write speed", "warn", "not measured", "write test skipped (preflight_write_test_mb: 0)")
    elif speed >= req["min_write_mb_s"]:
        add("write speed", "pass", "%s MB/s" % speed, "ok")
    else:
        add("write speed", req["write_below_min"], "%s MB/s" % speed, "below %s MB/s: checkpoints and data loading will be slow" % req["min_write_mb_s"])
    gpus, pci = node["gpus"], node["pci_gpus"]
    if req["gpu_expected"]:
        want = req["gpus_per_node"]
        if gpus and (want == 0 or len(gpus) == want):
            add("gpus", "pass", "%d x %s" % (len(gpus), gpus[0]["model"]), "driver %s" % gpus[0]["driver"])
        elif gpus:
            add(
                "gpus", "fail", "%d x %s" % (len(gpus), gpus[0]["model"]), "expected %d GPUs (megaprov_gpus_per_node): a GPU may have fallen off the bus" % want
            )
        elif pci:
            add("gpus", "warn", "%d NVIDIA GPU(s) on PCI" % len(pci), "no NVIDIA driver yet (nvidia-smi missing): the gpu stage installs it")
        else:
            add("gpus", "fail", "none", "no NVIDIA GPU found on a gpu_nodes host; set megaprov_gpu_expected: false if it is CPU-only")
    else:
        add("gpus", "pass", "%d" % len(gpus) if gpus else "no GPU", "declared GPU-less" if not gpus else "GPUs present, not required")
    if node["nvswitches"]:
        add("nvswitch", "pass", "%d NVSwitch(es)" % len(node["nvswitches"]), "Fabric Manager is required on this node")
    if gpus and len(gpus) > 1:
        add("nvlink", "pass" if node["nvlinks"] else "warn", "%d active links" % node["nvlinks"],
            "ok" if node["nvlinks"] else "no active NVLink between the GPUs: intra-node all-reduce goes over PCIe")
    hcas = node["hcas"]
    active = ["%s/%d %s %s" % (h["name"], p["port"], p["link_layer"], p["rate"]) for h in hcas for p in h["ports"] if p["state"] == "ACTIVE"]
    if active:
        add("rdma", "pass", ", ".join(active), "ok")
    elif hcas:
        add("rdma", "warn", "%d HCA(s), no ACTIVE port" % len(hcas), "check cabling and the subnet manager (ibstat)")
    else:
        add("rdma", "warn" if req["gpu_expected"] else "pass", "none", "no RDMA device: NCCL will use TCP sockets")
    return rows


def store_facts(module, path, stable):
    """Write the stable facts as a local fact file; True when the content changed. Honors check mode."""
    content = json.dumps(stable, indent=2, sort_keys=True) + "\n"
    if _read(path, None) == content.strip():
        return False
    if module.check_mode:
        return True
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".megaprov_preflight.")
    with os.fdopen(fd, "w") as handle:
        handle.write(content)
    os.chmod(tmp, 0o644)
    module.atomic_move(tmp, path)
    return True


def run_text(module, args):
    if not shutil.which(args[0]):
        return None
    rc, out, err = module.run_command(args)
    return out if rc == 0 else None


def main():
    module = AnsibleModule(
        argument_spec={"scratch_dir": {"type": "path", "required": True}, "write_test_mb": {"type": "int", "default": 256},
                       "requirements": {"type": "dict", "required": True}, "facts_path": {"type": "path"}},
        supports_check_mode=True,
    )
    scratch = module.params["scratch_dir"]
    if not os.path.isdir(scratch):
        module.fail_json(msg="preflight_scratch_dir %s does not exist on %s; create it or set megaprov_scratch_dir" % (scratch, platform.node()))
    usage = shutil.disk_usage(scratch)
    smi = run_text(module, gpu_query.query_gpu(gpu_query.INVENTORY))
    gpus = parse_nvidia_smi(smi or "")
    nvlink_text = run_text(module, ["nvidia-smi", "nvlink", "--status"]) if gpus else None
    topo = run_text(module, ["nvidia-smi", "topo", "-m"]) if gpus else None
    pci_gpus, switches = pci_nvidia()
    node = {
        "hostname": platform.node(),
        "os": os_release(_read("/etc/os-release")),
        "kernel": platform.release(),
        "cpus": len(os.sched_getaffinity(0)),
        "memory_mb": meminfo_mb(_read("/proc/meminfo")),
        "disk": {"path": scratch, "total_gb": round(usage.total / 1e9, 1), "free_gb": round(usage.free / 1e9, 1)},
        "gpus": gpus,
        "pci_gpus": pci_gpus,
        "nvswitches": switches,
        "nvlinks": count_nvlinks(nvlink_text or ""),
        "gpu_topology": topo or "",
        "hcas": rdma_devices(),
    }
    if module.params["write_test_mb"] > 0:
        node["disk"]["write_mb_s"] = write_throughput(scratch, module.params["write_test_mb"])
    stable = {k: v for k, v in node.items() if k != "disk"}
    stable["disk"] = {"path": scratch, "total_gb": node["disk"]["total_gb"]}
    checks = judge(node, module.params["requirements"])
    problems = ["%s: %s (%s)" % (c["check"], c["reason"], c["value"]) for c in checks if c["status"] == "fail"]
    warnings = ["%s: %s (%s)" % (c["check"], c["reason"], c["value"]) for c in checks if c["status"] == "warn"]
    changed = store_facts(module, module.params["facts_path"], stable) if module.params["facts_path"] else False
    module.exit_json(changed=changed, node=node, stable=stable, checks=checks, problems=problems, warnings_list=warnings)


if __name__ == "__main__":
    main()
