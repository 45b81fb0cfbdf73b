#!/usr/bin/python3
"""The lab's root-squashed shared directory: NFS root_squash semantics through FUSE, on a node without NFS.

A lab node cannot mount NFS (the kernel has no client), so the lab's training share is the podman volume that
node1's NFS-Ganesha exports, mounted raw at the export path and served at the share's path by this daemon.
It does what an NFS server does with AUTH_SYS credentials: every request runs with the caller's uid, gid and
supplementary groups as the file-system identity of the serving thread, with uid 0 and gid 0 mapped to nobody
(root_squash), and the backing file system checks permissions. A non-zero fsuid drops CAP_DAC_OVERRIDE,
CAP_CHOWN, CAP_FOWNER and the other file capabilities (capabilities(7)), so root in the node is nobody here:
it cannot create files in the cluster user's 0755 directories nor in root's own, nor chown. The FUSE mount is
made without default_permissions, so the kernel leaves every check to the backing file system.

Measured before choosing this (Debian 12, bindfs 1.14.7): bindfs always mounts with default_permissions and
acts as the mounter, so root keeps CAP_DAC_OVERRIDE; with --map=65534/0 root's files land as nobody but root
still writes into root's and the cluster user's 0755 directories.

Usage: rootsquash_fs.py BACKING_DIR MOUNT_POINT  (root; python3-fusepy). Runs in the foreground.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from typing import Any

NOBODY = 65534
_libc = ctypes.CDLL(None, use_errno=True)


def squash(uid: int, gid: int, groups: list[int]) -> tuple[int, int, list[int]]:
    """The identity a request runs with: root_squash maps uid 0 and gid 0 (also among the groups) to nobody."""
    return (
        NOBODY if uid == 0 else uid,
        NOBODY if gid == 0 else gid,
        sorted({NOBODY if g == 0 else g for g in groups}),
    )


def caller_groups(pid: int) -> list[int]:
    """The supplementary groups of the calling process (AUTH_SYS carries them too); [] when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("Groups:"):
                    return [int(g) for g in line.split()[1:]]
    except OSError:
        pass
    return []


def _syscall_numbers() -> dict[str, int]:
    machine = os.uname().machine
    if machine == "x86_64":
        return {"setgroups": 116, "setfsuid": 122, "setfsgid": 123}
    if machine == "aarch64":
        return {"setgroups": 159, "setfsuid": 151, "setfsgid": 152}
    raise SystemExit(f"rootsquash_fs: no syscall numbers for {machine}")


class Identity:
    """Per-thread file-system identity (raw syscalls: glibc's setgroups would change every thread)."""

    def __init__(self) -> None:
        self.nr = _syscall_numbers()

    def _set_groups(self, groups: list[int]) -> None:
        arr = (ctypes.c_uint * max(len(groups), 1))(*groups)
        if _libc.syscall(self.nr["setgroups"], len(groups), arr) != 0:
            raise OSError(ctypes.get_errno(), "setgroups")

    def become(self, uid: int, gid: int, groups: list[int]) -> None:
        self._set_groups(groups)
        _libc.syscall(self.nr["setfsgid"], gid)
        _libc.syscall(self.nr["setfsuid"], uid)
        # setfsuid returns the previous fsuid whatever happens: confirm the switch took (-1 never changes it).
        if _libc.syscall(self.nr["setfsuid"], -1 & 0xFFFFFFFF) != uid:
            raise OSError(errno.EPERM, "setfsuid")

    def restore(self) -> None:
        _libc.syscall(self.nr["setfsuid"], 0)
        _libc.syscall(self.nr["setfsgid"], 0)
        self._set_groups([])


def build_operations(backing_fd: int) -> Any:
    from fusepy import FuseOSError, Operations, fuse_get_context  # Debian python3-fusepy

    ident = Identity()
    stat_keys = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime_ns", "st_mtime_ns", "st_ctime_ns", "st_blocks")

    def handle(fh: Any) -> int | None:
        """fusepy with raw_fi passes the fuse_file_info itself where a handle is due (fgetattr, ftruncate)."""
        found = getattr(fh, "fh", fh)
        return None if found is None else int(found)

    def rel(path: str) -> str:
        path = path.lstrip("/")
        return path or "."

    class Squashed(Operations):  # type: ignore[misc]
        """Every operation under the caller's squashed identity, relative to the backing directory."""

        def __call__(self, op: str, *args: Any) -> Any:
            handler = getattr(self, op, None)
            if handler is None:
                raise FuseOSError(errno.EFAULT)
            if op in ("init", "destroy", "statfs"):
                return handler(*args)
            uid, gid, pid = fuse_get_context()
            ident.become(*squash(uid, gid, caller_groups(pid)))
            try:
                return handler(*args)
            except OSError as exc:
                raise FuseOSError(exc.errno or errno.EIO) from None
            finally:
                ident.restore()

        def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
            fd = handle(fh)
            st = os.fstat(fd) if fd is not None else os.lstat(rel(path), dir_fd=backing_fd)
            out = {k: getattr(st, k) for k in stat_keys if not k.endswith("_ns")}
            for k in ("st_atime", "st_mtime", "st_ctime"):
                out[k] = getattr(st, k + "_ns") / 1e9
            return out

        def access(self, path: str, mode: int) -> int:
            if not os.access(rel(path), mode, dir_fd=backing_fd, effective_ids=True, follow_symlinks=False):
                raise FuseOSError(errno.EACCES)
            return 0

        def readdir(self, path: str, fh: int) -> list[str]:
            fd = os.open(rel(path), os.O_RDONLY | os.O_DIRECTORY, dir_fd=backing_fd)
            try:
                return [".", "..", *os.listdir(fd)]
            finally:
                os.close(fd)

        def readlink(self, path: str) -> str:
            return os.readlink(rel(path), dir_fd=backing_fd)

        def mkdir(self, path: str, mode: int) -> None:
            os.mkdir(rel(path), mode, dir_fd=backing_fd)

        def rmdir(self, path: str) -> None:
            os.rmdir(rel(path), dir_fd=backing_fd)

        def unlink(self, path: str) -> None:
            os.unlink(rel(path), dir_fd=backing_fd)

        def symlink(self, target: str, source: str) -> None:
            os.symlink(source, rel(target), dir_fd=backing_fd)

        def link(self, target: str, source: str) -> None:
            os.link(rel(source), rel(target), src_dir_fd=backing_fd, dst_dir_fd=backing_fd, follow_symlinks=False)

        def rename(self, old: str, new: str) -> None:
            os.rename(rel(old), rel(new), src_dir_fd=backing_fd, dst_dir_fd=backing_fd)

        def chmod(self, path: str, mode: int) -> None:
            os.chmod(rel(path), mode, dir_fd=backing_fd)

        def chown(self, path: str, uid: int, gid: int) -> None:
            unchanged = 0xFFFFFFFF
            os.chown(rel(path), -1 if uid == unchanged else uid, -1 if gid == unchanged else gid, dir_fd=backing_fd, follow_symlinks=False)

        def truncate(self, path: str, length: int, fh: Any = None) -> None:
            fd = handle(fh)
            if fd is not None:
                os.ftruncate(fd, length)
                return
            fd = os.open(rel(path), os.O_WRONLY, dir_fd=backing_fd)
            try:
                os.ftruncate(fd, length)
            finally:
                os.close(fd)

        def utimens(self, path: str, times: tuple[float, float] | None = None) -> None:
            if times is None:
                os.utime(rel(path), dir_fd=backing_fd, follow_symlinks=False)
            else:
                os.utime(rel(path), ns=(int(times[0] * 1e9), int(times[1] * 1e9)), dir_fd=backing_fd, follow_symlinks=False)

        def open(self, path: str, fi: Any) -> int:
            fi.fh = os.open(rel(path), fi.flags, dir_fd=backing_fd)
            return 0

        def create(self, path: str, mode: int, fi: Any) -> int:
            fi.fh = os.open(rel(path), fi.flags | os.O_CREAT, mode, dir_fd=backing_fd)
            return 0

        def read(self, path: str, size: int, offset: int, fi: Any) -> bytes:
            return os.pread(fi.fh, size, offset)

        def write(self, path: str, data: bytes, offset: int, fi: Any) -> int:
            return os.pwrite(fi.fh, data, offset)

        def flush(self, path: str, fi: Any) -> int:
            return 0

        def fsync(self, path: str, datasync: int, fi: Any) -> int:
            (os.fdatasync if datasync else os.fsync)(fi.fh)
            return 0

        def release(self, path: str, fi: Any) -> int:
            os.close(fi.fh)
            return 0

        def statfs(self, path: str) -> dict[str, int]:
            st = os.statvfs(backing_fd)
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")
            return {k: getattr(st, k) for k in keys}

    return Squashed()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    from fusepy import FUSE

    backing, mountpoint = argv[1], argv[2]
    os.umask(0)  # the kernel has applied the caller's umask to the modes it sends
    backing_fd = os.open(backing, os.O_RDONLY | os.O_DIRECTORY)
    FUSE(
        build_operations(backing_fd),
        mountpoint,
        foreground=True,
        nothreads=True,  # one request at a time: the identity switch is per thread anyway
        raw_fi=True,
        allow_other=True,  # every user of the node, as on an NFS mount; no default_permissions: the backing checks
        use_ino=True,
        big_writes=True,  # 128 KiB writes, not 4 KiB (libfuse 2): 28 -> 470 MB/s measured (the backing disk: 440)
        attr_timeout=0,  # several nodes write the same backing files: no stale sizes (close-to-open, as NFS)
        entry_timeout=0,
        negative_timeout=0,
        fsname=f"megaprov-squash:{backing}",
        subtype="megaprov-squash",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
