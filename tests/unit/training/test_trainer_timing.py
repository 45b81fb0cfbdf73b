"""The lab trainer's iteration time and TFLOP/s: Megatron's interval timer (core_v0.16.1 training_log), not the step alone."""

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from megaprov.training import follow, trainer, verdict

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = (ROOT / "tests" / "fixtures" / "golden" / "lab-tiny.args").read_text().split()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def run_loop(log_interval: int, iterations: int, save_every: int = 0) -> list[follow.Iteration]:
    """The trainer's loop on a fake clock: 500 ms of work outside the step (data, logging, waits), a 30 ms step,
    and a 2 s checkpoint save every ``save_every`` iterations."""
    clock = Clock()
    window = trainer.LogWindow(flops=1.0e12, world=2, clock=clock)
    window.timer.start()
    lines = []
    for iteration in range(1, iterations + 1):
        clock.advance(0.500)
        clock.advance(0.030)
        window.add(4.0 + iteration)
        if iteration % log_interval == 0:
            lines.append(window.close(iteration, iterations, iteration * 8, 1e-3, 8, 1.0, 0, 0))
        if save_every and iteration % save_every == 0:
            window.timer.stop()
            clock.advance(2.0)
            window.timer.start()
    parsed = [follow.parse_iteration(line) for line in lines]
    assert all(parsed), lines
    return parsed  # type: ignore[return-value]


@pytest.mark.parametrize("log_interval", [1, 3])
def test_logged_time_is_the_wall_interval_per_iteration(log_interval):
    for it in run_loop(log_interval, 6):
        assert it.ms_per_iteration == pytest.approx(530.0), it
        assert it.tflops_per_gpu and it.tflops_per_gpu == pytest.approx(1.0 / 0.530 / 2, rel=1e-3), it


def test_checkpoint_saves_are_left_out_of_the_interval_as_megatron_does():
    assert [it.ms_per_iteration for it in run_loop(2, 6, save_every=2)] == pytest.approx([530.0, 530.0, 530.0])


def test_the_mean_loss_of_the_window_is_logged():
    assert [it.loss for it in run_loop(3, 6)] == pytest.approx([6.0, 9.0])


def test_interval_timer_counts_only_while_running():
    clock = Clock()
    timer = trainer.IntervalTimer(clock)
    timer.start()
    clock.advance(1.0)
    timer.stop()
    clock.advance(5.0)
    assert timer.lap() == pytest.approx(1.0)
    clock.advance(5.0)
    assert timer.lap() == 0.0
    timer.start()
    clock.advance(0.25)
    assert timer.lap() == pytest.approx(0.25)
    clock.advance(0.5)
    assert timer.lap() == pytest.approx(0.5)


def test_a_cpu_ranks_tflops_keep_three_significant_digits():
    assert [trainer.fixed(x) for x in (0.000956, 0.0123, 0.25, 12.34, 312.44, 0.0)] == ["0.000956", "0.0123", "0.250", "12.3", "312.4", "0.0"]
    it = follow.parse_iteration(trainer.log_line(3, 60, 24, 480.0, 0.000956, 1e-3, 8, 4.5, 0.75, 0, 0))
    assert it is not None and it.tflops_per_gpu == 0.000956 and it.ms_per_iteration == 480.0
    assert verdict._tflops_per_gpu(0.000956) == "0.00096" and verdict._tflops_per_gpu(0.25) == "0.25"


@pytest.mark.slow
def test_a_real_run_logs_the_gap_between_its_lines():
    """Two ranks, no checkpoints: each logged time per iteration is the gap between the timestamps of its line and the
    previous one; the TFLOP/s/GPU is the model's FLOPs over that time, not 0.0."""
    pytest.importorskip("torch", reason="skipped: no torch in this environment")
    pytest.importorskip("megatron.core", reason="skipped: no megatron-core in this environment")
    argv = " ".join(GOLDEN).replace("--data-path 1.0 /shared/data/lab_text_document", "--mock-data")
    argv = argv.replace("--save /shared/checkpoints/lab-tiny --load /shared/checkpoints/lab-tiny", "").replace("--train-iters 60", "--train-iters 6")
    assert "--save" not in argv.split() and "--mock-data" in argv.split()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29571", "-m", "megaprov.training.trainer"]
    proc = subprocess.run([*cmd, *argv.split()], capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [it for it in map(follow.parse_iteration, proc.stdout.splitlines()) if it]
    assert [it.iteration for it in lines] == list(range(1, 7))
    args, _ = trainer.parse_args(argv.split())
    flops = trainer.flops_per_iteration(args, 384)  # NullTokenizer(256) has 257 tokens with its EOD: padded to 384
    stamps = [datetime.strptime(it.logged_at or "", trainer.LOG_TIME) for it in lines]
    for i, it in enumerate(lines[1:], 1):
        gap_ms = (stamps[i] - stamps[i - 1]).total_seconds() * 1000.0
        assert it.ms_per_iteration is not None and abs(it.ms_per_iteration - gap_ms) <= 1.0 + 0.02 * gap_ms, (it, gap_ms)
    for it in lines:
        assert it.tflops_per_gpu and it.tflops_per_gpu == pytest.approx(flops / (it.ms_per_iteration / 1000.0) / 2 / 1e12, rel=0.01), it
