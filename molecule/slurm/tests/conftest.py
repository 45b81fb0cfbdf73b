"""The scenario's nodes, by the groups of Molecule's inventory (molecule.yml), reached through podman exec.

testinfra's ansible backend is ~30x slower here, and the podman connection of Molecule's inventory is one testinfra
cannot map to a backend of its own: the inventory names the hosts, `podman://` reaches them.
"""

import os
import shlex
import time

import testinfra
from testinfra.utils.ansible_runner import AnsibleRunner

PROJECT = os.environ.get("MOLECULE_PROJECT_DIRECTORY", ".")
os.environ.setdefault("CONTAINERS_CONF", os.path.join(PROJECT, "megaprov", "cluster", "lab_files", "containers.conf"))
INVENTORY = AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"])
USER = "megaprov"  # megaprov_cluster_user's default (the megaprov role), created by prepare.yml


def names(group):
    found = INVENTORY.get_hosts(group)
    assert found, f"Molecule's inventory has no host in group {group}"
    return found


def variable(name, key):
    """An inventory variable of a host (molecule.yml's group_vars)."""
    found = INVENTORY.get_variables(name)
    assert key in found, f"{name} has no inventory variable {key}"
    return found[key]


def specs(group):
    """testinfra host specs of a group, for a module's testinfra_hosts."""
    return [f"podman://{INVENTORY.get_variables(name).get('ansible_host', name)}" for name in names(group)]


def node(name):
    return testinfra.get_host(f"podman://{INVENTORY.get_variables(name).get('ansible_host', name)}")


def controller():
    (name,) = names("head")
    return node(name)


def as_user(host, command):
    """COMMAND run by the cluster account (runuser: no login shell, no PAM session), killed after 120 s."""
    return host.run(f"timeout 120 runuser -u {USER} -- {command}")


def node_states():
    """{node: (state, reason)} from sinfo on the controller (one line per node; reason "" when none)."""
    out = controller().check_output("sinfo -h -N -o '%N|%T|%E'")
    states = {}
    for line in out.splitlines():
        name, state, reason = line.split("|", 2)
        states[name] = (state, "" if reason == "none" else reason)
    return states


def wait_for(predicate, timeout=60, interval=1):
    """Poll PREDICATE (returning a truthy value when done) for up to TIMEOUT seconds; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def quote(text):
    return shlex.quote(text)
