"""The stored facts describe the node as the node itself reports it."""

import json

import pytest

from tests.molecule.inventory import scenario_hosts

testinfra_hosts = list(scenario_hosts().values())  # from Molecule's inventory


@pytest.fixture(scope="module")
def facts(host):
    fact = host.file("/etc/ansible/facts.d/megaprov_preflight.fact")
    assert fact.mode == 0o644 and fact.user == "root"
    return json.loads(fact.content_string)


def test_os_and_kernel_match_the_node(host, facts):
    assert facts["os"]["id"] == "debian"
    assert facts["os"]["version"] == "12"
    assert facts["kernel"] == host.check_output("uname -r")


def test_cpus_and_memory_match_the_node(host, facts):
    assert facts["cpus"] == int(host.check_output("nproc"))
    mem_kib = int(host.check_output("awk '/MemTotal/ {print $2}' /proc/meminfo"))
    assert facts["memory_mb"] == mem_kib // 1024


def test_no_gpu_and_no_hca_in_a_container(host, facts):
    assert facts["gpus"] == []
    assert facts["hcas"] == [] and not host.file("/sys/class/infiniband").exists


def test_measurements_are_not_stored(facts):
    # Free space and write speed change every run; storing them would break idempotence.
    assert set(facts["disk"]) == {"path", "total_gb"}


def test_the_inventory_setting_beats_the_megaprov_role_default(facts):
    """megaprov_scratch_dir is /tmp in the scenario's inventory, /var/tmp in the megaprov role's defaults (and in the
    preflight role's): the measured directory is the inventory's, so the settings role sits below the inventory."""
    assert facts["disk"]["path"] == "/tmp"


def test_the_write_test_leaves_nothing_behind(host):
    assert host.run("ls -a /tmp | grep -c megaprov-preflight").stdout.strip() == "0"
