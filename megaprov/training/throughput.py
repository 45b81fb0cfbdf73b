"""The step-time model: how long one Megatron-LM iteration of a dense GPT takes on one layout, from the mechanisms that
set Megatron-LM's throughput, each a separate term so that ``plan --suggest`` can say why a layout wins.

Everything here is arithmetic on numbers (no job spec): the planner turns a spec, a layout and a cluster into a
:class:`Work` and a :class:`Hardware`, and this module returns a :class:`StepTime`. The terms, per micro-batch on
the critical pipeline stage:

- GEMMs: each of a layer's four weight GEMMs (QKV, attention projection, MLP in and out; the logits layer on the
  last stage) runs at the large-GEMM rate times a saturation factor per dimension, x / (x + GEMM_HALF): a GEMM with
  one side of GEMM_HALF elements runs at half the rate in that dimension (tile quantisation and the memory traffic
  of thin matrices). Backward is two GEMMs of the same three sizes (data and weight gradients), so twice the
  forward time.
- Core attention (flash/fused): its FLOPs (causal: half the s x s scores) at ATTENTION_EFFICIENCY of the GEMM rate
  on long sequences, less on short ones or the chunks of a context-parallel ring (ATTENTION_HALF); the flash backward
  does 2.5x the forward's FLOPs (it recomputes the scores). Unfused attention computes every
  score (the causal mask comes after) and moves each through memory (SCORE_BYTES, forward and backward).
- Memory-bound kernels: norms, dropout, residual adds, bias and activation functions move ELEMENT_BYTES_H bytes per
  hidden element and ELEMENT_BYTES_F per MLP element of a token (forward and backward) through HBM; the hidden part
  is split by tensor parallelism only with sequence parallelism. The cross-entropy casts, reduces and rewrites the
  fp32 logits: LOGIT_BYTES per vocabulary entry of a token, counted from Megatron-LM's code.
- Tensor parallelism: per layer four ring phases forward (all-gather before QKV and the MLP, reduce-scatter after the
  projection and the MLP; two all-reduces without sequence parallelism) and six backward (the row-parallel layers
  gather their output gradient; the column-parallel ones gather their input again for the weight gradient and
  reduce-scatter their input gradient, both asynchronously behind the GEMMs by default: Megatron-LM
  ``tensor_parallel/layers.py``), each moving (t-1)/t of the b x s x h activation. Six are exposed; with
  ``tp_comm_overlap`` (Transformer Engine's userbuffers) all ten overlap the GEMMs but for TP_EXPOSED of them.
- Context parallelism: the ring attention passes each rank's K and V chunk to the next c-1 times forward, and K, V
  and their gradients backward; the part that does not fit behind the attention is exposed.
- Recomputation: selective repeats the core attention's forward, full repeats each layer's whole forward.
- The pipeline: (m + (p - 1)/v) micro-batch slots on the slowest stage (1F1B; interleaved with v virtual stages,
  Narayanan et al. 2021); point-to-point sends of the activation (split over TP ranks with sequence parallelism),
  2v per micro-batch, exposed for P2P_EXPOSED of their time.
- Data parallelism: over the data- x context-parallel ranks, the gradient reduce-scatter (fp32 gradients with bf16,
  Megatron-LM's default; 16-bit with fp16) and the parameter all-gather with the distributed optimizer, an all-reduce
  without; overlapped (``overlap_grad_reduce``, ``overlap_param_gather``) with the last micro-batch's backward and the
  first's forward (with v virtual stages, each chunk's after its own last backward: the cooldown's remaining chunks
  hide it), what does not fit is exposed, and the last bucket always is (Megatron-LM's default bucket:
  max(40M, 1M x ranks) parameters, ``distributed/distributed_data_parallel.py``).
- Overlapped communication is not free: NCCL's kernels take SMs, so hidden data- and context-parallel communication
  slows the compute by CONTENTION of its length, and hidden tensor-parallel traffic (Megatron-LM's asynchronous
  backward collectives, Transformer Engine's userbuffers) by TP_CONTENTION of its length.
- The optimizer: Adam reads and writes OPTIMIZER_BYTES per parameter of the rank's shard, the gradient buffer is
  zeroed and its norm read (GRAD_BUFFER_BYTES per parameter of the stage).

Calibration: the constants below are the model's only free numbers. They were fitted once on Megatron-LM's
published H100 weak-scaling table and are checked against runs kept aside (``benchmarks/bench_planner.py`` prints
both, ``benchmarks/README.md`` records the error); hardware figures (peaks, HBM, link bandwidths) are the vendors'.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# ---- fitted on the H100 table (benchmarks/bench_planner.py --fit): GEMM_HALF, ELEMENT_BYTES_H, TP_EXPOSED, P2P_EXPOSED,
# CONTENTION, TP_CONTENTION (and the planner's TRAINING_SHARE); the others are derived from Megatron-LM's code or
# published figures, as their comments say
GEMM_HALF = 177.6  # elements: a dimension this small runs a GEMM at half the rate in that dimension
ATTENTION_EFFICIENCY = 0.57  # flash attention's rate on long sequences against a large GEMM's (see ATTENTION_HALF)
# FlashAttention-2 on an H100 (head size 128, causal, forward and backward; Dao 2023, Fig. 7) runs at about 200, 300 and
# 335 TFLOP/s at 512, 2k and 16k tokens: x / (x + 300) of its long-sequence rate; at 16k, 335 of the 598 TFLOP/s a
# large GEMM sustains in training there (989 x 0.78 x TRAINING_SHARE 0.774) is 0.56, 0.57 before the sequence factor.
ATTENTION_HALF = 300.0
ELEMENT_BYTES_H = 135.4  # bytes per hidden element per token per layer, forward and backward (about 68 16-bit accesses)
ELEMENT_BYTES_F = 10.0  # bytes per MLP element (bias + activation: 5 16-bit accesses)
# Megatron-LM's vocab-parallel cross entropy (tensor_parallel/cross_entropy.py, unfused: the default) per vocabulary entry
# of a token: the GEMM's bf16 output (2), .float() (2 + 4), max (4), subtract (4 + 4), exp (4 + 4), sum (4), divide
# (4 + 4); backward: scale by the loss gradient (4 + 4) and the cast back for the output GEMM (4 + 2).
LOGIT_BYTES = 54.0
TP_EXPOSED = 0.1779  # the part of the tensor-parallel ring phases tp_comm_overlap leaves on the critical path
P2P_EXPOSED = 0.9969  # the part of pipeline sends the schedule leaves exposed
BUCKET_PARAMETERS = 40_000_000  # Megatron-LM's default gradient bucket: max(40M, 1M x data-parallel ranks) parameters
CONTENTION = 0.1097  # compute slowdown per second of hidden data- and context-parallel communication (NCCL on SMs)
TP_CONTENTION = 0.07434  # the same for tensor-parallel traffic hidden behind the GEMMs
OPTIMIZER_BYTES = 30.0  # Adam on fp32 master weights: param, m, v read and written, fp32 grad read, bf16 param written
GRAD_BUFFER_BYTES = 8.0  # fp32 gradient buffer zeroed and read for the norm
SCORE_BYTES = 14.0  # per attention score, unfused: softmax and dropout forward (read 2, write 2 + 1 + 2), backward 7


@dataclass(frozen=True)
class Hardware:
    """Rates one rank sees, in FLOP/s and bytes/s."""

    gemm_flops: float  # what a large dense GEMM reaches (measured, or the published peak x the large-GEMM share)
    hbm: float  # memory bandwidth
    tp_link: float  # bus bandwidth of the tensor-parallel group's collectives
    pp_link: float  # between pipeline stages
    dp_link: float  # of the data-parallel group's collectives
    cp_link: float = 0.0  # of the context-parallel ring (unused at context 1)


@dataclass(frozen=True)
class Work:
    """One iteration of a dense GPT on one layout, in the sizes the terms need (per rank unless said)."""

    tokens: int  # rows of every GEMM: micro-batch x sequence / context parallel
    seq: int  # the whole sequence (attention keys)
    hidden: int
    heads: int  # attention heads
    q_width: int  # attention heads x head size
    kv_width: int  # query groups x head size
    ffn: int  # MLP width (one branch)
    gated: bool  # SwiGLU: two first-GEMM branches
    vocab: int  # padded vocabulary
    layers: int  # layers on the slowest stage
    tp: int
    pp: int
    vp: int
    cp: int
    dp: int
    microbatches: int  # per iteration per pipeline
    sequence_parallel: bool
    recompute: str  # none, selective, full
    stage_parameters: float  # parameters the slowest stage holds per rank
    distributed_optimizer: bool
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    tp_comm_overlap: bool
    scores_stored: bool = False  # unfused/local attention: the s x s scores go through memory
    grad_bytes: int = 4  # fp32 gradients (Megatron-LM's default with bf16; 2 with fp16 or --grad-reduce-in-bf16)
    param_bytes: int = 2
    act_bytes: int = 2  # an activation element as it is communicated (4 in fp32 training)


@dataclass(frozen=True)
class StepTime:
    """Seconds per iteration, by mechanism (their sum is the iteration)."""

    gemm: float
    attention: float
    elementwise: float
    logits: float
    recompute: float
    tensor_parallel: float
    context_parallel: float
    bubble: float
    pipeline_sends: float
    data_parallel: float
    contention: float
    optimizer: float
    parts: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def total(self) -> float:
        return (
            self.gemm
            + self.attention
            + self.elementwise
            + self.logits
            + self.recompute
            + self.tensor_parallel
            + self.context_parallel
            + self.bubble
            + self.pipeline_sends
            + self.data_parallel
            + self.contention
            + self.optimizer
        )

    def seconds(self) -> dict[str, float]:
        """Each mechanism's seconds per iteration, by the name an operator reads."""
        return {
            "GEMMs": self.gemm,
            "attention": self.attention,
            "memory-bound kernels": self.elementwise,
            "logits and loss": self.logits,
            "recomputation": self.recompute,
            "tensor-parallel communication": self.tensor_parallel,
            "context-parallel communication": self.context_parallel,
            "pipeline bubble": self.bubble,
            "pipeline sends": self.pipeline_sends,
            "data-parallel communication": self.data_parallel,
            "communication contention": self.contention,
            "optimizer": self.optimizer,
        }

    def shares(self) -> dict[str, float]:
        """Each mechanism's share of the iteration, largest first."""
        total = self.total
        named = self.seconds()
        return dict(sorted(((k, v / total) for k, v in named.items() if v > 0), key=lambda kv: -kv[1]))


def saturation(x: float) -> float:
    """A GEMM dimension's share of the large-GEMM rate."""
    return x / (x + GEMM_HALF)


def gemm_seconds(m: float, n: float, k: float, hw: Hardware) -> float:
    """One forward GEMM of (m x k) @ (k x n); none when a side is empty (an unknown vocabulary has no logits)."""
    if min(m, n, k) <= 0:
        return 0.0
    return 2.0 * m * n * k / (hw.gemm_flops * saturation(m) * saturation(n) * saturation(k))


def ring_seconds(nbytes: float, ranks: int, link: float) -> float:
    """An all-gather or reduce-scatter of a ``nbytes`` tensor over ``ranks`` (each moves (r-1)/r of it)."""
    return 0.0 if ranks <= 1 else nbytes * (ranks - 1) / ranks / link


def step_time(w: Work, hw: Hardware) -> StepTime:
    t, T, h = w.tp, w.tokens, w.hidden
    branches = 2 if w.gated else 1
    # ---- one layer, one micro-batch
    shapes = [(T, (w.q_width + 2 * w.kv_width) / t, h), (T, h, w.q_width / t), (T, w.ffn * branches / t, h), (T, h, w.ffn / t)]
    gemm_fwd = sum(gemm_seconds(m, n, k, hw) for m, n, k in shapes)
    attn_flops_fwd = 2.0 * T * w.seq * w.q_width / t  # QK^T and AV over the causal half of the keys
    keys = w.seq / w.cp  # what one kernel call sees: the whole sequence, or a context-parallel chunk per ring step
    attn_fwd = attn_flops_fwd / (hw.gemm_flops * ATTENTION_EFFICIENCY * keys / (keys + ATTENTION_HALF))
    if w.scores_stored:  # unfused: every score is computed (the mask comes after) and goes through memory
        scores = w.heads / t * T * w.seq
        attn_fwd = (2 * attn_flops_fwd / ATTENTION_EFFICIENCY) / hw.gemm_flops + scores * SCORE_BYTES / 3.5 / hw.hbm
    split_h = t if w.sequence_parallel else 1
    elem = T * (ELEMENT_BYTES_H * h / split_h + ELEMENT_BYTES_F * w.ffn * branches / t) / hw.hbm
    tp_phase = ring_seconds(w.act_bytes * T * h, t, hw.tp_link)  # one all-gather or reduce-scatter of the activation
    tp_comm = 10 * tp_phase
    tp_exposed = tp_comm * TP_EXPOSED if w.tp_comm_overlap else 6 * tp_phase
    if w.recompute == "full":
        again = gemm_fwd + attn_fwd + elem / 3 + 4 * tp_phase * (TP_EXPOSED if w.tp_comm_overlap else 1.0)
    elif w.recompute == "selective":
        again = attn_fwd
    else:
        again = 0.0
    # ---- context parallelism: the ring passes every rank's K and V chunk c-1 times forward, and K, V and their
    # gradients backward (3x the forward's bytes), beside the attention it overlaps with
    attention_layer = 3.5 * attn_fwd
    ring = 3.0 * (w.cp - 1) * 2 * T * (w.kv_width / t) * 2 / hw.cp_link if w.cp > 1 else 0.0
    cp_exposed = max(0.0, ring - attention_layer)
    # ---- the slowest stage holds the logits layer (the last one; with one stage, the only one)
    logit_gemm = 3 * gemm_seconds(T, w.vocab / t, h, hw)
    logit_mem = T * LOGIT_BYTES * w.vocab / t / hw.hbm
    per_mb = {
        "gemm": w.layers * 3 * gemm_fwd,
        "attention": w.layers * attention_layer,
        "elementwise": w.layers * elem,
        "logits": logit_gemm + logit_mem,
        "recompute": w.layers * again,
        "tensor_parallel": w.layers * tp_exposed,
        "context_parallel": w.layers * cp_exposed,
    }
    stage_mb = sum(per_mb.values())
    m = w.microbatches
    slots = m + (w.pp - 1) / w.vp if w.pp > 1 else m
    # ---- pipeline sends: 2 per virtual stage per micro-batch, the activation split over the TP ranks with SP
    send = w.act_bytes * T * h / split_h / hw.pp_link if w.pp > 1 else 0.0
    sends = m * 2 * w.vp * send * P2P_EXPOSED
    # ---- data parallelism over the stage's parameters, among the data- x context-parallel ranks
    p = w.stage_parameters
    d = w.dp * w.cp
    grads = p * w.grad_bytes
    if w.distributed_optimizer:
        reduce = ring_seconds(grads, d, hw.dp_link)
        gather = ring_seconds(p * w.param_bytes, d, hw.dp_link)
    else:
        reduce, gather = 2 * ring_seconds(grads, d, hw.dp_link), 0.0
    # 1F1B: the last micro-batch's backward (the first's forward for the all-gather). Interleaved, each of the v chunks
    # starts reducing after its own last backward, while the schedule's cooldown still runs the earlier chunks for a
    # group of p micro-batches each: chunk 1 of v has (v-1) x p chunk-backwards left (Megatron-LM
    # pipeline_parallel/schedules.py, the interleaved schedule's grad sync per model chunk).
    spread = 1 / w.vp + (w.vp - 1) * w.pp / w.vp if w.pp > 1 else 1.0
    backward_window = stage_mb * 2 / 3 * spread
    forward_window = stage_mb / 3 * spread
    tail = min(1.0, max(BUCKET_PARAMETERS, 1_000_000 * d) / p) if p > 0 else 1.0  # the last bucket's share
    reduce_exposed = max(reduce * tail, reduce - backward_window) if w.overlap_grad_reduce else reduce
    gather_exposed = max(gather * tail, gather - forward_window) if w.overlap_param_gather else gather
    hidden_comm = (reduce - reduce_exposed) + (gather - gather_exposed)
    hidden_comm += w.layers * (ring - cp_exposed) * m
    hidden_tp = w.layers * (tp_comm - tp_exposed) * m
    shard = p / d if w.distributed_optimizer else p
    optimizer = (shard * OPTIMIZER_BYTES + p * GRAD_BUFFER_BYTES) / hw.hbm
    return StepTime(
        gemm=per_mb["gemm"] * m,
        attention=per_mb["attention"] * m,
        elementwise=per_mb["elementwise"] * m,
        logits=per_mb["logits"] * m,
        recompute=per_mb["recompute"] * m,
        tensor_parallel=per_mb["tensor_parallel"] * m,
        context_parallel=per_mb["context_parallel"] * m,
        bubble=(slots - m) * stage_mb,
        pipeline_sends=sends,
        data_parallel=reduce_exposed + gather_exposed,
        contention=CONTENTION * hidden_comm + TP_CONTENTION * hidden_tp,
        optimizer=optimizer,
        parts=per_mb,
    )
