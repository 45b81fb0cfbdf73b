"""Who the controller writes as on the shared directory: the cluster user, never root.

On a real cluster the controller reaches the shared directory over NFS with root_squash, where root is nobody: it
can neither create files in the cluster user's directories nor chown them. A root controller therefore writes there
with the cluster user's uid (the owner of the directory it writes into), and the nodes' cluster user can change
what it wrote.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Owner:
    """The numeric owner that files are written as (the cluster user's uid and gid on the shared directory)."""

    uid: int
    gid: int


def directory_owner(directory: Path) -> Owner | None:
    """Who root writes as in ``directory``: its owner when that is not root; None when this process is not root
    (it writes as itself) or the directory is root's."""
    if os.geteuid() != 0:
        return None
    st = directory.stat()
    return Owner(st.st_uid, st.st_gid) if st.st_uid != 0 else None


@contextmanager
def written_as(owner: Owner | None) -> Iterator[None]:
    """Create files as ``owner``: a root process switches its effective uid, gid and groups for the duration.

    seteuid, not chown after the write: through NFS with root_squash root is nobody, so it can neither create files
    in the cluster user's directories nor chown them; with the cluster user's uid it does both as that user does.
    The switch covers the whole process (glibc applies it to every thread): keep the block to the writes."""
    if owner is None or os.geteuid() != 0 or owner.uid == 0:
        yield
        return
    groups, egid = os.getgroups(), os.getegid()
    os.setgroups([owner.gid])
    os.setegid(owner.gid)
    os.seteuid(owner.uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(egid)
        os.setgroups(groups)


def as_owner_of(directory: Path) -> contextlib.AbstractContextManager[None]:
    """Write as the owner of ``directory`` (a no-op when this process is not root or the directory is root's)."""
    return written_as(directory_owner(directory))
