"""Where megaprov finds its Ansible collection and keeps its state.

The roles, playbooks and modules are the Ansible collection ``megaprov.cluster``. The wheel installs it beside the
Python package (``site-packages/ansible_collections/megaprov/cluster``), a checkout holds it at the same place relative
to ``megaprov/``, and ``MEGAPROV_ROOT`` names another directory that holds ``ansible_collections/`` (development).

State (runs, fact cache, lab inventories and keys, job records) goes to ``$MEGAPROV_STATE`` or
``$XDG_STATE_HOME/megaprov`` (``~/.local/state/megaprov``); downloads that can be fetched again (the lab's image
inputs, its wheelhouse) to ``$MEGAPROV_CACHE`` or ``$XDG_CACHE_HOME/megaprov`` (``~/.cache/megaprov``).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from megaprov.errors import EnvironmentProblem

PACKAGE_DIR = Path(__file__).resolve().parent
LAB_FILES = PACKAGE_DIR / "cluster" / "lab_files"
# megaprov's Ansible settings (ANSIBLE_CONFIG of every run); paths in it are set per run through the environment.
ANSIBLE_CFG = PACKAGE_DIR / "ansible.cfg"
COLLECTION = ("megaprov", "cluster")
COLLECTION_NAME = ".".join(COLLECTION)


def collections_root() -> Path:
    """The directory that holds ``ansible_collections/megaprov/cluster`` (``MEGAPROV_ROOT`` overrides)."""
    env = os.environ.get("MEGAPROV_ROOT")
    root = Path(env).resolve() if env else PACKAGE_DIR.parent
    if not (root / "ansible_collections" / COLLECTION[0] / COLLECTION[1] / "playbooks").is_dir():
        where = f"MEGAPROV_ROOT={env}" if env else str(root)
        raise EnvironmentProblem(
            f"no collection {COLLECTION_NAME} under {where} (ansible_collections/{'/'.join(COLLECTION)}/playbooks is missing)",
            "reinstall megaprov (pip install megaprov, or pip install . in a checkout)"
            + (", or point MEGAPROV_ROOT at a checkout" if not env else ", or unset MEGAPROV_ROOT"),
        )
    return root


def collection_dir() -> Path:
    """The collection's own directory: ``galaxy.yml``, ``roles/``, ``playbooks/``, ``plugins/``, ``meta/``."""
    return collections_root() / "ansible_collections" / COLLECTION[0] / COLLECTION[1]


def roles_dir() -> Path:
    return collection_dir() / "roles"


def playbook(name: str) -> Path:
    return collection_dir() / "playbooks" / name


def cluster_defaults() -> Path:
    """The cluster-wide settings (``megaprov_*``): the defaults of the collection's ``megaprov`` role."""
    return roles_dir() / "megaprov" / "defaults" / "main.yml"


def _xdg(variable: str, xdg: str, fallback: str) -> Path:
    env = os.environ.get(variable)
    if env:
        return Path(env).expanduser().resolve()
    base = os.environ.get(xdg, "")
    # The XDG spec: a relative path in $XDG_* is invalid and must be ignored.
    return (Path(base) if base and os.path.isabs(base) else Path.home() / fallback) / "megaprov"


def state_dir() -> Path:
    """Run artifacts, fact cache, job records, lab inventories and keys (``MEGAPROV_STATE``, else XDG state)."""
    return _xdg("MEGAPROV_STATE", "XDG_STATE_HOME", ".local/state")


def cache_dir() -> Path:
    """What can be downloaded again: the lab's wheelhouse and image inputs (``MEGAPROV_CACHE``, else XDG cache)."""
    return _xdg("MEGAPROV_CACHE", "XDG_CACHE_HOME", ".cache")


def fact_cache_dir(inventory: Path) -> Path:
    """Ansible's fact cache, one per inventory so that a recreated lab never sees stale facts."""
    import hashlib

    digest = hashlib.sha256(str(inventory.resolve()).encode()).hexdigest()[:16]
    return state_dir() / "facts" / digest


def cached_dir(final: Path, fill: Callable[[Path], None], stamp: str) -> Path:
    """``final`` if a previous call completed it; otherwise ``fill`` a fresh temporary sibling, make it readable by
    everyone (containers mount it read-only), write ``.complete`` and move it into place. A failing ``fill``
    leaves nothing behind."""
    if (final / ".complete").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    # Two processes (parallel test workers, two commands of one user) filling the same directory: the second waits for
    # the first and then finds it complete, instead of removing a directory the first one's users already mount.
    with open(final.parent / f".{final.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / ".complete").exists():
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
        try:
            fill(tmp)
            for path in [tmp, *tmp.rglob("*")]:
                path.chmod(path.stat().st_mode | 0o444 | (0o111 if path.is_dir() else 0))
            (tmp / ".complete").write_text(stamp + "\n")
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    return final
