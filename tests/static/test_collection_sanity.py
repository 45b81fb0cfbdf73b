"""`ansible-test sanity` passes on the collection megaprov.cluster: module documentation against the argument specs
(validate-modules), imports, compile, pep8, pylint, yamllint, runtime metadata, shebangs, ansible-doc. And
`ansible-test units` runs the plugin tests (tests/unit/plugins/ of the collection) where a collection's user runs them.

ansible-test runs on a copy of the collection's files as git lists them (tracked and untracked, never ignored ones
such as __pycache__ or tests/output), laid out as .../ansible_collections/megaprov/cluster as ansible-test requires.
With --venv it makes one virtual environment per test under ~/.ansible/test/venv and installs its pinned
requirements (pylint, yamllint, voluptuous, ...) from PyPI; a later run reuses them.

It bootstraps pip in those environments with a get-pip script it downloads from a host outside PyPI, which this
project's machines and CI cannot reach. ansible-test reads the script from its cache first
(~/.ansible/test/cache/get_pip_<version>.py, where its error message says to save it by hand): where none is cached,
the test caches a stand-in that installs the same pinned pip from PyPI with the pip wheel bundled in ensurepip."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = Path("ansible_collections") / "megaprov" / "cluster"
BIN = Path(sys.executable).parent
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"

GET_PIP_STAND_IN = '''\
"""Stand-in for ansible-test's get-pip download (written by megaprov's tests/static/test_collection_sanity.py):
pip from the wheel bundled in ensurepip installs the pip that ansible-test asks for."""
import glob
import os
import sys

import ensurepip

sys.path.insert(0, sorted(glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled", "pip-*.whl")))[-1])
from pip._internal.cli.main import main  # noqa: E402

sys.exit(main(["install", "--upgrade", "--force-reinstall", *(a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel"))]))
'''


def ansible_test_pip_version() -> str:
    """The pip version ansible-test bootstraps its virtual environments with (its get_venv_packages)."""
    import ansible_test

    source = (Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py").read_text()
    found = re.search(r"default_packages = dict\(\s*pip='([0-9.]+)'", source)
    assert found, "ansible-test no longer names its pip version in python_requirements.py: update this test"
    return found.group(1)


def cache_get_pip() -> None:
    cached = Path.home() / ".ansible" / "test" / "cache" / f"get_pip_{ansible_test_pip_version().replace('.', '_')}.py"
    if not cached.exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(GET_PIP_STAND_IN)


def collection_files() -> list[str]:
    """The collection's files as git sees them: tracked and untracked, not ignored, not deleted."""
    proc = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", str(COLLECTION)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted({name for name in proc.stdout.split("\0") if name and (ROOT / name).is_file()})


def copy_collection(tmp_path: Path) -> Path:
    """The collection's files (collection_files) copied under tmp_path, laid out as ansible-test requires; its root."""
    files = collection_files()
    assert f"{COLLECTION}/galaxy.yml" in files
    for name in files:
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    cache_get_pip()
    return tmp_path / COLLECTION


def ansible_test(where: Path, *argv: str) -> tuple[int, str]:
    proc = subprocess.run(
        [str(BIN / "ansible-test"), *argv, "--venv", "--python", PYTHON, "--color", "no"],
        cwd=where,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
        timeout=1200,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_ansible_test_sanity_passes(tmp_path):
    code, output = ansible_test(copy_collection(tmp_path), "sanity")
    assert code == 0, output[-6000:]
    # every sanity test ran (none skipped for a missing tool), and validate-modules saw the modules
    assert "validate-modules" in output and "Skipping sanity test" not in output, output[-6000:]


def test_ansible_test_units_runs_the_plugin_tests(tmp_path):
    collection = copy_collection(tmp_path)
    tests = sorted(str(p.relative_to(collection)) for p in (collection / "tests" / "unit" / "plugins").rglob("test_*.py"))
    assert tests, "no plugin test found under tests/unit/plugins"
    code, output = ansible_test(collection, "units")
    assert code == 0, output[-6000:]
    # every plugin test file ran a test (ansible-test's JUnit reports, one per group of plugins), none failed, and the
    # only skip is the one that needs what a training environment has (torch or numpy, absent from ansible-test's venv)
    ran, failed, skipped = set(), [], []
    for report in (collection / "tests" / "output" / "junit").glob("*.xml"):
        for case in ElementTree.parse(report).iter("testcase"):
            if case.find("skipped") is not None:
                skipped.append(case.get("name"))
                continue
            # the test's module, or its module and class, dotted from the collection's root
            dotted = case.get("classname", "")
            ran |= {f"{name.replace('.', '/')}.py" for name in (dotted, dotted.rpartition(".")[0])} & set(tests)
            failed += [case.get("name")] if case.find("failure") is not None or case.find("error") is not None else []
    assert set(tests) <= ran and not failed, (sorted(set(tests) - ran), failed, output[-3000:])
    assert skipped == ["test_the_measurement_script_runs_with_this_interpreter"], skipped
