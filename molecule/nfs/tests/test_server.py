"""NFS-Ganesha on nfs1: the service, the export, the layout, and every node's check file."""


from tests.molecule.inventory import names, specs

testinfra_hosts = specs("nfs_server")


def test_ganesha_serves_the_export(host):
    assert host.service("nfs-ganesha").is_running
    assert host.service("nfs-ganesha").is_enabled
    assert host.socket("tcp://0.0.0.0:2049").is_listening or host.socket("tcp://:::2049").is_listening
    conf = host.file("/etc/ganesha/ganesha.conf").content_string
    assert "Path = /shared;" in conf and "Squash = root_squash;" in conf
    addr = host.interface.default().addresses[0]
    prefix = ".".join(addr.split(".")[:3])
    assert f"Clients = {prefix}." in conf  # the derived CIDR holds the nodes' network


def test_layout_is_owned_by_the_cluster_user(host):
    # every directory a later stage writes as the cluster user (root is nobody on the share)
    for name in ("data", "datasets", "checkpoints", "jobs", "cache", "opt", "images", "megaprov", "megaprov/baselines"):
        d = host.file(f"/shared/{name}")
        assert d.is_directory and d.user == "megaprov" and d.group == "megaprov" and d.mode == 0o755, name
    root = host.file("/shared")
    assert root.user == "root" and root.mode == 0o755  # the cluster user cannot add top-level directories


def test_every_node_wrote_its_check_file(host):
    for node in names("all"):
        files = host.check_output(f"find /shared/cache -name '.megaprov-check-{node}-*' -size 256k -uid 2000").split()
        assert files, f"no check file from {node}"
