"""Lab trainer step time against a bare megatron-core loop on the same model (goal: within 10 %).

Both run here under torchrun with one process, on lab-tiny's model (examples/jobs/lab-tiny.yml), alternating
A/B/A/B so that the noise of this machine hits both alike:
- the lab trainer (megaprov/training/trainer.py) on data from `megaprov data prepare`: its own ms per iteration, as it logs;
- a bare loop: the same GPTModel (trainer.build_model), torch AdamW, random tokens of the same shape, timed
  forward + backward + step with nothing else (no DDP, dataset, scheduler, grad norm, logging).
The figure is the ratio of medians over the steady iterations (the first 5 of each run left out).

    .venv/bin/python benchmarks/bench_trainer.py [--iters 60] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from megaprov.training import data, follow, render, target, trainer  # noqa: E402


def bare(argv: list[str]) -> None:
    """Runs under torchrun: the bare loop, printing one `bare-ms <value>` line per iteration."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    args, _ = trainer.parse_args(argv)
    dist.init_process_group("gloo")
    parallel_state.initialize_model_parallel(1, 1)
    torch.manual_seed(args.seed)
    vocab = trainer.padded_vocab(257, args.make_vocab_size_divisible_by, 1)
    model = trainer.build_model(args, vocab, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    gbs, s = args.global_batch_size, args.seq_length
    tokens = torch.randint(0, 256, (gbs, s))
    labels = torch.roll(tokens, -1, 1)
    positions = torch.arange(s).unsqueeze(0).expand(gbs, s)
    for _ in range(args.train_iters):
        start = time.monotonic()
        optimizer.zero_grad(set_to_none=True)
        loss = model(tokens, positions, None, labels=labels).float().mean()
        loss.backward()
        optimizer.step()
        print(f"bare-ms {(time.monotonic() - start) * 1000:.3f}", flush=True)
    dist.destroy_process_group()


def torchrun(script: list[str], port: int) -> str:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "--master-port", str(port), *script]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={"OMP_NUM_THREADS": "2", "PATH": "/usr/bin:/bin"})
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    spec, _ = target.read(str(ROOT / "examples" / "jobs" / "lab-tiny.yml"))
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        data.synthetic_corpus(corpus, 1500)
        (Path(tmp) / "data").mkdir()
        data.prepare([str(corpus)], f"{tmp}/data/lab", data.TokenizerSpec("byte", None, None, None, None), ["text"], 1, True)
        argv = render.megatron_args(spec, tmp)
        for flag, value in (("--train-iters", str(opts.iters)), ("--save-interval", "100000"), ("--global-batch-size", "4")):
            argv[argv.index(flag) + 1] = value
        argv = [a for a in argv if a not in ("--load",)]
        lab_ms: list[float] = []
        bare_ms: list[float] = []
        for round_ in range(opts.rounds):
            out = torchrun([str(ROOT / "megaprov" / "training" / "trainer.py"), *argv, "--save", f"{tmp}/ckpt-{round_}"], 29611)
            times = [it.ms_per_iteration for line in out.splitlines() if (it := follow.parse_iteration(line)) and it.ms_per_iteration]
            lab_ms += times[5:]
            out = torchrun([__file__, "--bare", *argv], 29612)
            bare_ms += [float(line.split()[1]) for line in out.splitlines() if line.startswith("bare-ms ")][5:]
    lab, plain = statistics.median(lab_ms), statistics.median(bare_ms)
    print(f"lab-tiny model, global batch 4 x {spec.model.seq_length} tokens, world 1, {opts.rounds} rounds x {opts.iters} iterations")
    print(f"lab trainer: median {lab:.1f} ms/iteration over {len(lab_ms)} steady iterations")
    print(f"bare megatron-core loop: median {plain:.1f} ms/iteration over {len(bare_ms)}")
    print(f"ratio lab/bare: {lab / plain:.3f} (goal <= 1.10)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--bare":
        bare(sys.argv[2:])
    else:
        main()
