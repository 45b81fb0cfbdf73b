"""megaprov/cluster/image.py's pure parts: an image reference's names on the head (what podman pulls, the upstream
name the registry keeps it under, the squashfs file), the play's extra vars, and the play's answer."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from megaprov import values
from megaprov.cluster import image
from megaprov.errors import RunFailed, UsageError

DIGEST = "sha256:" + "0123456789abcdef" * 4


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


@pytest.mark.parametrize(
    ("ref", "pull", "repository"),
    [
        ("ubuntu:22.04", "docker.io/library/ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
        ("ubuntu", "docker.io/library/ubuntu:latest", "docker.io/library/ubuntu:latest"),
        ("megaprov/probe:1", "docker.io/megaprov/probe:1", "docker.io/megaprov/probe:1"),
        ("docker.io/ubuntu:22.04", "docker.io/library/ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
        ("index.docker.io/library/ubuntu:22.04", "docker.io/library/ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
        ("nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io/nvidia/pytorch:25.01-py3"),
        ("ghcr.io/org/team/img", "ghcr.io/org/team/img:latest", "ghcr.io/org/team/img:latest"),
        ("registry.example:5000/ml/train:v2", "registry.example:5000/ml/train:v2", "registry.example:5000/ml/train:v2"),
        ("localhost/probe:1", "localhost/probe:1", "localhost/probe:1"),
        (f"nvcr.io/nvidia/pytorch:25.01-py3@{DIGEST}", f"nvcr.io/nvidia/pytorch@{DIGEST}", "nvcr.io/nvidia/pytorch:25.01-py3"),
    ],
)
def test_names(ref, pull, repository):
    found = image.names(values.image_reference(ref, "IMAGE"))
    assert (found.pull, found.repository) == (pull, repository)


def test_a_digest_without_a_tag_is_refused():
    with pytest.raises(UsageError, match="has a digest and no tag"):
        image.names(f"nvcr.io/nvidia/pytorch@{DIGEST}")


@pytest.mark.parametrize("ref", ["/shared/images/x.sqsh", "Ubuntu", "a b", ""])
def test_what_is_no_registry_reference_is_refused(ref):
    with pytest.raises(UsageError, match="is not a registry reference"):
        image.names(ref)


def test_the_squashfs_name_is_readable_then_hashed():
    assert (
        image.squashfs_name("nvcr.io/nvidia/pytorch:25.01-py3")
        == f"nvcr.io_nvidia_pytorch_25.01-py3-{_hash('nvcr.io/nvidia/pytorch:25.01-py3')}.sqsh"
    )
    assert image.squashfs_name("reg.example:5000/a:1") == f"reg.example_5000_a_1-{_hash('reg.example:5000/a:1')}.sqsh"
    # a digest changes the file: another image under the same tag is another squashfs
    assert image.squashfs_name("a.io/b:1", DIGEST) == f"a.io_b_1-{_hash('a.io/b:1@' + DIGEST)}.sqsh"


def test_names_that_read_alike_get_their_own_files():
    one, two = image.names("docker.io/a_b/c:1").squashfs, image.names("docker.io/a/b_c:1").squashfs
    assert one.rsplit("-", 1)[0] == two.rsplit("-", 1)[0] and one != two


def test_the_squashfs_path_is_one_a_job_spec_takes():
    longest = "r.io/" + "/".join(["a" * 60] * 3) + ":" + "t" * 128
    name = image.names(longest).squashfs
    assert len(name) <= 255
    assert values.image_reference(f"/shared/images/{name}", "launch.container") == f"/shared/images/{name}"


def test_play_vars():
    found = image.names("ubuntu:22.04")
    assert found.play_vars(None) == {
        "image_registry_pull_reference": "docker.io/library/ubuntu:22.04",
        "image_registry_pull_repository": "docker.io/library/ubuntu:22.04",
        "image_registry_pull_squashfs": f"docker.io_library_ubuntu_22.04-{_hash('docker.io/library/ubuntu:22.04')}.sqsh",
        "image_registry_pull_archive": "",
    }
    assert found.play_vars(Path("/tmp/u.tar"))["image_registry_pull_archive"] == "/tmp/u.tar"


def test_the_answer():
    said = {"megaprov_image": {"mirror": "10.0.0.1:5000/nvcr.io/nvidia/pytorch:25.01-py3", "squashfs": "", "bytes": "123", "digest": DIGEST}}
    pulled = image.answer("nvcr.io/nvidia/pytorch:25.01-py3", said)
    assert (pulled.mirror, pulled.squashfs, pulled.bytes, pulled.digest) == ("10.0.0.1:5000/nvcr.io/nvidia/pytorch:25.01-py3", "", 123, DIGEST)
    assert pulled.enroot == "10.0.0.1:5000#nvcr.io/nvidia/pytorch:25.01-py3"


@pytest.mark.parametrize("data", [{}, {"megaprov_image": "x"}, {"megaprov_image": {"mirror": ""}}, {"megaprov_image": {"mirror": 5}}])
def test_an_answer_without_the_mirror_is_a_failed_run(data):
    with pytest.raises(RunFailed, match="without saying where the image is"):
        image.answer("ubuntu:22.04", data)


def test_archive_path(tmp_path, monkeypatch):
    (tmp_path / "a.tar").write_bytes(b"x")
    monkeypatch.chdir(tmp_path)
    assert image.archive_path("a.tar") == tmp_path / "a.tar"
    with pytest.raises(UsageError, match="no such file"):
        image.archive_path("b.tar")
    with pytest.raises(UsageError, match="not a regular file"):
        image.archive_path(str(tmp_path))
    with pytest.raises(UsageError, match="is not a file name"):
        image.archive_path("a\n.tar")
