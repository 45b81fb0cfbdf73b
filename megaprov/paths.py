"""Where megaprov finds its playbooks and keeps its state."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from megaprov.errors import EnvironmentProblem

PACKAGE_DIR = Path(__file__).resolve().parent
LAB_FILES = PACKAGE_DIR / "cluster" / "lab_files"


def project_root() -> Path:
    """The checkout that holds ``playbooks/`` and ``roles/`` (``MEGAPROV_ROOT`` overrides)."""
    root = Path(os.environ.get("MEGAPROV_ROOT", PACKAGE_DIR.parent)).resolve()
    if not (root / "playbooks").is_dir() or not (root / "roles").is_dir():
        raise EnvironmentProblem(
            f"no playbooks/ and roles/ under {root}",
            "install megaprov from its checkout (pip install -e .) or set MEGAPROV_ROOT to it",
        )
    return root


def state_dir() -> Path:
    """Run artifacts, fact cache and lab keys live here (``MEGAPROV_STATE`` overrides)."""
    env = os.environ.get("MEGAPROV_STATE")
    return Path(env).resolve() if env else PACKAGE_DIR.parent / ".megaprov"


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
