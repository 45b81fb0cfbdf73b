"""megaprov doctor's health judgement (megaprov/ops/doctor/health.py) on probe results as the doctor_probe module
returns them: each check finds its problem, and a healthy node gives nothing."""

from __future__ import annotations

import copy

import pytest

from megaprov.ops.doctor import health
from megaprov.ops.doctor.findings import CODES

SMI_FIELDS = (
    "index,pci.bus_id,name,ecc.errors.uncorrected.volatile.total,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,"
    "pcie.link.width.max,driver_version"
)
REMAP_FIELDS = "gpu_bus_id,remapped_rows.pending,remapped_rows.failure"


def smi_rows(n: int = 8) -> str:
    return "\n".join(f"{i}, 00000000:{0x18 + i:02X}:00.0, NVIDIA H100 80GB HBM3, 0, 1, 5, 16, 16, 570.86.15" for i in range(n)) + "\n"


def remap_rows(n: int = 8, pending: int = -1, failed: int = -1) -> str:
    rows = [f"00000000:{0x18 + i:02X}:00.0, {'Yes' if i == pending else 'No'}, {'Yes' if i == failed else 'No'}" for i in range(n)]
    return "\n".join(rows) + "\n"


def smi(stdout: str, remapped: str | None = None) -> dict:
    return {
        "rc": 0,
        "stdout": stdout,
        "stderr": "",
        "fields": SMI_FIELDS,
        "remapped": {"rc": 0, "stdout": remapped if remapped is not None else remap_rows(), "fields": REMAP_FIELDS},
    }


def probe(**over):
    """A healthy GPU node's probe (8 H100, one NDR port, chrony synchronised)."""
    base = {
        "time": 1000.5,
        "hostname": {"name": "gpu1", "resolved": ["10.0.0.11"], "error": "", "interface": "eth0", "interface_addresses": ["10.0.0.11"]},
        "chrony": {
            "rc": 0,
            "stdout": "Reference ID    : 0A000001 (10.0.0.1)\nSystem time     : 0.000012 seconds slow of NTP time\nLeap status     : Normal\n",
        },
        "versions": {
            "driver": "570.86.15",
            "cuda": "13.0.1",
            "cuda_runtime": "13.0.96",
            "nccl": "2.27.7",
            "torch": "2.9.0",
            "megatron_core": "0.16.1",
        },
        "disks": {
            "shared": {"path": "/shared", "total": 10 * 2**40, "free": 4 * 2**40},
            "scratch": {"path": "/var/tmp", "total": 2**40, "free": 2**39},
        },
        "services": {
            "chrony": {"load": "loaded", "active": "active", "sub": "running", "enabled": "enabled"},
            "nvidia-dcgm": {"load": "loaded", "active": "inactive", "sub": "dead", "enabled": "disabled"},
            "slurmd": {"load": "not-found", "active": "inactive", "sub": "dead", "enabled": ""},
        },
        "nvidia_smi": smi(smi_rows()),
        "pci_gpus": 8,
        "kernel": {
            "source": "journalctl -k -b",
            "rc": 0,
            "readable": True,
            "lines": ["2026-12-02T10:00:00+0000 gpu1 kernel: mlx5_core 0000:1a:00.0: firmware version 28.39.1002"],
        },
        "infiniband": {
            "ibstat": None,
            "perfquery": {},
            "sysfs": {
                "mlx5_0": {
                    "1": {
                        "state": "4: ACTIVE",
                        "phys_state": "5: LinkUp",
                        "rate": "400 Gb/sec (4X NDR)",
                        "link_layer": "InfiniBand",
                        "counters": {"symbol_error": 0, "link_downed": 1},
                    }
                }
            },
        },
    }
    for key, value in over.items():
        base[key] = value
    return base


FACTS = health.ClusterFacts(
    gpu_nodes=["gpu1", "gpu2"], gpus_per_node={"gpu1": 8, "gpu2": 8}, gpu_expected={"gpu1": True, "gpu2": True}, clock_is_hosts={}
)


def codes(found):
    return sorted(f.code for f in found)


def one(p, window=(1000.0, 1001.0), facts=FACTS, **reading):
    return health.judge_node(health.NodeReading("gpu1", p, window, **reading), facts)


def test_a_healthy_gpu_node_gives_nothing():
    assert one(probe()) == []


def test_gpu_memory_and_link_faults_are_named_per_gpu():
    rows = smi_rows().splitlines()
    rows[3] = rows[3].replace("HBM3, 0, 1", "HBM3, 2, 1")
    rows[6] = rows[6].replace("1, 5, 16, 16", "1, 5, 8, 16")
    remaps = remap_rows(pending=5, failed=7)
    found = one(probe(nvidia_smi=smi("\n".join(rows), remaps)))
    assert codes(found) == ["GPU_ECC", "GPU_PCIE_DEGRADED", "GPU_ROW_REMAP_FAILED", "GPU_ROW_REMAP_PENDING"]
    assert any("GPU 3 " in f.evidence and "= 2" in f.evidence for f in found if f.code == "GPU_ECC")
    assert any("x8 of x16" in f.evidence for f in found)


def test_an_idle_gpus_lower_link_generation_is_not_a_fault():
    # gen 1 of 5 at x16: GPUs drop the generation when idle; only a narrower link is a fault
    assert one(probe()) == []


def test_a_gpu_missing_from_nvidia_smi_is_counted_against_the_bus_and_the_inventory():
    seven = "\n".join(smi_rows().splitlines()[:7])
    found = one(probe(nvidia_smi=smi(seven)))
    assert codes(found) == ["GPU_COUNT"]
    assert "lists 7" in found[0].evidence and "PCI bus 8" in found[0].evidence


def test_a_driver_that_does_not_answer_is_a_gpu_count_error():
    found = one(
        probe(
            nvidia_smi={
                "rc": 9,
                "stdout": "",
                "stderr": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
                "fields": SMI_FIELDS,
            }
        )
    )
    assert codes(found) == ["GPU_COUNT"] and "couldn't communicate" in found[0].evidence


def test_a_node_without_gpus_where_none_are_expected_is_skipped_with_a_note():
    facts = health.ClusterFacts(gpu_nodes=["gpu1"], gpus_per_node={}, gpu_expected={"gpu1": False}, clock_is_hosts={})
    found = one(probe(nvidia_smi=None, pci_gpus=0), facts=facts)
    assert codes(found) == ["GPU_CHECKS_SKIPPED"] and found[0].severity == "info"


def test_xids_in_the_kernel_log_take_the_catalogues_severity_and_action():
    lines = [
        "2026-12-02T10:00:00+0000 gpu1 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=2811, name=python, GPU has fallen off the bus.",
        "2026-12-02T10:00:01+0000 gpu1 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=2811, name=python, GPU has fallen off the bus.",
    ]
    found = one(probe(kernel={"source": "journalctl -k -b", "rc": 0, "readable": True, "lines": lines}))
    assert codes(found) == ["GPU_XID"]  # the same Xid on the same GPU once
    assert found[0].severity == "error" and "Xid 79" in found[0].cause and found[0].line == 1


def test_ib_port_state_rate_and_rising_counters():
    ib = copy.deepcopy(probe()["infiniband"])
    ib["sysfs"]["mlx5_1"] = {
        "1": {"state": "1: DOWN", "phys_state": "2: Polling", "rate": "10 Gb/sec (4X SDR)", "link_layer": "InfiniBand", "counters": {}}
    }
    ib["sysfs"]["mlx5_2"] = {
        "1": {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "200 Gb/sec (4X HDR)", "link_layer": "InfiniBand", "counters": {}}
    }
    ib["sysfs"]["mlx5_0"]["1"]["counters"] = {"symbol_error": 57, "link_downed": 3}
    facts = copy.deepcopy(FACTS)
    facts.previous_counters = {"gpu1": {"mlx5_0:1": {"SymbolErrorCounter": 0, "LinkDownedCounter": 1}}}
    found = one(probe(infiniband=ib), facts=facts)
    assert codes(found) == ["IB_ERRORS_RISING", "IB_PORT_DOWN", "IB_PORT_RATE"]
    rising = next(f for f in found if f.code == "IB_ERRORS_RISING")
    assert "SymbolErrorCounter +57" in rising.evidence and "LinkDownedCounter +2" in rising.evidence


def test_counters_without_a_previous_run_are_a_baseline_not_a_finding():
    ib = copy.deepcopy(probe()["infiniband"])
    ib["sysfs"]["mlx5_0"]["1"]["counters"] = {"symbol_error": 57}
    assert one(probe(infiniband=ib)) == []


@pytest.mark.parametrize(
    ("resolved", "code"),
    [(["127.0.1.1"], "HOST_LOOPBACK"), (["::1"], "HOST_LOOPBACK"), (["172.17.0.1"], "HOST_WRONG_ADDRESS"), ([], "HOST_WRONG_ADDRESS")],
)
def test_the_host_name_must_resolve_to_the_cluster_interface(resolved, code):
    h = {**probe()["hostname"], "resolved": resolved}
    assert codes(one(probe(hostname=h))) == [code]


def test_clock_skew_is_measured_against_the_controllers_window():
    assert one(probe(time=1003.5)) and codes(one(probe(time=1003.5))) == ["CLOCK_SKEW"]
    assert "+2.5 s" in one(probe(time=1003.5))[0].evidence
    assert codes(one(probe(time=990.0))) == ["CLOCK_SKEW"]
    assert one(probe(time=1001.9)) == []  # within the threshold past the window's end


def test_an_unsynchronised_chrony_is_a_warning_unless_the_clock_is_the_hosts():
    unsynced = {
        "rc": 0,
        "stdout": "Reference ID    : 00000000 ()\nSystem time     : 0.000000 seconds fast of NTP time\nLeap status     : Not synchronised\n",
    }
    assert codes(one(probe(chrony=unsynced))) == ["CLOCK_UNSYNCED"]
    facts = copy.deepcopy(FACTS)
    facts.clock_is_hosts = {"gpu1": True}  # a container: chronyd only tracks, the host keeps the time
    assert one(probe(chrony=unsynced), facts=facts) == []


def test_free_space_is_judged_in_gib_and_percent():
    disks = {
        "shared": {"path": "/shared", "total": 10 * 2**40, "free": 3 * 2**30},
        "scratch": {"path": "/var/tmp", "total": 100 * 2**30, "free": 4 * 2**30},
    }
    found = one(probe(disks=disks))
    assert codes(found) == ["DISK_FULL", "DISK_FULL"]
    assert any("3.0 GiB free of 10240.0 GiB" in f.evidence and "doctor_shared_min_free_gib" in f.evidence for f in found)


def test_each_directory_has_its_own_floor():
    disks = {
        "shared": {"path": "/shared", "total": 100 * 2**30, "free": 20 * 2**30},
        "scratch": {"path": "/var/tmp", "total": 100 * 2**30, "free": 20 * 2**30},
    }
    facts = copy.deepcopy(FACTS)
    facts.thresholds = health.Thresholds(min_free_gib={"shared": 30.0, "scratch": 10.0})
    found = one(probe(disks=disks), facts=facts)
    assert [(f.code, f.evidence.split()[0]) for f in found] == [("DISK_FULL", "shared")]


def test_an_unreadable_kernel_log_on_a_gpu_node_is_a_warning():
    found = one(
        probe(kernel={"source": "dmesg", "readable": False, "error": "dmesg: read kernel buffer failed: Operation not permitted", "lines": []})
    )
    assert codes(found) == ["KERNEL_LOG_UNREADABLE"] and found[0].severity == "warn" and "Operation not permitted" in found[0].evidence


def test_an_enabled_service_that_is_not_running_is_down_and_a_disabled_one_is_not():
    services = {**probe()["services"], "chrony": {"load": "loaded", "active": "inactive", "sub": "dead", "enabled": "enabled"}}
    found = one(probe(services=services))
    assert codes(found) == ["SERVICE_DOWN"] and found[0].evidence.startswith("chrony: inactive")
    failed = {"x.service": {"load": "loaded", "active": "failed", "sub": "failed", "enabled": "static"}}
    assert codes(one(probe(services=failed))) == ["SERVICE_DOWN"]


def test_the_shared_directory_check_names_the_writer_that_could_not_be_read():
    written = {"sha256": "ab" * 32, "changed": False}
    read = {
        "checks": [{"writer": "doctor-gpu2", "ok": False, "error": "file missing"}, {"writer": "doctor-gpu1", "ok": True, "error": ""}],
        "msg": "x",
    }
    found = one(probe(), written=written, read=read)
    assert codes(found) == ["SHARED_DIR"] and "doctor-gpu2's file: file missing" in found[0].evidence
    unreachable_writer = {"checks": [{"writer": "doctor-gpu2", "ok": False, "error": "that node wrote no check file"}], "msg": "x"}
    assert one(probe(), written=written, read=unreachable_writer) == []  # gpu2's own finding says why
    cannot = {"msg": "cannot write cache/doctor-gpu1 in /shared: Permission denied"}
    assert "Permission denied" in one(probe(), written=cannot)[0].evidence


def test_an_unreachable_node_is_one_finding():
    found = health.judge_node(health.NodeReading("gpu2", unreachable="Failed to connect to the host via ssh: timed out"), FACTS)
    assert codes(found) == ["NODE_UNREACHABLE"] and "timed out" in found[0].evidence


def test_versions_that_differ_name_the_odd_node():
    readings = [health.NodeReading(n, probe()) for n in ("gpu1", "gpu2", "gpu3")]
    readings[2].probe = probe(versions={**probe()["versions"], "torch": "2.8.0"})
    found = health.judge_versions(readings, ["gpu1", "gpu2", "gpu3"])
    assert codes(found) == ["VERSION_MISMATCH"] and found[0].node == "gpu3"
    assert "torch: gpu3 has 2.8.0" in found[0].evidence and "gpu1 2.9.0" in found[0].evidence


def test_a_gpu_node_without_the_training_stack_is_a_mismatch():
    readings = [health.NodeReading(n, probe()) for n in ("gpu1", "gpu2")]
    readings[1].probe = probe(versions={**probe()["versions"], "megatron_core": ""})
    found = health.judge_versions(readings, ["gpu1", "gpu2"])
    assert [(f.code, f.node) for f in found] == [("VERSION_MISMATCH", "gpu2")] and "not installed" in found[0].evidence


def test_pairs_re_pair_every_node_with_two_partners():
    assert health.pair_rounds(["a", "b"]) == [[["a", "b"]]]
    rounds = health.pair_rounds(["a", "b", "c", "d"])
    assert rounds == [[["a", "b"], ["c", "d"]], [["b", "c"], ["d", "a"]]]
    partners = {n: {m for r in rounds for p in r if n in p for m in p if m != n} for n in "abcd"}
    assert all(len(v) == 2 for v in partners.values())
    odd = health.pair_rounds(["a", "b", "c"])
    assert all(any(n in p for r in odd for p in r) for n in "abc")


def test_a_bad_node_is_slow_in_both_its_pairs_and_a_bad_link_in_one():
    results = [(["a", "b"], 45.0), (["c", "d"], 12.0), (["b", "c"], 44.0), (["d", "a"], 11.0), (["e", "f"], 46.0), (["f", "e"], 45.5)]
    found = health.judge_pairs(results)
    assert [(f.code, f.node) for f in found] == [("NCCL_PAIR_SLOW", "d")]
    assert "c-d: 12.0 GB/s" in found[0].evidence
    # only the b-c link: no node is blamed (none is drained), the link is said
    link = health.judge_pairs([(["a", "b"], 45.0), (["c", "d"], 44.0), (["b", "c"], 12.0), (["d", "a"], 45.0)])
    assert [(f.code, f.node, f.severity) for f in link] == [("NCCL_LINK_SLOW", "", "warn")]
    assert link[0].evidence == "b-c: 12.0 GB/s against the median pair's 44.5 GB/s"


def test_a_failed_pair_of_a_two_node_run_blames_neither_node_and_is_said():
    """Two nodes make one pair: which of them is at fault cannot be told, so neither is drained, but the failure is
    an error finding (it was dropped: a 2-node deep run with a dead link said nothing)."""
    found = health.judge_pairs([(["a", "b"], None)])
    assert [(f.code, f.node, f.severity, f.evidence) for f in found] == [("NCCL_LINK_SLOW", "", "error", "a-b: failed")]
    assert health.judge_pairs([(["a", "b"], 45.0)]) == []  # one pair is its own median: never slow
    bad_node = health.judge_pairs([(["a", "b"], 45.0), (["c", "d"], None), (["b", "c"], 44.0), (["d", "a"], 11.0)])
    assert [(f.code, f.node) for f in bad_node] == [("NCCL_PAIR_SLOW", "d")]  # d explains both its pairs: no link finding


def test_dcgm_and_nccl_results_become_findings():
    diag = {
        "rc": 226,
        "stdout": '{"tests": [{"name": "memory", "results": [{"gpu_id": 2, "status": "Fail", "warnings": [{"message": "DBE found"}]}]}]}',
    }
    found = one(probe(), dcgm=diag, nccl={"msg": "peak bus bandwidth 310.2 GB/s is under 80% of the baseline 470.0 GB/s"})
    assert codes(found) == ["DCGM_DIAG", "NCCL_BANDWIDTH_LOW"]
    assert "GPU 2: memory Fail: DBE found" in found[0].evidence


def test_every_code_used_is_catalogued_with_words():
    for code, entry in CODES.items():
        assert entry.severity in ("error", "warn", "info") and entry.cause and entry.fix and entry.evidence, code


def test_a_slow_rdma_pair_is_named_with_its_device_and_peer():
    res = {
        "failed": False,  # the play keeps it (failed_when), the module's words stay
        "msg": "ib_write_bw to 10.0.0.12 on mlx5_0: 180.2 Gb/s is below infiniband_bw_threshold_gbps=320",
        "gbps": 180.2,
        "invocation": {"module_args": {"device": "mlx5_0", "peer": "10.0.0.12"}},
    }
    found = one(probe(), ib_bw=res)
    assert codes(found) == ["IB_BANDWIDTH_LOW"] and "(mlx5_0) to 10.0.0.12" in found[0].evidence and "180.2 Gb/s" in found[0].evidence
    assert one(probe(), ib_bw={"gbps": 390.0, "invocation": {"module_args": {}}}) == []


def test_only_error_findings_on_gpu_nodes_drain_and_their_codes_are_the_reason(tmp_path):
    from megaprov.cluster import inventory as inv
    from megaprov.ops.doctor.findings import Report, finding

    path = tmp_path / "inventory.ini"
    path.write_text("[head]\nhead1\n\n[gpu_nodes]\ngpu1\ngpu2\ngpu3\n")
    hosts, groups, group_vars, _ = inv.parse_ini(path.read_text(), str(path))
    found = inv.Inventory(path, hosts, groups, group_vars)
    report = Report()
    report.add(
        finding("GPU_XID", "gpu1", "Xid 79"),
        finding("GPU_COUNT", "gpu1", "7 of 8"),
        finding("GPU_XID", "gpu1", "Xid 79 again"),  # one code once in the reason
        finding("GPU_ROW_REMAP_PENDING", "gpu2"),  # a warning: the node works, it is not drained
        finding("GPU_CHECKS_SKIPPED", "gpu3"),  # a note
        finding("GPU_COUNT", "head1", "0 of 1"),  # an error on the head: not a Slurm compute node
        finding("GPU_COUNT", "", "no node"),
    )
    assert {f.severity for f in report.findings} == {"error", "warn", "info"}
    assert health.drain_plan(found, report) == {"gpu1": "megaprov doctor: GPU_COUNT,GPU_XID"}
    many = Report()
    many.add(*(finding("GPU_COUNT", "gpu2", severity="error", evidence=str(i)) for i in range(3)))
    many.findings += [finding(code, "gpu3", severity="error") for code in sorted(CODES)]
    plan = health.drain_plan(found, many)
    assert plan["gpu2"] == "megaprov doctor: GPU_COUNT" and len(plan["gpu3"]) == health.DRAIN_REASON_MAX
