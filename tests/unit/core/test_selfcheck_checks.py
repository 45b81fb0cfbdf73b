"""`megaprov --version` and `megaprov self-check` (megaprov.selfcheck) in-process, check by check: Python's version
against the supported ones, the installed ansible-core against the collection's requires_ansible, the runner library,
a program that is missing, fails or answers, the collection found, damaged or incomplete, the state directory.

Stood in: the interpreter's version (selfcheck's view of sys), what importlib.metadata says is installed, and the
programs on PATH (small scripts in tmp_path). The collection, galaxy.yml and runtime.yml are real files."""

import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from megaprov import paths, selfcheck
from megaprov.selfcheck import Check

ROOT = Path(__file__).resolve().parents[3]


def interpreter(monkeypatch, major, minor):
    monkeypatch.setattr(
        selfcheck,
        "sys",
        SimpleNamespace(version_info=(major, minor, 0, "final", 0), executable="/opt/py/bin/python", version=f"{major}.{minor}.0 (main)"),
    )


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ((3, 11), Check("python", "pass", "3.11 (/opt/py/bin/python)")),
        ((3, 12), Check("python", "pass", "3.12 (/opt/py/bin/python)")),
        ((3, 13), Check("python", "warn", "3.13 (/opt/py/bin/python) is newer than megaprov is tested with", "Python 3.11 or 3.12 are tested")),
        ((3, 10), Check("python", "fail", "3.10 (/opt/py/bin/python) is too old", "install megaprov with Python 3.11 or 3.12")),
    ],
)
def test_python_is_checked_against_the_supported_versions(monkeypatch, version, expected):
    interpreter(monkeypatch, *version)
    assert selfcheck._python() == expected  # noqa: SLF001


def installed(monkeypatch, **versions):
    """What importlib.metadata says is installed (name -> version; absent: not installed)."""
    monkeypatch.setattr(selfcheck, "_distribution_version", lambda name: versions.get(name))


@pytest.mark.parametrize(
    ("version", "requires", "expected"),
    [
        (None, ">=2.19.0", Check("ansible-core", "fail", "not installed", "pip install megaprov (it depends on ansible-core)")),
        ("2.19.4", "", Check("ansible-core", "pass", "2.19.4")),
        ("2.19.4", ">=2.19.0,<2.21.0", Check("ansible-core", "pass", "2.19.4 (the collection needs >=2.19.0,<2.21.0)")),
        (
            "2.17.1",
            ">=2.19.0,<2.21.0",
            Check(
                "ansible-core",
                "fail",
                "2.17.1, but the collection needs >=2.19.0,<2.21.0",
                "pip install 'ansible-core>=2.19.0,<2.21.0' in megaprov's environment",
            ),
        ),
        (
            "2.19.4",
            "two nineteen",
            Check("ansible-core", "fail", "2.19.4; the collection asks for 'two nineteen', which cannot be read", "reinstall megaprov"),
        ),
        (
            "banana",
            ">=2.19.0",
            Check("ansible-core", "fail", "banana; the collection asks for '>=2.19.0', which cannot be read", "reinstall megaprov"),
        ),
    ],
)
def test_ansible_core_is_checked_against_the_collections_requires(monkeypatch, version, requires, expected):
    installed(monkeypatch, **({"ansible-core": version} if version else {}))
    assert selfcheck._ansible_core(requires) == expected  # noqa: SLF001


def test_the_runner_library_is_there_or_named_with_its_fix(monkeypatch):
    installed(monkeypatch, **{"ansible-runner": "2.4.1"})
    assert selfcheck._runner_library() == Check("ansible-runner", "pass", "2.4.1")  # noqa: SLF001
    installed(monkeypatch)
    assert selfcheck._runner_library() == Check("ansible-runner", "fail", "not installed", "pip install megaprov (it depends on ansible-runner)")  # noqa: SLF001


def test_an_installed_distribution_has_its_version_and_a_missing_one_none():
    import importlib.metadata

    assert selfcheck._distribution_version("pyyaml") == importlib.metadata.version("pyyaml")  # noqa: SLF001
    assert selfcheck._distribution_version("no-such-distribution-megaprov") is None  # noqa: SLF001


def program(tmp_path, monkeypatch, name, body):
    """A program `name` on an otherwise empty PATH (find_program looks next to this Python first: stood in too)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if body is not None:
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    from megaprov.cluster import runner

    monkeypatch.setattr(runner, "find_program", lambda n: shutil.which(n, path=str(bin_dir)))
    return bin_dir / name


def test_a_program_that_answers_is_its_first_line_and_where_it_is(tmp_path, monkeypatch):
    where = program(tmp_path, monkeypatch, "ssh", 'test "$1" = -V && echo "OpenSSH_9.2p1 Debian, OpenSSL 3.0" >&2 && echo "second line" >&2')
    assert selfcheck._program("ssh", "apt-get install openssh-client", "-V") == Check("ssh", "pass", f"OpenSSH_9.2p1 Debian, OpenSSL 3.0 ({where})")  # noqa: SLF001


def test_a_program_that_fails_or_is_missing_is_named_with_the_fix(tmp_path, monkeypatch):
    where = program(tmp_path, monkeypatch, "ansible-playbook", 'echo "ERROR: broken venv" ; exit 3')
    assert selfcheck._program("ansible-playbook", "reinstall") == Check(  # noqa: SLF001
        "ansible-playbook", "fail", f"{where} --version exited 3: ERROR: broken venv", "reinstall"
    )
    program(tmp_path, monkeypatch, "podman", "exit 1")
    assert selfcheck._program("podman", "fix") == Check("podman", "fail", f"{tmp_path / 'bin' / 'podman'} --version exited 1: ", "fix")  # noqa: SLF001
    program(tmp_path, monkeypatch, "nothing", None)
    assert selfcheck._program("nothing", "apt-get install it") == Check(
        "nothing", "fail", "not found next to this Python or on PATH", "apt-get install it"
    )  # noqa: SLF001


def test_a_program_that_cannot_start_is_named(tmp_path, monkeypatch):
    where = program(tmp_path, monkeypatch, "ssh", "")
    where.write_bytes(b"\x7fELF not really")
    assert selfcheck._program("ssh", "fix") == Check("ssh", "fail", f"{where} does not run (OSError)", "fix")  # noqa: SLF001


def a_collection(tmp_path, monkeypatch, galaxy="version: 1.4.0\n", runtime="requires_ansible: '>=2.19.0'\n", parts=True):
    directory = tmp_path / "root" / "ansible_collections" / "megaprov" / "cluster"
    (directory / "meta").mkdir(parents=True)
    if galaxy is not None:
        (directory / "galaxy.yml").write_text(galaxy)
    (directory / "meta" / "runtime.yml").write_text(runtime)
    if parts:
        for part in ("playbooks/bootstrap.yml", "roles/megaprov/defaults/main.yml"):
            (directory / part).parent.mkdir(parents=True, exist_ok=True)
            (directory / part).write_text("---\n")
        (directory / "plugins" / "modules").mkdir(parents=True)
    monkeypatch.setattr(paths, "collection_dir", lambda: directory)
    return directory


def test_the_collection_is_its_name_version_and_place_and_hands_on_its_requires(tmp_path, monkeypatch):
    directory = a_collection(tmp_path, monkeypatch)
    assert selfcheck.collection_info() == (directory, "1.4.0", ">=2.19.0")
    assert selfcheck._collection() == (Check("collection", "pass", f"megaprov.cluster 1.4.0 ({directory})"), ">=2.19.0")  # noqa: SLF001


def test_empty_metadata_reads_as_no_version_and_no_requirement(tmp_path, monkeypatch):
    directory = a_collection(tmp_path, monkeypatch, galaxy="", runtime="")
    assert selfcheck.collection_info() == (directory, "?", "")


def test_an_incomplete_collection_names_what_it_lacks(tmp_path, monkeypatch):
    directory = a_collection(tmp_path, monkeypatch, parts=False)
    lacks = "playbooks/bootstrap.yml, roles/megaprov/defaults/main.yml, plugins/modules"
    assert selfcheck._collection() == (Check("collection", "fail", f"{directory} lacks {lacks}", "reinstall megaprov"), ">=2.19.0")  # noqa: SLF001


def test_a_damaged_collection_fails_in_one_line_and_version_says_so(tmp_path, monkeypatch):
    directory = a_collection(tmp_path, monkeypatch, galaxy=None)
    check, requires = selfcheck._collection()  # noqa: SLF001
    assert (check.name, check.status, check.hint, requires) == ("collection", "fail", "reinstall megaprov", "")
    assert check.detail.startswith(f"collection megaprov.cluster at {directory} is damaged (FileNotFoundError: ")
    interpreter(monkeypatch, 3, 11)
    installed(monkeypatch, **{"ansible-core": "2.19.4"})
    lines = selfcheck.version_lines()
    assert lines[0].startswith("megaprov ")
    assert lines[1] == f"collection megaprov.cluster: {check.detail}"
    assert lines[2:] == ["ansible-core 2.19.4", "python 3.11.0 (/opt/py/bin/python)"]


def test_version_lines_name_the_collection_ansible_core_and_python(tmp_path, monkeypatch):
    from megaprov import __version__

    directory = a_collection(tmp_path, monkeypatch, galaxy="version: 2.0.1\n")
    interpreter(monkeypatch, 3, 12)
    installed(monkeypatch)
    assert selfcheck.version_lines() == [
        f"megaprov {__version__}",
        f"collection megaprov.cluster 2.0.1 ({directory})",
        "ansible-core not installed",
        "python 3.12.0 (/opt/py/bin/python)",
    ]


def test_the_state_directory_passes_where_it_can_be_made_and_fails_where_it_cannot(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "not" / "yet"))
    assert selfcheck._state_dir() == Check("state", "pass", str(tmp_path / "not" / "yet"))  # noqa: SLF001
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "file" / "state"))
    assert selfcheck._state_dir() == Check(  # noqa: SLF001
        "state",
        "fail",
        f"{tmp_path / 'file' / 'state'} cannot be created or written",
        "set MEGAPROV_STATE (or XDG_STATE_HOME) to a writable directory",
    )


def test_podman_missing_or_broken_is_only_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert selfcheck._podman() == Check(  # noqa: SLF001
        "podman", "warn", "not installed: `megaprov lab` cannot run (a real cluster does not need it)", "apt-get install podman runc"
    )
    where = program(tmp_path, monkeypatch, "podman", "exit 2")
    monkeypatch.setenv("PATH", str(where.parent))
    assert selfcheck._podman() == Check("podman", "warn", f"{where} --version exited 2: ", "see the README's lab section")  # noqa: SLF001
    where.write_text("#!/bin/sh\necho podman version 4.3.1\n")
    assert selfcheck._podman() == Check("podman", "pass", f"podman version 4.3.1 ({where})", "")  # noqa: SLF001


def test_the_checks_come_in_their_order(monkeypatch):
    assert [c.name for c in selfcheck.checks()] == [
        "python",
        "collection",
        "ansible-core",
        "ansible-runner",
        "ansible-playbook",
        "ssh",
        "state",
        "podman",
    ]
    assert sys.version_info[:2] in selfcheck.SUPPORTED_PYTHON


def test_a_program_that_answers_nothing_is_where_it_is(tmp_path, monkeypatch):
    where = program(tmp_path, monkeypatch, "podman", "exit 0")
    assert selfcheck._program("podman", "fix") == Check("podman", "pass", f" ({where})")  # noqa: SLF001


def test_a_state_directory_under_an_executable_file_fails(tmp_path, monkeypatch):
    (tmp_path / "tool").write_text("#!/bin/sh\n")
    (tmp_path / "tool").chmod(0o755)
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "tool" / "state"))
    assert selfcheck._state_dir().status == "fail"  # noqa: SLF001


def test_each_missing_program_is_named_with_its_own_fix(tmp_path, monkeypatch):
    program(tmp_path, monkeypatch, "none-here", None)
    found = {c.name: c for c in selfcheck.checks()}
    assert found["ansible-playbook"] == Check(
        "ansible-playbook", "fail", "not found next to this Python or on PATH", "pip install megaprov (it depends on ansible-core)"
    )
    assert found["ssh"] == Check("ssh", "fail", "not found next to this Python or on PATH", "apt-get install openssh-client")


def test_a_program_gets_30_seconds_to_answer(tmp_path, monkeypatch):
    """A program that hangs (a broken NFS home, a dead agent) is given up after 30 s: the limit handed to
    subprocess.run is recorded; the run itself is real."""
    import subprocess

    real, limits = subprocess.run, []

    def run(*args, **kwargs):
        limits.append(kwargs.get("timeout"))
        return real(*args, **kwargs)

    monkeypatch.setattr(selfcheck.subprocess, "run", run)
    program(tmp_path, monkeypatch, "ssh", "echo OpenSSH_9.2p1")
    assert selfcheck._program("ssh", "fix").status == "pass" and limits == [30]  # noqa: SLF001
