"""`megaprov bundle build|verify` and `bootstrap --bundle`: argv -> exit code, one line, JSON; no host is contacted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megaprov.cli import main
from megaprov.errors import ExitCode
from tests.helpers.bundle import fake_bundle

ROOT = Path(__file__).resolve().parents[2]
GOOD = "[head]\nn1 ansible_host=192.0.2.10\n[gpu_nodes]\nn1\n"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("megaprov: error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["bundle"], "megaprov bundle: missing ACTION"),
        (["bundle", "build", "--dir", "DIR"], "megaprov bundle build needs -i INVENTORY"),
        (["bundle", "build", "-i", "INV"], "megaprov bundle build needs --dir DIR"),
        (
            ["bundle", "build", "-i", "INV", "--dir", "DIR", "--distribution", "centos-7"],
            "--distribution 'centos-7' is not one a bundle can be built for",
        ),
        (["bundle", "build", "-i", "INV", "--dir", "DIR", "-o", "xml"], "argument -o/--output: invalid choice: 'xml'"),
        (["bundle", "build", "-i", "INV", "--dir", "DIR", "--image", "a b"], "--image='a b' is not an image reference"),
        (["bundle", "build", "-i", "INV", "--dir", "DIR", "--image", "/shared/images/x.sqsh"], "--image /shared/images/x.sqsh is a squashfs file"),
        (["bundle", "build", "-i", "INV", "--dir", "DIR", "--image", "u:p@nvcr.io/x:1"], "holds credentials"),
        (["bundle", "verify"], "the following arguments are required: DIR"),
        (["bundle", "verify", "/nonexistent/bundle"], "bundle /nonexistent/bundle: no such directory"),
    ],
)
def test_bad_bundle_flags_exit_2_with_one_line(capsys, tmp_path, argv, needle):
    (tmp_path / "inventory.ini").write_text(GOOD)
    argv = [tmp_path / "inventory.ini" if a == "INV" else tmp_path / "new" if a == "DIR" else a for a in argv]
    code, _, err = run(capsys, *argv)
    assert code == ExitCode.USAGE, err
    assert needle in one_error_line(err)


def test_build_refuses_an_output_that_holds_something_before_resolving(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    (tmp_path / "inventory.ini").write_text(GOOD)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "manifest.json").write_text("{}")
    code, _, err = run(capsys, "bundle", "build", "-i", tmp_path / "inventory.ini", "--dir", tmp_path / "old")
    assert code == ExitCode.USAGE
    assert "--dir" in one_error_line(err) and "exists and is not an empty directory" in err
    assert not (tmp_path / "state").exists()  # nothing was run


def test_build_refuses_a_bad_inventory_in_one_line(capsys, tmp_path):
    (tmp_path / "inventory.ini").write_text("[head]\nn1\n")
    code, _, err = run(capsys, "bundle", "build", "-i", tmp_path / "inventory.ini", "--dir", tmp_path / "new")
    assert code == ExitCode.USAGE and "gpu_nodes" in one_error_line(err)
    assert not (tmp_path / "new").exists()


def test_verify_a_good_bundle_text_and_json(capsys, tmp_path):
    directory = fake_bundle(tmp_path / "b")
    code, out, err = run(capsys, "bundle", "verify", directory)
    assert code == ExitCode.OK, err
    assert out.startswith(f"bundle {directory}: 7 files, 0.0 MB match the manifest (")
    code, out, _ = run(capsys, "bundle", "verify", directory, "--output", "json")
    doc = json.loads(out)
    assert code == ExitCode.OK and doc["ok"] is True and doc["command"] == "bundle verify" and doc["result"]["files"] == 7


def test_verify_a_tampered_bundle_exits_2_with_one_line_per_problem(capsys, tmp_path):
    directory = fake_bundle(tmp_path / "b")
    (directory / "wheels" / "six-1.17.0-py2.py3-none-any.whl").write_bytes(b"SIX")
    code, out, err = run(capsys, "bundle", "verify", directory)
    assert code == ExitCode.USAGE
    assert "wheels/six-1.17.0-py2.py3-none-any.whl: sha256 differs from the manifest's" in one_error_line(err)
    code, out, err = run(capsys, "bundle", "verify", directory, "--output", "json")
    doc = json.loads(out)
    assert code == ExitCode.USAGE and doc["ok"] is False and "sha256 differs" in doc["error"]["message"] and doc["error"]["kind"] == "usage"


def test_verify_a_path_escape_in_the_manifest(capsys, tmp_path):
    directory = fake_bundle(tmp_path / "b")
    data = json.loads((directory / "manifest.json").read_text())
    data["files"]["../../etc/passwd"] = {"sha256": "0" * 64, "size": 1}
    (directory / "manifest.json").write_text(json.dumps(data))
    code, _, err = run(capsys, "bundle", "verify", directory)
    assert code == ExitCode.USAGE and "'../../etc/passwd' leaves the bundle directory" in one_error_line(err)


def test_bootstrap_with_a_bundle_for_other_versions_is_refused_before_anything_runs(capsys, tmp_path, monkeypatch):
    """The fake bundle holds torch 2.13.0+cpu and no Megatron-LM: the example inventory (GPU nodes) is refused,
    naming the first variable, then the others (20 lines at most); no bootstrap run is started."""
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    directory = fake_bundle(tmp_path / "b")
    code, _, err = run(capsys, "bootstrap", "-i", ROOT / "inventories" / "example" / "inventory.ini", "--bundle", directory)
    assert code == ExitCode.USAGE
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and lines[0].startswith(f"megaprov: error: bundle {directory} does not match ")
    assert "common_extra_packages: the bundle has no apt package acl" in lines[0]
    assert len(lines) == 20 and lines[-1].startswith("megaprov: error: ... and ") and lines[-1].endswith(" more")
    assert lines[1] == "megaprov: error: common_extra_packages: the bundle has no apt package chrony"
    runs = [p.name for p in (tmp_path / "state" / "runs").iterdir()] if (tmp_path / "state" / "runs").is_dir() else []
    assert not [r for r in runs if r.endswith("-bootstrap")], runs


def test_bootstrap_with_a_tampered_bundle_is_refused_without_resolving(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    directory = fake_bundle(tmp_path / "b")
    (directory / "apt" / "Packages.gz").unlink()
    code, _, err = run(capsys, "bootstrap", "-i", ROOT / "inventories" / "example" / "inventory.ini", "--bundle", directory)
    assert code == ExitCode.USAGE and "apt/Packages.gz: listed in the manifest but missing" in one_error_line(err)
    assert not (tmp_path / "state").exists()
