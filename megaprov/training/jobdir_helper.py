"""The head's side of a job directory read and written through the head (megaprov.training.jobdir).

Sent to the head as the argument of ``python3 -c`` over SSH and run there as the cluster user, it answers one JSON
request per line on stdin with one JSON line on stdout, for files inside ``<shared>/jobs`` only: ``list`` (the jobs),
``scan`` (a job's regular files with size and mtime), ``read`` (bytes of one file from an offset), ``write`` (one
file, atomically). Names are checked on this side too; links, FIFOs and devices are never followed or opened, and
every answer is bounded. Standard library only: the head runs whatever Python 3 its distribution has.
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import sys

PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,254}$")
MAX_FILES = 4096  # files of one job listed by one scan
MAX_DEPTH = 4
MAX_READ = 4 * 1024 * 1024  # bytes one read answers
MAX_WRITE = 16 * 1024 * 1024


def parts(rel: object) -> list[str]:
    names = [p for p in str(rel).split("/") if p]
    if not names or len(names) > MAX_DEPTH + 1 or not all(PART.match(p) and p not in (".", "..") for p in names):
        raise ValueError(f"not a path inside the jobs directory: {str(rel)[:200]!r}")
    return names


def open_dir(root_fd: int, names: list[str]) -> int:
    """The directory ``names`` under the root, each step a real directory (O_NOFOLLOW): a link is refused."""
    fd = os.dup(root_fd)
    for name in names:
        try:
            nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd


def scan(root_fd: int, rel: object) -> dict[str, object]:
    out: list[list[object]] = []
    top = open_dir(root_fd, parts(rel))

    def walk(fd: int, prefix: str, depth: int) -> None:
        for entry in sorted(os.listdir(fd)):
            if len(out) >= MAX_FILES or not PART.match(entry):
                continue
            info = os.stat(entry, dir_fd=fd, follow_symlinks=False)
            path = f"{prefix}{entry}"
            if stat.S_ISREG(info.st_mode):
                out.append([path, info.st_size, info.st_mtime_ns])
            elif stat.S_ISDIR(info.st_mode) and depth < MAX_DEPTH:
                sub = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                try:
                    walk(sub, path + "/", depth + 1)
                finally:
                    os.close(sub)

    try:
        walk(top, "", 0)
    finally:
        os.close(top)
    return {"files": out}


def read(root_fd: int, rel: object, offset: object, length: object) -> dict[str, object]:
    names = parts(rel)
    directory = open_dir(root_fd, names[:-1])
    try:
        fd = os.open(names[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
    finally:
        os.close(directory)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{rel} is not a regular file")
        os.lseek(fd, max(0, int(str(offset))), os.SEEK_SET)
        data = os.read(fd, max(0, min(int(str(length)), MAX_READ)))
        return {"size": info.st_size, "data": base64.b64encode(data).decode()}
    finally:
        os.close(fd)


def write(root_fd: int, rel: object, data_b64: str) -> dict[str, object]:
    names = parts(rel)
    data = base64.b64decode(data_b64)
    if len(data) > MAX_WRITE:
        raise ValueError(f"{rel}: more than {MAX_WRITE} bytes")
    directory = open_dir(root_fd, names[:-1])
    tmp = f".{names[-1]}.megaprov-tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=directory)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, names[-1], src_dir_fd=directory, dst_dir_fd=directory)
    finally:
        os.close(directory)
    return {"written": len(data)}


def serve(root: str) -> None:
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    print(json.dumps({"ready": True, "user": os.getuid()}), flush=True)
    for line in sys.stdin:
        try:
            req = json.loads(line)
            op = req.get("op")
            answer: dict[str, object]
            if op == "list":
                answer = {"jobs": sorted(n for n in os.listdir(root_fd) if PART.match(n))[:MAX_FILES]}
            elif op == "scan":
                answer = scan(root_fd, req["path"])
            elif op == "read":
                answer = read(root_fd, req["path"], req.get("offset", 0), req.get("length", MAX_READ))
            elif op == "write":
                answer = write(root_fd, req["path"], req["data"])
            else:
                raise ValueError(f"unknown request {str(op)[:40]!r}")
            answer["ok"] = True
        except FileNotFoundError as exc:
            answer = {"ok": False, "missing": True, "error": f"{exc.strerror}: {str(exc.filename)[:200]}"}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            answer = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    serve(sys.argv[1])
