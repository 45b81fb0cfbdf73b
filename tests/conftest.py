import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# megaprov's state (runs, fact caches, lab inventories and keys) stays inside the checkout under test, not in the
# user's XDG state directory; a test that needs the XDG default unsets it (tests/unit/core/test_paths.py).
os.environ.setdefault("MEGAPROV_STATE", str(ROOT / ".megaprov" / "state"))


# ansible-core's module_utils replace sys.intern with a callable object when first imported (for its tagged str
# subclasses): right in a module's own process, wrong in this one, where torch's dynamo accepts only the builtin
# function. The builtin is put back after every in-process Ansible import.
_INTERN = sys.intern


def restore_intern() -> None:
    sys.intern = _INTERN


def load_module(path: Path, name: str):
    """Import an Ansible module file (the collection's plugins/modules/*.py) to test its pure functions."""
    # Its __name__ is the dotted path from the repository root (ansible_collections.megaprov.cluster.plugins.modules.nccl_check): the name the
    # mutation benchmark (benchmarks/bench_mutation.py) gives its functions. `name` stays an alias in sys.modules.
    path = Path(path).resolve()
    qualified = ".".join(path.relative_to(ROOT).with_suffix("").parts) if path.is_relative_to(ROOT) else name
    spec = importlib.util.spec_from_file_location(qualified, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = sys.modules[qualified] = module
    try:
        spec.loader.exec_module(module)
    finally:
        restore_intern()
    return module


def pytest_configure(config):
    # The collection's code is imported as Ansible imports it, through its collection loader over the checkout, in every
    # test of the session (ansible-test units installs its own the same way): a plain namespace import of
    # ansible_collections by a plugin test would hide ansible.builtin from every later in-process template.
    # The checkout first, then Ansible's configured paths, each once: not sys.path, where the checkout may appear twice
    # ('' and its absolute path under `python -m pytest`) and the loader then refuses the collection found in two places.
    from ansible import constants
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

    if not any(isinstance(finder, _AnsibleCollectionFinder) for finder in sys.meta_path):
        paths = list(dict.fromkeys(os.path.realpath(p) for p in [ROOT, *constants.COLLECTIONS_PATHS]))
        _AnsibleCollectionFinder(paths=paths, scan_sys_paths=False)._install()


def pytest_collectstart(collector):
    # a test module that imports ansible itself (not through load_module) patches it at collection: undone before the next
    restore_intern()


def pytest_runtest_setup(item):
    restore_intern()


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


# The suite's parallel parts (scripts/test.sh runs one pytest process per part, side by side; `--part` selects):
#   lab         the lab integration tests on the README run's lab, in order (bootstrapped once, trained on);
#   lab-2       the lab integration tests with a lab of their own (the session's fresh 3-node lab, lab3), beside the
#               first: they wait for no README run;
#   molecule-1, molecule-2
#               the Molecule scenarios (each with its own containers and network), split by how long each took in a
#               full run (seconds; a new scenario counts 600 until measured);
#   quick       everything else: unit, CLI, static and tools tests, and the collection's plugin tests.
# (pytest-xdist's --dist loadgroup cannot: with pytest 9.2 its groups no longer take effect.)
MOLECULE_SECONDS = {  # each scenario's wall time with the whole suite running side by side on a 2-core machine
    "containers": 1300,  # image_registry's scenario merged in; the two took 1500+ and 300 s in the CI run of 3878448
    "package_cache": 870,
    "common": 810,
    "nccl": 740,
    "slurm": 715,
    "observe": 700,
    "python_stack": 690,
    "nfs": 665,
    "nvidia_driver": 555,
    "cuda": 540,
    "ssh_mesh": 375,
    "infiniband": 280,
    "preflight": 80,
}
MOLECULE_GROUPS = 2
PARTS = ("lab", "lab-2", *(f"molecule-{i + 1}" for i in range(MOLECULE_GROUPS)), "quick")
# Integration tests whose labs are their own (no README run): the lab-2 part.
OWN_LAB_FIXTURES = ("lab3",)
# The collection's plugin tests, where `ansible-test units` finds them (tests/static/test_collection_sanity.py runs it);
# scripts/test.sh gives pytest this folder beside tests/, in the quick part.
PLUGIN_TESTS = "ansible_collections/megaprov/cluster/tests/unit"


def molecule_groups(scenarios: list[str]) -> dict[str, str]:
    """Scenario -> part: longest first onto the part with the least time so far. Pure."""
    load = [0.0] * MOLECULE_GROUPS
    out = {}
    for scenario in sorted(scenarios, key=lambda s: (-MOLECULE_SECONDS.get(s, 600), s)):
        i = load.index(min(load))
        load[i] += MOLECULE_SECONDS.get(scenario, 600)
        out[scenario] = f"molecule-{i + 1}"
    return out


def part_of(nodeid: str) -> str:
    """The folder under tests/ a test belongs to, for the time-per-part summary: unit, cli, static, tools, molecule,
    integration; or plugins, for the collection's plugin tests (ansible_collections/megaprov/cluster/tests/unit/plugins)."""
    parts = nodeid.split("/")
    if nodeid.startswith(PLUGIN_TESTS + "/"):
        return "plugins"
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


def pytest_addoption(parser):
    parser.addoption(
        "--part",
        action="append",
        default=[],
        choices=PARTS,
        help="run only this part of the suite (repeatable; scripts/test.sh runs them side by side)",
    )


def suite_part(item, groups: dict[str, str]) -> str:
    if part_of(item.nodeid) == "integration":
        return "lab-2" if any(name in OWN_LAB_FIXTURES for name in getattr(item, "fixturenames", ())) else "lab"
    if getattr(item, "originalname", "") == "test_molecule_scenario":
        return groups[item.callspec.params["scenario"]]
    return "quick"


def pytest_collection_modifyitems(config, items):
    wanted = config.getoption("--part")
    if not wanted:
        return
    scenarios = [item.callspec.params["scenario"] for item in items if getattr(item, "originalname", "") == "test_molecule_scenario"]
    groups = molecule_groups(scenarios)
    keep, drop = [], []
    for item in items:
        (keep if suite_part(item, groups) in wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter):
    """Time per part of the suite: the sum of its tests' setup, call and teardown (with workers in parallel, the
    session's wall time is less than the total)."""
    totals: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            nodeid, duration = getattr(report, "nodeid", ""), getattr(report, "duration", None)
            if nodeid and isinstance(duration, float):
                totals[part_of(nodeid)] = totals.get(part_of(nodeid), 0.0) + duration
    if totals:
        terminalreporter.write_sep("=", "time per part (sum of setup, call and teardown)")
        for part, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{part:<12} {seconds:8.0f} s")
