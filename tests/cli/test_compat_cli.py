"""An impossible driver x CUDA x torch x GPU combination: one line, exit 2, and no host contacted.

The hosts are TEST-NET-1 addresses (192.0.2.0/24, RFC 5737): nothing answers there, so a run that tried to reach
one would hang in SSH's connect timeout instead of failing at once.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from megaprov.cli import main
from megaprov.cluster import runner
from megaprov.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = """\
    [head]
    head1 ansible_host=192.0.2.10
    [gpu_nodes]
    gpu1 ansible_host=192.0.2.11
    gpu2 ansible_host=192.0.2.12
    """


def write(tmp_path, gpu_vars):
    path = tmp_path / "inventory.ini"
    path.write_text(textwrap.dedent(INVENTORY))
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu_nodes.yml").write_text(textwrap.dedent(gpu_vars))
    return str(path)


CASES = [
    # The old defaults: CUDA 12.4 on branch 550 with torch 2.13.0, which has no CUDA 12 build <= 12.4.
    ("nvidia_driver_branch: '550'\ncuda_version: '12.4'\n", "pytorch_version=2.13.0 (host gpu1) has no CUDA 12 build for cuda_version=12.4"),
    ("nvidia_driver_branch: '550'\ncuda_version: '13.0'\n", "nvidia_driver_branch=550 (host gpu1) is too old for cuda_version=13.0"),
    ("megaprov_gpu_model: B200\nnvidia_driver_open: false\n", "nvidia_driver_open=false (host gpu1) but megaprov_gpu_model=B200 (Blackwell)"),
    (
        "nvidia_driver_branch: '570'\ncuda_version: '12.8'\napex_enabled: true\n",
        "cuda_version=12.8 (host gpu1) differs from torch 2.13.0 cu126's CUDA 12.6",
    ),
]


@pytest.mark.parametrize(("gpu_vars", "needle"), CASES)
@pytest.mark.parametrize(
    "command",
    [["bootstrap", "-i", "INV"], ["preflight", "-i", "INV"], ["plan", "--job", str(ROOT / "examples/jobs/gpu-check.yml"), "-i", "INV"]],
    ids=["bootstrap", "preflight", "plan"],
)
def test_refused_before_any_run(capsys, tmp_path, monkeypatch, gpu_vars, needle, command):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))

    def no_run(*args, **kwargs):
        raise AssertionError("ansible-runner was started: a host would have been contacted")

    monkeypatch.setattr(runner, "run", no_run)
    path = write(tmp_path, gpu_vars)
    code = main([path if arg == "INV" else arg for arg in command])
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == ExitCode.USAGE
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("megaprov: error: ") and needle in lines[0]
    assert not (tmp_path / "state").exists()  # no run directory, no fact cache: nothing was started


def test_the_command_fails_with_the_one_line(tmp_path):
    """The installed entry point, as an operator runs it: exit 2 and no run directory (no host was tried)."""
    path = write(tmp_path, CASES[0][0])
    env = dict(os.environ, MEGAPROV_STATE=str(tmp_path / "state"), NO_COLOR="1")
    proc = subprocess.run(
        [sys.executable, "-m", "megaprov", "bootstrap", "-i", path], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False
    )
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and CASES[0][1] in lines[0], proc.stderr
    assert "set cuda_version to one of 12.6, 13.0, 13.2" in lines[0]
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["-e", "cuda_version=12.4"], "has no CUDA 12 build for cuda_version=12.4"),
        (["-e", "nvidia_driver_branch=550"], "nvidia_driver_branch=550 (host gpu1) is too old"),
        (["-e", "@VARS"], "nvidia_driver_open=false (host gpu1)"),
    ],
)
def test_extra_vars_are_checked_like_the_inventory(capsys, tmp_path, monkeypatch, extra, needle):
    """-e wins over every inventory value: an impossible combination given there is refused the same way."""
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("ansible-runner was started"))
    path = write(tmp_path, "megaprov_gpu_model: H100-SXM\n")
    (tmp_path / "vars.yml").write_text("megaprov_gpu_model: B200\nnvidia_driver_open: false\n")
    code = main(["bootstrap", "-i", path, *[f"@{tmp_path / 'vars.yml'}" if a == "@VARS" else a for a in extra]])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == ExitCode.USAGE and len(lines) == 1 and needle in lines[0], err
    assert not (tmp_path / "state").exists()
