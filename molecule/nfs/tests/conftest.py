"""The scenario's nodes, by the groups of Molecule's inventory (molecule.yml), reached through podman exec.

testinfra's ansible backend is ~30x slower here, and the podman connection of Molecule's inventory is one testinfra
cannot map to a backend of its own: the inventory names the hosts, `podman://` reaches them.
"""

import os

import testinfra
from testinfra.utils.ansible_runner import AnsibleRunner

os.environ.setdefault("CONTAINERS_CONF", os.path.join(os.environ.get("MOLECULE_PROJECT_DIRECTORY", "."), "megaprov", "cluster", "lab_files", "containers.conf"))
INVENTORY = AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"])


def names(group):
    found = INVENTORY.get_hosts(group)
    assert found, f"Molecule's inventory has no host in group {group}"
    return found


def specs(group):
    """testinfra host specs of a group, for a module's testinfra_hosts."""
    return [f"podman://{INVENTORY.get_variables(name).get('ansible_host', name)}" for name in names(group)]


def node(name):
    return testinfra.get_host(f"podman://{INVENTORY.get_variables(name).get('ansible_host', name)}")


def server():
    (name,) = names("nfs_server")
    return node(name)


def address(host):
    """The node's address on the scenario network (the default route's interface)."""
    return host.interface.default().addresses[0]
