"""apex and Transformer Engine are built against torch only with an nvcc that agrees with torch's CUDA: the
roles' own check tasks, run by ansible-playbook on this machine against a stand-in venv python and
nvcc that print what the real ones print (torch.version.cuda; nvcc --version)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
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
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(ROOT / "ansible_collections/megaprov/cluster/roles"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CONFIG": str(tmp_path / "none.cfg"),
    }
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}", str(play)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


APEX = "apex's CUDA extensions need torch's CUDA and nvcc's to be the same release"
TE = "megatron_transformer_engine=true needs torch's CUDA major and nvcc's to agree"


@pytest.mark.parametrize(
    ("role", "torch_cuda", "nvcc", "ok", "said"),
    [
        # apex's setup.py compares the whole release, minor included
        ("apex", "13.0", "13.0", True, []),
        ("apex", "13.0", "13.1", False, [APEX, "torch 13.0, ", "or set apex_enabled: false"]),
        ("apex", "12.9", "13.0", False, [APEX, "nvcc is CUDA 13.0", "or set apex_enabled: false"]),
        ("apex", "", "13.0", False, [APEX, "torch is a CPU build", "or set apex_enabled: false"]),
        ("apex", "13.0", None, False, [APEX, "nvcc is CUDA ?", "or set apex_enabled: false"]),
        # Transformer Engine's core wheel is per CUDA major
        ("megatron", "13.0", "13.1", True, []),
        ("megatron", "12.8", "13.0", False, [TE, "torch 12.8, "]),
        ("megatron", "13.0", None, False, [TE, "is missing"]),
    ],
)
def test_extension_builds_refuse_an_nvcc_that_does_not_match_torch(tmp_path, role, torch_cuda, nvcc, ok, said):
    out = run(tmp_path, role, torch_cuda, nvcc)
    assert (out.returncode == 0) is ok, out.stdout[-3000:]
    for text in said:
        assert text in out.stdout, out.stdout[-3000:]
