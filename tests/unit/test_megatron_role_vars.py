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
