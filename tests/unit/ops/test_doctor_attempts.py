"""doctor's whole-log analyses on a node log that holds more than one attempt of a job (megaprov/ops/doctor/signatures.py).

A node log (jobs/NAME/logs/NODE.log) is appended to by every run of the node script: under systemd the unit starts it
again after a failure, under Slurm the continuation's allocation runs it again, and each run prints megaprov's
"torchrun starting at" and "torchrun exited with" lines (megaprov/training/render.py START_LINE and EXIT_LINE) around
torchrun's output. The iteration lines below are written with the format strings of Megatron-LM's training_log
(megatron/training/training.py, core v0.16.1), so the parser sees what a real run prints."""

from __future__ import annotations

import pytest

from megaprov.ops.doctor import signatures

NODE = "megaprov: node node2 (node rank 1): torchrun"
LOG_INTERVAL = 10
TRAIN_ITERS = 400


def megatron_line(iteration: int, ms: float, loss: float = 3.5, second: int = 0) -> str:
    """One iteration line as Megatron-LM's training_log prints it with --log-throughput."""
    line = f" [2026-12-02 23:{second // 60 % 60:02d}:{second % 60:02d}.000000]"
    line += f" iteration {iteration:8d}/{TRAIN_ITERS:8d} |"
    line += f" consumed samples: {iteration * 8:12d} |"
    line += f" elapsed time per iteration (ms): {ms:.1f} |"
    line += f" throughput per GPU (TFLOP/s/GPU): {4000 / ms:.1f} |"
    line += f" learning rate: {3e-4:.6E} |"
    line += f" global batch size: {8:5d} |"
    line += " {}: {:.6E} |".format("lm loss", loss)
    line += f" loss scale: {1.0:.1f} |"
    line += f" grad norm: {1.25:.3f} |"
    line += f" number of skipped iterations: {0:3d} |"
    line += f" number of nan iterations: {0:3d} |"
    return line


def attempt(first: int, last: int, ms: list[float] | float) -> list[str]:
    """The iteration lines of one run from ``first`` to ``last`` (every LOG_INTERVAL iterations)."""
    numbers = range(first, last + 1, LOG_INTERVAL)
    rates = ms if isinstance(ms, list) else [ms] * len(numbers)
    assert len(rates) == len(numbers)
    return [megatron_line(n, t, loss=6.0 - n / 100, second=n) for n, t in zip(numbers, rates, strict=True)]


def restarted_log(first: list[str], second: list[str]) -> list[str]:
    """A node log of two runs: the first killed after the save at its last logged iteration, the second resumed from
    that checkpoint. Its first logged iteration is past the first run's last one: the iteration number never goes
    back, and only megaprov's torchrun lines say that a new run began."""
    last = int(first[-1].split("iteration")[1].split("/")[0])
    return [
        f"{NODE} starting at 2026-12-02T23:00:00.000Z",
        *first,
        f"  successfully saved checkpoint from iteration {last:7d} to /shared/checkpoints/j1 [ t 1/1, p 1/1 ]",
        "/shared/jobs/j1/launch/node2.sh: line 27:  6307 Killed                  /opt/megaprov/venv/bin/python -m torch.distributed.run",
        f"{NODE} exited with 137 at 2026-12-02T23:05:00.000Z",
        f"{NODE} starting at 2026-12-02T23:05:10.000Z",
        f" successfully loaded checkpoint from /shared/checkpoints/j1 [ t 1/1, p 1/1 ] at iteration {last}",
        *second,
    ]


def codes(lines: list[str]) -> list[str]:
    return sorted(f.code for f in signatures.scan(lines, signatures.Context("jobs/j1/logs/node2.log", "node2")))


def test_a_resumed_run_on_slower_nodes_is_not_falling_throughput():
    """Each run is steady (100 ms, then 180 ms per iteration after the restart, on a node set with a slower member):
    nothing fell within a run. Comparing the first run's early rate with the second run's late one, as doctor did while
    every iteration kept attempt 0, called the restart THROUGHPUT_FALLING."""
    log = restarted_log(attempt(10, 200, 100.0), attempt(210, 400, 180.0))
    assert codes(log) == ["RANK_KILLED"]  # the kill that caused the restart, and nothing about throughput


def test_each_iteration_of_a_resumed_run_carries_the_runs_attempt():
    log = restarted_log(attempt(10, 50, 100.0), attempt(60, 100, 180.0))
    state = signatures._scanned(log, signatures.Context("node2.log", "node2"))
    assert [(it.iteration, it.attempt) for _, it in state.series.values()] == [
        (10, 0), (20, 0), (30, 0), (40, 0), (50, 0), (60, 1), (70, 1), (80, 1), (90, 1), (100, 1),
    ]  # fmt: skip


@pytest.mark.parametrize("restarted", [False, True], ids=["one-run", "after-a-restart"])
def test_time_per_iteration_growing_within_one_run_is_still_falling_throughput(restarted):
    """A steady first run does not hide a fall in the run after it, and a log of one run is judged as before."""
    falling = attempt(210, 400, [100.0] * 10 + [100.0 + 15 * i for i in range(1, 11)])
    log = restarted_log(attempt(10, 200, 100.0), falling) if restarted else [f"{NODE} starting at 2026-12-02T23:00:00.000Z", *falling]
    assert codes(log) == (["RANK_KILLED", "THROUGHPUT_FALLING"] if restarted else ["THROUGHPUT_FALLING"])


def test_a_fast_run_after_a_slow_one_is_not_judged_on_the_slow_run():
    # the first run slowed down and was killed; the run after it is steady: the run that counts did not fall
    slowing = attempt(10, 200, [100.0] * 10 + [100.0 + 15 * i for i in range(1, 11)])
    assert codes(restarted_log(slowing, attempt(210, 400, 100.0))) == ["RANK_KILLED"]


@pytest.mark.parametrize("loss", [float("inf"), float("nan")], ids=["inf", "nan"])
def test_a_loss_megatron_prints_as_not_finite_is_loss_nan(loss):
    """Megatron-LM formats the loss with {:.6E}: an overflowed bf16 loss prints as "lm loss: INF", not as nan."""
    lines = attempt(10, 30, 100.0) + [megatron_line(40, 100.0, loss=loss)]
    assert f"lm loss: {loss:.6E} |" in lines[-1]
    found = signatures.scan(lines, signatures.Context("node2.log", "node2"))
    assert [f.code for f in found] == ["LOSS_NAN"] and "from iteration 40" in found[0].cause and found[0].line == 4
