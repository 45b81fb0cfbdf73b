"""The megatron role's derived settings, templated by Ansible as the role sees them."""

import pytest

from tests.conftest import ROOT
from tests.helpers.modules import role_vars

ROLE = ROOT / "ansible_collections/megaprov/cluster/roles/megatron"
MIRROR = "/shared/cache/git/Megatron-LM.git"
CACHE = {"megaprov_cache": {"git": {"megatron": MIRROR}}}


@pytest.mark.parametrize(
    ("repo", "local", "trusted"),
    [
        ("/srv/mirrors/Megatron-LM.git", {}, "/srv/mirrors/Megatron-LM.git"),  # a site's mirror: the role's own block
        ("file:///srv/mirrors/Megatron-LM.git", {}, "/srv/mirrors/Megatron-LM.git"),
        (MIRROR, CACHE, ""),  # the package cache's mirror: trusted by the cache's block, not twice
        ("https://github.com/NVIDIA/Megatron-LM.git", {}, ""),  # not local
        ("/srv/odd path/x.git", {}, ""),  # not plain path characters: never written into /etc/gitconfig
        ('/srv/x.git"\n[core]', {}, ""),
    ],
)
def test_a_local_megatron_repo_becomes_a_safe_directory_once(repo, local, trusted):
    found = role_vars(ROLE, ["__megatron_repo_path"], megatron_repo=repo, ansible_local=local)
    assert found["__megatron_repo_path"] == trusted


def test_what_megatron_lms_code_imports_is_listed_once_and_followed():
    """megatron_packages is the one list (found by importing the tree, tests/unit/roles/test_megatron_packages.py): the lab's
    wheelhouse reads it, and the test environment, which runs the same code, carries each of its packages."""
    import tomllib

    import yaml

    from megaprov.cluster import wheelhouse

    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    lab = wheelhouse.lab_requirements()
    assert set(defaults["megatron_packages"] + defaults["megatron_build_requirements"]) <= set(lab)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert set(defaults["megatron_packages"]) <= set(extras), "pyproject's test extra lacks what the role installs"
