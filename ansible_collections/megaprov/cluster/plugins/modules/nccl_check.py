#!/usr/bin/python
# megaprov: run an nccl-tests binary and judge it: data errors, bus bandwidth, the transport NCCL chose.
from __future__ import annotations

DOCUMENTATION = r"""
module: megaprov_nccl_check
short_description: Run nccl-tests (all_reduce_perf) and judge correctness, bus bandwidth and transport
description:
  - Runs C(argv) with NCCL_DEBUG=INFO, parses the nccl-tests result table (its C(#wrong) columns and the
    "Avg bus bandwidth" line) and NCCL's "via ..." channel lines.
  - Fails when any size has wrong elements, when the average or peak bus bandwidth is under the threshold, when a
    required transport (for example NET/IB or GDRDMA) never appears, or when a forbidden one (NET/Socket) does.
  - With C(baseline_file), the first passing run records its peak bus bandwidth there and later runs must reach
    C(baseline_ratio) of it.
options:
  argv: {type: list, elements: str, required: true, description: The command (all_reduce_perf or mpirun ...).}
  environment: {type: dict, default: {}, description: Extra environment for the command.}
  min_busbw_gbps: {type: float, default: 0, description: Peak bus bandwidth the run must reach (0 = report only).}
  require_transports: {type: list, elements: str, default: [], description: Substrings that must appear in NCCL's channel lines.}
  forbid_transports: {type: list, elements: str, default: [], description: Substrings that must not appear there.}
  baseline_file: {type: path, description: JSON file holding the recorded peak bus bandwidth of this test.}
  baseline_ratio: {type: float, default: 0.8, description: Share of the baseline the run must reach.}
  timeout: {type: int, default: 600, description: Seconds before the run is killed.}
  expect_nccl_version: {type: str, description: "NCCL release every rank must load (NCCL's 'NCCL version' line), e.g. the training environment's 2.30.7."}
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
    module.exit_json(changed=recorded, summary=summary, result=result, transports=seen, nccl_versions=versions, baseline_gbps=baseline, baseline_recorded=recorded)


if __name__ == "__main__":
    main()
