# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The nvidia-smi queries megaprov asks, one per question, and the one reader of their CSV answers.

Standard library only, Python 3.9 or newer: the modules import it as module_utils, the megaprov package as
``ansible_collections.megaprov.cluster.plugins.module_utils.gpu_query``, and the node_exporter role installs it beside
its GPU collector, which runs under the node's own python3.

A query is a tuple of field names (``nvidia-smi --help-query-gpu``, ``--help-query-remapped-rows``). Its answer is read
by field name (``row``, ``rows``), never by position, so adding a field to a query cannot shift another one. Field
names checked against ``nvidia-smi --help-query-gpu`` (driver 535.129.03; R580 and R590 for the recordings under
tests/fixtures/doctor_recorded/) and NVIDIA's nvidia-smi manual (docs.nvidia.com/deploy/nvidia-smi).
"""

from __future__ import annotations

from collections.abc import Sequence

FORMAT = "--format=csv,noheader,nounits"

# The GPUs a node has and the driver that runs them (node_facts, gpu_state).
INVENTORY = ("index", "name", "memory.total", "driver_version", "pci.bus_id", "persistence_mode")

# What megaprov doctor judges: the doctor_probe module asks, megaprov/ops/doctor/parsers.py reads.
HEALTH = (
    "index",
    "pci.bus_id",
    "name",
    "ecc.errors.uncorrected.volatile.total",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "driver_version",
)

# The node_exporter role's GPU collector (megaprov_gpu_metrics.py): pci.bus_id is "domain:bus:device.function" in hex,
# utilization.gpu a percentage, memory.* MiB, temperature.gpu degrees C, power.draw watts, the ECC counts since the
# driver loaded, the thermal slowdown reasons "Active" / "Not Active". Every driver accepts the
# clocks_throttle_reasons.* spelling, newer ones as an alias of clocks_event_reasons.*; METRICS_EVENT_NAMES is the same
# query in the newer spelling, for a driver that drops the alias.
METRICS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "clocks_throttle_reasons.hw_thermal_slowdown",
    "clocks_throttle_reasons.sw_thermal_slowdown",
)
METRICS_EVENT_NAMES = tuple(field.replace("clocks_throttle_reasons.", "clocks_event_reasons.") for field in METRICS)

# A training job's GPU samples (megaprov/training/render.py writes the loop, follow.py reads it): nvidia-smi's local
# time ("2026/11/30 01:00:00.000"), then utilization (percent) and memory (MiB).
SAMPLES = ("timestamp", "index", "utilization.gpu", "memory.used", "memory.total")

# The row remapper, Ampere and newer (its own query, --query-remapped-rows; an older GPU prints [N/A] or nothing):
# counts, then "Yes"/"No" for pending and failure (what `nvidia-smi -q -d ROW_REMAPPER` shows as "Pending" and
# "Remapping Failure Occurred"). Read by the collector and by doctor (joined to a GPU by its bus id).
REMAPPED = ("gpu_bus_id", "remapped_rows.correctable", "remapped_rows.uncorrectable", "remapped_rows.pending", "remapped_rows.failure")
REMAPPED_FORMAT = "--format=csv,noheader"


def query_gpu(fields: Sequence[str], nvidia_smi: str = "nvidia-smi") -> list[str]:
    """The argv of a --query-gpu query."""
    return [nvidia_smi, "--query-gpu=" + ",".join(fields), FORMAT]


def query_remapped(nvidia_smi: str = "nvidia-smi") -> list[str]:
    """The argv of the row remapper query."""
    return [nvidia_smi, "--query-remapped-rows=" + ",".join(REMAPPED), REMAPPED_FORMAT]


def row(line: str, fields: Sequence[str]) -> dict[str, str] | None:
    """One answer line as {field: value} (values stripped), or None when it has not one value per field (an error
    message such as "No devices were found", a torn line)."""
    values = line.split(",")
    if len(values) != len(fields):
        return None
    return {field: value.strip() for field, value in zip(fields, values)}  # noqa: B905 (same length; zip(strict=) is 3.10+)


def rows(text: str, fields: Sequence[str]) -> list[dict[str, str]]:
    """Every line of an answer that is a row of ``fields``, in order."""
    found = []
    for line in text.splitlines():
        values = row(line, fields)
        if values is not None:
            found.append(values)
    return found
