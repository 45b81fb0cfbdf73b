"""Where the container roles download from, templated by Ansible as the roles see it: NVIDIA's releases by default,
the offline bundle's sources/ and apt repository where the head's package cache serves one (its local fact)."""

import pytest

from tests.conftest import ROOT
from tests.helpers.modules import role_vars

ROLES = ROOT / "ansible_collections/megaprov/cluster/roles"
WEB = "http://10.0.0.1:3143"
BUNDLE = {"megaprov_cache": {"web_url": WEB, "bundle_apt": f"{WEB}/bundle/apt", "bundle_sources": f"{WEB}/bundle/sources/"}}
NO_BUNDLE = {"megaprov_cache": {"web_url": WEB, "bundle_apt": "", "bundle_sources": ""}}  # a cache without a bundle


@pytest.mark.parametrize("local", [{}, NO_BUNDLE])
def test_without_a_bundle_the_roles_download_nvidias_releases(local):
    facts = {"ansible_local": local, "ansible_architecture": "x86_64"}
    assert role_vars(ROLES / "enroot", ["enroot_base_url"], **facts)["enroot_base_url"] == (
        "https://github.com/NVIDIA/enroot/releases/download/v4.1.2/"
    )
    assert role_vars(ROLES / "pyxis", ["pyxis_source_url"], **facts)["pyxis_source_url"] == (
        "https://github.com/NVIDIA/pyxis/archive/refs/tags/v0.24.0.tar.gz"
    )
    found = role_vars(ROLES / "container_toolkit", ["container_toolkit_repo_url"], **{**facts, "ansible_architecture": "aarch64"})
    assert found["container_toolkit_repo_url"] == "https://nvidia.github.io/libnvidia-container/stable/deb/arm64/"


def test_with_a_bundle_they_download_from_the_heads_cache():
    facts = {"ansible_local": BUNDLE, "ansible_architecture": "x86_64"}
    assert role_vars(ROLES / "enroot", ["enroot_base_url"], **facts)["enroot_base_url"] == f"{WEB}/bundle/sources/"
    # the name bundle_contents.yml gives the archive in sources/
    found = role_vars(ROLES / "pyxis", ["pyxis_source_url", "__pyxis_archive_name"], **facts, pyxis_version="0.25.0")
    assert found == {"pyxis_source_url": f"{WEB}/bundle/sources/pyxis-0.25.0.tar.gz", "__pyxis_archive_name": "pyxis-0.25.0.tar.gz"}
    assert role_vars(ROLES / "container_toolkit", ["container_toolkit_repo_url"], **facts)["container_toolkit_repo_url"] == ""
