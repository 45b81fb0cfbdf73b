"""The lab trainer (megaprov.training.trainer) in this process, as one torchrun rank of a world of one: its arguments
(every default, the refusals argparse prints), its small parts (the one-write log line, the checkpoint path and marker,
the FLOPs, the interval timer and log window, the start-up GEMM rate), and main() itself: a tiny GPT trained for a
few iterations on the .bin/.idx that ``megaprov data prepare`` writes, with the lines it logs (Megatron's iteration
line, the compute and straggler evidence, the saved/loaded lines), the checkpoint files and marker it writes, a
resume that continues the same run, SIGTERM under --exit-signal-handler, NaN iterations, and its refusals.

Stood in: torchrun (its environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, a free MASTER_PORT), the clock of
the timers and of the GEMM measurement, and the start-up GEMM rate inside main() (a fixed 1.5 TFLOP/s instead of a
one-second measurement). torch, megatron-core, gloo, the datasets and the checkpoints are real. The losses and
gradient norms asserted are this virtual environment's torch and megatron-core numbers for the tiny model."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import signal
import socket
from pathlib import Path

import pytest

from megaprov.training import follow, trainer
from tests.unit.training.test_trainer import MEGATRON_LINE, dataset  # noqa: F401  (dataset: the prepared corpus fixture)

REQUIRED = (
    "--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --max-position-embeddings 16 "
    "--micro-batch-size 2 --global-batch-size 4 --train-iters 3 --lr 0.003"
).split()


# --- arguments -------------------------------------------------------------------------------------------------------


def test_every_default_of_the_implemented_arguments():
    args, ignored = trainer.parse_args(REQUIRED)
    assert ignored == []
    assert vars(args) == {
        "num_layers": 1,
        "hidden_size": 16,
        "num_attention_heads": 2,
        "seq_length": 16,
        "max_position_embeddings": 16,
        "micro_batch_size": 2,
        "global_batch_size": 4,
        "train_iters": 3,
        "ffn_hidden_size": None,
        "num_query_groups": None,
        "group_query_attention": False,
        "position_embedding_type": "learned_absolute",
        "normalization": "LayerNorm",
        "init_method_std": 0.02,
        "hidden_dropout": 0.1,
        "attention_dropout": 0.1,
        "make_vocab_size_divisible_by": 128,
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 1,
        "context_parallel_size": 1,
        "lr": 0.003,
        "min_lr": 0.0,
        "lr_decay_style": "cosine",
        "lr_decay_iters": None,
        "lr_warmup_iters": 0,
        "weight_decay": 0.01,
        "adam_beta1": 0.9,
        "adam_beta2": 0.999,
        "adam_eps": 1e-8,
        "clip_grad": 1.0,
        "seed": 1234,
        "data_path": [],
        "mock_data": False,
        "split": "969,30,1",
        "tokenizer_type": "NullTokenizer",
        "vocab_size": None,
        "save": None,
        "load": None,
        "save_interval": None,
        "ckpt_format": "torch",
        "log_interval": 100,
        "eval_interval": 1000,
        "eval_iters": 100,
        "distributed_backend": "gloo",
        "fp32": False,
        "exit_signal_handler": False,
    }


def test_every_argument_is_read_with_its_type():
    given = (
        "--ffn-hidden-size 32 --num-query-groups 1 --group-query-attention --position-embedding-type rope "
        "--normalization RMSNorm --init-method-std 0.5 --hidden-dropout 0.25 --attention-dropout 0.125 "
        "--make-vocab-size-divisible-by 64 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 3 "
        "--context-parallel-size 4 --min-lr 0.0003 --lr-decay-style linear --lr-decay-iters 7 --lr-warmup-iters 2 "
        "--weight-decay 0.5 --adam-beta1 0.8 --adam-beta2 0.95 --adam-eps 1e-5 --clip-grad 2.5 --seed 7 "
        "--data-path 0.3 /d/a 0.7 /d/b --mock-data --split 98,2,0 --tokenizer-type NullTokenizer --vocab-size 300 "
        "--save /s --load /l --save-interval 5 --ckpt-format torch_dist --log-interval 3 --eval-interval 9 "
        "--eval-iters 0 --distributed-backend gloo --fp32 --exit-signal-handler"
    ).split()
    args, ignored = trainer.parse_args(REQUIRED + given)
    assert ignored == []
    changed = {k: v for k, v in vars(args).items() if v != vars(trainer.parse_args(REQUIRED)[0])[k]}
    assert changed == {
        "ffn_hidden_size": 32,
        "num_query_groups": 1,
        "group_query_attention": True,
        "position_embedding_type": "rope",
        "normalization": "RMSNorm",
        "init_method_std": 0.5,
        "hidden_dropout": 0.25,
        "attention_dropout": 0.125,
        "make_vocab_size_divisible_by": 64,
        "tensor_model_parallel_size": 2,
        "pipeline_model_parallel_size": 3,
        "context_parallel_size": 4,
        "min_lr": 0.0003,
        "lr_decay_style": "linear",
        "lr_decay_iters": 7,
        "lr_warmup_iters": 2,
        "weight_decay": 0.5,
        "adam_beta1": 0.8,
        "adam_beta2": 0.95,
        "adam_eps": 1e-5,
        "clip_grad": 2.5,
        "seed": 7,
        "data_path": ["0.3", "/d/a", "0.7", "/d/b"],
        "mock_data": True,
        "split": "98,2,0",
        "vocab_size": 300,
        "save": "/s",
        "load": "/l",
        "save_interval": 5,
        "ckpt_format": "torch_dist",
        "log_interval": 3,
        "eval_interval": 9,
        "eval_iters": 0,
        "fp32": True,
        "exit_signal_handler": True,
    }
    assert all(type(v) is type(changed[k]) for k, v in vars(args).items() if k in changed)


def test_every_choice_megatron_offers_is_taken():
    choices = {
        "--position-embedding-type": ["learned_absolute", "rope", "none"],
        "--normalization": ["LayerNorm", "RMSNorm"],
        "--lr-decay-style": ["constant", "linear", "cosine", "inverse-square-root"],
        "--tokenizer-type": ["NullTokenizer"],
        "--ckpt-format": ["torch", "torch_dist"],
        "--distributed-backend": ["gloo"],
    }
    for flag, values in choices.items():
        for value in values:
            args, ignored = trainer.parse_args([*REQUIRED, flag, value])
            assert (getattr(args, flag[2:].replace("-", "_")), ignored) == (value, [])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (REQUIRED[2:], "the following arguments are required: --num-layers"),
        ([a for a in REQUIRED if a not in ("--lr", "0.003")], "the following arguments are required: --lr"),
        (REQUIRED + ["--num-layers", "two"], "argument --num-layers: invalid int value: 'two'"),
        (REQUIRED + ["--lr-decay-style", "step"], "argument --lr-decay-style: invalid choice: 'step'"),
        (REQUIRED + ["--position-embedding-type", "alibi"], "argument --position-embedding-type: invalid choice: 'alibi'"),
        (REQUIRED + ["--normalization", "BatchNorm"], "argument --normalization: invalid choice: 'BatchNorm'"),
        (REQUIRED + ["--tokenizer-type", "GPT2BPETokenizer"], "argument --tokenizer-type: invalid choice: 'GPT2BPETokenizer'"),
        (REQUIRED + ["--ckpt-format", "zarr"], "argument --ckpt-format: invalid choice: 'zarr'"),
        (REQUIRED + ["--distributed-backend", "nccl"], "argument --distributed-backend: invalid choice: 'nccl'"),
    ],
)
def test_arguments_argparse_refuses(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        trainer.parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: megaprov trainer [-h] --num-layers NUM_LAYERS --hidden-size HIDDEN_SIZE"), err
    assert f"megaprov trainer: error: {message}" in err


def test_abbreviations_are_not_taken_for_arguments():
    """--save-int is not --save-interval: it is reported with the arguments not implemented, not taken for it."""
    args, ignored = trainer.parse_args(REQUIRED + ["--save-int", "5", "--log-throughput"])
    assert args.save_interval is None and ignored == ["--save-int", "5", "--log-throughput"]


# --- small parts -----------------------------------------------------------------------------------------------------


def test_say_writes_the_line_and_its_newline_in_one_write(monkeypatch):
    writes: list[str] = []
    flushed: list[bool] = []

    class Stdout:
        def write(self, text):
            writes.append(text)

        def flush(self):
            flushed.append(True)

    monkeypatch.setattr("sys.stdout", Stdout())
    trainer.say(" iteration 1")
    assert writes == [" iteration 1\n"] and flushed == [True]


def test_checkpoint_file_is_megatrons_layout():
    assert trainer.checkpoint_file("/ck", 40, 3) == Path("/ck/iter_0000040/mp_rank_03/model_optim_rng.pt")


def test_no_directory_and_no_marker_mean_iteration_zero(tmp_path):
    assert trainer.read_marker(None) == 0
    assert trainer.read_marker("") == 0
    assert trainer.read_marker(str(tmp_path / "missing")) == 0


def test_a_marker_that_is_not_a_number_is_refused(tmp_path):
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("release\n")
    with pytest.raises(SystemExit) as exit_:
        trainer.read_marker(str(tmp_path))
    assert str(exit_.value) == (
        f"megaprov.trainer: {tmp_path}/latest_checkpointed_iteration.txt holds 'release', not an iteration number; remove it to start over"
    )


def flops_args(**given):
    values = {
        "global_batch_size": 2,
        "seq_length": 8,
        "hidden_size": 4,
        "num_layers": 3,
        "ffn_hidden_size": None,
        "num_attention_heads": 4,
        "num_query_groups": None,
        "group_query_attention": False,
    }
    return argparse.Namespace(**{**values, **given})


def expected_flops(b, s, h, layers, ffn, heads, groups, vocab):
    per_token = 2 * layers * (h * h * (1 + 2 * groups / heads) + h * h + 2 * h * ffn) + 4 * layers * s * h + 2 * h * vocab
    return 3.0 * b * s * per_token


def test_flops_count_a_4h_mlp_when_no_ffn_size_is_given_and_query_groups_only_with_gqa():
    assert trainer.flops_per_iteration(flops_args(), 10) == expected_flops(2, 8, 4, 3, 16, 4, 4, 10)
    assert trainer.flops_per_iteration(flops_args(ffn_hidden_size=6), 10) == expected_flops(2, 8, 4, 3, 6, 4, 4, 10)
    # groups given without --group-query-attention: Megatron ignores them, so does the count
    assert trainer.flops_per_iteration(flops_args(num_query_groups=1), 10) == expected_flops(2, 8, 4, 3, 16, 4, 4, 10)
    gqa = flops_args(num_query_groups=1, group_query_attention=True)
    assert trainer.flops_per_iteration(gqa, 10) == expected_flops(2, 8, 4, 3, 16, 4, 1, 10)
    assert trainer.flops_per_iteration(flops_args(group_query_attention=True), 10) == expected_flops(2, 8, 4, 3, 16, 4, 4, 10)


class Clock:
    """A clock that answers the times it is given, one per call."""

    def __init__(self, *times: float) -> None:
        self.times = list(times)

    def __call__(self) -> float:
        return self.times.pop(0)


def test_interval_timer_counts_running_time_across_stops():
    timer = trainer.IntervalTimer(Clock(10.0, 13.0, 20.0, 21.5, 30.0, 31.0))
    timer.stop()  # never started: nothing counted, the clock not read
    timer.start()  # 10
    timer.stop()  # 13: 3 s
    timer.start()  # 20
    timer.stop()  # 21.5: 1.5 s more
    assert timer.lap() == 4.5  # stopped: the clock read (30) but not counted
    assert timer.lap() == 0.0  # 31: the lap started over
    assert trainer.IntervalTimer(Clock(5.0)).lap() == 0.0


def test_interval_timer_lap_of_a_running_timer_keeps_it_running():
    timer = trainer.IntervalTimer(Clock(1.0, 4.0, 6.0, 7.0, 9.0))
    timer.start()  # 1
    assert timer.lap() == 3.0  # 4
    timer.stop()  # 6: 2 s banked
    timer.start()  # 7
    assert timer.lap() == 4.0  # 9: banked 2 + running 2


def test_log_window_line_averages_the_windows_losses_and_rates_the_interval():
    window = trainer.LogWindow(6e12, 2, Clock(100.0, 100.5))
    window.timer.start()
    window.add(2.0)
    window.add(4.0)
    line = window.close(2, 3, 8, 1e-3, 4, 0.5, 0, 0)
    match = MEGATRON_LINE.match(line)
    assert match, line
    # 0.5 s over 2 iterations: 250 ms each; 6e12 FLOPs / 0.25 s / 2 ranks = 12 TFLOP/s per rank; mean loss 3.0
    assert match.group(4, 5, 8) == ("250.0", "12.0", "3.000000E+00")
    assert (window.loss, window.count) == (0.0, 0)


def test_log_window_of_one_iteration_and_the_tflops_divisor():
    window = trainer.LogWindow(1e24, 1, Clock(0.0, 1.0))
    window.timer.start()
    window.add(5.0)
    match = MEGATRON_LINE.match(window.close(1, 1, 4, 1e-3, 4, 0.5, 0, 0))
    assert match.group(4, 5, 8) == ("1000.0", "1000000000000.0", "5.000000E+00")


def test_log_window_with_no_time_prints_zero_throughput():
    window = trainer.LogWindow(1e12, 1, Clock(7.0, 7.0))
    window.timer.start()
    match = MEGATRON_LINE.match(window.close(1, 1, 4, 1e-3, 4, 0.5, 0, 0))
    assert match.group(4, 5, 8) == ("0.0", "0.0", "0.000000E+00")


def test_gemm_rate_is_the_median_of_at_least_three_timed_products(monkeypatch):
    torch = pytest.importorskip("torch", reason="skipped: no torch in this environment")
    shapes: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    real_mm = torch.mm

    def mm(a, b):
        shapes.append((tuple(a.shape), tuple(b.shape)))
        return real_mm(a, b)

    monkeypatch.setattr(torch, "mm", mm)
    # end = 0 + 1; the loop test reads 1 (past the end, fewer than 3 rates), then each product takes 1, 2 and 4 s
    monkeypatch.setattr(trainer.time, "perf_counter", Clock(0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 8.0, 9.0, 13.0, 14.0))
    rate = trainer.gemm_rate(4, 1.0)
    assert rate == 2.0 * 4**3 / 2.0 / 1e12  # rates 128, 64, 32 FLOP/s: the median, 64
    assert shapes == [((4, 4), (4, 4))] * 4  # a warm-up and three timed products


def test_gemm_rate_measures_for_the_seconds_it_is_given(monkeypatch):
    torch = pytest.importorskip("torch", reason="skipped: no torch in this environment")
    calls: list[int] = []
    real_mm = torch.mm
    monkeypatch.setattr(torch, "mm", lambda a, b: calls.append(1) or real_mm(a, b))
    ticks = iter(range(100))
    monkeypatch.setattr(trainer.time, "perf_counter", lambda: float(next(ticks)))
    # each loop test, start and stop read one tick: tests at 1, 4, 7, ... 19 fall before the end (20), 22 does not
    assert trainer.gemm_rate(2, 20.0) == 16 / 1e12
    assert len(calls) == 1 + 7


def test_gemm_rate_by_default_times_1024_products_for_one_second(monkeypatch):
    torch = pytest.importorskip("torch", reason="skipped: no torch in this environment")
    shapes: list[tuple[int, ...]] = []
    real_mm = torch.mm
    monkeypatch.setattr(torch, "mm", lambda a, b: shapes.append(tuple(a.shape) + tuple(b.shape)) or real_mm(a, b))
    # the end is 1.0: three products start before it, and the loop test that reads exactly 1.0 ends the loop
    monkeypatch.setattr(trainer.time, "perf_counter", Clock(0.0, 0.25, 0.25, 0.5, 0.5, 0.5, 0.75, 0.75, 0.75, 1.0, 1.0))
    assert trainer.gemm_rate() == pytest.approx(2.0 * 1024**3 / 0.25 / 1e12)
    assert shapes == [(1024, 1024, 1024, 1024)] * 4


# --- main() as one rank ----------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stdout(io.StringIO):
    """The rank's stdout; ``on_write`` sees every write (to send a signal at a given line)."""

    def __init__(self, on_write=None) -> None:
        super().__init__()
        self.on_write = on_write

    def write(self, text: str) -> int:
        if self.on_write:
            self.on_write(text)
        return super().write(text)


class Ticks:
    """The trainer's time module for its per-iteration clock: every reading is one millisecond after the last."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += 1e-3
        return self.now


def run_rank(argv: list[str], on_write=None, ticks: bool = False) -> tuple[object, str]:
    """main(argv) as torchrun's only rank: (its return value, or the SystemExit it raised; its stdout). The process
    group and megatron-core's parallel state are torn down after it, and SIGTERM's handler restored. With ``ticks``
    the iteration clock is :class:`Ticks` (the interval timer of the log window keeps the real one)."""
    pytest.importorskip("torch", reason="skipped: no torch in this environment")
    pytest.importorskip("megatron.core", reason="skipped: no megatron-core in this environment")
    import torch.distributed as dist
    from megatron.core import parallel_state

    out = Stdout(on_write)
    sigterm = signal.getsignal(signal.SIGTERM)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}.items():
            mp.setenv(name, value)
        mp.setattr(trainer, "gemm_rate", lambda: 1.5)
        if ticks:
            mp.setattr(trainer, "time", Ticks())
        try:
            with contextlib.redirect_stdout(out):
                result: object = trainer.main(argv)
        except SystemExit as exit_:
            result = exit_
        finally:
            parallel_state.destroy_model_parallel()
            if dist.is_initialized():
                dist.destroy_process_group()
            signal.signal(signal.SIGTERM, sigterm)
    return result, out.getvalue()


def tiny(corpus: Path, save: Path, *more: str) -> list[str]:
    """A tiny GPT (one layer, 16 wide, two heads sharing one key/value group) on the prepared corpus."""
    return [
        *REQUIRED,
        *"--ffn-hidden-size 32 --group-query-attention --num-query-groups 1 --normalization RMSNorm".split(),
        *"--lr-warmup-iters 1 --min-lr 0.0003 --lr-decay-iters 3 --clip-grad 0.5".split(),
        *"--weight-decay 0.1 --adam-beta2 0.95 --vocab-size 256 --make-vocab-size-divisible-by 96 --split 98,2,0".split(),
        *["--data-path", "1.0", str(corpus / "lab_text_document"), "--save", str(save), "--save-interval", "2"],
        *"--log-interval 1 --seed 4321 --attention-backend local --log-throughput".split(),
        *more,
    ]


def iterations(out: str) -> list[tuple[str, ...]]:
    """Each iteration line's fields but the time: (iteration, of, consumed, lr, batch, loss, grad norm, skipped, nan)."""
    matches = [MEGATRON_LINE.match(line) for line in out.splitlines()]
    return [m.group(1, 2, 3, 6, 7, 8, 10, 11, 12) for m in matches if m]


def assert_iterations(got: list[tuple[str, ...]], expected: list[tuple[str, ...]]) -> None:
    """Every field exact but the loss and the grad norm, whose last printed digit CPU kernels may round differently on
    another machine (another thread count): the loss within 1e-4 of itself, the grad norm within 0.002."""
    assert [g[:5] + g[7:] for g in got] == [e[:5] + e[7:] for e in expected]
    for g, e in zip(got, expected, strict=True):
        assert float(g[5]) == pytest.approx(float(e[5]), rel=1e-4) and float(g[6]) == pytest.approx(float(e[6]), abs=2e-3), (g, e)


@pytest.fixture(scope="module")
def first_run(dataset, tmp_path_factory):  # noqa: F811
    save = tmp_path_factory.mktemp("first") / "ck"
    result, out = run_rank(tiny(dataset, save))
    return result, out, save


# Three iterations of the tiny model: lr warms up over the first 4 samples then decays (cosine) to 0.0003 at sample 12.
FIRST = [
    ("1", "3", "4", "3.000000E-03", "4", "5.663546E+00", "1.533", "0", "0"),
    ("2", "3", "8", "1.650000E-03", "4", "5.658708E+00", "1.645", "0", "0"),
    ("3", "3", "12", "3.000000E-04", "4", "5.602239E+00", "1.219", "0", "0"),
]


def test_a_run_logs_megatrons_lines_and_the_ranks_evidence(first_run):
    import torch

    result, out, save = first_run
    assert result == 0
    lines = out.splitlines()
    assert lines[0] == "megaprov.trainer: not implemented on CPU, ignored: --attention-backend --log-throughput"
    assert follow.parse_evidence(lines[1]) == (
        "compute",
        {
            "rank": "0",
            "device": "cpu",
            "dtype": "float32",
            "gemm size": "1024",
            "threads": str(torch.get_num_threads()),
            "rate (TFLOP/s)": "1.500000",
        },
    )
    assert lines[2].startswith("> megatron.core from /") and "/megatron/core/datasets/helpers_cpp" in lines[2]
    assert_iterations(iterations(out), FIRST)
    stragglers = [e for e in map(follow.parse_evidence, lines) if e and e[0] == "straggler"]
    assert len(stragglers) == 1
    window = follow.parse_rank_compute(stragglers[0][1])
    assert (window.rank, window.first, window.last, window.wait_ms) == (0, 1, 3, 0.0) and window.compute_ms > 0
    saved = [line for line in lines if "successfully saved checkpoint" in line]
    assert [line.split("] ", 1)[1] for line in saved] == [
        f"successfully saved checkpoint from iteration       {i} to {save} [ t 1/1, p 1/1 ]" for i in (2, 3)
    ]
    assert all(line.startswith("  [") for line in saved)
    # the order: iteration 2's line, then its checkpoint; the straggler line of the last iteration before its checkpoint
    assert [line.split("|")[0].split("] ")[-1].strip() for line in lines[3:]] == [
        "iteration        1/       3",
        "iteration        2/       3",
        f"successfully saved checkpoint from iteration       2 to {save} [ t 1/1, p 1/1 ]",
        "iteration        3/       3",
        "megaprov straggler",
        f"successfully saved checkpoint from iteration       3 to {save} [ t 1/1, p 1/1 ]",
    ]


def test_a_run_saves_checkpoints_every_interval_and_at_the_end_then_the_marker(first_run):
    _, _, save = first_run
    assert (save / "latest_checkpointed_iteration.txt").read_text() == "3\n"
    assert sorted(p.name for p in save.iterdir()) == ["index-cache", "iter_0000002", "iter_0000003", "latest_checkpointed_iteration.txt"]
    assert any((save / "index-cache").iterdir())
    import torch

    for iteration in (2, 3):
        shard = save / f"iter_{iteration:07d}" / "mp_rank_00"
        assert [p.name for p in shard.iterdir()] == ["model_optim_rng.pt"]
        state = torch.load(shard / "model_optim_rng.pt", map_location="cpu", weights_only=False)
        assert sorted(state) == ["args", "consumed_samples", "iteration", "model", "opt_param_scheduler", "optimizer", "rng"]
        assert (state["iteration"], state["consumed_samples"]) == (iteration, 4 * iteration)
        assert state["args"]["hidden_size"] == 16 and state["args"]["save"] == str(save)
        assert state["opt_param_scheduler"]["num_steps"] == 4 * iteration
        assert len(state["optimizer"]["state"]) == len(state["model"]) - sum(k.endswith("_extra_state") for k in state["model"])
        assert state["rng"].dtype == torch.uint8


def test_a_resumed_run_continues_exactly_where_its_checkpoint_left_off(first_run, dataset, tmp_path):  # noqa: F811
    """An operator points the marker back at iteration 2 and runs again into the same directory: the resumed run's
    iteration 3 is the first run's, and its checkpoint of iteration 3 replaces the one there."""
    _, out, first = first_run
    again = tmp_path / "ck"
    shutil.copytree(first, again)
    (again / "latest_checkpointed_iteration.txt").write_text("2\n")
    result, resumed = run_rank(tiny(dataset, again, "--load", str(again)))
    assert result == 0
    assert f"  successfully loaded checkpoint from {again} [ t 1/1, p 1/1 ] at iteration 2" in resumed.splitlines()
    assert_iterations(iterations(resumed), iterations(out)[2:])
    window = follow.parse_rank_compute(next(e for e in map(follow.parse_evidence, resumed.splitlines()) if e and e[0] == "straggler")[1])
    assert (window.first, window.last) == (3, 3)
    assert (again / "latest_checkpointed_iteration.txt").read_text() == "3\n"
    assert sorted(p.name for p in again.iterdir()) == ["index-cache", "iter_0000002", "iter_0000003", "latest_checkpointed_iteration.txt"]
    assert [p.name for p in (again / "iter_0000003" / "mp_rank_00").iterdir()] == ["model_optim_rng.pt"]
    assert (again / "iter_0000003" / "mp_rank_00" / "model_optim_rng.pt").stat().st_mtime_ns > (
        first / "iter_0000003" / "mp_rank_00" / "model_optim_rng.pt"
    ).stat().st_mtime_ns


def test_a_finished_checkpoint_is_not_trained_again(first_run, dataset, tmp_path):  # noqa: F811
    _, _, first = first_run
    save = tmp_path / "ck"
    result, out = run_rank(tiny(dataset, save, "--load", str(first)))
    assert result == 0
    assert f"  successfully loaded checkpoint from {first} [ t 1/1, p 1/1 ] at iteration 3" in out.splitlines()
    assert iterations(out) == [] and "straggler" not in out and not save.joinpath("latest_checkpointed_iteration.txt").exists()


@pytest.mark.parametrize(
    ("change", "field", "saved", "this"),
    [
        (("--hidden-size", "16", "32"), "hidden_size", 16, 32),
        (("--num-layers", "1", "2"), "num_layers", 1, 2),
        (("--num-attention-heads", "2", "4"), "num_attention_heads", 2, 4),
    ],
)
def test_a_checkpoint_of_another_shape_is_refused(first_run, dataset, tmp_path, change, field, saved, this):  # noqa: F811
    _, _, first = first_run
    argv = tiny(dataset, tmp_path / "ck", "--load", str(first))
    flag, old, new = change
    argv[argv.index(flag) + 1] = new
    assert argv[argv.index(flag) + 1] != old
    result, out = run_rank(argv)
    assert isinstance(result, SystemExit)
    assert str(result) == (
        f"megaprov.trainer: checkpoint {first} iteration 3 has {field}={saved}, this job {this}; "
        "use another checkpoint directory or the same model shape"
    )
    assert "iteration " not in out.split("megaprov compute")[1]


@pytest.mark.parametrize(
    ("more", "message"),
    [
        (
            ["--pipeline-model-parallel-size", "2"],
            "megaprov.trainer: pipeline and context parallelism need pretrain_gpt.py on GPUs (set parallel.pipeline/context to 1)",
        ),
        (
            ["--context-parallel-size", "2"],
            "megaprov.trainer: pipeline and context parallelism need pretrain_gpt.py on GPUs (set parallel.pipeline/context to 1)",
        ),
        (["--global-batch-size", "5"], "megaprov.trainer: global batch 5 is not a multiple of micro batch 2 x data parallel 1"),
    ],
)
def test_layouts_the_trainer_cannot_run_are_refused(more, message):
    result, out = run_rank([*REQUIRED, "--mock-data", *more])
    assert isinstance(result, SystemExit) and str(result) == message
    assert out == ""


def test_sigterm_ends_the_run_after_the_iteration_with_a_checkpoint(dataset, tmp_path):  # noqa: F811
    """SIGTERM during iteration 11: the run agrees on stopping (an all-reduce, the collective wait in the straggler
    line: per iteration the clock is read at the start, around the all-reduce and at the end), saves 11 and exits."""
    sent: list[bool] = []

    def on_write(text: str) -> None:
        if " iteration       11/" in text and not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)

    save = tmp_path / "ck"
    argv = tiny(dataset, save, "--exit-signal-handler", "--save-interval", "15")
    argv[argv.index("--train-iters") + 1] = "20"
    result, out = run_rank(argv, on_write, ticks=True)
    assert result == 0
    assert [fields[0] for fields in iterations(out)] == [str(i) for i in range(1, 12)]
    lines = out.splitlines()
    assert [e[1] for e in map(follow.parse_evidence, lines) if e and e[0] == "straggler"] == [
        {"rank": "0", "iterations": "1-10", "compute time per iteration (ms)": "2.00", "collective wait per iteration (ms)": "1.00"}
    ]
    assert lines[-1].endswith("] exiting program after receiving SIGTERM.") and lines[-1].startswith("[20")
    assert "successfully saved checkpoint from iteration      11 to" in lines[-2]
    assert (save / "latest_checkpointed_iteration.txt").read_text() == "11\n"
    assert sorted(p.name for p in save.iterdir()) == ["index-cache", "iter_0000011", "latest_checkpointed_iteration.txt"]


def test_without_the_signal_handler_no_checkpoint_is_saved_between_intervals(tmp_path):
    """No --exit-signal-handler: SIGTERM is left alone, no all-reduce is waited for; no --save-interval: no
    checkpoint. The straggler line comes every 10 iterations and at the last, each over its own iterations."""
    save = tmp_path / "ck"
    argv = [*REQUIRED, "--mock-data", "--vocab-size", "64", "--save", str(save), "--log-interval", "4", "--clip-grad", "0"]
    argv[argv.index("--train-iters") + 1] = "12"
    before = signal.getsignal(signal.SIGTERM)
    during: list[object] = []
    result, out = run_rank(argv, lambda _text: during.append(signal.getsignal(signal.SIGTERM)), ticks=True)
    # whatever handler the process had (pytest's, an earlier test's) is the one it keeps while training
    assert result == 0 and during and all(handler is before for handler in during)
    assert "megaprov compute" in out.splitlines()[0]  # nothing ignored, nothing said about it
    # --clip-grad 0: no clipping (the mean losses of each window of 4 iterations)
    assert_iterations(
        iterations(out),
        [
            ("4", "12", "16", "2.250000E-03", "4", "4.827342E+00", "1.244", "0", "0"),
            ("8", "12", "32", "7.500000E-04", "4", "4.689909E+00", "0.801", "0", "0"),
            ("12", "12", "48", "0.000000E+00", "4", "4.622213E+00", "0.786", "0", "0"),
        ],
    )
    assert [e[1] for e in map(follow.parse_evidence, out.splitlines()) if e and e[0] == "straggler"] == [
        {"rank": "0", "iterations": "1-10", "compute time per iteration (ms)": "1.00", "collective wait per iteration (ms)": "0.00"},
        {"rank": "0", "iterations": "11-12", "compute time per iteration (ms)": "1.00", "collective wait per iteration (ms)": "0.00"},
    ]
    assert sorted(p.name for p in save.iterdir()) == ["index-cache"]


def test_nan_iterations_are_counted_skipped_and_logged_per_window(tmp_path):
    """A learning rate of 1e30: the first step blows the weights up, every later loss is NaN and is not stepped on;
    a window of two iterations counts its skipped ones, and the next window starts counting over."""
    argv = [*REQUIRED, "--mock-data", "--vocab-size", "64", "--lr", "1e30", "--log-interval", "2"]
    argv[argv.index("--train-iters") + 1] = "4"
    result, out = run_rank(argv)
    assert result == 0
    lines = [line.split("] ", 1)[1] for line in out.splitlines() if "] iteration " in line]
    fields = [[field.strip() for field in line.split("|")] for line in lines]
    assert [f[0] for f in fields] == ["iteration        2/       4", "iteration        4/       4"]
    assert [f[6:11] for f in fields] == [
        ["lm loss: NAN", "loss scale: 1.0", "grad norm: nan", "number of skipped iterations:   1", "number of nan iterations:   1"],
        ["lm loss: NAN", "loss scale: 1.0", "grad norm: nan", "number of skipped iterations:   2", "number of nan iterations:   2"],
    ]
