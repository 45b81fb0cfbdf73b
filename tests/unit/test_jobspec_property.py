"""Property: any spec, however wrong, gives a clean error (field path, fix, exit 2) or a valid plan and launch."""

import math

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from megaprov import jobspec, planner, render
from megaprov.cli import main
from megaprov.errors import ExitCode
from megaprov.jobspec import JobSpecError
from tests.unit.test_render import assert_megatron_accepts

# Mostly plausible values (powers of two divide each other often enough to reach valid plans), sometimes not.
small = st.sampled_from([1, 2, 4, 8, 16, 32, 64, 3, 6, 12, 24, 48, 96, 5])
odd_values = st.one_of(st.none(), st.text(max_size=5), st.floats(allow_nan=True), st.booleans(), st.lists(st.integers(), max_size=2))


def maybe_wrong(strategy):
    """The strategy's values and, now and then, a value of the wrong kind (specs have ~25 fields)."""
    return st.integers(min_value=1, max_value=100).flatmap(lambda i: odd_values if i == 7 else strategy)


specs = st.fixed_dictionaries(
    {
        "name": maybe_wrong(st.sampled_from(["job", "gpt-1", "gpt-2", "gpt-3", "gpt-4"])),
        "model": st.fixed_dictionaries(
            {
                "num_layers": maybe_wrong(small),
                "hidden_size": maybe_wrong(st.sampled_from([64, 96, 128, 256, 1024, 100])),
                "num_attention_heads": maybe_wrong(st.sampled_from([1, 2, 3, 4, 6, 8, 16])),
                "seq_length": maybe_wrong(st.sampled_from([64, 128, 256, 2048, 7, 1000])),
            },
            optional={
                "num_query_groups": maybe_wrong(st.sampled_from([1, 2, 4, 8])),
                "ffn_hidden_size": maybe_wrong(st.sampled_from([100, 256, 512])),
                "activation": maybe_wrong(st.sampled_from(["gelu", "swiglu", "squared_relu"])),
                "attention_backend": maybe_wrong(st.sampled_from(["auto", "unfused", "flash", "local", "magic"])),
                "vocab_size": maybe_wrong(st.sampled_from([256, 50257, 32000])),
            },
        ),
        "parallel": st.fixed_dictionaries(
            {},
            optional={
                "tensor": maybe_wrong(small),
                "pipeline": maybe_wrong(small),
                "context": maybe_wrong(st.sampled_from([1, 2, 3, 4])),
                "virtual_stages": maybe_wrong(st.sampled_from([1, 2, 3])),
                "sequence_parallel": maybe_wrong(st.booleans()),
                "distributed_optimizer": maybe_wrong(st.booleans()),
            },
        ),
        "train": st.fixed_dictionaries(
            {
                "global_batch_size": maybe_wrong(small),
                "train_iters": maybe_wrong(small),
                "lr": maybe_wrong(st.sampled_from([1e-4, 3e-3, 6e-4])),
            },
            optional={
                "micro_batch_size": maybe_wrong(small),
                "precision": maybe_wrong(st.sampled_from(["bf16", "fp16", "fp32", "bf16", "fp8"])),
                "recompute": maybe_wrong(st.sampled_from(["none", "selective", "full"])),
                "min_lr": maybe_wrong(st.sampled_from([0.0, 1.0])),
                "lr_warmup_iters": maybe_wrong(small),
            },
        ),
        "data": st.fixed_dictionaries(
            {
                "prefixes": maybe_wrong(
                    st.lists(
                        st.fixed_dictionaries({"path": st.sampled_from(["data/x", "data/y", "/shared/z", "/elsewhere/y", ""])}),
                        min_size=1,
                        max_size=2,
                    )
                )
            },
            optional={
                "mock": maybe_wrong(st.booleans()),
                "tokenizer": maybe_wrong(st.fixed_dictionaries({"type": st.sampled_from(["byte", "byte", "gpt2-bpe", "null", "huggingface", "sp"])})),
            },
        ),
        "launch": st.fixed_dictionaries(
            {},
            optional={
                "nodes": maybe_wrong(st.integers(min_value=1, max_value=4)),
                "gpus_per_node": maybe_wrong(st.sampled_from([1, 2, 4, 8, 0])),
                "trainer": maybe_wrong(st.sampled_from(["megatron-lm", "lab"])),
                "extra_args": maybe_wrong(st.lists(st.sampled_from(["--use-flash-attn", "--bogus", "--num-layers", "x", "--seed", "7"]), max_size=3)),
            },
        ),
    },
    optional={"extra": st.integers()},
).filter(lambda d: "extra" not in d or d["name"] == "job")  # an unknown top-level key, now and then


# Specs that parse: random in the dimensions the planner's rules and memory model care about.
plausible = st.fixed_dictionaries(
    {
        "name": st.just("job"),
        "model": st.fixed_dictionaries(
            {
                "num_layers": st.sampled_from([2, 4, 12, 24, 32, 96]),
                "hidden_size": st.sampled_from([64, 256, 1024, 4096, 12288]),
                "num_attention_heads": st.sampled_from([1, 4, 8, 16, 32]),
                "seq_length": st.sampled_from([128, 1024, 2048, 8192]),
                "activation": st.sampled_from(["gelu", "swiglu"]),
                "attention_backend": st.sampled_from(["auto", "unfused"]),
            },
            optional={"num_query_groups": st.sampled_from([1, 2, 8])},
        ),
        "parallel": st.fixed_dictionaries(
            {
                "tensor": st.sampled_from([1, 2, 4, 8]),
                "pipeline": st.sampled_from([1, 2, 4]),
                "context": st.sampled_from([1, 2]),
                "sequence_parallel": st.booleans(),
                "distributed_optimizer": st.booleans(),
            },
            optional={"virtual_stages": st.sampled_from([2, 3])},
        ),
        "train": st.fixed_dictionaries(
            {
                "micro_batch_size": st.sampled_from([1, 2, 4]),
                "global_batch_size": st.sampled_from([8, 16, 64, 256]),
                "train_iters": st.just(100),
                "lr": st.just(1e-4),
                "precision": st.sampled_from(["bf16", "fp16", "fp32"]),
                "recompute": st.sampled_from(["none", "selective", "full"]),
            }
        ),
        "data": st.fixed_dictionaries({"mock": st.just(True), "tokenizer": st.fixed_dictionaries({"type": st.just("byte")})}),
        "launch": st.fixed_dictionaries({"nodes": st.sampled_from([1, 2, 4]), "gpus_per_node": st.sampled_from([1, 4, 8])}),
    }
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(specs, plausible), st.sampled_from(["H100-SXM", "A100-40GB", "cpu"]))
def test_random_specs_give_a_clean_error_or_a_valid_plan(raw, gpu_name):
    text = yaml.safe_dump(raw)
    try:
        spec = jobspec.parse(text, "gpt.yml")
    except JobSpecError as exc:
        for problem in exc.problems:
            assert problem.message and "\n" not in problem.message
        return
    cluster = planner.Cluster(spec.launch.nodes, spec.launch.gpus_per_node, planner.GPUS[gpu_name])
    problems = planner.spec_problems(spec, cluster.world, cluster.gpus_per_node)
    if problems:
        for problem in problems:
            assert problem.path and problem.fix, problem
        return
    plan = planner.plan(spec, cluster)
    assert plan.parameters > 0 and plan.flops_per_iteration > 0
    assert math.isfinite(plan.step_seconds) and plan.step_seconds > 0
    assert plan.data_parallel * plan.layout.tp * plan.layout.pp * plan.layout.cp == cluster.world
    assert plan.layout.micro_batch * plan.microbatches_per_step * plan.data_parallel == spec.train.global_batch_size
    if plan.fits is False:
        for fix in plan.fixes:
            assert fix.memory_gib <= planner.GPUS[gpu_name].memory_gib
    hosts = [(f"n{i}", f"10.0.0.{i + 1}") for i in range(cluster.nodes)]
    try:
        rendered = render.render(spec, cluster, hosts)
    except JobSpecError as exc:
        assert all(p.fix for p in exc.problems)
        return
    if spec.launch.extra_args and spec.launch.extra_args[0] == "--seed":
        return  # a repeated flag is legal for argparse (the last wins); the table walk below rejects it
    assert_megatron_accepts(list(rendered.megatron_args))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(raw=specs)
def test_the_cli_never_shows_a_traceback(raw, tmp_path_factory, capsys):
    path = tmp_path_factory.mktemp("spec") / "gpt.yml"
    path.write_text(yaml.safe_dump(raw))
    code = main(["plan", "--job", str(path), "--gpu", "H100-SXM"])
    out, err = capsys.readouterr()
    assert code in (ExitCode.OK, ExitCode.USAGE, ExitCode.VERDICT_FAILED), err
    assert "Traceback" not in err and "internal error" not in err
    if code == ExitCode.USAGE:
        assert err.startswith("megaprov: error: ")
