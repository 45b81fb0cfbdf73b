"""Inventories as Ansible users have them (YAML, a directory of sources, a dynamic inventory script), read through
ansible-core's own loading (ansible-inventory) and then checked as strictly as megaprov's INI."""

import json
import os
import sys
import textwrap

import pytest

from megaprov import paths
from megaprov.cluster import inventory as inv
from megaprov.errors import InventoryError

YAML = """\
all:
  vars:
    megaprov_shared_dir: /shared
  children:
    head:
      hosts:
        head01: {ansible_host: 10.0.0.10}
    gpu_nodes:
      hosts:
        gpu[01:03]:
      vars:
        megaprov_gpus_per_node: 8
        megaprov_gpu_model: H100-SXM
"""


def load(path):
    return inv.load(path, paths.roles_dir(), paths.cluster_defaults())


def test_a_yaml_inventory_is_read_with_its_ranges_and_vars(tmp_path):
    (tmp_path / "cluster.yml").write_text(YAML)
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("megaprov_cluster_user: trainer\n")
    found = load(tmp_path / "cluster.yml")
    assert found.head == "head01" and found.hosts_of("gpu_nodes") == ["gpu01", "gpu02", "gpu03"]
    assert found.host_var("gpu02", "megaprov_gpus_per_node") == 8 and found.host_var("gpu02", "megaprov_shared_dir") == "/shared"
    assert found.host_var("head01", "ansible_host") == "10.0.0.10" and found.host_var("gpu01", "megaprov_cluster_user") == "trainer"


def test_a_dynamic_inventory_script_is_run_by_ansible(tmp_path):
    script = tmp_path / "netbox.py"
    listing = {"head": {"hosts": ["h"]}, "gpu_nodes": {"hosts": ["g1", "g2"]}, "_meta": {"hostvars": {"g1": {"ansible_host": "10.0.0.2"}}}}
    script.write_text(f"#!{sys.executable}\nimport sys\nprint('{{}}' if '--host' in sys.argv else {json.dumps(json.dumps(listing))})\n")
    script.chmod(0o755)
    found = load(script)
    assert found.head == "h" and found.hosts_of("gpu_nodes") == ["g1", "g2"] and found.host_var("g1", "ansible_host") == "10.0.0.2"


def test_a_directory_of_sources_reads_its_own_group_vars(tmp_path):
    (tmp_path / "10-hosts.yml").write_text(YAML)
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu_nodes.yml").write_text("megaprov_gpus_per_node: 4\n")
    found = load(tmp_path)
    assert found.host_var("gpu03", "megaprov_gpus_per_node") == 4


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("all:\n  hosts: [\n", "cluster.yml:3: Ansible cannot read this inventory"),
        (YAML.replace("megaprov_gpus_per_node: 8", "megaprov_gpus_per_node: eight"), "megaprov_gpus_per_node='eight' must be a whole number"),
        (YAML.replace("head01: {ansible_host: 10.0.0.10}", "head01: {ansible_host: '10.0.0.1;touch /x'}"), "is not an IP address or host name"),
        (YAML.replace("    head:\n      hosts:\n        head01: {ansible_host: 10.0.0.10}\n", ""), "group [head] is missing or empty"),
        (YAML.replace("gpu[01:03]:", "gpu[01:03]:\n        head01:"), None),  # the head may be a GPU node too
    ],
)
def test_the_strict_checks_hold_for_yaml(tmp_path, text, needle):
    (tmp_path / "cluster.yml").write_text(text)
    if needle is None:
        load(tmp_path / "cluster.yml")
        return
    with pytest.raises(InventoryError if "Ansible" in needle or "group [" in needle else Exception) as info:
        load(tmp_path / "cluster.yml")
    assert needle in str(info.value), str(info.value)


def test_a_failing_script_is_one_line(tmp_path):
    script = tmp_path / "broken.sh"
    script.write_text("#!/bin/sh\necho 'cannot reach the CMDB' >&2\nexit 3\n")
    script.chmod(0o755)
    with pytest.raises(InventoryError) as info:
        load(script)
    assert "Ansible cannot read this inventory" in info.value.message and "\n" not in info.value.one_line()


def test_ini_stays_with_megaprovs_own_reader(tmp_path):
    (tmp_path / "inventory.ini").write_text(
        textwrap.dedent("""\
        [head]
        h ansible_host=10.0.0.1
        [gpu_nodes]
        g1
        g1
        """)
    )
    with pytest.raises(InventoryError, match=r"inventory.ini:5: host 'g1' is listed twice"):
        load(tmp_path / "inventory.ini")
    assert inv.is_ini(tmp_path / "inventory.ini") and not inv.is_ini(tmp_path / "x.yml")
    os.chmod(tmp_path / "inventory.ini", 0o755)
    assert not inv.is_ini(tmp_path / "inventory.ini")  # executable: a script, as Ansible takes it
