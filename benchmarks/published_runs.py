"""Published Megatron-LM throughput figures, as data: the planner's step-time model is fitted on the first table and
checked on the others (``bench_planner.py`` prints both; ``tests/unit/training/test_planner_calibration.py`` holds them).

Sources (figures transcribed from the images and tables named; sizes as published):

- ``H100_WEAK``: Megatron-LM README, "Training Speed and Scalability", ``images/model_table.png`` (commit 937571cf,
  2024-07-15, Megatron-Core r0.8.0). GPT models, vocabulary 131,072, sequence 4,096, H100 80 GB SXM (DGX H100,
  NDR InfiniBand); ``--overlap-grad-reduce --overlap-param-gather --tp-comm-overlap``. Per-GPU TFLOP/s is Megatron-LM's
  ``num_floating_point_operations`` of that date (full s x s attention, no causal halving; see ``flops_2024``).
- ``H100_STRONG``: the same README, ``images/strong_scaling.png``: the 177B model (vocabulary 131,072) at a global
  batch of 1,152 from 96 to 4,608 H100s, MFU 47 % at the smallest and 42 % at the largest scale (the text's figures).
  The layout is not published; the 177B row's TP 8 x PP 6 is assumed.
- ``A100_2021``: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"
  (SC'21, arXiv:2104.04473) Table 1, also Megatron-LM's README of 2021 (``images/cases_april2021.png``): vocabulary
  51,200, sequence 2,048, A100 80 GB (Selene, HDR InfiniBand), full activation recomputation, no flash attention, no
  sequence parallelism, no distributed optimizer. Its TFLOP/s count the recomputed forward pass (the paper's
  96 B s l h^2 (1 + s/6h + V/16lh)); ``flops_2021`` is that formula.
- ``A100_2022``: Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (arXiv:2205.05198)
  and the README of 2022: MFU with selective recomputation and sequence parallelism at data-parallel size 1,
  vocabulary 51,200, sequence 2,048, A100 80 GB, micro-batch 1.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Run:
    name: str
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    batch: int
    tflops: float  # per GPU, on the source's FLOPs formula
    seq: int
    vocab: int
    gpu: str  # megaprov's GPU name
    software: str  # h100-2024, a100-2021, a100-2022


def _h100(name: str, heads: int, hidden: int, layers: int, tp: int, pp: int, gpus: int, batch: int, tflops: float) -> Run:
    return Run(name, heads, hidden, layers, tp, pp, gpus, batch, tflops, 4096, 131072, "H100-SXM", "h100-2024")


def _a100(name: str, heads: int, hidden: int, layers: int, tp: int, pp: int, gpus: int, batch: int, tflops: float, software: str) -> Run:
    return Run(name, heads, hidden, layers, tp, pp, gpus, batch, tflops, 2048, 51200, "A100-80GB", software)


# name, heads, hidden, layers, TP, PP, GPUs, global batch, TFLOP/s per GPU (data-parallel size 48 throughout)
H100_WEAK = (
    _h100("1.7B", 16, 2048, 24, 1, 1, 48, 192, 408.8),
    _h100("7.1B", 32, 4096, 30, 2, 1, 96, 192, 465.9),
    _h100("16B", 48, 6144, 32, 4, 1, 192, 192, 489.1),
    _h100("32B", 56, 7168, 48, 8, 1, 384, 192, 459.6),
    _h100("70B", 64, 8192, 84, 8, 2, 768, 384, 419.7),
    _h100("119B", 80, 10240, 92, 8, 4, 1536, 768, 420.5),
    _h100("177B", 96, 12288, 96, 8, 6, 2304, 1152, 432.8),
    _h100("314B", 128, 16384, 96, 8, 8, 3072, 1536, 474.4),
    _h100("462B", 144, 18432, 112, 8, 16, 6144, 3072, 459.9),
)
H100_STRONG = (
    _h100("177B@96", 96, 12288, 96, 8, 6, 96, 1152, 0.47 * 989),
    _h100("177B@4608", 96, 12288, 96, 8, 6, 4608, 1152, 0.42 * 989),
)
A100_2021 = (
    _a100("1.7B", 24, 2304, 24, 1, 1, 32, 512, 137, "a100-2021"),
    _a100("3.6B", 32, 3072, 30, 2, 1, 64, 512, 138, "a100-2021"),
    _a100("7.5B", 32, 4096, 36, 4, 1, 128, 512, 142, "a100-2021"),
    _a100("18B", 48, 6144, 40, 8, 1, 256, 1024, 135, "a100-2021"),
    _a100("39B", 64, 8192, 48, 8, 2, 512, 1536, 138, "a100-2021"),
    _a100("76B", 80, 10240, 60, 8, 4, 1024, 1792, 140, "a100-2021"),
    _a100("145B", 96, 12288, 80, 8, 8, 1536, 2304, 148, "a100-2021"),
    _a100("310B", 128, 16384, 96, 8, 16, 1920, 2160, 155, "a100-2021"),
    _a100("530B", 128, 20480, 105, 8, 35, 2520, 2520, 163, "a100-2021"),
    _a100("1T", 160, 25600, 128, 8, 64, 3072, 3072, 163, "a100-2021"),
)
A100_2022 = (
    _a100("22B", 64, 6144, 48, 8, 1, 8, 4, 0.415 * 312, "a100-2022"),
    _a100("175B", 96, 12288, 96, 8, 8, 64, 64, 0.514 * 312, "a100-2022"),
    _a100("530B", 128, 20480, 105, 8, 35, 280, 280, 0.560 * 312, "a100-2022"),
    _a100("1T", 160, 25600, 128, 8, 64, 512, 512, 0.563 * 312, "a100-2022"),
)


def flops_2024(r: Run) -> float:
    """Megatron-LM's num_floating_point_operations of July 2024 for a GELU 4h GPT (multi-head attention)."""
    return 12.0 * r.batch * r.seq * r.layers * r.hidden**2 * ((1 + 1 + r.seq / r.hidden) + 4 + r.vocab / (2 * r.layers * r.hidden))


def flops_2021(r: Run) -> float:
    """Narayanan et al. (2021), eq. 3: with the recomputed forward pass."""
    return 96.0 * r.batch * r.seq * r.layers * r.hidden**2 * (1 + r.seq / (6 * r.hidden) + r.vocab / (16 * r.layers * r.hidden))


def published_seconds(r: Run) -> float:
    """The published run's seconds per iteration, from its per-GPU rate and its source's FLOPs formula."""
    flops = flops_2021(r) if r.software == "a100-2021" else flops_2024(r)
    return flops / (r.gpus * r.tflops * 1e12)


def job(r: Run) -> dict[str, object]:
    """The run as a megaprov job spec (a mapping for JobSpec.model_validate)."""
    old = r.software == "a100-2021"
    tp_parallel = r.tp > 1 and not old
    return {
        "name": "published-" + r.name.lower().replace(".", "-").replace("@", "-"),
        "model": {
            "num_layers": r.layers,
            "hidden_size": r.hidden,
            "num_attention_heads": r.heads,
            "seq_length": r.seq,
            "max_position_embeddings": r.seq,
            "vocab_size": r.vocab,
            "activation": "gelu",
            "normalization": "LayerNorm",
            "attention_backend": "unfused" if old else "auto",
        },
        "parallel": {
            "tensor": r.tp,
            "pipeline": r.pp,
            "sequence_parallel": tp_parallel,
            "distributed_optimizer": not old,
            "overlap_grad_reduce": r.software == "h100-2024",
            "overlap_param_gather": r.software == "h100-2024",
            "tp_comm_overlap": tp_parallel and r.software == "h100-2024",
        },
        "train": {
            "micro_batch_size": 1,
            "global_batch_size": r.batch,
            "train_iters": 100,
            "lr": 1.0e-4,
            "recompute": "full" if old else ("selective" if r.software == "a100-2022" else "none"),
        },
        "data": {"mock": True},
        "launch": {"nodes": max(r.gpus // 8, 1), "gpus_per_node": min(r.gpus, 8)},
    }
