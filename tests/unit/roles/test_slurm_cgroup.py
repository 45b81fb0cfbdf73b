"""Slurm older than 22.05 on a cgroup v2 node: Slurm's cgroup/v2 plugin came with 22.05 (SchedMD's
CHANGELOG/slurm-22.05.md; 21.08 builds cgroup/v1 alone), Ubuntu 22.04 ships Slurm 21.08 and boots with the unified
hierarchy alone, so slurmd of the metal profile stops at "cannot create cgroup context". The slurm role refuses it
before anything is installed, from `apt-cache policy slurmd` and /sys/fs/cgroup/cgroup.controllers."""

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests.conftest import ROOT
from tests.helpers.modules import trusted

ROLE = ROOT / "ansible_collections" / "megaprov" / "cluster" / "roles" / "slurm"
JAMMY = """slurmd:
  Installed: (none)
  Candidate: 21.08.5-2ubuntu1
  Version table:
     21.08.5-2ubuntu1 500
        500 http://archive.ubuntu.com/ubuntu jammy/universe amd64 Packages
"""
BOOKWORM = JAMMY.replace("21.08.5-2ubuntu1", "22.05.8-4+deb12u3").replace("ubuntu jammy/universe", "debian bookworm/main")
NOBLE = JAMMY.replace("21.08.5-2ubuntu1", "23.11.4-1.2ubuntu5")
INSTALLED_2108 = JAMMY.replace("Installed: (none)", "Installed: 21.08.5-2ubuntu1")
SITE_2311 = JAMMY.replace("Installed: (none)", "Installed: 1:23.11.10-1site").replace("Candidate: 21.08.5-2ubuntu1", "Candidate: 1:23.11.10-1site")
REFUSE = "Refuse the metal profile where this Slurm has no cgroup/v2 plugin"


def task(name):
    tasks = yaml.safe_load((ROLE / "tasks" / "cgroup.yml").read_text())
    return next(t for t in tasks if t["name"] == name)


def judge(policy, slurm_repo="", cgroup2=True):
    """(passes, fail message) of the role's refusal, templated by Ansible as the role runs it."""
    loader = DataLoader()
    variables = trusted(loader.load_from_file(str(ROLE / "defaults" / "main.yml")))
    variables.update(trusted(loader.load_from_file(str(ROLE / "vars" / "main.yml"))))
    variables.update(
        inventory_hostname="gpu1",
        slurm_repo=slurm_repo,
        __slurm_cgroup2={"stat": {"exists": cgroup2}},
        __slurm_apt_policy={"stdout": policy} if cgroup2 else {"skipped": True},
    )
    templar = Templar(loader=loader, variables=variables)
    refuse = task(REFUSE)
    if not templar.template(trust_as_template("{{ (" + refuse["when"] + ") | bool }}")):
        return True, ""
    passes = templar.template(trust_as_template("{{ (" + refuse["ansible.builtin.assert"]["that"] + ") | bool }}"))
    return passes, templar.template(trust_as_template(refuse["ansible.builtin.assert"]["fail_msg"]))


def test_ubuntu_2204_slurm_2108_on_cgroup_v2_is_refused_in_one_line_naming_the_fixes():
    passes, msg = judge(JAMMY)
    assert not passes
    assert msg.startswith("slurm_profile=metal on gpu1: Slurm 21.08 (the distribution's) has no cgroup/v2 plugin")
    for fix in ("point slurm_repo at a Slurm >= 22.05", "systemd.unified_cgroup_hierarchy=0", "slurm_profile: container"):
        assert fix in msg
    assert "\n" not in msg


@pytest.mark.parametrize("policy", [BOOKWORM, NOBLE], ids=["debian12-22.05", "ubuntu2404-23.11"])
def test_slurm_2205_and_later_pass(policy):
    assert judge(policy)[0]


def test_a_cgroup_v1_node_is_not_judged():
    assert judge(JAMMY, cgroup2=False)[0]


def test_an_installed_old_slurmd_is_refused_even_with_a_site_repository():
    # megaprov.cluster.apt installs with state present: an installed 21.08 stays 21.08
    passes, msg = judge(INSTALLED_2108, slurm_repo="deb [signed-by=/k.gpg] https://repo.example/slurm jammy main")
    assert not passes and "(installed)" in msg and "remove the installed slurmd" in msg


def test_a_site_repository_is_judged_once_its_slurm_is_installed():
    site = "deb [signed-by=/k.gpg] https://repo.example/slurm jammy main"
    # before the repository is added apt's candidate is the distribution's: not known, not refused
    assert judge(JAMMY, slurm_repo=site)[0]
    # after the install: the site's 23.11 (with an epoch) passes
    assert judge(SITE_2311, slurm_repo=site)[0]


def test_the_check_comes_before_anything_is_installed_and_again_after_a_site_install():
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    names = [t["name"] for t in tasks]
    first = names.index("Refuse a Slurm without cgroup/v2 on a cgroup v2 node, before anything is installed")
    assert first < names.index("Add the site's Slurm repository") < names.index("Install Slurm")
    again = names.index("Check the installed Slurm against the cgroup hierarchy where it was not known before")
    assert names.index("Install Slurm") < again < names.index("Read this node's shape (slurmd -C) and its GPU devices")
    for i in (first, again):
        assert tasks[i]["ansible.builtin.include_tasks"]["file"] == "cgroup.yml"
        assert "slurm_profile == 'metal'" in tasks[i]["when"]
    # read-only in check mode too
    policy = task("Read the Slurm apt has installed or would install")
    assert policy["check_mode"] is False and policy["changed_when"] is False
