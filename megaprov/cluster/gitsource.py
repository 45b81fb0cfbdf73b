"""A bare git repository made from a source tree, for sites (and the lab) whose nodes cannot reach the upstream host.

An air-gapped site, or this project's lab on a machine without GitHub, has Megatron-LM as a tree: a ``git archive``
tarball of a tag, or an unpacked directory. The megatron role clones a git remote at a pinned tag, so the tree becomes
a bare repository with one commit tagged as the role pins it; the role (or the head's package cache) then clones it
like the real remote. Cached by the tree's content, so a second lab reuses it.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tarfile
from pathlib import Path

from megaprov.errors import EnvironmentProblem, UsageError
from megaprov.paths import cached_dir

TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_ARCHIVE_BYTES = 512 * 1024 * 1024
# Fixed identity and dates: the same tree gives the same commit, wherever and whenever it is built.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "megaprov",
    "GIT_AUTHOR_EMAIL": "megaprov@localhost",
    "GIT_COMMITTER_NAME": "megaprov",
    "GIT_COMMITTER_EMAIL": "megaprov@localhost",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",  # nor the user's (commit signing, hooks): the same tree, the same commit
}


def _digest(source: Path) -> str:
    """The tree's identity: the archive's bytes, or every file's path, length and bytes of the directory (the length
    keeps a file whose bytes spell another file's entry from matching that pair of files)."""
    h = hashlib.sha256()
    if source.is_file():
        with source.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    else:
        for path in sorted(p for p in source.rglob("*") if p.is_file() and ".git" not in p.relative_to(source).parts):
            data = path.read_bytes()
            h.update(str(path.relative_to(source)).encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()[:16]


def _unpack(archive: Path, into: Path) -> None:
    """Extract a .tar.gz of a tree, refusing members that leave it, links and device files."""
    if archive.stat().st_size > MAX_ARCHIVE_BYTES:
        raise UsageError(f"{archive} is larger than {MAX_ARCHIVE_BYTES >> 20} MiB", "give the tree of one Megatron-LM tag")
    try:
        with tarfile.open(archive, "r:*") as tar:
            tar.extractall(into, filter="data")  # noqa: S202 (the data filter refuses absolute paths, .., links out, devices)
    except (tarfile.TarError, OSError) as exc:
        raise UsageError(f"{archive} is not a readable tar archive: {exc}", "give a .tar.gz made by git archive, or a directory") from exc


COPY_FIX = "check that the tree is readable and that the cache directory has room"


def _step(argv: list[str], what: str, fix: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    """One command of the build; its failure is one line naming what failed and the program's last words."""
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, errors="replace", check=False)  # noqa: S603 (argv, no shell)
    if proc.returncode != 0:
        said = (proc.stderr.strip() or proc.stdout.strip())[-300:]
        raise EnvironmentProblem(f"{what} failed: {said}", fix)


def remote_from_tree(source: Path, name: str, tag: str, cache: Path) -> Path:
    """A bare repository ``<cache>/<digest>-<tag>/<name>.git`` holding ``source`` (a directory or a tar archive of one) as one
    commit tagged ``tag``; returns its path. Built once per tree (``cached_dir``)."""
    if not TAG.match(tag) or not TAG.match(name):
        raise UsageError(f"git tag {tag!r} or repository name {name!r} is not a plain name", "use letters, digits, '.', '_' and '-'")
    source = source.resolve()
    if not source.exists():
        raise UsageError(f"{source} does not exist", "give a Megatron-LM tree: a directory or a .tar.gz made by git archive")
    final = cache / f"{_digest(source)}-{tag}"

    def build(tmp: Path) -> None:
        work = tmp / "work"
        if source.is_file():
            work.mkdir()
            _unpack(source, work)
            inside = list(work.iterdir())
            if len(inside) == 1 and inside[0].is_dir() and not (work / "megatron").exists():  # a release tarball's top folder
                top = inside[0].rename(tmp / "top")
                work.rmdir()
                top.rename(work)
        else:
            _step(["cp", "-a", "--", f"{source}/.", str(work)], f"copying {source}", COPY_FIX)
            _step(["rm", "-rf", "--", str(work / ".git")], f"removing the copy's .git of {source}", COPY_FIX)
        env = {**os.environ, **GIT_ENV}

        def git(*args: str, cwd: Path = work) -> None:
            _step(["git", *args], f"git {args[0]} of {source}", "check git works here (scripts/setup.sh installs it)", cwd, env)

        if not any(path.is_file() for path in work.rglob("*")):
            raise UsageError(f"{source} holds no file", "give a Megatron-LM tree: a directory or a .tar.gz made by git archive")
        git("init", "-q", "-b", "main")
        git("add", "-A", "-f")
        git("commit", "-q", "-m", f"{name} at {tag}, from a tree (megaprov.cluster.gitsource)")
        git("tag", tag)
        git("clone", "-q", "--bare", str(work), str(tmp / f"{name}.git"), cwd=tmp)
        _step(["rm", "-rf", "--", str(work)], f"removing the work tree of {source}", COPY_FIX)

    return cached_dir(final, build, f"{source}\n{tag}") / f"{name}.git"


def tag_commit(repo: Path, tag: str) -> str:
    """The commit a tag of the bare repository points at."""
    proc = subprocess.run(["git", "--git-dir", str(repo), "rev-parse", f"{tag}^{{commit}}"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise EnvironmentProblem(f"{repo} has no tag {tag}", "rebuild it from the tree")
    return proc.stdout.strip()
