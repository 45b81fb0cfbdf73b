"""The export served by NFS-Ganesha on nfs1, reached from the other nodes through libnfs."""

import uuid

import pytest

testinfra_hosts = ["podman://nfs1", "podman://nfs2", "podman://nfs3"]


@pytest.fixture
def nfs1(host):
    import testinfra

    return testinfra.get_host("podman://nfs1")


def url(nfs1, path, uid=2000):
    addr = nfs1.interface.default().addresses[0]
    return f"nfs://{addr}/shared/{path}?uid={uid}&gid={uid}"


def test_ganesha_serves_the_export(host):
    if host.backend.get_hostname() != "nfs1":
        pytest.skip("server checks run on nfs1")
    assert host.service("nfs-ganesha").is_running
    assert host.service("nfs-ganesha").is_enabled
    assert host.socket("tcp://0.0.0.0:2049").is_listening or host.socket("tcp://:::2049").is_listening
    conf = host.file("/etc/ganesha/ganesha.conf").content_string
    assert "Path = /shared;" in conf and "Squash = root_squash;" in conf
    addr = host.interface.default().addresses[0]
    prefix = ".".join(addr.split(".")[:3])
    assert f"Clients = {prefix}." in conf  # the derived CIDR holds the nodes' network


def test_layout_is_owned_by_the_cluster_user(host):
    if host.backend.get_hostname() != "nfs1":
        pytest.skip("the export lives on nfs1")
    for name in ("datasets", "checkpoints", "jobs", "cache"):
        d = host.file(f"/shared/{name}")
        assert d.is_directory and d.user == "megaprov" and d.mode == 0o775


def test_every_node_wrote_its_check_file(host):
    if host.backend.get_hostname() != "nfs1":
        pytest.skip("the export lives on nfs1")
    for node in ("nfs1", "nfs2", "nfs3"):
        files = host.check_output(f"find /shared/cache -name '.megaprov-check-{node}-*' -size 256k -uid 2000").split()
        assert files, f"no check file from {node}"


def test_a_file_written_on_one_client_reads_identically_on_another(host, nfs1):
    name = host.backend.get_hostname()
    if name == "nfs1":
        pytest.skip("client to client")
    other = "nfs3" if name == "nfs2" else "nfs2"
    import testinfra

    writer = testinfra.get_host(f"podman://{other}")
    name = f"jobs/from-{other}-{uuid.uuid4().hex[:8]}"  # nfs-cp never overwrites
    writer.check_output(f"head -c 65536 /dev/urandom > /tmp/x && nfs-cp /tmp/x '{url(nfs1, name)}'")
    want = writer.check_output("sha256sum /tmp/x").split()[0]
    got = host.check_output(f"nfs-cat '{url(nfs1, name)}' | sha256sum").split()[0]
    assert got == want


def test_root_is_squashed(host, nfs1):
    if host.backend.get_hostname() != "nfs2":
        pytest.skip("one client is enough")
    host.check_output("echo x > /tmp/r")
    result = host.run(f"nfs-cp /tmp/r '{url(nfs1, 'checkpoints/as-root-' + uuid.uuid4().hex[:8], uid=0)}'")
    assert result.rc != 0, "root on a client must not write into the cluster user's directories"
