"""Every Molecule scenario: create, converge, idempotence, check mode, testinfra verify, destroy."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))


def test_every_role_has_a_scenario():
    """Each role is converged by a scenario: its own, or one that tests roles together (nfs: server + client)."""
    converges = {s: (ROOT / "molecule" / s / "converge.yml").read_text() for s in SCENARIOS}
    for role in sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir()):
        assert any(re.search(rf"(role|name): {role}\b", text) for text in converges.values()), f"no Molecule scenario converges role {role}"


@pytest.mark.lab
@pytest.mark.skipif(shutil.which("podman") is None, reason="skipped: podman is not installed (run scripts/setup.sh)")
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario):
    from megaprov import wheelhouse
    from tests.fixtures import build as fixtures

    bin_dir = Path(sys.executable).parent
    env = {
        # What the GPU-stack scenarios mount: the fixture apt repository and git remotes, and the lab wheelhouse.
        "MEGAPROV_FIXTURES": str(fixtures.build()),
        "MEGAPROV_WHEELHOUSE": str(wheelhouse.build()),
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "CONTAINERS_CONF": str(ROOT / "megaprov" / "lab_files" / "containers.conf"),
        "NO_COLOR": "1",
        "PY_COLORS": "0",
        "ANSIBLE_FORCE_COLOR": "0",
    }
    proc = subprocess.run([str(bin_dir / "molecule"), "test", "-s", scenario], cwd=ROOT, capture_output=True, text=True, env=env, timeout=1500)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    # Molecule's wording differs between a terminal ("verify: ...") and a pipe ("[x > verify] ...").
    assert re.search(r"idempotence\W+Executed: Successful", output), "the idempotence step did not pass"
    assert re.search(r"verify\W+Verifier completed successfully", output), "the testinfra verifier did not pass"
    assert re.search(r"=+ \d+ passed in ", output) and not re.search(r"\d+ failed", output)
