"""`megaprov bundle build` in-process, part by part and whole: the private apt root and what apt-get, dpkg-scanpackages,
git and podman are asked (argv, environment, working directory), the files each part leaves, the refusals the operator
reads (message and hint, exactly), the timings of :class:`bundle.Built`, and a failed build leaving nothing.

Stood in are the edges only: the build machine's commands apt-get, dpkg-scanpackages, podman and dpkg-deb are small
scripts on PATH that log what they were asked and answer as the real ones do; git is the real one behind a logging
wrapper, cloning a local repository; the wheelhouse download (pip against PyPI), the Ansible evaluation of the inventory
(:func:`bundle.resolve`) and the clock. The rendering, the keyring package's reading, the manifest and the verification
are real."""

from __future__ import annotations

import dataclasses
import getpass
import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import types
from pathlib import Path

import pytest

from megaprov.cluster import bundle, image, wheelhouse
from megaprov.errors import EnvironmentProblem, UsageError
from tests.helpers.bundle import DEBIAN, fake_bundle
from tests.unit.cluster.test_bundle_hostile import KEYRING, deb

NOBLE = bundle.distribution("noble")
REBUILD = bundle.REBUILD
APT_HINT = "check the network and the apt sources (nvidia_driver_debian_mirror, nvidia_driver_repo_url, container_toolkit_repo_url)"
KEYRING_HINT = "check nvidia_driver_keyring_url: it must be NVIDIA's cuda-keyring package"
IMAGE_HINT = "check the reference and the network (podman pull), or `podman load` the image on this machine first"
JQ = "jq_1.6-2.1+deb12u3_amd64.deb"
UBUNTU = "docker.io/library/ubuntu:22.04"
REAL_GIT = shutil.which("git")

APT_GET = r"""
import json, os, re, sys
which = "update" if "update" in sys.argv else "install"
conf = open(os.environ["APT_CONFIG"]).read()
archives = re.search(r'Dir::Cache::archives "(.*)/";', conf).group(1)
record = {"argv": ["apt-get", *sys.argv[1:]], "cwd": os.getcwd(), "partial": os.path.isdir(os.path.join(archives, "partial"))}
record.update({k: os.environ.get(k) for k in ("APT_CONFIG", "DEBIAN_FRONTEND", "LC_ALL")})
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(record) + "\n")
fail = os.environ.get("FAKE_APT_FAIL_" + which.upper(), "")
if fail:
    sys.stderr.write(fail)
    sys.exit(100)
if which == "install":
    for name in os.environ.get("FAKE_DEBS", "jq_1.6-2.1+deb12u3_amd64.deb").split(","):
        open(os.path.join(archives, name), "wb").write(name.encode())
    if not os.environ.get("FAKE_APT_NO_LOCK"):
        open(os.path.join(archives, "lock"), "w").close()
"""

SCANPACKAGES = r"""
import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({"argv": ["dpkg-scanpackages", *sys.argv[1:]], "cwd": os.getcwd()}) + "\n")
if os.environ.get("FAKE_SCAN_FAIL"):
    sys.stderr.write(os.environ["FAKE_SCAN_FAIL"])
    sys.exit(2)
for name in sorted(os.listdir(".")):
    if name.endswith(".deb"):
        package, version = name.split("_")[:2]
        print(f"Package: {package}\nVersion: {version}\nArchitecture: amd64\nFilename: ./{name}\n")
"""

PODMAN = r"""
import json, os, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({"argv": ["podman", *args]}) + "\n")
if args[:2] == ["image", "exists"]:
    if args[2] in os.environ.get("FAKE_PODMAN_HELD", "").split(","):
        sys.exit(0)
    print("checking", args[2])
    sys.stderr.write("Error: image not known\n")
    sys.exit(1)
time.sleep(float(os.environ.get("FAKE_PODMAN_SLEEP", "0")))
if args[0] == "pull" and os.environ.get("FAKE_PODMAN_PULL_FAIL"):
    sys.stderr.write(os.environ["FAKE_PODMAN_PULL_FAIL"])
    sys.exit(125)
if args[0] == "save":
    output = args[args.index("--output") + 1]
    open(output, "w").write("archive of " + args[-1])
"""

GIT = r"""
import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    record = {"argv": ["git", *sys.argv[1:]]}
    record.update({k: os.environ.get(k) for k in ("GIT_TERMINAL_PROMPT", "GIT_ASKPASS", "LC_ALL")})
    log.write(json.dumps(record) + "\n")
fail = os.environ.get("FAKE_GIT_FAIL", "")
if fail and "clone" in sys.argv:
    sys.stderr.write(fail)
    sys.exit(128)
os.execv(os.environ["REAL_GIT"], ["git", *sys.argv[1:]])
"""


@dataclasses.dataclass
class Tools:
    bin: Path
    log: Path

    def calls(self, program: str | None = None) -> list[dict]:
        if not self.log.exists():
            return []
        lines = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [line for line in lines if program is None or line["argv"][0] == program]

    def argv(self, program: str) -> list[list[str]]:
        return [c["argv"] for c in self.calls(program)]


def script(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


@pytest.fixture
def tools(tmp_path, monkeypatch) -> Tools:
    """apt-get, dpkg-scanpackages and podman as logging stand-ins, git as the real one behind a logging wrapper."""
    directory = tmp_path / "bin"
    directory.mkdir()
    for name, body in (("apt-get", APT_GET), ("dpkg-scanpackages", SCANPACKAGES), ("podman", PODMAN), ("git", GIT)):
        script(directory, name, body)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("REAL_GIT", REAL_GIT or "/usr/bin/git")
    for name in ("GIT_TERMINAL_PROMPT", "GIT_ASKPASS", "DEBIAN_FRONTEND", "LC_ALL"):
        monkeypatch.delenv(name, raising=False)
    return Tools(directory, log)


def keyed(dist: bundle.Distribution, tmp_path: Path) -> bundle.Distribution:
    """``dist`` with its archive keyring in ``tmp_path`` (build_apt only checks that it is there)."""
    keyring = tmp_path / f"{dist.id}-archive-keyring.gpg"
    keyring.write_bytes(b"keyring")
    return dataclasses.replace(dist, keyring=str(keyring))


def git_remote(tmp_path: Path) -> tuple[Path, str]:
    """A local repository with one commit tagged v2.17.1: nccl-tests' remote; its commit."""
    src = tmp_path / "remote" / "nccl-tests"
    src.mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for argv in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "one"], ["tag", "v2.17.1"]):
        subprocess.run([REAL_GIT or "git", "-C", str(src), *argv], check=True, env=env, capture_output=True)
    commit = subprocess.run([REAL_GIT or "git", "-C", str(src), "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    return src, commit


def clock(monkeypatch, step: float = 1.26) -> None:
    """bundle's clock: from 1000 s (an uptime), each reading ``step`` seconds after the one before."""
    ticks = iter(range(10_000))
    monkeypatch.setattr(bundle, "time", types.SimpleNamespace(monotonic=lambda: 1000 + next(ticks) * step))


def one_line(exc: pytest.ExceptionInfo) -> str:
    return exc.value.one_line()


# ---- _run: what the operator reads of a command that failed


def test_a_command_s_stdout_is_returned_run_with_its_environment_and_directory(tmp_path):
    out = bundle._run(["sh", "-c", 'echo "$FOO"; pwd'], "what", "hint", env={**os.environ, "FOO": "bar"}, cwd=tmp_path)
    assert out == f"bar\n{tmp_path}\n"


def test_a_command_not_installed_is_named_with_the_hint():
    with pytest.raises(EnvironmentProblem) as exc:
        bundle._run(["megaprov-no-such-tool", "x"], "dpkg-scanpackages", "apt-get install dpkg-dev")
    assert one_line(exc) == "dpkg-scanpackages: megaprov-no-such-tool is not installed: apt-get install dpkg-dev"


def test_a_command_past_its_timeout_is_named_with_the_seconds():
    began = time.monotonic()
    with pytest.raises(EnvironmentProblem) as exc:
        bundle._run(["sleep", "5"], "podman pull", "the hint", timeout=0.6)
    assert one_line(exc) == "podman pull: sleep did not finish within 1s: the hint"
    assert time.monotonic() - began < 4


@pytest.mark.parametrize(
    ("stderr", "stdout", "line"),
    [
        ("W: a warning\nN: a note\nsome line\nE: Unable to locate package x\nE: second\n", "", "E: Unable to locate package x"),
        ("plain first\nfatal: repository not found\n", "", "fatal: repository not found"),
        ("plain first\nerror: pathspec\n", "", "error: pathspec"),
        ("warning: w\nN: a note\nplain line\n", "", "plain line"),
        ("W: only a warning\n\n   \nfirst plain line\nsecond\n", "", "first plain line"),
        ("", "from stdout\n", "from stdout"),
        ("from stderr\n", "from stdout\n", "from stderr"),
        ("W: warning only\n", "", "exit 3"),
        ("E: bell \x07 here\n", "", "E: bell \\x07 here"),
        ("E: " + "y" * 400 + "\n", "", "E: " + "y" * 297),
    ],
    ids=["E: first", "fatal:", "error:", "not warning:", "plain", "stdout", "stderr first", "exit", "escaped", "300 chars"],
)
def test_a_failed_command_is_its_first_error_line(stderr, stdout, line):
    argv = ["sh", "-c", 'printf "%s" "$ERR" >&2; printf "%s" "$OUT"; exit 3']
    with pytest.raises(EnvironmentProblem) as exc:
        bundle._run(argv, "apt-get update", "the hint", env={**os.environ, "ERR": stderr, "OUT": stdout})
    assert exc.value.message == f"apt-get update: {line}"
    assert exc.value.hint == "the hint"


# ---- the private apt root


def test_the_apt_config_is_the_private_root_s_whole_configuration(tmp_path):
    assert bundle.apt_config(tmp_path / "root", tmp_path / "out", "arm64") == (
        f'Dir "{tmp_path}/root/";\n'
        f'Dir::State::status "{tmp_path}/root/var/lib/dpkg/status";\n'
        f'Dir::Cache::archives "{tmp_path}/out/";\n'
        f'Dir::Etc::TrustedParts "{tmp_path}/root/etc/apt/trusted.gpg.d/";\n'
        f'Dir::Etc::Trusted "{tmp_path}/root/etc/apt/trusted.gpg";\n'
        'APT::Architecture "arm64";\n'
        'APT::Architectures { "arm64"; };\n'
        'APT::Install-Recommends "false";\n'
        'APT::Install-Suggests "false";\n'
        'Acquire::Languages "none";\n'
        'Acquire::Retries "3";\n'
        f'APT::Sandbox::User "{getpass.getuser()}";\n'
        'Debug::NoLocking "true";\n'
    )


def test_a_toolkit_source_without_its_key_is_signed_by_nothing():
    sources = bundle.apt_sources(DEBIAN, "amd64", "http://m/debian", "", "", "", "https://t/deb/amd64/")
    assert sources.splitlines()[-1] == "deb [arch=amd64 signed-by=] https://t/deb/amd64/ /"


NVIDIA_SOURCES = (
    "deb [arch=amd64 signed-by={key}] {mirror} bookworm main contrib non-free non-free-firmware",
    "deb [arch=amd64 signed-by={key}] {mirror} bookworm-updates main contrib non-free non-free-firmware",
)


def nvidia_contents(tmp_path: Path, **changes) -> bundle.Contents:
    (tmp_path / "fx").mkdir(exist_ok=True)
    keyring_deb = deb(tmp_path / "fx" / "cuda-keyring_1.1-1_all.deb", [("./usr/share/keyrings/cuda-archive-keyring.gpg", b"key")])
    (tmp_path / "fx" / "gpgkey").write_text("\n  -----BEGIN PGP PUBLIC KEY BLOCK-----\n\nabc\n-----END PGP PUBLIC KEY BLOCK-----\n")
    base = bundle.Contents(
        apt=(
            bundle.AptGroup("common_extra_packages", ("jq",)),
            bundle.AptGroup("nvidia_driver_branch", ("cuda-drivers-580",), "nvidia", "580.*"),
            bundle.AptGroup("container_toolkit_version", ("nvidia-container-toolkit",), "toolkit", "1.18.1-1"),
        ),
        debian_mirror="http://mirror.example/debian",
        nvidia_repo_url="file:///fx/cuda/",
        nvidia_keyring_url=keyring_deb.as_uri(),
        nvidia_keyring=KEYRING,
        nvidia_pin_packages=("cuda-drivers", "nvidia-kernel-open-dkms"),
        nvidia_pin="580.*",
        toolkit_repo_url="https://nvidia.github.io/libnvidia-container/stable/deb/amd64/",
        toolkit_key_url=(tmp_path / "fx" / "gpgkey").as_uri(),
    )
    return dataclasses.replace(base, **changes)


def test_the_apt_part_fetches_nvidia_s_keys_and_resolves_in_a_private_root(tmp_path, tools):
    dist = keyed(DEBIAN, tmp_path)
    wanted = nvidia_contents(tmp_path)
    out, work = tmp_path / "b" / "apt", tmp_path / "work"
    local = tmp_path / "b" / "sources" / "enroot_4.1.2-1_amd64.deb"
    said: list[str] = []
    bundle.build_apt(wanted, dist, "amd64", out, work, "http://security.example/debian-security", said.append, [local])
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
        assert (root / sub).is_dir(), sub
    assert (root / "var/lib/dpkg/status").read_text() == ""
    # NVIDIA's keyring package is kept in apt/ (the nodes install it) and its keyring read out into the root
    assert (out / "cuda-keyring_1.1-1_all.deb").read_bytes() == (tmp_path / "fx" / "cuda-keyring_1.1-1_all.deb").read_bytes()
    assert (root / "etc/apt/cuda-archive-keyring.gpg").read_bytes() == b"key"
    toolkit_key = root / "etc/apt/keyrings/nvidia-container-toolkit.asc"
    assert toolkit_key.read_text().lstrip().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    keys = f"/{dist.keyring.lstrip('/')}"
    assert (root / "etc/apt/sources.list").read_text().splitlines() == [
        *(line.format(key=keys, mirror="http://mirror.example/debian") for line in NVIDIA_SOURCES),
        f"deb [arch=amd64 signed-by={keys}] http://security.example/debian-security bookworm-security main contrib non-free non-free-firmware",
        f"deb [arch=amd64 signed-by={root}/etc/apt/cuda-archive-keyring.gpg] copy:///fx/cuda/ /",
        f"deb [arch=amd64 signed-by={toolkit_key}] https://nvidia.github.io/libnvidia-container/stable/deb/amd64/ /",
    ]
    assert (root / "etc/apt/preferences.d/megaprov-nvidia-driver").read_text() == (
        "Package: cuda-drivers nvidia-kernel-open-dkms\nPin: version 580.*\nPin-Priority: 1001\n"
    )
    assert (root / "etc/apt/apt.conf").read_text() == bundle.apt_config(root, out, "amd64")
    config = str(root / "etc/apt/apt.conf")
    assert tools.calls("apt-get") == [
        {
            "argv": ["apt-get", "-q", "update"],
            "cwd": os.getcwd(),
            "partial": True,
            "APT_CONFIG": config,
            "DEBIAN_FRONTEND": "noninteractive",
            "LC_ALL": "C",
        },
        {
            "argv": [
                "apt-get",
                "-q",
                "-y",
                "install",
                "--download-only",
                "--no-install-recommends",
                "jq",
                "cuda-drivers-580",
                "nvidia-container-toolkit=1.18.1-1",
                str(local),
            ],
            "cwd": os.getcwd(),
            "partial": True,
            "APT_CONFIG": config,
            "DEBIAN_FRONTEND": "noninteractive",
            "LC_ALL": "C",
        },
    ]
    assert tools.calls("dpkg-scanpackages") == [{"argv": ["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], "cwd": str(out)}]
    assert sorted(p.name for p in out.iterdir()) == ["Packages.gz", "cuda-keyring_1.1-1_all.deb", JQ]  # no partial/, no lock
    packed = (out / "Packages.gz").read_bytes()
    assert packed[4:8] == b"\0\0\0\0"  # mtime 0: the same closure gives the same file
    assert gzip.decompress(packed).decode() == (
        "Package: cuda-keyring\nVersion: 1.1-1\nArchitecture: amd64\nFilename: ./cuda-keyring_1.1-1_all.deb\n\n"
        f"Package: jq\nVersion: 1.6-2.1+deb12u3\nArchitecture: amd64\nFilename: ./{JQ}\n\n"
    )
    assert said == [
        f"apt: NVIDIA's keyring package {wanted.nvidia_keyring_url}",
        f"apt: the container toolkit's signing key {wanted.toolkit_key_url}",
        "apt: package lists of http://mirror.example/debian (bookworm) and file:///fx/cuda/ and https://nvidia.github.io/libnvidia-container/stable/deb/amd64/",
        "apt: resolving and downloading 4 package(s) and their dependencies",
        "apt: Packages.gz",
    ]


def test_a_plain_apt_part_uses_the_distribution_s_archive_and_no_pin(tmp_path, tools):
    dist = keyed(NOBLE, tmp_path)
    wanted = bundle.Contents(apt=(bundle.AptGroup("common_extra_packages", ("jq", "chrony")),), debian_mirror="http://mirror.example/debian")
    out, work = tmp_path / "apt", tmp_path / "work"
    said: list[str] = []
    bundle.build_apt(wanted, dist, "arm64", out, work, "", said.append)
    root = work / "aptroot"
    parts = "main restricted universe multiverse"
    assert (root / "etc/apt/sources.list").read_text() == (
        f"deb [arch=arm64 signed-by={dist.keyring}] http://archive.ubuntu.com/ubuntu noble {parts}\n"
        f"deb [arch=arm64 signed-by={dist.keyring}] http://archive.ubuntu.com/ubuntu noble-updates {parts}\n"
    )
    assert list((root / "etc/apt/preferences.d").iterdir()) == []
    assert not (root / "etc/apt/keyrings").exists() and not (root / "etc/apt/cuda-archive-keyring.gpg").exists()
    assert tools.argv("apt-get")[1][6:] == ["jq", "chrony"]
    assert said == [
        "apt: package lists of http://archive.ubuntu.com/ubuntu (noble)",
        "apt: resolving and downloading 2 package(s) and their dependencies",
        "apt: Packages.gz",
    ]


@pytest.mark.parametrize(("dist", "hint"), [(DEBIAN, "apt-get install debian-archive-keyring"), (NOBLE, "apt-get install ubuntu-keyring")])
def test_a_missing_archive_keyring_is_refused_naming_its_package(tmp_path, tools, dist, hint):
    missing = dataclasses.replace(dist, keyring=str(tmp_path / "missing.gpg"))
    with pytest.raises(EnvironmentProblem) as exc:
        bundle.build_apt(bundle.Contents(), missing, "amd64", tmp_path / "apt", tmp_path / "work", "")
    assert one_line(exc) == f"{tmp_path}/missing.gpg is missing: apt cannot check {dist.id}'s archive: {hint}"
    assert tools.calls() == []


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        (
            {"nvidia_keyring_url": ""},
            "nvidia_driver_keyring_url is empty but NVIDIA's repository is used: set it to the repository's cuda-keyring package",
        ),
        (
            {"nvidia_keyring_url": "https://x/keyring.txt"},
            "nvidia_driver_keyring_url='https://x/keyring.txt' does not name a .deb: point it at the cuda-keyring package",
        ),
        (
            {"nvidia_repo_url": "", "nvidia_keyring_url": "https://x/-k.deb"},
            "nvidia_driver_keyring_url='https://x/-k.deb' does not name a .deb: point it at the cuda-keyring package",
        ),
    ],
)
def test_nvidia_s_repository_needs_its_keyring_package(tmp_path, tools, changes, line):
    with pytest.raises(UsageError) as exc:
        bundle.build_apt(nvidia_contents(tmp_path, **changes), keyed(DEBIAN, tmp_path), "amd64", tmp_path / "apt", tmp_path / "w", "")
    assert one_line(exc) == line
    assert tools.calls() == []


@pytest.mark.parametrize("url", ["https://x/cuda-keyring_1.1-1_all.debX", "https:cuda-keyring_1.1-1_all.deb"])
def test_a_keyring_url_whose_last_part_is_not_a_package_is_refused(tmp_path, tools, url):
    with pytest.raises(UsageError) as exc:
        bundle.build_apt(nvidia_contents(tmp_path, nvidia_keyring_url=url), keyed(DEBIAN, tmp_path), "amd64", tmp_path / "apt", tmp_path / "w", "")
    assert one_line(exc) == f"nvidia_driver_keyring_url='{url}' does not name a .deb: point it at the cuda-keyring package"


def test_a_keyring_package_named_in_capitals_is_taken(tmp_path, tools):
    wanted = nvidia_contents(tmp_path)
    upper = tmp_path / "fx" / "CUDA-Keyring_1.1-1_all.deb"
    shutil.copyfile(tmp_path / "fx" / "cuda-keyring_1.1-1_all.deb", upper)
    out = tmp_path / "apt"
    bundle.build_apt(dataclasses.replace(wanted, nvidia_keyring_url=upper.as_uri()), keyed(DEBIAN, tmp_path), "amd64", out, tmp_path / "w", "")
    assert (out / "CUDA-Keyring_1.1-1_all.deb").read_bytes() == upper.read_bytes()


def test_an_apt_that_leaves_no_lock_file_is_fine(tmp_path, tools, monkeypatch):
    monkeypatch.setenv("FAKE_APT_NO_LOCK", "1")
    out = tmp_path / "apt"
    bundle.build_apt(
        bundle.Contents(apt=(bundle.AptGroup("common_extra_packages", ("jq",)),)), keyed(DEBIAN, tmp_path), "amd64", out, tmp_path / "w", ""
    )
    assert sorted(p.name for p in out.iterdir()) == ["Packages.gz", JQ]


def test_a_failed_package_index_is_named_with_its_package(tmp_path, tools, monkeypatch):
    monkeypatch.setenv("FAKE_SCAN_FAIL", "dpkg-scanpackages: error: cannot read ./x.deb\n")
    with pytest.raises(EnvironmentProblem) as exc:
        bundle.build_apt(bundle.Contents(), keyed(DEBIAN, tmp_path), "amd64", tmp_path / "apt", tmp_path / "w", "")
    assert one_line(exc) == "dpkg-scanpackages: dpkg-scanpackages: error: cannot read ./x.deb: apt-get install dpkg-dev"


def test_a_keyring_url_with_a_trailing_slash_names_its_package(tmp_path, tools):
    wanted = nvidia_contents(tmp_path)
    wanted = dataclasses.replace(wanted, nvidia_keyring_url=wanted.nvidia_keyring_url + "/")
    with pytest.raises(EnvironmentProblem) as exc:  # the file: URL itself, with its slash, is not a file
        bundle.build_apt(wanted, keyed(DEBIAN, tmp_path), "amd64", tmp_path / "apt", tmp_path / "w", "")
    assert exc.value.message == f"could not fetch {wanted.nvidia_keyring_url}: Not a directory"


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            "E: Unable to locate package cuda-drivers-580\n",
            "nvidia_driver_branch: NVIDIA's repository has no package cuda-drivers-580"
            " (apt-get install --download-only: E: Unable to locate package cuda-drivers-580): fix nvidia_driver_branch in the inventory",
        ),
        (
            "E: Package 'jq' has no installation candidate\n",
            "common_extra_packages: debian bookworm has no package jq"
            " (apt-get install --download-only: E: Package 'jq' has no installation candidate): fix common_extra_packages in the inventory",
        ),
        (
            "E: Package nvidia-container-toolkit has no installation candidate\n",
            "container_toolkit_version: NVIDIA's container toolkit repository has no package nvidia-container-toolkit"
            " (apt-get install --download-only: E: Package nvidia-container-toolkit has no installation candidate)"
            ": fix container_toolkit_version in the inventory",
        ),
        (
            "E: Unable to locate package libfoo\n",
            f"apt-get install --download-only: E: Unable to locate package libfoo: {APT_HINT}",
        ),
        ("E: Sub-process returned an error code\n", f"apt-get install --download-only: E: Sub-process returned an error code: {APT_HINT}"),
    ],
    ids=["nvidia", "debian", "toolkit", "not asked for", "other"],
)
def test_a_package_apt_cannot_find_names_the_variable_that_asks_for_it(tmp_path, tools, monkeypatch, error, line):
    monkeypatch.setenv("FAKE_APT_FAIL_INSTALL", error)
    with pytest.raises((UsageError, EnvironmentProblem)) as exc:
        bundle.build_apt(nvidia_contents(tmp_path), keyed(DEBIAN, tmp_path), "amd64", tmp_path / "apt", tmp_path / "w", "")
    assert one_line(exc) == line
    assert isinstance(exc.value, UsageError) == ("fix " in line)
    assert tools.calls("dpkg-scanpackages") == []


def test_a_failed_package_list_update_is_named(tmp_path, tools, monkeypatch):
    monkeypatch.setenv("FAKE_APT_FAIL_UPDATE", "W: skipped\nE: The repository 'http://m bookworm Release' does not have a Release file.\n")
    with pytest.raises(EnvironmentProblem) as exc:
        bundle.build_apt(bundle.Contents(), keyed(DEBIAN, tmp_path), "amd64", tmp_path / "apt", tmp_path / "w", "")
    assert one_line(exc) == f"apt-get update: E: The repository 'http://m bookworm Release' does not have a Release file.: {APT_HINT}"
    assert tools.argv("apt-get") == [["apt-get", "-q", "update"]]


# ---- NVIDIA's container toolkit key


def test_the_toolkit_key_is_fetched_into_a_new_directory_with_progress(tmp_path):
    wanted = nvidia_contents(tmp_path)
    said: list[str] = []
    dest = tmp_path / "root" / "etc" / "keys" / "toolkit.asc"
    assert bundle._toolkit_key(wanted, dest, said.append) == str(dest)
    assert dest.read_bytes() == (tmp_path / "fx" / "gpgkey").read_bytes()  # leading whitespace is fine
    assert said == [f"apt: the container toolkit's signing key {wanted.toolkit_key_url}"]


@pytest.mark.parametrize("changes", [{"toolkit_key_url": ""}, {"toolkit_repo_url": ""}])
def test_a_toolkit_without_its_repository_or_key_is_refused(tmp_path, changes):
    with pytest.raises(UsageError) as exc:
        bundle._toolkit_key(nvidia_contents(tmp_path, **changes), tmp_path / "k.asc", bundle._quiet)
    assert one_line(exc) == (
        "container_toolkit_repo_url or container_toolkit_key_url is empty but NVIDIA's container toolkit is bundled"
        ": set both to the repository (or its mirror) and its signing key"
    )


def test_a_toolkit_key_that_is_not_armoured_names_the_url(tmp_path):
    wanted = nvidia_contents(tmp_path)
    (tmp_path / "fx" / "gpgkey").write_text("<html>")
    with pytest.raises(UsageError) as exc:
        bundle._toolkit_key(wanted, tmp_path / "k.asc", bundle._quiet)
    shown = bundle.values.shown(wanted.toolkit_key_url)
    assert shown.startswith("'file:///") and exc.value.message == f"container_toolkit_key_url={shown} is not an ASCII-armoured OpenPGP key"


# ---- file: downloads


def test_a_file_url_of_exactly_the_limit_is_copied_whole(tmp_path):
    (tmp_path / "k.deb").write_bytes(b"12345")
    bundle._fetch_file((tmp_path / "k.deb").as_uri(), tmp_path / "out", 5)
    assert (tmp_path / "out").read_bytes() == b"12345"


def test_a_file_url_over_the_limit_is_refused(tmp_path):
    (tmp_path / "k.deb").write_bytes(b"123456")
    url = (tmp_path / "k.deb").as_uri()
    with pytest.raises(EnvironmentProblem) as exc:
        bundle._fetch_file(url, tmp_path / "out", 5)
    assert one_line(exc) == f"{url} is larger than 5 bytes: point the variable at the right file"
    assert not (tmp_path / "out").exists()


def test_a_missing_file_url_is_refused_with_the_system_s_reason(tmp_path):
    url = (tmp_path / "nope.deb").as_uri()
    with pytest.raises(EnvironmentProblem) as exc:
        bundle._fetch_file(url, tmp_path / "out", 5)
    assert one_line(exc) == f"could not fetch {url}: No such file or directory: point the variable at a file that exists"


def test_a_file_url_that_is_a_fifo_is_refused_before_a_writer_comes(tmp_path):
    fifo = tmp_path / "k.deb"
    os.mkfifo(fifo)

    def late_writer() -> None:  # a blocking open would wait for it
        time.sleep(1.5)
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # no reader: the open did not wait
            pass

    thread = threading.Thread(target=late_writer, daemon=True)
    thread.start()
    began = time.monotonic()
    with pytest.raises(EnvironmentProblem) as exc:
        bundle._fetch_file(fifo.as_uri(), tmp_path / "out", 5)
    assert time.monotonic() - began < 1.0
    assert one_line(exc) == f"could not fetch {fifo.as_uri()}: not a plain file: point the variable at the package file"
    thread.join()


def test_a_capped_stream_cannot_seek():
    capped = bundle._Capped(io.BytesIO(b"abc"), 10, lambda: OSError("over"))
    with pytest.raises(OSError, match="^a stream cannot seek$"):
        capped.seek(0)


# ---- sources: the files the roles download by URL


def test_sources_are_fetched_into_a_new_directory_and_the_debs_returned(tmp_path):
    (tmp_path / "enroot_4.1.2-1_amd64.deb").write_bytes(b"enroot")
    (tmp_path / "pyxis.tar.gz").write_bytes(b"pyxis")
    wanted = bundle.Contents(
        downloads=(
            bundle.Download("enroot_4.1.2-1_amd64.deb", (tmp_path / "enroot_4.1.2-1_amd64.deb").as_uri(), "enroot_version"),
            bundle.Download("pyxis-0.24.0.tar.gz", (tmp_path / "pyxis.tar.gz").as_uri(), "pyxis_version", hashlib.sha256(b"pyxis").hexdigest()),
        )
    )
    out = tmp_path / "new" / "bundle" / "sources"
    said: list[str] = []
    assert bundle.build_sources(wanted, out, said.append) == [out / "enroot_4.1.2-1_amd64.deb"]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {"enroot_4.1.2-1_amd64.deb": b"enroot", "pyxis-0.24.0.tar.gz": b"pyxis"}
    assert said == [f"sources: {d.name} from {d.url}" for d in wanted.downloads]
    assert bundle.build_sources(bundle.Contents(), tmp_path / "none") == [] and not (tmp_path / "none").exists()


def test_a_source_with_another_checksum_is_refused_with_the_fix(tmp_path):
    (tmp_path / "e.deb").write_bytes(b"enroot")
    url = (tmp_path / "e.deb").as_uri()
    wanted = bundle.Contents(downloads=(bundle.Download("enroot_4.1.2-1_amd64.deb", url, "enroot_version", "b" * 64),))
    with pytest.raises(UsageError) as exc:
        bundle.build_sources(wanted, tmp_path / "out")
    assert one_line(exc) == (
        f"enroot_version: {url} does not have the sha256 the inventory pins for enroot_4.1.2-1_amd64.deb"
        ": fix enroot_version or its checksum in the inventory"
    )


# ---- wheels


@pytest.fixture
def wheelhouse_calls(tmp_path, monkeypatch) -> list[dict]:
    """wheelhouse.build stood in: records its arguments, answers a directory of two wheels and a stray file."""
    calls: list[dict] = []
    found = tmp_path / "wheelhouse"
    found.mkdir()
    for name in ("six-1.17.0-py2.py3-none-any.whl", "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "index.html"):
        (found / name).write_text(name)

    def build(requirements, python_version="3.11", cache=None, index_url=None, cpu_only=True):
        calls.append({"requirements": requirements, "python_version": python_version, "cache": cache, "index_url": index_url, "cpu_only": cpu_only})
        return found

    monkeypatch.setattr(wheelhouse, "build", build)
    return calls


def test_wheels_are_downloaded_for_the_nodes_python_from_the_torch_index(tmp_path, wheelhouse_calls):
    wanted = bundle.Contents(
        wheels=(
            bundle.WheelGroup("pytorch_version", ("torch==2.13.0",), "pytorch"),
            bundle.WheelGroup("megatron_packages", ("six", "torch==2.13.0")),
        ),
        pytorch_index_url="https://download.pytorch.org/whl/cpu",
        torch_build="cpu",
    )
    said: list[str] = []
    out = tmp_path / "b" / "wheels"
    bundle.build_wheels(wanted, DEBIAN, "amd64", out, said.append)
    assert wheelhouse_calls == [
        {
            "requirements": ("torch==2.13.0", "six"),
            "python_version": "3.11",
            "cache": None,
            "index_url": "https://download.pytorch.org/whl/cpu",
            "cpu_only": True,
        }
    ]
    assert sorted(p.name for p in out.iterdir()) == ["six-1.17.0-py2.py3-none-any.whl", "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"]
    assert (out / "six-1.17.0-py2.py3-none-any.whl").read_text() == "six-1.17.0-py2.py3-none-any.whl"
    assert said == ["wheels: torch==2.13.0 six for CPython 3.11 (torch from https://download.pytorch.org/whl/cpu)"]


def test_wheels_from_the_wheelhouse_for_gpu_nodes_name_no_index(tmp_path, wheelhouse_calls):
    wanted = bundle.Contents(
        wheels=(bundle.WheelGroup("megatron_packages", ("six",)),),
        pytorch_source="wheelhouse",
        pytorch_index_url="https://download.pytorch.org/whl/cu130",
        torch_build="cuda",
    )
    said: list[str] = []
    bundle.build_wheels(wanted, NOBLE, "amd64", tmp_path / "wheels", said.append)
    assert wheelhouse_calls == [{"requirements": ("six",), "python_version": "3.12", "cache": None, "index_url": None, "cpu_only": False}]
    assert said == ["wheels: six for CPython 3.12"]


def test_no_wheels_asked_for_is_no_download(tmp_path, wheelhouse_calls):
    bundle.build_wheels(bundle.Contents(), DEBIAN, "arm64", tmp_path / "wheels", pytest.fail)
    assert wheelhouse_calls == [] and not (tmp_path / "wheels").exists()


def test_wheels_for_arm64_are_refused(tmp_path, wheelhouse_calls):
    with pytest.raises(UsageError) as exc:
        bundle.build_wheels(bundle.Contents(wheels=(bundle.WheelGroup("megatron_packages", ("six",)),)), DEBIAN, "arm64", tmp_path / "w")
    assert one_line(exc) == (
        "--arch arm64: wheels are downloaded for x86_64 only (megaprov.cluster.wheelhouse.PLATFORMS): build the bundle for amd64"
    )
    assert wheelhouse_calls == []


# ---- git


def nccl(url: str, ref: str = "v2.17.1") -> bundle.GitRepo:
    return bundle.GitRepo("nccl-tests", url, ref, "nccl_tests_version")


def test_a_remote_is_mirrored_whole_with_its_ref_s_commit_and_no_hooks(tmp_path, tools):
    src, commit = git_remote(tmp_path)
    url = src.as_uri()
    said: list[str] = []
    out = tmp_path / "b" / "git"
    versions = bundle.build_git(bundle.Contents(git=(nccl(url),)), out, said.append)
    assert versions == {"nccl-tests": bundle.GitVersion(ref="v2.17.1", commit=commit)}
    dest = out / "nccl-tests.git"
    assert not (dest / "hooks").exists()
    mirror = subprocess.run([REAL_GIT, "-C", str(dest), "config", "remote.origin.mirror"], capture_output=True, text=True, check=True)
    assert mirror.stdout.strip() == "true"
    env = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}
    assert tools.calls("git") == [
        {
            "argv": [
                "git",
                "-c",
                "http.lowSpeedLimit=1000",
                "-c",
                "http.lowSpeedTime=60",
                "clone",
                "--quiet",
                "--mirror",
                "--no-local",
                "--",
                url,
                str(dest),
            ],
            **env,
        },
        {"argv": ["git", "-C", str(dest), "rev-parse", "--verify", "--quiet", "v2.17.1^{commit}"], **env},
    ]
    assert said == [f"git: nccl-tests from {url} (v2.17.1)"]


def test_a_remote_by_path_is_cloned_without_hardlinks_and_every_repo_is_recorded(tmp_path, tools):
    src, commit = git_remote(tmp_path)
    apex = bundle.GitRepo("apex", str(src), "v2.17.1", "apex_version")
    versions = bundle.build_git(bundle.Contents(git=(nccl(src.as_uri()), apex)), tmp_path / "git")
    assert versions == {"nccl-tests": bundle.GitVersion(ref="v2.17.1", commit=commit), "apex": bundle.GitVersion(ref="v2.17.1", commit=commit)}
    clones = [argv for argv in tools.argv("git") if "clone" in argv]
    assert clones[1][8:] == ["--no-local", "--", str(src), str(tmp_path / "git" / "apex.git")]


def test_a_mirror_made_without_sample_hooks_is_kept_as_it_is(tmp_path, tools, monkeypatch):
    src, commit = git_remote(tmp_path)
    (tmp_path / "no-templates").mkdir()
    monkeypatch.setenv("GIT_TEMPLATE_DIR", str(tmp_path / "no-templates"))  # git makes no hooks/ then
    versions = bundle.build_git(bundle.Contents(git=(nccl(src.as_uri()),)), tmp_path / "git")
    assert versions == {"nccl-tests": bundle.GitVersion(ref="v2.17.1", commit=commit)} and not (tmp_path / "git/nccl-tests.git/hooks").exists()


def test_a_remote_that_cannot_be_cloned_names_the_repo_variable(tmp_path, tools, monkeypatch):
    monkeypatch.setenv("FAKE_GIT_FAIL", "fatal: unable to access 'https://github.com/NVIDIA/nccl-tests/': Could not resolve host\n")
    url = "https://github.com/NVIDIA/nccl-tests"
    with pytest.raises(EnvironmentProblem) as exc:
        bundle.build_git(bundle.Contents(git=(nccl(url),)), tmp_path / "git")
    assert one_line(exc) == (
        f"git clone nccl_tests_repo={url}: fatal: unable to access 'https://github.com/NVIDIA/nccl-tests/': Could not resolve host"
        ": check the network, or point nccl_tests_repo at a reachable mirror"
    )
    assert tools.argv("git")[0][8:] == ["--", url, str(tmp_path / "git" / "nccl-tests.git")]  # no --no-local


def test_a_ref_the_remote_lacks_names_the_version_variable(tmp_path, tools):
    src, _ = git_remote(tmp_path)
    with pytest.raises(UsageError) as exc:
        bundle.build_git(bundle.Contents(git=(nccl(src.as_uri(), "v9.9.9"),)), tmp_path / "git")
    assert one_line(exc) == (
        f"nccl_tests_version=v9.9.9: nccl_tests_repo={src.as_uri()} has no such tag or branch: set nccl_tests_version to a ref of the remote"
    )


# ---- images


def test_an_image_podman_holds_is_saved_without_a_pull(tmp_path, tools, monkeypatch):
    monkeypatch.setenv("FAKE_PODMAN_HELD", UBUNTU)
    said: list[str] = []
    found = bundle.build_images(["ubuntu:22.04"], tmp_path / "b" / "images", said.append)
    rel = bundle.image_file(UBUNTU)
    assert found == {UBUNTU: bundle.ImageEntry(file=rel)}
    assert (tmp_path / "b" / rel).read_text() == f"archive of {UBUNTU}"
    assert tools.argv("podman") == [
        ["podman", "image", "exists", UBUNTU],
        ["podman", "save", "--quiet", "--format", "docker-archive", "--output", str(tmp_path / "b" / rel), UBUNTU],
    ]
    assert said == [f"images: saving {UBUNTU} as {rel}"]


def test_an_image_podman_lacks_is_pulled_first(tmp_path, tools, capfd):
    said: list[str] = []
    found = bundle.build_images(["nvcr.io/nvidia/pytorch:25.01-py3", "ubuntu:22.04"], tmp_path / "images", said.append)
    assert list(found) == ["nvcr.io/nvidia/pytorch:25.01-py3", UBUNTU]
    assert [argv[:2] for argv in tools.argv("podman")] == [["podman", "image"], ["podman", "pull"], ["podman", "save"]] * 2
    assert tools.argv("podman")[1] == ["podman", "pull", "--quiet", "nvcr.io/nvidia/pytorch:25.01-py3"]
    assert said[0] == "images: pulling nvcr.io/nvidia/pytorch:25.01-py3" and said[2] == f"images: pulling {UBUNTU}"
    assert capfd.readouterr() == ("", "")  # podman's answers are read, never shown


def test_an_image_that_cannot_be_pulled_is_named(tmp_path, tools, monkeypatch):
    monkeypatch.setenv("FAKE_PODMAN_PULL_FAIL", "Error: initializing source docker://ubuntu:22.04: manifest unknown\n")
    with pytest.raises(EnvironmentProblem) as exc:
        bundle.build_images(["ubuntu:22.04"], tmp_path / "images")
    assert one_line(exc) == f"--image ubuntu:22.04: podman pull: Error: initializing source docker://ubuntu:22.04: manifest unknown: {IMAGE_HINT}"


@pytest.mark.parametrize(("held", "what"), [("", "podman pull"), (UBUNTU, "podman save")])
def test_an_image_s_pull_and_save_have_their_deadline(tmp_path, tools, monkeypatch, held, what):
    monkeypatch.setenv("FAKE_PODMAN_HELD", held)
    monkeypatch.setenv("FAKE_PODMAN_SLEEP", "3")
    monkeypatch.setattr(bundle, "IMAGE_SECONDS", 0.6)
    with pytest.raises(EnvironmentProblem) as exc:
        bundle.build_images(["ubuntu:22.04"], tmp_path / "images")
    assert one_line(exc) == f"--image ubuntu:22.04: {what}: podman did not finish within 1s: {IMAGE_HINT}"


def test_no_podman_is_named_with_its_package(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EnvironmentProblem) as exc:
        bundle.build_images(["ubuntu:22.04"], tmp_path / "images")
    assert one_line(exc) == "--image: podman is not installed here: apt-get install podman (it pulls and saves images)"


def test_image_flags_name_their_fix():
    with pytest.raises(UsageError) as exc:
        bundle.images_wanted(["/shared/images/x.sqsh"])
    assert one_line(exc) == (
        "--image /shared/images/x.sqsh is a squashfs file: give the registry reference it was imported from: the bundle carries the image"
    )
    at_bound = [f"r.io/i{n}:1" for n in range(bundle.MAX_IMAGES)]
    assert bundle.images_wanted(at_bound) == at_bound
    with pytest.raises(UsageError) as exc:
        bundle.images_wanted([*at_bound, "r.io/extra:1"])
    assert one_line(exc) == f"--image is given {bundle.MAX_IMAGES + 1} images, more than {bundle.MAX_IMAGES}: build one bundle per set of images"


def test_an_image_archive_is_named_after_the_squashfs_stem():
    assert bundle.image_file(UBUNTU) == "images/" + image.names(UBUNTU).squashfs.removesuffix(".sqsh") + ".tar"
    assert ".sqsh" not in bundle.image_file(UBUNTU)
    assert bundle.image_repository("ubuntu:22.04") == UBUNTU and bundle.image_repository("not a ref") is None


# ---- the output directory


def test_the_output_directory_refusals_name_their_fix(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    for taken in ("full", "file", "link"):
        with pytest.raises(UsageError) as exc:
            bundle._output_dir(tmp_path / taken)
        assert (
            one_line(exc)
            == f"--dir {tmp_path / taken} exists and is not an empty directory: give a new directory (a bundle is never written over another)"
        )
    with pytest.raises(UsageError) as exc:
        bundle._output_dir(tmp_path / "no" / "b")
    assert one_line(exc) == f"--dir {tmp_path}/no/b: {tmp_path}/no does not exist: create the parent directory first"
    assert bundle._output_dir(tmp_path / "empty") is None and bundle._output_dir(tmp_path / "new") is None


# ---- collect and build: the parts in order, the manifest, the timings, nothing left by a failure


@pytest.fixture
def build_setup(tmp_path, tools, wheelhouse_calls, monkeypatch):
    """Everything a whole build needs: the keyring, a git remote, a source .deb and an image podman holds."""
    src, commit = git_remote(tmp_path)
    (tmp_path / "fx").mkdir()
    (tmp_path / "fx" / "enroot_4.1.2-1_amd64.deb").write_bytes(b"enroot deb")
    monkeypatch.setenv("FAKE_PODMAN_HELD", UBUNTU)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    wanted = bundle.Contents(
        apt=(bundle.AptGroup("common_extra_packages", ("jq",)),),
        wheels=(bundle.WheelGroup("megatron_packages", ("six",)),),
        git=(nccl(src.as_uri()),),
        downloads=(bundle.Download("enroot_4.1.2-1_amd64.deb", (tmp_path / "fx" / "enroot_4.1.2-1_amd64.deb").as_uri(), "enroot_version"),),
        torch_build="cpu",
    )
    return types.SimpleNamespace(contents=wanted, dist=keyed(DEBIAN, tmp_path), commit=commit, tools=tools, wheelhouse=wheelhouse_calls)


EXPECTED_FILES = {
    "apt/Packages.gz",
    f"apt/{JQ}",
    "images/" + image.names(UBUNTU).squashfs.removesuffix(".sqsh") + ".tar",
    "sources/enroot_4.1.2-1_amd64.deb",
    "wheels/six-1.17.0-py2.py3-none-any.whl",
    "wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
}


def test_a_bundle_is_collected_part_by_part_verified_and_renamed_into_place(tmp_path, build_setup, monkeypatch):
    clock(monkeypatch)
    said: list[str] = []
    output = tmp_path / "bundle"
    output.mkdir()  # an empty directory is taken over
    built = bundle.collect(build_setup.contents, output, build_setup.dist, progress=said.append, images=["ubuntu:22.04", UBUNTU])
    manifest = bundle.read_manifest(output)
    files = set(manifest.files)
    assert {f for f in files if not f.startswith("git/")} == EXPECTED_FILES
    assert "git/nccl-tests.git/HEAD" in files and "git/nccl-tests.git/packed-refs" in files
    assert manifest.versions.git == {"nccl-tests": bundle.GitVersion(ref="v2.17.1", commit=build_setup.commit)}
    assert manifest.images == {UBUNTU: bundle.ImageEntry(file=bundle.image_file(UBUNTU))}
    assert manifest.versions.apt == {"jq": "1.6-2.1+deb12u3"} and manifest.arch == "amd64" and manifest.python == "3.11"
    assert (output / bundle.MANIFEST).read_text() == bundle.manifest_json(manifest)
    assert bundle.verify(output, contents=build_setup.contents).files == len(files)
    assert built == bundle.Built(
        directory=str(output),
        files=len(files),
        bytes=sum(f.size for f in manifest.files.values()),
        seconds={"sources": 1.3, "apt": 1.3, "wheels": 1.3, "git": 1.3, "images": 1.3, "manifest": 3.8},
        apt=2,  # apt/jq and sources/enroot
        wheels=2,
        git=["nccl-tests"],
        sources=["enroot_4.1.2-1_amd64.deb"],
        images=[UBUNTU],
    )
    assert stat.S_IMODE(output.stat().st_mode) == 0o755
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # the temporary sibling is gone
    # the parts ran in the temporary sibling, apt's root in its own work directory, removed since
    save = build_setup.tools.argv("podman")[-1]
    sibling = Path(save[save.index("--output") + 1]).parents[1]
    assert sibling.parent == tmp_path and sibling.name.startswith(".bundle-")
    apt_conf = Path(build_setup.tools.calls("apt-get")[0]["APT_CONFIG"])
    work = apt_conf.parents[3]
    assert work.parent == tmp_path / "tmp" and work.name.startswith("megaprov-bundle-") and not work.exists()
    install = build_setup.tools.argv("apt-get")[1]
    assert install[6:] == ["jq", str(sibling / "sources" / "enroot_4.1.2-1_amd64.deb")]  # the sources' .debs: their Depends
    assert build_setup.wheelhouse[0]["python_version"] == "3.11"
    assert said == [
        f"sources: enroot_4.1.2-1_amd64.deb from {build_setup.contents.downloads[0].url}",
        "apt: package lists of http://deb.debian.org/debian (bookworm)",
        "apt: resolving and downloading 2 package(s) and their dependencies",
        "apt: Packages.gz",
        "wheels: six for CPython 3.11",
        f"git: nccl-tests from {build_setup.contents.git[0].url} (v2.17.1)",
        f"images: saving {UBUNTU} as {bundle.image_file(UBUNTU)}",
        "manifest: sha256 of every file",
    ]


def sources_list_of_the_build(tools: Tools) -> str:
    """The sources.list apt-get was given, read back from the apt.conf it was pointed at (kept by a stand-in)."""
    return tools.log.with_name("sources.list").read_text()


@pytest.fixture
def keep_sources(tools, monkeypatch):
    """apt-get's stand-in copies the private root's sources.list next to its log before anything is removed."""
    body = APT_GET.replace(
        'with open(os.environ["FAKE_LOG"], "a") as log:',
        "root = re.search(r'Dir \"(.*)/\";', conf).group(1)\n"
        "open(os.path.join(os.path.dirname(os.environ['FAKE_LOG']), 'sources.list'), 'w').write(open(root + '/etc/apt/sources.list').read())\n"
        'with open(os.environ["FAKE_LOG"], "a") as log:',
        1,
    )
    script(tools.bin, "apt-get", body)


@pytest.mark.parametrize(
    ("security", "line"),
    [
        (None, "deb [arch=amd64 signed-by={key}] http://deb.debian.org/debian-security bookworm-security main contrib non-free non-free-firmware"),
        ("", None),
        (
            "http://sec.example/debian-security",
            "deb [arch=amd64 signed-by={key}] http://sec.example/debian-security bookworm-security main contrib non-free non-free-firmware",
        ),
    ],
    ids=["the distribution's", "none", "a mirror"],
)
def test_the_security_archive_is_the_distribution_s_unless_given(tmp_path, build_setup, keep_sources, security, line):
    bundle.collect(bundle.Contents(apt=build_setup.contents.apt), tmp_path / "bundle", build_setup.dist, "amd64", security)
    lines = sources_list_of_the_build(build_setup.tools).splitlines()
    assert len(lines) == (2 if line is None else 3)
    if line is not None:
        assert lines[2] == line.format(key=build_setup.dist.keyring)


def test_a_security_mirror_that_is_not_a_url_is_refused_before_anything_runs(tmp_path, build_setup):
    with pytest.raises(UsageError) as exc:
        bundle.collect(build_setup.contents, tmp_path / "bundle", build_setup.dist, security="ftp://sec.example/")
    assert one_line(exc) == "--security-mirror='ftp://sec.example/' is not a http, https, file URL: set --security-mirror to the source's URL"
    assert build_setup.tools.calls() == [] and sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    for good in ("http://s/", "https://s/", "file:///s/"):
        with pytest.raises(EnvironmentProblem):  # past the check: the first part runs (and its file: source is missing)
            bundle.collect(
                dataclasses.replace(build_setup.contents, downloads=(bundle.Download("x.deb", "file:///nope/x.deb", "enroot_version"),)),
                tmp_path / "b2",
                build_setup.dist,
                security=good,
            )


def test_an_arm64_bundle_resolves_apt_for_arm64(tmp_path, build_setup):
    wanted = bundle.Contents(apt=build_setup.contents.apt, git=build_setup.contents.git)
    built = bundle.collect(wanted, tmp_path / "bundle", build_setup.dist, "arm64", "")
    assert built.images == [] and built.sources == [] and built.wheels == 0 and built.git == ["nccl-tests"]
    assert bundle.read_manifest(tmp_path / "bundle").arch == "arm64"
    conf = Path(build_setup.tools.calls("apt-get")[0]["APT_CONFIG"])
    assert not conf.exists()


def test_a_failed_part_leaves_no_bundle_and_no_temporary_directory(tmp_path, build_setup, monkeypatch):
    monkeypatch.setenv("FAKE_APT_FAIL_INSTALL", "E: Sub-process returned an error code\n")
    with pytest.raises(EnvironmentProblem):
        bundle.collect(build_setup.contents, tmp_path / "bundle", build_setup.dist)
    assert not (tmp_path / "bundle").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    assert list((tmp_path / "tmp").iterdir()) == []  # the apt work directory too


def test_a_build_that_does_not_verify_leaves_nothing(tmp_path, build_setup):
    wanted = dataclasses.replace(build_setup.contents, apt=(bundle.AptGroup("common_extra_packages", ("jq", "chrony")),))
    with pytest.raises(bundle.BundleError) as exc:  # apt-get's stand-in downloads jq only
        bundle.collect(wanted, tmp_path / "bundle", build_setup.dist, images=["ubuntu:22.04"])
    assert (
        exc.value.message
        == f"bundle {exc.value.message.split(' ')[1]} does not match the inventory: common_extra_packages: the bundle has no apt package chrony"
    )
    assert not (tmp_path / "bundle").exists() and sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_build_resolves_the_inventory_then_collects_with_the_resolve_time_first(tmp_path, build_setup, monkeypatch):
    clock(monkeypatch)
    asked: list[tuple] = []

    def resolve(inventory, dist, arch, progress):
        asked.append((inventory, dist, arch, progress))
        return build_setup.contents

    monkeypatch.setattr(bundle, "resolve", resolve)
    said: list[str] = []
    built = bundle.build(tmp_path / "inventory.ini", tmp_path / "bundle", build_setup.dist, progress=said.append, images=["ubuntu:22.04"])
    assert asked == [(tmp_path / "inventory.ini", build_setup.dist, "amd64", said.append)]
    assert list(built.seconds.items()) == [
        ("resolve", 1.3),
        ("sources", 1.3),
        ("apt", 1.3),
        ("wheels", 1.3),
        ("git", 1.3),
        ("images", 1.3),
        ("manifest", 3.8),
    ]
    assert built.directory == str(tmp_path / "bundle") and built.images == [UBUNTU] and built.sources == ["enroot_4.1.2-1_amd64.deb"]
    assert said[0].startswith("sources: ") and said[-1] == "manifest: sha256 of every file"


def test_build_passes_the_architecture_and_security_mirror_on(tmp_path, build_setup, keep_sources, monkeypatch):
    monkeypatch.setattr(bundle, "resolve", lambda inventory, dist, arch, progress: bundle.Contents(apt=build_setup.contents.apt))
    built = bundle.build(tmp_path / "inventory.ini", tmp_path / "bundle", build_setup.dist, "arm64", "")
    assert bundle.read_manifest(tmp_path / "bundle").arch == "arm64" and built.images == []
    assert len(sources_list_of_the_build(build_setup.tools).splitlines()) == 2  # no security archive


def test_build_refuses_a_taken_directory_or_bad_image_before_resolving(tmp_path, monkeypatch):
    monkeypatch.setattr(bundle, "resolve", lambda *args: pytest.fail("resolved"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(UsageError, match="exists and is not an empty directory"):
        bundle.build(tmp_path / "inventory.ini", tmp_path / "full", DEBIAN)
    with pytest.raises(UsageError, match="is a squashfs file"):
        bundle.build(tmp_path / "inventory.ini", tmp_path / "new", DEBIAN, images=["/x.sqsh"])


# ---- the keyring package, read through dpkg-deb


def keyring_deb(tmp_path: Path, entries=None) -> Path:
    return deb(tmp_path / "cuda-keyring_1.1-1_all.deb", entries or [("./usr/share/keyrings/cuda-archive-keyring.gpg", b"key")])


def fake_dpkg_deb(tmp_path: Path, monkeypatch, body: str) -> None:
    directory = tmp_path / "dpkgbin"
    directory.mkdir(exist_ok=True)
    script(directory, "dpkg-deb", "import os, sys\n" + body)
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")


def keyring_refusal(tmp_path: Path, package: Path | None = None, member: str = KEYRING) -> str:
    with pytest.raises(EnvironmentProblem) as exc:
        bundle._keyring_from_deb(package or keyring_deb(tmp_path), member, tmp_path / "keyring.gpg")
    assert not (tmp_path / "keyring.gpg").exists()
    assert exc.value.hint == KEYRING_HINT
    return exc.value.message


def tar_of(entries: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_file_that_is_not_a_package_is_refused_with_dpkg_deb_s_words(tmp_path):
    package = tmp_path / "cuda-keyring_1.1-1_all.deb"
    package.write_bytes(b"not an ar archive")
    message = keyring_refusal(tmp_path, package)
    assert message.startswith("cuda-keyring_1.1-1_all.deb: not a Debian package (dpkg-deb: error: ")


@pytest.mark.parametrize(
    ("stderr", "said"),
    [
        ("b'dpkg-deb: error: \\xff broken\\n'", "dpkg-deb: error: \ufffd broken"),
        ("b' ' * 4096 + b'late words'", "empty file"),  # then tarfile's words on the empty data.tar
        ("b'x' * 5000", "x" * 200),
        ("b''", "empty file"),
    ],
    ids=["not utf-8", "words past 4 KiB", "long", "silent"],
)
def test_a_failing_dpkg_deb_is_refused_with_its_first_words(tmp_path, monkeypatch, stderr, said):
    fake_dpkg_deb(tmp_path, monkeypatch, f"sys.stderr.buffer.write({stderr}); sys.stderr.flush(); sys.exit(2)")
    assert keyring_refusal(tmp_path) == f"cuda-keyring_1.1-1_all.deb: not a Debian package ({said})"


@pytest.mark.parametrize(
    ("stderr", "said"),
    [
        ("dpkg-deb: error: subprocess returned error exit status 2\n", "dpkg-deb: error: subprocess returned error exit status 2"),
        ("", "dpkg-deb exit 2"),
    ],
)
def test_a_dpkg_deb_that_fails_after_a_whole_tar_is_refused(tmp_path, monkeypatch, stderr, said):
    data = tar_of([("./usr/share/keyrings/cuda-archive-keyring.gpg", b"key")])
    (tmp_path / "data.tar").write_bytes(data)
    fake_dpkg_deb(
        tmp_path,
        monkeypatch,
        f"sys.stdout.buffer.write(open({str(tmp_path / 'data.tar')!r}, 'rb').read()); sys.stdout.flush()\nsys.stderr.write({stderr!r}); sys.exit(2)",
    )
    assert keyring_refusal(tmp_path) == f"cuda-keyring_1.1-1_all.deb: not a Debian package ({said})"


def test_a_data_tar_tarfile_cannot_read_is_refused_with_tarfile_s_words(tmp_path, monkeypatch):
    fake_dpkg_deb(tmp_path, monkeypatch, "sys.stdout.buffer.write(b'garbage' * 200); sys.exit(0)")
    assert keyring_refusal(tmp_path) == "cuda-keyring_1.1-1_all.deb: not a Debian package (invalid header)"


def test_a_dpkg_deb_that_cannot_be_run_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    with pytest.raises(EnvironmentProblem) as exc:
        bundle._keyring_from_deb(keyring_deb(tmp_path), KEYRING, tmp_path / "keyring.gpg")
    assert one_line(exc) == "dpkg-deb is not installed: it reads NVIDIA's keyring package: apt-get install dpkg"


def test_a_package_without_the_keyring_is_refused_naming_it(tmp_path):
    package = keyring_deb(tmp_path, [("./usr/share/keyrings/other.gpg", b"key")])
    assert keyring_refusal(tmp_path, package) == f"cuda-keyring_1.1-1_all.deb holds no {KEYRING}"


def test_the_keyring_is_found_by_its_path_whatever_its_last_letter(tmp_path):
    package = keyring_deb(tmp_path, [("./opt/keys/KEYX", b"kx"), ("./usr//share/keyrings/cuda-archive-keyring.gpg", b"key")])
    bundle._keyring_from_deb(package, "/opt/keys/KEYX", tmp_path / "kx.gpg")
    assert (tmp_path / "kx.gpg").read_bytes() == b"kx"
    bundle._keyring_from_deb(package, KEYRING, tmp_path / "keyring.gpg")  # '//' inside the path is one '/'
    assert (tmp_path / "keyring.gpg").read_bytes() == b"key"


def test_the_bounds_of_the_keyring_package_are_inclusive(tmp_path, monkeypatch):
    monkeypatch.setattr(bundle, "MAX_TAR_MEMBERS", 3)
    monkeypatch.setattr(bundle, "MAX_KEYRING_BYTES", 4)
    package = keyring_deb(tmp_path, [("./a", b"a"), ("./b", b"b"), ("./usr/share/keyrings/cuda-archive-keyring.gpg", b"four")])
    bundle._keyring_from_deb(package, KEYRING, tmp_path / "keyring.gpg")
    assert (tmp_path / "keyring.gpg").read_bytes() == b"four"
    many = keyring_deb(tmp_path, [("./a", b"a"), ("./b", b"b"), ("./c", b"c"), ("./usr/share/keyrings/cuda-archive-keyring.gpg", b"four")])
    (tmp_path / "keyring.gpg").unlink()
    assert keyring_refusal(tmp_path, many) == "cuda-keyring_1.1-1_all.deb: more than 3 entries (MAX_TAR_MEMBERS)"


@pytest.mark.parametrize(
    ("entries", "bounds", "message"),
    [
        ([("../k", b"k")], {}, "cuda-keyring_1.1-1_all.deb: entry '../k' is outside the package's root"),
        ([("./dev/fifo", "fifo")], {}, "cuda-keyring_1.1-1_all.deb: entry './dev/fifo' is a device or FIFO"),
        ([("./dev/sda", "block")], {}, "cuda-keyring_1.1-1_all.deb: entry './dev/sda' is a device or FIFO"),
        ([("./dev/tty", 4)], {}, "cuda-keyring_1.1-1_all.deb: entry './dev/tty' is a device or FIFO"),
        (
            [("./usr/share/keyrings/cuda-archive-keyring.gpg", "link:/etc/shadow")],
            {},
            "cuda-keyring_1.1-1_all.deb: './usr/share/keyrings/cuda-archive-keyring.gpg' is a link or not a regular file",
        ),
        (
            [("./usr/share/keyrings/cuda-archive-keyring.gpg", b"k")] * 2,
            {},
            "cuda-keyring_1.1-1_all.deb: './usr/share/keyrings/cuda-archive-keyring.gpg' is in it twice",
        ),
        (
            [("./usr/share/keyrings/cuda-archive-keyring.gpg", b"k" * 5000)],
            {"MAX_KEYRING_BYTES": 4096},
            "cuda-keyring_1.1-1_all.deb: './usr/share/keyrings/cuda-archive-keyring.gpg' is 5,000 bytes, more than 4,096 (MAX_KEYRING_BYTES)",
        ),
        (
            [("./zeros", bytes(3 << 20)), ("./usr/share/keyrings/cuda-archive-keyring.gpg", b"k")],
            {"MAX_KEYRING_TAR_BYTES": 1 << 20},
            "cuda-keyring_1.1-1_all.deb: its files are more than 1,048,576 bytes (MAX_KEYRING_TAR_BYTES)",
        ),
    ],
    ids=["outside", "fifo", "block", "char", "link", "twice", "large", "tar bomb"],
)
def test_each_refusal_of_the_keyring_package_names_the_entry_and_the_fix(tmp_path, monkeypatch, entries, bounds, message):
    for key, value in bounds.items():
        monkeypatch.setattr(bundle, key, value)
    special = [(name, what) for name, what in entries if what in ("fifo", "block")]
    if special:
        package = special_deb(tmp_path, special)
    else:
        package = keyring_deb(tmp_path, entries)
    assert keyring_refusal(tmp_path, package) == message


def special_deb(tmp_path: Path, entries: list[tuple[str, str]]) -> Path:
    """A keyring package whose data.tar holds a FIFO or a block device."""
    package = keyring_deb(tmp_path, [("./placeholder", b"")])
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        for name, what in entries:
            info = tarfile.TarInfo(name)
            info.type = tarfile.FIFOTYPE if what == "fifo" else tarfile.BLKTYPE
            tar.addfile(info)
    data = buffer.getvalue()
    control = io.BytesIO()
    with tarfile.open(fileobj=control, mode="w:gz") as tar:
        info = tarfile.TarInfo("./control")
        body = b"Package: cuda-keyring\nVersion: 1.1-1\nArchitecture: all\n"
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    out = bytearray(b"!<arch>\n")
    for name, member in (("debian-binary", b"2.0\n"), ("control.tar.gz", control.getvalue()), ("data.tar.gz", data)):
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(member):<10}`\n".encode() + member + (b"\n" if len(member) % 2 else b"")
    package.write_bytes(bytes(out))
    return package


# ---- reading a bundle: the refusals' fixes


def test_a_fifo_in_a_bundle_is_refused_as_not_a_plain_file(tmp_path):
    b = fake_bundle(tmp_path / "b")
    os.mkfifo(b / "apt" / "x.deb")
    with pytest.raises(bundle.BundleError) as exc:
        bundle.verify(b)
    assert one_line(exc) == f"bundle {b}: 'apt/x.deb' is not a plain file: remove it, or {REBUILD}"


def test_an_image_archive_s_refusals_name_their_fix(tmp_path):
    b = fake_bundle(tmp_path / "b")
    with pytest.raises(bundle.BundleError) as exc:
        bundle.image_archive(b, "ubuntu:22.04")
    assert exc.value.message == f"bundle {b} carries no image {UBUNTU} (it carries: none)"
    assert exc.value.hint == "build a bundle with it: megaprov bundle build -i INVENTORY --dir DIR --image ubuntu:22.04"
    (b / "images").mkdir()
    refs = ("nvcr.io/nvidia/pytorch:25.01-py3", UBUNTU)
    for ref in refs:
        (b / bundle.image_file(ref)).write_bytes(ref.encode())
    git = bundle.read_manifest(b).versions.git
    manifest = bundle.make_manifest(b, DEBIAN, "amd64", dict(git), {r: bundle.ImageEntry(file=bundle.image_file(r)) for r in refs})
    (b / bundle.MANIFEST).write_text(bundle.manifest_json(manifest))
    with pytest.raises(bundle.BundleError) as exc:
        bundle.image_archive(b, "r.io/other:1")
    assert exc.value.message == f"bundle {b} carries no image r.io/other:1 (it carries: {refs[1]}, {refs[0]})"
    rel = bundle.image_file(UBUNTU)
    (b / rel).write_bytes(b"X" * len(UBUNTU))
    with pytest.raises(bundle.BundleError) as exc:
        bundle.image_archive(b, UBUNTU)
    assert one_line(exc) == f"bundle {b}: {rel} differs from the manifest's size or sha256: the bundle was changed: {REBUILD}"
    (b / rel).unlink()
    with pytest.raises(bundle.BundleError) as exc:
        bundle.image_archive(b, UBUNTU)
    assert one_line(exc) == f"bundle {b}: {rel}: missing or not a plain file: {REBUILD}"


# ---- bootstrap --bundle: does the collection serve one


def test_the_cache_role_serves_a_bundle_where_its_argument_specs_name_it(tmp_path):
    from megaprov import paths

    assert bundle.cache_role_takes_bundle(paths.roles_dir()) is True
    specs = tmp_path / "roles" / "package_cache" / "meta" / "argument_specs.yml"
    assert bundle.cache_role_takes_bundle(tmp_path / "roles") is False
    specs.parent.mkdir(parents=True)
    specs.write_text("argument_specs:\n  main:\n    options:\n      package_cache_port: {}\n", encoding="utf-8")
    assert bundle.cache_role_takes_bundle(tmp_path / "roles") is False
    specs.write_text("# café\nargument_specs:\n  main:\n    options:\n      package_cache_bundle: {}\n", encoding="utf-8")
    assert bundle.cache_role_takes_bundle(tmp_path / "roles") is True


# ---- pure helpers: the facts of a fresh node, the apt-get request, a refusal's detail lines


def test_the_facts_of_a_fresh_node_of_the_distribution():
    assert bundle.bundle_facts(DEBIAN, "arm64") == {
        "distribution": "Debian",
        "os_family": "Debian",
        "version": "12",
        "codename": "bookworm",
        "architecture": "aarch64",
        "kernel": "arm64",
    }
    assert bundle.bundle_facts(NOBLE, "amd64") == {
        "distribution": "Ubuntu",
        "os_family": "Debian",
        "version": "24.04",
        "codename": "noble",
        "architecture": "x86_64",
        "kernel": "generic",
    }
    with pytest.raises(UsageError) as exc:
        bundle.bundle_facts(DEBIAN, "i386")
    assert one_line(exc) == "--arch 'i386' is not an architecture a bundle can be built for: use amd64 or arm64"


def test_apt_is_asked_for_exact_versions_only():
    wanted = bundle.Contents(
        apt=(
            bundle.AptGroup("a", ("jq", "curl")),
            bundle.AptGroup("b", ("cuda-drivers-580",), "nvidia", "580.*"),
            bundle.AptGroup("c", ("libnccl2",), "nvidia", "2.27.7-1+cuda13.0"),
            bundle.AptGroup("d", ("x1",), "debian", "1.?"),
            bundle.AptGroup("e", ("x2",), "debian", "1.[0-9]"),
            bundle.AptGroup("f", ("jq",)),
        )
    )
    assert bundle.apt_request(wanted) == ["jq", "curl", "cuda-drivers-580", "libnccl2=2.27.7-1+cuda13.0", "x1", "x2"]


@pytest.mark.parametrize(("count", "last"), [(20, "problem 19"), (21, "... and 2 more"), (25, "... and 6 more")])
def test_a_refusal_shows_twenty_lines_at_most(count, last):
    problems = [f"problem {n}" for n in range(count)]
    error = bundle._refusal(bundle.BundleError("first", "hint"), problems)
    assert len(error.details) == 19 and error.details[:18] == problems[1:19] and error.details[-1] == last


# ---- bootstrap --bundle: the request it becomes


@pytest.fixture
def bootstrap_inventory(tmp_path, monkeypatch) -> types.SimpleNamespace:
    """A two-host inventory, its evaluation by Ansible stood in by what the fake bundle holds."""
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[head]\nhead01 ansible_host=10.0.0.1\n[gpu_nodes]\ngpu01 ansible_host=10.0.0.2\n")
    asked: list = []

    def resolve(inv, dist, arch, progress=bundle._quiet):
        asked.append((inv, dist.key, arch))
        return bundle.Contents(apt=(bundle.AptGroup("common_extra_packages", ("jq",)),))

    monkeypatch.setattr(bundle, "resolve", resolve)
    return types.SimpleNamespace(path=inventory, asked=asked)


def bootstrap(inventory: Path, directory: Path, **extravars):
    from megaprov.cluster import provision, runner

    return provision.Request(inventory=inventory, options=runner.RunOptions(tags=("base",), extravars=extravars))


def test_a_matching_bundle_turns_the_package_cache_on_serving_it(tmp_path, bootstrap_inventory):
    directory = fake_bundle(tmp_path / "b")
    request = bootstrap(bootstrap_inventory.path, directory, package_cache_bundle="/srv/megaprov/bundle", other=1)
    got = bundle.bootstrap_request(request, directory)
    assert got.options.extravars == {"other": 1, "megaprov_package_cache": True, "package_cache_bundle": "/srv/megaprov/bundle"}
    assert got.options.tags == ("base",) and got.inventory == bootstrap_inventory.path
    assert request.options.extravars == {"package_cache_bundle": "/srv/megaprov/bundle", "other": 1}  # the caller's is untouched
    assert bootstrap_inventory.asked == [(bootstrap_inventory.path, "debian-12", "amd64")]


def test_the_bundle_s_place_on_the_head_may_be_a_host_variable(tmp_path, bootstrap_inventory):
    bootstrap_inventory.path.write_text(
        "[head]\nhead01 ansible_host=10.0.0.1 package_cache_bundle=/srv/b\n[gpu_nodes]\ngpu01 ansible_host=10.0.0.2\n"
    )
    directory = fake_bundle(tmp_path / "b")
    got = bundle.bootstrap_request(bootstrap(bootstrap_inventory.path, directory), directory)
    assert got.options.extravars == {"megaprov_package_cache": True, "package_cache_bundle": "/srv/b"}


def test_a_bundle_without_its_place_on_the_head_is_refused_with_the_copy_to_make(tmp_path, bootstrap_inventory):
    directory = fake_bundle(tmp_path / "b")
    with pytest.raises(UsageError) as exc:
        bundle.bootstrap_request(bootstrap(bootstrap_inventory.path, directory), directory)
    assert one_line(exc) == (
        f"--bundle {directory}: package_cache_bundle (the bundle's directory on the head head01) is not set: "
        "copy the bundle to the head (rsync -a DIR/ HEAD:/srv/megaprov/bundle/) and set package_cache_bundle: /srv/megaprov/bundle"
    )
    with pytest.raises(UsageError, match="package_cache_bundle"):
        bundle.bootstrap_request(bootstrap(bootstrap_inventory.path, directory, package_cache_bundle="relative/dir"), directory)


def test_a_collection_without_a_package_cache_role_cannot_serve_a_bundle(tmp_path, bootstrap_inventory, monkeypatch):
    from megaprov import paths

    directory = fake_bundle(tmp_path / "b")
    monkeypatch.setattr(paths, "roles_dir", lambda: tmp_path / "roles")
    with pytest.raises(EnvironmentProblem) as exc:
        bundle.bootstrap_request(bootstrap(bootstrap_inventory.path, directory, package_cache_bundle="/srv/b"), directory)
    assert one_line(exc) == (
        f"--bundle {directory}: the bundle matches, but this collection has no package cache stage to serve it (role package_cache): "
        "install a megaprov whose collection has the package_cache role, or serve the bundle's apt/, wheels/ and git/ from your own mirrors"
    )


def test_a_bundle_that_does_not_match_is_refused_before_the_request_is_made(tmp_path, bootstrap_inventory):
    directory = fake_bundle(tmp_path / "b")
    (directory / "apt" / "Packages.gz").unlink()
    with pytest.raises(bundle.BundleError, match="apt/Packages.gz: listed in the manifest but missing"):
        bundle.bootstrap_request(bootstrap(bootstrap_inventory.path, directory, package_cache_bundle="/srv/b"), directory)
    assert bootstrap_inventory.asked == []


def test_a_podman_that_does_not_answer_whether_it_holds_the_image_is_named_within_its_deadline(tmp_path, monkeypatch):
    """`podman image exists` has 120 s (a hung podman would otherwise hang the build); past them one line, no traceback."""
    asked = []

    def hung(argv, **kwargs):
        asked.append((argv, kwargs.get("timeout")))
        raise subprocess.TimeoutExpired(argv, kwargs.get("timeout") or 0)

    monkeypatch.setattr(bundle.subprocess, "run", hung)
    with pytest.raises(EnvironmentProblem) as exc:
        bundle.build_images(["ubuntu:22.04"], tmp_path / "images")
    assert asked == [(["podman", "image", "exists", UBUNTU], 120)]
    assert one_line(exc) == "--image ubuntu:22.04: podman image exists did not answer in 120 s: check podman on this machine (podman info)"
