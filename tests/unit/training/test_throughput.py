"""The step-time model, mechanism by mechanism, against figures derived by hand or published.

Each expected number is arithmetic written out here from the mechanism's definition (the module docstring of
megaprov/training/throughput.py) or a published figure, never a second call into the model:
- GEMM saturation: a dimension of GEMM_HALF elements halves the rate in that dimension;
- flash attention: FlashAttention-2 (Dao 2023) reaches up to 335 TFLOP/s forward and backward on an H100 (head
  size 128, causal, bf16), counting the backward as 2.5x the forward;
- tensor parallelism: an all-reduce is a reduce-scatter plus an all-gather, so sequence parallelism moves the same
  bytes (Korthikanti et al. 2022, §4.2.2); Megatron-LM's backward adds the column-parallel input's all-gather for the
  weight gradient, and runs it and the input gradient's reduce-scatter asynchronously (tensor_parallel/layers.py);
- the pipeline bubble: (p - 1)/(v m) of the ideal time (Narayanan et al. 2021, §2.2);
- gradient buckets: Megatron-LM's default of max(40M, 1M x ranks) parameters (distributed_data_parallel.py);
- the cross entropy: 54 bytes per fp32 logit, counted from Megatron-LM's tensor_parallel/cross_entropy.py;
- the distributed optimizer: a reduce-scatter of fp32 gradients and an all-gather of bf16 parameters, 6 bytes a
  parameter against the all-reduce's 8 (Megatron-LM docs/user-guide/features/dist_optimizer.md);
- Adam: fp32 parameter, m and v read and written, the fp32 gradient read, the bf16 parameter written: 30 bytes.
"""

from dataclasses import replace

import pytest

from megaprov.training import throughput
from megaprov.training.throughput import Hardware, Work

HW = Hardware(gemm_flops=1e15, hbm=2e12, tp_link=4e11, pp_link=5e10, dp_link=5e10, cp_link=4e11)
# one layer of h = 1024 with 16 heads (head size 64), a 4h GELU MLP, 2,048 tokens a micro-batch, TP 2
LAYER = Work(
    tokens=2048,
    seq=2048,
    hidden=1024,
    heads=16,
    q_width=1024,
    kv_width=1024,
    ffn=4096,
    gated=False,
    vocab=0,
    layers=1,
    tp=2,
    pp=1,
    vp=1,
    cp=1,
    dp=1,
    microbatches=1,
    sequence_parallel=True,
    recompute="none",
    stage_parameters=0.0,
    distributed_optimizer=True,
    overlap_grad_reduce=False,
    overlap_param_gather=False,
    tp_comm_overlap=False,
)


def sat(x):
    return x / (x + throughput.GEMM_HALF)


def gemm(m, n, k, rate=1e15):
    return 2 * m * n * k / (rate * sat(m) * sat(n) * sat(k))


def test_a_gemm_dimension_of_gemm_half_elements_halves_the_rate():
    half = throughput.GEMM_HALF
    assert throughput.saturation(half) == 0.5
    big = throughput.gemm_seconds(8192, 8192, 8192, HW)
    assert big == pytest.approx(2 * 8192**3 / (1e15 * (8192 / (8192 + half)) ** 3), rel=1e-12)
    thin = throughput.gemm_seconds(8192, half, 8192, HW)
    # the FLOPs fall by 8192/half, the time by half as much: the thin GEMM runs at half the rate per FLOP
    assert thin / big == pytest.approx(half / 8192 * (8192 / (8192 + half)) / 0.5, rel=1e-12)
    assert throughput.gemm_seconds(0, 8192, 8192, HW) == 0.0  # an unknown vocabulary: no logits layer


def test_a_layers_gemms_forward_and_backward():
    """QKV (2048 x 1024 -> 3 x 1024 / 2), projection (1024 / 2 -> 1024), MLP in (1024 -> 4096 / 2), out (4096 / 2 ->
    1024); the backward's data and weight gradients are two GEMMs of the same sizes: 3x the forward."""
    t = throughput.step_time(LAYER, HW)
    forward = gemm(2048, 1536, 1024) + gemm(2048, 1024, 512) + gemm(2048, 2048, 1024) + gemm(2048, 1024, 2048)
    assert t.gemm == pytest.approx(3 * forward, rel=1e-12)
    swiglu = throughput.step_time(replace(LAYER, gated=True), HW)
    forward_gated = gemm(2048, 1536, 1024) + gemm(2048, 1024, 512) + gemm(2048, 4096, 1024) + gemm(2048, 1024, 2048)
    assert swiglu.gemm == pytest.approx(3 * forward_gated, rel=1e-12)


def test_flash_attention_runs_at_the_rate_flashattention2_publishes_on_h100():
    """Causal attention forward: QK^T and AV over half the keys, 2 x T x s x q / t FLOPs; forward and backward take
    3.5x the forward's FLOPs at ATTENTION_EFFICIENCY of the GEMM rate times keys / (keys + 300). On an H100 (989 x 0.78
    x 0.774 of large-GEMM rate in training) that is within 5 % of FlashAttention-2's published 335 TFLOP/s at 16k
    tokens, and of its 300 at 2k and 200 at 512 within 10 %."""
    t = throughput.step_time(LAYER, HW)
    flops = 2 * 2048 * 2048 * 1024 / 2
    assert t.attention == pytest.approx(3.5 * flops / (1e15 * throughput.ATTENTION_EFFICIENCY * 2048 / 2348), rel=1e-12)
    h100_gemm = 989e12 * 0.78 * 0.7744
    for keys, published in ((16384, 335e12), (2048, 300e12), (512, 200e12)):
        rate = h100_gemm * throughput.ATTENTION_EFFICIENCY * keys / (keys + throughput.ATTENTION_HALF)
        assert rate == pytest.approx(published, rel=0.05 if keys == 16384 else 0.10), keys


def test_unfused_attention_computes_every_score_and_moves_each_through_memory():
    """Without flash the mask comes after the full s x s product (twice the causal FLOPs) and every score goes through
    HBM: 16 heads / 2 x 2,048 x 2,048 scores x SCORE_BYTES."""
    t = throughput.step_time(replace(LAYER, scores_stored=True), HW)
    flops = 2 * 2048 * 2048 * 1024 / 2
    scores = 16 / 2 * 2048 * 2048
    expected = 3.5 * 2 * flops / (1e15 * throughput.ATTENTION_EFFICIENCY) + scores * throughput.SCORE_BYTES / 2e12
    assert t.attention == pytest.approx(expected, rel=1e-12)


def test_memory_bound_kernels_split_the_hidden_part_only_with_sequence_parallelism():
    t = throughput.step_time(LAYER, HW)
    per_token = throughput.ELEMENT_BYTES_H * 1024 / 2 + throughput.ELEMENT_BYTES_F * 4096 / 2
    assert t.elementwise == pytest.approx(2048 * per_token / 2e12, rel=1e-12)
    no_sp = throughput.step_time(replace(LAYER, sequence_parallel=False), HW)
    per_token = throughput.ELEMENT_BYTES_H * 1024 + throughput.ELEMENT_BYTES_F * 4096 / 2
    assert no_sp.elementwise == pytest.approx(2048 * per_token / 2e12, rel=1e-12)


def test_tensor_parallel_traffic_is_the_same_with_or_without_sequence_parallelism():
    """Ten ring phases a layer (four forward, six backward), each moving (t - 1)/t of the 2 x T x h activation; the
    backward's four column-parallel phases run behind the GEMMs, six are exposed."""
    phase = (1 / 2) * 2 * 2048 * 1024 / 4e11
    sp = throughput.step_time(LAYER, HW)
    plain = throughput.step_time(replace(LAYER, sequence_parallel=False), HW)
    assert sp.tensor_parallel == pytest.approx(6 * phase, rel=1e-12) and plain.tensor_parallel == pytest.approx(6 * phase, rel=1e-12)
    assert sp.contention == pytest.approx(throughput.TP_CONTENTION * 4 * phase, rel=1e-12)  # the four it hides
    four = throughput.step_time(replace(LAYER, tp=4), HW)
    assert four.tensor_parallel == pytest.approx(6 * (3 / 4) * 2 * 2048 * 1024 / 4e11, rel=1e-12)
    overlapped = throughput.step_time(replace(LAYER, tp_comm_overlap=True), HW)
    assert overlapped.tensor_parallel == pytest.approx(10 * phase * throughput.TP_EXPOSED, rel=1e-12)
    assert overlapped.contention == pytest.approx(throughput.TP_CONTENTION * 10 * phase * (1 - throughput.TP_EXPOSED), rel=1e-12)
    fp32 = throughput.step_time(replace(LAYER, act_bytes=4), HW)  # fp32 training moves 4-byte activations
    assert fp32.tensor_parallel == pytest.approx(12 * phase, rel=1e-12)
    assert throughput.step_time(replace(LAYER, tp=1), HW).tensor_parallel == 0.0


def test_the_pipeline_bubble_is_p_minus_1_over_v_m_of_the_ideal_time():
    """p = 8, m = 64: 7/64 = 10.9 % of the micro-batches' time; interleaved over v = 2: 7/128."""
    w = replace(LAYER, pp=8, microbatches=64)
    t = throughput.step_time(w, HW)
    ideal = t.gemm + t.attention + t.elementwise + t.logits + t.recompute + t.tensor_parallel + t.context_parallel
    assert t.bubble / ideal == pytest.approx(7 / 64, rel=1e-12)
    assert throughput.step_time(replace(w, vp=2), HW).bubble / ideal == pytest.approx(7 / 128, rel=1e-12)
    assert throughput.step_time(replace(w, pp=1), HW).bubble == 0.0


def test_pipeline_sends_two_a_virtual_stage_a_micro_batch():
    """Each micro-batch sends its activation forward and its gradient back across every stage boundary, once per
    virtual stage: 2 x v sends of 2 x T x h bytes, split over the TP ranks with sequence parallelism."""
    w = replace(LAYER, pp=4, vp=3, microbatches=12)
    t = throughput.step_time(w, HW)
    assert t.pipeline_sends == pytest.approx(12 * 2 * 3 * (2 * 2048 * 1024 / 2) / 5e10 * throughput.P2P_EXPOSED, rel=1e-12)
    whole = throughput.step_time(replace(w, sequence_parallel=False), HW)
    assert whole.pipeline_sends == pytest.approx(2 * t.pipeline_sends, rel=1e-12)


def test_the_distributed_optimizer_moves_six_bytes_a_parameter_against_the_all_reduces_eight():
    w = replace(LAYER, tp=1, dp=8, stage_parameters=1e9)
    sharded = throughput.step_time(w, HW).data_parallel
    plain = throughput.step_time(replace(w, distributed_optimizer=False), HW).data_parallel
    assert sharded == pytest.approx((4 + 2) * 1e9 * 7 / 8 / 5e10, rel=1e-12)
    assert plain == pytest.approx(2 * 4 * 1e9 * 7 / 8 / 5e10, rel=1e-12)
    assert throughput.step_time(replace(w, dp=1), HW).data_parallel == 0.0
    # the context-parallel ranks reduce the gradients too: DP 4 x CP 2 is a group of 8
    assert throughput.step_time(replace(w, dp=4, cp=2), HW).data_parallel == pytest.approx(sharded, rel=1e-12)
    assert throughput.step_time(replace(w, dp=1, cp=2), HW).data_parallel == pytest.approx(6e9 / 2 / 5e10, rel=1e-12)
    fp16 = throughput.step_time(replace(w, grad_bytes=2), HW).data_parallel  # fp16 reduces 16-bit gradients
    assert fp16 == pytest.approx((2 + 2) * 1e9 * 7 / 8 / 5e10, rel=1e-12)


def test_overlapped_gradient_reduction_hides_behind_the_last_backward_but_its_last_bucket():
    """The reduce-scatter overlaps the last micro-batch's backward (2/3 of its time), the all-gather the first's
    forward (1/3); what does not fit is exposed, and the last bucket (40M parameters of 1G: 4 %) always is."""
    w = replace(LAYER, tp=1, dp=8, stage_parameters=1e9, overlap_grad_reduce=True, overlap_param_gather=True)
    t = throughput.step_time(w, HW)
    stage = sum(t.parts.values())
    reduce, gather = 4e9 * 7 / 8 / 5e10, 2e9 * 7 / 8 / 5e10
    exposed = max(reduce * 0.04, reduce - stage * 2 / 3) + max(gather * 0.04, gather - stage / 3)
    assert t.data_parallel == pytest.approx(exposed, rel=1e-12)
    small = throughput.step_time(replace(w, stage_parameters=1e7), HW)  # one bucket holds it all: nothing hides
    assert small.data_parallel == pytest.approx((4e7 + 2e7) * 7 / 8 / 5e10, rel=1e-12)
    # 100 ranks: buckets of 1M x 100 parameters, 1 % of 10G; behind a long backward only that tail is exposed
    wide = throughput.step_time(replace(w, dp=100, stage_parameters=1e10, layers=2000), replace(HW, dp_link=5e12))
    assert wide.data_parallel == pytest.approx((4e10 + 2e10) * 99 / 100 / 5e12 * 0.01, rel=1e-12)


def test_interleaved_chunks_reduce_behind_the_cooldown():
    """With v virtual stages, each chunk's reduction starts after its own last backward, while the cooldown runs the
    earlier chunks for p micro-batches each: the window is 1/v + (v - 1) p / v of a micro-batch's backward."""
    w = replace(LAYER, tp=1, dp=8, pp=4, microbatches=8, stage_parameters=2e9, overlap_grad_reduce=True)
    one = throughput.step_time(w, HW)
    stage = sum(one.parts.values())
    reduce, gather = 8e9 * 7 / 8 / 5e10, 4e9 * 7 / 8 / 5e10  # the all-gather is not overlapped here
    assert one.data_parallel == pytest.approx(max(reduce * 0.02, reduce - stage * 2 / 3) + gather, rel=1e-12)
    three = throughput.step_time(replace(w, vp=3), HW)
    window = stage * 2 / 3 * (1 / 3 + 2 * 4 / 3)
    assert three.data_parallel == pytest.approx(max(reduce * 0.02, reduce - window) + gather, rel=1e-12)
    assert three.data_parallel < one.data_parallel


def test_recompute_repeats_a_forward():
    base = throughput.step_time(LAYER, HW)
    attention_forward = base.attention / 3.5
    assert throughput.step_time(replace(LAYER, recompute="selective"), HW).recompute == pytest.approx(attention_forward, rel=1e-12)
    full = throughput.step_time(replace(LAYER, recompute="full"), HW).recompute
    tp_forward = 4 * (1 / 2) * 2 * 2048 * 1024 / 4e11
    assert full == pytest.approx(base.gemm / 3 + attention_forward + base.elementwise / 3 + tp_forward, rel=1e-12)


def test_the_logits_layer_and_the_loss():
    """The output GEMM (T x h -> V / t) forward and backward, and the fp32 logits read and written (LOGIT_BYTES a
    vocabulary entry a token)."""
    t = throughput.step_time(replace(LAYER, vocab=50304), HW)
    assert t.logits == pytest.approx(3 * gemm(2048, 50304 / 2, 1024) + 2048 * throughput.LOGIT_BYTES * 50304 / 2 / 2e12, rel=1e-12)


def test_the_context_ring_is_exposed_where_it_outlasts_the_attention():
    """CP c: 3 x (c - 1) passes of K and V (2 x T x kv / t x 2 bytes) a layer; the attention hides that much."""
    w = replace(LAYER, cp=4, tokens=512)
    t = throughput.step_time(w, HW)
    ring = 3 * 3 * 2 * 512 * (1024 / 2) * 2 / 4e11
    keys = 2048 / 4  # each ring step's kernel sees a quarter of the keys
    attention = 3.5 * (2 * 512 * 2048 * 1024 / 2) / (1e15 * throughput.ATTENTION_EFFICIENCY * keys / (keys + throughput.ATTENTION_HALF))
    assert t.context_parallel == pytest.approx(max(0.0, ring - attention), rel=1e-12)
    tp_hidden = 4 * (1 / 2) * 2 * 512 * 1024 / 4e11
    assert t.contention == pytest.approx(throughput.CONTENTION * (ring - t.context_parallel) + throughput.TP_CONTENTION * tp_hidden, rel=1e-12)
    slow = throughput.step_time(w, replace(HW, cp_link=1e9))  # over a slow link the ring is mostly exposed
    assert slow.context_parallel == pytest.approx(ring * 4e11 / 1e9 - attention, rel=1e-12)


def test_adam_reads_and_writes_thirty_bytes_a_parameter_of_its_shard():
    w = replace(LAYER, dp=8, stage_parameters=1e9)
    t = throughput.step_time(w, HW)
    assert t.optimizer == pytest.approx((1e9 / 8 * 30 + 1e9 * 8) / 2e12, rel=1e-12)
    assert throughput.step_time(replace(w, distributed_optimizer=False), HW).optimizer == pytest.approx((1e9 * 30 + 1e9 * 8) / 2e12, rel=1e-12)


def test_the_iteration_is_the_sum_of_its_mechanisms_and_the_shares_name_them():
    w = replace(LAYER, pp=2, vp=1, microbatches=8, dp=4, stage_parameters=1e8, vocab=32000, tp_comm_overlap=True, overlap_grad_reduce=True)
    t = throughput.step_time(w, HW)
    assert t.total == pytest.approx(sum(t.seconds().values()), rel=1e-12)
    shares = t.shares()
    assert sum(shares.values()) == pytest.approx(1.0, rel=1e-12)
    assert list(shares.values()) == sorted(shares.values(), reverse=True)
    assert set(shares) <= set(t.seconds()) and "GEMMs" in shares and "pipeline bubble" in shares
    assert all(v > 0 for v in shares.values())
