"""The slurm scenario's own helpers; the hosts, by the groups of Molecule's inventory (molecule.yml), and the
helpers every multi-node scenario shares are in tests/molecule/inventory.py."""

from tests.molecule.inventory import controller


def node_states():
    """{node: (state, reason)} from sinfo on the controller (one line per node; reason "" when none)."""
    out = controller().check_output("sinfo -h -N -o '%N|%T|%E'")
    states = {}
    for line in out.splitlines():
        name, state, reason = line.split("|", 2)
        states[name] = (state, "" if reason == "none" else reason)
    return states
