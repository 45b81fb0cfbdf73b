"""The mutation benchmark's harness: which modules it covers, and the table of recorded scores."""

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bench():
    spec = importlib.util.spec_from_file_location("bench_mutation", ROOT / "benchmarks" / "bench_mutation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_mutation"] = module
    spec.loader.exec_module(module)
    return module


def test_every_module_with_a_function_is_covered_once_under_a_unique_name():
    b = bench()
    files = [p for p in [*ROOT.glob("megaprov/**/*.py"), *(ROOT / b.PLUGINS).glob("**/*.py")] if "__pycache__" not in p.parts]
    with_code = {p.relative_to(ROOT).as_posix() for p in files if "def " in p.read_text()}
    assert sorted(b.MODULES.values()) == sorted(with_code)
    assert b.MODULES["planner"] == "megaprov/training/planner.py" and b.MODULES["pci"].endswith("plugins/module_utils/pci.py")
    # a stem two files share is told apart by the directory
    assert b.MODULES["training.data"] == "megaprov/training/data.py" and b.MODULES["commands.data"] == "megaprov/commands/data.py"
    assert b.MODULES["doctor"] == "megaprov/ops/doctor/__init__.py"


def test_a_run_is_recorded_per_module_and_listed(tmp_path, capsys):
    b = bench()
    table = tmp_path / "scores.json"
    good, low = b.Score("planner", total=100, killed=90, equivalent=2), b.Score("values", total=10, killed=5)
    b.record(table, [(good, []), (low, [])], {"planner": b.MODULES["planner"], "values": b.MODULES["values"]}, ["tests/unit"])
    data = json.loads(table.read_text())
    assert data["planner"]["score"] == round(90 / 98, 4) and data["values"]["survivors"] == 0 and data["values"]["score"] == 0.5
    again = b.Score("values", total=10, killed=9)
    b.record(table, [(again, [])], {"values": b.MODULES["values"]}, ["tests/unit"])
    assert json.loads(table.read_text())["values"]["score"] == 0.9 and "planner" in json.loads(table.read_text())
    assert b.list_modules(table) == 0
    out = capsys.readouterr().out
    assert "planner                 91.8%  90/98" in out and f"2 of {len(b.MODULES)} modules measured" in out and "render" in out
    # a run over fewer tests than the fast tiers is a lower bound: the listing names its selection
    assert ", tests: tests/unit)" in out
    b.record(table, [(again, [])], {"values": b.MODULES["values"]}, b.FAST_TIERS)
    b.list_modules(table)
    listed = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "tests:" not in listed["values"] and "tests: tests/unit)" in listed["planner"]


HOOKS = ROOT / "benchmarks" / "mutation_hooks"
# a subprocess in which mutmut's trampolines recorded two calls (mutmut.state stood in: its state()._stats)
CHILD = """
import sys, types
state = types.ModuleType("mutmut.state")
record = types.SimpleNamespace(_stats={"megaprov.cli.x_main", "megaprov.paths.x_state_dir"})
state.state = lambda: record
sys.modules["mutmut.state"] = state
"""


def _child(tmp_path, mode):
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(HOOKS), "MUTANT_UNDER_TEST": mode, "MEGAPROV_MUTATION_HITS": str(tmp_path)}
    subprocess.run([sys.executable, "-c", CHILD], env=env, check=True, timeout=60)


def test_a_subprocess_hands_the_calls_it_recorded_to_the_test_that_started_it(tmp_path, monkeypatch):
    """While mutmut collects which tests call which function, a test's subprocess writes its calls at exit and the
    plugin adds them to the test's before mutmut files them; outside that phase a subprocess writes nothing."""
    import types

    _child(tmp_path, "megaprov.cli.x_main__mutmut_3")
    assert list(tmp_path.iterdir()) == []
    _child(tmp_path, "stats")
    [hits] = tmp_path.iterdir()
    assert hits.suffix == ".hits" and sorted(hits.read_text().split()) == ["megaprov.cli.x_main", "megaprov.paths.x_state_dir"]

    spec = importlib.util.spec_from_file_location("megaprov_mutation_hits", HOOKS / "megaprov_mutation_hits.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    parent = types.SimpleNamespace(_stats={"megaprov.output.x_console"})
    state = types.ModuleType("mutmut.state")
    state.state = lambda: parent
    monkeypatch.setitem(sys.modules, "mutmut.state", state)
    monkeypatch.setenv("MEGAPROV_MUTATION_HITS", str(tmp_path))
    monkeypatch.setenv("MUTANT_UNDER_TEST", "")
    plugin.pytest_runtest_teardown(None, None)
    assert parent._stats == {"megaprov.output.x_console"} and hits.exists()  # only while stats are collected
    monkeypatch.setenv("MUTANT_UNDER_TEST", "stats")
    plugin.pytest_runtest_teardown(None, None)
    assert parent._stats == {"megaprov.output.x_console", "megaprov.cli.x_main", "megaprov.paths.x_state_dir"}
    assert list(tmp_path.iterdir()) == []


def test_help_names_the_target_and_every_option():
    """`--help` prints (argparse expands each option's help: a bare % in it used to end in a traceback)."""
    import subprocess

    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_mutation.py"), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == ""
    assert "scores under 85%" in done.stdout and all(f"--{o}" in done.stdout for o in ("module", "tests", "survivors", "check", "record", "list"))


def test_every_equivalents_file_reads_and_names_a_module_file_of_the_benchmark():
    """Each explained survivor parses (a plain YAML scalar ending in ':' once stopped a run before it began), names a
    file the benchmark mutates, and changes something."""
    b = bench()
    entries = b.load_equivalents()
    assert entries
    mutated = set(b.MODULES.values())
    for e in entries:
        assert e["file"] in mutated, e
        assert e["before"] != e["after"] and str(e["why"]).strip(), e
