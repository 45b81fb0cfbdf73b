"""argv -> exit code and one line on stderr, for every kind of bad input; no host is contacted."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from megaprov.cli import main
from megaprov.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def inventory(tmp_path, text, all_vars=""):
    path = tmp_path / "inventory.ini"
    path.write_text(textwrap.dedent(text))
    if all_vars:
        (tmp_path / "group_vars").mkdir(exist_ok=True)
        (tmp_path / "group_vars" / "all.yml").write_text(all_vars)
    return str(path)


GOOD = "[head]\nn1 ansible_host=192.0.2.10\n[gpu_nodes]\nn1\n"


def one_error_line(err):
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    ("text", "all_vars", "needle"),
    [
        ("[head\nn1\n", "", "unclosed section header"),
        ("[head]\nn1\n", "", "group [gpu_nodes] is missing or empty"),
        ("[head]\nn1\n[gpu_nodes]\nn2\nn2\n", "", "host 'n2' is listed twice in [gpu_nodes]"),
        (GOOD, "megaprov_gpus_per_node: many\n", "megaprov_gpus_per_node='many' must be a whole number"),
        (GOOD, "ssh_mesh_user: [a, b]\n", "ssh_mesh_user=['a', 'b'] must be a string"),
        (GOOD, "megaprov_gpu_expected: perhaps\n", "must be true or false"),
    ],
)
def test_bad_inventories_exit_2_with_one_line(capsys, tmp_path, text, all_vars, needle):
    code, out, err = run(capsys, "bootstrap", "-i", inventory(tmp_path, text, all_vars))
    assert code == ExitCode.USAGE
    line = one_error_line(err)
    assert line.startswith("megaprov: error: ") and needle in line


def test_validation_happens_before_any_run_directory(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    code, _, _ = run(capsys, "bootstrap", "-i", inventory(tmp_path, "[head]\nn1\n"))
    assert code == ExitCode.USAGE
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["bootstrap", "--frobnicate", "x.ini"], "unrecognized arguments: --frobnicate"),
        (["bootstrap"], "megaprov bootstrap needs -i INVENTORY"),
        (["bootstrap", "-i", "INV", "--forks", "0"], "argument --forks: 0 must be at least 1"),
        (["bootstrap", "-i", "INV", "--tags", "ncclx"], "--tags 'ncclx' is not a stage or role"),
        (["bootstrap", "-i", "INV", "--skip-tags", "bogus"], "--skip-tags 'bogus' is not a stage or role"),
        (["bootstrap", "-i", "INV", "--limit", "node9"], "--limit node9: 'node9' is neither a host nor a group"),
        (["bootstrap", "-i", "INV", "-e", "novalue"], "-e 'novalue' is not KEY=VALUE"),
        (["bootstrap", "-i", "INV", "-e", "megaprov_gpus_per_node=eight"], "-e: megaprov_gpus_per_node='eight' must be a whole number"),
        (["bootstrap", "-i", "INV", "-e", "@/nonexistent.yml"], "file /nonexistent.yml does not exist"),
        (["bootstrap", "-i", "INV", "--strategy", "fast"], "argument --strategy: invalid choice: 'fast'"),
        (["preflight", "-i", "INV", "--output", "xml"], "argument -o/--output: invalid choice: 'xml'"),
        (["lab", "up", "--nodes", "0"], "argument --nodes: 0 must be at least 1"),
        (["lab", "up", "--nodes", "99"], "--nodes 99 is out of range"),
        (["lab", "up", "--name", "Bad_Name"], "is not a valid lab name"),
        (["lab"], "missing ACTION"),
        (["traim"], "invalid choice: 'traim'"),
        (["train"], "megaprov train needs -f JOB.yml"),
        (["job"], "missing ACTION"),
        (["data"], "missing ACTION"),
    ],
)
def test_bad_flags_exit_2_with_one_line(capsys, tmp_path, argv, needle):
    inv = inventory(tmp_path, GOOD)
    code, _, err = run(capsys, *[inv if a == "INV" else a for a in argv])
    assert code == ExitCode.USAGE, err
    assert needle in one_error_line(err)


def test_json_output_on_error_is_an_envelope(capsys, tmp_path):
    code, out, err = run(capsys, "bootstrap", "-i", inventory(tmp_path, "[head]\nn1\n"), "--output", "json")
    assert code == ExitCode.USAGE
    doc = json.loads(out)
    assert doc["megaprov"] == 2 and doc["ok"] is False and "gpu_nodes" in doc["error"]["message"] and doc["command"] == "bootstrap"


def test_debug_shows_the_traceback(capsys, tmp_path):
    code, _, err = run(capsys, "--debug", "bootstrap", "-i", inventory(tmp_path, "[head]\nn1\n"))
    assert code == ExitCode.USAGE and "Traceback" in err


def test_the_console_script_runs_and_exits_2_on_bad_input(tmp_path):
    bad = inventory(tmp_path, "[head]\nn1\n")
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-m", "megaprov", "bootstrap", "-i", bad], capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("megaprov: error:") and "Traceback" not in proc.stderr


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("megaprov ")


def test_a_bad_strategy_from_the_environment_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STRATEGY", "fast")
    code, _, err = run(capsys, "bootstrap", "-i", inventory(tmp_path, GOOD))
    assert code == ExitCode.USAGE
    assert "MEGAPROV_STRATEGY='fast' is not a strategy: use linear, free, mitogen" in one_error_line(err)
