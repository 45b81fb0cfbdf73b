import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAB = "itest"
CONTAINERS_CONF = str(ROOT / "megaprov" / "lab_files" / "containers.conf")


def megaprov(*argv, check_json=True):
    """Run the real console entry point; return (exit code, parsed JSON envelope or None, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "megaprov", *argv], capture_output=True, text=True, cwd=ROOT, env={**os.environ, "NO_COLOR": "1"}, timeout=900
    )
    doc = json.loads(proc.stdout) if check_json and proc.stdout.strip().startswith("{") else None
    return proc.returncode, doc, proc.stderr


def podman_exec(container, *cmd):
    return subprocess.run(
        ["podman", "exec", container, *cmd], capture_output=True, text=True, env={**os.environ, "CONTAINERS_CONF": CONTAINERS_CONF}, check=False
    )


def pytest_collection_modifyitems(config, items):
    # Tests marked last (removing the session's lab) run after every other file's tests.
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)
    if shutil.which("podman") is None:
        skip = pytest.mark.skip(reason="skipped: podman is not installed (run scripts/setup.sh)")
        for item in items:
            if "lab" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def lab3():
    """A 3-node lab for the whole session, removed at the end whatever happens."""
    megaprov("lab", "down", "--name", LAB, "--output", "json")  # leftovers of an interrupted run
    code, doc, err = megaprov("lab", "up", "--nodes", "3", "--name", LAB, "--output", "json")
    try:
        assert code == 0, err
        yield doc["result"]
    finally:
        megaprov("lab", "down", "--name", LAB, "--output", "json")
