"""megaprov doctor's cluster health (megaprov/ops/doctor/health.py), held to what an operator reads: the exact evidence,
cause and node of each finding, which results count as failed, which nodes drain and why, and how a run of the play
becomes readings (benchmarks/bench_mutation.py's survivors of the judgement, the play's wrapper and the drain)."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest

from megaprov.cluster import inventory as inv
from megaprov.cluster import runner
from megaprov.errors import HostsUnreachable, RunFailed, UsageError
from megaprov.ops.doctor import health
from megaprov.ops.doctor.findings import CODES, Report, finding
from megaprov.output import SILENT
from tests.helpers.plays import Play
from tests.unit.ops.test_doctor_health import FACTS, REMAP_FIELDS, SMI_FIELDS, codes, one, probe, remap_rows, smi, smi_rows


def said(found: list[Any]) -> list[tuple[str, str, str, str]]:
    return [(f.code, f.node, f.severity, f.evidence) for f in found]


def facts(**over: Any) -> health.ClusterFacts:
    return health.ClusterFacts(**{**vars(copy.deepcopy(FACTS)), **over})


# ---- GPUs


def test_a_gpu_node_with_no_gpu_at_all_is_an_error_on_that_node():
    (f,) = one(probe(nvidia_smi=None, pci_gpus=0))
    assert said([f]) == [("GPU_COUNT", "gpu1", "error", "no NVIDIA GPU on the PCI bus and no nvidia-smi")]
    assert f.cause == "a GPU node shows no NVIDIA GPU at all"
    # megaprov_gpu_expected unset: a GPU node expects its GPUs
    assert codes(one(probe(nvidia_smi=None, pci_gpus=0), facts=facts(gpu_expected={}))) == ["GPU_COUNT"]


def test_a_node_without_gpus_says_why_they_were_not_checked():
    (f,) = one(probe(nvidia_smi=None, pci_gpus=0), facts=facts(gpu_expected={"gpu1": False}))
    assert said([f]) == [("GPU_CHECKS_SKIPPED", "gpu1", "info", "no NVIDIA GPU on the PCI bus (megaprov_gpu_expected: false)")]
    (f,) = one(probe(nvidia_smi=None, pci_gpus=0), facts=facts(gpu_nodes=["gpu2"]))
    assert said([f]) == [("GPU_CHECKS_SKIPPED", "gpu1", "info", "no NVIDIA GPU on the PCI bus (not a GPU node)")]


def test_gpus_nvidia_smi_lists_without_the_pci_count_are_judged():
    # the probe found no GPU on the bus (a VM, lspci missing) but nvidia-smi answers for all eight: healthy
    assert one(probe(pci_gpus=0)) == []


def test_a_driver_that_fails_names_its_last_words_and_the_fix():
    stderr = "first line of the error\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    (f,) = one(probe(nvidia_smi={"rc": 9, "stdout": "", "stderr": stderr, "fields": SMI_FIELDS}))
    assert said([f]) == [
        (
            "GPU_COUNT",
            "gpu1",
            "error",
            "8 NVIDIA GPU(s) on the PCI bus; nvidia-smi: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        )
    ]
    assert f.cause == "the driver does not answer for the GPUs on the bus (not loaded, or a GPU hung it)"
    assert f.fix == "run `megaprov bootstrap -i INV --tags gpu` (it loads or installs the driver); reboot if nvidia-smi hangs"
    # a result without an exit status is no answer; one without stderr says it failed
    (f,) = one(probe(nvidia_smi={"stdout": smi_rows(), "fields": SMI_FIELDS}))
    assert f.evidence == "8 NVIDIA GPU(s) on the PCI bus; nvidia-smi: failed"
    (f,) = one(probe(nvidia_smi=None))
    assert f.evidence == "8 NVIDIA GPU(s) on the PCI bus; nvidia-smi: nvidia-smi is not installed"


def test_missing_gpus_name_both_counts_and_the_inventory_setting():
    seven = "\n".join(smi_rows().splitlines()[:7])
    (f,) = one(probe(nvidia_smi=smi(seven)))
    assert said([f]) == [("GPU_COUNT", "gpu1", "error", "nvidia-smi lists 7 GPU(s); PCI bus 8, inventory megaprov_gpus_per_node 8")]
    (f,) = one(probe(nvidia_smi=smi(seven)), facts=facts(gpus_per_node={}))
    assert f.evidence == "nvidia-smi lists 7 GPU(s); PCI bus 8, inventory megaprov_gpus_per_node unset"
    # the inventory's count alone: the bus shows none, nvidia-smi lists none
    assert one(probe(nvidia_smi=smi(""), pci_gpus=0), facts=facts(gpus_per_node={})) == []


def test_a_remapped_rows_answer_that_failed_is_not_read():
    pending = remap_rows(pending=2)
    failed = {**smi(smi_rows()), "remapped": {"rc": 1, "stdout": pending, "fields": REMAP_FIELDS}}
    assert one(probe(nvidia_smi=failed)) == []
    no_status = {**smi(smi_rows()), "remapped": {"stdout": pending, "fields": REMAP_FIELDS}}
    assert one(probe(nvidia_smi=no_status)) == []
    read = one(probe(nvidia_smi=smi(smi_rows(), pending)))
    assert said(read) == [("GPU_ROW_REMAP_PENDING", "gpu1", "warn", "GPU 2 (00000000:1A:00.0): remapped_rows.pending = Yes")]


def test_each_gpu_fault_is_said_on_its_node_with_its_values():
    rows = smi_rows().splitlines()
    rows[3] = rows[3].replace("HBM3, 0, 1", "HBM3, 2, 1")
    rows[6] = rows[6].replace("1, 5, 16, 16", "1, 5, 8, 16")
    found = one(probe(nvidia_smi=smi("\n".join(rows), remap_rows(pending=5, failed=7))))
    assert sorted(said(found)) == [
        ("GPU_ECC", "gpu1", "error", "GPU 3 (00000000:1B:00.0): ecc.errors.uncorrected.volatile.total = 2"),
        ("GPU_PCIE_DEGRADED", "gpu1", "warn", "GPU 6 (00000000:1E:00.0): PCIe x8 of x16 (gen 1 of 5)"),
        ("GPU_ROW_REMAP_FAILED", "gpu1", "error", "GPU 7 (00000000:1F:00.0): remapped_rows.failure = Yes"),
        ("GPU_ROW_REMAP_PENDING", "gpu1", "warn", "GPU 5 (00000000:1D:00.0): remapped_rows.pending = Yes"),
    ]
    # a failed remap is the finding; the pending one that comes with it is not said twice
    both = "\n".join(f"00000000:{0x18 + i:02X}:00.0, Yes, {'Yes' if i == 0 else 'No'}" for i in range(8))
    found = one(probe(nvidia_smi=smi(smi_rows(), both)))
    assert [(f.code, f.evidence.split(":")[0]) for f in found][:2] == [
        ("GPU_ROW_REMAP_FAILED", "GPU 0 (00000000"),
        ("GPU_ROW_REMAP_PENDING", "GPU 1 (00000000"),
    ]


# ---- kernel log


OOM_KILL = "2026-12-02T10:00:00+0000 gpu1 kernel: Out of memory: Killed process 4242 (python) total-vm:1kB"
XID = "2026-12-02T10:00:01+0000 gpu1 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=2811, name=python, GPU has fallen off the bus."
ECC = "2026-12-02T10:00:02+0000 gpu1 kernel: CUDA error: uncorrectable ECC error encountered"
CUDA_OOM = "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB"


def kernel(*lines: str, **over: Any) -> dict[str, Any]:
    return {"source": "journalctl -k -b", "rc": 0, "readable": True, "lines": list(lines), **over}


def test_the_kernel_log_keeps_xids_ecc_and_oom_kills_and_a_kill_is_a_warning():
    found = one(probe(kernel=kernel(OOM_KILL, XID, ECC, CUDA_OOM)))
    assert sorted((f.code, f.node, f.severity, f.source, f.line) for f in found) == [
        ("GPU_ECC", "gpu1", "error", "journalctl -k -b on gpu1", 3),
        ("GPU_XID", "gpu1", "error", "journalctl -k -b on gpu1", 2),
        ("RANK_OOM_KILLED", "gpu1", "warn", "journalctl -k -b on gpu1", 1),
    ]
    (kill,) = [f for f in found if f.code == "RANK_OOM_KILLED"]
    (scanned,) = [f for f in health.signatures.scan([OOM_KILL], health.signatures.Context("x", "gpu1")) if f.code == "RANK_OOM_KILLED"]
    assert (kill.evidence, kill.cause, kill.fix) == (scanned.evidence, scanned.cause, CODES["RANK_OOM_KILLED"].fix) and kill.evidence


def test_a_kernel_line_names_its_node_from_the_probe_and_the_source_defaults():
    found = one(probe(kernel={"readable": True, "lines": ["[ 12.5] NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=python, x"]}))
    assert [(f.code, f.node, f.source) for f in found] == [("GPU_XID", "gpu1", "kernel log on gpu1")]


def test_an_unreadable_kernel_log_says_where_and_why_on_gpu_nodes_only():
    unreadable = kernel(readable=False, error="Operation not permitted", source="dmesg")
    assert said(one(probe(kernel=unreadable))) == [("KERNEL_LOG_UNREADABLE", "gpu1", "warn", "dmesg: Operation not permitted")]
    assert said(one(probe(kernel={"readable": False}))) == [("KERNEL_LOG_UNREADABLE", "gpu1", "warn", "kernel log: not readable")]
    assert codes(one(probe(kernel={"readable": False}), facts=facts(gpu_expected={}))) == ["KERNEL_LOG_UNREADABLE"]
    assert one(probe(kernel={"readable": False}), facts=facts(gpu_nodes=["gpu2"])) == []
    assert one(probe(kernel={"readable": False}), facts=facts(gpu_expected={"gpu1": False})) == []
    # a probe that does not say is taken as read
    assert codes(one(probe(kernel={"lines": [XID]}))) == ["GPU_XID"]


# ---- InfiniBand


def sysfs_port(state: str, rate: str, layer: str = "InfiniBand", **counters: int) -> dict[str, Any]:
    return {"state": state, "phys_state": "5: LinkUp", "rate": rate, "link_layer": layer, "counters": counters}


def test_ib_ports_are_read_from_ibstat_where_the_probe_ran_it():
    ibstat = "CA 'mlx5_4'\n\tPort 1:\n\t\tState: Down\n\t\tPhysical state: Disabled\n\t\tRate: 400\n"  # no link layer: InfiniBand
    ib = {"ibstat": ibstat, "perfquery": {}, "sysfs": {"mlx5_0": {"1": sysfs_port("4: ACTIVE", "400 Gb/sec")}}}
    assert said(one(probe(infiniband=ib))) == [("IB_PORT_DOWN", "gpu1", "error", "mlx5_4 port 1: State Down, Physical state Disabled")]


def test_ib_ports_down_rate_and_layer():
    sysfs = {
        "mlx5_0": {"1": sysfs_port("4: ACTIVE", "400 Gb/sec (4X NDR)")},
        "mlx5_1": {"1": {"link_layer": "InfiniBand"}},  # nothing said: state and physical state unknown
        "mlx5_2": {"1": sysfs_port("4: ACTIVE", "200 Gb/sec (4X HDR)")},
        "mlx5_3": {"1": sysfs_port("1: DOWN", "100 Gb/sec", layer="Ethernet")},  # RoCE: not judged
        "mlx5_5": {"1": sysfs_port("4: ACTIVE", "")},  # no rate: not compared
    }
    found = one(probe(infiniband={"ibstat": None, "perfquery": {}, "sysfs": sysfs}))
    assert said(found) == [
        ("IB_PORT_DOWN", "gpu1", "error", "mlx5_1 port 1: State ?, Physical state ?"),
        ("IB_PORT_RATE", "gpu1", "warn", "mlx5_2 port 1: Rate 200 Gb/s, the node's fastest port 400 Gb/s"),
    ]


def test_a_port_slower_than_one_gbps_is_compared_too():
    sysfs = {"mlx5_0": {"1": sysfs_port("4: ACTIVE", "0.5 Gb/sec")}, "mlx5_1": {"1": sysfs_port("4: ACTIVE", "0.8 Gb/sec")}}
    found = one(probe(infiniband={"sysfs": sysfs}))
    assert said(found) == [("IB_PORT_RATE", "gpu1", "warn", "mlx5_0 port 1: Rate 0.5 Gb/s, the node's fastest port 0.8 Gb/s")]


def test_every_slow_port_is_named():
    sysfs = {
        "mlx5_0": {"1": sysfs_port("4: ACTIVE", "100 Gb/sec")},
        "mlx5_1": {"1": sysfs_port("4: ACTIVE", "200 Gb/sec")},
        "mlx5_2": {"1": sysfs_port("4: ACTIVE", "400 Gb/sec")},
    }
    assert [f.evidence.split(":")[0] for f in one(probe(infiniband={"sysfs": sysfs}))] == ["mlx5_0 port 1", "mlx5_1 port 1"]


def test_counters_that_rose_are_said_with_their_growth_and_new_counters_count_from_zero():
    ib = {"sysfs": {"mlx5_0": {"1": sysfs_port("4: ACTIVE", "400 Gb/sec", symbol_error=5, link_downed=1, port_rcv_errors=3)}}}
    before = {"gpu1": {"mlx5_0:1": {"SymbolErrorCounter": 2, "LinkDownedCounter": 1}}}
    (f,) = one(probe(infiniband=ib), facts=facts(previous_counters=before))
    assert said([f]) == [
        ("IB_ERRORS_RISING", "gpu1", "warn", "mlx5_0:1: PortRcvErrors +3 (now 3), SymbolErrorCounter +3 (now 5) since the last doctor run")
    ]
    same = {"gpu1": {"mlx5_0:1": {"SymbolErrorCounter": 5, "LinkDownedCounter": 1, "PortRcvErrors": 3}}}
    assert one(probe(infiniband=ib), facts=facts(previous_counters=same)) == []
    one_up = {"sysfs": {"mlx5_0": {"1": sysfs_port("4: ACTIVE", "400 Gb/sec", symbol_error=1)}}}
    (f,) = one(probe(infiniband=one_up), facts=facts(previous_counters={"gpu1": {"mlx5_0:1": {"LinkDownedCounter": 0}}}))
    assert f.evidence == "mlx5_0:1: SymbolErrorCounter +1 (now 1) since the last doctor run"


def test_perfquery_counters_win_over_sysfs_and_a_port_without_counters_has_none():
    perf = "# Port counters: Lid 1 port 1\nSymbolErrorCounter:..............7\nPortXmitData:....................99\n"
    ib = {
        "perfquery": {"mlx5_0:1": perf},
        "sysfs": {
            "mlx5_0": {"1": sysfs_port("4: ACTIVE", "400", symbol_error=1)},
            "mlx5_1": {"1": {"counters": {}}, "2": sysfs_port("", "", link_downed=4)},
        },
    }
    assert health.counters_of({"infiniband": ib}) == {"mlx5_0:1": {"SymbolErrorCounter": 7}, "mlx5_1:2": {"LinkDownedCounter": 4}}
    assert health.counters_of({}) == {}


# ---- names, messages, failures


def test_a_scoped_ipv6_loopback_is_the_loopback():
    assert health._is_loopback("::1%lo") and health._is_loopback("127.0.1.1")
    assert not health._is_loopback("fe80::1%eth0") and not health._is_loopback("not an address")
    h = {**probe()["hostname"], "resolved": ["::1%lo"]}
    assert codes(one(probe(hostname=h))) == ["HOST_LOOPBACK"]


def test_a_module_message_is_one_line_of_at_most_300_characters():
    assert health._msg({"msg": "a\n b   c", "stderr": "e"}) == "a b c"
    assert health._msg({"stderr": "cannot\twrite"}) == "cannot write"
    assert health._msg({}) == "failed"
    assert health._msg({"msg": "x" * 400}) == "x" * 300


def test_what_counts_as_a_failed_module_result():
    assert health.failed({"failed": True})
    assert health.failed({"msg": "below the threshold"})
    assert not health.failed({"msg": "skipped: no GPU", "skipped": True})
    assert not health.failed({"changed": False})


def test_a_failed_or_skipped_ib_bandwidth_test():
    args = {"invocation": {"module_args": {"device": "mlx5_0", "peer": "10.0.0.12"}}}
    (f,) = one(probe(), ib_bw={"failed": True, "stderr": "ib_write_bw: timeout", **args})
    assert said([f]) == [("IB_BANDWIDTH_LOW", "gpu1", "error", "ib_write_bw from gpu1 (mlx5_0) to 10.0.0.12: ib_write_bw: timeout")]
    (f,) = one(probe(), ib_bw={"failed": True})
    assert f.evidence == "ib_write_bw from gpu1 (?) to ?: failed"
    assert one(probe(), ib_bw={"failed": True, "skipped": True, **args}) == []


def test_dcgm_and_nccl_results_say_what_failed():
    assert one(probe(), dcgm={"rc": 127, "stdout": "", "msg": "dcgmi: not found"}) == []
    assert one(probe(), dcgm={"skipped": True, "rc": 1}) == []
    (f,) = one(probe(), dcgm={"rc": 3, "stdout": "no json", "stderr": "Error: unable to connect"})
    assert (
        said([f]) == [("DCGM_DIAG", "gpu1", "error", "dcgmi diag exited 3: Error: unable to connect")] and f.cause == "DCGM's diagnostic did not run"
    )
    assert one(probe(), dcgm={"rc": 0, "stdout": "{}"}) == []
    node_test = '{"tests": [{"name": "software", "status": "Fail"}, {"name": "pcie", "status": "Pass"}]}'
    assert said(one(probe(), dcgm={"rc": 226, "stdout": node_test})) == [("DCGM_DIAG", "gpu1", "error", "dcgmi diag: software Fail")]
    (f,) = one(probe(), nccl={"failed": True, "msg": "peak 1.0 GB/s"})
    assert said([f]) == [("NCCL_BANDWIDTH_LOW", "gpu1", "error", "all_reduce_perf within gpu1: peak 1.0 GB/s")]
    assert one(probe(), nccl={"skipped": True, "failed": True}) == []
    assert one(probe(), nccl={"peak_busbw": 470.0}) == []


def test_the_shared_directory_findings_say_which_side_failed():
    assert one(probe(), written={"changed": True}) and one(probe(), written={"changed": True})[0].evidence == (
        "write of gpu1's file as the cluster user: failed"
    )
    written = {"sha256": "ab" * 32}
    (f,) = one(probe(), written=written, read={"failed": True, "msg": "cannot list /shared/cache"})
    assert said([f]) == [("SHARED_DIR", "gpu1", "error", "read back: cannot list /shared/cache")]
    five = {"checks": [{"writer": f"doctor-gpu{i}", "ok": False} for i in range(5)], "failed": True}
    (f,) = one(probe(), written=written, read=five)
    assert f.evidence == "reading the other nodes' files: " + "; ".join(f"doctor-gpu{i}'s file: mismatch" for i in range(4))
    assert one(probe(), read={"checks": [{"ok": False, "error": "that node wrote no check file"}], "failed": True}) == []


# ---- versions and pairs


def readings(*versions: dict[str, str]) -> list[health.NodeReading]:
    return [health.NodeReading(f"gpu{i + 1}", probe(versions=v)) for i, v in enumerate(versions)]


def test_a_driver_that_differs_on_a_node_outside_the_gpu_nodes_is_said_and_the_stack_is_not():
    base = probe()["versions"]
    found = health.judge_versions(readings(base, base, {**base, "driver": "550.1", "torch": "2.1"}), ["gpu1", "gpu2"])
    assert [(f.code, f.node, f.evidence) for f in found] == [
        ("VERSION_MISMATCH", "gpu3", "NVIDIA driver: gpu3 has 550.1; gpu1 570.86.15, gpu2 570.86.15")
    ]
    assert found[0].cause == "gpu3 runs NVIDIA driver 550.1 while the other nodes run 570.86.15"


def test_a_missing_driver_or_cuda_toolkit_is_no_mismatch_but_a_missing_library_is():
    base = probe()["versions"]
    unreachable = health.NodeReading("gpu4")  # no probe: nothing to compare
    found = health.judge_versions([*readings(base, {**base, "driver": "", "cuda": ""}), unreachable], ["gpu1", "gpu2", "gpu4"])
    assert found == []
    no_versions = health.NodeReading("gpu3", {"hostname": {}})
    found = health.judge_versions([*readings(base, base), no_versions], ["gpu1", "gpu2", "gpu3"])
    assert [(f.node, f.evidence.split(";")[0]) for f in found] == [
        ("gpu3", "CUDA runtime: gpu3 has not installed"),
        ("gpu3", "NCCL: gpu3 has not installed"),
        ("gpu3", "torch: gpu3 has not installed"),
        ("gpu3", "megatron-core: gpu3 has not installed"),
    ]


def test_the_common_version_is_the_one_most_nodes_run():
    base = probe()["versions"]
    found = health.judge_versions(readings({**base, "nccl": "2.20"}, base, base), ["gpu1", "gpu2", "gpu3"])
    assert [(f.node, f.cause) for f in found] == [("gpu1", "gpu1 runs NCCL 2.20 while the other nodes run 2.27.7")]


def test_a_long_version_list_is_cut_at_300_characters():
    base = probe()["versions"]
    many = [base] * 40 + [{**base, "torch": "2.1"}]
    found = health.judge_versions(readings(*many), [f"gpu{i + 1}" for i in range(41)])
    prefix = "torch: gpu41 has 2.1; "
    assert found[0].evidence.startswith(prefix) and len(found[0].evidence) == len(prefix) + 300
    assert ", gpu2 2.9.0, " in found[0].evidence


def test_an_odd_node_count_pairs_the_last_node_with_the_first():
    assert health.pair_rounds(["a", "b", "c"]) == [[["a", "b"], ["c", "a"]], [["b", "c"]]]
    assert health.pair_rounds(["a"]) == [] and health.pair_rounds([]) == []


def test_a_pair_exactly_at_the_slow_line_is_not_slow_and_failures_are_said():
    # median 50: 40 is exactly 80 % of it
    assert health.judge_pairs([(["a", "b"], 50.0), (["c", "d"], 40.0), (["b", "c"], 50.0), (["d", "a"], 60.0)]) == []
    found = health.judge_pairs([(["a", "b"], 45.0), (["c", "d"], None), (["b", "c"], 44.0), (["d", "a"], None)])
    assert [(f.code, f.node, f.evidence) for f in found] == [("NCCL_PAIR_SLOW", "d", "c-d: failed; d-a: failed (median pair 44.5 GB/s)")]
    # every pair failed: no median, every node is slow in all its pairs
    found = health.judge_pairs([(["a", "b"], None), (["b", "c"], None), (["c", "a"], None)])
    assert [f.evidence for f in found][0] == "a-b: failed; c-a: failed (median pair 0.0 GB/s)"
    assert health.judge_pairs([]) == []


def test_judge_reports_every_node_versions_and_pairs():
    base = probe()["versions"]
    rs = readings(base, {**base, "torch": "2.8.0"}, base)
    rs[0].unreachable = "ssh: timed out"
    three = facts(gpu_nodes=["gpu1", "gpu2", "gpu3"])
    report = health.judge(rs, three, [(["gpu2", "gpu3"], None)])
    assert report.checked == ["gpu1", "gpu2", "gpu3"]
    assert sorted((f.code, f.node) for f in report.findings) == [("NCCL_LINK_SLOW", ""), ("NODE_UNREACHABLE", "gpu1"), ("VERSION_MISMATCH", "gpu2")]
    assert [f.code for f in health.judge(rs, three).findings if f.code.startswith("NCCL")] == []


# ---- the play: settings, readings, pair results, drain


def write_inventory(tmp_path: Path, text: str = "", all_vars: str = "") -> Path:
    path = tmp_path / "inventory.ini"
    path.write_text(text or "[head]\nhead1\n\n[gpu_nodes]\ngpu1\ngpu2\n")
    if all_vars:
        (tmp_path / "group_vars").mkdir(exist_ok=True)
        (tmp_path / "group_vars" / "all.yml").write_text(all_vars)
    return path


def load(path: Path) -> inv.Inventory:
    from megaprov import paths

    return inv.load(str(path), paths.roles_dir(), paths.cluster_defaults())


def test_cluster_facts_read_the_thresholds_and_each_hosts_expectations(tmp_path):
    path = write_inventory(
        tmp_path,
        "[head]\nhead1\n\n[gpu_nodes]\ngpu1 megaprov_gpus_per_node=4\ngpu2 megaprov_gpu_expected=false common_chrony_steer_clock=false\nhead1\n",
        "doctor_min_free_gib: 20\ndoctor_min_free_percent: 7.5\ndoctor_scratch_min_free_gib: 3\n",
    )
    got = health.cluster_facts(load(path), {"doctor_clock_skew_s": "0.5"})
    assert got.gpu_nodes == ["gpu1", "gpu2", "head1"]
    assert got.gpus_per_node == {"head1": 0, "gpu1": 4, "gpu2": 0}
    assert got.gpu_expected == {"head1": True, "gpu1": True, "gpu2": False}
    assert got.clock_is_hosts == {"head1": False, "gpu1": False, "gpu2": True}
    assert got.thresholds == health.Thresholds(min_free_gib={"shared": 20.0, "scratch": 3.0}, min_free_percent=7.5, clock_skew_s=0.5)
    (tmp_path / "plain").mkdir()
    assert health.cluster_facts(load(write_inventory(tmp_path / "plain")), {}).thresholds == health.Thresholds()


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("doctor_min_free_gib", "ten", "doctor_min_free_gib='ten' is not a number"),
        ("doctor_min_free_gib", "-1", "doctor_min_free_gib=-1 is out of range"),
        ("doctor_min_free_gib", "2e9", "doctor_min_free_gib=2e+09 is out of range"),
        ("doctor_min_free_percent", "101", "doctor_min_free_percent=101 is out of range"),
        ("doctor_clock_skew_s", "0", "doctor_clock_skew_s=0 is out of range"),
        ("doctor_shared_min_free_gib", [1], "doctor_shared_min_free_gib='[1]' is not a number"),
    ],
)
def test_a_threshold_that_is_no_number_or_out_of_range_is_refused(tmp_path, name, value, said):
    with pytest.raises(UsageError) as caught:
        health.cluster_facts(load(write_inventory(tmp_path)), {name: value})
    assert caught.value.message == said


def test_thresholds_at_their_bounds_are_taken(tmp_path):
    found = load(write_inventory(tmp_path))
    got = health.cluster_facts(found, {"doctor_min_free_gib": "0", "doctor_min_free_percent": "100", "doctor_shared_min_free_gib": "1e9"})
    assert got.thresholds.min_free_gib == {"shared": 1e9, "scratch": 0.0} and got.thresholds.min_free_percent == 100.0
    assert health.cluster_facts(found, {"doctor_min_free_percent": "150e-1"}).thresholds.min_free_percent == 15.0
    assert health.cluster_facts(found, {"doctor_clock_skew_s": 200}).thresholds.clock_skew_s == 200.0


def task(host: str, action: str, res: dict[str, Any], window: tuple[float, float] | None = None) -> runner.TaskResult:
    return runner.TaskResult(host, "t", action, res, window)


def healthy(host: str) -> dict[str, Any]:
    p = probe()
    p["hostname"] = {**p["hostname"], "name": host}
    return p


def test_examine_runs_the_play_on_the_doctor_hosts_and_judges_what_came_back(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    path = write_inventory(tmp_path)
    quick = {"rc": 3, "stdout": "", "stderr": "dcgm is down"}
    play = Play(
        tmp_path,
        [
            task("gpu1", "megaprov.cluster.doctor_probe", healthy("gpu1"), (1000.0, 1001.0)),
            task("gpu2", "megaprov.cluster.doctor_probe", {**healthy("gpu2"), "time": 1010.0}, (1000.0, 1001.0)),
            task("head1", "megaprov.cluster.doctor_probe", {**healthy("head1"), "nvidia_smi": None, "pci_gpus": 0}, (1000.0, 1001.0)),
            task("gpu1", "ansible.builtin.shell", {**quick, "cmd": "dcgmi diag -r 1 -j"}),
            task("gpu2", "ansible.builtin.shell", {**quick, "cmd": "nvidia-smi"}),  # not the diagnostic
            task("elsewhere", "megaprov.cluster.doctor_probe", {}),  # not asked for
        ],
    )
    monkeypatch.setattr(runner, "run", play)
    report = health.examine(health.Request(str(path), "quick", report=SILENT, extravars={"x": 1}))
    assert report.checked == ["head1", "gpu1", "gpu2"]
    assert sorted((f.code, f.node) for f in report.findings) == [("CLOCK_SKEW", "gpu2"), ("DCGM_DIAG", "gpu1"), ("GPU_CHECKS_SKIPPED", "head1")]
    (spec,) = play.specs
    assert spec.playbook.name == "doctor.yml" and spec.inventories == (path,)
    assert spec.options.limit == "head1,gpu1,gpu2"
    assert spec.options.extravars == {"x": 1, "megaprov_doctor": {"level": "quick", "pairs": [], "drain": {}}}
    assert play.collect == [health.PROBE_ACTIONS]
    counters = json.loads(health.counters_file(path).read_text())
    assert counters == {h: {"mlx5_0:1": {"SymbolErrorCounter": 0, "LinkDownedCounter": 1}} for h in ("head1", "gpu1", "gpu2")}


def test_a_deep_run_pairs_the_gpu_nodes_and_reads_their_results(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    path = write_inventory(tmp_path, "[head]\nhead1\n\n[gpu_nodes]\ngpu1\ngpu2\ngpu3\ngpu4\ngpu5 megaprov_gpu_expected=false\n")
    pair = "megaprov.cluster.nccl_check"

    def mpirun(hosts: str, peak: Any, **res: Any) -> dict[str, Any]:
        argv = ["mpirun", "--host", hosts, "all_reduce_perf"]
        return {"invocation": {"module_args": {"argv": argv}}, "result": {"peak_busbw": peak}, **res}

    results = [task(h, "megaprov.cluster.doctor_probe", healthy(h), (1000.0, 1001.0)) for h in ("head1", "gpu1", "gpu2", "gpu3", "gpu4", "gpu5")]
    results += [
        task("gpu1", pair, mpirun("gpu1:8,gpu2:8", 45.0)),
        task("gpu3", pair, mpirun("gpu3:8,gpu4:8", 12)),
        task("gpu2", pair, mpirun("gpu2:8,gpu3:8", 44.0)),
        task("gpu4", pair, mpirun("gpu4:8,gpu1:8", "fast", failed=False)),  # no number: failed
        task("gpu1", pair, {"invocation": {"module_args": {"argv": ["all_reduce_perf", "-b", "8"]}}, "msg": "peak 1 GB/s"}),  # within the node
        task("gpu1", "megaprov.cluster.ib_write_bw", {"failed": True, "msg": "no peer"}),
    ]
    monkeypatch.setattr(runner, "run", play := Play(tmp_path, results))
    report = health.examine(health.Request(str(path), "deep", report=SILENT))
    rounds = play.specs[0].options.extravars["megaprov_doctor"]["pairs"]
    assert rounds == health.pair_rounds(["gpu1", "gpu2", "gpu3", "gpu4"])
    assert sorted((f.code, f.node) for f in report.findings if f.severity == "error") == [
        ("IB_BANDWIDTH_LOW", "gpu1"),
        ("NCCL_BANDWIDTH_LOW", "gpu1"),
        ("NCCL_PAIR_SLOW", "gpu4"),
    ]
    assert health._pair_results(play.answer) == [
        (["gpu1", "gpu2"], 45.0),
        (["gpu3", "gpu4"], 12.0),
        (["gpu2", "gpu3"], 44.0),
        (["gpu4", "gpu1"], None),
    ]


def test_a_pair_result_that_failed_or_names_no_host_is_read_as_such(tmp_path):
    argv = {"invocation": {"module_args": {"argv": ["mpirun", "all_reduce_perf"]}}, "result": {"peak_busbw": 40.0}}
    failed = {"invocation": {"module_args": {"argv": ["mpirun", "--host", "a,b", "x"]}}, "result": {"peak_busbw": 40.0}, "failed": True}
    other = task("a", "megaprov.cluster.ib_write_bw", {"invocation": {"module_args": {"argv": ["mpirun"]}}})
    answer = Play(tmp_path, [task("a", "megaprov.cluster.nccl_check", argv), task("a", "megaprov.cluster.nccl_check", failed), other]).answer
    assert health._pair_results(answer) == [([], 40.0), (["a", "b"], None)]


def test_readings_sort_each_result_to_its_node(tmp_path):
    shared = "megaprov.cluster.shared_check"
    results = [
        task("n1", shared, {"sha256": "ab"}),
        task("n1", shared, {"checks": [], "invocation": {"module_args": {"write": False}}}),
        task("n2", shared, {"msg": "denied", "invocation": {"module_args": {"write": True}}}),
        task("n2", "megaprov.cluster.nccl_check", {"invocation": {"module_args": {"argv": ["all_reduce_perf"]}}, "peak_busbw": 1}),
        task("n2", "megaprov.cluster.ib_write_bw", {"gbps": 1.0}),
        task("n3", "ansible.builtin.getent", {"failed": True, "msg": "user megaprov\nnot found"}),
        task("n3", "ansible.builtin.getent", {"ansible_facts": {}}),
    ]
    failures = [
        runner.Failure("n3", "probe", "p", "timed out", True),
        runner.Failure("nx", "probe", "p", "refused", True),
        runner.Failure("n1", "t", "p", "bad", False),
    ]
    got = {r.node: r for r in health._readings(Play(tmp_path, results, failures).answer, ["n1", "n2", "n3"])}
    assert list(got) == ["n1", "n2", "n3"]
    assert got["n1"].written == {"sha256": "ab"} and got["n1"].read == results[1].res and got["n1"].unreachable == ""
    assert got["n2"].written == results[2].res and got["n2"].read is None
    assert got["n2"].nccl == results[3].res and got["n2"].ib_bw == {"gbps": 1.0} and got["n2"].dcgm is None
    assert got["n3"].unreachable == "timed out"
    assert got["n3"].written == {"msg": "the cluster user does not exist on n3 (user megaprov not found)"}


def test_a_play_that_did_not_run_or_failed_on_a_host_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    req = health.Request(str(write_inventory(tmp_path)), report=SILENT)
    monkeypatch.setattr(runner, "run", Play(tmp_path, [], error_line="ERROR! the playbook could not be found"))
    with pytest.raises(RunFailed, match="doctor: the play did not run: ERROR! the playbook could not be found") as caught:
        health._run(req, ["gpu1"], {})
    assert caught.value.hint == f"see {tmp_path / 'artifacts'}/stdout"
    broke = Play(tmp_path, [])
    broke.answer.rc, broke.answer.status = 2, "failed"
    monkeypatch.setattr(runner, "run", broke)
    with pytest.raises(RunFailed, match="doctor: the play did not run: failed"):
        health._run(req, ["gpu1"], {})
    failures = [
        runner.Failure("gpu1", "Read the node", "p", "unreachable", True),
        runner.Failure("gpu2", "Read the node", "p", "module crashed", False),
    ]
    crashed = Play(tmp_path, [], failures)
    crashed.answer.rc = 2
    monkeypatch.setattr(runner, "run", crashed)
    with pytest.raises(RunFailed) as caught:
        health._run(req, ["gpu1", "gpu2"], {})
    assert caught.value.message == "doctor: gpu2: Read the node: module crashed"
    only_unreachable = Play(tmp_path, [], failures[:1])
    only_unreachable.answer.rc = 4
    monkeypatch.setattr(runner, "run", only_unreachable)
    assert health._run(req, ["gpu1"], {}) is only_unreachable.answer
    answered = Play(tmp_path, [task("gpu1", "megaprov.cluster.doctor_probe", {})])
    answered.answer.rc = 2
    monkeypatch.setattr(runner, "run", answered)
    assert health._run(req, ["gpu1"], {}) is answered.answer


def test_node_limits_and_levels_are_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    path = write_inventory(tmp_path)
    with pytest.raises(UsageError, match="--level thorough is not a level") as caught:
        health.examine(health.Request(str(path), "thorough", report=SILENT))
    assert caught.value.hint == "use passive, quick or deep"
    with pytest.raises(UsageError, match="--node gpu9 is not a host of") as caught:
        health.examine(health.Request(str(path), limit="gpu1, gpu9", report=SILENT))
    assert caught.value.hint == "use one of head1, gpu1, gpu2"
    play = Play(tmp_path, [task("gpu2", "megaprov.cluster.doctor_probe", healthy("gpu2"), (1000.0, 1001.0))])
    monkeypatch.setattr(runner, "run", play)
    report = health.examine(health.Request(str(path), limit=" gpu2 ,,", report=SILENT))
    assert report.checked == ["gpu2"] and play.specs[0].options.limit == "gpu2"


def test_counters_of_earlier_runs_are_compared_and_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    path = write_inventory(tmp_path)
    file = health.counters_file(path)
    file.parent.mkdir(parents=True)
    file.write_text(json.dumps({"gpu1": {"mlx5_0:1": {"SymbolErrorCounter": 0}}, "gone": {"x:1": {"LinkDownedCounter": 2}}}))
    p = healthy("gpu1")
    p["infiniband"]["sysfs"]["mlx5_0"]["1"]["counters"] = {"symbol_error": 9}
    monkeypatch.setattr(runner, "run", Play(tmp_path, [task("gpu1", "megaprov.cluster.doctor_probe", p, (1000.0, 1001.0))]))
    report = health.examine(health.Request(str(path), limit="gpu1", report=SILENT))
    assert [(f.code, f.evidence) for f in report.findings] == [
        ("IB_ERRORS_RISING", "mlx5_0:1: SymbolErrorCounter +9 (now 9) since the last doctor run")
    ]
    assert json.loads(file.read_text()) == {"gpu1": {"mlx5_0:1": {"SymbolErrorCounter": 9}}, "gone": {"x:1": {"LinkDownedCounter": 2}}}
    assert file.name == f"{health.fact_cache_dir(path).name}-counters.json" and file.parent.name == "doctor"
    assert [p.name for p in file.parent.iterdir()] == [file.name]  # the temporary file was renamed
    file.write_text("[1, 2]")  # not a mapping: no previous counters
    health.examine(health.Request(str(path), limit="gpu1", report=SILENT))
    assert json.loads(file.read_text()) == {"gpu1": {"mlx5_0:1": {"SymbolErrorCounter": 9}}}


def test_nodes_the_play_never_reached_are_unreachable_and_none_at_all_is_an_error(tmp_path):
    rs = [health.NodeReading("a", probe()), health.NodeReading("b"), health.NodeReading("c", unreachable="ssh")]
    health.reached(rs, tmp_path / "inv.ini")
    assert [r.unreachable for r in rs] == ["", health.NOT_READ, "ssh"]
    with pytest.raises(HostsUnreachable) as caught:
        health.reached([health.NodeReading("a"), health.NodeReading("b")], tmp_path / "inv.ini")
    assert caught.value.message == f"doctor: the play reached none of the 2 node(s) of {tmp_path / 'inv.ini'}"
    assert caught.value.hint == f"check that Ansible reads the inventory: ansible-inventory -i {tmp_path / 'inv.ini'} --graph"
    health.reached([], tmp_path)  # nothing asked, nothing missed


def drained_answer(tmp_path: Path, *items: tuple[str, str]) -> Play:
    res = {"results": [{"item": {"key": node, "value": "r"}, "stdout": out} for node, out in items] + [{"item": None, "stdout": "drained"}]}
    return Play(tmp_path, [task("head1", "ansible.builtin.command", res)])


def test_drain_asks_the_slurm_controller_and_says_what_each_node_got(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    path = write_inventory(tmp_path, "[head]\nhead1\n\n[slurm_controller]\nctl\n\n[gpu_nodes]\ngpu1\ngpu2\ngpu3\n", "megaprov_scheduler: slurm\n")
    report = Report()
    report.add(finding("GPU_XID", "gpu1", "Xid 79"), finding("GPU_COUNT", "gpu2", "7"), finding("GPU_COUNT", "gpu3", "7"))
    play = drained_answer(tmp_path, ("gpu1", "drained\n"), ("gpu2", "kept: " + "x" * 300), ("gpuX", "drained"))
    monkeypatch.setattr(runner, "run", play)
    done = health.drain(health.Request(str(path), drain=True, report=SILENT), report)
    assert done == {"gpu1": "megaprov doctor: GPU_XID", "gpu2": ("kept: " + "x" * 300)[:200]}
    (spec,) = play.specs
    assert spec.options.limit == "ctl" and play.collect == [("ansible.builtin.command",)]
    assert spec.options.extravars["megaprov_doctor"] == {
        "level": "none",
        "pairs": [],
        "drain": {"gpu1": "megaprov doctor: GPU_XID", "gpu2": "megaprov doctor: GPU_COUNT", "gpu3": "megaprov doctor: GPU_COUNT"},
    }


def test_drain_on_the_head_without_a_controller_group_and_nothing_to_drain(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    path = write_inventory(tmp_path, all_vars="megaprov_scheduler: slurm\n")
    play = drained_answer(tmp_path, ("gpu1", "drained"))
    monkeypatch.setattr(runner, "run", play)
    report = Report([finding("GPU_XID", "gpu1", "Xid 79")])
    assert health.drain(health.Request(str(path), report=SILENT), report) == {"gpu1": "megaprov doctor: GPU_XID"}
    assert play.specs[0].options.limit == "head1"
    assert health.drain(health.Request(str(path), report=SILENT), Report([finding("GPU_ROW_REMAP_PENDING", "gpu1")])) == {}
    assert len(play.specs) == 1


def test_drain_needs_slurm(tmp_path):
    with pytest.raises(UsageError, match="--drain needs Slurm: megaprov_scheduler is not slurm in the inventory") as caught:
        health.drain(health.Request(str(write_inventory(tmp_path)), report=SILENT), Report([finding("GPU_XID", "gpu1")]))
    assert caught.value.hint == "drop --drain, or set up the scheduler stage"


def test_the_recorded_run_names_the_unhealthy_nodes_while_it_is_recent(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    path = str(write_inventory(tmp_path))
    assert health.unhealthy_nodes(path) == ([], None)
    report = Report(
        [
            finding("GPU_XID", "gpu2", "Xid 79"),
            finding("GPU_XID", "gpu1", "Xid 79"),
            finding("GPU_ROW_REMAP_PENDING", "gpu3"),
            finding("NCCL_LINK_SLOW", "", severity="error"),
        ],
        checked=["gpu1", "gpu2", "gpu3"],
    )
    before = time.time()
    health.record(path, report, "quick")
    doc = json.loads(health.findings_file(Path(path)).read_text())
    assert doc["level"] == "quick" and doc["checked"] == ["gpu1", "gpu2", "gpu3"] and before <= doc["at"] <= time.time()
    assert doc["findings"] == [f.as_dict() for f in report.sorted()]
    nodes, age = health.unhealthy_nodes(path)
    assert nodes == ["gpu1", "gpu2"] and age is not None and 0 <= age < 60
    assert health.unhealthy_nodes(path, max_age_s=-1.0)[0] == []
    doc["at"] = time.time() - health.FINDINGS_VALID_S + 60
    health.findings_file(Path(path)).write_text(json.dumps(doc))
    assert health.unhealthy_nodes(path)[0] == ["gpu1", "gpu2"]
    health.findings_file(Path(path)).write_text(json.dumps({**doc, "at": "yesterday"}))
    assert health.unhealthy_nodes(path) == ([], None)
    health.findings_file(Path(path)).write_text(json.dumps({**doc, "at": time.time(), "findings": ["x", {"severity": "error"}]}))
    assert health.unhealthy_nodes(path)[0] == []
    assert health.FINDINGS_VALID_S == 24 * 3600


# ---- clock, disks, names, services


def test_clock_skew_says_how_far_and_which_way():
    assert said(one(probe(time=1003.5))) == [("CLOCK_SKEW", "gpu1", "warn", "node clock +2.5 s off the controller's (ahead)")]
    assert said(one(probe(time=997.0))) == [("CLOCK_SKEW", "gpu1", "warn", "node clock -3.0 s off the controller's (behind)")]
    assert one(probe(time=1003.0)) == []  # exactly the threshold past the window's end
    assert one(probe(time=998.0)) == []  # exactly the threshold before its start
    assert one(probe(time=1000.0)) == [] and one(probe(time=1001.0)) == []  # inside the window, either edge
    # a second's skew is said where the threshold is lower
    tight = facts(thresholds=health.Thresholds(clock_skew_s=0.5))
    assert one(probe(time=1001.6), facts=tight)[0].evidence == "node clock +0.6 s off the controller's (ahead)"
    assert one(probe(time=999.4), facts=tight)[0].evidence == "node clock -0.6 s off the controller's (behind)"
    assert one(probe(time=1000.5), window=(900.0, 1100.0), facts=tight) == []
    assert one(probe(time=5000.0), window=None) == []  # no window: nothing to compare with
    assert one(probe(time="late")) == []


def test_chrony_is_read_only_when_it_answered():
    unsynced = "Reference ID    : 00000000 ()\nLeap status     : Not synchronised\n"
    assert said(one(probe(chrony={"rc": 0, "stdout": unsynced}))) == [
        ("CLOCK_UNSYNCED", "gpu1", "warn", "chronyc tracking: Leap status : Not synchronised")
    ]
    assert one(probe(chrony={"stdout": unsynced})) == []  # no exit status: not an answer
    assert one(probe(chrony={"rc": 1, "stdout": unsynced})) == []
    assert one(probe(chrony={"rc": 0})) == []  # nothing said: not known to be unsynchronised
    assert one(probe(chrony={"rc": 0, "stdout": unsynced}), facts=facts(clock_is_hosts={"gpu2": True})) != []


def test_disks_judged_in_gib_and_percent_at_their_edges():
    gib = 2**30
    total = 1000 * gib
    at_floor = {"scratch": {"path": "/var/tmp", "total": total, "free": 100 * gib}}  # 10 GiB floor, 5 %: 10 % free
    assert one(probe(disks=at_floor)) == []
    at_gib = {"shared": {"path": "/shared", "total": 100 * gib, "free": 10 * gib}}
    assert one(probe(disks=at_gib)) == []  # exactly the floor
    at_percent = {"shared": {"path": "/shared", "total": total, "free": 50 * gib}}
    assert one(probe(disks=at_percent)) == []  # exactly 5 %
    under = {"shared": {"path": "/shared", "total": total, "free": 49 * gib}}
    assert said(one(probe(disks=under))) == [
        (
            "DISK_FULL",
            "gpu1",
            "error",
            "shared directory /shared: 49.0 GiB free of 1000.0 GiB (4.9%); thresholds 10 GiB (doctor_shared_min_free_gib) and 5 %",
        )
    ]
    # a directory megaprov has no floor for gets 10 GiB; one that is missing or has no size is skipped, the next still judged
    other = {
        "models": {"path": "/models", "total": 100 * gib, "free": 10.5 * gib},
        "scratch": {"path": "/var/tmp", "missing": True, "total": total, "free": 0},
        "shared": {"path": "/shared", "total": total, "free": 9 * gib},
    }
    assert [f.evidence.split()[0] for f in one(probe(disks=other))] == ["shared"]
    assert [f.evidence.split()[0] for f in one(probe(disks={**other, "models": {**other["models"], "free": 9.9 * gib}}))] == ["models", "shared"]
    sizeless = {"scratch": {"path": "/var/tmp", "total": 0, "free": 0}, "shared": under["shared"]}
    assert [f.evidence.split()[0] for f in one(probe(disks=sizeless))] == ["shared"]


def test_the_host_name_findings_name_the_name_and_the_addresses():
    h = probe()["hostname"]
    assert said(one(probe(hostname={**h, "resolved": [], "error": "getent: timed out"}))) == [
        ("HOST_WRONG_ADDRESS", "gpu1", "warn", "getent hosts gpu1: no address (getent: timed out)")
    ]
    (f,) = one(probe(hostname={"resolved": []}))
    assert f.evidence == "getent hosts gpu1: no address (not found)" and f.cause == "the node's own name does not resolve"
    assert said(one(probe(hostname={**h, "name": "n1.lab", "resolved": ["10.0.0.11", "127.0.1.1"]}))) == [
        ("HOST_LOOPBACK", "gpu1", "error", "n1.lab resolves to 10.0.0.11, 127.0.1.1")
    ]
    wrong = {**h, "resolved": ["172.17.0.1", "172.18.0.1"], "interface_addresses": ["10.0.0.11", "10.0.0.12"]}
    assert said(one(probe(hostname=wrong))) == [
        ("HOST_WRONG_ADDRESS", "gpu1", "warn", "gpu1 resolves to 172.17.0.1, 172.18.0.1; eth0 has 10.0.0.11, 10.0.0.12")
    ]
    assert one(probe(hostname={**wrong, "interface_addresses": []})) == []  # no interface known: not compared


def test_services_down_say_their_state_and_how_to_start_them():
    services = {
        "a.service": {"load": "not-found", "active": "failed"},  # not installed: not judged, the next ones are
        "b.service": {"load": "loaded", "active": "activating", "sub": "start", "enabled": "enabled-runtime"},
        "c.service": {"load": "loaded", "active": "reloading", "sub": "reload", "enabled": "enabled"},
        "d.service": {"load": "loaded", "active": "inactive", "sub": "dead", "enabled": "enabled-runtime"},
    }
    (f,) = one(probe(services=services))
    assert said([f]) == [("SERVICE_DOWN", "gpu1", "error", "d.service: inactive (dead), enabled-runtime")]
    assert f.fix == "`systemctl start d.service` on gpu1 (`journalctl -u d.service` says why it stopped), or `megaprov bootstrap -i INV`"


def test_a_write_that_failed_is_the_finding_even_with_a_checksum():
    (f,) = one(probe(), written={"failed": True, "sha256": "ab" * 32, "msg": "disk full"})
    assert said([f]) == [("SHARED_DIR", "gpu1", "error", "write of gpu1's file as the cluster user: disk full")]
    assert one(probe(), read={"checks": [{"writer": "doctor-gpu2", "ok": False, "error": "mismatch"}]})[0].evidence == (
        "reading the other nodes' files: doctor-gpu2's file: mismatch"
    )


# ---- further edges of the readings, the drain and the versions


def test_a_pair_result_is_never_a_nodes_own_bandwidth_and_unknown_hosts_are_skipped(tmp_path):
    pair = {"invocation": {"module_args": {"argv": ["mpirun", "--host", "n1:8,n2:8"]}}, "failed": True, "msg": "slow"}
    results = [
        task("elsewhere", "megaprov.cluster.doctor_probe", {}),
        task("n1", "megaprov.cluster.nccl_check", pair),
        task("n1", "megaprov.cluster.shared_check", {"checks": []}),  # a read: no checksum, no write argument
        task("n1", "ansible.builtin.shell", {"cmd": "dcgmi diag -r 1 -j", "rc": 0}),
    ]
    (r,) = health._readings(Play(tmp_path, results).answer, ["n1"])
    assert r.nccl is None and r.read == {"checks": []} and r.written is None and r.dcgm == {"cmd": "dcgmi diag -r 1 -j", "rc": 0}


def test_ipv6_pairs_keep_their_addresses():
    res = {"invocation": {"module_args": {"argv": ["mpirun", "--host", "fd00::1:8,fd00::2:8"]}}, "result": {"peak_busbw": 40.0}}
    answer = runner.RunResult("successful", 0, [], [], [task("a", "megaprov.cluster.nccl_check", res)], Path("/x"), 0.1)
    assert health._pair_results(answer) == [(["fd00::1", "fd00::2"], 40.0)]


def test_a_scoped_ipv4_loopback_is_the_loopback():
    assert health._is_loopback("127.0.0.1%lo")


def test_just_under_five_percent_free_is_full():
    gib = 2**30
    disks = {"shared": {"path": "/shared", "total": 1000 * gib, "free": 49.6 * gib}}
    assert codes(one(probe(disks=disks))) == ["DISK_FULL"]


def test_a_shared_check_that_passed_is_not_named():
    read = {"checks": [{"writer": "doctor-gpu1", "ok": True}, {"writer": "doctor-gpu2", "ok": False, "error": "missing"}]}
    (f,) = one(probe(), read=read)
    assert f.evidence == "reading the other nodes' files: doctor-gpu2's file: missing"


def test_a_drain_item_without_output_is_said_as_such(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    path = write_inventory(tmp_path, all_vars="megaprov_scheduler: slurm\n")
    res = {"results": [{"item": {"key": "gpu1", "value": "r"}}]}
    monkeypatch.setattr(runner, "run", Play(tmp_path, [task("head1", "ansible.builtin.command", res)]))
    assert health.drain(health.Request(str(path), report=SILENT), Report([finding("GPU_XID", "gpu1")])) == {"gpu1": ""}
    with pytest.raises(UsageError) as caught:
        health.drain(health.Request(str(write_inventory(tmp_path / "state")), report=SILENT), Report([finding("GPU_XID", "gpu1")]))
    assert caught.value.message == "--drain needs Slurm: megaprov_scheduler is not slurm in the inventory"


def test_the_findings_file_is_in_the_doctor_state_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    path = write_inventory(tmp_path)
    assert health.findings_file(path) == health.state_dir() / "doctor" / f"{health.fact_cache_dir(path).name}.json"
    health._write_json(health.findings_file(path), {"at": time.time()})  # a run that recorded no findings
    assert health.unhealthy_nodes(str(path))[0] == []


def test_versions_nobody_reports_do_not_stop_the_comparison_and_the_majority_wins():
    base = {**probe()["versions"], "cuda_runtime": ""}
    found = health.judge_versions(readings(base, {**base, "torch": "2.1"}, {**base, "torch": "2.1"}), ["gpu1", "gpu2", "gpu3"])
    assert [(f.node, f.cause) for f in found] == [("gpu1", "gpu1 runs torch 2.9.0 while the other nodes run 2.1")]
