"""The lab trainer (megaprov.training.trainer): Megatron's log format, checkpoint marker, and real runs under torchrun on CPU."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from megaprov.training import follow, trainer

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = (ROOT / "tests" / "fixtures" / "golden" / "lab-tiny.args").read_text().split()

# Megatron-LM core_v0.16.1 training_log, field by field (megatron/training/training.py).
MEGATRON_LINE = re.compile(
    r"^ \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}\] iteration +(\d+)/ +(\d+) \| consumed samples: +(\d+) \| "
    r"elapsed time per iteration \(ms\): ([\d.]+) \| throughput per GPU \(TFLOP/s/GPU\): ([\d.]+) \| learning rate: ([\d.E+-]+) \| "
    r"global batch size: +(\d+) \| lm loss: ([\d.E+-]+) \| loss scale: ([\d.]+) \| grad norm: ([\d.]+) \| "
    r"number of skipped iterations: +(\d+) \| number of nan iterations: +(\d+) \|$"
)


def test_log_line_has_megatrons_format():
    line = trainer.log_line(7, 60, 56, 51.04, 0.02, 2.9912e-3, 8, 4.962665, 2.889, 0, 0)
    match = MEGATRON_LINE.match(line)
    assert match, line
    assert match.group(1, 2, 3, 7) == ("7", "60", "56", "8")
    assert float(match.group(8)) == pytest.approx(4.962665) and match.group(6) == "2.991200E-03"


def test_flops_match_megatrons_closed_form():
    args, _ = trainer.parse_args(GOLDEN)
    b, s, h, layers, v = args.global_batch_size, args.seq_length, args.hidden_size, args.num_layers, 384
    closed = 72 * b * s * layers * h * h * (1 + s / (6 * h) + v / (12 * h * layers))
    assert trainer.flops_per_iteration(args, v) == pytest.approx(closed)


def test_blend_and_marker(tmp_path):
    assert trainer.blend(["/d/a"]) == (["/d/a"], None)
    assert trainer.blend(["1.0", "/d/a"]) == (["/d/a"], None)
    assert trainer.blend(["0.3", "/d/a", "0.7", "/d/b"]) == (["/d/a", "/d/b"], [0.3, 0.7])
    assert trainer.read_marker(str(tmp_path)) == 0
    trainer.write_marker(str(tmp_path), 40)
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "40\n" and trainer.read_marker(str(tmp_path)) == 40
    assert [p.name for p in tmp_path.iterdir()] == ["latest_checkpointed_iteration.txt"]


def test_unknown_arguments_are_returned_not_fatal():
    _, ignored = trainer.parse_args(GOLDEN)
    assert ignored == [
        "--attention-backend",
        "local",
        "--log-throughput",
        "--tensorboard-dir",
        "/shared/jobs/lab-tiny/tensorboard",
    ]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    pytest.importorskip("torch", reason="skipped: no torch in this environment")
    pytest.importorskip("megatron.core", reason="skipped: no megatron-core in this environment")
    from megaprov.training import data
    from megaprov.training.data import TokenizerSpec

    work = tmp_path_factory.mktemp("trainer")
    words = "the cluster trains a model on every node and the loss falls as tokens flow".split()
    lines = [json.dumps({"text": " ".join(words[(i * 7 + j) % len(words)] for j in range(60))}) for i in range(300)]
    (work / "c.jsonl").write_text("\n".join(lines) + "\n")
    data.prepare([work / "c.jsonl"], work / "lab", TokenizerSpec("byte"), workers=1)
    return work


def train(dataset, tag, iters, tp=1, divisible=128, nproc=2, port=29561):
    argv = " ".join(GOLDEN)
    argv = argv.replace("/shared/data/lab_text_document", str(dataset / "lab_text_document")).replace(
        "/shared/checkpoints/lab-tiny", str(dataset / tag)
    )
    argv = argv.replace("--train-iters 60", f"--train-iters {iters}").replace("--save-interval 20", "--save-interval 3")
    argv = argv.replace("--tensor-model-parallel-size 1", f"--tensor-model-parallel-size {tp}")
    argv = argv.replace("--make-vocab-size-divisible-by 128", f"--make-vocab-size-divisible-by {divisible}")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--master-port",
        str(port),
        "-m",
        "megaprov.training.trainer",
        *argv.split(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [MEGATRON_LINE.match(line) for line in proc.stdout.splitlines()]
    return [float(m.group(8)) for m in lines if m], proc.stdout


@pytest.mark.slow
def test_two_ranks_train_checkpoint_and_resume(dataset):
    losses, out = train(dataset, "dp", 6)
    assert len(losses) == 6 and losses[-1] < losses[0] * 0.9, losses
    assert "successfully saved checkpoint from iteration       6" in out
    # which megatron.core and compiled dataset helpers the job ran on (on the lab: the checkout's)
    assert re.search(r"^> megatron.core from /\S+, dataset helpers /\S+/megatron/core/datasets/helpers_cpp\S*\.so$", out, re.M), out[-2000:]
    assert (dataset / "dp" / "latest_checkpointed_iteration.txt").read_text() == "6\n"
    assert (dataset / "dp" / "iter_0000003" / "mp_rank_00" / "model_optim_rng.pt").is_file()
    # every rank's evidence for the throughput verdict: its start-up GEMM rate and its compute time per iteration
    evidence = [e for e in map(follow.parse_evidence, out.splitlines()) if e]
    assert sorted((kind, fields["rank"]) for kind, fields in evidence) == [("compute", "0"), ("compute", "1"), ("straggler", "0"), ("straggler", "1")]
    assert all(float(fields["rate (TFLOP/s)"]) > 0 for kind, fields in evidence if kind == "compute")
    windows = [follow.parse_rank_compute(fields) for kind, fields in evidence if kind == "straggler"]
    assert all((w.first, w.last) == (1, 6) and w.compute_ms > 0 and w.wait_ms >= 0 for w in windows), windows
    resumed, out = train(dataset, "dp", 8)
    assert "successfully loaded checkpoint from" in out and "at iteration 6" in out
    assert len(resumed) == 2 and resumed[0] < losses[0]


@pytest.mark.slow
def test_tensor_parallel_gives_the_same_losses(dataset):
    """TP=2 (one data-parallel rank) and TP=1 x DP=2 see the same global batches; with the same padded vocabulary
    (384: TP=1 pads to 128s, TP=2 with 64 per rank to 2 x 64s) the losses agree."""
    one, _ = train(dataset, "tp1", 3, tp=1, divisible=128, port=29563)
    two, _ = train(dataset, "tp2", 3, tp=2, divisible=64, port=29565)
    assert two == pytest.approx(one, rel=1e-4)


@pytest.mark.slow
def test_a_checkpoint_of_another_shape_is_refused(dataset):
    train(dataset, "shape", 3)
    argv = " ".join(GOLDEN).replace("/shared/data/lab_text_document", str(dataset / "lab_text_document"))
    argv = argv.replace("/shared/checkpoints/lab-tiny", str(dataset / "shape")).replace("--hidden-size 64", "--hidden-size 32")
    argv = argv.replace("--ffn-hidden-size 256", "--ffn-hidden-size 128")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "1",
        "--master-port",
        "29567",
        "-m",
        "megaprov.training.trainer",
        *argv.split(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode != 0
    assert "has hidden_size=64, this job 32; use another checkpoint directory or the same model shape" in proc.stdout + proc.stderr


def test_unflatten_into_is_the_inverse_of_a_flat_concatenation():
    torch = pytest.importorskip("torch", reason="skipped: no torch in this environment")
    tensors = [torch.zeros(2, 3), torch.zeros(4), torch.zeros(1, 1)]
    trainer.unflatten_into(torch.arange(11, dtype=torch.float32), tensors)
    assert tensors[0].tolist() == [[0, 1, 2], [3, 4, 5]] and tensors[1].tolist() == [6, 7, 8, 9] and tensors[2].tolist() == [[10]]
