"""The libnfs clients reach the export on the server through libnfs (their kernel has no NFS client)."""

import uuid

from conftest import address, server

from tests.molecule.inventory import names, node, specs

testinfra_hosts = specs("nfs_libnfs_clients")


def url(path, uid=2000):
    return f"nfs://{address(server())}/shared/{path}?uid={uid}&gid={uid}"


def test_libnfs_tools(host):
    assert host.package("libnfs-utils").is_installed


def test_a_file_written_on_one_client_reads_identically_on_another(host):
    other = next(n for n in names("nfs_libnfs_clients") if n != host.backend.get_hostname())
    writer = node(other)
    name = f"jobs/from-{other}-{uuid.uuid4().hex[:8]}"  # nfs-cp never overwrites
    writer.check_output(f"head -c 65536 /dev/urandom > /tmp/x && nfs-cp /tmp/x '{url(name)}'")
    want = writer.check_output("sha256sum /tmp/x").split()[0]
    got = host.check_output(f"nfs-cat '{url(name)}' | sha256sum").split()[0]
    assert got == want


def refused_as_root(host, path):
    """nfs-cp as uid 0 to PATH on the share: its result, and whether the file appeared on the server."""
    host.check_output("echo x > /tmp/r")
    result = host.run(f"nfs-cp /tmp/r '{url(path, uid=0)}'")
    return result, server().file(f"/shared/{path}").exists


# libnfs reports the server's NFS3ERR_ACCES (RFC 1813: permission denied) for a create the squashed root may not do.
DENIED = "NFS3ERR_ACCES"


def test_root_is_squashed(host):
    """checkpoints/ is the cluster user's (0755): root squashed to nobody may not create a file there."""
    result, created = refused_as_root(host, "checkpoints/as-root-" + uuid.uuid4().hex[:8])
    assert result.rc != 0 and DENIED in result.stdout + result.stderr, (result.rc, result.stdout, result.stderr)
    assert not created


def test_root_cannot_write_as_root_even_where_root_owns_the_directory(host):
    """The export's top directory is root's (0755): only a root that is not squashed could create a file there."""
    result, created = refused_as_root(host, "as-root-" + uuid.uuid4().hex[:8])
    assert result.rc != 0 and DENIED in result.stdout + result.stderr, (result.rc, result.stdout, result.stderr)
    assert not created, "the export must squash root (root_squash)"


def test_the_cluster_users_files_keep_its_uid_on_the_server(host):
    name = f"data/owned-{uuid.uuid4().hex[:8]}"
    host.check_output(f"echo x > /tmp/o && nfs-cp /tmp/o '{url(name)}'")
    written = server().file(f"/shared/{name}")
    assert written.uid == 2000 and written.gid == 2000
