"""A Megatron-LM tree made a bare remote (gitsource.py), edge by edge: the cache key (the archive's bytes, or each file's
path and bytes), the commands the build runs (their exact argv and folders), the remote's branch, ignored files and a tree
that is itself a git checkout, an empty tree, and what the operator reads when git, cp or rm fails.

Stood in: nothing but the node's commands where a test must see or break them: ``git``, ``cp`` and ``rm`` on PATH are
small scripts that log their argv and folder and run the real command (or fail as the test needs). Real git builds
every remote; trees and tarballs are made under tmp_path.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from megaprov.cluster import gitsource
from megaprov.errors import EnvironmentProblem, UsageError
from tests.unit.cluster.test_cluster_sources_mutants import git, tree

TAG = "core_v0.16.1"
SEP = "\x1f"


def files(repo: Path) -> list[str]:
    return git(repo, "ls-tree", "-r", "--name-only", TAG).split()


def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, body: str) -> Path:
    """A script ``name`` first on PATH: it logs its folder and argv to ``<tmp_path>/calls.log``, then runs ``body``
    (sh; ``$REAL`` is the real command)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    real = shutil.which(name)
    log = tmp_path / "calls.log"
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\nREAL={real}\n{{ printf '%s' \"$PWD\"; printf '{SEP}%s' {name} \"$@\"; printf '\\n'; }} >> {log}\n{body}\n")
    script.chmod(0o755)
    if not os.environ["PATH"].startswith(f"{bin_dir}:"):
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return log


def calls(log: Path) -> list[tuple[str, list[str]]]:
    return [(line.split(SEP)[0], line.split(SEP)[1:]) for line in log.read_text().splitlines()]


# ---- the cache key


def test_a_directory_is_cached_under_the_sha256_of_each_files_path_length_and_bytes(tmp_path):
    src = tree(tmp_path / "src")
    repo = gitsource.remote_from_tree(src, "Megatron-LM", TAG, tmp_path / "cache")
    h = hashlib.sha256()
    for rel in ("megatron/core/package_info.py", "pretrain_gpt.py"):
        data = (src / rel).read_bytes()
        h.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    assert repo == tmp_path / "cache" / f"{h.hexdigest()[:16]}-{TAG}" / "Megatron-LM.git"


def test_a_file_whose_bytes_spell_another_files_entry_is_not_taken_for_that_pair_of_files(tmp_path):
    one = tmp_path / "one"
    one.mkdir()
    (one / "a.py").write_bytes(b"x\0b.py\0y")
    two = tmp_path / "two"
    two.mkdir()
    (two / "a.py").write_bytes(b"x")
    (two / "b.py").write_bytes(b"y")
    first = gitsource.remote_from_tree(one, "Megatron-LM", TAG, tmp_path / "cache")
    second = gitsource.remote_from_tree(two, "Megatron-LM", TAG, tmp_path / "cache")
    assert second != first
    assert files(first) == ["a.py"]
    assert files(second) == ["a.py", "b.py"]


def test_the_same_bytes_under_another_file_name_is_another_tree(tmp_path):
    first = gitsource.remote_from_tree(tree(tmp_path / "a"), "Megatron-LM", TAG, tmp_path / "cache")
    other = tree(tmp_path / "b")
    (other / "pretrain_gpt.py").rename(other / "train.py")
    second = gitsource.remote_from_tree(other, "Megatron-LM", TAG, tmp_path / "cache")
    assert second != first
    assert files(first) == ["megatron/core/package_info.py", "pretrain_gpt.py"]
    assert files(second) == ["megatron/core/package_info.py", "train.py"]


def test_an_archive_is_cached_under_the_sha256_of_its_bytes_and_another_archive_is_another_tree(tmp_path):
    archives = []
    for name in ("one", "two"):
        src = tree(tmp_path / name)
        (src / f"{name}.py").write_text(f"{name} = 1\n")
        archive = tmp_path / f"{name}.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(src, arcname="Megatron-LM")
        archives.append(archive)
    one = gitsource.remote_from_tree(archives[0], "Megatron-LM", TAG, tmp_path / "cache")
    two = gitsource.remote_from_tree(archives[1], "Megatron-LM", TAG, tmp_path / "cache")
    assert one.parent.name == f"{hashlib.sha256(archives[0].read_bytes()).hexdigest()[:16]}-{TAG}"
    assert two.parent.name == f"{hashlib.sha256(archives[1].read_bytes()).hexdigest()[:16]}-{TAG}"
    assert files(one) == ["megatron/core/package_info.py", "one.py", "pretrain_gpt.py"]
    assert files(two) == ["megatron/core/package_info.py", "pretrain_gpt.py", "two.py"]


# ---- what the build runs and what the remote holds


def test_the_build_copies_the_tree_commits_it_in_a_work_folder_and_clones_it_bare_quietly(tmp_path, monkeypatch):
    src = tree(tmp_path / "src").resolve()
    log = stand_in(tmp_path, monkeypatch, "git", 'exec "$REAL" "$@"')
    stand_in(tmp_path, monkeypatch, "cp", 'exec "$REAL" "$@"')
    stand_in(tmp_path, monkeypatch, "rm", 'exec "$REAL" "$@"')
    repo = gitsource.remote_from_tree(src, "Megatron-LM", TAG, tmp_path / "cache")
    seen = calls(log)
    build = Path(seen[-1][1][-1]).parent  # the build's private folder, renamed into place at the end
    assert build.parent == tmp_path / "cache" and build.name.startswith(f".{repo.parent.name}-")
    work = str(build / "work")
    assert [argv for _, argv in seen] == [
        ["cp", "-a", "--", f"{src}/.", work],
        ["rm", "-rf", "--", f"{work}/.git"],
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "-A", "-f"],
        ["git", "commit", "-q", "-m", f"Megatron-LM at {TAG}, from a tree (megaprov.cluster.gitsource)"],
        ["git", "tag", TAG],
        ["git", "clone", "-q", "--bare", work, str(build / "Megatron-LM.git")],
        ["rm", "-rf", "--", work],
    ]
    assert [folder for folder, argv in seen if argv[0] == "git"] == [work] * 4 + [str(build)]
    assert files(repo) == ["megatron/core/package_info.py", "pretrain_gpt.py"]


def test_the_remote_checks_out_main_and_keeps_the_files_the_trees_gitignore_names(tmp_path):
    src = tree(tmp_path / "src")
    (src / ".gitignore").write_text("*.so\nbuild/\n")
    (src / "megatron" / "core" / "helpers.so").write_bytes(b"\x7fELF")
    (src / "build").mkdir()
    (src / "build" / "notes.txt").write_text("kept\n")
    repo = gitsource.remote_from_tree(src, "Megatron-LM", TAG, tmp_path / "cache")
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main\n"
    assert git(repo, "for-each-ref", "--format=%(refname)") == f"refs/heads/main\nrefs/tags/{TAG}\n"
    assert files(repo) == [".gitignore", "build/notes.txt", "megatron/core/helpers.so", "megatron/core/package_info.py", "pretrain_gpt.py"]


def test_a_tree_that_is_a_git_checkout_gives_one_commit_without_its_history(tmp_path):
    src = tree(tmp_path / "src")
    env = {**os.environ, **gitsource.GIT_ENV}
    for argv in (["init", "-q", "-b", "dev"], ["add", "-A"], ["commit", "-q", "-m", "upstream history"]):
        subprocess.run(["git", *argv], cwd=src, env=env, check=True, capture_output=True)
    (src / "pretrain_gpt.py").write_text("print('changed')\n")  # an uncommitted change: the tree as it is counts
    repo = gitsource.remote_from_tree(src, "Megatron-LM", TAG, tmp_path / "cache")
    assert git(repo, "log", "--format=%s|%P", TAG) == f"Megatron-LM at {TAG}, from a tree (megaprov.cluster.gitsource)|\n"
    assert git(repo, "for-each-ref", "--format=%(refname)") == f"refs/heads/main\nrefs/tags/{TAG}\n"
    assert git(repo, "show", f"{TAG}:pretrain_gpt.py") == "print('changed')\n"


def test_a_tree_without_a_file_is_refused_with_what_to_give_and_nothing_is_cached(tmp_path):
    src = tmp_path / "src"
    (src / "megatron" / "core").mkdir(parents=True)
    with pytest.raises(UsageError) as err:
        gitsource.remote_from_tree(src, "Megatron-LM", TAG, tmp_path / "cache")
    assert err.value.message == f"{src.resolve()} holds no file"
    assert err.value.hint == "give a Megatron-LM tree: a directory or a .tar.gz made by git archive"
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []


# ---- failures


def test_a_failing_git_reports_its_last_300_characters_of_stderr(tmp_path, monkeypatch):
    src = tree(tmp_path / "src")
    said = "x" * 100 + "".join(f"{i:03d}" for i in range(100))  # 400 characters; the first 100 are dropped
    stand_in(tmp_path, monkeypatch, "git", f'echo "noise on stdout"; echo "  {said}  " >&2; exit 128')
    with pytest.raises(EnvironmentProblem) as err:
        gitsource.remote_from_tree(src, "Megatron-LM", TAG, tmp_path / "cache")
    assert err.value.message == f"git init of {src.resolve()} failed: {said[-300:]}"
    assert err.value.hint == "check git works here (scripts/setup.sh installs it)"
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []


def test_a_failing_git_that_says_nothing_on_stderr_reports_its_stdout(tmp_path, monkeypatch):
    src = tree(tmp_path / "src")
    stand_in(tmp_path, monkeypatch, "git", 'if [ "$1" = commit ]; then echo "  nothing to commit  "; exit 1; fi; exec "$REAL" "$@"')
    with pytest.raises(EnvironmentProblem) as err:
        gitsource.remote_from_tree(src, "Megatron-LM", TAG, tmp_path / "cache")
    assert err.value.message == f"git commit of {src.resolve()} failed: nothing to commit"


def test_a_failing_copy_stops_the_build_in_one_line_naming_the_tree_and_cps_words(tmp_path, monkeypatch, capfd):
    src = tree(tmp_path / "src")
    stand_in(tmp_path, monkeypatch, "cp", "echo \"cp: cannot open 'pretrain_gpt.py' for reading: Input/output error\" >&2; exit 1")
    with pytest.raises(EnvironmentProblem) as err:
        gitsource.remote_from_tree(src, "Megatron-LM", TAG, tmp_path / "cache")
    assert err.value.message == f"copying {src.resolve()} failed: cp: cannot open 'pretrain_gpt.py' for reading: Input/output error"
    assert err.value.hint == "check that the tree is readable and that the cache directory has room"
    assert capfd.readouterr() == ("", "")
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []


@pytest.mark.parametrize(("target", "what"), [("/work/.git", "removing the copy's .git"), ("/work", "removing the work tree")])
def test_a_failing_removal_stops_the_build_and_nothing_is_cached(tmp_path, monkeypatch, target, what):
    src = tree(tmp_path / "src")
    stand_in(
        tmp_path,
        monkeypatch,
        "rm",
        f'case "$3" in *{target}) echo "rm: cannot remove: Device or resource busy" >&2; exit 1;; esac; exec "$REAL" "$@"',
    )
    with pytest.raises(EnvironmentProblem) as err:
        gitsource.remote_from_tree(src, "Megatron-LM", TAG, tmp_path / "cache")
    assert err.value.message == f"{what} of {src.resolve()} failed: rm: cannot remove: Device or resource busy"
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []
