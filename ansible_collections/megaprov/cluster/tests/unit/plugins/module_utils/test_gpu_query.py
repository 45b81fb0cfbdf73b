"""module_utils/gpu_query.py: the nvidia-smi queries of the modules, the node collector, doctor and the training job's
GPU samples, and the one reader of their answers (by field name)."""

from ansible_collections.megaprov.cluster.plugins.module_utils import gpu_query

QUERIES = {
    "INVENTORY": gpu_query.INVENTORY,
    "HEALTH": gpu_query.HEALTH,
    "METRICS": gpu_query.METRICS,
    "METRICS_EVENT_NAMES": gpu_query.METRICS_EVENT_NAMES,
    "SAMPLES": gpu_query.SAMPLES,
    "REMAPPED": gpu_query.REMAPPED,
}


def test_each_query_asks_a_field_once():
    for name, fields in QUERIES.items():
        assert len(set(fields)) == len(fields), name


def test_the_event_names_are_the_same_query_in_the_newer_spelling():
    changed = [(a, b) for a, b in zip(gpu_query.METRICS, gpu_query.METRICS_EVENT_NAMES, strict=True) if a != b]
    assert changed == [
        ("clocks_throttle_reasons.hw_thermal_slowdown", "clocks_event_reasons.hw_thermal_slowdown"),
        ("clocks_throttle_reasons.sw_thermal_slowdown", "clocks_event_reasons.sw_thermal_slowdown"),
    ]


def test_argv():
    assert gpu_query.query_gpu(("index", "name")) == ["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader,nounits"]
    assert gpu_query.query_gpu(gpu_query.SAMPLES, "/usr/bin/nvidia-smi")[0] == "/usr/bin/nvidia-smi"
    assert gpu_query.query_remapped() == [
        "nvidia-smi",
        "--query-remapped-rows=gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure",
        "--format=csv,noheader",
    ]


def test_rows_are_read_by_field_name():
    text = "0, NVIDIA H100 80GB HBM3, 81559, 570.86.15, 00000000:18:00.0, Enabled\n1, NVIDIA H100, 81559, 570.86.15, 00000000:2A:00.0, Enabled\n"
    rows = gpu_query.rows(text, gpu_query.INVENTORY)
    assert [r["index"] for r in rows] == ["0", "1"] and rows[1]["pci.bus_id"] == "00000000:2A:00.0"
    assert rows[0] == dict(zip(gpu_query.INVENTORY, ["0", "NVIDIA H100 80GB HBM3", "81559", "570.86.15", "00000000:18:00.0", "Enabled"], strict=True))


def test_lines_that_are_not_rows_are_skipped():
    text = "No devices were found\n\n0, H100\n0, H100, 81559, 570.86.15, 00000000:18:00.0, Enabled, extra\n"
    assert gpu_query.rows(text, gpu_query.INVENTORY) == []
    assert gpu_query.row("[N/A], [N/A]", ("a", "b")) == {"a": "[N/A]", "b": "[N/A]"}
