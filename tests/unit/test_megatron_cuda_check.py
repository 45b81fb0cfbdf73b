"""apex and Transformer Engine are built against torch only with an nvcc that agrees with torch's CUDA (issue 13
item 12): the roles' own check tasks, run by ansible-playbook on this machine against a stand-in venv python and
nvcc that print what the real ones print (torch.version.cuda; nvcc --version)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

NVCC = """#!/bin/sh
echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Cuda compilation tools, release {release}, V{release}.88"
"""


def run(tmp_path: Path, role: str, torch_cuda: str, nvcc: str | None) -> subprocess.CompletedProcess[str]:
    venv, cuda = tmp_path / "venv" / "bin", tmp_path / "cuda" / "bin"
    venv.mkdir(parents=True)
    cuda.mkdir(parents=True)
    (venv / "python").write_text(f"#!/bin/sh\necho '{torch_cuda}'\n")
    (venv / "python").chmod(0o755)
    if nvcc is not None:
        (cuda / "nvcc").write_text(NVCC.format(release=nvcc))
        (cuda / "nvcc").chmod(0o755)
    play = tmp_path / "play.yml"
    play.write_text(
        f"""- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: {role}
        tasks_from: cuda_check
      vars:
        pytorch_venv: {tmp_path / "venv"}
        cuda_home: {tmp_path / "cuda"}
"""
    )
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_CONFIG": str(tmp_path / "none.cfg")}
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}", str(play)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("torch_cuda", "nvcc", "ok", "said"),
    [
        ("13.0", "13.0", True, ""),
        ("13.0", "13.1", False, "torch 13.0, "),  # apex's setup.py compares the minor too
        ("12.9", "13.0", False, "nvcc is CUDA 13.0"),
        ("", "13.0", False, "torch is a CPU build"),
        ("13.0", None, False, "nvcc is CUDA ?"),
    ],
)
def test_apex_refuses_an_nvcc_of_another_cuda_release(tmp_path, torch_cuda, nvcc, ok, said):
    out = run(tmp_path, "apex", torch_cuda, nvcc)
    assert (out.returncode == 0) is ok, out.stdout[-3000:]
    if not ok:
        assert "apex's CUDA extensions need torch's CUDA and nvcc's to be the same release" in out.stdout
        assert said in out.stdout and "or set apex_enabled: false" in out.stdout


@pytest.mark.parametrize(
    ("torch_cuda", "nvcc", "ok", "said"),
    [
        ("13.0", "13.1", True, ""),  # Transformer Engine's core wheel is per CUDA major
        ("12.8", "13.0", False, "torch 12.8, "),
        ("13.0", None, False, "is missing"),
    ],
)
def test_transformer_engine_refuses_an_nvcc_of_another_cuda_major(tmp_path, torch_cuda, nvcc, ok, said):
    out = run(tmp_path, "megatron", torch_cuda, nvcc)
    assert (out.returncode == 0) is ok, out.stdout[-3000:]
    if not ok:
        assert "megatron_transformer_engine=true needs torch's CUDA major and nvcc's to agree" in out.stdout
        assert said in out.stdout
