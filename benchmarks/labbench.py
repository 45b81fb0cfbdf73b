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


def lab_job(directory: Path, name: str, example: str = "lab-tiny.yml", save_interval: int = 20) -> str:
    """An example job (examples/jobs/EXAMPLE) renamed NAME with saves every SAVE_INTERVAL, written to DIRECTORY."""
    import yaml

    spec = yaml.safe_load((ROOT / "examples" / "jobs" / example).read_text())
    spec["name"] = name
    spec["checkpoint"]["save_interval"] = save_interval
    path = directory / f"{name}.yml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def lab_setup(inventory: str) -> tuple[Path, str]:
    """Where this machine sees the lab's shared directory and the lab's name; the lab corpus prepared into data/lab."""
    import tempfile

    import yaml

    group_vars = yaml.safe_load((Path(inventory).parent / "group_vars" / "all.yml").read_text())
    corpus = Path(tempfile.mkdtemp()) / "corpus.jsonl"
    megaprov("data", "corpus", "--output-file", str(corpus))
    megaprov("data", "prepare", "--input", str(corpus), "--output-prefix", "data/lab", "-i", inventory)
    return Path(group_vars["megaprov_controller_shared_dir"]), Path(inventory).parent.name
