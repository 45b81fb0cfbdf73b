"""The containers scenario's registry helpers; the hosts, by the groups of Molecule's inventory (molecule.yml), and the
helpers every multi-node scenario shares are in tests/molecule/inventory.py."""

from tests.molecule.inventory import USER, controller, names, node, variable

__all__ = ["USER", "PROBE", "address", "head", "port", "worker"]

PROBE = "docker.io/megaprov/probe:1"  # prepare.yml makes it on the head; docker.io itself is unreachable here


def head():
    return controller()


def worker():
    (name,) = names("gpu_nodes")
    return node(name)


def port():
    (name,) = names("head")
    return int(variable(name, "image_registry_port"))


def address(host):
    """The host's address on the scenario's network."""
    return host.check_output("hostname -I").split()[0]
