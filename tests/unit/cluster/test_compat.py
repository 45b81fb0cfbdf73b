"""The driver x CUDA x torch x GPU table (the collection's meta/compat.yml) and its rules; the roles apply the same table."""

from pathlib import Path

import pytest
import yaml

from megaprov.cluster import compat
from megaprov.cluster.compat import Stack

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def render():
    """Render an expression against a role's vars/main.yml with Ansible's own templar (its filters and lookups)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.template import Templar, trust_as_template

    init_plugin_loader()

    def _render(role, variables, expr):
        role_vars = yaml.safe_load((ROOT / "ansible_collections/megaprov/cluster/roles" / role / "vars/main.yml").read_text())
        role_vars = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in role_vars.items()}
        templar = Templar(
            loader=DataLoader(), variables={**role_vars, "role_path": str(ROOT / "ansible_collections/megaprov/cluster/roles" / role), **variables}
        )
        return templar.template(trust_as_template(expr))

    return _render


def lines(stack):
    return [f"{p.variable}={p.value} {p.text}: {p.hint}" for p in compat.problems(stack)]


def test_every_row_names_a_source_that_exists():
    data = compat.table()
    sources = set(data["sources"])
    rows = [*data["cuda"].values(), *data["torch"].values(), *data["generations"].values()]
    for row in rows:
        named = row["source"] if isinstance(row["source"], list) else [row["source"]]
        assert set(named) <= sources, row
    for model, row in data["gpus"].items():
        assert row["generation"] in data["generations"], model
    for release, row in data["torch"].items():
        for tag, build in row["builds"].items():
            assert compat.tag_cuda(tag) == build["cuda"], (release, tag)
            assert set(build["gpus"]) <= set(data["generations"]), (release, tag)
        assert row["aarch64"] is None or set(row["aarch64"]) <= set(row["builds"]), release
        assert row["pypi"] is None or row["pypi"] in row["builds"], release


def test_driver_branch_to_newest_cuda_follows_nvidia_release_notes():
    assert [compat.max_cuda(b) for b in (535, 550, 560, 565, 570, 575, 580, 590, 595, 610, 620)] == [
        "12.2",
        "12.4",
        "12.6",
        "12.6",  # 565 is a feature branch between releases: nothing newer than 12.6 is certified on it
        "12.8",
        "12.9",
        "13.0",
        "13.1",
        "13.2",
        "13.3",
        "13.3",
    ]
    assert compat.max_cuda(470) is None
    assert (compat.toolkit_driver("12.4"), compat.toolkit_driver("13.0"), compat.toolkit_driver("12.7")) == (550, 580, None)
    assert (compat.family_driver("12.9"), compat.family_driver("13.2")) == (525, 580)


@pytest.mark.parametrize(
    ("torch", "cuda", "tag"),
    [
        ("2.13.0", "13.0", "cu130"),
        ("2.13.0", "13.1", "cu130"),  # no cu131: the 13.0 build, which the 13.1 toolkit's driver runs in full
        ("2.13.0", "13.3", "cu132"),
        ("2.13.0", "12.8", "cu126"),  # 2.12 dropped cu128: the newest CUDA 12 build not newer than 12.8
        ("2.13.0", "12.4", None),  # the old defaults: cu124 ends at torch 2.6, cu126 is newer than the toolkit
        ("2.6.0", "12.4", "cu124"),
        ("2.11.0", "12.8", "cu128"),
        ("2.13.0+cu130", "13.0", "cu130"),
        ("2.99.0", "13.0", None),  # a release the table does not know
    ],
)
def test_the_wheel_for_a_toolkit(torch, cuda, tag):
    assert compat.derive_tag(torch, cuda) == tag


def test_the_pytorch_role_derives_the_same_tag_as_megaprov(render):
    """roles/pytorch/vars/main.yml rendered by Ansible, for every torch release x CUDA release of the table."""
    for release in compat.table()["torch"]:
        for cuda in compat.cuda_releases():
            derived = render("pytorch", {"pytorch_version": f"{release}.1", "cuda_version": cuda}, "{{ __pytorch_derived_tag }}")
            assert derived == (compat.derive_tag(f"{release}.1", cuda) or "cu" + cuda.replace(".", "")), (release, cuda)
    assert render("pytorch", {"pytorch_version": "2.13.0", "ansible_facts": {"architecture": "aarch64"}}, "{{ __pytorch_arch_builds }}") == [
        "cu126",
        "cu130",
        "cu132",
    ]


def test_the_cuda_role_reads_the_same_driver_table(render):
    for cuda in compat.cuda_releases():
        assert int(render("cuda", {"cuda_version": cuda}, "{{ __cuda_min_driver }}")) == compat.toolkit_driver(cuda)
    for arch, repo in (("x86_64", "x86_64"), ("aarch64", "sbsa"), ("ppc64le", "")):
        assert render("cuda", {"ansible_facts": {"architecture": arch}}, "{{ __cuda_repo_arch }}") == repo


def test_the_defaults_fit_together():
    """cuda 13.0 (roles/cuda), torch 2.13.0 (roles/pytorch) and driver branch 580 (roles/nvidia_driver) on every GPU the
    table knows but Volta, which CUDA 13 and R590 dropped."""
    defaults = {
        role: yaml.safe_load((ROOT / "ansible_collections/megaprov/cluster/roles" / role / "defaults" / "main.yml").read_text())
        for role in ("cuda", "pytorch", "nvidia_driver")
    }
    cuda, torch, branch = defaults["cuda"]["cuda_version"], defaults["pytorch"]["pytorch_version"], defaults["nvidia_driver"]["nvidia_driver_branch"]
    assert (cuda, torch, branch) == ("13.0", "2.13.0", "580")
    assert compat.derive_tag(torch, cuda) == "cu130"
    for model, row in compat.table()["gpus"].items():
        found = lines(Stack(branch, cuda, torch=torch, gpu_model=model, open_modules=True if row["generation"] != "volta" else False))
        assert (found == []) == (row["generation"] != "volta"), (model, found)


@pytest.mark.parametrize(
    ("stack", "expected"),
    [
        (
            Stack("550", "12.4", torch="2.13.0"),
            "pytorch_version=2.13.0 has no CUDA 12 build for cuda_version=12.4 (torch 2.13 is built for CUDA 12.6, 13.0, 13.2 on "
            "download.pytorch.org; none of CUDA 12 is <= 12.4): set cuda_version to one of 12.6, 13.0, 13.2 (with a driver branch "
            "for it), or pytorch_version to a 2.6 release",
        ),
        (
            Stack("550", "13.0", torch="2.13.0"),
            'nvidia_driver_branch=550 is too old for cuda_version=13.0, which needs driver branch >= 580: set nvidia_driver_branch: "580" '
            "or newer, or a lower cuda_version",
        ),
        (
            # No toolkit on the nodes: the torch wheel still needs a CUDA 13 driver.
            Stack("550", "13.0", toolkit=False, torch="2.13.0"),
            "nvidia_driver_branch=550 is too old for torch 2.13.0 cu130 (CUDA 13 wheels need driver branch >= 580): "
            'set nvidia_driver_branch: "580" or newer, or a cuda_version/pytorch_version with a CUDA 12 build',
        ),
        (
            Stack("560", "12.6", torch="2.13.0", gpu_model="B200"),
            "nvidia_driver_branch=560 is too old for megaprov_gpu_model=B200 (Blackwell), which needs driver branch >= 570: "
            'set nvidia_driver_branch: "580" '
            "(or another branch >= 570)",
        ),
        (
            Stack("580", "13.0", torch="2.13.0", gpu_model="b200", open_modules=False),
            "nvidia_driver_open=false but megaprov_gpu_model=B200 (Blackwell) runs only with NVIDIA's open kernel modules: "
            "set nvidia_driver_open: true",
        ),
        (
            Stack("580", "13.0", torch="2.13.0", gpu_model="GH200", open_modules=False),
            "nvidia_driver_open=false but megaprov_gpu_model=GH200 (Hopper) runs only with NVIDIA's open kernel modules: "
            "set nvidia_driver_open: true",
        ),
        (
            Stack("580", "12.6", torch="2.13.0", gpu_model="V100", open_modules=True),
            "nvidia_driver_open=true but megaprov_gpu_model=V100 (Volta) has no open kernel modules (Turing and newer only): "
            "set nvidia_driver_open: false",
        ),
        (
            Stack("590", "12.6", torch="2.13.0", gpu_model="V100"),
            "nvidia_driver_branch=590 no longer supports megaprov_gpu_model=V100 (Volta): R580 is the last branch for it: "
            'set nvidia_driver_branch: "580"',
        ),
        (
            Stack("580", "13.0", torch="2.13.0", gpu_model="V100"),
            "cuda_version=13.0 cannot build for megaprov_gpu_model=V100 (Volta): CUDA 13 dropped Maxwell, Pascal and Volta: "
            "use a CUDA 12.x release (e.g. 12.6)",
        ),
        (
            Stack("570", "12.6", torch="2.13.0", gpu_model="B200"),
            "cuda_version=12.6 cannot build for megaprov_gpu_model=B200 (Blackwell), which needs CUDA >= 12.8: set cuda_version to 12.8 or newer",
        ),
        (
            Stack("580", "12.6", toolkit=False, torch="2.13.0", gpu_model="B200"),
            "cuda_version=12.6 selects torch 2.13.0 cu126, which has no kernels for megaprov_gpu_model=B200 (Blackwell; it carries Volta, Turing, "
            "Ampere, Ada, Hopper): use one of cu130 (cuda_version 13.0), cu132 (cuda_version 13.2)",
        ),
        (
            Stack("580", "13.0", torch="2.13.0", tag="cu124"),
            "pytorch_cuda_tag=cu124 is not a build of torch 2.13 (download.pytorch.org has cu126, cu130, cu132): use one of cu126, cu130, cu132",
        ),
        (
            Stack("580", "13.0", torch="2.13.0", tag="cu126"),
            "pytorch_cuda_tag=cu126 is a CUDA 12 build but cuda_version=13.0 installs CUDA 13 (apex and Transformer Engine need nvcc's major "
            "to match torch's): use a cu13x build, or a CUDA 12 cuda_version",
        ),
        (
            Stack("580", "13.0", torch="2.7.0", tag="cu126", toolkit=False, gpu_model="GH200", open_modules=True),
            "pytorch_cuda_tag=cu126 selects torch 2.7.0 cu126, which has no Linux aarch64 wheels for GH200 (aarch64 builds: cu128): use one of cu128",
        ),
        (
            Stack("580", "13.0", torch="2.15.0"),
            "pytorch_version=2.15.0 is a torch release megaprov has no CUDA build table for (the collection's meta/compat.yml): set pytorch_cuda_tag "
            "(e.g. cu130) yourself, or use torch 2.6-2.14",
        ),
        (
            Stack("570", "12.8", torch="2.13.0", apex=True),  # cu126 under a 12.8 toolkit: fine for torch, not for apex
            "cuda_version=12.8 differs from torch 2.13.0 cu126's CUDA 12.6, and apex_enabled builds apex, which needs them equal: set "
            'cuda_version: "12.6" (with a driver branch for it), or apex_enabled: false',
        ),
        (Stack("5x0", "13.0"), 'nvidia_driver_branch=5x0 is not a driver branch: write the 3-digit branch, e.g. "580"'),
        (
            Stack("580", "12.7"),
            "cuda_version=12.7 is not a CUDA toolkit release megaprov knows: use one of 12.0, 12.1, 12.2, 12.3, 12.4, "
            "12.5, 12.6, 12.8, 12.9, 13.0, 13.1, 13.2, 13.3",
        ),
    ],
)
def test_impossible_combinations_are_named_with_the_fix(stack, expected):
    assert lines(stack)[0] == expected


@pytest.mark.parametrize(
    "stack",
    [
        Stack("580", "13.0", torch="2.13.0", gpu_model="H100-SXM"),
        Stack("570", "12.8", torch="2.11.0", gpu_model="B200", open_modules=True),
        Stack("550", "12.4", torch="2.6.0", gpu_model="A100-80GB", open_modules=False),
        Stack("570", "12.8", torch="2.13.0"),  # cu126 under a 12.8 toolkit: same major, not newer
        Stack("550", "12.4", torch="2.13.0", torch_cuda=False),  # the CPU build: no CUDA wheel to fit
        Stack("470", "12.4", toolkit=False, torch="2.13.0", torch_cuda=False),
        Stack(None, None, torch="2.13.0", gpu_model="B200"),  # Jinja expressions: left to the roles on the node
        Stack("580", "13.0", torch="2.15.0", tag="cu130"),  # an unknown release with an explicit tag: the user's word
        Stack("580", "13.0", torch="2.13.0", gpu_model="B200", open_modules=False, driver_installed_by_megaprov=False),
        Stack("580", "13.0", torch="2.13.0", gpu_model="some-new-gpu"),
        Stack("580", "13.0", torch="2.13.0", apex=True),  # the defaults with apex: cu130 and nvcc 13.0 are equal
    ],
)
def test_combinations_that_work_pass(stack):
    assert lines(stack) == []


NVIDIA_SMI = """#!/bin/sh
# nvidia-smi of one H200 on driver 575 (its newest CUDA: 12.9), as the real one prints the fields gpu-check.sh asks for
case "$*" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
  *index,name,driver_version*) echo "0, NVIDIA H200, 575.57.08, 143771 MiB" ;;
  *compute_cap*) echo "9.0" ;;
  *driver_version*) echo "575.57.08" ;;
  *name*) echo "NVIDIA H200" ;;
  "") echo "| NVIDIA-SMI 575.57.08    Driver Version: 575.57.08    CUDA Version: 12.9     |" ;;
esac
"""
NVCC = """#!/bin/sh
echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Cuda compilation tools, release 12.8, V12.8.93"
"""


def test_the_gpu_check_takes_cuda_from_the_toolkit_not_from_nvidia_smi(tmp_path):
    """Nvidia-smi's "CUDA Version" is the driver's maximum (12.9 on 575), the toolkit is 12.8; the
    GPU check's inventory must say 12.8 (and torch 2.13's cu126, its newest CUDA 12 build not newer than 12.8)."""
    import os
    import subprocess
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("nvidia-smi", NVIDIA_SMI), ("nvcc", NVCC), ("megaprov", '#!/bin/sh\necho "megaprov $*"\n')):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        GPU_CHECK_WORK=str(tmp_path / "work: it's #1"),  # a path YAML would misread unquoted
        MEGAPROV=str(bin_dir / "megaprov"),
        MEGAPROV_PYTHON=sys.executable,
        GPU_CHECK_BUDGET="120",
    )
    proc = subprocess.run(["bash", str(ROOT / "scripts/gpu-check.sh")], capture_output=True, text=True, env=env, timeout=300, check=False)
    work = tmp_path / "work: it's #1"
    settings = yaml.safe_load((work / "inventory/group_vars/all.yml").read_text())
    assert (settings["cuda_method"], settings["cuda_version"], settings["nvidia_driver_branch"]) == ("preinstalled", "12.8", "575"), proc.stdout
    assert settings["megaprov_gpu_model"] == "H200" and settings["cuda_home"] == str(tmp_path)
    # nccl-tests for this GPU's capability, against the training environment's NCCL, in the share's layout
    assert settings["nccl_tests_gencode"] == "-gencode=arch=compute_90,code=sm_90" and settings["nccl_method"] == "none"
    assert settings["nccl_tests_dir"] == str(work / "shared/opt/nccl-tests") and (work / "shared/megaprov/baselines").is_dir()
    assert settings["megaprov_shared_dir"] == str(work / "shared")
    summary = proc.stdout.split("== summary", 1)[1]
    assert "driver: 575.57.08 (branch 575; runs CUDA <= 12.9 by nvidia-smi, <= 12.9 by the collection's meta/compat.yml)" in summary
    assert "CUDA: toolkit 12.8; megaprov uses cuda_method=preinstalled cuda_version=12.8, torch build cu126" in summary
    assert "torch: " in summary and "nccl-tests: " in summary and "train (pretrain_gpt.py): " in summary
    assert proc.returncode == 1  # no torch environment on this machine: the torch step fails, and the script says so
