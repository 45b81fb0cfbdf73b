"""Every Molecule scenario: create, converge, idempotence, check mode, testinfra verify, destroy."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.molecule import reports  # noqa: E402 (after the path insert)

SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))


def test_every_role_has_a_scenario():
    """Each role is converged by a scenario: its own, or one that tests roles together (nfs: server + client)."""
    converges = {s: (ROOT / "molecule" / s / "converge.yml").read_text() for s in SCENARIOS}
    for role in sorted(p.name for p in (ROOT / "ansible_collections/megaprov/cluster/roles").iterdir() if p.is_dir()):
        pattern = rf"(role|name): megaprov\.cluster\.{role}\b"  # by FQCN: the collection, not a loose role path
        assert any(re.search(pattern, text) for text in converges.values()), f"no Molecule scenario converges role {role}"


@pytest.mark.lab
@pytest.mark.skipif(shutil.which("podman") is None, reason="skipped: podman is not installed (run scripts/setup.sh)")
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario, tmp_path):
    """Judged from Molecule's exit code and two machine-readable reports (tests/molecule/reports.py): the testinfra
    verifier's JUnit XML (pytest's --junitxml through PYTEST_ADDOPTS) and ansible-core's junit callback's report of
    the idempotence step's playbook run. Neither needs a line in the scenario: they work for every scenario."""
    from molecule.constants import DEFAULT_CONFIG  # `molecule test`'s sequence where a scenario names none

    from megaprov.cluster import wheelhouse
    from tests.fixtures import build as fixtures
    from tests.fixtures import upstream

    if scenario == "python_stack":  # the megatron role against Megatron-LM's real tree (the fixture remote is made of it)
        upstream.need_megatron()

    config = yaml.safe_load((ROOT / "molecule" / scenario / "molecule.yml").read_text())
    sequence = (config.get("scenario") or {}).get("test_sequence", DEFAULT_CONFIG["scenario"]["test_sequence"])
    assert "idempotence" in sequence and "verify" in sequence, f"{scenario}: the test sequence must run idempotence and verify: {sequence}"
    converge = ((config.get("provisioner") or {}).get("playbooks") or {}).get("converge", "converge.yml")
    verify_xml, ansible_dir = tmp_path / "verify.xml", tmp_path / "ansible"
    callbacks = [c for c in os.environ.get("ANSIBLE_CALLBACKS_ENABLED", "").split(",") if c.strip()]
    bin_dir = Path(sys.executable).parent
    env = {
        # What the GPU-stack scenarios mount: the fixture apt repository and git remotes, and the lab wheelhouse.
        "MEGAPROV_FIXTURES": str(fixtures.build()),
        "MEGAPROV_WHEELHOUSE": str(wheelhouse.build()),
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "CONTAINERS_CONF": str(ROOT / "megaprov" / "cluster" / "lab_files" / "containers.conf"),
        "NO_COLOR": "1",
        "PY_COLORS": "0",
        "ANSIBLE_FORCE_COLOR": "0",
        "PYTEST_ADDOPTS": f"{os.environ.get('PYTEST_ADDOPTS', '')} --junitxml={verify_xml}".strip(),
        "ANSIBLE_CALLBACKS_ENABLED": ",".join([*callbacks, "ansible.builtin.junit"]),
        "JUNIT_OUTPUT_DIR": str(ansible_dir),
    }
    proc = subprocess.run([str(bin_dir / "molecule"), "test", "-s", scenario], cwd=ROOT, capture_output=True, text=True, env=env, timeout=1500)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    # Molecule fails its idempotence step on any changed task; the report says which ran, and that there were tasks.
    second = reports.idempotence_run(sequence, ansible_dir, converge)
    assert reports.junit_totals(second).tests > 0, f"the idempotence run ({second.name}) reported no task"
    assert reports.changed_tasks(second) == [], "the idempotence step changed tasks"
    assert verify_xml.exists(), "the testinfra verifier wrote no report: it did not run"
    totals = reports.junit_totals(verify_xml)
    assert totals.tests > 0 and totals.failures == 0 and totals.errors == 0, f"testinfra verifier: {totals}"
    assert totals.skipped < totals.tests, f"testinfra verifier: every test skipped: {totals}"
