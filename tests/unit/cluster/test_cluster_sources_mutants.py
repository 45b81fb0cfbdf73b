"""Where a cluster's software and measurements come from, beyond their own tests (issue 36): the lab's wheelhouse
(megaprov/cluster/wheelhouse.py: pip's exact command, the cache key, pip's failure and CUDA wheels said in one line),
a Megatron-LM tree made a bare remote (gitsource.py: the archive's size limit, unreadable archives, the commit's fixed
identity, git's failure, a missing tag), ``megaprov image pull`` (image.py: the play it runs, --archive's refusals,
the play's answer) and the recorded compute rates (rates.py: each refused fact, the rates file, what wins).

Stood in: pip (wheelhouse's subprocess.run, writing the wheels a real download would), the Ansible play
(plays.run) and, for git's failure only, a `git` on PATH that fails. Everything else is real: git, tar archives, the
cache directories, the fact cache and the rates file under tmp_path."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from megaprov.cluster import gitsource, image, rates, runner, wheelhouse
from megaprov.errors import EnvironmentProblem, RunFailed, UsageError

# ---- wheelhouse


class Pip:
    """`pip download` stood in: records each command and writes ``wheels`` into its --dest, or fails with ``stderr``."""

    def __init__(self, wheels: tuple[str, ...] = ("megatron_core-0.16.1-py3-none-any.whl",), rc: int = 0, stderr: str = "") -> None:
        self.wheels, self.rc, self.stderr = wheels, rc, stderr
        self.calls: list[tuple[list[str], dict]] = []

    def __call__(self, argv: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        self.calls.append((argv, kwargs))
        dest = Path(argv[argv.index("--dest") + 1])
        for name in self.wheels:
            (dest / name).write_bytes(b"wheel")
        return subprocess.CompletedProcess(argv, self.rc, "", self.stderr)


@pytest.fixture
def pip(monkeypatch):
    fake = Pip()
    monkeypatch.setattr(wheelhouse.subprocess, "run", fake)
    monkeypatch.delenv("MEGAPROV_TORCH_INDEX", raising=False)
    monkeypatch.delenv("MEGAPROV_TORCH", raising=False)
    return fake


PLATFORM_ARGS = [
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "manylinux_2_17_x86_64",
    "--platform",
    "manylinux2014_x86_64",
    "--platform",
    "linux_x86_64",
]


def key_dir(cache: Path, requirements: tuple[str, ...], python: str, index: str) -> Path:
    """The cache directory of a build: the interpreter's version, then 12 hex digits of the inputs' sha256."""
    digest = hashlib.sha256("\n".join([*requirements, python, index]).encode()).hexdigest()[:12]
    return cache / f"py{python.replace('.', '')}-{digest}"


def test_the_wheelhouse_is_pips_binary_download_for_the_nodes_interpreter_kept_under_its_inputs(pip, tmp_path):
    reqs = ("torch==2.13.0+cpu", "uv==0.13.9")
    built = wheelhouse.build(reqs, cache=tmp_path, index_url="https://download.pytorch.org/whl/cpu")
    assert built == key_dir(tmp_path, reqs, "3.11", "https://download.pytorch.org/whl/cpu")
    [(argv, kwargs)] = pip.calls
    dest = argv[6]
    assert argv == [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--dest",
        dest,
        "--only-binary",
        ":all:",
        "--python-version",
        "3.11",
        "--implementation",
        "cp",
        *PLATFORM_ARGS,
        "--extra-index-url",
        "https://download.pytorch.org/whl/cpu",
        *reqs,
    ]
    assert Path(dest).parent == tmp_path and not Path(dest).exists()  # filled aside, then moved into place
    assert kwargs == {"capture_output": True, "text": True, "check": False}
    assert sorted(p.name for p in built.iterdir()) == [".complete", "megatron_core-0.16.1-py3-none-any.whl"]
    assert (built / ".complete").read_text() == "torch==2.13.0+cpu\nuv==0.13.9\n"
    # the same inputs again: the cached directory, pip not run
    assert wheelhouse.build(reqs, cache=tmp_path, index_url="https://download.pytorch.org/whl/cpu") == built and len(pip.calls) == 1


def test_another_interpreter_or_index_is_another_wheelhouse(pip, tmp_path):
    reqs = ("uv==0.13.9",)
    other = wheelhouse.build(reqs, python_version="3.12", cache=tmp_path, index_url="")
    assert other == key_dir(tmp_path, reqs, "3.12", "")
    argv = pip.calls[0][0]
    assert argv[argv.index("--python-version") + 1] == "3.12" and "--extra-index-url" not in argv
    assert wheelhouse.build(reqs, cache=tmp_path, index_url="/srv/wheels") == key_dir(tmp_path, reqs, "3.11", "/srv/wheels")
    assert len(pip.calls) == 2


def test_the_index_comes_from_megaprov_torch_index_unless_given_and_the_cache_from_megaprov_cache(pip, tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_TORCH_INDEX", "https://mirror.example/cpu")
    monkeypatch.setenv("MEGAPROV_CACHE", str(tmp_path / "cache"))
    built = wheelhouse.build(("uv==0.13.9",))
    assert built == key_dir(tmp_path / "cache" / "wheelhouse", ("uv==0.13.9",), "3.11", "https://mirror.example/cpu")
    assert pip.calls[0][0][-3:] == ["--extra-index-url", "https://mirror.example/cpu", "uv==0.13.9"]
    wheelhouse.build(("uv==0.13.9",), index_url="", cache=tmp_path / "other")  # an explicit "" is no index, not the variable's
    assert "--extra-index-url" not in pip.calls[1][0]


def test_without_requirements_the_labs_are_downloaded(pip, tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_TORCH", "torch==2.13.0+cpu")
    wheelhouse.build(cache=tmp_path)
    lab = wheelhouse.lab_requirements()
    assert lab[:3] == ("torch==2.13.0+cpu", "megatron-core==0.16.1", wheelhouse.UV)
    assert pip.calls[0][0][-len(lab) :] == list(lab)


def test_the_labs_torch_is_2_13_unless_megaprov_torch_says_otherwise(monkeypatch):
    monkeypatch.delenv("MEGAPROV_TORCH", raising=False)
    lab = wheelhouse.lab_requirements()
    assert lab[0] == "torch==2.13.0" and lab[1:3] == wheelhouse.LAB_BASE and len(lab) > 3
    monkeypatch.setenv("MEGAPROV_TORCH", "torch==2.9.1")
    assert wheelhouse.lab_requirements() == ("torch==2.9.1", *lab[1:])


def test_pips_failure_is_its_last_line_that_is_not_a_warning_and_leaves_nothing(pip, tmp_path):
    pip.rc, pip.stderr = (
        1,
        "ERROR: Ignored versions that require Python >=3.12\nERROR: Could not find a version that satisfies torch==9\n"
        "ERROR: No matching distribution found for torch==9\nWARNING: x\n\n",
    )
    with pytest.raises(EnvironmentProblem) as err:
        wheelhouse.build(("torch==9", "uv==0.13.9"), cache=tmp_path)
    assert err.value.message == "could not build the wheelhouse (torch==9 uv==0.13.9): ERROR: No matching distribution found for torch==9"
    assert err.value.hint == "set MEGAPROV_TORCH_INDEX to a CPU wheel index (https://download.pytorch.org/whl/cpu) or a local wheel folder"
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []
    pip.stderr = "WARNING: only warnings\n"
    with pytest.raises(EnvironmentProblem) as err:
        wheelhouse.build(("torch==9",), cache=tmp_path)
    assert err.value.message == "could not build the wheelhouse (torch==9): pip failed"


def test_a_download_with_cuda_wheels_is_refused_unless_asked(pip, tmp_path):
    pip.wheels = ("torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl", "nvidia_nccl_cu12-2.27.7-py3-none-manylinux_2_18_x86_64.whl")
    with pytest.raises(EnvironmentProblem) as err:
        wheelhouse.build(("torch==2.13.0",), cache=tmp_path)
    assert err.value.message == (
        "the wheelhouse would hold CUDA wheels (nvidia_nccl_cu12-2.27.7-py3-none-manylinux_2_18_x86_64.whl, ...): PyPI serves torch's CUDA build"
    )
    assert err.value.hint == "set MEGAPROV_TORCH_INDEX=https://download.pytorch.org/whl/cpu (or a folder with the CPU wheel) and run again"
    pip.wheels = ("torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",)
    with pytest.raises(EnvironmentProblem, match=r"CUDA wheels \(torch-2.13.0-cp311"):
        wheelhouse.build(("torch==2.13.0",), cache=tmp_path / "b")
    built = wheelhouse.build(("torch==2.13.0",), cache=tmp_path / "c", cpu_only=False)
    assert (built / "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl").is_file()
    pip.wheels = ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "numpy-2.3.0-cp311-cp311-manylinux_2_28_x86_64.whl")
    cpu = wheelhouse.build(("torch==2.13.0+cpu",), cache=tmp_path / "d")
    assert (cpu / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").is_file()


# ---- gitsource


def tree(root: Path) -> Path:
    (root / "megatron" / "core").mkdir(parents=True)
    (root / "megatron" / "core" / "package_info.py").write_text("__version__ = '0.16.1'\n")
    (root / "pretrain_gpt.py").write_text("print('hi')\n")
    return root


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(repo), *args], capture_output=True, text=True, check=True).stdout


def test_an_archive_larger_than_512_mib_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.tar"
    with tarfile.open(big, "w") as tar:
        tar.add(tree(tmp_path / "src") / "pretrain_gpt.py", arcname="pretrain_gpt.py")
    with big.open("r+b") as f:
        f.truncate(gitsource.MAX_ARCHIVE_BYTES)  # at the limit (sparse zeros after the archive): read
    gitsource._unpack(big, tmp_path / "into")
    assert [p.name for p in (tmp_path / "into").iterdir()] == ["pretrain_gpt.py"]
    with big.open("r+b") as f:
        f.truncate(gitsource.MAX_ARCHIVE_BYTES + 1)
    with pytest.raises(UsageError) as err:
        gitsource._unpack(big, tmp_path / "again")
    assert err.value.message == f"{big} is larger than 512 MiB" and err.value.hint == "give the tree of one Megatron-LM tag"
    assert not (tmp_path / "again").exists()


def test_a_file_that_is_no_tar_archive_is_refused_with_what_to_give(tmp_path):
    bad = tmp_path / "mlm.tar.gz"
    bad.write_text("not an archive\n" * 100)
    with pytest.raises(UsageError) as err:
        gitsource.remote_from_tree(bad, "Megatron-LM", "core_v0.16.1", tmp_path / "cache")
    assert err.value.message.startswith(f"{bad} is not a readable tar archive: ")
    assert err.value.hint == "give a .tar.gz made by git archive, or a directory"


def test_a_missing_tree_or_a_bad_name_is_refused(tmp_path):
    with pytest.raises(UsageError) as err:
        gitsource.remote_from_tree(tmp_path / "nowhere", "Megatron-LM", "core_v0.16.1", tmp_path / "cache")
    assert err.value.message == f"{tmp_path / 'nowhere'} does not exist"
    assert err.value.hint == "give a Megatron-LM tree: a directory or a .tar.gz made by git archive"
    with pytest.raises(UsageError) as err:
        gitsource.remote_from_tree(tree(tmp_path / "src"), "../x", "core_v0.16.1", tmp_path / "cache")
    assert err.value.message == "git tag 'core_v0.16.1' or repository name '../x' is not a plain name"
    assert err.value.hint == "use letters, digits, '.', '_' and '-'"


def test_the_remote_is_one_commit_by_megaprov_at_a_fixed_date_kept_under_the_trees_digest(tmp_path):
    src = tree(tmp_path / "src")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref: refs/heads/main\n")  # the tree's own history is not part of it
    repo = gitsource.remote_from_tree(src, "Megatron-LM", "core_v0.16.1", tmp_path / "cache")
    assert repo.parent.parent == tmp_path / "cache" and repo.parent.name.endswith("-core_v0.16.1") and len(repo.parent.name) == 16 + 13
    log = git(repo, "log", "--format=%an <%ae>|%cn <%ce>|%at|%ct|%s", "core_v0.16.1")
    assert log == (
        "megaprov <megaprov@localhost>|megaprov <megaprov@localhost>|1767225600|1767225600|"
        "Megatron-LM at core_v0.16.1, from a tree (megaprov.cluster.gitsource)\n"
    )
    assert git(repo, "ls-tree", "-r", "--name-only", "core_v0.16.1").split() == ["megatron/core/package_info.py", "pretrain_gpt.py"]
    assert sorted(p.name for p in repo.parent.iterdir()) == [".complete", "Megatron-LM.git"]  # the work tree is gone
    # the same files without .git: the same digest, the same cached remote; a changed file: another
    plain = tree(tmp_path / "plain")
    assert gitsource.remote_from_tree(plain, "Megatron-LM", "core_v0.16.1", tmp_path / "cache") == repo
    (plain / "pretrain_gpt.py").write_text("print('changed')\n")
    assert gitsource.remote_from_tree(plain, "Megatron-LM", "core_v0.16.1", tmp_path / "cache").parent != repo.parent


def test_an_archive_whose_only_folder_is_megatron_is_kept_as_it_is(tmp_path):
    src = tree(tmp_path / "src")
    archive = tmp_path / "mlm.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src / "megatron", arcname="megatron")
    repo = gitsource.remote_from_tree(archive, "Megatron-LM", "core_v0.16.1", tmp_path / "cache")
    assert git(repo, "ls-tree", "-r", "--name-only", "core_v0.16.1").split() == ["megatron/core/package_info.py"]


def test_an_archive_with_one_file_on_top_is_kept_as_it_is(tmp_path):
    archive = tmp_path / "one.tar.gz"
    (tmp_path / "README").write_text("one\n")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "README", arcname="README")
    repo = gitsource.remote_from_tree(archive, "Megatron-LM", "core_v0.16.1", tmp_path / "cache")
    assert git(repo, "ls-tree", "-r", "--name-only", "core_v0.16.1").split() == ["README"]


def test_gits_failure_says_which_git_command_and_what_git_said(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").write_text('#!/bin/sh\necho "fatal: cannot $1 here" >&2\nexit 128\n')
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    src = tree(tmp_path / "src")
    with pytest.raises(EnvironmentProblem) as err:
        gitsource.remote_from_tree(src, "Megatron-LM", "core_v0.16.1", tmp_path / "cache")
    assert err.value.message == f"git init of {src} failed: fatal: cannot init here"
    assert err.value.hint == "check git works here (scripts/setup.sh installs it)"
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []


def test_a_tags_commit_is_its_hex_name_and_a_missing_tag_says_so(tmp_path):
    repo = gitsource.remote_from_tree(tree(tmp_path / "src"), "Megatron-LM", "core_v0.16.1", tmp_path / "cache")
    commit = gitsource.tag_commit(repo, "core_v0.16.1")
    assert isinstance(commit, str) and commit == git(repo, "rev-list", "-n1", "core_v0.16.1").strip() and len(commit) in (40, 64)
    with pytest.raises(EnvironmentProblem) as err:
        gitsource.tag_commit(repo, "core_v0.17.0")
    assert err.value.message == f"{repo} has no tag core_v0.17.0" and err.value.hint == "rebuild it from the tree"


# ---- image pull


class Recorder:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, text: str) -> None:
        self.lines.append(text)


def play_result(data: dict | None = None, failures: list[runner.Failure] | None = None) -> runner.RunResult:
    return runner.RunResult(
        "failed" if failures else "successful", 2 if failures else 0, [], failures or [], [], Path("/state/runs/image_pull-1"), 9.0, data=data or {}
    )


def test_pull_runs_image_pull_yml_on_the_head_with_the_images_names_and_reads_its_answer(tmp_path, monkeypatch):
    calls = []
    said = {"mirror": "10.0.0.1:5000/docker.io/library/ubuntu:22.04", "squashfs": "/shared/images/u.sqsh", "bytes": 77, "digest": "sha256:ab"}

    def run(*args, **kwargs):
        calls.append((args, kwargs))
        return play_result({"megaprov_image": said})

    monkeypatch.setattr(image.plays, "run", run)
    report = Recorder()
    archive = tmp_path / "u.tar"
    pulled = image.pull(Path("/etc/inv.yml"), "ubuntu:22.04", archive, report)
    assert calls == [(("image_pull.yml", Path("/etc/inv.yml"), image.names("ubuntu:22.04").play_vars(archive), report), {"hosts": 1})]
    assert calls[0][0][2]["image_registry_pull_archive"] == str(archive)
    assert pulled == image.Pulled("ubuntu:22.04", said["mirror"], "/shared/images/u.sqsh", 77, "sha256:ab")


def test_a_failed_pull_is_the_plays_failure_named_after_the_image(monkeypatch):
    failed = runner.Failure("head", "Pull the image", "Pull one image into the head's registry", "manifest unknown", False)
    monkeypatch.setattr(image.plays, "run", lambda *a, **k: play_result(failures=[failed]))
    with pytest.raises(RunFailed) as err:
        image.pull(Path("inv"), "nvcr.io/nvidia/pytorch:25.01-py3", None, Recorder())
    assert err.value.message == "image pull nvcr.io/nvidia/pytorch:25.01-py3: head: task 'Pull the image' failed: manifest unknown"
    assert err.value.hint == "see /state/runs/image_pull-1/stdout"


def test_an_answer_without_a_mirror_says_where_to_look():
    with pytest.raises(RunFailed) as err:
        image.answer("ubuntu:22.04", {"megaprov_image": {"mirror": ""}})
    assert err.value.message == "image pull ubuntu:22.04: the play ended without saying where the image is"
    assert err.value.hint == "see the run's stdout in megaprov's state directory"


@pytest.mark.parametrize(("said", "size"), [({}, 0), ({"bytes": None}, 0), ({"bytes": "many"}, 0), ({"bytes": [1]}, 0), ({"bytes": "12"}, 12)])
def test_a_size_the_play_did_not_say_as_a_number_is_zero_and_no_digest_is_empty(said, size):
    pulled = image.answer("ubuntu:22.04", {"megaprov_image": {"mirror": "head:5000/docker.io/library/ubuntu:22.04", **said}})
    assert (pulled.bytes, pulled.digest, pulled.squashfs) == (size, "", "")


def test_archive_refusals_say_the_name_and_what_to_give(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as err:
        image.archive_path("a\x1b.tar")
    assert err.value.message == "--archive 'a\\\\x1b.tar' is not a file name"
    assert err.value.hint == "give the path of a `podman save` or `docker save` archive"
    with pytest.raises(UsageError) as err:
        image.archive_path("a\x7f.tar")
    assert err.value.message == "--archive 'a\\\\x7f.tar' is not a file name"
    with pytest.raises(UsageError) as err:
        image.archive_path("gone.tar")
    assert err.value.message == "--archive gone.tar: no such file"
    assert err.value.hint == "give the path of a `podman save` or `docker save` archive on this machine"
    (tmp_path / "dir.tar").mkdir()
    with pytest.raises(UsageError) as err:
        image.archive_path("dir.tar")
    assert err.value.message == "--archive dir.tar is not a regular file"
    assert err.value.hint == "give the archive file itself (podman save -o FILE IMAGE)"


def test_an_archive_name_with_spaces_or_non_ascii_is_a_file_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my image é.tar").write_bytes(b"x")
    assert image.archive_path("my image é.tar") == tmp_path / "my image é.tar"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert image.archive_path("~/my image é.tar") == tmp_path / "my image é.tar"


# ---- rates


FACT = {"version": 1, "tflops_per_device": 989.5, "devices": ["H100", "H100"], "backend": "torch-cuda", "dtype": "bfloat16"}
FACT |= {"measured_at": "2026-01-01T00:00:00Z"}
FIX = "measure it again (megaprov preflight -i INVENTORY --limit gpu1): the recorded fact was not written by megaprov's preflight"


def test_a_fact_becomes_the_nodes_rate_and_a_node_without_devices_counts_one():
    assert rates.rate_from_fact("gpu1", FACT) == rates.NodeRate("gpu1", 989.5, 2, "torch-cuda", "bfloat16", "2026-01-01T00:00:00Z")
    assert rates.rate_from_fact("gpu1", FACT).gpu
    cpu = rates.rate_from_fact("cpu1", {**FACT, "tflops_per_device": 2, "devices": [], "backend": "numpy-cpu", "dtype": "float32", "measured_at": ""})
    assert cpu == rates.NodeRate("cpu1", 2.0, 1, "numpy-cpu", "float32", "") and not cpu.gpu
    assert isinstance(cpu.tflops_per_device, float)
    assert rates.rate_from_fact("gpu1", {**FACT, "tflops_per_device": rates.MAX_TFLOPS, "devices": None}).devices == 1
    assert rates.rate_from_fact("gpu1", {k: v for k, v in FACT.items() if k != "measured_at"}).measured_at == ""
    assert rates.rate_from_fact("gpu1", None) is None and rates.rate_from_fact("gpu1", {**FACT, "version": 2}) is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tflops_per_device": 0}, "its recorded compute rate tflops_per_device=0 is not a positive finite number"),
        ({"tflops_per_device": True}, "its recorded compute rate tflops_per_device=True is not a positive finite number"),
        ({"tflops_per_device": "989"}, "its recorded compute rate tflops_per_device='989' is not a positive finite number"),
        ({"tflops_per_device": float("inf")}, "its recorded compute rate tflops_per_device=inf is not a positive finite number"),
        ({"tflops_per_device": float("nan")}, "its recorded compute rate tflops_per_device=nan is not a positive finite number"),
        ({"tflops_per_device": 100_000.5}, "its recorded compute rate tflops_per_device=100000.5 is not a positive finite number"),
        ({"devices": "H100"}, "its recorded compute rate lists devices='H100', not a list of at most 1,024"),
        ({"devices": ["d"] * 1025}, f"its recorded compute rate lists devices={repr(['d'] * 1025)[:57]}..., not a list of at most 1,024"),
        ({"backend": "jax"}, "its recorded compute rate has backend='jax', not one of torch-cuda, torch-cpu, numpy-cpu"),
        ({"dtype": "BF16"}, "its recorded compute rate has dtype='BF16', not a dtype name"),
        ({"dtype": None}, "its recorded compute rate has dtype=None, not a dtype name"),
        ({"measured_at": "x" * 65}, f"its recorded compute rate has measured_at='{'x' * 56}..., not a time stamp"),
        ({"measured_at": "now\x1b[2J"}, "its recorded compute rate has measured_at='now\\x1b[2J', not a time stamp"),
        ({"measured_at": 5}, "its recorded compute rate has measured_at=5, not a time stamp"),
    ],
)
def test_a_fact_megaprov_did_not_write_is_refused_with_the_nodes_name(change, message):
    with pytest.raises(UsageError) as err:
        rates.rate_from_fact("gpu1", {**FACT, **change})
    assert err.value.message == f"node gpu1: {message}" and err.value.hint == FIX


def test_a_1024_device_node_and_a_64_character_stamp_are_accepted():
    rate = rates.rate_from_fact("gpu1", {**FACT, "devices": ["d"] * 1024, "measured_at": "t" * 64})
    assert (rate.devices, rate.measured_at) == (1024, "t" * 64)


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all: {}\n")
    return inventory


def test_recorded_rates_merge_into_one_sorted_file_per_inventory(state):
    rates.record(state, {"gpu2": {**FACT, "tflops_per_device": 900.0}})
    rates.record(state, {"gpu1": FACT})
    path = rates.rates_file(state)
    assert path == Path(os.environ["MEGAPROV_STATE"]) / "rates" / f"{rates.fact_cache_dir(state).name}.json"
    both = {"gpu1": FACT, "gpu2": {**FACT, "tflops_per_device": 900.0}}
    assert path.read_text() == json.dumps(both, indent=2, sort_keys=True) + "\n"
    assert path.read_text().startswith('{\n  "gpu1": {\n    "backend": "torch-cuda",\n')
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    rates.record(state, {"gpu2": FACT})  # a node measured again: its new fact
    assert json.loads(path.read_text()) == {"gpu1": FACT, "gpu2": FACT}


def test_a_garbled_rates_file_is_replaced_by_what_the_nodes_reported(state):
    path = rates.rates_file(state)
    path.parent.mkdir(parents=True)
    path.write_text("[1, 2]")
    rates.record(state, {"gpu1": FACT})
    assert json.loads(path.read_text()) == {"gpu1": FACT}


def test_known_rates_prefer_the_recorded_then_the_fact_cache_and_skip_nodes_without(state):
    rates.record(state, {"gpu1": FACT})
    cache = rates.fact_cache_dir(state)
    cache.mkdir(parents=True)
    slower = {**FACT, "tflops_per_device": 500.0}
    (cache / "gpu1").write_text(json.dumps({"megaprov_compute": slower}))
    (cache / "gpu2").write_text(json.dumps({"ansible_local": {"megaprov_compute": slower}}))
    (cache / "s1_gpu3").write_text(json.dumps({"megaprov_compute": {**slower, "tflops_per_device": 400.0}}))
    found = rates.known(state, ["gpu1", "gpu2", "gpu3", "gpu4"])
    assert [(r.host, r.tflops_per_device) for r in found] == [("gpu1", 989.5), ("gpu2", 500.0), ("gpu3", 400.0)]
    assert rates.known(state, ()) == ()
