"""The step-time model's every term, branch and edge (megaprov.training.throughput), field by field.

Each expected number is arithmetic written out here from the mechanisms the module docstring states (GEMM
saturation, flash or unfused attention, memory-bound kernels, tensor/context/pipeline/data parallelism, overlap
windows, the last bucket, contention, Adam), on small round sizes chosen so that every branch is taken by some case;
nothing is stood in and the model is never called to compute an expectation. The operator-facing names of the terms
(``StepTime.seconds``) and their shares are asserted exactly."""

from dataclasses import replace

import pytest

from megaprov.training import throughput as tp_
from megaprov.training.throughput import Hardware, StepTime, Work

HALF = 177.6
HW = Hardware(gemm_flops=1e15, hbm=2e12, tp_link=4e11, pp_link=5e10, dp_link=5e10, cp_link=4e11)
BASE = Work(
    tokens=2048,
    seq=4096,
    hidden=1024,
    heads=16,
    q_width=1024,
    kv_width=256,
    ffn=2048,
    gated=True,
    vocab=32000,
    layers=2,
    tp=2,
    pp=1,
    vp=1,
    cp=1,
    dp=4,
    microbatches=3,
    sequence_parallel=True,
    recompute="none",
    stage_parameters=1e8,
    distributed_optimizer=True,
    overlap_grad_reduce=True,
    overlap_param_gather=True,
    tp_comm_overlap=False,
)
NAMES = [
    "GEMMs",
    "attention",
    "memory-bound kernels",
    "logits and loss",
    "recomputation",
    "tensor-parallel communication",
    "context-parallel communication",
    "pipeline bubble",
    "pipeline sends",
    "data-parallel communication",
    "communication contention",
    "optimizer",
]
FIELDS = [
    "gemm",
    "attention",
    "elementwise",
    "logits",
    "recompute",
    "tensor_parallel",
    "context_parallel",
    "bubble",
    "pipeline_sends",
    "data_parallel",
    "contention",
    "optimizer",
]


def s(x):
    return x / (x + HALF)


def g(m, n, k, rate=1e15):
    return 2 * m * n * k / (rate * s(m) * s(n) * s(k))


def fields(t: StepTime) -> dict:
    return {f: getattr(t, f) for f in FIELDS}


def close(actual: dict, expected: dict):
    assert set(actual) == set(expected)
    for key in expected:
        assert actual[key] == pytest.approx(expected[key], rel=1e-12, abs=1e-18), key


# ---- the small functions


def test_saturation_is_half_at_gemm_half_elements():
    assert tp_.saturation(177.6) == 0.5
    assert tp_.saturation(0.0) == 0.0
    assert tp_.saturation(3 * 177.6) == pytest.approx(0.75, rel=1e-15)


def test_gemm_seconds():
    hw = replace(HW, gemm_flops=2e14)
    assert tp_.gemm_seconds(177.6, 177.6, 177.6, hw) == pytest.approx(2 * 177.6**3 / (2e14 / 8), rel=1e-12)
    assert tp_.gemm_seconds(4096, 1024, 512, HW) == pytest.approx(2 * 4096 * 1024 * 512 / (1e15 * s(4096) * s(1024) * s(512)), rel=1e-12)


def test_a_gemm_of_one_element_a_side_still_takes_time():
    assert tp_.gemm_seconds(1, 8, 8, HW) == pytest.approx(2 * 64 / (1e15 * s(1) * s(8) * s(8)), rel=1e-12)
    assert tp_.gemm_seconds(8, 8, 1, HW) == pytest.approx(2 * 64 / (1e15 * s(1) * s(8) * s(8)), rel=1e-12)


@pytest.mark.parametrize("m,n,k", [(0, 8, 8), (8, 0, 8), (8, 8, 0), (-1, 8, 8), (8, -3, 8), (8, 8, -0.5)])
def test_a_gemm_with_an_empty_side_takes_no_time(m, n, k):
    assert tp_.gemm_seconds(m, n, k, HW) == 0.0


def test_ring_seconds():
    assert tp_.ring_seconds(1e9, 4, 1e10) == pytest.approx(1e9 * 3 / 4 / 1e10, rel=1e-15)
    assert tp_.ring_seconds(1e9, 2, 1e10) == 0.05
    assert tp_.ring_seconds(1e9, 1, 1e10) == 0.0
    assert tp_.ring_seconds(1e9, 1, 0.0) == 0.0  # no link needed without peers
    assert tp_.ring_seconds(1e9, 0, 0.0) == 0.0


def test_links_a_layout_does_not_use_are_never_divided_by():
    # one rank per group and one stage: no tensor, pipeline, context or data-parallel link is read
    hw = Hardware(gemm_flops=1e15, hbm=2e12, tp_link=0.0, pp_link=0.0, dp_link=0.0)
    w = replace(BASE, tp=1, dp=1, sequence_parallel=False)
    t = tp_.step_time(w, hw)
    assert (t.tensor_parallel, t.context_parallel, t.pipeline_sends, t.data_parallel, t.contention) == (0.0,) * 5
    assert t.optimizer == pytest.approx((1e8 * 30 + 1e8 * 8) / 2e12, rel=1e-12)


# ---- StepTime's names, total and shares


def test_seconds_names_each_mechanism_for_the_operator():
    t = StepTime(*[float(i + 1) for i in range(12)])
    assert t.seconds() == {name: float(i + 1) for i, name in enumerate(NAMES)}
    assert list(t.seconds()) == NAMES
    assert t.total == 78.0


def test_shares_are_largest_first_and_leave_out_empty_terms():
    t = StepTime(gemm=6.0, attention=0.0, elementwise=1.0, logits=0.0, recompute=0.0, tensor_parallel=3.0, context_parallel=0.0,
                 bubble=0.0, pipeline_sends=0.0, data_parallel=0.0, contention=0.0, optimizer=0.0)  # fmt: skip
    assert t.total == 10.0
    shares = t.shares()
    assert shares == {"GEMMs": 0.6, "tensor-parallel communication": 0.3, "memory-bound kernels": 0.1}
    assert list(shares) == ["GEMMs", "tensor-parallel communication", "memory-bound kernels"]


def test_parts_do_not_count_in_equality():
    a = StepTime(*[1.0] * 12, parts={"gemm": 1.0})
    assert a == StepTime(*[1.0] * 12)


# ---- step_time, field by field, written out


def layer(w, hw=HW):
    """The per-layer pieces of one micro-batch, spelled out from the docstring."""
    t, T, h = w.tp, w.tokens, w.hidden
    br = 2 if w.gated else 1
    fwd = g(T, (w.q_width + 2 * w.kv_width) / t, h, hw.gemm_flops) + g(T, h, w.q_width / t, hw.gemm_flops)
    fwd += g(T, w.ffn * br / t, h, hw.gemm_flops) + g(T, h, w.ffn / t, hw.gemm_flops)
    flops = 2.0 * T * w.seq * w.q_width / t
    keys = w.seq / w.cp
    attn = flops / (hw.gemm_flops * 0.57 * keys / (keys + 300.0))
    if w.scores_stored:
        attn = 2 * flops / 0.57 / hw.gemm_flops + w.heads / t * T * w.seq * 14.0 / 3.5 / hw.hbm
    split = t if w.sequence_parallel else 1
    elem = T * (135.4 * h / split + 10.0 * w.ffn * br / t) / hw.hbm
    phase = 0.0 if t == 1 else 2 * T * h * (t - 1) / t / hw.tp_link * (w.act_bytes / 2)
    return fwd, attn, elem, phase


def test_one_stage_no_recompute_overlapped_data_parallel():
    w = BASE
    fwd, attn, elem, phase = layer(w)
    assert phase == pytest.approx(2 * 2048 * 1024 / 2 / 4e11, rel=1e-15)
    logits = 3 * g(2048, 16000, 1024) + 2048 * 54.0 * 16000 / 2e12
    stage = 2 * 3 * fwd + 2 * 3.5 * attn + 2 * elem + logits + 2 * 6 * phase
    reduce = 1e8 * 4 * 3 / 4 / 5e10
    gather = 1e8 * 2 * 3 / 4 / 5e10
    tail = 4e7 / 1e8
    reduce_exposed = max(reduce * tail, reduce - stage * 2 / 3)
    gather_exposed = max(gather * tail, gather - stage / 3)
    expected = {
        "gemm": 2 * 3 * fwd * 3,
        "attention": 2 * 3.5 * attn * 3,
        "elementwise": 2 * elem * 3,
        "logits": logits * 3,
        "recompute": 0.0,
        "tensor_parallel": 2 * 6 * phase * 3,
        "context_parallel": 0.0,
        "bubble": 0.0,
        "pipeline_sends": 0.0,
        "data_parallel": reduce_exposed + gather_exposed,
        "contention": 0.1097 * ((reduce - reduce_exposed) + (gather - gather_exposed)) + 0.07434 * 2 * 4 * phase * 3,
        "optimizer": (1e8 / 4 * 30 + 1e8 * 8) / 2e12,
    }
    t = tp_.step_time(w, HW)
    close(fields(t), expected)
    close(t.parts, {
        "gemm": 2 * 3 * fwd, "attention": 2 * 3.5 * attn, "elementwise": 2 * elem, "logits": logits, "recompute": 0.0,
        "tensor_parallel": 2 * 6 * phase, "context_parallel": 0.0,
    })  # fmt: skip
    assert t.total == pytest.approx(sum(expected.values()), rel=1e-12)


def test_the_window_hides_only_what_fits_and_the_last_bucket_always_shows():
    # a huge stage: the window (2/3 and 1/3 of the stage's compute) is shorter than the communication
    w = replace(BASE, stage_parameters=1e11, layers=1, microbatches=1)
    fwd, attn, elem, phase = layer(w)
    stage = 3 * fwd + 3.5 * attn + elem + 3 * g(2048, 16000, 1024) + 2048 * 54.0 * 16000 / 2e12 + 6 * phase
    reduce = 1e11 * 4 * 3 / 4 / 5e10
    gather = 1e11 * 2 * 3 / 4 / 5e10
    t = tp_.step_time(w, HW)
    assert reduce - stage * 2 / 3 > reduce * 4e7 / 1e11  # the window, not the bucket, decides
    assert t.data_parallel == pytest.approx((reduce - stage * 2 / 3) + (gather - stage / 3), rel=1e-12)
    assert t.contention == pytest.approx(0.1097 * (stage * 2 / 3 + stage / 3) + 0.07434 * 4 * phase, rel=1e-12)


def stage_of(w, hw=HW):
    """One micro-batch on the stage: layers x (3 GEMM passes, 3.5 attention passes, kernels, exposed TP) plus logits."""
    fwd, attn, elem, phase = layer(w, hw)
    exposed = 10 * phase * 0.1779 if w.tp_comm_overlap else 6 * phase
    logits = 3 * g(w.tokens, w.vocab / w.tp, w.hidden) + w.tokens * 54.0 * w.vocab / w.tp / hw.hbm if w.vocab else 0.0
    return w.layers * (3 * fwd + 3.5 * attn + elem + exposed) + logits


def test_without_overlap_all_data_parallel_communication_is_exposed():
    w = replace(BASE, overlap_grad_reduce=False, overlap_param_gather=False, tp_comm_overlap=False)
    _, _, _, phase = layer(w)
    reduce, gather = 1e8 * 4 * 3 / 4 / 5e10, 1e8 * 2 * 3 / 4 / 5e10
    t = tp_.step_time(w, HW)
    assert t.data_parallel == pytest.approx(reduce + gather, rel=1e-12)
    assert t.contention == pytest.approx(0.07434 * 2 * 4 * phase * 3, rel=1e-12)
    stage = stage_of(w)
    only_grad = tp_.step_time(replace(w, overlap_grad_reduce=True), HW)
    grad_exposed = max(reduce * 0.4, reduce - stage * 2 / 3)
    assert only_grad.data_parallel == pytest.approx(grad_exposed + gather, rel=1e-12)
    assert only_grad.contention == pytest.approx(0.1097 * (reduce - grad_exposed) + 0.07434 * 2 * 4 * phase * 3, rel=1e-12)
    only_gather = tp_.step_time(replace(w, overlap_param_gather=True), HW)
    gather_exposed = max(gather * 0.4, gather - stage / 3)
    assert only_gather.data_parallel == pytest.approx(reduce + gather_exposed, rel=1e-12)


def test_the_last_bucket_grows_with_the_ranks_and_is_at_most_everything():
    # 64 ranks: a bucket of max(40M, 64M) = 64M of 1e8 parameters; of 5e7 parameters, the whole
    w = replace(BASE, dp=64, layers=32, microbatches=1, vocab=0, stage_parameters=1e8)
    stage = stage_of(w)
    reduce = 1e8 * 4 * 63 / 64 / 5e10
    gather = 1e8 * 2 * 63 / 64 / 5e10
    assert reduce * 0.64 > reduce - stage * 2 / 3 and gather * 0.64 > gather - stage / 3  # the bucket decides
    t = tp_.step_time(w, HW)
    assert t.data_parallel == pytest.approx(reduce * 0.64 + gather * 0.64, rel=1e-12)
    small = tp_.step_time(replace(w, stage_parameters=5e7), HW)
    assert small.data_parallel == pytest.approx((reduce + gather) / 2, rel=1e-12)
    assert small.contention == pytest.approx(0.07434 * 32 * 4 * layer(w)[3], rel=1e-12)  # nothing of it hides


def test_the_all_reduce_without_the_distributed_optimizer():
    w = replace(BASE, distributed_optimizer=False, overlap_grad_reduce=False, overlap_param_gather=True, grad_bytes=2)
    t = tp_.step_time(w, HW)
    assert t.data_parallel == pytest.approx(2 * 1e8 * 2 * 3 / 4 / 5e10, rel=1e-12)
    assert t.optimizer == pytest.approx((1e8 * 30 + 1e8 * 8) / 2e12, rel=1e-12)


def test_no_parameters_no_data_parallel_time():
    t = tp_.step_time(replace(BASE, stage_parameters=0.0), HW)
    assert (t.data_parallel, t.optimizer) == (0.0, 0.0)


def test_full_recompute_repeats_each_layers_forward():
    for overlap, share in ((False, 1.0), (True, 0.1779)):
        w = replace(BASE, recompute="full", tp_comm_overlap=overlap)
        fwd, attn, elem, phase = layer(w)
        t = tp_.step_time(w, HW)
        assert t.recompute == pytest.approx(2 * 3 * (fwd + attn + elem / 3 + 4 * phase * share), rel=1e-12)
        exposed = 10 * phase * 0.1779 if overlap else 6 * phase
        assert t.tensor_parallel == pytest.approx(2 * 3 * exposed, rel=1e-12)


def test_selective_recompute_repeats_the_core_attention():
    w = replace(BASE, recompute="selective")
    _, attn, _, _ = layer(w)
    assert tp_.step_time(w, HW).recompute == pytest.approx(2 * 3 * attn, rel=1e-12)
    assert tp_.step_time(replace(BASE, recompute="other"), HW).recompute == 0.0


def test_tensor_parallel_overlap_exposes_a_share_and_contends_for_the_rest():
    w = replace(BASE, tp_comm_overlap=True, overlap_grad_reduce=False, overlap_param_gather=False)
    _, _, _, phase = layer(w)
    t = tp_.step_time(w, HW)
    assert t.tensor_parallel == pytest.approx(2 * 3 * 10 * phase * 0.1779, rel=1e-12)
    assert t.contention == pytest.approx(0.07434 * 2 * 3 * 10 * phase * (1 - 0.1779), rel=1e-12)


def test_fp32_activations_double_the_tensor_parallel_and_pipeline_bytes():
    w = replace(BASE, act_bytes=4, pp=2, microbatches=4)
    _, _, _, phase = layer(w)
    t = tp_.step_time(w, HW)
    assert t.tensor_parallel == pytest.approx(2 * 4 * 6 * 4 * 2048 * 1024 / 2 / 4e11, rel=1e-12)
    assert t.pipeline_sends == pytest.approx(4 * 2 * (4 * 2048 * 1024 / 2 / 5e10) * 0.9969, rel=1e-12)


def test_one_tensor_rank_has_no_tensor_traffic_and_whole_gemms():
    w = replace(BASE, tp=1, sequence_parallel=False, gated=False)
    fwd, attn, elem, _ = layer(w)
    assert fwd == pytest.approx(g(2048, 1536, 1024) + g(2048, 1024, 1024) + g(2048, 2048, 1024) + g(2048, 1024, 2048), rel=1e-15)
    t = tp_.step_time(w, HW)
    assert (t.tensor_parallel, t.gemm) == (0.0, pytest.approx(2 * 3 * fwd * 3, rel=1e-12))
    assert t.elementwise == pytest.approx(2 * 3 * 2048 * (135.4 * 1024 + 10.0 * 2048) / 2e12, rel=1e-12)
    assert t.attention == pytest.approx(2 * 3 * 3.5 * 2 * 2048 * 4096 * 1024 / (1e15 * 0.57 * 4096 / 4396), rel=1e-12)


def test_without_sequence_parallelism_every_rank_moves_the_whole_hidden_part():
    w = replace(BASE, sequence_parallel=False, pp=2, microbatches=2)
    t = tp_.step_time(w, HW)
    assert t.elementwise == pytest.approx(2 * 2 * 2048 * (135.4 * 1024 + 10.0 * 2048 * 2 / 2) / 2e12, rel=1e-12)
    assert t.pipeline_sends == pytest.approx(2 * 2 * (2 * 2048 * 1024 / 5e10) * 0.9969, rel=1e-12)


def test_unfused_attention_moves_every_score():
    w = replace(BASE, scores_stored=True)
    flops = 2.0 * 2048 * 4096 * 1024 / 2
    attn = 2 * flops / 0.57 / 1e15 + 8 * 2048 * 4096 * 14.0 / 3.5 / 2e12
    assert tp_.step_time(w, HW).attention == pytest.approx(2 * 3 * 3.5 * attn, rel=1e-12)


def test_an_unknown_vocabulary_has_no_logits():
    assert tp_.step_time(replace(BASE, vocab=0), HW).logits == 0.0


def test_the_interleaved_pipeline():
    # p = 4, v = 2, m = 8: 8 + 3/2 slots; sends 2 v per micro-batch; the chunks' reduction hides behind the cooldown
    w = replace(BASE, pp=4, vp=2, microbatches=8, stage_parameters=4e9, layers=1)
    fwd, attn, elem, phase = layer(w)
    stage = 3 * fwd + 3.5 * attn + elem + 3 * g(2048, 16000, 1024) + 2048 * 54.0 * 16000 / 2e12 + 6 * phase
    t = tp_.step_time(w, HW)
    assert t.bubble == pytest.approx(1.5 * stage, rel=1e-12)
    assert t.pipeline_sends == pytest.approx(8 * 2 * 2 * (2 * 2048 * 1024 / 2 / 5e10) * 0.9969, rel=1e-12)
    spread = 1 / 2 + 1 * 4 / 2
    reduce = 4e9 * 4 * 3 / 4 / 5e10
    gather = 4e9 * 2 * 3 / 4 / 5e10
    exposed = max(reduce * 0.01, reduce - stage * 2 / 3 * spread) + max(gather * 0.01, gather - stage / 3 * spread)
    assert t.data_parallel == pytest.approx(exposed, rel=1e-12)
    assert t.contention == pytest.approx(0.1097 * (reduce + gather - exposed) + 0.07434 * 4 * phase * 8, rel=1e-12)


def test_a_plain_pipeline_bubble_and_window():
    w = replace(BASE, pp=3, vp=1, microbatches=5, stage_parameters=4e9, layers=1)
    fwd, attn, elem, phase = layer(w)
    stage = 3 * fwd + 3.5 * attn + elem + 3 * g(2048, 16000, 1024) + 2048 * 54.0 * 16000 / 2e12 + 6 * phase
    t = tp_.step_time(w, HW)
    assert t.bubble == pytest.approx(2 * stage, rel=1e-12)
    reduce = 4e9 * 4 * 3 / 4 / 5e10
    assert t.data_parallel == pytest.approx(
        max(reduce * 0.01, reduce - stage * 2 / 3) + max(4e9 * 2 * 3 / 4 / 5e10 * 0.01, 4e9 * 2 * 3 / 4 / 5e10 - stage / 3), rel=1e-12
    )


def test_virtual_stages_without_a_pipeline_change_nothing():
    assert fields(tp_.step_time(replace(BASE, vp=2), HW)) == fields(tp_.step_time(BASE, HW))


def test_the_context_ring():
    # c = 2: keys per kernel call 4096 / 2; the ring passes K and V 3 (c - 1) times (forward and backward)
    w = replace(BASE, cp=2, dp=2)
    hw = replace(HW, cp_link=1e9)  # slow: the ring outlasts the attention
    fwd, attn, elem, phase = layer(w, hw)
    assert attn == pytest.approx(2.0 * 2048 * 4096 * 1024 / 2 / (1e15 * 0.57 * 2048 / 2348), rel=1e-15)
    ring = 3.0 * 1 * 2 * 2048 * (256 / 2) * 2 / 1e9
    exposed = ring - 3.5 * attn
    assert exposed > 0
    t = tp_.step_time(w, hw)
    assert t.context_parallel == pytest.approx(2 * 3 * exposed, rel=1e-12)
    # data parallel over d x c = 4 ranks
    reduce = 1e8 * 4 * 3 / 4 / 5e10
    gather = 1e8 * 2 * 3 / 4 / 5e10
    assert t.optimizer == pytest.approx((1e8 / 4 * 30 + 1e8 * 8) / 2e12, rel=1e-12)
    hidden_dp = (reduce - t.data_parallel * reduce / (reduce + gather)) + (gather - t.data_parallel * gather / (reduce + gather))
    assert t.contention == pytest.approx(0.1097 * (hidden_dp + 2 * 3.5 * attn * 3) + 0.07434 * 2 * 4 * phase * 3, rel=1e-12)
    fast = tp_.step_time(w, HW)  # a fast ring hides behind the attention entirely
    assert fast.context_parallel == 0.0
    ring_fast = 3.0 * 2 * 2048 * 128 * 2 / 4e11
    assert fast.contention - tp_.step_time(replace(w, cp=2), replace(HW, cp_link=1e30)).contention == pytest.approx(
        0.1097 * 2 * ring_fast * 3, rel=1e-9
    )


def test_two_stages_interleaved_spread_the_reduction_over_the_cooldown():
    # p = 2, v = 2: chunk 1 of 2 still has (2 - 1) x 2 chunk-backwards to run: the window is 1/2 + 1 x 2 / 2 = 1.5 stages
    w = replace(BASE, pp=2, vp=2, microbatches=4, stage_parameters=4e9, layers=1)
    stage = stage_of(w)
    reduce = 4e9 * 4 * 3 / 4 / 5e10
    gather = 4e9 * 2 * 3 / 4 / 5e10
    exposed = max(reduce * 0.01, reduce - stage * 2 / 3 * 1.5) + max(gather * 0.01, gather - stage / 3 * 1.5)
    assert reduce - stage * 2 / 3 * 1.5 > reduce * 0.01  # the window decides
    t = tp_.step_time(w, HW)
    assert t.bubble == pytest.approx(0.5 * stage, rel=1e-12)
    assert t.data_parallel == pytest.approx(exposed, rel=1e-12)
