"""megaprov doctor's parsers on the tools' recorded outputs (tests/fixtures/doctor_recorded/, each file's source in its
SOURCES.md): nvidia-smi's query CSV, kernel log Xid lines, ibstat, perfquery, dcgmi diag JSON, nccl-tests tables."""

from __future__ import annotations

from pathlib import Path

from megaprov.ops.doctor import health, parsers, signatures
from tests.conftest import load_module

RECORDED = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "doctor_recorded"
NCCL_CHECK = Path(__file__).resolve().parents[3] / "ansible_collections/megaprov/cluster/plugins/modules/nccl_check.py"
PROBE = load_module(Path(__file__).resolve().parents[3] / "ansible_collections/megaprov/cluster/plugins/modules/doctor_probe.py", "doctor_probe")
QUERY = PROBE.SMI_FIELDS
# The recorded remapped-rows answers asked for these three fields; the probe asks gpu_query.REMAPPED (a superset), and
# doctor reads either by field name.
REMAP = "gpu_bus_id,remapped_rows.pending,remapped_rows.failure"


def text(name: str) -> str:
    return (RECORDED / name).read_text()


def test_nvidia_smi_query_of_a_healthy_h100_node():
    gpus = parsers.nvidia_smi_query(text("nvidia-smi-query-h100x8.csv"), QUERY, text("nvidia-smi-remapped-h100x8.csv"), REMAP)
    assert [g.index for g in gpus] == list(range(8))
    assert all("H100" in g.name and g.ecc_uncorrected_volatile == 0 and g.remap_pending is False and g.remap_failed is False for g in gpus)
    assert all(g.pcie_width == g.pcie_width_max == 16 for g in gpus)


def test_nvidia_smi_query_of_a_faulty_node():
    gpus = {
        g.index: g
        for g in parsers.nvidia_smi_query(text("nvidia-smi-query-h100x8-faulty.csv"), QUERY, text("nvidia-smi-remapped-h100x8-faulty.csv"), REMAP)
    }
    assert gpus[3].ecc_uncorrected_volatile == 2
    assert gpus[5].remap_pending is True
    assert (gpus[6].pcie_width, gpus[6].pcie_width_max) == (8, 16)
    assert [g.index for g in gpus.values() if g.remap_pending] == [5] and not any(g.remap_failed for g in gpus.values())


def test_the_probe_asks_every_field_doctor_reads():
    """doctor_probe's queries are gpu_query's, and they hold every field parsers.nvidia_smi_query reads, in either order."""
    from ansible_collections.megaprov.cluster.plugins.module_utils import gpu_query

    assert QUERY == ",".join(gpu_query.HEALTH) and PROBE.REMAP_FIELDS == ",".join(gpu_query.REMAPPED)
    assert set(REMAP.split(",")) <= set(gpu_query.REMAPPED)
    row = dict.fromkeys(gpu_query.HEALTH, "1") | {"pci.bus_id": "00000000:18:00.0", "name": "NVIDIA H100", "driver_version": "580.95.05"}
    remapped = dict.fromkeys(gpu_query.REMAPPED, "0") | {
        "gpu_bus_id": "00000000:18:00.0",
        "remapped_rows.pending": "Yes",
        "remapped_rows.failure": "No",
    }
    for fields, remap_fields in ((gpu_query.HEALTH, gpu_query.REMAPPED), (gpu_query.HEALTH[::-1], gpu_query.REMAPPED[::-1])):
        (gpu,) = parsers.nvidia_smi_query(
            ", ".join(row[f] for f in fields), ",".join(fields), ", ".join(remapped[f] for f in remap_fields), ",".join(remap_fields)
        )
        assert (gpu.index, gpu.bus_id, gpu.name, gpu.driver) == (1, "00000000:18:00.0", "NVIDIA H100", "580.95.05")
        assert (gpu.ecc_uncorrected_volatile, gpu.pcie_gen, gpu.pcie_width_max, gpu.remap_pending, gpu.remap_failed) == (1, 1, 1, True, False)


def test_a_gpu_without_row_remapping_reads_as_unknown():
    line = "0, 00000000:18:00.0, Tesla V100-SXM2-32GB, 0, 3, 3, 16, 16, 535.183.01\n"
    (gpu,) = parsers.nvidia_smi_query(line, QUERY, text("nvidia-smi-remapped-v100-na.csv"), REMAP)
    assert gpu.remap_pending is None and gpu.remap_failed is None


def test_xid_lines_in_a_kernel_log():
    found = signatures.scan(text("dmesg-xid.txt").splitlines(), signatures.Context("dmesg-xid.txt", "gpu1"))
    xids = sorted({f.evidence.split("): ")[1].split(",")[0] for f in found if f.code == "GPU_XID"}, key=int)
    assert {"79", "48", "13"} <= set(xids), xids
    assert any(f.code == "RANK_OOM_KILLED" for f in found)
    by = {f.evidence.split("): ")[1].split(",")[0]: f for f in found if f.code == "GPU_XID"}
    assert by["79"].severity == "error" and "drain" in by["79"].fix
    assert by["13"].severity == "warn" and "application" in by["13"].fix
    assert by["94"].node == "gpu-a07" and "restart the job" in by["94"].fix


def test_ibstat_ports_state_and_rate():
    ports = parsers.ibstat(text("ibstat.txt"))
    assert len(ports) >= 8 and all(p.ca.startswith("mlx5_") for p in ports)
    states = {p.state for p in ports}
    assert "Active" in states and states - {"Active"}, states
    assert {p.rate_gbps for p in ports if p.state == "Active"} >= {400.0, 200.0}


def test_perfquery_counters_rising_between_two_readings():
    before, after = parsers.perfquery(text("perfquery-before.txt")), parsers.perfquery(text("perfquery-after.txt"))
    assert "SymbolErrorCounter" in before and "LinkDownedCounter" in before
    assert after["SymbolErrorCounter"] > before["SymbolErrorCounter"] and after["LinkDownedCounter"] > before["LinkDownedCounter"]
    probe = {"infiniband": {"perfquery": {"mlx5_0:1": text("perfquery-after.txt")}, "sysfs": {}}}
    facts = health.ClusterFacts(["gpu1"], {}, {"gpu1": True}, {}, previous_counters={"gpu1": {"mlx5_0:1": before}})
    found = [f for f in health.judge_node(health.NodeReading("gpu1", {**probe, "pci_gpus": 0}), facts) if f.code == "IB_ERRORS_RISING"]
    assert found and "SymbolErrorCounter +" in found[0].evidence


def test_dcgmi_diag_json_passing_and_failing():
    assert [r for r in parsers.dcgmi_diag(text("dcgmi-diag-r1.json")) if r.status == "Fail"] == []
    assert parsers.dcgmi_diag(text("dcgmi-diag-r1.json")), "no test results read"
    failed = [r for r in parsers.dcgmi_diag(text("dcgmi-diag-r3-fail.json")) if r.status == "Fail"]
    assert failed and failed[0].gpu == "2", failed


def test_nccl_tests_tables_as_the_nccl_check_module_reads_them():
    module = load_module(NCCL_CHECK, "doctor_nccl_check")
    healthy = module.parse(text("nccl-tests-all_reduce-8gpu.txt"))
    assert healthy["wrong"] == 0 and healthy["peak_busbw"] > 400
    slow = module.parse(text("nccl-tests-all_reduce-2node-slow.txt"))
    assert slow["peak_busbw"] < 60
    pairs = [
        (["a", "b"], healthy["peak_busbw"]),
        (["c", "d"], slow["peak_busbw"]),
        (["b", "c"], healthy["peak_busbw"]),
        (["d", "a"], slow["peak_busbw"]),
    ]
    assert [f.node for f in health.judge_pairs(pairs)] == ["d"]


def test_chronyc_tracking():
    synced = parsers.chronyc_tracking(
        "Reference ID    : C0A80001 (192.168.0.1)\nSystem time     : 0.000104 seconds slow of NTP time\nLeap status     : Normal\n"
    )
    assert synced.synchronised is True and synced.offset_s == -0.000104
    assert parsers.chronyc_tracking("Leap status     : Not synchronised\n").synchronised is False


def test_xid_lines_of_dmesg_without_host_names_and_of_mig_instances():
    found = signatures.scan(text("dmesg-iso-xid.txt").splitlines(), signatures.Context("dmesg-iso-xid.txt", "gpu2"))
    xids = [f for f in found if f.code == "GPU_XID"]
    assert xids and all(f.node == "gpu2" for f in xids)  # dmesg names no host: the node the log came from
    mig = "2026-11-30T07:00:00+0000 gpu-a07 kernel: NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=1234, name=python, Contained: SM (0x1)."
    (f,) = signatures.scan([mig], signatures.Context("k.log"))
    assert f.code == "GPU_XID" and "Xid 94" in f.cause and f.node == "gpu-a07"
