#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Client side of an ib_write_bw pair test: connect to a peer running the server, parse the average bandwidth."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ib_write_bw
short_description: ib_write_bw to a peer, bandwidth against a threshold
description:
  - Runs perftest's C(ib_write_bw) as the client of a peer that runs it as the server, parses the average bandwidth
    of its result table and fails when the run fails or the bandwidth is below O(threshold_gbps).
  - In check mode no traffic is sent and the task is reported as skipped.
options:
  peer:
    description: Address of the node running ib_write_bw as server.
    type: str
    required: true
  device:
    description: RDMA device to use (C(-d)), such as C(mlx5_0).
    type: str
    required: true
  port:
    description: TCP port of the server's connection setup (C(-p)).
    type: int
    default: 18515
  seconds:
    description: Duration of the test in seconds (C(-D)).
    type: int
    default: 5
  threshold_gbps:
    description: Average bandwidth in Gb/s the run must reach (0 = report only).
    type: float
    default: 0
  ib_port:
    description: Port of the RDMA device (C(-i)).
    type: int
    default: 1
  gid_index:
    description: GID index (C(-x)) for a RoCE port; perftest's default, GID 0, is RoCE v1 and link-local.
    type: int
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Measure ib_write_bw to a peer that runs the server
  megaprov.cluster.ib_write_bw:
    peer: 10.0.0.12
    device: mlx5_0
    seconds: 5
    threshold_gbps: 90
  register: bandwidth
"""

RETURN = r"""
peer:
  description: The peer measured against.
  type: str
  returned: when the test ran
device:
  description: The RDMA device used.
  type: str
  returned: when the test ran
gbps:
  description: Average bandwidth in Gb/s; null when the output held no result table.
  type: float
  returned: when the test ran
threshold_gbps:
  description: The threshold the bandwidth was held to.
  type: float
  returned: when the test ran
rc:
  description: Exit status of ib_write_bw.
  type: int
  returned: when the test ran
"""

import subprocess

from ansible.module_utils.basic import AnsibleModule


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
    proc = subprocess.run(
        argv(p["device"], p["port"], p["seconds"], p["gid_index"], p["peer"], p["ib_port"]),
        capture_output=True,
        text=True,
        timeout=p["seconds"] + 60,
        check=False,
    )
    gbps = parse_average_gbps(proc.stdout)
    result = {"changed": False, "peer": p["peer"], "device": p["device"], "gbps": gbps, "threshold_gbps": p["threshold_gbps"], "rc": proc.returncode}
    if proc.returncode != 0 or gbps is None:
        module.fail_json(msg=f"ib_write_bw to {p['peer']} on {p['device']} failed: {(proc.stderr or proc.stdout).strip()[-300:]}", **result)
    if gbps < p["threshold_gbps"]:
        module.fail_json(
            msg=f"ib_write_bw to {p['peer']} on {p['device']}: {gbps:.1f} Gb/s is below infiniband_bw_threshold_gbps={p['threshold_gbps']}", **result
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
