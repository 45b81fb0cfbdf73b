"""megaprov megatron role: build a small GPT from rendered pretrain_gpt.py arguments, the way a job would.

    python megatron_build_check.py CHECKOUT [--rules JSON --stack JSON] [--world-size N] [--arch MAJOR] [--shrink] -- ARG...

``--rules`` (the ``rules`` of megaprov's impl-<tag>.json) and ``--stack`` (the node's ``megaprov_python`` fact)
add the implementation and fused-path arguments exactly as megaprov's render does for a job on this node.

With a Megatron-LM checkout (megatron/training present) this runs Megatron-LM's own ``parse_args`` and
``validate_args`` on the arguments (at ``--world-size``), then builds the model through the checkout's own
``model_provider`` + ``gpt_builder`` on one process (Gloo, CPU initialisation), after ``--shrink`` replaced the
model and parallel sizes by tiny ones (every other argument, the implementation and fusion choices included, is
kept). Without the training code (a megatron-core-only node) it builds the same implementation's layer spec with
the installed megatron-core: ``transformer_engine`` takes the TE spec, ``local`` the local one, and the fusion
switches go into the ``TransformerConfig`` as Megatron-LM's arguments put them there.

With the training code, ``pretrain_gpt.py`` itself is imported first (as a module: its ``__main__`` block does not
run), so everything a job imports is imported here; a missing package is the answer (``imports``), named.

Prints one JSON line: imports, parse, validate, transformer_impl, the fusions in effect, model (``built`` or the
error) and the parameter count. Exit status 0 only when the model was built. ``--arch`` stands in for the GPU
generation on a machine without one (Megatron-LM asks the device in validate_args); without a GPU it defaults to
Hopper (9), and the result says so.

On a CPU-only torch (no CUDA build: the lab, CI) there is no triton, which CUDA builds of torch depend on and which
megatron/training/initialize.py imports unconditionally (through the batch-invariant kernels module, whose kernels
only run on a GPU). There, and only there, that one module is imported while a stand-in ``triton`` exists; the
stand-in is removed right after, and the result says ``"triton": "stand-in (CPU torch)"``.
"""

import argparse
import contextlib
import importlib.util
import io
import json
import os
import sys
import traceback
import types

SIZES = {  # --shrink: tiny model and one process; everything else is left as rendered
    "--num-layers": "2",
    "--hidden-size": "64",
    "--ffn-hidden-size": "256",
    "--num-attention-heads": "4",
    "--num-query-groups": "2",
    "--seq-length": "64",
    "--max-position-embeddings": "64",
    "--tensor-model-parallel-size": "1",
    "--pipeline-model-parallel-size": "1",
    "--context-parallel-size": "1",
    "--micro-batch-size": "1",
    "--global-batch-size": "1",
    "--recompute-num-layers": "1",
}
DROPPED = {"--sequence-parallel": 0, "--num-virtual-stages-per-pipeline-rank": 1, "--tp-comm-overlap": 0}
FUSIONS = (
    "gradient_accumulation_fusion",
    "masked_softmax_fusion",
    "bias_gelu_fusion",
    "bias_swiglu_fusion",
    "bias_dropout_fusion",
    "apply_rope_fusion",
    "persist_layer_norm",
    "cross_entropy_loss_fusion",
)


KERNELS = {
    "apex_gradient_accumulation": ("fused_weight_gradient_mlp_cuda",),
    "apex_softmax": ("scaled_masked_softmax_cuda", "scaled_upper_triang_masked_softmax_cuda"),
    "apex_layer_norm": ("fused_layer_norm_cuda",),
}


def capabilities(fact):
    """The capabilities the rules test, from a megaprov_python fact (as megaprov.training.nodefacts reads it)."""
    apex = fact.get("apex") if isinstance(fact.get("apex"), dict) else {}
    caps = {name: all(apex.get(k) is True for k in kernels) for name, kernels in KERNELS.items()}
    caps["transformer_engine"] = isinstance(fact.get("transformer_engine"), str) and bool(fact["transformer_engine"])
    return caps


def value_of(argv, flag, default):
    return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) else default


def rule_args(rules, fact, argv):
    """The arguments megaprov renders for this node: every rule whose conditions the node and the model meet."""
    caps = capabilities(fact)
    model = {
        "position_embedding": value_of(argv, "--position-embedding-type", "learned_absolute"),
        "normalization": value_of(argv, "--normalization", "LayerNorm"),
    }
    out = []
    for rule in rules:
        if all(caps.get(k) == v for k, v in rule["stack"].items()) and all(model.get(k) == v for k, v in rule.get("model", {}).items()):
            out += rule["args"]
    return out


def shrink(argv):
    out, i = [], 0
    while i < len(argv):
        flag = argv[i]
        if flag in DROPPED:
            i += 1 + DROPPED[flag]
            continue
        if flag in SIZES:
            out += [flag, SIZES[flag]]
            i += 2
            continue
        if flag == "--tokenizer-type":  # no vocabulary files on a check: the null tokenizer with a small vocabulary
            i += 2
            while i < len(argv) and not argv[i].startswith("--"):
                i += 1
            continue
        if flag in ("--vocab-file", "--merge-file", "--tokenizer-model", "--vocab-size"):
            i += 2
            continue
        out.append(flag)
        i += 1
    return out + ["--tokenizer-type", "NullTokenizer", "--vocab-size", "127", "--use-cpu-initialization"]


def quiet(fn, *args, **kwargs):
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


def one_process_group():
    import torch

    if not torch.distributed.is_initialized():
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MEGAPROV_CHECK_PORT", "29533"), RANK="0", WORLD_SIZE="1")
        torch.distributed.init_process_group("gloo")
    from megatron.core import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)


def triton_stand_in(checkout):
    """On a CPU-only torch without triton: import the one module of the tree that imports triton at import time with a
    stand-in present, then remove the stand-in (see the docstring). Returns what was done, for the result."""
    import torch

    if importlib.util.find_spec("triton") is not None:
        return "installed"
    if torch.version.cuda is not None:  # a CUDA torch without triton is broken: let the import fail and say so
        return "missing"
    import functorch.compile  # noqa: F401  torch probes triton the first time these load: before the stand-in exists
    import torch._dynamo  # noqa: F401
    import torch._inductor.codecache  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401

    sys.path.insert(0, checkout)
    import megatron.core.models.gpt  # noqa: F401  its fusions call torch.compile, which probes triton too

    mod, lang = types.ModuleType("triton"), types.ModuleType("triton.language")

    def anything(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})

    mod.jit = lambda fn=None, **kw: fn if fn is not None else (lambda f: f)
    mod.language, mod.__getattr__, lang.__getattr__ = lang, anything, anything
    sys.modules["triton"], sys.modules["triton.language"] = mod, lang
    try:
        import megatron.core.transformer.custom_layers.batch_invariant_kernels  # noqa: F401
    finally:
        del sys.modules["triton"], sys.modules["triton.language"]
    return "stand-in (CPU torch)"


def import_entry(checkout):
    """Import pretrain_gpt.py as a module (its __main__ block does not run): every import a job makes."""
    spec = importlib.util.spec_from_file_location("megaprov_pretrain_gpt", os.path.join(checkout, "pretrain_gpt.py"))
    module = importlib.util.module_from_spec(spec)
    quiet(spec.loader.exec_module, module)


def error_line(exc):
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:400]


def with_training_code(checkout, argv, world_size, do_shrink, arch):
    sys.path.insert(0, checkout)
    os.chdir(checkout)
    result = {"mode": "megatron-lm"}
    import torch

    if arch is None and not torch.cuda.is_available():
        arch = 9
        result["arch"] = "stand-in 9 (no GPU)"
    try:
        result["triton"] = triton_stand_in(checkout)
        if os.path.isfile(os.path.join(checkout, "pretrain_gpt.py")):
            import_entry(checkout)
        import megatron.training.training  # noqa: F401
        result["imports"] = "ok"
    except Exception as exc:  # noqa: BLE001 (the error is the answer)
        result["imports"] = error_line(exc)
        result["parse"] = result["validate"] = False
        result["model"] = "not built: " + result["imports"]
        return result
    if arch is not None:  # validate_args asks the GPU generation
        import megatron.core.utils as core_utils

        core_utils.get_device_arch_version = lambda: arch
    from megatron.training import arguments

    if arch is not None:
        arguments.get_device_arch_version = lambda: arch

    def parsed(words, world):
        os.environ["WORLD_SIZE"] = str(world)
        sys.argv = ["pretrain_gpt.py", *words]
        args = quiet(arguments.parse_args)
        result["parse"] = True
        quiet(arguments.validate_args, args, {"tokenizer_type": "GPT2BPETokenizer"})
        result["validate"] = True
        return args

    try:
        args = parsed(argv, world_size)
        result["transformer_impl"] = args.transformer_impl
        result["fusions"] = {name: bool(getattr(args, name, False)) for name in FUSIONS}
        result["fusions"]["persist_layer_norm"] = not args.no_persist_layer_norm
        if do_shrink:
            args = parsed(shrink(argv), 1)
    except (Exception, SystemExit) as exc:  # argparse exits; validate_args asserts
        result.setdefault("parse", False)
        result.setdefault("validate", False)
        result["model"] = error_line(exc)
        return result
    try:
        import torch

        from megatron.training.global_vars import set_args

        args.padded_vocab_size = 128
        args.params_dtype = torch.float32 if not (args.bf16 or args.fp16) else args.params_dtype
        set_args(args)
        one_process_group()
        from functools import partial

        from gpt_builders import gpt_builder
        from model_provider import model_provider

        model = quiet(partial(model_provider, gpt_builder), pre_process=True, post_process=True)
        result["model"] = "built"
        result["parameters"] = sum(p.numel() for p in model.parameters())
        result["layer"] = type(model.decoder.layers[0].self_attention.linear_qkv).__module__
    except Exception as exc:  # noqa: BLE001 (the error is the answer)
        result["model"] = error_line(exc)
        result["traceback"] = traceback.format_exc().splitlines()[-3:]
    return result


def core_only(argv):
    """The same choice with megatron-core alone: what Megatron-LM's arguments would put in the config."""
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--transformer-impl", default="transformer_engine")
    for flag, dest in (
        ("--no-gradient-accumulation-fusion", "gradient_accumulation_fusion"),
        ("--no-masked-softmax-fusion", "masked_softmax_fusion"),
        ("--no-bias-gelu-fusion", "bias_gelu_fusion"),
        ("--no-bias-swiglu-fusion", "bias_swiglu_fusion"),
        ("--no-bias-dropout-fusion", "bias_dropout_fusion"),
        ("--no-rope-fusion", "apply_rope_fusion"),
    ):
        parser.add_argument(flag, dest=dest, action="store_false")
    parser.add_argument("--no-persist-layer-norm", action="store_true")
    parser.add_argument("--swiglu", action="store_true")
    parser.add_argument("--disable-bias-linear", action="store_true")
    parser.add_argument("--position-embedding-type", default="learned_absolute")
    args = parser.parse_known_args(argv)[0]  # the rest is for pretrain_gpt.py, not for this check
    result = {"mode": "megatron-core", "parse": True, "validate": None, "transformer_impl": args.transformer_impl}
    fusions = {name: getattr(args, name) for name in FUSIONS if hasattr(args, name)}
    fusions["persist_layer_norm"] = not args.no_persist_layer_norm
    fusions["cross_entropy_loss_fusion"] = False
    if args.disable_bias_linear:  # as validate_args does
        fusions["bias_gelu_fusion"] = False
    if args.position_embedding_type != "rope":
        fusions["apply_rope_fusion"] = False
    result["fusions"] = fusions
    try:
        import torch.nn.functional as F

        from megatron.core.models.gpt import GPTModel
        from megatron.core.models.gpt import gpt_layer_specs as specs
        from megatron.core.transformer import TransformerConfig

        one_process_group()
        config = TransformerConfig(
            num_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            use_cpu_initialization=True,
            transformer_impl=args.transformer_impl,
            gradient_accumulation_fusion=fusions["gradient_accumulation_fusion"],
            masked_softmax_fusion=fusions["masked_softmax_fusion"],
            bias_activation_fusion=fusions["bias_swiglu_fusion" if args.swiglu else "bias_gelu_fusion"],
            bias_dropout_fusion=fusions["bias_dropout_fusion"],
            apply_rope_fusion=fusions["apply_rope_fusion"],
            persist_layer_norm=fusions["persist_layer_norm"],
            gated_linear_unit=args.swiglu,
            activation_func=F.silu if args.swiglu else F.gelu,
            add_bias_linear=not args.disable_bias_linear,
        )
        if args.transformer_impl == "transformer_engine":
            spec = specs.get_gpt_layer_with_transformer_engine_spec()
        else:
            spec = specs.get_gpt_layer_local_spec()
        model = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=128, max_sequence_length=64,
                         position_embedding_type=args.position_embedding_type)
        result["model"] = "built"
        result["parameters"] = sum(p.numel() for p in model.parameters())
        result["layer"] = type(model.decoder.layers[0].self_attention.linear_qkv).__module__
    except Exception as exc:  # noqa: BLE001
        result["model"] = error_line(exc)
    return result


def main():
    # A neutral working directory, whatever the task's: the script task's chdir cannot be used, because under the
    # mitogen strategy its command crosses to the node pickled, and ansible-core 2.19's tagged strings do not unpickle
    # there ("cannot unpickle ... _AnsibleTaggedStr").
    os.chdir("/tmp")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout")
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--arch", type=int, default=None)
    parser.add_argument("--shrink", action="store_true")
    parser.add_argument("--rules", default=None, help="JSON: the rules of megaprov's impl-<tag>.json")
    parser.add_argument("--stack", default=None, help="JSON: the node's megaprov_python fact")
    words = sys.argv[1:]
    split = words.index("--") if "--" in words else len(words)
    opts = parser.parse_args(words[:split])
    argv = words[split + 1 :]
    added = []
    if opts.rules is not None:
        rules = json.loads(opts.rules)
        added = rule_args(rules["rules"] if isinstance(rules, dict) else rules, json.loads(opts.stack or "{}"), argv)
        argv = argv + added
    if os.path.isfile(os.path.join(opts.checkout, "megatron", "training", "arguments.py")):
        result = with_training_code(opts.checkout, argv, opts.world_size, opts.shrink, opts.arch)
    else:
        result = core_only(argv)
    result["rendered"] = added
    print(json.dumps(result, sort_keys=True))
    return 0 if result.get("model") == "built" else 1


if __name__ == "__main__":
    sys.exit(main())
