#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Write a file to the shared directory, or read every peer's file back and compare checksums.

Access is either a mounted path (kernel NFS, Lustre, GPFS, ...) or NFS in user space through libnfs's
nfs-cp/nfs-cat (hosts whose kernel has no NFS client, such as the container lab). Read-only with write=false.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: shared_check
short_description: N-writer, N-reader check of a shared directory
description:
  - With O(write=true), writes a file of random bytes named after this host and its SHA-256 to the shared directory
    and returns the checksum. With O(write=false), reads back every writer's file named in O(peers) and compares
    its checksum with the one the writer returned, so every node is shown to see every other node's writes.
  - Access is either a mounted path (kernel NFS, Lustre, GPFS, ...) or NFS in user space through libnfs's
    C(nfs-cp)/C(nfs-cat) (hosts whose kernel has no NFS client, such as the container lab).
  - In check mode a write is skipped; reading is always done (it changes nothing).
options:
  access:
    description: How the share is reached, a mounted C(path) or C(libnfs).
    type: str
    choices: [path, libnfs]
    required: true
  root:
    description: Directory path, or C(nfs://server/export) for libnfs.
    type: str
    required: true
  subdir:
    description: Existing directory of the share that holds the check files.
    type: str
    default: cache
  name:
    description: This host's file name.
    type: str
    required: true
  write:
    description: Write this host's file (true) or read the peers' files back (false).
    type: bool
    default: false
  size_kb:
    description: Size of the file written, in KiB.
    type: int
    default: 1024
  peers:
    description: Writer name to the SHA-256 it wrote (an empty string when that writer wrote nothing).
    type: dict
    default: {}
  uid:
    description: User ID that libnfs presents to the NFS server.
    type: int
    default: 0
  gid:
    description: Group ID that libnfs presents to the NFS server.
    type: int
    default: 0
  timeout:
    description: Seconds each C(nfs-cp) or C(nfs-cat) may take.
    type: int
    default: 30
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Write this node's check file to the shared directory
  megaprov.cluster.shared_check:
    access: path
    root: /shared
    name: "{{ inventory_hostname }}"
    write: true
  register: written

- name: Read every node's check file back
  megaprov.cluster.shared_check:
    access: path
    root: /shared
    name: "{{ inventory_hostname }}"
    peers: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'written') | map(attribute='sha256', default=''))) }}"
"""

RETURN = r"""
access:
  description: The access method used.
  type: str
  returned: always
root:
  description: The share's root as given.
  type: str
  returned: always
sha256:
  description: SHA-256 of the file written.
  type: str
  returned: when O(write=true) and not in check mode
file:
  description: Name of the file written, inside O(subdir).
  type: str
  returned: when O(write=true) and not in check mode
bytes:
  description: Size of the file written.
  type: int
  returned: when O(write=true) and not in check mode
seconds:
  description: Seconds the write took.
  type: float
  returned: when O(write=true) and not in check mode
checks:
  description: One {writer, ok, error} per peer read back.
  type: list
  elements: dict
  returned: when O(write=false)
"""

import glob
import hashlib
import os
import subprocess
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

PREFIX = ".megaprov-check-"


def _url(root: str, rel: str, uid: int, gid: int) -> str:
    # NFSv3: libnfs 4.0's NFSv4 writes larger than a few KiB fail against NFS-Ganesha 4 (measured in the lab).
    return f"{root.rstrip('/')}/{rel}?uid={uid}&gid={gid}"


def _run(argv: list[str], timeout: int) -> subprocess.CompletedProcess[bytes]:
    """The command's result; a hung or missing libnfs tool becomes a failed result (the module's message), not a traceback."""
    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, b"", f"{argv[0]} timed out after {timeout} s".encode())
    except OSError as exc:
        return subprocess.CompletedProcess(argv, 127, b"", f"{argv[0]}: {exc.strerror}".encode())


def check_file(name: str, digest: str) -> str:
    """Each run writes a new file named by its content: libnfs cannot overwrite or delete files."""
    return f"{PREFIX}{name}-{digest[:16]}"


def write(p: dict, data: bytes, digest: str) -> str | None:
    rel = f"{p['subdir']}/{check_file(p['name'], digest)}"
    if p["access"] == "path":
        target = os.path.join(p["root"], rel)
        try:  # a missing subdir or a root-squashed/foreign-owned one: the module's message, not a traceback
            for old in glob.glob(os.path.join(p["root"], p["subdir"], f"{PREFIX}{p['name']}-*")):
                os.unlink(old)
            tmp = f"{target}.tmp-{os.getpid()}"
            with open(tmp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except OSError as exc:
            return str(exc)
        return None
    with tempfile.NamedTemporaryFile() as handle:
        handle.write(data)
        handle.flush()
        proc = _run(["nfs-cp", handle.name, _url(p["root"], rel, p["uid"], p["gid"])], p["timeout"])
    if proc.returncode != 0:
        return (proc.stderr or proc.stdout).decode(errors="replace").strip() or f"nfs-cp exited {proc.returncode}"
    return None


def read(p: dict, name: str, digest: str) -> tuple[bytes | None, str | None]:
    rel = f"{p['subdir']}/{check_file(name, digest)}"
    if p["access"] == "path":
        try:
            with open(os.path.join(p["root"], rel), "rb") as handle:
                return handle.read(), None
        except OSError as exc:
            return None, str(exc)
    proc = _run(["nfs-cat", _url(p["root"], rel, p["uid"], p["gid"])], p["timeout"])
    if proc.returncode != 0:
        return None, proc.stderr.decode(errors="replace").strip() or f"nfs-cat exited {proc.returncode}"
    return proc.stdout, None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "access": {"type": "str", "choices": ["path", "libnfs"], "required": True},
            "root": {"type": "str", "required": True},
            "subdir": {"type": "str", "default": "cache"},
            "name": {"type": "str", "required": True},
            "write": {"type": "bool", "default": False},
            "size_kb": {"type": "int", "default": 1024},
            "peers": {"type": "dict", "default": {}},
            "uid": {"type": "int", "default": 0},
            "gid": {"type": "int", "default": 0},
            "timeout": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    p = module.params
    result: dict = {"changed": False, "access": p["access"], "root": p["root"]}
    if p["write"]:
        if module.check_mode:
            module.exit_json(skipped=True, msg="check mode: the shared directory is not written", **result)
        data = os.urandom(p["size_kb"] * 1024)
        digest = hashlib.sha256(data).hexdigest()
        start = time.monotonic()
        error = write(p, data, digest)
        if error:
            module.fail_json(msg=f"cannot write {p['subdir']}/{check_file(p['name'], digest)} in {p['root']}: {error}", **result)
        result.update(sha256=digest, file=check_file(p["name"], digest), bytes=len(data), seconds=round(time.monotonic() - start, 3))
        module.exit_json(**result)
    checks = []
    for writer, expected in sorted(p["peers"].items()):
        if not expected:
            checks.append({"writer": writer, "ok": False, "error": "that node wrote no check file"})
            continue
        data, error = read(p, writer, expected)
        digest = hashlib.sha256(data).hexdigest() if data is not None else None
        ok = error is None and digest == expected
        why = error or ("" if ok else "content differs from what the writer wrote")
        checks.append({"writer": writer, "ok": ok, "error": why})
    result["checks"] = checks
    bad = [c for c in checks if not c["ok"]]
    if bad:
        module.fail_json(msg="; ".join(f"{p['name']} reading {c['writer']}'s file: {c['error']}" for c in bad), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
