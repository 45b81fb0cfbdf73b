"""Linters as tests: ruff, mypy (strict) and ansible-lint (production profile) must be clean."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(*argv, **env):
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **env}, timeout=600)


def test_ruff():
    proc = run(str(BIN / "ruff"), "check", "megaprov", "tests", "scripts", "benchmarks")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict():
    proc = run(str(BIN / "mypy"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ansible_lint_production_profile():
    proc = run(
        str(BIN / "ansible-lint"),
        "--offline",
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in proc.stdout + proc.stderr
