#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# megaprov: run an nccl-tests binary and judge it: data errors, bus bandwidth, the transport NCCL chose.
from __future__ import annotations

DOCUMENTATION = r"""
module: nccl_check
short_description: Run nccl-tests (all_reduce_perf) and judge correctness, bus bandwidth and transport
description:
  - Runs C(argv) with NCCL_DEBUG=INFO, parses the nccl-tests result table (its C(#wrong) columns and the
    "Avg bus bandwidth" line) and NCCL's "via ..." channel lines.
  - Fails when any size has wrong elements, when the average or peak bus bandwidth is under the threshold, when a
    required transport (for example NET/IB or GDRDMA) never appears, or when a forbidden one (NET/Socket) does.
  - With C(baseline_file), the first passing run records its peak bus bandwidth there and later runs must reach
    C(baseline_ratio) of it.
  - Not supported in check mode (it runs the benchmark).
options:
  argv:
    description: The command (all_reduce_perf or mpirun ...).
    type: list
    elements: str
    required: true
  environment:
    description: Extra environment for the command.
    type: dict
    default: {}
  min_busbw_gbps:
    description: Peak bus bandwidth the run must reach (0 = report only).
    type: float
    default: 0
  require_transports:
    description: Substrings that must appear in NCCL's channel lines.
    type: list
    elements: str
    default: []
  forbid_transports:
    description: Substrings that must not appear there.
    type: list
    elements: str
    default: []
  baseline_file:
    description: JSON file holding the recorded peak bus bandwidth of this test.
    type: path
  baseline_ratio:
    description: Share of the baseline the run must reach.
    type: float
    default: 0.8
  timeout:
    description: Seconds before the run is killed.
    type: int
    default: 600
  expect_nccl_version:
    description: NCCL release every rank must load (NCCL's C(NCCL version) line), for example the training environment's 2.30.7.
    type: str
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Run all_reduce_perf on the 8 GPUs of this node and require InfiniBand
  megaprov.cluster.nccl_check:
    argv: [/opt/nccl-tests/build/all_reduce_perf, -b, 8M, -e, 1G, -f, "2", -g, "8"]
    min_busbw_gbps: 100
    require_transports: [NET/IB]
    forbid_transports: [NET/Socket]
    baseline_file: /var/lib/megaprov/nccl/all_reduce_single.json
  register: nccl
"""

RETURN = r"""
summary:
  description: One line for the report (NCCL version, peak and average bus bandwidth, wrong elements, transports, seconds).
  type: str
  returned: always
result:
  description: The parsed result table (rows, wrong, avg_busbw, peak_busbw, out_of_bounds).
  type: dict
  returned: always
transports:
  description: The transports NCCL chose, from its C(via ...) channel lines.
  type: list
  elements: str
  returned: always
nccl_versions:
  description: The NCCL versions the ranks loaded.
  type: list
  elements: str
  returned: success
baseline_gbps:
  description: The recorded peak bus bandwidth the run was held to; null when there was none yet.
  type: float
  returned: success
baseline_recorded:
  description: Whether this run recorded the baseline (the first passing run with O(baseline_file)).
  type: bool
  returned: success
stdout_tail:
  description: The last 30 lines of the command's output.
  type: list
  elements: str
  returned: failure
"""

import json
import os
import re
import time

from ansible.module_utils.basic import AnsibleModule

# One result row: size count type redop root, then out-of-place and in-place (time algbw busbw #wrong). nccl-tests
# 2.19's getFloatStr (src/util.cu) prints a value too wide for its column as "%7.1e" (a time of 10 s or more: 1.4e+07).
NUM = r"[\d.]+(?:e[+-]?\d+)?"
ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)"
    rf"\s+({NUM})\s+({NUM})\s+({NUM})\s+(\S+)"
    rf"\s+({NUM})\s+({NUM})\s+({NUM})\s+(\S+)\s*$"
)
AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([\d.eE+-]+)", re.M)
OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)", re.M)
VIA = re.compile(r"\bvia (\S+)")
NCCL_VERSION = re.compile(r"NCCL INFO NCCL version (\d+\.\d+\.\d+)")


def parse(text):
    """Rows, total wrong elements, average bus bandwidth and out-of-bounds count of an nccl-tests run."""
    rows = []
    for line in text.splitlines():
        match = ROW.match(line)
        if not match:
            continue
        g = match.groups()
        wrong = [0 if w == "N/A" else int(float(w)) for w in (g[8], g[12])]
        rows.append({"bytes": int(g[0]), "busbw_oop": float(g[7]), "busbw_ip": float(g[11]), "wrong": sum(wrong)})
    avg = AVG.search(text)
    oob = OOB.search(text)
    return {
        "rows": rows,
        "wrong": sum(r["wrong"] for r in rows),
        "avg_busbw": float(avg.group(1)) if avg else None,
        "peak_busbw": max((max(r["busbw_oop"], r["busbw_ip"]) for r in rows), default=0.0),
        "out_of_bounds": int(oob.group(1)) if oob else None,
    }


def transports(text):
    """Transports NCCL set up, from NCCL_DEBUG=INFO lines such as 'Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA'."""
    return sorted({m.group(1) for line in text.splitlines() if "NCCL INFO" in line for m in VIA.finditer(line)})


def loaded_versions(text):
    """NCCL releases the ranks loaded, from NCCL_DEBUG=INFO's 'NCCL INFO NCCL version 2.30.7+cuda13.0' line."""
    return sorted({m.group(1) for m in NCCL_VERSION.finditer(text)})


def judge(result, seen, min_busbw, require, forbid, baseline, ratio, expect_version=None, versions=()):
    """Problems (empty = pass)."""
    problems = []
    if expect_version and list(versions) != [expect_version]:
        problems.append(
            "nccl-tests ran with NCCL %s, not %s (the NCCL training loads): rebuild nccl-tests against the training environment"
            % (", ".join(versions) or "of unknown version (no 'NCCL version' line)", expect_version)
        )
    if not result["rows"]:
        problems.append("no result rows in the output: the test did not run")
        return problems
    if result["wrong"] or result["out_of_bounds"]:
        problems.append("%d wrong elements (%s out-of-bounds sizes): data corruption, check GPUs and links" % (result["wrong"], result["out_of_bounds"]))
    if min_busbw and result["peak_busbw"] < min_busbw:
        problems.append("peak bus bandwidth %.1f GB/s is under the threshold %.1f GB/s" % (result["peak_busbw"], min_busbw))
    if baseline and result["peak_busbw"] < ratio * baseline:
        problems.append("peak bus bandwidth %.1f GB/s is under %.0f%% of the recorded baseline %.1f GB/s" % (result["peak_busbw"], ratio * 100, baseline))
    joined = " ".join(seen)
    for want in require:
        if want not in joined:
            problems.append("transport %s never used (NCCL chose: %s)" % (want, ", ".join(seen) or "nothing logged"))
    for bad in forbid:
        if bad in joined:
            problems.append("NCCL fell back to %s (chose: %s): check the fabric stage and nvidia-peermem" % (bad, ", ".join(seen)))
    return problems


def main():
    module = AnsibleModule(
        argument_spec={
            "argv": {"type": "list", "elements": "str", "required": True},
            "environment": {"type": "dict", "default": {}},
            "min_busbw_gbps": {"type": "float", "default": 0.0},
            "require_transports": {"type": "list", "elements": "str", "default": []},
            "forbid_transports": {"type": "list", "elements": "str", "default": []},
            "baseline_file": {"type": "path"},
            "baseline_ratio": {"type": "float", "default": 0.8},
            "timeout": {"type": "int", "default": 600},
            "expect_nccl_version": {"type": "str"},
        },
        supports_check_mode=False,
    )
    params = module.params
    env = dict(params["environment"], NCCL_DEBUG="INFO")
    start = time.monotonic()
    rc, out, err = module.run_command(["timeout", str(params["timeout"]), *params["argv"]], environ_update={k: str(v) for k, v in env.items()})
    seconds = round(time.monotonic() - start, 1)
    text = out + "\n" + err
    result = parse(out)
    seen = transports(text)
    baseline = None
    path = params["baseline_file"]
    if path and os.path.exists(path):
        with open(path) as handle:
            baseline = float(json.load(handle)["peak_busbw_gbps"])
    problems = ([] if rc == 0 else ["%s exited %d: %s" % (params["argv"][0], rc, (err.strip().splitlines() or ["no error output"])[-1])])
    versions = loaded_versions(text)
    problems += judge(
        result, seen, params["min_busbw_gbps"], params["require_transports"], params["forbid_transports"], baseline, params["baseline_ratio"],
        params["expect_nccl_version"], versions,
    )
    recorded = False
    if not problems and path and baseline is None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            json.dump({"peak_busbw_gbps": result["peak_busbw"], "avg_busbw_gbps": result["avg_busbw"], "argv": params["argv"], "recorded": time.time()}, handle)
        recorded = True
    summary = "NCCL %s: peak %.1f GB/s, avg %s GB/s, %d wrong, transports %s, %.1f s" % (
        ",".join(versions) or "?", result["peak_busbw"], result["avg_busbw"], result["wrong"], ",".join(seen) or "-", seconds)
    if problems:
        module.fail_json(msg="; ".join(problems), summary=summary, result=result, transports=seen, stdout_tail=out.splitlines()[-30:])
    module.exit_json(
        changed=recorded, summary=summary, result=result, transports=seen, nccl_versions=versions, baseline_gbps=baseline, baseline_recorded=recorded
    )


if __name__ == "__main__":
    main()
