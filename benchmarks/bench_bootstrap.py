#!/usr/bin/env python3
"""Bootstrap speed on the lab: `lab up` cold and cached, bootstrap first run and idempotent re-run on
1, 3 and 8 nodes with the default (linear) and the mitogen strategy, and a re-run with --verify (every proof runs
again). Prints figures, the time per stage and the slowest tasks of each re-run (benchmarks/taskprof.py); asserts
nothing about time (the machine is noisy): compare the ratios from one run.

    .venv/bin/python benchmarks/bench_bootstrap.py [--cold] [--nodes 1,3,8] [--strategies linear,mitogen] [--lab NAME] [--top N]
        [--no-lab-timing] [--no-verify] [--rounds 2] [--first-runs linear]

Each figure comes with the CPU seconds of the controller (megaprov, ansible and its forks) and of the lab's nodes
(their containers' cgroups): on this machine both share the same cores, so a re-run's wall time is about their sum
over the core count; on a cluster each node has its own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import taskprof  # noqa: E402  (benchmarks/ is not a package)

LAB = "bench"


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine: the lab's nodes share these CPUs with the controller."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


LAST_BUSY = [0.0]
# CPU seconds of the last command: the controller (megaprov, ansible and its forks: the children this process waited
# for) and the lab's nodes (their containers' cgroups), the two sides that share this machine's cores.
LAST_CPU = {"controller": 0.0, "nodes": 0.0}
NODE_PREFIX = [""]


def nodes_cpu_seconds() -> float:
    """CPU seconds the lab's containers (NODE_PREFIX*) used so far, from their cgroups (v1 cpuacct or v2 cpu.stat)."""
    if not NODE_PREFIX[0]:
        return 0.0
    env = {**os.environ, "CONTAINERS_CONF": str(ROOT / "megaprov" / "cluster" / "lab_files" / "containers.conf")}
    out = subprocess.run(
        ["podman", "ps", "--filter", f"name=^{NODE_PREFIX[0]}", "--format", "{{.Names}}"], env=env, capture_output=True, text=True
    ).stdout.split()
    total = 0.0
    for name in out:
        inspect = ["podman", "inspect", name, "--format", "{{.State.CgroupPath}}"]
        cgroup = subprocess.run(inspect, env=env, capture_output=True, text=True).stdout.strip()
        v1, v2 = Path(f"/sys/fs/cgroup/cpuacct{cgroup}/cpuacct.usage"), Path(f"/sys/fs/cgroup{cgroup}/cpu.stat")
        if v1.is_file():
            total += int(v1.read_text()) / 1e9
        elif v2.is_file():
            total += int(v2.read_text().split()[1]) / 1e6
    return total


def megaprov(*argv: str) -> tuple[float, dict]:
    busy0, total0 = cpu_times()
    nodes0, usage0 = nodes_cpu_seconds(), resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "megaprov", *argv, "--output", "json"], cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"}
    )
    seconds = time.monotonic() - start
    busy1, total1 = cpu_times()
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    LAST_CPU["controller"] = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
    LAST_CPU["nodes"] = nodes_cpu_seconds() - nodes0
    LAST_BUSY[0] = (busy1 - busy0) / max(1, total1 - total0)
    doc = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    if proc.returncode != 0:
        raise SystemExit(f"megaprov {' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return seconds, doc


def podman(*argv: str) -> None:
    env = {**os.environ, "CONTAINERS_CONF": str(ROOT / "megaprov" / "cluster" / "lab_files" / "containers.conf")}
    subprocess.run(["podman", *argv], env=env, capture_output=True, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cold", action="store_true", help="also time lab up with no cached image (removes the images)")
    parser.add_argument("--nodes", default="1,3,8")
    parser.add_argument("--strategies", default="linear,mitogen")
    parser.add_argument("--lab", default=LAB, help="name of the lab this benchmark makes and removes")
    parser.add_argument("--top", type=int, default=10, help="slowest tasks shown per re-run")
    parser.add_argument("--no-lab-timing", action="store_true", help="skip timing `lab up` on its own")
    parser.add_argument("--no-verify", action="store_true", help="skip the --verify re-run")
    parser.add_argument("--rounds", type=int, default=2, help="re-runs of each strategy, alternating, on the same lab")
    parser.add_argument("--first-runs", default="", help="strategies timed on a fresh lab (default: every strategy)")
    args = parser.parse_args()
    lab = args.lab
    NODE_PREFIX[0] = f"megaprov-{lab}-node"
    counts = [int(n) for n in args.nodes.split(",")]
    strategies = args.strategies.split(",")
    rows: list[tuple[str, float, str]] = []

    def record(name: str, seconds: float, note: str = "") -> None:
        note = f"{note} cpu busy {LAST_BUSY[0]:.0%} of {os.cpu_count()} cores".strip()
        note += f"; cpu-s controller {LAST_CPU['controller']:.0f}, nodes {LAST_CPU['nodes']:.0f}"
        rows.append((name, seconds, note))
        print(f"{name:<48}  {seconds:8.1f}  {note}", flush=True)  # as measured: a failure later keeps these

    def stages(doc: dict) -> None:
        print("    stages: " + ", ".join(f"{s['stage']} {s['seconds']:.0f}s" for s in doc["result"].get("stages", [])))

    def detail(doc: dict) -> None:
        result = doc["result"]
        stages(doc)
        runs = taskprof.module_runs(taskprof.load(Path(result["artifacts"])))
        print("    module runs per host: " + ", ".join(f"{h} {n}" for h, n in sorted(runs.items())))
        proofs = result.get("proofs", [])
        print(f"    proofs: {sum(p['valid'] for p in proofs)} of {len(proofs)} cached")
        for line in taskprof.lines(taskprof.profile(taskprof.load(Path(result["artifacts"]))), args.top):
            print(f"    {line}")

    megaprov("lab", "down", "--name", lab)
    if args.cold:
        podman("rmi", "-f", "localhost/megaprov-node:latest")
        from megaprov.cluster.lab import BASE_IMAGE, image_tag

        podman("rmi", "-f", image_tag())
        podman("rmi", "-f", BASE_IMAGE)
        seconds, _ = megaprov("lab", "up", "--nodes", "3", "--name", lab)
        record("lab up --nodes 3 (cold: debootstrap + build)", seconds)
        megaprov("lab", "down", "--name", lab)
    if not args.no_lab_timing:
        seconds, _ = megaprov("lab", "up", "--nodes", "3", "--name", lab)
        record("lab up --nodes 3 (cached image)", seconds)
        megaprov("lab", "down", "--name", lab)

    rerun: dict[tuple[str, int], list[float]] = {}
    firsts = args.first_runs.split(",") if args.first_runs else strategies
    for count in counts:
        for cold in firsts:
            # A fresh lab per strategy for the first run; the re-runs alternate the strategies on the same lab (rounds
            # of each), so that their ratio is measured under the same load. With one strategy's cold run, the re-runs
            # of every strategy happen after it.
            _, up = megaprov("lab", "up", "--nodes", str(count), "--name", lab)
            inventory = up["result"]["inventory"]
            first, doc1 = megaprov("bootstrap", "-i", inventory, "--strategy", cold)
            record(f"bootstrap {count} node(s) {cold}: first run", first, f"changed={doc1['result']['changed']}")
            stages(doc1)
            if cold == firsts[-1]:
                for _ in range(args.rounds):
                    for strategy in strategies:
                        second, doc2 = megaprov("bootstrap", "-i", inventory, "--strategy", strategy)
                        record(f"bootstrap {count} node(s) {strategy}: re-run", second, f"changed={doc2['result']['changed']}")
                        detail(doc2)
                        rerun.setdefault((strategy, count), []).append(second)
                if not args.no_verify:
                    third, doc3 = megaprov("bootstrap", "-i", inventory, "--verify")
                    record(f"bootstrap {count} node(s) linear: re-run --verify", third, f"changed={doc3['result']['changed']}")
            megaprov("lab", "down", "--name", lab)

    def median(values: list[float]) -> float:
        ordered = sorted(values)
        return (ordered[(len(ordered) - 1) // 2] + ordered[len(ordered) // 2]) / 2

    print()
    print("re-run medians: " + ", ".join(f"{s} {n} node(s) {median(v):.1f} s" for (s, n), v in sorted(rerun.items())))
    for strategy in strategies:
        if (strategy, 1) in rerun and (strategy, max(counts)) in rerun:
            ratio = median(rerun[(strategy, max(counts))]) / median(rerun[(strategy, 1)])
            print(f"{strategy}: re-run on {max(counts)} nodes / re-run on 1 node = {ratio:.2f} (target <= 2)")
        if (strategy, 3) in rerun:
            print(f"{strategy}: re-run on 3 nodes = {median(rerun[(strategy, 3)]):.1f} s (target < 30 s)")
    if "linear" in strategies and "mitogen" in strategies:
        for count in counts:
            print(f"{count} node(s): linear / mitogen re-run = {median(rerun[('linear', count)]) / median(rerun[('mitogen', count)]):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
