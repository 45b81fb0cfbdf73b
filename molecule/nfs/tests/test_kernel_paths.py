"""The kernel NFS paths on a node whose kernel has no NFS (side_effect.yml ran them and recorded each run).

What a container allows: the roles' kernel checks stopping them with a message that names the fix, and, with nfsd
simulated, the kernel server's exports as the role writes them and as nfs-utils' exportfs reads them back.
"""

import ipaddress
import json

import pytest
from conftest import address

from tests.molecule.inventory import names, node, specs

testinfra_hosts = specs("nfs_kernel_probe")
EXPORT = "/srv/megaprov-export"  # side_effect.yml's nfs_server_export_dir


@pytest.fixture
def runs(host):
    return json.loads(host.file("/var/tmp/megaprov-kernel-paths.json").content_string)


def test_this_kernel_really_has_no_nfs(host):
    """The premise of the fail-fast checks below: neither nfsd nor the NFS client file system is available."""
    filesystems = host.file("/proc/filesystems").content_string.split()
    assert "nfsd" not in filesystems and "nfs" not in filesystems and "nfs4" not in filesystems


def test_the_kernel_server_stops_at_its_kernel_check_and_names_the_fix(runs):
    run = runs["server_without_nfsd"]
    assert run["failed"] and run["task"] == "Fail when this kernel has no NFS server", run
    assert run["msg"].startswith("this kernel has no NFS server support (nfsd is not in /proc/filesystems and modprobe nfsd failed"), run["msg"]
    assert run["msg"].endswith("set nfs_server_implementation: ganesha"), run["msg"]
    # it stopped before installing anything or writing exports (dpkg's status of the package, then the exports file)
    left = runs["left_by_server_without_nfsd"]
    assert "install ok installed" not in left and "exports written" not in left, left


def test_the_kernel_client_stops_at_its_kernel_check_and_names_the_fix(runs, host):
    run = runs["client_without_nfs"]
    assert run["failed"] and run["task"] == "Fail when this kernel has no NFS client", run
    assert run["msg"].startswith("this kernel has no NFS client (nfs is not in /proc/filesystems and modprobe nfs failed"), run["msg"]
    assert "set nfs_client_mode: libnfs" in run["msg"] and "or existing when the share is mounted another way" in run["msg"]
    assert "/srv/megaprov-mount" not in host.file("/etc/fstab").content_string  # it never reached the mount


def test_existing_mode_refuses_a_mount_point_where_nothing_is_mounted(runs):
    run = runs["existing_not_mounted"]
    assert run["failed"] and run["task"] == "Check the site file system is mounted", run
    assert "nfs_client_mount_point=/srv/not-mounted" in run["msg"] and "nothing is mounted" in run["msg"], run["msg"]


def test_with_nfsd_the_kernel_server_stops_only_where_a_container_must(runs):
    """Everything up to the service runs (install, layout, exports); nfs-server needs the nfsd file system."""
    run = runs["server_with_nfsd"]
    assert run["failed"] and run["task"] == "Start the NFS server", run


def expected_clients():
    """The smallest network that holds every node: its prefix is the bits the lowest and highest addresses share
    (32 minus the bit length of their XOR). The podman network is a /24, so it is never wider than that."""
    addrs = sorted(ipaddress.IPv4Address(address(node(n))) for n in names("all"))
    prefix = 32 - (int(addrs[0]) ^ int(addrs[-1])).bit_length()
    net = ipaddress.IPv4Network(f"{addrs[0]}/{prefix}", strict=False)
    assert net.prefixlen >= 24 and all(a in net for a in addrs)
    return str(net)


def test_the_exports_squash_root_and_allow_only_the_nodes(host):
    lines = host.file("/etc/exports.d/megaprov.exports").content_string.splitlines()
    entries = [line for line in lines if line.strip() and not line.startswith("#")]
    # exports(5): root_squash maps a client's root to the anonymous user; the options are the role's defaults
    assert entries == [f"{EXPORT} {expected_clients()}(rw,sync,no_subtree_check,root_squash)"], entries


def test_exportfs_reads_the_export_back_with_root_squash(host):
    """nfs-utils' own parser: what the kernel would be told to export (`exportfs -s`, from the table exportfs -ra wrote)."""
    out = host.check_output("exportfs -s")
    line = [line.split() for line in out.splitlines() if line.split() and line.split()[0] == EXPORT]
    assert len(line) == 1, out
    client, _, options = line[0][1].partition("(")
    options = options.rstrip(")").split(",")
    assert client == expected_clients()
    assert {"rw", "sync", "no_subtree_check", "root_squash"} <= set(options) and "no_root_squash" not in options, options
