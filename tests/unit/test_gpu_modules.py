"""The GPU-stack roles' own modules: driver state decisions and the nccl-tests judge, on fake trees and outputs."""
# ruff: noqa: UP031  (printf-style on purpose: the lines mirror nccl-tests' C format strings)

from pathlib import Path

import pytest

from tests.conftest import load_module

ROOT = Path(__file__).resolve().parents[2]
state = load_module(ROOT / "roles" / "nvidia_driver" / "library" / "megaprov_gpu_state.py", "megaprov_gpu_state")
nccl = load_module(ROOT / "roles" / "nccl" / "library" / "megaprov_nccl_check.py", "megaprov_nccl_check")

SB = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def put(root, rel, data):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data) if isinstance(data, bytes) else path.write_text(data)


@pytest.mark.parametrize(("value", "expected"), [(b"\x06\x00\x00\x00\x01", "enabled"), (b"\x06\x00\x00\x00\x00", "disabled"), (None, "unknown")])
def test_secure_boot_from_the_efi_variable(tmp_path, value, expected):
    if value is not None:
        put(tmp_path, SB, value)
    assert state.secure_boot(str(tmp_path)) == expected


def test_loaded_version_from_sysfs_or_procfs(tmp_path):
    assert state.loaded_version(str(tmp_path)) == ""
    put(tmp_path, "proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.08  Tue Oct  1 2024\nGCC version:  gcc 12\n")
    assert state.loaded_version(str(tmp_path)) == "550.127.08"
    put(tmp_path, "sys/module/nvidia/version", "550.90.07\n")
    assert state.loaded_version(str(tmp_path)) == "550.90.07"


def test_gpus_on_the_pci_bus_exclude_nvswitches_and_other_vendors(tmp_path):
    for dev, vendor, klass in [
        ("0000:18:00.0", "0x10de", "0x030200"),
        ("0000:05:00.0", "0x10de", "0x068000"),
        ("0000:3b:00.0", "0x10de", "0x030000"),
        ("0000:00:02.0", "0x8086", "0x030000"),
    ]:
        put(tmp_path, f"sys/bus/pci/devices/{dev}/vendor", vendor + "\n")
        put(tmp_path, f"sys/bus/pci/devices/{dev}/class", klass + "\n")
    assert state.pci_gpus(str(tmp_path)) == ["0000:18:00.0", "0000:3b:00.0"]


@pytest.mark.parametrize(
    ("gpus", "installed", "loaded", "action"),
    [
        ([], "550.127.08-1", "", "no_gpu"),
        (["0000:18:00.0"], "", "", "install"),
        (["0000:18:00.0"], "550.127.08-1", "", "load"),
        (["0000:18:00.0"], "550.127.08-1", "550.127.08", "none"),
        (["0000:18:00.0"], "1:550.127.08-0ubuntu1", "550.127.08", "none"),
        (["0000:18:00.0"], "550.127.08-1", "535.183.01", "reboot"),
    ],
)
def test_what_the_driver_role_does_next(gpus, installed, loaded, action):
    assert state.decide(gpus, installed, loaded) == action


def test_nouveau_on_the_gpus_means_a_reboot_not_a_modprobe(tmp_path):
    assert not state.nouveau_loaded(str(tmp_path))
    (tmp_path / "sys/module/nouveau").mkdir(parents=True)
    assert state.nouveau_loaded(str(tmp_path))
    assert state.decide(["0000:18:00.0"], "580.105.08-1", "", nouveau=True) == "reboot"
    assert state.decide(["0000:18:00.0"], "580.105.08-1", "580.105.08", nouveau=True) == "none"


def test_gpu_device_ids_tell_the_generation(tmp_path):
    for dev, device in [("0000:18:00.0", "0x2330"), ("0000:3b:00.0", "0x1DB1"), ("0000:05:00.0", "0x22a3")]:
        put(tmp_path, f"sys/bus/pci/devices/{dev}/vendor", "0x10de\n")
        put(tmp_path, f"sys/bus/pci/devices/{dev}/class", ("0x068000" if dev == "0000:05:00.0" else "0x030200") + "\n")
        put(tmp_path, f"sys/bus/pci/devices/{dev}/device", device + "\n")
    assert state.pci_gpu_devices(str(tmp_path)) == ["0x2330", "0x1db1"]  # the NVSwitch is not a GPU


def test_nvidia_smi_rows():
    text = "0, NVIDIA H100 80GB HBM3, 550.127.08, Enabled, 81559\n1, NVIDIA H100 80GB HBM3, 550.127.08, Disabled, 81559\n"
    rows = state.parse_smi(text)
    assert [r["persistence"] for r in rows] == ["Enabled", "Disabled"] and rows[1]["driver"] == "550.127.08"


def row(size, busbw, wrong=0, dtype="float", op="sum", root=-1):
    """One nccl-tests result line, with the printf formats of src/common.cu (v2.17) / src/util.cu (v2.19)."""
    count = size // 4
    algbw = busbw / 1.75
    head = "%12li  %12li  %8s  %6s  %6s" % (size, count, dtype, op, "%6i" % root)
    block = "  %7s  %6.2f  %6.2f  %5g" % ("%7.1f" % 1234.5, algbw, busbw, wrong)
    return head + block + block


def run_output(rows, avg, oob=0, v219=False):
    header = [
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "#                                                              out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    ]
    if v219:
        footer = [
            "# %-20s : %d %s" % ("Out of bounds values", oob, "FAILED" if oob else "OK"),
            "# %-20s : %g " % ("Avg bus bandwidth", avg),
            "#",
            "# Collective test concluded: all_reduce_perf",
        ]
    else:
        footer = ["# Out of bounds values : %d %s" % (oob, "FAILED" if oob else "OK"), "# Avg bus bandwidth    : %g " % avg, "#"]
    return "\n".join(header + rows + footer) + "\n"


@pytest.mark.parametrize("v219", [False, True])
def test_parse_a_healthy_run(v219):
    text = run_output([row(8, 0.01), row(1 << 20, 120.5), row(1 << 33, 481.2)], 200.57, v219=v219)
    result = nccl.parse(text)
    assert len(result["rows"]) == 3 and result["wrong"] == 0 and result["out_of_bounds"] == 0
    assert result["peak_busbw"] == pytest.approx(481.2) and result["avg_busbw"] == pytest.approx(200.57)
    assert nccl.judge(result, ["P2P/IPC"], 450, [], [], None, 0.8) == []


def test_wrong_elements_and_low_bandwidth_fail_with_reasons():
    text = run_output([row(1 << 20, 120.5), row(1 << 33, 300.0, wrong=17)], 150.0, oob=1)
    problems = nccl.judge(nccl.parse(text), [], 450, [], [], None, 0.8)
    assert any("34 wrong elements" in p for p in problems)  # 17 out-of-place + 17 in-place
    assert any("300.0 GB/s is under the threshold 450.0" in p for p in problems)


def test_na_wrong_column_when_validation_is_off():
    line = row(1 << 20, 100.0).replace("      0", "    N/A")
    assert nccl.parse(run_output([line], 100.0))["wrong"] == 0


def test_transport_from_nccl_info_lines_catches_a_socket_fallback():
    log = "\n".join(
        [
            "node1:1234:1300 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
            "node1:1234:1300 [7] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/Socket/0",
            "node2:4321:4400 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [receive] via NET/Socket/0",
        ]
    )
    seen = nccl.transports(log)
    assert seen == ["NET/Socket/0", "P2P/CUMEM/read"]
    result = nccl.parse(run_output([row(1 << 33, 40.0)], 20.0))
    problems = nccl.judge(result, seen, 0, ["NET/IB"], ["NET/Socket"], None, 0.8)
    assert any("transport NET/IB never used" in p for p in problems)
    assert any("fell back to NET/Socket" in p for p in problems)
    good = nccl.transports("h:1:2 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA")
    assert nccl.judge(result, good, 0, ["NET/IB", "GDRDMA"], ["NET/Socket"], None, 0.8) == []


def test_baseline_ratio():
    result = nccl.parse(run_output([row(1 << 33, 79.0)], 50.0))
    assert nccl.judge(result, [], 0, [], [], 100.0, 0.8) != []
    assert nccl.judge(result, [], 0, [], [], 98.0, 0.8) == []


def test_no_rows_is_a_failure():
    assert nccl.judge(nccl.parse("NCCL WARN Error : 2 nodes\n"), [], 0, [], [], None, 0.8) == ["no result rows in the output: the test did not run"]


def test_bootstrap_report_line_per_driver_state():
    from megaprov.provision import gpu_summary

    assert gpu_summary({"action": "no_gpu", "installed_version": ""}) == "skipped: no GPU on the PCI bus"
    smi = [{"index": i} for i in range(8)]
    line = gpu_summary({"action": "none", "loaded_version": "550.127.08", "smi": smi, "fabricmanager_version": "550.127.08"})
    assert line == "driver 550.127.08 loaded, 8 GPU(s) in nvidia-smi, Fabric Manager 550.127.08"
    assert gpu_summary({"action": "reboot", "installed_version": "550.127.08", "loaded_version": "535.183.01"}).endswith("reboot needed")


def test_cached_dir_fills_once_and_leaves_nothing_on_failure(tmp_path):
    from megaprov.paths import cached_dir

    calls = []

    def fill(tmp):
        calls.append(tmp)
        (tmp / "a.whl").write_text("x")
        (tmp / "a.whl").chmod(0o600)

    final = cached_dir(tmp_path / "c" / "v1", fill, "stamp")
    assert (final / ".complete").read_text() == "stamp\n" and (final / "a.whl").stat().st_mode & 0o444 == 0o444
    assert cached_dir(tmp_path / "c" / "v1", fill, "stamp") == final and len(calls) == 1

    def broken(tmp):
        (tmp / "half").write_text("x")
        raise RuntimeError("download failed")

    with pytest.raises(RuntimeError):
        cached_dir(tmp_path / "c" / "v2", broken, "stamp")
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["v1"]
