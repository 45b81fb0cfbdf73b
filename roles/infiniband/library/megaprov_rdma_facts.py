#!/usr/bin/python
"""Read-only: RDMA devices and ports from sysfs, NVIDIA GPUs, and the NCCL/Gloo network environment they imply."""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: megaprov_rdma_facts
short_description: HCAs, ports and the NCCL environment for a node
options:
  sysfs: {type: path, default: /sys/class/infiniband}
  gpu_dir: {type: path, default: /proc/driver/nvidia/gpus}
  socket_interface: {type: str, required: true, description: interface of the cluster network}
  roce_gid_index: {type: int, default: 3}
  overrides: {type: dict, default: {}}
"""


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def ports(sysfs: str) -> list[dict]:
    """Every port of every RDMA device: name, port, state, rate, link layer."""
    found = []
    if not os.path.isdir(sysfs):
        return found
    for dev in sorted(os.listdir(sysfs)):
        base = os.path.join(sysfs, dev, "ports")
        if not os.path.isdir(base):
            continue
        for port in sorted(os.listdir(base), key=lambda p: int(p) if p.isdigit() else 0):
            state = _read(os.path.join(base, port, "state"))  # "4: ACTIVE"
            found.append(
                {
                    "device": dev,
                    "port": int(port) if port.isdigit() else port,
                    "state": state.split(":", 1)[-1].strip() if state else "UNKNOWN",
                    "rate": _read(os.path.join(base, port, "rate")),
                    "link_layer": _read(os.path.join(base, port, "link_layer")) or "InfiniBand",
                }
            )
    return found


def nccl_env(found: list[dict], interface: str, gid_index: int, overrides: dict) -> tuple[dict, str]:
    """The environment NCCL and Gloo need on this node, and the line the report shows."""
    env = {"NCCL_SOCKET_IFNAME": interface, "GLOO_SOCKET_IFNAME": interface}
    active = [p for p in found if p["state"] == "ACTIVE"]
    if active:
        env["NCCL_IB_HCA"] = ",".join(f"{p['device']}:{p['port']}" for p in active)
        if any(p["link_layer"] == "Ethernet" for p in active):
            env["NCCL_IB_GID_INDEX"] = str(gid_index)  # RoCE v2 on most fabrics
        kinds = sorted({"RoCE" if p["link_layer"] == "Ethernet" else "InfiniBand" for p in active})
        summary = f"RDMA: {len(active)} active port(s) ({', '.join(kinds)}): {env['NCCL_IB_HCA']}; sockets on {interface}"
    elif found:
        env["NCCL_IB_DISABLE"] = "1"
        states = ", ".join(f"{p['device']}:{p['port']} {p['state']}" for p in found)
        summary = f"RDMA devices present but no port is ACTIVE ({states}): NCCL will use TCP sockets on {interface}"
    else:
        env["NCCL_IB_DISABLE"] = "1"
        summary = f"no RDMA device: NCCL will use TCP sockets on {interface}"
    env.update({str(k): str(v) for k, v in overrides.items()})
    return env, summary


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "sysfs": {"type": "path", "default": "/sys/class/infiniband"},
            "gpu_dir": {"type": "path", "default": "/proc/driver/nvidia/gpus"},
            "socket_interface": {"type": "str", "required": True},
            "roce_gid_index": {"type": "int", "default": 3},
            "overrides": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    found = ports(p["sysfs"])
    gpus = len(os.listdir(p["gpu_dir"])) if os.path.isdir(p["gpu_dir"]) else 0
    env, summary = nccl_env(found, p["socket_interface"], p["roce_gid_index"], p["overrides"])
    module.exit_json(changed=False, ports=found, hcas=sorted({x["device"] for x in found}), gpus=gpus, nccl_env=env, summary=summary)


if __name__ == "__main__":
    main()
