"""The package_cache scenario's own helpers; the hosts, by the groups of Molecule's inventory (molecule.yml), and the
helpers every multi-node scenario shares are in tests/molecule/inventory.py."""

import json

from tests.molecule.inventory import controller, names, node

LOG = "/var/log/apt-cacher-ng/apt-cacher.log"


def head():
    return controller()


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
