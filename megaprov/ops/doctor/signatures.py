"""Failure signatures in job logs, node logs and kernel logs: what went wrong, the line that shows it, what to change.

``scan`` reads lines once. Line rules match the fixed text of the messages torch, torchrun, NCCL, Megatron-LM, the
Linux kernel and the NVIDIA driver print (the format each comes from is named at its rule; the corpus under
tests/doctor_corpus/ holds logs produced for real on the lab and logs built from those formats). Whole-log analyses
then look at the Megatron iteration lines (nan, a rising loss, falling throughput), the timers (data loading) and the
NCCL version lines of every rank. ``scan`` is pure; ``scan_file`` streams a file through ``megaprov.untrusted``.

Any job can print anything into its log, so each log has a stated bound (LOG_BOUNDS): at most its last MAX_LOG_BYTES
are read, as a stream; a line is cut to MAX_LINE characters; every regex does work linear in the line (gaps between
the fixed parts of a message are bounded); and what the scan keeps does not grow with the log (findings, thinned
series, nodes), so its time is linear in the bytes read and its memory is bounded."""

from __future__ import annotations

import codecs
import contextlib
import math
import os
import re
import statistics
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Generic, TypeVar

from ansible_collections.megaprov.cluster.plugins.module_utils import xid as nvidia_xid
from megaprov import untrusted, values
from megaprov.errors import UsageError
from megaprov.ops.doctor.findings import MAX_LINE, MAX_LOG_BYTES, XID_ACTION_FIX, Finding, finding
from megaprov.training.follow import Iteration, parse_iteration
from megaprov.training.verdict import mann_kendall, theil_sen

MAX_PER_CODE = 20  # findings of one code per node and file (a flood of one error says it once per place)
MAX_FINDINGS = 1000  # findings of one log (a flood of errors on as many made-up nodes)
MAX_POINTS = 512  # points of a series an analysis keeps (iterations, timers): a longer one is thinned evenly
MAX_NODES = untrusted.MAX_ENTRIES  # nodes whose NCCL version one log can name
READ_CHUNK = 256 * 1024  # bytes read and decoded at a time

# A line's node, where the line names it (a host name: at most 255 characters): journal lines ("2026-12-02T10:00:00+0000
# node1 kernel: ..."), NCCL's "host:pid:tid [dev] NCCL ..." prefix, and megaprov's own "megaprov: node X" lines.
_JOURNAL_HOST = re.compile(r"^(?:\d{4}-\d\d-\d\dT\S+|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) (?P<host>[\w.-]{1,255}) \S+?(?:\[\d+\])?: ")
# NCCL src/debug.cc: "host:pid:tid [dev] NCCL INFO ...", "host:pid:tid [dev] file:line (func) NCCL WARN ..."
_NCCL_HOST = re.compile(r"^(?:\[[^\]]*\]:?\s*)?(?:\d+: )?(?P<host>[A-Za-z][\w.-]{0,254}):\d+:\d+ \[\d+\] (?:\S+:\d+ (?:\([^)]*\) )?)?NCCL ")
_MEGAPROV_NODE = re.compile(r"^megaprov: node (?P<host>\S{1,255}) \(node rank \d+\)")


@dataclass
class Context:
    """What the rules know besides the line: the file, its node, the job's facts where the log is a job's."""

    source: str
    node: str = ""
    job: dict[str, Any] = field(default_factory=dict)  # the job's plan where known (memory estimate, layout)


_NOCASE = int(re.IGNORECASE)  # an int: a flag enum's & costs more than the substring tests


@dataclass(frozen=True)
class Rule:
    code: str
    pattern: re.Pattern[str]
    explain: Callable[[re.Match[str], Context], tuple[str, str]] | None = None  # (cause, fix) for this match
    severity: Callable[[re.Match[str]], str] | None = None
    # Fixed text every match holds one of (in lower case where the pattern ignores case): a line without any is not
    # searched, a substring test being far cheaper than a search that fails
    needs: tuple[str, ...] = ()

    def search(self, line: str, lowered: str) -> re.Match[str] | None:
        """The rule's match in ``line`` (``lowered``: the line in lower case if it is ASCII, else empty)."""
        if self.needs:
            text = line
            if self.pattern.flags & _NOCASE:
                if not lowered:  # case folding beyond ASCII: the pattern decides
                    return self.pattern.search(line)
                text = lowered
            for need in self.needs:
                if need in text:
                    break
            else:
                return None
        return self.pattern.search(line)


def _oom(m: re.Match[str], ctx: Context) -> tuple[str, str]:
    gpu = f" on GPU {m['gpu']}" if m["gpu"] else ""
    cause = f"a rank{gpu} asked for {m['ask']} more GPU memory"
    if m["total"]:
        cause += f" with {m['free']} free of {m['total']}"
    memory = ctx.job.get("memory")
    plan: dict[str, Any] | None = memory if isinstance(memory, dict) else None
    if plan:
        cause += f"; the planner estimated {plan.get('per_gpu_gib', '?')} GiB per GPU for this layout"
    fix = str(ctx.job.get("memory_fix") or "") or (
        "lower train.micro_batch_size, set train.recompute: selective (or full), or raise parallel.tensor/pipeline; "
        "`megaprov plan` shows the memory per GPU of each layout"
    )
    return cause, fix


def _watchdog(m: re.Match[str], ctx: Context) -> tuple[str, str]:
    minutes = int(m["timeout"]) / 60000
    cause = (
        f"rank {m['rank']} waited {int(m['ran']) / 1000:.0f} s for collective {m['op']} (sequence number {m['seq']}, timeout {minutes:g} min):"
        " another rank never reached it: a straggler, a hung or crashed rank, or a dead link"
    )
    fix = (
        f"find the rank that is not at {m['op']} #{m['seq']}: the first error in the other ranks' logs, a node's kernel log (Xid, OOM killer);"
        " `megaprov doctor -i INV --level deep` tests the links pair by pair"
    )
    return cause, fix


def _system_error(m: re.Match[str], ctx: Context) -> tuple[str, str]:
    return "NCCL failed a socket or device call (its 'Last error' line says which)", ""


def _ib_completion(m: re.Match[str], ctx: Context) -> tuple[str, str]:
    status = int(m["status"])
    words = {
        12: "transport retry counter exceeded: the peer or the link/switch between stopped answering",
        13: "RNR retry counter exceeded",
        5: "work request flushed (the queue pair had failed before)",
    }
    hca = m["hca"] or ""
    cause = f"an RDMA transfer to {m['peer']}{' on ' + hca if hca else ''} failed with status {status}: {words.get(status, 'see ibv_wc_status')}"
    fix = f"check {hca or 'the HCA'}'s port state and error counters, and the cable and switch port to {m['peer']} (`megaprov doctor -i INV`)"
    return cause, fix


def _port_in_use(m: re.Match[str], ctx: Context) -> tuple[str, str]:
    port = m["port"] or m["port2"] or m["port3"] or ""
    where = f"port {port}" if port else "the rendezvous port"
    return (
        f"{where} is already taken by another process (an old job or a stale torchrun)",
        f"stop what listens there (`ss -ltnp 'sport = :{port or 29500}'` on the head; `megaprov job stop NAME`) or set launch.master_port",
    )


def _rdzv_timeout(m: re.Match[str], ctx: Context) -> tuple[str, str]:
    joined = m.groupdict().get("joined")
    if joined:
        return (
            f"only {joined} of {m['want']} clients joined the store: the missing nodes never started or cannot reach the rendezvous host",
            "",
        )
    return "", ""


def _killed(m: re.Match[str], ctx: Context) -> tuple[str, str]:
    sig = m.groupdict().get("signame") or ""
    code = m.groupdict().get("exitcode") or ""
    what = sig or (f"signal {-int(code)}" if code.startswith("-") else f"exit code {code}")
    why = {
        "SIGKILL": "SIGKILL comes from the kernel's OOM killer or an operator's kill -9",
        "SIGSEGV": "SIGSEGV is a crash in native code (a driver, NCCL or extension bug, or bad memory)",
        "SIGTERM": "SIGTERM is a stop (megaprov job stop, Slurm's time limit or preemption)",
        "SIGABRT": "SIGABRT is an abort: NCCL's or torch's watchdog, or a failed assertion in native code",
        "SIGBUS": "SIGBUS is a bad memory access (often /dev/shm too small)",
    }.get(sig or {"-9": "SIGKILL", "-11": "SIGSEGV", "-15": "SIGTERM", "-6": "SIGABRT", "-7": "SIGBUS"}.get(code, ""), "")
    return f"a rank ended on {what}" + (f": {why}" if why else ""), ""


def _torchrun_signal(m: re.Match[str], ctx: Context) -> tuple[str, str]:
    name = {134: "SIGABRT", 135: "SIGBUS", 137: "SIGKILL", 139: "SIGSEGV"}[int(m["rc"])]
    return (
        f"torchrun on {m['host']} ended on {name} (exit {m['rc']}): its ranks died with it"
        + (" (SIGKILL: the kernel's OOM killer or an operator's kill -9)" if name == "SIGKILL" else ""),
        f"look at {m['host']}'s kernel log (`megaprov doctor -i INV --node {m['host']}`, journalctl -k); `megaprov train --resume NAME` continues",
    )


def _oom_killer(m: re.Match[str], ctx: Context) -> tuple[str, str]:
    return f"the kernel killed process {m['pid']} ({m['comm']}) because the node ran out of memory", ""


def _xid(m: re.Match[str], ctx: Context) -> tuple[str, str]:
    from megaprov.ops.doctor import xid as xids

    event = nvidia_xid.from_match(m)
    entry = xids.lookup(event.xid)
    gpu = f"{event.address} ({event.instance})" if event.instance else event.address
    return (
        f"GPU {gpu} reported Xid {entry.number} ({entry.name}): {entry.note}",
        XID_ACTION_FIX.get(entry.action, "see NVIDIA's Xid catalogue"),
    )


def _pyxis_import(m: re.Match[str], ctx: Context) -> tuple[str, str]:
    step = "import" if m["what"].startswith("import") else "unpack"
    cause = f"pyxis could not {step} image {m['image']} for the job step (enroot's log lines that follow say why)"
    return cause, ""


def _userns(m: re.Match[str], ctx: Context) -> tuple[str, str]:
    if m["enroot"]:
        why = f" ({m['why']})" if m["why"] else ""
        return f"{m['enroot']} could not create a user namespace{why}: the kernel refuses them to unprivileged users", ""
    why = f" ({m['why2']})" if m["why2"] else ""
    return (
        f"rootless podman's {m['map']} could not map the cluster user's IDs{why}",
        f"give the cluster user subordinate ID ranges (/etc/subuid, /etc/subgid) and check that {m['map']} is setuid root",
    )


def _cdi(m: re.Match[str], ctx: Context) -> tuple[str, str]:
    return f"podman could not resolve {m['devices']} from the node's CDI spec", ""


def _registry(m: re.Match[str], ctx: Context) -> tuple[str, str]:
    if m["tag"]:
        why = m["why"].strip()
        cause = f"the registry answered {why!r} for {m['repo']}:{m['tag']}"
        if "manifest unknown" in why:
            return cause + ": it does not hold that image", "`megaprov image pull IMAGE -i INV` puts it in the head's registry"
        return cause, ""
    if m["host"]:
        return f"registry {m['host']} could not be reached or spoken to: {m['ping'][:160]}", ""
    status = f" {m['status'].strip()}" if m["status"] else ""
    return f"enroot's request to {m['url']} was answered {m['code']}{status}", ""


def _xid_severity(m: re.Match[str]) -> str:
    from megaprov.ops.doctor import xid as xids

    return xids.lookup(int(m["xid"])).severity


# The line rules. Each names the program and message its fixed text comes from. A line is the job's to write, so no
# pattern may try far from many places (``.*X`` after a fixed text that repeats, a class that both sides of a gap
# share): a gap between two fixed parts of a message is bounded ({0,256}, far more than any message puts there), a gap
# after a bracket stops at the next one, a run that a gap could also take is possessive (``\d++``), and a line without
# the rule's fixed text (``needs``) is not searched. tests/unit/ops/test_doctor_bounded.py holds each pattern's work on a
# long line to a multiple of its work on a short one.
RULES: tuple[Rule, ...] = (
    # torch c10/cuda/CUDACachingAllocator.cpp: "CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is free."
    Rule(
        "CUDA_OOM",
        re.compile(
            r"CUDA out of memory\. Tried to allocate (?P<ask>[\d.]+ [KMGT]?i?B)"
            r"(?:\. GPU (?P<gpu>\d+) has a total capacity of (?P<total>[\d.]+ [KMGT]?i?B) of which (?P<free>[\d.]+ [KMGT]?i?B) is free)?"
        ),
        _oom,
        needs=("CUDA out of memory",),
    ),
    # torch c10d ProcessGroupNCCL.cpp, the watchdog: "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=%d, OpType=%s, ...
    # Timeout(ms)=%d) ran for %d milliseconds before timing out."
    Rule(
        "NCCL_TIMEOUT",
        re.compile(
            r"\[(?:PG [^\[\]]{0,256}?)?Rank (?P<rank>\d++)\][^\[]{0,256}?Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+),"
            r" OpType=(?P<op>\w++).{0,256}?Timeout\(ms\)=(?P<timeout>\d+)\) ran for (?P<ran>\d+) milliseconds before timing out"
        ),
        _watchdog,
        needs=("Watchdog caught collective operation timeout",),
    ),
    # NCCL src/init.cc / ncclGetErrorString: "unhandled system error (run with NCCL_DEBUG=INFO for details)"
    Rule("NCCL_SYSTEM_ERROR", re.compile(r"unhandled system error"), _system_error, needs=("unhandled system error",)),
    # NCCL bootstrap and NET/Socket interface lines naming the loopback interface; gloo's full-mesh connect to 127.x;
    # NCCL's socket connect errors to a 127.x address.
    Rule(
        "NCCL_LOOPBACK",
        re.compile(
            r"(?:NCCL INFO (?:Bootstrap ?: Using|NET/Socket ?: Using \[\d+\])\s*lo:127\.)"
            r"|(?:connectFullMesh failed.{0,256}?remote=\[127\.)"
            r"|(?:(?:Connect|connect) to (?:127\.\d+\.\d+\.\d+|\[?::1\]?)<\d+> failed)"
        ),
        needs=("NCCL INFO ", "connectFullMesh failed", "onnect to "),
    ),
    # NCCL src/transport/net_ib/p2p.cc: "NET/IB: Got completion from peer %s with status=%s(%d) opcode=%s(%d) vendor_err=%u %s%s%s%s hca %s"
    # (2.2x: "with status=%d opcode=%d len=%u vendor err %u"; older releases: "with error %d, opcode %d, len %d, vendor err %d")
    Rule(
        "IB_COMPLETION_ERROR",
        re.compile(
            r"NET/IB ?: Got completion from peer (?P<peer>\S+?) with (?:error |status=)(?:\w+\()?(?P<status>\d+)(?:.{0,256}?\bhca (?P<hca>[\w.-]+))?"
        ),
        _ib_completion,
        needs=("Got completion from peer",),
    ),
    # torch c10d socket.cpp: "The server socket has failed to listen on any local network address. ... port: %d, useIpv6: %d, code: %d,
    # name: EADDRINUSE, message: address already in use"; "[W socket.cpp] ... (errno: 98 - Address already in use)"
    Rule(
        "RDZV_PORT_IN_USE",
        re.compile(
            r"(?:port: (?P<port>\d++).{0,256}?EADDRINUSE)|"
            r"(?::(?P<port2>\d+) \(errno: 98 - Address already in use\))|"
            r"(?:EADDRINUSE|[Aa]ddress already in use)(?:.{0,256}?port:? (?P<port3>\d+))?"
        ),
        _port_in_use,
        needs=("EADDRINUSE", "ddress already in use"),
    ),
    # torch c10d TCPStore: "Timed out after %d seconds waiting for clients. %d/%d clients joined."; torch elastic: RendezvousTimeoutError
    Rule(
        "RDZV_TIMEOUT",
        re.compile(
            r"(?:waiting for clients\. (?P<joined>\d+)/(?P<want>\d+) clients joined)|"
            r"RendezvousTimeoutError|"
            r"rendezvous .{0,40}timed out|"
            r"Timed out waiting for .{0,40}rendezvous",
            re.IGNORECASE,
        ),
        _rdzv_timeout,
        needs=("clients joined", "rendezvous"),
    ),
    # gloo (transport/tcp/pair.cc: "Connection closed by peer", "Connection reset by peer"), c10d's "Broken pipe" on a store socket
    Rule(
        "PEER_LOST",
        re.compile(
            r"Connection closed by peer|"
            r"Connection reset by peer|"
            r"recv\(\): Connection reset|"
            r"Broken pipe|"
            r"DistNetworkError: .{0,256}?(?:reset|closed)|"
            r"Socket Timeout"
        ),
        needs=("Connection ", "Broken pipe", "DistNetworkError: ", "Socket Timeout"),
    ),
    # megatron-core datasets/indexed_dataset.py (IndexedDataset.initialize): "One or both of the .idx and .bin files cannot be found at
    # the path prefix %s"; an open() of a missing .idx/.bin
    Rule(
        "DATA_PREFIX_MISSING",
        re.compile(
            r"(?:One or both of the \.idx and \.bin files cannot be found at the path prefix (?P<prefix>\S+))|"
            r"(?:No such file or directory: '(?P<path>[^']+\.(?:idx|bin))')|"
            r"(?:dataset prefix \S+ (?:does not exist|not found))|"
            r"(?:(?<=\S)\.(?:idx|bin) (?:does not exist|not found))"
        ),
        needs=("One or both of the .idx", "No such file or directory: '", "does not exist", "not found"),
    ),
    # torch's embedding on CPU: "IndexError: index out of range in self"; on CUDA the indexSelect assertion; the trainer's vocabulary check
    Rule(
        "VOCAB_MISMATCH",
        re.compile(
            r"IndexError: index out of range in self|"
            r"Assertion `srcIndex < srcSelectDimSize` failed|"
            r"token ids? .{0,60}(?:exceed|outside|larger than) .{0,40}vocab",
            re.IGNORECASE,
        ),
        needs=("index out of range in self", "srcindex < srcselectdimsize", "vocab"),
    ),
    # Linux mm/oom_kill.c: "Out of memory: Killed process %d (%s) total-vm:..." (also "Memory cgroup out of memory: Killed process")
    Rule(
        "RANK_OOM_KILLED",
        re.compile(r"[Oo]ut of memory: Killed process (?P<pid>\d+) \((?P<comm>[^)]{0,64})\)"),
        _oom_killer,
        needs=("ut of memory: Killed process",),
    ),
    # megaprov's own line in a job's node log (megaprov/training/render.py): "megaprov: node %s (node rank %d): torchrun exited with %d
    # at %s"; 128 + a signal: 134 SIGABRT, 135 SIGBUS, 137 SIGKILL, 139 SIGSEGV (143, SIGTERM, and 130, SIGINT, are stops)
    Rule(
        "RANK_KILLED",
        re.compile(r"^megaprov: node (?P<host>\S{1,255}) \(node rank \d+\): torchrun exited with (?P<rc>13[457]|139) at"),
        _torchrun_signal,
        needs=("torchrun exited with",),
    ),
    # torch.distributed.elastic: "failed (exitcode: %d) local_rank: %d (pid: %d) of binary: ..." and the ChildFailedError
    # summary's "Signal %d (%s) received by PID %d"
    Rule(
        "RANK_KILLED",
        re.compile(
            r"(?:Signal (?P<signum>\d+) \((?P<signame>SIG\w+)\) received by PID (?P<pid>\d+))|"
            r"(?:failed \(exitcode: (?P<exitcode>-\d+)\) local_rank: (?P<lrank>\d+)(?: \(pid: (?P<pid2>\d+)\))?)"
        ),
        _killed,
        needs=("received by PID", "failed (exitcode: "),
    ),
    # NVIDIA driver: "NVRM: Xid (PCI:0000:3b:00): 79, ...", the MIG and the oldest forms included. The pattern is the
    # collection's (module_utils/xid.py), the one the node collector counts Xids with.
    Rule("GPU_XID", nvidia_xid.LINE, _xid, _xid_severity, needs=(nvidia_xid.MARKER,)),
    # CUDA runtime: cudaErrorECCUncorrectable's string
    Rule("GPU_ECC", re.compile(r"uncorrectable ECC error encountered"), needs=("uncorrectable ECC error encountered",)),
    # pyxis 0.24.0 pyxis_slurmstepd.c: "pyxis: failed to import docker image: %s" (also " (importer: %s)"), "pyxis: failed to
    # create container filesystem for image: %s"; srun shows them as "slurmstepd: error: pyxis: ..."
    Rule(
        "CONTAINER_IMPORT_FAILED",
        re.compile(r"pyxis: failed to (?P<what>import docker image|create container filesystem for image): (?P<image>[^\s()]{1,512})"),
        _pyxis_import,
        needs=("pyxis: failed to ",),
    ),
    # enroot 4.1.2 bin/enroot-nsenter.c, enroot-aufs2ovlfs.c, enroot-mksquashovlfs.c: err(EXIT_FAILURE, "failed to create user
    # namespace") ("PROGRAM: failed to create user namespace: STRERROR"); shadow's newuidmap/newgidmap, which rootless podman
    # runs: "newuidmap: write to uid_map failed: %s"
    Rule(
        "CONTAINER_USERNS_REFUSED",
        re.compile(
            r"(?P<enroot>enroot-[a-z0-9-]{1,32}): failed to create user namespace(?:: (?P<why>[^\n]{1,120}))?"
            r"|(?P<map>new[ug]idmap): write to [ug]id_map failed(?:: (?P<why2>[^\n\\\x22]{1,120}))?"
        ),
        _userns,
        needs=("failed to create user namespace", "id_map failed"),
    ),
    # podman 4.3 (containers/common pkg/cdi): "Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all"
    Rule(
        "CDI_DEVICE_MISSING",
        re.compile(r"unresolvable CDI devices (?P<devices>[\w./=:-]{1,256}(?:, [\w./=:-]{1,256}){0,16})"),
        _cdi,
        needs=("unresolvable CDI devices",),
    ),
    # podman (containers/image docker/docker_image_src.go): "reading manifest %s in %s: %s" and "pinging container registry
    # %s: %s"; enroot 4.1.2 src/common.sh common::curl: "[ERROR] URL %s returned error code: %d %s"
    Rule(
        "REGISTRY_REFUSED",
        re.compile(
            r"(?:reading manifest (?P<tag>[\w.@:+-]{1,128}) in (?P<repo>[\w./:@-]{1,256}): (?P<why>[^:\]\n]{1,80}))"
            r"|(?:pinging container registry (?P<host>[\w.:-]{1,256}): (?P<ping>[^\n]{1,200}))"
            r"|(?:URL (?P<url>\S{1,512}) returned error code: (?P<code>\d{3})(?: (?P<status>[A-Za-z -]{1,40}))?)"
        ),
        _registry,
        needs=("reading manifest ", "pinging container registry ", "returned error code: "),
    ),
)

# NCCL's init line (src/init.cc VERSION_STRING, as INFO or at NCCL_DEBUG=VERSION/WARN alone); not "compiled with NCCL version"
_NCCL_VERSION = re.compile(r"(?<!with )NCCL version (?P<version>\d+\.\d+\.\d+)")
_TIMER = re.compile(r"^\s*(?:\[[^\]]*\]\s*)?(?P<name>[a-z][\w-]*(?: [\w-]+)*) \.{3,}: \(?(?P<min>[\d.]+)(?:, (?P<max>[\d.]+)\))?")
_TORCHRUN = re.compile(r"^megaprov: node \S+ \(node rank \d+\): torchrun (?:starting|exited with (?P<rc>-?\d+)) at ")
_LAST_ERROR = re.compile(r"Last error:\s*(?P<text>\S.*)?$")
_LOOPBACK = re.compile(r"127\.\d+\.\d+\.\d+")
_LOOPBACK_WORD = re.compile(r"\b127\.\d+\.\d+\.\d+\b")
_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s*")
_PEER_ADDRESS = re.compile(r"(?:to|from|peer) \[?([\w.:]+?)\]?<(\d+)>")


def node_of(line: str) -> str:
    for pattern in (_JOURNAL_HOST, _NCCL_HOST, _MEGAPROV_NODE):
        m = pattern.search(line)
        if m:
            return m["host"]
    return ""


T = TypeVar("T")


class _Thinned(Generic[T]):
    """A series of any length in at most ``cap`` points, evenly spaced, and its last item: every ``stride``-th item
    from the first, the stride doubling (every other point dropped) whenever the points would pass ``cap``. Thinned
    as the items come, so the whole series is never held; a series of up to ``cap`` items is kept whole."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.points: list[T] = []
        self.stride = 1
        self.count = 0
        self.last: list[T] = []

    def add(self, item: T) -> None:
        if self.count % self.stride == 0:
            self.points.append(item)
            if len(self.points) > self.cap:
                del self.points[1::2]
                self.stride *= 2
        self.count += 1
        self.last[:] = [item]

    def values(self) -> list[T]:
        kept = (self.count - 1) % self.stride == 0  # the last item is a point
        return self.points + ([] if kept else self.last)


_TIMED = ("batch-generator", "forward-backward")  # the timers an analysis reads


@dataclass
class _Scan:
    """What a scan keeps of a log while it reads it: nothing here grows with the log's length (LOG_MEMORY)."""

    ctx: Context
    found: list[Finding] = field(default_factory=list)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    seen: set[tuple[str, str, str]] = field(default_factory=set)
    series: _Thinned[tuple[int, Iteration]] = field(default_factory=lambda: _Thinned(MAX_POINTS))  # (line number, iteration)
    before_bad: deque[Iteration] = field(default_factory=lambda: deque(maxlen=5))  # the iterations before the first non-finite loss
    bad: tuple[int, Iteration, list[Iteration]] | None = None  # that iteration: its line, it, the ones before it
    high_norm: float | None = None  # the largest grad norm (a spike is never thinned away)
    nccl_versions: dict[str, tuple[int, str]] = field(default_factory=dict)  # host -> (line, version), MAX_NODES hosts
    timers: dict[str, _Thinned[float]] = field(default_factory=dict)
    timer_line: int = 0
    attempt: int = 0  # which run of the job this part of the log is: a restart begins the next (see iteration)
    latest: int | None = None  # the iteration number last logged, None from the start of an attempt
    unsettled: list[Finding] = field(default_factory=list)  # PEER_LOST findings no torchrun line has come after yet
    settled_clean: list[Finding] = field(default_factory=list)  # PEER_LOST findings a clean exit came after (torchrun)

    def add(
        self,
        code: str,
        node: str,
        number: int,
        evidence: str,
        cause: str = "",
        fix: str = "",
        severity: str = "",
        key: str = "",
        whole_log: bool = False,
    ) -> None:
        where = (code, node)
        dedup = (code, node, key or evidence)
        if dedup in self.seen or self.counts.get(where, 0) >= MAX_PER_CODE or (len(self.found) >= MAX_FINDINGS and not whole_log):
            return
        self.seen.add(dedup)
        self.counts[where] = self.counts.get(where, 0) + 1
        self.found.append(finding(code, node, evidence, cause, fix, severity, source=self.ctx.source, line=number))

    def iteration(self, number: int, it: Iteration) -> None:
        # A restart begins a new attempt: torchrun started again after iterations were logged (megaprov's node line),
        # or, in a log without those lines, the iteration number went back (a resume from an earlier checkpoint).
        if self.latest is not None and it.iteration <= self.latest:
            self.attempt += 1
        self.latest = it.iteration
        it.attempt = self.attempt
        if self.bad is not None:  # past a non-finite loss the analyses say only that
            return
        if (it.loss is not None and not math.isfinite(it.loss)) or it.nan > 0:
            self.bad = (number, it, list(self.before_bad))
            return
        self.before_bad.append(it)
        self.series.add((number, it))
        if it.grad_norm is not None and (self.high_norm is None or it.grad_norm > self.high_norm):
            self.high_norm = it.grad_norm

    def torchrun(self, rc: str | None) -> None:
        """A lost connection that the node's torchrun then exited 0 after (no restart between) did not fail the node: at
        the end of a job the rendezvous host's agent shuts its store down and the other agents' last read finds it
        closed."""
        if rc is None and self.latest is not None:  # torchrun starting again after iterations: the next attempt
            self.attempt += 1
            self.latest = None
        if rc == "0":
            self.settled_clean += self.unsettled
        if rc in ("0", None):
            self.unsettled.clear()


def _dedup_key(rule: Rule, m: re.Match[str]) -> str:
    """Lines that say the same thing once (every rank prints the same OOM, every ring the same peer)."""
    if rule.code == "GPU_XID":
        event = nvidia_xid.from_match(m)
        return f"{event.address}:{event.xid}"
    if rule.code in (
        "NCCL_SYSTEM_ERROR",
        "NCCL_LOOPBACK",
        "PEER_LOST",
        "RDZV_PORT_IN_USE",
        "RDZV_TIMEOUT",
        "VOCAB_MISMATCH",
        "DATA_PREFIX_MISSING",
        "GPU_ECC",
    ):
        return rule.code
    if rule.code == "RANK_KILLED":
        if "rc" in m.groupdict():
            return f"torchrun:{m['host']}:{m.start()}"
        return m["pid"] or m["pid2"] or m["lrank"] or ""  # torchrun's two lines about one rank: once
    if rule.code == "CUDA_OOM":
        return m["gpu"] or "oom"
    if rule.code == "NCCL_TIMEOUT":
        return f"{m['rank']}"
    if rule.code == "IB_COMPLETION_ERROR":
        return f"{m['peer']}:{m['hca']}"
    return m.group(0)


def scan(lines: Iterable[str], ctx: Context) -> list[Finding]:
    """Findings in a log. Pure."""
    return _findings(_scanned(lines, ctx))


def _scanned(lines: Iterable[str], ctx: Context) -> _Scan:
    """The lines read once, into what the whole-log analyses need."""
    state = _Scan(ctx)
    pending_last_error: Finding | None = None
    header_at = 0  # the line of a bare "Last error:" (torch prints NCCL's last error on the next line)
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")[:MAX_LINE]
        node = node_of(line) or ctx.node
        if pending_last_error is not None:
            m = _LAST_ERROR.search(line)
            if m and not m["text"]:
                header_at = number
                continue
            detail = m["text"] if m else (_strip_rank(line) if header_at and number == header_at + 1 else "")
            if detail:
                _refine_system_error(state, pending_last_error, detail, number)
                pending_last_error, header_at = None, 0
                continue
        started = _TORCHRUN.match(line)
        if started:
            state.torchrun(started["rc"])
        it = parse_iteration(line)
        if it is not None:
            state.iteration(number, it)
            continue
        m = _NCCL_VERSION.search(line) if "NCCL version " in line else None
        if m:
            host = node or f"line {number}"
            if host not in state.nccl_versions and len(state.nccl_versions) < MAX_NODES:
                state.nccl_versions[host] = (number, m["version"])
        t = _TIMER.match(line) if "...: " in line else None
        if t:
            if t["name"] in _TIMED:
                state.timers.setdefault(t["name"], _Thinned(MAX_POINTS)).add(float(t["max"] or t["min"]))
            state.timer_line = state.timer_line or number
        lowered = line.lower() if line.isascii() else ""
        for rule in RULES:
            match = rule.search(line, lowered)
            if not match:
                continue
            cause, fix = rule.explain(match, ctx) if rule.explain else ("", "")
            severity = rule.severity(match) if rule.severity else ""
            before = len(state.found)
            state.add(rule.code, node, number, line, cause, fix, severity, _dedup_key(rule, match))
            if len(state.found) > before:
                if rule.code == "NCCL_SYSTEM_ERROR":
                    pending_last_error = state.found[-1]
                elif rule.code == "PEER_LOST":
                    state.unsettled.append(state.found[-1])
            break  # one line, one signature: the first rule that matches is the most specific
        if "Last error:" in line and pending_last_error is None:
            m2 = _LAST_ERROR.search(line)
            if m2 and m2["text"] and _LOOPBACK.search(m2["text"]):
                state.add("NCCL_LOOPBACK", node, number, line)
    return state


def _findings(state: _Scan) -> list[Finding]:
    _nccl_versions(state)
    _iterations(state)
    _timers(state)
    settled = {id(f) for f in state.settled_clean}
    return explained([f for f in state.found if id(f) not in settled])


def explained(found: list[Finding]) -> list[Finding]:
    """A peer lost because a rank was killed (a signal, the OOM killer) in the same log is that kill's consequence: the
    kill is the finding. Likewise a system error that turned out to be the loopback trap."""
    codes = {f.code for f in found}
    drop = set()
    if codes & {"RANK_KILLED", "RANK_OOM_KILLED"}:
        drop.add("PEER_LOST")
    return [f for f in found if f.code not in drop]


def _strip_rank(line: str) -> str:
    return _RANK_PREFIX.sub("", line.strip())


def _refine_system_error(state: _Scan, found: Finding, detail: str, number: int) -> None:
    """NCCL's system error named with its 'Last error': a loopback address is NCCL_LOOPBACK."""
    index = state.found.index(found)
    evidence = f"{found.evidence} | Last error: {detail}"
    if _LOOPBACK_WORD.search(detail):
        if any(f.code == "NCCL_LOOPBACK" and f.node == found.node for f in state.found):
            del state.found[index]  # the loopback finding already stands for it
        else:
            state.found[index] = finding("NCCL_LOOPBACK", found.node, evidence, source=found.source, line=found.line)
        return
    address = _PEER_ADDRESS.search(detail)
    cause = f"NCCL failed a socket or device call: {detail[:200]}"
    fix = (
        f"check that every node reaches {address.group(1)} on the cluster interface (NCCL_SOCKET_IFNAME, infiniband_socket_interface)"
        " and that no firewall blocks it; `megaprov doctor -i INV`"
        if address
        else ""
    )
    state.found[index] = finding("NCCL_SYSTEM_ERROR", found.node, evidence, cause, fix, source=found.source, line=found.line)


def _nccl_versions(state: _Scan) -> None:
    versions = {v for _, v in state.nccl_versions.values()}
    if len(versions) < 2:
        return
    by = sorted(state.nccl_versions.items(), key=lambda kv: kv[1][0])
    evidence = "; ".join(f"{host}: NCCL {version} (line {line})" for host, (line, version) in by[:8])
    state.add(
        "NCCL_VERSION_MISMATCH",
        "",
        by[0][1][0],
        evidence,
        f"the ranks loaded {len(versions)} NCCL releases ({', '.join(sorted(versions))}): their collectives are not compatible",
        whole_log=True,
    )


def _iterations(state: _Scan) -> None:
    if state.bad is not None:
        number, first, before = state.bad
        lr = f" at learning rate {first.lr:g}" if first.lr is not None else ""
        norms = [f"{it.grad_norm:.3g}" for it in before if it.grad_norm is not None]
        cause = f"the loss is not finite from iteration {first.iteration}{lr}" + (f"; grad norm before it: {', '.join(norms)}" if norms else "")
        state.add("LOSS_NAN", state.ctx.node, number, _describe(first), cause, whole_log=True)
        return
    series = state.series.values()  # thinned past MAX_POINTS iterations, as the verdict's loss check is
    losses = [(number, it) for number, it in series if it.loss is not None]
    if len(losses) >= 12:
        _diverging(state, series, losses)
    _throughput(state, series)


def _describe(it: Iteration) -> str:
    parts = [f"iteration {it.iteration}"]
    for name, value in (
        ("lm loss", it.loss),
        ("grad norm", it.grad_norm),
        ("learning rate", it.lr),
        ("ms/iter", it.ms_per_iteration),
        ("TFLOP/s/GPU", it.tflops_per_gpu),
    ):
        if value is not None:
            parts.append(f"{name} {value:.4g}")
    if it.nan:
        parts.append(f"nan iterations {it.nan}")
    return ", ".join(parts)


def _diverging(state: _Scan, series: list[tuple[int, Iteration]], losses: list[tuple[int, Iteration]]) -> None:
    ys = [float(it.loss or 0.0) for _, it in losses]
    low_at = min(range(len(ys)), key=ys.__getitem__)
    tail = ys[low_at:]
    if len(tail) < 6:
        return
    z, _ = mann_kendall(tail)  # O(n^2) in time, and Theil-Sen in memory: at most MAX_POINTS + 1 points
    slope = theil_sen([float(i) for i in range(len(tail))], tail)
    rise = tail[-1] - ys[low_at]
    # rising after the minimum: a significant upward trend that took back at least a tenth of the drop so far
    drop = max(ys[0] - ys[low_at], 1e-9)
    if z >= 1.645 and slope > 0 and rise >= 0.1 * drop and rise >= 0.02 * ys[low_at]:
        low, (line, last) = losses[low_at][1], losses[-1]
        norms = [it.grad_norm for _, it in series if it.grad_norm is not None]
        spikes = ""
        if len(norms) >= 6:
            median = statistics.median(norms)
            high = state.high_norm if state.high_norm is not None else max(norms)
            if median > 0 and high > 5 * median:
                spikes = f"; grad norm peaked at {high:.3g} against a median of {median:.3g}"
        cause = (
            f"the loss fell to {low.loss:.4g} at iteration {low.iteration} and rose to {last.loss:.4g} by iteration {last.iteration}"
            f" (Mann-Kendall z={z:.2f}){spikes}: the learning rate is too high for this batch, or the warm-up too short"
        )
        state.add("LOSS_DIVERGING", state.ctx.node, line, f"{_describe(low)} -> {_describe(last)}", cause, whole_log=True)


THROUGHPUT_DROP = 0.7  # the last quarter's median rate under 70 % of the first quarter's


def _throughput(state: _Scan, series: list[tuple[int, Iteration]]) -> None:
    """Time per iteration growing within one attempt, the latest: an attempt on other nodes, or after a node was left
    out, has its own rate, and comparing across them would call a restart a fall."""
    latest = series[-1][1].attempt if series else 0
    timed = [(number, it) for number, it in series if it.ms_per_iteration and it.attempt == latest]
    if len(timed) < 8:
        return
    timed = timed[1:]  # the first logged interval carries start-up
    quarter = max(2, len(timed) // 4)
    head = statistics.median(float(it.ms_per_iteration or 0) for _, it in timed[:quarter])
    tail = statistics.median(float(it.ms_per_iteration or 0) for _, it in timed[-quarter:])
    if head > 0 and head / tail < THROUGHPUT_DROP:
        first, (line, last) = timed[0][1], timed[-1]
        tf = ""
        if first.tflops_per_gpu and last.tflops_per_gpu:
            tf = f", TFLOP/s/GPU {first.tflops_per_gpu:.4g} -> {last.tflops_per_gpu:.4g}"
        cause = (
            f"time per iteration grew from a median of {head:.4g} ms to {tail:.4g} ms ({head / tail:.0%} of the early rate){tf}:"
            " data loading falling behind, a slow or throttling node, or a degraded link"
        )
        state.add("THROUGHPUT_FALLING", state.ctx.node, line, f"{_describe(first)} -> {_describe(last)}", cause, whole_log=True)


DATALOADER_SHARE = 0.25  # batch-generator above a quarter of forward-backward


def _timers(state: _Scan) -> None:
    batch = state.timers.get("batch-generator")
    fwd = state.timers.get("forward-backward")
    if not batch or not fwd:
        return
    b, f = statistics.median(batch.values()), statistics.median(fwd.values())
    if f > 0 and b / f > DATALOADER_SHARE:
        cause = f"the batch generator takes {b:.4g} ms of the {f:.4g} ms forward-backward ({b / f:.0%}): the ranks wait for data"
        state.add(
            "DATALOADER_SLOW",
            state.ctx.node,
            state.timer_line,
            f"batch-generator {b:.4g} ms, forward-backward {f:.4g} ms (median max across ranks)",
            cause,
            whole_log=True,
        )


def gpu_utilisation(rows: list[dict[str, float]], node: str, source: str) -> list[Finding]:
    """Falling GPU utilisation over a job, from its nodes' nvidia-smi samples (jobs/NAME/logs/gpu-NODE.csv). Pure."""
    busy = [r["util"] for r in rows if "util" in r]
    if len(busy) < 12:
        return []
    busy = busy[len(busy) // 10 :]  # start-up: loading, compilation
    quarter = max(3, len(busy) // 4)
    head, tail = statistics.mean(busy[:quarter]), statistics.mean(busy[-quarter:])
    if head < 50 or tail >= THROUGHPUT_DROP * head:
        return []
    cause = f"GPU utilisation fell from {head:.0f} % to {tail:.0f} % during the job: the GPUs wait (data loading, a slow peer, host-side work)"
    return [finding("THROUGHPUT_FALLING", node, f"nvidia-smi utilization.gpu: mean {head:.0f} % early, {tail:.0f} % late", cause, source=source)]


_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")  # the characters str.splitlines ends a line at


def _open(path: Path, root: Path | None) -> IO[bytes]:
    """A log through megaprov's one reader of untrusted files: a regular file, opened without blocking (a FIFO) and,
    below ``root``, without following a link. A file the operator named (``root=None``) that cannot be read is
    doctor's own one-line error naming ``--log``; a job's log is its BadEntry, for the caller to report that log."""
    try:
        return untrusted.open_binary(path, root)
    except untrusted.BadEntry as exc:
        if root is not None:
            raise
        raise _named(path, exc) from None


def _named(path: Path, exc: untrusted.BadEntry) -> UsageError:
    name = f"--log {values.printable(str(path))}"
    if isinstance(exc, untrusted.Missing):
        return UsageError(f"{name}: no such file", "give the path of a job log, node log or saved dmesg/journal output")
    if exc.problem.endswith("(it is a directory)"):
        return UsageError(f"{name}: is a directory", "give log files (a job's logs are jobs/NAME/logs/NODE.log)")
    if exc.problem.startswith("is not a regular file"):
        return UsageError(f"{name}: {exc.problem}", "give a regular log file (save a stream first: journalctl -k > kernel.log)")
    return UsageError(f"{name}: {exc.problem}", "check the path and its permissions")


def _not_text(path: Path, root: Path | None) -> UsageError:
    if root is not None:
        return untrusted.BadEntry(path, "is not a text file")
    return UsageError(f"--log {values.printable(str(path))}: is not a text file", "give a log file (journalctl -k > kernel.log saves a kernel log)")


def _texts(handle: IO[bytes], path: Path, root: Path | None) -> Iterator[str]:
    """The rest of an open log, decoded READ_CHUNK bytes at a time; never more than MAX_LOG_BYTES in all, even from a
    file that grows while it is read."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    left = MAX_LOG_BYTES
    while left > 0:
        data = handle.read(min(READ_CHUNK, left))
        if not data:
            break
        if left == MAX_LOG_BYTES and b"\0" in data[:4096]:
            raise _not_text(path, root)
        left -= len(data)
        yield decoder.decode(data)
    yield decoder.decode(b"", final=True)


def _lines(texts: Iterable[str]) -> Iterator[str]:
    """The lines of a stream of text, as ``str.splitlines`` would split it whole, each cut to MAX_LINE characters:
    of a line without an end, only its first MAX_LINE characters are kept."""
    pending = ""  # a line not ended yet (at most MAX_LINE characters of it)
    after_cr = False  # the last text ended with "\r": a "\n" that starts the next ends the same line
    for text in texts:
        if after_cr and text:
            text = text[1:] if text[0] == "\n" else text
            after_cr = False
        if not text:
            continue
        buffer = pending + text
        lines = buffer.splitlines()
        pending = "" if buffer[-1] in _BREAKS else lines.pop()[:MAX_LINE]
        after_cr = buffer[-1] == "\r"
        for line in lines:
            yield line[:MAX_LINE]
    if pending:
        yield pending


def _log_lines(handle: IO[bytes], path: Path, root: Path | None) -> Iterator[str]:
    """The lines of an open log's last MAX_LOG_BYTES."""
    start = max(0, os.fstat(handle.fileno()).st_size - MAX_LOG_BYTES)
    if start:
        handle.seek(start)
    lines = _lines(_texts(handle, path, root))
    if start:
        next(lines, None)  # a cut first line is not a line
    return lines


@contextlib.contextmanager
def log_lines(path: Path, root: Path | None = None) -> Iterator[Iterator[str]]:
    """The lines of a log file's last MAX_LOG_BYTES, streamed, while the block runs (see scan_file); an unreadable
    or missing file given with --log is the user's to fix."""
    with _open(path, root) as handle:
        yield _log_lines(handle, path, root)


def scan_file(path: Path, node: str = "", job: dict[str, Any] | None = None, *, root: Path | None = None) -> list[Finding]:
    """The findings in a log file, streamed: its last MAX_LOG_BYTES, read through megaprov.untrusted (below ``root``,
    the job directory's root, for a job's log; ``None`` for a file the operator named with --log). LOG_BOUNDS."""
    with log_lines(path, root) as lines:
        return scan(lines, Context(str(path), node, job or {}))
