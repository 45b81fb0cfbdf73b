"""Planner arithmetic against independent closed forms and published model sizes."""

from dataclasses import replace
from pathlib import Path

import pytest

from megaprov.cluster import rates
from megaprov.errors import UsageError
from megaprov.training import jobspec, planner, target
from megaprov.training.planner import GIB, GPUS, Cluster, Layout

ROOT = Path(__file__).resolve().parents[3]
JOBS = ROOT / "examples" / "jobs"


def spec(name):
    return jobspec.load(JOBS / f"{name}.yml")


def tweak(s, section, **fields):
    return s.model_copy(update={section: getattr(s, section).model_copy(update=fields)})


def messages(s, world=None, gpn=None):
    return [f"{p.message}; {p.fix}" for p in planner.spec_problems(s, world, gpn)]


H100x8 = Cluster(1, 8, GPUS["H100-SXM"])


def test_examples_are_consistent_on_their_own_cluster():
    for path in JOBS.glob("*.yml"):
        s = jobspec.load(path)
        world = s.launch.nodes * s.launch.gpus_per_node
        assert planner.spec_problems(s, world, s.launch.gpus_per_node) == [], path.name


def test_gpt3_175b_parameters_and_vocab_padding():
    s = spec("gpt3-175b-128nodes")
    counts = planner.parameter_count(s, tp=8)
    assert planner.padded_vocab(50257, 128, 8) == 51200
    # 12*L*h^2 (weights) + 13*L*h (biases, norms) + V*h + s*h + 2h: Brown et al. call it 175B.
    L, h, V, S = 96, 12288, 51200, 2048
    assert counts["total"] == 12 * L * h * h + 13 * L * h + V * h + S * h + 2 * h
    assert round(counts["total"] / 1e9, 1) == 174.6


def test_llama3_8b_parameters_match_the_published_count():
    # Meta's Llama-3-8B checkpoint has 8,030,261,248 parameters.
    assert planner.parameter_count(spec("llama-8b-2nodes"), tp=2)["total"] == 8_030_261_248


def test_flops_match_the_closed_form_for_gpt():
    # For a GELU GPT with a 4h MLP and multi-head attention, Megatron-LM's formula reduces to
    # 72 B s L h^2 (1 + s/(12 h) + V/(12 L h)) (Narayanan et al. 2021 with causal attention counted at half).
    s = spec("gpt3-175b-128nodes")
    B, S, L, h, V = 1536, 2048, 96, 12288, 51200
    expected = 72 * B * S * L * h * h * (1 + S / (12 * h) + V / (12 * L * h))
    assert planner.flops_per_iteration(s, V) == pytest.approx(expected, rel=1e-12)


def test_flops_swiglu_and_gqa_terms():
    s = spec("llama-8b-2nodes")
    B, S, L, h, f, V, groups, heads = 128, 8192, 32, 4096, 14336, 128256, 8, 32
    kv = h // heads * groups
    per_token = 6 * L * (3 * h * f + h * (h + 2 * kv) + h * S + h * h) + 6 * h * V
    assert planner.flops_per_iteration(s, V) == pytest.approx(B * S * per_token, rel=1e-12)


@pytest.mark.parametrize(
    ("section", "fields", "expected"),
    [
        ("parallel", {"tensor": 3}, "parallel.tensor=3 does not divide model.num_attention_heads=16; use 1, 2, 4, 8 or 16"),
        ("parallel", {"pipeline": 5}, "parallel.pipeline=5 does not divide model.num_layers=24; use 1, 2, 3, 4, 6, 8, 12 or 24"),
        ("parallel", {"sequence_parallel": True}, "parallel.sequence_parallel=true needs parallel.tensor > 1"),
        ("parallel", {"context": 3}, "model.seq_length=1024 is not divisible by 2 x parallel.context=6"),
        ("parallel", {"pipeline": 2, "virtual_stages": 5}, "parallel.virtual_stages=5 does not divide the 12 layers of each pipeline stage"),
        ("parallel", {"overlap_param_gather": True, "distributed_optimizer": False}, "needs parallel.distributed_optimizer=true"),
        ("train", {"micro_batch_size": 3}, "train.global_batch_size=256 is not a multiple of train.micro_batch_size=3"),
        ("train", {"min_lr": 1.0}, "train.min_lr=1.0 is above train.lr"),
        (
            "parallel",
            {"overlap_grad_reduce": False, "overlap_param_gather": True},
            "parallel.overlap_param_gather=true needs parallel.overlap_grad_reduce=true",
        ),
        ("model", {"attention_backend": "local"}, "model.attention_backend=local needs Megatron-LM's local layer spec"),
        ("model", {"max_position_embeddings": 512}, "model.max_position_embeddings=512 is below model.seq_length=1024"),
    ],
)
def test_divisibility_rules_name_field_value_and_fix(section, fields, expected):
    s = tweak(spec("gpt-345m-1node"), section, **fields)
    assert any(expected in m for m in messages(s)), messages(s)


def test_world_rules():
    s = spec("gpt-345m-1node")
    assert any("the world of 6 GPUs is not a multiple of" in m for m in messages(tweak(s, "parallel", tensor=4), 6, 8))
    # 256 sequences over micro 8 x DP 24: not a whole number of micro-batches.
    out = messages(s, 24, 8)
    assert any("train.global_batch_size=256 is not a multiple of micro_batch_size x data parallel = 8x24; use 384" in m for m in out), out
    assert any("spans more than the 4 GPUs of a node" in m for m in messages(tweak(s, "parallel", tensor=8), 8, 4))


def test_data_and_tokenizer_rules():
    s = spec("gpt-345m-1node")
    both = s.model_copy(update={"data": s.data.model_copy(update={"mock": True})})
    assert any("data.mock=true and data.prefixes are both set" in m for m in messages(both))
    no_files = s.model_copy(update={"data": s.data.model_copy(update={"tokenizer": jobspec.Tokenizer(type="gpt2-bpe")})})
    assert any("needs vocab_file and merge_file" in m for m in messages(no_files))
    hf = s.model_copy(update={"data": s.data.model_copy(update={"tokenizer": jobspec.Tokenizer(type="huggingface", path="t")})})
    assert any("model.vocab_size is unset" in m for m in messages(hf))


def test_extra_args_may_not_override_rendered_flags():
    s = tweak(spec("gpt-345m-1node"), "launch", extra_args=["--num-layers", "12"])
    assert any("sets --num-layers, which megaprov renders from the spec; set it through the spec field model.num_layers" in m for m in messages(s))


def test_activation_memory_follows_korthikanti_table_2():
    s = tweak(spec("gpt3-175b-128nodes"), "model", attention_backend="unfused")  # the paper's attention stores the scores
    c = Cluster(128, 8, GPUS["H100-SXM"])
    base = Layout.of(s)  # TP 8, PP 16, SP, selective recompute, micro batch 1
    S, b, h, t = 2048, 1, 12288, 8
    per_layer = 34 * S * b * h / t  # selective recompute with sequence parallelism
    layers_in_flight = 96 / 16 * 16  # first stage: L/p layers x p micro-batches in flight
    working = 5 * 96 * S / h * S * b * h / t  # the recomputed attention scores of one layer
    assert planner.memory(s, base, c).activations == pytest.approx(per_layer * layers_in_flight + working)
    none_sp = planner.memory(s, replace(base, recompute="none"), c).activations
    none_no_sp = planner.memory(s, replace(base, recompute="none", sequence_parallel=False), c).activations
    full = planner.memory(s, replace(base, recompute="full"), c).activations
    assert full < planner.memory(s, base, c).activations < none_sp < none_no_sp
    assert none_no_sp == pytest.approx(S * b * h * (10 + 24 / t + 5 * 96 * S / (h * t)) * layers_in_flight)


def test_flash_attention_stores_no_scores():
    s = spec("gpt3-175b-128nodes")
    c = Cluster(128, 8, GPUS["H100-SXM"])
    none = replace(Layout.of(s), recompute="none")
    flash = planner.memory(s, none, c).activations
    unfused = planner.memory(tweak(s, "model", attention_backend="unfused"), none, c).activations
    assert flash == pytest.approx(34 * 2048 * 12288 / 8 * 96)  # s*b*h/t*34 per layer, no 5as/h term
    assert unfused > flash


def test_weights_and_optimizer_bytes_per_parameter():
    s = spec("gpt-345m-1node")  # DP 8 on one node, bf16
    layout = Layout.of(s)
    dist = planner.memory(s, layout, H100x8)
    plain = planner.memory(s, replace(layout, distributed_optimizer=False), H100x8)
    assert plain.weights_and_optimizer == pytest.approx(plain.parameters * 18)
    assert dist.weights_and_optimizer == pytest.approx(dist.parameters * (6 + 12 / 8))


def test_a_job_that_does_not_fit_gets_fixes_that_fit():
    s = tweak(spec("llama-8b-2nodes"), "parallel", tensor=1, sequence_parallel=False, distributed_optimizer=False, overlap_param_gather=False)
    s = tweak(s, "train", recompute="none")
    c = Cluster(2, 8, GPUS["A100-40GB"])
    assert planner.spec_problems(s, c.world, 8) == []
    p = planner.plan(s, c)
    assert p.fits is False
    assert p.fixes, "a 40 GB GPU can hold an 8B model with more model parallelism"
    for fix in p.fixes:
        section, name = fix.field.split(".")
        fixed = tweak(s, section, **{name: fix.value, **({"sequence_parallel": True} if name == "tensor" else {})})
        assert planner.plan(fixed, c).fits is True, fix


def test_plan_of_the_175b_example():
    p = planner.plan(spec("gpt3-175b-128nodes"), Cluster(128, 8, GPUS["H100-SXM"]))
    assert (p.world, p.data_parallel, p.microbatches_per_step) == (1024, 8, 192)
    assert p.fits is True and 15 < p.memory.total / GIB < 40
    assert 0.2 < p.mfu_assumed < 0.5
    assert p.tokens_per_iteration == 1536 * 2048  # tokens/s by hand: test_planner_memory.py


def test_suggest_returns_only_valid_fitting_layouts_best_first():
    s = spec("gpt3-175b-128nodes")
    c = Cluster(128, 8, GPUS["H100-SXM"])
    found = planner.suggest(s, c, top=15)
    splits = {(x.layout.tp, x.layout.pp) for x in planner.candidates(s, c)}
    assert len(found) == min(15, len(splits)) and len({(x.layout.tp, x.layout.pp) for x in found}) == len(found)
    speeds = [x.tokens_per_second for x in found]
    assert speeds == sorted(speeds, reverse=True)
    for cand in found:
        assert planner.spec_problems(planner._with(s, cand.layout), c.world, 8) == []
        assert cand.memory_gib <= GPUS["H100-SXM"].memory_gib * 0.9  # SUGGEST_HEADROOM left free


def test_suggest_on_too_small_a_cluster_finds_nothing():
    assert planner.suggest(spec("gpt3-175b-128nodes"), Cluster(1, 8, GPUS["A10"])) == []


def test_gpu_names_and_aliases():
    assert planner.gpu_named("h100").name == "H100-SXM"
    assert planner.gpu_named("a100-80gb").name == "A100-80GB"
    assert planner.gpu_named("TPU") is None


# ---- the estimate from measured GEMM rates


def lab_spec():
    return spec("lab-tiny")


def test_the_lab_job_holds_throughput_to_the_plan_not_a_fixed_number():
    assert lab_spec().verify.tokens_per_second is None


def test_the_estimate_uses_the_slowest_measured_node_and_says_so():
    s = lab_spec()
    hosts = ("node1", "node2")
    fast, slow = planner.NodeRate("node1", 0.040, 1, "torch-cpu", "float32"), planner.NodeRate("node2", 0.020, 1, "torch-cpu", "float32")
    measured = planner.plan(s, Cluster(2, 1, GPUS["cpu"], hosts=hosts, rates=(fast, slow)))
    assert measured.peak.source == "measured" and measured.peak.host == "node2" and measured.peak.tflops == 0.020
    assert "measured rate of node2, 20.0 GFLOP/s per rank" in measured.peak.text
    # twice the slow node's rate: twice the tokens/s (the estimate is linear in the slowest rate)
    faster = planner.plan(s, Cluster(2, 1, GPUS["cpu"], hosts=hosts, rates=(fast, replace(slow, tflops_per_device=0.040))))
    assert faster.tokens_per_second == pytest.approx(2 * measured.tokens_per_second)
    # by hand: 2 ranks x 20 GFLOP/s x MFU 0.025 x 512/(512 + 256) x 64/(64 + 128) (rows 4 x 128, cols 64), over the
    # FLOPs of a token, 72*L*h^2*(1 + s/(12h) + V/(12Lh)) with L 2, h 64, s 128, V 384
    per_token = 72 * 2 * 64 * 64 * (1 + 128 / (12 * 64) + 384 / (12 * 2 * 64))
    assert measured.tokens_per_second == pytest.approx(2 * 0.020e12 * 0.025 * (512 / 768) * (64 / 192) / per_token, rel=1e-12)
    assert measured.rates == (fast, slow)


def test_without_a_measurement_the_published_peak_is_used_and_named():
    p = planner.plan(spec("llama-8b-2nodes"), Cluster(2, 8, GPUS["H100-SXM"], hosts=("a", "b")))
    assert p.peak.source == "published" and p.peak.tflops == 989.0 and "published peak of H100-SXM" in p.peak.text
    cpu = planner.plan(lab_spec(), Cluster(2, 1, GPUS["cpu"], hosts=("node1", "node2")))
    assert cpu.peak.source == "published" and "no measured rate" in cpu.peak.text


def test_a_measured_gpu_rate_replaces_the_published_peak_and_unmeasured_nodes_are_named():
    s = spec("llama-8b-2nodes")
    rate = planner.NodeRate("a", 700.0, 8, "torch-cuda", "bfloat16")
    p = planner.plan(s, Cluster(2, 8, GPUS["H100-SXM"], hosts=("a", "b"), rates=(rate,)))
    published = planner.plan(s, Cluster(2, 8, GPUS["H100-SXM"], hosts=("a", "b")))
    assert p.peak.tflops == 700.0 and "not measured: b" in p.peak.text
    # the measured rate is an isolated GEMM's: in training a large GEMM sustains 0.774 of it, against 0.774 of the H100's
    # isolated 0.78 of the published peak; the GEMMs' seconds scale by the ratio of the two rates
    assert p.time.gemm == pytest.approx(published.time.gemm * (989.0 * 0.78) / 700.0, rel=1e-12)
    assert p.tokens_per_second < published.tokens_per_second
    # rates of hosts the job does not use are ignored
    other = planner.plan(s, Cluster(2, 8, GPUS["H100-SXM"], hosts=("a", "b"), rates=(replace(rate, host="c"),)))
    assert other.peak.source == "published"


def test_a_stored_fact_becomes_a_node_rate():
    fact = {"version": 1, "backend": "torch-cpu", "dtype": "float32", "tflops_per_device": 0.0156, "devices": [{}], "measured_at": "t"}
    assert rates.rate_from_fact("node1", fact) == planner.NodeRate("node1", 0.0156, 1, "torch-cpu", "float32", "t")
    assert rates.rate_from_fact("node1", {"version": 2}) is None and rates.rate_from_fact("node1", None) is None
    with pytest.raises(UsageError, match="node1"):
        rates.rate_from_fact("node1", {**fact, "tflops_per_device": "x"})


def test_rates_are_read_from_megaprovs_record_or_the_fact_cache(tmp_path, monkeypatch):
    import json

    from megaprov import paths

    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[gpu_nodes]\nnode1\nnode2\nnode3\n")
    fact = {"version": 1, "backend": "torch-cpu", "dtype": "float32", "tflops_per_device": 0.0156, "devices": [{}], "measured_at": "t"}
    rates.record(inventory, {"node1": fact})
    cache = paths.fact_cache_dir(inventory)
    cache.mkdir(parents=True)
    # ansible-core 2.19's jsonfile layout (schema prefix, JSON payload in a string), and a plain one with the local fact
    (cache / "s1_node2").write_text(json.dumps({"__payload__": json.dumps({"megaprov_compute": {**fact, "tflops_per_device": 0.02}})}))
    (cache / "node3").write_text(json.dumps({"ansible_local": {"megaprov_compute": {**fact, "tflops_per_device": 0.03}}}))
    found = {r.host: r.tflops_per_device for r in rates.known(inventory, ["node1", "node2", "node3", "node4"])}
    assert found == {"node1": 0.0156, "node2": 0.02, "node3": 0.03}
    cluster = target.with_rates(Cluster(2, 1, GPUS["cpu"], hosts=("node1", "node2", "node3")), str(inventory))
    assert planner.plan(lab_spec(), cluster).peak.host == "node1"  # the slowest of the job's two nodes


# ---- every rule: the field it names, the message and the fix, exactly (what `megaprov plan` prints)


def _gpt345m(*changes):
    s = spec("gpt-345m-1node")
    for section, fields in changes:
        s = tweak(s, section, **fields)
    return s


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            [("model", {"hidden_size": 1000})],
            ("model.hidden_size", "model.hidden_size=1000 is not a multiple of model.num_attention_heads=16", "use a hidden size such as 1008"),
        ),
        (
            [("model", {"num_query_groups": 3})],
            ("model.num_query_groups", "model.num_query_groups=3 does not divide model.num_attention_heads=16", "use 1, 2, 4, 8 or 16"),
        ),
        (
            [("model", {"num_query_groups": 2}), ("parallel", {"tensor": 4})],
            ("parallel.tensor", "parallel.tensor=4 does not divide model.num_query_groups=2", "use 1 or 2"),
        ),
        (
            [("model", {"ffn_hidden_size": 4097}), ("parallel", {"tensor": 2})],
            ("model.ffn_hidden_size", "model.ffn_hidden_size=4097 is not a multiple of parallel.tensor=2", "use a multiple of 2"),
        ),
        # 36 has nine divisors: the fix lists the first eight
        (
            [("model", {"num_layers": 36}), ("parallel", {"pipeline": 5})],
            ("parallel.pipeline", "parallel.pipeline=5 does not divide model.num_layers=36", "use 1, 2, 3, 4, 6, 9, 12 or 18"),
        ),
        (
            [("parallel", {"virtual_stages": 2})],
            ("parallel.virtual_stages", "parallel.virtual_stages=2 needs parallel.pipeline > 1", "raise parallel.pipeline or remove virtual_stages"),
        ),
        (
            [("parallel", {"pipeline": 2, "virtual_stages": 5})],
            ("parallel.virtual_stages", "parallel.virtual_stages=5 does not divide the 12 layers of each pipeline stage", "use 1, 2, 3, 4, 6 or 12"),
        ),
        (
            [("parallel", {"context": 3})],
            (
                "parallel.context",
                "model.seq_length=1024 is not divisible by 2 x parallel.context=6",
                "use parallel.context 1, 2, 4, 8, 16, 32, 64 or 128",
            ),
        ),
        # a one-token sequence has no context parallelism: the only choice is 1
        (
            [("model", {"seq_length": 1, "max_position_embeddings": 1}), ("parallel", {"context": 2})],
            ("parallel.context", "model.seq_length=1 is not divisible by 2 x parallel.context=4", "use parallel.context 1"),
        ),
        (
            [("parallel", {"sequence_parallel": True})],
            (
                "parallel.sequence_parallel",
                "parallel.sequence_parallel=true needs parallel.tensor > 1",
                "raise parallel.tensor or set sequence_parallel: false",
            ),
        ),
        (
            [("parallel", {"overlap_param_gather": True, "distributed_optimizer": False})],
            (
                "parallel.overlap_param_gather",
                "parallel.overlap_param_gather=true needs parallel.distributed_optimizer=true",
                "enable distributed_optimizer",
            ),
        ),
        (
            [("parallel", {"overlap_param_gather": True, "overlap_grad_reduce": False})],
            (
                "parallel.overlap_param_gather",
                "parallel.overlap_param_gather=true needs parallel.overlap_grad_reduce=true",
                "enable overlap_grad_reduce",
            ),
        ),
        (
            [("model", {"attention_backend": "local"})],
            (
                "model.attention_backend",
                "model.attention_backend=local needs Megatron-LM's local layer spec (--spec local), which pretrain_gpt.py does not build by default",
                "use auto, flash, fused or unfused",
            ),
        ),
        (
            [("parallel", {"tp_comm_overlap": True})],
            ("parallel.tp_comm_overlap", "parallel.tp_comm_overlap=true needs parallel.sequence_parallel=true", "enable sequence_parallel"),
        ),
        (
            [("model", {"max_position_embeddings": 512})],
            ("model.max_position_embeddings", "model.max_position_embeddings=512 is below model.seq_length=1024", "use at least 1024"),
        ),
        (
            [("train", {"micro_batch_size": 3})],
            ("train.global_batch_size", "train.global_batch_size=256 is not a multiple of train.micro_batch_size=3", "use a multiple of 3"),
        ),
        ([("train", {"min_lr": 2e-4})], ("train.min_lr", "train.min_lr=0.0002 is above train.lr=0.00015", "use a min_lr at most lr")),
        (
            [("train", {"lr_warmup_iters": 320000})],
            (
                "train.lr_warmup_iters",
                "train.lr_warmup_iters=320000 is not below the decay length 320000",
                "shorten the warmup or lengthen train.lr_decay_iters",
            ),
        ),
        (
            [("train", {"lr_warmup_iters": 500000, "lr_decay_iters": None})],
            (
                "train.lr_warmup_iters",
                "train.lr_warmup_iters=500000 is not below the decay length 500000",
                "shorten the warmup or lengthen train.lr_decay_iters",
            ),
        ),
        (
            [("train", {"recompute_method": "block"})],
            (
                "train.recompute_method",
                "train.recompute_method and recompute_num_layers apply only to recompute: full",
                "set recompute: full or remove them",
            ),
        ),
        (
            [("train", {"recompute_num_layers": 2})],
            (
                "train.recompute_method",
                "train.recompute_method and recompute_num_layers apply only to recompute: full",
                "set recompute: full or remove them",
            ),
        ),
        ([("data", {"mock": True})], ("data.mock", "data.mock=true and data.prefixes are both set", "remove the prefixes or set mock: false")),
        (
            [("data", {"prefixes": []})],
            ("data.prefixes", "data.prefixes is empty and data.mock is false", "list prepared datasets (megaprov data prepare) or set mock: true"),
        ),
        (
            [("data", {"tokenizer": jobspec.Tokenizer(type="gpt2-bpe", vocab_file="v.json")})],
            (
                "data.tokenizer.vocab_file",
                "data.tokenizer.type=gpt2-bpe needs vocab_file and merge_file",
                "give the paths of vocab.json and merges.txt",
            ),
        ),
        (
            [("data", {"tokenizer": jobspec.Tokenizer(type="huggingface")})],
            ("data.tokenizer.path", "data.tokenizer.type=huggingface needs path", "give the directory holding tokenizer.json"),
        ),
        (
            [("data", {"tokenizer": jobspec.Tokenizer(type="null")})],
            ("data.tokenizer.vocab_size", "data.tokenizer.type=null needs vocab_size", "give the vocabulary size of the prepared data"),
        ),
        (
            [("data", {"tokenizer": jobspec.Tokenizer(type="huggingface", path="t")})],
            ("model.vocab_size", "model.vocab_size is unset and data.tokenizer.type=huggingface does not imply one", "set model.vocab_size"),
        ),
        (
            [("checkpoint", {"directory": "runs/../../etc"})],
            ("checkpoint.directory", "checkpoint.directory=runs/../../etc contains '..'", "give a path inside the shared directory"),
        ),
        (
            [("launch", {"trainer": "lab"}), ("parallel", {"pipeline": 2})],
            ("parallel.pipeline", "the lab trainer supports tensor and data parallelism only", "set pipeline: 1 and context: 1 for trainer: lab"),
        ),
        (
            [("launch", {"trainer": "lab"}), ("parallel", {"context": 2})],
            ("parallel.pipeline", "the lab trainer supports tensor and data parallelism only", "set pipeline: 1 and context: 1 for trainer: lab"),
        ),
        (
            [("launch", {"env": {"1ABC": "x"}})],
            ("launch.env.1ABC", "launch.env.1ABC is not a valid environment variable name", "use letters, digits and _"),
        ),
        (
            [("launch", {"env": {"A-B": "x"}})],
            ("launch.env.A-B", "launch.env.A-B is not a valid environment variable name", "use letters, digits and _"),
        ),
        (
            [("launch", {"extra_args": ["--lr=0.1"]})],
            ("launch.extra_args", "launch.extra_args sets --lr, which megaprov renders from the spec", "set it through the spec field train.lr"),
        ),
    ],
)
def test_each_rule_names_its_field_message_and_fix(changes, expected):
    assert [(p.path, p.message, p.fix) for p in planner.spec_problems(_gpt345m(*changes))] == [expected]


@pytest.mark.parametrize(
    "changes",
    [
        [("parallel", {"virtual_stages": 1})],  # one virtual stage on one pipeline stage is no interleaving: allowed
        [("train", {"min_lr": 1.5e-4})],  # min_lr equal to lr
        [("train", {"lr_warmup_iters": 319999})],  # one iteration below the decay length
        [("train", {"lr_warmup_iters": 320000, "lr_decay_style": "constant"})],  # no decay: any warmup
        [("train", {"recompute": "full", "recompute_method": "block", "recompute_num_layers": 2})],
        [("launch", {"trainer": "lab", "env": {"_OK_1": "x"}}), ("model", {"attention_backend": "local"})],  # the lab builds local
        [("launch", {"extra_args": ["--lrx", "lr", "--use-flash-attn"]})],  # not a flag megaprov renders
        [("parallel", {"tensor": 2, "sequence_parallel": True, "tp_comm_overlap": True})],
        [("checkpoint", {"directory": "runs/a..b"})],  # '..' inside a name is no parent reference
        [("model", {"seq_length": 1023})],  # any length without context parallelism
    ],
)
def test_the_boundaries_of_the_rules_are_allowed(changes):
    assert planner.spec_problems(_gpt345m(*changes)) == []


def test_world_rules_name_field_message_and_fix():
    s = spec("gpt-345m-1node")
    assert [(p.path, p.message, p.fix) for p in planner.spec_problems(tweak(s, "parallel", tensor=4), 6, 8)] == [
        (
            "parallel.tensor",
            "the world of 6 GPUs is not a multiple of tensor x pipeline x context = 4x1x1 = 4",
            "use a model-parallel product among 1, 2, 3 or 6",
        )
    ]
    assert [(p.path, p.message, p.fix) for p in planner.spec_problems(s, 24, 8)] == [
        (
            "train.global_batch_size",
            "train.global_batch_size=256 is not a multiple of micro_batch_size x data parallel = 8x24",
            "use 384 (or change micro_batch_size or the parallel sizes)",
        )
    ]
    assert [(p.path, p.fix) for p in planner.spec_problems(tweak(s, "parallel", tensor=8), 8, 4)] == [
        ("parallel.tensor", "keep tensor parallelism inside a node: use 1, 2 or 4")
    ]
    # the exact fit: TP 4 x PP 2 x CP 1 on 8 GPUs, 256 = 8 x 32 x 1; TP equal to the node's GPUs
    assert planner.spec_problems(tweak(s, "parallel", tensor=4, pipeline=2), 8, 4) == []
    assert planner.spec_problems(s, 32, 8) == []


@pytest.mark.parametrize(
    ("tokenizer", "vocab_size", "expected"),
    [
        (jobspec.Tokenizer(type="byte"), None, 257),  # 256 byte values + end of document
        (jobspec.Tokenizer(type="null", vocab_size=1000), None, 1001),  # + end of document
        (jobspec.Tokenizer(type="gpt2-bpe", vocab_file="v", merge_file="m"), None, 50257),
        (jobspec.Tokenizer(type="huggingface", path="t"), None, None),
        (jobspec.Tokenizer(type="null"), None, None),
        (jobspec.Tokenizer(type="huggingface", path="t"), 32000, 32000),  # the spec's own size wins
        (jobspec.Tokenizer(type="byte"), 300, 300),
    ],
)
def test_tokenizer_vocab(tokenizer, vocab_size, expected):
    s = tweak(tweak(spec("gpt-345m-1node"), "data", tokenizer=tokenizer), "model", vocab_size=vocab_size)
    assert planner.tokenizer_vocab(s) == expected


def test_divisors():
    assert planner.divisors(1) == [1]
    assert planner.divisors(16) == [1, 2, 4, 8, 16]  # a square: 4 once
    assert planner.divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]
    assert planner.divisors(97) == [1, 97]
    assert planner.divisors(0) == []  # seq_length // 2 of a one-token sequence: no context-parallel size divides it


def test_rate_text_and_default_mfu():
    assert planner.rate_text(0.0625) == "62.5 GFLOP/s"
    assert planner.rate_text(0.9999) == "999.9 GFLOP/s"
    assert planner.rate_text(1.0) == "1.0 TFLOP/s"
    assert planner.rate_text(989.0) == "989.0 TFLOP/s"
    assert planner.default_mfu(Cluster(2, 1, GPUS["cpu"])) == 0.025
    assert planner.default_mfu(H100x8) == pytest.approx(0.78 * 0.7744, rel=1e-12)  # of the published peak: 0.60
    measured = Cluster(1, 8, GPUS["H100-SXM"], rates=(planner.NodeRate("a", 700.0, 8, "torch-cuda", "bfloat16"),))
    assert planner.default_mfu(measured) == 0.7744  # of an isolated GEMM's measured rate
    assert planner.default_mfu(Cluster(1, 8, GPUS["A100-80GB"])) == pytest.approx(0.88 * 0.7744, rel=1e-12)


# ---- what plan() reports besides memory


def test_the_plan_of_the_345m_example_on_its_node():
    p = planner.plan(spec("gpt-345m-1node"), H100x8)
    assert (p.job, p.nodes, p.gpus_per_node, p.gpu, p.world) == ("gpt-345m", 1, 8, "H100-SXM", 8)
    assert p.layout == Layout(1, 1, 1, None, 8, "none", False, True)
    # DP 8, 256 / (8 x 8) = 4 micro-batches; whole numbers (the CLI prints them)
    assert (p.data_parallel, p.microbatches_per_step) == (8, 4)
    assert type(p.data_parallel) is int and type(p.microbatches_per_step) is int
    assert p.padded_vocab == 50304  # 50257 up to a multiple of 128
    assert p.parameters == 354_871_296  # 24 x (12h^2 + 13h) + 50304h + 1024h + 2h, h = 1024
    assert p.tokens_per_iteration == 256 * 1024
    # Megatron-LM's FLOPs in closed form (Narayanan et al. 2021): 72*B*s*L*h^2*(1 + s/(12h) + V/(12Lh))
    flops = 72 * 256 * 1024 * 24 * 1024**2 * (1 + 1024 / (12 * 1024) + 50304 / (12 * 24 * 1024))
    assert p.flops_per_iteration == pytest.approx(flops, rel=1e-12)
    assert (p.warnings, p.fixes) == ((), ())


def test_the_plan_counts_parameters_with_the_vocabulary_padded_for_its_tensor_parallelism():
    p = planner.plan(spec("gpt3-175b-128nodes"), Cluster(128, 8, GPUS["H100-SXM"]))
    L, h, V, S = 96, 12288, 51200, 2048  # 50257 padded to a multiple of 128 x 8, not of 128 (50304)
    assert (p.padded_vocab, p.parameters) == (V, 12 * L * h * h + 13 * L * h + V * h + S * h + 2 * h)


def test_parameter_count_parts():
    h, L = 1024, 24
    tied = planner.parameter_count(spec("gpt-345m-1node"))  # default TP 1: V = 50304
    assert tied == {
        "embedding": 50304 * h + 1024 * h,
        "transformer": L * (12 * h * h + 13 * h) + 2 * h,
        "output": 0,
        "total": 354_871_296,
    }
    untied = planner.parameter_count(spec("llama-8b-2nodes"), tp=2)
    assert (untied["embedding"], untied["output"]) == (128256 * 4096, 128256 * 4096)  # RoPE: no position table
    # an unknown vocabulary (a HuggingFace tokenizer without model.vocab_size) counts no vocabulary rows
    hf = tweak(spec("gpt-345m-1node"), "data", tokenizer=jobspec.Tokenizer(type="huggingface", path="t"))
    assert planner.parameter_count(hf)["embedding"] == 1024 * h
    assert planner.plan(hf, H100x8).padded_vocab == 0


def test_warning_sequence_parallel_off_with_tensor_parallelism():
    s = tweak(spec("gpt-345m-1node"), "parallel", tensor=2)
    assert planner.plan(s, H100x8).warnings == (
        "parallel.sequence_parallel is off with tensor > 1: activations are not split (turn it on to save memory)",
    )
    assert planner.plan(tweak(s, "parallel", sequence_parallel=True), H100x8).warnings == ()


@pytest.mark.parametrize(
    ("pp", "global_batch", "warning"),
    [
        (2, 256, None),  # PP 2, DP 4, micro 8: 256 / 32 = 8 micro-batches = 4 x PP: no warning
        (2, 224, "about 14 %"),  # 7 micro-batches: bubble (p - 1) / m = 1/7
        (2, 32, "about 100 %"),  # one micro-batch: the bubble is a whole step
        (4, 256, None),  # PP 4, DP 2: 256 / 16 = 16 = 4 x PP
        (4, 240, "about 20 %"),  # 15 micro-batches: 3/15
    ],
)
def test_warning_pipeline_bubble_under_four_micro_batches_per_stage(pp, global_batch, warning):
    s = tweak(tweak(spec("gpt-345m-1node"), "parallel", pipeline=pp), "train", global_batch_size=global_batch)
    got = planner.plan(s, H100x8).warnings
    if warning is None:
        assert got == ()
    else:
        assert got == (f"fewer than 4 x pipeline micro-batches per step: the pipeline bubble costs {warning} of the step",)


def test_warning_gpus_per_node_differs_from_the_cluster():
    p = planner.plan(spec("gpt-345m-1node"), Cluster(1, 4, GPUS["H100-SXM"]))
    assert p.warnings == ("launch.gpus_per_node=8 differs from the cluster's 4; the plan uses the cluster",)
    assert (p.world, p.data_parallel) == (4, 4)
    # a CPU lab node runs one process whatever the spec says: no warning
    assert planner.plan(spec("lab-tiny"), Cluster(2, 2, GPUS["cpu"])).warnings == ()


def test_layout_of_a_spec_and_its_description():
    s = tweak(spec("gpt3-175b-128nodes"), "parallel", virtual_stages=2)
    assert Layout.of(s) == Layout(8, 16, 1, 2, 1, "selective", True, True)
    assert Layout.of(s).describe() == "TP=8 PP=16 VP=2 CP=1 micro=1 recompute=selective SP dist-opt"
    plain = Layout(1, 1, 2, None, 4, "full", False, False)
    assert plain.describe() == "TP=1 PP=1 CP=2 micro=4 recompute=full"


def test_a_fact_without_devices_or_a_time_is_one_device_measured_at_no_time():
    fact = {"version": 1, "backend": "torch-cuda", "dtype": "bfloat16", "tflops_per_device": 700, "devices": [{}] * 8}
    assert rates.rate_from_fact("g1", fact) == planner.NodeRate("g1", 700.0, 8, "torch-cuda", "bfloat16", "")
    assert rates.rate_from_fact("g1", {**fact, "devices": []}).devices == 1
    assert rates.rate_from_fact("g1", {k: v for k, v in fact.items() if k != "devices"}).devices == 1
    with pytest.raises(UsageError, match="g1: its recorded compute rate has backend=None"):
        rates.rate_from_fact("g1", {k: v for k, v in fact.items() if k != "backend"})


def test_an_unknown_vocabulary_is_reported_only_when_nothing_else_is_wrong():
    """model.vocab_size is asked for only when no other rule fired (a spec with other problems gets those first)."""
    s = _gpt345m(("data", {"tokenizer": jobspec.Tokenizer(type="huggingface")}), ("train", {"min_lr": 2e-4}))
    assert [p.path for p in planner.spec_problems(s)] == ["train.min_lr", "data.tokenizer.path"]


def test_gpu_names_exact():
    assert planner.gpu_named("H100-SXM") is GPUS["H100-SXM"]
    assert planner.gpu_named("l40s") is GPUS["L40S"]


def test_only_the_nodes_the_job_runs_on_set_the_pace():
    """A 1-node job on the first of two measured hosts: the slower second host is not the job's."""
    fast, slow = planner.NodeRate("n1", 0.040, 1, "torch-cpu", "float32"), planner.NodeRate("n2", 0.010, 1, "torch-cpu", "float32")
    cluster = Cluster(1, 1, GPUS["cpu"], hosts=("n1", "n2"), rates=(fast, slow))
    assert planner.job_rates(cluster) == (fast,)
    peak = planner.rank_peak(cluster, lab_spec())
    assert (peak.host, peak.tflops) == ("n1", 0.040) and "not measured" not in peak.text


def test_a_job_that_needs_exactly_the_gpus_memory_fits():
    """345M without the distributed optimizer on one GPU needs 18,135,928,832 bytes (test_planner_memory.py derives it);
    a GPU of exactly that many bytes holds it, one of a byte less does not."""
    s = tweak(spec("gpt-345m-1node"), "parallel", distributed_optimizer=False)
    exact = planner.Gpu("exact", 18_135_928_832 / GIB, 989.0, 494.0)
    less = planner.Gpu("less", (18_135_928_832 - 1) / GIB, 989.0, 494.0)
    assert planner.memory(s, Layout.of(s), Cluster(1, 1, exact)).fits is True
    assert planner.memory(s, Layout.of(s), Cluster(1, 1, less)).fits is False


def test_a_tensor_size_that_divides_nothing_names_both_rules():
    assert [(p.path, p.message, p.fix) for p in planner.spec_problems(_gpt345m(("parallel", {"tensor": 3})))] == [
        ("parallel.tensor", "parallel.tensor=3 does not divide model.num_attention_heads=16", "use 1, 2, 4, 8 or 16"),
        ("model.ffn_hidden_size", "model.ffn_hidden_size=4096 is not a multiple of parallel.tensor=3", "use a multiple of 3"),
    ]
