"""The wheel and the collection artifact carry what runs and nothing that is only built or tested.

Both are built here from a copy of the files git lists (tracked and untracked, never ignored ones), so a stale
build/ directory of the checkout cannot leak into the wheel and a file not yet committed counts. Building takes a
few seconds (`pip wheel --no-build-isolation`: the venv's setuptools, no download). Installing the wheel and running
it is tests/integration/test_install.py's part; this one only reads the archives.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = "ansible_collections/megaprov/cluster/"
# Whole trees of the checkout that are build-time or test-time only.
NOT_SHIPPED = ("tools/", "tests/", "molecule/", "benchmarks/", "scripts/", "docs/", f"{COLLECTION}tests/", f"{COLLECTION}changelogs/fragments/")


def checkout_files() -> list[str]:
    proc = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return sorted({name for name in proc.stdout.split("\0") if name and (ROOT / name).is_file()})


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("wheel") / "src"
    for name in checkout_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    return src


@pytest.fixture(scope="module")
def wheel_names(source: Path) -> set[str]:
    dist = source.parent / "dist"
    argv = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--disable-pip-version-check",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(dist),
        str(source),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = dist.glob("megaprov-*.whl")
    return set(zipfile.ZipFile(wheel).namelist())


@pytest.fixture(scope="module")
def collection_names(source: Path) -> set[str]:
    dist = source.parent / "galaxy"
    galaxy = Path(sys.executable).parent / "ansible-galaxy"
    proc = subprocess.run(
        [str(galaxy), "collection", "build", str(source / COLLECTION), "--output-path", str(dist)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (artifact,) = dist.glob("megaprov-cluster-*.tar.gz")
    with tarfile.open(artifact) as tar:
        return set(tar.getnames())


def package_modules(source: Path) -> dict[str, Path]:
    """Every module of the package in the source: dotted name -> the path the wheel holds it at."""
    modules = {}
    for path in (source / "megaprov").rglob("*.py"):
        relative = path.relative_to(source)
        if "__pycache__" not in relative.parts:
            modules[".".join(relative.with_suffix("").parts).removesuffix(".__init__")] = relative
    return modules


def imported_modules(source: Path) -> set[str]:
    """The megaprov modules the package's code imports (absolute imports; the package uses no relative ones)."""
    found: set[str] = set()
    for path in (source / "megaprov").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "megaprov"}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "megaprov":
                found.add(node.module or "")
                # `from megaprov.ops import doctor`: doctor is a module when the source has one by that name
                found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_every_module_of_the_package_is_in_the_wheel(source: Path, wheel_names: set[str]) -> None:
    modules = package_modules(source)
    assert {"megaprov.training.launchers", "megaprov.ops.doctor", "megaprov.cli"} <= set(modules)
    assert [str(path) for path in modules.values() if path.as_posix() not in wheel_names] == []
    packages = sorted(path.parent.relative_to(source).as_posix() for path in (source / "megaprov").rglob("__init__.py"))
    assert [p for p in packages if f"{p}/__init__.py" not in wheel_names] == []


def test_every_module_the_code_imports_is_in_the_wheel(source: Path, wheel_names: set[str]) -> None:
    modules = package_modules(source)
    imported = imported_modules(source)
    assert {"megaprov.training.launchers", "megaprov.ops.doctor"} <= {m for m in imported if m in modules}
    # a name that is neither a module nor a package of the source is an attribute (a function, a class)
    assert [m for m in sorted(imported) if m in modules and modules[m].as_posix() not in wheel_names] == []
    parents = {m.rsplit(".", 1)[0] for m in imported if m not in modules}
    assert [p for p in sorted(parents) if p not in modules] == [], "imports of modules the source does not have"


def test_the_collection_code_the_package_imports_is_in_the_wheel(source: Path, wheel_names: set[str]) -> None:
    """doctor, the renderer and the follower import the collection's module_utils (one Xid parser, one home for the
    nvidia-smi queries): each such module is a file of the wheel."""
    root = "ansible_collections.megaprov.cluster"
    imported = set()
    for path in (source / "megaprov").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(root + "."):
                # `from ...plugins.module_utils import xid`: xid is the module
                imported |= {f"{node.module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names if alias.name.startswith(root + ".")}
    files = {name.replace(".", "/") + ".py" for name in imported}
    files = {f for f in files if (source / f).is_file()}
    assert {f"{COLLECTION}plugins/module_utils/gpu_query.py", f"{COLLECTION}plugins/module_utils/xid.py"} <= files
    assert sorted(files - wheel_names) == []


def test_the_wheel_carries_the_runtime_data(wheel_names: set[str]) -> None:
    assert {
        "megaprov/ansible.cfg",
        f"{COLLECTION}galaxy.yml",
        f"{COLLECTION}meta/runtime.yml",
        f"{COLLECTION}playbooks/bootstrap.yml",
        f"{COLLECTION}plugins/module_utils/pci.py",
        f"{COLLECTION}roles/prometheus/files/rules/megaprov.rules.yml",
        f"{COLLECTION}roles/grafana/files/dashboards/megaprov-cluster.json",
        f"{COLLECTION}changelogs/changelog.yaml",
    } <= wheel_names
    assert any(n.startswith("megaprov/cluster/lab_files/") for n in wheel_names)
    assert any(n.startswith("megaprov/training/megatron/") and n.endswith(".json") for n in wheel_names)


def build_time(names: set[str], prefix: str = "") -> list[str]:
    """What no installed megaprov runs: build-time trees, the dashboards generator, promtool tests, caches."""
    return sorted(
        name
        for name in names
        if f"{prefix}{name}".startswith(NOT_SHIPPED) or name.endswith(("dashboards.py", ".test.yml", ".pyc")) or "__pycache__" in name.split("/")
    )


def test_the_wheel_holds_nothing_build_time(wheel_names: set[str]) -> None:
    assert build_time(wheel_names) == []


def test_the_collection_artifact_holds_nothing_build_time(collection_names: set[str]) -> None:
    assert {"MANIFEST.json", "meta/runtime.yml", "roles/prometheus/files/rules/megaprov.rules.yml"} <= collection_names
    assert build_time(collection_names, prefix=COLLECTION) == []


def test_the_build_time_files_exist_in_the_checkout() -> None:
    """The exclusions above test something: each kind of build-time file is there to be left out."""
    files = checkout_files()
    assert "tools/dashboards.py" in files and "tools/gen-dashboards.py" in files
    assert any(name.endswith(".test.yml") for name in files)
    assert any(name.startswith(f"{COLLECTION}tests/") for name in files)
    assert any(name.startswith(f"{COLLECTION}changelogs/fragments/") for name in files)
