"""slurm_node's main() on a whole fake node under its ``root`` option: slurmd -C's line (a stood-in slurmd on PATH),
the GPUs on the PCI bus, their device files, the loaded driver's GPU minors and each GPU's CPUs, turned into the
gres.conf ``Cores=`` Slurm reads; and the one-line failures of each thing a node can get wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.megaprov.cluster.plugins.modules import slurm_node
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules.utils import run_module

# two sockets of four cores, two threads each: the OS numbers socket 0's threads 0-3 and 8-11, socket 1's 4-7, 12-15
SLURMD_C = "NodeName=gpu7 CPUs=16 Boards=1 SocketsPerBoard=2 CoresPerSocket=4 ThreadsPerCore=2 RealMemory=515000\nUpTime=0-01:00:00\n"
INFO = (
    "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t GPU-0\nVideo BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\n"
    "DMA Size: \t 52 bits\nDevice Minor: \t %d\nGPU Firmware: \t 580.95.05\n"
)


def slurmd(tmp_path: Path, monkeypatch, text: str = SLURMD_C, rc: int = 0) -> None:
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    (tools / "slurmd").write_text(f"#!/bin/sh\n[ \"$1\" = -C ] || exit 9\nprintf '%s' '{text}'\nprintf 'slurmd: broken\\n' >&2\nexit {rc}\n")
    (tools / "slurmd").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")


def node(root: Path, gpus: dict[str, tuple[int, str]], device_files: int, topology: bool = True) -> str:
    """GPUs by PCI address -> (the driver's Device Minor, the device's local_cpulist); the driver loaded; /dev/nvidiaN."""
    devices = root / "sys/bus/pci/devices"
    devices.mkdir(parents=True)
    for address, (minor, cpulist) in gpus.items():
        (devices / address).mkdir()
        (devices / address / "vendor").write_text("0x10de\n")
        (devices / address / "class").write_text("0x030200\n")
        (devices / address / "local_cpulist").write_text(cpulist + "\n")
        info = root / "proc/driver/nvidia/gpus" / address.upper() / "information"
        info.parent.mkdir(parents=True)
        info.write_text(INFO % minor)
    (root / "sys/module/nvidia").mkdir(parents=True)
    (root / "sys/module/nvidia/version").write_text("580.95.05\n")
    (root / "dev").mkdir()
    for n in range(device_files):
        (root / "dev" / f"nvidia{n}").write_text("")
    if topology:
        for cpu in range(16):
            folder = root / f"sys/devices/system/cpu/cpu{cpu}/topology"
            folder.mkdir(parents=True)
            (folder / "physical_package_id").write_text(f"{(cpu // 4) % 2}\n")
            (folder / "core_id").write_text(f"{cpu % 4}\n")
    return str(root)


# minor 0 sits on socket 1 (the driver's minors do not follow the PCI order), minor 1 on socket 0
GPUS = {"0000:c1:00.0": (0, "4-7,12-15"), "0000:41:00.0": (1, "0-3,8-11")}


def test_each_gpu_is_offered_with_the_cores_of_its_own_socket_in_slurms_numbering(tmp_path, monkeypatch, capsys):
    slurmd(tmp_path, monkeypatch)
    root = node(tmp_path / "node", GPUS, device_files=2)
    rc, result = run_module(slurm_node.main, {"gpus": "auto", "gpu_expected": True, "root": root}, capsys)
    assert rc == 0, result
    assert result["devices"] == [{"file": f"{root}/dev/nvidia0", "cores": "4-7"}, {"file": f"{root}/dev/nvidia1", "cores": "0-3"}]
    assert result["node"] == {
        "NodeName": "gpu7",
        "CPUs": 16,
        "Boards": 1,
        "SocketsPerBoard": 2,
        "CoresPerSocket": 4,
        "ThreadsPerCore": 2,
        "RealMemory": 515000 - 1024,
    }
    assert result["slurmd_memory_mb"] == 515000 and result["gpus"] == 2 and result["driver"] == "580.95.05"
    assert result["changed"] is False


def test_without_the_cpu_topology_or_a_readable_cpulist_a_gpu_is_offered_without_cores(tmp_path, monkeypatch, capsys):
    slurmd(tmp_path, monkeypatch)
    root = node(tmp_path / "a", GPUS, device_files=2, topology=False)
    rc, result = run_module(slurm_node.main, {"gpus": "2", "root": root}, capsys)
    assert rc == 0 and [d["cores"] for d in result["devices"]] == ["", ""]
    root = node(tmp_path / "b", GPUS, device_files=2)
    (Path(root) / "sys/bus/pci/devices/0000:c1:00.0/local_cpulist").write_text("4-x\n")  # not a CPU list
    (Path(root) / "sys/bus/pci/devices/0000:41:00.0/local_cpulist").unlink()
    rc, result = run_module(slurm_node.main, {"gpus": "2", "root": root}, capsys)
    assert rc == 0 and [d["cores"] for d in result["devices"]] == ["", ""]


def test_a_gpu_the_driver_does_not_list_has_no_cores_and_the_others_keep_theirs(tmp_path, monkeypatch, capsys):
    slurmd(tmp_path, monkeypatch)
    root = node(tmp_path / "node", {"0000:41:00.0": (1, "0-3,8-11")}, device_files=2)
    rc, result = run_module(slurm_node.main, {"gpus": "2", "root": root}, capsys)
    assert rc == 0 and [d["cores"] for d in result["devices"]] == ["", "0-3"]
    # an information file without a Device Minor line names no GPU
    info = Path(root) / "proc/driver/nvidia/gpus/0000:41:00.0/information"
    info.write_text(INFO.replace("Device Minor: \t %d\n", ""))
    rc, result = run_module(slurm_node.main, {"gpus": "2", "root": root}, capsys)
    assert rc == 0 and [d["cores"] for d in result["devices"]] == ["", ""]


def test_the_memory_kept_for_the_system_is_taken_off_and_must_leave_a_gigabyte(tmp_path, monkeypatch, capsys):
    slurmd(tmp_path, monkeypatch, SLURMD_C.replace("515000", "4096"))
    root = node(tmp_path / "node", {}, device_files=0)
    rc, result = run_module(slurm_node.main, {"gpus": "0", "root": root, "mem_reserve_mb": 3072}, capsys)
    assert rc == 0 and result["node"]["RealMemory"] == 1024 and result["slurmd_memory_mb"] == 4096 and result["devices"] == []
    rc, result = run_module(slurm_node.main, {"gpus": "0", "root": root, "mem_reserve_mb": 3073}, capsys)
    assert rc == 1 and result["msg"] == "slurmd -C reports RealMemory=4096 MB: less than 1 GB is left after slurm_mem_reserve_mb=3073"
    rc, result = run_module(slurm_node.main, {"gpus": "0", "root": root, "mem_reserve_mb": 0}, capsys)
    assert rc == 0 and result["node"]["RealMemory"] == 4096
    rc, result = run_module(slurm_node.main, {"gpus": "0", "root": root, "mem_reserve_mb": -1}, capsys)
    assert rc == 1 and result["msg"] == "slurm_gpus_per_node=0 must be auto or a count of 0 or more, slurm_mem_reserve_mb=-1 not negative"


def test_the_default_reserve_is_a_gigabyte(tmp_path, monkeypatch, capsys):
    slurmd(tmp_path, monkeypatch, SLURMD_C.replace("515000", "2048"))
    root = node(tmp_path / "node", {}, device_files=0)
    rc, result = run_module(slurm_node.main, {"gpus": "0", "root": root}, capsys)
    assert rc == 0 and result["node"]["RealMemory"] == 1024 and result["gpus"] == 0 and result["driver"] == "580.95.05"


@pytest.mark.parametrize(
    ("text", "rc", "msg"),
    [
        (SLURMD_C, 1, "slurmd -C failed (1): slurmd: broken"),
        ("", 3, "slurmd -C failed (3): slurmd: broken"),
        (
            "NodeName=gpu7 CPUs=16 RealMemory=9000\n",
            0,
            "slurmd -C printed no Boards, SocketsPerBoard, CoresPerSocket, ThreadsPerCore (got 'NodeName=gpu7 CPUs=16 RealMemory=9000')",
        ),
    ],
)
def test_slurmd_failing_or_printing_too_little_is_one_line(tmp_path, monkeypatch, capsys, text, rc, msg):
    slurmd(tmp_path, monkeypatch, text, rc)
    root = node(tmp_path / "node", {}, device_files=0)
    code, result = run_module(slurm_node.main, {"gpus": "0", "root": root}, capsys)
    assert code == 1 and result["msg"] == msg


def test_check_mode_reads_the_same(tmp_path, monkeypatch, capsys):
    slurmd(tmp_path, monkeypatch)
    root = node(tmp_path / "node", GPUS, device_files=2)
    rc, result = run_module(slurm_node.main, {"gpus": "auto", "root": root, "_ansible_check_mode": True}, capsys)
    assert rc == 0 and [d["cores"] for d in result["devices"]] == ["4-7", "0-3"]


def test_an_unreadable_information_file_is_skipped_and_the_next_gpu_still_read(tmp_path, monkeypatch, capsys):
    slurmd(tmp_path, monkeypatch)
    root = node(tmp_path / "node", GPUS, device_files=2)
    # the first in order (0000:41:00.0, minor 1) cannot be read: a directory where the file should be
    info = Path(root) / "proc/driver/nvidia/gpus/0000:41:00.0/information"
    info.unlink()
    info.mkdir()
    rc, result = run_module(slurm_node.main, {"gpus": "2", "root": root}, capsys)
    assert rc == 0 and [d["cores"] for d in result["devices"]] == ["4-7", ""]


def test_a_node_offering_fewer_gpus_than_it_has_is_not_refused(tmp_path, monkeypatch, capsys):
    slurmd(tmp_path, monkeypatch)
    root = node(tmp_path / "node", GPUS, device_files=2)
    rc, result = run_module(slurm_node.main, {"gpus": "1", "gpu_expected": True, "root": root}, capsys)
    assert rc == 0 and result["gpus"] == 1 and result["devices"] == [{"file": f"{root}/dev/nvidia0", "cores": "4-7"}]


def test_slurmd_without_a_nodename_line_and_a_long_error_are_cut_to_one_line(tmp_path, monkeypatch, capsys):
    slurmd(tmp_path, monkeypatch, "UpTime=0-01:00:00\n")
    root = node(tmp_path / "node", {}, device_files=0)
    code, result = run_module(slurm_node.main, {"gpus": "0", "root": root}, capsys)
    assert code == 1
    assert result["msg"] == "slurmd -C printed no NodeName, CPUs, Boards, SocketsPerBoard, CoresPerSocket, ThreadsPerCore, RealMemory (got '')"
    long = "NodeName=" + "n" * 300 + " CPUs=1"
    slurmd(tmp_path, monkeypatch, long)
    code, result = run_module(slurm_node.main, {"gpus": "0", "root": root}, capsys)
    assert code == 1 and result["msg"].endswith(f"(got {long[:200]!r})")
    tools = tmp_path / "tools"
    (tools / "slurmd").write_text("#!/bin/sh\nprintf 'x%.0s' $(seq 400) >&2\nprintf 'tail' >&2\nexit 1\n")
    code, result = run_module(slurm_node.main, {"gpus": "0", "root": root}, capsys)
    assert code == 1 and result["msg"] == "slurmd -C failed (1): " + ("x" * 400 + "tail")[-300:]
