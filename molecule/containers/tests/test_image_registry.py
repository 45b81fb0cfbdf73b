"""The head's image registry as a node uses it, and megaprov image pull's play: docker-registry answers /v2/ on the cluster address only, and an image
pushed there under its upstream name is pulled on the node by that name (docker.io/megaprov/probe:1) through the
node's registries.conf.d mirror entry, docker.io itself being unreachable here."""

import json
import shlex

from conftest import PROBE, USER, address, head, port, worker

GET = "import sys, urllib.request; r = urllib.request.urlopen(sys.argv[1]); print(r.status); print(r.read().decode())"
TOML = "import json, sys, tomllib; print(json.dumps(tomllib.load(open(sys.argv[1], 'rb'))))"
ACCEPT = "Accept: application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
MIRROR_FILE = "/etc/containers/registries.conf.d/50-megaprov-image-registry.conf"


def listeners(host):
    """(address, port) of every listening TCP socket."""
    found = set()
    for line in host.check_output("ss -ltnH").splitlines():
        addr, _, number = line.split()[3].rpartition(":")
        found.add((addr.strip("[]"), int(number)))
    return found


def test_the_registry_answers_v2_on_the_cluster_address_only():
    server = head()
    ip = address(server)
    assert server.service("docker-registry").is_enabled
    assert server.service("docker-registry").is_running
    assert {a for a, p in listeners(server) if p == port()} == {ip}, listeners(server)
    status, body = worker().check_output(f"python3 -c {shlex.quote(GET)} http://{ip}:{port()}/v2/").split("\n", 1)
    assert status == "200" and json.loads(body) == {}


def test_the_registry_s_files_are_its_own():
    server = head()
    config = server.file("/etc/docker/registry/config.yml")
    assert (config.user, config.group, config.mode) == ("root", "docker-registry", 0o640)
    assert f"addr: {address(server)}:{port()}" in config.content_string
    assert "auth:" not in config.content_string  # the package's htpasswd section is gone with the package's file
    storage = server.file("/var/lib/docker-registry")
    assert storage.is_directory and (storage.user, storage.mode) == ("docker-registry", 0o750)


def test_the_node_s_mirror_entries():
    node = worker()
    mirror = node.file(MIRROR_FILE)
    assert (mirror.user, mirror.mode) == ("root", 0o644)
    data = json.loads(node.check_output(f"python3 -c {shlex.quote(TOML)} {MIRROR_FILE}"))
    where = f"{address(head())}:{port()}"
    assert data["registry"] == [
        {"prefix": r, "location": r, "mirror": [{"location": f"{where}/{r}", "insecure": True}]} for r in ("nvcr.io", "docker.io", "ghcr.io")
    ]
    assert not head().file(MIRROR_FILE).exists  # the head is no GPU node here


def test_a_node_pulls_the_upstream_name_through_the_head():
    server, node = head(), worker()
    where = f"{address(server)}:{port()}"
    server.check_output(f"podman push --quiet --tls-verify=false {PROBE} docker://{where}/{PROBE}")
    catalog = node.check_output(f"python3 -c {shlex.quote(GET)} http://{where}/v2/_catalog").split("\n", 1)[1]
    assert "docker.io/megaprov/probe" in json.loads(catalog)["repositories"]
    node.run(f"podman rmi --force {PROBE}")
    pulled = node.run(f"podman --log-level=debug pull {PROBE}")
    assert pulled.rc == 0, pulled.stderr[-2000:]
    assert f'Trying to access \\"{where}/{PROBE}\\"' in pulled.stderr, pulled.stderr[-2000:]
    same = "podman image inspect --format '{{.Id}}' " + PROBE
    assert node.check_output(same) == server.check_output(same)


def test_a_name_the_head_lacks_is_asked_of_its_upstream():
    """The mirror is tried first, then the upstream itself (unreachable here: the pull fails, after both)."""
    node = worker()
    where = f"{address(head())}:{port()}"
    missing = "docker.io/megaprov/absent:1"
    pulled = node.run(f"timeout 120 podman --log-level=debug pull {missing}")
    assert pulled.rc != 0
    assert f'Trying to access \\"{where}/{missing}\\"' in pulled.stderr, pulled.stderr[-2000:]
    assert f'Trying to access \\"{missing}\\"' in pulled.stderr, pulled.stderr[-2000:]


def test_an_archive_pulled_with_image_pull_s_play_reaches_the_node():
    """side_effect.yml ran playbooks/image_pull.yml with an archive of localhost/airgap:2 for docker.io/megaprov/airgap:2."""
    server, node = head(), worker()
    where = f"{address(server)}:{port()}"
    assert not server.run("ls /var/tmp/megaprov-image-*.tar").stdout.strip(), "the copied archive was left on the head"
    name = "docker.io/megaprov/airgap:2"
    pulled = node.run(f"podman --log-level=debug pull {name}")
    assert pulled.rc == 0, pulled.stderr[-2000:]
    assert f'Trying to access \\"{where}/{name}\\"' in pulled.stderr
    same = "podman image inspect --format '{{.Id}}' " + name
    assert node.check_output(same) == server.check_output(same)


def test_image_pull_s_play_imported_a_squashfs_for_pyxis_as_the_cluster_user():
    """enroot on the head imported the image from the head's registry (docker://HEAD:PORT#NAME) into the shared
    directory, as the cluster user (the shared directory is the user's, root-squashed on a cluster), with the digest
    the registry gave it beside it."""
    server = head()
    squashfs = "/shared/images/docker.io_megaprov_airgap_2-00000000.sqsh"  # side_effect.yml's image_registry_pull_squashfs
    image = server.file(squashfs)
    assert image.is_file and image.user == USER, squashfs
    assert server.check_output(f"unsquashfs -cat {squashfs} etc/megaprov-probe") == "megaprov air-gapped probe"
    digest = server.file(squashfs + ".digest").content_string.strip()
    manifest = f"http://{address(server)}:{port()}/v2/docker.io/megaprov/airgap/manifests/2"
    assert digest.startswith("sha256:") and digest in server.check_output(f"curl -sI -H {shlex.quote(ACCEPT)} {manifest}")
    assert not server.run("ls /shared/images/*.part.sqsh").stdout.strip()
