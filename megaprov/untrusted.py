"""The one reader for files that the cluster writes: job directories on the shared directory (or this machine's
mirror of them), their logs, reports and metrics, and log files an operator hands to ``doctor --log``.

The cluster user, and so any training job, can write the shared directory; megaprov usually runs as root on the
controller. So a path read there is walked one component at a time below a trusted root (the shared directory as
this machine sees it) with ``O_NOFOLLOW``: a symbolic link anywhere inside the tree is refused, never followed out
of it. Only regular files are read (a FIFO or a device is refused without blocking: the file is opened
``O_NONBLOCK`` and checked with ``fstat``), and never more than a stated number of bytes. A file the operator names
on the command line (``root=None``) may be a link they made, but it is still a regular file and still bounded.

Every problem is a :class:`BadEntry` (exit 2) that names the entry, so that a listing can report one bad entry and
show the rest; a missing file is :class:`Missing`, a subclass, for callers to whom absence is an answer.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from megaprov import values
from megaprov.errors import UsageError

MAX_ENTRIES = 10_000  # entries read from one directory of a job (logs of 10,000 nodes)
MAX_DEPTH = 16  # directories below the root (jobs/NAME/logs/... is 3)
HINT = "megaprov reads only regular files inside the job directory (the cluster user can write it): remove or replace the entry"


class BadEntry(UsageError):
    """An entry that is not a regular file (or directory) inside its root, or is larger than its bound."""

    def __init__(self, path: Path | str, problem: str, fix: str = HINT) -> None:
        super().__init__(f"{values.printable(str(path))} {problem}", fix)
        self.path = str(path)
        self.problem = problem


class Missing(BadEntry):
    """The entry does not exist."""


_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _parts(path: Path, root: Path) -> list[str]:
    try:
        rel = Path(os.path.normpath(path)).relative_to(os.path.normpath(root))
    except ValueError:
        raise BadEntry(path, f"is outside {root}") from None
    parts = list(rel.parts)
    if ".." in parts or len(parts) > MAX_DEPTH + 1:
        raise BadEntry(path, f"is outside {root}")
    return parts


def _oserror(path: Path | str, exc: OSError, directory: bool = False) -> BadEntry:
    if exc.errno == errno.ENOENT:
        return Missing(path, "does not exist", "check the name; the job may not have written it yet")
    if exc.errno in (errno.ELOOP, errno.EMLINK):
        return BadEntry(path, "is a symbolic link (or passes through one)")
    if exc.errno == errno.ENOTDIR:
        return BadEntry(path, "passes through something that is not a directory" if not directory else "is not a directory")
    return BadEntry(path, f"cannot be read ({exc.strerror or exc.__class__.__name__})", "check its permissions")


@contextmanager
def _parent(path: Path, root: Path) -> Iterator[tuple[int, str]]:
    """The open directory that holds ``path`` (walked from ``root`` without following links) and the last name."""
    parts = _parts(path, root)
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise _oserror(root, exc, directory=True) from None
    try:
        for name in parts[:-1]:
            try:
                nxt = os.open(name, _DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP) and stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise BadEntry(path, f"passes through a symbolic link ({values.printable(name)})") from None
                raise _oserror(path, exc) from None
            os.close(fd)
            fd = nxt
        yield fd, parts[-1] if parts else "."
    finally:
        os.close(fd)


def _check_regular(fd: int, path: Path | str) -> os.stat_result:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise BadEntry(path, f"is not a regular file (it is {_kind(info.st_mode)})")
    os.set_blocking(fd, True)
    return info


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a file"


def open_fd(path: Path | str, root: Path | str | None) -> int:
    """An open descriptor of the regular file ``path`` (inside ``root``, walked without links; or, with ``root=None``,
    a file the operator named). The caller closes it."""
    path = Path(path)
    if root is None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as exc:
            raise _oserror(path, exc) from None
        _check_regular(fd, path)
        return fd
    with _parent(path, Path(root)) as (directory, name):
        try:
            fd = os.open(name, _READ, dir_fd=directory)
        except OSError as exc:
            raise _oserror(path, exc) from None
    _check_regular(fd, path)
    return fd


def open_binary(path: Path | str, root: Path | str | None) -> IO[bytes]:
    """``path`` as a binary stream (see :func:`open_fd`); its reads are the caller's to bound."""
    return os.fdopen(open_fd(path, root), "rb")


def size(path: Path | str, root: Path | str | None) -> int:
    fd = open_fd(path, root)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def read_bytes(path: Path | str, what: str, max_bytes: int, root: Path | str | None, tail: bool = False) -> bytes:
    """At most ``max_bytes`` of ``path``: a larger file is refused, or with ``tail`` its last ``max_bytes`` are read
    (a log: its end is what matters)."""
    fd = open_fd(path, root)
    with os.fdopen(fd, "rb") as handle:
        length = os.fstat(fd).st_size
        if length > max_bytes:
            if not tail:
                raise BadEntry(path, f"({what}) is {length:,} bytes", f"megaprov reads at most {max_bytes:,} bytes of it: remove or shorten it")
            handle.seek(length - max_bytes)
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:  # grew while read
        data = data[-max_bytes:] if tail else data
        if not tail:
            raise BadEntry(path, f"({what}) is larger than {max_bytes:,} bytes", "remove or shorten it")
    return data


def read_text(path: Path | str, what: str, max_bytes: int, root: Path | str | None, tail: bool = False, strict: bool = True) -> str:
    """UTF-8 text (see :func:`read_bytes`); ``strict=False`` replaces undecodable bytes (a log)."""
    data = read_bytes(path, what, max_bytes, root, tail)
    if not strict:
        return data.decode("utf-8", errors="replace")
    try:
        return values.decode_utf8(data, f"{what} {path}")
    except UsageError as exc:
        raise BadEntry(path, f"({what}) is not UTF-8 text", HINT) from exc


def read_json(path: Path | str, what: str, max_bytes: int, root: Path | str | None) -> Any:
    """A JSON document (bounded, no duplicate keys or deep nesting: :func:`values.json_data`)."""
    text = read_text(path, what, max_bytes, root)
    try:
        return values.json_data(text, f"{what} {path}")
    except UsageError as exc:
        raise BadEntry(path, f"({what}) is not valid JSON", HINT) from exc


def kind(path: Path | str, root: Path | str) -> str:
    """``file``, ``dir``, ``missing`` or ``other`` (a link, FIFO, device, or a path through a link), without
    following or opening anything."""
    try:
        with _parent(Path(path), Path(root)) as (directory, name):
            info = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except Missing:
        return "missing"
    except BadEntry:
        return "other"
    except OSError as exc:
        return "missing" if exc.errno == errno.ENOENT else "other"
    if stat.S_ISREG(info.st_mode):
        return "file"
    return "dir" if stat.S_ISDIR(info.st_mode) else "other"


def is_file(path: Path | str, root: Path | str) -> bool:
    return kind(path, root) == "file"


def is_dir(path: Path | str, root: Path | str) -> bool:
    return kind(path, root) == "dir"


def entries(directory: Path | str, root: Path | str, limit: int = MAX_ENTRIES) -> dict[str, str]:
    """The names in ``directory`` (inside ``root``, walked without links) and their kinds (``file``, ``dir`` or
    ``other``), at most ``limit`` of them (more is refused: a directory the cluster filled on purpose). A missing
    directory has none."""
    directory = Path(directory)
    found: dict[str, str] = {}
    try:
        with _parent(directory, Path(root)) as (parent, name):
            try:
                fd = os.open(name, _DIR, dir_fd=parent) if name != "." else os.dup(parent)
            except OSError as exc:
                raise _oserror(directory, exc, directory=True) from None
    except Missing:
        return {}
    try:
        with os.scandir(fd) as scan:
            for entry in scan:
                if len(found) >= limit:
                    raise BadEntry(directory, f"holds more than {limit:,} entries", "remove what the job did not write there")
                found[entry.name] = "file" if entry.is_file(follow_symlinks=False) else "dir" if entry.is_dir(follow_symlinks=False) else "other"
    finally:
        os.close(fd)
    return dict(sorted(found.items()))


def files(directory: Path | str, root: Path | str, suffix: str = "", prefix: str = "", limit: int = MAX_ENTRIES) -> list[Path]:
    """The regular files in ``directory`` whose names have ``prefix`` and ``suffix``, sorted. Links, FIFOs and
    devices with a matching name are left out (their readers would refuse them one by one)."""
    directory = Path(directory)
    return [directory / n for n, k in entries(directory, root, limit).items() if k == "file" and n.startswith(prefix) and n.endswith(suffix)]


def job_root(local_dir: Path) -> Path:
    """The trusted root of a job directory as this machine sees it (``<shared>/jobs/NAME``): the shared directory's
    view (its mount or the mirror), two levels up."""
    return local_dir.parent.parent
