"""Training on a bootstrapped lab: launch time (linear against mitogen) and the time from a killed rank to the
resumed iteration.

    .venv/bin/megaprov lab up --nodes 2 --name bench && .venv/bin/megaprov bootstrap -i "$(.venv/bin/megaprov lab inventory --name bench)"
    .venv/bin/python benchmarks/bench_train_lab.py "$(.venv/bin/megaprov lab inventory --name bench)" [--rounds 2]

Figures, from the jobs' own reports and logs:
- megaprov start -> units started (the Ansible launch), and -> torchrun started on the nodes (node clocks);
- torchrun started -> first iteration (torch and megatron-core imports, gloo rendezvous, the dataset index);
- killed rank -> first iteration of the resumed run (the unit's 10 s restart, torchrun start-up, checkpoint load),
  and the iterations lost (at most one save interval).
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


def job_file(directory: Path, name: str, save_interval: int = 20) -> str:
    return lab_job(directory, name, "lab-tiny.yml", save_interval)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("inventory")
    parser.add_argument("--rounds", type=int, default=2)
    opts = parser.parse_args()
    shared, lab = lab_setup(opts.inventory)
    stamp = time.strftime("%H%M%S")
    timings: dict[str, list[dict]] = {"linear": [], "mitogen": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(opts.rounds):
            for strategy in timings:
                name = f"b{stamp}-{strategy}-{round_}"
                _, result = megaprov("train", "--job", job_file(Path(tmp), name), "-i", opts.inventory, "--strategy", strategy)
                report = json.loads(Path(result["report"]["json"]).read_text())
                timings[strategy].append(report["timing"])
        name = f"b{stamp}-kill"
        log = shared / "jobs" / name / "logs" / "node2.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "megaprov", "train", "--job", job_file(Path(tmp), name, 10), "-i", opts.inventory, "--output", "json"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        while not log.is_file() or log.read_text().count("| lm loss:") < 25:
            time.sleep(0.1)
        killed_at = time.time()
        podman_exec(f"megaprov-{lab}-node2", r"pkill -9 -f 'python[0-9.]* -u \S*megaprov_trainer\.py'")
        seen = log.read_text().count("| lm loss:")
        while log.read_text().count("| lm loss:") == seen or "torchrun starting" not in log.read_text().split("torchrun exited with")[-1]:
            time.sleep(0.05)
        resumed_at = time.time()
        out, err = proc.communicate()
        report = json.loads((shared / "jobs" / name / "report.json").read_text())
    for strategy, rows in timings.items():
        launch = [r["megaprov_start_to_units_started_s"] for r in rows]
        start = [r["megaprov_to_torchrun_start_s"] for r in rows]
        first = [r["torchrun_start_to_first_iteration_s"] for r in rows]
        print(
            f"{strategy:8s} launch (megaprov -> units started) median {statistics.median(launch):.1f} s, "
            f"-> torchrun started {statistics.median(start):.1f} s, torchrun -> first iteration {statistics.median(first):.1f} s ({len(rows)} runs)"
        )
    restart = report["restarts"][0] if report["restarts"] else {}
    print(
        f"killed rank -> resumed iteration: {resumed_at - killed_at:.1f} s wall; resumed from iteration {restart.get('resumed_from')}, "
        f"{restart.get('lost_iterations')} iteration(s) lost (save interval 10); verdict {report['verdict']}"
    )


if __name__ == "__main__":
    main()
