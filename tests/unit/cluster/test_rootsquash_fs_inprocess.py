"""The lab's root-squashed share daemon (megaprov/cluster/lab_files/rootsquash_fs.py) driven in this process, as fusepy
drives it: every operation of its Operations object against a real backing directory under the caller's squashed
identity (real setfsuid/setfsgid/setgroups on this thread, the backing file system deciding), the caller's groups read
from a real process's /proc/<pid>/status, the identity back to root after each request, the errors FUSE passes on,
the syscall numbers per machine, and main's command line and mount options.

Only fusepy is stood in (the FUSE library: FuseOSError, Operations, fuse_get_context and FUSE, with fusepy's
signatures): the test says who calls, and FUSE records the mount instead of mounting. Needs root, as the daemon."""

from __future__ import annotations

import ctypes
import errno
import importlib
import os
import stat
import subprocess
import sys
import time
import types
from collections import namedtuple
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

USER = 2000  # the cluster user
TEAM, OTHER_TEAM = 3000, 3001  # supplementary groups of a cluster user's process
NOBODY = 65534
UNCHANGED = 0xFFFFFFFF  # chown's "leave it", as FUSE sends it
MACHINE = os.uname().machine
SETFSUID, SETFSGID = {"x86_64": (122, 123), "aarch64": (151, 152)}.get(MACHINE, (-1, -1))
USAGE = "Usage: rootsquash_fs.py BACKING_DIR MOUNT_POINT  (root; python3-fusepy). Runs in the foreground.\n"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or MACHINE not in ("x86_64", "aarch64"), reason="the daemon switches identities: root on x86_64 or aarch64"
)

_libc = ctypes.CDLL(None, use_errno=True)


def load() -> Any:
    """By its package name, so that the mutation benchmark's record of which test calls which function sees it."""
    return importlib.import_module("megaprov.cluster.lab_files.rootsquash_fs")


def fs_identity() -> tuple[int, int, list[int]]:
    """This thread's file-system uid and gid (setfsuid(-1) changes nothing and answers the current one) and groups."""
    return _libc.syscall(SETFSUID, UNCHANGED), _libc.syscall(SETFSGID, UNCHANGED), os.getgroups()


# ---- fusepy, stood in with its own signatures and semantics


class FuseOSError(OSError):
    """fusepy's: an OSError carrying the errno FUSE answers with."""

    def __init__(self, errno: int) -> None:
        super().__init__(errno, os.strerror(errno))


class Operations:
    """fusepy's base class, as far as the daemon leans on it: init and destroy do nothing, bmap is not provided."""

    bmap = None

    def init(self, path: str) -> None:
        pass

    def destroy(self, path: str) -> None:
        pass


class Fusepy(types.ModuleType):
    """The fusepy module: `caller` is what fuse_get_context answers (uid, gid, pid), `asked` how often it was asked;
    FUSE records each mount (operations, mountpoint, options) and returns as the real one does once unmounted."""

    def __init__(self) -> None:
        super().__init__("fusepy")
        self.FuseOSError = FuseOSError
        self.Operations = Operations
        self.caller: tuple[int, int, int] = (0, 0, os.getpid())
        self.asked = 0
        self.mounts: list[tuple[Any, str, dict[str, Any]]] = []

    def fuse_get_context(self) -> tuple[int, int, int]:
        self.asked += 1
        return self.caller

    def FUSE(self, operations: Any, mountpoint: str, raw_fi: bool = False, encoding: str = "utf-8", **kwargs: Any) -> None:
        self.mounts.append((operations, mountpoint, {"raw_fi": raw_fi, "encoding": encoding, **kwargs}))


class FileInfo:
    """fuse_file_info as fusepy passes it with raw_fi: open flags in, the handle out."""

    def __init__(self, flags: int = os.O_RDONLY, fh: int | None = None) -> None:
        self.flags = flags
        self.fh = fh


# ---- fixtures


@pytest.fixture(autouse=True)
def root_again() -> Iterator[None]:
    """Whatever a test does, this thread is root with its groups again afterwards; umask 0, as main sets it."""
    groups = os.getgroups()
    umask = os.umask(0)
    try:
        yield
    finally:
        os.umask(umask)
        _libc.syscall(SETFSUID, 0)
        _libc.syscall(SETFSGID, 0)
        os.setgroups(groups)


@pytest.fixture(scope="module")
def callers() -> Iterator[dict[str, tuple[int, int, int]]]:
    """Real processes calling in: root (groups [0]), the cluster user alone, and the cluster user in TEAM and OTHER_TEAM."""
    procs = {
        "root": subprocess.Popen(["sleep", "60"], extra_groups=[0]),
        "user": subprocess.Popen(["sleep", "60"], user=USER, group=USER, extra_groups=[]),
        "member": subprocess.Popen(["sleep", "60"], user=USER, group=USER, extra_groups=[TEAM, OTHER_TEAM]),
    }
    try:
        yield {
            "root": (0, 0, procs["root"].pid),
            "user": (USER, USER, procs["user"].pid),
            "member": (USER, USER, procs["member"].pid),
        }
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


@pytest.fixture
def fuse(monkeypatch: pytest.MonkeyPatch) -> Fusepy:
    module = Fusepy()
    monkeypatch.setitem(sys.modules, "fusepy", module)
    return module


class Share:
    """The daemon's operations over `backing`; share(caller, op, *args) is one request as FUSE makes it."""

    def __init__(self, fuse: Fusepy, backing: Path, callers: dict[str, tuple[int, int, int]]) -> None:
        self.fuse = fuse
        self.backing = backing
        self.callers = callers
        self.fd = os.open(backing, os.O_RDONLY | os.O_DIRECTORY)
        self.ops = load().build_operations(self.fd)

    def __call__(self, who: str, op: str, *args: Any) -> Any:
        self.fuse.caller = self.callers[who]
        try:
            return self.ops(op, *args)
        finally:
            assert fs_identity() == (0, 0, []), f"{op} left this thread as someone else"


@pytest.fixture
def share(fuse: Fusepy, tmp_path: Path, callers: dict[str, tuple[int, int, int]], monkeypatch: pytest.MonkeyPatch) -> Iterator[Share]:
    """backing/ (root's, 0755): u/ the cluster user's (0755) with x ("hi\\n", 0644), r/ root's (0755) with f, open/
    (root's, 0777), team/ (root:TEAM, 0770). The working directory is elsewhere, root's and empty: paths that miss
    the backing directory land there."""
    backing = tmp_path / "backing"
    for d, owner, mode in (("u", USER, 0o755), ("r", 0, 0o755), ("open", 0, 0o777)):
        (backing / d).mkdir(parents=True)
        os.chown(backing / d, owner, owner)
        (backing / d).chmod(mode)
    (backing / "team").mkdir()
    os.chown(backing / "team", 0, TEAM)
    (backing / "team").chmod(0o770)
    backing.chmod(0o755)
    (backing / "u" / "x").write_text("hi\n")
    os.chown(backing / "u" / "x", USER, USER)
    (backing / "u" / "x").chmod(0o644)
    (backing / "r" / "f").write_text("root's\n")
    (backing / "r" / "f").chmod(0o644)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    monkeypatch.chdir(elsewhere)
    served = Share(fuse, backing, callers)
    try:
        yield served
    finally:
        os.close(served.fd)
        assert os.listdir(elsewhere) == []


def refused(share: Share, who: str, op: str, *args: Any) -> int:
    """The errno a request fails with (as FuseOSError, which fusepy hands to the kernel)."""
    with pytest.raises(FuseOSError) as failed:
        share(who, op, *args)
    assert failed.value.strerror == os.strerror(failed.value.errno)
    return failed.value.errno


def owner(path: Path) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_uid, st.st_gid


def attrs(path: Path) -> dict[str, Any]:
    st = os.lstat(path)
    return {
        "st_mode": st.st_mode,
        "st_ino": st.st_ino,
        "st_dev": st.st_dev,
        "st_nlink": st.st_nlink,
        "st_uid": st.st_uid,
        "st_gid": st.st_gid,
        "st_size": st.st_size,
        "st_blocks": st.st_blocks,
        "st_atime": st.st_atime_ns / 1e9,
        "st_mtime": st.st_mtime_ns / 1e9,
        "st_ctime": st.st_ctime_ns / 1e9,
    }


def open_fds() -> set[int]:
    """This process's open descriptors (not the one listing them, closed by then)."""
    fds = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(name))
        except OSError:
            continue
        fds.add(int(name))
    return fds


# ---- root_squash, for real


def test_root_is_nobody_and_cannot_create_in_the_users_roots_or_the_shares_top_directory(share):
    for where in ("/u", "/r", ""):
        assert refused(share, "root", "mkdir", f"{where}/made-by-root", 0o755) == errno.EACCES
        assert refused(share, "root", "create", f"{where}/by-root", 0o644, FileInfo(os.O_WRONLY)) == errno.EACCES
    assert refused(share, "root", "open", "/u/x", FileInfo(os.O_WRONLY)) == errno.EACCES
    assert refused(share, "root", "open", "/r/f", FileInfo(os.O_RDWR)) == errno.EACCES
    assert sorted(p.relative_to(share.backing).as_posix() for p in share.backing.rglob("*")) == ["open", "r", "r/f", "team", "u", "u/x"]
    assert (share.backing / "u" / "x").read_text() == "hi\n"


def test_roots_creations_in_a_world_writable_directory_belong_to_nobody(share):
    share("root", "mkdir", "/open/d", 0o750)
    fi = FileInfo(os.O_WRONLY)
    assert share("root", "create", "/open/f", 0o640, fi) == 0
    share("root", "release", "/open/f", fi)
    for made, mode in (("d", 0o750), ("f", 0o640)):
        st = os.lstat(share.backing / "open" / made)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY, NOBODY, mode)


def test_the_cluster_user_creates_writes_and_reads_as_itself(share):
    share("user", "mkdir", "/u/job", 0o750)
    fi = FileInfo(os.O_WRONLY)
    assert share("user", "create", "/u/job/a", 0o640, fi) == 0
    assert share("user", "write", "/u/job/a", b"hello", 0, fi) == 5
    assert share("user", "write", "/u/job/a", b" world", 5, fi) == 6
    assert share("user", "flush", "/u/job/a", fi) == 0
    assert share("user", "fsync", "/u/job/a", 0, fi) == 0
    assert share("user", "fsync", "/u/job/a", 1, fi) == 0
    assert share("user", "release", "/u/job/a", fi) == 0
    with pytest.raises(OSError) as closed:
        os.fstat(fi.fh)
    assert closed.value.errno == errno.EBADF
    made = share.backing / "u" / "job" / "a"
    assert made.read_bytes() == b"hello world"
    for path, mode in ((made.parent, 0o750), (made, 0o640)):
        st = os.lstat(path)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (USER, USER, mode)

    reading = FileInfo(os.O_RDONLY)
    assert refused(share, "root", "open", "/u/job/a", FileInfo(os.O_RDONLY)) == errno.EACCES  # 0750: nobody is other
    assert share("user", "open", "/u/job/a", reading) == 0
    assert share("user", "read", "/u/job/a", 5, 6, reading) == b"world"
    assert share("user", "read", "/u/job/a", 100, 0, reading) == b"hello world"
    assert share("user", "release", "/u/job/a", reading) == 0


def test_a_file_opened_for_writing_is_written_in_place(share):
    fi = FileInfo(os.O_RDWR)
    assert share("user", "open", "/u/x", fi) == 0
    assert share("user", "write", "/u/x", b"HO", 0, fi) == 2
    assert share("user", "read", "/u/x", 3, 0, fi) == b"HO\n"
    share("user", "release", "/u/x", fi)
    assert (share.backing / "u" / "x").read_text() == "HO\n"


def test_create_adds_o_creat_to_the_callers_flags(share):
    fi = FileInfo(os.O_RDWR)
    assert share("user", "create", "/u/new", 0o600, fi) == 0
    assert share("user", "write", "/u/new", b"abc", 0, fi) == 3
    assert share("user", "read", "/u/new", 2, 1, fi) == b"bc"
    share("user", "release", "/u/new", fi)
    assert stat.S_IMODE(os.lstat(share.backing / "u" / "new").st_mode) == 0o600


def test_the_callers_supplementary_groups_come_from_its_process(share):
    mod = load()
    assert mod.caller_groups(share.callers["member"][2]) == [TEAM, OTHER_TEAM]
    assert mod.caller_groups(share.callers["user"][2]) == []
    assert mod.caller_groups(os.getpid()) == os.getgroups()
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert mod.caller_groups(gone.pid) == []

    share("member", "mkdir", "/team/t", 0o770)
    assert owner(share.backing / "team" / "t") == (USER, USER)
    assert refused(share, "user", "mkdir", "/team/u", 0o770) == errno.EACCES
    assert refused(share, "user", "readdir", "/team", None) == errno.EACCES
    assert share("member", "readdir", "/team", None) == [".", "..", "t"]


def test_squashing_the_callers_root_group_keeps_it_out_of_roots_group_directories(share):
    (share.backing / "r" / "g").mkdir(mode=0o770)
    assert refused(share, "root", "readdir", "/r/g", None) == errno.EACCES


# ---- every operation


def test_getattr_answers_lstat_of_the_backing_path_with_times_in_seconds(share):
    st = share("root", "getattr", "/")
    assert st == attrs(share.backing)
    assert share("user", "getattr", "/u/x") == attrs(share.backing / "u" / "x")
    assert share("user", "getattr", "/u/x", None) == attrs(share.backing / "u" / "x")
    os.symlink("x", share.backing / "u" / "ln")
    link = share("user", "getattr", "/u/ln")
    assert stat.S_ISLNK(link["st_mode"]) and link == attrs(share.backing / "u" / "ln")
    os.utime(share.backing / "u" / "x", ns=(1_600_000_000_123_456_789, 1_700_000_000_987_654_321))
    x = share("user", "getattr", "/u/x")
    assert (x["st_atime"], x["st_mtime"]) == (1_600_000_000_123_456_789 / 1e9, 1_700_000_000_987_654_321 / 1e9)
    assert refused(share, "user", "getattr", "/u/missing") == errno.ENOENT


def test_getattr_with_a_handle_answers_for_the_open_file_whatever_the_path(share):
    path = share.backing / "u" / "x"
    fd = os.open(path, os.O_RDONLY)
    try:
        expected = attrs(path)
        os.unlink(path)
        expected.update(st_nlink=0, st_ctime=os.fstat(fd).st_ctime_ns / 1e9)
        assert share("user", "getattr", "/u/x", fd) == expected
        assert share("user", "getattr", "/u/x", FileInfo(fh=fd)) == expected
    finally:
        os.close(fd)


def test_access_is_decided_for_the_squashed_caller(share):
    os.symlink("nowhere", share.backing / "u" / "dangling")
    assert share("user", "access", "/u/x", os.R_OK | os.W_OK) == 0
    assert share("user", "access", "/u", os.W_OK | os.X_OK) == 0
    assert share("user", "access", "/u/dangling", os.F_OK) == 0  # the link itself, not where it points
    assert share("root", "access", "/u/x", os.R_OK) == 0
    assert refused(share, "root", "access", "/u/x", os.W_OK) == errno.EACCES
    assert refused(share, "root", "access", "/r", os.W_OK) == errno.EACCES
    assert refused(share, "root", "access", "/", os.W_OK) == errno.EACCES
    assert refused(share, "user", "access", "/u/missing", os.F_OK) == errno.EACCES


def test_readdir_lists_dot_dotdot_and_the_backing_entries(share):
    fds = open_fds()
    top = share("root", "readdir", "/", None)
    assert top[:2] == [".", ".."] and sorted(top[2:]) == ["open", "r", "team", "u"]
    assert share("user", "readdir", "/u", 0) == [".", "..", "x"]
    assert open_fds() == fds
    assert refused(share, "user", "readdir", "/u/x", None) == errno.ENOTDIR
    (share.backing / "u" / "locked").touch(mode=0o000)
    os.chown(share.backing / "u" / "locked", USER, USER)
    assert refused(share, "user", "readdir", "/u/locked", None) == errno.ENOTDIR
    (share.backing / "u" / "private").mkdir(mode=0o700)
    os.chown(share.backing / "u" / "private", USER, USER)
    assert refused(share, "root", "readdir", "/u/private", None) == errno.EACCES
    assert share("user", "readdir", "/u/private", None) == [".", ".."]
    assert open_fds() == fds


def test_symlink_readlink_and_link_make_the_callers_entries(share):
    u = share.backing / "u"
    share("user", "symlink", "/u/ln", "x")
    assert os.readlink(u / "ln") == "x" and owner(u / "ln") == (USER, USER)
    assert share("root", "readlink", "/u/ln") == "x"
    assert refused(share, "user", "readlink", "/u/x") == errno.EINVAL

    share("user", "link", "/u/hard", "/u/ln")  # a hard link to the symlink itself
    assert stat.S_ISLNK(os.lstat(u / "hard").st_mode)
    assert os.lstat(u / "hard").st_ino == os.lstat(u / "ln").st_ino
    share("user", "link", "/u/x2", "/u/x")
    assert os.lstat(u / "x2").st_ino == os.lstat(u / "x").st_ino and os.lstat(u / "x").st_nlink == 2

    assert refused(share, "root", "symlink", "/r/ln", "f") == errno.EACCES
    fi = FileInfo(os.O_WRONLY)
    share("root", "create", "/open/nobodys", 0o644, fi)
    share("root", "release", "/open/nobodys", fi)
    assert refused(share, "root", "link", "/r/h", "/open/nobodys") == errno.EACCES
    share("root", "link", "/open/h", "/open/nobodys")
    assert os.lstat(share.backing / "open" / "h").st_nlink == 2
    assert sorted(os.listdir(share.backing / "r")) == ["f"]


def test_rename_unlink_and_rmdir_as_the_owner_and_refused_to_root(share):
    u = share.backing / "u"
    share("user", "mkdir", "/u/d", 0o755)
    share("user", "rename", "/u/x", "/u/d/y")
    assert sorted(os.listdir(u)) == ["d"] and (u / "d" / "y").read_text() == "hi\n"
    assert refused(share, "root", "rename", "/u/d/y", "/open/y") == errno.EACCES
    assert refused(share, "root", "unlink", "/u/d/y") == errno.EACCES
    assert refused(share, "user", "rmdir", "/u/d") == errno.ENOTEMPTY
    share("user", "unlink", "/u/d/y")
    assert os.listdir(u / "d") == []
    assert refused(share, "root", "rmdir", "/u/d") == errno.EACCES
    share("user", "rmdir", "/u/d")
    assert os.listdir(u) == []
    assert refused(share, "user", "unlink", "/u/d") == errno.ENOENT


def test_chmod_by_the_owner_only(share):
    x = share.backing / "u" / "x"
    share("user", "chmod", "/u/x", 0o600)
    assert stat.S_IMODE(os.lstat(x).st_mode) == 0o600
    assert refused(share, "root", "chmod", "/u/x", 0o666) == errno.EPERM
    assert stat.S_IMODE(os.lstat(x).st_mode) == 0o600


def test_chown_the_squashed_root_cannot_and_the_owner_moves_group_only_to_its_own(share):
    u = share.backing / "u"
    assert refused(share, "root", "chown", "/u/x", 0, UNCHANGED) == errno.EPERM
    assert refused(share, "root", "chown", "/u/x", UNCHANGED, 0) == errno.EPERM
    assert refused(share, "root", "chown", "/r/f", NOBODY, NOBODY) == errno.EPERM
    assert owner(u / "x") == (USER, USER) and owner(share.backing / "r" / "f") == (0, 0)
    share("member", "chown", "/u/x", UNCHANGED, TEAM)
    assert owner(u / "x") == (USER, TEAM)
    share("member", "chown", "/u/x", USER, UNCHANGED)
    assert owner(u / "x") == (USER, TEAM)
    assert refused(share, "user", "chown", "/u/x", UNCHANGED, OTHER_TEAM) == errno.EPERM  # not in it without the groups
    share("member", "symlink", "/u/ln", "x")
    share("member", "chown", "/u/ln", UNCHANGED, OTHER_TEAM)  # the link, not where it points
    assert owner(u / "ln") == (USER, OTHER_TEAM) and owner(u / "x") == (USER, TEAM)


def test_truncate_by_path_and_by_handle(share):
    x = share.backing / "u" / "x"
    fds = open_fds()
    share("user", "truncate", "/u/x", 1)
    assert x.read_text() == "h" and open_fds() == fds
    assert refused(share, "root", "truncate", "/u/x", 0) == errno.EACCES
    assert share("user", "truncate", "/u/x", 2, None) is None and x.read_bytes() == b"h\0"
    fd = os.open(x, os.O_RDWR)
    try:
        os.unlink(x)
        share("user", "truncate", "/u/gone", 5, fd)
        assert os.fstat(fd).st_size == 5
        share("root", "truncate", "/u/gone", 3, FileInfo(fh=fd))
        assert os.fstat(fd).st_size == 3
    finally:
        os.close(fd)


def test_utimens_sets_the_given_times_or_now_on_the_entry_itself(share):
    x, ln = share.backing / "u" / "x", share.backing / "u" / "ln"
    share("user", "utimens", "/u/x", (1_700_000_000.25, 1_600_000_000.5))
    st = os.lstat(x)
    assert (st.st_atime_ns, st.st_mtime_ns) == (int(1_700_000_000.25 * 1e9), int(1_600_000_000.5 * 1e9))
    assert refused(share, "root", "utimens", "/u/x", (1.0, 2.0)) == errno.EPERM
    assert refused(share, "root", "utimens", "/u/x") == errno.EACCES
    before = time.time_ns()
    share("user", "utimens", "/u/x")
    st = os.lstat(x)
    assert before - 10**9 < st.st_mtime_ns < time.time_ns() + 10**9 and st.st_atime_ns == st.st_mtime_ns
    share("user", "utimens", "/u/x", None)

    os.utime(x, ns=(10**18, 10**18))
    share("user", "symlink", "/u/ln", "x")
    share("user", "utimens", "/u/ln", (1_500_000_000.0, 1_500_000_001.0))
    assert os.lstat(ln).st_mtime_ns == 1_500_000_001 * 10**9 and os.lstat(x).st_mtime_ns == 10**18
    share("user", "utimens", "/u/ln")
    assert os.lstat(ln).st_mtime_ns > 1_500_000_001 * 10**9 and os.lstat(x).st_mtime_ns == 10**18


def test_statfs_init_and_destroy_run_without_asking_who_calls(share):
    groups = os.getgroups()
    fs = share.ops("statfs", "/")
    vfs = os.statvfs(share.backing)
    assert sorted(fs) == ["f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax"]
    for key in ("f_blocks", "f_bsize", "f_files", "f_flag", "f_frsize", "f_namemax"):
        assert fs[key] == getattr(vfs, key)
    assert 0 <= fs["f_bavail"] <= fs["f_bfree"] <= fs["f_blocks"] and 0 <= fs["f_favail"] <= fs["f_ffree"] <= fs["f_files"]
    assert share.ops("init", "/") is None and share.ops("destroy", "/") is None
    assert share.fuse.asked == 0
    assert fs_identity() == (0, 0, groups)


def test_an_operation_the_daemon_lacks_is_efault_before_anyone_is_asked(share):
    for op in ("bmap", "no_such_operation"):
        assert refused(share, "user", op, "/u/x") == errno.EFAULT
    assert share.fuse.asked == 0


def test_an_oserror_without_errno_reaches_fuse_as_eio(share, monkeypatch):
    def broken(path: str, size: int, offset: int, fi: Any) -> bytes:
        raise OSError("lost")

    monkeypatch.setattr(share.ops, "read", broken)
    assert refused(share, "user", "read", "/u/x", 1, 0, FileInfo(fh=0)) == errno.EIO
    assert share.fuse.asked == 1


def test_the_path_is_taken_relative_to_the_backing_directory(share):
    assert share("user", "getattr", "/")["st_ino"] == os.lstat(share.backing).st_ino
    assert share("user", "getattr", "/u/x")["st_ino"] == os.lstat(share.backing / "u" / "x").st_ino
    assert share("user", "getattr", "//u//x")["st_ino"] == os.lstat(share.backing / "u" / "x").st_ino
    (share.backing / "u" / "Xray").touch()
    assert share("user", "getattr", "/u/Xray")["st_ino"] == os.lstat(share.backing / "u" / "Xray").st_ino
    (share.backing / "Xu").mkdir()
    assert share("user", "getattr", "/Xu")["st_ino"] == os.lstat(share.backing / "Xu").st_ino


# ---- the identity switch itself


def test_become_switches_this_threads_file_system_identity_and_restore_makes_it_root():
    ident = load().Identity()
    ident.become(USER, TEAM, [TEAM, OTHER_TEAM])
    assert fs_identity() == (USER, TEAM, [TEAM, OTHER_TEAM])
    ident.become(NOBODY, NOBODY, [])
    assert fs_identity() == (NOBODY, NOBODY, [])
    ident.restore()
    assert fs_identity() == (0, 0, [])


def test_become_refuses_an_identity_the_kernel_does_not_take():
    ident = load().Identity()
    with pytest.raises(OSError) as failed:
        ident.become(UNCHANGED, USER, [USER])  # uid -1 is no uid: setfsuid keeps root
    assert (failed.value.errno, failed.value.strerror) == (errno.EPERM, "setfsuid")
    ident.restore()
    with pytest.raises(OSError) as failed:
        ident.become(USER, USER, [UNCHANGED])  # nor is gid -1 a group
    assert (failed.value.errno, failed.value.strerror) == (errno.EINVAL, "setgroups")
    with pytest.raises(OSError) as failed:
        ident.become(USER, USER, list(range(1, 65538)))  # more than NGROUPS_MAX
    assert (failed.value.errno, failed.value.strerror) == (errno.EINVAL, "setgroups")
    assert fs_identity()[:2] == (0, 0)


def test_syscall_numbers_per_machine(monkeypatch):
    mod = load()
    uname = namedtuple("uname", "sysname nodename release version machine")
    for machine, numbers in (
        ("x86_64", {"setgroups": 116, "setfsuid": 122, "setfsgid": 123}),
        ("aarch64", {"setgroups": 159, "setfsuid": 151, "setfsgid": 152}),
    ):
        monkeypatch.setattr(mod.os, "uname", lambda m=machine: uname("Linux", "node1", "6.1", "#1", m))
        assert mod._syscall_numbers() == numbers
        assert mod.Identity().nr == numbers
    monkeypatch.setattr(mod.os, "uname", lambda: uname("Linux", "node1", "6.1", "#1", "riscv64"))
    with pytest.raises(SystemExit) as unknown:
        mod._syscall_numbers()
    assert unknown.value.code == "rootsquash_fs: no syscall numbers for riscv64"


# ---- main


@pytest.mark.parametrize("argv", [["rootsquash_fs.py"], ["rootsquash_fs.py", "/b"], ["rootsquash_fs.py", "/b", "/m", "extra"]])
def test_main_with_the_wrong_arguments_prints_the_usage_and_mounts_nothing(fuse, capsys, argv):
    os.umask(0o022)
    assert load().main(argv) == 2
    assert capsys.readouterr() == ("", USAGE)
    assert fuse.mounts == [] and os.umask(0o022) == 0o022


def test_main_mounts_the_backing_directory_with_the_options_of_an_nfs_like_share(fuse, tmp_path, callers, capsys):
    backing, mount = tmp_path / "backing", tmp_path / "share"
    backing.mkdir(mode=0o755)
    mount.mkdir()
    (backing / "data").write_text("d")
    os.umask(0o022)
    fds = open_fds()
    assert load().main(["rootsquash_fs.py", str(backing), str(mount)]) == 0
    assert os.umask(0o022) == 0
    assert capsys.readouterr() == ("", "")
    [(ops, mountpoint, options)] = fuse.mounts
    assert mountpoint == str(mount)
    assert options == {
        "raw_fi": True,
        "encoding": "utf-8",
        "foreground": True,
        "nothreads": True,
        "allow_other": True,
        "use_ino": True,
        "big_writes": True,
        "attr_timeout": 0,
        "entry_timeout": 0,
        "negative_timeout": 0,
        "fsname": f"megaprov-squash:{backing}",
        "subtype": "megaprov-squash",
    }
    [backing_fd] = open_fds() - fds  # held open while mounted, as the daemon is
    try:
        assert os.readlink(f"/proc/self/fd/{backing_fd}") == str(backing)
        fuse.caller = callers["user"]
        assert ops("readdir", "/", None) == [".", "..", "data"]
        assert ops("getattr", "/") == attrs(backing)
        assert fs_identity() == (0, 0, [])
    finally:
        os.close(backing_fd)


def test_main_refuses_a_backing_that_is_not_a_directory(fuse, tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        load().main(["rootsquash_fs.py", str(tmp_path / "file"), str(tmp_path)])
    assert fuse.mounts == []
