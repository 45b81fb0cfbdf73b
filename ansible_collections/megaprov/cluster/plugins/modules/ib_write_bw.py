#!/usr/bin/python
"""Client side of an ib_write_bw pair test: connect to a peer running the server, parse the average bandwidth."""

from __future__ import annotations

import subprocess

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: megaprov_ib_write_bw
short_description: ib_write_bw to a peer, bandwidth against a threshold
options:
  peer: {type: str, required: true, description: address of the node running ib_write_bw as server}
  device: {type: str, required: true}
  port: {type: int, default: 18515}
  seconds: {type: int, default: 5}
  threshold_gbps: {type: float, default: 0}
  ib_port: {type: int, default: 1, description: port of the RDMA device}
  gid_index: {type: int, description: "GID index (-x) for a RoCE port: perftest's default, GID 0, is RoCE v1 and link-local"}
"""


def parse_average_gbps(output: str) -> float | None:
    """The 'BW average[Gb/sec]' column of perftest's result table."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if "BW average[Gb/sec]" in line:
            columns = line.split()
            index = next(k for k, c in enumerate(columns) if c.startswith("average"))  # "BW", "peak[..]", "BW", "average[..]"
            position = index - columns[:index].count("BW")
            for row in lines[i + 1 :]:
                values = row.split()
                if values and values[0].isdigit():
                    return float(values[position])
    return None


def argv(device: str, port: int, seconds: int, gid_index: int | None = None, peer: str | None = None, ib_port: int = 1) -> list[str]:
    """perftest's ib_write_bw command line; the server omits the peer. A RoCE port needs -x on both sides."""
    args = ["ib_write_bw", "-d", device, "-i", str(ib_port), "-p", str(port), "-D", str(seconds), "-F", "--report_gbits"]
    if gid_index is not None:
        args += ["-x", str(gid_index)]
    return args + ([peer] if peer else [])


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "peer": {"type": "str", "required": True},
            "device": {"type": "str", "required": True},
            "port": {"type": "int", "default": 18515},
            "seconds": {"type": "int", "default": 5},
            "threshold_gbps": {"type": "float", "default": 0},
            "gid_index": {"type": "int"},
            "ib_port": {"type": "int", "default": 1},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: no traffic sent")
    proc = subprocess.run(argv(p["device"], p["port"], p["seconds"], p["gid_index"], p["peer"], p["ib_port"]), capture_output=True, text=True, timeout=p["seconds"] + 60, check=False)
    gbps = parse_average_gbps(proc.stdout)
    result = {"changed": False, "peer": p["peer"], "device": p["device"], "gbps": gbps, "threshold_gbps": p["threshold_gbps"], "rc": proc.returncode}
    if proc.returncode != 0 or gbps is None:
        module.fail_json(msg=f"ib_write_bw to {p['peer']} on {p['device']} failed: {(proc.stderr or proc.stdout).strip()[-300:]}", **result)
    if gbps < p["threshold_gbps"]:
        module.fail_json(msg=f"ib_write_bw to {p['peer']} on {p['device']}: {gbps:.1f} Gb/s is below infiniband_bw_threshold_gbps={p['threshold_gbps']}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
