"""The node_facts module (plugins/modules/node_facts.py) to the letter: every row judge() returns (status, value and
the reason the operator reads, at and beside each threshold), the parsers of os-release, meminfo, nvidia-smi and the
RDMA sysfs tree, the write test (its file, its mode, its arithmetic), and main() end to end: the argv it runs, the
node and stable facts, problems and warnings, the local fact file (content, modes, unchanged content not rewritten,
check mode).

Stood in: the node's commands (shutil.which and AnsibleModule.run_command answer as nvidia-smi does), its files under
/etc, /proc and /sys (the module's open() and glob, and pci's sysfs scan, redirected into tmp_path), the clock of the
write test, the host name, kernel, CPU affinity and disk usage. Everything else is the module's real code."""

import json
import os
import stat
from collections import namedtuple
from pathlib import Path

import pytest

from ansible_collections.megaprov.cluster.plugins.modules import node_facts as facts
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules import utils as modules
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules.test_node_facts import H100, REQ, node

# ---- judge: every row, exactly


def rows_by_check(rows):
    return {r["check"]: (r["status"], r["value"], r["reason"]) for r in rows}


def test_a_healthy_dgx_gets_every_row_with_its_value_and_reason():
    assert facts.judge(node(), REQ) == [
        {"check": "os", "status": "pass", "value": "Ubuntu 22.04.4 LTS", "reason": "supported"},
        {"check": "cpus", "status": "pass", "value": 224, "reason": "ok"},
        {"check": "memory", "status": "pass", "value": "1953.1 GiB", "reason": "ok"},
        {"check": "disk", "status": "pass", "value": "28000.0 GB free in /raid", "reason": "ok"},
        {"check": "write speed", "status": "pass", "value": "5200.0 MB/s", "reason": "ok"},
        {"check": "gpus", "status": "pass", "value": "8 x NVIDIA H100 80GB HBM3", "reason": "driver 550.90.07"},
        {"check": "nvswitch", "status": "pass", "value": "4 NVSwitch(es)", "reason": "Fabric Manager is required on this node"},
        {"check": "nvlink", "status": "pass", "value": "144 active links", "reason": "ok"},
        {"check": "rdma", "status": "pass", "value": "mlx5_0/1 InfiniBand 400 Gb/sec (4X NDR)", "reason": "ok"},
    ]


EXACT = {**REQ, "min_cpus": 16, "min_memory_gb": 64, "min_disk_free_gb": 100, "min_write_mb_s": 200}


def test_values_exactly_at_each_threshold_pass():
    at = node(cpus=16, memory_mb=64 * 1024, disk={"path": "/scratch", "total_gb": 500, "free_gb": 100.0, "write_mb_s": 200})
    got = rows_by_check(facts.judge(at, EXACT))
    assert got["cpus"] == ("pass", 16, "ok")
    assert got["memory"] == ("pass", "64.0 GiB", "ok")
    assert got["disk"] == ("pass", "100.0 GB free in /scratch", "ok")
    assert got["write speed"] == ("pass", "200 MB/s", "ok")


def test_values_just_below_each_threshold_say_what_is_wrong():
    below = node(cpus=15, memory_mb=63 * 1024, disk={"path": "/scratch", "total_gb": 500, "free_gb": 99.9, "write_mb_s": 199.9})
    got = rows_by_check(facts.judge(below, EXACT))
    assert got["cpus"] == ("warn", 15, "fewer than 16 CPUs: data loading will starve the GPUs")
    assert got["memory"] == ("fail", "63.0 GiB", "below 64 GiB")
    assert got["disk"] == ("fail", "99.9 GB free in /scratch", "below 100 GB free: free space or point megaprov_scratch_dir elsewhere")
    assert got["write speed"] == ("warn", "199.9 MB/s", "below 200 MB/s: checkpoints and data loading will be slow")
    assert rows_by_check(facts.judge(below, {**EXACT, "write_below_min": "fail"}))["write speed"][0] == "fail"


def test_a_skipped_write_test_warns_not_measured():
    skipped = node(disk={"path": "/raid", "total_gb": 30000, "free_gb": 28000})
    assert rows_by_check(facts.judge(skipped, REQ))["write speed"] == ("warn", "not measured", "write test skipped (preflight_write_test_mb: 0)")


def test_os_names_are_compared_without_regard_to_case():
    assert rows_by_check(facts.judge(node(), {**REQ, "supported_os": ["Ubuntu 22.04"]}))["os"] == ("pass", "Ubuntu 22.04.4 LTS", "supported")


def test_an_untested_os_lists_the_tested_ones_and_falls_back_to_id_and_version():
    arch = node(os={"id": "arch", "version": "rolling", "name": ""})
    assert rows_by_check(facts.judge(arch, REQ))["os"] == ("warn", "arch rolling", "not a tested OS (debian 12, ubuntu 22.04)")
    no_list = {k: v for k, v in REQ.items() if k != "supported_os"}
    assert rows_by_check(facts.judge(node(), no_list))["os"] == ("warn", "Ubuntu 22.04.4 LTS", "not a tested OS ()")


def test_gpu_rows_for_each_case():
    assert rows_by_check(facts.judge(node(gpus=H100[:7]), REQ))["gpus"] == (
        "fail",
        "7 x NVIDIA H100 80GB HBM3",
        "expected 8 GPUs (megaprov_gpus_per_node): a GPU may have fallen off the bus",
    )
    assert rows_by_check(facts.judge(node(gpus=H100[:3]), {**REQ, "gpus_per_node": 0}))["gpus"] == (
        "pass",
        "3 x NVIDIA H100 80GB HBM3",
        "driver 550.90.07",
    )
    on_pci = node(gpus=[], pci_gpus=["0000:18:00.0", "0000:2a:00.0"], nvswitches=[], nvlinks=0)
    assert rows_by_check(facts.judge(on_pci, REQ))["gpus"] == (
        "warn",
        "2 NVIDIA GPU(s) on PCI",
        "no NVIDIA driver yet (nvidia-smi missing): the gpu stage installs it",
    )
    none = node(gpus=[], nvswitches=[], nvlinks=0)
    assert rows_by_check(facts.judge(none, REQ))["gpus"] == (
        "fail",
        "none",
        "no NVIDIA GPU found on a gpu_nodes host; set megaprov_gpu_expected: false if it is CPU-only",
    )


def test_a_node_not_expected_to_have_gpus_passes_with_or_without_them():
    cpu_only = {**REQ, "gpu_expected": False, "gpus_per_node": 0}
    assert rows_by_check(facts.judge(node(gpus=H100[:2]), cpu_only))["gpus"] == ("pass", "2", "GPUs present, not required")
    assert rows_by_check(facts.judge(node(gpus=[], nvswitches=[], nvlinks=0), cpu_only))["gpus"] == ("pass", "no GPU", "declared GPU-less")


def test_nvswitch_and_nvlink_rows_appear_only_where_they_mean_something():
    single = facts.judge(node(gpus=H100[:1], nvswitches=[], nvlinks=0), {**REQ, "gpus_per_node": 1})
    assert [r["check"] for r in single] == ["os", "cpus", "memory", "disk", "write speed", "gpus", "rdma"]
    pair = rows_by_check(facts.judge(node(gpus=H100[:2], nvswitches=[], nvlinks=0), {**REQ, "gpus_per_node": 2}))
    assert "nvswitch" not in pair
    assert pair["nvlink"] == ("warn", "0 active links", "no active NVLink between the GPUs: intra-node all-reduce goes over PCIe")
    linked = rows_by_check(facts.judge(node(gpus=H100[:2], nvswitches=["a", "b"], nvlinks=12), {**REQ, "gpus_per_node": 2}))
    assert linked["nvlink"] == ("pass", "12 active links", "ok")
    assert linked["nvswitch"] == ("pass", "2 NVSwitch(es)", "Fabric Manager is required on this node")


def port(n, state, rate="400 Gb/sec (4X NDR)", layer="InfiniBand"):
    return {"port": n, "state": state, "phys_state": "", "rate": rate, "link_layer": layer}


def test_rdma_lists_only_the_active_ports_of_every_hca():
    hcas = [
        {"name": "mlx5_0", "type": "", "fw": "", "ports": [port(1, "DOWN"), port(2, "ACTIVE", "100 Gb/sec", "Ethernet")]},
        {"name": "mlx5_1", "type": "", "fw": "", "ports": [port(1, "ACTIVE")]},
    ]
    assert rows_by_check(facts.judge(node(hcas=hcas), REQ))["rdma"] == (
        "pass",
        "mlx5_0/2 Ethernet 100 Gb/sec, mlx5_1/1 InfiniBand 400 Gb/sec (4X NDR)",
        "ok",
    )
    down = [{"name": n, "type": "", "fw": "", "ports": [port(1, "INIT")]} for n in ("mlx5_0", "mlx5_1")]
    assert rows_by_check(facts.judge(node(hcas=down), REQ))["rdma"] == (
        "warn",
        "2 HCA(s), no ACTIVE port",
        "check cabling and the subnet manager (ibstat)",
    )
    assert rows_by_check(facts.judge(node(hcas=[]), REQ))["rdma"] == ("warn", "none", "no RDMA device: NCCL will use TCP sockets")


# ---- parsers


def test_os_release_reads_quoted_values_with_equals_signs_and_falls_back_to_name():
    text = '# comment\n\nNAME="Rocky Linux"\nID="rocky"\n VERSION_ID = "9.4" \nBUILD_ID=a=b\nnot a pair\n'
    assert facts.os_release(text) == {"id": "rocky", "version": "9.4", "name": "Rocky Linux"}
    assert facts.os_release('PRETTY_NAME="x=y z"\nNAME=other\n')["name"] == "x=y z"
    assert facts.os_release("") == {"id": "", "version": "", "name": ""}
    # only the quotes are stripped: XCP-ng's name starts with an X
    assert facts.os_release('NAME="XCP-ng"\nID="xenenterprise"\nVERSION_ID="8.2.1"\n')["name"] == "XCP-ng"


def test_meminfo_without_memtotal_is_zero_megabytes():
    assert facts.meminfo_mb("MemFree: 1024 kB\n") == 0
    assert facts.meminfo_mb("MemFree: 1 kB\nMemTotal:  2097152 kB\n") == 2048


def test_nvidia_smi_rows_with_odd_memory_or_a_non_gpu_line_between():
    text = (
        "0, NVIDIA A100-SXM4-80GB, 81920.0, 535.104.05, 00000000:07:00.0, Enabled\n"
        "Unable to determine the device handle, x, y, z, w, v\n"
        "1, NVIDIA A100-SXM4-80GB, [N/A], 535.104.05, 00000000:0F:00.0, Enabled\n"
    )
    assert facts.parse_nvidia_smi(text) == [
        {"index": 0, "model": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920, "driver": "535.104.05", "bus_id": "00000000:07:00.0"},
        {"index": 1, "model": "NVIDIA A100-SXM4-80GB", "memory_mib": 0, "driver": "535.104.05", "bus_id": "00000000:0F:00.0"},
    ]


def test_a_link_reported_inactive_is_not_counted_even_with_a_speed():
    text = "GPU 0: NVIDIA H100\n\t Link 0: 26.562 GB/s\n\t Link 1: 0 GB/s <Inactive>\n\t Link 2: 26.562 GB/s\n"
    assert facts.count_nvlinks(text) == 2


def sysfs_file(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value + "\n")


def ib_tree(root: Path) -> None:
    for name, hca, fw, ports in (
        ("mlx5_1", "MT4129", "28.39.1002", {"1": ("1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)", "InfiniBand")}),
        (
            "mlx5_0",
            "MT4123",
            "20.31.1014",
            {
                "2": ("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "Ethernet"),
                "1": ("4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", "InfiniBand"),
            },
        ),
    ):
        sysfs_file(root / name / "hca_type", hca)
        sysfs_file(root / name / "fw_ver", fw)
        for number, (state, phys, rate, layer) in ports.items():
            for attr, value in (("state", state), ("phys_state", phys), ("rate", rate), ("link_layer", layer)):
                sysfs_file(root / name / "ports" / number / attr, value)


IB_HCAS = [
    {
        "name": "mlx5_0",
        "type": "MT4123",
        "fw": "20.31.1014",
        "ports": [
            {"port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"},
            {"port": 2, "state": "ACTIVE", "phys_state": "LinkUp", "rate": "200 Gb/sec (4X HDR)", "link_layer": "Ethernet"},
        ],
    },
    {
        "name": "mlx5_1",
        "type": "MT4129",
        "fw": "28.39.1002",
        "ports": [{"port": 1, "state": "DOWN", "phys_state": "Disabled", "rate": "10 Gb/sec (4X SDR)", "link_layer": "InfiniBand"}],
    },
]


def test_rdma_devices_read_type_firmware_and_every_port_state(tmp_path):
    ib_tree(tmp_path)
    assert facts.rdma_devices(str(tmp_path)) == IB_HCAS


def test_port_states_without_a_number_with_a_space_or_unreadable_are_read_as_they_are(tmp_path):
    sysfs_file(tmp_path / "rxe0" / "ports" / "1" / "state", "ACTIVE")
    sysfs_file(tmp_path / "rxe0" / "ports" / "1" / "phys_state", "7: Phy Test")
    (tmp_path / "rxe0" / "ports" / "2").mkdir()
    assert facts.rdma_devices(str(tmp_path))[0]["ports"] == [
        {"port": 1, "state": "ACTIVE", "phys_state": "Phy Test", "rate": "", "link_layer": ""},
        {"port": 2, "state": "", "phys_state": "", "rate": "", "link_layer": ""},
    ]


# ---- the write test


class Clock:
    """time.monotonic: `start`, then `start + elapsed`; at the second reading it notes the test file as it is then."""

    def __init__(self, directory, elapsed):
        self.directory, self.elapsed, self.readings, self.seen = directory, elapsed, 0, {}

    def __call__(self):
        self.readings += 1
        if self.readings == 1:
            return 1000.0
        for name in os.listdir(self.directory):
            st = os.stat(os.path.join(self.directory, name))
            self.seen[name] = (st.st_size, stat.S_IMODE(st.st_mode))
        return 1000.0 + self.elapsed


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_the_write_test_writes_whole_8_mib_blocks_to_a_private_file_and_reports_mb_per_s(tmp_path, monkeypatch, umask_022):
    clock = Clock(tmp_path, 2.0)
    monkeypatch.setattr(facts.time, "monotonic", clock)
    # 16 MiB in 2 s: 16,777,216 B / 1e6 / 2 = 8.388608 MB/s
    assert facts.write_throughput(str(tmp_path), 16) == 8.4
    assert clock.seen == {f".megaprov-preflight-{os.getpid()}": (16 << 20, 0o600)}
    assert list(tmp_path.iterdir()) == []


def test_the_write_test_writes_at_least_one_block_and_rounds_to_a_tenth(tmp_path, monkeypatch, umask_022):
    clock = Clock(tmp_path, 0.3)
    monkeypatch.setattr(facts.time, "monotonic", clock)
    assert facts.write_throughput(str(tmp_path), 4) == 28.0  # 8,388,608 B / 0.3 s = 27.96 MB/s
    assert list(clock.seen.values()) == [(8 << 20, 0o600)]
    clock = Clock(tmp_path, 1.0)
    monkeypatch.setattr(facts.time, "monotonic", clock)
    assert facts.write_throughput(str(tmp_path), 17) == 16.8  # 17 // 8 = 2 blocks
    assert list(clock.seen.values()) == [(16 << 20, 0o600)]


def test_a_stale_test_file_is_truncated_and_no_time_at_all_is_a_microsecond(tmp_path, monkeypatch):
    stale = tmp_path / (f".megaprov-preflight-{os.getpid()}")
    stale.write_bytes(b"x" * (20 << 20))
    clock = Clock(tmp_path, 0.0)
    monkeypatch.setattr(facts.time, "monotonic", clock)
    assert facts.write_throughput(str(tmp_path), 8) == 8388608.0
    assert [size for size, mode in clock.seen.values()] == [8 << 20]
    assert not stale.exists()


def test_a_full_disk_ends_the_write_test_with_its_error_and_removes_the_file(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(facts.os, "write", full)
    with pytest.raises(OSError, match="No space left on device"):
        facts.write_throughput(str(tmp_path), 8)
    assert list(tmp_path.iterdir()) == []


# ---- main(), with the node's commands and files stood in

INVENTORY_ANSWER = "".join(f"{i}, NVIDIA H100 80GB HBM3, 81559, 550.90.07, 00000000:{0x18 + i:02X}:00.0, Enabled\n" for i in range(2))
NVLINK_ANSWER = (
    "GPU 0: NVIDIA H100\n\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s\nGPU 1: NVIDIA H100\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n"
)
TOPO_ANSWER = "\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n"
OS_RELEASE = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\nID=debian\n'
MEMINFO = "MemTotal:       263856128 kB\nMemFree:        1000 kB\n"
Usage = namedtuple("Usage", "total used free")
NODE_REQ = {**EXACT, "supported_os": ["debian 12"], "gpus_per_node": 2}


class Node:
    """The node as main() sees it: files under /etc, /proc and /sys in tmp_path, commands answered from `answers`."""

    def __init__(self, tmp_path, monkeypatch, answers, commands=("nvidia-smi",)):
        self.root = tmp_path / "node"
        self.calls = []
        files = {"/etc/os-release": OS_RELEASE, "/proc/meminfo": MEMINFO}
        for path, text in files.items():
            sysfs_file(self.root / path.lstrip("/"), text.rstrip("\n"))
        real_open, real_glob = open, facts.glob.glob

        def node_path(path):
            path = str(path)
            return str(self.root) + path if path.startswith(("/etc/", "/proc/", "/sys/")) else path

        def nvidia_functions(devices_dir):
            assert devices_dir == "/sys/bus/pci/devices"
            return real_functions(node_path(devices_dir))

        def run_command(module, args, **kwargs):
            self.calls.append(list(args))
            return answers.get(" ".join(args[:2]), (127, "", "not found"))

        real_functions = facts.pci.nvidia_functions
        monkeypatch.setattr(facts, "open", lambda path, *a, **k: real_open(node_path(path), *a, **k), raising=False)
        monkeypatch.setattr(facts.glob, "glob", lambda pattern, **k: real_glob(node_path(pattern), **k))
        monkeypatch.setattr(facts.pci, "nvidia_functions", nvidia_functions)
        monkeypatch.setattr(facts.shutil, "which", lambda name: "/usr/bin/" + name if name in commands else None)
        monkeypatch.setattr(facts.shutil, "disk_usage", lambda path: Usage(3_840_150_000_001 + 0 * os.stat(path).st_size, 0, 1_234_550_000_001))
        monkeypatch.setattr(facts.AnsibleModule, "run_command", run_command)
        monkeypatch.setattr(facts.platform, "node", lambda: "gpu1")
        monkeypatch.setattr(facts.platform, "release", lambda: "6.1.0-28-amd64")
        monkeypatch.setattr(facts.os, "sched_getaffinity", lambda pid: set(range(32)))
        monkeypatch.setattr(facts.time, "monotonic", Clock(tmp_path, 0.5))


QUERY = ["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version,pci.bus_id,persistence_mode", "--format=csv,noheader,nounits"]
GPU_ANSWERS = {
    " ".join(QUERY[:2]): (0, INVENTORY_ANSWER, ""),
    "nvidia-smi nvlink": (0, NVLINK_ANSWER, ""),
    "nvidia-smi topo": (0, TOPO_ANSWER, ""),
}
TWO_H100 = [
    {"index": i, "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "driver": "550.90.07", "bus_id": f"00000000:{0x18 + i:02X}:00.0"}
    for i in range(2)
]


def run(args, capsys, check_mode=False):
    if check_mode:
        args = {**args, "_ansible_check_mode": True}
    return modules.run_module(facts.main, args, capsys)


def test_a_gpu_node_end_to_end(tmp_path, monkeypatch, capsys):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    stand_in = Node(tmp_path, monkeypatch, GPU_ANSWERS)
    ib_tree(stand_in.root / "sys" / "class" / "infiniband")
    sysfs_file(stand_in.root / "sys/bus/pci/devices/0000:18:00.0/vendor", "0x10de")
    sysfs_file(stand_in.root / "sys/bus/pci/devices/0000:18:00.0/class", "0x030200")
    sysfs_file(stand_in.root / "sys/bus/pci/devices/0000:05:00.0/vendor", "0x10de")
    sysfs_file(stand_in.root / "sys/bus/pci/devices/0000:05:00.0/class", "0x068000")
    rc, out = run({"scratch_dir": str(scratch), "write_test_mb": 8, "requirements": NODE_REQ}, capsys)
    assert rc == 0
    assert stand_in.calls == [QUERY, ["nvidia-smi", "nvlink", "--status"], ["nvidia-smi", "topo", "-m"]]
    disk = {"path": str(scratch), "total_gb": 3840.2, "free_gb": 1234.6}
    stable = {
        "hostname": "gpu1",
        "os": {"id": "debian", "version": "12", "name": "Debian GNU/Linux 12 (bookworm)"},
        "kernel": "6.1.0-28-amd64",
        "cpus": 32,
        "memory_mb": 257672,
        "gpus": TWO_H100,
        "pci_gpus": ["0000:18:00.0"],
        "nvswitches": ["0000:05:00.0"],
        "nvlinks": 3,
        "gpu_topology": TOPO_ANSWER,
        "hcas": IB_HCAS,
    }
    assert out["node"] == {**stable, "disk": {**disk, "write_mb_s": 16.8}}
    assert out["stable"] == {**stable, "disk": {"path": str(scratch), "total_gb": 3840.2}}
    assert out["checks"] == facts.judge(out["node"], NODE_REQ)
    assert out["problems"] == []
    assert out["warnings_list"] == ["write speed: below 200 MB/s: checkpoints and data loading will be slow (16.8 MB/s)"]
    assert out["changed"] is False


def test_a_node_without_a_driver_runs_no_command_and_reports_problems_and_warnings(tmp_path, monkeypatch, capsys):
    stand_in = Node(tmp_path, monkeypatch, GPU_ANSWERS, commands=())
    rc, out = run({"scratch_dir": str(tmp_path), "write_test_mb": 0, "requirements": {**NODE_REQ, "min_memory_gb": 512}}, capsys)
    assert rc == 0 and stand_in.calls == []
    assert out["node"]["gpus"] == [] and out["node"]["nvlinks"] == 0 and out["node"]["gpu_topology"] == "" and out["node"]["hcas"] == []
    assert out["node"]["pci_gpus"] == [] and out["node"]["nvswitches"] == []
    assert "write_mb_s" not in out["node"]["disk"]
    assert out["problems"] == [
        "memory: below 512 GiB (251.6 GiB)",
        "gpus: no NVIDIA GPU found on a gpu_nodes host; set megaprov_gpu_expected: false if it is CPU-only (none)",
    ]
    assert out["warnings_list"] == [
        "write speed: write test skipped (preflight_write_test_mb: 0) (not measured)",
        "rdma: no RDMA device: NCCL will use TCP sockets (none)",
    ]


def test_a_failing_nvidia_smi_is_no_gpu_and_its_other_queries_are_not_run(tmp_path, monkeypatch, capsys):
    stand_in = Node(tmp_path, monkeypatch, {" ".join(QUERY[:2]): (9, INVENTORY_ANSWER, "NVIDIA-SMI has failed")})
    rc, out = run({"scratch_dir": str(tmp_path), "write_test_mb": 0, "requirements": NODE_REQ}, capsys)
    assert stand_in.calls == [QUERY]
    assert out["node"]["gpus"] == [] and out["node"]["gpu_topology"] == ""


def test_nvlink_and_topology_answers_that_fail_are_empty(tmp_path, monkeypatch, capsys):
    answers = {**GPU_ANSWERS, "nvidia-smi nvlink": (1, NVLINK_ANSWER, ""), "nvidia-smi topo": (1, TOPO_ANSWER, "")}
    Node(tmp_path, monkeypatch, answers)
    rc, out = run({"scratch_dir": str(tmp_path), "write_test_mb": 0, "requirements": NODE_REQ}, capsys)
    assert out["node"]["gpus"] == TWO_H100 and out["node"]["nvlinks"] == 0 and out["node"]["gpu_topology"] == ""


def test_a_missing_scratch_directory_is_refused_with_the_host_name(tmp_path, monkeypatch, capsys):
    Node(tmp_path, monkeypatch, GPU_ANSWERS)
    rc, out = run({"scratch_dir": str(tmp_path / "nope"), "requirements": NODE_REQ}, capsys)
    assert rc == 1
    assert out["msg"] == f"preflight_scratch_dir {tmp_path / 'nope'} does not exist on gpu1; create it or set megaprov_scratch_dir"


def test_the_stable_facts_are_written_once_as_a_readable_local_fact(tmp_path, monkeypatch, capsys, umask_022):
    Node(tmp_path, monkeypatch, GPU_ANSWERS)
    fact = tmp_path / "etc" / "ansible" / "facts.d" / "megaprov_preflight.fact"
    args = {"scratch_dir": str(tmp_path), "write_test_mb": 8, "requirements": NODE_REQ, "facts_path": str(fact)}

    rc, out = run(args, capsys, check_mode=True)
    assert rc == 0 and out["changed"] is True and not fact.parent.exists()

    rc, out = run(args, capsys)
    assert out["changed"] is True
    assert fact.read_text() == json.dumps(out["stable"], indent=2, sort_keys=True) + "\n"
    assert stat.S_IMODE(fact.stat().st_mode) == 0o644 and stat.S_IMODE(fact.parent.stat().st_mode) == 0o755
    assert sorted(os.listdir(fact.parent)) == ["megaprov_preflight.fact"]
    inode = fact.stat().st_ino

    rc, again = run(args, capsys)  # the write speed moved; the stable facts did not
    assert again["changed"] is False and fact.stat().st_ino == inode
    rc, again = run(args, capsys, check_mode=True)
    assert again["changed"] is False


def test_changed_facts_replace_the_file(tmp_path, monkeypatch, capsys):
    Node(tmp_path, monkeypatch, GPU_ANSWERS)
    fact = tmp_path / "preflight.fact"
    fact.write_text('{"hostname": "old"}\n')
    rc, out = run({"scratch_dir": str(tmp_path), "write_test_mb": 0, "requirements": NODE_REQ, "facts_path": str(fact)}, capsys)
    assert out["changed"] is True and json.loads(fact.read_text()) == out["stable"]
    assert out["stable"]["hostname"] == "gpu1"


def test_the_fact_directory_is_made_0755_whatever_the_umask_and_the_file_is_written_beside_it(tmp_path, monkeypatch, capsys):
    Node(tmp_path, monkeypatch, GPU_ANSWERS)
    fact = tmp_path / "facts.d" / "megaprov_preflight.fact"
    monkeypatch.setattr(facts.tempfile, "tempdir", str(tmp_path / "no-tmp"))
    old = os.umask(0)
    try:
        rc, out = run({"scratch_dir": str(tmp_path), "write_test_mb": 0, "requirements": NODE_REQ, "facts_path": str(fact)}, capsys)
    finally:
        os.umask(old)
    assert rc == 0 and json.loads(fact.read_text()) == out["stable"]
    assert stat.S_IMODE(fact.parent.stat().st_mode) == 0o755 and os.listdir(fact.parent) == ["megaprov_preflight.fact"]


def test_the_gpu_row_names_the_first_gpu_of_a_mixed_node():
    mixed = [dict(H100[0], model="NVIDIA A100-SXM4-80GB", driver="535.104.05"), H100[1]]
    assert rows_by_check(facts.judge(node(gpus=mixed), {**REQ, "gpus_per_node": 2}))["gpus"] == (
        "pass",
        "2 x NVIDIA A100-SXM4-80GB",
        "driver 535.104.05",
    )
    assert rows_by_check(facts.judge(node(gpus=mixed), REQ))["gpus"][1] == "2 x NVIDIA A100-SXM4-80GB"


def test_arguments_as_the_playbook_hands_them_are_converted(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    Node(tmp_path, monkeypatch, GPU_ANSWERS)
    (tmp_path / "scratch").mkdir()
    args = {"scratch_dir": "~/scratch", "write_test_mb": "0", "requirements": json.dumps(NODE_REQ), "facts_path": "~/f/p.fact"}
    rc, out = run(args, capsys)
    assert rc == 0 and out["node"]["disk"] == {"path": str(tmp_path / "scratch"), "total_gb": 3840.2, "free_gb": 1234.6}
    assert out["checks"] == facts.judge(out["node"], NODE_REQ)
    assert json.loads((tmp_path / "f" / "p.fact").read_text()) == out["stable"]


@pytest.mark.parametrize("missing", ["scratch_dir", "requirements"])
def test_the_scratch_directory_and_the_requirements_are_required(tmp_path, capsys, missing):
    args = {"scratch_dir": str(tmp_path), "requirements": NODE_REQ}
    del args[missing]
    rc, out = run(args, capsys)
    assert rc == 1 and out["msg"] == f"missing required arguments: {missing}"


def test_the_write_test_runs_by_default_with_256_mb(tmp_path, monkeypatch, capsys):
    Node(tmp_path, monkeypatch, GPU_ANSWERS)
    written = []
    monkeypatch.setattr(facts, "write_throughput", lambda directory, megabytes: written.append((directory, megabytes)) or 1234.5)
    rc, out = run({"scratch_dir": str(tmp_path), "requirements": NODE_REQ}, capsys)
    assert written == [(str(tmp_path), 256)] and out["node"]["disk"]["write_mb_s"] == 1234.5
    rc, out = run({"scratch_dir": str(tmp_path), "write_test_mb": 1, "requirements": NODE_REQ}, capsys)
    assert written[1:] == [(str(tmp_path), 1)] and out["node"]["disk"]["write_mb_s"] == 1234.5
