"""A Megatron-LM tree (directory or git archive tarball) becomes a bare remote tagged as the megatron role pins it."""

import io
import subprocess
import tarfile

import pytest

from megaprov.cluster import gitsource
from megaprov.errors import UsageError


def tree(root):
    (root / "megatron" / "core").mkdir(parents=True)
    (root / "megatron" / "core" / "package_info.py").write_text("__version__ = '0.16.1'\n")
    (root / "pretrain_gpt.py").write_text("print('hi')\n")
    return root


def test_a_directory_becomes_a_tagged_remote_that_clones(tmp_path):
    repo = gitsource.remote_from_tree(tree(tmp_path / "src"), "Megatron-LM", "core_v0.16.1", tmp_path / "cache")
    assert repo.name == "Megatron-LM.git"
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--branch", "core_v0.16.1", str(repo), str(clone)], check=True, capture_output=True)
    assert (clone / "pretrain_gpt.py").read_text() == "print('hi')\n"
    # the same tree gives the same commit (fixed identity and dates), and the cache is reused
    again = gitsource.remote_from_tree(tree(tmp_path / "src2"), "Megatron-LM", "core_v0.16.1", tmp_path / "cache2")
    assert gitsource.tag_commit(repo, "core_v0.16.1") == gitsource.tag_commit(again, "core_v0.16.1")
    assert gitsource.remote_from_tree(tmp_path / "src", "Megatron-LM", "core_v0.16.1", tmp_path / "cache") == repo


def remote_of_archive(tmp_path, src, arcname):
    """The remote made of a tarball of ``src`` stored under ``arcname``, and the files its tag holds."""
    archive = tmp_path / "mlm.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname=arcname)
    repo = gitsource.remote_from_tree(archive, "Megatron-LM", "core_v0.16.1", tmp_path / "cache")
    ls_tree = ["git", "--git-dir", str(repo), "ls-tree", "-r", "--name-only", "core_v0.16.1"]
    return repo, subprocess.run(ls_tree, capture_output=True, text=True, check=True).stdout.split()


def test_an_archive_becomes_a_remote_and_an_escaping_member_is_refused(tmp_path):
    _, files = remote_of_archive(tmp_path, tree(tmp_path / "src"), ".")
    assert files == ["megatron/core/package_info.py", "pretrain_gpt.py"]
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        data = b"x"
        info = tarfile.TarInfo("../outside.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(UsageError, match="is not a readable tar archive"):
        gitsource.remote_from_tree(evil, "Megatron-LM", "core_v0.16.1", tmp_path / "cache3")
    assert not (tmp_path / "outside.txt").exists()


@pytest.mark.parametrize("tag", ["", "-x", "a b", "x;rm"])
def test_a_bad_tag_is_refused(tmp_path, tag):
    with pytest.raises(UsageError, match="is not a plain name"):
        gitsource.remote_from_tree(tree(tmp_path / "src"), "Megatron-LM", tag, tmp_path / "cache")


def test_a_release_tarballs_top_folder_is_the_tree(tmp_path):
    """GitHub's release tarballs hold the tree in a top folder (Megatron-LM-core_v0.16.1/); git archive's do not."""
    _, files = remote_of_archive(tmp_path, tree(tmp_path / "Megatron-LM-core_v0.16.1"), "Megatron-LM-core_v0.16.1")
    assert files == ["megatron/core/package_info.py", "pretrain_gpt.py"]


def test_the_users_git_configuration_does_not_reach_the_commit(tmp_path, monkeypatch):
    """A user's global commit signing (or hooks) would fail or change the commit: only fixed settings are used."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[commit]\n\tgpgSign = true\n[gpg]\n\tprogram = /bin/false\n")
    monkeypatch.setenv("HOME", str(home))
    repo = gitsource.remote_from_tree(tree(tmp_path / "src"), "Megatron-LM", "core_v0.16.1", tmp_path / "cache")
    assert gitsource.tag_commit(repo, "core_v0.16.1")


def test_an_empty_tree_is_refused_in_one_line(tmp_path):
    (tmp_path / "src" / "megatron").mkdir(parents=True)
    with pytest.raises(UsageError, match="holds no file"):
        gitsource.remote_from_tree(tmp_path / "src", "Megatron-LM", "core_v0.16.1", tmp_path / "cache")
