#!/usr/bin/env python3
"""Install the Ansible collections the tests need from PyPI (Galaxy may be unreachable).

PyPI's `ansible` package carries every collection (~470 MB installed); this takes its pinned wheel,
checks its sha256 and extracts only the collections listed below into .collections/.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ANSIBLE_WHEEL = "ansible==12.3.0"
SHA256 = "cd156f82fa87f7a899212b0efa9f7ca3a24d609212de9f78428a572eb01e5414"
COLLECTIONS = ("containers/podman", "ansible/posix", "community/general")
ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / ".collections" / "ansible_collections"


def main() -> int:
    stamp = TARGET.parent / f".installed-{SHA256[:12]}"
    if stamp.exists():
        print(f"collections: {', '.join(COLLECTIONS)} already in {TARGET}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:", "-d", tmp]
        # pip's own warnings (find-links folders that do not exist on this machine, ...) only matter when it fails
        proc = subprocess.run([*argv, ANSIBLE_WHEEL], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            sys.exit(f"collections: pip download {ANSIBLE_WHEEL} failed:\n{proc.stderr[-3000:]}")
        wheel = next(Path(tmp).glob("ansible-*.whl"))
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != SHA256:
            print(f"collections: {wheel.name} has sha256 {digest}, expected {SHA256}", file=sys.stderr)
            return 1
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.namelist() if any(m.startswith(f"ansible_collections/{c}/") for c in COLLECTIONS)]
            archive.extractall(TARGET.parent, members)
    stamp.touch()
    print(f"collections: installed {', '.join(COLLECTIONS)} into {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
