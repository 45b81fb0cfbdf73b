#!/usr/bin/env python3
"""`megaprov doctor --log` on a generated job log: wall time and peak memory on a realistic 100 MB log, and on logs
a job could write to hurt it, against a realistic log of the same size. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/bench_doctor.py [--mb 100] [--rounds 3] [--checkout DIR] [--keep DIR]

The realistic log: Megatron-LM iteration lines (loss, time per iteration, TFLOP/s), its timers, NCCL INFO lines of
16 ranks, torch and Python warnings, now and then a long line without a space (a serialised blob), and a final
CUDA out-of-memory error with torchrun's summary. The hostile logs (each compared with a realistic log of the same
size, so the ratio is the cost of the content, not of the bytes):

- 7,000 identical iteration lines (the loss-trend analysis was quadratic in them);
- 1,000 lines of 4,095 characters without a space (a regex backtracked on each);
- 1,000 lines of 4,095 characters made of one rule's fixed text again and again ("port: 1 ", "[PG ", ...): each
  pattern's worst line as tests/unit/ops/test_doctor_bounded.py finds it.

Each figure is the command's wall time from its start (the interpreter and imports included: see the empty log's
line) and its peak resident memory, ``ru_maxrss`` of that child (``os.wait4``: what
``resource.getrusage(RUSAGE_CHILDREN)`` reports for one child). The small logs are the median of ``--rounds`` runs.
``--checkout DIR`` runs another checkout's megaprov (``python -m megaprov`` with ``PYTHONPATH=DIR``), for a
before/after comparison on the same logs.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOSTS = [f"gpu-node-{i:02d}" for i in range(1, 3)]
FRAGMENTS = (
    "port: 1 ",
    "[PG ",
    "[Rank 1]",
    "DistNetworkError: ",
    "token id exceed ",
    "connectFullMesh failed",
    "Out of memory: Killed process 1 (",
    "x.",
    "127.",
)


def iteration_line(i: int, total: int, loss: float, ms: float, norm: float) -> str:
    return (
        f" [2026-12-02 10:{i // 60 % 60:02d}:{i % 60:02d}] iteration {i:8d}/{total:8d} | consumed samples: {i * 1024:12d} |"
        f" elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {330000 / ms:.1f} |"
        f" learning rate: {3e-4 * min(1.0, i / 2000):.6E} | global batch size:  1024 | lm loss: {loss:.6E} | loss scale: 1.0 |"
        f" grad norm: {norm:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def realistic(rng: random.Random) -> Iterator[str]:
    """Lines of a healthy training job's log, without end."""
    ranks = [(host, 4000 + r, r % 8) for host in HOSTS for r in range(8)]
    for host, pid, dev in ranks:
        yield f"{host}:{pid}:{pid + 90} [{dev}] NCCL INFO NCCL version 2.21.5+cuda12.4"
        yield f"{host}:{pid}:{pid + 90} [{dev}] NCCL INFO Bootstrap : Using ib0:10.10.0.{dev + 11}<0>"
    i, total = 0, 500_000
    while True:
        i += 1
        loss = 2.2 + 8.5 * 0.9995**i + rng.gauss(0, 0.03)
        yield iteration_line(i, total, loss, 812.0 + rng.gauss(0, 6), 0.8 + abs(rng.gauss(0, 0.1)))
        if i % 10 == 0:
            yield f"    forward-backward ...............................: ({801 + rng.random() * 5:.2f}, {806 + rng.random() * 5:.2f})"
            yield f"    batch-generator ................................: ({0.9 + rng.random():.2f}, {2.1 + rng.random():.2f})"
            yield f"    optimizer ......................................: ({6.1 + rng.random():.2f}, {6.4 + rng.random():.2f})"
        for _ in range(3):
            host, pid, dev = rng.choice(ranks)
            channel = rng.randrange(32)
            yield (
                f"{host}:{pid}:{pid + 90} [{dev}] NCCL INFO Channel {channel:02d}/32 : {dev} -> {(dev + 1) % 8} via P2P/IPC/read"
                if rng.random() < 0.7
                else f"{host}:{pid}:{pid + 91} [{dev}] NCCL INFO comm 0x7f{rng.getrandbits(32):08x} rank {dev} nranks 16 cudaDev {dev}"
                " busId 18000 - Init COMPLETE"
            )
        if i % 50 == 0:
            yield (
                f"[rank{rng.randrange(16)}]:[W1202 10:00:00.{rng.randrange(10**6):06d} ProcessGroupNCCL.cpp:4561] Warning:"
                " TORCH_NCCL_AVOID_RECORD_STREAMS=1 has no effect for point-to-point collectives. (function operator())"
            )
            yield "/usr/lib/python3/dist-packages/megatron/core/tensor_parallel/layers.py:609: UserWarning: async_grad_allreduce is deprecated"
        if i % 400 == 0:  # a serialised blob: a long line without a space
            yield "state=" + base64.b64encode(rng.randbytes(3000)).decode()[:4089]


ERROR_TAIL = (
    "[rank5]: Traceback (most recent call last):",
    '[rank5]:   File "/opt/megatron/pretrain_gpt.py", line 280, in <module>',
    "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity of 79.19 GiB"
    " of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.11 GiB memory in use.",
    "W1202 10:59:59.000000 1234 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 4006 closing signal SIGTERM",
    "E1202 10:59:59.000000 1234 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 5 (pid: 4005)"
    " of binary: /usr/bin/python3",
)


def write(path: Path, lines: Iterator[str], size: int, tail: tuple[str, ...] = ()) -> int:
    """``lines`` into ``path`` until ``size`` bytes (then ``tail``): the number of bytes written."""
    written = 0
    with path.open("w") as out:
        for line in lines:
            if written >= size:
                break
            out.write(line + "\n")
            written += len(line) + 1
        for line in tail:
            out.write(line + "\n")
            written += len(line) + 1
    return written


def hostile(kind: str, rng: random.Random) -> Iterator[str]:
    if kind == "identical":
        while True:
            yield iteration_line(7, 7000, 5.0, 812.0, 0.8)
    if kind == "spaceless":
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789:/._-=["
        while True:
            yield "".join(rng.choice(alphabet) for _ in range(64)) * 64
    k = 0
    while True:
        yield (FRAGMENTS[k % len(FRAGMENTS)] * 4096)[:4095]
        k += 1


def doctor(checkout: Path, log: Path) -> tuple[float, int, list[str]]:
    """Wall seconds, peak RSS (bytes) and the finding codes of `megaprov doctor --log LOG -o json`."""
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(checkout)}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "megaprov", "doctor", "--log", str(log), "--output", "json"], cwd=checkout, env=env, stdout=out, stderr=err
        )
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage
        wall = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, problem = out.read(), err.read().decode(errors="replace")
    try:
        codes = sorted({f["code"] for f in json.loads(text)["result"]["findings"]})
    except (ValueError, KeyError, TypeError):
        codes = [f"exit {proc.returncode}: {problem.strip()[-200:]}"]
    return wall, usage.ru_maxrss * 1024, codes


def measure(checkout: Path, log: Path, rounds: int) -> tuple[float, int, list[str]]:
    runs = [doctor(checkout, log) for _ in range(rounds)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs), runs[0][2]


def mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=100, help="size of the realistic log (MB)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each small log (median)")
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the megaprov checkout to run")
    parser.add_argument("--keep", type=Path, help="write the logs here and keep them")
    args = parser.parse_args()
    rng = random.Random(35)
    directory = args.keep or Path(tempfile.mkdtemp(prefix="bench-doctor-"))
    directory.mkdir(parents=True, exist_ok=True)
    print(f"megaprov doctor --log, checkout {args.checkout}, {os.cpu_count()} CPUs, logs in {directory}")

    empty = directory / "empty.log"
    empty.write_text("")
    wall, peak, _ = measure(args.checkout, empty, args.rounds)
    print(f"| empty log (start-up) | {wall:.2f} s | {mib(peak)} |")

    big = directory / "realistic.log"
    size = write(big, realistic(rng), args.mb * 1_000_000, ERROR_TAIL)
    wall, peak, codes = doctor(args.checkout, big)
    print(f"| realistic log, {size / 1e6:.0f} MB | {wall:.1f} s | {mib(peak)} | {', '.join(codes)} |")

    cases = (
        ("7,000 identical iteration lines", "identical", 7000),
        ("1,000 lines of 4,095 characters without a space", "spaceless", 1000),
        ("1,000 lines of 4,095 characters of one rule's fixed text", "fragments", 1000),
    )
    for title, kind, count in cases:
        bad = directory / f"{kind}.log"
        with bad.open("w") as out:
            lines = hostile(kind, random.Random(count))
            for _ in range(count):
                out.write(next(lines) + "\n")
        normal = directory / f"{kind}-normal.log"
        write(normal, realistic(random.Random(count)), bad.stat().st_size)
        w_bad, p_bad, c_bad = measure(args.checkout, bad, args.rounds)
        w_ok, p_ok, _ = measure(args.checkout, normal, args.rounds)
        print(
            f"| {title} ({bad.stat().st_size / 1e6:.1f} MB) | {w_bad:.2f} s, {mib(p_bad)} | normal log of that size: {w_ok:.2f} s, {mib(p_ok)}"
            f" | ratio {w_bad / w_ok:.2f} (time), {p_bad / p_ok:.2f} (memory) | {', '.join(c_bad) or '-'} |"
        )
    if not args.keep:
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()


if __name__ == "__main__":
    main()
