"""A Molecule scenario's hosts for its testinfra verifier, read from the inventory Molecule wrote for the run
(MOLECULE_INVENTORY_FILE), so a verifier names no host of its own; and the helpers the multi-node verifiers share
(hosts by group, inventory variables, commands as the cluster user, polling).

Molecule's podman driver connects to its instances with `podman exec` (`ansible_connection: podman`); the hosts go to
testinfra as `podman://` URLs, its native podman backend. testinfra's ansible backend, which `ansible://` would pick
for a podman connection, runs every check through Ansible (207 s instead of 7 s for 16 tests, /work/shared/LAB.md).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import testinfra
from testinfra.utils.ansible_runner import AnsibleRunner

PROJECT = os.environ.get("MOLECULE_PROJECT_DIRECTORY", str(Path(__file__).resolve().parents[2]))
USER = "megaprov"  # megaprov_cluster_user's default (the megaprov role), created by the scenarios' prepare.yml

T = TypeVar("T")


@functools.cache
def inventory() -> AnsibleRunner:
    """Molecule's inventory of this run; podman reads the lab's containers.conf, as Molecule's own calls do."""
    os.environ.setdefault("CONTAINERS_CONF", os.path.join(PROJECT, "megaprov", "cluster", "lab_files", "containers.conf"))
    return AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"])


def url(name: str) -> str:
    """The testinfra URL of an inventory host (only Molecule's podman instances)."""
    hostvars = inventory().get_variables(name)
    connection = str(hostvars.get("ansible_connection", "ssh"))
    if connection.rsplit(".", 1)[-1] != "podman":
        raise ValueError(f"{name}: ansible_connection {connection}: only Molecule's podman instances are supported")
    return f"podman://{hostvars.get('ansible_host', name)}"


def scenario_hosts(pattern: str = "all") -> dict[str, str]:
    """{inventory name: testinfra URL} of the hosts of `pattern` in Molecule's inventory."""
    hosts = {name: url(name) for name in inventory().get_hosts(pattern)}
    if not hosts:
        raise ValueError(f"no host matches {pattern!r} in {os.environ['MOLECULE_INVENTORY_FILE']}")
    return hosts


def names(group: str) -> list[str]:
    found: list[str] = inventory().get_hosts(group)
    assert found, f"Molecule's inventory has no host in group {group}"
    return found


def variable(name: str, key: str) -> Any:
    """An inventory variable of a host (molecule.yml's group_vars and host_vars)."""
    found = inventory().get_variables(name)
    assert key in found, f"{name} has no inventory variable {key}"
    return found[key]


def specs(group: str) -> list[str]:
    """testinfra host specs of a group, for a module's testinfra_hosts."""
    return [url(name) for name in names(group)]


def node(name: str) -> Any:
    return testinfra.get_host(url(name))


def controller() -> Any:
    """The scenario's one host of group head."""
    (name,) = names("head")
    return node(name)


def as_user(host: Any, command: str) -> Any:
    """COMMAND run by the cluster account (runuser: no login shell, no PAM session), killed after 120 s."""
    return host.run(f"timeout 120 runuser -u {USER} -- {command}")


def wait(predicate: Callable[[], T], timeout: float = 60, every: float = 1.0) -> T:
    """Poll PREDICATE until it returns something truthy (and return it) or TIMEOUT seconds pass (then its last value)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)
