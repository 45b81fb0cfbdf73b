"""The planner's memory per GPU, its fixes, its suggestions and its tokens/s, against figures derived by hand.

Every expected number below is arithmetic written out from published sources, never a call into the planner:
- bytes per parameter for weights, gradients and optimizer states: Megatron-LM
  ``docs/user-guide/features/dist_optimizer.md`` (bf16 parameters with fp32 gradients: 18 bytes without the
  distributed optimizer, 6 + 12/d with it over d data-parallel ranks);
- parameters held by a tensor-parallel rank: Megatron-LM's ColumnParallelLinear/RowParallelLinear split the GEMM
  weights and the column-parallel biases over TP; norms and the row-parallel output biases are replicated; the
  vocabulary is padded to a multiple of 128 x TP (``--make-vocab-size-divisible-by``);
- activations: Korthikanti et al. 2022 (arXiv:2205.05198), Table 2: s*b*h*(34 + 5*a*s/h) bytes per layer, /t with
  sequence parallelism, 34/t with selective recompute; flash attention stores no s x s scores, so no 5as/h term;
  the first of p pipeline stages holds p micro-batches in flight (§4.2.3, 1F1B);
- the output layer and loss: Korthikanti §4.3, 4*s*b*h/t * (1 + V/h) bytes (the 16-bit inputs of the final norm
  and of the output projection, 4sbh, and the fp32 logits, 4sbV), the figure of Megatron-LM's
  ``megatron/training/theoretical_memory_usage.py``;
- 3 GiB per GPU kept free for the CUDA context and NCCL (megaprov's own allowance, ``planner.RESERVED_GIB``).
"""

from dataclasses import replace
from pathlib import Path

import pytest

from megaprov.training import jobspec, planner
from megaprov.training.planner import GIB, GPUS, Cluster, Layout

JOBS = Path(__file__).resolve().parents[3] / "examples" / "jobs"
RESERVED = 3 * 2**30
H100 = GPUS["H100-SXM"]  # 79.6 GiB


def spec(name):
    return jobspec.load(JOBS / f"{name}.yml")


def tweak(s, section, **fields):
    return s.model_copy(update={section: getattr(s, section).model_copy(update=fields)})


# ---------------------------------------------------------------------------------------- three layouts that fit


def test_gpt_345m_on_one_gpu_without_the_distributed_optimizer():
    """GPT-2 medium (L 24, h 1024, a 16, s 1024, V 50257 -> 50304), micro-batch 8, one H100, 18 bytes/parameter."""
    s = tweak(spec("gpt-345m-1node"), "parallel", distributed_optimizer=False)
    mem = planner.memory(s, Layout.of(s), Cluster(1, 1, H100))
    h, L, V, S, b = 1024, 24, 50304, 1024, 8
    layer = 12 * h * h + 13 * h  # QKV 3h^2+3h, proj h^2+h, MLP 8h^2+5h, two LayerNorms 4h
    params = L * layer + V * h + S * h + 2 * h  # + tied word embedding, learned positions, final LayerNorm
    assert params == 354_871_296
    assert mem.parameters == params
    assert mem.weights_and_optimizer == params * 18 == 6_387_683_328
    assert mem.activations == 34 * S * b * h * L == 6_845_104_128  # auto attention (flash/fused): no score term
    assert mem.logits == 4 * S * b * (h + V) == 1_681_915_904
    total = 6_387_683_328 + 6_845_104_128 + 1_681_915_904 + RESERVED
    assert mem.total == total == 18_135_928_832  # 16.89 GiB: fits
    assert mem.fits is True


def test_llama_8b_tp2_dp4_with_the_distributed_optimizer():
    """Llama-3-8B (L 32, h 4096, f 14336 SwiGLU, GQA 8 groups, V 128256, untied), TP 2 + SP, PP 1, DP 4, selective
    recompute, micro-batch 1, s 8192, flash attention, on one 8 x H100 node."""
    s = spec("llama-8b-2nodes")
    mem = planner.memory(s, Layout.of(s), Cluster(1, 8, H100))
    h, f, V, S, t = 4096, 14336, 128256, 8192, 2  # 128256 = 501 x 256 is already a multiple of 128 x TP
    linear = h * (h + 2 * 1024) + h * h + 3 * h * f  # QKV (8 groups of 128), output projection, SwiGLU MLP
    assert linear == 218_103_808
    per_rank_layer = linear // t + 2 * h  # the two RMSNorms are replicated on both TP ranks
    params = 32 * per_rank_layer + 2 * V * h // t + h  # + word embedding and output layer split over TP, final norm
    assert params == 4_015_263_744  # (8,030,261,248 + the replicated norms) / 2
    assert mem.parameters == params
    assert mem.weights_and_optimizer == params * (6 + 12 / 4) == 36_137_373_696  # sharded over the 4 DP ranks
    # Korthikanti's 34 = 15 (attention 11, norms 4) + 19 (GELU MLP: 2 + 2*4 + 2*4 + 1); SwiGLU with f/h = 3.5 stores
    # its input (2), the doubled first-GEMM output (2*2*3.5), the second GEMM's input (2*3.5) and a mask (1): 24.
    assert mem.activations == (15 + 24) * S * 1 * h / t * 32 == 20_937_965_568  # /t: sequence parallel
    assert mem.logits == 4 * S * 1 * (h + V) / t == 2_168_455_168
    assert mem.total == 36_137_373_696 + 20_937_965_568 + 2_168_455_168 + RESERVED == 62_465_019_904  # 58.18 GiB
    assert mem.fits is True


def test_gpt3_175b_tp8_pp16_dp8():
    """GPT-3 175B (L 96, h 12288, a 96, s 2048, V 50257 -> 51200) as Megatron-LM's example: TP 8 + SP, PP 16 (6 layers
    per stage), DP 8, selective recompute, distributed optimizer, micro-batch 1, on 128 x 8 H100."""
    s = spec("gpt3-175b-128nodes")
    mem = planner.memory(s, Layout.of(s), Cluster(128, 8, H100))
    h, V, S, t = 12288, 51200, 2048, 8
    per_rank_layer = 12 * h * h // t + 7 * h // t + 6 * h  # split: GEMMs, QKV and fc1 biases; replicated: 2 LNs, 2 biases
    first_stage = 6 * per_rank_layer + V * h // t + S * h  # word embedding (split) and learned positions (replicated)
    last_stage = 6 * per_rank_layer + V * h // t + 2 * h  # the tied embedding's copy and the final LayerNorm
    assert first_stage == 1_463_270_400 > last_stage
    assert mem.parameters == first_stage
    assert mem.weights_and_optimizer == first_stage * (6 + 12 / 8) == 10_974_528_000
    # first stage: 6 layers x 16 micro-batches in flight, 34*s*b*h/t each (selective recompute + sequence parallel)
    assert mem.activations == 34 * S * h / t * 6 * 16 == 10_267_656_192
    assert mem.logits == 4 * S * (h + V) / t == 65_011_712  # on the last stage (the planner adds it to the first's)
    assert mem.total == 10_974_528_000 + 10_267_656_192 + 65_011_712 + RESERVED == 24_528_421_376  # 22.84 GiB
    assert mem.fits is True


@pytest.mark.parametrize(("precision", "plain", "sharded"), [("bf16", 18, 6 + 12 / 8), ("fp16", 20, 4 + 16 / 8), ("fp32", 16, 8 + 8 / 8)])
def test_bytes_per_parameter_follow_megatrons_table(precision, plain, sharded):
    """The three rows of Megatron-LM's distributed-optimizer table, d = 8 (345M on one 8-GPU node, DP 8)."""
    s = tweak(spec("gpt-345m-1node"), "train", precision=precision)
    c = Cluster(1, 8, H100)
    params = 354_871_296  # as derived above
    dist = planner.memory(s, Layout.of(s), c)
    assert dist.weights_and_optimizer == pytest.approx(params * sharded, rel=1e-12)
    assert planner.memory(s, replace(Layout.of(s), distributed_optimizer=False), c).weights_and_optimizer == params * plain


def test_context_parallel_ranks_share_the_optimizer_shards():
    """Megatron shards the distributed optimizer over the data-parallel x context-parallel group: CP 2 x DP 4."""
    s = spec("gpt-345m-1node")
    mem = planner.memory(s, replace(Layout.of(s), cp=2), Cluster(1, 8, H100))
    assert mem.weights_and_optimizer == pytest.approx(354_871_296 * (6 + 12 / 8), rel=1e-12)
    assert mem.activations == 34 * (1024 / 2) * 8 * 1024 * 24  # each CP rank holds half the sequence
    assert mem.logits == 4 * (1024 / 2) * 8 * (1024 + 50304)


def test_fp32_training_stores_activations_in_four_bytes():
    s = tweak(spec("gpt-345m-1node"), "train", precision="fp32")
    assert planner.memory(s, Layout.of(s), Cluster(1, 8, H100)).activations == 2 * 6_845_104_128


def test_on_cpu_there_is_no_capacity_and_no_verdict():
    s = spec("gpt-345m-1node")
    mem = planner.memory(s, Layout.of(s), Cluster(1, 8, GPUS["cpu"]))
    assert (mem.capacity, mem.reserved, mem.fits) == (0.0, 0.0, None)


# ---------------------------------------------------------------- a job that does not fit, its fixes re-planned


def llama_on_one_node_without_dist_opt():
    s = tweak(spec("llama-8b-2nodes"), "parallel", distributed_optimizer=False, overlap_param_gather=False)
    return tweak(s, "launch", nodes=1)


def test_fixes_are_the_hand_derived_ones_and_each_fixed_spec_fits_when_planned_again():
    """Llama-8B on 8 x H100 with TP 2 and no distributed optimizer needs 91.8 GiB a GPU (the 4,015,263,744 parameters
    of the layout above at 18 bytes). Each single change below is derived by hand; the planner must name exactly
    these, and the spec with the change applied must plan again as fitting, at the hand-derived figure."""
    s = llama_on_one_node_without_dist_opt()
    c = Cluster(1, 8, H100)
    capacity = 79.6 * GIB
    S, h, V = 8192, 4096, 128256
    act_tp2 = 39 * S * h / 2 * 32  # as in the TP 2 layout above: 20,937,965,568
    logits_tp2 = 4 * S * (h + V) / 2
    original = 4_015_263_744 * 18 + act_tp2 + logits_tp2 + RESERVED
    assert original / GIB == pytest.approx(91.831, abs=1e-3) and original > capacity
    p = planner.plan(s, c)
    assert p.fits is False and p.memory.total == original

    # TP 4 (with sequence parallelism): V padded to a multiple of 512 = 128512; 32 layers of linear/4 + 2 norms.
    tp4 = (32 * (218_103_808 // 4 + 2 * h) + 2 * 128512 * h // 4 + h) * 18 + 39 * S * h / 4 * 32 + 4 * S * (h + 128512) / 4 + RESERVED
    # the distributed optimizer over DP 4: 6 + 12/4 bytes a parameter
    dist = 4_015_263_744 * (6 + 12 / 4) + act_tp2 + logits_tp2 + RESERVED
    # PP 2: 16 layers a stage; the last stage (output layer + final norm) is the larger; 2 micro-batches in flight
    pp2 = (16 * (218_103_808 // 2 + 2 * h) + 128256 * h // 2 + h) * 18 + 39 * S * h / 2 * 16 * 2 + logits_tp2 + RESERVED
    # full recompute: each layer keeps its 2-byte input (/t with SP), one layer is recomputed at a time (39/t)
    full = 4_015_263_744 * 18 + (2 * S * h / 2 * 32 + 39 * S * h / 2) + logits_tp2 + RESERVED
    expected = {
        ("parallel.tensor", 4): tp4,
        ("parallel.distributed_optimizer", True): dist,
        ("parallel.pipeline", 2): pp2,
        ("train.recompute", "full"): full,
    }
    assert all(v <= capacity for v in expected.values())
    assert [(f.field, f.value) for f in p.fixes] == sorted(expected, key=expected.get)  # smallest memory first
    for fix in p.fixes:
        assert fix.memory_gib == pytest.approx(expected[fix.field, fix.value] / GIB, rel=1e-12)
        section, name = fix.field.split(".")
        fixed = tweak(s, section, **{name: fix.value})
        if name == "tensor":
            fixed = tweak(fixed, "parallel", sequence_parallel=True)
        assert planner.spec_problems(fixed, c.world, c.gpus_per_node) == [], fix
        again = planner.plan(fixed, c)
        assert again.fits is True and again.memory.total == pytest.approx(expected[fix.field, fix.value], rel=1e-12), fix
        assert again.fixes == ()
    assert "parallel.distributed_optimizer=True (58.2 GiB)" in [f.render() for f in p.fixes]


def test_a_micro_batch_fix_is_a_smaller_divisor_and_fits_when_planned_again():
    """345M with micro-batch 32 on one 24 GB A10 (22.0 GiB): activations 34*s*b*h*L and 4*s*b*(h + V) grow with b.
    The fix is the largest micro-batch that fits (8), the least change, not 1 (which fits too, but runs small GEMMs)."""
    s = tweak(spec("gpt-345m-1node"), "train", micro_batch_size=32)
    c = Cluster(1, 1, GPUS["A10"])
    weights = 354_871_296 * 18

    def total(b):
        return weights + 34 * 1024 * b * 1024 * 24 + 4 * 1024 * b * (1024 + 50304) + RESERVED

    assert total(32) / GIB > total(16) / GIB > 22.0 >= total(8) / GIB  # 40.71, 24.80, 16.89 GiB
    p = planner.plan(s, c)
    assert p.fits is False and p.memory.total == total(32)
    micro = [f for f in p.fixes if f.field == "train.micro_batch_size"]
    assert [(f.value, f.memory_gib) for f in micro] == [(8, pytest.approx(total(8) / GIB, rel=1e-12))]
    again = planner.plan(tweak(s, "train", micro_batch_size=8), c)
    assert again.fits is True and again.memory.total == total(8)


def test_a_job_that_fits_gets_no_fixes():
    p = planner.plan(spec("llama-8b-2nodes"), Cluster(2, 8, H100))
    assert p.fits is True and p.fixes == ()


def test_suggestions_fit_when_planned_again_and_the_best_is_the_hand_derived_one():
    """Every suggested layout, written into the spec and planned again, is valid and fits at the suggested figure.
    The best for Llama-8B (sequence 8,192) on 8 x H100 is TP 2 + SP, DP 4, micro-batch 1, no recompute, distributed
    optimizer (its memory by hand below)."""
    s = llama_on_one_node_without_dist_opt()
    c = Cluster(1, 8, H100)
    found = planner.suggest(s, c, top=6)
    assert len(found) == 6
    assert len({(c.layout.tp, c.layout.pp) for c in found}) == 6  # one line per split of the model
    for cand in found:
        lay = cand.layout
        fixed = tweak(
            s,
            "parallel",
            tensor=lay.tp,
            pipeline=lay.pp,
            context=lay.cp,
            virtual_stages=lay.vp,
            sequence_parallel=lay.sequence_parallel,
            distributed_optimizer=lay.distributed_optimizer,
        )
        fixed = tweak(fixed, "train", micro_batch_size=lay.micro_batch, recompute=lay.recompute)
        assert planner.spec_problems(fixed, c.world, c.gpus_per_node) == [], lay
        again = planner.plan(fixed, c)
        assert again.fits is True, lay
        assert again.memory.total / GIB == pytest.approx(cand.memory_gib, rel=1e-12)
        assert again.data_parallel == cand.data_parallel == 8 // (lay.tp * lay.pp * lay.cp)
        assert again.tokens_per_second == pytest.approx(cand.tokens_per_second, rel=1e-12)
        assert (again.mfu_assumed, again.step_seconds) == (pytest.approx(cand.mfu, rel=1e-12), pytest.approx(cand.step_seconds, rel=1e-12))
    best = found[0]
    assert best.layout == Layout(2, 1, 1, None, 1, "none", True, True)
    # TP 2: V = 128256 (a multiple of 256); one stage: 32 layers of (6144 + 4096 + 28672 + 14336) x 4096 / 2 GEMM weights
    # + 2 replicated RMSNorms, the embedding and output layer split over TP, the final norm: 4,015,263,744 parameters;
    # the optimizer shards over DP 4: 6 + 12/4 bytes; 32 layers x 1 micro-batch in flight x 39/2*s*h (SP, flash);
    # output layer 4*s*(h + V)/2.
    layer = (6144 + 4096 + 28672 + 14336) * 4096 // 2 + 2 * 4096
    params = 32 * layer + 2 * 128256 * 4096 // 2 + 4096
    assert params == 4_015_263_744
    total = params * (6 + 12 / 4) + 39 / 2 * 8192 * 4096 * 32 + 4 * 8192 * (4096 + 128256) / 2 + RESERVED
    assert best.memory_gib == pytest.approx(total / GIB, rel=1e-12)  # 58.17 GiB


# ------------------------------------------------------------------------------------------------ tokens/s


def test_tokens_per_second_of_the_175b_example_are_its_batch_over_the_modelled_step():
    """tokens/s = global batch x sequence / the step-time model's iteration; MFU = Megatron-LM's FLOPs over the
    iteration x world x peak. FLOPs per token in closed form (Narayanan et al. 2021): 72*L*h^2*(1 + s/(12h) + V/(12Lh)).
    The mechanisms themselves are tested against hand figures in test_throughput.py."""
    p = planner.plan(spec("gpt3-175b-128nodes"), Cluster(128, 8, H100))
    L, h, S, V = 96, 12288, 2048, 51200
    assert p.step_seconds == pytest.approx(p.time.total, rel=1e-12)
    assert p.tokens_per_second == pytest.approx(1536 * 2048 / p.time.total, rel=1e-12)
    assert p.mfu_assumed == pytest.approx(1536 * S * gpt_per_token(L, h, S, V) / (p.time.total * 1024 * 989e12), rel=1e-12)
    # Near Megatron-LM's published H100 runs of this size (42-48 % at a sequence of 4,096, with every overlap on); the
    # example leaves tp_comm_overlap off, which costs it the exposed tensor-parallel phases
    assert 0.35 < p.mfu_assumed < 0.42
    overlapped = planner.plan(tweak(spec("gpt3-175b-128nodes"), "parallel", tp_comm_overlap=True), Cluster(128, 8, H100))
    assert p.mfu_assumed < overlapped.mfu_assumed < 0.48
    assert overlapped.time.tensor_parallel < p.time.tensor_parallel / 3


def gpt_per_token(L, h, S, V):
    """Megatron-LM's FLOPs per token for a GELU GPT with a 4h MLP, in closed form (Narayanan et al. 2021)."""
    return 72 * L * h * h * (1 + S / (12 * h) + V / (12 * L * h))


def test_links_follow_where_each_group_lies():
    """Bus bandwidth per GPU: NVLink x 0.8 inside a node; across nodes the NICs (x 0.9) of the group's members in each
    node, up to NVLink's; PCIe x 0.9 without NVLink. Megatron-LM orders ranks TP, CP, DP, PP: TP 8 on nodes of 4
    crosses nodes on 4 NICs; DP x CP spans world/p ranks t apart; a pipeline send crosses nodes once there are two."""
    nvlink, ib = 450e9 * 0.8, 50e9 * 0.9
    s = spec("gpt3-175b-128nodes")  # TP 8, PP 16 on 128 nodes: a stage is 64 ranks, 8 nodes
    assert planner.links(Layout.of(s), Cluster(128, 8, H100)) == (nvlink, ib, ib, nvlink)  # DP: one member a node
    assert planner.links(replace(Layout.of(s), tp=8, cp=2), Cluster(128, 8, H100))[3] == ib  # CP 2 x TP 8 spans 2 nodes
    assert planner.links(replace(Layout.of(s), tp=2, pp=16), Cluster(128, 8, H100))[2] == 4 * ib  # 4 members a node
    one = planner.links(Layout.of(s), Cluster(1, 8, H100))
    assert one == (nvlink,) * 4  # one node: every group on NVLink
    assert planner.links(replace(Layout.of(s), tp=8, pp=1), Cluster(2, 4, H100))[0] == 4 * ib
    assert planner.links(replace(Layout.of(s), tp=1, pp=1), Cluster(2, 8, H100))[2] == nvlink  # 8 NICs: NVLink's rate
    pcie = GPUS["H100-PCIe"]
    assert planner.links(replace(Layout.of(s), pp=1), Cluster(1, 8, pcie))[0] == 32e9 * 0.9
    # 2 nodes of 8, PP 2: each stage fills a node, the neighbours are a node apart, DP stays inside the node
    assert planner.links(Layout(1, 2, 1, None, 1, "none", False, True), Cluster(2, 8, H100)) == (nvlink, ib, nvlink, nvlink)
    # PP 4 on 2 nodes: stages 2 ranks wide, and the send from stage 2 to 3 crosses nodes
    assert planner.links(Layout(4, 4, 1, None, 1, "none", True, True), Cluster(2, 8, H100))[1] == ib


def test_tensor_parallelism_without_nvlink_or_across_nodes_costs_its_traffic_at_the_slower_link():
    """345M with TP 2 + SP: the tensor-parallel seconds scale with 1/link: 6 exposed phases of 1/2 x 2*T*h bytes per
    layer and micro-batch (T = 8 x 1024 tokens) over PCIe at 32 GB/s x 0.9 against NVLink at 450 x 0.8; TP 8 on nodes
    of 4 runs over the 4 NICs of each node."""
    s = tweak(spec("gpt-345m-1node"), "parallel", tensor=2, sequence_parallel=True)
    pcie = planner.plan(s, Cluster(1, 8, GPUS["H100-PCIe"]))
    nv = planner.plan(s, Cluster(1, 8, H100))
    per_mb = 6 * 0.5 * 2 * 8192 * 1024
    m = 256 // (8 * 4)  # DP 4
    assert pcie.time.tensor_parallel == pytest.approx(24 * m * per_mb / (32e9 * 0.9), rel=1e-12)
    assert nv.time.tensor_parallel == pytest.approx(24 * m * per_mb / (450e9 * 0.8), rel=1e-12)
    across = planner.plan(tweak(s, "parallel", tensor=8), Cluster(2, 4, H100))
    assert across.time.tensor_parallel == pytest.approx(24 * (256 // 8) * 6 * 7 / 8 * 2 * 8192 * 1024 / (4 * 50e9 * 0.9), rel=1e-12)


def test_context_parallelism_splits_the_rows_and_pays_for_the_ring_beyond_the_attention():
    """CP c: each rank's GEMMs have b x s / c rows; the ring moves 3 x (c-1) x K and V (2 x T x h x 2 bytes) per layer
    and micro-batch, exposed where it outlasts the attention."""
    for cp in (2, 4):
        s = tweak(spec("gpt-345m-1node"), "parallel", context=cp)
        c = Cluster(1, 8, H100)
        w = planner.work(s, Layout.of(s), c)
        assert (w.tokens, w.cp, w.dp) == (8 * 1024 // cp, cp, 8 // cp)
        p = planner.plan(s, c)
        hw_link = 450e9 * 0.8
        ring = 3 * (cp - 1) * 2 * w.tokens * 1024 * 2 / hw_link
        attention = p.time.parts["attention"] / 24
        assert p.time.context_parallel == pytest.approx(w.microbatches * 24 * max(0.0, ring - attention), rel=1e-12)


def test_the_interleaved_pipeline_divides_the_bubble_by_its_virtual_stages():
    """175B, PP 16, m = 1536 / 8 = 192 micro-batches: the bubble is (p - 1)/v micro-batch slots of the slowest stage."""
    base = spec("gpt3-175b-128nodes")
    for vp in (None, 2, 3):
        s = tweak(base, "parallel", virtual_stages=vp)
        t = planner.plan(s, Cluster(128, 8, H100)).time
        stage_mb = sum(t.parts.values())
        assert t.bubble == pytest.approx(15 / (vp or 1) * stage_mb, rel=1e-12)
        assert t.gemm == pytest.approx(192 * t.parts["gemm"], rel=1e-12)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_recompute_repeats_a_forward_pass(recompute):
    """Selective repeats the core attention's forward, full each layer's whole forward (GEMMs a third of their
    forward-and-backward seconds)."""
    s = tweak(spec("gpt3-175b-128nodes"), "train", recompute=recompute)
    t = planner.plan(s, Cluster(128, 8, H100)).time
    attention_forward = t.parts["attention"] / 3.5
    if recompute == "none":
        assert t.recompute == 0.0
    elif recompute == "selective":
        assert t.recompute == pytest.approx(attention_forward * 192, rel=1e-12)
    else:
        assert t.recompute > (t.parts["gemm"] / 3 + attention_forward) * 192


def test_fp32_training_runs_at_the_fp32_peak_published_or_scaled_from_a_measured_rate():
    s = tweak(spec("gpt-345m-1node"), "train", precision="fp32")
    published = planner.rank_peak(Cluster(1, 8, H100), s)
    assert (published.tflops, published.source, published.host) == (494.0, "published", None)
    assert published.text == "published peak of H100-SXM, 494.0 TFLOP/s fp32 (no measured rate: run megaprov bootstrap or preflight)"
    bf16 = planner.rank_peak(Cluster(1, 8, H100), spec("gpt-345m-1node"))
    assert (bf16.tflops, bf16.text) == (
        989.0,
        "published peak of H100-SXM, 989.0 TFLOP/s bf16 (no measured rate: run megaprov bootstrap or preflight)",
    )
    rate = planner.NodeRate("g1", 700.0, 8, "torch-cuda", "bfloat16", "t")
    measured = planner.rank_peak(Cluster(1, 8, H100, hosts=("g1",), rates=(rate,)), s)
    assert measured.tflops == pytest.approx(700.0 * 494 / 989, rel=1e-12)  # the data sheet's fp32/bf16 ratio: 349.65
    assert measured.text == (
        "measured rate of g1, 349.6 TFLOP/s per rank (bfloat16 GEMM, torch-cuda, t), the slowest of 1 measured node(s)"
        " scaled to fp32 by the published ratio"
    )
    # the same rate for bf16 training: as measured, not scaled
    assert planner.rank_peak(Cluster(1, 8, H100, hosts=("g1",), rates=(rate,)), spec("gpt-345m-1node")).tflops == 700.0


def test_cpu_ranks_on_one_node_share_its_measured_rate():
    rate = planner.NodeRate("n1", 0.040, 1, "torch-cpu", "float32", "t")
    peak = planner.rank_peak(Cluster(1, 2, GPUS["cpu"], hosts=("n1",), rates=(rate,)), spec("lab-tiny"))
    assert peak.tflops == pytest.approx(0.020)  # two processes on the node: half each
    assert peak.text == "measured rate of n1, 20.0 GFLOP/s per rank (float32 GEMM, torch-cpu, t), the slowest of 1 measured node(s)"
    # no host list: every rate given is the job's
    assert planner.job_rates(Cluster(1, 2, GPUS["cpu"], rates=(rate,))) == (rate,)
    nominal = planner.rank_peak(Cluster(1, 2, GPUS["cpu"]), spec("lab-tiny"))
    assert nominal.text == "nominal CPU peak 100.0 GFLOP/s (no measured rate: run megaprov bootstrap, whose python stage measures it)"


# ------------------------------------------------------------------------------------------------ suggest


def test_suggest_enumerates_every_valid_layout_once():
    """345M on 2 x H100 (distributed optimizer on in the spec, so only layouts with it). (TP, PP, CP) whose product
    divides 2: (1,1,1) DP 2, (2,1,1), (1,2,1), (1,1,2) DP 1. Micro-batches: divisors of 128 or 256 up to 16 (5).
    Recompute: 3. Virtual stages with PP 2 (12 layers a stage): none, 2, 3, 4, 6, 12. All fit in 79.6 GiB.
    3 x 15 + 15 x 6 = 135."""
    s = spec("gpt-345m-1node")
    found = planner.candidates(s, Cluster(1, 2, H100))
    assert len(found) == 135
    assert len({c.layout for c in found}) == 135
    assert all(c.layout.distributed_optimizer and c.layout.sequence_parallel == (c.layout.tp > 1) for c in found)
    assert {(c.layout.tp, c.layout.pp, c.layout.cp) for c in found} == {(1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2)}
    assert {c.layout.micro_batch for c in found} == {1, 2, 4, 8, 16}
    assert {c.layout.recompute for c in found} == {"none", "selective", "full"}
    assert {c.layout.vp for c in found if c.layout.pp == 2} == {None, 2, 3, 4, 6, 12}
    assert {c.data_parallel for c in found if c.layout.tp * c.layout.pp * c.layout.cp == 1} == {2}
    keys = [(-round(c.tokens_per_second, 6), c.memory_gib) for c in found]
    assert keys == sorted(keys)  # fastest first, then the smaller
    # suggest: the best of each split, in the same order
    best = planner.suggest(s, Cluster(1, 2, H100))
    assert [c.layout for c in best] == [
        next(c for c in found if (c.layout.tp, c.layout.pp) == split).layout for split in [(c.layout.tp, c.layout.pp) for c in best]
    ]
    assert len(best) == 3 and best[0] == found[0]  # (1, 1), (2, 1), (1, 2): CP is each split's knob
    assert len(planner.suggest(s, Cluster(1, 2, H100), top=2)) == 2


def test_suggest_offers_the_distributed_optimizer_both_ways_when_the_spec_leaves_it_off():
    s = tweak(spec("gpt-345m-1node"), "parallel", distributed_optimizer=False)
    found = planner.candidates(s, Cluster(1, 2, H100))
    assert len(found) == 270 and {c.layout.distributed_optimizer for c in found} == {False, True}


def test_suggest_for_the_lab_trainer_keeps_to_tensor_and_data_parallelism():
    """lab-tiny (2 layers, 4 heads, s 128, global 8) on 2 CPU nodes: TP 1 (one process a node), DP 2, micro-batches
    1, 2, 4, three recompute modes, distributed optimizer off and on: 18 layouts, no PP or CP."""
    found = planner.candidates(spec("lab-tiny"), Cluster(2, 1, GPUS["cpu"]))
    assert len(found) == 18
    assert {(c.layout.tp, c.layout.pp, c.layout.cp, c.data_parallel) for c in found} == {(1, 1, 1, 2)}


def test_sequence_parallelism_as_a_fix():
    """Llama-8B, TP 2 without SP, micro-batch 2, distributed optimizer over DP 4, on an 88 GiB GPU. Without SP a layer
    stores s*b*h*(10 + 29/2) bytes (Korthikanti Table 2, the replicated 10 and the split 29 of SwiGLU's 39); with SP
    all 39/2. s*b*h = 8192 x 2 x 4096; 32 layers; output layer 4*s*b*(h + V)/t."""
    s = tweak(spec("llama-8b-2nodes"), "parallel", sequence_parallel=False)
    s = tweak(tweak(s, "train", micro_batch_size=2), "launch", nodes=1)
    c = Cluster(1, 8, planner.Gpu("test-88GiB", 88.0, 989.0, 494.0))
    sbh = 8192 * 2 * 4096
    rest = 4_015_263_744 * (6 + 12 / 4) + 4 * 8192 * 2 * (4096 + 128256) / 2 + RESERVED
    without_sp, with_sp = rest + (10 + 29 / 2) * sbh * 32, rest + 39 / 2 * sbh * 32
    assert without_sp / GIB > 88.0 > with_sp / GIB  # 89.69 and 79.69 GiB
    p = planner.plan(s, c)
    assert p.memory.total == without_sp and p.fits is False
    sp = [f for f in p.fixes if f.field == "parallel.sequence_parallel"]
    assert [(f.value, f.memory_gib) for f in sp] == [(True, pytest.approx(with_sp / GIB, rel=1e-12))]
    again = planner.plan(tweak(s, "parallel", sequence_parallel=True), c)
    assert again.fits is True and again.memory.total == with_sp
    # the TP 4 fix turns SP on as well: V padded to 128512, DP 2 (6 + 12/2 bytes), 39/4 per layer
    tp4 = (32 * (218_103_808 // 4 + 2 * 4096) + 2 * 128512 * 4096 // 4 + 4096) * (6 + 12 / 2)
    tp4 += 39 * sbh / 4 * 32 + 4 * 8192 * 2 * (4096 + 128512) / 4 + RESERVED
    assert [f.memory_gib for f in p.fixes if f.field == "parallel.tensor"] == [pytest.approx(tp4 / GIB, rel=1e-12)]


def test_with_flash_attention_the_recompute_fix_is_full():
    """Selective recompute drops only the attention scores, which flash attention never stores: for Llama-8B without
    the distributed optimizer and without recompute (91.8 GiB, as above) selective changes nothing; full fits."""
    s = tweak(llama_on_one_node_without_dist_opt(), "train", recompute="none")
    p = planner.plan(s, Cluster(1, 8, H100))
    assert p.fits is False
    assert [f.value for f in p.fixes if f.field == "train.recompute"] == ["full"]


def test_a_pipeline_fix_may_span_nodes():
    """The same job on 4 nodes of 2 GPUs: TP 4 no longer fits in a node; PP 2 (TP 2 x PP 2 = 4 GPUs of the world of
    8, DP 2) does, as do the distributed optimizer and full recompute."""
    s = tweak(llama_on_one_node_without_dist_opt(), "launch", nodes=4, gpus_per_node=2)
    p = planner.plan(s, Cluster(4, 2, H100))
    assert {(f.field, f.value) for f in p.fixes} == {("parallel.distributed_optimizer", True), ("parallel.pipeline", 2), ("train.recompute", "full")}


def test_a_fix_that_would_fit_but_breaks_a_rule_is_not_offered():
    """Llama-8B at TP 1 on 3 x H200 without the distributed optimizer (181 GiB a GPU). PP 2 would hold 113 GiB, but 2
    does not divide a world of 3 GPUs (and no other divisor of 32 does): the only fix is the distributed optimizer."""
    s = tweak(spec("llama-8b-2nodes"), "parallel", tensor=1, sequence_parallel=False, distributed_optimizer=False, overlap_param_gather=False)
    s = tweak(tweak(s, "train", global_batch_size=96), "launch", nodes=3, gpus_per_node=1)
    c = Cluster(3, 1, GPUS["H200"])
    assert planner.memory(s, replace(Layout.of(s), pp=2), c).fits is True
    assert planner.spec_problems(tweak(s, "parallel", pipeline=2), 3, 1) != []
    assert [f.field for f in planner.plan(s, c).fixes] == ["parallel.distributed_optimizer"]
    # TP 8 across nodes of 4 GPUs breaks a rule whatever single change is made: no fix at all, although a smaller
    # micro-batch or more recompute would fit this 345M (35.64 GiB at micro-batch 256, 19.70 at 128, on a 22.0 GiB A10)
    wide = tweak(tweak(spec("gpt-345m-1node"), "parallel", tensor=8, sequence_parallel=True), "train", micro_batch_size=256)
    narrow = Cluster(2, 4, GPUS["A10"])
    assert planner.memory(wide, Layout.of(wide), narrow).fits is False
    assert planner.memory(wide, replace(Layout.of(wide), micro_batch=128), narrow).fits is True
    assert planner.fixes(wide, narrow) == []


@pytest.mark.parametrize(
    ("name", "changes", "expected"),
    [
        # 345M on 8 x H100 (distributed optimizer on, TP 1): the least change of each kind that fits
        ("gpt-345m-1node", {}, [("parallel.tensor", 2), ("parallel.pipeline", 2), ("train.micro_batch_size", 4), ("train.recompute", "selective")]),
        ("gpt-345m-1node", {"recompute": "full"}, [("parallel.tensor", 2), ("parallel.pipeline", 2), ("train.micro_batch_size", 4)]),
        # Llama-8B on 2 x 8 H100 (TP 2 with SP, selective recompute, distributed optimizer on)
        ("llama-8b-2nodes", {}, [("parallel.tensor", 4), ("parallel.pipeline", 2), ("train.recompute", "full")]),
    ],
)
def test_every_fix_changes_something(name, changes, expected):
    """fixes() on jobs that already fit: each fix names a value the spec does not have already."""
    s = tweak(spec(name), "train", **changes)
    c = Cluster(s.launch.nodes, 8, H100)
    assert sorted((f.field, f.value) for f in planner.fixes(s, c)) == sorted(expected)


def test_suggest_keeps_the_layouts_megatron_accepts():
    """345M cut to s = 48 and a global batch of 24 on one 16-GPU node: CP 16 needs s divisible by 32 (48 is not);
    DP 16 does not divide 24 (DP 1, 2, 4 and 8 do); TP divides 16 heads up to 16."""
    s = tweak(tweak(spec("gpt-345m-1node"), "model", seq_length=48, max_position_embeddings=48), "train", global_batch_size=24)
    found = planner.candidates(s, Cluster(1, 16, H100))
    assert {c.layout.cp for c in found} == {1, 2, 4, 8}
    assert {c.data_parallel for c in found} == {1, 2, 4, 8}
    assert {c.layout.tp for c in found} == {1, 2, 4, 8, 16}


def test_suggest_tensor_parallelism_divides_the_query_groups_and_the_mlp():
    # 2 query groups: TP 1 or 2 (4 would split a group); the MLP width 14340 = 4 x 3585 is no multiple of 8
    s = tweak(spec("llama-8b-2nodes"), "model", num_query_groups=2)
    assert {c.layout.tp for c in planner.suggest(s, Cluster(1, 8, GPUS["B200"]), top=100_000)} == {1, 2}
    s = tweak(spec("llama-8b-2nodes"), "model", ffn_hidden_size=14340)
    assert {c.layout.tp for c in planner.suggest(s, Cluster(1, 8, GPUS["B200"]), top=100_000)} == {1, 2, 4}


def test_suggest_bounds_virtual_stages_and_micro_batches():
    # 144 layers on PP 2: 72 a stage, every divisor above 1 (Megatron-LM accepts one layer per virtual stage)
    s = tweak(spec("gpt-345m-1node"), "model", num_layers=144)
    vps = {c.layout.vp for c in planner.candidates(s, Cluster(1, 2, H100)) if c.layout.pp == 2}
    assert vps == {None, 2, 3, 4, 6, 8, 9, 12, 18, 24, 36, 72}
    # 34 sequences a rank: micro-batches 1 and 2 (17 and 34 are above the 16 the planner tries)
    lab = tweak(spec("lab-tiny"), "train", global_batch_size=68)
    assert {c.layout.micro_batch for c in planner.candidates(lab, Cluster(2, 1, GPUS["cpu"]))} == {1, 2}


def test_suggest_ranks_by_speed_even_when_every_speed_is_below_one_token_per_second():
    """Nodes measured at 0.1 MFLOP/s: every layout runs at about 0.001 tokens/s; the fastest still comes first."""
    rate = planner.NodeRate("n1", 1e-7, 1, "torch-cpu", "float32")
    found = planner.candidates(spec("lab-tiny"), Cluster(2, 1, GPUS["cpu"], hosts=("n1", "n2"), rates=(rate,)))
    speeds = [c.tokens_per_second for c in found]
    assert max(speeds) < 1 and speeds == sorted(speeds, reverse=True) and speeds[0] > speeds[-1]


# ------------------------------------------------------------------------- activations, branch by branch


def gpt175b(attention="unfused", **train):
    s = tweak(spec("gpt3-175b-128nodes"), "model", attention_backend=attention)
    return tweak(s, "train", **train) if train else s


C175 = Cluster(128, 8, H100)
S175, H175, A175, T175 = 2048, 12288, 96, 8
SBH = S175 * 1 * H175  # micro-batch 1
SCORES = 5 * A175 * S175 / H175  # Korthikanti's 5as/h = 80 for GPT-3 175B
IN_FLIGHT = 6 * 16  # first stage: 6 layers x 16 micro-batches


@pytest.mark.parametrize(
    ("recompute", "sp", "per_layer", "working"),
    [
        # Table 2, no recompute: sbh(34 + 5as/h)/t with SP, sbh(10 + 24/t + 5as/(ht)) without
        ("none", True, SBH * (34 + SCORES) / T175, 0.0),
        ("none", False, SBH * (10 + (24 + SCORES) / T175), 0.0),
        # selective: the scores are not kept, one layer's are rebuilt at a time
        ("selective", True, SBH * 34 / T175, SBH * SCORES / T175),
        ("selective", False, SBH * (10 + 24 / T175), SBH * SCORES / T175),
        # full: each layer keeps its 2-byte input (split by SP); one whole layer is rebuilt at a time
        ("full", True, 2 * SBH / T175, SBH * (34 + SCORES) / T175),
        ("full", False, 2 * SBH, SBH * (10 + (24 + SCORES) / T175)),
    ],
)
def test_activations_of_the_175b_layout_with_unfused_attention(recompute, sp, per_layer, working):
    s = gpt175b(recompute=recompute)
    layout = replace(Layout.of(s), sequence_parallel=sp)
    assert planner.memory(s, layout, C175).activations == pytest.approx(per_layer * IN_FLIGHT + working, rel=1e-12)


def test_fewer_micro_batches_than_stages_are_all_in_flight():
    """A global batch of 64 over DP 8: 8 micro-batches, fewer than the 16 stages: the first stage holds 8, not 16."""
    s = tweak(spec("gpt3-175b-128nodes"), "train", global_batch_size=64)
    assert planner.memory(s, Layout.of(s), C175).activations == pytest.approx(34 * SBH / T175 * 6 * 8, rel=1e-12)


def test_the_interleaved_schedule_holds_more_in_flight():
    """Korthikanti §4.2.3: x (1 + (p - 1)/(p v)) with v = 2 virtual stages: 1 + 15/32."""
    s = tweak(spec("gpt3-175b-128nodes"), "parallel", virtual_stages=2)
    assert planner.memory(s, Layout.of(s), C175).activations == pytest.approx(34 * SBH / T175 * IN_FLIGHT * (1 + 15 / 32), rel=1e-12)


def test_the_lab_model_stores_its_attention_scores():
    """lab-tiny (L 2, h 64, a 4, s 128, micro-batch 4, fp32, the local attention that keeps the scores): per layer
    s*b*h*(34 + 5as/h) = 128*4*64*(34 + 40) bytes at 16 bits, twice that in fp32; V = 257 padded to 384."""
    s = spec("lab-tiny")
    mem = planner.memory(s, Layout.of(s), Cluster(2, 1, GPUS["cpu"]))
    assert mem.activations == 2 * 128 * 4 * 64 * (34 + 5 * 4 * 128 / 64) * 2
    assert mem.logits == 4 * 128 * 4 * (2 * 64 + 384)  # fp32: the inputs of the output layer in 4 bytes


def test_the_distributed_optimizer_on_one_gpu_has_nothing_to_shard():
    """d = 1 in Megatron's table: 6 + 12/1 = 18 bytes, the same as without it."""
    s = spec("gpt-345m-1node")  # distributed_optimizer: true
    assert planner.memory(s, Layout.of(s), Cluster(1, 1, H100)).weights_and_optimizer == 354_871_296 * 18


def test_the_lab_estimate_by_hand():
    """lab-tiny on 2 CPU nodes measured at 20 GFLOP/s: MFU 0.025 (CPU_MFU) x rows/(rows + 256) x cols/(cols + 128)
    with rows 4 x 128 = 512 and cols 64; no TP, PP or CP factor (one process a node, no NVLink is no penalty at TP 1).
    FLOPs per token: 72*L*h^2*(1 + s/(12h) + V/(12Lh)) with L 2, h 64, s 128, V 384."""
    rate = planner.NodeRate("n1", 0.020, 1, "torch-cpu", "float32")
    p = planner.plan(spec("lab-tiny"), Cluster(2, 1, GPUS["cpu"], hosts=("n1", "n2"), rates=(rate, replace(rate, host="n2"))))
    mfu = 0.025 * (512 / 768) * (64 / 192)
    assert p.mfu_assumed == pytest.approx(mfu, rel=1e-12)
    assert p.tokens_per_second == pytest.approx(2 * 0.020e12 * mfu / gpt_per_token(2, 64, 128, 384), rel=1e-12)


def test_one_micro_batch_on_two_stages_makes_a_bubble_of_a_whole_step():
    """345M, PP 2, DP 4, micro 8, global 32: one micro-batch: the bubble (p - 1)/m = 1 slot, as long as the step's work."""
    s = tweak(tweak(spec("gpt-345m-1node"), "parallel", pipeline=2), "train", global_batch_size=32)
    t = planner.plan(s, Cluster(1, 8, H100)).time
    assert t.bubble == pytest.approx(sum(t.parts.values()), rel=1e-12)


@pytest.mark.parametrize(("seq", "gpus", "cps"), [(1023, 2, {1}), (1022, 2, {1}), (1024, 16, {1, 2, 4, 8, 16})])
def test_suggest_context_parallelism_follows_the_sequence(seq, gpus, cps):
    """CP c needs s divisible by 2c: an odd or 2-mod-4 length gets none; 1024 takes every CP up to 16 on 16 GPUs."""
    s = tweak(spec("gpt-345m-1node"), "model", seq_length=seq, max_position_embeddings=1024)
    assert {c.layout.cp for c in planner.candidates(s, Cluster(1, gpus, H100))} == cps


def test_a_layout_written_into_the_spec_reads_back_the_same():
    """_with() is what fixes() validates: every field of the layout must land in the spec."""
    s = spec("gpt3-175b-128nodes")
    layout = Layout(4, 8, 2, 3, 2, "full", False, False)
    assert Layout.of(planner._with(s, layout)) == layout


def test_speeds_equal_to_a_millionth_of_a_token_per_second_are_ranked_by_memory():
    """The ranking treats estimates that agree to 6 decimal places as ties (float noise) and puts the smaller first.
    At 0.0001 GFLOP/s every lab-tiny layout runs at 0.5-1.3 millionths of a token/s: all tie, memory decides."""
    rate = planner.NodeRate("n1", 1e-10, 1, "torch-cpu", "float32")
    found = planner.candidates(spec("lab-tiny"), Cluster(2, 1, GPUS["cpu"], hosts=("n1", "n2"), rates=(rate,)))
    assert {round(c.tokens_per_second, 6) for c in found} == {1e-06}
    assert len({c.tokens_per_second for c in found}) > 1
    memory = [c.memory_gib for c in found]
    assert memory == sorted(memory)


def test_tensor_and_context_parallelism_together():
    """TP 2 + SP and CP 2 on 8 x H100: DP 2, rows 8 x 1024 / 2 = 4096 a rank, 256 / (8 x 2) = 16 micro-batches."""
    s = tweak(spec("gpt-345m-1node"), "parallel", tensor=2, sequence_parallel=True, context=2)
    w = planner.work(s, Layout.of(s), Cluster(1, 8, H100))
    assert (w.tokens, w.tp, w.cp, w.dp, w.microbatches, w.sequence_parallel) == (4096, 2, 2, 2, 16, True)


def test_a_pipeline_without_data_parallelism_counts_every_sequence_as_a_micro_batch():
    """PP 8 on 8 GPUs: DP 1, 256 / 8 = 32 micro-batches, bubble 7/32 of the step's micro-batch slots."""
    s = tweak(spec("gpt-345m-1node"), "parallel", pipeline=8)
    p = planner.plan(s, Cluster(1, 8, H100))
    w = planner.work(s, Layout.of(s), Cluster(1, 8, H100))
    assert (w.dp, w.microbatches, w.layers) == (1, 32, 3)
    assert p.time.bubble == pytest.approx(7 * sum(p.time.parts.values()), rel=1e-12)
    assert p.time.data_parallel == 0.0  # nothing to reduce over one data-parallel rank


def test_pipeline_and_context_parallelism_together():
    """PP 2 x CP 2 on 8 x H100: DP 2, 256 / (8 x 2) = 16 micro-batches, 12 layers a stage, rows 8 x 1024 / 2."""
    s = tweak(spec("gpt-345m-1node"), "parallel", pipeline=2, context=2)
    w = planner.work(s, Layout.of(s), Cluster(1, 8, H100))
    assert (w.dp, w.microbatches, w.layers, w.tokens, w.pp, w.cp) == (2, 16, 12, 4096, 2, 2)


def test_the_peak_names_every_node_left_unmeasured():
    rate = planner.NodeRate("a", 700.0, 8, "torch-cuda", "bfloat16", "t")
    peak = planner.rank_peak(Cluster(3, 8, H100, hosts=("a", "b", "c"), rates=(rate,)), spec("llama-8b-2nodes"))
    assert peak.text == (
        "measured rate of a, 700.0 TFLOP/s per rank (bfloat16 GEMM, torch-cuda, t), the slowest of 1 measured node(s); not measured: b, c"
    )


def test_a_tied_embedding_is_copied_to_the_last_of_two_stages():
    """345M with RoPE (no position table), PP 2: the first stage holds 12 layers and the word embedding, the last
    12 layers, the embedding's copy for the output layer and the final LayerNorm (2h): the last is the larger."""
    s = tweak(tweak(spec("gpt-345m-1node"), "model", position_embedding="rope"), "parallel", pipeline=2)
    h = 1024
    assert planner.memory(s, Layout.of(s), Cluster(1, 8, H100)).parameters == 12 * (12 * h * h + 13 * h) + 50304 * h + 2 * h


def test_one_micro_batch_in_flight_and_one_virtual_stage():
    """345M PP 2 (12 layers a stage), micro 8: a global batch of 32 is one micro-batch over DP 4, so one is in flight;
    one virtual stage is the plain 1F1B schedule (no interleaving factor)."""
    s = tweak(tweak(spec("gpt-345m-1node"), "parallel", pipeline=2), "train", global_batch_size=32)
    assert planner.memory(s, Layout.of(s), Cluster(1, 8, H100)).activations == 34 * 1024 * 8 * 1024 * 12 * 1
    s = tweak(spec("gpt-345m-1node"), "parallel", pipeline=2, virtual_stages=1)
    assert planner.memory(s, Layout.of(s), Cluster(1, 8, H100)).activations == 34 * 1024 * 8 * 1024 * 12 * 2


def test_swiglu_with_biases_counts_both_halves_of_the_first_bias():
    """Llama-3-8B with bias_linear: per layer QKV bias 4096 + 2 x 1024, projection 4096, SwiGLU fc1 2 x 14336, fc2 4096."""
    s = tweak(spec("llama-8b-2nodes"), "model", bias_linear=True)
    assert planner.parameter_count(s, tp=2)["total"] == 8_030_261_248 + 32 * (6144 + 4096 + 2 * 14336 + 4096)


def test_the_interleaved_schedule_needs_a_multiple_of_pp_micro_batches():
    """Megatron-LM (pipeline_parallel/schedules.py) refuses an interleaved schedule whose step has a number of
    micro-batches that is not a multiple of PP: 175B at a global batch of 1,000 over DP 8 has 125 per pipeline."""
    s = tweak(tweak(spec("gpt3-175b-128nodes"), "parallel", virtual_stages=2), "train", global_batch_size=1000)
    problems = planner.spec_problems(s, 1024, 8)
    assert [(p.path, p.message, p.fix) for p in problems if p.path == "parallel.virtual_stages"] == [
        (
            "parallel.virtual_stages",
            "parallel.virtual_stages=2 needs the micro-batches of a step (train.global_batch_size / (micro_batch_size x data"
            " parallel) = 125) to be a multiple of parallel.pipeline=16 (Megatron-LM's interleaved schedule)",
            "use a global batch size that is a multiple of 128, or remove virtual_stages",
        )
    ]
    assert not [p for p in planner.spec_problems(tweak(s, "train", global_batch_size=1024), 1024, 8) if p.path == "parallel.virtual_stages"]
    # and --suggest offers virtual stages only where the micro-batches allow them: 8 sequences on PP 2 (DP 1) make 8, 4
    # and 2 micro-batches of 1, 2 and 4, but one of 8
    small = tweak(spec("gpt-345m-1node"), "train", global_batch_size=8)
    found = planner.candidates(small, Cluster(1, 2, H100))
    assert {(c.layout.micro_batch, c.layout.vp is not None) for c in found if c.layout.pp == 2} == {
        (1, False),
        (1, True),
        (2, False),
        (2, True),
        (4, False),
        (4, True),
        (8, False),
    }


def test_suggest_leaves_a_tenth_of_the_gpu_free_while_plan_fits_to_the_byte():
    """175B as TP 8 x PP 4 with micro-batches of 4 needs 74.4 GiB of the H100's 79.6: it fits for `plan`, but --suggest
    (which keeps SUGGEST_HEADROOM, 10 %, free: the estimate counts tensors, not the allocator's fragmentation or
    library workspaces) does not offer it; PP 8 at the same micro-batch (59.2 GiB) is offered."""
    s = spec("gpt3-175b-128nodes")
    c = Cluster(128, 8, H100)
    tight = Layout(8, 4, 1, None, 4, "none", True, True)
    mem = planner.memory(s, tight, c)
    assert mem.fits and 0.9 * mem.capacity < mem.total
    offered = {x.layout for x in planner.candidates(s, c)}
    assert tight not in offered and replace(tight, pp=8) in offered
    assert all(x.memory_gib <= 79.6 * 0.9 for x in planner.candidates(s, c))
