"""The base state common leaves on a node, read from the nodes themselves."""

import pytest
import testinfra

from tests.molecule.inventory import scenario_hosts

NODES = scenario_hosts()  # {name: testinfra URL}, from Molecule's inventory


@pytest.fixture(scope="module")
def hosts():
    return {name: testinfra.get_host(url) for name, url in NODES.items()}


def address(host):
    return host.check_output("ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1")


@pytest.mark.parametrize("node", NODES)
def test_base_packages_are_installed(hosts, node):
    for package in ("chrony", "rsync", "jq", "numactl", "pciutils", "hwloc-nox"):
        assert hosts[node].package(package).is_installed, package


@pytest.mark.parametrize("node", NODES)
def test_chrony_runs_with_the_configured_sources(hosts, node):
    h = hosts[node]
    assert h.service("chrony").is_running
    assert h.service("chrony").is_enabled
    assert "server time.example.internal iburst" in h.file("/etc/chrony/chrony.conf").content_string
    assert h.run("chronyc -n sources").rc == 0
    # Track-only: chronyd was started with -x (it may not steer a shared clock).
    assert " -x" in h.check_output("ps -o args= -C chronyd")


@pytest.mark.parametrize("node", NODES)
def test_every_node_resolves_to_its_cluster_address(hosts, node):
    h = hosts[node]
    for name, other in hosts.items():
        resolved = h.check_output(f"getent ahostsv4 {name} | head -1 | cut -d' ' -f1")
        assert resolved == address(other), f"{node} resolves {name} to {resolved}"
    assert "127.0.1.1" not in h.file("/etc/hosts").content_string


@pytest.mark.parametrize("node", NODES)
def test_memlock_is_unlimited_for_logins_and_services(hosts, node):
    h = hosts[node]
    limits = h.file("/etc/security/limits.d/90-megaprov.conf")
    assert limits.mode == 0o644
    assert "*    hard memlock unlimited" in limits.content_string
    assert "DefaultLimitMEMLOCK=infinity" in h.file("/etc/systemd/system.conf.d/90-megaprov.conf").content_string


@pytest.mark.parametrize("node", NODES)
def test_kernel_settings_merge_site_over_defaults(hosts, node):
    content = hosts[node].file("/etc/sysctl.d/90-megaprov.conf").content_string
    assert "vm.max_map_count = 2097152" in content
    assert "net.ipv4.neigh.default.gc_thresh3 = 65536" in content
