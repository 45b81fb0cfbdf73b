"""The offline bundle: manifest model, verification refusals, the package set the collection resolves for an
inventory, and (slow) a real build against Debian's archive, PyPI and the fixture NVIDIA repository and git remote."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from megaprov.cluster import bundle, lab
from megaprov.errors import EnvironmentProblem, ExitCode, UsageError
from tests.helpers.bundle import DEBIAN, fake_bundle

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "ansible_collections" / "megaprov" / "cluster" / "roles"
PLAYBOOK = ROOT / "ansible_collections" / "megaprov" / "cluster" / "playbooks" / "bundle_contents.yml"


def contents(**changes) -> bundle.Contents:
    base = bundle.Contents(
        apt=(
            bundle.AptGroup("common_extra_packages", ("jq",)),
            bundle.AptGroup("nvidia_driver_branch", ("cuda-drivers-580",), "nvidia", "580.*"),
        ),
        wheels=(bundle.WheelGroup("pytorch_version", ("torch==2.13.0",), "pytorch"), bundle.WheelGroup("megatron_packages", ("six",))),
        git=(bundle.GitRepo("nccl-tests", "file:///fixtures/nccl-tests.git", "v2.17.1", "nccl_tests_version"),),
        torch_build="cpu",
    )
    return bundle.Contents(**{**base.__dict__, **changes})


def edit_manifest(directory: Path, change) -> None:
    path = directory / bundle.MANIFEST
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def refusal(directory: Path, **kwargs) -> str:
    with pytest.raises(UsageError) as exc:  # BundleError, or values' own for an unreadable manifest
        bundle.verify(directory, **kwargs)
    assert exc.value.exit_code == ExitCode.USAGE
    line = exc.value.one_line()
    assert "\n" not in line
    return line


# ---- the manifest model


def test_a_built_manifest_has_the_layout_the_cache_role_reads(tmp_path):
    fake_bundle(tmp_path / "b")
    data = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert set(data) == {"format", "created", "megaprov", "distribution", "arch", "python", "files", "versions", "images"}
    assert data["format"] == 1 and data["arch"] == "amd64" and data["python"] == "3.11"
    assert data["distribution"] == {"id": "debian", "version": "12", "codename": "bookworm"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", data["created"])
    assert data["files"]["wheels/six-1.17.0-py2.py3-none-any.whl"] == {
        "sha256": hashlib.sha256(b"six").hexdigest(),
        "size": 3,
    }
    assert data["versions"]["apt"] == {"jq": "1.6-2.1+deb12u3", "cuda-drivers-580": "580.105.08-1"}
    assert data["versions"]["wheels"] == {"torch": "2.13.0+cpu", "six": "1.17.0"}
    assert data["versions"]["git"] == {"nccl-tests": {"ref": "v2.17.1", "commit": "a" * 40}}
    assert "manifest.json" not in data["files"]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda d: d.update(format=2), "format=2: this megaprov reads format 1"),
        (lambda d: d.update(extra="x"), "extra: Extra inputs are not permitted"),
        (lambda d: d.update(arch="riscv64"), "arch: Input should be 'amd64' or 'arm64'"),
        (lambda d: d["files"]["apt/Packages.gz"].update(size="12"), "files.apt/Packages.gz.size: Input should be a valid integer"),
        (lambda d: d["files"]["apt/Packages.gz"].update(sha256="abc"), "files.apt/Packages.gz.sha256: String should match pattern"),
        (lambda d: d["files"]["apt/Packages.gz"].update(size=-1), "greater than or equal to 0"),
        (lambda d: d["versions"]["git"]["nccl-tests"].update(commit="HEAD"), "versions.git.nccl-tests.commit"),
        (lambda d: d["versions"]["git"].update({"evil": {"ref": "x", "commit": "b" * 40}}), "'evil' at 'x' is not a repository of the roles"),
        (lambda d: d["versions"]["apt"].update({"jq": "1.6; rm -rf /"}), "is not a name and version"),
    ],
)
def test_a_bad_manifest_is_one_line_naming_the_field(tmp_path, change, needle):
    directory = fake_bundle(tmp_path / "b")
    edit_manifest(directory, change)
    assert needle in refusal(directory)


@pytest.mark.parametrize(
    "name",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "apt/../../../etc/passwd",
        "apt//x.deb",
        "apt/./x.deb",
        "wheels/x.deb",
        "apt/sub/x.deb",
        "git/evil.git/HEAD",
        "manifest.json",
        "apt/x\n.deb",
        "apt/-rf.deb",
        "x" * 2000,
    ],
)
def test_a_manifest_naming_a_path_outside_the_layout_is_refused(tmp_path, name):
    directory = fake_bundle(tmp_path / "b")
    edit_manifest(directory, lambda d: d["files"].update({name: {"sha256": "0" * 64, "size": 1}}))
    line = refusal(directory)
    assert "manifest.json: files" in line


def test_a_manifest_too_large_or_too_deep_is_refused(tmp_path, monkeypatch):
    directory = fake_bundle(tmp_path / "b")
    (directory / "manifest.json").write_text("[" * 100 + "]" * 100)
    assert "nested deeper" in refusal(directory)
    monkeypatch.setattr(bundle, "MAX_MANIFEST_BYTES", 10)
    fake_bundle(tmp_path / "c")
    with pytest.raises(UsageError, match="manifest.json is 1,[0-9]{3} bytes: keep it under 10 bytes"):
        bundle.verify(tmp_path / "c")


# ---- verification against the files


def test_an_untouched_bundle_verifies(tmp_path):
    directory = fake_bundle(tmp_path / "b")
    verified = bundle.verify(directory)
    assert verified.files == 7 and verified.bytes == sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and p.name != "manifest.json")


def test_a_changed_file_of_the_same_size_is_refused_for_its_checksum(tmp_path):
    directory = fake_bundle(tmp_path / "b")
    (directory / "wheels" / "six-1.17.0-py2.py3-none-any.whl").write_bytes(b"SIX")
    line = refusal(directory)
    assert "wheels/six-1.17.0-py2.py3-none-any.whl: sha256 differs from the manifest's" in line
    assert "rebuild it with `megaprov bundle build" in line


def test_a_missing_file_is_refused(tmp_path):
    directory = fake_bundle(tmp_path / "b")
    (directory / "apt" / "jq_1.6-2.1+deb12u3_amd64.deb").unlink()
    assert "apt/jq_1.6-2.1+deb12u3_amd64.deb: listed in the manifest but missing" in refusal(directory)


def test_an_extra_file_is_refused(tmp_path):
    directory = fake_bundle(tmp_path / "b")
    (directory / "apt" / "evil_1_amd64.deb").write_bytes(b"x")
    assert "'apt/evil_1_amd64.deb': not in the manifest (an extra file)" in refusal(directory)


def test_a_size_that_differs_is_refused_before_hashing(tmp_path):
    directory = fake_bundle(tmp_path / "b")
    (directory / "apt" / "Packages.gz").write_bytes(b"short")
    assert "apt/Packages.gz: 5 bytes, the manifest says" in refusal(directory)


def test_every_problem_is_a_detail_line(tmp_path):
    directory = fake_bundle(tmp_path / "b")
    (directory / "apt" / "jq_1.6-2.1+deb12u3_amd64.deb").unlink()
    (directory / "wheels" / "extra-1-py3-none-any.whl").write_bytes(b"x")
    with pytest.raises(bundle.BundleError) as exc:
        bundle.verify(directory)
    assert len(exc.value.details) == 1 and "extra" in exc.value.details[0]


@pytest.mark.parametrize("target", ["/etc/passwd", "../outside"])
def test_a_link_in_the_bundle_is_refused_even_where_the_manifest_lists_it(tmp_path, target):
    directory = fake_bundle(tmp_path / "b")
    wheel = directory / "wheels" / "six-1.17.0-py2.py3-none-any.whl"
    wheel.unlink()
    wheel.symlink_to(target)
    assert "'wheels/six-1.17.0-py2.py3-none-any.whl' is a link" in refusal(directory)


def test_a_linked_manifest_or_missing_directory_is_refused(tmp_path):
    assert "no such directory" in refusal(tmp_path / "nothing")
    directory = fake_bundle(tmp_path / "b")
    (directory / "manifest.json").rename(tmp_path / "elsewhere.json")
    (directory / "manifest.json").symlink_to(tmp_path / "elsewhere.json")
    assert "manifest.json: missing or not a plain file" in refusal(directory)


def test_versions_must_name_files_of_the_bundle(tmp_path):
    directory = fake_bundle(tmp_path / "b")
    edit_manifest(directory, lambda d: d["versions"]["wheels"].update(torch="2.12.0"))
    assert "versions.wheels: torch 2.12.0 has no wheel in wheels/" in refusal(directory)


# ---- verification against what the inventory asks for


def test_a_bundle_holding_what_the_inventory_asks_for_verifies(tmp_path):
    bundle.verify(fake_bundle(tmp_path / "b"), contents=contents())


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            {"wheels": (bundle.WheelGroup("pytorch_version", ("torch==2.12.0",), "pytorch"),)},
            "pytorch_version=2.12.0: the bundle has torch 2.13.0+cpu",
        ),
        (
            {"wheels": (bundle.WheelGroup("megatron_version", ("megatron-core==0.16.1",)),)},
            "megatron_version: the bundle has no wheel of megatron-core",
        ),
        ({"torch_build": "cuda"}, "pytorch_build: the nodes have GPUs, the bundle has torch 2.13.0+cpu (the CPU build)"),
        (
            {"git": (bundle.GitRepo("nccl-tests", "u", "v2.18.0", "nccl_tests_version"),)},
            "nccl_tests_version=v2.18.0: the bundle has nccl-tests at v2.17.1",
        ),
        (
            {"git": (bundle.GitRepo("Megatron-LM", "u", "core_v0.16.1", "megatron_version"),)},
            "megatron_version: the bundle has no Megatron-LM repository",
        ),
        (
            {"apt": (bundle.AptGroup("cuda_version", ("cuda-toolkit-13-0",), "nvidia"),)},
            "cuda_version: the bundle has no apt package cuda-toolkit-13-0",
        ),
        (
            {"apt": (bundle.AptGroup("nvidia_driver_version", ("cuda-drivers-580",), "nvidia", "580.95.05-*"),)},
            "nvidia_driver_version: the inventory asks for cuda-drivers-580 580.95.05-*, the bundle has 580.105.08-1",
        ),
    ],
)
def test_a_bundle_for_other_versions_is_refused_naming_the_variable(tmp_path, change, needle):
    line = refusal(fake_bundle(tmp_path / "b"), contents=contents(**change))
    assert "does not match" in line and needle in line


def test_a_virtual_package_is_found_through_provides(tmp_path):
    bundle.verify(fake_bundle(tmp_path / "b"), contents=contents(apt=(bundle.AptGroup("f", ("cuda-drivers-any",)),)))


def test_version_checks_are_pure():
    manifest = bundle.parse_manifest(
        json.dumps(
            {
                "format": 1,
                "created": "2026-01-01T00:00:00Z",
                "megaprov": "0.2.0",
                "distribution": {"id": "debian", "version": "12", "codename": "bookworm"},
                "arch": "amd64",
                "python": "3.11",
                "files": {},
                "versions": {"apt": {"nvidia-driver": "580.105.08-1"}, "wheels": {"torch": "2.13.0+cu130", "megatron_core": "0.16.1"}, "git": {}},
            }
        )
    )
    asks = contents(
        apt=(bundle.AptGroup("nvidia_driver_branch", ("nvidia-driver",), "nvidia", "580.*"),),
        wheels=(bundle.WheelGroup("pytorch_version", ("torch==2.13.0",)), bundle.WheelGroup("megatron_version", ("megatron-core==0.16.1",))),
        git=(),
        torch_build="cuda",
    )
    assert bundle.check_versions(manifest, asks) == []
    assert bundle.check_versions(manifest, contents(**{**asks.__dict__, "torch_build": "cpu"})) == [
        "pytorch_build: the nodes need torch's CPU build, the bundle has torch 2.13.0+cu130"
    ]
    branch = bundle.AptGroup("nvidia_driver_branch", ("nvidia-driver",), "nvidia", "590.*")
    assert bundle.check_versions(manifest, contents(**{**asks.__dict__, "apt": (branch,)})) == [
        "nvidia_driver_branch: the inventory asks for nvidia-driver 590.*, the bundle has 580.105.08-1"
    ]


# ---- the answers of bundle_contents.yml, typed


def answer(**changes):
    base = {
        "host": "gpu1",
        "apt": [
            {"field": "common_extra_packages", "names": ["jq"]},
            {"field": "nccl_version", "names": ["libnccl2"], "source": "nvidia", "version": "2.27.7-1+cuda13.0"},
        ],
        "wheels": [{"field": "pytorch_version", "requirements": ["torch==2.13.0"], "index": "pytorch"}],
        "git": [{"name": "nccl-tests", "url": "https://github.com/NVIDIA/nccl-tests.git", "ref": "v2.17.1", "field": "nccl_tests_version"}],
        "sources": {
            "debian_mirror": "http://deb.debian.org/debian",
            "nvidia_repo_url": "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/",
            "nvidia_keyring_url": "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb",
            "nvidia_keyring": "/usr/share/keyrings/cuda-archive-keyring.gpg",
            "nvidia_pin_packages": ["nvidia-*"],
            "nvidia_pin": "580.*",
            "pytorch_source": "index",
            "pytorch_index_url": "https://download.pytorch.org/whl/cu130",
            "pytorch_cpu": False,
            "python": "python3",
        },
        "refused": [],
    }
    base.update(changes)
    return base


def test_answers_are_merged_and_typed():
    found = bundle.parse_contents([answer(), answer(host="gpu2"), answer(host="head1", wheels=[], git=[])])
    assert found.torch_build == "cuda" and found.nvidia_pin == "580.*"
    assert bundle.apt_request(found) == ["jq", "libnccl2=2.27.7-1+cuda13.0"]
    assert found.requirements() == ("torch==2.13.0",)
    assert [r.name for r in found.git] == ["nccl-tests"]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            {"apt": [{"field": "common_extra_packages", "names": ["-o=APT::Get::Foo"]}]},
            "common_extra_packages (host gpu1)='-o=APT::Get::Foo' is not a value",
        ),
        ({"wheels": [{"field": "pytorch_packages", "requirements": ["--index-url=http://evil"]}]}, "pytorch_packages (host gpu1)"),
        ({"git": [{"name": "nccl-tests", "url": "ext::sh -c evil", "ref": "v1", "field": "nccl_tests_version"}]}, "nccl_tests_repo (host gpu1)"),
        (
            {"git": [{"name": "nccl-tests", "url": "https://x/y.git", "ref": "--upload-pack=evil", "field": "nccl_tests_version"}]},
            "nccl_tests_version",
        ),
        ({"refused": ["infiniband_ofed_repo"]}, "infiniband_ofed_repo is set (host gpu1): a bundle does not carry that source yet"),
    ],
)
def test_hostile_or_unsupported_answers_are_refused(change, needle):
    with pytest.raises(UsageError) as exc:
        bundle.parse_contents([answer(**change)])
    assert needle in exc.value.one_line()


def test_hosts_that_disagree_are_refused():
    other = answer(host="gpu2", wheels=[{"field": "pytorch_version", "requirements": ["torch==2.12.0"], "index": "pytorch"}])
    with pytest.raises(UsageError, match="pytorch_version asks for torch==2.12.0 and torch==2.13.0 on different hosts"):
        bundle.parse_contents([answer(), other])
    cpu = answer(host="gpu2", sources={**answer()["sources"], "pytorch_cpu": True})
    with pytest.raises(UsageError, match="hosts gpu1 and gpu2 differ in pytorch_build"):
        bundle.parse_contents([answer(), cpu])


# ---- what the builder runs, rendered


def test_the_private_apt_root_has_its_own_sources_status_and_architecture(tmp_path):
    sources = bundle.apt_sources(DEBIAN, "amd64", "http://mirror/debian", "http://deb.debian.org/debian-security", "file:///fx/apt/", "/k/cuda.gpg")
    keyed = "deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]"
    parts = "main contrib non-free non-free-firmware"
    assert sources.splitlines() == [
        f"{keyed} http://mirror/debian bookworm {parts}",
        f"{keyed} http://mirror/debian bookworm-updates {parts}",
        f"{keyed} http://deb.debian.org/debian-security bookworm-security {parts}",
        "deb [arch=amd64 signed-by=/k/cuda.gpg] copy:///fx/apt/ /",
    ]
    config = bundle.apt_config(tmp_path / "root", tmp_path / "out", "arm64")
    assert f'Dir::State::status "{tmp_path}/root/var/lib/dpkg/status";' in config
    assert f'Dir::Cache::archives "{tmp_path}/out/";' in config
    assert 'APT::Architectures { "arm64"; };' in config and 'APT::Install-Recommends "false";' in config


@pytest.mark.parametrize(
    ("text", "key"), [("debian-12", "debian-12"), ("bookworm", "debian-12"), ("noble", "ubuntu-24.04"), ("ubuntu:22.04", "ubuntu-22.04")]
)
def test_distributions_by_name_or_codename(text, key):
    assert bundle.distribution(text).key == key


def test_an_unknown_distribution_or_architecture_is_one_line():
    with pytest.raises(UsageError, match="--distribution 'centos-7' is not one a bundle can be built for: use debian-12"):
        bundle.distribution("centos-7")
    with pytest.raises(UsageError, match="--arch 'i386'"):
        bundle.bundle_facts(DEBIAN, "i386")


def test_output_must_be_a_new_directory(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(UsageError, match="exists and is not an empty directory"):
        bundle.collect(contents(), tmp_path / "full", DEBIAN)
    with pytest.raises(UsageError, match="does not exist"):
        bundle.collect(contents(), tmp_path / "no" / "such", DEBIAN)


# ---- the package set, resolved by Ansible from the collection for real inventories


def apt_names(found: bundle.Contents) -> dict[str, tuple[str, ...]]:
    return {g.field: g.names for g in found.apt}


@pytest.fixture(scope="module")
def example_set() -> bundle.Contents:
    return bundle.resolve(ROOT / "inventories" / "example" / "inventory.ini", DEBIAN, "amd64")


def test_the_example_inventory_fetches_the_gpu_stack(example_set):
    apt = apt_names(example_set)
    assert apt["nvidia_driver_branch"] == ("cuda-drivers-580", "nvidia-kernel-open-dkms", "nvidia-persistenced")
    assert apt["cuda_version"] == ("cuda-toolkit-13-0",)
    assert apt["nvidia_driver_kernel_headers"] == ("linux-headers-amd64",)  # the current kernel's headers on a fresh node
    assert apt["nfs_server_implementation"] == ("nfs-kernel-server",) and "chrony" in apt["common_extra_packages"]
    assert "openmpi-bin" in apt["nccl_mpi_packages"] and "infiniband_packages" in apt
    assert "megaprov_scheduler" not in apt  # Slurm is off in the example
    assert example_set.torch_build == "cuda" and example_set.pytorch_index_url == "https://download.pytorch.org/whl/cu130"
    assert "torch==2.13.0" in example_set.requirements() and "megatron-core==0.16.1" in example_set.requirements()
    assert [(r.name, r.ref) for r in example_set.git] == [("Megatron-LM", "core_v0.16.1"), ("nccl-tests", "v2.17.1")]
    assert example_set.nvidia_repo_url == "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
    assert example_set.nvidia_pin == "580.*"


def test_the_lab_inventory_fetches_the_cpu_stack_and_slurm(tmp_path):
    members = [lab.Node(f"node{i}", f"c{i}", f"10.90.1.{10 + i}", "running") for i in (1, 2, 3)]
    text, group_vars = lab.render_inventory("t", members, tmp_path / "key", tmp_path / "known_hosts", str(tmp_path / "shared"))
    (tmp_path / "inventory.ini").write_text(text)
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text(group_vars)
    found = bundle.resolve(tmp_path / "inventory.ini", DEBIAN, "amd64")
    apt = apt_names(found)
    assert "nvidia_driver_branch" not in apt and "cuda_version" not in apt and not found.nvidia_repo_url  # GPU-less nodes
    assert apt["nfs_server_implementation"] == ("nfs-ganesha", "nfs-ganesha-vfs") and apt["nfs_client_mode"] == ("libnfs-utils",)
    assert set(apt["megaprov_scheduler"]) == {"munge", "slurmctld", "slurm-client", "slurmd", "libpmix-dev"}
    # the lab checks out Megatron-LM's real tree and builds its dataset helpers
    assert apt["megatron_checkout"] == ("git", "build-essential", "python3-dev") and [r.name for r in found.git] == ["Megatron-LM", "nccl-tests"]
    assert found.torch_build == "cpu" and found.pytorch_source == "wheelhouse"
    assert "torch==2.13.0" in found.requirements()


def test_a_containers_inventory_fetches_the_toolkit_enroot_and_pyxis(tmp_path):
    """bundle_contents.yml with megaprov_containers and Slurm: NVIDIA's toolkit packages at the pinned version from its
    repository (GPU nodes), podman, enroot's release .debs and pyxis's archive by the URLs the roles download them from,
    with the inventory's checksums."""
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[head]\nhead01 ansible_host=10.0.0.1\n[gpu_nodes]\ngpu01 ansible_host=10.0.0.2\n")
    (tmp_path / "group_vars").mkdir()
    sha = "a" * 64
    (tmp_path / "group_vars" / "all.yml").write_text(
        "megaprov_containers: true\nmegaprov_scheduler: slurm\nenroot_base_url: https://mirror.example/enroot/\n"
        f"enroot_checksums: {{enroot_4.1.2-1_amd64.deb: '{sha}'}}\n"
    )
    found = bundle.resolve(inventory, DEBIAN, "amd64")
    toolkit = next(g for g in found.apt if g.source == "toolkit")
    assert (toolkit.field, toolkit.version) == ("container_toolkit_version", "1.18.1-1")
    assert set(toolkit.names) == {"nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"}
    assert found.toolkit_repo_url == "https://nvidia.github.io/libnvidia-container/stable/deb/amd64/"
    assert found.toolkit_key_url == "https://nvidia.github.io/libnvidia-container/gpgkey"
    assert "nvidia-container-toolkit=1.18.1-1" in bundle.apt_request(found)
    apt = apt_names(found)
    assert "podman" in apt["container_toolkit_podman_packages"] and "libslurm-dev" in apt["megaprov_containers"]
    assert [(d.name, d.url, d.field, d.sha256) for d in found.downloads] == [
        ("enroot+caps_4.1.2-1_amd64.deb", "https://mirror.example/enroot/enroot+caps_4.1.2-1_amd64.deb", "enroot_version", ""),
        ("enroot_4.1.2-1_amd64.deb", "https://mirror.example/enroot/enroot_4.1.2-1_amd64.deb", "enroot_version", sha),
        ("pyxis-0.24.0.tar.gz", "https://github.com/NVIDIA/pyxis/archive/refs/tags/v0.24.0.tar.gz", "pyxis_version", ""),
    ]
    # without Slurm: the toolkit and podman, no enroot or pyxis; without the stage: none of it
    (tmp_path / "group_vars" / "all.yml").write_text("megaprov_containers: true\n")
    systemd_only = bundle.resolve(inventory, DEBIAN, "amd64")
    assert not systemd_only.downloads and "megaprov_containers" not in apt_names(systemd_only) and systemd_only.toolkit_repo_url
    (tmp_path / "group_vars" / "all.yml").write_text("megaprov_scheduler: slurm\n")
    off = bundle.resolve(inventory, DEBIAN, "amd64")
    assert not off.downloads and not off.toolkit_repo_url and not any(g.source == "toolkit" for g in off.apt)


def test_downloads_are_typed_and_hosts_must_agree():
    enroot = {"field": "enroot_version", "names": ["enroot_4.1.2-1_amd64.deb"], "base_url": "https://m/e/", "checksums": {}}
    found = bundle.parse_contents([answer(downloads=[enroot])])
    assert found.downloads == (bundle.Download("enroot_4.1.2-1_amd64.deb", "https://m/e/enroot_4.1.2-1_amd64.deb", "enroot_version"),)
    other = {**enroot, "base_url": "https://other/e/"}
    with pytest.raises(UsageError, match="hosts gpu1 and gpu2 differ in enroot_4.1.2-1_amd64.deb source"):
        bundle.parse_contents([answer(downloads=[enroot]), answer(host="gpu2", downloads=[other])])
    for bad, needle in (
        ({**enroot, "names": ["../etc/passwd.deb"]}, "enroot_version (host gpu1)='../etc/passwd.deb' is not a value a bundle can carry"),
        ({**enroot, "names": ["enroot.sh"]}, "is not a .deb or .tar.gz"),
        ({**enroot, "base_url": "ftp://m/e/"}, "is not a http, https, file URL"),
        ({**enroot, "checksums": {"enroot_4.1.2-1_amd64.deb": "abc"}}, "enroot_version checksum of enroot_4.1.2-1_amd64.deb"),
        ({**enroot, "checksums": ["x"]}, "are not a mapping of file name to sha256"),
    ):
        with pytest.raises(UsageError) as exc:
            bundle.parse_contents([answer(downloads=[bad])])
        assert needle in exc.value.one_line()


def test_the_toolkit_repository_is_a_flat_source_of_its_own_key(tmp_path):
    sources = bundle.apt_sources(DEBIAN, "amd64", "http://m/debian", "", "", "", "file:///fx/stable/deb/amd64/", "/k/toolkit.asc")
    assert sources.splitlines()[-1] == "deb [arch=amd64 signed-by=/k/toolkit.asc] copy:///fx/stable/deb/amd64/ /"
    wanted = contents(apt=(bundle.AptGroup("container_toolkit_version", ("nvidia-container-toolkit",), "toolkit", "1.18.1-1"),))
    with pytest.raises(UsageError, match="container_toolkit_repo_url or container_toolkit_key_url is empty"):
        bundle._toolkit_key(wanted, tmp_path / "k.asc", lambda _: None)
    (tmp_path / "gpgkey").write_text("<html>not found</html>")
    keyed = contents(**{**wanted.__dict__, "toolkit_repo_url": "file:///fx/", "toolkit_key_url": f"file://{tmp_path}/gpgkey"})
    with pytest.raises(UsageError, match="is not an ASCII-armoured OpenPGP key: point it at the repository's gpgkey"):
        bundle._toolkit_key(keyed, tmp_path / "k.asc", lambda _: None)
    (tmp_path / "gpgkey").write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nabc\n-----END PGP PUBLIC KEY BLOCK-----\n")
    assert bundle._toolkit_key(keyed, tmp_path / "k.asc", lambda _: None) == str(tmp_path / "k.asc")
    assert bundle._toolkit_key(contents(), tmp_path / "none.asc", lambda _: None) == "" and not (tmp_path / "none.asc").exists()


def test_a_download_with_another_checksum_is_refused_naming_the_field(tmp_path):
    (tmp_path / "enroot_4.1.2-1_amd64.deb").write_bytes(b"deb")
    url = f"file://{tmp_path}/enroot_4.1.2-1_amd64.deb"
    right = hashlib.sha256(b"deb").hexdigest()
    good = contents(downloads=(bundle.Download("enroot_4.1.2-1_amd64.deb", url, "enroot_version", right),))
    assert bundle.build_sources(good, tmp_path / "out") == [tmp_path / "out" / "enroot_4.1.2-1_amd64.deb"]
    bad = contents(downloads=(bundle.Download("enroot_4.1.2-1_amd64.deb", url, "enroot_version", "b" * 64),))
    with pytest.raises(UsageError, match=r"enroot_version: file://.* does not have the sha256 the inventory pins for enroot_4.1.2-1_amd64.deb"):
        bundle.build_sources(bad, tmp_path / "out2")


def with_sources_and_image(directory: Path) -> Path:
    fake_bundle(directory)
    (directory / "sources").mkdir()
    (directory / "sources" / "enroot_4.1.2-1_amd64.deb").write_bytes(b"enroot deb")
    (directory / "sources" / "pyxis-0.24.0.tar.gz").write_bytes(b"pyxis")
    (directory / "images").mkdir()
    rel = bundle.image_file("nvcr.io/nvidia/pytorch:25.01-py3")
    (directory / rel).write_bytes(b"image archive")
    git = bundle.read_manifest(directory).versions.git
    manifest = bundle.make_manifest(directory, DEBIAN, "amd64", dict(git), {"nvcr.io/nvidia/pytorch:25.01-py3": bundle.ImageEntry(file=rel)})
    (directory / bundle.MANIFEST).write_text(bundle.manifest_json(manifest))
    return directory


def test_sources_and_images_are_bundle_files_and_checked(tmp_path):
    b = with_sources_and_image(tmp_path / "b")
    rel = bundle.image_file("nvcr.io/nvidia/pytorch:25.01-py3")
    assert rel.startswith("images/nvcr.io_nvidia_pytorch_25.01-py3-") and rel.endswith(".tar")
    assert bundle.verify(b).files == 10  # the fake bundle's 7, two sources, one image
    manifest = bundle.read_manifest(b)

    def problems(name: str, field: str, sha256: str = "") -> list[str]:
        return bundle.check_versions(manifest, contents(apt=(), wheels=(), downloads=(bundle.Download(name, f"https://m/{name}", field, sha256),)))

    assert problems("enroot_4.1.2-1_amd64.deb", "enroot_version") == []
    assert problems("enroot_4.1.3-1_amd64.deb", "enroot_version") == ["enroot_version: the bundle has no sources/enroot_4.1.3-1_amd64.deb"]
    assert problems("pyxis-0.24.0.tar.gz", "pyxis_version", "c" * 64) == [
        "pyxis_version: the inventory's sha256 of pyxis-0.24.0.tar.gz is not the bundle's"
    ]
    # the image's archive: found by any spelling of the reference, checked against the manifest
    assert bundle.image_archive(b, "nvcr.io/nvidia/pytorch:25.01-py3") == b.resolve() / rel
    with pytest.raises(bundle.BundleError, match=r"carries no image docker.io/library/ubuntu:22.04 \(it carries: nvcr.io/nvidia/pytorch:25.01-py3\)"):
        bundle.image_archive(b, "ubuntu:22.04")
    (b / rel).write_bytes(b"image archivX")
    with pytest.raises(bundle.BundleError, match="differs from the manifest's size or sha256"):
        bundle.image_archive(b, "nvcr.io/nvidia/pytorch:25.01-py3")
    assert "sha256 differs" in refusal(b)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda d: d["images"].update({"not a ref": d["images"]["nvcr.io/nvidia/pytorch:25.01-py3"]}), "images: 'not a ref' is not an image's"),
        (lambda d: d["images"].update({"ubuntu:22.04": d["images"]["nvcr.io/nvidia/pytorch:25.01-py3"]}), "images: 'ubuntu:22.04' is not an image's"),
        (lambda d: d["images"]["nvcr.io/nvidia/pytorch:25.01-py3"].update(file="apt/Packages.gz"), "is not one of the manifest's images/ files"),
        (lambda d: d["images"]["nvcr.io/nvidia/pytorch:25.01-py3"].update(file="images/other.tar"), "is not one of the manifest's images/ files"),
        (lambda d: d["images"].clear(), "an image archive the manifest's images do not name"),
        (lambda d: d["files"].update({"sources/x.sh": d["files"]["sources/pyxis-0.24.0.tar.gz"]}), "is not a bundle file"),
        (lambda d: d["files"].update({"images/a/b.tar": d["files"]["sources/pyxis-0.24.0.tar.gz"]}), "is not a bundle file"),
    ],
)
def test_a_manifest_with_a_wrong_image_or_source_entry_is_refused(tmp_path, change, needle):
    b = with_sources_and_image(tmp_path / "b")
    edit_manifest(b, change)
    assert needle in refusal(b)


def test_image_flags_are_checked_before_anything_is_built(tmp_path):
    assert bundle.images_wanted(["nvcr.io/nvidia/pytorch:25.01-py3", "docker.io/library/ubuntu:22.04", "ubuntu:22.04"]) == [
        "nvcr.io/nvidia/pytorch:25.01-py3",
        "docker.io/library/ubuntu:22.04",
    ]
    for bad, needle in (
        (["/shared/images/x.sqsh"], "--image /shared/images/x.sqsh is a squashfs file"),
        (["nvcr.io/nvidia/pytorch:25.01 py3"], "--image"),
        ([f"r.io/i{n}:1" for n in range(bundle.MAX_IMAGES + 1)], f"more than {bundle.MAX_IMAGES}"),
    ):
        with pytest.raises(UsageError) as exc:
            bundle.images_wanted(bad)
        assert needle in exc.value.one_line()
    with pytest.raises(UsageError, match="is a squashfs file"):
        bundle.collect(contents(), tmp_path / "new", DEBIAN, images=["/shared/images/x.sqsh"])
    assert not (tmp_path / "new").exists()


# Install lists the playbook does not name, each with the reason.
EXPLAINED = {
    "{{ apex_dir }}": "apex is built from its checkout, the bundle's git/apex.git: nothing is downloaded",
    "{{ infiniband_ofed_prerequisites }}": "DOCA-OFED (infiniband_ofed_repo) is refused by bundle build",
    "{{ __megatron_requirements }}": "listed by its parts: megatron_core_version, megatron_packages, megatron_build_requirements",
    "megatron_transformer_engine_spec": "megatron_transformer_engine is refused by bundle build",
    "grafana_package": "Grafana comes from grafana_apt_repo, which a bundle does not carry: a mirror, or '' (dashboards only)",
}


def test_every_install_list_of_the_roles_is_named_in_the_bundle_playbook():
    """A role that installs a new list must be added to bundle_contents.yml, or a bundle would miss it."""
    playbook = PLAYBOOK.read_text()
    assert "{{ megatron_packages if" in playbook and "'megatron-core==' ~ megatron_core_version" in playbook
    missing = []
    for tasks in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in yaml.safe_load(tasks.read_text()) or []:
            for module in ("megaprov.cluster.apt", "ansible.builtin.apt", "ansible.builtin.pip", "megaprov.cluster.uv_pip"):
                args = task.get(module) if isinstance(task, dict) else None
                name = args.get("name") if isinstance(args, dict) else None
                if name is None or tasks.parent.parent.name == "package_cache" or any(key in str(name) for key in EXPLAINED):
                    continue
                words = set(re.findall(r"[a-z_][a-z0-9_]+", str(name))) - {"if", "else", "map", "list", "unique", "regex_replace", "name", "in"}
                listed = {w for w in words if w.startswith("__") or "_" in w} or words
                if not any(w in playbook for w in listed):
                    missing.append(f"{tasks.relative_to(ROLES)}: {task.get('name')}: {name}")
    assert not missing, missing


# ---- a real, small build (network: Debian's archive and PyPI; NVIDIA's repository and git remotes are fixtures)


@pytest.mark.slow
def test_a_small_bundle_is_built_and_verified(tmp_path):
    from tests.fixtures import build as fixtures

    if shutil.which("apt-get") is None or shutil.which("dpkg-scanpackages") is None:
        pytest.skip("needs apt-get and dpkg-scanpackages (dpkg-dev)")
    fx = fixtures.build()
    wanted = bundle.Contents(
        apt=(bundle.AptGroup("common_extra_packages", ("jq",)), bundle.AptGroup("cuda_version", ("cuda-toolkit-12-6",), "nvidia")),
        wheels=(bundle.WheelGroup("megatron_packages", ("six",)),),
        git=(bundle.GitRepo("nccl-tests", f"file://{fx}/git/nccl-tests.git", "v2.17.1", "nccl_tests_version"),),
        debian_mirror="http://deb.debian.org/debian",
        nvidia_repo_url=f"file://{fx}/apt/",
        nvidia_keyring_url=f"file://{fx}/apt/cuda-keyring_1.1-1_all.deb",
        nvidia_keyring="/usr/share/keyrings/cuda-archive-keyring.gpg",
    )
    try:
        built = bundle.collect(wanted, tmp_path / "bundle", DEBIAN, "amd64")
    except EnvironmentProblem as exc:
        pytest.skip(f"no network to Debian's archive or PyPI: {exc}")
    out = tmp_path / "bundle"
    names = sorted(p.name for p in (out / "apt").iterdir())
    assert "jq_1.6-2.1+deb12u3_amd64.deb" in names or any(n.startswith("jq_") for n in names)
    assert any(n.startswith("libc6_") for n in names)  # the closure for a fresh node: from an empty dpkg status
    assert any(n.startswith("cuda-nvcc-12-6_") for n in names) and "cuda-keyring_1.1-1_all.deb" in names
    assert [p.name for p in (out / "wheels").iterdir()] == ["six-1.17.0-py2.py3-none-any.whl"]
    assert built.git == ["nccl-tests"] and built.apt == len([n for n in names if n.endswith(".deb")])
    verified = bundle.verify(out, contents=wanted)
    assert verified.files == built.files
    commit = json.loads((out / "manifest.json").read_text())["versions"]["git"]["nccl-tests"]["commit"]
    tag = subprocess.run(
        ["git", "-C", str(out / "git" / "nccl-tests.git"), "rev-parse", "v2.17.1^{commit}"], capture_output=True, text=True, check=True
    )
    assert tag.stdout.strip() == commit
    # apt on a node reads the flat repository: Packages.gz names every .deb with its SHA256
    index = gzip.decompress((out / "apt" / "Packages.gz").read_bytes()).decode()
    assert index.count("\nSHA256: ") + index.startswith("SHA256: ") == built.apt
    (out / "apt" / names[0]).write_bytes(b"tampered")
    with pytest.raises(bundle.BundleError):
        bundle.verify(out)


@pytest.mark.slow
def test_a_containers_bundle_carries_the_toolkit_enroot_pyxis_and_an_image(tmp_path):
    """A real build of the containers stage's parts: NVIDIA's container toolkit from its (fixture) repository at the
    pinned version, enroot's release .debs and pyxis's archive as sources/ with what enroot depends on in apt/ (from
    Debian's archive), and an image saved by this machine's podman, which `image pull --bundle` then finds."""
    from tests.fixtures import build as fixtures
    from tests.fixtures import containers

    if shutil.which("apt-get") is None or shutil.which("dpkg-scanpackages") is None or shutil.which("podman") is None:
        pytest.skip("needs apt-get, dpkg-scanpackages (dpkg-dev) and podman")
    fx = fixtures.build() / "containers"
    ref = "registry.megaprov.test/bundle/tiny:1"
    layer = tmp_path / "layer.tar"
    (tmp_path / "hello").write_text("from the bundle\n")
    subprocess.run(["tar", "-cf", layer, "-C", tmp_path, "hello"], check=True)
    subprocess.run(["podman", "import", "--quiet", layer, ref], check=True, capture_output=True)
    toolkit = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1")
    enroot = [f"{name}_{containers.ENROOT_VERSION}-1_amd64.deb" for name in ("enroot", "enroot+caps")]
    wanted = bundle.Contents(
        apt=(bundle.AptGroup("megaprov_containers", ("pigz",)), bundle.AptGroup("container_toolkit_version", toolkit, "toolkit", "1.18.1-1")),
        debian_mirror="http://deb.debian.org/debian",
        toolkit_repo_url=f"file://{fx}/nvidia-container/stable/deb/amd64/",
        toolkit_key_url=f"file://{fx}/nvidia-container/gpgkey",
        downloads=(
            *(bundle.Download(name, f"file://{fx}/enroot/{name}", "enroot_version") for name in enroot),
            bundle.Download(f"pyxis-{containers.PYXIS_VERSION}.tar.gz", f"file://{fx}/pyxis/v{containers.PYXIS_VERSION}.tar.gz", "pyxis_version"),
        ),
    )
    try:
        built = bundle.collect(wanted, tmp_path / "bundle", DEBIAN, "amd64", images=[ref])
    except EnvironmentProblem as exc:
        pytest.skip(f"no network to Debian's archive: {exc}")
    finally:
        subprocess.run(["podman", "rmi", "--force", ref], capture_output=True, check=False)
    out = tmp_path / "bundle"
    apt = {p.name.split("_")[0]: p.name.split("_")[1] for p in (out / "apt").glob("*.deb")}
    assert {name: apt.get(name) for name in toolkit} == dict.fromkeys(toolkit, "1.18.1-1")  # the pinned one of the two versions
    assert {"jq", "parallel", "squashfs-tools", "zstd", "curl", "libcap2-bin", "pigz"} <= set(apt)  # enroot's Depends, the caps package's
    assert "enroot" not in apt and "enroot+caps" not in apt  # kept as the role downloads them: sources/
    for name in enroot:
        assert (out / "sources" / name).read_bytes() == (fx / "enroot" / name).read_bytes()
    assert built.sources == [d.name for d in wanted.downloads] and built.images == [ref]
    archive = bundle.image_archive(out, ref)
    with tarfile.open(archive) as tar:  # a docker-archive: what podman load (image pull --archive) reads
        assert json.loads(tar.extractfile("manifest.json").read())[0]["RepoTags"] == [ref]
    assert bundle.verify(out, contents=wanted).files == built.files
    data = (out / "sources" / enroot[0]).read_bytes()
    (out / "sources" / enroot[0]).write_bytes(data[:-8] + b"tampered")  # same size, other bytes
    assert f"sources/{enroot[0]}: sha256 differs from the manifest's" in refusal(out)
