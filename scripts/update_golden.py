#!/usr/bin/env python3
"""Rewrite the golden files of the example jobs (tests/fixtures/golden/: <job>.args, <job>.node0.sh, <job>.sbatch).

    .venv/bin/python scripts/update_golden.py [JOB ...] [--dir DIR]

The golden test (tests/unit/training/test_render.py) only compares: when a change to the renderer changes what an example
renders, review the difference, run this, and commit the new files with the change. Nothing else writes them, and
this refuses to run under CI (CI set to anything but empty/false/0/no): CI checks the committed files, never its own
output. What the files hold is defined once, in tests/helpers/golden.py.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers.golden import GOLDEN, example_jobs, golden_files  # noqa: E402


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "false", "0", "no")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("jobs", nargs="*", help="example job names (default: every examples/jobs/*.yml)")
    ap.add_argument("--dir", type=Path, default=GOLDEN, help="where to write (default: tests/fixtures/golden)")
    args = ap.parse_args(argv)
    if in_ci():
        print("update_golden: refusing to rewrite golden files under CI (CI is set): CI compares them", file=sys.stderr)
        return 2
    known = example_jobs()
    missing = [n for n in args.jobs if n not in known]
    if missing:
        print(f"update_golden: no example job {', '.join(missing)} in examples/jobs", file=sys.stderr)
        return 2
    args.dir.mkdir(parents=True, exist_ok=True)
    written: set[Path] = set()
    for job in args.jobs or known:
        for name, text in golden_files(job).items():
            path = args.dir / name
            written.add(path)
            old = path.read_text() if path.exists() else None
            if old != text:
                path.write_text(text)
            print(f"{path}: {'unchanged' if old == text else ('written' if old is None else 'updated')}")
    if not args.jobs:  # a golden file no example renders any more would never be compared again
        for stale in sorted(set(args.dir.iterdir()) - written):
            stale.unlink()
            print(f"{stale}: removed (no example job renders it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
