"""megaprov installed as an operator installs it, and its collection used alone by a site with its own Ansible.

From a clone of the commit under test: the wheel (`pip wheel`) and the collection artifact (`ansible-galaxy
collection build`) are built; the wheel is installed, not editable, into a fresh venv and run from a directory
outside any checkout (`--version`, `self-check`, `job check`, `plan`, a bootstrap stage against the README run's
lab); the collection tarball is installed alone with `ansible-galaxy collection install` and its bootstrap
playbook's preflight stage runs with plain `ansible-playbook` against the same lab.
"""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

pytestmark = pytest.mark.lab

COLLECTION = ROOT / "ansible_collections" / "megaprov" / "cluster"


def run(argv, cwd, env, timeout=900):
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return proc


def outside_env(bin_dir: Path | None, home: Path) -> dict[str, str]:
    """No checkout on any path: not this venv, not MEGAPROV_ROOT, not the test run's MEGAPROV_STATE."""
    drop = ("VIRTUAL_ENV", "MEGAPROV_ROOT", "MEGAPROV_STATE", "MEGAPROV_CACHE", "PYTHONPATH", "ANSIBLE_CONFIG", "ANSIBLE_COLLECTIONS_PATH")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = os.pathsep.join([*([str(bin_dir)] if bin_dir else []), "/usr/local/bin", "/usr/bin", "/bin"])
    env["XDG_STATE_HOME"] = str(home / "state")
    env["NO_COLOR"] = "1"
    return env


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """The wheel and the collection tarball, built from a clone (only what the commit holds)."""
    work = tmp_path_factory.mktemp("dist")
    clone = work / "src"
    subprocess.run(["git", "clone", "-q", "--no-local", str(ROOT), str(clone)], check=True)
    dist = work / "dist"
    wheel = run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps", "-w", dist, clone], work, os.environ)
    assert wheel.returncode == 0, wheel.stderr[-3000:]
    source = clone / "ansible_collections" / "megaprov" / "cluster"
    galaxy = run([Path(sys.executable).parent / "ansible-galaxy", "collection", "build", source, "--output-path", dist], work, os.environ)
    assert galaxy.returncode == 0, galaxy.stdout + galaxy.stderr
    found = {"wheel": next(dist.glob("megaprov-*.whl")), "collection": next(dist.glob("megaprov-cluster-*.tar.gz"))}
    for kind, path in found.items():
        print(f"artifact {kind}: {path.name} {path.stat().st_size} bytes")
    return found


@pytest.fixture(scope="module")
def installed(artifacts, tmp_path_factory):
    """A fresh venv with the wheel installed (not editable): its bin directory and a home outside any checkout."""
    base = tmp_path_factory.mktemp("operator")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = run([venv / "bin" / "pip", "install", "-q", "--disable-pip-version-check", artifacts["wheel"]], base, outside_env(None, base), timeout=1200)
    assert pip.returncode == 0, pip.stderr[-3000:]
    home = base / "home"
    home.mkdir()
    return {"bin": venv / "bin", "home": home, "site": next((venv / "lib").glob("python3.*/site-packages"))}


def test_the_wheel_carries_the_collection_and_nothing_of_the_checkout(artifacts):
    names = set(zipfile.ZipFile(artifacts["wheel"]).namelist())
    prefix = "ansible_collections/megaprov/cluster/"
    for needed in (
        "galaxy.yml",
        "meta/runtime.yml",
        "meta/compat.yml",
        "playbooks/bootstrap.yml",
        "roles/megaprov/defaults/main.yml",
        "plugins/modules/gpu_state.py",
        "plugins/module_utils/pci.py",
        "plugins/filter/nfs_network.py",
    ):
        assert prefix + needed in names, needed
    assert "megaprov/ansible.cfg" in names and "megaprov/training/megatron/flags-core_v0.16.1.json" in names
    assert not [n for n in names if "__pycache__" in n or "/tests/output/" in n or n.startswith(("tests/", "molecule/", "benchmarks/"))]


def test_the_collection_artifact_is_what_galaxy_installs(artifacts):
    with tarfile.open(artifacts["collection"]) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("MANIFEST.json"))  # type: ignore[arg-type]
    galaxy = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())
    assert manifest["collection_info"]["namespace"] == "megaprov" and manifest["collection_info"]["name"] == "cluster"
    assert manifest["collection_info"]["version"] == galaxy["version"]
    assert {"meta/runtime.yml", "playbooks/bootstrap.yml", "plugins/modules/node_facts.py", "roles/preflight/tasks/main.yml"} <= names
    assert not [n for n in names if "__pycache__" in n or n.startswith("tests/output")]


def test_installed_megaprov_works_from_any_directory(installed, bootstrapped, tmp_path):
    megaprov = installed["bin"] / "megaprov"
    env = outside_env(installed["bin"], installed["home"])
    where = tmp_path / "anywhere"
    where.mkdir()

    version = run([megaprov, "--version"], where, env)
    assert version.returncode == 0, version.stderr
    collection = installed["site"] / "ansible_collections" / "megaprov" / "cluster"
    assert f"({collection})" in version.stdout, version.stdout  # the wheel's own copy, not this checkout's

    check = run([megaprov, "self-check", "--output", "json"], where, env)
    failed = [c for c in json.loads(check.stdout)["result"]["checks"] if c["status"] == "fail"]
    assert check.returncode == 0 and not failed, failed

    job = where / "lab-tiny.yml"
    shutil.copy(ROOT / "examples" / "jobs" / "lab-tiny.yml", job)
    checked = run([megaprov, "job", "check", "-f", job], where, env)
    assert checked.returncode == 0, checked.stderr
    plan = run([megaprov, "plan", "--job", job, "-i", bootstrapped["inventory"], "--output", "json"], where, env)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["result"]["cluster"]["nodes"] == 2  # lab-tiny: 2 nodes x 1 process

    stage = run([megaprov, "bootstrap", "-i", bootstrapped["inventory"], "--tags", "preflight", "--output", "json"], where, env)
    assert stage.returncode == 0, stage.stderr[-3000:]
    report = json.loads(stage.stdout)["result"]
    stats = {h["host"]: h for h in report["hosts"]}  # the nodes, and localhost (the validate play)
    for node in bootstrapped["nodes"]:
        assert stats[node["name"]]["failed"] == 0 and stats[node["name"]]["unreachable"] == 0 and stats[node["name"]]["ok"] > 0, stats
    # its runs are kept in the operator's XDG state directory, and nothing was written where it ran
    assert any((installed["home"] / "state" / "megaprov" / "runs").iterdir())
    assert [p.name for p in where.iterdir()] == ["lab-tiny.yml"]


# What the train extra brings (torch, megatron-core, tokenizers): a plain `pip install megaprov` has none of it.
OPTIONAL = ("torch", "megatron", "tokenizers", "numpy")
IMPORT_ALL = """
import importlib, json, sys
failed = {}
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        failed[name] = exc.name or str(exc)
    except Exception as exc:  # noqa: BLE001
        failed[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(failed))
"""


def test_every_module_and_command_family_works_from_the_installed_wheel(installed, bootstrapped, tmp_path):
    """A listed package set once left megaprov/ops/doctor and megaprov/training/launchers out of the wheel: an installed
    `megaprov train` and `megaprov doctor` ended with "internal error: ImportError". Every module of the package as
    this commit holds it is in the wheel and imports there (only the train extra's own packages may be missing), and
    every command's --help and `doctor --log` run from it."""
    env = outside_env(installed["bin"], installed["home"])
    modules = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__") for p in (ROOT / "megaprov").rglob("*.py"))
    site = installed["site"]

    def shipped(module: str) -> bool:
        path = site / Path(*module.split("."))
        return path.with_suffix(".py").exists() or (path / "__init__.py").exists()

    missing = [m for m in modules if not shipped(m)]
    assert missing == [], f"not in the wheel: {missing}"
    python = installed["bin"] / "python"
    out = run([python, "-c", IMPORT_ALL, json.dumps(modules)], tmp_path, env)
    assert out.returncode == 0, out.stderr[-2000:]
    failed = json.loads(out.stdout)
    assert {m: why for m, why in failed.items() if not str(why).startswith(OPTIONAL)} == {}, failed
    megaprov = installed["bin"] / "megaprov"
    # every command and subcommand, as the installed parser has them (a family's own --help too)
    walk = (
        "import argparse\nfrom megaprov import cli\n"
        "def walk(p, path):\n"
        "    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]\n"
        "    if path: print(' '.join(path))\n"
        "    for a in subs:\n"
        "        for name, child in a.choices.items(): walk(child, path + [name])\n"
        "walk(cli.build_parser(), [])\n"
    )
    helps = run([python, "-c", walk], tmp_path, env)
    assert helps.returncode == 0, helps.stderr[-2000:]
    commands = [line.split() for line in helps.stdout.splitlines()]
    assert {"train", "doctor", "plan", "job check", "job attach", "bootstrap", "inventory check", "completion"} <= {" ".join(c) for c in commands}
    for command in commands:
        shown = run([megaprov, *command, "--help"], tmp_path, env)
        assert shown.returncode == 0 and "internal error" not in shown.stderr and "examples:" in shown.stdout, (command, shown.stderr[-1000:])
    doctor = run([megaprov, "doctor", "--log", ROOT / "tests" / "doctor_corpus" / "lab" / "nan_loss.log", "--output", "json"], tmp_path, env)
    assert doctor.returncode in (0, 6) and "internal error" not in doctor.stderr, doctor.stderr[-2000:]
    assert json.loads(doctor.stdout)["result"]["findings"], doctor.stdout[-2000:]
    dry = run([megaprov, "train", "--job", ROOT / "examples" / "jobs" / "lab-tiny.yml", "-i", bootstrapped["inventory"], "--dry-run"], tmp_path, env)
    assert dry.returncode == 0 and "torchrun" in dry.stdout + dry.stderr, dry.stderr[-2000:]
    # one command of every other family, as the operator meets them from the installed wheel
    checked = run([megaprov, "inventory", "check", "-i", bootstrapped["inventory"], "-o", "json"], tmp_path, env)
    assert checked.returncode == 0 and json.loads(checked.stdout)["result"]["contacted"] is False, checked.stderr[-2000:]
    made = run([megaprov, "init", "--head", "10.0.0.1", "--nodes", "10.0.0.2", "--gpu", "H200", "--dir", tmp_path / "new-cluster"], tmp_path, env)
    assert made.returncode == 0 and (tmp_path / "new-cluster" / "inventory.ini").is_file(), made.stderr[-2000:]
    labs = run([megaprov, "lab", "status", "-o", "json"], tmp_path, env)
    assert labs.returncode == 0 and json.loads(labs.stdout)["command"] == "lab status", labs.stderr[-2000:]
    bundle = run([megaprov, "bundle", "verify", tmp_path / "no-bundle", "-o", "json"], tmp_path, env)
    assert bundle.returncode == 2 and json.loads(bundle.stdout)["error"]["kind"] == "usage" and "Traceback" not in bundle.stderr
    # the container image commands: an image the bundle does not carry, a squashfs where a registry reference is due
    from tests.helpers.bundle import fake_bundle

    carried = fake_bundle(tmp_path / "a-bundle")
    pulled = run([megaprov, "image", "pull", "nvcr.io/nvidia/pytorch:25.01-py3", "-i", bootstrapped["inventory"], "--bundle", carried], tmp_path, env)
    assert pulled.returncode == 2 and "carries no image nvcr.io/nvidia/pytorch:25.01-py3 (it carries: none)" in pulled.stderr, pulled.stderr
    imaged = run([megaprov, "bundle", "build", "-i", bootstrapped["inventory"], "--dir", tmp_path / "b2", "--image", "/shared/x.sqsh"], tmp_path, env)
    assert imaged.returncode == 2 and "--image /shared/x.sqsh is a squashfs file" in imaged.stderr and "Traceback" not in imaged.stderr
    completion = run([megaprov, "completion", "bash"], tmp_path, env)
    assert completion.returncode == 0 and "_ARGCOMPLETE" in completion.stdout, completion.stderr[-2000:]
    corpus = tmp_path / "corpus.jsonl"
    made = run([megaprov, "data", "corpus", "--output-file", corpus, "--documents", "50"], tmp_path, env)
    assert made.returncode == 0 and corpus.is_file(), made.stderr[-2000:]
    # a plain install has no megatron-core (the train extra): data prepare says so in one line, with the fix
    prepared = run([megaprov, "data", "prepare", "--input", corpus, "--output-prefix", tmp_path / "ds"], tmp_path, env)
    assert prepared.returncode in (0, 5) and "Traceback" not in prepared.stderr, prepared.stderr[-2000:]
    if prepared.returncode == 5:
        assert "megatron-core is not installed: pip install 'megaprov[train]'" in prepared.stderr, prepared.stderr
    else:
        assert (tmp_path / "ds_text_document.bin").is_file()


def test_the_collection_alone_runs_with_plain_ansible(artifacts, installed, bootstrapped, tmp_path):
    """A site's own Ansible: the tarball installed by ansible-galaxy, the preflight stage of its bootstrap playbook by
    FQCN, no megaprov on the way (no megaprov ansible.cfg, collections searched only where galaxy put it)."""
    collections = tmp_path / "collections"
    env = outside_env(installed["bin"], installed["home"])
    # only the galaxy-installed copy counts: not the one the wheel put on this venv's sys.path
    env.update(ANSIBLE_COLLECTIONS_PATH=str(collections), ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="False", ANSIBLE_NOCOLOR="1")
    galaxy = run([installed["bin"] / "ansible-galaxy", "collection", "install", artifacts["collection"], "-p", collections], tmp_path, env)
    assert galaxy.returncode == 0, galaxy.stdout + galaxy.stderr
    listed = run([installed["bin"] / "ansible-galaxy", "collection", "list", "megaprov.cluster", "--format", "json"], tmp_path, env)
    assert list(json.loads(listed.stdout)) == [str(collections / "ansible_collections")], listed.stdout

    play = run(
        [installed["bin"] / "ansible-playbook", "-i", bootstrapped["inventory"], "megaprov.cluster.bootstrap", "--tags", "preflight"],
        tmp_path,
        env,
    )
    assert play.returncode == 0, play.stdout[-4000:] + play.stderr[-2000:]
    recap = play.stdout.split("PLAY RECAP", 1)[1]
    for node in bootstrapped["nodes"]:
        line = next(line for line in recap.splitlines() if line.startswith(node["name"]))
        assert "failed=0" in line and "unreachable=0" in line, line
    assert "TASK [megaprov.cluster.preflight : " in play.stdout
