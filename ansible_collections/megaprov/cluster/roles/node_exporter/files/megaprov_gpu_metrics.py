"""megaprov node_exporter role: GPU metrics for prometheus-node-exporter's textfile collector, for sites without DCGM.

    megaprov_gpu_metrics.py --node NAME --output /var/lib/prometheus/node-exporter/megaprov_gpu.prom [--help for the rest]

Run by the node's system python3 (3.9 or newer, standard library only, no nvidia-ml-py), as root, from a systemd timer.
It needs the collection's module_utils gpu_query.py and xid.py beside it (the role installs them there): the nvidia-smi
queries and the Xid line are the same ones the Ansible modules and megaprov doctor use. Each run:

1. asks nvidia-smi for every GPU (gpu_query.METRICS) and its row remapper (gpu_query.REMAPPED; a GPU before Ampere
   prints nothing or an error there: absent, not a failure);
2. counts the Xid lines of this boot in the kernel log per (GPU, Xid), keeping in ``--state`` when each count last rose;
3. labels the per-GPU gauges with ``job="<name>"`` when exactly one ``megaprov-job-<name>.service`` is active (and, with
   ``--dcgm-job-mapping-dir``, writes the same job where dcgm-exporter's ``--hpc-job-mapping-dir`` reads it);
4. writes the Prometheus text format to ``--output`` atomically (temporary file, fsync, rename; mode 0644).

Metrics (every series has ``node``, per-GPU ones ``gpu="<nvidia-smi index>"``): megaprov_gpu_info{uuid,name,pci_bus_id},
megaprov_gpu_utilization_ratio, megaprov_gpu_memory_used_bytes, megaprov_gpu_memory_total_bytes,
megaprov_gpu_temperature_celsius, megaprov_gpu_power_watts, megaprov_gpu_ecc_errors_{corrected,uncorrected}_volatile_total,
megaprov_gpu_remapped_rows_{pending,failure} (0/1), megaprov_gpu_throttle_thermal (0/1),
megaprov_gpu_xid_errors_total{xid}, megaprov_gpu_xid_last_timestamp_seconds{xid}, megaprov_gpu_collector_success (1/0),
megaprov_gpu_collector_timestamp_seconds. A value nvidia-smi does not report as a number ([N/A], [Not Supported], ...)
is left out, never written as 0.

An Xid is counted under the GPU whose pci.bus_id has its domain, bus and device; one that matches no listed GPU (a GPU
that fell off the bus often vanishes from nvidia-smi) under ``gpu="<domain>:<bus>:<device>"`` as the kernel prints it,
so the event is never lost. megaprov_gpu_xid_last_timestamp_seconds is when the collector last saw that count rise, so
the Xid alerts fire at once and do not fire again when Prometheus restarts. The state file (JSON, mode 0600) is keyed
by PCI address and boot id: a new boot starts the counts again.

megaprov_gpu_collector_success is 0 when the GPU query fails or lists no GPU, the kernel log cannot be read in full, or
the Xid state cannot be kept; the file is still written with what could be read, and the script exits 0 (the alert on
the metric fires, not the unit). It exits 1 when the output cannot be written, 2 on a usage error.

Formats checked against: ``nvidia-smi --help-query-gpu`` (driver 535.129.03) and NVIDIA's nvidia-smi manual for the
fields (see gpu_query.py); open-gpu-kernel-modules kernel_rc.c and NVIDIA's "Xid Errors" document for the Xid line
(see xid.py); tests/fixtures/gpu_metrics/ holds recorded answers of both.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import selectors
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple


def _beside(name: str) -> ModuleType:
    """A module of the collection's module_utils: beside this script where the role installed it, else in the
    collection this script is part of (a checkout: roles/node_exporter/files/ -> plugins/module_utils/)."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for directory in (here, os.path.join(here, os.pardir, os.pardir, os.pardir, "plugins", "module_utils")):
        path = os.path.join(directory, name + ".py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location(f"megaprov_gpu_metrics_{name}", path)
            if spec is None or spec.loader is None:
                continue
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module  # before it runs: its dataclasses and NamedTuples look themselves up there
            # the role installs the two files and removes them with the collector: no __pycache__ beside them
            writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
            try:
                spec.loader.exec_module(module)
            finally:
                sys.dont_write_bytecode = writes
            return module
    raise ImportError(f"{name}.py is not beside {__file__}: the node_exporter role installs it there")


gpu_query = _beside("gpu_query")
xid = _beside("xid")

GPU_FIELDS = gpu_query.METRICS
GPU_FIELDS_EVENT_NAMES = gpu_query.METRICS_EVENT_NAMES
REMAPPED_FIELDS = gpu_query.REMAPPED

DEFAULT_NVIDIA_SMI = "/usr/bin/nvidia-smi"
DEFAULT_KERNEL_LOG_COMMAND = "journalctl -k -b -o short-monotonic --no-pager"
DEFAULT_JOB_UNITS_COMMAND = "systemctl list-units --type=service --state=active --plain --no-legend 'megaprov-job-*'"
DEFAULT_TIMEOUT = 10.0
DEFAULT_STATE = "/var/lib/megaprov-gpu-metrics/xids.json"  # StateDirectory=megaprov-gpu-metrics of the unit
DEFAULT_BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"

# Bounds on everything read.
MAX_GPUS = 64
MAX_LINE = 4096  # characters of one line considered
MAX_SMI_OUTPUT = 1 << 20  # bytes of one nvidia-smi answer
MAX_UNITS_OUTPUT = 1 << 20  # bytes of the job units listing
MAX_STDERR = 64 << 10  # bytes of a command's stderr kept
DEFAULT_MAX_KERNEL_LOG_MIB = 64  # MiB of kernel log read; only its Xid lines are kept
MAX_XID_LINES = 100_000  # Xid lines kept (each at most MAX_LINE)
MAX_XID_SERIES = 512  # distinct (GPU, Xid) counters
MAX_TEXT = 256  # characters of a label value taken from nvidia-smi (uuid, name)
MAX_STATE_BYTES = 1 << 20  # bytes of the Xid state file read; a larger one is started afresh
MAX_XID_STATE = 512  # (PCI address, Xid) entries kept in the Xid state
MAX_BOOT_ID = 128  # bytes of the boot id file read
STATE_VERSION = 1

JOB_UNIT = re.compile(r"megaprov-job-([A-Za-z0-9][A-Za-z0-9_.-]{0,63})\.service")
XID_MARKER = xid.MARKER.encode()
PCI_BUS_ID = re.compile(r"([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])")
NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
TEXT = re.compile(rf"[^\x00-\x1f\x7f]{{1,{MAX_TEXT}}}")
BOOT_ID = re.compile(r"[0-9A-Za-z-]{1,64}")  # /proc/sys/kernel/random/boot_id: a UUID
STATE_GPU = re.compile(r"[^\x00-\x1f\x7f]{1,64}")
YES = {"yes": 1, "1": 1, "true": 1, "no": 0, "0": 0, "false": 0}
ACTIVE = {"active": 1, "not active": 0}


@dataclass(frozen=True)
class Gpu:
    """One row of nvidia-smi --query-gpu. None: not reported as a number ([N/A], [Not Supported], ...)."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str  # as nvidia-smi prints it, e.g. 00000000:18:00.0
    pci: tuple[int, int, int, int]  # domain, bus, device, function
    utilization_ratio: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    temperature_celsius: float | None
    power_watts: float | None
    ecc_corrected_volatile: int | None
    ecc_uncorrected_volatile: int | None
    throttle_thermal: int | None


@dataclass(frozen=True)
class Remapped:
    """One row of nvidia-smi --query-remapped-rows."""

    correctable: int | None
    uncorrectable: int | None
    pending: int | None
    failure: int | None


class XidSeen(NamedTuple):
    """What the Xid state holds of one (PCI address, Xid)."""

    total: int  # the count last seen (above 0)
    rose: float  # unix time (3 decimals) at which the count last rose


@dataclass(frozen=True)
class XidState:
    """The Xid state file: the boot the counts are of, and per (PCI address, Xid) the count and when it rose."""

    boot_id: str
    xids: Mapping[tuple[str, int], XidSeen]


class CommandResult(NamedTuple):
    returncode: int | None  # None: it did not start, or was killed (timeout, output limit)
    stdout: str
    stderr: str
    error: str  # why it failed ("" when it ran to the end within the bounds and exited 0)
    truncated: bool  # stopped at the output limit


# ---------------------------------------------------------------------------------------------------------- parsing


def _lines(text: str) -> Iterable[str]:
    for line in text.splitlines():
        if line.strip():
            yield line


def _note(problems: list[str] | None, message: str) -> None:
    if problems is not None and len(problems) < 20:
        problems.append(message)


def _short(line: str) -> str:
    return repr(line[:120] + ("..." if len(line) > 120 else ""))


def parse_number(value: str) -> int | float | None:
    """A decimal number as nvidia-smi prints one (nounits), or None ([N/A], [Not Supported], nan, ...)."""
    value = value.strip()
    if not NUMBER.fullmatch(value):
        return None
    return float(value) if "." in value else int(value)


def parse_pci_bus_id(value: str) -> tuple[int, int, int, int] | None:
    """00000000:3B:00.0 (nvidia-smi's pci.bus_id and gpu_bus_id) -> (domain, bus, device, function)."""
    match = PCI_BUS_ID.fullmatch(value.strip())
    if not match:
        return None
    return (int(match[1], 16), int(match[2], 16), int(match[3], 16), int(match[4], 16))


pci_address = xid.address  # as the driver writes it in an Xid line: 0000:3b:00


def _flag(value: str, words: Mapping[str, int]) -> int | None:
    return words.get(value.strip().lower())


def _text(value: str) -> str | None:
    value = value.strip()
    return value if TEXT.fullmatch(value) else None


def parse_gpus(text: str, problems: list[str] | None = None) -> list[Gpu]:
    """The GPUs of `nvidia-smi --query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits` output (either throttle
    spelling), in index order; at most MAX_GPUS. A line that is not a well-formed row (wrong number of fields, no
    valid index or bus id, an index or bus id seen before, an error message such as "Unable to determine the device
    handle for GPU...") is skipped and noted in ``problems``."""
    gpus: dict[int, Gpu] = {}
    seen_pci: set[tuple[int, int, int, int]] = set()
    for line in _lines(text):
        if len(line) > MAX_LINE:
            _note(problems, f"nvidia-smi: skipped an overlong line ({len(line)} characters)")
            continue
        row = gpu_query.row(line, GPU_FIELDS)  # either spelling: the same fields in the same places
        if row is None:
            _note(problems, f"nvidia-smi: skipped a line that is not a GPU row: {_short(line)}")
            continue
        index_text, uuid, name, bus_id = row["index"], _text(row["uuid"]), _text(row["name"]), row["pci.bus_id"]
        pci = parse_pci_bus_id(bus_id)
        if not re.fullmatch(r"[0-9]{1,4}", index_text) or uuid is None or name is None or pci is None:
            _note(problems, f"nvidia-smi: skipped a malformed GPU row: {_short(line)}")
            continue
        index = int(index_text)
        if index in gpus or pci in seen_pci:
            _note(problems, f"nvidia-smi: skipped a second row for GPU {index} / {bus_id}: {_short(line)}")
            continue
        if len(gpus) >= MAX_GPUS:
            _note(problems, f"nvidia-smi: more than {MAX_GPUS} GPUs; the rest are left out")
            break
        utilization, used, total, temperature, power, corrected, uncorrected = (
            parse_number(row[field])
            for field in (
                "utilization.gpu",
                "memory.used",
                "memory.total",
                "temperature.gpu",
                "power.draw",
                "ecc.errors.corrected.volatile.total",
                "ecc.errors.uncorrected.volatile.total",
            )
        )
        hw_thermal = _flag(row["clocks_throttle_reasons.hw_thermal_slowdown"], ACTIVE)
        sw_thermal = _flag(row["clocks_throttle_reasons.sw_thermal_slowdown"], ACTIVE)
        known = [flag for flag in (hw_thermal, sw_thermal) if flag is not None]
        gpus[index] = Gpu(
            index=index,
            uuid=uuid,
            name=name,
            pci_bus_id=bus_id,
            pci=pci,
            utilization_ratio=utilization / 100 if utilization is not None and 0 <= utilization <= 100 else None,
            memory_used_bytes=_mib(used),
            memory_total_bytes=_mib(total),
            temperature_celsius=temperature,
            power_watts=power if power is not None and power >= 0 else None,
            ecc_corrected_volatile=_count(corrected),
            ecc_uncorrected_volatile=_count(uncorrected),
            throttle_thermal=max(known) if known else None,
        )
        seen_pci.add(pci)
    return [gpus[index] for index in sorted(gpus)]


def _mib(value: int | float | None) -> int | None:
    return round(value * 1048576) if value is not None and value >= 0 else None


def _count(value: int | float | None) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None


def parse_remapped(text: str, problems: list[str] | None = None) -> dict[tuple[int, int, int, int], Remapped]:
    """`nvidia-smi --query-remapped-rows=<REMAPPED_FIELDS> --format=csv,noheader` output, by PCI bus id
    (domain, bus, device, function). Empty output (a GPU generation without row remapping) gives {}; [N/A] values
    give None; malformed lines are skipped."""
    rows: dict[tuple[int, int, int, int], Remapped] = {}
    for line in _lines(text):
        row = gpu_query.row(line, REMAPPED_FIELDS) if len(line) <= MAX_LINE else None
        pci = parse_pci_bus_id(row["gpu_bus_id"]) if row is not None else None
        if pci is None or pci in rows:
            _note(problems, f"nvidia-smi: skipped a line that is not a remapped-rows row: {_short(line)}")
            continue
        if len(rows) >= MAX_GPUS:
            break
        rows[pci] = Remapped(
            correctable=_count(parse_number(row["remapped_rows.correctable"])),
            uncorrectable=_count(parse_number(row["remapped_rows.uncorrectable"])),
            pending=_flag(row["remapped_rows.pending"], YES),
            failure=_flag(row["remapped_rows.failure"], YES),
        )
    return rows


def parse_xids(text: str, problems: list[str] | None = None) -> Counter[tuple[str, int]]:
    """Xid events in kernel log text (journalctl -k, dmesg, or only their Xid lines), counted per
    (PCI address as the driver prints it, lower case: "0000:3b:00", Xid). One line is one event; lines without an
    Xid are ignored. At most MAX_XID_SERIES distinct (address, Xid) pairs."""
    counts: Counter[tuple[str, int]] = Counter()
    for line in text.splitlines():
        event = xid.parse(line[:MAX_LINE])
        if event is None:
            continue
        key = (event.address, event.xid)
        if key not in counts and len(counts) >= MAX_XID_SERIES:
            _note(problems, f"kernel log: more than {MAX_XID_SERIES} distinct (GPU, Xid) pairs; the rest are left out")
            continue
        counts[key] += 1
    return counts


def attribute_xids(xids: Mapping[tuple[str, int], int], gpus: Sequence[Gpu]) -> Counter[tuple[str, int]]:
    """(PCI address, Xid) counts -> (gpu label, Xid) counts: the index of the GPU at that address (domain, bus and
    device; an Xid line has no function), else the address itself (a GPU nvidia-smi did not list)."""
    by_address = {pci_address(*gpu.pci[:3]): str(gpu.index) for gpu in gpus}
    out: Counter[tuple[str, int]] = Counter()
    for (address, xid), count in xids.items():
        out[(by_address.get(address, address), xid)] += count
    return out


def parse_job_units(text: str) -> list[str]:
    """Job names of the active megaprov-job-<name>.service units in `systemctl list-units --plain --no-legend`
    output (UNIT LOAD ACTIVE SUB DESCRIPTION); a unit whose name is not a valid job name is ignored."""
    names = set()
    for line in _lines(text[:MAX_UNITS_OUTPUT]):
        columns = line[:MAX_LINE].split()
        match = JOB_UNIT.fullmatch(columns[0]) if columns else None
        if match and (len(columns) < 3 or columns[2] == "active"):
            names.add(match[1])
    return sorted(names)


def job_label(names: Sequence[str]) -> str | None:
    """The job label: the one job running on the node; none with no job or several."""
    return names[0] if len(names) == 1 else None


# ------------------------------------------------------------------------------------------------------- Xid state


def advance_xid_state(
    previous: XidState | None, counts: Mapping[tuple[str, int], int], boot_id: str, now: float, *, complete: bool = True
) -> XidState:
    """The Xid state after a run that counted ``counts`` (per (PCI address, Xid), parse_xids) at unix time ``now`` in
    boot ``boot_id``. Pure.

    A count above 0 rose now when ``previous`` has no entry for it (its first sighting), when it is above the
    previous count, and when ``previous`` is of another boot (the counts started again). An unchanged count keeps its
    time. A count that fell keeps its time; in a complete read (``complete``: the whole kernel log of the boot was
    read) it is taken as the new count, and an entry that is no longer counted goes (journald dropped the lines), while
    after an incomplete read (a part of the log) the previous counts and entries stay, so that the next complete read
    is not taken for a rise. At most MAX_XID_STATE entries: those counted now first, then the most recent."""
    stamp = round(now, 3)
    before: Mapping[tuple[str, int], XidSeen] = previous.xids if previous is not None and previous.boot_id == boot_id else {}
    after: dict[tuple[str, int], XidSeen] = {}
    for key, count in counts.items():
        if count <= 0:
            continue
        seen = before.get(key)
        if seen is None or count > seen.total:
            after[key] = XidSeen(count, stamp)
        elif count == seen.total or not complete:
            after[key] = seen
        else:
            after[key] = XidSeen(count, seen.rose)
    if not complete:
        for key, seen in before.items():
            after.setdefault(key, seen)
    return XidState(boot_id, _bounded(after, counts))


def _bounded(xids: Mapping[tuple[str, int], XidSeen], counted: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], XidSeen]:
    """At most MAX_XID_STATE entries: the ones counted in this run first, then the most recent; in key order."""
    if len(xids) > MAX_XID_STATE:
        ranked = sorted(xids, key=lambda key: (counted.get(key, 0) <= 0, -xids[key].rose, key))
        xids = {key: xids[key] for key in ranked[:MAX_XID_STATE]}
    return {key: xids[key] for key in sorted(xids)}


def xid_timestamps(state: XidState, counts: Mapping[tuple[str, int], int], gpus: Sequence[Gpu]) -> dict[tuple[str, int], float]:
    """(gpu label, Xid) -> unix time its count last rose, for every (PCI address, Xid) counted above 0 that the state
    has, under the label attribute_xids gives its count (the GPU's index, else the address). Pure."""
    by_address = {pci_address(*gpu.pci[:3]): str(gpu.index) for gpu in gpus}
    out: dict[tuple[str, int], float] = {}
    for (address, xid), count in counts.items():
        seen = state.xids.get((address, xid))
        if count > 0 and seen is not None:
            key = (by_address.get(address, address), xid)
            out[key] = max(out.get(key, seen.rose), seen.rose)
    return out


def _integer(value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"not an integer from {low} to {high}: {value!r}"[:200])
    return value


def parse_xid_state(text: str) -> XidState:
    """The Xid state file as dump_xid_state writes it; ValueError when it is anything else. Pure."""
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
        raise ValueError(f"not a version {STATE_VERSION} Xid state")
    boot_id, entries = data.get("boot_id"), data.get("xids")
    if not isinstance(boot_id, str) or not (boot_id == "" or BOOT_ID.fullmatch(boot_id)):
        raise ValueError("no valid boot_id")
    if not isinstance(entries, list):
        raise ValueError("no xids list")
    xids: dict[tuple[str, int], XidSeen] = {}
    for entry in entries:
        if not isinstance(entry, dict) or set(entry) != {"gpu", "xid", "count", "rose"}:
            raise ValueError("an xids entry is not {gpu, xid, count, rose}")
        gpu, rose = entry["gpu"], entry["rose"]
        if not isinstance(gpu, str) or not STATE_GPU.fullmatch(gpu):
            raise ValueError(f"not a gpu: {gpu!r}"[:200])
        if isinstance(rose, bool) or not isinstance(rose, (int, float)) or not (math.isfinite(rose) and rose >= 0):
            raise ValueError(f"not a unix time: {rose!r}"[:200])
        key = (gpu, _integer(entry["xid"], 0, 99999))
        if key in xids:
            raise ValueError(f"{key} twice")
        xids[key] = XidSeen(_integer(entry["count"], 1, 1 << 53), float(rose))
    return XidState(boot_id, _bounded(xids, {}))


def dump_xid_state(state: XidState) -> str:
    """The state file's text (JSON, entries in key order). Pure."""
    entries = [{"gpu": gpu, "xid": xid, "count": seen.total, "rose": seen.rose} for (gpu, xid), seen in sorted(state.xids.items())]
    return json.dumps({"version": STATE_VERSION, "boot_id": state.boot_id, "xids": entries}, separators=(",", ":")) + "\n"


def load_xid_state(path: str) -> tuple[XidState | None, str | None]:
    """The state in ``path``, or None (start afresh) with the reason when it is unreadable, not a regular file, over
    MAX_STATE_BYTES or corrupt; (None, None) when there is none yet."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read the Xid state {path} ({exc}); starting afresh"
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None, f"the Xid state {path} is not a regular file; starting afresh"
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(MAX_STATE_BYTES + 1)
        except OSError as exc:
            return None, f"cannot read the Xid state {path} ({exc}); starting afresh"
    if len(data) > MAX_STATE_BYTES:
        return None, f"the Xid state {path} is over {MAX_STATE_BYTES} bytes; starting afresh"
    try:
        return parse_xid_state(data.decode("utf-8")), None
    except (ValueError, RecursionError) as exc:
        return None, f"the Xid state {path} is corrupt ({str(exc)[:200]}); starting afresh"


def read_boot_id(path: str) -> tuple[str | None, str | None]:
    """This boot's id (the kernel's random boot_id), or None with the reason."""
    try:
        with open(path, "rb") as handle:
            text = handle.read(MAX_BOOT_ID).decode("ascii", "replace").strip()
    except OSError as exc:
        return None, f"cannot read the boot id {path}: {exc}"
    if not BOOT_ID.fullmatch(text):
        return None, f"the boot id in {path} is not one: {_short(text)}"
    return text, None


# -------------------------------------------------------------------------------------------------------- rendering

FAMILIES = (
    ("megaprov_gpu_info", "gauge", "GPU identity as nvidia-smi reports it (value 1)."),
    (
        "megaprov_gpu_utilization_ratio",
        "gauge",
        "Fraction of the last sample period in which a kernel ran on the GPU (nvidia-smi utilization.gpu / 100).",
    ),
    ("megaprov_gpu_memory_used_bytes", "gauge", "GPU memory allocated by active contexts, in bytes."),
    ("megaprov_gpu_memory_total_bytes", "gauge", "Total GPU memory, in bytes."),
    ("megaprov_gpu_temperature_celsius", "gauge", "GPU core temperature, in degrees Celsius."),
    ("megaprov_gpu_power_watts", "gauge", "Board power draw, in watts."),
    ("megaprov_gpu_ecc_errors_corrected_volatile_total", "counter", "Corrected ECC errors since the driver was loaded."),
    ("megaprov_gpu_ecc_errors_uncorrected_volatile_total", "counter", "Uncorrected ECC errors since the driver was loaded."),
    ("megaprov_gpu_remapped_rows_pending", "gauge", "1 when a row remapping waits for a GPU reset to take effect, else 0."),
    ("megaprov_gpu_remapped_rows_failure", "gauge", "1 when a row remapping has ever failed on this GPU, else 0."),
    ("megaprov_gpu_throttle_thermal", "gauge", "1 when the HW or SW thermal slowdown is reducing the GPU clocks, else 0."),
    (
        "megaprov_gpu_xid_errors_total",
        "counter",
        "NVIDIA Xid events in the kernel log since boot; gpu is the PCI address when no listed GPU has it.",
    ),
    (
        "megaprov_gpu_xid_last_timestamp_seconds",
        "gauge",
        "Unix time at which the collector last saw megaprov_gpu_xid_errors_total of this GPU and Xid rise.",
    ),
    ("megaprov_gpu_collector_success", "gauge", "1 when the last collection read nvidia-smi and the kernel log in full, else 0."),
    ("megaprov_gpu_collector_timestamp_seconds", "gauge", "Unix time of the last collection."),
)


def escape_label(value: str) -> str:
    """A label value in the text exposition format: backslash, double quote and line feed escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value as the exposition format (Go's ParseFloat) reads it: integers exactly, floats by repr."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        raise ValueError(f"not a finite value: {value!r}")
    return repr(float(value))


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{name}="{escape_label(value)}"' for name, value in pairs) + "}"


def _gpu_order(label: str) -> tuple[int, int, str]:
    return (0, int(label), "") if label.isdigit() else (1, 0, label)


def render(
    node: str,
    gpus: Sequence[Gpu],
    remapped: Mapping[tuple[int, int, int, int], Remapped],
    xids: Mapping[tuple[str, int], int],
    job: str | None,
    success: bool,
    timestamp: float,
    xid_times: Mapping[tuple[str, int], float] | None = None,
) -> str:
    """The whole textfile: HELP and TYPE once per family with samples, then its samples. ``xids`` and ``xid_times``
    are keyed by gpu label (attribute_xids, xid_timestamps); a time is written for a count above 0 only. Values that
    are None are left out."""
    samples: dict[str, list[tuple[list[tuple[str, str]], float]]] = {name: [] for name, _kind, _help in FAMILIES}
    tail = [("job", job)] if job is not None else []

    def per_gpu(gpu_label: str, *extra: tuple[str, str]) -> list[tuple[str, str]]:
        return [("node", node), ("gpu", gpu_label), *extra, *tail]

    def add(name: str, labels: list[tuple[str, str]], value: float | None) -> None:
        if value is not None:
            samples[name].append((labels, value))

    for gpu in gpus:
        labels = per_gpu(str(gpu.index))
        add("megaprov_gpu_info", per_gpu(str(gpu.index), ("uuid", gpu.uuid), ("name", gpu.name), ("pci_bus_id", gpu.pci_bus_id)), 1)
        add("megaprov_gpu_utilization_ratio", labels, gpu.utilization_ratio)
        add("megaprov_gpu_memory_used_bytes", labels, gpu.memory_used_bytes)
        add("megaprov_gpu_memory_total_bytes", labels, gpu.memory_total_bytes)
        add("megaprov_gpu_temperature_celsius", labels, gpu.temperature_celsius)
        add("megaprov_gpu_power_watts", labels, gpu.power_watts)
        add("megaprov_gpu_ecc_errors_corrected_volatile_total", labels, gpu.ecc_corrected_volatile)
        add("megaprov_gpu_ecc_errors_uncorrected_volatile_total", labels, gpu.ecc_uncorrected_volatile)
        rows = remapped.get(gpu.pci)
        if rows is not None:
            add("megaprov_gpu_remapped_rows_pending", labels, rows.pending)
            add("megaprov_gpu_remapped_rows_failure", labels, rows.failure)
        add("megaprov_gpu_throttle_thermal", labels, gpu.throttle_thermal)
    times = xid_times or {}
    for gpu_label, xid in sorted(xids, key=lambda key: (_gpu_order(key[0]), key[1])):
        # no job label: the Xid series keep their series when a job starts or ends
        xid_labels = [("node", node), ("gpu", gpu_label), ("xid", str(xid))]
        add("megaprov_gpu_xid_errors_total", xid_labels, xids[(gpu_label, xid)])
        rose = times.get((gpu_label, xid))
        if xids[(gpu_label, xid)] > 0 and rose is not None:
            add("megaprov_gpu_xid_last_timestamp_seconds", xid_labels, round(rose, 3))
    add("megaprov_gpu_collector_success", [("node", node)], 1 if success else 0)
    add("megaprov_gpu_collector_timestamp_seconds", [("node", node)], round(timestamp, 3))

    out = []
    for name, kind, help_text in FAMILIES:
        if not samples[name]:
            continue
        out.append(f"# HELP {name} {escape_help(help_text)}\n# TYPE {name} {kind}\n")
        out.extend(f"{name}{_labels(labels)} {format_value(value)}\n" for labels, value in samples[name])
    return "".join(out)


def write_atomic(path: str, text: str, mode: int = 0o644) -> None:
    """Replace ``path`` by ``text`` so that a reader sees the old file or the new one, never part of one: a
    temporary file in the same directory (a dot name node-exporter does not read), fsync, rename, fsync the
    directory. The temporary file is removed when anything fails."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8"))
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


# --------------------------------------------------------------------------------------------------------- commands


class _LineFilter:
    """Keeps the lines of a byte stream that contain ``marker``, each cut at ``max_line`` bytes, at most ``max_kept``."""

    def __init__(self, marker: bytes, max_line: int, max_kept: int) -> None:
        self.marker, self.max_line, self.max_kept = marker, max_line, max_kept
        self.kept: list[bytes] = []
        self.dropped = 0
        self._partial = b""

    def feed(self, chunk: bytes) -> None:
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            piece = chunk[start:] if newline < 0 else chunk[start:newline]
            room = self.max_line - len(self._partial)
            if room > 0:
                self._partial += piece[:room]
            if newline < 0:
                return
            self._line(self._partial)
            self._partial = b""
            start = newline + 1

    def close(self) -> None:
        if self._partial:
            self._line(self._partial)
        self._partial = b""

    def _line(self, line: bytes) -> None:
        if self.marker in line:
            if len(self.kept) < self.max_kept:
                self.kept.append(line)
            else:
                self.dropped += 1


def _kill(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        try:
            process.kill()
        except OSError:
            pass
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def run_bounded(argv: Sequence[str], timeout: float, max_bytes: int, keep: bytes | None = None) -> CommandResult:
    """Run argv (no shell; its own process group, killed at the timeout) and read at most ``max_bytes`` of its
    stdout. With ``keep``, only the stdout lines containing it are kept (each at most MAX_LINE bytes, at most
    MAX_XID_LINES): the whole stream is read through, within the byte limit, without holding it."""
    name = os.path.basename(argv[0]) if argv else "?"
    try:
        process = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, close_fds=True
        )
    except (OSError, ValueError) as exc:
        return CommandResult(None, "", "", f"cannot run {argv[0] if argv else '(empty command)'}: {exc}", False)
    assert process.stdout is not None and process.stderr is not None
    deadline = time.monotonic() + timeout
    out, err = bytearray(), bytearray()
    lines = _LineFilter(keep, MAX_LINE, MAX_XID_LINES) if keep is not None else None
    read, truncated, timed_out = 0, False, False
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ, "out")
    selector.register(process.stderr, selectors.EVENT_READ, "err")
    try:
        while selector.get_map() and not truncated:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _events in selector.select(remaining):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                elif key.data == "err":
                    err += chunk[: max(0, MAX_STDERR - len(err))]
                else:
                    if read + len(chunk) > max_bytes:
                        chunk, truncated = chunk[: max_bytes - read], True
                    read += len(chunk)
                    if lines is not None:
                        lines.feed(chunk)
                    else:
                        out += chunk
                    if truncated:
                        break
    finally:
        selector.close()
    returncode: int | None = None
    if timed_out or truncated:
        _kill(process)
    else:
        try:
            returncode = process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill(process)
    process.stdout.close()
    process.stderr.close()
    if lines is not None:
        if not truncated:
            lines.close()
        out = bytearray(b"\n".join(lines.kept))
        truncated = truncated or lines.dropped > 0
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    error = ""
    if timed_out:
        error = f"{name} did not finish within {timeout:g} s"
    elif truncated and lines is not None and lines.dropped:
        error = f"{name} printed more than {lines.max_kept} lines with {lines.marker.decode()!r}; the rest were not kept"
    elif truncated:
        error = f"{name} printed more than {max_bytes} bytes; the rest was not read"
    elif returncode != 0:
        said = next((line.strip() for line in (stderr + "\n" + stdout).splitlines() if line.strip()), "")
        error = f"{name} exited with status {returncode}" + (f": {said[:200]}" if said else "")
    return CommandResult(returncode, stdout, stderr, error, truncated)


if TYPE_CHECKING:  # (argv, timeout, max_bytes, keep) -> result: run_bounded, or a stand-in in tests
    Runner = Callable[[Sequence[str], float, int, bytes | None], CommandResult]


def query_gpus(nvidia_smi: str, timeout: float, runner: Runner = run_bounded) -> tuple[CommandResult, list[str]]:
    """nvidia-smi --query-gpu with the clocks_throttle_reasons.* names, again with clocks_event_reasons.* when the
    driver rejects the former. Returns the answer and the argv asked."""
    argv = gpu_query.query_gpu(GPU_FIELDS, nvidia_smi)
    result = runner(argv, timeout, MAX_SMI_OUTPUT, None)
    said = result.stdout + result.stderr
    if result.returncode not in (0, None) and "is not a valid field to query" in said and "clocks_throttle_reasons." in said:
        argv = gpu_query.query_gpu(GPU_FIELDS_EVENT_NAMES, nvidia_smi)
        result = runner(argv, timeout, MAX_SMI_OUTPUT, None)
    return result, argv


def query_remapped(nvidia_smi: str, timeout: float, runner: Runner = run_bounded) -> CommandResult:
    return runner(gpu_query.query_remapped(nvidia_smi), timeout, MAX_SMI_OUTPUT, None)


# ------------------------------------------------------------------------------------------------------------- main


def collect(args: argparse.Namespace, runner: Runner = run_bounded) -> tuple[str, list[str]]:
    """Everything one run reports: the textfile and the problems to print on stderr."""
    problems: list[str] = []
    success = True
    now = time.time()

    gpu_answer, _fields = query_gpus(args.nvidia_smi, args.timeout, runner)
    # The rows nvidia-smi did print count even when it failed (a lost GPU fails the query, the others answer); the
    # skipped lines are worth reporting only when it did not fail (then its error says it).
    gpus = parse_gpus(gpu_answer.stdout, None if gpu_answer.error else problems)
    if gpu_answer.error:
        success = False
        problems.append(f"nvidia-smi GPU query failed: {gpu_answer.error}")
    elif not gpus:
        success = False
        problems.append("nvidia-smi GPU query listed no GPU")
    remapped: dict[tuple[int, int, int, int], Remapped] = {}
    if gpus:
        # Absent (not a failure) when it errors or prints nothing: GPUs before Ampere have no row remapper.
        remapped = parse_remapped(query_remapped(args.nvidia_smi, args.timeout, runner).stdout)

    xids: Counter[tuple[str, int]] = Counter()
    xid_times: dict[tuple[str, int], float] = {}
    kernel_argv = shlex.split(args.kernel_log_command)
    if kernel_argv:
        kernel = runner(kernel_argv, args.timeout, args.max_kernel_log_mib << 20, XID_MARKER)
        xids = parse_xids(kernel.stdout, problems)
        if kernel.error:
            success = False
            problems.append(f"kernel log: {kernel.error}" + ("; the Xid counts are of the part read" if kernel.truncated else ""))
        state, kept = track_xids(args.state, args.boot_id_file, xids, now, not kernel.error, problems)
        success = success and kept
        xid_times = xid_timestamps(state, xids, gpus)

    job = None
    units_argv = shlex.split(args.job_units_command)
    if units_argv:
        units = runner(units_argv, args.timeout, MAX_UNITS_OUTPUT, None)
        if units.error:
            problems.append(f"job units: {units.error}; no job label")
        else:
            names = parse_job_units(units.stdout)
            job = job_label(names)
            if len(names) > 1:
                problems.append(f"job units: {len(names)} jobs are active ({', '.join(names)}); no job label")

    if args.dcgm_job_mapping_dir:
        record = os.path.join(os.path.dirname(args.state) or ".", "dcgm-job-mapping.json")
        problem = write_job_mapping(args.dcgm_job_mapping_dir, [gpu.index for gpu in gpus], job, record)
        if problem:
            problems.append(problem)
    text = render(args.node, gpus, remapped, attribute_xids(xids, gpus), job, success, now, xid_times)
    return text, problems


MAPPING_NAME = re.compile(r"[0-9]{1,3}")
MAX_MAPPING_RECORD = 1 << 16  # bytes of the record of the mapping files written


def write_job_mapping(directory: str, indexes: Sequence[int], job: str | None, record: str) -> str | None:
    """dcgm-exporter's HPC job mapping (internal/pkg/transformation/hpc.go): a file per GPU index named by it, one job
    id a line. Each GPU gets ``job``. What this collector wrote is kept in ``record`` (JSON: file name -> job); with no
    job (or several) only those of its files that still hold what it wrote are removed, so files a scheduler's prolog
    writes (or MIG mappings, ``<gpu>.<instance>``) are left alone. Returns a problem, or None."""
    try:
        with open(record, encoding="utf-8") as handle:
            loaded = json.loads(handle.read(MAX_MAPPING_RECORD))
        written = {str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}
    except (OSError, ValueError):
        written = {}
    try:
        present = {name for name in os.listdir(directory) if MAPPING_NAME.fullmatch(name)}
        wanted = {str(i) for i in indexes} if job is not None else set()
        kept: dict[str, str] = {}
        for name in sorted(present - wanted):
            if name in written and _read_small(os.path.join(directory, name)) == f"{written[name]}\n":
                os.unlink(os.path.join(directory, name))
        for name in sorted(wanted):
            path = os.path.join(directory, name)
            if name not in present or _read_small(path) != f"{job}\n":
                write_atomic(path, f"{job}\n")
            kept[name] = str(job)
        if kept != written:
            write_atomic(record, json.dumps(kept, sort_keys=True), 0o600)
    except OSError as exc:
        return f"dcgm job mapping {directory}: {exc}; DCGM's series keep their last job label"
    return None


def _read_small(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read(256)


def track_xids(
    state_path: str, boot_id_file: str, xids: Mapping[tuple[str, int], int], now: float, complete: bool, problems: list[str]
) -> tuple[XidState, bool]:
    """Advance the state file by this run's Xid counts (per PCI address); returns the new state and whether it was
    kept (False: the boot id could not be read, or the file could not be written)."""
    kept = True
    previous, problem = load_xid_state(state_path)
    if problem:
        problems.append(problem)
    boot_id, problem = read_boot_id(boot_id_file)
    if boot_id is None:
        # taken for the same boot: a reboot cannot be told, but the old Xids do not look new on every run
        kept = False
        problems.append(f"{problem}; taking it for the boot of the Xid state")
        boot_id = previous.boot_id if previous is not None else ""
    state = advance_xid_state(previous, xids, boot_id, now, complete=complete)
    if state != previous:
        try:
            write_atomic(state_path, dump_xid_state(state), 0o600)
        except OSError as exc:
            kept = False
            problems.append(
                f"cannot write the Xid state {state_path}: {exc}; the next run will take the Xids counted since it was last written for new ones"
            )
    return state, kept


def _command(value: str) -> str:
    try:
        shlex.split(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a command line ({exc}): {value!r}") from exc
    return value


def _node(value: str) -> str:
    if not value or len(value) > 253:
        raise argparse.ArgumentTypeError("a node name of 1 to 253 characters")
    return value


def _positive(value: str) -> float:
    number = float(value)
    if not 0 < number <= 300:
        raise argparse.ArgumentTypeError("seconds, more than 0 and at most 300")
    return number


def _mib_limit(value: str) -> int:
    number = int(value)
    if not 1 <= number <= 1024:
        raise argparse.ArgumentTypeError("MiB, 1 to 1024")
    return number


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Write GPU metrics for node-exporter's textfile collector (nvidia-smi, kernel log Xids).")
    p.add_argument("--node", required=True, type=_node, help="the node label of every series")
    p.add_argument("--output", required=True, help="the .prom file to replace, in node-exporter's textfile directory")
    p.add_argument("--nvidia-smi", default=DEFAULT_NVIDIA_SMI, help=f"nvidia-smi to run (default {DEFAULT_NVIDIA_SMI})")
    p.add_argument(
        "--kernel-log-command",
        type=_command,
        default=DEFAULT_KERNEL_LOG_COMMAND,
        help="command printing this boot's kernel log, one string split with shlex (no shell); '' turns Xid counting off"
        f" (default: {DEFAULT_KERNEL_LOG_COMMAND})",
    )
    p.add_argument(
        "--job-units-command",
        type=_command,
        default=DEFAULT_JOB_UNITS_COMMAND,
        help="command listing the active megaprov-job-*.service units (systemctl list-units --plain --no-legend format), one string"
        " split with shlex (no shell); '' turns the job label off",
    )
    p.add_argument("--timeout", type=_positive, default=DEFAULT_TIMEOUT, help="seconds each command may run (default 10)")
    p.add_argument(
        "--max-kernel-log-mib",
        type=_mib_limit,
        metavar="MIB",
        default=DEFAULT_MAX_KERNEL_LOG_MIB,
        help=f"MiB of kernel log read at most (default {DEFAULT_MAX_KERNEL_LOG_MIB}); beyond it the collection counts as failed",
    )
    p.add_argument(
        "--state",
        metavar="FILE",
        default=DEFAULT_STATE,
        help="the Xid state file (counts and the times they rose, between runs); its directory must exist"
        f" (default {DEFAULT_STATE}, the unit's StateDirectory)",
    )
    p.add_argument(
        "--boot-id-file",
        metavar="FILE",
        default=DEFAULT_BOOT_ID_FILE,
        help=f"the file holding this boot's id, which tells a new boot in the Xid state (default {DEFAULT_BOOT_ID_FILE})",
    )
    p.add_argument(
        "--dcgm-job-mapping-dir",
        metavar="DIR",
        default="",
        help="dcgm-exporter's --hpc-job-mapping-dir: the node's training job is written there per GPU index ('' = off)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.output.endswith(".prom"):
        parser().error("--output must end in .prom (node-exporter's textfile collector reads only *.prom)")
    try:
        text, problems = collect(args)
    except Exception as exc:  # a bug must not hide the GPUs: report the failure in the file and on stderr
        text, problems = render(args.node, [], {}, {}, None, False, time.time()), [f"collection failed: {type(exc).__name__}: {exc}"]
    for problem in problems:
        print(f"megaprov_gpu_metrics: {problem}", file=sys.stderr)
    try:
        write_atomic(args.output, text)
    except OSError as exc:
        print(f"megaprov_gpu_metrics: cannot write {args.output}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
