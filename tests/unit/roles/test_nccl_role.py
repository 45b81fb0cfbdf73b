"""The nccl role tests the NCCL training loads: the run check names the NCCL release the
ranks loaded, the role's NCCL probe reads the wheel's version, the build command is rendered from the node's
architecture and GPU model, and nothing on the share is written as root."""

import json
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml

from tests.conftest import load_module

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "ansible_collections/megaprov/cluster/roles" / "nccl"
nccl = load_module(ROOT / "ansible_collections/megaprov/cluster/plugins/modules/nccl_check.py", "nccl_check_role")
info = load_module(ROLE / "files" / "nccl_info.py", "nccl_info")

ROW = "     8388608       2097152     float     sum      -1    71.46  117.39  205.43      0    70.91  118.30  207.02      0"


def run_text(version: str) -> str:
    return "\n".join(
        [
            f"node1:77:77 [0] NCCL INFO NCCL version {version}+cuda13.0",
            "node1:77:90 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
            ROW,
            "# Avg bus bandwidth    : 206.2 ",
        ]
    )


def test_the_ranks_report_the_nccl_they_loaded():
    assert nccl.loaded_versions(run_text("2.30.7")) == ["2.30.7"]
    assert nccl.loaded_versions("no NCCL INFO line") == []


def test_nccl_tests_running_another_nccl_than_training_fails():
    text = run_text("2.21.5")  # the system libnccl2, not the wheel torch loads
    problems = nccl.judge(nccl.parse(text), [], 0, [], [], None, 0.8, "2.30.7", nccl.loaded_versions(text))
    assert problems == ["nccl-tests ran with NCCL 2.21.5, not 2.30.7 (the NCCL training loads): rebuild nccl-tests against the training environment"]
    good = run_text("2.30.7")
    assert nccl.judge(nccl.parse(good), [], 0, [], [], None, 0.8, "2.30.7", nccl.loaded_versions(good)) == []


def test_a_run_without_the_version_line_cannot_prove_which_nccl_ran():
    text = ROW + "\n"
    problems = nccl.judge(nccl.parse(text), [], 0, [], [], None, 0.8, "2.30.7", nccl.loaded_versions(text))
    assert problems and "of unknown version" in problems[0]


@pytest.mark.parametrize(("code", "text"), [(23007, "2.30.7"), (22105, "2.21.5"), (21003, "2.10.3"), (2803, "2.8.3")])
def test_ncclgetversion_codes(code, text):
    assert info.version_text(code) == text


def test_the_probe_finds_a_wheel_shaped_nccl(tmp_path):
    """nccl_info.py against a site-packages holding an nvidia-nccl dist (no real library: the version probe says why)."""
    site = tmp_path / "site"
    (site / "nvidia" / "nccl" / "lib").mkdir(parents=True)
    (site / "nvidia" / "nccl" / "include").mkdir(parents=True)
    (site / "nvidia" / "nccl" / "lib" / "libnccl.so.2").write_bytes(b"not an ELF")
    (site / "nvidia" / "nccl" / "include" / "nccl.h").write_text("/* */\n")
    dist = site / "nvidia_nccl_cu13-2.30.7.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-nccl-cu13\nVersion: 2.30.7\n")
    (dist / "RECORD").write_text("nvidia/nccl/include/nccl.h,,\nnvidia/nccl/lib/libnccl.so.2,,\n")
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-S", str(ROLE / "files" / "nccl_info.py")], capture_output=True, text=True, env=env, check=True).stdout
    found = json.loads(out)
    assert found["dist"] == "nvidia-nccl-cu13" and found["wheel_version"] == "2.30.7"
    assert found["lib"] == str(site / "nvidia" / "nccl" / "lib" / "libnccl.so.2") and found["include"] == str(site / "nvidia" / "nccl" / "include")
    assert "library_error" in found and "library_version" not in found


def render(expression: str, **context) -> str:
    return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(expression).render(**context).strip()


DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())


@pytest.mark.parametrize(("arch", "home"), [("x86_64", "/usr/lib/x86_64-linux-gnu/openmpi"), ("aarch64", "/usr/lib/aarch64-linux-gnu/openmpi")])
def test_mpi_home_follows_the_node_architecture(arch, home):
    # GH200/GB200 nodes are aarch64 (sbsa): Debian/Ubuntu's Open MPI lives under the multiarch triplet.
    assert render(DEFAULTS["nccl_mpi_home"], ansible_architecture=arch) == home


@pytest.mark.parametrize(
    ("model", "gencode"),
    [
        ("H100-SXM", "-gencode=arch=compute_90,code=sm_90"),
        ("h100", "-gencode=arch=compute_90,code=sm_90"),  # the planner's alias, any case: not an all-architectures build
        ("B200", "-gencode=arch=compute_100,code=sm_100"),
        ("GB200", "-gencode=arch=compute_100,code=sm_100"),
        ("A100", "-gencode=arch=compute_80,code=sm_80"),
        ("L4", "-gencode=arch=compute_89,code=sm_89"),
        ("V100", "-gencode=arch=compute_70,code=sm_70"),
        ("", ""),
        ("no-such-gpu", ""),
    ],
)
def test_one_architecture_per_gpu_model(model, gencode):
    """The model's capability comes from megaprov's compatibility table: every model megaprov accepts is known here."""
    compat = yaml.safe_load((ROOT / "ansible_collections/megaprov/cluster/meta/compat.yml").read_text())
    arch = render(VARS["__nccl_arch"], __nccl_compat=compat, megaprov_gpu_model=model)
    assert render(VARS["__nccl_gencode"], __nccl_arch=arch, nccl_tests_gencode="auto") == gencode


def test_the_build_is_against_the_training_nccl_with_its_runpath():
    tasks = yaml.safe_load((ROLE / "tasks" / "install.yml").read_text())
    build = next(t for t in tasks if t["name"].startswith("Build nccl-tests"))
    cmd = build["ansible.builtin.shell"]["cmd"]
    assert "LD_RUN_PATH={{ __nccl_run_path | quote }}" in cmd and "NCCL_HOME={{ __nccl_build_home | quote }}" in cmd
    assert "MPI=1 MPI_HOME={{ nccl_mpi_home | quote }} CUDA_HOME={{ nccl_cuda_home | quote }}" in cmd
    assert "NVCC_GENCODE=" in cmd
    training = {"lib_dir": "/opt/megaprov/venv/lib/python3.11/site-packages/nvidia/nccl/lib"}
    run_path = render(VARS["__nccl_run_path"], __nccl_training_nccl=True, __nccl_training=training, nccl_cuda_home="/usr/local/cuda-13.0")
    assert run_path == "/opt/megaprov/venv/lib/python3.11/site-packages/nvidia/nccl/lib:/usr/local/cuda-13.0/lib64"
    assert render(VARS["__nccl_build_home"], __nccl_training_nccl=True, __nccl_home="/opt/megaprov/venv/nccl-home") == "/opt/megaprov/venv/nccl-home"
    assert DEFAULTS["nccl_tests_nccl"] == "training"


def test_nothing_on_the_share_is_written_as_root():
    """Root-squash: every task touching nccl_tests_dir or nccl_baseline_dir runs as the cluster user."""
    for name in ("install.yml", "check.yml", "report.yml"):
        for task in yaml.safe_load((ROLE / "tasks" / name).read_text()):
            text = yaml.safe_dump(task)
            if (
                ("nccl_tests_dir" in text or "nccl_baseline_dir" in text)
                and "ansible.builtin.fail" not in task
                and "ansible.builtin.assert" not in task
                and "megaprov.cluster.proof" not in task  # reads (digests) only; what root cannot read digests as unreadable
            ):
                if "ansible.builtin.debug" in task:
                    continue
                assert task.get("become_user") == "{{ nccl_tests_owner }}", f"{name}: {task['name']}"
