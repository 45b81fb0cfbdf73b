"""Directories of the cluster user's for tests that run as root and act as that user (root's ownership switch)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

CLUSTER_UID = 2000  # ssh_mesh_uid's default


@contextlib.contextmanager
def users_directory(name: str, uid: int = CLUSTER_UID) -> Iterator[Path]:
    """A 0755 directory ``name`` owned by ``uid`` in a fresh 0755 folder of /tmp that the user can traverse (pytest's
    tmp_path lies under root's 0700 one); removed with its folder afterwards."""
    top = Path(tempfile.mkdtemp(prefix=f"megaprov-{name}-"))
    try:
        top.chmod(0o755)
        made = top / name
        made.mkdir(mode=0o755)
        os.chown(made, uid, uid)
        yield made
    finally:
        shutil.rmtree(top)
