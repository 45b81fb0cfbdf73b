"""A Molecule scenario's hosts for its testinfra verifier, read from the inventory Molecule wrote for the run
(MOLECULE_INVENTORY_FILE), so a verifier names no host of its own.

Molecule's podman driver connects to its instances with `podman exec` (`ansible_connection: podman`); the hosts go to
testinfra as `podman://` URLs, its native podman backend. testinfra's ansible backend, which `ansible://` would pick
for a podman connection, runs every check through Ansible (207 s instead of 7 s for 16 tests, /work/shared/LAB.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from testinfra.utils.ansible_runner import AnsibleRunner


def scenario_hosts(pattern: str = "all") -> dict[str, str]:
    """{inventory name: testinfra URL} of the hosts of `pattern` in Molecule's inventory."""
    project = os.environ.get("MOLECULE_PROJECT_DIRECTORY", str(Path(__file__).resolve().parents[2]))
    os.environ.setdefault("CONTAINERS_CONF", os.path.join(project, "megaprov", "cluster", "lab_files", "containers.conf"))
    runner = AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"])
    hosts = {}
    for name in runner.get_hosts(pattern):
        hostvars = runner.get_variables(name)
        connection = str(hostvars.get("ansible_connection", "ssh"))
        if connection.rsplit(".", 1)[-1] != "podman":
            raise ValueError(f"{name}: ansible_connection {connection}: only Molecule's podman instances are supported")
        hosts[name] = f"podman://{hostvars.get('ansible_host', name)}"
    if not hosts:
        raise ValueError(f"no host matches {pattern!r} in {os.environ['MOLECULE_INVENTORY_FILE']}")
    return hosts
