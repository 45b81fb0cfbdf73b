"""megaprov's lab trainer: Megatron-style GPT pre-training on CPU nodes (the container lab, CI).

``python megaprov/training/trainer.py <pretrain_gpt.py arguments>`` under torchrun. ``megaprov train`` copies this file into
the job directory and runs it from there, so the nodes need torch and megatron-core but not megaprov: it imports
nothing of megaprov. It takes the same arguments megaprov
renders for ``pretrain_gpt.py`` (the subset below; others are reported and ignored) and runs on megatron-core:

- ``GPTModel`` from megatron-core's local layer spec with :class:`CpuCoreAttention` (scaled dot-product attention)
  plugged in through the spec, because megatron-core's ``DotProductAttention`` needs CUDA's RNG tracker;
- tensor parallelism through megatron-core's parallel layers (``initialize_model_parallel(tp, 1)``), data
  parallelism with torch DDP over Megatron's data-parallel group, all on gloo;
- ``GPTDataset`` on the ``.bin/.idx`` that ``megaprov data prepare`` writes, ``OptimizerParamScheduler`` for the
  learning rate and weight decay;
- the iteration line in Megatron-LM's format (``training_log``), printed by the last rank as Megatron does, so
  one log parser serves both trainers;
- checkpoints every ``--save-interval`` iterations in ``iter_{:07d}/mp_rank_{:02d}/model_optim_rng.pt`` with
  ``latest_checkpointed_iteration.txt`` written last and atomically; ``--load`` resumes from the marker;
- per-rank evidence for the throughput verdict, printed by every rank into its own node's log: at start-up the
  rank's fp32 GEMM rate (a one-second measurement, compared with the rate the node was measured at when it was
  built), and every ``STRAGGLER_INTERVAL`` iterations its compute time per iteration without the time it waited in
  collectives (the idea of Megatron's ``--log-straggler``, per rank instead of min/max, so that the follower knows
  the node from the log the line is in). Data-parallel gradients are averaged with one explicit all-reduce after
  the backward passes (instead of DDP's hooks, which hide the wait for a slow peer inside ``backward``).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

LOG_TIME = "%Y-%m-%d %H:%M:%S.%f"
MARKER = "latest_checkpointed_iteration.txt"
STRAGGLER_INTERVAL = 10  # iterations per per-rank compute-time line
GEMM_SIZE = 1024  # the start-up GEMM: the size the preflight role measures CPU nodes with


def say(line: str) -> None:
    """One log line in one write: with several ranks on a node sharing one unbuffered stdout (PYTHONUNBUFFERED),
    print() writes the text and the newline separately, and another rank's line can land between them."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def padded_vocab(vocab: int, divisible_by: int, tp: int) -> int:
    """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x TP (as megaprov's planner)."""
    multiple = divisible_by * tp
    return -(-vocab // multiple) * multiple


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The pretrain_gpt.py arguments this trainer implements; the rest are returned to be reported."""
    p = argparse.ArgumentParser(prog="megaprov trainer", allow_abbrev=False)
    add = p.add_argument
    for name in (
        "num-layers",
        "hidden-size",
        "num-attention-heads",
        "seq-length",
        "max-position-embeddings",
        "micro-batch-size",
        "global-batch-size",
        "train-iters",
    ):
        add(f"--{name}", type=int, required=True)
    add("--ffn-hidden-size", type=int)
    add("--num-query-groups", type=int)
    add("--group-query-attention", action="store_true")
    add("--position-embedding-type", default="learned_absolute", choices=["learned_absolute", "rope", "none"])
    add("--normalization", default="LayerNorm", choices=["LayerNorm", "RMSNorm"])
    add("--init-method-std", type=float, default=0.02)
    add("--hidden-dropout", type=float, default=0.1)
    add("--attention-dropout", type=float, default=0.1)
    add("--make-vocab-size-divisible-by", type=int, default=128)
    add("--tensor-model-parallel-size", type=int, default=1)
    add("--pipeline-model-parallel-size", type=int, default=1)
    add("--context-parallel-size", type=int, default=1)
    add("--lr", type=float, required=True)
    add("--min-lr", type=float, default=0.0)
    add("--lr-decay-style", default="cosine", choices=["constant", "linear", "cosine", "inverse-square-root"])
    add("--lr-decay-iters", type=int)
    add("--lr-warmup-iters", type=int, default=0)
    add("--weight-decay", type=float, default=0.01)
    add("--adam-beta1", type=float, default=0.9)
    add("--adam-beta2", type=float, default=0.999)
    add("--adam-eps", type=float, default=1e-8)
    add("--clip-grad", type=float, default=1.0)
    add("--seed", type=int, default=1234)
    add("--data-path", nargs="*", default=[])
    add("--mock-data", action="store_true")
    add("--split", default="969,30,1")
    add("--tokenizer-type", default="NullTokenizer", choices=["NullTokenizer"])
    add("--vocab-size", type=int)
    add("--save")
    add("--load")
    add("--save-interval", type=int)
    add("--ckpt-format", default="torch", choices=["torch", "torch_dist"])
    add("--log-interval", type=int, default=100)
    add("--eval-interval", type=int, default=1000)
    add("--eval-iters", type=int, default=100)
    add("--distributed-backend", default="gloo", choices=["gloo"])
    add("--fp32", dest="fp32", action="store_true")
    add("--exit-signal-handler", action="store_true")
    return p.parse_known_args(argv)


def flops_per_iteration(args: argparse.Namespace, vocab: int) -> float:
    """Model FLOPs of one iteration (forward + backward = 3 x forward, 2 FLOPs per multiply-add): matmuls of
    attention and MLP, the attention scores and context, the logits. With a 4h MLP this is Megatron's
    72 B s L h^2 (1 + s/6h + V/12hL)."""
    b, s, h, layers = args.global_batch_size, args.seq_length, args.hidden_size, args.num_layers
    ffn = args.ffn_hidden_size or 4 * h
    heads = args.num_attention_heads
    groups = args.num_query_groups if args.group_query_attention and args.num_query_groups else heads
    qkv = h * h * (1 + 2 * groups / heads)
    per_token = 2 * layers * (qkv + h * h + 2 * h * ffn) + 4 * layers * s * h + 2 * h * vocab
    return float(3.0 * b * s * per_token)


def log_line(
    iteration: int,
    train_iters: int,
    consumed: int,
    ms: float,
    tflops: float,
    lr: float,
    batch: int,
    loss: float,
    grad_norm: float,
    skipped: int,
    nan: int,
) -> str:
    """One iteration line exactly as Megatron-LM's training_log prints it (core_v0.16.1, fp32/bf16: loss scale 1.0)."""
    line = f" [{datetime.now().strftime(LOG_TIME)}]"
    line += f" iteration {iteration:8d}/{train_iters:8d} |"
    line += f" consumed samples: {consumed:12d} |"
    line += f" elapsed time per iteration (ms): {ms:.1f} |"
    line += f" throughput per GPU (TFLOP/s/GPU): {fixed(tflops)} |"
    line += f" learning rate: {lr:.6E} |"
    line += f" global batch size: {batch:5d} |"
    line += f" lm loss: {loss:.6E} |"
    line += " loss scale: 1.0 |"
    line += f" grad norm: {grad_norm:.3f} |"
    line += f" number of skipped iterations: {skipped:3d} |"
    line += f" number of nan iterations: {nan:3d} |"
    return line


def fixed(value: float, decimals: int = 1, digits: int = 3) -> str:
    """``value`` in fixed point with Megatron's ``decimals``, or more where those would leave fewer than ``digits``
    significant digits: a CPU rank's few GFLOP/s print as 0.0 TFLOP/s/GPU with Megatron's ``.1f``."""
    if value > 0 and math.isfinite(value):
        decimals = max(decimals, digits - 1 - math.floor(math.log10(value)))
    return f"{value:.{decimals}f}"


class IntervalTimer:
    """Megatron's ``interval-time`` timer: it runs through the whole training loop (data, step, logging, the waits
    for other ranks) and is stopped only while a checkpoint is saved (and, in Megatron, while evaluating, which this
    trainer does not do). :meth:`lap` reads it at a logged iteration and starts the next interval."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._banked = 0.0
        self._since: float | None = None

    def start(self) -> None:
        self._since = self._clock()

    def stop(self) -> None:
        if self._since is not None:
            self._banked += self._clock() - self._since
            self._since = None

    def lap(self) -> float:
        """Seconds counted since the previous lap; a running timer keeps running."""
        now = self._clock()
        seconds = self._banked + (now - self._since if self._since is not None else 0.0)
        self._banked = 0.0
        if self._since is not None:
            self._since = now
        return seconds


class LogWindow:
    """The iterations since the last logged one: their mean loss, and the interval timer that gives training_log's
    elapsed time per iteration (the interval's wall time over its iterations) and the TFLOP/s per rank from it."""

    def __init__(self, flops: float, world: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.flops, self.world = flops, world
        self.timer = IntervalTimer(clock)
        self.loss = 0.0
        self.count = 0

    def add(self, loss: float) -> None:
        self.loss += loss
        self.count += 1

    def close(self, iteration: int, train_iters: int, consumed: int, lr: float, batch: int, grad_norm: float, skipped: int, nan: int) -> str:
        """The iteration line for the window, which starts over."""
        per_iteration = self.timer.lap() / max(self.count, 1)
        tflops = self.flops / per_iteration / self.world / 1e12 if per_iteration > 0 else 0.0
        line = log_line(
            iteration, train_iters, consumed, per_iteration * 1000.0, tflops, lr, batch, self.loss / max(self.count, 1), grad_norm, skipped, nan
        )
        self.loss, self.count = 0.0, 0
        return line


def unflatten_into(flat: Any, tensors: list[Any]) -> None:
    """Copy consecutive slices of ``flat`` back into ``tensors`` (the inverse of concatenating them flattened)."""
    offset = 0
    for tensor in tensors:
        count = tensor.numel()
        tensor.copy_(flat[offset : offset + count].view_as(tensor))
        offset += count


def gemm_rate(size: int = GEMM_SIZE, seconds: float = 1.0) -> float:
    """This process's fp32 GEMM rate in TFLOP/s: the median of ``size``^3 products over ``seconds`` after a warm-up."""
    import statistics

    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    rates: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(rates) < 3:
        begin = time.perf_counter()
        torch.mm(a, b)
        rates.append(2.0 * size**3 / (time.perf_counter() - begin))
    return statistics.median(rates) / 1e12


def compute_line(rank: int, tflops: float, size: int, threads: int) -> str:
    """The start-up GEMM rate of one rank (megaprov's own line; the follower reads it from the rank's node log)."""
    return (
        f" [{datetime.now().strftime(LOG_TIME)}] megaprov compute | rank: {rank} | device: cpu | dtype: float32 | gemm size: {size} |"
        f" threads: {threads} | rate (TFLOP/s): {tflops:.6f} |"
    )


def straggler_line(rank: int, first: int, last: int, compute_ms: float, wait_ms: float) -> str:
    """One rank's compute time per iteration over ``first``..``last``, without the time it waited in collectives."""
    return (
        f" [{datetime.now().strftime(LOG_TIME)}] megaprov straggler | rank: {rank} | iterations: {first}-{last} |"
        f" compute time per iteration (ms): {compute_ms:.2f} | collective wait per iteration (ms): {wait_ms:.2f} |"
    )


def blend(data_path: list[str]) -> tuple[list[str], list[float] | None]:
    """Megatron's --data-path (a prefix, or weight prefix pairs) as a dataset blend."""
    if len(data_path) == 1:
        return [data_path[0]], None
    prefixes, weights = data_path[1::2], [float(w) for w in data_path[0::2]]
    return prefixes, None if len(prefixes) == 1 else weights


def checkpoint_file(directory: str, iteration: int, tp_rank: int) -> Path:
    return Path(directory) / f"iter_{iteration:07d}" / f"mp_rank_{tp_rank:02d}" / "model_optim_rng.pt"


def read_marker(directory: str | None) -> int:
    """Iteration named by latest_checkpointed_iteration.txt, or 0."""
    if not directory:
        return 0
    path = Path(directory) / MARKER
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return 0
    if not text.isdigit():
        raise SystemExit(f"megaprov.trainer: {path} holds {text!r}, not an iteration number; remove it to start over")
    return int(text)


def write_marker(directory: str, iteration: int) -> None:
    """Written last, after every rank saved: a reader never sees a marker for an incomplete checkpoint."""
    path = Path(directory) / MARKER
    tmp = path.with_name(f".{MARKER}.{os.getpid()}")
    tmp.write_text(f"{iteration}\n")
    os.replace(tmp, path)


def build_model(args: argparse.Namespace, vocab: int, tp: int) -> Any:
    """megatron-core's GPTModel from the local layer spec with :class:`CpuCoreAttention` plugged in through the
    spec (after ``initialize_model_parallel``). The benchmark's bare loop builds the same model with it."""
    import torch
    import torch.nn.functional as F  # noqa: N812
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.module import MegatronModule

    class CpuCoreAttention(MegatronModule):  # type: ignore[misc]
        """Core attention for CPU: torch's scaled_dot_product_attention on this rank's heads ([s, b, n, d] in,
        [s, b, n*d] out, like DotProductAttention), causal, with grouped-query heads repeated."""

        def __init__(
            self,
            config: Any,
            layer_number: int,
            attn_mask_type: Any,
            attention_type: str,
            attention_dropout: float | None = None,
            softmax_scale: float | None = None,
            cp_comm_type: str | None = None,
            pg_collection: Any = None,
        ) -> None:
            super().__init__(config=config)
            tp = parallel_state.get_tensor_model_parallel_world_size()
            self.heads = config.num_attention_heads // tp
            self.groups = config.num_query_groups // tp
            self.dropout = config.attention_dropout if attention_dropout is None else attention_dropout
            self.scale = softmax_scale
            self.causal = attn_mask_type == AttnMaskType.causal

        def forward(
            self,
            query: Any,
            key: Any,
            value: Any,
            attention_mask: Any,
            attn_mask_type: Any = None,
            attention_bias: Any = None,
            packed_seq_params: Any = None,
        ) -> Any:
            s, b = query.shape[0], query.shape[1]
            q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
            if self.groups != self.heads:
                k = k.repeat_interleave(self.heads // self.groups, dim=1)
                v = v.repeat_interleave(self.heads // self.groups, dim=1)
            mask = None if self.causal or attention_mask is None else ~attention_mask
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0, is_causal=self.causal, scale=self.scale
            )
            return out.permute(2, 0, 1, 3).reshape(s, b, -1)

    config = TransformerConfig(
        num_layers=args.num_layers,
        hidden_size=args.hidden_size,
        num_attention_heads=args.num_attention_heads,
        num_query_groups=args.num_query_groups if args.group_query_attention else None,
        ffn_hidden_size=args.ffn_hidden_size,
        init_method_std=args.init_method_std,
        hidden_dropout=args.hidden_dropout,
        attention_dropout=args.attention_dropout,
        normalization=args.normalization,
        tensor_model_parallel_size=tp,
        use_cpu_initialization=True,
        params_dtype=torch.float32,
        bias_activation_fusion=False,
        masked_softmax_fusion=False,
        persist_layer_norm=False,
        bias_dropout_fusion=False,
        gradient_accumulation_fusion=False,
        apply_rope_fusion=False,
    )
    layer_spec = get_gpt_layer_local_spec()
    layer_spec.submodules.self_attention.submodules.core_attention = CpuCoreAttention
    model = GPTModel(
        config=config,
        transformer_layer_spec=layer_spec,
        vocab_size=vocab,
        max_sequence_length=args.max_position_embeddings,
        position_embedding_type=args.position_embedding_type,
    )
    return model


def main(argv: list[str] | None = None) -> int:
    args, ignored = parse_args(sys.argv[1:] if argv is None else argv)
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig, MockGPTDataset
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    last = rank == world - 1
    tp = args.tensor_model_parallel_size
    if args.pipeline_model_parallel_size != 1 or args.context_parallel_size != 1:
        raise SystemExit("megaprov.trainer: pipeline and context parallelism need pretrain_gpt.py on GPUs (set parallel.pipeline/context to 1)")
    parallel_state.initialize_model_parallel(tp, 1)
    dp_group = parallel_state.get_data_parallel_group()
    tp_group = parallel_state.get_tensor_model_parallel_group()
    dp, dp_rank = parallel_state.get_data_parallel_world_size(), parallel_state.get_data_parallel_rank()
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    micro, gbs = args.micro_batch_size, args.global_batch_size
    if gbs % (micro * dp):
        raise SystemExit(f"megaprov.trainer: global batch {gbs} is not a multiple of micro batch {micro} x data parallel {dp}")
    accumulation = gbs // (micro * dp)
    if ignored and rank == 0:
        say(f"megaprov.trainer: not implemented on CPU, ignored: {' '.join(a for a in ignored if a.startswith('--'))}")

    # This rank's GEMM rate now, against the node's stored rate: a node throttled since it was built shows here.
    say(compute_line(rank, gemm_rate(), GEMM_SIZE, torch.get_num_threads()))

    torch.manual_seed(args.seed)
    tokenizer = NullTokenizer(vocab_size=args.vocab_size or 256)
    vocab = padded_vocab(tokenizer.vocab_size, args.make_vocab_size_divisible_by, tp)
    model = build_model(args, vocab, tp)
    if dp > 1:  # every data-parallel replica starts from the same weights (as DDP's constructor ensures)
        weights = [p.data for p in model.parameters()]
        flat = torch.cat([w.reshape(-1) for w in weights])
        dist.broadcast(flat, src=dist.get_global_rank(dp_group, 0), group=dp_group)
        unflatten_into(flat, weights)
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    groups: list[dict[str, Any]] = [{"params": decay}, {"params": no_decay, "wd_mult": 0.0}]
    optimizer = torch.optim.AdamW(
        groups,
        lr=args.lr,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_eps,
        weight_decay=args.weight_decay,
    )
    scheduler = OptimizerParamScheduler(
        optimizer,
        init_lr=0.0,
        max_lr=args.lr,
        min_lr=args.min_lr,
        lr_warmup_steps=args.lr_warmup_iters * gbs,
        lr_decay_steps=(args.lr_decay_iters or args.train_iters) * gbs,
        lr_decay_style=args.lr_decay_style,
        start_wd=args.weight_decay,
        end_wd=args.weight_decay,
        wd_incr_steps=args.train_iters * gbs,
        wd_incr_style="constant",
    )

    # Resume: every rank reads its own tensor-parallel shard of the iteration the marker names.
    iteration = read_marker(args.load)
    consumed = 0
    if iteration:
        state = torch.load(checkpoint_file(args.load, iteration, tp_rank), map_location="cpu", weights_only=False)
        saved = state["args"]
        for field in ("num_layers", "hidden_size", "num_attention_heads", "tensor_model_parallel_size"):
            if saved[field] != getattr(args, field):
                raise SystemExit(
                    f"megaprov.trainer: checkpoint {args.load} iteration {iteration} has {field}={saved[field]}, this job "
                    f"{getattr(args, field)}; use another checkpoint directory or the same model shape"
                )
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["opt_param_scheduler"])
        torch.set_rng_state(state["rng"])
        consumed = state["consumed_samples"]
        if rank == 0:
            say(f"  successfully loaded checkpoint from {args.load} [ t {tp_rank + 1}/{tp}, p 1/1 ] at iteration {iteration}")

    samples = args.train_iters * gbs
    data_config = GPTDatasetConfig(
        random_seed=args.seed,
        sequence_length=args.seq_length,
        split=args.split,
        tokenizer=tokenizer,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        blend=None if args.mock_data else blend(args.data_path),
        path_to_cache=os.path.join(args.save, "index-cache") if args.save else None,
        mid_level_dataset_surplus=0.005,
    )
    dataset_class = MockGPTDataset if args.mock_data else GPTDataset
    # The builder itself builds (and caches the index) on rank 0 first, then on the others after a barrier.
    train_data, _, _ = BlendedMegatronDatasetBuilder(dataset_class, [samples, 0, 0], lambda: True, data_config).build()
    if rank == 0:  # which megatron.core and which compiled dataset helpers this job runs on (the checkout's, on a cluster)
        import megatron.core
        from megatron.core.datasets import helpers_cpp  # what megatron.core.datasets.helpers wraps, the compiled module

        core_dir = os.path.dirname(os.path.dirname(os.path.dirname(megatron.core.__file__)))  # the import root
        say(f"> megatron.core from {core_dir}, dataset helpers {helpers_cpp.__file__}")

    flops = flops_per_iteration(args, vocab)
    window = LogWindow(flops, world)
    skipped = nan_iters = 0
    # --exit-signal-handler (as Megatron): SIGTERM (systemctl stop, Slurm preemption) ends the run after the current
    # iteration with a checkpoint; every rank agrees through an all-reduce so they save the same iteration.
    stop = torch.zeros(1)
    if args.exit_signal_handler:
        signal.signal(signal.SIGTERM, lambda *_: stop.fill_(1.0))
    params = list(model.parameters())
    norm_params = [p for p in params if getattr(p, "tensor_model_parallel", False) or tp_rank == 0]
    model.train(True)
    straggler = {"compute": 0.0, "wait": 0.0, "count": 0, "first": iteration + 1}
    window.timer.start()
    while iteration < args.train_iters:
        start = time.monotonic()
        waited = 0.0
        optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros(1)
        for m in range(accumulation):
            first = consumed + m * micro * dp + dp_rank * micro
            batch = [train_data[first + i] for i in range(micro)]
            tokens = torch.stack([torch.as_tensor(x["tokens"]) for x in batch]).long()
            labels = torch.stack([torch.as_tensor(x["labels"]) for x in batch]).long()
            loss_mask = torch.stack([torch.as_tensor(x["loss_mask"]) for x in batch]).float()
            positions = torch.stack([torch.as_tensor(x["position_ids"]) for x in batch]).long()
            losses = model(tokens, positions, None, labels=labels)
            loss = (losses.float() * loss_mask).sum() / loss_mask.sum().clamp(min=1)
            (loss / accumulation).backward()
            loss_sum += loss.detach() / accumulation
        if dp > 1:  # one all-reduce averages the gradients and sums the loss (a group of one would still cost a round trip)
            grads = [p.grad for p in params if p.grad is not None]
            flat = torch.cat([g.reshape(-1) for g in grads] + [loss_sum])
            began = time.monotonic()
            dist.all_reduce(flat, group=dp_group)
            waited += time.monotonic() - began
            unflatten_into(flat[:-1] / dp, grads)
            loss_sum = flat[-1:]
        loss_value = loss_sum.item() / dp
        # Gradient norm over the whole model: tensor-parallel shards count on every TP rank, replicated parameters once.
        counted = [p.grad for p in norm_params if p.grad is not None]
        squares = torch.stack(torch._foreach_norm(counted)).square().sum().reshape(1) if counted else torch.zeros(1)
        if tp > 1:
            began = time.monotonic()
            dist.all_reduce(squares, group=tp_group)
            waited += time.monotonic() - began
        grad_norm = math.sqrt(squares.item())
        if not math.isfinite(grad_norm) or not math.isfinite(loss_value):
            nan_iters += 1
            skipped += 1
        else:
            if args.clip_grad > 0 and grad_norm > args.clip_grad:
                torch._foreach_mul_([p.grad for p in params if p.grad is not None], args.clip_grad / (grad_norm + 1e-6))
            optimizer.step()
        scheduler.step(increment=gbs)
        iteration += 1
        consumed += gbs
        window.add(loss_value)
        if iteration % args.log_interval == 0:
            # Every rank closes the window; the last prints it, as Megatron's print_rank_last. No barrier before the
            # read (Megatron has one): the all-reduces of every iteration already keep the ranks within one step.
            line = window.close(iteration, args.train_iters, consumed, optimizer.param_groups[0]["lr"], gbs, grad_norm, skipped, nan_iters)
            if last:
                say(line)
            skipped = nan_iters = 0
        stopping = False
        if args.exit_signal_handler:
            flag = stop.clone()
            began = time.monotonic()
            dist.all_reduce(flag)
            waited += time.monotonic() - began
            stopping = flag.item() > 0
        took = time.monotonic() - start
        straggler["compute"] += took - waited
        straggler["wait"] += waited
        straggler["count"] += 1
        if iteration % STRAGGLER_INTERVAL == 0 or iteration == args.train_iters:
            n = straggler["count"]
            say(straggler_line(rank, int(straggler["first"]), iteration, 1000 * straggler["compute"] / n, 1000 * straggler["wait"] / n))
            straggler = {"compute": 0.0, "wait": 0.0, "count": 0, "first": iteration + 1}
        if args.save and (stopping or (args.save_interval and (iteration % args.save_interval == 0 or iteration == args.train_iters))):
            window.timer.stop()  # as Megatron's save_checkpoint_and_time: the save is not training time
            save(args, iteration, consumed, model, optimizer, scheduler, tp_rank, dp_rank, rank, tp)
            window.timer.start()
        if stopping:
            if rank == 0:
                say(f"[{datetime.now():%Y-%m-%d %H:%M:%S}] exiting program after receiving SIGTERM.")
            break
    dist.barrier()
    dist.destroy_process_group()
    return 0


def save(
    args: argparse.Namespace,
    iteration: int,
    consumed: int,
    model: Any,
    optimizer: Any,
    scheduler: Any,
    tp_rank: int,
    dp_rank: int,
    rank: int,
    tp: int,
) -> None:
    """One file per tensor-parallel rank (written by data-parallel rank 0), then the marker by rank 0 after a barrier."""
    import torch
    import torch.distributed as dist

    if dp_rank == 0:
        path = checkpoint_file(args.save, iteration, tp_rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        torch.save(
            {
                "iteration": iteration,
                "consumed_samples": consumed,
                "args": vars(args),
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "opt_param_scheduler": scheduler.state_dict(),
                "rng": torch.get_rng_state(),
            },
            tmp,
        )
        os.replace(tmp, path)
    dist.barrier()
    if rank == 0:
        write_marker(args.save, iteration)
        say(
            f"  [{datetime.now().strftime(LOG_TIME)}] successfully saved checkpoint from iteration {iteration:7d} to {args.save} "
            f"[ t {tp_rank + 1}/{tp}, p 1/1 ]"
        )
    dist.barrier()


if __name__ == "__main__":
    sys.exit(main())
