"""The suite's parallel parts (tests/conftest.py): Molecule scenarios split evenly, parts named by folder."""

from tests.conftest import MOLECULE_SECONDS, molecule_groups, part_of


def test_the_molecule_scenarios_split_into_two_groups_of_similar_length():
    groups = molecule_groups(list(MOLECULE_SECONDS))
    assert set(groups.values()) == {"molecule-1", "molecule-2"} and set(groups) == set(MOLECULE_SECONDS)
    load = {g: sum(MOLECULE_SECONDS[s] for s, gg in groups.items() if gg == g) for g in set(groups.values())}
    assert max(load.values()) - min(load.values()) <= max(MOLECULE_SECONDS.values())
    # the two longest scenarios run side by side, not one after the other
    assert groups["slurm"] != groups["nvidia_driver"]


def test_a_new_scenario_joins_the_lighter_group():
    groups = molecule_groups(["slurm", "nvidia_driver", "brand_new"])
    assert groups["brand_new"] == groups["nvidia_driver"]  # 229 + 150 against 317


def test_parts_are_the_folders_under_tests():
    assert part_of("tests/unit/test_x.py::test_y") == "unit"
    assert part_of("tests/integration/test_lab_slurm.py::test_z[a/b]") == "integration"
    assert part_of("conftest.py::x") == "other"
