"""The nvidia_driver role's read-only state module (ansible_collections/megaprov/cluster/plugins/modules/gpu_state.py): Secure Boot,
the loaded and installed driver, the GPUs on the PCI bus, and the action the role takes next, on fake trees; main()
end to end with fake dpkg-query, nvidia-smi and mokutil on PATH."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from ansible_collections.megaprov.cluster.plugins.modules import gpu_state as state
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules import utils as modules

COLLECTION = Path(__file__).resolve().parents[4]

# The EFI global-variable GUID of the UEFI specification; the file is 4 attribute bytes, then the 1-byte value.
SB = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
# /proc/driver/nvidia/version's first line, as the two kinds of kernel modules print it.
PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.08  Tue Oct  1 08:21:34 UTC 2024\nGCC version:  gcc 12\n"
OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U22-I3-B17-02-5)  Tue Sep 23 09:55:41 UTC 2025\n"
)


def put(root: Path, rel: str, data: str | bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data) if isinstance(data, bytes) else path.write_text(data)


def pci(root: Path, dev: str, vendor: str, klass: str, device: str = "0x2330") -> None:
    for name, value in (("vendor", vendor), ("class", klass), ("device", device)):
        put(root, f"sys/bus/pci/devices/{dev}/{name}", value + "\n")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"\x06\x00\x00\x00\x01", "enabled"),
        (b"\x06\x00\x00\x00\x00", "disabled"),
        (b"\x06\x00\x00\x00\x02", "disabled"),  # only 1 means enabled
        (b"\x06\x00\x00\x00", "unknown"),  # truncated: attributes without a value
        (None, "unknown"),
    ],
)
def test_secure_boot_from_the_efi_variable(tmp_path, value, expected):
    if value is not None:
        put(tmp_path, SB, value)
    assert state.secure_boot(str(tmp_path)) == expected


@pytest.mark.parametrize(("text", "version"), [(PROPRIETARY, "550.127.08"), (OPEN, "580.95.05"), ("NVRM version: NVIDIA UNIX Kernel Module\n", "")])
def test_loaded_version_from_procfs_of_either_kind_of_module(tmp_path, text, version):
    """Without sysfs's module version: the open modules' line has 'for x86_64' after 'Module', not the version."""
    put(tmp_path, "proc/driver/nvidia/version", text)
    assert state.loaded_version(str(tmp_path)) == version


def test_loaded_version_prefers_sysfs(tmp_path):
    assert state.loaded_version(str(tmp_path)) == ""
    put(tmp_path, "proc/driver/nvidia/version", PROPRIETARY)
    put(tmp_path, "sys/module/nvidia/version", "550.90.07\n")
    assert state.loaded_version(str(tmp_path)) == "550.90.07"


def test_gpus_on_the_pci_bus_exclude_nvswitches_and_other_vendors(tmp_path):
    pci(tmp_path, "0000:18:00.0", "0x10de", "0x030200", "0x2330")  # H100 SXM: 3D controller
    pci(tmp_path, "0000:05:00.0", "0x10de", "0x068000", "0x22a3")  # NVSwitch: bridge
    pci(tmp_path, "0000:3b:00.0", "0x10de", "0x030000", "0x1DB1")  # V100 as a VGA controller
    pci(tmp_path, "0000:00:02.0", "0x8086", "0x030000", "0x3e92")  # Intel graphics
    pci(tmp_path, "0000:40:00.0", "0x10de", "0x040300", "0x22e8")  # NVIDIA HD audio
    assert state.pci_gpus(str(tmp_path)) == ["0000:18:00.0", "0000:3b:00.0"]
    assert state.pci_gpu_devices(str(tmp_path)) == ["0x2330", "0x1db1"]
    (tmp_path / "sys/bus/pci/devices/0000:3b:00.0/device").unlink()
    assert state.pci_gpu_devices(str(tmp_path)) == ["0x2330", ""]  # unreadable: an empty string, never bytes


@pytest.mark.parametrize(
    ("version", "upstream"),
    [
        ("550.127.08-1", "550.127.08"),
        ("1:550.127.08-0ubuntu1", "550.127.08"),
        ("580.95.05", "580.95.05"),
        ("1:580.95.05-1-2", "580.95.05"),
        # Debian policy (deb-version): with an epoch, the upstream version may itself contain colons
        ("2:1.0:rc1-1", "1.0:rc1"),
    ],
)
def test_upstream_version_of_a_debian_version(version, upstream):
    assert state.upstream(version) == upstream


@pytest.mark.parametrize(
    ("gpus", "installed", "loaded", "nouveau", "action"),
    [
        ([], "550.127.08-1", "", False, "no_gpu"),
        (["0000:18:00.0"], "", "", False, "install"),
        (["0000:18:00.0"], "", "", True, "install"),
        (["0000:18:00.0"], "550.127.08-1", "", False, "load"),
        (["0000:18:00.0"], "550.127.08-1", "", True, "reboot"),  # nouveau holds the GPUs until a reboot
        (["0000:18:00.0"], "550.127.08-1", "550.127.08", False, "none"),
        (["0000:18:00.0"], "550.127.08-1", "550.127.08", True, "none"),
        (["0000:18:00.0"], "1:550.127.08-0ubuntu1", "550.127.08", False, "none"),
        (["0000:18:00.0"], "550.127.08-1", "535.183.01", False, "reboot"),
    ],
)
def test_what_the_driver_role_does_next(gpus, installed, loaded, nouveau, action):
    assert state.decide(gpus, installed, loaded, nouveau) == action


def test_decide_without_nouveau_information_loads():
    assert state.decide(["0000:18:00.0"], "550.127.08-1", "") == "load"


def test_nouveau_is_loaded_when_its_module_directory_exists(tmp_path):
    assert state.nouveau_loaded(str(tmp_path)) is False
    (tmp_path / "sys/module/nouveau").mkdir(parents=True)
    assert state.nouveau_loaded(str(tmp_path)) is True


def test_nvidia_smi_rows():
    # the gpu_query.INVENTORY fields: index, name, memory.total, driver_version, pci.bus_id, persistence_mode
    text = (
        "0, NVIDIA H100 80GB HBM3, 81559, 550.127.08, 00000000:18:00.0, Enabled\n"
        "1, NVIDIA H100 80GB HBM3, 81559, 550.127.08, 00000000:2A:00.0, Disabled\n"
    )
    assert state.parse_smi(text) == [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "driver": "550.127.08", "persistence": "Enabled", "memory_mib": "81559"},
        {"index": 1, "name": "NVIDIA H100 80GB HBM3", "driver": "550.127.08", "persistence": "Disabled", "memory_mib": "81559"},
    ]
    # a header line (without noheader), an error line and a short line are not GPUs
    noise = "index, name, memory.total [MiB], driver_version, pci.bus_id, persistence_mode\nNo devices were found\n0, H100, 81559, 550.127.08\n"
    assert state.parse_smi(noise) == []


def test_first_installed_package_in_the_order_of_the_names():
    versions = {"nvidia-open": "580.95.05-1", "cuda-drivers": "580.95.05-1"}
    assert state.first(versions, ["nvidia-driver", "cuda-drivers", "nvidia-open"]) == ("cuda-drivers", "580.95.05-1")
    assert state.first(versions, ["nvidia-driver"]) == ("", "")


# main() end to end: fake commands on a PATH that holds nothing else (the scripts use only shell builtins).
DPKG = """#!/bin/sh
printf '%s\\0' "$@" > "$0.args"
printf 'nvidia-driver\\t550.90.07-1\\trc \\n'
printf 'nvidia-open\\t1:580.95.05-0ubuntu1\\tii \\n'
printf 'cuda-drivers\\t580.95.05-1\\tiU \\n'
printf 'nvidia-fabricmanager-580\\t580.95.05-1\\thi \\n'
printf 'broken line\\n'
"""
SMI = """#!/bin/sh
echo "$@" > "$0.args"
printf '0, NVIDIA H100 80GB HBM3, 81559, 580.95.05, 00000000:18:00.0, Enabled\\n'
printf '1, NVIDIA H100 80GB HBM3, 81559, 580.95.05, 00000000:2A:00.0, Enabled\\n'
exit "${SMI_RC:-0}"
"""
MOKUTIL = """#!/bin/sh
echo "$@" > "$0.args"
echo "$2 is already enrolled" >&2
"""


def tool(directory: Path, name: str, script: str) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def run_module(args: dict, capsys) -> dict:
    code, result = modules.run_module(state.main, args, capsys)
    assert code == 0
    return result


def h100_node(root: Path) -> None:
    pci(root, "0000:18:00.0", "0x10de", "0x030200", "0x2330")
    pci(root, "0000:2a:00.0", "0x10de", "0x030200", "0x2330")
    put(root, SB, b"\x06\x00\x00\x00\x01")
    put(root, "var/lib/dkms/mok.pub", "key")


def test_module_reads_a_node_with_the_driver_loaded(tmp_path, capsys, monkeypatch):
    root, bin_dir = tmp_path / "root", tmp_path / "bin"
    h100_node(root)
    put(root, "sys/module/nvidia/version", "580.95.05\n")
    dpkg, smi, mok = tool(bin_dir, "dpkg-query", DPKG), tool(bin_dir, "nvidia-smi", SMI), tool(bin_dir, "mokutil", MOKUTIL)
    monkeypatch.setenv("PATH", str(bin_dir))
    drivers, fm = ["nvidia-driver", "cuda-drivers", "nvidia-open"], ["nvidia-fabricmanager-580"]
    result = run_module({"driver_packages": drivers, "fabricmanager_packages": fm, "root": str(root)}, capsys)
    assert Path(f"{dpkg}.args").read_text().split("\0")[:-1] == ["-W", "-f=${Package}\t${Version}\t${db:Status-Abbrev}\n", *drivers, *fm]
    assert (
        Path(f"{smi}.args").read_text().split()
        == state.SMI_QUERY[1:]
        == [
            "--query-gpu=index,name,memory.total,driver_version,pci.bus_id,persistence_mode",
            "--format=csv,noheader,nounits",
        ]
    )
    assert Path(f"{mok}.args").read_text().split() == ["--test-key", str(root / "var/lib/dkms/mok.pub")]
    del result["invocation"]
    h100 = {"name": "NVIDIA H100 80GB HBM3", "driver": "580.95.05", "persistence": "Enabled", "memory_mib": "81559"}
    assert result == {
        "changed": False,
        "secure_boot": "enabled",
        "mok_enrolled": True,
        "pci_gpus": ["0000:18:00.0", "0000:2a:00.0"],
        "pci_gpu_devices": ["0x2330", "0x2330"],
        "nouveau_loaded": False,
        "loaded_version": "580.95.05",
        # nvidia-driver is only config files (rc), cuda-drivers unpacked but not configured (iU): nvidia-open is installed
        "installed_package": "nvidia-open",
        "installed_version": "580.95.05",
        "fabricmanager_package": "nvidia-fabricmanager-580",  # held (hi) counts as installed
        "fabricmanager_version": "580.95.05",
        "smi": [{"index": 0, **h100}, {"index": 1, **h100}],
        "smi_rc": 0,
        "smi_error": "",
        "action": "none",
    }


LOST = """#!/bin/sh
echo "$@" > "$0.args"
echo "0, NVIDIA H100 80GB HBM3, 81559, 580.95.05, 00000000:18:00.0, Enabled"
echo "Unable to determine the device handle for GPU1: 0000:2A:00.0: Unknown Error" >&2
exit 15
"""


def test_a_gpu_fallen_off_the_bus_keeps_the_rows_and_nvidia_smi_s_own_error(tmp_path, capsys, monkeypatch):
    """As nvidia-smi answers on a node whose GPU fell off the bus (tests/fixtures/gpu_metrics/gpu-lost): the GPUs it
    still lists, its status 15 and the line that names the lost GPU, for the role's check to show."""
    root, bin_dir = tmp_path / "root", tmp_path / "bin"
    h100_node(root)
    put(root, "sys/module/nvidia/version", "580.95.05\n")
    tool(bin_dir, "nvidia-smi", LOST)
    monkeypatch.setenv("PATH", str(bin_dir))
    result = run_module({"root": str(root)}, capsys)
    assert [g["index"] for g in result["smi"]] == [0] and result["smi_rc"] == 15
    assert result["smi_error"] == "Unable to determine the device handle for GPU1: 0000:2A:00.0: Unknown Error"


def test_module_on_a_node_without_driver_or_tools(tmp_path, capsys, monkeypatch):
    """No dpkg-query, no nvidia-smi, no mokutil: nothing installed, nothing run; nouveau holds the GPUs."""
    root = tmp_path / "root"
    h100_node(root)
    (root / "sys/module/nouveau").mkdir(parents=True)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = run_module({"driver_packages": ["nvidia-open"], "root": str(root)}, capsys)
    assert (result["installed_package"], result["installed_version"], result["fabricmanager_package"], result["fabricmanager_version"]) == (
        "",
        "",
        "",
        "",
    )
    assert result["mok_enrolled"] is False and result["smi"] == [] and result["nouveau_loaded"] is True and result["action"] == "install"


def test_module_needs_a_loaded_driver_and_secure_boot_for_nvidia_smi_and_mokutil(tmp_path, capsys, monkeypatch):
    root, bin_dir = tmp_path / "root", tmp_path / "bin"
    h100_node(root)
    put(root, SB, b"\x06\x00\x00\x00\x00")
    smi, mok = tool(bin_dir, "nvidia-smi", SMI), tool(bin_dir, "mokutil", MOKUTIL)
    dpkg = tool(bin_dir, "dpkg-query", DPKG)
    monkeypatch.setenv("PATH", str(bin_dir))
    result = run_module({"driver_packages": ["nvidia-open"], "root": str(root)}, capsys)
    assert not Path(f"{smi}.args").exists() and not Path(f"{mok}.args").exists()
    assert Path(f"{dpkg}.args").exists()
    assert result["secure_boot"] == "disabled" and result["mok_enrolled"] is False and result["action"] == "load"
    assert result["fabricmanager_package"] == ""  # none asked for


def test_module_without_package_names_does_not_ask_dpkg(tmp_path, capsys, monkeypatch):
    root, bin_dir = tmp_path / "root", tmp_path / "bin"
    dpkg = tool(bin_dir, "dpkg-query", DPKG)
    monkeypatch.setenv("PATH", str(bin_dir))
    result = run_module({"root": str(root)}, capsys)
    assert not Path(f"{dpkg}.args").exists()
    assert result["action"] == "no_gpu" and result["secure_boot"] == "unknown" and result["pci_gpus"] == []


def test_module_keeps_what_nvidia_smi_printed_and_its_status_when_it_fails(tmp_path, capsys, monkeypatch):
    root, bin_dir = tmp_path / "root", tmp_path / "bin"
    h100_node(root)
    put(root, "sys/module/nvidia/version", "580.95.05\n")
    tool(bin_dir, "nvidia-smi", SMI)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("SMI_RC", "9")
    result = run_module({"root": str(root)}, capsys)
    assert [g["index"] for g in result["smi"]] == [0, 1] and result["smi_rc"] == 9 and result["loaded_version"] == "580.95.05"


def test_module_without_the_mok_key_does_not_ask_mokutil(tmp_path, capsys, monkeypatch):
    root, bin_dir = tmp_path / "root", tmp_path / "bin"
    h100_node(root)
    (root / "var/lib/dkms/mok.pub").unlink()
    mok = tool(bin_dir, "mokutil", MOKUTIL)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert run_module({"root": str(root)}, capsys)["mok_enrolled"] is False
    assert not Path(f"{mok}.args").exists()


def test_module_reads_the_enrolment_from_stdout_too(tmp_path, capsys, monkeypatch):
    root, bin_dir = tmp_path / "root", tmp_path / "bin"
    h100_node(root)
    tool(bin_dir, "mokutil", '#!/bin/sh\necho "$2 is already enrolled"\n')
    monkeypatch.setenv("PATH", str(bin_dir))
    assert run_module({"root": str(root)}, capsys)["mok_enrolled"] is True
    tool(bin_dir, "mokutil", '#!/bin/sh\necho "$2 is not enrolled" >&2\nexit 1\n')
    assert run_module({"root": str(root)}, capsys)["mok_enrolled"] is False


def test_module_nouveau_holding_an_installed_driver_means_reboot(tmp_path, capsys, monkeypatch):
    root, bin_dir = tmp_path / "root", tmp_path / "bin"
    h100_node(root)
    (root / "sys/module/nouveau").mkdir(parents=True)
    tool(bin_dir, "dpkg-query", DPKG)
    monkeypatch.setenv("PATH", str(bin_dir))
    result = run_module({"driver_packages": ["nvidia-open"], "root": str(root)}, capsys)
    assert (result["installed_version"], result["loaded_version"], result["nouveau_loaded"], result["action"]) == ("580.95.05", "", True, "reboot")
