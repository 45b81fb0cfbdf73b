"""Submit to first iteration: the Slurm launcher against the systemd launcher, on a bootstrapped lab (the lab's
bootstrap brings Slurm up).

    .venv/bin/megaprov lab up --nodes 2 --name bench && .venv/bin/megaprov bootstrap -i "$(.venv/bin/megaprov lab inventory --name bench)"
    .venv/bin/python benchmarks/bench_slurm_launch.py "$(.venv/bin/megaprov lab inventory --name bench)" [--rounds 2]

lab-tiny (60 iterations, 2 nodes x 1 rank) with launch.launcher torchrun (systemd units) and slurm, alternately, each
followed to its verdict. Figures from the jobs' own reports: megaprov start -> launched (units started / sbatch
accepted: one Ansible run each), -> torchrun started on the nodes (node clocks), torchrun -> first iteration, and
the sum: megaprov start -> first iteration. Then a rank of a Slurm job killed at iteration 22 (saves every 10): the
time from the failure to the first iteration of its continuation, and the iterations lost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from labbench import ROOT, lab_job, lab_setup, megaprov, podman_exec


def job_file(directory: Path, name: str, launcher: str, save_interval: int = 20) -> str:
    return lab_job(directory, name, "lab-tiny-slurm.yml" if launcher == "slurm" else "lab-tiny.yml", save_interval)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("inventory")
    parser.add_argument("--rounds", type=int, default=2)
    opts = parser.parse_args()
    shared, lab = lab_setup(opts.inventory)
    stamp = time.strftime("%H%M%S")
    timings: dict[str, list[dict]] = {"systemd": [], "slurm": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(opts.rounds):
            for launcher in timings:
                name = f"s{stamp}-{launcher}-{round_}"
                _, result = megaprov("train", "--job", job_file(Path(tmp), name, launcher), "-i", opts.inventory)
                report = json.loads(Path(result["report"]["json"]).read_text())
                timings[launcher].append(report["timing"])
        name = f"s{stamp}-kill"
        metrics = shared / "jobs" / name / "metrics.jsonl"
        proc = subprocess.Popen(
            [sys.executable, "-m", "megaprov", "train", "--job", job_file(Path(tmp), name, "slurm", 10), "-i", opts.inventory, "--output", "json"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        while not metrics.is_file() or len(metrics.read_text().splitlines()) < 22:
            time.sleep(0.1)
        podman_exec(f"megaprov-{lab}-node2", "pkill -9 -f megaprov.trainer")
        proc.communicate()
        report = json.loads((shared / "jobs" / name / "report.json").read_text())
        events = (shared / "jobs" / name / "logs" / "slurm.log").read_text().splitlines()
    for launcher, rows in timings.items():
        launch = [r["megaprov_start_to_units_started_s"] for r in rows]
        start = [r["megaprov_to_torchrun_start_s"] for r in rows]
        first = [r["torchrun_start_to_first_iteration_s"] for r in rows]
        total = [a + b for a, b in zip(start, first, strict=True)]
        print(
            f"{launcher:8s} megaprov -> launched median {statistics.median(launch):.1f} s, -> torchrun started {statistics.median(start):.1f} s, "
            f"torchrun -> first iteration {statistics.median(first):.1f} s, megaprov -> first iteration {statistics.median(total):.1f} s "
            f"({len(rows)} runs)"
        )
    ratio = statistics.median(
        a + b
        for a, b in zip(
            [r["megaprov_to_torchrun_start_s"] for r in timings["slurm"]],
            [r["torchrun_start_to_first_iteration_s"] for r in timings["slurm"]],
            strict=True,
        )
    ) / statistics.median(
        a + b
        for a, b in zip(
            [r["megaprov_to_torchrun_start_s"] for r in timings["systemd"]],
            [r["torchrun_start_to_first_iteration_s"] for r in timings["systemd"]],
            strict=True,
        )
    )
    print(f"slurm / systemd, megaprov -> first iteration: {ratio:.2f}")
    restart = report["restarts"][0] if report["restarts"] else {}
    print(
        f"slurm: killed rank -> first iteration of the continuation {restart.get('seconds_to_resumed_iteration')} s; resumed from iteration "
        f"{restart.get('resumed_from')}, {restart.get('lost_iterations')} iteration(s) lost (save interval 10); verdict {report['verdict']}"
    )
    for line in events:
        print(f"  {line}")


if __name__ == "__main__":
    main()
