"""The controller's own install: versions (``megaprov --version``) and ``megaprov self-check``.

Each check reads what is installed, never the network and never a node: Python, ansible-core against the collection's
``requires_ansible``, ansible-runner, ``ansible-playbook`` and ``ssh`` on the search path, the collection megaprov runs
(found where the wheel or the checkout put it), its state directory, and the lab's podman. A failure is one line that
names what is wrong and the fix; the lab's podman is only a warning (a real cluster does not need it).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from megaprov import __version__, paths
from megaprov.errors import EnvironmentProblem

SUPPORTED_PYTHON = ((3, 11), (3, 12))
PASS, WARN, FAIL = "pass", "warn", "fail"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str
    hint: str = ""


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def collection_info() -> tuple[Path, str, str]:
    """(directory, version, requires_ansible) of the collection megaprov runs; raises EnvironmentProblem if absent."""
    directory = paths.collection_dir()
    try:
        galaxy = yaml.safe_load((directory / "galaxy.yml").read_text(encoding="utf-8")) or {}
        runtime = yaml.safe_load((directory / "meta" / "runtime.yml").read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise EnvironmentProblem(
            f"collection {paths.COLLECTION_NAME} at {directory} is damaged ({exc.__class__.__name__}: {exc})", "reinstall megaprov"
        ) from None
    return directory, str(galaxy.get("version", "?")), str(runtime.get("requires_ansible", ""))


def version_lines() -> list[str]:
    """What ``megaprov --version`` prints: megaprov, the collection it runs (and where), ansible-core, Python."""
    lines = [f"megaprov {__version__}"]
    try:
        directory, version, _ = collection_info()
        lines.append(f"collection {paths.COLLECTION_NAME} {version} ({directory})")
    except EnvironmentProblem as exc:
        lines.append(f"collection {paths.COLLECTION_NAME}: {exc.message}")
    lines.append(f"ansible-core {_distribution_version('ansible-core') or 'not installed'}")
    lines.append(f"python {sys.version.split()[0]} ({sys.executable})")
    return lines


def _python() -> Check:
    found = sys.version_info[:2]
    text = f"{found[0]}.{found[1]} ({sys.executable})"
    supported = " or ".join(f"{a}.{b}" for a, b in SUPPORTED_PYTHON)
    if found in SUPPORTED_PYTHON:
        return Check("python", PASS, text)
    if found > SUPPORTED_PYTHON[-1]:
        return Check("python", WARN, f"{text} is newer than megaprov is tested with", f"Python {supported} are tested")
    return Check("python", FAIL, f"{text} is too old", f"install megaprov with Python {supported}")


def _ansible_core(requires: str) -> Check:
    version = _distribution_version("ansible-core")
    if version is None:
        return Check("ansible-core", FAIL, "not installed", "pip install megaprov (it depends on ansible-core)")
    if not requires:
        return Check("ansible-core", PASS, version)
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        fits = Version(version) in SpecifierSet(requires)
    except (InvalidSpecifier, InvalidVersion):
        return Check("ansible-core", FAIL, f"{version}; the collection asks for {requires!r}, which cannot be read", "reinstall megaprov")
    if fits:
        return Check("ansible-core", PASS, f"{version} (the collection needs {requires})")
    return Check(
        "ansible-core", FAIL, f"{version}, but the collection needs {requires}", f"pip install 'ansible-core{requires}' in megaprov's environment"
    )


def _runner_library() -> Check:
    version = _distribution_version("ansible-runner")
    if version is None:
        return Check("ansible-runner", FAIL, "not installed", "pip install megaprov (it depends on ansible-runner)")
    return Check("ansible-runner", PASS, version)


def _program(name: str, hint: str, version_flag: str = "--version") -> Check:
    """An executable megaprov runs, found as its runs find it (runner.find_program), and that it starts."""
    from megaprov.cluster.runner import find_program

    found = find_program(name)
    if found is None:
        return Check(name, FAIL, "not found next to this Python or on PATH", hint)
    try:
        proc = subprocess.run([found, version_flag], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(name, FAIL, f"{found} does not run ({exc.__class__.__name__})", hint)
    first = (proc.stdout or proc.stderr).strip().splitlines()[:1]
    if proc.returncode != 0:
        return Check(name, FAIL, f"{found} {version_flag} exited {proc.returncode}: {first[0] if first else ''}", hint)
    return Check(name, PASS, f"{first[0] if first else ''} ({found})")


def _collection() -> tuple[Check, str]:
    try:
        directory, version, requires = collection_info()
    except EnvironmentProblem as exc:
        return Check("collection", FAIL, exc.message, exc.hint or ""), ""
    missing = [p for p in ("playbooks/bootstrap.yml", "roles/megaprov/defaults/main.yml", "plugins/modules") if not (directory / p).exists()]
    if missing:
        return Check("collection", FAIL, f"{directory} lacks {', '.join(missing)}", "reinstall megaprov"), requires
    return Check("collection", PASS, f"{paths.COLLECTION_NAME} {version} ({directory})"), requires


def _state_dir() -> Check:
    state = paths.state_dir()
    probe = state
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.is_dir() and os.access(probe, os.W_OK | os.X_OK):
        return Check("state", PASS, str(state))
    return Check("state", FAIL, f"{state} cannot be created or written", "set MEGAPROV_STATE (or XDG_STATE_HOME) to a writable directory")


def _podman() -> Check:
    if shutil.which("podman") is None:
        return Check("podman", WARN, "not installed: `megaprov lab` cannot run (a real cluster does not need it)", "apt-get install podman runc")
    check = _program("podman", "see the README's lab section")
    return Check("podman", PASS if check.status == PASS else WARN, check.detail, check.hint)


def checks() -> list[Check]:
    """Every check, in order; none touches the network or a node."""
    collection, requires = _collection()
    return [
        _python(),
        collection,
        _ansible_core(requires),
        _runner_library(),
        _program("ansible-playbook", "pip install megaprov (it depends on ansible-core)"),
        _program("ssh", "apt-get install openssh-client", "-V"),
        _state_dir(),
        _podman(),
    ]
