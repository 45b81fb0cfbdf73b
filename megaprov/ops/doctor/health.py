"""``megaprov doctor -i INVENTORY``: the cluster's health, in tiers.

passive (seconds, read-only): what ``playbooks/doctor.yml``'s probe reads on every node (the doctor_probe module),
judged here: Xids in the kernel log, ECC and remapped rows, GPUs counted against the PCI bus and the inventory, PCIe
width, IB port state, rate and error counters (against the last run's), the host name's addresses, the clock, the
versions of the training stack across nodes, free space, the shared directory written and read by every node, the
services megaprov enabled. quick (a minute): DCGM's level-1 diagnostic and all_reduce_perf within each GPU node
against the platform's figure and the baseline the nccl stage recorded. deep (minutes): DCGM level 3 and
all_reduce_perf between pairs of nodes in two rounds that re-pair them, to tell a bad node from a bad link.

``judge`` is pure (tests/unit/ops/test_doctor_health.py); ``examine`` runs the play through ansible-runner."""

from __future__ import annotations

import ipaddress
import json
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from megaprov import paths
from megaprov.cluster import inventory as inv
from megaprov.cluster import runner
from megaprov.errors import HostsUnreachable, RunFailed, UsageError
from megaprov.ops.doctor import parsers, signatures
from megaprov.ops.doctor.findings import Finding, Report, finding
from megaprov.output import SHOWN, Reporter
from megaprov.paths import fact_cache_dir, state_dir

LEVELS = ("passive", "quick", "deep")
CLOCK_SKEW_S = 2.0  # beyond the controller's window around the probe
VERSION_KEYS = (
    ("driver", "NVIDIA driver"),
    ("cuda", "CUDA toolkit"),
    ("cuda_runtime", "CUDA runtime"),
    ("nccl", "NCCL"),
    ("torch", "torch"),
    ("megatron_core", "megatron-core"),
)
PAIR_SLOW = 0.8  # a pair under 80 % of the median pair


DIRECTORIES = ("shared", "scratch")


@dataclass(frozen=True)
class Thresholds:
    # free space each directory must keep (doctor_shared_min_free_gib, doctor_scratch_min_free_gib; both default to
    # doctor_min_free_gib) and as a share of its file system (doctor_min_free_percent)
    min_free_gib: dict[str, float] = field(default_factory=lambda: dict.fromkeys(DIRECTORIES, 10.0))
    min_free_percent: float = 5.0
    clock_skew_s: float = CLOCK_SKEW_S


@dataclass
class NodeReading:
    """What the play returned for one node."""

    node: str
    probe: dict[str, Any] | None = None
    window: tuple[float, float] | None = None  # controller's clock: the probe task's start and end
    written: dict[str, Any] | None = None
    read: dict[str, Any] | None = None
    dcgm: dict[str, Any] | None = None
    nccl: dict[str, Any] | None = None
    ib_bw: dict[str, Any] | None = None  # deep: ib_write_bw to the next node
    unreachable: str = ""


@dataclass
class ClusterFacts:
    """What the inventory says the nodes should be."""

    gpu_nodes: list[str]
    gpus_per_node: dict[str, int]  # expected GPUs (0: unknown)
    gpu_expected: dict[str, bool]
    clock_is_hosts: dict[str, bool]  # the node's clock is its host's (containers): chrony only tracks
    thresholds: Thresholds = field(default_factory=Thresholds)
    previous_counters: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # node -> "ca:port" -> counters


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def judge_node(r: NodeReading, facts: ClusterFacts) -> list[Finding]:
    """Findings of one node's reading. Pure."""
    node = r.node
    if r.unreachable:
        return [finding("NODE_UNREACHABLE", node, r.unreachable)]
    if r.probe is None:
        return []
    p = r.probe
    out: list[Finding] = []
    out += _gpus(node, p, facts)
    out += _kernel(node, p, facts)
    out += _infiniband(node, p, facts)
    out += _names(node, p)
    out += _clock(node, p, r.window, facts)
    out += _disks(node, p, facts.thresholds)
    out += _services(node, p)
    out += _shared(node, r)
    out += _dcgm(node, r.dcgm)
    out += _nccl(node, r.nccl)
    out += _ib_bw(node, r.ib_bw)
    return out


def _gpus(node: str, p: dict[str, Any], facts: ClusterFacts) -> list[Finding]:
    smi = p.get("nvidia_smi")
    pci = int(p.get("pci_gpus") or 0)
    expected = facts.gpus_per_node.get(node, 0)
    is_gpu_node = node in facts.gpu_nodes and facts.gpu_expected.get(node, True)
    if not smi and pci == 0:
        if is_gpu_node:
            return [finding("GPU_COUNT", node, "no NVIDIA GPU on the PCI bus and no nvidia-smi", cause="a GPU node shows no NVIDIA GPU at all")]
        return [
            finding(
                "GPU_CHECKS_SKIPPED",
                node,
                f"no NVIDIA GPU on the PCI bus ({'megaprov_gpu_expected: false' if node in facts.gpu_nodes else 'not a GPU node'})",
            )
        ]
    if not smi or int(smi.get("rc", 1)) != 0:
        why = (smi or {}).get("stderr", "").strip().splitlines()[-1:] if smi else ["nvidia-smi is not installed"]
        return [
            finding(
                "GPU_COUNT",
                node,
                f"{pci} NVIDIA GPU(s) on the PCI bus; nvidia-smi: {why[0] if why else 'failed'}",
                cause="the driver does not answer for the GPUs on the bus (not loaded, or a GPU hung it)",
                fix="run `megaprov bootstrap -i INV --tags gpu` (it loads or installs the driver); reboot if nvidia-smi hangs",
            )
        ]
    remap = smi.get("remapped") or {}
    remapped = str(remap.get("stdout", "")) if int(remap.get("rc", 1) or 0) == 0 else ""
    gpus = parsers.nvidia_smi_query(str(smi.get("stdout", "")), str(smi.get("fields", "")), remapped, str(remap.get("fields", "")))
    out: list[Finding] = []
    want = max(pci, expected)
    if len(gpus) < want:
        out.append(
            finding("GPU_COUNT", node, f"nvidia-smi lists {len(gpus)} GPU(s); PCI bus {pci}, inventory megaprov_gpus_per_node {expected or 'unset'}")
        )
    for g in gpus:
        label = f"GPU {g.index} ({g.bus_id})"
        if g.ecc_uncorrected_volatile:
            out.append(finding("GPU_ECC", node, f"{label}: ecc.errors.uncorrected.volatile.total = {g.ecc_uncorrected_volatile}"))
        if g.remap_failed:
            out.append(finding("GPU_ROW_REMAP_FAILED", node, f"{label}: remapped_rows.failure = Yes"))
        elif g.remap_pending:
            out.append(finding("GPU_ROW_REMAP_PENDING", node, f"{label}: remapped_rows.pending = Yes"))
        # width, not generation: an idle GPU lowers its link generation to save power
        if g.pcie_width and g.pcie_width_max and g.pcie_width < g.pcie_width_max:
            out.append(
                finding("GPU_PCIE_DEGRADED", node, f"{label}: PCIe x{g.pcie_width} of x{g.pcie_width_max} (gen {g.pcie_gen} of {g.pcie_gen_max})")
            )
    return out


def _kernel(node: str, p: dict[str, Any], facts: ClusterFacts) -> list[Finding]:
    kernel = p.get("kernel") or {}
    if not kernel.get("readable", True):
        if node in facts.gpu_nodes and facts.gpu_expected.get(node, True):
            return [finding("KERNEL_LOG_UNREADABLE", node, f"{kernel.get('source', 'kernel log')}: {kernel.get('error') or 'not readable'}")]
        return []
    lines = [str(x) for x in kernel.get("lines") or []]
    found = signatures.scan(lines, signatures.Context(f"{kernel.get('source', 'kernel log')} on {node}", node))
    keep = [f for f in found if f.code in ("GPU_XID", "RANK_OOM_KILLED", "GPU_ECC")]
    # a rank the OOM killer took is history; the node is not unhealthy for it: say it, as a warning
    return [
        f if f.code != "RANK_OOM_KILLED" else finding(f.code, node, f.evidence, f.cause, severity="warn", source=f.source, line=f.line) for f in keep
    ]


def _infiniband(node: str, p: dict[str, Any], facts: ClusterFacts) -> list[Finding]:
    ib = p.get("infiniband") or {}
    ports = parsers.ibstat(ib["ibstat"]) if ib.get("ibstat") else parsers.sysfs_ports(ib.get("sysfs") or {})
    ports = [x for x in ports if x.link_layer in ("InfiniBand", "")]
    out: list[Finding] = []
    for port in ports:
        if port.state != "Active":
            out.append(finding("IB_PORT_DOWN", node, f"{port.ca} port {port.port}: State {port.state or '?'}, Physical state {port.physical or '?'}"))
    active = [x for x in ports if x.state == "Active" and x.rate_gbps]
    if active:
        top = max(x.rate_gbps or 0 for x in active)
        for port in active:
            if (port.rate_gbps or 0) < top:
                out.append(
                    finding("IB_PORT_RATE", node, f"{port.ca} port {port.port}: Rate {port.rate_gbps:g} Gb/s, the node's fastest port {top:g} Gb/s")
                )
    before = facts.previous_counters.get(node, {})
    for key, now in counters_of(p).items():
        then = before.get(key)
        if not then:
            continue
        risen = {name: now[name] - then.get(name, 0) for name in now if now[name] > then.get(name, 0)}
        if risen:
            grew = ", ".join(f"{name} +{delta} (now {now[name]})" for name, delta in sorted(risen.items()))
            out.append(finding("IB_ERRORS_RISING", node, f"{key}: {grew} since the last doctor run"))
    return out


def counters_of(p: dict[str, Any]) -> dict[str, dict[str, int]]:
    """A node's error counters per CA:port: perfquery's where it ran, else sysfs's (named as perfquery names them)."""
    ib = p.get("infiniband") or {}
    out: dict[str, dict[str, int]] = {}
    for key, text in (ib.get("perfquery") or {}).items():
        counters = parsers.perfquery(str(text))
        out[str(key)] = {k: v for k, v in counters.items() if k in parsers.PERFQUERY_ERRORS}
    for ca, by_port in (ib.get("sysfs") or {}).items():
        for port, value in by_port.items():
            key = f"{ca}:{port}"
            if key not in out and value.get("counters"):
                out[key] = {parsers.SYSFS_NAMES[k]: int(v) for k, v in value["counters"].items() if k in parsers.SYSFS_NAMES}
    return out


def _names(node: str, p: dict[str, Any]) -> list[Finding]:
    h = p.get("hostname") or {}
    resolved = [str(a) for a in h.get("resolved") or []]
    name = h.get("name", node)
    if not resolved:
        return [
            finding(
                "HOST_WRONG_ADDRESS",
                node,
                f"getent hosts {name}: no address ({h.get('error') or 'not found'})",
                cause="the node's own name does not resolve",
            )
        ]
    loop = [a for a in resolved if _is_loopback(a)]
    if loop:
        return [finding("HOST_LOOPBACK", node, f"{name} resolves to {', '.join(resolved)}")]
    on_iface = [str(a) for a in h.get("interface_addresses") or []]
    if on_iface and not set(resolved) & set(on_iface):
        return [finding("HOST_WRONG_ADDRESS", node, f"{name} resolves to {', '.join(resolved)}; {h.get('interface')} has {', '.join(on_iface)}")]
    return []


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def _clock(node: str, p: dict[str, Any], window: tuple[float, float] | None, facts: ClusterFacts) -> list[Finding]:
    out: list[Finding] = []
    t = p.get("time")
    if window and isinstance(t, (int, float)):
        start, end = window
        skew = t - end if t > end else (t - start if t < start else 0.0)
        if abs(skew) > facts.thresholds.clock_skew_s:
            out.append(finding("CLOCK_SKEW", node, f"node clock {skew:+.1f} s off the controller's ({'ahead' if skew > 0 else 'behind'})"))
    chrony = p.get("chrony")
    if chrony and int(chrony.get("rc", 1)) == 0 and not facts.clock_is_hosts.get(node, False):
        track = parsers.chronyc_tracking(str(chrony.get("stdout", "")))
        if track.synchronised is False:
            out.append(finding("CLOCK_UNSYNCED", node, f"chronyc tracking: Leap status : {track.leap}"))
    return out


def _disks(node: str, p: dict[str, Any], limits: Thresholds) -> list[Finding]:
    out = []
    for name, d in sorted((p.get("disks") or {}).items()):
        if d.get("missing") or not d.get("total"):
            continue
        free, total = float(d["free"]), float(d["total"])
        floor = limits.min_free_gib.get(name, 10.0)
        if free < floor * 2**30 or free / total * 100 < limits.min_free_percent:
            out.append(
                finding(
                    "DISK_FULL", node,
                    f"{name} directory {d['path']}: {_gib(free)} free of {_gib(total)} ({free / total:.1%});"
                    f" thresholds {floor:g} GiB (doctor_{name}_min_free_gib) and {limits.min_free_percent:g} %",
                )
            )  # fmt: skip
    return out


def _services(node: str, p: dict[str, Any]) -> list[Finding]:
    out = []
    for unit, s in sorted((p.get("services") or {}).items()):
        if s.get("load") != "loaded":
            continue
        enabled = s.get("enabled") in ("enabled", "enabled-runtime")
        if s.get("active") == "failed" or (enabled and s.get("active") not in ("active", "activating", "reloading")):
            out.append(
                finding(
                    "SERVICE_DOWN", node, f"{unit}: {s.get('active')} ({s.get('sub')}), {s.get('enabled')}",
                    fix=f"`systemctl start {unit}` on {node} (`journalctl -u {unit}` says why it stopped), or `megaprov bootstrap -i INV`",
                )
            )  # fmt: skip
    return out


def _shared(node: str, r: NodeReading) -> list[Finding]:
    if r.written is None and r.read is None:
        return []
    w = r.written or {}
    if r.written is not None and (failed(w) or not w.get("sha256")):
        return [finding("SHARED_DIR", node, f"write of {node}'s file as the cluster user: {_msg(w)}")]
    # a writer that wrote nothing (unreachable, or its own write failed) is that node's finding, not every reader's
    bad = [c for c in (r.read or {}).get("checks", []) if not c.get("ok") and c.get("error") != NO_CHECK_FILE]
    absent = any(c.get("error") == NO_CHECK_FILE for c in (r.read or {}).get("checks", []))
    if r.read is not None and failed(r.read) and not bad and not absent:
        return [finding("SHARED_DIR", node, f"read back: {_msg(r.read or {})}")]
    if bad:
        what = "; ".join(f"{c.get('writer', '?')}'s file: {c.get('error') or 'mismatch'}" for c in bad[:4])
        return [finding("SHARED_DIR", node, f"reading the other nodes' files: {what}")]
    return []


NO_CHECK_FILE = "that node wrote no check file"  # the shared_check module's words


def _msg(res: dict[str, Any]) -> str:
    return " ".join(str(res.get("msg") or res.get("stderr") or "failed").split())[:300]


def _dcgm(node: str, res: dict[str, Any] | None) -> list[Finding]:
    if not res or res.get("skipped") or int(res.get("rc", 0)) == 127:
        return []
    results = parsers.dcgmi_diag(str(res.get("stdout", "")))
    if not results:
        if int(res.get("rc", 0)) != 0:
            return [finding("DCGM_DIAG", node, f"dcgmi diag exited {res.get('rc')}: {_msg(res)}", cause="DCGM's diagnostic did not run")]
        return []
    out = []
    for d in results:
        if d.status == "Fail":
            gpu = f"GPU {d.gpu}: " if d.gpu else ""
            out.append(finding("DCGM_DIAG", node, f"dcgmi diag: {gpu}{d.test} Fail{': ' + d.message if d.message else ''}"))
    return out


def _nccl(node: str, res: dict[str, Any] | None) -> list[Finding]:
    if not res or res.get("skipped"):
        return []
    if failed(res):
        return [finding("NCCL_BANDWIDTH_LOW", node, f"all_reduce_perf within {node}: {_msg(res)}")]
    return []


def _ib_bw(node: str, res: dict[str, Any] | None) -> list[Finding]:
    if not res or res.get("skipped") or not failed(res):
        return []
    args = res.get("invocation", {}).get("module_args", {})
    return [finding("IB_BANDWIDTH_LOW", node, f"ib_write_bw from {node} ({args.get('device', '?')}) to {args.get('peer', '?')}: {_msg(res)}")]


def failed(res: dict[str, Any]) -> bool:
    """A module result the play kept (failed_when: false): the module said why it failed in msg."""
    return bool(res.get("failed")) or (bool(res.get("msg")) and not res.get("skipped"))


def pair_rounds(nodes: list[str]) -> list[list[list[str]]]:
    """Two rounds of node pairs for pairwise all_reduce_perf: neighbours (0-1, 2-3, ...), then shifted by one (1-2,
    3-4, ..., last-0), so every node meets two different partners and a bad node is slow in both of its pairs while a
    bad link is slow in one. Pure."""
    n = len(nodes)
    if n < 2:
        return []
    first = [[nodes[i], nodes[i + 1]] for i in range(0, n - 1, 2)]
    if n == 2:
        return [first]
    shifted = [[nodes[i], nodes[(i + 1) % n]] for i in range(1, n, 2)]
    if n % 2:  # the odd one out of the first round meets the first node
        first.append([nodes[-1], nodes[0]])
    return [first, shifted]


def judge_pairs(results: list[tuple[list[str], float | None]]) -> list[Finding]:
    """Nodes slow in every pair they were in (under PAIR_SLOW of the median pair), from (pair, peak bus bandwidth)
    results; a pair that failed outright counts as slow. A slow pair that no slow node explains is the path between
    its two nodes (NCCL_LINK_SLOW, on no node: neither is drained for it), an error where the pair failed. Pure."""
    measured = [bw for _, bw in results if bw]
    if not results:
        return []
    median = statistics.median(measured) if measured else 0.0
    slow_pairs = [pair for pair, bw in results if not bw or bw < PAIR_SLOW * median]
    nodes = {n for pair, _ in results for n in pair}
    out = []
    for node in sorted(nodes):
        mine = [(pair, bw) for pair, bw in results if node in pair]
        if len(mine) >= 2 and all(pair in slow_pairs for pair, _ in mine):
            text = "; ".join(f"{'-'.join(pair)}: {bw:.1f} GB/s" if bw else f"{'-'.join(pair)}: failed" for pair, bw in mine)
            out.append(finding("NCCL_PAIR_SLOW", node, f"{text} (median pair {median:.1f} GB/s)"))
    blamed = {f.node for f in out}
    for pair, bw in results:
        if pair in slow_pairs and not blamed & set(pair):
            said = f"{bw:.1f} GB/s against the median pair's {median:.1f} GB/s" if bw else "failed"
            out.append(finding("NCCL_LINK_SLOW", "", f"{'-'.join(pair)}: {said}", severity="" if bw else "error"))
    return out


def judge_versions(readings: list[NodeReading], gpu_nodes: list[str]) -> list[Finding]:
    """Versions that differ between nodes (the training stack: GPU nodes; the driver: nodes that have one). Pure."""
    out = []
    for key, label in VERSION_KEYS:
        values = {r.node: str((r.probe or {}).get("versions", {}).get(key, "")) for r in readings if r.probe is not None}
        if key != "driver":
            values = {n: v for n, v in values.items() if n in gpu_nodes}
        present = {n: v for n, v in values.items() if v}
        if not present:
            continue
        missing = sorted(n for n, v in values.items() if not v and n in gpu_nodes) if key not in ("driver", "cuda") else []
        distinct = sorted(set(present.values()))
        if len(distinct) < 2 and not missing:
            continue
        common = max(distinct, key=lambda v: sum(1 for x in present.values() if x == v))
        odd = sorted(n for n, v in present.items() if v != common) + missing
        for node in odd:
            have = present.get(node, "not installed")
            evidence = f"{label}: {node} has {have}; " + ", ".join(f"{n} {v}" for n, v in sorted(present.items()) if n != node)[:300]
            out.append(finding("VERSION_MISMATCH", node, evidence, cause=f"{node} runs {label} {have} while the other nodes run {common}"))
    return out


def judge(readings: list[NodeReading], facts: ClusterFacts, pairs: list[tuple[list[str], float | None]] | None = None) -> Report:
    report = Report(checked=[r.node for r in readings])
    for r in readings:
        report.add(*judge_node(r, facts))
    report.add(*judge_versions(readings, facts.gpu_nodes))
    if pairs:
        report.add(*judge_pairs(pairs))
    return report


# ---- running the play


def cluster_facts(found: inv.Inventory, extravars: dict[str, Any]) -> ClusterFacts:
    def var(host: str, name: str, default: Any) -> Any:
        return extravars.get(name, found.host_var(host, name, default))

    hosts = _doctor_hosts(found)
    gpu_nodes = found.hosts_of("gpu_nodes")
    names = ["doctor_min_free_gib", "doctor_min_free_percent", "doctor_clock_skew_s"] + [f"doctor_{d}_min_free_gib" for d in DIRECTORIES]
    values: dict[str, float] = {}
    for name in names:
        raw = var(found.head, name, None)
        if raw is None:
            continue
        try:
            values[name] = float(raw)
        except (TypeError, ValueError):
            raise UsageError(f"{name}={str(raw)[:40]!r} is not a number", f"write {name} as a number, e.g. 10") from None
        if not 0 <= values[name] <= (100 if name.endswith("percent") else 1e9) or (name == "doctor_clock_skew_s" and values[name] == 0):
            raise UsageError(f"{name}={values[name]:g} is out of range", "free space and skew are positive numbers, the percent 0-100")
    floor = values.get("doctor_min_free_gib", 10.0)
    limits = Thresholds(
        min_free_gib={d: values.get(f"doctor_{d}_min_free_gib", floor) for d in DIRECTORIES},
        min_free_percent=values.get("doctor_min_free_percent", 5.0),
        clock_skew_s=values.get("doctor_clock_skew_s", CLOCK_SKEW_S),
    )
    return ClusterFacts(
        gpu_nodes=gpu_nodes,
        gpus_per_node={h: _int(var(h, "megaprov_gpus_per_node", 0)) for h in hosts},
        gpu_expected={h: inv.as_bool(var(h, "megaprov_gpu_expected", True)) for h in hosts},
        clock_is_hosts={h: not inv.as_bool(var(h, "common_chrony_steer_clock", True)) for h in hosts},
        thresholds=limits,
    )


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _doctor_hosts(found: inv.Inventory) -> list[str]:
    seen: list[str] = []
    for host in found.hosts_of("head") + found.hosts_of("gpu_nodes"):
        if host not in seen:
            seen.append(host)
    return seen


def counters_file(inventory: Path) -> Path:
    return state_dir() / "doctor" / f"{fact_cache_dir(inventory).name}-counters.json"


def findings_file(inventory: Path) -> Path:
    return state_dir() / "doctor" / f"{fact_cache_dir(inventory).name}.json"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


@dataclass(frozen=True)
class Request:
    inventory: str
    level: str = "passive"
    limit: str | None = None
    drain: bool = False
    extravars: dict[str, Any] = field(default_factory=dict)
    report: Reporter = SHOWN


def examine(req: Request) -> Report:
    """Run the doctor play on the inventory's nodes and judge what they returned."""
    if req.level not in LEVELS:
        raise UsageError(f"--level {req.level} is not a level", "use passive, quick or deep")
    inventory = Path(req.inventory)
    found = inv.load(req.inventory, paths.roles_dir(), paths.cluster_defaults())
    facts = cluster_facts(found, req.extravars)
    hosts = _doctor_hosts(found)
    if req.limit:
        wanted = [h.strip() for h in req.limit.split(",") if h.strip()]
        unknown = [h for h in wanted if h not in found.hosts]
        if unknown:
            raise UsageError(f"--node {unknown[0]} is not a host of {found.path}", "use one of " + ", ".join(hosts))
        hosts = [h for h in hosts if h in wanted]
    previous = _read_json(counters_file(inventory))
    facts.previous_counters = previous if isinstance(previous, dict) else {}
    gpu_hosts = [h for h in hosts if h in facts.gpu_nodes and facts.gpu_expected.get(h, True)]
    rounds = pair_rounds(gpu_hosts) if req.level == "deep" else []
    result = _run(req, hosts, {"level": req.level, "pairs": rounds, "drain": {}})
    readings = _readings(result, hosts)
    reached(readings, found.path)
    pairs = _pair_results(result)
    report = judge(readings, facts, pairs)
    counters = {r.node: counters_of(r.probe) for r in readings if r.probe}
    _write_json(counters_file(inventory), {**facts.previous_counters, **counters})
    return report


NOT_READ = "the doctor play returned nothing from this node (not matched by the play, or not reached)"


def reached(readings: list[NodeReading], inventory: Path) -> None:
    """A node the play returned nothing for was not checked: it is no healthy node. Every node of every level runs the
    probe, so a reading without it and without an unreachable failure is a node the play never reached (a relative
    inventory Ansible read from another directory matched no host, and doctor said "nothing wrong"). None reached at
    all: one error, exit 4; some: each is NODE_UNREACHABLE."""
    silent = [r for r in readings if r.probe is None and not r.unreachable]
    if readings and len(silent) == len(readings):
        raise HostsUnreachable(
            f"doctor: the play reached none of the {len(readings)} node(s) of {inventory}",
            f"check that Ansible reads the inventory: ansible-inventory -i {inventory} --graph",
        )
    for r in silent:
        r.unreachable = NOT_READ


PROBE_ACTIONS = (
    "megaprov.cluster.doctor_probe",
    "megaprov.cluster.shared_check",
    "ansible.builtin.shell",
    "megaprov.cluster.nccl_check",
    "megaprov.cluster.ib_write_bw",
    "ansible.builtin.getent",
)


def _run(req: Request, hosts: list[str], doctor: dict[str, Any], collect: tuple[str, ...] = PROBE_ACTIONS) -> runner.RunResult:
    spec = runner.RunSpec(
        playbook=paths.playbook("doctor.yml"),
        inventories=(Path(req.inventory),),
        private_data_dir=runner.new_private_dir(state_dir(), "doctor"),
        collections_root=paths.collections_root(),
        fact_cache_dir=fact_cache_dir(Path(req.inventory)),
        options=runner.RunOptions(limit=",".join(hosts), extravars={**req.extravars, "megaprov_doctor": doctor}),
    )
    progress = req.report.run(len(hosts))
    try:
        result = runner.run(spec, progress, collect)
    finally:
        progress.stop()
    if result.error_line or (result.rc != 0 and not result.failures and not result.results):
        raise RunFailed(f"doctor: the play did not run: {result.error_line or result.status}", f"see {result.artifacts}/stdout")
    broken = [f for f in result.failures if not f.unreachable]
    if broken:
        f = broken[0]
        raise RunFailed(f"doctor: {f.host}: {f.task}: {f.message}", f"see {result.artifacts}/stdout")
    return result


def _readings(result: runner.RunResult, hosts: list[str]) -> list[NodeReading]:
    by = {h: NodeReading(h) for h in hosts}
    for f in result.failures:
        if f.unreachable and f.host in by:
            by[f.host].unreachable = f.message
    for t in result.results:
        r = by.get(t.host)
        if r is None:
            continue
        if t.action == "megaprov.cluster.doctor_probe":
            r.probe = t.res
            r.window = t.window
        elif t.action == "megaprov.cluster.shared_check":
            if "sha256" in t.res or t.res.get("invocation", {}).get("module_args", {}).get("write"):
                r.written = t.res
            else:
                r.read = t.res
        elif t.action == "ansible.builtin.shell" and "dcgmi" in str(t.res.get("cmd", "")):
            r.dcgm = t.res
        elif t.action == "megaprov.cluster.nccl_check" and "mpirun" not in str(t.res.get("invocation", {}).get("module_args", {}).get("argv", "")):
            r.nccl = t.res
        elif t.action == "megaprov.cluster.ib_write_bw":
            r.ib_bw = t.res
        elif t.action == "ansible.builtin.getent" and failed(t.res):
            r.written = {"msg": f"the cluster user does not exist on {t.host} ({_msg(t.res)})"}
    return [by[h] for h in hosts]


def _pair_results(result: runner.RunResult) -> list[tuple[list[str], float | None]]:
    out: list[tuple[list[str], float | None]] = []
    for t in result.results:
        argv = t.res.get("invocation", {}).get("module_args", {}).get("argv") or []
        if t.action != "megaprov.cluster.nccl_check" or "mpirun" not in argv:
            continue
        hosts = str(argv[argv.index("--host") + 1]) if "--host" in argv else ""
        pair = [h.rsplit(":", 1)[0] for h in hosts.split(",") if h]
        peak = (t.res.get("result") or {}).get("peak_busbw")
        out.append((pair, float(peak) if isinstance(peak, (int, float)) and not failed(t.res) else None))
    return out


DRAIN_REASON_MAX = 120  # characters of the reason given to scontrol


def drain_plan(found: inv.Inventory, report: Report) -> dict[str, str]:
    """Node -> Slurm drain reason: the GPU nodes of the inventory with error findings, their codes as the reason. A
    warning or a note never drains a node, nor does a finding on a host that is not a GPU node (the head). Pure."""
    reasons: dict[str, set[str]] = {}
    gpu_nodes = set(found.hosts_of("gpu_nodes"))
    for f in report.findings:
        if f.severity == "error" and f.node in gpu_nodes:
            reasons.setdefault(f.node, set()).add(f.code)
    return {node: ("megaprov doctor: " + ",".join(sorted(codes)))[:DRAIN_REASON_MAX] for node, codes in sorted(reasons.items())}


def drain(req: Request, report: Report) -> dict[str, str]:
    """Drain in Slurm the nodes with error findings (reason: their codes); where the Slurm stage is up."""
    found = inv.load(req.inventory, paths.roles_dir(), paths.cluster_defaults())
    if str(found.host_var(found.head, "megaprov_scheduler", "none")) != "slurm":
        raise UsageError("--drain needs Slurm: megaprov_scheduler is not slurm in the inventory", "drop --drain, or set up the scheduler stage")
    todo = drain_plan(found, report)
    if not todo:
        return {}
    controller = (found.hosts_of("slurm_controller") + found.hosts_of("head"))[0]
    result = _run(req, [controller], {"level": "none", "pairs": [], "drain": todo}, ("ansible.builtin.command",))
    done: dict[str, str] = {}
    for t in result.results:
        for item in t.res.get("results") or []:
            node = str((item.get("item") or {}).get("key", ""))
            said = str(item.get("stdout", "")).strip()
            if node in todo:
                # drained with doctor's reason, or left as an operator or Slurm's health check drained it
                done[node] = todo[node] if said == "drained" else said[:200]
    return done


def record(inventory: str, report: Report, level: str) -> None:
    """The run's findings for `megaprov train --exclude-unhealthy` (the nodes with open error findings)."""
    import time

    _write_json(
        findings_file(Path(inventory)),
        {"at": time.time(), "level": level, "checked": report.checked, "findings": [f.as_dict() for f in report.sorted()]},
    )


FINDINGS_VALID_S = 24 * 3600  # train --exclude-unhealthy trusts a doctor run this long


def unhealthy_nodes(inventory: str, max_age_s: float = FINDINGS_VALID_S) -> tuple[list[str], float | None]:
    """Nodes with error findings in the inventory's last doctor run (and its age), if that run is recent."""
    import time

    data = _read_json(findings_file(Path(inventory)))
    if not isinstance(data, dict) or not isinstance(data.get("at"), (int, float)):
        return [], None
    age = time.time() - float(data["at"])
    if age > max_age_s:
        return [], age
    nodes = sorted({str(f.get("node")) for f in data.get("findings", []) if isinstance(f, dict) and f.get("severity") == "error" and f.get("node")})
    return nodes, age
