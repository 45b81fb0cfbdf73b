#!/usr/bin/env python3
"""Rewrite the golden pretrain_gpt.py arguments of the example jobs (tests/unit/golden/<job>.args).

    .venv/bin/python scripts/update_golden.py [JOB ...] [--dir DIR]

The golden test (tests/unit/test_render.py) only compares: when a change to the renderer changes what an example
renders, review the difference, run this, and commit the new files with the change. Nothing else writes them, and
this refuses to run under CI (CI set to anything but empty/false/0): CI checks the committed files, never its own
output.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from megaprov import jobspec, render  # noqa: E402

JOBS = ROOT / "examples" / "jobs"
GOLDEN = ROOT / "tests" / "unit" / "golden"
SHARED = "/shared"  # the shared directory the golden files are rendered for


def golden_text(job: Path) -> str:
    """What the golden file of an example job holds: its pretrain_gpt.py arguments, one per line."""
    return "\n".join(render.megatron_args(jobspec.load(job), SHARED)) + "\n"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "false", "0", "no")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("jobs", nargs="*", help="example job names (default: every examples/jobs/*.yml)")
    ap.add_argument("--dir", type=Path, default=GOLDEN, help="where to write (default: tests/unit/golden)")
    args = ap.parse_args(argv)
    if in_ci():
        print("update_golden: refusing to rewrite golden files under CI (CI is set): CI compares them", file=sys.stderr)
        return 2
    names = args.jobs or sorted(p.stem for p in JOBS.glob("*.yml"))
    missing = [n for n in names if not (JOBS / f"{n}.yml").is_file()]
    if missing:
        print(f"update_golden: no example job {', '.join(missing)} in {JOBS}", file=sys.stderr)
        return 2
    args.dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = args.dir / f"{name}.args"
        text = golden_text(JOBS / f"{name}.yml")
        old = path.read_text() if path.exists() else None
        if old != text:
            path.write_text(text)
        print(f"{path}: {'unchanged' if old == text else ('written' if old is None else 'updated')}")
    if not args.jobs:  # a golden file whose example is gone would never be compared again
        for stale in sorted(set(args.dir.glob("*.args")) - {args.dir / f"{n}.args" for n in names}):
            stale.unlink()
            print(f"{stale}: removed (no example job of that name)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
