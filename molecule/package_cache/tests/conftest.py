"""The scenario's hosts, by the groups of Molecule's inventory (molecule.yml), reached through podman exec.

testinfra's ansible backend is ~30x slower here, and the podman connection of Molecule's inventory is one testinfra
cannot map to a backend of its own: the inventory names the hosts, `podman://` reaches them.
"""

import json
import os

import testinfra
from testinfra.utils.ansible_runner import AnsibleRunner

PROJECT = os.environ.get("MOLECULE_PROJECT_DIRECTORY", ".")
os.environ.setdefault("CONTAINERS_CONF", os.path.join(PROJECT, "megaprov", "cluster", "lab_files", "containers.conf"))
INVENTORY = AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"])
LOG = "/var/log/apt-cacher-ng/apt-cacher.log"


def names(group):
    found = INVENTORY.get_hosts(group)
    assert found, f"Molecule's inventory has no host in group {group}"
    return found


def node(name):
    return testinfra.get_host(f"podman://{INVENTORY.get_variables(name).get('ansible_host', name)}")


def head():
    (name,) = names("head")
    return node(name)


def worker():
    (name,) = names("gpu_nodes")
    return node(name)


def fact(host):
    """The node's ansible_local.megaprov_cache."""
    return json.loads(host.file("/etc/ansible/facts.d/megaprov_cache.fact").content_string)


def address(host):
    """The host's address on the scenario's network."""
    return host.check_output("hostname -I").split()[0]


def log_lines(path_part):
    """apt-cacher-ng's log lines (time, kind, bytes, client, path) whose path holds PATH_PART."""
    lines = []
    for line in head().file(LOG).content_string.splitlines():
        fields = line.split("|")
        if len(fields) >= 5 and path_part in fields[4]:
            lines.append(fields)
    return lines
