"""Megatron-LM's own code on every example job's rendered arguments. The real tree at the
pinned tag comes from the upstream snapshot beside the checkout (tests/fixtures/upstream.py, ../shared/upstream/);
MEGAPROV_MEGATRON_LM may name an unpacked checkout instead. Skipped, saying why, where neither exists (a user's own
clone); `.ci/run` makes that a failure. tests/unit/roles/test_megatron_impl.py checks the same argv against the facts
recorded from that code.

For each example, as rendered for nodes with the roles' defaults (no Transformer Engine, no apex) and for nodes
with both: Megatron-LM's parse_args and validate_args at the job's world size, the transformer_impl and fusions
they select, and a small GPT (sizes shrunk, one process, CPU) built through the checkout's own
model_provider(gpt_builder) by roles/megatron/files/megatron_build_check.py, which imports pretrain_gpt.py first
(every import a job makes). The argv of the render before the fix (no implementation arguments) is run too: it must
fail at model build as it did on the cluster.

On a CPU machine: torch's CPU wheel has no triton, which megatron/training/initialize.py imports unconditionally; the
check script gives that one import a stand-in on a CPU-only torch (GPU nodes have the real one), and validate_args'
GPU-generation query answers Hopper (9). MEGAPROV_UPSTREAM_REPORT=FILE writes the results as JSON.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from megaprov.training import jobspec, nodefacts, render
from tests.fixtures import upstream
from tests.helpers.megatron import as_the_refusals_fix_it

ROOT = Path(__file__).resolve().parents[3]
JOBS = ROOT / "examples" / "jobs"
SCRIPT = ROOT / "ansible_collections/megaprov/cluster/roles" / "megatron" / "files" / "megatron_build_check.py"
EXAMPLES = sorted(p.stem for p in JOBS.glob("*.yml") if jobspec.load(p).launch.trainer == "megatron-lm")
STACKS = {
    "roles' defaults": nodefacts.NodeStack(hosts=("n",)),
    "TE and apex": nodefacts.NodeStack(
        transformer_engine="2.9.0", apex_gradient_accumulation=True, apex_softmax=True, apex_layer_norm=True, transformers="4.57.1", hosts=("n",)
    ),
}
RESULTS: dict[str, dict[str, object]] = {}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> str:
    """Megatron-LM's tree at the pinned tag: MEGAPROV_MEGATRON_LM's checkout, or the snapshot unpacked once."""
    return str(upstream.megatron_tree(tmp_path_factory))


def megatron(checkout: str, tmp_path: Path, argv: list[str], world: int) -> dict[str, object]:
    cmd = [sys.executable, str(SCRIPT), checkout, "--world-size", str(world), "--arch", "9", "--shrink", "--", *argv]
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
def test_megatron_lm_parses_validates_and_builds_the_rendered_job(checkout, tmp_path, name, stack_name):
    spec = jobspec.load(JOBS / f"{name}.yml")
    stack = STACKS[stack_name]
    world = spec.launch.nodes * spec.launch.gpus_per_node
    problems = render.stack_problems(spec, stack)
    if problems:
        # Refused before any host is contacted; the fix the refusal names must then build.
        record(f"{name} / {stack_name}", {"refused": [p.message for p in problems], "fix": [p.fix for p in problems]})
        spec, _ = as_the_refusals_fix_it(spec, stack)
    result = megatron(checkout, tmp_path, render.megatron_args(spec, "/shared", stack), world)
    record(f"{name} / {stack_name}" + (" (after the fix)" if problems else ""), result)
    assert result["parse"] is True and result["validate"] is True, result
    assert result["transformer_impl"] == render.selected_impl(spec, stack)
    if result["transformer_impl"] == "local":
        assert result["model"] == "built", result
        assert not result["fusions"]["gradient_accumulation_fusion"] and not result["fusions"]["persist_layer_norm"]  # type: ignore[index]
    else:  # Transformer Engine is not installed on this machine: the TE path's model cannot build here
        assert "TESpecProvider" in str(result["model"]) or "install TE" in str(result["model"]) or result["model"] == "built", result


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_old_render_fails_at_model_build(checkout, tmp_path, name):
    """Before the fix the render added no implementation arguments: Megatron-LM chose Transformer Engine and
    gradient-accumulation fusion, and the model build failed on nodes without them."""
    spec = jobspec.load(JOBS / f"{name}.yml")
    old = [w for w in render.megatron_args(spec, "/shared") if w not in render.stack_args(spec)]
    result = megatron(checkout, tmp_path, old, spec.launch.nodes * spec.launch.gpus_per_node)
    record(f"{name} / old render", result)
    assert result["parse"] is True and result["validate"] is True
    assert result["transformer_impl"] == "transformer_engine"
    assert result["model"] != "built"
