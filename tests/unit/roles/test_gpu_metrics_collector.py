"""The node_exporter role's GPU metrics textfile collector (roles/node_exporter/files/megaprov_gpu_metrics.py) and the
nvidia-smi stand-in its fixtures come with (tests/fixtures/gpu_metrics/nvidia-smi-replay).

The parsers run on recorded nvidia-smi and kernel log output; main() runs end to end as the systemd timer runs it,
with --nvidia-smi pointing at the replay, and its file is read back with a strict exposition format parser (and
prometheus_client's and promtool's where they are installed)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import math
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import load_module

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "ansible_collections/megaprov/cluster/roles/node_exporter/files/megaprov_gpu_metrics.py"
FIXTURES = ROOT / "tests/fixtures/gpu_metrics"
REPLAY = FIXTURES / "nvidia-smi-replay"
BOOT_ID_FILE = FIXTURES / "boot_id"
MIB = 1048576


def _load(path: Path, name: str) -> ModuleType:
    """Import the replay by path: it has no .py suffix, which tests.conftest.load_module needs; registered in
    sys.modules, as dataclasses need."""
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


gm = load_module(SCRIPT, "megaprov_gpu_metrics")
replay = _load(REPLAY, "megaprov_nvidia_smi_replay")


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------- strict exposition parser

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"'
VALUE = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|NaN|[-+]Inf"
SAMPLE = re.compile(rf"(?P<name>{NAME})(?:\{{(?P<labels>(?:{LABEL})(?:,{LABEL})*)?\}})? (?P<value>{VALUE})")
HELP_OR_TYPE = re.compile(rf"# (HELP|TYPE) ({NAME}) (.*)")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], value)


def parse_exposition(text: str) -> dict[str, dict[str, Any]]:
    """The text exposition format, strictly: every line a HELP, TYPE or sample line; HELP and TYPE at most once per
    family and before its samples; a family's samples together; no series twice; the file ends with a newline.
    Returns {family: {"type", "help", "samples": [(labels, value)]}}."""
    assert text.endswith("\n"), "the file must end with a line feed"
    families: dict[str, dict[str, Any]] = {}
    done: set[str] = set()
    current = None
    series = set()
    for number, line in enumerate(text[:-1].split("\n"), 1):
        header = HELP_OR_TYPE.fullmatch(line)
        if header:
            kind, name, rest = header.groups()
            family = families.setdefault(name, {"type": None, "help": None, "samples": []})
            assert family[kind.lower()] is None, f"line {number}: second {kind} for {name}"
            assert not family["samples"], f"line {number}: {kind} after samples of {name}"
            assert kind != "TYPE" or rest in TYPES, f"line {number}: type {rest!r}"
            family[kind.lower()] = rest
            if current != name:
                assert name not in done, f"line {number}: {name} split in two"
                if current is not None:
                    done.add(current)
                current = name
            continue
        match = SAMPLE.fullmatch(line)
        assert match, f"line {number} is not exposition format: {line!r}"
        name = match["name"]
        if current != name:
            assert name not in done, f"line {number}: samples of {name} are not together"
            if current is not None:
                done.add(current)
            current = name
        labels = {m[1]: _unescape(m[2]) for m in re.finditer(LABEL, match["labels"] or "")}
        assert len(labels) == len(re.findall(LABEL, match["labels"] or "")), f"line {number}: a label twice"
        key = (name, tuple(sorted(labels.items())))
        assert key not in series, f"line {number}: series twice: {line!r}"
        series.add(key)
        families.setdefault(name, {"type": None, "help": None, "samples": []})["samples"].append((labels, float(match["value"])))
    return families


def values(families: dict[str, dict[str, Any]], name: str, **match: str) -> list[float]:
    return [value for labels, value in families.get(name, {}).get("samples", []) if all(labels.get(k) == v for k, v in match.items())]


def value(families: dict[str, dict[str, Any]], name: str, **match: str) -> float:
    found = values(families, name, **match)
    assert len(found) == 1, (name, match, found)
    return found[0]


def check_with_installed_parsers(text: str) -> None:
    """prometheus_client's parser and promtool's check, when they are installed (neither is a dependency)."""
    if importlib.util.find_spec("prometheus_client") is not None:
        from prometheus_client.parser import text_string_to_metric_families

        assert list(text_string_to_metric_families(text))
    promtool = shutil.which("promtool") or shutil.which("promtool", path=str(Path(sys.executable).parent))
    if promtool:
        proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_strict_parser_rejects_what_the_format_forbids() -> None:
    good = '# HELP a x\n# TYPE a gauge\na{n="1"} 1\n'
    assert value(parse_exposition(good), "a", n="1") == 1
    for bad in (
        'a{n="1"} 1',  # no final line feed
        'a{n="1"} one\n',
        'a{n="1",n="2"} 1\n',
        'a{n="x\ny"} 1\n',
        'a{n="1"} 1\na{n="1"} 2\n',
        'a{n="1"} 1\nb 1\na{n="2"} 1\n',
        "a 1\n# TYPE a gauge\n",
        "# TYPE a gauge\n# TYPE a counter\n",
        "# TYPE a meter\n",
    ):
        with pytest.raises(AssertionError):
            parse_exposition(bad)


# ------------------------------------------------------------------------------------------------------ nvidia-smi


def test_gpu_fields_are_the_recorded_ones_and_known_to_nvidia_smi() -> None:
    """The collector asks what the recordings answer (replay.json of every fixture directory) with field names
    nvidia-smi knows (--help-query-gpu, both spellings of the slowdown reasons)."""
    gpu_query = "--query-gpu=" + ",".join(gm.GPU_FIELDS)
    remapped_query = "--query-remapped-rows=" + ",".join(gm.REMAPPED_FIELDS)
    for manifest in sorted(FIXTURES.rglob("replay.json")):
        asked = [entry["args"] for entry in json.loads(manifest.read_text())["answers"]]
        assert [gpu_query, gm.gpu_query.FORMAT] in asked and [remapped_query, gm.gpu_query.REMAPPED_FORMAT] in asked, manifest
    assert set(gm.GPU_FIELDS) | set(gm.GPU_FIELDS_EVENT_NAMES) <= replay.GPU_FIELDS
    assert set(gm.REMAPPED_FIELDS) <= replay.REMAPPED_FIELDS
    assert [f for f in gm.GPU_FIELDS_EVENT_NAMES if "reasons" in f] == [
        "clocks_event_reasons.hw_thermal_slowdown",
        "clocks_event_reasons.sw_thermal_slowdown",
    ]


def test_every_query_of_the_collection_uses_fields_nvidia_smi_knows() -> None:
    """The collector's queries are the collection's (module_utils/gpu_query.py), and so are the modules', doctor's and
    the training job's samples: every field of each is one nvidia-smi lists (--help-query-gpu)."""
    assert gm.GPU_FIELDS == gm.gpu_query.METRICS and gm.REMAPPED_FIELDS == gm.gpu_query.REMAPPED
    queries = {name: getattr(gm.gpu_query, name) for name in ("INVENTORY", "HEALTH", "METRICS", "METRICS_EVENT_NAMES", "SAMPLES")}
    for name, fields in queries.items():
        assert set(fields) <= replay.GPU_FIELDS, name
    assert set(gm.gpu_query.REMAPPED) <= replay.REMAPPED_FIELDS


def test_parse_gpus_reads_the_h100_recording_exactly() -> None:
    problems: list[str] = []
    gpus = gm.parse_gpus(fixture("query-gpu.csv"), problems)
    assert problems == []
    assert [g.index for g in gpus] == list(range(8))
    assert {g.name for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    first = gpus[0]
    assert first.uuid == "GPU-1d4e6b2a-7c3f-4a8e-9b5d-2f6a8c1e3d70"
    assert first.pci_bus_id == "00000000:18:00.0" and first.pci == (0, 0x18, 0, 0)
    assert first.utilization_ratio == 0.97
    assert first.memory_used_bytes == 71234 * MIB == 74694262784
    assert first.memory_total_bytes == 81559 * MIB
    assert first.temperature_celsius == 61
    assert first.power_watts == 618.42
    assert (first.ecc_corrected_volatile, first.ecc_uncorrected_volatile, first.throttle_thermal) == (0, 0, 0)
    assert gpus[3].power_watts == 69.81 and gpus[3].utilization_ratio == 0 and gpus[3].memory_used_bytes == 0
    assert gpus[2].ecc_corrected_volatile == 3 and gpus[5].ecc_uncorrected_volatile == 2
    assert [g.throttle_thermal for g in gpus] == [0, 0, 0, 0, 0, 0, 1, 0]
    assert [g.pci_bus_id[9:11] for g in gpus] == ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]


def test_values_nvidia_smi_cannot_give_are_none_never_zero() -> None:
    gpus = {g.index: g for g in gm.parse_gpus(fixture("degraded/query-gpu.csv"))}
    assert gpus[1].utilization_ratio is None  # [N/A]: MIG mode
    assert gpus[1].memory_used_bytes == 13 * MIB and gpus[1].memory_total_bytes == 81920 * MIB
    assert gpus[2].power_watts is None  # [Unknown Error]
    assert gpus[2].ecc_corrected_volatile is None and gpus[2].ecc_uncorrected_volatile is None  # [N/A]
    assert gpus[2].throttle_thermal is None  # both [Not Supported]
    assert gpus[2].utilization_ratio == 0 and gpus[2].temperature_celsius == 38
    assert gpus[3].temperature_celsius is None  # [N/A]
    assert gpus[3].throttle_thermal == 1  # HW [Not Supported], SW Active
    assert gpus[3].utilization_ratio == 1.0 and gpus[3].ecc_corrected_volatile == 12


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("97", 97),
        (" 69.81 ", 69.81),
        ("0", 0),
        ("-3", -3),
        ("[N/A]", None),
        ("[Not Supported]", None),
        ("[Unknown Error]", None),
        ("N/A", None),
        ("nan", None),
        ("inf", None),
        ("1e3", None),
        ("", None),
        ("97 %", None),
    ],
)
def test_parse_number(text: str, expected: float | None) -> None:
    assert gm.parse_number(text) == expected


def test_malformed_gpu_lines_are_skipped_and_reported() -> None:
    row = "0, GPU-aaaa, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 50, 1, 81559, 40, 100.00, 0, 0, Not Active, Not Active"
    text = "\n".join(
        [
            "Unable to determine the device handle for GPU3: 0000:5D:00.0: Unknown Error",
            row,
            row.replace("0, GPU-aaaa", "1, GPU-bbbb", 1) + ", extra",  # a field too many
            row.replace("0, GPU-aaaa", "x, GPU-cccc", 1),  # no index
            row.replace("0, GPU-aaaa", "2, GPU-dddd", 1).replace("00000000:18:00.0", "00000000:18:00"),  # no function
            row.replace("GPU-aaaa", "GPU-eeee"),  # index 0 again
            row.replace("0, GPU-aaaa", "3, GPU-ffff", 1),  # bus id again
            row.replace("0, GPU-aaaa", "4, GPU-gggg", 1).replace("00000000:18:00.0", "00000000:19:00.0").replace("NVIDIA H100", "x" * 5000),
            "",
            row.replace("0, GPU-aaaa", "5, GPU-hhhh", 1).replace("00000000:18:00.0", "00000000:1A:00.0"),
        ]
    )
    problems: list[str] = []
    gpus = gm.parse_gpus(text, problems)
    assert [(g.index, g.uuid) for g in gpus] == [(0, "GPU-aaaa"), (5, "GPU-hhhh")]
    assert len(problems) == 7 and "Unable to determine" in problems[0]


def test_at_most_64_gpus_are_read() -> None:
    rows = [
        f"{i}, GPU-{i:04d}, NVIDIA H100 80GB HBM3, 0000{i // 256:04X}:{i % 256:02X}:00.0, 1, 1, 1, 1, 1, 0, 0, Not Active, Not Active"
        for i in range(70)
    ]
    problems: list[str] = []
    assert len(gm.parse_gpus("\n".join(rows), problems)) == 64
    assert any("more than 64" in p for p in problems)


def test_parse_remapped_rows() -> None:
    rows = gm.parse_remapped(fixture("query-remapped-rows.csv"))
    assert len(rows) == 8
    assert rows[(0, 0xAB, 0, 0)] == gm.Remapped(correctable=0, uncorrectable=1, pending=1, failure=0)
    assert rows[(0, 0x5D, 0, 0)] == gm.Remapped(correctable=2, uncorrectable=0, pending=0, failure=0)
    degraded = gm.parse_remapped(fixture("degraded/query-remapped-rows.csv"))
    assert degraded[(0, 0x0F, 0, 0)] == gm.Remapped(None, None, None, None)  # MIG: [N/A]
    assert degraded[(0, 0x4E, 0, 0)].failure == 1
    # A GPU without a row remapper (before Ampere): nothing, or a message, never a row.
    assert gm.parse_remapped("") == {}
    assert gm.parse_remapped("Unable to determine the device handle for GPU3: 0000:5D:00.0: Unknown Error\n00000000:18:00.0, 0, 0\n") == {}


# ------------------------------------------------------------------------------------------------------ kernel log


def test_parse_xids_counts_the_kernel_log_per_address_and_xid() -> None:
    assert gm.parse_xids(fixture("kernel.log")) == Counter(
        {("0000:2a:00", 13): 2, ("0000:9a:00", 31): 1, ("0000:ab:00", 94): 1, ("0000:ab:00", 63): 1, ("0000:5d:00", 79): 1}
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "[103456.208840] n kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            ("0000:3b:00", 79),
        ),
        ("[ 88.1] n kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=1234, name=python, Graphics Exception", ("0000:3b:00", 13)),
        ("NVRM: Xid (PCI:0000:3B:00): 13, Graphics Engine Exception on (GPC 0, TPC 1)", ("0000:3b:00", 13)),  # older driver, upper case
        ("[  12.5] NVRM: Xid (0000:03:00): 14, Channel 00000001", ("0000:03:00", 14)),  # oldest format, dmesg
        ("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No", ("0000:01:00", 94)),
        ("NVRM: Xid (PCI:0000:01:00 GPU-I:01 GPU-CI:00): 43, pid=1, name=x, Ch 00000010", ("0000:01:00", 43)),
        ("NVRM: Xid (PCI:0001:c1:00.0): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error", ("0001:c1:00", 48)),
        ("NVRM: Xid (PCI:0000:3b:00): 119, pid=5, name=python, Timeout after 6s of waiting for RPC response", ("0000:3b:00", 119)),
        ("NVRM: GPU at PCI:0000:3b:00: GPU-5e9d3a7c-2f14-4b86-b0d2-7c1e9a4f6b35", None),
        ("NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus.", None),
        ("NVRM: Xid (PCI:0000:3b:00): , pid=1", None),
        ("NVRM: Xid (PCI:0000:3b:00): 123456, too many digits", None),
        ("nvidia-nvlink: Nvlink Core is being initialized", None),
    ],
)
def test_parse_xids_formats(line: str, expected: tuple[str, int] | None) -> None:
    assert gm.parse_xids(line) == (Counter({expected: 1}) if expected else Counter())


def test_xid_series_are_bounded() -> None:
    text = "\n".join(f"NVRM: Xid (PCI:0000:{i % 256:02x}:00): {i // 256 + 1}, x" for i in range(600))
    problems: list[str] = []
    assert len(gm.parse_xids(text, problems)) == gm.MAX_XID_SERIES
    assert problems


def test_xids_are_counted_under_the_gpu_index_else_under_their_address() -> None:
    gpus = gm.parse_gpus(fixture("query-gpu.csv"))
    xids = gm.attribute_xids(gm.parse_xids(fixture("kernel.log")), gpus)
    assert xids == Counter({("1", 13): 2, ("4", 31): 1, ("5", 94): 1, ("5", 63): 1, ("3", 79): 1})
    # GPU 3 fell off the bus and nvidia-smi no longer lists it: its Xid 79 keeps its PCI address as the gpu label.
    lost = gm.parse_gpus(fixture("gpu-lost/query-gpu.csv"))
    assert [g.index for g in lost] == [0, 1, 2, 4, 5, 6, 7]
    assert gm.attribute_xids(gm.parse_xids(fixture("kernel.log")), lost)[("0000:5d:00", 79)] == 1
    # the 8-digit upper-case domain of pci.bus_id and the 4-digit lower-case one of the Xid line are the same GPU
    assert gm.attribute_xids(Counter({("0001:3b:00", 13): 4}), gm.parse_gpus(_row(0, "00000001:3B:00.0"))) == Counter({("0", 13): 4})


def _row(index: int, bus_id: str) -> str:
    return f"{index}, GPU-x, NVIDIA H100 80GB HBM3, {bus_id}, 1, 1, 1, 1, 1, 0, 0, Not Active, Not Active\n"


# ------------------------------------------------------------------------------------------------------------ jobs


def test_job_label() -> None:
    one = gm.parse_job_units(fixture("systemctl-units-one-job.txt"))
    assert one == ["llama-8b"] and gm.job_label(one) == "llama-8b"
    two = gm.parse_job_units(
        "megaprov-job-a.service loaded active running megaprov job a\nmegaprov-job-b_2.x.service loaded active running megaprov job b\n"
    )
    assert two == ["a", "b_2.x"] and gm.job_label(two) is None
    assert gm.job_label(gm.parse_job_units("")) is None
    ignored = "\n".join(
        [
            "megaprov-job-.service loaded active running empty name",
            "megaprov-job--x.service loaded active running starts with a dash",
            "megaprov-job-a\\x2db.service loaded active running escaped",
            f"megaprov-job-{'x' * 65}.service loaded active running too long",
            "megaprov-job-c.service loaded failed failed not active",
            "megaprov-job-d.socket loaded active running not a service",
            "other-job-e.service loaded active running another prefix",
            "",
        ]
    )
    assert gm.parse_job_units(ignored) == []
    assert gm.parse_job_units(ignored + "megaprov-job-Z9.service loaded active running ok\n") == ["Z9"]


# ------------------------------------------------------------------------------------------------------- Xid state

A, B, C = ("0000:3b:00", 79), ("0000:3b:00", 48), ("0000:5d:00", 94)


def _state(boot_id: str = "boot-1", **entries: tuple[tuple[str, int], int, float]) -> Any:
    return gm.XidState(boot_id, {key: gm.XidSeen(total, rose) for key, total, rose in entries.values()})


def test_a_first_sighting_rose_now() -> None:
    state = gm.advance_xid_state(None, Counter({A: 2, B: 1}), "boot-1", 1000.12345)
    assert state == gm.XidState("boot-1", {B: gm.XidSeen(1, 1000.123), A: gm.XidSeen(2, 1000.123)})
    later = gm.advance_xid_state(state, Counter({A: 2, B: 1, C: 1}), "boot-1", 1015.0)
    assert later.xids[C] == gm.XidSeen(1, 1015.0)  # new to the state: rose now
    assert gm.advance_xid_state(None, Counter(), "boot-1", 1000.0) == gm.XidState("boot-1", {})
    assert gm.advance_xid_state(None, {A: 0}, "boot-1", 1000.0).xids == {}  # a count of 0 is no Xid


def test_an_unchanged_count_keeps_its_time_and_a_rise_updates_it() -> None:
    state = gm.advance_xid_state(None, Counter({A: 1, B: 1}), "boot-1", 1000.0)
    for now in (1015.0, 1030.0, 99999.0):
        state = gm.advance_xid_state(state, Counter({A: 1, B: 1}), "boot-1", now)
    assert state.xids == {A: gm.XidSeen(1, 1000.0), B: gm.XidSeen(1, 1000.0)}
    state = gm.advance_xid_state(state, Counter({A: 3, B: 1}), "boot-1", 100000.5)
    assert state.xids == {A: gm.XidSeen(3, 100000.5), B: gm.XidSeen(1, 1000.0)}


def test_a_new_boot_takes_every_count_as_risen_now() -> None:
    before = _state("boot-1", a=(A, 5, 1000.0), b=(B, 1, 1000.0), c=(C, 2, 1000.0))
    state = gm.advance_xid_state(before, Counter({A: 1, B: 1}), "boot-2", 2000.0)
    # A is lower and B the same as before the reboot: both new; C of the old boot is gone
    assert state == gm.XidState("boot-2", {A: gm.XidSeen(1, 2000.0), B: gm.XidSeen(1, 2000.0)})
    assert gm.advance_xid_state(before, Counter(), "boot-2", 2000.0) == gm.XidState("boot-2", {})


def test_a_fall_keeps_the_time_and_an_incomplete_read_keeps_the_counts() -> None:
    before = _state(a=(A, 5, 1000.0), b=(B, 1, 1000.0))
    # the whole log read: journald dropped old lines of this boot; the count is lower, not new, and B is gone
    full = gm.advance_xid_state(before, Counter({A: 2}), "boot-1", 2000.0)
    assert full.xids == {A: gm.XidSeen(2, 1000.0)}
    assert gm.advance_xid_state(full, Counter({A: 3}), "boot-1", 3000.0).xids == {A: gm.XidSeen(3, 3000.0)}
    # a part of the log read: the next full read is not a rise
    part = gm.advance_xid_state(before, Counter({A: 2}), "boot-1", 2000.0, complete=False)
    assert part.xids == before.xids
    assert gm.advance_xid_state(part, Counter({A: 5, B: 1}), "boot-1", 2015.0).xids == before.xids
    # a rise in a part of the log is a rise
    assert gm.advance_xid_state(before, Counter({A: 6}), "boot-1", 2000.0, complete=False).xids == {
        A: gm.XidSeen(6, 2000.0),
        B: gm.XidSeen(1, 1000.0),
    }


def test_the_state_is_bounded_dropping_the_oldest() -> None:
    old = gm.XidState("boot-1", {(f"0000:{i:02x}:00", 13): gm.XidSeen(1, float(i)) for i in range(200)})
    counts = Counter({(f"0001:{i % 256:02x}:00", 13 + i // 256): 1 for i in range(400)})
    # an incomplete read carries the 200 old entries: the 400 counted now stay, and the 112 newest old ones
    state = gm.advance_xid_state(old, counts, "boot-1", 5000.0, complete=False)
    assert len(state.xids) == gm.MAX_XID_STATE == 512
    assert set(counts) <= set(state.xids)
    assert sorted(seen.rose for key, seen in state.xids.items() if key not in counts) == [float(i) for i in range(88, 200)]
    # more counted than fit: the most recent rises are kept
    many = gm.XidState("boot-1", {(f"0002:{i % 256:02x}:00", i // 256): gm.XidSeen(1, float(i)) for i in range(600)})
    kept = gm.advance_xid_state(many, {key: 1 for key in many.xids}, "boot-1", 9000.0)
    assert len(kept.xids) == 512 and min(seen.rose for seen in kept.xids.values()) == 88.0
    assert len(gm.parse_xid_state(gm.dump_xid_state(many)).xids) == 512  # a file with more is cut too


def test_xid_timestamps_follow_the_gpu_labels_of_the_counts() -> None:
    gpus = gm.parse_gpus(fixture("query-gpu.csv"))
    counts = gm.parse_xids(fixture("kernel.log"))
    state = gm.advance_xid_state(None, counts, "boot-1", 1000.0)
    state = gm.advance_xid_state(state, counts + Counter({("0000:2a:00", 13): 1}), "boot-1", 1015.0)
    times = gm.xid_timestamps(state, counts + Counter({("0000:2a:00", 13): 1}), gpus)
    assert times == {("1", 13): 1015.0, ("4", 31): 1000.0, ("5", 94): 1000.0, ("5", 63): 1000.0, ("3", 79): 1000.0}
    # GPU 3 fell off the bus: its Xid 79 is counted under its address now, and keeps its time
    lost = gm.xid_timestamps(gm.advance_xid_state(state, counts, "boot-1", 1030.0), counts, gm.parse_gpus(fixture("gpu-lost/query-gpu.csv")))
    assert lost[("0000:5d:00", 79)] == 1000.0 and ("3", 79) not in lost
    assert gm.xid_timestamps(state, Counter(), gpus) == {}


def test_the_state_file_round_trips() -> None:
    state = gm.advance_xid_state(None, gm.parse_xids(fixture("kernel.log")), "6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f", 1718000000.4567)
    text = gm.dump_xid_state(state)
    assert gm.parse_xid_state(text) == state
    assert json.loads(text)["xids"][0] == {"gpu": "0000:2a:00", "xid": 13, "count": 2, "rose": 1718000000.457}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "[]",
        "null",
        '{"version": 2, "boot_id": "b", "xids": []}',
        '{"version": 1, "boot_id": 7, "xids": []}',
        '{"version": 1, "boot_id": "b\nc", "xids": []}',
        '{"version": 1, "boot_id": "b", "xids": {}}',
        '{"version": 1, "boot_id": "b", "xids": [[1, 2, 3, 4]]}',
        '{"version": 1, "boot_id": "b", "xids": [{"gpu": "0", "xid": 79, "count": 1}]}',
        '{"version": 1, "boot_id": "b", "xids": [{"gpu": "", "xid": 79, "count": 1, "rose": 1}]}',
        '{"version": 1, "boot_id": "b", "xids": [{"gpu": "0", "xid": "79", "count": 1, "rose": 1}]}',
        '{"version": 1, "boot_id": "b", "xids": [{"gpu": "0", "xid": 79, "count": 0, "rose": 1}]}',
        '{"version": 1, "boot_id": "b", "xids": [{"gpu": "0", "xid": 79, "count": true, "rose": 1}]}',
        '{"version": 1, "boot_id": "b", "xids": [{"gpu": "0", "xid": 79, "count": 1, "rose": NaN}]}',
        '{"version": 1, "boot_id": "b", "xids": [{"gpu": "0", "xid": 79, "count": 1, "rose": -1}]}',
        '{"version": 1, "boot_id": "b", "xids": [{"gpu": "0", "xid": 79, "count": 1, "rose": 1}, {"gpu": "0", "xid": 79, "count": 2, "rose": 1}]}',
        "[" * 100000,
    ],
)
def test_a_corrupt_state_is_refused(text: str) -> None:
    with pytest.raises((ValueError, RecursionError)):
        gm.parse_xid_state(text)


def test_load_xid_state_starts_afresh_from_a_missing_corrupt_or_oversized_file(tmp_path: Path) -> None:
    path = tmp_path / "xids.json"
    assert gm.load_xid_state(str(path)) == (None, None)  # none yet: no complaint
    state = gm.XidState("b", {A: gm.XidSeen(1, 5.0)})
    path.write_text(gm.dump_xid_state(state))
    assert gm.load_xid_state(str(path)) == (state, None)
    for content in (b"\xff\xfe not json", b'{"version": 1}', b"[" * 100000, b" " * (gm.MAX_STATE_BYTES + 1)):
        path.write_bytes(content)
        loaded, problem = gm.load_xid_state(str(path))
        assert loaded is None and problem and "starting afresh" in problem, content[:20]
    path.unlink()
    path.mkdir()
    assert gm.load_xid_state(str(path))[0] is None
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_text(gm.dump_xid_state(state))
    assert gm.load_xid_state(str(link))[0] is None  # not followed


def test_read_boot_id(tmp_path: Path) -> None:
    assert gm.read_boot_id(str(BOOT_ID_FILE)) == ("6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f", None)
    missing = gm.read_boot_id(str(tmp_path / "absent"))
    assert missing[0] is None and "cannot read the boot id" in str(missing[1])
    (tmp_path / "bad").write_text("not a boot id\n")
    assert gm.read_boot_id(str(tmp_path / "bad"))[0] is None


# ------------------------------------------------------------------------------------------------------- rendering


def _render(job: str | None = None, success: bool = True, directory: str = "") -> str:
    gpus = gm.parse_gpus(fixture(f"{directory}query-gpu.csv"))
    remapped = gm.parse_remapped(fixture(f"{directory}query-remapped-rows.csv"))
    counts = gm.parse_xids(fixture("kernel.log"))
    xids = gm.attribute_xids(counts, gpus)
    times = gm.xid_timestamps(gm.advance_xid_state(None, counts, "boot-1", 1717999000.1234), counts, gpus)
    return str(gm.render("gpu-node-07", gpus, remapped, xids, job, success, 1718000000.25, times))


def test_render_writes_every_metric_once_per_family_with_node_and_gpu() -> None:
    text = _render()
    families = parse_exposition(text)
    check_with_installed_parsers(text)
    assert list(families) == [name for name, _, _ in gm.FAMILIES]
    for name, kind, _ in gm.FAMILIES:
        assert families[name]["type"] == kind and families[name]["help"], name
        for labels, _ in families[name]["samples"]:
            assert labels["node"] == "gpu-node-07"
            assert ("gpu" in labels) == (name not in ("megaprov_gpu_collector_success", "megaprov_gpu_collector_timestamp_seconds")), name
            assert "job" not in labels
    assert value(families, "megaprov_gpu_info", gpu="5") == 1
    info = families["megaprov_gpu_info"]["samples"][5][0]
    assert info == {
        "node": "gpu-node-07",
        "gpu": "5",
        "uuid": "GPU-2b7e9f14-6a3c-4d02-85f1-9e4a6c8b0d27",
        "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": "00000000:AB:00.0",
    }
    assert value(families, "megaprov_gpu_utilization_ratio", gpu="0") == 0.97
    assert value(families, "megaprov_gpu_memory_used_bytes", gpu="0") == 71234 * MIB
    assert value(families, "megaprov_gpu_memory_total_bytes", gpu="7") == 81559 * MIB
    assert value(families, "megaprov_gpu_temperature_celsius", gpu="6") == 86
    assert value(families, "megaprov_gpu_power_watts", gpu="3") == 69.81
    assert value(families, "megaprov_gpu_ecc_errors_corrected_volatile_total", gpu="2") == 3
    assert value(families, "megaprov_gpu_ecc_errors_uncorrected_volatile_total", gpu="5") == 2
    assert value(families, "megaprov_gpu_remapped_rows_pending", gpu="5") == 1
    assert values(families, "megaprov_gpu_remapped_rows_failure") == [0] * 8
    assert value(families, "megaprov_gpu_throttle_thermal", gpu="6") == 1
    assert value(families, "megaprov_gpu_xid_errors_total", gpu="3", xid="79") == 1
    assert value(families, "megaprov_gpu_xid_errors_total", gpu="1", xid="13") == 2
    assert len(values(families, "megaprov_gpu_xid_last_timestamp_seconds")) == 5
    assert value(families, "megaprov_gpu_xid_last_timestamp_seconds", gpu="3", xid="79") == 1717999000.123
    assert value(families, "megaprov_gpu_collector_success") == 1
    assert value(families, "megaprov_gpu_collector_timestamp_seconds") == 1718000000.25
    assert 'megaprov_gpu_power_watts{node="gpu-node-07",gpu="0"} 618.42\n' in text
    assert 'megaprov_gpu_memory_total_bytes{node="gpu-node-07",gpu="0"} 85520809984\n' in text


def test_values_that_are_not_available_are_left_out() -> None:
    families = parse_exposition(_render(directory="degraded/"))
    assert values(families, "megaprov_gpu_utilization_ratio", gpu="1") == []
    assert values(families, "megaprov_gpu_power_watts", gpu="2") == []
    assert values(families, "megaprov_gpu_ecc_errors_corrected_volatile_total", gpu="2") == []
    assert values(families, "megaprov_gpu_throttle_thermal", gpu="2") == []
    assert values(families, "megaprov_gpu_temperature_celsius", gpu="3") == []
    assert values(families, "megaprov_gpu_remapped_rows_pending", gpu="1") == []
    assert value(families, "megaprov_gpu_remapped_rows_failure", gpu="3") == 1
    assert len(values(families, "megaprov_gpu_info")) == 4
    # kernel.log's GPUs are not on this node: every Xid keeps its address
    assert {labels["gpu"] for labels, _ in families["megaprov_gpu_xid_errors_total"]["samples"]} == {
        "0000:2a:00",
        "0000:9a:00",
        "0000:ab:00",
        "0000:5d:00",
    }


def test_the_job_label_goes_on_every_per_gpu_gauge_only() -> None:
    families = parse_exposition(_render(job="llama-8b"))
    for name, labels_and_values in ((name, family["samples"]) for name, family in families.items()):
        for labels, _ in labels_and_values:
            expected = "llama-8b" if "gpu" in labels and "xid" not in labels else None
            assert labels.get("job") == expected, (name, labels)
    # the Xid series keep their series when a job starts
    assert value(families, "megaprov_gpu_xid_errors_total", gpu="3", xid="79") == 1
    assert value(families, "megaprov_gpu_xid_last_timestamp_seconds", gpu="3", xid="79") == 1717999000.123


def test_label_values_are_escaped() -> None:
    gpu = gm.parse_gpus(_row(0, "00000000:18:00.0").replace("NVIDIA H100 80GB HBM3", 'a "quoted" \\ name'))
    node = 'node "7"\\back\nslash'
    text = gm.render(node, gpu, {}, Counter({("0", 13): 1}), 'job"x', False, 1.0)
    assert 'name="a \\"quoted\\" \\\\ name"' in text
    assert 'node="node \\"7\\"\\\\back\\nslash"' in text
    families = parse_exposition(text)
    check_with_installed_parsers(text)
    assert families["megaprov_gpu_info"]["samples"][0][0]["name"] == 'a "quoted" \\ name'
    assert value(families, "megaprov_gpu_collector_success", node=node) == 0
    assert value(families, "megaprov_gpu_xid_errors_total", node=node) == 1
    assert gm.escape_label('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    assert gm.escape_help("x\\y\nz") == "x\\\\y\\nz"


def test_format_value() -> None:
    assert gm.format_value(85520809984) == "85520809984"
    assert gm.format_value(0.97) == "0.97" and gm.format_value(69.81) == "69.81"
    assert gm.format_value(True) == "1" and gm.format_value(1e21) == "1e+21"
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError):
            gm.format_value(bad)


# ---------------------------------------------------------------------------------------------------------- output


def test_write_atomic_replaces_the_file_with_mode_0644_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    out = tmp_path / "megaprov_gpu.prom"
    out.write_text("old\n")
    out.chmod(0o600)
    old_umask = os.umask(0o077)
    try:
        gm.write_atomic(str(out), "new\n")
    finally:
        os.umask(old_umask)
    assert out.read_text() == "new\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["megaprov_gpu.prom"]


def test_write_atomic_removes_its_temporary_file_when_it_fails(tmp_path: Path) -> None:
    target = tmp_path / "megaprov_gpu.prom"
    target.mkdir()  # os.replace of a file onto a directory fails
    with pytest.raises(OSError):
        gm.write_atomic(str(target), "x\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["megaprov_gpu.prom"]


# -------------------------------------------------------------------------------------------------------- commands


def test_run_bounded_stops_at_the_timeout_and_the_output_limit(tmp_path: Path) -> None:
    slow = gm.run_bounded(["sleep", "30"], 0.5, 1000)
    assert slow.returncode is None and "did not finish within 0.5 s" in slow.error
    big = gm.run_bounded(["head", "-c", "5000", "/dev/zero"], 10, 1000)
    assert big.truncated and len(big.stdout) == 1000 and "more than 1000 bytes" in big.error
    missing = gm.run_bounded([str(tmp_path / "absent")], 10, 1000)
    assert missing.returncode is None and missing.error.startswith("cannot run")
    failing = gm.run_bounded(["sh", "-c", "echo oops >&2; exit 3"], 10, 1000)
    assert failing.returncode == 3 and failing.error == "sh exited with status 3: oops"
    ok = gm.run_bounded(["printf", "a\\nb\\n"], 10, 1000)
    assert (ok.returncode, ok.stdout, ok.error) == (0, "a\nb\n", "")


def test_run_bounded_keeps_only_xid_lines_each_bounded(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    long_line = "NVRM: Xid (PCI:0000:3b:00): 13, " + "x" * 10000
    log.write_text("noise " * 50000 + "\n" + long_line + "\nmore\nNVRM: Xid (PCI:0000:3b:00): 79, lost")  # no final newline
    result = gm.run_bounded(["cat", str(log)], 10, 64 << 20, gm.XID_MARKER)
    assert result.error == ""
    assert result.stdout.split("\n") == [long_line[: gm.MAX_LINE], "NVRM: Xid (PCI:0000:3b:00): 79, lost"]
    assert gm.parse_xids(result.stdout) == Counter({("0000:3b:00", 13): 1, ("0000:3b:00", 79): 1})


def test_run_bounded_reports_xid_lines_beyond_what_it_keeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gm, "MAX_XID_LINES", 2)
    log = tmp_path / "kern.log"
    log.write_text("NVRM: Xid (PCI:0000:3b:00): 13, a\n" * 3)
    result = gm.run_bounded(["cat", str(log)], 10, 1 << 20, gm.XID_MARKER)
    assert result.truncated and result.stdout.count("\n") == 1 and f"more than 2 lines with {gm.XID_MARKER.decode()!r}" in result.error


def test_the_gpu_query_falls_back_to_the_event_reason_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver that no longer accepts clocks_throttle_reasons.* rejects the query; it is asked again with the new names."""
    event_query = "--query-gpu=" + ",".join(gm.GPU_FIELDS_EVENT_NAMES)
    shutil.copy(FIXTURES / "query-gpu.csv", tmp_path / "query-gpu.csv")
    manifest = {
        "answers": [{"args": [event_query, gm.gpu_query.FORMAT], "stdout": "query-gpu.csv"}],
        "unknown_fields": ["clocks_throttle_reasons.hw_thermal_slowdown", "clocks_throttle_reasons.sw_thermal_slowdown"],
    }
    (tmp_path / "replay.json").write_text(json.dumps(manifest))
    monkeypatch.setenv(replay.ENV, str(tmp_path))
    result, argv = gm.query_gpus(str(REPLAY), 10)
    assert argv[1] == event_query and result.error == ""
    assert len(gm.parse_gpus(result.stdout)) == 8


# --------------------------------------------------------------------------------------------------- the replay


def _replay(*args: str, directory: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, replay.ENV: str(directory)} if directory else {k: v for k, v in os.environ.items() if k != replay.ENV}
    return subprocess.run([str(REPLAY), *args], capture_output=True, text=True, env=env, timeout=60)


def test_the_replay_answers_the_recorded_queries_and_nothing_else(tmp_path: Path) -> None:
    gpu_query = "--query-gpu=" + ",".join(gm.GPU_FIELDS)
    answered = _replay(gpu_query, gm.gpu_query.FORMAT)
    assert answered.returncode == 0 and answered.stdout == fixture("query-gpu.csv")
    reordered = _replay("--format", "csv,noheader,nounits", gpu_query)  # option order and `--opt value` as nvidia-smi takes them
    assert reordered.returncode == 0 and reordered.stdout == answered.stdout
    unknown = _replay("--query-gpu=index,uuid,clocks.applications.sm", gm.gpu_query.FORMAT)
    assert (unknown.returncode, unknown.stdout) == (2, 'Field "clocks.applications.sm" is not a valid field to query.\n\n')
    drifted = _replay("--query-gpu=" + ",".join(gm.GPU_FIELDS[:-1]), gm.gpu_query.FORMAT)  # valid fields, not the recorded list
    assert drifted.returncode == 2 and "no recording" in drifted.stderr and drifted.stdout == ""
    other_format = _replay(gpu_query, "--format=csv")
    assert other_format.returncode == 2 and "no recording" in other_format.stderr
    for args in ((), ("-L",), ("-q",), (gpu_query, gm.gpu_query.FORMAT, "--query-remapped-rows=gpu_bus_id")):
        refused = _replay(*args)
        assert refused.returncode == 9 and refused.stdout.startswith("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")
    empty = _replay(gpu_query, gm.gpu_query.FORMAT, directory=tmp_path)
    assert empty.returncode == 9 and "NVIDIA-SMI has failed" in empty.stdout
    lost = _replay(gpu_query, gm.gpu_query.FORMAT, directory=FIXTURES / "gpu-lost")
    assert lost.returncode == 15 and lost.stdout.count("\n") == 7 and "Unable to determine the device handle" in lost.stderr


# ---------------------------------------------------------------------------------------------------------- main()


def _main(
    tmp_path: Path, *extra: str, replay_dir: Path | None = None, kernel_log: str = "kernel.log", boot_id_file: Path = BOOT_ID_FILE
) -> tuple[subprocess.CompletedProcess[str], str]:
    """One run of the script, its state in tmp_path/state/xids.json (the directory the unit's StateDirectory makes)."""
    out = tmp_path / "textfile" / "megaprov_gpu.prom"
    out.parent.mkdir(exist_ok=True)
    (tmp_path / "state").mkdir(exist_ok=True)
    env = {**os.environ, replay.ENV: str(replay_dir or FIXTURES)}
    argv = [
        sys.executable,
        str(SCRIPT),
        "--node",
        "gpu-node-07",
        "--output",
        str(out),
        "--nvidia-smi",
        str(REPLAY),
        "--kernel-log-command",
        f"cat {FIXTURES / kernel_log}",
        "--job-units-command",
        f"cat {FIXTURES / 'systemctl-units-one-job.txt'}",
        "--state",
        str(tmp_path / "state" / "xids.json"),
        "--boot-id-file",
        str(boot_id_file),
        *extra,
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    text = out.read_text() if out.exists() else ""
    assert sorted(p.name for p in out.parent.iterdir()) == (["megaprov_gpu.prom"] if text else [])  # no temporary file left
    if text:
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
        check_with_installed_parsers(text)
    return proc, text


def test_main_end_to_end_writes_valid_exposition_format(tmp_path: Path) -> None:
    proc, text = _main(tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    families = parse_exposition(text)
    assert value(families, "megaprov_gpu_collector_success") == 1
    assert len(values(families, "megaprov_gpu_info", job="llama-8b")) == 8
    assert value(families, "megaprov_gpu_utilization_ratio", gpu="0", job="llama-8b") == 0.97
    assert value(families, "megaprov_gpu_memory_used_bytes", gpu="5") == 71301 * MIB
    assert value(families, "megaprov_gpu_remapped_rows_pending", gpu="5") == 1
    assert value(families, "megaprov_gpu_xid_errors_total", gpu="3", xid="79") == 1
    assert abs(value(families, "megaprov_gpu_collector_timestamp_seconds") - time.time()) < 120
    # every Xid of the boot is new to a collector without a state: all rose at this run
    rose = values(families, "megaprov_gpu_xid_last_timestamp_seconds")
    assert len(rose) == 5 and set(rose) == {value(families, "megaprov_gpu_collector_timestamp_seconds")}
    state_file = tmp_path / "state" / "xids.json"
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600 and sorted(p.name for p in state_file.parent.iterdir()) == ["xids.json"]
    state = gm.parse_xid_state(state_file.read_text())
    assert state.boot_id == BOOT_ID_FILE.read_text().strip() and len(state.xids) == 5


def _xid_times(text: str) -> dict[tuple[str, str], float]:
    samples = parse_exposition(text).get("megaprov_gpu_xid_last_timestamp_seconds", {"samples": []})["samples"]
    return {(labels["gpu"], labels["xid"]): v for labels, v in samples}


def test_main_keeps_the_time_of_an_old_xid_and_moves_that_of_a_new_one(tmp_path: Path) -> None:
    _, first = _main(tmp_path)
    state_file = tmp_path / "state" / "xids.json"
    written = state_file.stat().st_mtime_ns
    time.sleep(0.05)
    proc, again = _main(tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    assert _xid_times(again) == _xid_times(first)
    assert state_file.stat().st_mtime_ns == written  # unchanged: not written again
    log = tmp_path / "more.log"
    log.write_text(fixture("kernel.log") + "[ 9999.000001] gpu-node-07 kernel: NVRM: Xid (PCI:0000:5d:00): 79, pid=1, name=x, lost\n")
    time.sleep(0.05)
    _, risen = _main(tmp_path, "--kernel-log-command", f"cat {log}")
    times = _xid_times(risen)
    assert value(parse_exposition(risen), "megaprov_gpu_xid_errors_total", gpu="3", xid="79") == 2
    assert times[("3", "79")] > _xid_times(first)[("3", "79")]
    assert {k: v for k, v in times.items() if k != ("3", "79")} == {k: v for k, v in _xid_times(first).items() if k != ("3", "79")}
    # a new boot with the same counts: every one rose again
    other_boot = tmp_path / "boot_id"
    other_boot.write_text("0d9c8b7a-6f5e-4d3c-2b1a-009988776655\n")
    time.sleep(0.05)
    _, rebooted = _main(tmp_path, "--kernel-log-command", f"cat {log}", boot_id_file=other_boot)
    assert all(v > times[k] for k, v in _xid_times(rebooted).items())


def test_main_starts_afresh_from_a_corrupt_state(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    state_file = tmp_path / "state" / "xids.json"
    state_file.write_text('{"version": 1, "boot_id": "x", "xids": [{"gpu"')
    proc, text = _main(tmp_path)
    assert proc.returncode == 0 and "the Xid state" in proc.stderr and "is corrupt" in proc.stderr and "starting afresh" in proc.stderr
    assert value(parse_exposition(text), "megaprov_gpu_collector_success") == 1
    assert len(_xid_times(text)) == 5
    assert len(gm.parse_xid_state(state_file.read_text()).xids) == 5 and stat.S_IMODE(state_file.stat().st_mode) == 0o600


def test_main_reports_a_state_it_cannot_keep(tmp_path: Path) -> None:
    proc, text = _main(tmp_path, "--state", str(tmp_path / "absent-dir" / "xids.json"))
    assert proc.returncode == 0 and "cannot write the Xid state" in proc.stderr
    families = parse_exposition(text)
    assert value(families, "megaprov_gpu_collector_success") == 0  # every run would take every Xid for a new one
    assert len(values(families, "megaprov_gpu_xid_last_timestamp_seconds")) == 5  # still written
    proc, text = _main(tmp_path, boot_id_file=tmp_path / "no-boot-id")
    assert proc.returncode == 0 and "cannot read the boot id" in proc.stderr
    assert value(parse_exposition(text), "megaprov_gpu_collector_success") == 0


def test_main_reports_a_failing_nvidia_smi_and_still_exits_0(tmp_path: Path) -> None:
    empty = tmp_path / "no-recordings"
    empty.mkdir()
    proc, text = _main(tmp_path, replay_dir=empty)
    assert proc.returncode == 0
    assert "nvidia-smi GPU query failed: nvidia-smi-replay exited with status 9: NVIDIA-SMI has failed" in proc.stderr
    families = parse_exposition(text)
    assert value(families, "megaprov_gpu_collector_success") == 0
    assert "megaprov_gpu_info" not in families
    # the Xid counters come from the kernel log: still there, under their PCI addresses (no GPU list to map them)
    assert value(families, "megaprov_gpu_xid_errors_total", gpu="0000:5d:00", xid="79") == 1
    assert value(families, "megaprov_gpu_xid_errors_total", gpu="0000:2a:00", xid="13") == 2


def test_main_after_a_gpu_fell_off_the_bus(tmp_path: Path) -> None:
    proc, text = _main(tmp_path, replay_dir=FIXTURES / "gpu-lost")
    assert proc.returncode == 0 and "exited with status 15: Unable to determine the device handle" in proc.stderr
    families = parse_exposition(text)
    assert value(families, "megaprov_gpu_collector_success") == 0
    assert sorted(labels["gpu"] for labels, _ in families["megaprov_gpu_info"]["samples"]) == ["0", "1", "2", "4", "5", "6", "7"]
    assert value(families, "megaprov_gpu_xid_errors_total", gpu="0000:5d:00", xid="79") == 1
    assert value(families, "megaprov_gpu_remapped_rows_pending", gpu="5") == 1


def test_main_times_out_a_hanging_nvidia_smi(tmp_path: Path) -> None:
    hanging = tmp_path / "nvidia-smi"
    hanging.write_text("#!/bin/sh\nexec sleep 60\n")
    hanging.chmod(0o755)
    proc, text = _main(tmp_path, "--nvidia-smi", str(hanging), "--timeout", "1")
    assert proc.returncode == 0 and "nvidia-smi did not finish within 1 s" in proc.stderr
    assert value(parse_exposition(text), "megaprov_gpu_collector_success") == 0


def test_main_counts_a_kernel_log_over_the_limit_as_a_failure(tmp_path: Path) -> None:
    big = tmp_path / "big.log"
    big.write_text(fixture("kernel.log") + ("x" * 200 + "\n") * 6000)  # 1.2 MiB
    proc, text = _main(tmp_path, "--kernel-log-command", f"cat {big}", "--max-kernel-log-mib", "1")
    assert proc.returncode == 0 and "kernel log: cat printed more than 1048576 bytes" in proc.stderr
    families = parse_exposition(text)
    assert value(families, "megaprov_gpu_collector_success") == 0
    assert value(families, "megaprov_gpu_xid_errors_total", gpu="3", xid="79") == 1  # what was read still counts


def test_main_without_kernel_log_and_job_sources(tmp_path: Path) -> None:
    proc, text = _main(tmp_path, "--kernel-log-command", "", "--job-units-command", "")
    families = parse_exposition(text)
    assert proc.returncode == 0 and value(families, "megaprov_gpu_collector_success") == 1
    assert "megaprov_gpu_xid_errors_total" not in families and "megaprov_gpu_xid_last_timestamp_seconds" not in families
    assert not (tmp_path / "state" / "xids.json").exists()  # no Xid counting, no state
    assert all("job" not in labels for family in families.values() for labels, _ in family["samples"])


def test_main_usage_errors(tmp_path: Path) -> None:
    for extra in (("--output", str(tmp_path / "gpu.txt")), ("--kernel-log-command", "cat 'unclosed"), ("--timeout", "0")):
        proc, text = _main(tmp_path, *extra)
        assert proc.returncode == 2 and text == "" and "error:" in proc.stderr, extra


def _is_python_39_or_310(python: str) -> bool:
    check = "import sys; sys.exit(0 if sys.version_info[:2] in ((3, 9), (3, 10)) else 1)"
    return subprocess.run([python, "-c", check], capture_output=True, timeout=60).returncode == 0


def test_the_script_runs_on_the_oldest_supported_python(tmp_path: Path) -> None:
    """Nodes run it with their system python3: 3.9 or newer (Ubuntu 22.04 has 3.10)."""
    candidates = [str(p) for p in sorted(Path.home().glob(".pyenv/versions/3.9*/bin/python3.9"))]
    candidates += [c for c in (shutil.which("python3.9"), shutil.which("python3.10")) if c]
    python = next((c for c in candidates if _is_python_39_or_310(c)), None)
    if python is None:
        pytest.skip("no Python 3.9 or 3.10 here")
    if os.environ.get("MEGAPROV_MUTATION"):
        # The mutation benchmark's copy of gpu_query imports mutmut's trampoline, which only the venv's Python has;
        # the script's behaviour is tested by the venv's Python in the other tests of this file.
        pytest.skip("under the mutation benchmark the module_utils import mutmut, absent from the oldest Python")
    out = tmp_path / "megaprov_gpu.prom"
    proc = subprocess.run(
        [
            python,
            str(SCRIPT),
            "--node",
            "n",
            "--output",
            str(out),
            "--nvidia-smi",
            str(REPLAY),
            "--kernel-log-command",
            f"cat {FIXTURES / 'kernel.log'}",
        ]
        + ["--job-units-command", "", "--state", str(tmp_path / "xids.json"), "--boot-id-file", str(BOOT_ID_FILE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    families = parse_exposition(out.read_text())
    assert value(families, "megaprov_gpu_collector_success") == 1
    assert abs(value(families, "megaprov_gpu_xid_last_timestamp_seconds", gpu="3", xid="79") - time.time()) < 120
    assert gm.parse_xid_state((tmp_path / "xids.json").read_text()).xids[("0000:5d:00", 79)].total == 1


def _installed(directory: Path) -> list[str]:
    """What the node_exporter role's GPU tasks install beside the collector, laid out as on a node: the collector and
    the collection's module_utils it imports. The names of the installed files."""
    import yaml

    role = ROOT / "ansible_collections/megaprov/cluster/roles/node_exporter"
    (install,) = [t for t in yaml.safe_load((role / "tasks/gpu.yml").read_text()) if t["name"] == "Install the GPU collector and its units"]
    names = []
    for item in install["megaprov.cluster.files"]["files"]:
        if not item["path"].startswith("/usr/local/lib/megaprov/") or "content" not in item:
            continue
        source = re.fullmatch(r"\{\{ lookup\('ansible\.builtin\.file', (?:role_path ~ )?'([^']+)', rstrip=false\) \}\}", item["content"])
        assert source is not None, item
        path = role / source[1].lstrip("/") if "role_path" in item["content"] else role / "files" / source[1]
        shutil.copy(path.resolve(), directory / Path(item["path"]).name)
        assert item["mode"] in ("0755", "0644")
        names.append(Path(item["path"]).name)
    return names


def test_the_installed_collector_counts_every_xid_form_with_the_collections_parser(tmp_path: Path) -> None:
    """On a node the collector imports gpu_query.py and xid.py from beside itself, where the role installs them; the
    MIG form and the oldest form of the Xid line are counted."""
    node = tmp_path / "usr-local-lib-megaprov"
    node.mkdir()
    assert sorted(_installed(node)) == ["gpu_query.py", "megaprov_gpu_metrics.py", "xid.py"]
    log = tmp_path / "kern.log"
    log.write_text(
        "[  10.1] NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 31, pid=1234, name=python, Ch 00000008, MMU Fault\n"
        "[  10.2] NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 94, pid='<unknown>', name=<unknown>, Contained: CE User Channel\n"
        "[  10.3] NVRM: Xid (0000:03:00): 14, Channel 00000001\n"
        "[  10.4] NVRM: Xid (PCI:0000:5d:00): 79, pid=1, name=python, GPU has fallen off the bus.\n"
    )
    out = tmp_path / "megaprov_gpu.prom"
    argv = [sys.executable, "-I", str(node / "megaprov_gpu_metrics.py"), "--node", "n", "--output", str(out), "--nvidia-smi", str(REPLAY)]
    argv += ["--kernel-log-command", f"cat {log}", "--job-units-command", "", "--state", str(tmp_path / "xids.json")]
    proc = subprocess.run(
        argv + ["--boot-id-file", str(BOOT_ID_FILE)], capture_output=True, text=True, env={**os.environ, replay.ENV: str(FIXTURES)}, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    families = parse_exposition(out.read_text())
    counted = {(labels["gpu"], labels["xid"]): v for labels, v in families["megaprov_gpu_xid_errors_total"]["samples"]}
    assert counted == {("0000:3b:00", "31"): 1, ("0000:3b:00", "94"): 1, ("0000:03:00", "14"): 1, ("3", "79"): 1}
    # nothing but what the role installed (it removes exactly those files with the collector): no __pycache__
    assert sorted(p.name for p in node.iterdir()) == ["gpu_query.py", "megaprov_gpu_metrics.py", "xid.py"]

    (node / "xid.py").unlink()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "xid.py is not beside" in proc.stderr


# ------------------------------------------------------------------------------------------- dcgm-exporter job mapping


def test_the_job_is_written_where_dcgm_exporter_maps_gpus_to_jobs(tmp_path: Path) -> None:
    """--dcgm-job-mapping-dir: a file per GPU index holding the job (dcgm-exporter's --hpc-job-mapping-dir format, read
    by its stand-in in tests/fixtures/dcgm); when the job ends only the files the collector wrote go (its record beside
    the Xid state): a scheduler's own (index 9, MIG 3.0) stay."""
    mapping = tmp_path / "mapping"
    mapping.mkdir()
    (mapping / "9").write_text("slurm-41\n")
    (mapping / "3.0").write_text("slurm-42\n")
    proc, _ = _main(tmp_path, "--dcgm-job-mapping-dir", str(mapping))
    assert proc.returncode == 0 and proc.stderr == ""
    assert sorted(p.name for p in mapping.iterdir()) == ["0", "1", "2", "3", "3.0", "4", "5", "6", "7", "9"]
    assert {(mapping / str(i)).read_text() for i in range(8)} == {"llama-8b\n"}
    record = str(tmp_path / "state" / "dcgm-job-mapping.json")
    assert json.loads(Path(record).read_text()) == {str(i): "llama-8b" for i in range(8)}
    (mapping / "7").write_text("slurm-43\n")  # a scheduler took GPU 7 over since
    assert gm.write_job_mapping(str(mapping), [0, 1], None, record) is None  # the job ended
    assert sorted(p.name for p in mapping.iterdir()) == ["3.0", "7", "9"]
    assert json.loads(Path(record).read_text()) == {}
    problem = gm.write_job_mapping(str(tmp_path / "absent"), [0], "j", record)
    assert problem is not None and "keep their last job label" in problem
