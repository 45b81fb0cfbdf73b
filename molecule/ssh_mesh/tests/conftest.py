"""testinfra through podman exec (its ansible backend is ~30x slower here)."""

import os

import pytest
import testinfra

NODES = ["mesh1", "mesh2", "mesh3"]
USER = "trainer"


@pytest.fixture(scope="session")
def hosts():
    os.environ.setdefault("CONTAINERS_CONF", os.path.join(os.environ.get("MOLECULE_PROJECT_DIRECTORY", "."), "megaprov", "lab_files", "containers.conf"))
    return {name: testinfra.get_host(f"podman://{name}") for name in NODES}
