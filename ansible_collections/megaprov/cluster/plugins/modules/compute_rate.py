#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Measure a node's sustained dense matmul rate with its training interpreter and store it as a local fact."""

from __future__ import annotations

DOCUMENTATION = r"""
module: compute_rate
short_description: Sustained dense GEMM rate of a node (bf16 per GPU, fp32 on CPU), stored as a local fact
description:
  - "Runs a short GEMM benchmark with the training environment's interpreter: bf16 matrix products on every GPU
    (torch.cuda, timed with CUDA events after a warm-up), or fp32 products on the CPU (torch, else numpy)."
  - The result is stored in O(facts_path) (a local fact, C(ansible_local.megaprov_compute)) and returned as the fact
    C(megaprov_compute), which lands in the controller's fact cache where megaprov plan and train read it.
  - A stored rate is kept while the node is the same (same backend, devices, threads and sizes), so re-runs are
    idempotent; every run still measures and reports the fresh rate against the stored one (a drop means the node
    is throttled or busy). O(refresh) stores the fresh rate.
  - Measures in check mode too (the GEMMs only read); the fact file is not written then.
options:
  python:
    description: Interpreter of the training environment (torch).
    type: path
    required: true
  facts_path:
    description: Where the rate is stored as JSON (a local fact).
    type: path
    required: true
  seconds:
    description: Seconds of timed GEMMs per device after the warm-up.
    type: float
    default: 2.0
  cpu_size:
    description: Matrix size n of the n x n x n fp32 CPU GEMM.
    type: int
    default: 1024
  gpu_size:
    description: Matrix size n of the n x n x n bf16 GPU GEMM.
    type: int
    default: 8192
  refresh:
    description: Store the fresh measurement even when a rate for this node is stored.
    type: bool
    default: false
  warn_below:
    description: Warn when the fresh rate is below this fraction of the stored one.
    type: float
    default: 0.5
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Measure this node's GEMM rate with the training environment
  megaprov.cluster.compute_rate:
    python: /opt/megaprov/venv/bin/python
    facts_path: /etc/ansible/facts.d/megaprov_compute.fact
    seconds: 2
  register: compute
"""

RETURN = r"""
measured:
  description: False when there is no training interpreter yet (nothing measured, nothing stored).
  type: bool
  returned: always
fresh:
  description: This run's measurement.
  type: dict
  returned: when measured
stored:
  description: The rate the fact file holds after this run (null in check mode on a node with none).
  type: dict
  returned: when measured
ratio:
  description: Fresh per-device rate over the stored one.
  type: float
  returned: when measured
summary:
  description: One line for the report.
  type: str
  returned: always
warning:
  description: The fresh rate is far below the stored one (empty when not).
  type: str
  returned: always
"""

import json
import os
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

# Run by the training interpreter: python -c SCRIPT SECONDS CPU_SIZE GPU_SIZE; prints one JSON line.
SCRIPT = r"""
import json, os, platform, statistics, sys, time
seconds, cpu_n, gpu_n = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
out = {"backend": None, "devices": []}
try:
    import torch
except ImportError:
    torch = None
if torch is not None and torch.cuda.is_available():
    out.update(backend="torch-cuda", dtype="bfloat16", size=gpu_n, version=torch.__version__, threads=0)
    for index in range(torch.cuda.device_count()):
        with torch.cuda.device(index):
            a = torch.randn(gpu_n, gpu_n, dtype=torch.bfloat16, device="cuda")
            b = torch.randn(gpu_n, gpu_n, dtype=torch.bfloat16, device="cuda")
            c = torch.empty(gpu_n, gpu_n, dtype=torch.bfloat16, device="cuda")
            for _ in range(5):
                torch.mm(a, b, out=c)
            torch.cuda.synchronize()
            rates, spent, batch = [], 0.0, 10
            while spent < seconds or len(rates) < 3:
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(batch):
                    torch.mm(a, b, out=c)
                stop.record()
                stop.synchronize()
                took = start.elapsed_time(stop) / 1000.0
                spent += took
                rates.append(2.0 * gpu_n ** 3 * batch / took)
            out["devices"].append({"index": index, "name": torch.cuda.get_device_name(index), "tflops": statistics.median(rates) / 1e12})
            del a, b, c
            torch.cuda.empty_cache()
else:
    if torch is not None:
        a, b = torch.randn(cpu_n, cpu_n), torch.randn(cpu_n, cpu_n)
        mm = lambda: torch.mm(a, b)
        out.update(backend="torch-cpu", version=torch.__version__, threads=torch.get_num_threads())
    else:
        try:
            import numpy
        except ImportError:
            print(json.dumps({"error": "neither torch nor numpy in this interpreter"}))
            sys.exit(0)
        a = numpy.random.rand(cpu_n, cpu_n).astype(numpy.float32)
        b = numpy.random.rand(cpu_n, cpu_n).astype(numpy.float32)
        mm = lambda: a @ b
        out.update(backend="numpy-cpu", version=numpy.__version__, threads=0)
    out.update(dtype="float32", size=cpu_n)
    mm()
    rates, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(rates) < 3:
        begin = time.perf_counter()
        mm()
        rates.append(2.0 * cpu_n ** 3 / (time.perf_counter() - begin))
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            name = next((l.split(":", 1)[1].strip() for l in handle if l.startswith("model name")), name)
    except OSError:
        pass
    out["devices"].append({"index": 0, "name": name, "tflops": statistics.median(rates) / 1e12, "cpus": len(os.sched_getaffinity(0))})
print(json.dumps(out))
"""


def parse_measurement(text):
    """The last JSON line the script printed, checked; raises ValueError with the reason."""
    lines = [line for line in text.splitlines() if line.startswith("{")]
    if not lines:
        raise ValueError("the measurement printed no result")
    doc = json.loads(lines[-1])
    if doc.get("error"):
        raise ValueError(doc["error"])
    devices = doc.get("devices") or []
    if not devices or any(not isinstance(d.get("tflops"), (int, float)) or d["tflops"] <= 0 for d in devices):
        raise ValueError("the measurement found no device with a positive rate: %s" % lines[-1][:200])
    return doc


def record(doc, now):
    """The fact stored for a node: per-device rate (the slowest device: ranks wait for it), node total, and the
    fingerprint that says whether a stored rate still belongs to this node."""
    devices = [{"index": d["index"], "name": d["name"], "tflops": round(float(d["tflops"]), 6)} for d in doc["devices"]]
    return {
        "version": 1,
        "backend": doc["backend"],
        "dtype": doc["dtype"],
        "size": doc["size"],
        "threads": doc.get("threads", 0),
        "library": doc.get("version", ""),
        "devices": devices,
        "tflops_per_device": min(d["tflops"] for d in devices),
        "tflops_node": round(sum(d["tflops"] for d in devices), 6),
        "measured_at": now,
    }


def fingerprint(rec):
    return (rec.get("backend"), rec.get("dtype"), rec.get("size"), rec.get("threads"), rec.get("library"),
            tuple(d.get("name") for d in rec.get("devices", [])))


def decide(stored, fresh, refresh, warn_below):
    """Pure: (what the fact file should hold, changed, ratio fresh/stored, warning)."""
    if stored is None or refresh or fingerprint(stored) != fingerprint(fresh):
        keep = fresh
    else:
        keep = stored
    ratio = fresh["tflops_per_device"] / keep["tflops_per_device"] if keep["tflops_per_device"] > 0 else 1.0
    warning = ""
    if ratio < warn_below:
        warning = ("compute rate %s is %.0f %% of the stored %s: the node is throttled or busy (a fresh measurement is stored with refresh)"
                   % (rate_text(fresh["tflops_per_device"]), 100 * ratio, rate_text(keep["tflops_per_device"])))
    return keep, keep is not stored, round(ratio, 3), warning


def rate_text(tflops):
    return "%.1f GFLOP/s" % (tflops * 1e3) if tflops < 1 else "%.1f TFLOP/s" % tflops


def describe(rec):
    where = "%d GPU(s)" % len(rec["devices"]) if rec["backend"] == "torch-cuda" else "%d thread(s)" % rec["threads"] if rec["threads"] else "CPU"
    return "%s per device, %s %s GEMM %d^3 (%s, %s)" % (rate_text(rec["tflops_per_device"]), rec["dtype"], rec["backend"], rec["size"], where,
                                                        rec["measured_at"])


def read_stored(path):
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("version") == 1 and doc.get("tflops_per_device") else None


def store(module, path, rec):
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".megaprov_compute.")
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps(rec, indent=2, sort_keys=True) + "\n")
    os.chmod(tmp, 0o644)
    module.atomic_move(tmp, path)


def main():
    module = AnsibleModule(
        argument_spec={"python": {"type": "path", "required": True}, "facts_path": {"type": "path", "required": True},
                       "seconds": {"type": "float", "default": 2.0}, "cpu_size": {"type": "int", "default": 1024},
                       "gpu_size": {"type": "int", "default": 8192}, "refresh": {"type": "bool", "default": False},
                       "warn_below": {"type": "float", "default": 0.5}},
        supports_check_mode=True,
    )
    p = module.params
    stored = read_stored(p["facts_path"])
    if not os.access(p["python"], os.X_OK):
        why = "not measured: no training interpreter at %s yet (the python stage builds it and measures then)" % p["python"]
        facts = {"megaprov_compute": stored} if stored else {}
        module.exit_json(changed=False, measured=False, summary=why, warning="", ansible_facts=facts)
    rc, out, err = module.run_command([p["python"], "-c", SCRIPT, str(p["seconds"]), str(p["cpu_size"]), str(p["gpu_size"])])
    if rc != 0:
        module.fail_json(msg="the GEMM measurement failed with %s (rc %d): %s" % (p["python"], rc, (err or out).strip()[-400:]))
    try:
        fresh = record(parse_measurement(out), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    except ValueError as error:
        module.fail_json(msg="the GEMM measurement with %s: %s" % (p["python"], error))
    keep, changed, ratio, warning = decide(stored, fresh, p["refresh"], p["warn_below"])
    if changed and not module.check_mode:
        store(module, p["facts_path"], keep)
    # In check mode the file keeps what it held: the controller must not record a rate the node does not hold.
    held = stored if module.check_mode else keep
    summary = "%s; this run %s (%.2f x)" % (describe(keep), rate_text(fresh["tflops_per_device"]), ratio)
    module.exit_json(changed=changed, measured=True, fresh=fresh, stored=held, ratio=ratio, summary=summary, warning=warning,
                     ansible_facts={"megaprov_compute": held} if held else {})


if __name__ == "__main__":
    main()
