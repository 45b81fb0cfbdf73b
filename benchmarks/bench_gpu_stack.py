#!/usr/bin/env python3
"""GPU-stack stages (gpu, nccl, python) on a 3-node lab: first run and idempotent re-run (changed must be 0),
and the bytes each node takes in: network bytes received during the stages (apt, from each container's eth0
counters) and wheel bytes installed from the wheelhouse (what a node pulling from PyPI would download).
The lab nodes have no GPU, so the driver, CUDA and NCCL stages report "skipped: no GPU" and the python stage
installs torch's CPU build. Prints figures; asserts nothing about time.

    .venv/bin/python benchmarks/bench_gpu_stack.py [--nodes 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from labbench import ROOT, megaprov, podman_exec

LAB = "benchgpu"
sys.path.insert(0, str(ROOT))

from megaprov import wheelhouse  # noqa: E402


def rx_bytes(container: str) -> int:
    return int(podman_exec(container, "cat /sys/class/net/eth0/statistics/rx_bytes"))


def wheel_bytes(container: str, wheels: Path) -> int:
    """Bytes of the wheelhouse files whose distributions are installed in the node's venv."""
    freeze = podman_exec(container, "/opt/megaprov/venv/bin/python -m pip list --format=freeze 2>/dev/null")
    names = {line.split("==")[0].lower().replace("-", "_") for line in freeze.splitlines() if "==" in line}
    return sum(w.stat().st_size for w in wheels.glob("*.whl") if w.name.split("-")[0].lower() in names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()
    wheels = wheelhouse.build()
    megaprov("lab", "down", "--name", LAB)
    try:
        _, up = megaprov("lab", "up", "--nodes", str(args.nodes), "--name", LAB)
        inventory = up["inventory"]
        containers = [n["container"] for n in up["nodes"]]
        megaprov("bootstrap", "-i", inventory, "--tags", "validate,preflight,base,ssh_mesh,storage,fabric")
        before = {c: rx_bytes(c) for c in containers}
        for label in ("first run", "re-run"):
            seconds, result = megaprov("bootstrap", "-i", inventory, "--tags", "gpu,nccl,python")
            print(f"gpu + nccl + python stages on {args.nodes} nodes, {label}: {seconds:.1f} s, changed={result['changed']}")
            if label == "first run":
                received = {c: rx_bytes(c) - before[c] for c in containers}
        seconds, result = megaprov("bootstrap", "-i", inventory, "--tags", "gpu,nccl,python", "--check")
        print(f"gpu + nccl + python stages on {args.nodes} nodes, check mode after converge: {seconds:.1f} s, changed={result['changed']}")
        for host, line in sorted(result["gpu"].items()):
            print(f"gpu {host}: {line}")
        for container in containers:
            print(
                f"{container}: {received[container] / 1e6:.1f} MB received over the network (apt, first run), "
                f"{wheel_bytes(container, wheels) / 1e6:.1f} MB of wheels installed from the wheelhouse"
            )
        print(
            f"total over the network: {sum(received.values()) / 1e6:.1f} MB for {args.nodes} nodes "
            "(grows with the node count until a package cache on the head serves them)"
        )
    finally:
        megaprov("lab", "down", "--name", LAB)


if __name__ == "__main__":
    main()
