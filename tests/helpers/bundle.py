"""A stand-in offline bundle laid out as `megaprov bundle build` writes it (no network), for the unit and CLI tests."""

from __future__ import annotations

import gzip
from pathlib import Path

from megaprov.cluster import bundle

DEBIAN = bundle.distribution("debian-12")

PACKAGES = """Package: jq
Version: 1.6-2.1+deb12u3
Architecture: amd64
Filename: ./jq_1.6-2.1+deb12u3_amd64.deb

Package: cuda-drivers-580
Version: 580.105.08-1
Architecture: amd64
Provides: cuda-drivers-any
Filename: ./cuda-drivers-580_580.105.08-1_amd64.deb
"""


def fake_bundle(directory: Path) -> Path:
    """A bundle as `bundle build` lays it out, with stand-in files (no network)."""
    (directory / "apt").mkdir(parents=True)
    (directory / "wheels").mkdir()
    (directory / "apt" / "jq_1.6-2.1+deb12u3_amd64.deb").write_bytes(b"jq deb")
    (directory / "apt" / "cuda-drivers-580_580.105.08-1_amd64.deb").write_bytes(b"driver deb")
    (directory / "apt" / "Packages.gz").write_bytes(gzip.compress(PACKAGES.encode(), mtime=0))
    (directory / "wheels" / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"torch")
    (directory / "wheels" / "six-1.17.0-py2.py3-none-any.whl").write_bytes(b"six")
    git = directory / "git" / "nccl-tests.git"
    (git / "refs").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "packed-refs").write_text("0" * 40 + " refs/tags/v2.17.1\n")
    versions = {"nccl-tests": bundle.GitVersion(ref="v2.17.1", commit="a" * 40)}
    manifest = bundle.make_manifest(directory, DEBIAN, "amd64", versions)
    (directory / bundle.MANIFEST).write_text(bundle.manifest_json(manifest))
    return directory
