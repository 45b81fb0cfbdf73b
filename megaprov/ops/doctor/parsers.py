"""Parsers of the tools' own outputs that doctor judges: nvidia-smi's --query-gpu CSV, ibstat, perfquery, dcgmi diag's
JSON and chronyc tracking. Pure; each is tested on recorded outputs (tests/unit/doctor_recorded/). The nccl-tests
table is parsed where it runs, by the nccl_check module."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.megaprov.cluster.plugins.module_utils import gpu_query

NA = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", "")


@dataclass(frozen=True)
class Gpu:
    index: int
    bus_id: str
    name: str
    ecc_uncorrected_volatile: int | None
    remap_pending: bool | None
    remap_failed: bool | None
    pcie_gen: int | None
    pcie_gen_max: int | None
    pcie_width: int | None
    pcie_width_max: int | None
    driver: str


def _int(text: str) -> int | None:
    text = text.strip()
    if text in NA:
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def _yes(text: str) -> bool | None:
    text = text.strip().lower()
    if text in ("yes", "1", "true"):
        return True
    if text in ("no", "0", "false"):
        return False
    return None


def csv_rows(text: str, fields: str) -> list[dict[str, str]]:
    """``nvidia-smi --query-*=FIELDS --format=csv,noheader``: one dict per line by field name. ``fields`` is the query as
    the doctor_probe module reports it (gpu_query.HEALTH, gpu_query.REMAPPED, comma-separated)."""
    return gpu_query.rows(text, [f.strip() for f in fields.split(",")])


def _bus(bus_id: str) -> str:
    """A PCI bus id as nvidia-smi prints it in either query (00000000:18:00.0), compared in lower case."""
    return bus_id.strip().lower()


def nvidia_smi_query(text: str, fields: str, remapped: str = "", remapped_fields: str = "") -> list[Gpu]:
    """``nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits``, and its ``--query-remapped-rows`` output joined by
    bus id: one GPU per line, read by field name (any query that has the fields below). A GPU without row remapping
    (before Ampere) prints N/A there: None."""
    remaps = {_bus(r.get("gpu_bus_id", "")): r for r in csv_rows(remapped, remapped_fields)} if remapped else {}
    gpus = []
    for value in csv_rows(text, fields):
        value = {**value, **{k: v for k, v in remaps.get(_bus(value.get("pci.bus_id", "")), {}).items() if k != "gpu_bus_id"}}
        index = _int(value.get("index", ""))
        if index is None:
            continue
        gpus.append(
            Gpu(
                index=index,
                bus_id=value.get("pci.bus_id", ""),
                name=value.get("name", ""),
                ecc_uncorrected_volatile=_int(value.get("ecc.errors.uncorrected.volatile.total", "")),
                remap_pending=_yes(value.get("remapped_rows.pending", "")),
                remap_failed=_yes(value.get("remapped_rows.failure", "")),
                pcie_gen=_int(value.get("pcie.link.gen.current", "")),
                pcie_gen_max=_int(value.get("pcie.link.gen.max", "")),
                pcie_width=_int(value.get("pcie.link.width.current", "")),
                pcie_width_max=_int(value.get("pcie.link.width.max", "")),
                driver=value.get("driver_version", ""),
            )
        )
    return gpus


@dataclass(frozen=True)
class IbPort:
    ca: str
    port: str
    state: str  # Active, Down, Polling, Initializing, Armed
    physical: str  # LinkUp, Polling, Disabled, ...
    rate_gbps: float | None
    link_layer: str  # InfiniBand or Ethernet


_CA = re.compile(r"^CA '(?P<ca>[^']+)'")
_PORT = re.compile(r"^\s+Port (?P<port>\d+):")
# A key starts with a letter: ``\s+`` and the key's spaces never share a character (a line of spaces would be tried
# at every split otherwise)
_KEY = re.compile(r"^\s+(?P<key>[A-Za-z][A-Za-z ]*):\s*(?P<value>.*)$")
_NUMBER = re.compile(r"([\d.]+)")
_OFFSET = re.compile(r"(?<![\d.])([\d.]+) seconds (fast|slow)")  # from the start of a number: a search tries once per number


def ibstat(text: str) -> list[IbPort]:
    """``ibstat``: every CA's ports with their state, physical state, rate (Gb/s) and link layer."""
    ports: list[IbPort] = []
    ca, port = "", ""
    fields: dict[str, str] = {}

    def flush() -> None:
        if ca and port:
            ports.append(
                IbPort(
                    ca, port, fields.get("State", ""), fields.get("Physical state", ""), _rate(fields.get("Rate", "")), fields.get("Link layer", "")
                )
            )

    for line in text.splitlines():
        m = _CA.match(line)
        if m:
            flush()
            ca, port, fields = m["ca"], "", {}
            continue
        m = _PORT.match(line)
        if m:
            flush()
            port, fields = m["port"], {}
            continue
        m = _KEY.match(line)
        if m and port:
            fields[m["key"].strip()] = m["value"].strip()
    flush()
    return ports


def _rate(text: str) -> float | None:
    m = _NUMBER.match(text.strip())
    return float(m.group(1)) if m else None


def sysfs_ports(found: dict[str, dict[str, dict[str, Any]]]) -> list[IbPort]:
    """The probe's sysfs reading of /sys/class/infiniband (state '4: ACTIVE', rate '400 Gb/sec (4X NDR)') as ports."""
    # ibstat's words: ACTIVE, DOWN, ARMED and POLLING title-cased; INIT is the one it spells out
    names = {"INIT": "Initializing"}
    out = []
    for ca, by_port in sorted(found.items()):
        for port, value in sorted(by_port.items()):
            state = str(value.get("state", "")).split(":")[-1].strip()
            physical = str(value.get("phys_state", "")).split(":")[-1].strip()
            out.append(
                IbPort(ca, port, names.get(state, state.title()), physical, _rate(str(value.get("rate", ""))), str(value.get("link_layer", "")))
            )
    return out


_COUNTER = re.compile(r"^(?P<name>\w+):\.*(?P<value>0x[0-9a-fA-F]+|\d+)\s*$")
PERFQUERY_ERRORS = (
    "SymbolErrorCounter",
    "LinkDownedCounter",
    "LinkErrorRecoveryCounter",
    "PortRcvErrors",
    "LocalLinkIntegrityErrors",
    "ExcessiveBufferOverrunErrors",
)
SYSFS_NAMES = {
    "symbol_error": "SymbolErrorCounter",
    "link_downed": "LinkDownedCounter",
    "link_error_recovery": "LinkErrorRecoveryCounter",
    "port_rcv_errors": "PortRcvErrors",
    "local_link_integrity_errors": "LocalLinkIntegrityErrors",
    "excessive_buffer_overrun_errors": "ExcessiveBufferOverrunErrors",
}


def perfquery(text: str) -> dict[str, int]:
    """``perfquery``'s port counters (``SymbolErrorCounter:......0``) as numbers."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = _COUNTER.match(line.strip())
        if m:
            out[m["name"]] = int(m["value"], 16) if m["value"].startswith("0x") else int(m["value"])
    return out


@dataclass(frozen=True)
class DiagResult:
    test: str
    gpu: str  # the GPU index, or '' for a test of the whole node
    status: str  # Pass, Fail, Warn, Skip
    message: str


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return str(value.get("message") or value.get("warning") or value.get("msg") or "")
    if isinstance(value, list):
        return "; ".join(t for t in (_text(v) for v in value) if t)
    return ""


def dcgmi_diag(text: str) -> list[DiagResult]:
    """``dcgmi diag -r N -j``: every test's result per GPU. The JSON's nesting changed across DCGM releases (3.x:
    category > tests > results per GPU; 4.x: tests with results per entity): this walks any of them and takes each
    object that names a test and carries per-GPU results or a status."""
    start = text.find("{")
    if start < 0:
        return []
    try:
        doc = json.loads(text[start:])
    except ValueError:
        return []
    found: list[DiagResult] = []

    def status_of(item: dict[str, Any]) -> str:
        for key in ("status", "result", "Status", "Result"):
            value = item.get(key)
            if isinstance(value, str):
                return value.strip().title()
        return ""

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        name = node.get("name") or node.get("test_name") or node.get("testName")
        results = node.get("results")
        if isinstance(name, str) and isinstance(results, list) and results and all(isinstance(r, dict) for r in results):
            for r in results:
                gpu = r.get("gpu_id", r.get("gpu_ids", r.get("entity_id", r.get("entityId", ""))))
                found.append(
                    DiagResult(
                        name,
                        str(gpu) if gpu not in (None, "") else "",
                        status_of(r),
                        _text(r.get("warnings") or r.get("info") or r.get("errors") or ""),
                    )
                )
            return
        if (
            isinstance(name, str)
            and status_of(node)
            and not any(isinstance(v, (list, dict)) and k in ("tests", "test_categories") for k, v in node.items())
        ):
            found.append(DiagResult(name, "", status_of(node), _text(node.get("warnings") or node.get("info") or node.get("errors") or "")))
            return
        for value in node.values():
            walk(value)

    walk(doc)
    return found


@dataclass
class Chrony:
    synchronised: bool | None
    offset_s: float | None  # System time: seconds fast (+) or slow (-) of the NTP time
    leap: str = ""
    reference: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def chronyc_tracking(text: str) -> Chrony:
    """``chronyc -n tracking``: the leap status (Not synchronised), the system time's offset and the reference."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    leap = fields.get("Leap status", "")
    offset = None
    m = _OFFSET.match(fields.get("System time", ""))
    if m:
        offset = float(m.group(1)) * (1 if m.group(2) == "fast" else -1)
    synced = None if not leap else leap != "Not synchronised"
    return Chrony(synced, offset, leap, fields.get("Reference ID", ""), fields)
