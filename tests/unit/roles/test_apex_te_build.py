"""apex and Transformer Engine build from source on both targets: the roles' own tasks, run by
ansible-playbook on this machine against a stand-in venv (a python that answers torch's CUDA, a pip that records each
call with its environment), a stand-in nvcc and a local git remote; the real builds need a GPU node.

- apex: Ubuntu 22.04's venv has pip 22.0, which lacks --config-settings (apex's README: pip >= 23.1), so the pinned pip
  goes in before the build; the pin is a commit past apex 25.09, whose setup.py compiles for compute_70, which nvcc 13
  rejects, and the checkout moves to it from an earlier shallow checkout of the tag.
- Transformer Engine: its PyTorch extension's setup.py imports wheel (absent from a Python 3.10 venv) and includes
  cudnn.h (absent from the CUDA toolkit): the build requirements go in first, and the build gets the nvidia-cudnn
  wheel's include directory.

MEGAPROV_APEX_GIT=/path/to/apex (a clone of NVIDIA/apex) also checks the pin against upstream's history."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "ansible_collections/megaprov/cluster/roles"
BIN = Path(sys.executable).parent
APEX_DEFAULTS = yaml.safe_load((ROLES / "apex/defaults/main.yml").read_text())
TE_DEFAULTS = yaml.safe_load((ROLES / "megatron/defaults/main.yml").read_text())

# pip, as the pip module calls it: `list --format=freeze` (nothing installed), then `install ...`, each recorded.
PIP = """#!{python}
import json, os, sys
keys = ("CPATH", "CUDNN_PATH", "CUDA_HOME", "PATH", "NVTE_FRAMEWORK", "NVTE_PYTORCH_FORCE_BUILD", "MAX_JOBS")
with open({log!r}, "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "env": {{k: os.environ[k] for k in keys if k in os.environ}}}}) + "\\n")
if sys.argv[1:2] == ["install"]:
    print("Successfully installed stand-in")
"""
NVCC = """#!/bin/sh
echo "Cuda compilation tools, release {release}, V{release}.88"
"""


def stand_ins(tmp_path: Path, torch_cuda: str = "13.0", nvcc: str = "13.0") -> tuple[Path, Path, Path]:
    venv, cuda, log = tmp_path / "venv", tmp_path / "cuda", tmp_path / "pip.log"
    (venv / "bin").mkdir(parents=True)
    (venv / "lib/python3.10/site-packages").mkdir(parents=True)
    (cuda / "bin").mkdir(parents=True)
    (cuda / "include").mkdir()
    (venv / "bin/activate").write_text("")
    scripts = {
        venv / "bin/python": f"#!/bin/sh\necho '{torch_cuda}'\n",  # torch.version.cuda; the import check passes
        venv / "bin/pip": PIP.format(python=sys.executable, log=str(log)),
        cuda / "bin/nvcc": NVCC.format(release=nvcc),
    }
    for path, text in scripts.items():
        path.write_text(text)
        path.chmod(0o755)
    shutil.copy(venv / "bin/pip", venv / "bin/pip3")
    return venv, cuda, log


def play(tmp_path: Path, role: str, tasks_from: str, hosts: dict[str, dict], roles_path: Path, check: bool = False):
    """One ansible-playbook run of the role on local hosts, each with its own variables (its own stand-ins)."""
    book, inventory = tmp_path / "play.yml", tmp_path / "hosts.yml"
    include = {"name": role, **({"tasks_from": tasks_from} if tasks_from else {})}
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [{"ansible.builtin.include_role": include}]}]))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {name: {**local, **hostvars} for name, hostvars in hosts.items()}}}))
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(roles_path),
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT),  # megaprov.cluster's modules (uv_pip) by their FQCN
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_PIPELINING": "1",  # a module run without its temporary file: seconds less per run on a busy machine
        "ANSIBLE_CONFIG": str(tmp_path / "none.cfg"),
    }
    argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), *(["--check"] if check else []), str(book)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)


def pip_calls(log: Path) -> list[dict]:
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [c for c in calls if c["argv"][:1] == ["install"]]


def passed(out: subprocess.CompletedProcess[str], host: str) -> bool:
    return re.search(rf"^{host}\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0\s", out.stdout, re.M) is not None


def pins(requirements: list[str]) -> dict[str, str]:
    return dict(r.split("==", 1) for r in requirements if "==" in r)


def git(*argv: str, cwd: Path | None = None) -> str:
    out = subprocess.run(["git", "-c", "protocol.file.allow=always", *argv], cwd=cwd, capture_output=True, text=True, check=True)
    return out.stdout.strip()


# ---------------------------------------------------------------------------------------------------------- apex


@pytest.fixture(scope="module")
def apex_run(tmp_path_factory):
    """The apex role, enabled, on a GPU node whose /opt/apex is a shallow checkout of 25.09 (what the role made
    before); the remote's master has moved past the pinned commit. The apt task (root, Debian's archive) is the only
    one left out, from a copy of the role."""
    tmp = tmp_path_factory.mktemp("apex")
    roles = tmp / "roles"
    shutil.copytree(ROLES / "apex", roles / "apex")
    enabled = roles / "apex/tasks/enabled.yml"
    tasks = [t for t in yaml.safe_load(enabled.read_text()) if "megaprov.cluster.apt" not in t]
    enabled.write_text(yaml.safe_dump(tasks, sort_keys=False))
    src = tmp / "src"
    git("init", "-q", "-b", "master", str(src))
    for message in ("25.09", "drop compute_70", "later"):
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", message, cwd=src)
        if message == "25.09":
            git("tag", "25.09", cwd=src)
        if message == "drop compute_70":
            pinned = git("rev-parse", "HEAD", cwd=src)
    git("clone", "-q", "--bare", str(src), str(tmp / "apex.git"))
    remote = f"file://{tmp / 'apex.git'}"
    git("clone", "-q", "--depth", "1", "--branch", "25.09", remote, str(tmp / "apex"))
    venv, cuda, log = stand_ins(tmp)
    out = play(
        tmp,
        "apex",
        "",
        {
            "gpu1": {
                "apex_enabled": True,
                "apex_repo": remote,
                "apex_version": pinned,
                "apex_dir": str(tmp / "apex"),
                "pytorch_venv": str(venv),
                "pytorch_installer": "pip",
                "cuda_home": str(cuda),
                "ansible_local": {"megaprov_preflight": {"gpus": [{"index": 0}]}},
            }
        },
        roles,
    )
    return out, log, tmp / "apex", pinned


def test_apex_is_checked_out_at_a_commit_over_an_earlier_shallow_checkout_of_a_tag(apex_run):
    out, _, checkout, pinned = apex_run
    assert out.returncode == 0, out.stdout[-4000:]
    assert git("rev-parse", "HEAD", cwd=checkout) == pinned


def test_pip_that_takes_config_settings_goes_into_the_venv_before_the_apex_build(apex_run):
    out, log, _, _ = apex_run
    assert out.returncode == 0, out.stdout[-4000:]
    calls = [c["argv"] for c in pip_calls(log)]
    builds = [i for i, argv in enumerate(calls) if any(a.startswith("--config-settings=") for a in argv)]
    assert len(builds) == 1, calls
    build = calls[builds[0]]
    assert [a for a in build if a.startswith("--config-settings")] == [
        "--config-settings=--build-option=--cpp_ext",
        "--config-settings=--build-option=--cuda_ext",
    ]
    before = [r for argv in calls[: builds[0]] for r in argv[1:] if not r.startswith("-")]
    pinned = pins(before)
    # apex's README: "Using pip config-settings (pip >= 23.1)"; Ubuntu 22.04's python3 -m venv brings pip 22.0.2
    assert "pip" in pinned and Version(pinned["pip"]) >= Version("23.1"), before
    assert {"setuptools", "wheel", "packaging"} <= set(pinned), before  # pyproject.toml's build-system, setup.py's imports
    assert before == APEX_DEFAULTS["apex_build_requirements"]


def test_every_apex_build_requirement_is_pinned_and_the_version_is_a_commit():
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]*", r) for r in APEX_DEFAULTS["apex_build_requirements"])
    assert re.fullmatch(r"[0-9a-f]{40}", APEX_DEFAULTS["apex_version"])
    assert APEX_DEFAULTS["apex_repo"].endswith("default('https://github.com/NVIDIA/apex.git') }}")


APEX_GIT = os.environ.get("MEGAPROV_APEX_GIT", "")
CUDA13_FIX = "26bba57d62553d268319b4a20cc3d8aa990249ec"  # "Remove version dependent macros & extension specific arch flags"
MACROS_FIX = "4b46e00a96c67f7ddf4dea01ee6e805051cb2a9d"  # "Finish cleaning up usage of VERSION_GE_1_1/1_3/1_5 macros"


@pytest.mark.skipif(not APEX_GIT, reason="MEGAPROV_APEX_GIT does not point at a clone of NVIDIA/apex")
def test_the_apex_pin_carries_upstreams_cuda13_fix():
    pin = APEX_DEFAULTS["apex_version"]
    for fix in (CUDA13_FIX, MACROS_FIX):
        assert subprocess.run(["git", "-C", APEX_GIT, "merge-base", "--is-ancestor", fix, pin]).returncode == 0, fix
    setup = git("-C", APEX_GIT, "show", f"{pin}:setup.py")
    assert "compute_70" not in setup and "sm_70" not in setup
    assert "25.09" in git("-C", APEX_GIT, "tag") and git("-C", APEX_GIT, "tag", "--contains", CUDA13_FIX) == ""
    readme = git("-C", APEX_GIT, "show", f"{pin}:README.md")
    assert "config-settings (pip >= 23.1)" in readme and '"--build-option=--cpp_ext"' in readme
    imported = yaml.safe_load((ROLES / "apex/vars/main.yml").read_text())["__apex_import_check"]
    for ext in ("amp_C", "fused_layer_norm_cuda", "fused_weight_gradient_mlp_cuda", "scaled_masked_softmax_cuda"):
        assert f" {ext}," in imported and f'name="{ext}"' in setup  # what the role imports is still built at the pin


# -------------------------------------------------------------------------------------------- Transformer Engine

WHEEL_INCLUDE = "lib/python3.10/site-packages/nvidia/cudnn/include"
CUDNN_AT = ("wheel", "toolkit", "nowhere")


def te_hosts(tmp_path: Path) -> dict[str, dict]:
    hosts = {}
    for where in CUDNN_AT:
        venv, cuda, log = stand_ins(tmp_path / where)
        if where == "wheel":
            (venv / WHEEL_INCLUDE).mkdir(parents=True)
            (venv / WHEEL_INCLUDE / "cudnn.h").write_text("#define CUDNN_MAJOR 9\n")
        elif where == "toolkit":
            (cuda / "include/cudnn.h").write_text("#define CUDNN_MAJOR 9\n")
        hosts[where] = {"pytorch_venv": str(venv), "pytorch_installer": "pip", "cuda_home": str(cuda)}
    return hosts


@pytest.fixture(scope="module")
def te_run(tmp_path_factory):
    """megatron's transformer_engine tasks on three GPU nodes: cudnn.h in the venv's nvidia-cudnn wheel, in the CUDA
    toolkit, nowhere."""
    tmp = tmp_path_factory.mktemp("te")
    out = play(tmp, "megatron", "transformer_engine", te_hosts(tmp), ROLES)
    return out, {where: (tmp / where / "venv", tmp / where / "cuda", pip_calls(tmp / where / "pip.log")) for where in CUDNN_AT}


def test_te_build_requirements_go_in_first_and_the_build_gets_the_cudnn_wheels_headers(te_run):
    out, hosts = te_run
    venv, cuda, calls = hosts["wheel"]
    assert passed(out, "wheel"), out.stdout[-4000:]
    assert len(calls) == 2, calls
    requirements, build = calls[0]["argv"], calls[1]
    wanted = [r.replace("{cuda_major}", "13") for r in TE_DEFAULTS["megatron_transformer_engine_build_requirements"]]
    assert requirements == ["install", *wanted]
    # transformer_engine/pytorch: setup.py imports wheel and packaging, pyproject.toml wants setuptools>=61 and pip;
    # its README: ninja, pybind11; cudnn.h from the nvidia-cudnn wheel of torch's CUDA major
    pinned = pins(wanted)
    assert {"wheel", "packaging", "ninja", "pybind11", "pip"} <= set(pinned) and "nvidia-cudnn-cu13" in wanted
    assert Version(pinned["setuptools"]) >= Version("61")
    spec = Requirement(build["argv"][-1])
    assert (spec.name, spec.extras, spec.specifier) == ("transformer_engine", {"pytorch", "core_cu13"}, SpecifierSet(">=2.9.0,<2.12.0"))
    assert "--no-build-isolation" in build["argv"]
    assert build["env"]["CPATH"] == str(venv / WHEEL_INCLUDE)
    assert build["env"]["CUDNN_PATH"] == str(venv / WHEEL_INCLUDE).removesuffix("/include")
    # the task's PATH (nvcc first, then the job's), behind the venv's bin that the pip module puts first
    assert build["env"]["CUDA_HOME"] == str(cuda) and build["env"]["PATH"].startswith(f"{venv}/bin:{cuda}/bin:{venv}/bin:/usr/local/sbin:")
    assert build["env"]["NVTE_FRAMEWORK"] == "pytorch" and build["env"]["NVTE_PYTORCH_FORCE_BUILD"] == "TRUE"


def test_te_builds_with_the_toolkits_cudnn_headers_without_help(te_run):
    out, hosts = te_run
    calls = hosts["toolkit"][2]
    assert passed(out, "toolkit"), out.stdout[-4000:]
    assert len(calls) == 2 and "--no-build-isolation" in calls[1]["argv"]
    assert "CPATH" not in calls[1]["env"]


def test_te_build_stops_before_building_without_cudnn_headers(te_run):
    out, hosts = te_run
    assert "fatal: [nowhere]" in out.stdout and not passed(out, "nowhere")
    assert "nowhere: Transformer Engine's PyTorch extension includes cudnn.h, found neither under" in out.stdout
    assert "nvidia-cudnn-cu13 wheel" in out.stdout and "or set megatron_transformer_engine: false" in out.stdout
    assert all("--no-build-isolation" not in c["argv"] for c in hosts["nowhere"][2])


def test_te_check_mode_passes_where_the_requirements_would_bring_cudnn(tmp_path):
    hosts = te_hosts(tmp_path)
    out = play(tmp_path, "megatron", "transformer_engine", {"nowhere": hosts["nowhere"]}, ROLES, check=True)
    assert out.returncode == 0, out.stdout[-4000:]
    assert pip_calls(tmp_path / "nowhere" / "pip.log") == []  # check mode installs nothing (pip is only asked what is there)
