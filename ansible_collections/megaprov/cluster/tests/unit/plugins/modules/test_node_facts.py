from pathlib import Path

import pytest

from ansible_collections.megaprov.cluster.plugins.modules import compute_rate as compute
from ansible_collections.megaprov.cluster.plugins.modules import node_facts as facts

REQ = {
    "min_write_mb_s": 1000,
    "write_below_min": "warn",
    "min_memory_gb": 4,
    "min_disk_free_gb": 10,
    "min_cpus": 2,
    "supported_os": ["debian 12", "ubuntu 22.04"],
    "gpu_expected": True,
    "gpus_per_node": 8,
}

H100 = [
    {"index": i, "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "driver": "550.90.07", "bus_id": f"00000000:{i:02X}:00.0"} for i in range(8)
]


def node(**over):
    base = {
        "os": {"id": "ubuntu", "version": "22.04", "name": "Ubuntu 22.04.4 LTS"},
        "cpus": 224,
        "memory_mb": 2_000_000,
        "disk": {"path": "/raid", "total_gb": 30000, "free_gb": 28000, "write_mb_s": 5200.0},
        "gpus": H100,
        "pci_gpus": [],
        "nvswitches": ["0000:05:00.0"] * 4,
        "nvlinks": 144,
        "hcas": [
            {
                "name": "mlx5_0",
                "type": "MT4129",
                "fw": "28.39",
                "ports": [{"port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"}],
            }
        ],
    }
    base.update(over)
    return base


def verdicts(rows):
    return {r["check"]: r["status"] for r in rows}


def test_a_healthy_dgx_passes_everything():
    assert set(verdicts(facts.judge(node(), REQ)).values()) == {"pass"}


def test_a_gpu_node_without_gpus_fails():
    rows = facts.judge(node(gpus=[], nvswitches=[], nvlinks=0), REQ)
    gpu = next(r for r in rows if r["check"] == "gpus")
    assert gpu["status"] == "fail" and "no NVIDIA GPU found" in gpu["reason"]


def test_a_missing_gpu_fails_with_the_count():
    gpu = next(r for r in facts.judge(node(gpus=H100[:7]), REQ) if r["check"] == "gpus")
    assert gpu["status"] == "fail" and "expected 8 GPUs" in gpu["reason"]


def test_gpus_on_pci_without_a_driver_warn():
    gpu = next(r for r in facts.judge(node(gpus=[], pci_gpus=["0000:18:00.0"] * 8), REQ) if r["check"] == "gpus")
    assert gpu["status"] == "warn" and "no NVIDIA driver yet" in gpu["reason"]


def test_a_declared_gpu_less_node_passes_with_no_gpu():
    rows = facts.judge(node(gpus=[], nvswitches=[], nvlinks=0, hcas=[]), {**REQ, "gpu_expected": False, "gpus_per_node": 0})
    gpu = next(r for r in rows if r["check"] == "gpus")
    assert (gpu["status"], gpu["value"]) == ("pass", "no GPU")
    rdma = next(r for r in rows if r["check"] == "rdma")
    assert rdma["status"] == "pass" and rdma["reason"] == "no RDMA device: NCCL will use TCP sockets"


def test_slow_disk_warns_or_fails_as_configured():
    slow = node(disk={"path": "/", "total_gb": 100, "free_gb": 50, "write_mb_s": 300.0})
    assert verdicts(facts.judge(slow, REQ))["write speed"] == "warn"
    assert verdicts(facts.judge(slow, {**REQ, "write_below_min": "fail"}))["write speed"] == "fail"


def test_small_memory_full_disk_and_unknown_os():
    rows = verdicts(
        facts.judge(
            node(
                memory_mb=2048,
                disk={"path": "/", "total_gb": 100, "free_gb": 2, "write_mb_s": 2000.0},
                os={"id": "arch", "version": "", "name": "Arch"},
            ),
            REQ,
        )
    )
    assert (rows["memory"], rows["disk"], rows["os"]) == ("fail", "fail", "warn")


def test_hcas_without_an_active_port_warn():
    down = [
        {
            "name": "mlx5_0",
            "type": "",
            "fw": "",
            "ports": [{"port": 1, "state": "DOWN", "phys_state": "Polling", "rate": "", "link_layer": "InfiniBand"}],
        }
    ]
    assert verdicts(facts.judge(node(hcas=down), REQ))["rdma"] == "warn"


def test_multi_gpu_without_nvlink_warns():
    assert verdicts(facts.judge(node(nvlinks=0, nvswitches=[]), REQ))["nvlink"] == "warn"


def test_parse_nvidia_smi_csv():
    text = "0, NVIDIA H200, 143771, 560.35.03, 00000000:18:00.0, Enabled\n1, NVIDIA H200, 143771, 560.35.03, 00000000:2A:00.0, Enabled\n"
    gpus = facts.parse_nvidia_smi(text)
    assert [g["model"] for g in gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert gpus[1] == {"index": 1, "model": "NVIDIA H200", "memory_mib": 143771, "driver": "560.35.03", "bus_id": "00000000:2A:00.0"}
    assert facts.parse_nvidia_smi("No devices were found\n") == []


def test_count_nvlinks():
    text = "GPU 0: NVIDIA H100 (UUID: GPU-x)\n\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s\n\t Link 2: <inactive>\n"
    assert facts.count_nvlinks(text) == 2


def test_os_release_and_meminfo():
    assert facts.os_release('ID=debian\nVERSION_ID="12"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n') == {
        "id": "debian",
        "version": "12",
        "name": "Debian GNU/Linux 12 (bookworm)",
    }
    assert facts.meminfo_mb("MemTotal:       24567896 kB\nMemFree: 1 kB\n") == 23992


def _sysfs(path: Path, files: dict[str, str]) -> None:
    path.mkdir(parents=True)
    for name, value in files.items():
        (path / name).write_text(value + "\n")


def test_pci_scan_finds_gpus_and_nvswitches(tmp_path):
    _sysfs(tmp_path / "0000:18:00.0", {"vendor": "0x10de", "class": "0x030200"})
    _sysfs(tmp_path / "0000:05:00.0", {"vendor": "0x10de", "class": "0x068000"})
    _sysfs(tmp_path / "0000:00:1f.0", {"vendor": "0x8086", "class": "0x030000"})
    assert facts.pci_nvidia(str(tmp_path)) == (["0000:18:00.0"], ["0000:05:00.0"])


def test_rdma_ports_are_read_from_sysfs(tmp_path):
    port = tmp_path / "mlx5_0" / "ports" / "1"
    _sysfs(port, {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "200 Gb/sec (4X HDR)", "link_layer": "Ethernet"})
    (tmp_path / "mlx5_0" / "hca_type").write_text("MT4123\n")
    hcas = facts.rdma_devices(str(tmp_path))
    assert hcas == [
        {
            "name": "mlx5_0",
            "type": "MT4123",
            "fw": "",
            "ports": [{"port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "rate": "200 Gb/sec (4X HDR)", "link_layer": "Ethernet"}],
        }
    ]


def test_write_throughput_measures_and_cleans_up(tmp_path):
    speed = facts.write_throughput(str(tmp_path), 8)
    assert speed > 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("missing", ["min_cpus", "gpu_expected"])
def test_requirements_are_all_needed(missing):
    with pytest.raises(KeyError):
        facts.judge(node(), {k: v for k, v in REQ.items() if k != missing})


# ---- the compute rate (megaprov_compute_rate)


CPU_RUN = (
    '{"backend": "torch-cpu", "devices": [{"index": 0, "name": "AMD EPYC", "tflops": 0.0156, "cpus": 2}], '
    '"version": "2.13.0+cpu", "threads": 2, "dtype": "float32", "size": 1024}'
)
GPU_RUN = {
    "backend": "torch-cuda",
    "dtype": "bfloat16",
    "size": 8192,
    "threads": 0,
    "version": "2.13.0+cu128",
    "devices": [{"index": i, "name": "NVIDIA H100 80GB HBM3", "tflops": 710.0 - (300 if i == 5 else 0)} for i in range(8)],
}


def test_a_measurement_is_parsed_from_its_last_json_line():
    doc = compute.parse_measurement("Warning: something\n" + CPU_RUN + "\n")
    rec = compute.record(doc, "2026-11-30T12:00:00Z")
    assert rec["tflops_per_device"] == 0.0156 and rec["backend"] == "torch-cpu" and rec["threads"] == 2 and rec["version"] == 1
    with pytest.raises(ValueError, match="neither torch nor numpy"):
        compute.parse_measurement('{"error": "neither torch nor numpy in this interpreter"}')
    with pytest.raises(ValueError, match="no result"):
        compute.parse_measurement("Traceback ...")
    with pytest.raises(ValueError, match="positive rate"):
        compute.parse_measurement('{"backend": "torch-cpu", "devices": [{"index": 0, "tflops": 0}]}')


def test_a_gpu_node_is_rated_at_its_slowest_gpu():
    rec = compute.record(GPU_RUN, "t")
    assert rec["tflops_per_device"] == 410.0 and rec["tflops_node"] == 7 * 710.0 + 410.0 and len(rec["devices"]) == 8
    assert "410.0 TFLOP/s per device, bfloat16 torch-cuda GEMM 8192^3 (8 GPU(s)" in compute.describe(rec)


def test_a_stored_rate_is_kept_so_reruns_change_nothing_and_a_drop_warns():
    stored = compute.record(compute.parse_measurement(CPU_RUN), "t0")
    noisy = {**stored, "tflops_per_device": 0.0149, "measured_at": "t1"}
    keep, changed, ratio, warning = compute.decide(stored, noisy, refresh=False, warn_below=0.5)
    assert keep is stored and not changed and ratio == pytest.approx(0.955, abs=1e-3) and warning == ""
    throttled = {**stored, "tflops_per_device": 0.0016}
    keep, changed, ratio, warning = compute.decide(stored, throttled, refresh=False, warn_below=0.5)
    assert keep is stored and not changed and "10 % of the stored 15.6 GFLOP/s" in warning
    assert compute.decide(stored, throttled, refresh=True, warn_below=0.5)[:2] == (throttled, True)
    assert compute.decide(None, noisy, refresh=False, warn_below=0.5)[:2] == (noisy, True)
    other_node = {**noisy, "threads": 8}  # another machine behind the same name: measured afresh
    assert compute.decide(stored, other_node, refresh=False, warn_below=0.5)[:2] == (other_node, True)


def test_the_measurement_script_runs_with_this_interpreter():
    import importlib.util
    import subprocess
    import sys

    if not any(importlib.util.find_spec(name) for name in ("torch", "numpy")):
        # ansible-test's unit venv holds neither: the measurement needs what a training environment has
        pytest.skip("neither torch nor numpy in this interpreter")

    proc = subprocess.run([sys.executable, "-c", compute.SCRIPT, "0.2", "256", "512"], capture_output=True, text=True, timeout=120, check=True)
    rec = compute.record(compute.parse_measurement(proc.stdout), "t")
    assert rec["dtype"] == "float32" and rec["size"] == 256 and rec["backend"] in ("torch-cpu", "numpy-cpu")
    assert 1e-5 < rec["tflops_per_device"] < 100
