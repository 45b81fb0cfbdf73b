"""The mesh nodes, taken from Molecule's inventory, reached through podman exec.

testinfra's ansible backend is ~30x slower here, and the podman connection of Molecule's inventory is one testinfra
cannot map to a backend of its own: the inventory names the hosts, `podman://` reaches them.
"""

import os

import pytest
import testinfra
from testinfra.utils.ansible_runner import AnsibleRunner

USER = "trainer"  # converge.yml's ssh_mesh_user
UID = 2345  # converge.yml's ssh_mesh_uid

os.environ.setdefault("CONTAINERS_CONF", os.path.join(os.environ.get("MOLECULE_PROJECT_DIRECTORY", "."), "megaprov", "cluster", "lab_files", "containers.conf"))
INVENTORY = AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"])
NODES = INVENTORY.get_hosts("all")


def podman_host(name):
    return testinfra.get_host(f"podman://{INVENTORY.get_variables(name).get('ansible_host', name)}")


@pytest.fixture(scope="session")
def hosts():
    assert len(NODES) >= 2, f"the mesh needs two nodes at least, the inventory has {NODES}"
    return {name: podman_host(name) for name in NODES}
