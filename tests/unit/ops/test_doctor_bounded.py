"""megaprov doctor on logs written to hurt it: any job can print anything into the logs doctor reads, so
each analysis is linear in the log and bounded in memory, no regex backtracks super-linearly on a long line, a log is
read only through megaprov.untrusted (no FIFO, device or link out of the job directory), and never more than
MAX_LOG_BYTES of it. None of these tests is timed against the machine: memory is a count, a pickled size or an
address-space limit; a regex's work is compared with its own work on a shorter line."""

from __future__ import annotations

import json
import math
import os
import pickle
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from megaprov import untrusted
from megaprov.errors import UsageError
from megaprov.ops.doctor import findings, parsers, signatures, xid
from tests.helpers.bounded import limited

ROOT = Path(__file__).resolve().parents[3]
GIB = 1 << 30


def iteration(i: int, loss: float = 5.0, ms: float = 100.0, total: int = 7000) -> str:
    """A Megatron-LM iteration line (the format of the corpus's upstream logs)."""
    return (
        f" [2026-12-02 10:00:00] iteration {i:8d}/{total:8d} | consumed samples: {i * 8:12d} | elapsed time per iteration (ms): {ms:.1f} |"
        f" throughput per GPU (TFLOP/s/GPU): {40000 / ms:.1f} | learning rate: 3.000000E-04 | global batch size:     8 | lm loss: {loss:.6E} |"
        " loss scale: 1.0 | grad norm: 1.000 | number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def run_isolated(code: str, *args: str, timeout: float = 120, address_space: int = GIB) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter under an address-space limit (``limited``): a read or an analysis that grows
    without bound ends in MemoryError there instead of taking this machine's memory; one that blocks ends at ``timeout``."""
    return subprocess.run(
        [sys.executable, "-c", limited(code, address_space), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False
    )


def retained(lines: list[str]) -> int:
    """The bytes the scan of ``lines`` keeps until its analyses run (its state, pickled)."""
    return len(pickle.dumps(signatures._scanned(lines, signatures.Context("t.log"))))


# ---- 1. analyses linear in the log, memory that does not grow with it -------------------------------------------

GROWING: dict[str, Callable[[int], list[str]]] = {
    "identical iteration lines": lambda n: [iteration(7)] * n,
    "a falling loss": lambda n: [iteration(i, 10 - 5 * i / n) for i in range(1, n + 1)],
    "a loss that falls and rises": lambda n: [iteration(i, 5 + abs(i - n / 2) / n) for i in range(1, n + 1)],
    "timer lines": lambda n: [f"    forward-backward ...............................: ({i % 97 + 1}.0, {i % 89 + 2}.0)" for i in range(n)],
    "NCCL version lines of distinct hosts": lambda n: [f"h{i}:1:1 [0] NCCL INFO NCCL version 2.{i % 3}.1+cuda12.4" for i in range(n)],
    "an error on distinct nodes": lambda n: [
        f"2026-12-02T10:00:00+0000 n{i} kernel: Out of memory: Killed process {i} (python) total-vm:1kB" for i in range(n)
    ],
    "torchrun restarts": lambda n: [f"megaprov: node n1 (node rank 0): torchrun {'starting' if i % 2 else 'exited with 0'} at x" for i in range(n)],
}


@pytest.mark.parametrize("shape", GROWING)
def test_what_a_scan_keeps_does_not_grow_with_the_log(shape):
    make = GROWING[shape]
    small, large = retained(make(12_000)), retained(make(24_000))
    assert large <= small * 1.05 + 4096, (small, large)


@pytest.mark.parametrize("shape", ["identical iteration lines", "a falling loss", "a loss that falls and rises"])
def test_the_loss_trend_of_7000_iteration_lines_fits_in_a_gib(shape):
    code = (
        "import json, sys\n"
        "from megaprov.ops.doctor import signatures\n"
        "lines = json.load(sys.stdin)\n"
        "print(json.dumps([f.code for f in signatures.scan(lines, signatures.Context('t.log'))]))\n"
    )
    lines = GROWING[shape](7000)
    done = subprocess.run(
        [sys.executable, "-c", limited(code, GIB)], input=json.dumps(lines), capture_output=True, text=True, timeout=300, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == (["LOSS_DIVERGING"] if shape == "a loss that falls and rises" else [])


MEMORY = {  # a log's lines (the i-th) and its size: past what the older reader held whole, or past the scan's caps
    "lines of text outside the BMP": (lambda i: "\U0001f600" * 1000 + "\n", 12_000_000),
    "errors on distinct nodes": (lambda i: f"2026-12-02T10:00:00+0000 {'n' * 200}{i} kernel: Out of memory: Killed process 1 (python)\n", 3_500_000),
    "NCCL versions of distinct nodes": (lambda i: f"{'h' * 200}{i}:1:1 [0] NCCL INFO NCCL version 2.{i % 5}.1\n", 3_500_000),
    "one line without an end": (lambda i: "x" * 100_000, 12_000_000),
}


@pytest.mark.parametrize("case", MEMORY)
def test_a_scan_stays_within_its_stated_memory(tmp_path, case):
    """The worst logs known here, traced: the scan's peak stays under LOG_MEMORY."""
    import tracemalloc

    make, size = MEMORY[case]
    log = tmp_path / "worst.log"
    with log.open("w") as out:
        written = i = 0
        while written < size:
            line = make(i)
            out.write(line)
            written += len(line.encode())
            i += 1
    tracemalloc.start()
    try:
        signatures.scan_file(log)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < findings.LOG_MEMORY, f"{peak / 2**20:.0f} MiB"


def test_a_short_series_is_analysed_whole():
    """Below the bound nothing is thinned: the findings on real logs are the same as before."""
    state = signatures._scanned([iteration(i, 10 - i / 100) for i in range(1, signatures.MAX_POINTS + 1)], signatures.Context("t.log"))
    assert [it.iteration for _, it in state.series.values()] == list(range(1, signatures.MAX_POINTS + 1))


# ---- 2. no regex backtracks super-linearly on a long line -------------------------------------------------------


def patterns() -> dict[str, re.Pattern[str]]:
    """Every regex of the doctor package: the line rules and each module-level pattern."""
    found = {f"RULES[{i}] {rule.code}": rule.pattern for i, rule in enumerate(signatures.RULES)}
    for module in (signatures, parsers, xid, findings):
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern):
                found[f"{module.__name__.rsplit('.', 1)[-1]}.{name}"] = value
    return found


# Fills that make a pattern try far at many places: its own fixed text repeated without the rest of the message,
# long runs of one class of characters, and the characters its quantifiers share.
FILLS = (
    "x",
    "1",
    " ",
    "a ",
    "x.",
    ":",
    "'",
    "(",
    "[",
    "a]",
    "x:1",
    "port: 1 ",
    "[Rank 1]",
    "[PG ",
    "DistNetworkError: ",
    "connectFullMesh failed",
    "Out of memory: Killed process 1 (",
    "NET/IB: Got completion from peer ",
    "token id exceed ",
    "rendezvous ",
    "dataset prefix ",
    "No such file or directory: '",
    "2026-12-02T ",
    "a:1:1 [1] ",
    "Signal 1 (SIG",
    "address already in use port ",
    "NVRM: Xid (PCI:",
    "Last error:",
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=x",
    "NCCL version 1",
    "127.",
    "connect to 127.0.0.1<",
    "megaprov: node ",
)
SHORT, LONG = 1024, 16 * 1024  # LONG is longer than a line is ever cut to (MAX_LINE): the difference shows more clearly


def _work(pattern: re.Pattern[str], text: str) -> float:
    """CPU seconds of this process (not the wall clock, which counts the time another process held the core: the
    suite's other parts load this machine), the least of seven."""
    best = math.inf
    for _ in range(7):
        start = time.process_time()
        pattern.search(text)
        pattern.match(text)
        best = min(best, time.process_time() - start)
    return best


@pytest.mark.parametrize("name", sorted(patterns()))
def test_no_regex_does_more_than_linear_work_on_a_long_line(name):
    """16 times the line is 16 times the work for a linear regex, 256 times for a quadratic one: the bound is 48 times
    (plus a millisecond, for a regex that does next to nothing on either)."""
    pattern = patterns()[name]
    slow = []
    for fill in FILLS:
        short, long = _work(pattern, (fill * SHORT)[:SHORT]), _work(pattern, (fill * LONG)[:LONG])
        if long > 48 * short + 1e-3:
            slow.append((fill, f"{short * 1e3:.3f} ms", f"{long * 1e3:.3f} ms"))
    assert not slow, slow


MESSAGES = {
    "DATA_PREFIX_MISSING": "FileNotFoundError: /data/wiki_text_document.idx does not exist",
    "NCCL_TIMEOUT": (
        "[rank1]:[E1202 10:00:00.000 ProcessGroupNCCL.cpp:616] [PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught collective"
        " operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=134217728, NumelOut=134217728, Timeout(ms)=600000)"
        " ran for 600012 milliseconds before timing out."
    ),
    "RDZV_PORT_IN_USE": "DistNetworkError: The server socket has failed to listen on any local network address. port: 29613, useIpv6: false,"
    " code: -98, name: EADDRINUSE, message: address already in use",
    "PEER_LOST": "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server"
    " shutdown or crash?",
    "RANK_OOM_KILLED": "[12345.678] Out of memory: Killed process 51234 (python) total-vm:123kB, anon-rss:456kB",
    "NCCL_LOOPBACK": "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error"
    " (local=[10.0.0.1]:1234, remote=[127.0.1.1]:29500)",
}


def test_the_bounded_rules_still_match_their_messages():
    """The bounds of the rules' gaps are far above what the messages put between their fixed parts."""
    for code, line in MESSAGES.items():
        assert [f.code for f in signatures.scan([line], signatures.Context("t.log"))] == [code], line
    assert parsers.ibstat("CA 'mlx5_0'\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tLink layer: InfiniBand\n") == [
        parsers.IbPort("mlx5_0", "1", "Active", "LinkUp", 400.0, "InfiniBand")
    ]


def test_a_rules_fixed_text_never_hides_a_match():
    """The substring test before each rule's search (Rule.needs) only skips lines the rule cannot match: every line of
    the corpus and of these tests that the pattern matches, in any case where the pattern ignores it, still matches."""
    corpus = ROOT / "tests" / "doctor_corpus"
    lines = [line for path in sorted(corpus.glob("*/*.log")) for line in path.read_text(errors="replace").splitlines()]
    lines += [(fill * 64)[:4095] for fill in FILLS] + list(MESSAGES.values())
    lines += [variant for line in list(lines) for variant in (line.upper(), line.lower(), line.swapcase())]
    for rule in signatures.RULES:
        assert rule.needs, rule.code
        if rule.pattern.flags & re.IGNORECASE:
            assert all(n == n.lower() for n in rule.needs), rule.code
        matched = [line for line in lines if rule.pattern.search(line)]
        assert matched, rule.code  # each rule is tried on lines it matches
        for line in matched:
            assert rule.search(line, line.lower() if line.isascii() else ""), (rule.code, line)


# ---- 3. a log is a regular file, read without blocking or following a link out of its job ------------------------

READ = (
    "import json, sys\n"
    "from pathlib import Path\n"
    "from megaprov.ops.doctor import signatures\n"
    "from megaprov import untrusted\n"
    "path, root = sys.argv[1], (sys.argv[2] or None)\n"
    "try:\n"
    "    found = signatures.scan_file(Path(path), root=Path(root)) if root else signatures.scan_file(Path(path))\n"
    "    print(json.dumps({'codes': [f.code for f in found]}))\n"
    "except untrusted.BadEntry as exc:\n"
    "    print(json.dumps({'bad_entry': exc.message, 'missing': isinstance(exc, untrusted.Missing)}))\n"
    "except Exception as exc:\n"
    "    print(json.dumps({type(exc).__name__: getattr(exc, 'message', str(exc))}))\n"
)


def _fifo(log: Path, outside: Path) -> None:
    os.mkfifo(log)


def _zero(log: Path, outside: Path) -> None:
    log.symlink_to("/dev/zero")


def _link_out(log: Path, outside: Path) -> None:
    log.symlink_to(outside)


def _directory(log: Path, outside: Path) -> None:
    log.mkdir()


def _missing(log: Path, outside: Path) -> None:
    pass


ENTRIES = {
    # kind: (make it, job's log (root) or --log, what the answer says)
    "FIFO given with --log": (_fifo, False, {"UsageError": "--log {log}: is not a regular file (it is a FIFO)"}),
    "link to /dev/zero given with --log": (_zero, False, {"UsageError": "--log {log}: is not a regular file (it is a device)"}),
    "directory given with --log": (_directory, False, {"UsageError": "--log {log}: is a directory"}),
    "missing file given with --log": (_missing, False, {"UsageError": "--log {log}: no such file"}),
    "FIFO as a job's log": (_fifo, True, {"bad_entry": "{log} is not a regular file (it is a FIFO)", "missing": False}),
    "link to /dev/zero as a job's log": (_zero, True, {"bad_entry": "{log} is a symbolic link (or passes through one)", "missing": False}),
    "link out of the job as a job's log": (_link_out, True, {"bad_entry": "{log} is a symbolic link (or passes through one)", "missing": False}),
    "directory as a job's log": (_directory, True, {"bad_entry": "{log} is not a regular file (it is a directory)", "missing": False}),
    "missing job log": (_missing, True, {"bad_entry": "{log} does not exist", "missing": True}),
}


@pytest.mark.parametrize("kind", ENTRIES)
def test_a_log_that_is_not_a_regular_file_is_refused_without_reading_it(tmp_path, kind):
    make, in_job, expected = ENTRIES[kind]
    root = tmp_path / "view" / "jobs" / "evil"
    (root / "logs").mkdir(parents=True)
    outside = tmp_path / "secret"
    outside.write_text("CUDA out of memory. Tried to allocate 2.00 GiB\n")
    log = root / "logs" / "n1.log"
    make(log, outside)
    done = run_isolated(READ, str(log), str(untrusted.job_root(root)) if in_job else "", timeout=30)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {k: v.format(log=log) if isinstance(v, str) else v for k, v in expected.items()}


def test_a_job_log_is_read_below_its_root():
    """The caller's job root reaches the reader (a job's log that is a plain file is scanned)."""
    corpus = ROOT / "tests" / "doctor_corpus" / "upstream"
    found = signatures.scan_file(corpus / "cuda_oom.log", root=corpus.parent)
    assert "CUDA_OOM" in {f.code for f in found}


# ---- 4. never more than MAX_LOG_BYTES read, never one line kept whole --------------------------------------------


class Growing:
    """A log that grows while it is read: every read appends as much as it returns."""

    def __init__(self, path: Path) -> None:
        self.inner = path.open("rb")
        self.appender = path.open("ab")
        self.given = 0

    def fileno(self) -> int:
        return self.inner.fileno()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.inner.seek(offset, whence)

    def read(self, size: int = -1) -> bytes:
        self.appender.write(b"line\n" * max(1, (size if size > 0 else 1 << 20) // 5))
        self.appender.flush()
        data = self.inner.read(size)
        self.given += len(data)
        return data

    def close(self) -> None:
        self.inner.close()
        self.appender.close()

    def __enter__(self) -> Growing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


BOUND = 1 << 20  # MAX_LOG_BYTES in these tests


def _grows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Callable[[], int]]:
    log = tmp_path / "grows.log"
    log.write_bytes(b"line\n" * 10)
    opened: list[Growing] = []

    def open_binary(path: Path | str, root: Path | str | None) -> Growing:
        opened.append(Growing(Path(path)))
        return opened[-1]

    monkeypatch.setattr(untrusted, "open_binary", open_binary)
    return log, lambda: opened[0].given if opened else -1


def _one_long_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Callable[[], int]]:
    log = tmp_path / "long.log"
    log.write_bytes(b"x" * (BOUND // 2) + b"\n" + b"y" * (BOUND // 4))
    return log, lambda: log.stat().st_size


def _past_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Callable[[], int]]:
    log = tmp_path / "big.log"
    log.write_bytes(b"early line\n" * (2 * BOUND // 11) + b"last line\n")
    return log, lambda: log.stat().st_size


UNBOUNDED = {
    "a log that grows while it is read": _grows,
    "lines longer than MAX_LINE": _one_long_line,
    "a log past MAX_LOG_BYTES": _past_the_bound,
}


@pytest.mark.parametrize("case", UNBOUNDED)
def test_a_log_is_read_within_its_bounds(tmp_path, monkeypatch, case):
    monkeypatch.setattr(signatures, "MAX_LOG_BYTES", BOUND)
    log, given = UNBOUNDED[case](tmp_path, monkeypatch)
    with signatures.log_lines(log) as stream:
        lines = list(stream)
    assert 0 <= given() and sum(len(line) + 1 for line in lines) <= BOUND + 1  # + 1: the last line may have no end
    assert all(len(line) <= signatures.MAX_LINE for line in lines), max(len(line) for line in lines)
    if case == "a log past MAX_LOG_BYTES":
        assert lines[-1] == "last line" and set(lines[:-1]) == {"early line"}
    if case == "a log that grows while it is read":
        assert given() <= BOUND


def test_a_job_log_that_is_not_text_is_refused_for_that_log_only(tmp_path):
    root = tmp_path / "jobs" / "evil"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "n1.log").write_bytes(b"\x7fELF\0\0\0")
    with pytest.raises(untrusted.BadEntry, match="not a text file"):
        signatures.scan_file(root / "logs" / "n1.log", root=tmp_path)
    with pytest.raises(UsageError, match=r"^--log .*n1.log: is not a text file"):
        signatures.scan_file(root / "logs" / "n1.log")
