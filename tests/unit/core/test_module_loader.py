"""The suite's in-process loader of Ansible module files (tests/conftest.py load_module) and sys.intern.

ansible-core's module_utils replace sys.intern with a callable object the first time a process imports them; torch's
dynamo then refuses it ("substitute_in_graph expects a function"), and the data tests failed to import whenever they
ran after a file that loads a module in-process (tests/unit/training/test_slurm.py). Inside pytest the hooks of
tests/conftest.py restore it too, and the first import happens at collection, so only a fresh interpreter shows what
load_module itself leaves behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

MODULE = ROOT / "ansible_collections" / "megaprov" / "cluster" / "plugins" / "modules" / "slurm_check.py"
IMPORTS = {
    # the control: the patch is live in this ansible-core, so the test below can fail
    "a plain import": "import ansible.module_utils.basic",
    "load_module": f"from tests.conftest import load_module\nload_module({str(MODULE)!r}, 'slurm_check_fresh')",
}


def _intern_after(code: str) -> str:
    shown = "import inspect, sys\nprint('builtin' if inspect.isbuiltin(sys.intern) else type(sys.intern).__name__)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", f"{code}\n{shown}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


@pytest.mark.parametrize(("how", "left"), [("a plain import", "SysInternPatch"), ("load_module", "builtin")])
def test_the_first_ansible_import_of_a_process_patches_sys_intern_and_load_module_puts_the_builtin_back(how, left):
    found = _intern_after(IMPORTS[how])
    if how == "a plain import" and found == "builtin":
        pytest.skip("this ansible-core leaves sys.intern alone: nothing for load_module to restore")
    assert found == left
