"""doctor_probe, what `megaprov doctor` reads on every node (megaprov/ops/doctor/health.py judges it): main() on a
healthy GPU node, on a head without GPUs and with each of the node's commands missing, hanging, failing or printing
garbage; then each reader on its own (disks, services, the kernel log's filter and limit, the InfiniBand ports, the
versions, the bounded command runner), and check mode.

Stood in: the node's commands, as small shell scripts on PATH that print what the real programs print (nvidia-smi's
--query-gpu / --query-remapped-rows CSV, journalctl -k -o short-iso and dmesg --time-format iso, systemctl show -p,
ip -j addr / route, chronyc -n tracking, ibstat, perfquery) and answer any other argv with exit 99; ``timeout``, which
records every argv and runs the command, or exits 124 as the real one does when the command hangs; the resolver
(gethostname, getaddrinfo) and the clock; statvfs where exact figures are asserted; and the one fixed path no option
covers, /proc/driver/nvidia/version, whose open() is sent to a file under tmp_path. Real: Ansible's module and its
run_command, the sysfs trees under the module's path options (PCI devices, InfiniBand ports), CUDA's version.json, and
a real venv whose python runs the module's version script over made-up package metadata."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import venv
from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.megaprov.cluster.plugins.modules import doctor_probe
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules.utils import run_module

NOW = 1764468644.25
# nvidia-smi's argv after its name, as the probe asks (gpu_query.HEALTH and gpu_query.REMAPPED)
SMI_FIELDS = (
    "index,pci.bus_id,name,ecc.errors.uncorrected.volatile.total,pcie.link.gen.current,pcie.link.gen.max,"
    "pcie.link.width.current,pcie.link.width.max,driver_version"
)
REMAP_FIELDS = "gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure"
SMI_QUERY = f"--query-gpu={SMI_FIELDS} --format=csv,noheader,nounits"
SMI_REMAP = f"--query-remapped-rows={REMAP_FIELDS} --format=csv,noheader"
SMI_CSV = (
    "0, 00000000:18:00.0, NVIDIA H100 80GB HBM3, 0, 5, 5, 16, 16, 580.95.05\n1, 00000000:2A:00.0, NVIDIA H100 80GB HBM3, 0, 5, 5, 16, 16, 580.95.05\n"
)
REMAP_CSV = "00000000:18:00.0, 0, 0, No, No\n00000000:2A:00.0, 0, 0, No, No\n"
SMI_DOWN = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n\n"
)
DRIVER_OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U22-I3-AM02-24-3)  "
    "Wed Sep 24 23:25:29 UTC 2025\nGCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
DRIVER_PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023\nGCC version:  gcc version 11.4.0\n"
CUDA_VERSION_JSON = (
    '{\n   "cuda" : {\n      "name" : "CUDA SDK",\n      "version" : "12.8.1"\n   },\n   "cuda_cudart" : {\n      "version" : "12.8.90"\n   }\n}\n'
)
CHRONY = (
    "Reference ID    : 0A000001 (10.0.0.1)\nStratum         : 3\nRef time (UTC)  : Sun Nov 30 01:00:00 2026\n"
    "System time     : 0.000001234 seconds fast of NTP time\nLast offset     : +0.000000567 seconds\n"
    "RMS offset      : 0.000001000 seconds\nFrequency       : 1.234 ppm slow\nResidual freq   : +0.000 ppm\n"
    "Skew            : 0.010 ppm\nRoot delay      : 0.001234567 seconds\nRoot dispersion : 0.000123456 seconds\n"
    "Update interval : 64.2 seconds\nLeap status     : Normal\n"
)
# ip -j addr show (iproute2's JSON; a {} link and an empty addr_info entry are what ip prints for links or addresses
# that a filter left out)
IP_ADDR = (
    '[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"operstate":"UNKNOWN","addr_info":'
    '[{"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host","label":"lo"},{"family":"inet6","local":"::1","prefixlen":128}]},'
    "{},"
    '{"ifindex":2,"ifname":"eth0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"operstate":"UP","addr_info":'
    '[{"family":"inet","local":"10.0.0.7","prefixlen":24,"broadcast":"10.0.0.255","scope":"global","label":"eth0"},{},'
    '{"family":"inet6","local":"fe80::4a7:1ff:fe00:7","prefixlen":64,"scope":"link"}]},'
    '{"ifindex":5,"ifname":"ibp24s0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":4092,"operstate":"UP","addr_info":'
    '[{"family":"inet","local":"10.1.0.7","prefixlen":16,"scope":"global","label":"ibp24s0"}]}]\n'
)
IP_ROUTE = '[{"dst":"default","gateway":"10.0.0.1","dev":"eth0","protocol":"static","flags":[]}]\n'
IP_OLD = 'Option "-j" is unknown, try "ip -help".\n'
SYSTEMCTL_ARGV = "show --property=Id,LoadState,ActiveState,SubState,UnitFileState --"
SYSTEMCTL_OUT = (
    "Id=chrony.service\nLoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\n\n"
    "Id=nvidia-persistenced.service\nLoadState=loaded\nActiveState=failed\nSubState=failed\nUnitFileState=enabled\n\n"
    "Id=nosuch.service\nLoadState=not-found\nActiveState=inactive\nSubState=dead\nUnitFileState=\n"
)
JOURNAL_ARGV = "-k -b --no-pager -o short-iso -q"
# what journalctl says, and still exits 0, when it skips a damaged journal file
JOURNAL_WARNING = "Journal file /var/log/journal/4f1c/system@00061e0a5b3c-6e2f.journal~ is truncated, ignoring file.\n"
DMESG_ARGV = "--time-format iso"
J = "2026-11-30T02:10:44+00:00 gpu7 kernel: "
# one line per alternative of the probe's filter, each matching that one alone
KEPT = [
    J + "NVRM: GPU at PCI:0000:3a:00: GPU-0e7b3d42-1a6f-4c58-b9e2-7f05d1c3a8e4",
    J + "NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    J + "Out of memory: Killed process 48211 (python) total-vm:98765432kB, anon-rss:87654321kB, file-rss:0kB, UID:1000 oom_score_adj:0",
    J + "python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
    J + "oom_reaper: reaped process 48211 (python), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
    J + "mlx5_core 0000:1a:00.0: mlx5_port_module_event:1152:(pid 0): Port module event: module 0, Cable unplugged",
    J + "ib_core: unable to register cm_id",
    J + "IPv6: ADDRCONF(NETDEV_CHANGE): ibp24s0: link becomes ready",
    J + "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing",
    J + "nvidia-nvswitch: Probing device 0000:05:00.0, Vendor Id = 0x10de, Device Id = 0x22a3, Class = 0x68000",
    J + 'audit: type=1400 audit(1764468644.123:512): apparmor="DENIED" operation="open" profile="nvidia-fabricmanager" pid=2211',
]
DROPPED = [
    J + "Linux version 6.8.0-48-generic (buildd@lcy02-amd64-010) (x86_64-linux-gnu-gcc-13 (Ubuntu 13.2.0-23ubuntu4) 13.2.0)",
    J + "EXT4-fs (nvme0n1p2): mounted filesystem 5c1b0c62-7a4e-4f1a-9d53-3c2e1f7b8a90 ro with ordered data mode.",
    J + "bond0: (slave eth1): link status definitely up, 100000 Mbps full duplex",
    J + "fibp0: not an IPoIB interface name (ibp must begin a word)",
]
IBSTAT = (
    "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.42.1000\n\tHardware version: 0\n"
    "\tNode GUID: 0x946dae0300a81e40\n\tSystem image GUID: 0x946dae0300a81e40\n\tPort 1:\n\t\tState: Active\n"
    "\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tBase lid: 12\n\t\tLMC: 0\n\t\tSM lid: 1\n"
    "\t\tCapability mask: 0xa750e848\n\t\tPort GUID: 0x946dae0300a81e40\n\t\tLink layer: InfiniBand\n"
)
PERFQUERY = (
    "# Port counters: Lid 12 port 1 (CapMask: 0x5A00)\nPortSelect:......................1\nCounterSelect:...................0x0000\n"
    "SymbolErrorCounter:..............0\nLinkErrorRecoveryCounter:........0\nLinkDownedCounter:...............1\n"
)
PY_VERSIONS = {"torch": "2.9.0", "megatron_core": "0.14.0", "nccl": "2.27.3", "cuda_runtime": "12.8.90"}
NO_VERSIONS = {"driver": "", "cuda": "", "cuda_runtime": "", "nccl": "", "torch": "", "megatron_core": ""}


class Node:
    """A fake node: its commands in one folder that is all of PATH, calls recorded by the stand-in `timeout`."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.tools = root / "tools"
        self.tools.mkdir(parents=True)
        self.log = self.tools / "calls"
        self.script(
            "timeout",
            f"for a in \"$@\"; do printf '%s\\037' \"$a\"; done >> '{self.log}'\nprintf '\\036' >> '{self.log}'\n"
            f'[ -e \'{self.tools}/\'"$2".hangs ] && exit 124\nshift\nexec "$@"\n',
        )
        (self.tools / "cat").symlink_to(shutil.which("cat"))
        monkeypatch.setenv("PATH", str(self.tools))
        self.monkeypatch = monkeypatch
        self.driver(None)
        self.resolver([("gpu7", ["10.0.0.7", "10.0.0.7", "fd00::7"])])
        monkeypatch.setattr(doctor_probe, "time", SimpleNamespace(time=lambda: NOW))

    def script(self, name: str, body: str) -> Path:
        path = self.tools / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
        return path

    def command(self, name: str, answers: dict[str, tuple[str, str, int]]) -> None:
        """`name` answering each argv (after its name, space-joined) with (stdout, stderr, exit status)."""
        cases = []
        for n, (argv, (out, err, rc)) in enumerate(answers.items()):
            (self.tools / f"{name}.{n}.out").write_text(out)
            (self.tools / f"{name}.{n}.err").write_text(err)
            cases.append(f"'{argv}') cat '{self.tools}/{name}.{n}.out'; cat '{self.tools}/{name}.{n}.err' >&2; exit {rc} ;;\n")
        self.script(name, 'case "$*" in\n' + "".join(cases) + f'*) echo "{name}: unexpected $*" >&2; exit 99 ;;\nesac\n')

    def hangs(self, name: str) -> None:
        (self.tools / f"{name}.hangs").write_text("")

    def calls(self) -> list[list[str]]:
        """Each command run, as `timeout` got it; the python version script shown as <script>."""
        if not self.log.exists():
            return []
        calls = [record.split("\x1f")[:-1] for record in self.log.read_text().split("\x1e")[:-1]]
        return [c[:4] + ["<script>"] if len(c) == 5 and c[2:4] == ["-I", "-c"] else c for c in calls]

    def driver(self, text: str | None) -> None:
        """What /proc/driver/nvidia/version holds (None: no such file, the driver is not loaded)."""
        place = self.root / "proc-driver-nvidia-version"
        if text is not None:
            place.write_text(text)
        real_open = open

        def redirect(file, *args, **kwargs):
            return real_open(place if file == "/proc/driver/nvidia/version" else file, *args, **kwargs)

        self.monkeypatch.setattr(doctor_probe, "open", redirect, raising=False)

    def resolver(self, names: list[tuple[str, list[str] | OSError]]) -> list[tuple]:
        """gethostname() gives the first name; getaddrinfo answers each name with its addresses (or raises)."""
        asked: list[tuple] = []
        answers = dict(names)

        def getaddrinfo(host, port, **kwargs):
            asked.append((host, port, kwargs))
            found = answers[host]
            if isinstance(found, OSError):
                raise found
            return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0, 0, 0) if ":" in a else (a, 0)) for a in found]

        stub = SimpleNamespace(gethostname=lambda: names[0][0], getaddrinfo=getaddrinfo, IPPROTO_TCP=socket.IPPROTO_TCP)
        self.monkeypatch.setattr(doctor_probe, "socket", stub)
        return asked

    def pci(self, devices: dict[str, tuple[str, str]]) -> str:
        folder = self.root / "sys/bus/pci/devices"
        folder.mkdir(parents=True, exist_ok=True)
        for address, (vendor, pci_class) in devices.items():
            (folder / address).mkdir()
            (folder / address / "vendor").write_text(vendor + "\n")
            (folder / address / "class").write_text(pci_class + "\n")
        return str(folder)

    def ib_port(self, ca: str, port: str, attributes: dict[str, str], counters: dict[str, str]) -> str:
        folder = self.root / "sys/class/infiniband" / ca / "ports" / port
        (folder / "counters").mkdir(parents=True)
        for name, value in attributes.items():
            (folder / name).write_text(value + "\n")
        for name, value in counters.items():
            (folder / "counters" / name).write_text(value + "\n")
        return str(self.root / "sys/class/infiniband")


@pytest.fixture
def node(tmp_path, monkeypatch) -> Node:
    return Node(tmp_path, monkeypatch)


def make_venv(root: Path, packages: dict[str, str]) -> str:
    """A real venv whose site-packages holds only the metadata of `packages` (distribution name -> version)."""
    venv.create(root, with_pip=False, symlinks=True)
    (site,) = root.glob("lib/python*/site-packages")
    for name, version in packages.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return str(root)


TRAINING_PACKAGES = {"torch": "2.9.0", "megatron-core": "0.14.0", "nvidia-nccl-cu12": "2.27.3", "nvidia-cuda-runtime-cu12": "12.8.90"}
ACTIVE = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"}
ZERO_COUNTERS = {name: "0" for name in doctor_probe.COUNTERS}


def gpu_node(node: Node) -> dict:
    """A healthy 2-GPU node (an NVSwitch and an HCA on the bus too) and the module arguments that read it."""
    node.driver(DRIVER_OPEN)
    node.command("ip", {"-j addr show": (IP_ADDR, "", 0), "-j route show default": (IP_ROUTE, "", 0)})
    node.command("chronyc", {"-n tracking": (CHRONY, "", 0)})
    node.command("systemctl", {f"{SYSTEMCTL_ARGV} chrony.service nvidia-persistenced.service nosuch.service": (SYSTEMCTL_OUT, "", 0)})
    node.command("nvidia-smi", {SMI_QUERY: (SMI_CSV, "", 0), SMI_REMAP: (REMAP_CSV, "", 0)})
    node.command("journalctl", {JOURNAL_ARGV: ("\n".join([DROPPED[0], *KEPT[:3], DROPPED[1], *KEPT[3:]]) + "\n", JOURNAL_WARNING, 0)})
    node.command("ibstat", {"": (IBSTAT, "", 0)})
    node.command("perfquery", {"-C mlx5_0 -P 1": (PERFQUERY, "", 0)})
    cuda = node.root / "cuda"
    cuda.mkdir()
    (cuda / "version.json").write_text(CUDA_VERSION_JSON)
    devices = node.pci(
        {
            "0000:18:00.0": ("0x10de", "0x030200"),
            "0000:2a:00.0": ("0x10de", "0x030200"),
            "0000:05:00.0": ("0x10de", "0x068000"),  # NVSwitch: not a GPU
            "0000:1a:00.0": ("0x15b3", "0x020700"),  # ConnectX-7
        }
    )
    infiniband = node.ib_port("mlx5_0", "1", ACTIVE, ZERO_COUNTERS)
    shared = node.root / "shared"
    shared.mkdir()
    return {
        "paths": {"shared": str(shared)},
        "venv": make_venv(node.root / "venv", TRAINING_PACKAGES),
        "cuda_home": str(cuda),
        "services": ["chrony.service", "nvidia-persistenced.service", "nosuch.service"],
        "pci_devices": devices,
        "sysfs_infiniband": infiniband,
    }


def statvfs(figures: dict[str, tuple[int, int, int, int, int]]):
    """os.statvfs over made-up file systems: path -> (f_bsize, f_frsize, f_blocks, f_bfree, f_bavail)."""

    def fake(path):
        if str(path) not in figures:
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return os.statvfs_result((*figures[str(path)], 1000, 900, 800, 4096, 255))

    return fake


# --- main() ------------------------------------------------------------------------------------------------------


def test_a_healthy_gpu_node_reports_every_reading_doctor_judges(node, monkeypatch, capsys):
    args = gpu_node(node)
    shared = args["paths"]["shared"]
    monkeypatch.setattr(doctor_probe.os, "statvfs", statvfs({shared: (4096, 1024, 1000, 700, 600)}))
    args["paths"]["scratch"] = str(node.root / "nowhere")
    rc, result = run_module(doctor_probe.main, args, capsys)
    assert rc == 0, result
    assert result == {
        "changed": False,
        "time": NOW,
        "hostname": {
            "name": "gpu7",
            "resolved": ["10.0.0.7", "fd00::7"],
            "error": "",
            "interface": "eth0",
            "interface_addresses": ["10.0.0.7", "fe80::4a7:1ff:fe00:7"],
            "interface_found": True,
        },
        "chrony": {"rc": 0, "stdout": CHRONY},
        "versions": {"driver": "580.95.05", "cuda": "12.8.1", **PY_VERSIONS},
        "disks": {"scratch": {"path": str(node.root / "nowhere"), "missing": True}, "shared": {"path": shared, "total": 1024000, "free": 614400}},
        "services": {
            "chrony.service": {"load": "loaded", "active": "active", "sub": "running", "enabled": "enabled"},
            "nvidia-persistenced.service": {"load": "loaded", "active": "failed", "sub": "failed", "enabled": "enabled"},
            "nosuch.service": {"load": "not-found", "active": "inactive", "sub": "dead", "enabled": ""},
        },
        "nvidia_smi": {
            "rc": 0,
            "stdout": SMI_CSV,
            "stderr": "",
            "fields": SMI_FIELDS,
            "remapped": {"rc": 0, "stdout": REMAP_CSV, "fields": REMAP_FIELDS},
        },
        "pci_gpus": 2,
        "kernel": {"source": "journalctl -k -b", "rc": 0, "readable": True, "error": "", "lines": KEPT},
        "infiniband": {
            "sysfs": {"mlx5_0": {"1": {**ACTIVE, "counters": dict.fromkeys(doctor_probe.COUNTERS, 0)}}},
            "ibstat": IBSTAT,
            "perfquery": {"mlx5_0:1": PERFQUERY},
        },
        "invocation": result["invocation"],
    }
    assert node.calls() == [
        ["10", "ip", "-j", "addr", "show"],
        ["10", "ip", "-j", "route", "show", "default"],
        ["10", "chronyc", "-n", "tracking"],
        ["60", args["venv"] + "/bin/python", "-I", "-c", "<script>"],
        ["30", "systemctl", *SYSTEMCTL_ARGV.split(), "chrony.service", "nvidia-persistenced.service", "nosuch.service"],
        ["60", "nvidia-smi", *SMI_QUERY.split()],
        ["60", "nvidia-smi", *SMI_REMAP.split()],
        ["60", "journalctl", *JOURNAL_ARGV.split()],
        ["30", "ibstat"],
        ["15", "perfquery", "-C", "mlx5_0", "-P", "1"],
    ]


def test_a_head_without_gpus_hcas_chrony_or_a_training_venv_reports_them_absent(node, capsys):
    node.command("ip", {"-j addr show": (IP_ADDR, "", 0), "-j route show default": (IP_ROUTE, "", 0)})
    node.command("journalctl", {JOURNAL_ARGV: ("\n".join(DROPPED) + "\n", "", 0)})
    node.command("systemctl", {})  # asked nothing: no units
    node.command("ibstat", {"": (IBSTAT, "", 0)})  # installed, but no HCA in sysfs: not run
    rc, result = run_module(
        doctor_probe.main,
        {
            "interface": "ibp24s0",
            "venv": str(node.root / "no-venv"),
            "cuda_home": str(node.root / "no-cuda"),
            "pci_devices": node.pci({"0000:00:02.0": ("0x1a03", "0x030000")}),  # the BMC's VGA
            "sysfs_infiniband": str(node.root / "sys/class/infiniband"),
        },
        capsys,
    )
    assert rc == 0, result
    assert result == {
        "changed": False,
        "time": NOW,
        "hostname": {
            "name": "gpu7",
            "resolved": ["10.0.0.7", "fd00::7"],
            "error": "",
            "interface": "ibp24s0",
            "interface_addresses": ["10.1.0.7"],
            "interface_found": True,
        },
        "chrony": None,
        "versions": NO_VERSIONS,
        "disks": {},
        "services": {},
        "nvidia_smi": None,
        "pci_gpus": 0,
        "kernel": {"source": "journalctl -k -b", "rc": 0, "readable": True, "error": "", "lines": []},
        "infiniband": {"sysfs": {}, "ibstat": None, "perfquery": {}},
        "invocation": result["invocation"],
    }
    # the interface was given: no route asked; nothing asked of a command that is absent or has nothing to read
    assert node.calls() == [["10", "ip", "-j", "addr", "show"], ["60", "journalctl", *JOURNAL_ARGV.split()]]


def test_check_mode_reads_the_same_and_changes_nothing(node, capsys):
    args = gpu_node(node)
    rc, result = run_module(doctor_probe.main, {**args, "paths": {}, "_ansible_check_mode": True}, capsys)
    assert rc == 0 and result["changed"] is False
    assert result["nvidia_smi"]["stdout"] == SMI_CSV and result["kernel"]["lines"] == KEPT and result["versions"]["driver"] == "580.95.05"
    assert len(node.calls()) == 10


def test_the_options_default_to_the_documented_places(node, capsys):
    rc, result = run_module(doctor_probe.main, {}, capsys)
    assert rc == 0, result
    assert result["invocation"]["module_args"] == {
        "paths": {},
        "interface": "",
        "venv": "/opt/megaprov/venv",
        "cuda_home": "/usr/local/cuda",
        "services": [],
        "kernel_lines": 400,
        "pci_devices": "/sys/bus/pci/devices",
        "sysfs_infiniband": "/sys/class/infiniband",
    }


def test_paths_may_be_given_from_the_home_directory(node, monkeypatch, capsys):
    args = gpu_node(node)
    monkeypatch.setenv("HOME", str(node.root))
    home = {k: "~/" + os.path.relpath(args[k], node.root) for k in ("venv", "cuda_home", "pci_devices", "sysfs_infiniband")}
    rc, result = run_module(doctor_probe.main, {**args, **home, "paths": {}}, capsys)
    assert rc == 0, result
    assert {k: result["invocation"]["module_args"][k] for k in home} == {k: args[k] for k in home}
    assert result["versions"] == {"driver": "580.95.05", "cuda": "12.8.1", **PY_VERSIONS}
    assert result["pci_gpus"] == 2 and list(result["infiniband"]["sysfs"]) == ["mlx5_0"]


def test_every_command_missing_leaves_each_reading_empty_and_the_kernel_log_unreadable(node, capsys):
    node.resolver([("gpu7", socket.gaierror(-2, "Name or service not known"))])
    nowhere = str(node.root / "none")
    args = {"venv": nowhere, "cuda_home": nowhere, "pci_devices": nowhere, "sysfs_infiniband": nowhere, "services": ["chrony.service"]}
    rc, result = run_module(doctor_probe.main, args, capsys)
    assert rc == 0, result
    assert result["hostname"] == {
        "name": "gpu7",
        "resolved": [],
        "error": "[Errno -2] Name or service not known",
        "interface": "",
        "interface_addresses": [],
        "interface_found": False,
    }
    assert result["chrony"] is None and result["nvidia_smi"] is None and result["services"] == {}
    assert result["kernel"] == {"source": "dmesg", "rc": 127, "readable": False, "error": "dmesg: not installed", "lines": []}
    assert result["versions"] == NO_VERSIONS and result["pci_gpus"] == 0
    assert result["infiniband"] == {"sysfs": {}, "ibstat": None, "perfquery": {}}
    assert node.calls() == []


def test_commands_that_hang_are_cut_off_and_reported_with_timeouts_status(node, capsys):
    args = gpu_node(node)
    for name in ("ip", "chronyc", "systemctl", "nvidia-smi", "journalctl", "dmesg", "ibstat", "perfquery"):
        node.hangs(name)
    node.command("dmesg", {DMESG_ARGV: (KEPT[0] + "\n", "", 0)})
    rc, result = run_module(doctor_probe.main, {**args, "paths": {}}, capsys)
    assert rc == 0, result
    assert result["hostname"]["interface"] == "" and result["hostname"]["interface_found"] is False
    assert result["chrony"] == {"rc": 124, "stdout": ""}
    assert result["services"] == {}
    assert result["nvidia_smi"] == {"rc": 124, "stdout": "", "stderr": "", "fields": SMI_FIELDS}
    assert result["kernel"] == {"source": "dmesg", "rc": 124, "readable": False, "error": "", "lines": []}
    assert result["infiniband"] == {
        "sysfs": {"mlx5_0": {"1": {**ACTIVE, "counters": dict.fromkeys(doctor_probe.COUNTERS, 0)}}},
        "ibstat": None,
        "perfquery": {},
    }
    assert [c[1] for c in node.calls()] == [
        "ip", "ip", "chronyc", args["venv"] + "/bin/python", "systemctl", "nvidia-smi", "journalctl", "dmesg", "ibstat", "perfquery",
    ]  # fmt: skip


def test_failing_commands_report_their_status_and_words(node, capsys):
    args = gpu_node(node)
    node.command("ip", {"-j addr show": (IP_OLD, "", 255), "-j route show default": (IP_OLD, "", 255)})
    node.command("chronyc", {"-n tracking": ("", "506 Cannot talk to daemon\n", 1)})
    node.command(
        "systemctl",
        {f"{SYSTEMCTL_ARGV} chrony.service nvidia-persistenced.service nosuch.service": ("", "Failed to connect to bus: Host is down\n", 1)},
    )
    node.command("nvidia-smi", {SMI_QUERY: (SMI_DOWN, "", 9)})
    node.command("journalctl", {JOURNAL_ARGV: ("", "Failed to get journal access: Permission denied\n", 1)})
    long_words = "dmesg: read kernel buffer failed: Operation not permitted " + "x" * 400
    node.command("dmesg", {DMESG_ARGV: (KEPT[1] + "\n", f"  {long_words}\n", 1)})
    node.command("ibstat", {"": ("", "ibpanic: [4021] main: stat of IB device 'mlx5_0' failed: No such file or directory\n", 255)})
    node.command("perfquery", {"-C mlx5_0 -P 1": ("", "ibwarn: [4022] mad_rpc_open_port: can't open UMAD port (mlx5_0:1)\n", 255)})
    rc, result = run_module(doctor_probe.main, {**args, "paths": {}}, capsys)
    assert rc == 0, result
    assert (result["hostname"]["interface"], result["hostname"]["interface_addresses"], result["hostname"]["interface_found"]) == ("", [], False)
    assert result["chrony"] == {"rc": 1, "stdout": ""}
    assert result["services"] == {}
    assert result["nvidia_smi"] == {"rc": 9, "stdout": SMI_DOWN, "stderr": "", "fields": SMI_FIELDS}
    # a failed read says so, with the tool's words (at most 300 characters); the lines it printed are still filtered
    assert result["kernel"] == {"source": "dmesg", "rc": 1, "readable": False, "error": long_words[:300], "lines": [KEPT[1]]}
    assert result["infiniband"]["ibstat"] is None and result["infiniband"]["perfquery"] == {}
    assert [c[1] for c in node.calls()].count("nvidia-smi") == 1  # no remapped rows asked of a driver that does not answer
    assert node.calls()[6:8] == [["60", "journalctl", *JOURNAL_ARGV.split()], ["30", "dmesg", "--time-format", "iso"]]


def test_commands_printing_garbage_read_as_nothing(node, capsys):
    args = gpu_node(node)
    node.command(
        "ip",
        {"-j addr show": ("1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536\n", "", 0), "-j route show default": ("default via 10.0.0.1 dev eth0\n", "", 0)},
    )
    node.command("systemctl", {f"{SYSTEMCTL_ARGV} chrony.service nvidia-persistenced.service nosuch.service": ("\n\nno properties here\n\n", "", 0)})
    node.command("nvidia-smi", {SMI_QUERY: (SMI_CSV, "", 0), SMI_REMAP: ("Invalid combination of input arguments.\n", "", 2)})
    node.command("journalctl", {JOURNAL_ARGV: ("   \n\n", "", 0)})  # nothing: the probe asks dmesg
    node.command("dmesg", {DMESG_ARGV: ("\n".join(DROPPED + KEPT[9:]) + "\n", "", 0)})
    python = node.root / "garbage-venv/bin/python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\necho 'Fatal Python error: init_fs_encoding'\n")
    python.chmod(0o755)
    (node.root / "cuda/version.json").write_text('{"cuda": "12.8"}')
    rc, result = run_module(doctor_probe.main, {**args, "paths": {}, "venv": str(node.root / "garbage-venv")}, capsys)
    assert rc == 0, result
    assert (result["hostname"]["interface"], result["hostname"]["interface_found"]) == ("", False)
    assert result["services"] == {"chrony.service": {"load": "", "active": "", "sub": "", "enabled": ""}}
    assert result["nvidia_smi"]["remapped"] == {"rc": 2, "stdout": "Invalid combination of input arguments.\n", "fields": REMAP_FIELDS}
    assert result["kernel"] == {"source": "dmesg", "rc": 0, "readable": True, "error": "", "lines": KEPT[9:]}
    assert result["versions"] == {**NO_VERSIONS, "driver": "580.95.05"}


# --- hostname_info ---------------------------------------------------------------------------------------------


def module() -> AnsibleModule:
    """A real module with no arguments, for the readers that run commands."""
    with patch_module_args({}):
        return AnsibleModule(argument_spec={})


def test_the_name_resolves_once_per_address_and_the_interface_is_the_default_routes(node):
    asked = node.resolver([("gpu7", ["10.0.0.7", "fd00::7", "10.0.0.7", "fd00::7"])])
    node.command("ip", {"-j addr show": (IP_ADDR, "", 0), "-j route show default": (IP_ROUTE, "", 0)})
    found = doctor_probe.hostname_info(module(), "")
    assert asked == [("gpu7", None, {"proto": socket.IPPROTO_TCP})]
    assert found == {
        "name": "gpu7",
        "resolved": ["10.0.0.7", "fd00::7"],
        "error": "",
        "interface": "eth0",
        "interface_addresses": ["10.0.0.7", "fe80::4a7:1ff:fe00:7"],
        "interface_found": True,
    }


def test_an_interface_the_node_lacks_is_not_found_and_has_no_addresses(node):
    node.command("ip", {"-j addr show": (IP_ADDR, "", 0)})
    found = doctor_probe.hostname_info(module(), "ib9")
    assert (found["interface"], found["interface_addresses"], found["interface_found"]) == ("ib9", [], False)


def test_a_node_without_a_default_route_has_no_interface(node):
    node.command("ip", {"-j addr show": (IP_ADDR, "", 0), "-j route show default": ("[]\n", "", 0)})
    found = doctor_probe.hostname_info(module(), "")
    assert (found["interface"], found["interface_addresses"], found["interface_found"]) == ("", [], False)
    node.command("ip", {"-j addr show": (IP_ADDR, "", 0), "-j route show default": ('[{"dst":"default","type":"blackhole"}]\n', "", 0)})
    assert doctor_probe.hostname_info(module(), "")["interface"] == ""


def test_ip_addresses_are_read_only_from_a_successful_answer(node):
    node.command("ip", {"-j addr show": (IP_ADDR, "", 1)})
    found = doctor_probe.hostname_info(module(), "eth0")
    assert (found["interface_addresses"], found["interface_found"]) == ([], False)
    node.command("ip", {"-j addr show": (IP_ADDR, "", 0), "-j route show default": (IP_ROUTE, "", 2)})
    found = doctor_probe.hostname_info(module(), "")
    assert (found["interface"], found["interface_found"]) == ("", False)
    node.command("ip", {"-j addr show": ("  \n" + IP_ADDR, "", 0), "-j route show default": ("\n " + IP_ROUTE, "", 0)})
    assert doctor_probe.hostname_info(module(), "")["interface_addresses"] == ["10.0.0.7", "fe80::4a7:1ff:fe00:7"]


def test_json_that_is_cut_off_reads_as_no_links(node):
    node.command("ip", {"-j addr show": (IP_ADDR[:100], "", 0), "-j route show default": (IP_ROUTE[:30], "", 0)})
    found = doctor_probe.hostname_info(module(), "")
    assert (found["interface"], found["interface_addresses"], found["interface_found"]) == ("", [], False)


# --- versions --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("packages", "expected"),
    [
        (
            {
                "torch": "2.9.0",
                "megatron-core": "0.14.0",
                "nvidia-nccl-cu13": "2.28.3",
                "nvidia-nccl-cu12": "2.27.3",
                "nvidia-cuda-runtime": "13.0.48",
            },
            {"torch": "2.9.0", "megatron_core": "0.14.0", "nccl": "2.28.3", "cuda_runtime": "13.0.48"},
        ),
        (
            {
                "nvidia-nccl-cu12": "2.27.3",
                "nvidia-nccl-cu11": "2.21.5",
                "nvidia-cuda-runtime-cu13": "13.0.48",
                "nvidia-cuda-runtime-cu12": "12.8.90",
            },
            {"torch": "", "megatron_core": "", "nccl": "2.27.3", "cuda_runtime": "13.0.48"},
        ),
        (
            {"nvidia-nccl-cu11": "2.21.5", "nvidia-cuda-runtime-cu12": "12.8.90"},
            {"torch": "", "megatron_core": "", "nccl": "2.21.5", "cuda_runtime": "12.8.90"},
        ),
        ({"megatron_core": "0.13.1"}, {"torch": "", "megatron_core": "0.13.1", "nccl": "", "cuda_runtime": ""}),
    ],
)
def test_the_training_venvs_packages_are_read_by_their_first_installed_name(node, packages, expected):
    path = make_venv(node.root / "venv", packages)
    assert doctor_probe.versions(module(), path, str(node.root / "no-cuda")) == {"driver": "", "cuda": "", **expected}


@pytest.mark.parametrize(
    ("text", "driver"),
    [
        (DRIVER_OPEN, "580.95.05"),
        (DRIVER_PROPRIETARY, "535.129.03"),
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  390.157\n", "390.157"),
        ("NVRM version: unknown\n", ""),
    ],
)
def test_the_driver_version_is_the_loaded_kernel_modules(node, text, driver):
    node.driver(text)
    assert doctor_probe.versions(module(), str(node.root / "none"), str(node.root / "none"))["driver"] == driver


@pytest.mark.parametrize(
    ("text", "cuda"),
    [(CUDA_VERSION_JSON, "12.8.1"), ('{"cuda": {"name": "CUDA SDK"}}', ""), ('{"cuda": "12.8"}', ""), ("[]", ""), ("{not json", ""), (None, "")],
)
def test_the_cuda_version_is_version_jsons_sdk_version(node, text, cuda):
    if text is not None:
        (node.root / "version.json").write_text(text)
    assert doctor_probe.versions(module(), str(node.root / "none"), str(node.root))["cuda"] == cuda


def test_a_venv_python_that_fails_or_prints_no_json_gives_no_versions(node):
    python = node.root / "venv/bin/python"
    python.parent.mkdir(parents=True)
    for body in (
        'echo \'{"torch": "2.9.0"}\'; exit 1',  # a failed run is not read, whatever it printed
        "true",  # no output at all
        "echo '{\"torch\": '",  # cut off
    ):
        python.write_text(f"#!/bin/sh\n{body}\n")
        python.chmod(0o755)
        assert doctor_probe.versions(module(), str(node.root / "venv"), str(node.root)) == NO_VERSIONS, body
    python.write_text('#!/bin/sh\necho \'warning: a banner before the answer\'\necho \'{"torch": 2.9, "nccl": "2.27.3"}\'\n')
    assert doctor_probe.versions(module(), str(node.root / "venv"), str(node.root)) == {**NO_VERSIONS, "torch": "2.9", "nccl": "2.27.3"}


def test_a_venv_python_that_is_not_executable_is_tried_and_gives_nothing(node):
    python = node.root / "venv/bin/python"
    python.parent.mkdir(parents=True)
    python.write_text("not a program\n")
    assert doctor_probe.versions(module(), str(node.root / "venv"), str(node.root)) == NO_VERSIONS
    assert node.calls() == [["60", str(python), "-I", "-c", "<script>"]]


# --- disks, services, kernel log, infiniband ------------------------------------------------------------------


def test_disks_are_measured_where_they_exist_by_fragment_size_and_space_left_to_users(monkeypatch, tmp_path):
    monkeypatch.setattr(doctor_probe.os, "statvfs", statvfs({"/shared": (1048576, 4096, 2500, 2000, 1500), "/var/tmp": (4096, 512, 10, 9, 8)}))
    assert doctor_probe.disks({"shared": "/shared", "scratch": "/var/tmp", "home": "/home/none"}) == {
        "home": {"path": "/home/none", "missing": True},
        "scratch": {"path": "/var/tmp", "total": 5120, "free": 4096},
        "shared": {"path": "/shared", "total": 10240000, "free": 6144000},
    }
    assert list(doctor_probe.disks({"b": "/shared", "a": "/var/tmp", "c": "/x"})) == ["a", "b", "c"]
    assert doctor_probe.disks({}) == {}


def test_a_real_directorys_size_is_its_file_systems(tmp_path):
    st = os.statvfs(tmp_path)
    found = doctor_probe.disks({"scratch": str(tmp_path)})["scratch"]
    assert found["path"] == str(tmp_path) and found["total"] == st.f_blocks * st.f_frsize and 0 <= found["free"] <= found["total"]


def test_services_are_matched_to_systemctls_blocks_in_order(node):
    node.command(
        "systemctl",
        {
            f"{SYSTEMCTL_ARGV} slurmd.service munge.service": (
                "Id=slurmd.service\nLoadState=loaded\nActiveState=activating\nSubState=auto-restart\nUnitFileState=enabled-runtime\n\n"
                "Id=munge.service\nLoadState=masked\nActiveState=inactive\nSubState=dead\nUnitFileState=masked\n",
                "",
                0,
            ),
            f"{SYSTEMCTL_ARGV} --help": ("Id=--help.service\nLoadState=not-found\nActiveState=inactive\nSubState=dead\nUnitFileState=\n", "", 0),
        },
    )
    assert doctor_probe.services(module(), ["slurmd.service", "munge.service"]) == {
        "slurmd.service": {"load": "loaded", "active": "activating", "sub": "auto-restart", "enabled": "enabled-runtime"},
        "munge.service": {"load": "masked", "active": "inactive", "sub": "dead", "enabled": "masked"},
    }
    # a unit name that looks like an option is still a unit, after --
    assert doctor_probe.services(module(), ["--help"]) == {"--help": {"load": "not-found", "active": "inactive", "sub": "dead", "enabled": ""}}
    assert doctor_probe.services(module(), []) == {}
    assert [c[1] for c in node.calls()] == ["systemctl", "systemctl"]


def test_a_systemctl_that_fails_for_one_unit_reports_none_as_its_blocks_no_longer_line_up(node):
    # systemctl show prints the units it could read and exits 1 for the one it could not: the blocks cannot be
    # matched to the units by their order any more
    node.command(
        "systemctl",
        {
            f"{SYSTEMCTL_ARGV} chrony.service bad/name munge.service": (
                "Id=chrony.service\nLoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\n\n"
                "Id=munge.service\nLoadState=loaded\nActiveState=failed\nSubState=failed\nUnitFileState=enabled\n",
                "Failed to get properties: Unit name bad/name is not valid.\n",
                1,
            )
        },
    )
    assert doctor_probe.services(module(), ["chrony.service", "bad/name", "munge.service"]) == {}


def test_the_kernel_log_keeps_the_last_lines_within_the_limit(node, capsys):
    node.command("journalctl", {JOURNAL_ARGV: ("\n".join(KEPT + DROPPED) + "\n", "", 0)})
    assert doctor_probe.kernel_log(module(), 3)["lines"] == KEPT[-3:]
    assert doctor_probe.kernel_log(module(), len(KEPT))["lines"] == KEPT
    assert doctor_probe.kernel_log(module(), 100)["lines"] == KEPT
    for asked, kept in ((0, 1), (-4, 1), (2, 2)):
        rc, result = run_module(doctor_probe.main, {"kernel_lines": asked, "sysfs_infiniband": str(node.root / "none")}, capsys)
        assert rc == 0 and result["kernel"]["lines"] == KEPT[-kept:], asked


def test_the_kernel_log_limit_is_at_most_5000_lines(node, capsys):
    lines = [J + f"NVRM: Xid (PCI:0000:3a:00): 13, pid={n}" for n in range(5002)]  # 400 kB: within what is kept
    node.command("journalctl", {JOURNAL_ARGV: ("\n".join(lines) + "\n", "", 0)})
    rc, result = run_module(doctor_probe.main, {"kernel_lines": 6000, "sysfs_infiniband": str(node.root / "none")}, capsys)
    assert rc == 0 and result["kernel"]["lines"] == lines[-5000:]
    rc, result = run_module(doctor_probe.main, {"sysfs_infiniband": str(node.root / "none")}, capsys)
    assert rc == 0 and result["kernel"]["lines"] == lines[-400:]  # the default


def test_infiniband_ports_are_read_from_sysfs_and_perfquery_asked_of_infiniband_ports_only(node):
    node.ib_port("mlx5_0", "1", ACTIVE, {**ZERO_COUNTERS, "symbol_error": "12", "link_downed": "3"})
    node.ib_port(
        "mlx5_1",
        "1",
        {"state": "1: DOWN", "phys_state": "3: Disabled", "rate": "10 Gb/sec (4X SDR)", "link_layer": "InfiniBand"},
        {"port_rcv_errors": "N/A"},
    )
    node.ib_port("mlx5_1", "2", {"state": "2: INIT", "phys_state": "5: LinkUp", "rate": "200 Gb/sec (4X HDR)", "link_layer": "InfiniBand"}, {})
    sysfs = node.ib_port(
        "mlx5_2", "1", {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (1X NDR)", "link_layer": "Ethernet"}, ZERO_COUNTERS
    )
    (Path(sysfs) / "mlx5_2/ports/1/state").write_bytes(b"4: ACTIVE \xff\n")  # a byte that is not UTF-8 reads as U+FFFD
    node.command("ibstat", {"": (IBSTAT, "", 0)})
    node.command(
        "perfquery",
        {
            "-C mlx5_0 -P 1": (PERFQUERY, "", 0),
            "-C mlx5_1 -P 1": ("", "ibwarn: port down\n", 255),
            "-C mlx5_1 -P 2": (PERFQUERY.replace("Lid 12", "Lid 14"), "", 0),
        },
    )
    found = doctor_probe.infiniband(module(), sysfs)
    assert found == {
        "sysfs": {
            "mlx5_0": {
                "1": {
                    **ACTIVE,
                    "counters": {
                        "symbol_error": 12,
                        "link_downed": 3,
                        "link_error_recovery": 0,
                        "port_rcv_errors": 0,
                        "local_link_integrity_errors": 0,
                        "excessive_buffer_overrun_errors": 0,
                    },
                }
            },
            "mlx5_1": {
                "1": {"state": "1: DOWN", "phys_state": "3: Disabled", "rate": "10 Gb/sec (4X SDR)", "link_layer": "InfiniBand", "counters": {}},
                "2": {"state": "2: INIT", "phys_state": "5: LinkUp", "rate": "200 Gb/sec (4X HDR)", "link_layer": "InfiniBand", "counters": {}},
            },
            "mlx5_2": {
                "1": {
                    "state": "4: ACTIVE \ufffd",
                    "phys_state": "5: LinkUp",
                    "rate": "400 Gb/sec (1X NDR)",
                    "link_layer": "Ethernet",
                    "counters": dict.fromkeys(doctor_probe.COUNTERS, 0),
                }
            },
        },
        "ibstat": IBSTAT,
        "perfquery": {"mlx5_0:1": PERFQUERY, "mlx5_1:2": PERFQUERY.replace("Lid 12", "Lid 14")},
    }
    assert [c[1:] for c in node.calls()] == [
        ["ibstat"],
        ["perfquery", "-C", "mlx5_0", "-P", "1"],
        ["perfquery", "-C", "mlx5_1", "-P", "1"],
        ["perfquery", "-C", "mlx5_1", "-P", "2"],
    ]


def test_a_port_whose_attributes_cannot_be_read_has_empty_ones(node):
    sysfs = node.ib_port("mlx5_0", "1", {}, {})
    found = doctor_probe.infiniband(module(), sysfs)
    assert found == {
        "sysfs": {"mlx5_0": {"1": {"state": "", "phys_state": "", "rate": "", "link_layer": "", "counters": {}}}},
        "ibstat": None,
        "perfquery": {},
    }


# --- the bounded command runner --------------------------------------------------------------------------------


def test_a_command_is_run_under_timeout_and_its_output_kept_to_the_last_512_kib(node):
    out = "".join(f"{n:07d}\n" for n in range(80000))  # 640000 characters
    err = "e" * 5000 + "the end\n"
    node.command("chronyc", {"-n tracking": (out, err, 3)})
    rc, stdout, stderr = doctor_probe._run(module(), ["chronyc", "-n", "tracking"], 7)
    assert (rc, stdout, stderr) == (3, out[-524288:], err[-4096:])
    assert node.calls() == [["7", "chronyc", "-n", "tracking"]]
    assert doctor_probe._run(module(), ["chronyc", "-n", "tracking"])[0] == 3 and node.calls()[-1][0] == "30"


def test_a_command_that_is_not_installed_is_not_run(node):
    assert doctor_probe._run(module(), ["nvidia-smi", "-L"]) == (127, "", "nvidia-smi: not installed")
    assert doctor_probe._run(module(), [str(node.root / "bin/python"), "-V"]) == (127, "", f"{node.root}/bin/python: not installed")
    assert node.calls() == []


def test_a_command_that_cannot_be_started_reads_as_126():
    class Refusing:
        def run_command(self, argv):
            raise PermissionError(13, "Permission denied", argv[0])

    assert doctor_probe._run(Refusing(), [sys.executable, "-V"]) == (126, "", "[Errno 13] Permission denied: 'timeout'")


def test_read_strips_and_gives_empty_for_what_cannot_be_read(tmp_path):
    (tmp_path / "rate").write_text("  400 Gb/sec (4X NDR)\n\n")
    assert doctor_probe._read(str(tmp_path / "rate")) == "400 Gb/sec (4X NDR)"
    assert doctor_probe._read(str(tmp_path / "absent")) == ""
    assert doctor_probe._read(str(tmp_path)) == ""  # a directory
