"""Failure signatures in job logs, node logs and kernel logs: what went wrong, the line that shows it, what to change.

``scan`` reads lines once. Line rules match the fixed text of the messages torch, torchrun, NCCL, Megatron-LM, the
Linux kernel and the NVIDIA driver print (the format each comes from is named at its rule; the corpus under
tests/doctor_corpus/ holds logs produced for real on the lab and logs built from those formats). Whole-log analyses
then look at the Megatron iteration lines (nan, a rising loss, falling throughput), the timers (data loading) and the
NCCL version lines of every rank. Pure: no I/O; ``read_log`` is the one reader, bounded."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from megaprov.errors import UsageError
from megaprov.ops.doctor.findings import XID_ACTION_FIX, Finding, finding
from megaprov.training.follow import Iteration, parse_iteration
from megaprov.training.verdict import mann_kendall, theil_sen

MAX_LOG_BYTES = 256 * 1024 * 1024  # one log file read: its last 256 MiB
MAX_LINE = 4096  # characters of a line looked at
MAX_PER_CODE = 20  # findings of one code per node and file (a flood of one error says it once per place)

# A line's node, where the line names it: journal lines ("2026-12-02T10:00:00+0000 node1 kernel: ..."), NCCL's
# "host:pid:tid [dev] NCCL ..." prefix, and megaprov's own "megaprov: node X" lines.
_JOURNAL_HOST = re.compile(r"^(?:\d{4}-\d\d-\d\dT\S+|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) (?P<host>[\w.-]+) \S+?(?:\[\d+\])?: ")
# NCCL src/debug.cc: "host:pid:tid [dev] NCCL INFO ...", "host:pid:tid [dev] file:line (func) NCCL WARN ..."
_NCCL_HOST = re.compile(r"^(?:\[[^\]]*\]:?\s*)?(?:\d+: )?(?P<host>[A-Za-z][\w.-]*):\d+:\d+ \[\d+\] (?:\S+:\d+ (?:\([^)]*\) )?)?NCCL ")
_MEGAPROV_NODE = re.compile(r"^megaprov: node (?P<host>\S+) \(node rank \d+\)")


@dataclass
class Context:
    """What the rules know besides the line: the file, its node, the job's facts where the log is a job's."""

    source: str
    node: str = ""
    job: dict[str, Any] = field(default_factory=dict)  # the job's plan where known (memory estimate, layout)


@dataclass(frozen=True)
class Rule:
    code: str
    pattern: re.Pattern[str]
    explain: Callable[[re.Match[str], Context], tuple[str, str]] | None = None  # (cause, fix) for this match
    severity: Callable[[re.Match[str]], str] | None = None


def _gib(text: str) -> float | None:
    m = re.match(r"([\d.]+) ?([KMGT]?)i?B", text)
    if not m:
        return None
    return float(m.group(1)) * {"": 1 / 2**30, "K": 1 / 2**20, "M": 1 / 2**10, "G": 1.0, "T": 1024.0}[m.group(2)]


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

    entry = xids.lookup(int(m["xid"]))
    return (
        f"GPU {m['pci']} reported Xid {entry.number} ({entry.name}): {entry.note}",
        XID_ACTION_FIX.get(entry.action, "see NVIDIA's Xid catalogue"),
    )


def _xid_severity(m: re.Match[str]) -> str:
    from megaprov.ops.doctor import xid as xids

    return xids.lookup(int(m["xid"])).severity


# The line rules. Each names the program and message its fixed text comes from.
RULES: tuple[Rule, ...] = (
    # torch c10/cuda/CUDACachingAllocator.cpp: "CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is free."
    Rule(
        "CUDA_OOM",
        re.compile(
            r"CUDA out of memory\. Tried to allocate (?P<ask>[\d.]+ [KMGT]?i?B)"
            r"(?:\. GPU (?P<gpu>\d+) has a total capacity of (?P<total>[\d.]+ [KMGT]?i?B) of which (?P<free>[\d.]+ [KMGT]?i?B) is free)?"
        ),
        _oom,
    ),
    # torch c10d ProcessGroupNCCL.cpp, the watchdog: "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=%d, OpType=%s, ...
    # Timeout(ms)=%d) ran for %d milliseconds before timing out."
    Rule(
        "NCCL_TIMEOUT",
        re.compile(
            r"\[(?:PG [^\]]*?)?Rank (?P<rank>\d+)\].*?Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
            r".*?Timeout\(ms\)=(?P<timeout>\d+)\) ran for (?P<ran>\d+) milliseconds before timing out"
        ),
        _watchdog,
    ),
    # NCCL src/init.cc / ncclGetErrorString: "unhandled system error (run with NCCL_DEBUG=INFO for details)"
    Rule("NCCL_SYSTEM_ERROR", re.compile(r"unhandled system error"), _system_error),
    # NCCL bootstrap and NET/Socket interface lines naming the loopback interface; gloo's full-mesh connect to 127.x;
    # NCCL's socket connect errors to a 127.x address.
    Rule(
        "NCCL_LOOPBACK",
        re.compile(
            r"(?:NCCL INFO (?:Bootstrap ?: Using|NET/Socket ?: Using \[\d+\])\s*lo:127\.)"
            r"|(?:connectFullMesh failed.*remote=\[127\.)"
            r"|(?:(?:Connect|connect) to (?:127\.\d+\.\d+\.\d+|\[?::1\]?)<\d+> failed)"
        ),
    ),
    # NCCL src/transport/net_ib/p2p.cc: "NET/IB: Got completion from peer %s with status=%s(%d) opcode=%s(%d) vendor_err=%u %s%s%s%s hca %s"
    # (2.2x: "with status=%d opcode=%d len=%u vendor err %u"; older releases: "with error %d, opcode %d, len %d, vendor err %d")
    Rule(
        "IB_COMPLETION_ERROR",
        re.compile(
            r"NET/IB ?: Got completion from peer (?P<peer>\S+?) with (?:error |status=)(?:\w+\()?(?P<status>\d+)(?:.*?\bhca (?P<hca>[\w.-]+))?"
        ),
        _ib_completion,
    ),
    # torch c10d socket.cpp: "The server socket has failed to listen on any local network address. ... port: %d, useIpv6: %d, code: %d,
    # name: EADDRINUSE, message: address already in use"; "[W socket.cpp] ... (errno: 98 - Address already in use)"
    Rule(
        "RDZV_PORT_IN_USE",
        re.compile(
            r"(?:port: (?P<port>\d+).*?EADDRINUSE)|"
            r"(?::(?P<port2>\d+) \(errno: 98 - Address already in use\))|"
            r"(?:EADDRINUSE|[Aa]ddress already in use)(?:.*?port:? (?P<port3>\d+))?"
        ),
        _port_in_use,
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
    ),
    # gloo (transport/tcp/pair.cc: "Connection closed by peer", "Connection reset by peer"), c10d's "Broken pipe" on a store socket
    Rule(
        "PEER_LOST",
        re.compile(
            r"Connection closed by peer|"
            r"Connection reset by peer|"
            r"recv\(\): Connection reset|"
            r"Broken pipe|"
            r"DistNetworkError: .*(?:reset|closed)|"
            r"Socket Timeout"
        ),
    ),
    # megatron-core datasets/indexed_dataset.py (IndexedDataset.initialize): "One or both of the .idx and .bin files cannot be found at
    # the path prefix %s"; an open() of a missing .idx/.bin
    Rule(
        "DATA_PREFIX_MISSING",
        re.compile(
            r"(?:One or both of the \.idx and \.bin files cannot be found at the path prefix (?P<prefix>\S+))|"
            r"(?:No such file or directory: '(?P<path>[^']+\.(?:idx|bin))')|"
            r"(?:dataset prefix \S+ (?:does not exist|not found))|"
            r"(?:\S+\.(?:idx|bin) (?:does not exist|not found))"
        ),
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
    ),
    # Linux mm/oom_kill.c: "Out of memory: Killed process %d (%s) total-vm:..." (also "Memory cgroup out of memory: Killed process")
    Rule("RANK_OOM_KILLED", re.compile(r"[Oo]ut of memory: Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)"), _oom_killer),
    # megaprov's own line in a job's node log (megaprov/training/render.py): "megaprov: node %s (node rank %d): torchrun exited with %d
    # at %s"; 128 + a signal: 134 SIGABRT, 135 SIGBUS, 137 SIGKILL, 139 SIGSEGV (143, SIGTERM, and 130, SIGINT, are stops)
    Rule(
        "RANK_KILLED",
        re.compile(r"^megaprov: node (?P<host>\S+) \(node rank \d+\): torchrun exited with (?P<rc>13[457]|139) at"),
        _torchrun_signal,
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
    ),
    # NVIDIA driver (open-gpu-kernel-modules, nvErrorLog): "NVRM: Xid (PCI:%04x:%02x:%02x): %d, ..."
    # (MIG-attributed errors name the GPU instance too: "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, ...")
    Rule("GPU_XID", re.compile(r"NVRM: Xid \((?P<pci>PCI:[0-9a-fA-F:.]+)(?: GPU-I:\w+)?\): (?P<xid>\d+)(?:, ?(?P<text>.*))?"), _xid, _xid_severity),
    # CUDA runtime: cudaErrorECCUncorrectable's string
    Rule("GPU_ECC", re.compile(r"uncorrectable ECC error encountered")),
)

# NCCL's init line (src/init.cc VERSION_STRING, as INFO or at NCCL_DEBUG=VERSION/WARN alone); not "compiled with NCCL version"
_NCCL_VERSION = re.compile(r"(?<!with )NCCL version (?P<version>\d+\.\d+\.\d+)")
_TIMER = re.compile(r"^\s*(?:\[[^\]]*\]\s*)?(?P<name>[a-z][\w-]*(?: [\w-]+)*) \.{3,}: \(?(?P<min>[\d.]+)(?:, (?P<max>[\d.]+)\))?")
_TORCHRUN = re.compile(r"^megaprov: node \S+ \(node rank \d+\): torchrun (?:starting|exited with (?P<rc>-?\d+)) at ")
_LAST_ERROR = re.compile(r"Last error:\s*(?P<text>\S.*)?$")


def node_of(line: str) -> str:
    for pattern in (_JOURNAL_HOST, _NCCL_HOST, _MEGAPROV_NODE):
        m = pattern.search(line)
        if m:
            return m["host"]
    return ""


@dataclass
class _Scan:
    ctx: Context
    found: list[Finding] = field(default_factory=list)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    seen: set[tuple[str, str, str]] = field(default_factory=set)
    iterations: list[tuple[int, Iteration]] = field(default_factory=list)  # (line number, iteration)
    nccl_versions: dict[str, tuple[int, str]] = field(default_factory=dict)  # host -> (line, version)
    timers: dict[str, list[float]] = field(default_factory=dict)
    timer_line: int = 0
    clean_exits: list[int] = field(default_factory=list)  # megaprov's "torchrun exited with 0" lines
    starts: list[int] = field(default_factory=list)  # megaprov's "torchrun starting" lines

    def add(self, code: str, node: str, number: int, evidence: str, cause: str = "", fix: str = "", severity: str = "", key: str = "") -> None:
        where = (code, node)
        dedup = (code, node, key or evidence)
        if dedup in self.seen or self.counts.get(where, 0) >= MAX_PER_CODE:
            return
        self.seen.add(dedup)
        self.counts[where] = self.counts.get(where, 0) + 1
        self.found.append(finding(code, node, evidence, cause, fix, severity, source=self.ctx.source, line=number))


def _dedup_key(rule: Rule, m: re.Match[str]) -> str:
    """Lines that say the same thing once (every rank prints the same OOM, every ring the same peer)."""
    if rule.code == "GPU_XID":
        return f"{m['pci']}:{m['xid']}"
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
            (state.clean_exits if started["rc"] == "0" else state.starts if started["rc"] is None else []).append(number)
        it = parse_iteration(line)
        if it is not None:
            state.iterations.append((number, it))
            continue
        m = _NCCL_VERSION.search(line)
        if m:
            state.nccl_versions.setdefault(node or f"line {number}", (number, m["version"]))
        t = _TIMER.match(line)
        if t:
            state.timers.setdefault(t["name"], []).append(float(t["max"] or t["min"]))
            state.timer_line = state.timer_line or number
        for rule in RULES:
            match = rule.pattern.search(line)
            if not match:
                continue
            cause, fix = rule.explain(match, ctx) if rule.explain else ("", "")
            severity = rule.severity(match) if rule.severity else ""
            before = len(state.found)
            state.add(rule.code, node, number, line, cause, fix, severity, _dedup_key(rule, match))
            if rule.code == "NCCL_SYSTEM_ERROR" and len(state.found) > before:
                pending_last_error = state.found[-1]
            break  # one line, one signature: the first rule that matches is the most specific
        if "Last error:" in line and pending_last_error is None:
            m2 = _LAST_ERROR.search(line)
            if m2 and m2["text"] and re.search(r"127\.\d+\.\d+\.\d+", m2["text"]):
                state.add("NCCL_LOOPBACK", node, number, line)
    _nccl_versions(state)
    _iterations(state)
    _timers(state)
    return explained(_before_clean_exit(state))


def _before_clean_exit(state: _Scan) -> list[Finding]:
    """A lost connection that the node's torchrun then exited 0 after (no restart between) did not fail the node: at the end
    of a job the rendezvous host's agent shuts its store down and the other agents' last read finds it closed."""
    out = []
    for f in state.found:
        if f.code == "PEER_LOST":
            after = [n for n in state.clean_exits if n > f.line]
            if after and not [n for n in state.starts if f.line < n < after[0]]:
                continue
        out.append(f)
    return out


def explained(found: list[Finding]) -> list[Finding]:
    """A peer lost because a rank was killed (a signal, the OOM killer) in the same log is that kill's consequence: the
    kill is the finding. Likewise a system error that turned out to be the loopback trap."""
    codes = {f.code for f in found}
    drop = set()
    if codes & {"RANK_KILLED", "RANK_OOM_KILLED"}:
        drop.add("PEER_LOST")
    return [f for f in found if f.code not in drop]


def _strip_rank(line: str) -> str:
    return re.sub(r"^\[rank\d+\]:\s*", "", line.strip())


def _refine_system_error(state: _Scan, found: Finding, detail: str, number: int) -> None:
    """NCCL's system error named with its 'Last error': a loopback address is NCCL_LOOPBACK."""
    index = state.found.index(found)
    evidence = f"{found.evidence} | Last error: {detail}"
    if re.search(r"\b127\.\d+\.\d+\.\d+\b", detail):
        if any(f.code == "NCCL_LOOPBACK" and f.node == found.node for f in state.found):
            del state.found[index]  # the loopback finding already stands for it
        else:
            state.found[index] = finding("NCCL_LOOPBACK", found.node, evidence, source=found.source, line=found.line)
        return
    address = re.search(r"(?:to|from|peer) \[?([\w.:]+?)\]?<(\d+)>", detail)
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
    )


def _line_of(state: _Scan, it: Iteration) -> int:
    return next((n for n, x in state.iterations if x is it), 0)


def _iterations(state: _Scan) -> None:
    series = [it for _, it in state.iterations]
    if not series:
        return
    bad = [it for it in series if (it.loss is not None and not math.isfinite(it.loss)) or it.nan > 0]
    if bad:
        first = bad[0]
        lr = f" at learning rate {first.lr:g}" if first.lr is not None else ""
        norms = [f"{it.grad_norm:.3g}" for it in series[: series.index(first)][-5:] if it.grad_norm is not None]
        cause = f"the loss is not finite from iteration {first.iteration}{lr}" + (f"; grad norm before it: {', '.join(norms)}" if norms else "")
        state.add("LOSS_NAN", state.ctx.node, _line_of(state, first), _describe(first), cause)
        return
    losses = [(it.iteration, it.loss) for it in series if it.loss is not None]
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


def _diverging(state: _Scan, series: list[Iteration], losses: list[tuple[int, float]]) -> None:
    values = [float(v) for _, v in losses]
    low_at = min(range(len(values)), key=values.__getitem__)
    tail = values[low_at:]
    if len(tail) < 6:
        return
    z, _ = mann_kendall(tail)
    slope = theil_sen([float(i) for i in range(len(tail))], tail)
    rise = tail[-1] - values[low_at]
    # rising after the minimum: a significant upward trend that took back at least a tenth of the drop so far
    drop = max(values[0] - values[low_at], 1e-9)
    if z >= 1.645 and slope > 0 and rise >= 0.1 * drop and rise >= 0.02 * values[low_at]:
        low, last = [it for it in series if it.loss is not None][low_at], [it for it in series if it.loss is not None][-1]
        norms = [it.grad_norm for it in series if it.grad_norm is not None]
        spikes = ""
        if len(norms) >= 6:
            median = statistics.median(norms)
            high = max(norms)
            if median > 0 and high > 5 * median:
                spikes = f"; grad norm peaked at {high:.3g} against a median of {median:.3g}"
        cause = (
            f"the loss fell to {low.loss:.4g} at iteration {low.iteration} and rose to {last.loss:.4g} by iteration {last.iteration}"
            f" (Mann-Kendall z={z:.2f}){spikes}: the learning rate is too high for this batch, or the warm-up too short"
        )
        state.add("LOSS_DIVERGING", state.ctx.node, _line_of(state, last), f"{_describe(low)} -> {_describe(last)}", cause)


THROUGHPUT_DROP = 0.7  # the last quarter's median rate under 70 % of the first quarter's


def _throughput(state: _Scan, series: list[Iteration]) -> None:
    timed = [it for it in series if it.ms_per_iteration]
    attempts = {it.attempt for it in timed}
    if len(timed) < 8 or len(attempts) > 1:
        return
    timed = timed[1:]  # the first logged interval carries start-up
    quarter = max(2, len(timed) // 4)
    head = statistics.median(float(it.ms_per_iteration or 0) for it in timed[:quarter])
    tail = statistics.median(float(it.ms_per_iteration or 0) for it in timed[-quarter:])
    if head > 0 and head / tail < THROUGHPUT_DROP:
        first, last = timed[0], timed[-1]
        tf = ""
        if first.tflops_per_gpu and last.tflops_per_gpu:
            tf = f", TFLOP/s/GPU {first.tflops_per_gpu:.4g} -> {last.tflops_per_gpu:.4g}"
        cause = (
            f"time per iteration grew from a median of {head:.4g} ms to {tail:.4g} ms ({head / tail:.0%} of the early rate){tf}:"
            " data loading falling behind, a slow or throttling node, or a degraded link"
        )
        state.add("THROUGHPUT_FALLING", state.ctx.node, _line_of(state, last), f"{_describe(first)} -> {_describe(last)}", cause)


DATALOADER_SHARE = 0.25  # batch-generator above a quarter of forward-backward


def _timers(state: _Scan) -> None:
    batch = state.timers.get("batch-generator")
    fwd = state.timers.get("forward-backward")
    if not batch or not fwd:
        return
    b, f = statistics.median(batch), statistics.median(fwd)
    if f > 0 and b / f > DATALOADER_SHARE:
        cause = f"the batch generator takes {b:.4g} ms of the {f:.4g} ms forward-backward ({b / f:.0%}): the ranks wait for data"
        state.add(
            "DATALOADER_SLOW",
            state.ctx.node,
            state.timer_line,
            f"batch-generator {b:.4g} ms, forward-backward {f:.4g} ms (median max across ranks)",
            cause,
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


def read_log(path: Path) -> list[str]:
    """A log file's lines, its last MAX_LOG_BYTES; an unreadable or missing file is the user's to fix."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - MAX_LOG_BYTES))
            data = handle.read()
    except FileNotFoundError:
        raise UsageError(f"--log {path}: no such file", "give the path of a job log, node log or saved dmesg/journal output") from None
    except IsADirectoryError:
        raise UsageError(f"--log {path}: is a directory", "give log files (a job's logs are jobs/NAME/logs/NODE.log)") from None
    except OSError as exc:
        raise UsageError(f"--log {path}: cannot be read ({exc.strerror})", "check the path and its permissions") from None
    if b"\0" in data[:4096]:
        raise UsageError(f"--log {path}: is not a text file", "give a log file (journalctl -k > kernel.log saves a kernel log)")
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[1:] if size > MAX_LOG_BYTES else lines  # a cut first line is not a line


def scan_file(path: Path, node: str = "", job: dict[str, Any] | None = None) -> list[Finding]:
    return scan(read_log(path), Context(str(path), node, job or {}))
