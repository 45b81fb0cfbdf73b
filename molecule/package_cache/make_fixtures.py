"""Tiny fixtures on the Molecule head: /srv/wheelhouse (one wheel), /srv/bundle (manifest.json, apt/ flat repository
with one package and Packages.gz, wheels/ one wheel, git/probe.git) and /srv/upstream/local.git. Run by prepare.yml."""

import base64
import gzip
import hashlib
import json
import os
import subprocess
import tempfile
import zipfile
from pathlib import Path


def wheel(directory: Path, name: str, version: str) -> Path:
    """A pure-Python wheel whose module says its name."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{version}-py3-none-any.whl"
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"NAME = {name!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: megaprov-molecule\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for member, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{member},sha256={digest},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


def deb(directory: Path) -> None:
    """One package (installs a marker file) and the flat repository's Packages.gz."""
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "pkg"
        (root / "DEBIAN").mkdir(parents=True)
        (root / "usr/share/megaprov-bundle-probe").mkdir(parents=True)
        (root / "usr/share/megaprov-bundle-probe/marker").write_text("from the offline bundle\n")
        control = "Package: megaprov-bundle-probe\nVersion: 1.0\nArchitecture: all\nMaintainer: megaprov <megaprov@example.invalid>\n"
        control += "Description: megaprov offline bundle probe\n"
        (root / "DEBIAN/control").write_text(control)
        package = directory / "megaprov-bundle-probe_1.0_all.deb"
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(package)], check=True, capture_output=True)
    data = package.read_bytes()
    stanza = control.replace("Description:", f"Filename: ./{package.name}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\nDescription:")
    with gzip.open(directory / "Packages.gz", "wt") as out:
        out.write(stanza + "\n")


def bare(path: Path, text: str) -> None:
    """A bare repository with one commit on main holding README."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_AUTHOR_NAME": "m", "GIT_AUTHOR_EMAIL": "m@x", "GIT_COMMITTER_NAME": "m", "GIT_COMMITTER_EMAIL": "m@x"}
        subprocess.run(["git", "init", "-q", "-b", "main", tmp], check=True, env=env)
        Path(tmp, "README").write_text(text)
        subprocess.run(["git", "-C", tmp, "add", "README"], check=True, env=env)
        subprocess.run(["git", "-C", tmp, "commit", "-q", "-m", "probe"], check=True, env=env)
        subprocess.run(["git", "-C", tmp, "tag", "v1.0"], check=True, env=env)
        subprocess.run(["git", "clone", "-q", "--bare", tmp, str(path)], check=True, env=env)


wheel(Path("/srv/wheelhouse"), "megaprov_wheelhouse_probe", "1.0")
bundle = Path("/srv/bundle")
deb(bundle / "apt")
wheel(bundle / "wheels", "megaprov_bundle_probe", "2.0")
bare(bundle / "git/probe.git", "probe from the bundle\n")
bare(Path("/srv/upstream/local.git"), "local upstream\n")
files = sorted(p for p in bundle.rglob("*") if p.is_file())
manifest = {"format": 1, "files": [{"path": str(p.relative_to(bundle)), "sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "size": p.stat().st_size} for p in files]}
(bundle / "manifest.json").write_text(json.dumps(manifest, indent=1))
