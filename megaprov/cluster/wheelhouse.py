"""A wheelhouse: the wheels of a training environment in one directory, for nodes without an index.

Air-gapped sites and the container lab point the pytorch role at it (``pytorch_source: wheelhouse``).
Built with ``pip download`` for the nodes' interpreter (CPython 3.11 on Debian 12 by default) and cached by
the requirement list, so a second build is free.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import yaml

from megaprov import paths
from megaprov.errors import EnvironmentProblem
from megaprov.paths import cache_dir, cached_dir

# uv, which the pytorch role installs with pip from the wheelhouse and then installs the rest with
# (pytorch_installer: uv): the role's pytorch_uv_version, a unit test keeps them equal.
UV = "uv==0.13.9"
# What the lab's CPU nodes run: torch (CPU build) and megatron-core, and uv; torch's CPU wheels come from
# MEGAPROV_TORCH_INDEX (e.g. https://download.pytorch.org/whl/cpu) or pip's configured find-links. The nodes check out
# Megatron-LM's tree and import its training code: what the megatron role installs besides comes from its defaults
# (megatron_packages, megatron_build_requirements), read where they are defined.
LAB_BASE = ("megatron-core==0.16.1", UV)


def lab_requirements() -> tuple[str, ...]:
    defaults = yaml.safe_load((paths.roles_dir() / "megatron" / "defaults" / "main.yml").read_text())
    role = [str(r) for r in (*defaults["megatron_packages"], *defaults["megatron_build_requirements"])]
    return (os.environ.get("MEGAPROV_TORCH", "torch==2.13.0"), *LAB_BASE, *role)


PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64")


def build(
    requirements: tuple[str, ...] | None = None,
    python_version: str = "3.11",
    cache: Path | None = None,
    index_url: str | None = None,
    cpu_only: bool = True,
) -> Path:
    """Download ``requirements`` (the lab's by default) and their dependencies as wheels for CPython ``python_version``;
    return the directory."""
    requirements = requirements if requirements is not None else lab_requirements()
    index_url = index_url if index_url is not None else os.environ.get("MEGAPROV_TORCH_INDEX")
    key = "\n".join([*requirements, python_version, index_url or ""])
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    final = (cache or cache_dir() / "wheelhouse") / f"py{python_version.replace('.', '')}-{digest}"

    def download(tmp: Path) -> None:
        args = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--dest",
            str(tmp),
            "--only-binary",
            ":all:",
            "--python-version",
            python_version,
            "--implementation",
            "cp",
        ]
        for platform in PLATFORMS:
            args += ["--platform", platform]
        if index_url:
            args += ["--extra-index-url", index_url]
        proc = subprocess.run([*args, *requirements], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            last = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("WARNING")][-1:] or ["pip failed"]
            raise EnvironmentProblem(
                f"could not build the wheelhouse ({' '.join(requirements)}): {last[0]}",
                "set MEGAPROV_TORCH_INDEX to a CPU wheel index (https://download.pytorch.org/whl/cpu) or a local wheel folder",
            )
        cuda = sorted(p.name for p in tmp.glob("nvidia_*.whl")) + sorted(p.name for p in tmp.glob("torch-*.whl") if "+cpu" not in p.name)
        if cpu_only and cuda:
            raise EnvironmentProblem(
                f"the wheelhouse would hold CUDA wheels ({cuda[0]}, ...): PyPI serves torch's CUDA build",
                "set MEGAPROV_TORCH_INDEX=https://download.pytorch.org/whl/cpu (or a folder with the CPU wheel) and run again",
            )

    return cached_dir(final, download, "\n".join(requirements))
