"""Helpers shared by the lab benchmarks: run the real megaprov CLI for its JSON envelope, exec in a lab node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def megaprov(*argv: str) -> tuple[float, dict]:
    """Seconds and the result of `megaprov ARGV --output json`; exits with the error when the command fails."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "megaprov", *argv, "--output", "json"], cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - start
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"megaprov {' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}") from None
    if not doc["ok"]:
        raise SystemExit(f"megaprov {' '.join(argv)}: {doc.get('error')}")
    return seconds, doc["result"]


def podman_exec(container: str, script: str) -> str:
    env = {**os.environ, "CONTAINERS_CONF": str(ROOT / "megaprov" / "cluster" / "lab_files" / "containers.conf")}
    return subprocess.run(["podman", "exec", container, "bash", "-c", script], capture_output=True, text=True, check=True, env=env).stdout
