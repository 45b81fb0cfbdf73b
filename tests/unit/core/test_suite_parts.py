"""The suite's parallel parts (tests/conftest.py, --part): Molecule scenarios split evenly, every test in one part."""

import subprocess
import sys

import pytest

from tests.conftest import MOLECULE_SECONDS, PARTS, ROOT, molecule_groups, part_of


def test_the_molecule_scenarios_split_into_two_groups_of_similar_length():
    groups = molecule_groups(list(MOLECULE_SECONDS))
    assert set(groups.values()) == {"molecule-1", "molecule-2"} and set(groups) == set(MOLECULE_SECONDS)
    load = {g: sum(MOLECULE_SECONDS[s] for s, gg in groups.items() if gg == g) for g in set(groups.values())}
    assert max(load.values()) - min(load.values()) <= max(MOLECULE_SECONDS.values())
    # the two longest scenarios run side by side, not one after the other
    first, second = sorted(MOLECULE_SECONDS, key=MOLECULE_SECONDS.__getitem__, reverse=True)[:2]
    assert groups[first] != groups[second]


def test_a_new_scenario_joins_the_lighter_group():
    groups = molecule_groups(["slurm", "nvidia_driver", "brand_new"])
    assert groups["brand_new"] == groups["nvidia_driver"]  # a new one counts 600: 600 + 555 against 715


def test_parts_are_the_folders_under_tests():
    assert part_of("tests/unit/training/test_x.py::test_y") == "unit"
    assert part_of("ansible_collections/megaprov/cluster/tests/unit/plugins/modules/test_x.py::test_y") == "plugins"
    assert part_of("tests/integration/test_lab_slurm.py::test_z[a/b]") == "integration"
    assert part_of("conftest.py::x") == "other"


def collected(*argv: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return [line for line in proc.stdout.splitlines() if "::" in line]


@pytest.mark.slow  # six pytest collections
def test_each_part_collects_its_own_tests_and_the_parts_cover_the_suite():
    """scripts/test.sh runs `pytest --part P tests` for each part: every Molecule scenario is in exactly one of the two
    halves, the integration tests on the README run's lab are the lab part, those with labs of their own lab-2, the rest
    quick."""
    where = [
        "tests/molecule/test_molecule.py",
        "tests/integration/test_readme_run.py",
        "tests/integration/test_lab_restart.py",
        "tests/unit/core/test_suite_parts.py",
        "ansible_collections/megaprov/cluster/tests/unit/plugins/module_utils/test_pci.py",
    ]
    everything = collected(*where)
    by_part = {part: collected("--part", part, *where) for part in PARTS}
    assert sorted(sum(by_part.values(), [])) == sorted(everything)
    scenarios = {line.split("[", 1)[1].rstrip("]") for line in everything if "test_molecule_scenario[" in line}
    for half in ("molecule-1", "molecule-2"):
        assert by_part[half] and all("test_molecule_scenario[" in line for line in by_part[half])
    assert {line.split("[", 1)[1].rstrip("]") for line in by_part["molecule-1"] + by_part["molecule-2"]} == scenarios
    assert by_part["lab"] and all(line.startswith("tests/integration/test_readme_run.py::") for line in by_part["lab"])
    # the tests with a lab of their own (lab3) run beside the README run's lab, not after it
    assert by_part["lab-2"] and all(line.startswith("tests/integration/test_lab_restart.py::") for line in by_part["lab-2"])
    assert "tests/molecule/test_molecule.py::test_every_role_has_a_scenario" in by_part["quick"]
