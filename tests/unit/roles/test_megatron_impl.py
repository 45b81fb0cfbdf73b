"""The Megatron-LM implementation and fused paths a rendered argv selects fit what the nodes have.

CI cannot reach Megatron-LM: what an argv selects and what each choice needs were read from core_v0.16.1's code
and recorded in megaprov/training/megatron/impl-core_v0.16.1.json (each entry names its source file); the flags are checked
against the flag table dumped from the same tag. tests/unit/roles/test_megatron_upstream.py runs Megatron-LM's own
parse_args/validate_args/model build on the same argv where a checkout is at hand.
"""

import dataclasses
import json
from pathlib import Path

import pytest

from megaprov.errors import UsageError
from megaprov.paths import fact_cache_dir
from megaprov.training import jobspec, nodefacts, render, target
from megaprov.training.jobspec import JobSpecError
from megaprov.training.planner import GPUS

ROOT = Path(__file__).resolve().parents[3]
JOBS = ROOT / "examples" / "jobs"
IMPL = render.megatron_impl()
FLAGS = render.megatron_flags()
EXAMPLES = sorted(p.stem for p in JOBS.glob("*.yml") if jobspec.load(p).launch.trainer == "megatron-lm")

STACKS = {
    "role defaults (no TE, no apex)": nodefacts.NodeStack(hosts=("n",)),  # as the nodes' facts report them
    "apex only": nodefacts.NodeStack(apex_gradient_accumulation=True, apex_softmax=True, apex_layer_norm=True, hosts=("n",)),
    "TE only": nodefacts.NodeStack(transformer_engine="2.9.0", transformers="4.57.1", hosts=("n",)),
    "TE and apex": nodefacts.NodeStack(
        transformer_engine="2.9.0", apex_gradient_accumulation=True, apex_softmax=True, apex_layer_norm=True, transformers="4.57.1", hosts=("n",)
    ),
}


def selected(argv, spec):
    """What Megatron-LM core_v0.16.1 makes of argv, from the recorded defaults (its argparse defaults and the
    validate_args adjustments recorded with them)."""
    out = {name: entry["value"] for name, entry in IMPL["defaults"].items()}
    by_flag = {entry["flag"]: name for name, entry in IMPL["defaults"].items()}
    for i, word in enumerate(argv):
        name = by_flag.get(word)
        if name == "transformer_impl":
            out[name] = argv[i + 1]
        elif name is not None:  # --no-* switches turn a path off, --cross-entropy-loss-fusion on
            out[name] = not word.startswith("--no-")
    if "--disable-bias-linear" in argv:
        out["bias_gelu_fusion"] = False
    if spec.model.position_embedding != "rope":
        out["apply_rope_fusion"] = False
    out["sequence_parallel"] = "--sequence-parallel" in argv
    out["rms_norm"] = spec.model.normalization == "RMSNorm"
    return out


def unmet(sel, stack):
    """The recorded needs of each selected path that ``stack`` does not meet (impl-*.json ``needs``)."""
    te, apex_norm = stack.transformer_engine is not None, stack.apex_layer_norm
    local = sel["transformer_impl"] == "local"
    problems = []
    if sel["transformer_impl"] == "transformer_engine" and not te:
        problems.append("transformer_impl=transformer_engine")
    if sel["gradient_accumulation_fusion"] and not stack.apex_gradient_accumulation:
        problems.append("gradient_accumulation_fusion")
    if local and sel["masked_softmax_fusion"] and not stack.apex_softmax:
        problems.append("masked_softmax_fusion")
    if local and sel["persist_layer_norm"] and (not apex_norm or sel["rms_norm"]):
        problems.append("persist_layer_norm")
    if local and sel["sequence_parallel"] and (not apex_norm or sel["rms_norm"]):
        problems.append("sequence_parallel")
    if sel["apply_rope_fusion"] and not te:
        problems.append("apply_rope_fusion")
    return problems


def test_recorded_facts_name_flags_of_the_pinned_tag():
    assert IMPL["megatron_lm"] == jobspec.PINNED_MEGATRON == "core_v0.16.1"
    for entry in IMPL["defaults"].values():
        assert entry["flag"] in FLAGS, entry["flag"]
    for rule in IMPL["rules"]:
        assert rule["args"][0] in FLAGS
    assert FLAGS["--transformer-impl"]["choices"] == ["inference_optimized", "local", "transformer_engine"]
    # Megatron-LM's own defaults: Transformer Engine and every fusion on; the old render relied on them.
    assert IMPL["defaults"]["transformer_impl"]["value"] == "transformer_engine"
    assert IMPL["defaults"]["gradient_accumulation_fusion"]["value"] is True


@pytest.mark.parametrize("stack_name", sorted(STACKS))
@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_renders_only_what_its_nodes_have(name, stack_name):
    """Old render: no implementation flags, so Megatron-LM's defaults (Transformer Engine, gradient-accumulation
    fusion) were selected on nodes that have neither: this test failed for every example on the role defaults."""
    spec = jobspec.load(JOBS / f"{name}.yml")
    stack = STACKS[stack_name]
    problems = render.stack_problems(spec, stack)
    argv = render.megatron_args(spec, "/shared", stack)
    left = unmet(selected(argv, spec), stack)
    if problems:  # refused before any host is contacted, with the field and the fix
        assert left, f"{name} on {stack_name} was refused for nothing: {problems}"
        assert all(p.fix for p in problems)
        return
    assert left == [], f"{name} on {stack_name}: {argv[-8:]} selects {left}, which the nodes lack"


def test_old_render_selected_transformer_engine_and_fusion_on_the_role_defaults():
    """The class of bug: without the implementation flags Megatron-LM's defaults need TE and apex."""
    spec = jobspec.load(JOBS / "gpt-345m-1node.yml")
    old = [w for w in render.megatron_args(spec, "/shared") if w not in render.stack_args(spec)]
    assert set(unmet(selected(old, spec), STACKS["role defaults (no TE, no apex)"])) >= {
        "transformer_impl=transformer_engine",
        "gradient_accumulation_fusion",
    }
    new = render.megatron_args(spec, "/shared")
    assert new[-7:] == [
        "--distributed-backend",
        "nccl",
        "--transformer-impl",
        "local",
        "--no-gradient-accumulation-fusion",
        "--no-masked-softmax-fusion",
        "--no-persist-layer-norm",
    ]


def test_transformer_engine_path_where_the_nodes_have_it():
    spec = jobspec.load(JOBS / "gpt3-175b-128nodes.yml")
    argv = render.megatron_args(spec, "/shared", STACKS["TE and apex"])
    assert argv[argv.index("--transformer-impl") + 1] == "transformer_engine"
    assert "--no-gradient-accumulation-fusion" not in argv and "--no-masked-softmax-fusion" not in argv
    # TE without apex: the output layer is Megatron's ColumnParallelLinear, which needs apex's wgrad kernel
    argv = render.megatron_args(spec, "/shared", STACKS["TE only"])
    assert "--no-gradient-accumulation-fusion" in argv and argv[argv.index("--transformer-impl") + 1] == "transformer_engine"


def test_a_force_the_nodes_cannot_satisfy_is_refused_in_one_line():
    spec = jobspec.load(JOBS / "llama-8b-2nodes.yml")  # launch.extra_args: --transformer-impl transformer_engine
    known = nodefacts.NodeStack(transformers="4.57.1", hosts=("gpu01", "gpu02"))
    cluster = nodefacts.KnownCluster(2, 8, GPUS["H100-SXM"], "/shared", stack=known)
    with pytest.raises(JobSpecError) as info:
        render.render(spec, cluster, [("gpu01", "10.0.0.1"), ("gpu02", "10.0.0.2")])
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith("launch.extra_args forces --transformer-impl transformer_engine but the nodes have no Transformer Engine")
    assert "megatron_transformer_engine: true" in text
    # With nothing known (the roles' defaults install no Transformer Engine) the force is refused too; before,
    # it was rendered with only a comment in the node script, and every rank failed at model build
    with pytest.raises(JobSpecError) as info:
        render.render(spec, nodefacts.KnownCluster(2, 8, GPUS["H100-SXM"], "/shared"), [("gpu01", "10.0.0.1"), ("gpu02", "10.0.0.2")])
    assert str(info.value).startswith("launch.extra_args forces --transformer-impl transformer_engine but the nodes have no Transformer Engine")
    assert "assumed (no node fact megaprov_python known)" in str(info.value)
    # on nodes with Transformer Engine the force stands, and the node script says what the choice rests on
    site = nodefacts.NodeStack(transformer_engine="2.9.0", transformers="4.57.1", hosts=("gpu01", "gpu02"))
    out = render.render(spec, nodefacts.KnownCluster(2, 8, GPUS["H100-SXM"], "/shared", stack=site), [("gpu01", "10.0.0.1"), ("gpu02", "10.0.0.2")])
    assert out.transformer_impl == "transformer_engine"
    assert "# Megatron-LM implementation: transformer_engine (forced by launch.extra_args); nodes: node facts of gpu01, gpu02" in out.nodes[0].script


def test_a_huggingface_tokenizer_needs_transformers_on_the_nodes_and_the_tokenizer_path_is_legacy_and_offline():
    """Core_v0.16.1's pretrain_gpt.py takes the new tokenizer path unless --legacy-tokenizer, and that path
    looks GPT2BPETokenizer up on the Hugging Face Hub ("gpt2", through transformers) instead of the vocab and merge
    files; Megatron-LM's HuggingFaceTokenizer imports transformers, which the roles' defaults do not install."""
    llama = jobspec.load(JOBS / "llama-8b-2nodes.yml")
    te = nodefacts.NodeStack(transformer_engine="2.9.0", hosts=("gpu01",))
    problems = render.stack_problems(llama, te)
    assert [p.path for p in problems] == ["data.tokenizer.type"] and "megatron_huggingface: true" in problems[0].fix
    assert render.stack_problems(llama, dataclasses.replace(te, transformers="4.57.1")) == []
    for name in ("gpt-345m-1node", "gpt3-175b-128nodes", "gpu-check", "llama-8b-2nodes"):
        assert "--legacy-tokenizer" in render.megatron_args(jobspec.load(JOBS / f"{name}.yml")), name
    assert "--legacy-tokenizer" not in render.megatron_args(jobspec.load(JOBS / "lab-tiny.yml"))  # the lab trainer's own parser
    env = render._env(llama)
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert "HF_HUB_OFFLINE" not in render._env(jobspec.load(JOBS / "gpt-345m-1node.yml"))
    # the lab trainer imports the checkout's megatron.core and its compiled dataset helpers, as pretrain_gpt.py does
    assert render._env(jobspec.load(JOBS / "lab-tiny.yml"))["PYTHONPATH"] == "/opt/megatron-lm"


def test_sequence_parallel_without_transformer_engine_is_refused():
    spec = jobspec.load(JOBS / "gpt3-175b-128nodes.yml")
    with pytest.raises(JobSpecError, match=r"^parallel.sequence_parallel=true needs Transformer Engine on the nodes"):
        render.render(
            spec, nodefacts.KnownCluster(128, 8, GPUS["H100-SXM"], "/shared"), [(f"n{i}", f"10.0.{i // 200}.{i % 200 + 1}") for i in range(128)]
        )


def _fact(te=None, apex=False):
    kernels = ("fused_weight_gradient_mlp_cuda", "scaled_masked_softmax_cuda", "scaled_upper_triang_masked_softmax_cuda", "fused_layer_norm_cuda")
    return {
        "version": 1,
        "torch": "2.13.0+cu130",
        "torch_cuda": "13.0",
        "transformer_engine": te,
        "apex": {k: apex for k in kernels},
        "megatron": {"checkout": "0.16.1", "helpers_built": True, "core_imported": "checkout"},
    }


def test_the_cluster_carries_the_facts_the_python_stage_left(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    inv = tmp_path / "inv.ini"
    inv.write_text(
        "[head]\nhead1 ansible_host=10.0.0.9\n\n[gpu_nodes]\ngpu01 ansible_host=10.0.0.1\ngpu02 ansible_host=10.0.0.2\n\n"
        "[gpu_nodes:vars]\nmegaprov_gpu_model=H100-SXM\nmegaprov_gpus_per_node=8\n"
    )
    spec = jobspec.load(JOBS / "gpt3-175b-128nodes.yml")
    spec = spec.model_copy(update={"launch": spec.launch.model_copy(update={"nodes": 2})})
    cache = fact_cache_dir(inv)
    cache.mkdir(parents=True)
    # ansible-core 2.19's jsonfile cache wraps the facts; one node set the fact, the other only has the local fact
    (cache / "gpu01").write_text(json.dumps({"__payload__": json.dumps({"megaprov_python": _fact("2.9.0", True)})}))
    (cache / "gpu02").write_text(json.dumps({"ansible_local": {"megaprov_python": _fact("2.9.0", True)}}))
    found, _ = target.cluster(spec, str(inv), target.Shape())
    stack = nodefacts.stack_of(found)
    assert stack.transformer_engine == "2.9.0" and stack.apex_gradient_accumulation and stack.hosts == ("gpu01", "gpu02")
    assert "--transformer-impl transformer_engine" in " ".join(render.megatron_args(spec, "/shared", stack))
    # one node without TE: the job cannot rely on it
    (cache / "gpu02").write_text(json.dumps({"megaprov_python": _fact(None, True)}))
    found, _ = target.cluster(spec, str(inv), target.Shape())
    assert nodefacts.stack_of(found).transformer_engine is None
    assert render.selected_impl(spec, nodefacts.stack_of(found)) == "local"
    # a fact of another kind counts as none; a version that is not one is refused with the node's name
    (cache / "gpu02").write_text(json.dumps({"megaprov_python": {"version": 1, "apex": "yes"}}))
    found, _ = target.cluster(spec, str(inv), target.Shape())
    assert nodefacts.stack_of(found).transformer_engine is None and not nodefacts.stack_of(found).apex_softmax
    (cache / "gpu02").write_text(json.dumps({"megaprov_python": {"version": 1, "transformer_engine": ["x"] * 3}}))
    with pytest.raises(UsageError, match="node gpu02: its fact megaprov_python.transformer_engine="):
        target.cluster(spec, str(inv), target.Shape())


def test_the_role_check_renders_by_the_same_rules():
    """roles/megatron/files holds a byte-identical copy of the rules its build check applies."""
    assert (ROOT / "ansible_collections/megaprov/cluster/roles/megatron/files/impl-core_v0.16.1.json").read_bytes() == (
        ROOT / "megaprov/training/megatron/impl-core_v0.16.1.json"
    ).read_bytes()


def _check_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "megatron_build_check", ROOT / "ansible_collections/megaprov/cluster/roles/megatron/files/megatron_build_check.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("stack_name", sorted(STACKS))
@pytest.mark.parametrize("name", EXAMPLES)
def test_the_role_check_adds_what_the_render_adds(name, stack_name):
    """The megatron role's build check applies the rules to the node's fact: the same arguments as a job's render."""
    script = _check_script()
    spec = jobspec.load(JOBS / f"{name}.yml")
    spec = spec.model_copy(update={"launch": spec.launch.model_copy(update={"extra_args": []})})  # no force: the rules alone
    stack = STACKS[stack_name]
    fact = _fact(stack.transformer_engine, False)
    fact["apex"] = {
        "fused_weight_gradient_mlp_cuda": stack.apex_gradient_accumulation,
        "scaled_masked_softmax_cuda": stack.apex_softmax,
        "scaled_upper_triang_masked_softmax_cuda": stack.apex_softmax,
        "fused_layer_norm_cuda": stack.apex_layer_norm,
    }
    fact["transformers"] = stack.transformers
    assert nodefacts.node_from_fact(fact) == nodefacts.NodeStack(
        **{**stack.__dict__, "hosts": (), "torch": "2.13.0+cu130", "torch_cuda": "13.0", "helpers_built": True}
    )
    rendered = render.megatron_args(spec, "/shared", stack)
    assert script.rule_args(IMPL["rules"], fact, rendered) == render.stack_args(spec, stack)


def test_a_tokenizer_file_and_fim_are_refused_before_anything_starts(capsys, tmp_path):
    """Megatron-LM's HuggingFaceTokenizer loads a directory (AutoTokenizer.from_pretrained), and validate_args refuses
    --fim-data with the --legacy-tokenizer megaprov renders: both would fail on every rank after the start, whatever the
    nodes hold, so `job check` says so too."""
    from megaprov.cli import main
    from megaprov.errors import ExitCode

    llama = jobspec.load(JOBS / "llama-8b-2nodes.yml")
    tokenizer = llama.data.tokenizer.model_copy(update={"path": "tokenizers/llama3/tokenizer.json"})
    file_tok = llama.model_copy(update={"data": llama.data.model_copy(update={"tokenizer": tokenizer})})
    assert [p.path for p in render.megatron_problems(file_tok)] == ["data.tokenizer.path"]
    fim = llama.model_copy(update={"launch": llama.launch.model_copy(update={"extra_args": [*llama.launch.extra_args, "--fim-data"]})})
    assert [p.path for p in render.megatron_problems(fim)] == ["launch.extra_args"]
    assert render.megatron_problems(llama) == []
    text = (JOBS / "llama-8b-2nodes.yml").read_text().replace("path: tokenizers/llama3\n", "path: tokenizers/llama3/tokenizer.json\n")
    assert "path: tokenizers/llama3/tokenizer.json" in text
    spec_file = tmp_path / "llama.yml"
    spec_file.write_text(text)
    code = main(["job", "check", "-f", str(spec_file)])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE and "data.tokenizer.path=tokenizers/llama3/tokenizer.json is a file" in err, err
