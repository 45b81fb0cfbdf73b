"""The parallelism planner: pure arithmetic on a job spec and a cluster shape.

It checks every rule Megatron-LM enforces at start-up (so a job fails here in a second, not after the
cluster has loaded the model), counts parameters, computes FLOPs per iteration with Megatron-LM's own formula,
estimates memory per GPU, names the fixes when a job does not fit, estimates the iteration's time on GPUs from the
mechanisms that set it (``throughput``: GEMM shapes, attention, memory-bound kernels, tensor/context/pipeline/data
parallel communication and their overlap, the pipeline bubble, recomputation, the optimizer), and ranks the layouts
that fit by that time, saying why the best one wins.

Sources of the formulas (read, re-derived, not copied):
- FLOPs: Megatron-LM ``megatron/training/training.py`` ``num_floating_point_operations`` (core_v0.16.1), the
  figure behind its ``throughput per GPU (TFLOP/s/GPU)`` log field: 3 (forward, backward wgrad and dgrad) x
  2 (multiply-add) x every GEMM, causal attention counted at half.
- Weights, gradients and optimizer states in bytes per parameter: Megatron-LM
  ``docs/user-guide/features/dist_optimizer.md`` (bf16 parameters with fp32 gradients: 18 bytes, or
  6 + 12/d with the distributed optimizer over d data-parallel ranks).
- Activations: Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
  (arXiv:2205.05198), Table 2: per layer s*b*h*(34 + 5*a*s/h) bytes without parallelism,
  s*b*h*(10 + 24/t + 5*a*s/(h*t)) with tensor parallelism, s*b*h/t*(34 + 5*a*s/h) with sequence parallelism,
  s*b*h*34/t with selective recompute, 2*s*b*h (/t with sequence parallelism) with full recompute; the
  first pipeline stage keeps min(p, m) micro-batches in flight, x (1 + (p-1)/(p*v)) when interleaved (§4.2.3).
  The 34 assumes a 4h GELU MLP; it is generalised here to any MLP width and to SwiGLU (see ``_act_terms``);
  the 5*a*s/h score term applies only to attention backends that store the scores (unfused, local).
- The output layer and loss (§4.3, and Megatron-LM ``megatron/training/theoretical_memory_usage.py``): 4*s*b*h/t *
  (1 + V/h) bytes, the 16-bit inputs of the final norm and the output projection and the fp32 logits.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from itertools import product
from typing import Any

from megaprov import values
from megaprov.cluster.rates import NodeRate
from megaprov.errors import UsageError
from megaprov.training import throughput
from megaprov.training.jobspec import JobSpec, Problem
from megaprov.training.trainer import padded_vocab  # one rule, kept in the standalone trainer

GIB = 1024**3
# Per-GPU memory megaprov keeps free for the CUDA context, NCCL buffers and allocator fragmentation.
RESERVED_GIB = 3.0
# What --suggest leaves free beyond the estimate: the estimate counts tensors, not the caching allocator's
# fragmentation or library workspaces (Transformer Engine, cuBLAS, NCCL channels), which grow with the model; a layout
# within 10 % of the GPU's memory is one an operator would not start a long run on.
SUGGEST_HEADROOM = 0.10


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gib: float  # what nvidia-smi reports as total, in GiB
    tflops_16bit: float  # dense BF16/FP16 tensor-core peak
    tflops_fp32: float  # dense TF32 tensor-core peak (what fp32 training uses)
    nvlink: bool = True
    gemm_share: float = 0.78  # of the peak, what a large bf16 GEMM (8192^3, cuBLAS) reaches alone
    hbm_tbs: float = 1.0  # memory bandwidth, TB/s
    intra_gbs: float = 25.0  # GPU-to-GPU inside a node, GB/s per direction (NVLink, else PCIe)
    net_gbs: float = 12.5  # between nodes, GB/s per GPU (the reference system's NICs: one 400 Gb/s NIC per H100 = 50)


# Dense (no sparsity) peaks, memory bandwidth and NVLink from NVIDIA's data sheets; the network per GPU is that of
# the GPU's reference system (DGX/HGX: one NIC per GPU, 200 Gb/s HDR for A100, 400 Gb/s NDR from H100 on). The
# isolated GEMM share is what published cuBLAS benchmarks reach at 8192^3 (about 0.88 of the peak on A100, 0.78 on
# H100); for the GPUs without a figure here the H100's is assumed, and a node's measured rate replaces it.
GPUS: dict[str, Gpu] = {
    g.name: g
    for g in (
        Gpu("GB200", 184.0, 2500.0, 1250.0, hbm_tbs=8.0, intra_gbs=900.0, net_gbs=50.0),
        Gpu("B200", 179.0, 2250.0, 1100.0, hbm_tbs=8.0, intra_gbs=900.0, net_gbs=50.0),
        Gpu("H200", 139.8, 989.0, 494.0, hbm_tbs=4.8, intra_gbs=450.0, net_gbs=50.0),
        Gpu("H100-SXM", 79.6, 989.0, 494.0, hbm_tbs=3.35, intra_gbs=450.0, net_gbs=50.0),
        Gpu("H100-PCIe", 79.6, 756.0, 378.0, nvlink=False, hbm_tbs=2.0, intra_gbs=32.0, net_gbs=25.0),
        Gpu("GH200", 94.5, 989.0, 494.0, hbm_tbs=4.0, intra_gbs=450.0, net_gbs=50.0),
        Gpu("A100-80GB", 79.2, 312.0, 156.0, gemm_share=0.88, hbm_tbs=2.039, intra_gbs=300.0, net_gbs=25.0),
        Gpu("A100-40GB", 39.4, 312.0, 156.0, gemm_share=0.88, hbm_tbs=1.555, intra_gbs=300.0, net_gbs=25.0),
        Gpu("L40S", 44.4, 362.0, 183.0, nvlink=False, hbm_tbs=0.864, intra_gbs=25.0, net_gbs=12.5),
        Gpu("A10", 22.0, 125.0, 62.5, nvlink=False, hbm_tbs=0.6, intra_gbs=25.0, net_gbs=12.5),
        # Volta: FP16 tensor cores (no BF16, no TF32: fp32 runs on the CUDA cores); the 32 GB SXM2 board.
        Gpu("V100", 31.7, 125.0, 15.7, hbm_tbs=0.9, intra_gbs=150.0, net_gbs=12.5),
        # The CPU lab: one process per node, no memory verdict, a nominal peak so that step times print.
        Gpu("cpu", 0.0, 0.2, 0.1, nvlink=False),
    )
}
GPU_ALIASES = {"h100": "H100-SXM", "h100-80gb": "H100-SXM", "h200": "H200", "a100": "A100-80GB", "b200": "B200", "l40s": "L40S", "a10": "A10"}
# The names nvidia-smi prints (--query-gpu=name), lower case without "NVIDIA "/"Tesla ", to megaprov's: the first
# pattern that matches wins (GH200 before H200, GB200 before B200, the 40 GB A100 before the 80 GB one).
NVIDIA_SMI_NAMES: tuple[tuple[str, str], ...] = (
    (r"gh200\b", "GH200"),
    (r"gb200\b", "GB200"),
    (r"b200\b", "B200"),
    (r"h200\b", "H200"),
    (r"h100\b.*\bpcie\b", "H100-PCIe"),
    (r"h100\b", "H100-SXM"),  # "H100 80GB HBM3", "H100-SXM5-80GB"
    (r"a100\b.*\b40\s?gb\b", "A100-40GB"),  # "A100-SXM4-40GB", "A100-PCIE-40GB"
    (r"a100\b", "A100-80GB"),  # "A100-SXM4-80GB", "A100 80GB PCIe"
    (r"l40s\b", "L40S"),
    (r"a10\b", "A10"),
    (r"v100s?\b", "V100"),  # "V100-SXM2-32GB"
)
# The share of a GEMM's isolated rate (``Gpu.gemm_share`` of the peak, or a node's measured rate: megaprov's preflight
# times that isolated GEMM) that it sustains inside a Megatron-LM iteration, where the GPU runs at its power limit
# and shares its SMs and memory with other kernels. Fitted with the step-time model's constants (``throughput``) on
# Megatron-LM's H100 table (benchmarks/README.md).
TRAINING_SHARE = 0.7744
# NCCL's bus bandwidth as a share of the link: NVLink rings about 0.8 of the per-direction rate (360 of 450 GB/s on
# DGX H100 for all-gather and reduce-scatter, nccl-tests), InfiniBand about 0.9 of the NIC.
NVLINK_EFFICIENCY = 0.8
NET_EFFICIENCY = 0.9
# The lab trainer on CPU nodes spends most of its time outside GEMMs (Python, elementwise kernels, gloo): its share
# of the node's measured fp32 GEMM rate, chosen so that a loaded 2-node lab passes and a node held to 10 % of a
# CPU fails (benchmarks/README.md).
CPU_MFU = 0.025


def default_mfu(cluster: Cluster) -> float:
    """The lab's MFU on CPU nodes; on GPUs the share of the per-rank rate a large GEMM reaches."""
    if cluster.gpu.name == "cpu":
        return CPU_MFU
    return TRAINING_SHARE if job_rates(cluster) else cluster.gpu.gemm_share * TRAINING_SHARE


def gpu_model(name: str, where: str) -> str:
    """The name megaprov knows the GPU ``name`` by (an alias or nvidia-smi's name), refused when it knows none."""
    known = gpu_named(name)
    if known is None or known.name == "cpu":
        raise UsageError(f"{where} {values.shown(name)} is not a GPU megaprov knows", "use one of " + ", ".join(g for g in GPUS if g != "cpu"))
    return known.name


def rate_text(tflops: float) -> str:
    return f"{tflops * 1e3:.1f} GFLOP/s" if tflops < 1 else f"{tflops:.1f} TFLOP/s"


@dataclass(frozen=True)
class Peak:
    """The FLOP/s one rank is expected to reach at 100 % MFU, and where that number comes from."""

    tflops: float
    source: str  # measured or published
    host: str | None  # the slowest measured node
    text: str


def gpu_named(name: str) -> Gpu | None:
    if name in GPUS:
        return GPUS[name]
    key = name.lower()
    for known in GPUS:
        if known.lower() == key:
            return GPUS[known]
    alias = GPU_ALIASES.get(key)
    if alias:
        return GPUS[alias]
    smi = re.sub(r"^(nvidia|tesla)\s+", "", key.strip())
    return next((GPUS[ours] for pattern, ours in NVIDIA_SMI_NAMES if re.match(pattern, smi)), None)


@dataclass(frozen=True)
class Cluster:
    nodes: int
    gpus_per_node: int
    gpu: Gpu
    shared_dir: str = "/shared"
    hosts: tuple[str, ...] = ()
    rates: tuple[NodeRate, ...] = ()  # measured GEMM rates of (some of) the hosts

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Layout:
    """The choices the planner varies."""

    tp: int
    pp: int
    cp: int
    vp: int | None
    micro_batch: int
    recompute: str
    sequence_parallel: bool
    distributed_optimizer: bool

    @classmethod
    def of(cls, spec: JobSpec) -> Layout:
        p, t = spec.parallel, spec.train
        return cls(p.tensor, p.pipeline, p.context, p.virtual_stages, t.micro_batch_size, t.recompute, p.sequence_parallel, p.distributed_optimizer)

    def describe(self) -> str:
        vp = f" VP={self.vp}" if self.vp else ""
        return (
            f"TP={self.tp} PP={self.pp}{vp} CP={self.cp} micro={self.micro_batch} recompute={self.recompute}"
            f"{' SP' if self.sequence_parallel else ''}{' dist-opt' if self.distributed_optimizer else ''}"
        )


@dataclass(frozen=True)
class Memory:
    """Estimated bytes per GPU on the most loaded pipeline stage."""

    parameters: float  # parameters held by that GPU
    weights_and_optimizer: float  # weights + gradients + optimizer states
    activations: float
    logits: float  # the output layer's inputs and the fp32 logits (on the last pipeline stage)
    reserved: float
    capacity: float  # 0 = not known (CPU)

    @property
    def total(self) -> float:
        return self.weights_and_optimizer + self.activations + self.logits + self.reserved

    @property
    def fits(self) -> bool | None:
        return None if self.capacity <= 0 else self.total <= self.capacity


@dataclass(frozen=True)
class Fix:
    field: str
    value: Any
    memory_gib: float

    def render(self) -> str:
        return f"{self.field}={self.value} ({self.memory_gib:.1f} GiB)"


@dataclass(frozen=True)
class Plan:
    job: str
    nodes: int
    gpus_per_node: int
    gpu: str
    world: int
    layout: Layout
    data_parallel: int
    microbatches_per_step: int
    padded_vocab: int
    parameters: int
    flops_per_iteration: float
    memory: Memory
    mfu_assumed: float
    step_seconds: float
    tokens_per_second: float
    tokens_per_iteration: int
    fixes: tuple[Fix, ...] = ()
    warnings: tuple[str, ...] = ()
    peak: Peak | None = None  # the per-rank rate behind step_seconds (measured, or the published peak)
    rates: tuple[NodeRate, ...] = ()  # the measured rates of the job's nodes
    iterations: int = 0  # the spec's train.train_iters
    time: throughput.StepTime | None = None  # the iteration by mechanism (GPU clusters)
    continuations: tuple[Continuation, ...] = ()  # launch.elastic: the smaller node counts it can continue on
    min_nodes: int | None = None  # launch.elastic.min_nodes (None: the policy is off)

    @property
    def fits(self) -> bool | None:
        return self.memory.fits

    @property
    def run_seconds(self) -> float:
        """The estimated wall time of the run's iterations (start-up, evaluation and checkpoints not counted)."""
        return self.iterations * self.step_seconds

    @property
    def gpu_hours(self) -> float:
        return self.run_seconds * self.world / 3600


@dataclass(frozen=True)
class Continuation:
    """A node count a job with ``launch.elastic`` can continue on: its data parallelism, the micro-batches per step
    that keep the global batch, the throughput expected there, and whether it fits."""

    nodes: int
    data_parallel: int
    microbatches_per_step: int
    tokens_per_second: float
    fits: bool | None


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    data_parallel: int
    memory_gib: float
    mfu: float
    step_seconds: float
    tokens_per_second: float
    time: throughput.StepTime | None = None  # by mechanism (GPU clusters)


class _Problems:
    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, path: str, message: str, fix: str) -> None:
        self.items.append(Problem(path, message, fix))


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _choices(values: list[int], limit: int = 8) -> str:
    values = values[:limit] or [1]  # nothing larger divides (a sequence of 1 token has no context parallelism): 1
    if len(values) == 1:
        return str(values[0])
    return ", ".join(str(v) for v in values[:-1]) + f" or {values[-1]}"


def tokenizer_vocab(spec: JobSpec) -> int | None:
    """Vocabulary size the tokenizer gives Megatron (end-of-document token included)."""
    tok = spec.data.tokenizer
    if spec.model.vocab_size:
        return spec.model.vocab_size
    if tok.type == "byte":
        return 257  # 256 byte values + end of document (Megatron's NullTokenizer with --vocab-size 256)
    if tok.type == "null" and tok.vocab_size:
        return tok.vocab_size + 1
    if tok.type == "gpt2-bpe":
        return 50257
    return None


def spec_problems(spec: JobSpec, world: int | None = None, gpus_per_node: int | None = None) -> list[Problem]:
    """Every cross-field rule; with ``world`` also the ones that depend on the number of GPUs."""
    m, p, t, d, c, launch = spec.model, spec.parallel, spec.train, spec.data, spec.checkpoint, spec.launch
    out = _Problems()
    heads = m.num_attention_heads
    if m.hidden_size % heads:
        out.add(
            "model.hidden_size",
            f"model.hidden_size={m.hidden_size} is not a multiple of model.num_attention_heads={heads}",
            f"use a hidden size such as {(m.hidden_size // heads + 1) * heads}",
        )
    if heads % p.tensor:
        out.add(
            "parallel.tensor", f"parallel.tensor={p.tensor} does not divide model.num_attention_heads={heads}", f"use {_choices(divisors(heads))}"
        )
    if m.num_query_groups is not None:
        if heads % m.num_query_groups:
            out.add(
                "model.num_query_groups",
                f"model.num_query_groups={m.num_query_groups} does not divide model.num_attention_heads={heads}",
                f"use {_choices(divisors(heads))}",
            )
        elif m.num_query_groups % p.tensor:
            out.add(
                "parallel.tensor",
                f"parallel.tensor={p.tensor} does not divide model.num_query_groups={m.num_query_groups}",
                f"use {_choices(divisors(m.num_query_groups))}",
            )
    if m.ffn % p.tensor:
        out.add(
            "model.ffn_hidden_size", f"model.ffn_hidden_size={m.ffn} is not a multiple of parallel.tensor={p.tensor}", f"use a multiple of {p.tensor}"
        )
    if m.num_layers % p.pipeline:
        out.add(
            "parallel.pipeline",
            f"parallel.pipeline={p.pipeline} does not divide model.num_layers={m.num_layers}",
            f"use {_choices(divisors(m.num_layers))}",
        )
    elif p.virtual_stages is not None:
        per_stage = m.num_layers // p.pipeline
        if p.pipeline == 1 and p.virtual_stages > 1:
            out.add(
                "parallel.virtual_stages",
                f"parallel.virtual_stages={p.virtual_stages} needs parallel.pipeline > 1",
                "raise parallel.pipeline or remove virtual_stages",
            )
        elif per_stage % p.virtual_stages:
            out.add(
                "parallel.virtual_stages",
                f"parallel.virtual_stages={p.virtual_stages} does not divide the {per_stage} layers of each pipeline stage",
                f"use {_choices(divisors(per_stage))}",
            )
    if p.context > 1 and m.seq_length % (2 * p.context):
        out.add(
            "parallel.context",
            f"model.seq_length={m.seq_length} is not divisible by 2 x parallel.context={2 * p.context}",
            f"use parallel.context {_choices([x for x in divisors(m.seq_length // 2) if x > 0])}",
        )
    if p.sequence_parallel and p.tensor == 1:
        out.add(
            "parallel.sequence_parallel",
            "parallel.sequence_parallel=true needs parallel.tensor > 1",
            "raise parallel.tensor or set sequence_parallel: false",
        )
    if p.overlap_param_gather and not p.distributed_optimizer:
        out.add(
            "parallel.overlap_param_gather",
            "parallel.overlap_param_gather=true needs parallel.distributed_optimizer=true",
            "enable distributed_optimizer",
        )
    if p.overlap_param_gather and not p.overlap_grad_reduce:
        out.add(
            "parallel.overlap_param_gather",
            "parallel.overlap_param_gather=true needs parallel.overlap_grad_reduce=true",
            "enable overlap_grad_reduce",
        )
    if m.attention_backend == "local" and launch.trainer == "megatron-lm":
        out.add(
            "model.attention_backend",
            "model.attention_backend=local needs Megatron-LM's local layer spec (--spec local), which pretrain_gpt.py does not build by default",
            "use auto, flash, fused or unfused",
        )
    if p.tp_comm_overlap and not p.sequence_parallel:
        out.add("parallel.tp_comm_overlap", "parallel.tp_comm_overlap=true needs parallel.sequence_parallel=true", "enable sequence_parallel")
    if m.max_positions < m.seq_length:  # Megatron-LM asserts it whatever the position embedding
        out.add(
            "model.max_position_embeddings",
            f"model.max_position_embeddings={m.max_positions} is below model.seq_length={m.seq_length}",
            f"use at least {m.seq_length}",
        )
    if t.global_batch_size % t.micro_batch_size:
        out.add(
            "train.global_batch_size",
            f"train.global_batch_size={t.global_batch_size} is not a multiple of train.micro_batch_size={t.micro_batch_size}",
            f"use a multiple of {t.micro_batch_size}",
        )
    if t.min_lr > t.lr:
        out.add("train.min_lr", f"train.min_lr={t.min_lr} is above train.lr={t.lr}", "use a min_lr at most lr")
    if t.lr_warmup_iters >= (t.lr_decay_iters or t.train_iters) and t.lr_decay_style != "constant":
        out.add(
            "train.lr_warmup_iters",
            f"train.lr_warmup_iters={t.lr_warmup_iters} is not below the decay length {t.lr_decay_iters or t.train_iters}",
            "shorten the warmup or lengthen train.lr_decay_iters",
        )
    if t.recompute != "full" and (t.recompute_method != "uniform" or t.recompute_num_layers != 1):
        out.add(
            "train.recompute_method",
            "train.recompute_method and recompute_num_layers apply only to recompute: full",
            "set recompute: full or remove them",
        )
    if d.mock and d.prefixes:
        out.add("data.mock", "data.mock=true and data.prefixes are both set", "remove the prefixes or set mock: false")
    if not d.mock and not d.prefixes:
        out.add("data.prefixes", "data.prefixes is empty and data.mock is false", "list prepared datasets (megaprov data prepare) or set mock: true")
    tok = d.tokenizer
    if tok.type == "gpt2-bpe" and not (tok.vocab_file and tok.merge_file):
        out.add(
            "data.tokenizer.vocab_file", "data.tokenizer.type=gpt2-bpe needs vocab_file and merge_file", "give the paths of vocab.json and merges.txt"
        )
    if tok.type == "huggingface" and not tok.path:
        out.add("data.tokenizer.path", "data.tokenizer.type=huggingface needs path", "give the directory holding tokenizer.json")
    if tok.type == "null" and not tok.vocab_size:
        out.add("data.tokenizer.vocab_size", "data.tokenizer.type=null needs vocab_size", "give the vocabulary size of the prepared data")
    if tokenizer_vocab(spec) is None and not out.items:
        out.add("model.vocab_size", f"model.vocab_size is unset and data.tokenizer.type={tok.type} does not imply one", "set model.vocab_size")
    if c.directory is not None and ".." in c.directory.split("/"):
        out.add("checkpoint.directory", f"checkpoint.directory={c.directory} contains '..'", "give a path inside the shared directory")
    if launch.trainer == "lab" and (p.pipeline > 1 or p.context > 1 or p.virtual_stages):
        out.add("parallel.pipeline", "the lab trainer supports tensor and data parallelism only", "set pipeline: 1 and context: 1 for trainer: lab")
    for key in launch.env:
        if not key.replace("_", "a").isalnum() or key[0].isdigit():
            out.add(f"launch.env.{key}", f"launch.env.{key} is not a valid environment variable name", "use letters, digits and _")
    for flag in launch.extra_args:
        if flag.startswith("--") and flag.split("=")[0] in _OWNED_FLAGS:
            out.add(
                "launch.extra_args",
                f"launch.extra_args sets {flag.split('=')[0]}, which megaprov renders from the spec",
                f"set it through the spec field {_OWNED_FLAGS[flag.split('=')[0]]}",
            )
    if launch.elastic is not None:
        if launch.elastic.min_nodes > launch.nodes:
            out.add(
                "launch.elastic.min_nodes",
                f"launch.elastic.min_nodes={launch.elastic.min_nodes} is larger than the job's launch.nodes={launch.nodes}",
                f"use a min_nodes from 1 to {launch.nodes}",
            )
        if c.format != "torch_dist":
            out.add(
                "checkpoint.format",
                f"launch.elastic needs checkpoint.format=torch_dist (a {c.format} checkpoint does not reshard to another data-parallel size)",
                "set checkpoint.format: torch_dist, or drop launch.elastic",
            )
        if c.resume != "auto":
            out.add("checkpoint.resume", "launch.elastic needs checkpoint.resume=auto (it continues from the latest checkpoint)", "set resume: auto")
        for flag in launch.extra_args:
            name, _, value = flag.partition("=")
            if name in _ELASTIC_REFUSED or (name == "--dataloader-type" and value == "cyclic"):
                out.add(
                    "launch.extra_args",
                    f"launch.extra_args sets {flag}, whose {_ELASTIC_REFUSED.get(name, 'sample order depends on the data-parallel size')}",
                    "drop it, or drop launch.elastic",
                )
            elif name == "--dataloader-type" and not value:
                index = launch.extra_args.index(flag)
                if launch.extra_args[index + 1 : index + 2] == ["cyclic"]:
                    out.add(
                        "launch.extra_args",
                        "launch.extra_args sets --dataloader-type cyclic, whose sample order depends on the data-parallel size",
                        "drop it, or drop launch.elastic",
                    )
    if world is not None:
        model_parallel = p.tensor * p.pipeline * p.context
        if world % model_parallel:
            out.add(
                "parallel.tensor",
                f"the world of {world} GPUs is not a multiple of tensor x pipeline x context"
                f" = {p.tensor}x{p.pipeline}x{p.context} = {model_parallel}",
                f"use a model-parallel product among {_choices(divisors(world))}",
            )
        else:
            dp = world // model_parallel
            if t.global_batch_size % (t.micro_batch_size * dp):
                step = t.micro_batch_size * dp
                good = -(-t.global_batch_size // step) * step  # the next multiple, by arithmetic (no scan)
                out.add(
                    "train.global_batch_size",
                    f"train.global_batch_size={t.global_batch_size} is not a multiple of micro_batch_size x data parallel"
                    f" = {t.micro_batch_size}x{dp}",
                    f"use {good} (or change micro_batch_size or the parallel sizes)",
                )
            elif (p.virtual_stages or 1) > 1 and p.pipeline > 1 and (t.global_batch_size // (t.micro_batch_size * dp)) % p.pipeline:
                microbatches = t.global_batch_size // (t.micro_batch_size * dp)
                step = t.micro_batch_size * dp * p.pipeline
                out.add(
                    "parallel.virtual_stages",
                    f"parallel.virtual_stages={p.virtual_stages} needs the micro-batches of a step (train.global_batch_size /"
                    f" (micro_batch_size x data parallel) = {microbatches}) to be a multiple of parallel.pipeline={p.pipeline}"
                    " (Megatron-LM's interleaved schedule)",
                    f"use a global batch size that is a multiple of {step}, or remove virtual_stages",
                )
        if launch.elastic is not None and gpus_per_node and world % gpus_per_node == 0:
            nodes = world // gpus_per_node
            counts = elastic_counts(spec, nodes, gpus_per_node)
            low = launch.elastic.min_nodes
            if low <= nodes and low not in counts:
                others = [n for n in range(1, nodes) if keeps_batch(spec, n * gpus_per_node)]
                out.add(
                    "launch.elastic.min_nodes",
                    f"launch.elastic.min_nodes={low}: on {low} node(s) ({low * gpus_per_node} GPUs) the layout cannot keep"
                    f" train.global_batch_size={t.global_batch_size} (micro_batch_size x data parallel must divide it)",
                    f"use min_nodes {_choices(others)}" if others else "use a global batch that every node count divides, or drop launch.elastic",
                )
        if gpus_per_node and p.tensor > gpus_per_node:
            out.add(
                "parallel.tensor",
                f"parallel.tensor={p.tensor} spans more than the {gpus_per_node} GPUs of a node",
                f"keep tensor parallelism inside a node: use {_choices([x for x in divisors(gpus_per_node) if heads % x == 0])}",
            )
    return out.items


# Pass-through arguments that tie a run to its data-parallel size: a continuation on fewer nodes would change them.
_ELASTIC_REFUSED = {
    "--rampup-batch-size": "batch ramp-up counts data-parallel ranks",
    "--num-distributed-optimizer-instances": "optimizer instances divide the data-parallel ranks",
    "--expert-model-parallel-size": "expert parallelism is carved out of the data-parallel ranks",
}


def usable_counts(spec: JobSpec, cluster: Cluster) -> list[int]:
    """launch.elastic: the node counts the job runs on, largest first: its own, then the continuations that keep the
    global batch and fit memory (GPU clusters; a CPU lab is not checked)."""
    return [cluster.nodes] + [c.nodes for c in continuations(spec, cluster) if c.fits is not False]


def keeps_batch(spec: JobSpec, world: int) -> bool:
    """Whether ``world`` GPUs hold the spec's layout with its global batch: the model-parallel product divides the
    world, micro_batch_size x data parallel divides the global batch, and an interleaved pipeline gets a multiple of
    its stages in micro-batches. Pure."""
    p, t = spec.parallel, spec.train
    model_parallel = p.tensor * p.pipeline * p.context
    if world < model_parallel or world % model_parallel:
        return False
    dp = world // model_parallel
    if t.global_batch_size % (t.micro_batch_size * dp):
        return False
    return not ((p.virtual_stages or 1) > 1 and p.pipeline > 1 and (t.global_batch_size // (t.micro_batch_size * dp)) % p.pipeline)


def elastic_counts(spec: JobSpec, nodes: int, gpus_per_node: int) -> list[int]:
    """The node counts a job with ``launch.elastic`` can continue on, largest first: from ``nodes`` down to
    ``min_nodes``, those whose layout keeps the global batch (memory is :func:`continuation_counts`'). Without the
    policy: ``[nodes]``. Pure."""
    if spec.launch.elastic is None:
        return [nodes]
    low = max(spec.launch.elastic.min_nodes, 1)
    return [n for n in range(nodes, low - 1, -1) if keeps_batch(spec, n * gpus_per_node)]


# Flags the renderer owns: a pass-through copy would silently contradict the spec.
_OWNED_FLAGS = {
    "--num-layers": "model.num_layers",
    "--hidden-size": "model.hidden_size",
    "--num-attention-heads": "model.num_attention_heads",
    "--seq-length": "model.seq_length",
    "--micro-batch-size": "train.micro_batch_size",
    "--global-batch-size": "train.global_batch_size",
    "--tensor-model-parallel-size": "parallel.tensor",
    "--pipeline-model-parallel-size": "parallel.pipeline",
    "--context-parallel-size": "parallel.context",
    "--train-iters": "train.train_iters",
    "--lr": "train.lr",
    "--save": "checkpoint.directory",
    "--load": "checkpoint.directory",
    "--data-path": "data.prefixes",
    "--bf16": "train.precision",
    "--fp16": "train.precision",
    "--save-interval": "checkpoint.save_interval",
}


# ---------------------------------------------------------------------------------------------------- counts


def _norm_parameters(spec: JobSpec) -> int:
    """One norm's parameters: RMSNorm a weight, LayerNorm a weight and a bias."""
    h = spec.model.hidden_size
    return h if spec.model.normalization == "RMSNorm" else 2 * h


def _layer_parameters(spec: JobSpec) -> int:
    m = spec.model
    h, kv_ch = m.hidden_size, m.hidden_size // m.num_attention_heads
    q, kv = kv_ch * m.num_attention_heads, kv_ch * m.query_groups
    norm = _norm_parameters(spec)
    gate = 2 if m.activation == "swiglu" else 1
    bias = 1 if m.bias_linear else 0
    attention = h * (q + 2 * kv) + bias * (q + 2 * kv) + q * h + bias * h
    mlp = h * m.ffn * gate + bias * m.ffn * gate + m.ffn * h + bias * h
    return 2 * norm + attention + mlp


def _layer_parameters_per_rank(spec: JobSpec, tp: int) -> float:
    """A layer's parameters on one tensor-parallel rank (Megatron-LM's ColumnParallelLinear/RowParallelLinear): the
    GEMM weights and the column-parallel biases are split over ``tp``; the norms and the row-parallel layers' output
    biases (attention projection, second MLP GEMM) are replicated on every rank."""
    m = spec.model
    h = m.hidden_size
    replicated = 2 * _norm_parameters(spec) + (2 * h if m.bias_linear else 0)
    return replicated + (_layer_parameters(spec) - replicated) / tp


def parameter_count(spec: JobSpec, tp: int = 1) -> dict[str, int]:
    """Parameters of the whole model (Megatron GPTModel): per part and total."""
    m = spec.model
    vocab = padded_vocab(tokenizer_vocab(spec) or 0, m.make_vocab_size_divisible_by, tp)
    h = m.hidden_size
    embedding = vocab * h + (m.max_positions * h if m.position_embedding == "learned_absolute" else 0)
    layers = m.num_layers * _layer_parameters(spec)
    final_norm = _norm_parameters(spec)
    output = vocab * h if m.untie_embeddings else 0
    return {"embedding": embedding, "transformer": layers + final_norm, "output": output, "total": embedding + layers + final_norm + output}


def flops_per_iteration(spec: JobSpec, vocab: int, batch: int | None = None) -> float:
    """Megatron-LM's model FLOPs for one iteration of ``batch`` samples (dense GPT, no MoE/MTP)."""
    m = spec.model
    b = spec.train.global_batch_size if batch is None else batch
    s, h, layers = m.seq_length, m.hidden_size, m.num_layers
    kv_ch = h // m.num_attention_heads
    q, kv = kv_ch * m.num_attention_heads, kv_ch * m.query_groups
    ffn_factor = 3 if m.activation == "swiglu" else 2
    fb, fma = 3, 2
    mlp = fb * fma * h * m.ffn * ffn_factor * layers
    attention = fb * fma * (h * (q + 2 * kv) + q * s / 2 * 2 + q * h) * layers
    logits = fb * fma * h * vocab
    return float(b * s * (mlp + attention + logits))


def _recompute_overhead(spec: JobSpec, vocab: int, recompute: str) -> float:
    """Extra FLOPs recomputation costs, as a fraction of the model FLOPs."""
    if recompute == "none":
        return 0.0
    m = spec.model
    s, h, layers = m.seq_length, m.hidden_size, m.num_layers
    q = (h // m.num_attention_heads) * m.num_attention_heads
    total = flops_per_iteration(spec, vocab, 1) / s
    if recompute == "selective":  # the core attention's forward pass again
        return (2 * q * s * layers) / total
    logits = 6 * h * vocab
    return (total - logits) / 3 / total  # every layer's forward pass again


def _act_terms(spec: JobSpec) -> tuple[float, float]:
    """(replicated, tensor-split) coefficients of s*b*h in a layer's stored activations (16-bit).

    Korthikanti et al.: 34 = attention 11 + layer norms 4 + MLP 19, of which 10 is not split by tensor
    parallelism. The MLP's 19 is 2 (input) + 2f (activation input) + 2f (second GEMM input) + 1 (dropout
    mask) with f = 4 for a 4h GELU MLP; SwiGLU stores the doubled first-GEMM output as well.
    """
    f = spec.model.ffn / spec.model.hidden_size
    mlp = 3 + (6 * f if spec.model.activation == "swiglu" else 4 * f)
    total = 15 + mlp
    return 10.0, total - 10.0


def memory(spec: JobSpec, layout: Layout, cluster: Cluster) -> Memory:
    m, t = spec.model, spec.train
    tp, pp, cp = layout.tp, layout.pp, layout.cp
    world = cluster.world
    dp = max(world // (tp * pp * cp), 1)
    vocab = padded_vocab(tokenizer_vocab(spec) or 0, m.make_vocab_size_divisible_by, tp)
    h = m.hidden_size
    layers_per_stage = m.num_layers / pp
    layer_params = _layer_parameters_per_rank(spec, tp)
    embedding = vocab * h / tp + (m.max_positions * h if m.position_embedding == "learned_absolute" else 0)
    output = vocab * h / tp if (m.untie_embeddings or pp > 1) else 0.0  # a tied embedding is copied to the last stage
    final_norm = _norm_parameters(spec)  # on the last stage, replicated over tensor ranks
    first = layers_per_stage * layer_params + embedding + (output + final_norm if pp == 1 else 0.0)
    last = layers_per_stage * layer_params + output + final_norm + (embedding if pp == 1 else 0.0)
    stage_params = max(first, last)

    d = dp * cp  # the distributed optimizer shards over data-parallel x context-parallel ranks
    per_param = {
        "bf16": (18.0, 6.0 + 12.0 / d),
        "fp16": (20.0, 4.0 + 16.0 / d),
        "fp32": (16.0, 8.0 + 8.0 / d),
    }[t.precision]
    state = stage_params * (per_param[1] if layout.distributed_optimizer else per_param[0])

    s = m.seq_length / cp
    b = layout.micro_batch
    a = m.num_attention_heads
    sbh = s * b * h
    rep, split = _act_terms(spec)
    # Flash and fused attention (Megatron's default through Transformer Engine) never store the attention
    # scores: the paper's 5as/h term applies to the unfused and local backends only.
    scores = 5 * a * s / h if m.attention_backend in ("unfused", "local") else 0.0
    sp = layout.sequence_parallel
    if layout.recompute == "full":
        per_layer = 2 * sbh / (tp if sp else 1)
        working = sbh * ((rep + split + scores) / tp if sp else rep + (split + scores) / tp)  # one layer recomputed at a time
    elif layout.recompute == "selective":
        per_layer = sbh * ((rep + split) / tp if sp else rep + split / tp)
        working = sbh * scores / tp
    else:
        per_layer = sbh * ((rep + split + scores) / tp if sp else rep + (split + scores) / tp)
        working = 0.0
    microbatches = max(t.global_batch_size // (b * dp), 1)
    in_flight = min(pp, microbatches)
    interleave = 1 + (pp - 1) / (pp * layout.vp) if layout.vp and layout.vp > 1 else 1.0
    activations = per_layer * layers_per_stage * in_flight * interleave + working
    if t.precision == "fp32":
        activations *= 2
    # The output layer's inputs (final norm and projection, 16-bit: 4sbh) and the fp32 logits the cross-entropy keeps
    # (4sbV), split by TP: Korthikanti et al. §4.3, 4sbh/t * (1 + V/h), as Megatron-LM's theoretical_memory_usage.py.
    logits = (4.0 * s * b * h * (2 if t.precision == "fp32" else 1) + 4.0 * s * b * vocab) / tp
    capacity = cluster.gpu.memory_gib * GIB
    return Memory(stage_params, state, activations, logits, RESERVED_GIB * GIB if capacity else 0.0, capacity)


def _lab_efficiency(spec: JobSpec, layout: Layout) -> float:
    """The lab trainer's share of CPU_MFU: eager PyTorch on CPU, where small GEMMs dominate (rows are the micro-batch's
    tokens on a rank, columns the hidden size per rank)."""
    rows = layout.micro_batch * spec.model.seq_length / layout.cp
    cols = spec.model.hidden_size / layout.tp
    eff = rows / (rows + 256) * cols / (cols + 128)
    if layout.tp > 1:  # gloo all-reduces on the critical path, over no NVLink
        eff *= (1 - 0.04 * math.log2(layout.tp)) * 0.6
    return eff


def links(layout: Layout, cluster: Cluster) -> tuple[float, float, float, float]:
    """(tensor, pipeline, data, context)-parallel bus bandwidth per rank in bytes/s. Megatron-LM orders ranks TP, CP,
    DP, PP (TP fastest): a TP group spans t ranks, a CP group c ranks t apart, the gradient reduction's group (DP x
    CP) d x c ranks t apart. A group inside a node runs on NVLink; one across nodes on the NICs of its members in each
    node (NCCL builds a ring per NIC), up to NVLink's rate. A pipeline send crosses nodes somewhere once there are two."""
    gpu, gpn = cluster.gpu, cluster.gpus_per_node
    intra = gpu.intra_gbs * 1e9 * (NVLINK_EFFICIENCY if gpu.nvlink else NET_EFFICIENCY)
    nic = gpu.net_gbs * 1e9 * NET_EFFICIENCY
    if cluster.nodes == 1:
        return intra, intra, intra, intra
    t, c = layout.tp, layout.cp
    reduction = cluster.world // layout.pp  # d x c x t ranks

    def group(span: int, per_node: int) -> float:
        return intra if span <= gpn else min(intra, max(per_node, 1) * nic)

    return group(t, gpn), nic, group(reduction, gpn // t), group(t * c, min(c, gpn // t))


def work(spec: JobSpec, layout: Layout, cluster: Cluster, mem: Memory | None = None) -> throughput.Work:
    """The iteration of ``spec`` on ``layout``, in the sizes the step-time model needs (``mem``: the layout's
    :func:`memory`, when the caller has it)."""
    m, t, p = spec.model, spec.train, spec.parallel
    dp = max(cluster.world // (layout.tp * layout.pp * layout.cp), 1)
    kv_ch = m.hidden_size // m.num_attention_heads
    stage = (mem or memory(spec, layout, cluster)).parameters
    return throughput.Work(
        tokens=layout.micro_batch * m.seq_length // layout.cp,
        seq=m.seq_length,
        hidden=m.hidden_size,
        heads=m.num_attention_heads,
        q_width=kv_ch * m.num_attention_heads,
        kv_width=kv_ch * m.query_groups,
        ffn=m.ffn,
        gated=m.activation == "swiglu",
        vocab=padded_vocab(tokenizer_vocab(spec) or 0, m.make_vocab_size_divisible_by, layout.tp),
        layers=m.num_layers // layout.pp,
        tp=layout.tp,
        pp=layout.pp,
        vp=layout.vp or 1,
        cp=layout.cp,
        dp=dp,
        microbatches=max(t.global_batch_size // (layout.micro_batch * dp), 1),
        sequence_parallel=layout.sequence_parallel,
        recompute=layout.recompute,
        stage_parameters=stage,
        distributed_optimizer=layout.distributed_optimizer,
        overlap_grad_reduce=p.overlap_grad_reduce,
        overlap_param_gather=p.overlap_param_gather and layout.distributed_optimizer,
        tp_comm_overlap=p.tp_comm_overlap and layout.sequence_parallel,
        scores_stored=m.attention_backend in ("unfused", "local"),
        grad_bytes=2 if t.precision == "fp16" else 4,
        param_bytes=4 if t.precision == "fp32" else 2,
        act_bytes=4 if t.precision == "fp32" else 2,
    )


def step_time(spec: JobSpec, layout: Layout, cluster: Cluster, share: float | None = None, mem: Memory | None = None) -> throughput.StepTime:
    """The step-time model's iteration of a layout on a GPU cluster, by mechanism (``share``: of the per-rank rate
    that a large GEMM reaches; default :func:`default_mfu`)."""
    tp_link, pp_link, dp_link, cp_link = links(layout, cluster)
    hw = throughput.Hardware(
        gemm_flops=_peak(cluster, spec) * (share or default_mfu(cluster)),
        hbm=cluster.gpu.hbm_tbs * 1e12,
        tp_link=tp_link,
        pp_link=pp_link,
        dp_link=dp_link,
        cp_link=cp_link,
    )
    return throughput.step_time(work(spec, layout, cluster, mem), hw)


def job_rates(cluster: Cluster) -> tuple[NodeRate, ...]:
    """The measured rates of the nodes the job runs on (the first ``nodes`` hosts)."""
    if not cluster.hosts:
        return cluster.rates
    used = set(cluster.hosts[: cluster.nodes])
    return tuple(r for r in cluster.rates if r.host in used)


def rank_peak(cluster: Cluster, spec: JobSpec) -> Peak:
    """Per-rank FLOP/s at 100 % MFU: the slowest measured node's rate (synchronous data-parallel training runs at the
    pace of its slowest rank), else the GPU's published dense peak."""
    fp32 = spec.train.precision == "fp32"
    rates = job_rates(cluster)
    if rates:

        def per_rank(r: NodeRate) -> float:
            if r.gpu:  # measured in bf16: fp32 training runs at the published fp32/bf16 ratio of it
                return r.tflops_per_device * (cluster.gpu.tflops_fp32 / cluster.gpu.tflops_16bit if fp32 and cluster.gpu.tflops_16bit else 1.0)
            return r.tflops_per_device / max(cluster.gpus_per_node, 1)  # CPU ranks on one node share its cores

        slowest = min(rates, key=per_rank)
        tflops = per_rank(slowest)
        missing = [h for h in cluster.hosts[: cluster.nodes] if h not in {r.host for r in rates}]
        text = (
            f"measured rate of {slowest.host}, {rate_text(tflops)} per rank ({slowest.dtype} GEMM, {slowest.backend}, {slowest.measured_at}),"
            f" the slowest of {len(rates)} measured node(s)"
        )
        if slowest.gpu and fp32:
            text += " scaled to fp32 by the published ratio"
        if missing:
            text += f"; not measured: {', '.join(missing)}"
        return Peak(tflops, "measured", slowest.host, text)
    tflops = cluster.gpu.tflops_fp32 if fp32 else cluster.gpu.tflops_16bit
    if cluster.gpu.name == "cpu":
        text = f"nominal CPU peak {rate_text(tflops)} (no measured rate: run megaprov bootstrap, whose python stage measures it)"
    else:
        kind = "fp32" if fp32 else "bf16"
        text = f"published peak of {cluster.gpu.name}, {rate_text(tflops)} {kind} (no measured rate: run megaprov bootstrap or preflight)"
    return Peak(tflops, "published", None, text)


def _peak(cluster: Cluster, spec: JobSpec) -> float:
    return rank_peak(cluster, spec).tflops * 1e12


def _timing(
    spec: JobSpec, layout: Layout, cluster: Cluster, mfu: float, mem: Memory | None = None
) -> tuple[float, float, float, throughput.StepTime | None]:
    """(estimated MFU, seconds per iteration, tokens per second, the step by mechanism) for a layout: on GPUs from the
    step-time model, on the CPU lab from its measured calibration (``CPU_MFU``)."""
    vocab = padded_vocab(tokenizer_vocab(spec) or 0, spec.model.make_vocab_size_divisible_by, layout.tp)
    world = cluster.world
    flops = flops_per_iteration(spec, vocab)
    tokens = spec.train.global_batch_size * spec.model.seq_length
    peak = _peak(cluster, spec)
    if cluster.gpu.name == "cpu":
        est_mfu = mfu * _lab_efficiency(spec, layout)
        step = flops * (1 + _recompute_overhead(spec, vocab, layout.recompute)) / (world * peak * est_mfu)
        return est_mfu, step, tokens / step, None
    parts = step_time(spec, layout, cluster, mfu, mem)
    step = parts.total
    return flops / (step * world * peak), step, tokens / step, parts


def _with(spec: JobSpec, layout: Layout) -> JobSpec:
    parallel = spec.parallel.model_copy(
        update={
            "tensor": layout.tp,
            "pipeline": layout.pp,
            "context": layout.cp,
            "virtual_stages": layout.vp,
            "sequence_parallel": layout.sequence_parallel,
            "distributed_optimizer": layout.distributed_optimizer,
        }
    )
    train = spec.train.model_copy(update={"micro_batch_size": layout.micro_batch, "recompute": layout.recompute})
    return spec.model_copy(update={"parallel": parallel, "train": train})


def _valid(spec: JobSpec, layout: Layout, cluster: Cluster) -> bool:
    return not spec_problems(_with(spec, layout), cluster.world, cluster.gpus_per_node)


def fixes(spec: JobSpec, cluster: Cluster) -> list[Fix]:
    """Single changes that make a job that does not fit fit, smallest memory first."""
    base = Layout.of(spec)
    trials: list[tuple[str, Any, Layout]] = []
    for tp in divisors(cluster.gpus_per_node):
        if tp > base.tp:
            trials.append(("parallel.tensor", tp, replace(base, tp=tp, sequence_parallel=True)))
    for pp in divisors(spec.model.num_layers):
        if pp > base.pp:
            trials.append(("parallel.pipeline", pp, replace(base, pp=pp)))
    for mb in reversed(divisors(base.micro_batch)):  # the largest micro-batch that fits: the least change, as for TP and PP
        if mb < base.micro_batch:
            trials.append(("train.micro_batch_size", mb, replace(base, micro_batch=mb)))
    stronger = {"none": ("selective", "full"), "selective": ("full",), "full": ()}[base.recompute]
    for rc in stronger:
        trials.append(("train.recompute", rc, replace(base, recompute=rc)))
    if not base.distributed_optimizer:
        trials.append(("parallel.distributed_optimizer", True, replace(base, distributed_optimizer=True)))
    if base.tp > 1 and not base.sequence_parallel:
        trials.append(("parallel.sequence_parallel", True, replace(base, sequence_parallel=True)))
    found: dict[str, Fix] = {}
    for name, value, layout in trials:
        if name in found or not _valid(spec, layout, cluster):
            continue
        mem = memory(spec, layout, cluster)
        if mem.fits:
            found[name] = Fix(name, value, mem.total / GIB)
    return sorted(found.values(), key=lambda f: f.memory_gib)


def plan(spec: JobSpec, cluster: Cluster, mfu: float | None = None) -> Plan:
    """Plan ``spec`` on ``cluster``; the caller has checked :func:`spec_problems` first."""
    mfu = mfu or default_mfu(cluster)
    layout = Layout.of(spec)
    model_parallel = layout.tp * layout.pp * layout.cp
    dp = cluster.world // model_parallel
    vocab = padded_vocab(tokenizer_vocab(spec) or 0, spec.model.make_vocab_size_divisible_by, layout.tp)
    mem = memory(spec, layout, cluster)
    est_mfu, step, tps, parts = _timing(spec, layout, cluster, mfu, mem)
    warnings = []
    if layout.tp > 1 and not layout.sequence_parallel:
        warnings.append("parallel.sequence_parallel is off with tensor > 1: activations are not split (turn it on to save memory)")
    microbatches = max(spec.train.global_batch_size // (layout.micro_batch * dp), 1)
    if layout.pp > 1 and microbatches < 4 * layout.pp:
        bubble = 100 * (layout.pp - 1) / ((layout.vp or 1) * microbatches)
        warnings.append(f"fewer than 4 x pipeline micro-batches per step: the pipeline bubble costs about {bubble:.0f} % of the step")
    if cluster.gpu.name != "cpu" and spec.launch.gpus_per_node != cluster.gpus_per_node:
        warnings.append(
            f"launch.gpus_per_node={spec.launch.gpus_per_node} differs from the cluster's {cluster.gpus_per_node}; the plan uses the cluster"
        )
    return Plan(
        job=spec.name,
        nodes=cluster.nodes,
        gpus_per_node=cluster.gpus_per_node,
        gpu=cluster.gpu.name,
        world=cluster.world,
        layout=layout,
        data_parallel=dp,
        microbatches_per_step=spec.train.global_batch_size // (layout.micro_batch * dp),
        padded_vocab=vocab,
        parameters=parameter_count(spec, layout.tp)["total"],
        flops_per_iteration=flops_per_iteration(spec, vocab),
        memory=mem,
        mfu_assumed=est_mfu,
        step_seconds=step,
        tokens_per_second=tps,
        tokens_per_iteration=spec.train.global_batch_size * spec.model.seq_length,
        fixes=tuple(fixes(spec, cluster)) if mem.fits is False else (),
        warnings=tuple(warnings),
        peak=rank_peak(spec=spec, cluster=cluster),
        rates=job_rates(cluster),
        iterations=spec.train.train_iters,
        time=parts,
        continuations=continuations(spec, cluster, mfu),
        min_nodes=spec.launch.elastic.min_nodes if spec.launch.elastic else None,
    )


def without_elastic(spec: JobSpec) -> JobSpec:
    return spec.model_copy(update={"launch": spec.launch.model_copy(update={"elastic": None})})


def shrunk(cluster: Cluster, hosts: tuple[str, ...]) -> Cluster:
    """The cluster of a job continuing on ``hosts`` (a subset of its nodes): their count and measured rates."""
    return replace(cluster, nodes=len(hosts), hosts=hosts, rates=tuple(r for r in cluster.rates if r.host in hosts))


def continuations(spec: JobSpec, cluster: Cluster, mfu: float | None = None) -> tuple[Continuation, ...]:
    """Every smaller node count ``launch.elastic`` lets the job continue on, largest first, planned on the first nodes
    of the cluster (the nodes actually left are planned again when it happens): a count whose layout cannot keep the
    global batch is not among them, one that does not fit memory says so (``fits`` False: it is not used)."""
    if spec.launch.elastic is None:
        return ()
    base = without_elastic(spec)
    out = []
    for n in elastic_counts(spec, cluster.nodes - 1, cluster.gpus_per_node):
        smaller = plan(base, shrunk(cluster, cluster.hosts[:n]) if len(cluster.hosts) >= n else replace(cluster, nodes=n), mfu)
        out.append(Continuation(n, smaller.data_parallel, smaller.microbatches_per_step, smaller.tokens_per_second, smaller.fits))
    return tuple(out)


def candidates(spec: JobSpec, cluster: Cluster, mfu: float | None = None) -> list[Candidate]:
    """Every valid layout that fits with SUGGEST_HEADROOM to spare, fastest first (then the smaller): TP inside a node,
    PP and CP dividing what they split, virtual stages dividing a stage's layers (where the step's micro-batches are a
    multiple of PP, as Megatron-LM's interleaved schedule needs), micro-batches up to 16, each recompute mode, and the
    distributed optimizer (both ways unless the spec turns it on); sequence parallelism with every TP above 1."""
    mfu = mfu or default_mfu(cluster)
    m, t = spec.model, spec.train
    world = cluster.world
    heads = m.num_attention_heads
    tps = [x for x in divisors(cluster.gpus_per_node) if heads % x == 0 and m.query_groups % x == 0 and m.ffn % x == 0]
    pps = [x for x in divisors(m.num_layers) if world % x == 0]
    cps = [x for x in (1, 2, 4, 8, 16) if x == 1 or m.seq_length % (2 * x) == 0]
    recomputes = ("none", "selective", "full")
    dist_opts = (True,) if spec.parallel.distributed_optimizer else (False, True)
    results: list[Candidate] = []
    lab = spec.launch.trainer == "lab"
    for tp, pp, cp in product(tps, pps, cps):
        if world % (tp * pp * cp) or (lab and (pp > 1 or cp > 1)):
            continue
        dp = world // (tp * pp * cp)
        if t.global_batch_size % dp:
            continue
        per_rank = t.global_batch_size // dp
        mbs = [x for x in divisors(per_rank) if x <= 16]
        per_stage = m.num_layers // pp
        for mb, rc, dist in product(mbs, recomputes, dist_opts):
            # Megatron-LM's interleaved schedule needs the micro-batches of a step to be a multiple of PP
            interleaved = pp > 1 and (per_rank // mb) % pp == 0
            for vp in [None] + ([v for v in divisors(per_stage) if v > 1] if interleaved else []):
                layout = Layout(tp, pp, cp, vp, mb, rc, tp > 1, dist)
                mem = memory(spec, layout, cluster)
                if mem.fits is False or (mem.capacity and mem.total > mem.capacity * (1 - SUGGEST_HEADROOM)):
                    continue
                est, step, tok, parts = _timing(spec, layout, cluster, mfu, mem)
                results.append(Candidate(layout, dp, mem.total / GIB, est, step, tok, parts))
    results.sort(key=lambda c: (-round(c.tokens_per_second, 6), c.memory_gib))
    return results


def suggest(spec: JobSpec, cluster: Cluster, mfu: float | None = None, top: int = 10) -> list[Candidate]:
    """The ``top`` fastest splits of the model over GPUs (TP x PP), each with its best context-parallel size,
    micro-batch, virtual stages, recomputation and optimizer, ranked by estimated tokens/s (then by memory)."""
    best: dict[tuple[int, int], Candidate] = {}
    for c in candidates(spec, cluster, mfu):
        best.setdefault((c.layout.tp, c.layout.pp), c)
    return list(best.values())[:top]


def why(ranked: list[Candidate]) -> list[str]:
    """Why the first layout wins: where its iteration goes, and against each of the next two the mechanisms that
    make the difference (seconds per iteration, largest first)."""
    if not ranked or ranked[0].time is None:
        return []
    best = ranked[0]
    assert best.time is not None
    shares = ", ".join(f"{name} {share:.0%}" for name, share in list(best.time.shares().items())[:4])
    lines = [f"#1 {best.layout.describe()}: {best.step_seconds:.3g} s per iteration; {shares}"]
    for i, other in enumerate(ranked[1:3], 2):
        if other.time is None:
            continue
        ahead = other.step_seconds - best.step_seconds
        mine, theirs = best.time.seconds(), other.time.seconds()
        diffs = sorted(((theirs[k] - mine[k], k) for k in mine), reverse=True)
        gains = [f"{k} {d:.3g} s" for d, k in diffs if d > 0.005 * other.step_seconds][:2]
        costs = [f"{k} {-d:.3g} s" for d, k in reversed(diffs) if -d > 0.005 * other.step_seconds][:2]
        text = f"#1 beats #{i} ({other.layout.describe()}) by {ahead:.3g} s per iteration"
        text += f": less {', '.join(gains)}" if gains else ""
        text += f"; more {', '.join(costs)}" if costs else ""
        lines.append(text)
    return lines
