"""promtool, Prometheus's own checker and rule-test runner, for the tests of alert rules and of top's queries."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest


def promtool() -> Path:
    """promtool beside this Python (scripts/setup.sh puts it in .venv/bin), else on PATH; missing is a failure, not a
    skip: the rules and queries would ship untested."""
    beside = Path(sys.executable).parent / "promtool"
    if beside.is_file():
        return beside
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(f"promtool is neither in {beside.parent} nor on PATH: `MEGAPROV_EXTRAS=test ./scripts/setup.sh` installs it")
    return Path(found)
