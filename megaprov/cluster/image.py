"""``megaprov image pull``: one container image into the head's registry (the image_registry role), fetched once for
the cluster, and its squashfs on the shared directory where enroot is installed (``playbooks/image_pull.yml``).

The names the play needs are worked out here, once, by pure functions (the unit tests assert them exactly) and passed
as data; what the play did comes back through its ``set_stats`` (``megaprov_image``), never through a task's name.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from megaprov import values
from megaprov.cluster import plays
from megaprov.errors import RunFailed, UsageError
from megaprov.output import Reporter

PLAYBOOK = "image_pull.yml"
STATS_KEY = "megaprov_image"  # what the play hands back (set_stats): mirror, squashfs, bytes, digest
DOCKER_HUB = "docker.io"
# Docker Hub's other spellings, as docker and podman normalise them
DOCKER_HUB_ALIASES = ("index.docker.io", "registry-1.docker.io")
MAX_READABLE = 200  # characters of the squashfs file name before its hash (a file name is at most 255 bytes)


@dataclass(frozen=True)
class ImageNames:
    """A checked image reference's names: ``pull`` what podman pulls (fully qualified: no short-name lookup on the head),
    ``repository`` REGISTRY/NAME:TAG, the name it is tagged with on the head and its path in the head's registry (the
    upstream name, which the nodes' mirror entries look up), ``squashfs`` the file name of its squashfs."""

    pull: str
    repository: str
    squashfs: str

    def play_vars(self, archive: Path | None) -> dict[str, Any]:
        """The extra vars of playbooks/image_pull.yml (the role's ``pull`` entry point). Pure."""
        return {
            "image_registry_pull_reference": self.pull,
            "image_registry_pull_repository": self.repository,
            "image_registry_pull_squashfs": self.squashfs,
            "image_registry_pull_archive": str(archive) if archive else "",
        }


def names(reference: str) -> ImageNames:
    """The names of a reference ``values.image_reference`` accepted (a registry reference, not a squashfs path). A name
    without a registry is Docker Hub's (``ubuntu:22.04`` is docker.io/library/ubuntu:22.04), without a tag ``latest``;
    a digest is pulled by digest and tagged. Pure."""
    match = values.IMAGE_REFERENCE.fullmatch(reference)
    if reference.startswith("/") or match is None:
        raise UsageError(
            f"IMAGE {values.printable(reference)!r} is not a registry reference", "write REGISTRY/NAME:TAG, e.g. nvcr.io/nvidia/pytorch:25.01-py3"
        )
    registry = match.group("registry") or DOCKER_HUB
    if registry in DOCKER_HUB_ALIASES:
        registry = DOCKER_HUB
    name = match.group("name")
    if registry == DOCKER_HUB and "/" not in name:
        name = f"library/{name}"
    tag, digest = match.group("tag"), match.group("digest")
    if digest and not tag:
        raise UsageError(
            f"IMAGE {reference} has a digest and no tag: the head's registry keeps it under a tag, which the nodes pull",
            f"add the tag the digest belongs to: {registry}/{name}:TAG@{digest}",
        )
    repository = f"{registry}/{name}:{tag or 'latest'}"
    pull = f"{registry}/{name}@{digest}" if digest else repository
    return ImageNames(pull=pull, repository=repository, squashfs=squashfs_name(repository, digest))


def squashfs_name(repository: str, digest: str | None = None) -> str:
    """The squashfs file of REGISTRY/NAME:TAG: the name readable (``/`` and ``:`` as ``_``), then 8 hex digits of its
    sha256, so that two names that read alike (a/b_c and a_b/c) never share a file. Only letters, digits and ``_.-``:
    a job spec's launch.container takes it as it is (values.MOUNT_PATH). Pure."""
    exact = repository + (f"@{digest}" if digest else "")
    readable = repository.replace("/", "_").replace(":", "_")[:MAX_READABLE]
    return f"{readable}-{hashlib.sha256(exact.encode()).hexdigest()[:8]}.sqsh"


def archive_path(text: str) -> Path:
    """--archive FILE: an existing regular file on this machine, as an absolute path."""
    if not text or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise UsageError(f"--archive {values.printable(text)!r} is not a file name", "give the path of a `podman save` or `docker save` archive")
    path = Path(os.path.abspath(os.path.expanduser(text)))
    if not path.exists():
        raise UsageError(
            f"--archive {values.printable(text)}: no such file", "give the path of a `podman save` or `docker save` archive on this machine"
        )
    if not path.is_file():
        raise UsageError(f"--archive {values.printable(text)} is not a regular file", "give the archive file itself (podman save -o FILE IMAGE)")
    return path


@dataclass(frozen=True)
class Pulled:
    """What the play says it did: the image in the head's registry, its squashfs ("" where enroot is absent), its size."""

    image: str
    mirror: str
    squashfs: str
    bytes: int
    digest: str

    @property
    def enroot(self) -> str:
        """The mirror reference in enroot's REGISTRY#NAME form (pyxis: srun --container-image=...)."""
        return values.enroot_image(self.mirror)


def answer(image: str, data: dict[str, Any]) -> Pulled:
    """The play's set_stats, checked: a run that ended without them said nothing. Pure."""
    said = data.get(STATS_KEY)
    if not isinstance(said, dict) or not isinstance(said.get("mirror"), str) or not said["mirror"]:
        raise RunFailed(f"image pull {image}: the play ended without saying where the image is", "see the run's stdout in megaprov's state directory")
    try:
        size = int(said.get("bytes", 0))
    except (TypeError, ValueError):
        size = 0
    return Pulled(image, str(said["mirror"]), str(said.get("squashfs") or ""), size, str(said.get("digest") or ""))


def pull(inventory: Path, image: str, archive: Path | None, report: Reporter) -> Pulled:
    """Run playbooks/image_pull.yml on the head; its failure is megaprov's error (exit 2, 3 or 4)."""
    found = names(image)
    result = plays.run(PLAYBOOK, inventory, found.play_vars(archive), report, hosts=1)
    if not result.ok:
        raise plays.failure(result, f"image pull {image}")
    return answer(image, result.data)
