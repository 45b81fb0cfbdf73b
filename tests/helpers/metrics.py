"""The observe stage's metric contract, for the tests of the alert rules and the dashboards: every series they may
name. megaprov's own names are read from what exports them (the follower's metrics.prom, the GPU collector's
families, the job collector's age series, the node textfile's template), so a name nobody exports is not in it;
the names of node-exporter, dcgm-exporter and Prometheus are listed."""

from __future__ import annotations

import re
from pathlib import Path

from megaprov.training import follow
from tests.conftest import load_module

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "ansible_collections/megaprov/cluster/roles"

# node-exporter 1.5, dcgm-exporter's fields the rules and dashboards read, and Prometheus's own series.
EXTERNAL = frozenset(
    {
        "up",
        "ALERTS",
        "node_cpu_seconds_total",
        "node_filesystem_avail_bytes",
        "node_filesystem_size_bytes",
        "node_memory_MemAvailable_bytes",
        "node_memory_MemTotal_bytes",
        "node_network_receive_bytes_total",
        "node_network_transmit_bytes_total",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    }
)


def _job_metrics() -> set[str]:
    log = follow.JobLog(seq_length=16)
    line = " iteration 1/ 2 | elapsed time per iteration (ms): 1.0 | throughput per GPU (TFLOP/s/GPU): 1.0 | global batch size: 1 | lm loss: 1.0 |"
    log.feed("n", line, 1.0)
    text = follow.prometheus_text("j", log, "running", follow.Targets())
    return set(re.findall(r"^# TYPE (\S+) ", text, re.M)) | {"megaprov_job_metrics_age_seconds"}


def _gpu_metrics() -> set[str]:
    module = load_module(ROLES / "node_exporter/files/megaprov_gpu_metrics.py", "megaprov_gpu_metrics")
    return {name for name, _kind, _help in module.FAMILIES}


def _node_metrics() -> set[str]:
    return set(re.findall(r"^# TYPE (\S+) ", (ROLES / "node_exporter/templates/megaprov_node.prom.j2").read_text(), re.M))


MEGAPROV = frozenset(_job_metrics() | _gpu_metrics() | _node_metrics())
CONTRACT_METRICS = MEGAPROV | EXTERNAL
