"""`megaprov --version` and `megaprov self-check`: what this machine's install is, and one clear line when it is broken."""

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / "ansible_collections" / "megaprov" / "cluster"


def megaprov(*argv, **env):
    full = {**os.environ, "NO_COLOR": "1", **env}
    return subprocess.run([sys.executable, "-m", "megaprov", *argv], capture_output=True, text=True, env=full, timeout=120, check=False)


def test_version_names_megaprov_the_collection_ansible_core_and_python():
    proc = megaprov("--version")
    assert proc.returncode == 0, proc.stderr
    galaxy = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())
    lines = proc.stdout.splitlines()
    from megaprov import __version__

    assert lines[0] == f"megaprov {__version__}"
    assert lines[1] == f"collection megaprov.cluster {galaxy['version']} ({COLLECTION})"
    assert lines[2] == f"ansible-core {importlib.metadata.version('ansible-core')}"
    assert lines[3].startswith(f"python {sys.version.split()[0]} ")


def test_self_check_passes_on_this_install():
    proc = megaprov("self-check", "--output", "json")
    doc = json.loads(proc.stdout)
    failed = [c for c in doc["result"]["checks"] if c["status"] == "fail"]
    assert proc.returncode == 0 and not failed, failed
    names = [c["name"] for c in doc["result"]["checks"]]
    assert names == ["python", "collection", "ansible-core", "ansible-runner", "ansible-playbook", "ssh", "state", "podman"]
    core = next(c for c in doc["result"]["checks"] if c["name"] == "ansible-core")
    assert core["detail"] == f"{importlib.metadata.version('ansible-core')} (the collection needs >=2.19.0,<2.21.0)"


def test_a_missing_collection_fails_with_one_line_and_exit_5(tmp_path):
    proc = megaprov("self-check", MEGAPROV_ROOT=str(tmp_path / "none"))
    assert proc.returncode == 5
    errors = [line for line in proc.stderr.splitlines() if line.startswith("megaprov: error:")]
    assert len(errors) == 1 and "collection: no collection megaprov.cluster under MEGAPROV_ROOT=" in errors[0], proc.stderr
    assert "fail  collection" in proc.stdout


def test_an_ansible_core_the_collection_does_not_support_is_named(tmp_path):
    """A collection that asks for an ansible-core this environment lacks: self-check says which, and the fix."""
    copy = tmp_path / "root" / "ansible_collections" / "megaprov" / "cluster"
    shutil.copytree(COLLECTION, copy, ignore=shutil.ignore_patterns("__pycache__", "output"))
    (copy / "meta" / "runtime.yml").write_text('---\nrequires_ansible: ">=9.0.0"\n')
    proc = megaprov("self-check", MEGAPROV_ROOT=str(tmp_path / "root"))
    assert proc.returncode == 5
    installed = importlib.metadata.version("ansible-core")
    assert f"megaprov: error: ansible-core: {installed}, but the collection needs >=9.0.0 (pip install 'ansible-core>=9.0.0'" in proc.stderr


def test_an_unwritable_state_directory_is_named(tmp_path):
    if os.geteuid() == 0:
        # root writes anywhere: use a path under a regular file instead, which nobody can create
        (tmp_path / "file").write_text("")
        state = tmp_path / "file" / "state"
    else:
        (tmp_path / "ro").mkdir(mode=0o500)
        state = tmp_path / "ro" / "state"
    proc = megaprov("self-check", MEGAPROV_STATE=str(state))
    assert proc.returncode == 5
    assert f"megaprov: error: state: {state} cannot be created or written" in proc.stderr


def test_a_lab_name_is_a_name_never_a_path(tmp_path):
    """`lab inventory --name` builds a path under the state directory: a name like ../x is refused, not followed."""
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "inventory.ini").write_text("[head]\nn1\n")
    proc = megaprov("lab", "inventory", "--name", "../../x", MEGAPROV_STATE=str(tmp_path / "state"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert "megaprov: error: --name '../../x' is not a valid lab name" in proc.stderr
