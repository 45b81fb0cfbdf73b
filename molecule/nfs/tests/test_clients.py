"""The clients nfs2 and nfs3 reach the export on nfs1 through libnfs (their kernel has no NFS client)."""

import uuid

import testinfra

testinfra_hosts = ["podman://nfs2", "podman://nfs3"]


def url(path, uid=2000):
    addr = testinfra.get_host("podman://nfs1").interface.default().addresses[0]
    return f"nfs://{addr}/shared/{path}?uid={uid}&gid={uid}"


def test_libnfs_tools(host):
    assert host.package("libnfs-utils").is_installed


def test_a_file_written_on_one_client_reads_identically_on_another(host):
    other = "nfs3" if host.backend.get_hostname() == "nfs2" else "nfs2"
    writer = testinfra.get_host(f"podman://{other}")
    name = f"jobs/from-{other}-{uuid.uuid4().hex[:8]}"  # nfs-cp never overwrites
    writer.check_output(f"head -c 65536 /dev/urandom > /tmp/x && nfs-cp /tmp/x '{url(name)}'")
    want = writer.check_output("sha256sum /tmp/x").split()[0]
    got = host.check_output(f"nfs-cat '{url(name)}' | sha256sum").split()[0]
    assert got == want


def test_root_is_squashed(host):
    host.check_output("echo x > /tmp/r")
    result = host.run(f"nfs-cp /tmp/r '{url('checkpoints/as-root-' + uuid.uuid4().hex[:8], uid=0)}'")
    assert result.rc != 0, "root on a client must not write into the cluster user's directories"


def test_root_cannot_write_as_root_even_where_root_owns_the_directory(host):
    """The export's top directory is root's (0755): only a root that is not squashed could create a file there."""
    host.check_output("echo x > /tmp/r")
    name = "as-root-" + uuid.uuid4().hex[:8]
    result = host.run(f"nfs-cp /tmp/r '{url(name, uid=0)}'")
    server = testinfra.get_host("podman://nfs1")
    assert result.rc != 0 and not server.file(f"/shared/{name}").exists, "the export must squash root (root_squash)"


def test_the_cluster_users_files_keep_its_uid_on_the_server(host):
    name = f"data/owned-{uuid.uuid4().hex[:8]}"
    host.check_output(f"echo x > /tmp/o && nfs-cp /tmp/o '{url(name)}'")
    written = testinfra.get_host("podman://nfs1").file(f"/shared/{name}")
    assert written.uid == 2000 and written.gid == 2000
