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
# What every scenario shares (driver, provisioner, verifier, test sequence); Molecule finds it at the repository root.
BASE_CONFIG = ROOT / ".config" / "molecule" / "config.yml"


def scenario_config(scenario: str) -> dict:
    """The scenario's molecule.yml deep-merged over the base config, by Molecule's own merge (its ${VARIABLES} left
    as written: only names and sequences are read from it)."""
    from molecule.util import merge_dicts

    base = yaml.safe_load(BASE_CONFIG.read_text()) or {}
    return merge_dicts(base, yaml.safe_load((ROOT / "molecule" / scenario / "molecule.yml").read_text()) or {})


def sequence_of(config: dict) -> list[str]:
    from molecule.constants import DEFAULT_CONFIG  # `molecule test`'s sequence where no config names one

    return (config.get("scenario") or {}).get("test_sequence", DEFAULT_CONFIG["scenario"]["test_sequence"])


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_step_of_a_scenarios_sequence_has_its_playbook(scenario):
    """A step whose playbook is missing is skipped with a note, not run: the shared sequence's prepare, or a
    side_effect, must be the scenario's own file. And every scenario runs idempotence and verify, on podman."""
    config = scenario_config(scenario)
    sequence = sequence_of(config)
    assert "idempotence" in sequence and "verify" in sequence, sequence
    assert config["driver"]["name"] == "podman" and config["verifier"]["name"] == "testinfra"
    playbooks = (config.get("provisioner") or {}).get("playbooks") or {}
    for step in ("prepare", "converge", "side_effect"):
        if step in sequence or step == "converge":
            playbook = ROOT / "molecule" / scenario / playbooks.get(step, f"{step}.yml")
            assert playbook.is_file(), f"{scenario}: its sequence runs {step}, and {playbook} is missing"
        else:
            assert not (ROOT / "molecule" / scenario / f"{step}.yml").exists(), f"{scenario}: {step}.yml is never run"


def test_every_role_has_a_scenario():
    """Each role is converged by a scenario: its own, or one that tests roles together (nfs: server + client), or a
    stage's playbook that a scenario's converge imports (containers)."""

    def converge_text(scenario: str) -> str:
        path = ROOT / "molecule" / scenario / "converge.yml"
        text = path.read_text()
        imported = re.findall(r"import_playbook:\s*(\S+)", text)
        return "\n".join([text, *((path.parent / name).resolve().read_text() for name in imported)])

    converges = {s: converge_text(s) for s in SCENARIOS}
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
    from megaprov.cluster import wheelhouse
    from tests.fixtures import build as fixtures
    from tests.fixtures import upstream

    if scenario == "python_stack":  # the megatron role against Megatron-LM's real tree (the fixture remote is made of it)
        upstream.need_megatron()

    config = scenario_config(scenario)
    sequence = sequence_of(config)
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
    proc = subprocess.run([str(bin_dir / "molecule"), "test", "-s", scenario], cwd=ROOT, capture_output=True, text=True, env=env, timeout=2400)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        # the failed tasks first (their playbook runs' reports): the output's tail is the destroy step's
        failed = "\n".join(reports.failed_tasks(ansible_dir)) or "(no failed task reported)"
        pytest.fail(f"molecule test -s {scenario} exited {proc.returncode}\nfailed tasks:\n{failed}\n--- output tail:\n{output[-3000:]}")
    # Molecule fails its idempotence step on any changed task; the report says which ran, and that there were tasks.
    second = reports.idempotence_run(sequence, ansible_dir, converge)
    assert reports.junit_totals(second).tests > 0, f"the idempotence run ({second.name}) reported no task"
    assert reports.changed_tasks(second) == [], "the idempotence step changed tasks"
    assert verify_xml.exists(), "the testinfra verifier wrote no report: it did not run"
    totals = reports.junit_totals(verify_xml)
    assert totals.tests > 0 and totals.failures == 0 and totals.errors == 0, f"testinfra verifier: {totals}"
    assert totals.skipped < totals.tests, f"testinfra verifier: every test skipped: {totals}"
