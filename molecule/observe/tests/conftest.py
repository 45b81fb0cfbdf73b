"""The observe scenario's own helpers; the hosts, by the groups of Molecule's inventory (molecule.yml), and the
helpers every multi-node scenario shares are in tests/molecule/inventory.py."""

import json
import shlex

from tests.molecule.inventory import node


def address(name):
    """The host's address on the scenario's network (what the roles bind to: the default route's interface)."""
    return node(name).check_output("hostname -I").split()[0]


def api(name, path, timeout=10):
    """GET a JSON API on the head's cluster address from inside the head (as a node on the network would)."""
    program = f"import urllib.request,sys; sys.stdout.write(urllib.request.urlopen({path!r}, timeout={timeout}).read().decode())"
    out = node(name).check_output("python3 -c " + shlex.quote(program))
    return json.loads(out) if out.startswith(("{", "[")) else out
