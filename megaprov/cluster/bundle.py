"""The offline bundle: what an inventory's bootstrap fetches from outside the cluster, in one directory.

``megaprov bundle build -i INV --dir DIR`` on a connected machine fills::

    DIR/manifest.json   format, created, megaprov, distribution, arch, python, files (sha256, size), versions
    DIR/apt/            *.deb + Packages.gz: a flat repository (deb [trusted=yes] http://HEAD/bundle/apt ./)
    DIR/wheels/         *.whl
    DIR/git/NAME.git    bare repositories (git clone --mirror): Megatron-LM, nccl-tests, apex
    DIR/sources/        files the roles download by URL (enroot's release .debs, pyxis's source archive), by file name
    DIR/images/         container images (`podman save` archives) named by --image, listed in the manifest's images

What goes in comes from the collection itself: the playbook ``bundle_contents.yml`` lets Ansible evaluate the roles'
defaults and vars with the inventory's variables for a fresh node of the target distribution (:func:`resolve`,
through the runner), and :func:`parse_contents` types its answer. The apt closure is resolved by apt in a private
root (its own sources.list, an empty dpkg status, so everything a fresh node lacks is there), NVIDIA's container
toolkit from its own repository, and what the downloaded .debs (enroot) depend on; wheels by ``pip download`` for the
nodes' Python (:mod:`megaprov.cluster.wheelhouse`); git remotes are mirrored whole; images by the build machine's
podman (``--image``, a registry reference, pulled unless podman holds it already).

:func:`verify` is what ``megaprov bundle verify`` and ``megaprov bootstrap --bundle`` run before anything is applied:
every file against the manifest (sha256, size, none missing, none extra, no link, no path out of DIR), and, with an
inventory, the manifest's versions against what the inventory asks for, naming the variable that differs.
"""

from __future__ import annotations

import errno
import fnmatch
import getpass
import gzip
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import ssl
import stat
import subprocess
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from megaprov import values
from megaprov.errors import EnvironmentProblem, UsageError

FORMAT: Literal[1] = 1
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 64 << 20  # a manifest of MAX_FILES entries is ~20 MiB
MAX_FILES = 100_000  # files in one bundle (a CUDA closure is ~1,000 packages; a git mirror a few dozen files)
MAX_FILE_BYTES = 64 << 30  # one file (the largest CUDA packages and git packs are a few GiB)
MAX_PATH = 1024  # one file name in the manifest, relative to DIR
MAX_KEYRING_DEB_BYTES = 16 << 20
# What a bundle is, read as hostile input (it is copied in from another site): every read of it is bounded.
MAX_DEPTH = 32  # directories below DIR (git/NAME.git/refs/tags/... is the deepest a build writes, ~8)
MAX_ENTRIES = 2 * MAX_FILES  # files, directories and anything else a walk of DIR looks at
MAX_PACKAGES_GZ_BYTES = 64 << 20  # apt/Packages.gz as stored (a CUDA closure's is ~1 MiB)
MAX_PACKAGES_BYTES = 128 << 20  # apt/Packages.gz expanded (~2 KiB a package: more than Debian's whole main archive)
MAX_PACKAGES_LINES = 4_000_000  # lines of it
MAX_PACKAGES_LINE = 1 << 20  # one line of it
MAX_APT_NAMES = 1_000_000  # packages and the names they provide, in it
# NVIDIA's keyring package, fetched by `bundle build` (hostile until read too)
FETCH_SECONDS = 600.0  # one download, whole: connecting, the headers, every read, redirects
FETCH_READ_SECONDS = 60.0  # one read of it (urllib's timeout)
MAX_KEYRING_TAR_BYTES = 256 << 20  # its data.tar, expanded
MAX_TAR_MEMBERS = 10_000  # entries of its data.tar
MAX_KEYRING_BYTES = 1 << 20  # the keyring file in it (a few KiB)
MAX_KEY_BYTES = 1 << 20  # NVIDIA's container toolkit signing key (ASCII-armoured, a few KiB)
MAX_DOWNLOAD_BYTES = 1 << 30  # one file the roles download by URL (enroot's .debs ~100 KiB, pyxis's archive ~60 KiB)
MAX_IMAGES = 16  # images in one bundle (--image)
IMAGE_SECONDS = 4 * 3600.0  # one image's pull and save on the build machine (an NGC PyTorch image is ~20 GB)
GIT_NAMES = ("Megatron-LM", "nccl-tests", "apex")  # as the roles name their checkouts

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


class BundleError(UsageError):
    """A bundle that does not match its manifest or the inventory; nothing was applied."""


REBUILD = "rebuild it with `megaprov bundle build -i INVENTORY --dir DIR` on a connected machine"


# ---- the target: distributions a bundle can be built for


@dataclass(frozen=True)
class Distribution:
    id: str
    version: str
    codename: str
    name: str  # ansible_distribution
    python: str  # the nodes' python3 (pytorch_python)
    mirror: str  # default archive (Debian: the inventory's nvidia_driver_debian_mirror wins)
    security: str  # default security archive
    components: tuple[str, ...]
    keyring: str  # the archive's keyring on this machine (debian-archive-keyring, ubuntu-keyring)
    kernels: dict[str, str]  # arch -> kernel flavour: linux-headers-<flavour> is the metapackage of the current kernel

    @property
    def key(self) -> str:
        return f"{self.id}-{self.version}"


_DEBIAN_PARTS = ("main", "contrib", "non-free", "non-free-firmware")
_UBUNTU_PARTS = ("main", "restricted", "universe", "multiverse")
DISTRIBUTIONS: dict[str, Distribution] = {
    d.key: d
    for d in (
        Distribution(
            "debian",
            "12",
            "bookworm",
            "Debian",
            "3.11",
            "http://deb.debian.org/debian",
            "http://deb.debian.org/debian-security",
            _DEBIAN_PARTS,
            "/usr/share/keyrings/debian-archive-keyring.gpg",
            {"amd64": "amd64", "arm64": "arm64"},
        ),
        Distribution(
            "ubuntu",
            "22.04",
            "jammy",
            "Ubuntu",
            "3.10",
            "http://archive.ubuntu.com/ubuntu",
            "http://security.ubuntu.com/ubuntu",
            _UBUNTU_PARTS,
            "/usr/share/keyrings/ubuntu-archive-keyring.gpg",
            {"amd64": "generic", "arm64": "generic"},
        ),
        Distribution(
            "ubuntu",
            "24.04",
            "noble",
            "Ubuntu",
            "3.12",
            "http://archive.ubuntu.com/ubuntu",
            "http://security.ubuntu.com/ubuntu",
            _UBUNTU_PARTS,
            "/usr/share/keyrings/ubuntu-archive-keyring.gpg",
            {"amd64": "generic", "arm64": "generic"},
        ),
    )
}
ARCHES = {"amd64": "x86_64", "arm64": "aarch64"}  # Debian's name -> ansible_architecture


def distribution(text: str) -> Distribution:
    """``debian-12``, ``bookworm``, ``ubuntu-24.04``, ``noble``: one of :data:`DISTRIBUTIONS`."""
    for dist in DISTRIBUTIONS.values():
        if text in (dist.key, dist.codename, f"{dist.id}:{dist.version}"):
            return dist
    raise UsageError(
        f"--distribution {values.shown(text)} is not one a bundle can be built for",
        "use " + ", ".join(f"{d.key} ({d.codename})" for d in DISTRIBUTIONS.values()),
    )


# ---- the manifest


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class FileEntry(_Model):
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0, le=MAX_FILE_BYTES)


class GitVersion(_Model):
    ref: str = Field(min_length=1, max_length=255)
    commit: str = Field(pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?$")


class Versions(_Model):
    apt: dict[str, str] = Field(max_length=MAX_FILES)
    wheels: dict[str, str] = Field(max_length=MAX_FILES)
    git: dict[str, GitVersion] = Field(max_length=len(GIT_NAMES))


class DistributionId(_Model):
    id: str = Field(pattern=r"^[a-z][a-z0-9-]{0,31}$")
    version: str = Field(pattern=r"^[0-9][0-9.]{0,15}$")
    codename: str = Field(pattern=r"^[a-z][a-z0-9-]{0,31}$")


class ImageEntry(_Model):
    file: str = Field(min_length=1, max_length=MAX_PATH)  # images/NAME.tar, also in files


class Manifest(_Model):
    format: Literal[1]
    created: datetime
    megaprov: str = Field(min_length=1, max_length=64)
    distribution: DistributionId
    arch: Literal["amd64", "arm64"]
    python: str = Field(pattern=r"^3\.[0-9]{1,2}$")
    files: dict[str, FileEntry] = Field(max_length=MAX_FILES)
    versions: Versions
    # REGISTRY/NAME:TAG (megaprov.cluster.image.names' repository) -> its archive; absent from bundles before images
    images: dict[str, ImageEntry] = Field(default_factory=dict, max_length=MAX_IMAGES)


# What a file name in a bundle may be: a relative path under apt/, wheels/ or git/NAME.git/, each part a plain name.
_PART = re.compile(r"^[A-Za-z0-9_+%~=@][A-Za-z0-9_.+%~=@,-]{0,254}$")
_APT_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]{0,127}$")
_APT_VERSION = re.compile(r"^[A-Za-z0-9.+~:*-]{1,128}$")  # '*' for a pin (580.*)
_REQUIREMENT = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}(\[[A-Za-z0-9,._-]{1,128}\])?([=<>!~]=?[A-Za-z0-9.*+!_-]{1,64}(,[=<>!~]=?[A-Za-z0-9.*+!_-]{1,64}){0,4})?$"
)
_GIT_REF = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/+-]{0,199}$")
_URL_SCHEMES = ("http", "https", "file")
_GIT_SCHEMES = ("http", "https", "file", "ssh", "git")
SOURCE_SUFFIXES = (".deb", ".tar.gz")  # what the roles download by URL
_SHA256 = re.compile(r"^([0-9a-f]{64})?$")


def file_name(name: str, where: str = "manifest.json: files") -> str:
    """A file name of the manifest: relative, under apt/, wheels/, git/<NAME>.git/, sources/ or images/, no '..', no odd
    characters."""
    shown = values.shown(name)
    if not isinstance(name, str) or not name or len(name) > MAX_PATH:
        raise BundleError(f"{where}: {shown} is not a file name of at most {MAX_PATH} characters", REBUILD)
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise BundleError(f"{where}: {shown} leaves the bundle directory or is not a plain relative path", REBUILD)
    if not all(_PART.fullmatch(p) for p in parts):
        raise BundleError(f"{where}: {shown} has characters a bundle's file names never have", REBUILD)
    top = parts[0]
    flat = len(parts) == 2
    if top == "apt" and flat and (parts[1].endswith(".deb") or parts[1] == "Packages.gz"):
        return name
    if top == "wheels" and flat and parts[1].endswith(".whl"):
        return name
    if top == "git" and len(parts) >= 3 and parts[1] in {f"{n}.git" for n in GIT_NAMES}:
        return name
    if top == "sources" and flat and parts[1].endswith(SOURCE_SUFFIXES):
        return name
    if top == "images" and flat and parts[1].endswith(".tar"):
        return name
    raise BundleError(
        f"{where}: {shown} is not a bundle file (apt/*.deb, apt/Packages.gz, wheels/*.whl, git/<{'|'.join(GIT_NAMES)}>.git/..., "
        "sources/*.deb or *.tar.gz, images/*.tar)",
        REBUILD,
    )


def parse_manifest(text: str, where: str = MANIFEST) -> Manifest:
    """The typed manifest, or one line naming the first field that is wrong. Pure."""
    data = values.json_data(text, where)
    if not isinstance(data, dict):
        raise BundleError(f"{where}: must be a JSON object", REBUILD)
    if data.get("format") != FORMAT:
        raise BundleError(f"{where}: format={values.shown(data.get('format'))}: this megaprov reads format {FORMAT}", REBUILD)
    try:
        manifest = Manifest.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise BundleError(f"{where}: {loc}: {first['msg']}", REBUILD) from None
    for name in manifest.files:
        file_name(name, f"{where}: files")
    for table, entries in (("apt", manifest.versions.apt), ("wheels", manifest.versions.wheels)):
        for key, version in entries.items():
            if not _PART.fullmatch(key) or not _APT_VERSION.fullmatch(version):
                raise BundleError(f"{where}: versions.{table}: {values.shown(key)}: {values.shown(version)} is not a name and version", REBUILD)
    for key, git in manifest.versions.git.items():
        if key not in GIT_NAMES or not _GIT_REF.fullmatch(git.ref):
            raise BundleError(f"{where}: versions.git: {values.shown(key)} at {values.shown(git.ref)} is not a repository of the roles", REBUILD)
    for ref, entry in manifest.images.items():
        if image_repository(ref) != ref:
            raise BundleError(f"{where}: images: {values.shown(ref)} is not an image's REGISTRY/NAME:TAG", REBUILD)
        if not entry.file.startswith("images/") or entry.file not in manifest.files:
            raise BundleError(f"{where}: images: {ref}: {values.shown(entry.file)} is not one of the manifest's images/ files", REBUILD)
    return manifest


def image_repository(reference: str) -> str | None:
    """REGISTRY/NAME:TAG of an image reference (as the head's registry keeps it), or None where it is not one. Pure."""
    from megaprov.cluster import image

    try:
        return image.names(values.image_reference(reference, "image")).repository
    except UsageError:
        return None


# ---- what the inventory asks for


@dataclass(frozen=True)
class AptGroup:
    field: str  # the variable that asks for these packages
    names: tuple[str, ...]
    source: str = "debian"  # debian (the distribution's archive), nvidia (NVIDIA's CUDA repository), toolkit (its container toolkit's)
    version: str = ""  # '' for any, an exact version, or a pin pattern (580.*)


@dataclass(frozen=True)
class WheelGroup:
    field: str
    requirements: tuple[str, ...]
    index: str = "pypi"  # pytorch: pytorch_index_url, then PyPI


@dataclass(frozen=True)
class GitRepo:
    name: str
    url: str
    ref: str
    field: str


@dataclass(frozen=True)
class Download:
    """A file a role downloads by URL (enroot_base_url, pyxis_source_url): kept as sources/NAME."""

    name: str
    url: str
    field: str
    sha256: str = ""  # the inventory's checksum where it pins one


@dataclass(frozen=True)
class Contents:
    """What the inventory's bootstrap fetches, the union over its hosts."""

    apt: tuple[AptGroup, ...] = ()
    wheels: tuple[WheelGroup, ...] = ()
    git: tuple[GitRepo, ...] = ()
    debian_mirror: str = ""
    nvidia_repo_url: str = ""
    nvidia_keyring_url: str = ""
    nvidia_keyring: str = ""
    nvidia_pin_packages: tuple[str, ...] = ()
    nvidia_pin: str = ""
    toolkit_repo_url: str = ""  # NVIDIA's container toolkit repository (a flat one) and its ASCII-armoured key
    toolkit_key_url: str = ""
    downloads: tuple[Download, ...] = ()
    pytorch_source: str = "index"
    pytorch_index_url: str = ""
    torch_build: str = ""  # cpu or cuda: the nodes' torch build ('' without a python stage)
    python: str = "python3"

    def requirements(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r for g in self.wheels for r in g.requirements))


def _text(value: Any, where: str, pattern: re.Pattern[str] | None = None, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty) or (value and pattern is not None and not pattern.fullmatch(value)):
        raise UsageError(f"{where}={values.shown(value)} is not a value a bundle can carry", f"fix {where.split(' ')[0]} in the inventory")
    return values.text(value, where)


def _url(value: Any, where: str, schemes: tuple[str, ...] = _URL_SCHEMES, empty: bool = False) -> str:
    text = _text(value, where, empty=empty)
    if text and (urllib.parse.urlsplit(text).scheme not in schemes or text.startswith("-") or any(c.isspace() for c in text)):
        raise UsageError(f"{where}={values.shown(text)} is not a {', '.join(schemes)} URL", f"set {where.split(' ')[0]} to the source's URL")
    return text


def parse_contents(answers: Iterable[dict[str, Any]], where: str = "inventory") -> Contents:
    """The union of every host's answer of bundle_contents.yml, each value typed. Pure.

    Hosts that disagree on something a bundle holds once (a source URL, a git ref, the torch build) are refused:
    one bundle serves one cluster, whose nodes install the same versions."""
    apt: dict[tuple[str, str, str], list[str]] = {}
    wheels: dict[tuple[str, str], list[str]] = {}
    git: dict[str, GitRepo] = {}
    downloads: dict[str, Download] = {}
    single: dict[str, tuple[str, Any]] = {}

    def once(name: str, value: Any, host: str) -> None:
        if name in single and single[name][1] != value:
            raise UsageError(
                f"{where}: hosts {single[name][0]} and {host} differ in {name} ({values.shown(single[name][1])} vs {values.shown(value)})",
                "one bundle serves one cluster: give every node the same value, or build one bundle per group",
            )
        single.setdefault(name, (host, value))

    for answer in answers:
        host = _text(answer.get("host"), "host", values.HOST_NAME)
        for refused in answer.get("refused") or []:
            raise UsageError(
                f"{where}: {refused} is set (host {host}): a bundle does not carry that source yet", f"unset {refused} or install it from a mirror"
            )
        for group in answer.get("apt") or []:
            fld = _text(group.get("field"), "field", values.VARIABLE)
            source = group.get("source") or "debian"
            if source not in ("debian", "nvidia", "toolkit"):
                raise UsageError(f"{where}: {fld}: source {values.shown(source)} is unknown", "fix bundle_contents.yml")
            version = _text(group.get("version") or "", f"{fld} (host {host})", _APT_VERSION, empty=True)
            names = apt.setdefault((fld, source, version), [])
            for name in group.get("names") or []:
                names.append(_text(name, f"{fld} (host {host})", _APT_PACKAGE))
        for group in answer.get("wheels") or []:
            fld = _text(group.get("field"), "field", values.VARIABLE)
            index = group.get("index") or "pypi"
            reqs = wheels.setdefault((fld, index), [])
            for req in group.get("requirements") or []:
                reqs.append(_text(req, f"{fld} (host {host})", _REQUIREMENT))
        for repo in answer.get("git") or []:
            name = repo.get("name")
            if name not in GIT_NAMES:
                raise UsageError(f"{where}: git repository {values.shown(name)} is not one of the roles'", "fix bundle_contents.yml")
            fld = _text(repo.get("field"), "field", values.VARIABLE)
            found = GitRepo(
                name,
                _url(repo.get("url"), f"{fld.replace('_version', '_repo')} (host {host})", _GIT_SCHEMES),
                _text(repo.get("ref"), f"{fld} (host {host})", _GIT_REF),
                fld,
            )
            once(f"{name} remote and ref", (found.url, found.ref), host)
            git[name] = found
        for group in answer.get("downloads") or []:
            fld = _text(group.get("field"), "field", values.VARIABLE)
            checksums = group.get("checksums") or {}
            if not isinstance(checksums, dict):
                raise UsageError(f"{where}: {fld}: its checksums (host {host}) are not a mapping of file name to sha256", f"fix {fld}'s checksums")
            for got_name in group.get("names") or []:
                got_name = _text(got_name, f"{fld} (host {host})", _PART)
                if not got_name.endswith(SOURCE_SUFFIXES):
                    raise UsageError(f"{where}: {fld}: {values.shown(got_name)} is not a .deb or .tar.gz", "fix bundle_contents.yml")
                url = group["url"] if group.get("url") else _url(group.get("base_url"), f"{fld} base URL (host {host})") + got_name
                download = Download(
                    got_name,
                    _url(url, f"{fld} source (host {host})"),
                    fld,
                    _text(checksums.get(got_name) or "", f"{fld} checksum of {got_name} (host {host})", _SHA256, empty=True),
                )
                once(f"{got_name} source", (download.url, download.sha256), host)
                downloads[got_name] = download
        sources = answer.get("sources") or {}
        once("nvidia_driver_debian_mirror", _url(sources.get("debian_mirror"), "nvidia_driver_debian_mirror"), host)
        for key, var in (("nvidia_repo_url", "nvidia_driver_repo_url"), ("nvidia_keyring_url", "nvidia_driver_keyring_url")):
            value = _url(sources.get(key), var, empty=True)
            if value:
                once(var, value, host)
        if sources.get("nvidia_pin_packages"):
            once("nvidia_driver_branch", _text(sources.get("nvidia_pin"), "nvidia_driver_branch", _APT_VERSION), host)
            once(
                "nvidia_driver pin",
                tuple(_text(p, "pin", re.compile(r"^[a-z0-9*][a-z0-9+.*-]{0,63}$")) for p in sources["nvidia_pin_packages"]),
                host,
            )
            once("nvidia_driver keyring", values.absolute_path(sources.get("nvidia_keyring"), "nvidia keyring"), host)
        for key, var in (("toolkit_repo_url", "container_toolkit_repo_url"), ("toolkit_key_url", "container_toolkit_key_url")):
            value = _url(sources.get(key) or "", var, empty=True)
            if value:
                once(var, value, host)
        if answer.get("wheels"):
            once("pytorch_source", _text(sources.get("pytorch_source"), "pytorch_source", re.compile(r"^(index|wheelhouse)$")), host)
            once("pytorch_index_url", _url(sources.get("pytorch_index_url"), "pytorch_index_url", empty=True), host)
            once("pytorch_build", "cpu" if sources.get("pytorch_cpu") is True else "cuda", host)
            once("pytorch_python", _text(sources.get("python"), "pytorch_python", re.compile(r"^[A-Za-z0-9/._-]{1,200}$")), host)
    for (fld, _index), reqs in wheels.items():
        pins = {_canonical(r.split("==")[0]): r for r in reqs if "==" in r}
        for req in reqs:
            name = _canonical(re.split(r"[\[=<>!~]", req)[0])
            if name in pins and pins[name] != req:
                first, second = sorted((pins[name], req))
                raise UsageError(f"{where}: {fld} asks for {first} and {second} on different hosts", "one bundle serves one cluster: pin one version")

    def got(name: str) -> Any:
        return single[name][1] if name in single else None

    pin = got("nvidia_driver pin") or ()
    return Contents(
        apt=tuple(AptGroup(f, tuple(dict.fromkeys(n)), s, v) for (f, s, v), n in apt.items() if n),
        wheels=tuple(WheelGroup(f, tuple(dict.fromkeys(r)), i) for (f, i), r in wheels.items() if r),
        git=tuple(git[n] for n in GIT_NAMES if n in git),
        debian_mirror=got("nvidia_driver_debian_mirror") or "",
        nvidia_repo_url=got("nvidia_driver_repo_url") or "",
        nvidia_keyring_url=got("nvidia_driver_keyring_url") or "",
        nvidia_keyring=got("nvidia_driver keyring") or "",
        nvidia_pin_packages=tuple(pin),
        nvidia_pin=got("nvidia_driver_branch") or "",
        toolkit_repo_url=got("container_toolkit_repo_url") or "",
        toolkit_key_url=got("container_toolkit_key_url") or "",
        downloads=tuple(downloads[n] for n in sorted(downloads)),
        pytorch_source=got("pytorch_source") or "index",
        pytorch_index_url=got("pytorch_index_url") or "",
        torch_build=got("pytorch_build") or "",
        python=got("pytorch_python") or "python3",
    )


def bundle_facts(dist: Distribution, arch: str) -> dict[str, str]:
    """The facts bundle_contents.yml gives every host: a fresh node of ``dist`` on ``arch``. Pure."""
    if arch not in ARCHES:
        raise UsageError(f"--arch {values.shown(arch)} is not an architecture a bundle can be built for", "use " + " or ".join(ARCHES))
    return {
        "distribution": dist.name,
        "os_family": "Debian",
        "version": dist.version,
        "codename": dist.codename,
        "architecture": ARCHES[arch],
        "kernel": dist.kernels[arch],
    }


def resolve(inventory: Path, dist: Distribution, arch: str, progress: Progress = _quiet) -> Contents:
    """Run bundle_contents.yml through the runner on this machine (no host is contacted) and type its answers."""
    from megaprov import paths
    from megaprov.cluster import inventory as inv
    from megaprov.cluster import runner
    from megaprov.errors import RunFailed

    loaded = inv.load(inventory, paths.roles_dir(), defaults=paths.cluster_defaults())
    progress(f"resolving what {loaded.path} fetches for {dist.key} {arch}")
    private = runner.new_private_dir(paths.state_dir(), "bundle")
    spec = runner.RunSpec(
        playbook=paths.playbook("bundle_contents.yml"),
        inventories=(loaded.path,),
        private_data_dir=private,
        collections_root=paths.collections_root(),
        fact_cache_dir=private / "facts",  # never the inventory's own fact cache: these facts are made up
        options=runner.RunOptions(tags=("always",), extravars={"bundle_facts": bundle_facts(dist, arch)}),
    )
    result = runner.run(spec, collect=("ansible.builtin.debug",))
    if not result.ok:
        first = result.failures[0].message if result.failures else result.error_line or f"status {result.status}"
        raise RunFailed(f"could not evaluate what {loaded.path} fetches: {first}", f"see {result.artifacts}/stdout")
    answers = [r.res["msg"] for r in result.results if isinstance(r.res.get("msg"), dict) and "apt" in r.res["msg"]]
    return parse_contents(answers, str(loaded.path))


# ---- verification


@dataclass
class Verified:
    directory: str
    files: int
    bytes: int
    seconds: float
    manifest: Manifest = field(repr=False)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _unsafe(directory: Path, rel: str, mode: int) -> BundleError:
    """The refusal of an entry that is not a plain file or directory, by what it is."""
    if stat.S_ISLNK(mode):
        return BundleError(f"bundle {directory}: {values.shown(rel)} is a link", f"a bundle holds plain files only: remove it, or {REBUILD}")
    return BundleError(f"bundle {directory}: {values.shown(rel)} is not a plain file", f"remove it, or {REBUILD}")


def _open_root(directory: Path) -> int:
    """The bundle directory itself (a link to it is the operator's choice and is followed), never blocking."""
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise BundleError(f"bundle {directory}: no such directory", "give the directory `megaprov bundle build --dir` wrote") from None
        raise BundleError(f"bundle {directory}: cannot be read ({exc.strerror})", "check its permissions") from None


def _open_parts(directory: Path, root: int, parts: list[str], leaf: bool) -> int | None:
    """``parts`` below ``root``, one name at a time: no link followed in any of them, a directory or (``leaf``) a
    regular file checked before and after opening (so a FIFO is never opened and a device never touched); None where
    it does not exist."""
    fd = root
    try:
        for depth, part in enumerate(parts):
            rel = "/".join(parts[: depth + 1])
            last = leaf and depth == len(parts) - 1
            try:
                before = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                    return None
                raise BundleError(f"bundle {directory}: {values.shown(rel)} cannot be read ({exc.strerror})", "check its permissions") from None
            if not (stat.S_ISREG(before.st_mode) if last else stat.S_ISDIR(before.st_mode)):
                raise _unsafe(directory, rel, before.st_mode)
            try:
                child = os.open(part, _FILE_FLAGS if last else _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:  # replaced since the stat: a link (ELOOP), not a directory, gone
                if exc.errno == errno.ENOENT:
                    return None
                raise BundleError(f"bundle {directory}: {values.shown(rel)} changed while it was read ({exc.strerror})", REBUILD) from None
            if fd != root:
                os.close(fd)
            fd = child
            after = os.fstat(fd)
            if (after.st_dev, after.st_ino, stat.S_IFMT(after.st_mode)) != (before.st_dev, before.st_ino, stat.S_IFMT(before.st_mode)):
                raise BundleError(f"bundle {directory}: {values.shown(rel)} changed while it was read", REBUILD)
        opened, fd = fd, root
        return opened
    finally:
        if fd != root:
            os.close(fd)


def _open_file(directory: Path, name: str) -> int | None:
    """A descriptor of the regular file ``name`` (relative, '/'-separated) of the bundle, or None where it is missing.

    No part of the name may be a link, so nothing read can be outside the bundle; a FIFO, socket or device is refused
    from its stat before it is opened, and the open is non-blocking in any case."""
    root = _open_root(directory)
    try:
        return _open_parts(directory, root, name.split("/"), leaf=True)
    finally:
        os.close(root)


def _sha256(directory: Path, name: str) -> str:
    fd = _open_file(directory, name)
    if fd is None:
        raise BundleError(f"bundle {directory}: {values.shown(name)} is missing", f"the bundle was changed or is incomplete: {REBUILD}")
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(directory: Path) -> Manifest:
    where = f"{directory}/{MANIFEST}"
    root = _open_root(directory)
    try:
        fd = _open_parts(directory, root, [MANIFEST], leaf=True)
    except BundleError:  # a link, a FIFO, ...
        fd = None
    finally:
        os.close(root)
    if fd is None:
        raise BundleError(f"{where}: missing or not a plain file", "give the directory `megaprov bundle build --dir` wrote")
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(fd).st_size
        if size > MAX_MANIFEST_BYTES:
            raise BundleError(f"{where} is {size:,} bytes", f"keep it under {MAX_MANIFEST_BYTES:,} bytes")
        data = handle.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise BundleError(f"{where} is larger than {MAX_MANIFEST_BYTES:,} bytes", f"keep it under {MAX_MANIFEST_BYTES:,} bytes")
    return parse_manifest(values.decode_utf8(data, where), where)


def walk(directory: Path) -> dict[str, os.stat_result]:
    """Every file under ``directory`` by its relative name; a link or a special file is an error (a bundle holds plain
    files only, so nothing in it can point out of it).

    Iterative, with no path longer than one name (each directory is opened from the bundle's, name by name, links
    never followed), and bounded: :data:`MAX_DEPTH` directories deep, :data:`MAX_ENTRIES` entries, :data:`MAX_FILES`
    files."""
    found: dict[str, os.stat_result] = {}
    entries = 0
    root = _open_root(directory)
    try:
        pending: list[list[str]] = [[]]
        while pending:
            parts = pending.pop()
            fd = _open_parts(directory, root, parts, leaf=False) if parts else root
            if fd is None:
                raise BundleError(f"bundle {directory}: {values.shown('/'.join(parts))} changed while it was read", REBUILD)
            try:
                with os.scandir(fd) as listing:
                    for entry in listing:
                        entries += 1
                        rel = "/".join([*parts, entry.name])
                        if entries > MAX_ENTRIES:
                            raise BundleError(f"bundle {directory}: more than {MAX_ENTRIES:,} entries (at {values.shown(rel)})", REBUILD)
                        info = entry.stat(follow_symlinks=False)
                        if stat.S_ISREG(info.st_mode):
                            found[rel] = info
                            if len(found) > MAX_FILES + 1:
                                raise BundleError(f"bundle {directory}: more than {MAX_FILES:,} files", REBUILD)
                        elif stat.S_ISDIR(info.st_mode):
                            if len(parts) + 1 > MAX_DEPTH:
                                raise BundleError(
                                    f"bundle {directory}: {values.shown(rel)} is more than {MAX_DEPTH} directories deep", f"remove it, or {REBUILD}"
                                )
                            pending.append([*parts, entry.name])
                        else:
                            raise _unsafe(directory, rel, info.st_mode)
            finally:
                if fd != root:
                    os.close(fd)
    finally:
        os.close(root)
    return found


def check_files(directory: Path, manifest: Manifest, found: dict[str, os.stat_result]) -> list[str]:
    """Problems of the files against the manifest, one line each, the cheap ones (missing, extra, size) first."""
    problems: list[str] = []
    listed = set(manifest.files)
    on_disk = set(found) - {MANIFEST}
    problems += [f"{name}: listed in the manifest but missing" for name in sorted(listed - on_disk)]
    problems += [f"{values.shown(name)}: not in the manifest (an extra file)" for name in sorted(on_disk - listed)]
    for name in sorted(listed & on_disk):
        if found[name].st_size != manifest.files[name].size:
            problems.append(f"{name}: {found[name].st_size:,} bytes, the manifest says {manifest.files[name].size:,}")
    if problems:
        return problems
    for name in sorted(listed):
        if _sha256(directory, name) != manifest.files[name].sha256:
            problems.append(f"{name}: sha256 differs from the manifest's")
    return problems


class _Capped:
    """A binary stream read through, refused with ``error`` once more than ``limit`` bytes came out of it."""

    def __init__(self, stream: IO[bytes], limit: int, error: Callable[[], Exception]) -> None:
        self._stream = stream
        self._left = limit
        self._error = error
        self.total = 0

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(self._left + 1 if size < 0 else min(size, self._left + 1))
        self.total += len(data)
        self._left -= len(data)
        if self._left < 0:
            raise self._error()
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        raise OSError("a stream cannot seek")


def _gunzip(handle: IO[bytes], directory: Path, name: str) -> Iterator[bytes]:
    """The lines of the bundle's gzip file ``name``, streamed, within :data:`MAX_PACKAGES_GZ_BYTES` read,
    :data:`MAX_PACKAGES_BYTES` expanded, :data:`MAX_PACKAGES_LINES` lines of at most :data:`MAX_PACKAGES_LINE` bytes."""
    where = f"bundle {directory}: {name}"

    def bound(what: str, limit: int) -> BundleError:
        return BundleError(f"{where}: more than {limit:,} {what}, the bound of megaprov.cluster.bundle", REBUILD)

    stored = _Capped(handle, MAX_PACKAGES_GZ_BYTES, lambda: bound("bytes as stored (MAX_PACKAGES_GZ_BYTES)", MAX_PACKAGES_GZ_BYTES))
    expanded = lines = 0
    rest = b""
    try:
        with gzip.GzipFile(fileobj=stored, mode="rb") as unzipped:
            while chunk := unzipped.read(1 << 20):
                expanded += len(chunk)
                if expanded > MAX_PACKAGES_BYTES:
                    raise bound("bytes expanded (MAX_PACKAGES_BYTES)", MAX_PACKAGES_BYTES)
                lines += chunk.count(b"\n")
                if lines > MAX_PACKAGES_LINES:
                    raise bound("lines (MAX_PACKAGES_LINES)", MAX_PACKAGES_LINES)
                *complete, rest = (rest + chunk).split(b"\n")
                if len(rest) > MAX_PACKAGES_LINE or any(len(line) > MAX_PACKAGES_LINE for line in complete):
                    raise bound("bytes in one line (MAX_PACKAGES_LINE)", MAX_PACKAGES_LINE)
                yield from complete
    except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError; EOFError: cut short
        raise BundleError(f"{where} is not a whole gzip file ({values.printable(str(exc))[:200]})", REBUILD) from None
    if stored.total == 0:
        raise BundleError(f"{where} is empty, not a gzip file", REBUILD)
    if rest:
        yield rest


def apt_index(directory: Path) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Package -> (version, what it provides) from the bundle's apt/Packages.gz (checked against the manifest first).

    Read as hostile: streamed and bounded (see :func:`_gunzip`), at most :data:`MAX_APT_NAMES` packages and provided
    names; a file that is not gzip is refused naming it."""
    name = "apt/Packages.gz"
    fd = _open_file(directory, name)
    if fd is None:
        return {}
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    names = 0

    def add(fields: dict[str, str]) -> None:
        nonlocal names
        if "Package" in fields:
            provides = tuple(p.strip().split(" ")[0] for p in fields.get("Provides", "").split(",") if p.strip())
            names += 1 + len(provides)
            if names > MAX_APT_NAMES:
                raise BundleError(f"bundle {directory}: {name}: more than {MAX_APT_NAMES:,} packages and provided names (MAX_APT_NAMES)", REBUILD)
            out[fields["Package"]] = (fields.get("Version", ""), provides)

    stanza: dict[str, str] = {}
    with os.fdopen(fd, "rb") as handle:
        for raw in _gunzip(handle, directory, name):
            if not raw:
                add(stanza)
                stanza = {}
                continue
            line = raw.decode("utf-8", "replace")
            if ": " in line and not line.startswith(" "):
                key, value = line.split(": ", 1)
                if key in ("Package", "Version", "Provides"):
                    stanza[key] = value
    add(stanza)
    return out


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _base(version: str) -> str:
    return version.split("+", 1)[0]


def check_versions(manifest: Manifest, contents: Contents, provided: Iterable[str] = ()) -> list[str]:
    """What the inventory asks for that the manifest's versions do not have, one line naming the variable each. Pure."""
    problems: list[str] = []
    have = manifest.versions
    virtual = set(provided)
    for group in contents.apt:
        for name in group.names:
            if name not in have.apt and name not in virtual:
                problems.append(f"{group.field}: the bundle has no apt package {name}")
            elif group.version and name in have.apt and not fnmatch.fnmatchcase(have.apt[name], group.version):
                problems.append(f"{group.field}: the inventory asks for {name} {group.version}, the bundle has {have.apt[name]}")
    wheels = {_canonical(k): v for k, v in have.wheels.items()}
    for wgroup in contents.wheels:
        for req in wgroup.requirements:
            name, _, pinned = req.partition("==")
            key = _canonical(re.split(r"[\[<>!~=]", name)[0])
            if key not in wheels:
                problems.append(f"{wgroup.field}: the bundle has no wheel of {key}")
            elif pinned and wheels[key] != pinned and (("+" in pinned) or _base(wheels[key]) != pinned):
                problems.append(f"{wgroup.field}={pinned}: the bundle has {key} {wheels[key]}")
    torch = wheels.get("torch", "")
    if torch and contents.torch_build:
        local = torch.partition("+")[2]
        if contents.torch_build == "cpu" and local and local != "cpu":
            problems.append(f"pytorch_build: the nodes need torch's CPU build, the bundle has torch {torch}")
        if contents.torch_build == "cuda" and local == "cpu":
            problems.append(f"pytorch_build: the nodes have GPUs, the bundle has torch {torch} (the CPU build)")
    for repo in contents.git:
        got = have.git.get(repo.name)
        if got is None:
            problems.append(f"{repo.field}: the bundle has no {repo.name} repository")
        elif got.ref != repo.ref:
            problems.append(f"{repo.field}={repo.ref}: the bundle has {repo.name} at {got.ref}")
    for download in contents.downloads:
        held = manifest.files.get(f"sources/{download.name}")
        if held is None:
            problems.append(f"{download.field}: the bundle has no sources/{download.name}")
        elif download.sha256 and held.sha256 != download.sha256:
            problems.append(f"{download.field}: the inventory's sha256 of {download.name} is not the bundle's")
    return problems


def _refusal(error: BundleError, problems: list[str], shown: int = 20) -> BundleError:
    """The first problem is the error's line; the next ones are its details, at most ``shown`` lines in all."""
    error.details = problems[1:shown]
    if len(problems) > shown:
        error.details[-1] = f"... and {len(problems) - shown + 1} more"
    return error


def verify(directory: Path, inventory: Path | None = None, contents: Contents | None = None) -> Verified:
    """Every file against the manifest, then (with an inventory) the versions against what it asks for.

    Raises :class:`BundleError` with the first problem as its line and the others as details."""
    began = time.monotonic()
    manifest = read_manifest(directory)
    found = walk(directory)
    problems = check_files(directory, manifest, found)
    names = {n.split("/")[1] for n in manifest.files if n.startswith("wheels/")}
    for key, version in manifest.versions.wheels.items():
        if not any(_canonical(n.split("-")[0]) == _canonical(key) and n.split("-")[1] == version for n in names):
            problems.append(f"versions.wheels: {key} {version} has no wheel in wheels/")
    for key in manifest.versions.git:
        if f"git/{key}.git/HEAD" not in manifest.files:
            problems.append(f"versions.git: {key} has no repository git/{key}.git")
    named = {entry.file for entry in manifest.images.values()}
    unnamed = [name for name in sorted(manifest.files) if name.startswith("images/") and name not in named]
    problems += [f"{name}: an image archive the manifest's images do not name" for name in unnamed]
    if not problems and (inventory is not None or contents is not None):
        if contents is None:
            assert inventory is not None
            dist = distribution(f"{manifest.distribution.id}-{manifest.distribution.version}")
            contents = resolve(inventory, dist, manifest.arch)
        provided = {p for _, provides in apt_index(directory).values() for p in provides}
        problems = check_versions(manifest, contents, provided)
        if problems:
            raise _refusal(BundleError(f"bundle {directory} does not match {inventory or 'the inventory'}: {problems[0]}", REBUILD), problems)
    if problems:
        raise _refusal(BundleError(f"bundle {directory}: {problems[0]}", f"the bundle was changed or is incomplete: {REBUILD}"), problems)
    size = sum(entry.size for entry in manifest.files.values())
    return Verified(str(directory), len(manifest.files), size, round(time.monotonic() - began, 2), manifest)


# ---- building


@dataclass
class Built:
    directory: str
    files: int
    bytes: int
    seconds: dict[str, float]  # per part: resolve, sources, apt, wheels, git, images, manifest
    apt: int
    wheels: int
    git: list[str]
    sources: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)


def _run(argv: list[str], what: str, hint: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 3600) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False)
    except FileNotFoundError:
        raise EnvironmentProblem(f"{what}: {argv[0]} is not installed", hint) from None
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(f"{what}: {argv[0]} did not finish within {timeout:.0f}s", hint) from None
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip() and not line.startswith(("W:", "warning:", "N:"))]
        errors = [line for line in lines if line.startswith(("E:", "fatal:", "error:"))] or lines or [f"exit {proc.returncode}"]
        raise EnvironmentProblem(f"{what}: {values.printable(errors[0])[:300]}", hint)
    return proc.stdout


def apt_sources(
    dist: Distribution, arch: str, mirror: str, security: str, nvidia_url: str, nvidia_keyring: str, toolkit_url: str = "", toolkit_key: str = ""
) -> str:
    """The private root's sources.list. Pure."""
    parts = " ".join(dist.components)
    lines = [f"deb [arch={arch} signed-by={dist.keyring}] {mirror} {suite} {parts}" for suite in (dist.codename, f"{dist.codename}-updates")]
    if security:
        lines.append(f"deb [arch={arch} signed-by={dist.keyring}] {security} {dist.codename}-security {parts}")
    if nvidia_url:
        lines.append(f"deb [arch={arch} signed-by={nvidia_keyring}] {nvidia_url} /")
    if toolkit_url:  # a flat repository, as the container_toolkit role's deb822 source (Suites: /)
        lines.append(f"deb [arch={arch} signed-by={toolkit_key}] {toolkit_url} /")
    # apt uses a file: repository's packages in place; copy: puts them into the download directory like http does.
    return "\n".join(re.sub(r" file:", " copy:", line) for line in lines) + "\n"


def apt_config(root: Path, archives: Path, arch: str) -> str:
    """apt.conf of the private root: its own state, an empty dpkg status, downloads into ``archives``. Pure."""
    user = getpass.getuser()
    return (
        f'Dir "{root}/";\n'
        f'Dir::State::status "{root}/var/lib/dpkg/status";\n'
        f'Dir::Cache::archives "{archives}/";\n'
        f'Dir::Etc::TrustedParts "{root}/etc/apt/trusted.gpg.d/";\n'
        f'Dir::Etc::Trusted "{root}/etc/apt/trusted.gpg";\n'
        f'APT::Architecture "{arch}";\n'
        f'APT::Architectures {{ "{arch}"; }};\n'
        'APT::Install-Recommends "false";\n'
        'APT::Install-Suggests "false";\n'
        'Acquire::Languages "none";\n'
        'Acquire::Retries "3";\n'
        f'APT::Sandbox::User "{user}";\n'
        'Debug::NoLocking "true";\n'
    )


def apt_request(contents: Contents) -> list[str]:
    """The apt-get install arguments: names, with =VERSION where a group asks for an exact one. Pure."""
    out: dict[str, None] = {}
    for group in contents.apt:
        exact = group.version and not any(c in group.version for c in "*?[")
        for name in group.names:
            out[f"{name}={group.version}" if exact else name] = None
    return list(out)


class _Deadline:
    """One download's deadline, whole: at ``seconds`` every socket opened for it is shut down, so a read blocked on a
    server that trickles (urllib's timeout is per read, and each byte restarts it) returns at once."""

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._timer.cancel()
        with self._lock:
            for sock in self._sockets:
                sock.close()
            self._sockets.clear()

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def connect(self, address: tuple[str, int], timeout: float | None = None, source_address: tuple[str, int] | None = None) -> socket.socket:
        """socket.create_connection, watched: a duplicate of the socket is kept to shut down the connection (TLS and
        a proxy's tunnel take over the socket object itself)."""
        sock = socket.create_connection(address, timeout, source_address)
        with self._lock:
            self._sockets.append(sock.dup())
            if self.expired:
                sock.close()
                raise TimeoutError("the deadline passed while connecting")
        return sock

    def connection(self, kind: type[http.client.HTTPConnection]) -> Callable[..., http.client.HTTPConnection]:
        def make(host: str, **kwargs: Any) -> http.client.HTTPConnection:
            conn = kind(host, **kwargs)
            conn._create_connection = self.connect  # type: ignore[attr-defined]  # http.client's hook for the socket
            return conn

        return make


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Redirects to http and https only (each new connection is under the same deadline)."""

    def redirect_request(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: http.client.HTTPMessage, newurl: str
    ) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            raise urllib.error.HTTPError(newurl, code, f"a redirect to {values.shown(newurl)} (http and https only)", headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(deadline: _Deadline) -> urllib.request.OpenerDirector:
    context = ssl.create_default_context()

    class HTTP(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(deadline.connection(http.client.HTTPConnection), req)

    class HTTPS(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(deadline.connection(http.client.HTTPSConnection), req, context=context)

    return urllib.request.build_opener(HTTP(), HTTPS(context=context), _Redirects())


def _fetch_file(url: str, dest: Path, limit: int) -> None:
    """A file: URL: a regular file only (a FIFO would block the open, a device never ends)."""
    path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise EnvironmentProblem(f"could not fetch {url}: {exc.strerror}", "point the variable at a file that exists") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise EnvironmentProblem(f"could not fetch {url}: not a plain file", "point the variable at the package file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise EnvironmentProblem(f"{url} is larger than {limit:,} bytes", "point the variable at the right file")
    dest.write_bytes(data)


def _fetch(url: str, dest: Path, limit: int) -> None:
    """``url`` into ``dest``: at most ``limit`` bytes, within :data:`FETCH_SECONDS` in all (connecting, the headers,
    every read, redirects), each read within :data:`FETCH_READ_SECONDS`."""
    if urllib.parse.urlsplit(url).scheme == "file":
        _fetch_file(url, dest, limit)
        return
    hint = "check the network, or point the variable at a reachable mirror"
    size = 0
    try:
        with _Deadline(FETCH_SECONDS) as deadline:
            try:
                with _opener(deadline).open(url, timeout=min(FETCH_READ_SECONDS, FETCH_SECONDS)) as response, dest.open("wb") as out:
                    while chunk := response.read1(1 << 16):
                        size += len(chunk)
                        if size > limit:
                            raise EnvironmentProblem(f"{url} is larger than {limit:,} bytes", "point the variable at the right file")
                        out.write(chunk)
            except (OSError, ValueError, http.client.HTTPException) as exc:
                if not deadline.expired:
                    raise EnvironmentProblem(f"could not fetch {url}: {values.printable(str(exc))[:300]}", hint) from None
            if deadline.expired:  # a connection shut at the deadline can look like a clean end
                raise EnvironmentProblem(f"could not fetch {url}: it did not finish within {FETCH_SECONDS:g}s", hint)
    except EnvironmentProblem:
        dest.unlink(missing_ok=True)
        raise


def _keyring_from_deb(deb: Path, member: str, dest: Path) -> None:
    """The keyring file ``member`` (an absolute path) out of the keyring package, as the node's dpkg installs it.

    The package is hostile until it is read: its data.tar is streamed from dpkg-deb (at most
    :data:`MAX_KEYRING_TAR_BYTES`, :data:`MAX_TAR_MEMBERS` entries) and nothing is extracted; an entry outside the
    package's root (absolute, '..'), a device or FIFO anywhere, or a keyring that is a link, twice there or larger than
    :data:`MAX_KEYRING_BYTES` is refused."""
    hint = "check nvidia_driver_keyring_url: it must be NVIDIA's cuda-keyring package"
    want = member.strip("/")
    found: bytes | None = None
    problem = ""
    with tempfile.TemporaryFile() as errors:
        try:
            proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors)
        except FileNotFoundError:
            raise EnvironmentProblem("dpkg-deb is not installed: it reads NVIDIA's keyring package", "apt-get install dpkg") from None
        assert proc.stdout is not None
        try:
            stream = _Capped(
                proc.stdout,
                MAX_KEYRING_TAR_BYTES,
                lambda: EnvironmentProblem(f"{deb.name}: its files are more than {MAX_KEYRING_TAR_BYTES:,} bytes (MAX_KEYRING_TAR_BYTES)", hint),
            )
            with tarfile.open(fileobj=stream, mode="r|") as archive:  # type: ignore[call-overload]  # a stream: read()
                for count, entry in enumerate(archive, 1):
                    found = _keyring_entry(deb, archive, entry, count, want, found, hint)
        except (tarfile.TarError, ValueError, EOFError) as exc:  # a header tarfile cannot read
            problem = str(exc) or exc.__class__.__name__
        finally:
            proc.stdout.close()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.returncode != 0 or problem:
            errors.seek(0)
            said = errors.read(4096).decode(errors="replace").strip() or problem or f"dpkg-deb exit {proc.returncode}"
            raise EnvironmentProblem(f"{deb.name}: not a Debian package ({values.printable(said)[:200]})", hint)
    if found is None:
        raise EnvironmentProblem(f"{deb.name} holds no {member}", hint)
    dest.write_bytes(found)


def _keyring_entry(
    deb: Path, archive: tarfile.TarFile, entry: tarfile.TarInfo, count: int, want: str, found: bytes | None, hint: str
) -> bytes | None:
    """One entry of the keyring package's data.tar: checked, and the keyring's bytes where it is the keyring."""
    name = values.shown(entry.name)
    if count > MAX_TAR_MEMBERS:
        raise EnvironmentProblem(f"{deb.name}: more than {MAX_TAR_MEMBERS:,} entries (MAX_TAR_MEMBERS)", hint)
    parts = [p for p in entry.name.split("/") if p not in ("", ".")]
    if entry.name.startswith("/") or ".." in parts:
        raise EnvironmentProblem(f"{deb.name}: entry {name} is outside the package's root", hint)
    if entry.ischr() or entry.isblk() or entry.isfifo():
        raise EnvironmentProblem(f"{deb.name}: entry {name} is a device or FIFO", hint)
    if "/".join(parts) != want:
        return found
    if not entry.isreg():
        raise EnvironmentProblem(f"{deb.name}: {name} is a link or not a regular file", hint)
    if found is not None:
        raise EnvironmentProblem(f"{deb.name}: {name} is in it twice", hint)
    if entry.size > MAX_KEYRING_BYTES:
        raise EnvironmentProblem(f"{deb.name}: {name} is {entry.size:,} bytes, more than {MAX_KEYRING_BYTES:,} (MAX_KEYRING_BYTES)", hint)
    handle = archive.extractfile(entry)
    data = handle.read(MAX_KEYRING_BYTES + 1) if handle is not None else b""
    if len(data) != entry.size:
        raise EnvironmentProblem(f"{deb.name}: {name} is cut short", hint)
    return data


def _toolkit_key(contents: Contents, dest: Path, progress: Progress) -> str:
    """NVIDIA's container toolkit signing key into the private root ('' where the toolkit is not bundled)."""
    if not contents.toolkit_repo_url and not any(g.source == "toolkit" for g in contents.apt):
        return ""
    if not contents.toolkit_repo_url or not contents.toolkit_key_url:
        raise UsageError(
            "container_toolkit_repo_url or container_toolkit_key_url is empty but NVIDIA's container toolkit is bundled",
            "set both to the repository (or its mirror) and its signing key",
        )
    progress(f"apt: the container toolkit's signing key {contents.toolkit_key_url}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    _fetch(contents.toolkit_key_url, dest, MAX_KEY_BYTES)
    if not dest.read_bytes().lstrip().startswith(b"-----BEGIN PGP PUBLIC KEY BLOCK-----"):
        raise UsageError(
            f"container_toolkit_key_url={values.shown(contents.toolkit_key_url)} is not an ASCII-armoured OpenPGP key",
            "point it at the repository's gpgkey",
        )
    return str(dest)


def build_apt(
    contents: Contents,
    dist: Distribution,
    arch: str,
    out: Path,
    work: Path,
    security: str,
    progress: Progress = _quiet,
    local_debs: Iterable[Path] = (),
) -> None:
    """The apt closure of ``contents`` for a fresh node into ``out`` (*.deb + Packages.gz), with what ``local_debs``
    (the .debs the roles download by URL) depend on; those themselves are not copied."""
    if not Path(dist.keyring).is_file():
        raise EnvironmentProblem(
            f"{dist.keyring} is missing: apt cannot check {dist.id}'s archive",
            f"apt-get install {dist.id}-archive-keyring" if dist.id == "debian" else "apt-get install ubuntu-keyring",
        )
    root = work / "aptroot"
    for sub in (
        "etc/apt/apt.conf.d",
        "etc/apt/preferences.d",
        "etc/apt/sources.list.d",
        "etc/apt/trusted.gpg.d",
        "var/lib/apt/lists/partial",
        "var/lib/dpkg",
        "var/cache/apt",
    ):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "var/lib/dpkg/status").write_text("")
    (out / "partial").mkdir(parents=True, exist_ok=True)
    keyring = ""
    if contents.nvidia_repo_url or contents.nvidia_keyring_url:
        if not contents.nvidia_keyring_url:
            raise UsageError("nvidia_driver_keyring_url is empty but NVIDIA's repository is used", "set it to the repository's cuda-keyring package")
        name = contents.nvidia_keyring_url.rstrip("/").rsplit("/", 1)[-1]
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+~-]*\.deb", name):
            raise UsageError(
                f"nvidia_driver_keyring_url={values.shown(contents.nvidia_keyring_url)} does not name a .deb", "point it at the cuda-keyring package"
            )
        progress(f"apt: NVIDIA's keyring package {contents.nvidia_keyring_url}")
        _fetch(contents.nvidia_keyring_url, out / name, MAX_KEYRING_DEB_BYTES)
        keyring = str(root / "etc/apt/cuda-archive-keyring.gpg")
        _keyring_from_deb(out / name, contents.nvidia_keyring, Path(keyring))
    toolkit_key = _toolkit_key(contents, root / "etc/apt/keyrings/nvidia-container-toolkit.asc", progress)
    mirror = contents.debian_mirror if dist.id == "debian" and contents.debian_mirror else dist.mirror
    (root / "etc/apt/sources.list").write_text(
        apt_sources(dist, arch, mirror, security, contents.nvidia_repo_url, keyring, contents.toolkit_repo_url if toolkit_key else "", toolkit_key)
    )
    if contents.nvidia_pin_packages:  # the nvidia_driver role's preference: the branch's driver, whatever is newer
        (root / "etc/apt/preferences.d/megaprov-nvidia-driver").write_text(
            f"Package: {' '.join(contents.nvidia_pin_packages)}\nPin: version {contents.nvidia_pin}\nPin-Priority: 1001\n"
        )
    (root / "etc/apt/apt.conf").write_text(apt_config(root, out, arch))
    env = {**os.environ, "APT_CONFIG": str(root / "etc/apt/apt.conf"), "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    hint = "check the network and the apt sources (nvidia_driver_debian_mirror, nvidia_driver_repo_url, container_toolkit_repo_url)"
    others = [url for url in (contents.nvidia_repo_url, contents.toolkit_repo_url if toolkit_key else "") if url]
    progress(f"apt: package lists of {mirror} ({dist.codename})" + "".join(f" and {url}" for url in others))
    _run(["apt-get", "-q", "update"], "apt-get update", hint, env)
    request = apt_request(contents) + [str(deb) for deb in local_debs]  # apt resolves a .deb file's Depends too
    progress(f"apt: resolving and downloading {len(request)} package(s) and their dependencies")
    try:
        _run(["apt-get", "-q", "-y", "install", "--download-only", "--no-install-recommends", *request], "apt-get install --download-only", hint, env)
    except EnvironmentProblem as exc:
        missing = re.search(r"(?:Unable to locate package |Package '?)([a-z0-9][a-z0-9+.-]*)", exc.message)
        group = next((g for g in contents.apt if missing and missing.group(1) in g.names), None)
        if group is not None and missing is not None:
            repositories = {"nvidia": "NVIDIA's repository", "toolkit": "NVIDIA's container toolkit repository"}
            where = repositories.get(group.source, f"{dist.id} {dist.codename}")
            raise UsageError(
                f"{group.field}: {where} has no package {missing.group(1)} ({exc.message})", f"fix {group.field} in the inventory"
            ) from None
        raise
    shutil.rmtree(out / "partial", ignore_errors=True)
    (out / "lock").unlink(missing_ok=True)
    progress("apt: Packages.gz")
    text = _run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], "dpkg-scanpackages", "apt-get install dpkg-dev", cwd=out)
    (out / "Packages.gz").write_bytes(gzip.compress(text.encode(), mtime=0))


def build_wheels(contents: Contents, dist: Distribution, arch: str, out: Path, progress: Progress = _quiet) -> None:
    """The wheels of the training environment for the nodes' Python, through the lab's wheelhouse builder."""
    from megaprov.cluster import wheelhouse

    requirements = contents.requirements()
    if not requirements:
        return
    if arch != "amd64":
        raise UsageError(
            f"--arch {arch}: wheels are downloaded for x86_64 only (megaprov.cluster.wheelhouse.PLATFORMS)", "build the bundle for amd64"
        )
    index = contents.pytorch_index_url if contents.pytorch_source == "index" else None
    progress(f"wheels: {' '.join(requirements)} for CPython {dist.python}" + (f" (torch from {index})" if index else ""))
    found = wheelhouse.build(requirements, python_version=dist.python, index_url=index, cpu_only=contents.torch_build == "cpu")
    out.mkdir(parents=True, exist_ok=True)
    for wheel in sorted(found.glob("*.whl")):
        shutil.copyfile(wheel, out / wheel.name)


def build_git(contents: Contents, out: Path, progress: Progress = _quiet) -> dict[str, GitVersion]:
    """A bare mirror of each role's remote; the pinned ref must be in it."""
    versions: dict[str, GitVersion] = {}
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}
    for repo in contents.git:
        dest = out / f"{repo.name}.git"
        var = repo.field.replace("_version", "_repo")
        progress(f"git: {repo.name} from {repo.url} ({repo.ref})")
        local = ["--no-local"] if urllib.parse.urlsplit(repo.url).scheme in ("", "file") else []
        _run(
            ["git", "-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=60", "clone", "--quiet", "--mirror", *local, "--", repo.url, str(dest)],
            f"git clone {var}={repo.url}",
            f"check the network, or point {var} at a reachable mirror",
            env,
        )
        try:
            commit = _run(["git", "-C", str(dest), "rev-parse", "--verify", "--quiet", f"{repo.ref}^{{commit}}"], "git rev-parse", "", env).strip()
        except EnvironmentProblem:
            raise UsageError(
                f"{repo.field}={repo.ref}: {var}={repo.url} has no such tag or branch", f"set {repo.field} to a ref of the remote"
            ) from None
        shutil.rmtree(dest / "hooks", ignore_errors=True)  # sample hooks only; nothing runs them in a served mirror
        versions[repo.name] = GitVersion(ref=repo.ref, commit=commit)
    return versions


def build_sources(contents: Contents, out: Path, progress: Progress = _quiet) -> list[Path]:
    """The files the roles download by URL (enroot's .debs, pyxis's archive) into ``out``, each checked against the
    inventory's sha256 where it pins one; the .debs among them, whose Depends the apt part adds."""
    debs: list[Path] = []
    for download in contents.downloads:
        out.mkdir(parents=True, exist_ok=True)
        dest = out / download.name
        progress(f"sources: {download.name} from {download.url}")
        _fetch(download.url, dest, MAX_DOWNLOAD_BYTES)
        if download.sha256 and _sha256(out, download.name) != download.sha256:
            raise UsageError(
                f"{download.field}: {download.url} does not have the sha256 the inventory pins for {download.name}",
                f"fix {download.field} or its checksum in the inventory",
            )
        if download.name.endswith(".deb"):
            debs.append(dest)
    return debs


def image_file(repository: str) -> str:
    """The archive of REGISTRY/NAME:TAG in a bundle: images/ and the squashfs file's stem (readable, then a hash). Pure."""
    from megaprov.cluster import image

    return "images/" + image.squashfs_name(repository).removesuffix(".sqsh") + ".tar"


def build_images(references: Iterable[str], out: Path, progress: Progress = _quiet) -> dict[str, ImageEntry]:
    """Each image as a `podman save` archive (docker-archive, what `megaprov image pull --archive` loads), by the build
    machine's podman: the image it holds under that name, else pulled."""
    from megaprov.cluster import image

    found: dict[str, ImageEntry] = {}
    for reference in references:
        names = image.names(reference)
        rel = image_file(names.repository)
        out.mkdir(parents=True, exist_ok=True)
        hint = "check the reference and the network (podman pull), or `podman load` the image on this machine first"
        try:
            held = subprocess.run(["podman", "image", "exists", names.pull], capture_output=True, timeout=120, check=False).returncode == 0
        except FileNotFoundError:
            raise EnvironmentProblem("--image: podman is not installed here", "apt-get install podman (it pulls and saves images)") from None
        except subprocess.TimeoutExpired:
            raise EnvironmentProblem(
                f"--image {reference}: podman image exists did not answer in 120 s", "check podman on this machine (podman info)"
            ) from None
        if not held:
            progress(f"images: pulling {names.pull}")
            _run(["podman", "pull", "--quiet", names.pull], f"--image {reference}: podman pull", hint, timeout=IMAGE_SECONDS)
        progress(f"images: saving {names.pull} as {rel}")
        _run(
            ["podman", "save", "--quiet", "--format", "docker-archive", "--output", str(out.parent / rel), names.pull],
            f"--image {reference}: podman save",
            hint,
            timeout=IMAGE_SECONDS,
        )
        found[names.repository] = ImageEntry(file=rel)
    return found


def images_wanted(references: Iterable[str]) -> list[str]:
    """--image values, each a registry reference (not a squashfs), at most :data:`MAX_IMAGES`, each image once. Pure."""
    from megaprov.cluster import image

    wanted: dict[str, str] = {}
    for reference in references:
        ref = values.image_reference(reference, "--image")
        if ref.startswith("/"):
            raise UsageError(f"--image {ref} is a squashfs file", "give the registry reference it was imported from: the bundle carries the image")
        wanted.setdefault(image.names(ref).repository, ref)
    if len(wanted) > MAX_IMAGES:
        raise UsageError(f"--image is given {len(wanted)} images, more than {MAX_IMAGES}", "build one bundle per set of images")
    return list(wanted.values())


def _wheel_versions(directory: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for wheel in sorted(directory.glob("*.whl")):
        parts = wheel.name.split("-")
        out[_canonical(parts[0])] = parts[1]
    return out


def make_manifest(
    directory: Path, dist: Distribution, arch: str, git: dict[str, GitVersion], images: dict[str, ImageEntry] | None = None
) -> Manifest:
    """Hash every file under ``directory`` and record the versions; the manifest is not written. Pure but for reading."""
    from megaprov import __version__

    files = {}
    for name, info in sorted(walk(directory).items()):
        if name == MANIFEST:
            continue
        file_name(name, "bundle")
        files[name] = FileEntry(sha256=_sha256(directory, name), size=info.st_size)
    apt = {name: version for name, (version, _) in sorted(apt_index(directory).items())}
    return Manifest(
        format=FORMAT,
        created=datetime.now(UTC).replace(microsecond=0),
        megaprov=__version__,
        distribution=DistributionId(id=dist.id, version=dist.version, codename=dist.codename),
        arch=arch,  # type: ignore[arg-type]  # checked by bundle_facts
        python=dist.python,
        files=files,
        versions=Versions(apt=apt, wheels=_wheel_versions(directory / "wheels"), git=git),
        images=images or {},
    )


def manifest_json(manifest: Manifest) -> str:
    return json.dumps(manifest.model_dump(mode="json"), indent=1, sort_keys=True) + "\n"


def _output_dir(output: Path) -> None:
    if output.is_symlink() or (output.exists() and (not output.is_dir() or any(output.iterdir()))):
        raise UsageError(f"--dir {output} exists and is not an empty directory", "give a new directory (a bundle is never written over another)")
    if not output.parent.is_dir():
        raise UsageError(f"--dir {output}: {output.parent} does not exist", "create the parent directory first")


def collect(
    contents: Contents,
    output: Path,
    dist: Distribution,
    arch: str = "amd64",
    security: str | None = None,
    progress: Progress = _quiet,
    images: Iterable[str] = (),
) -> Built:
    """Collect ``contents`` into ``output`` (a new directory) with its manifest, and verify it. A failed build leaves
    nothing: the bundle is made in a temporary sibling and renamed into place."""
    _output_dir(output)
    wanted = images_wanted(images)
    security = dist.security if security is None else security
    if security:
        _url(security, "--security-mirror", ("http", "https", "file"))
    seconds: dict[str, float] = {}
    tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}-", dir=output.parent))
    try:
        work = Path(tempfile.mkdtemp(prefix="megaprov-bundle-"))
        try:
            mark = time.monotonic()
            debs = build_sources(contents, tmp / "sources", progress)
            seconds["sources"] = round(time.monotonic() - mark, 1)
            mark = time.monotonic()
            build_apt(contents, dist, arch, tmp / "apt", work, security, progress, debs)
            seconds["apt"] = round(time.monotonic() - mark, 1)
            mark = time.monotonic()
            build_wheels(contents, dist, arch, tmp / "wheels", progress)
            seconds["wheels"] = round(time.monotonic() - mark, 1)
            mark = time.monotonic()
            git = build_git(contents, tmp / "git", progress)
            seconds["git"] = round(time.monotonic() - mark, 1)
            mark = time.monotonic()
            carried = build_images(wanted, tmp / "images", progress)
            seconds["images"] = round(time.monotonic() - mark, 1)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        mark = time.monotonic()
        progress("manifest: sha256 of every file")
        manifest = make_manifest(tmp, dist, arch, git, carried)
        (tmp / MANIFEST).write_text(manifest_json(manifest))
        verify(tmp, contents=contents)  # what was built is what was asked for
        seconds["manifest"] = round(time.monotonic() - mark, 1)
        tmp.chmod(0o755)
        if output.exists():
            output.rmdir()
        tmp.rename(output)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return Built(
        directory=str(output),
        files=len(manifest.files),
        bytes=sum(f.size for f in manifest.files.values()),
        seconds=seconds,
        apt=sum(1 for n in manifest.files if n.endswith(".deb")),
        wheels=sum(1 for n in manifest.files if n.endswith(".whl")),
        git=sorted(git),
        sources=[d.name for d in contents.downloads],
        images=sorted(carried),
    )


def build(
    inventory: Path,
    output: Path,
    dist: Distribution,
    arch: str = "amd64",
    security: str | None = None,
    progress: Progress = _quiet,
    images: Iterable[str] = (),
) -> Built:
    """Resolve what the inventory fetches and collect it into ``output``, with the container ``images`` asked for."""
    _output_dir(output)  # before the minute of resolving
    images = images_wanted(images)
    began = time.monotonic()
    contents = resolve(inventory, dist, arch, progress)
    resolved = round(time.monotonic() - began, 1)
    built = collect(contents, output, dist, arch, security, progress, images)
    built.seconds = {"resolve": resolved, **built.seconds}
    return built


def image_archive(directory: Path, reference: str) -> Path:
    """``megaprov image pull IMAGE --bundle DIR``: the bundle's archive of the image, checked against the manifest
    (a plain file inside the bundle, its size and sha256) before it is loaded on the head."""
    from megaprov.cluster import image

    repository = image.names(reference).repository
    manifest = read_manifest(directory)
    entry = manifest.images.get(repository)
    if entry is None:
        carried = ", ".join(sorted(manifest.images)) or "none"
        raise BundleError(
            f"bundle {directory} carries no image {repository} (it carries: {carried})",
            f"build a bundle with it: megaprov bundle build -i INVENTORY --dir DIR --image {reference}",
        )
    fd = _open_file(directory, entry.file)
    if fd is None:
        raise BundleError(f"bundle {directory}: {entry.file}: missing or not a plain file", REBUILD)
    size = os.fstat(fd).st_size
    os.close(fd)
    if size != manifest.files[entry.file].size or _sha256(directory, entry.file) != manifest.files[entry.file].sha256:
        raise BundleError(f"bundle {directory}: {entry.file} differs from the manifest's size or sha256", f"the bundle was changed: {REBUILD}")
    return Path(os.path.abspath(directory)) / entry.file


# ---- bootstrap with a bundle

COPY_HINT = "copy the bundle to the head (rsync -a DIR/ HEAD:/srv/megaprov/bundle/) and set package_cache_bundle: /srv/megaprov/bundle"


def cache_role_takes_bundle(roles_dir: Path) -> bool:
    """Whether the collection's package cache role serves a bundle (its argument specs name package_cache_bundle)."""
    specs = roles_dir / "package_cache" / "meta" / "argument_specs.yml"
    return specs.is_file() and "package_cache_bundle:" in specs.read_text(encoding="utf-8")


def bootstrap_request(request: Any, directory: Path) -> Any:
    """``megaprov bootstrap --bundle DIR``: the bundle verified against its manifest and the inventory, then the
    bootstrap request with the package cache stage on and serving it. Raises before anything is applied."""
    import dataclasses

    from megaprov import paths
    from megaprov.cluster import inventory as inv

    verify(directory, request.inventory)
    if not cache_role_takes_bundle(paths.roles_dir()):
        raise EnvironmentProblem(
            f"--bundle {directory}: the bundle matches, but this collection has no package cache stage to serve it (role package_cache)",
            "install a megaprov whose collection has the package_cache role, or serve the bundle's apt/, wheels/ and git/ from your own mirrors",
        )
    loaded = inv.load(request.inventory, paths.roles_dir(), defaults=paths.cluster_defaults())
    extravars = dict(request.options.extravars)
    on_head = extravars.get("package_cache_bundle") or loaded.host_var(loaded.head, "package_cache_bundle")
    if not on_head:
        # The copy onto the head is not megaprov's yet: the operator puts it there and names it.
        raise UsageError(f"--bundle {directory}: package_cache_bundle (the bundle's directory on the head {loaded.head}) is not set", COPY_HINT)
    extravars.update({"megaprov_package_cache": True, "package_cache_bundle": values.absolute_path(on_head, "package_cache_bundle")})
    return dataclasses.replace(request, options=dataclasses.replace(request.options, extravars=extravars))
