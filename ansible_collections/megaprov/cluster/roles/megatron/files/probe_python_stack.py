"""megaprov megatron role: what this node's training environment holds, as one JSON line (the fact megaprov_python).

    python probe_python_stack.py CHECKOUT|""

Run with the training environment's interpreter. Records torch and the CUDA it was built for, Transformer Engine
(its version when ``transformer_engine.pytorch`` imports, else null), which of apex's fused kernels import, the
installed megatron-core and the checkout's release, which of the two a pretrain_gpt.py job imports, and whether
the checkout's dataset helpers are built (``make -q`` in megatron/core/datasets answers "up to date" with this
PATH, which is what Megatron-LM's start-up ``make`` sees when the job's PATH starts with the venv's bin).
megaprov reads the fact to render the implementation and fused paths (megaprov/training/nodefacts.py).
"""

import glob
import importlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys

KERNELS = (
    "fused_weight_gradient_mlp_cuda",
    "scaled_masked_softmax_cuda",
    "scaled_upper_triang_masked_softmax_cuda",
    "fused_layer_norm_cuda",
)


def first_line(exc):
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


def dist_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def main():
    checkout = sys.argv[1] if len(sys.argv) > 1 else ""
    import torch

    fact = {"version": 1, "python": sys.version.split()[0], "torch": torch.__version__, "torch_cuda": torch.version.cuda}
    fact["transformer_engine"] = None
    if importlib.util.find_spec("transformer_engine") is not None:
        try:
            importlib.import_module("transformer_engine.pytorch")
            fact["transformer_engine"] = dist_version("transformer_engine") or dist_version("transformer-engine") or "unknown"
        except Exception as exc:  # noqa: BLE001  (installed but unusable: the render must not rely on it)
            fact["transformer_engine_error"] = first_line(exc)
    apex = {}
    for name in KERNELS:
        try:
            importlib.import_module(name)
            apex[name] = True
        except Exception:  # noqa: BLE001
            apex[name] = False
    fact["apex"] = apex
    fact["apex_version"] = dist_version("apex")
    # Megatron-LM's HuggingFaceTokenizer imports transformers (megaprov refuses a huggingface-tokenizer job without it)
    fact["transformers"] = None
    if importlib.util.find_spec("transformers") is not None:
        fact["transformers"] = dist_version("transformers")

    from megatron.core import package_info

    megatron = {"core": package_info.__version__, "core_path": os.path.dirname(package_info.__file__), "checkout": None, "helpers_built": None}
    info = os.path.join(checkout, "megatron", "core", "package_info.py") if checkout else ""
    if info and os.path.isfile(info):
        spec = importlib.util.spec_from_file_location("checkout_package_info", info)
        tree = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tree)
        megatron["checkout"] = getattr(tree, "__version__", None)
        megatron["checkout_dir"] = checkout
        datasets = os.path.join(checkout, "megatron", "core", "datasets")
        if os.path.isfile(os.path.join(datasets, "Makefile")):
            built = glob.glob(os.path.join(datasets, "helpers_cpp*.so"))
            megatron["helpers"] = os.path.basename(built[0]) if built else None
            # Megatron-LM runs this make at start-up; where there is none (a container image without it) the job fails
            if shutil.which("make") is None:
                megatron["helpers_built"] = False
                megatron["make"] = None
            else:
                question = subprocess.run(["make", "-q", "-C", datasets], capture_output=True, text=True, check=False)
                megatron["helpers_built"] = question.returncode == 0 and bool(built)
    # pretrain_gpt.py's directory is first on sys.path: a job imports the checkout's megatron.core when there is one.
    megatron["core_imported"] = "checkout" if megatron["checkout"] else "installed"
    fact["megatron"] = megatron
    print(json.dumps(fact, sort_keys=True))


if __name__ == "__main__":
    main()
