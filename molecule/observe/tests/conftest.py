"""The observe scenario's nodes, by the groups of Molecule's inventory (molecule.yml), reached through podman exec.

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


def address(name):
    """The host's address on the scenario's network (what the roles bind to: the default route's interface)."""
    return node(name).check_output("hostname -I").split()[0]


def api(name, path, timeout=10):
    """GET a JSON API on the head's cluster address from inside the head (as a node on the network would)."""
    import json

    program = f"import urllib.request,sys; sys.stdout.write(urllib.request.urlopen({path!r}, timeout={timeout}).read().decode())"
    out = node(name).check_output("python3 -c " + shlex.quote(program))
    return json.loads(out) if out.startswith(("{", "[")) else out


def wait(predicate, timeout=120, every=2.0):
    """Poll PREDICATE until it returns something truthy (and return it) or TIMEOUT seconds pass (then the last value)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)
