"""The lab's training image: what an NGC PyTorch image is to a GPU cluster, for the CPU lab.

Built once per machine (cached by its inputs) from the lab's node image and its wheelhouse: CPU torch and
megatron-core in a virtual environment at /opt/train, bash, and nothing of megaprov. The Megatron-LM tree is not
inside: jobs mount the nodes' checkout at its own path, as on a cluster. Saved as a docker-archive, the file an
air-gapped site carries, and handed to ``megaprov image pull --archive`` under a registry name the lab mirrors.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from megaprov.cluster import lab, wheelhouse
from megaprov.paths import cache_dir, cached_dir

PYTHON = "/opt/train/bin/python"
CONTAINERFILE = """\
ARG BASE
FROM ${BASE}
# A training image: make (Megatron-LM runs it at start-up for its dataset helpers) from Debian, torch and
# megatron-core from the wheelhouse (mounted at /wheels by the build).
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make \\
 && apt-get clean && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/train \\
 && /opt/train/bin/pip install --quiet --no-index --find-links /wheels /wheels/torch-*.whl megatron-core numpy \\
 && rm -rf /root/.cache
ENV PATH=/opt/train/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CMD ["/bin/bash"]
"""


def build(tag_name: str = "localhost/megaprov-train") -> tuple[str, Path]:
    """(image reference, docker-archive file): the image built from this machine's node image and wheelhouse."""
    base = lab.ensure_image()
    wheels = wheelhouse.build()
    digest = hashlib.sha256(f"{base}\n{wheels.name}\n{CONTAINERFILE}".encode()).hexdigest()[:12]
    ref = f"{tag_name}:{digest}"

    def fill(tmp: Path) -> None:
        (tmp / "Containerfile").write_text(CONTAINERFILE)
        argv = ["podman", "build", "--quiet", "--build-arg", f"BASE={base}", "-v", f"{wheels}:/wheels:ro", "-t", ref]
        subprocess.run(
            [*argv, "-f", str(tmp / "Containerfile"), str(tmp)],
            env=lab.podman_env(),
            check=True,
            capture_output=True,
        )
        subprocess.run(["podman", "save", "--format", "docker-archive", "-o", str(tmp / "image.tar"), ref], env=lab.podman_env(), check=True)

    directory = cached_dir(cache_dir() / "train-image" / digest, fill, digest)
    return ref, directory / "image.tar"
