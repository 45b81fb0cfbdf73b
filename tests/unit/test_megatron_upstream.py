"""Megatron-LM's own code on every example job's rendered arguments (issue 13 item 1). Needs a Megatron-LM checkout
at the pinned tag, which CI cannot fetch: set MEGAPROV_MEGATRON_LM=/path/to/Megatron-LM (core_v0.16.1); skipped
otherwise (tests/unit/test_megatron_impl.py checks the same argv against the facts recorded from that code).

For each example, as rendered for nodes with the roles' defaults (no Transformer Engine, no apex) and for nodes
with both: Megatron-LM's parse_args and validate_args at the job's world size, the transformer_impl and fusions
they select, and a small GPT (sizes shrunk, one process, CPU) built through the checkout's own
model_provider(gpt_builder) by roles/megatron/files/megatron_build_check.py. The argv of the render before the fix
(no implementation arguments) is run too: it must fail at model build as it did on the cluster.

On a CPU machine: torch's CPU wheel has no triton, which megatron/training/initialize.py imports unconditionally;
an import-time stand-in exists only while that one module is imported (GPU nodes have the real one), and
validate_args' GPU-generation query answers Hopper (9). MEGAPROV_UPSTREAM_REPORT=FILE writes the results as JSON.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from megaprov.training import jobspec, nodefacts, render

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "examples" / "jobs"
CHECKOUT = os.environ.get("MEGAPROV_MEGATRON_LM", "")
SCRIPT = ROOT / "ansible_collections/megaprov/cluster/roles" / "megatron" / "files" / "megatron_build_check.py"
EXAMPLES = sorted(p.stem for p in JOBS.glob("*.yml") if jobspec.load(p).launch.trainer == "megatron-lm")
STACKS = {
    "roles' defaults": nodefacts.NodeStack(hosts=("n",)),
    "TE and apex": nodefacts.NodeStack(
        transformer_engine="2.9.0", apex_gradient_accumulation=True, apex_softmax=True, apex_layer_norm=True, hosts=("n",)
    ),
}
RESULTS: dict[str, dict[str, object]] = {}

pytestmark = pytest.mark.skipif(
    not (CHECKOUT and (Path(CHECKOUT) / "megatron" / "training" / "arguments.py").is_file()),
    reason="MEGAPROV_MEGATRON_LM does not point at a Megatron-LM checkout",
)

STAND_IN = """
import runpy, sys, types
import torch._dynamo, torch._inductor.codecache, torch._inductor.compile_fx, functorch.compile  # torch probes triton first
script, checkout = sys.argv[1], sys.argv[2]
sys.path.insert(0, checkout)
import megatron.core.models.gpt  # its fusions call torch.compile, which probes triton too
mod, lang = types.ModuleType("triton"), types.ModuleType("triton.language")
def _any(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (), {})
mod.jit = lambda fn=None, **kw: fn if fn is not None else (lambda f: f)
mod.language, mod.__getattr__, lang.__getattr__ = lang, _any, _any
sys.modules["triton"], sys.modules["triton.language"] = mod, lang
import megatron.core.transformer.custom_layers.batch_invariant_kernels  # the one unconditional triton import
del sys.modules["triton"], sys.modules["triton.language"]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
"""


def megatron(tmp_path: Path, argv: list[str], world: int) -> dict[str, object]:
    wrapper = tmp_path / "with_triton_stand_in.py"
    wrapper.write_text(STAND_IN)
    cmd = [sys.executable, str(wrapper), str(SCRIPT), CHECKOUT, "--world-size", str(world), "--arch", "9", "--shrink", "--", *argv]
    env = {**os.environ, **render.BASE_ENV, "MEGAPROV_CHECK_PORT": str(29600 + os.getpid() % 300)}  # the job's environment
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert lines, out.stderr[-2000:]
    result: dict[str, object] = json.loads(lines[-1])
    return result


def record(key: str, value: dict[str, object]) -> None:
    RESULTS[key] = value
    target = os.environ.get("MEGAPROV_UPSTREAM_REPORT")
    if target:
        Path(target).write_text(json.dumps(RESULTS, indent=1, sort_keys=True) + "\n")


@pytest.mark.parametrize("stack_name", sorted(STACKS))
@pytest.mark.parametrize("name", EXAMPLES)
def test_megatron_lm_parses_validates_and_builds_the_rendered_job(tmp_path, name, stack_name):
    spec = jobspec.load(JOBS / f"{name}.yml")
    stack = STACKS[stack_name]
    world = spec.launch.nodes * spec.launch.gpus_per_node
    problems = render.stack_problems(spec, stack)
    if problems:
        # Refused before any host is contacted; the fix the refusal names must then build.
        record(f"{name} / {stack_name}", {"refused": [p.message for p in problems], "fix": [p.fix for p in problems]})
        left = problems
        for _ in range(3):  # dropping a forced implementation can surface the next refusal
            for problem in left:
                if problem.path == "parallel.sequence_parallel":
                    spec = spec.model_copy(update={"parallel": spec.parallel.model_copy(update={"sequence_parallel": False})})
                else:
                    spec = spec.model_copy(update={"launch": spec.launch.model_copy(update={"extra_args": []})})
            left = render.stack_problems(spec, stack)
        assert left == []
    result = megatron(tmp_path, render.megatron_args(spec, "/shared", stack), world)
    record(f"{name} / {stack_name}" + (" (after the fix)" if problems else ""), result)
    assert result["parse"] is True and result["validate"] is True, result
    assert result["transformer_impl"] == render.selected_impl(spec, stack)
    if result["transformer_impl"] == "local":
        assert result["model"] == "built", result
        assert not result["fusions"]["gradient_accumulation_fusion"] and not result["fusions"]["persist_layer_norm"]  # type: ignore[index]
    else:  # Transformer Engine is not installed on this machine: the TE path's model cannot build here
        assert "TESpecProvider" in str(result["model"]) or "install TE" in str(result["model"]) or result["model"] == "built", result


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_old_render_fails_at_model_build(tmp_path, name):
    """Before the fix the render added no implementation arguments: Megatron-LM chose Transformer Engine and
    gradient-accumulation fusion, and the model build failed on nodes without them."""
    spec = jobspec.load(JOBS / f"{name}.yml")
    old = [w for w in render.megatron_args(spec, "/shared") if w not in render.stack_args(spec)]
    result = megatron(tmp_path, old, spec.launch.nodes * spec.launch.gpus_per_node)
    record(f"{name} / old render", result)
    assert result["parse"] is True and result["validate"] is True
    assert result["transformer_impl"] == "transformer_engine"
    assert result["model"] != "built"
