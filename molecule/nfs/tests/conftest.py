"""The nfs scenario's own helpers; the hosts, by the groups of Molecule's inventory (molecule.yml), and the helpers
every multi-node scenario shares are in tests/molecule/inventory.py."""

from tests.molecule.inventory import names, node


def server():
    (name,) = names("nfs_server")
    return node(name)


def address(host):
    """The node's address on the scenario network (the default route's interface)."""
    return host.interface.default().addresses[0]
