"""The parallelism planner (megaprov.training.planner, issue 36) in exact numbers and exact lines, where the other
planner tests (test_planner.py, test_planner_memory.py, test_planner_calibration.py) leave a gap: the launch.elastic
refusals and node counts (spec_problems, keeps_batch, elastic_counts, continuations, usable_counts, shrunk), the
interleaved schedule's world rule, the GPU names nvidia-smi prints (gpu_named, gpu_model), the per-rank peak's text,
the recompute overhead and the lab efficiency by hand, the links of each parallel group across nodes, the sizes
work() hands the step-time model, why() the best layout wins, and what plan() carries besides memory.

Specs are the real examples (examples/jobs through megaprov.training.jobspec), varied with model_copy; clusters use
planner.GPUS' real models. Only why() is fed hand-made step times (throughput.StepTime), so that each of its
thresholds is reached exactly. Nothing is stood in: the planner is pure arithmetic.
"""

import dataclasses
from dataclasses import replace
from pathlib import Path

import pytest

from megaprov.errors import UsageError
from megaprov.training import jobspec, planner, throughput
from megaprov.training.planner import GPUS, Candidate, Cluster, Continuation, Layout, NodeRate

JOBS = Path(__file__).resolve().parents[3] / "examples" / "jobs"


def spec(name):
    return jobspec.load(JOBS / f"{name}.yml")


def tweak(s, section, **fields):
    return s.model_copy(update={section: getattr(s, section).model_copy(update=fields)})


def problems(s, world=None, gpn=None):
    return [(p.path, p.message, p.fix) for p in planner.spec_problems(s, world, gpn)]


def elastic(s, min_nodes, **launch):
    return tweak(s, "launch", elastic=jobspec.Elastic(min_nodes=min_nodes), **launch)


def lab(global_batch=20, nodes=5, min_nodes=1):
    """lab-elastic (micro 2, one rank per node) with a global batch that some node counts cannot keep: 20 sequences
    are 2 x DP x micro-batches on 5, 2 and 1 nodes, not on 4 (2 x 4 = 8) or 3 (2 x 3 = 6)."""
    s = tweak(spec("lab-elastic"), "train", global_batch_size=global_batch)
    return elastic(s, min_nodes, nodes=nodes)


# ---- launch.elastic: the refusals without a world


def test_elastic_min_nodes_equal_to_the_job_nodes_is_allowed_one_more_is_refused():
    s = spec("lab-elastic")  # 3 nodes
    assert problems(elastic(s, 3)) == []
    assert problems(elastic(s, 4)) == [
        ("launch.elastic.min_nodes", "launch.elastic.min_nodes=4 is larger than the job's launch.nodes=3", "use a min_nodes from 1 to 3")
    ]


def test_elastic_needs_a_torch_dist_checkpoint_that_resumes():
    s = spec("lab-elastic")
    assert problems(tweak(s, "checkpoint", format="torch")) == [
        (
            "checkpoint.format",
            "launch.elastic needs checkpoint.format=torch_dist (a torch checkpoint does not reshard to another data-parallel size)",
            "set checkpoint.format: torch_dist, or drop launch.elastic",
        )
    ]
    assert problems(tweak(s, "checkpoint", resume="never")) == [
        ("checkpoint.resume", "launch.elastic needs checkpoint.resume=auto (it continues from the latest checkpoint)", "set resume: auto")
    ]
    # without the policy a plain torch checkpoint that never resumes is a choice, not a problem
    plain = tweak(spec("lab-tiny"), "checkpoint", format="torch", resume="never")
    assert problems(plain) == []


@pytest.mark.parametrize(
    ("args", "shown", "why"),
    [
        (["--rampup-batch-size", "16", "16", "1000"], "--rampup-batch-size", "batch ramp-up counts data-parallel ranks"),
        (["--rampup-batch-size=16"], "--rampup-batch-size=16", "batch ramp-up counts data-parallel ranks"),
        (
            ["--num-distributed-optimizer-instances", "2"],
            "--num-distributed-optimizer-instances",
            "optimizer instances divide the data-parallel ranks",
        ),
        (["--expert-model-parallel-size=2"], "--expert-model-parallel-size=2", "expert parallelism is carved out of the data-parallel ranks"),
        (["--dataloader-type=cyclic"], "--dataloader-type=cyclic", "sample order depends on the data-parallel size"),
        (["--dataloader-type", "cyclic"], "--dataloader-type cyclic", "sample order depends on the data-parallel size"),
    ],
)
def test_elastic_refuses_pass_through_flags_tied_to_the_data_parallel_size(args, shown, why):
    s = tweak(spec("lab-elastic"), "launch", extra_args=args)
    assert problems(s) == [("launch.extra_args", f"launch.extra_args sets {shown}, whose {why}", "drop it, or drop launch.elastic")]
    # the same flags without launch.elastic: megaprov passes them through
    assert problems(tweak(s, "launch", elastic=None)) == []


@pytest.mark.parametrize(
    "args",
    [
        ["--dataloader-type=single"],
        ["--dataloader-type", "single"],
        ["--dataloader-type"],  # nothing after it
        ["--dataloader-type", "external", "cyclic"],  # cyclic is not the flag's value
        ["--seed", "cyclic"],
    ],
)
def test_elastic_keeps_a_data_order_that_does_not_depend_on_the_data_parallel_size(args):
    assert problems(tweak(spec("lab-elastic"), "launch", extra_args=args)) == []


# ---- the rules that need the world


def test_the_interleaved_schedule_needs_a_multiple_of_pipeline_micro_batches():
    # 345M on 8 GPUs with PP 2 x VP 2: DP 4, micro 8, so a step has global / 32 micro-batches
    s = tweak(spec("gpt-345m-1node"), "parallel", pipeline=2, virtual_stages=2)
    assert problems(s, 8, 8) == []  # 256 / 32 = 8 micro-batches, a multiple of 2
    assert problems(tweak(s, "train", global_batch_size=224), 8, 8) == [
        (
            "parallel.virtual_stages",
            "parallel.virtual_stages=2 needs the micro-batches of a step (train.global_batch_size / (micro_batch_size x data parallel)"
            " = 7) to be a multiple of parallel.pipeline=2 (Megatron-LM's interleaved schedule)",
            "use a global batch size that is a multiple of 64, or remove virtual_stages",
        )
    ]
    # one virtual stage is no interleaving: any number of micro-batches
    assert problems(tweak(tweak(s, "parallel", virtual_stages=1), "train", global_batch_size=224), 8, 8) == []


def test_elastic_min_nodes_on_a_count_that_cannot_keep_the_batch_names_the_counts_that_can():
    assert problems(lab(min_nodes=2), 5, 1) == []
    assert problems(lab(min_nodes=5), 5, 1) == []  # the job's own count
    assert problems(lab(min_nodes=4), 5, 1) == [
        (
            "launch.elastic.min_nodes",
            "launch.elastic.min_nodes=4: on 4 node(s) (4 GPUs) the layout cannot keep train.global_batch_size=20"
            " (micro_batch_size x data parallel must divide it)",
            "use min_nodes 1 or 2",
        )
    ]


def test_elastic_min_nodes_equal_to_a_job_that_cannot_keep_its_own_batch_is_named_too():
    # 18 sequences: micro 2 x DP 5 does not divide them on 5 nodes; 1 and 3 nodes keep them
    assert problems(lab(global_batch=18, min_nodes=5), 5, 1) == [
        (
            "train.global_batch_size",
            "train.global_batch_size=18 is not a multiple of micro_batch_size x data parallel = 2x5",
            "use 20 (or change micro_batch_size or the parallel sizes)",
        ),
        (
            "launch.elastic.min_nodes",
            "launch.elastic.min_nodes=5: on 5 node(s) (5 GPUs) the layout cannot keep train.global_batch_size=18"
            " (micro_batch_size x data parallel must divide it)",
            "use min_nodes 1 or 3",
        ),
    ]


def test_elastic_with_no_smaller_count_that_keeps_the_batch_says_so():
    # TP 8 x PP 2 = 16 ranks: one node of 8 GPUs cannot hold the layout at all
    s = elastic(tweak(spec("gpt-345m-1node"), "parallel", tensor=8, pipeline=2, sequence_parallel=True), 1, nodes=2)
    assert problems(s, 16, 8) == [
        (
            "launch.elastic.min_nodes",
            "launch.elastic.min_nodes=1: on 1 node(s) (8 GPUs) the layout cannot keep train.global_batch_size=256"
            " (micro_batch_size x data parallel must divide it)",
            "use a global batch that every node count divides, or drop launch.elastic",
        )
    ]
    assert planner.keeps_batch(s, 8) is False and planner.keeps_batch(s, 16) is True
    assert planner.elastic_counts(s, 2, 8) == [2]


def test_tensor_parallelism_as_wide_as_the_node_is_allowed_one_wider_is_not():
    s = tweak(spec("gpt-345m-1node"), "parallel", tensor=8, sequence_parallel=True)
    assert problems(s, 8, 8) == []
    assert problems(tweak(s, "parallel", tensor=16), 16, 8) == [
        ("parallel.tensor", "parallel.tensor=16 spans more than the 8 GPUs of a node", "keep tensor parallelism inside a node: use 1, 2, 4 or 8")
    ]


# ---- keeps_batch, elastic_counts, continuations, usable_counts


def test_keeps_batch_on_each_world():
    s = lab()
    assert [n for n in range(1, 7) if planner.keeps_batch(s, n)] == [1, 2, 5]
    assert planner.keeps_batch(s, 0) is False  # no GPUs hold no layout
    vp = tweak(spec("gpt-345m-1node"), "parallel", pipeline=2, virtual_stages=2)
    assert planner.keeps_batch(vp, 8) is True  # 8 micro-batches on 2 stages
    assert planner.keeps_batch(tweak(vp, "train", global_batch_size=224), 8) is False  # 7
    assert planner.keeps_batch(tweak(vp, "parallel", virtual_stages=None), 8) is True


def test_elastic_counts_from_the_job_down_to_min_nodes():
    assert planner.elastic_counts(lab(min_nodes=1), 5, 1) == [5, 2, 1]
    assert planner.elastic_counts(lab(min_nodes=2), 5, 1) == [5, 2]
    assert planner.elastic_counts(lab(min_nodes=5), 5, 1) == [5]
    assert planner.elastic_counts(lab(min_nodes=1), 4, 1) == [2, 1]  # 4 nodes cannot keep 20: not among them
    assert planner.elastic_counts(tweak(lab(), "launch", elastic=None), 5, 1) == [5]  # no policy: the job's count
    # a min_nodes below 1 (not a valid spec) counts down to 1
    zero = tweak(lab(), "launch", elastic=jobspec.Elastic.model_construct(min_nodes=0))
    assert planner.elastic_counts(zero, 3, 1) == [2, 1]


def test_continuations_of_the_lab_example_on_its_three_nodes():
    s = spec("lab-elastic")  # 3 nodes, micro 2, global 12, min_nodes 2
    cluster = Cluster(3, 1, GPUS["cpu"])
    found = planner.continuations(s, cluster)
    two = planner.plan(planner.without_elastic(s), Cluster(2, 1, GPUS["cpu"]))
    assert found == (Continuation(2, 2, 3, two.tokens_per_second, None),)  # DP 2 x 3 micro-batches of 2 = 12
    # on 2 ranks the step's FLOPs are shared by 2, not 3: two thirds of the 3-node speed
    three = planner.plan(s, cluster)
    assert two.tokens_per_second == pytest.approx(three.tokens_per_second * 2 / 3, rel=1e-12)
    assert planner.usable_counts(s, cluster) == [3, 2]  # a CPU lab has no memory verdict: not refused
    assert planner.continuations(planner.without_elastic(s), cluster) == ()
    assert planner.without_elastic(s).launch.elastic is None and planner.without_elastic(s).launch.nodes == 3


def test_continuations_are_planned_on_the_first_nodes_and_their_measured_rates():
    s = tweak(spec("lab-elastic"), "launch", elastic=jobspec.Elastic(min_nodes=1))
    hosts = ("n1", "n2", "n3")
    r1, r2, r3 = (NodeRate(h, t, 1, "torch-cpu", "float32") for h, t in zip(hosts, (0.04, 0.02, 0.01), strict=True))
    cluster = Cluster(3, 1, GPUS["cpu"], hosts=hosts, rates=(r1, r2, r3))
    found = planner.continuations(s, cluster)
    assert [(c.nodes, c.data_parallel, c.microbatches_per_step) for c in found] == [(2, 2, 3), (1, 1, 6)]
    # 2 nodes run at n2's 0.02, 1 node at n1's 0.04: the same tokens/s (half the ranks at twice the rate)
    assert found[0].tokens_per_second == pytest.approx(found[1].tokens_per_second, rel=1e-12)
    assert planner.shrunk(cluster, ("n1", "n2")) == Cluster(2, 1, GPUS["cpu"], hosts=("n1", "n2"), rates=(r1, r2))


def test_usable_counts_drop_the_counts_that_do_not_fit():
    s = elastic(spec("llama-8b-2nodes"), 1, nodes=4)  # 4, 2 and 1 nodes keep 128 sequences; 3 (DP 12) does not
    assert [(c.nodes, c.data_parallel, c.microbatches_per_step, c.fits) for c in planner.continuations(s, Cluster(4, 8, GPUS["H100-SXM"]))] == [
        (2, 8, 16, True),
        (1, 4, 32, True),
    ]
    assert planner.usable_counts(s, Cluster(4, 8, GPUS["H100-SXM"])) == [4, 2, 1]
    assert planner.usable_counts(s, Cluster(4, 8, GPUS["A100-40GB"])) == [4]  # an 8B model on 40 GB: neither fits


def test_the_plan_of_an_elastic_job_carries_its_continuations_and_min_nodes():
    s = spec("lab-elastic")
    p = planner.plan(s, Cluster(3, 1, GPUS["cpu"]))
    assert p.min_nodes == 2 and [c.nodes for c in p.continuations] == [2]
    assert planner.plan(spec("lab-tiny"), Cluster(2, 1, GPUS["cpu"])).min_nodes is None


# ---- GPU names


@pytest.mark.parametrize(
    ("smi", "ours"),
    [
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA GB200", "GB200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("  NVIDIA H100-SXM5-80GB  ", "H100-SXM"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100-PCIE-40GB", "A100-40GB"),
        ("NVIDIA A100 40 GB", "A100-40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A10", "A10"),
        ("Tesla V100-SXM2-32GB", "V100"),
        ("Tesla V100S-PCIE-32GB", "V100"),
        ("h100-80gb", "H100-SXM"),
        ("gh200", "GH200"),
        ("CPU", "cpu"),
    ],
)
def test_gpu_named_reads_what_nvidia_smi_prints(smi, ours):
    assert planner.gpu_named(smi).name == ours


@pytest.mark.parametrize("smi", ["NVIDIA A10G", "NVIDIA A100X", "NVIDIA H1000", "AMD MI300X", "NVIDIA T4"])
def test_gpu_named_knows_no_other_gpu(smi):
    assert planner.gpu_named(smi) is None


def test_gpu_model_names_the_gpu_or_refuses_with_the_known_ones():
    assert planner.gpu_model("NVIDIA H100 80GB HBM3", "--gpu") == "H100-SXM"
    assert planner.gpu_model("a100", "--gpu") == "A100-80GB"
    known = "use one of GB200, B200, H200, H100-SXM, H100-PCIe, GH200, A100-80GB, A100-40GB, L40S, A10, V100"
    for name in ("cpu", "TPU"):
        with pytest.raises(UsageError) as raised:
            planner.gpu_model(name, "cluster.gpu")
        assert (raised.value.message, raised.value.hint) == (f"cluster.gpu {name!r} is not a GPU megaprov knows", known)


# ---- the per-rank peak


def test_the_published_peak_names_its_precision_and_how_to_measure():
    s = spec("llama-8b-2nodes")
    bf16 = planner.rank_peak(Cluster(2, 8, GPUS["H100-SXM"]), s)
    assert (bf16.tflops, bf16.source, bf16.host) == (989.0, "published", None)
    assert bf16.text == "published peak of H100-SXM, 989.0 TFLOP/s bf16 (no measured rate: run megaprov bootstrap or preflight)"
    fp32 = planner.rank_peak(Cluster(2, 8, GPUS["A100-80GB"]), tweak(s, "train", precision="fp32"))
    assert fp32.text == "published peak of A100-80GB, 156.0 TFLOP/s fp32 (no measured rate: run megaprov bootstrap or preflight)"
    fp16 = planner.rank_peak(Cluster(2, 8, GPUS["V100"]), tweak(s, "train", precision="fp16"))
    assert fp16.tflops == 125.0 and fp16.text.startswith("published peak of V100, 125.0 TFLOP/s bf16 ")
    cpu = planner.rank_peak(Cluster(2, 1, GPUS["cpu"]), spec("lab-tiny"))
    assert (cpu.tflops, cpu.text) == (
        0.1,
        "nominal CPU peak 100.0 GFLOP/s (no measured rate: run megaprov bootstrap, whose python stage measures it)",
    )


def test_a_measured_gpu_rate_is_scaled_to_fp32_and_says_so():
    rate = NodeRate("g1", 700.0, 8, "torch-cuda", "bfloat16", "2026-01-02")
    cluster = Cluster(1, 8, GPUS["H100-SXM"], hosts=("g1",), rates=(rate,))
    s = spec("llama-8b-2nodes")
    bf16 = planner.rank_peak(cluster, s)
    assert (bf16.tflops, bf16.source, bf16.host) == (700.0, "measured", "g1")
    assert bf16.text == "measured rate of g1, 700.0 TFLOP/s per rank (bfloat16 GEMM, torch-cuda, 2026-01-02), the slowest of 1 measured node(s)"
    fp32 = planner.rank_peak(cluster, tweak(s, "train", precision="fp32"))
    assert fp32.tflops == pytest.approx(700.0 * 494.0 / 989.0, rel=1e-12)
    assert fp32.text == (
        "measured rate of g1, 349.6 TFLOP/s per rank (bfloat16 GEMM, torch-cuda, 2026-01-02), the slowest of 1 measured node(s)"
        " scaled to fp32 by the published ratio"
    )


def test_a_cpu_nodes_rate_is_shared_by_its_ranks_and_the_slowest_rank_sets_the_pace():
    a, b = NodeRate("a", 0.06, 1, "numpy-cpu", "float32", "t"), NodeRate("b", 0.04, 1, "torch-cpu", "float32", "t")
    cluster = Cluster(2, 2, GPUS["cpu"], hosts=("a", "b", "c"), rates=(a, b))
    peak = planner.rank_peak(cluster, spec("lab-tiny"))
    assert (peak.tflops, peak.host) == (0.02, "b")  # 0.04 over the node's 2 ranks
    assert peak.text == "measured rate of b, 20.0 GFLOP/s per rank (float32 GEMM, torch-cpu, t), the slowest of 2 measured node(s)"
    three = planner.rank_peak(replace(cluster, nodes=3), spec("lab-tiny"))
    assert three.text.endswith("the slowest of 2 measured node(s); not measured: c")


def test_rate_text_switches_unit_at_one_tflops():
    assert planner.rate_text(1.0) == "1.0 TFLOP/s"
    assert planner.rate_text(0.99999) == "1000.0 GFLOP/s"
    assert planner.rate_text(0.001) == "1.0 GFLOP/s"


# ---- recomputation and the lab's efficiency, by hand


def test_the_recompute_overhead_is_the_attention_or_every_layers_forward_pass():
    s = spec("lab-tiny")  # L 2, h 64, s 128, byte vocabulary 257 padded to 384, GELU 4h MLP, 4 heads
    L, h, S, V = 2, 64, 128, 384
    per_token = 72 * L * h * h * (1 + S / (12 * h) + V / (12 * L * h))  # Megatron-LM's FLOPs of one token
    assert planner.flops_per_iteration(s, V, 1) == pytest.approx(S * per_token, rel=1e-12)
    assert planner._recompute_overhead(s, V, "none") == 0.0
    # selective: the core attention's forward again, 2 x (QK^T and AV at half for causal) = 2 h s per layer and token
    assert planner._recompute_overhead(s, V, "selective") == pytest.approx(2 * h * S * L / per_token, rel=1e-12)
    # full: every layer's forward pass again, a third of the layers' FLOPs (forward + 2 x backward), not the logits'
    assert planner._recompute_overhead(s, V, "full") == pytest.approx((per_token - 6 * h * V) / 3 / per_token, rel=1e-12)


def test_on_the_cpu_lab_recomputation_slows_the_step_by_its_overhead():
    s = spec("lab-tiny")
    cluster = Cluster(2, 1, GPUS["cpu"])
    base = planner.plan(s, cluster).tokens_per_second
    for mode in ("selective", "full"):
        slower = planner.plan(tweak(s, "train", recompute=mode), cluster).tokens_per_second
        assert slower == pytest.approx(base / (1 + planner._recompute_overhead(s, 384, mode)), rel=1e-12)


def test_the_lab_efficiency_of_tensor_and_context_parallel_layouts():
    s = spec("lab-tiny")  # micro 4 x 128 tokens, h 64
    one = Layout(1, 1, 1, None, 4, "none", False, False)
    assert planner._lab_efficiency(s, one) == pytest.approx(512 / 768 * 64 / 192, rel=1e-12)
    # TP 2: half the columns, and gloo's all-reduces: x (1 - 0.04 log2 2) x 0.6
    two = replace(one, tp=2, sequence_parallel=True)
    assert planner._lab_efficiency(s, two) == pytest.approx(512 / 768 * 32 / 160 * 0.96 * 0.6, rel=1e-12)
    four = replace(one, tp=4)
    assert planner._lab_efficiency(s, four) == pytest.approx(512 / 768 * 16 / 144 * 0.92 * 0.6, rel=1e-12)
    # CP 2: half the rows
    assert planner._lab_efficiency(s, replace(one, cp=2)) == pytest.approx(256 / 512 * 64 / 192, rel=1e-12)


# ---- links


def test_links_on_one_node_are_all_nvlink():
    layout = Layout(2, 2, 2, None, 1, "none", True, True)
    assert planner.links(layout, Cluster(1, 8, GPUS["H100-SXM"])) == (360e9, 360e9, 360e9, 360e9)  # 450 GB/s x 0.8
    assert planner.links(layout, Cluster(1, 8, GPUS["L40S"])) == pytest.approx((22.5e9,) * 4)  # PCIe: 25 GB/s x 0.9


def test_links_across_nodes_by_group():
    a100 = Cluster(2, 8, GPUS["A100-80GB"])  # NVLink 300 x 0.8 = 240 GB/s; a NIC 25 x 0.9 = 22.5 GB/s
    # TP 8 fills a node: NVLink; PP crosses nodes: a NIC; the reduction over the 2 nodes' ranks: one NIC per rank (8 // 8)
    assert planner.links(Layout(8, 1, 1, None, 1, "none", True, True), a100) == pytest.approx((240e9, 22.5e9, 22.5e9, 240e9))
    # TP 2: 4 ranks of a reduction group per node, 4 NICs
    assert planner.links(Layout(2, 1, 1, None, 1, "none", True, True), a100) == pytest.approx((240e9, 22.5e9, 90e9, 240e9))
    # TP 8 x CP 2 spans both nodes: one CP rank per node sends on 1 NIC
    h100 = Cluster(2, 8, GPUS["H100-SXM"])
    assert planner.links(Layout(8, 1, 2, None, 1, "none", True, True), h100) == pytest.approx((360e9, 45e9, 45e9, 45e9))
    # TP 2 x CP 8 spans both nodes: 4 CP ranks per node (8 // 2), 4 NICs; the reduction (16 ranks): 4 NICs
    assert planner.links(Layout(2, 1, 8, None, 1, "none", True, True), h100) == pytest.approx((360e9, 45e9, 180e9, 180e9))
    # TP 16 across nodes: the NICs of a node's 8 ranks, up to NVLink's rate (8 x 45 = 360)
    assert planner.links(Layout(16, 1, 1, None, 1, "none", True, True), Cluster(2, 8, GPUS["A100-80GB"]))[0] == pytest.approx(180e9)


# ---- work: the sizes the step-time model gets


def test_work_of_a_context_parallel_layout():
    s = tweak(spec("gpt-345m-1node"), "parallel", context=2)
    w = planner.work(s, Layout.of(s), Cluster(1, 8, GPUS["H100-SXM"]))
    assert (w.tokens, w.seq, w.hidden, w.heads, w.q_width, w.kv_width, w.ffn, w.gated) == (4096, 1024, 1024, 16, 1024, 1024, 4096, False)
    assert (w.vocab, w.layers, w.tp, w.pp, w.vp, w.cp, w.dp, w.microbatches) == (50304, 24, 1, 1, 1, 2, 4, 8)
    assert (w.grad_bytes, w.param_bytes, w.act_bytes) == (4, 2, 2)


def test_work_of_the_llama_layout():
    s = spec("llama-8b-2nodes")
    c = Cluster(2, 8, GPUS["H100-SXM"])
    w = planner.work(s, Layout.of(s), c)
    assert (w.tokens, w.q_width, w.kv_width, w.ffn, w.gated, w.vocab, w.layers, w.tp, w.dp, w.microbatches) == (
        8192,
        4096,
        1024,  # 8 query groups x 128 channels
        14336,
        True,
        128256,
        32,
        2,
        8,
        16,
    )
    assert (w.sequence_parallel, w.recompute, w.distributed_optimizer, w.overlap_grad_reduce, w.overlap_param_gather) == (
        True,
        "selective",
        True,
        True,
        True,
    )
    assert w.stage_parameters == planner.memory(s, Layout.of(s), c).parameters
    # the parameter gather overlaps only what the distributed optimizer gathers
    assert planner.work(s, replace(Layout.of(s), distributed_optimizer=False), c).overlap_param_gather is False


@pytest.mark.parametrize(("precision", "grad", "param", "act"), [("bf16", 4, 2, 2), ("fp16", 2, 2, 2), ("fp32", 4, 4, 4)])
def test_work_bytes_follow_the_precision(precision, grad, param, act):
    s = tweak(spec("gpt-345m-1node"), "train", precision=precision)
    w = planner.work(s, Layout.of(s), Cluster(1, 8, GPUS["H100-SXM"]))
    assert (w.grad_bytes, w.param_bytes, w.act_bytes) == (grad, param, act)


def test_tp_comm_overlap_needs_sequence_parallelism_and_scores_are_stored_by_unfused_attention():
    s = tweak(spec("gpt-345m-1node"), "parallel", tensor=2, sequence_parallel=True, tp_comm_overlap=True)
    c = Cluster(1, 8, GPUS["H100-SXM"])
    assert planner.work(s, Layout.of(s), c).tp_comm_overlap is True
    assert planner.work(s, replace(Layout.of(s), sequence_parallel=False), c).tp_comm_overlap is False
    assert planner.work(s, Layout.of(s), c).scores_stored is False
    for backend, stored in (("unfused", True), ("local", True), ("flash", False), ("fused", False)):
        assert planner.work(tweak(s, "model", attention_backend=backend), Layout.of(s), c).scores_stored is stored


def test_the_step_is_its_gemms_at_the_assumed_share_of_the_peak():
    s = spec("llama-8b-2nodes")
    c = Cluster(2, 8, GPUS["H100-SXM"])
    default = planner.step_time(s, Layout.of(s), c)
    half = planner.step_time(s, Layout.of(s), c, share=planner.default_mfu(c) / 2)
    assert half.gemm == pytest.approx(2 * default.gemm, rel=1e-12)


# ---- why the best layout wins


def _time(**seconds):
    """A step time of every mechanism at 0 s but those given."""
    fields = {f.name: 0.0 for f in dataclasses.fields(throughput.StepTime) if f.name != "parts"}
    return throughput.StepTime(**{**fields, **seconds})


def _cand(tp, time):
    return Candidate(Layout(tp, 1, 1, None, 1, "none", tp > 1, True), 8 // tp, 10.0, 0.4, time.total if time else 1.0, 1.0, time)


BEST = _time(gemm=0.5, attention=0.2, elementwise=0.125, logits=0.0625, recompute=0.0625, tensor_parallel=0.05)


def test_why_gives_the_best_layouts_four_largest_shares():
    assert planner.why([_cand(1, BEST)]) == [
        "#1 TP=1 PP=1 CP=1 micro=1 recompute=none dist-opt: 1 s per iteration; GEMMs 50%, attention 20%, memory-bound kernels 12%, logits and loss 6%"
    ]


def test_why_names_the_two_largest_gains_and_costs_above_half_a_percent():
    # against #2 (1.25 s): gains recomputation 0.1875, GEMMs 0.125, pipeline sends 0.01 (above 0.5 % = 0.00625), data
    # 0.005 (below); costs tensor-parallel 0.05, memory-bound kernels 0.025, attention 0.005 (below)
    second = _time(gemm=0.625, attention=0.195, elementwise=0.1, logits=0.0625, recompute=0.25, pipeline_sends=0.01, data_parallel=0.0075)
    # against #3: one gain just above the threshold and one cost
    third = _time(gemm=0.5, attention=0.2, elementwise=0.125, logits=0.0625, recompute=0.0625, tensor_parallel=0.0, bubble=1.0)
    fourth = _time(gemm=9.0)
    lines = planner.why([_cand(1, BEST), _cand(2, second), _cand(4, third), _cand(8, fourth)])
    assert lines[1:] == [
        "#1 beats #2 (TP=2 PP=1 CP=1 micro=1 recompute=none SP dist-opt) by 0.25 s per iteration:"
        " less recomputation 0.188 s, GEMMs 0.125 s; more tensor-parallel communication 0.05 s, memory-bound kernels 0.025 s",
        "#1 beats #3 (TP=4 PP=1 CP=1 micro=1 recompute=none SP dist-opt) by 0.95 s per iteration:"
        " less pipeline bubble 1 s; more tensor-parallel communication 0.05 s",
    ]


def test_why_keeps_a_gain_just_above_half_a_percent_and_drops_one_at_it():
    # #2 is 2 s: 0.5 % is 0.01 s; a 0.0125 s gain is named, 0.01 s is not
    second = replace(BEST, gemm=BEST.gemm + 1.0 - 0.0225, bubble=0.0125, pipeline_sends=0.01)
    line = planner.why([_cand(1, BEST), _cand(2, second)])[1]
    assert line.endswith(": less GEMMs 0.978 s, pipeline bubble 0.0125 s")


def test_why_skips_layouts_without_a_step_time():
    assert planner.why([]) == []
    assert planner.why([_cand(1, None), _cand(2, BEST)]) == []
    lines = planner.why([_cand(1, BEST), _cand(2, None), _cand(4, replace(BEST, gemm=1.0))])
    assert len(lines) == 2 and lines[1].startswith("#1 beats #3 (TP=4 ") and lines[1].endswith("by 0.5 s per iteration: less GEMMs 0.5 s")


# ---- suggest, fixes and what plan() carries


def test_suggest_keeps_the_fastest_layout_of_each_split():
    s = spec("llama-8b-2nodes")
    c = Cluster(2, 8, GPUS["H100-SXM"])
    every = planner.candidates(s, c)
    found = planner.suggest(s, c, top=100)
    firsts = {}
    for cand in every:
        firsts.setdefault((cand.layout.tp, cand.layout.pp), cand)
    assert found == list(firsts.values())
    assert planner.suggest(s, c, top=2) == found[:2]


def test_a_fix_keeps_to_the_specs_own_tensor_size_only_with_sequence_parallelism():
    # llama 8B on 40 GB GPUs with TP 2 but SP off and no distributed optimizer: the fixes are single changes that fit
    s = tweak(spec("llama-8b-2nodes"), "parallel", sequence_parallel=False, distributed_optimizer=False, overlap_param_gather=False)
    c = Cluster(2, 8, GPUS["A100-40GB"])
    fixes = planner.fixes(s, c)
    fields = [f.field for f in fixes]
    assert len(fields) == len(set(fields))
    assert all(f.value != 2 for f in fixes if f.field == "parallel.tensor")  # TP 2 is what the spec has
    for f in fixes:
        assert f.render() == f"{f.field}={f.value} ({f.memory_gib:.1f} GiB)"
        assert f.memory_gib <= GPUS["A100-40GB"].memory_gib
    assert [f.memory_gib for f in fixes] == sorted(f.memory_gib for f in fixes)


def test_fix_renders_its_field_value_and_memory():
    assert planner.Fix("parallel.tensor", 4, 37.25).render() == "parallel.tensor=4 (37.2 GiB)"
    assert planner.Fix("train.recompute", "full", 12.96).render() == "train.recompute=full (13.0 GiB)"


def test_run_seconds_and_gpu_hours():
    p = planner.plan(spec("llama-8b-2nodes"), Cluster(2, 8, GPUS["H100-SXM"]))
    assert p.iterations == 100000
    assert p.run_seconds == pytest.approx(100000 * p.step_seconds, rel=1e-12)
    assert p.gpu_hours == pytest.approx(100000 * p.step_seconds * 16 / 3600, rel=1e-12)
    # the step is the batch over the tokens/s, and the MFU the model FLOPs over the step at the 16 GPUs' peak
    assert p.tokens_per_second == pytest.approx(128 * 8192 / p.step_seconds, rel=1e-12)
    assert p.mfu_assumed == pytest.approx(p.flops_per_iteration / (p.step_seconds * 16 * 989e12), rel=1e-12)
    assert p.time.total == p.step_seconds


def test_the_null_tokenizer_adds_the_end_of_document_token():
    s = tweak(spec("lab-tiny"), "data", tokenizer=jobspec.Tokenizer(type="null", vocab_size=1000))
    assert planner.tokenizer_vocab(s) == 1001
    assert planner.plan(s, Cluster(2, 1, GPUS["cpu"])).padded_vocab == 1024  # 1001 up to a multiple of 128


@pytest.mark.parametrize(
    ("flag", "field"),
    [
        ("--save-interval", "checkpoint.save_interval"),
        ("--load", "checkpoint.directory"),
        ("--fp16", "train.precision"),
        ("--data-path", "data.prefixes"),
        ("--context-parallel-size", "parallel.context"),
    ],
)
def test_a_flag_megaprov_renders_is_refused_in_extra_args(flag, field):
    s = tweak(spec("gpt-345m-1node"), "launch", extra_args=[f"{flag}=1"])
    assert problems(s) == [
        ("launch.extra_args", f"launch.extra_args sets {flag}, which megaprov renders from the spec", f"set it through the spec field {field}")
    ]


# ---- the GPUs' data sheets, as the planner uses them


@pytest.mark.parametrize(
    ("name", "gib", "bf16", "fp32", "nvlink", "share", "hbm", "intra", "net"),
    [
        ("GB200", 184.0, 2500.0, 1250.0, True, 0.78, 8.0, 900.0, 50.0),
        ("B200", 179.0, 2250.0, 1100.0, True, 0.78, 8.0, 900.0, 50.0),
        ("H200", 139.8, 989.0, 494.0, True, 0.78, 4.8, 450.0, 50.0),
        ("H100-SXM", 79.6, 989.0, 494.0, True, 0.78, 3.35, 450.0, 50.0),
        ("H100-PCIe", 79.6, 756.0, 378.0, False, 0.78, 2.0, 32.0, 25.0),
        ("GH200", 94.5, 989.0, 494.0, True, 0.78, 4.0, 450.0, 50.0),
        ("A100-80GB", 79.2, 312.0, 156.0, True, 0.88, 2.039, 300.0, 25.0),
        ("A100-40GB", 39.4, 312.0, 156.0, True, 0.88, 1.555, 300.0, 25.0),
        ("L40S", 44.4, 362.0, 183.0, False, 0.78, 0.864, 25.0, 12.5),
        ("A10", 22.0, 125.0, 62.5, False, 0.78, 0.6, 25.0, 12.5),
        ("V100", 31.7, 125.0, 15.7, True, 0.78, 0.9, 150.0, 12.5),
        ("cpu", 0.0, 0.2, 0.1, False, 0.78, 1.0, 25.0, 12.5),
    ],
)
def test_each_gpu_as_the_planner_uses_it(name, gib, bf16, fp32, nvlink, share, hbm, intra, net):
    """Dense peaks, memory and links from NVIDIA's data sheets (the network of each GPU's reference system)."""
    gpu = GPUS[name]
    s = spec("gpt-345m-1node")
    two = Cluster(2, 8, gpu)
    assert planner.rank_peak(two, s).tflops == bf16
    assert planner.rank_peak(two, tweak(s, "train", precision="fp32")).tflops == fp32
    assert planner.memory(s, Layout.of(s), two).capacity == gib * planner.GIB
    link = intra * 1e9 * (0.8 if nvlink else 0.9)
    assert planner.links(Layout(8, 1, 1, None, 1, "none", True, True), two) == pytest.approx((link, net * 1e9 * 0.9, net * 1e9 * 0.9, link))
    assert gpu.gemm_share == share and gpu.hbm_tbs == hbm
    if name != "cpu":
        assert planner.default_mfu(two) == pytest.approx(share * 0.7744, rel=1e-12)
        assert planner.step_time(s, Layout.of(s), Cluster(1, 8, gpu)).total > 0


@pytest.mark.parametrize(
    ("alias", "name"),
    [("h100", "H100-SXM"), ("H100-80GB", "H100-SXM"), ("h200", "H200"), ("A100", "A100-80GB"), ("b200", "B200"), ("L40S", "L40S"), ("a10", "A10")],
)
def test_gpu_aliases(alias, name):
    assert planner.gpu_named(alias) is GPUS[name]


def test_suggest_gives_ten_splits_unless_asked_for_more():
    s = spec("gpt-345m-1node")
    c = Cluster(8, 8, GPUS["H100-SXM"])  # TP 1, 2, 4, 8 x PP 1, 2, 4, 8: 16 splits
    assert len(planner.suggest(s, c, top=100)) == 16
    assert planner.suggest(s, c) == planner.suggest(s, c, top=100)[:10]


def test_the_bubble_warning_divides_by_the_virtual_stages():
    # PP 2 x VP 2 on 8 GPUs: DP 4, 192 / (8 x 4) = 6 micro-batches, fewer than 4 x 2: bubble 1 / (2 x 6) = 8 %
    s = tweak(tweak(spec("gpt-345m-1node"), "parallel", pipeline=2, virtual_stages=2), "train", global_batch_size=192)
    assert planner.spec_problems(s, 8, 8) == []
    assert planner.plan(s, Cluster(1, 8, GPUS["H100-SXM"])).warnings == (
        "fewer than 4 x pipeline micro-batches per step: the pipeline bubble costs about 8 % of the step",
    )


@pytest.mark.parametrize(("share", "kept"), [(0.895, True), (0.905, False)])
def test_suggest_keeps_a_layout_just_under_nine_tenths_of_the_gpu_and_drops_one_just_over(share, kept):
    s = spec("gpt-345m-1node")
    one = Cluster(1, 1, GPUS["H100-SXM"])
    # the smallest layout 345M has on one GPU: micro-batch 1 with full recompute
    smallest = min(planner.memory(s, Layout(1, 1, 1, None, mb, rc, False, True), one).total for mb in (1, 2) for rc in ("full", "selective"))
    gpu = replace(GPUS["H100-SXM"], name="edge", memory_gib=smallest / share / planner.GIB)
    found = planner.candidates(s, Cluster(1, 1, gpu))
    assert bool(found) is kept
    if kept:
        assert [(c.layout.micro_batch, c.layout.recompute) for c in found] == [(1, "full")]


def test_continuations_use_the_mfu_the_plan_was_given():
    s = spec("lab-elastic")
    cluster = Cluster(3, 1, GPUS["cpu"])
    halved = planner.plan(s, cluster, mfu=planner.CPU_MFU / 2)
    two = planner.plan(planner.without_elastic(s), Cluster(2, 1, GPUS["cpu"]))
    assert halved.continuations[0].tokens_per_second == pytest.approx(two.tokens_per_second / 2, rel=1e-12)
    assert halved.tokens_per_second == pytest.approx(planner.plan(s, cluster).tokens_per_second / 2, rel=1e-12)


def test_the_step_runs_on_the_gpus_rates_and_each_groups_link():
    # 345M with TP 2 x CP 2 on 2 H100 nodes: TP and CP inside a node (NVLink 360 GB/s), the reduction over 16 ranks on
    # 4 NICs per node (4 x 45 GB/s), the pipeline on a NIC
    s = tweak(spec("gpt-345m-1node"), "parallel", tensor=2, context=2, sequence_parallel=True)
    layout, c = Layout.of(s), Cluster(2, 8, GPUS["H100-SXM"])
    hw = throughput.Hardware(gemm_flops=989.0 * 1e12 * (0.78 * 0.7744), hbm=3.35e12, tp_link=360e9, pp_link=45e9, dp_link=180e9, cp_link=360e9)
    got = planner.step_time(s, layout, c)
    assert got == throughput.step_time(planner.work(s, layout, c), hw)
    # the ring on the reduction's slower link would cost more: the context link is its own
    assert got.context_parallel < throughput.step_time(planner.work(s, layout, c), replace(hw, cp_link=180e9)).context_parallel


def test_rates_of_hosts_the_job_does_not_run_on_leave_the_published_share():
    rate = NodeRate("b", 700.0, 8, "torch-cuda", "bfloat16")
    assert planner.default_mfu(Cluster(1, 8, GPUS["H100-SXM"], hosts=("a", "b"), rates=(rate,))) == pytest.approx(0.78 * 0.7744, rel=1e-12)
    assert planner.default_mfu(Cluster(2, 8, GPUS["H100-SXM"], hosts=("a", "b"), rates=(rate,))) == 0.7744


def test_why_gives_the_step_in_three_significant_digits():
    assert planner.why([_cand(1, _time(gemm=1.25))]) == ["#1 TP=1 PP=1 CP=1 micro=1 recompute=none dist-opt: 1.25 s per iteration; GEMMs 100%"]
