"""nfs_client_mode existing on the server node: it uses the export's directory, which podman mounted, as a site file
system it did not mount (Lustre, GPFS, Weka on a real cluster). It must not mount, install or record anything."""


from tests.molecule.inventory import names, specs

testinfra_hosts = specs("nfs_server")


def test_the_share_is_used_where_something_else_mounted_it(host):
    mount = host.mount_point("/shared")
    assert mount.exists and not mount.filesystem.startswith("nfs"), mount.filesystem


def test_nothing_is_recorded_in_fstab(host):
    fstab = [line.split() for line in host.file("/etc/fstab").content_string.splitlines() if line.strip() and not line.startswith("#")]
    assert not [e for e in fstab if len(e) > 1 and (e[1] == "/shared" or e[2].startswith("nfs"))], fstab


def test_no_nfs_client_is_installed(host):
    # (nfs-common is there: NFS-Ganesha depends on it)
    assert not host.package("libnfs-utils").is_installed


def test_its_check_file_was_written_through_the_path_as_the_cluster_user(host):
    # the path access replaces this node's older check files: exactly one is left
    (name,) = names("nfs_server")
    files = host.check_output(f"find /shared/cache -name '.megaprov-check-{name}-*' -uid 2000 -size 256k").split()
    assert len(files) == 1, files
