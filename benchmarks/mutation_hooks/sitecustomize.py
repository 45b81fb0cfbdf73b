"""Loaded by every Python a test starts while the mutation benchmark collects which tests call which function
(benchmarks/bench_mutation.py puts this directory on PYTHONPATH). mutmut records a call in its own process only: a
function that a test reaches through a subprocess (``megaprov`` on the command line, a collection module run by
ansible-playbook, a child under a memory limit) would count as called by no test, and its mutants as unkilled,
though the subprocess runs the mutant when one is active. Here a subprocess writes the functions it called to
MEGAPROV_MUTATION_HITS at exit; megaprov_mutation_hits (the pytest plugin) hands them to mutmut before it files the
test's calls. Nothing happens outside that phase, and nothing here may fail the program it is loaded into (the
system Pythons the tests start, 3.9 among them, have no mutmut)."""

import os


def _write_hits():
    import sys

    state = sys.modules.get("mutmut.state")
    if state is None:
        return
    try:
        names = sorted(state.state()._stats)
        if names:
            path = os.path.join(os.environ["MEGAPROV_MUTATION_HITS"], f"{os.getpid()}-{os.urandom(6).hex()}.hits")
            with open(path + ".part", "w") as out:
                out.write("\n".join(names))
            os.replace(path + ".part", path)
    except Exception:  # noqa: BLE001 - a test's subprocess must end as it would without this
        pass


if os.environ.get("MUTANT_UNDER_TEST") == "stats" and os.environ.get("MEGAPROV_MUTATION_HITS"):
    import atexit

    atexit.register(_write_hits)
