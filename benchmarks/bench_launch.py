#!/usr/bin/env python3
"""Launch latency on a bootstrapped lab: from `megaprov train` (the process's own start) to the units started, to
torchrun started on the first node and on every node, and on to the first iteration; the median of ROUNDS short jobs.

    .venv/bin/megaprov lab up --nodes 2 --name bench && .venv/bin/megaprov bootstrap -i "$(.venv/bin/megaprov lab inventory --name bench)"
    .venv/bin/python benchmarks/bench_launch.py "$(.venv/bin/megaprov lab inventory --name bench)" [--rounds 3] [--checkout DIR]

--checkout DIR times another checkout's megaprov (a `git worktree` of an earlier commit) on the same lab, for a
before/after comparison from one run. Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from labbench import ROOT, lab_job, lab_setup

KEYS = (
    "megaprov_start_to_units_started_s",
    "megaprov_to_torchrun_start_s",
    "megaprov_to_torchrun_started_everywhere_s",
    "torchrun_start_to_first_iteration_s",
)


def train(checkout: Path, job: str, inventory: str) -> tuple[float, dict]:
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(checkout)}
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "megaprov", "train", "--job", job, "-i", inventory, "--output", "json"],
        cwd=checkout,
        capture_output=True,
        text=True,
        env=env,
    )
    seconds = time.monotonic() - start
    doc = json.loads(proc.stdout) if proc.stdout.startswith("{") else {}
    if not doc.get("ok"):
        raise SystemExit(f"train {job} failed ({proc.returncode}): {proc.stderr.strip()[-600:]}")
    return seconds, json.loads(Path(doc["result"]["report"]["json"]).read_text())["timing"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inventory")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checkout", action="append", default=[], help="also time this checkout (repeatable)")
    opts = parser.parse_args()
    lab_setup(opts.inventory)
    checkouts = [ROOT, *(Path(c).resolve() for c in opts.checkout)]
    rows: dict[Path, list[dict]] = {c: [] for c in checkouts}
    stamp = time.strftime("%H%M%S")
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(opts.rounds):
            for i, checkout in enumerate(checkouts):  # alternating, so load drifts hit both alike
                job = lab_job(Path(tmp), f"l{stamp}-{i}-{round_}")
                spec = yaml.safe_load(Path(job).read_text())
                spec["train"]["train_iters"] = 20  # the launch is measured, not the training
                Path(job).write_text(yaml.safe_dump(spec))
                seconds, timing = train(checkout, job, opts.inventory)
                rows[checkout].append({**timing, "command_s": round(seconds, 1)})
                print(f"{checkout.name:<16} round {round_}: " + ", ".join(f"{k} {v}" for k, v in timing.items()), flush=True)
    print(f"\nmedian of {opts.rounds} round(s), seconds")
    print(f"{'':<48}" + "".join(f"{c.name[:14]:>16}" for c in checkouts))
    for key in KEYS:
        cells = []
        for checkout in checkouts:
            values = [r[key] for r in rows[checkout] if key in r]
            cells.append(f"{statistics.median(values):16.2f}" if values else f"{'-':>16}")
        print(f"{key:<48}" + "".join(cells))


if __name__ == "__main__":
    main()
