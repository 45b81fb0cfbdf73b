"""The bus bandwidth an 8-GPU node must reach within itself follows what the node has: NCCL's
all_reduce on H100/H200 reaches its ~480 GB/s busbw only with NVLink SHARP (NVLS: CUDA multicast over third-generation
NVSwitches), while a healthy node without it runs a ring at ~370 GB/s, which the old single figure (450) failed."""

import ctypes.util
import functools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import load_module

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "ansible_collections/megaprov/cluster/roles/nccl"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
nccl = load_module(ROOT / "ansible_collections/megaprov/cluster/plugins/modules/nccl_check.py", "nccl_check_threshold")

# Published 8-GPU peaks (busbw, GB/s) the table is held below; the sources are cited beside it in vars/main.yml.
PUBLISHED = {
    "H100-SXM": {"nvls": 480, "ring": 370},  # NVIDIA/nccl-tests#212 (NCCL's maintainer)
    "H200": {"nvls": 475, "ring": 370},  # NVIDIA/nccl-tests#272; the same NVLink4 fabric as H100
    "B200": {"nvls": 830, "ring": 720},  # NVIDIA/nccl#1807
}


@functools.cache
def _plugins() -> None:
    from ansible.plugins.loader import init_plugin_loader

    init_plugin_loader()


def render(name: str, **overrides):
    """A role variable as Ansible templates it: the role's vars, with the given facts and registered results."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    _plugins()
    variables = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in VARS.items()}
    variables |= {"nccl_intranode_min_busbw_gbps": "auto", "megaprov_gpu_model": "H100-SXM", "__nccl_gpus": 8} | overrides
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template("{{ " + name + " }}"))


EIGHT_MULTICAST = {"driver_version": 12080, "multicast": [1] * 8}


@pytest.mark.parametrize(
    ("probe", "gpus", "nvls"),
    [
        (EIGHT_MULTICAST, 8, True),
        ({"driver_version": 12080, "multicast": [1] * 7 + [0]}, 8, False),  # one GPU without multicast
        ({"driver_version": 12000, "multicast": [0] * 8}, 8, False),  # a driver before CUDA 12.1
        ({"error": "cuInit failed with CUDA error 802"}, 8, False),  # Fabric Manager not running
        ({}, 8, False),  # no probe output
        ({"driver_version": 12080, "multicast": [1, 1]}, 2, False),  # NCCL: no NVLS on <= 2 GPUs
    ],
)
def test_nvls_is_what_the_driver_reports_on_every_gpu(probe, gpus, nvls):
    assert render("__nccl_nvls", __nccl_nvls_probe=probe, __nccl_gpus=gpus) is nvls


@pytest.mark.parametrize(
    ("model", "nvls", "threshold"),
    [
        ("H100-SXM", True, 430),
        ("H100-SXM", False, 330),
        ("H200", True, 430),
        ("H200", False, 330),
        ("B200", True, 750),
        ("B200", False, 650),
        ("A100-80GB", True, 220),  # no NVLS figure: the ring one, whatever the probe says
        ("A100-80GB", False, 220),
        ("H100-PCIe", False, 0),
        ("no-such-gpu", True, 0),
    ],
)
def test_the_threshold_follows_nvls(model, nvls, threshold):
    assert render("__nccl_min_busbw", megaprov_gpu_model=model, __nccl_nvls=nvls) == threshold


def test_an_explicit_threshold_and_fewer_gpus_are_unchanged():
    assert render("__nccl_min_busbw", nccl_intranode_min_busbw_gbps=300, __nccl_nvls=True) == 300
    assert render("__nccl_min_busbw", __nccl_gpus=4, __nccl_nvls=True) == 0


RING_ROW = "  8589934592    2147483648     float     sum      -1  39860.1  215.50  377.12       0  40012.4  214.68  375.69       0"


def test_a_healthy_ring_node_passes_and_a_healthy_nvls_node_still_must_reach_nvls_speed():
    """The recorded NVLS run (peak ~480) passes against its figure; a ring run of a healthy node (peak 377, what
    NCCL_ALGO=RING gives) passes without NVLS and fails where NVLS is available but unused."""
    nvls_run = nccl.parse((ROOT / "tests/fixtures/doctor_recorded/nccl-tests-all_reduce-8gpu.txt").read_text())
    ring_run = nccl.parse(RING_ROW + "\n")
    assert nccl.judge(nvls_run, [], render("__nccl_min_busbw", __nccl_nvls=True), [], [], None, 0.8) == []
    assert nccl.judge(ring_run, [], render("__nccl_min_busbw", __nccl_nvls=False), [], [], None, 0.8) == []
    assert nccl.judge(ring_run, [], render("__nccl_min_busbw", __nccl_nvls=True), [], [], None, 0.8) == [
        "peak bus bandwidth 377.1 GB/s is under the threshold 430.0 GB/s"
    ]


def test_every_platform_has_both_figures_under_the_published_peaks():
    for model, figures in VARS["nccl_intranode_busbw_gbps"].items():
        assert set(figures) == {"nvls", "ring"}, model
        assert figures["nvls"] == 0 or figures["nvls"] > figures["ring"], model
    for model, peaks in PUBLISHED.items():
        figures = VARS["nccl_intranode_busbw_gbps"][model]
        for kind in ("nvls", "ring"):
            # a healthy node passes: the bar is about 90 % of the published peak, never above it
            assert 0.85 * peaks[kind] <= figures[kind] < 0.95 * peaks[kind], (model, kind)


@pytest.mark.parametrize(
    ("arch", "switches", "expected"),
    [("90", ["0000:05:00.0"], True), ("100", ["0000:05:00.0"], True), ("80", ["0000:05:00.0"], False), ("90", [], False)],
)
def test_nvls_is_expected_on_hopper_or_later_nvswitch_nodes(arch, switches, expected):
    facts = {"ansible_local": {"megaprov_preflight": {"nvswitches": switches}}}
    assert render("__nccl_nvls_expected", __nccl_arch=arch, **facts) is expected


def test_the_check_and_the_doctor_probe_nvls_before_they_judge():
    for name, run in (
        ("check.yml", "Run all_reduce_perf within the node"),
        ("doctor.yml", "Run all_reduce_perf within the node against the recorded baseline"),
    ):
        tasks = yaml.safe_load((ROLE / "tasks" / name).read_text())
        names = [t["name"] for t in tasks]
        probe = next(i for i, t in enumerate(tasks) if t.get("ansible.builtin.import_tasks") == "nvls.yml")
        assert probe < names.index(run), name
    nvls = yaml.safe_load((ROLE / "tasks" / "nvls.yml").read_text())
    script = next(t for t in nvls if "ansible.builtin.script" in t)
    assert script["ansible.builtin.script"]["cmd"] == "nvls_probe.py" and script["register"] == "__nccl_nvls_run"
    assert script["check_mode"] is False and script["changed_when"] is False


FAKE_CUDA = r"""
#include <stdlib.h>
/* The five driver entry points nvls_probe.py calls; FAKE_MULTICAST="1,1,0" sets the GPUs and their attribute. */
static int value(int i) { const char *s = getenv("FAKE_MULTICAST"); for (; i > 0 && *s; s++) if (*s == ',') i--; return atoi(s); }
static int count(void) { const char *s = getenv("FAKE_MULTICAST"); int n = *s ? 1 : 0; for (; *s; s++) n += *s == ','; return n; }
int cuInit(unsigned flags) { return atoi(getenv("FAKE_INIT")); }
int cuDriverGetVersion(int *v) { *v = 12080; return 0; }
int cuDeviceGetCount(int *n) { *n = count(); return 0; }
int cuDeviceGet(int *d, int i) { *d = i; return 0; }
int cuDeviceGetAttribute(int *v, int attr, int d) { *v = attr == 132 ? value(d) : attr == 75 ? 9 : 0; return 0; }
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler for the stand-in libcuda.so.1")
@pytest.mark.parametrize(
    ("init", "multicast", "found"),
    [
        ("0", "1,1,1,1,1,1,1,1", {"driver_version": 12080, "multicast": [1] * 8}),
        ("0", "1,1,1,0", {"driver_version": 12080, "multicast": [1, 1, 1, 0]}),
        ("802", "1", {"error": "cuInit failed with CUDA error 802"}),
    ],
)
def test_the_probe_asks_the_driver_for_multicast(tmp_path, init, multicast, found):
    (tmp_path / "cuda.c").write_text(FAKE_CUDA)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so.1"), str(tmp_path / "cuda.c")], check=True)
    env = {"LD_LIBRARY_PATH": str(tmp_path), "FAKE_INIT": init, "FAKE_MULTICAST": multicast, "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, str(ROLE / "files" / "nvls_probe.py")], capture_output=True, text=True, env=env, check=True).stdout
    assert json.loads(out) == found


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="this machine has a CUDA driver")
def test_the_probe_without_a_driver_says_so():
    out = subprocess.run(
        [sys.executable, str(ROLE / "files" / "nvls_probe.py")], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, check=True
    ).stdout
    probe = json.loads(out)
    assert probe["error"].startswith("no CUDA driver library")
    assert render("__nccl_nvls", __nccl_nvls_probe=probe) is False
