"""What the golden files of the example jobs hold (tests/fixtures/golden/): each example's pretrain_gpt.py arguments
(<job>.args), the node script of its node rank 0 (<job>.node0.sh) and, for a Slurm job, its sbatch script
(<job>.sbatch) and the script srun runs on every node (<job>.slurm-node.sh), rendered on a fixed cluster.
tests/unit/training/test_render.py compares them; only scripts/update_golden.py writes them."""

from __future__ import annotations

from pathlib import Path

from megaprov.training import jobspec, nodefacts, render
from megaprov.training.planner import GPUS

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "examples" / "jobs"
GOLDEN = ROOT / "tests" / "fixtures" / "golden"
UPDATE_COMMAND = ".venv/bin/python scripts/update_golden.py"
SHARED = "/shared"
# The fixed cluster: the spec's nodes and GPUs per node (H100s; CPU nodes for the lab trainer), addresses 10.0.0.1...,
# and nodes whose python stage installed Transformer Engine and apex (what the large examples are written for).
SITE = nodefacts.NodeStack(
    transformer_engine="2.9.0", apex_gradient_accumulation=True, apex_softmax=True, apex_layer_norm=True, transformers="4.57.1", hosts=("node00",)
)


def example_jobs() -> list[str]:
    return sorted(p.stem for p in JOBS.glob("*.yml"))


def golden_files(job: str) -> dict[str, str]:
    """File name -> text of every golden file of an example job."""
    spec = jobspec.load(JOBS / f"{job}.yml")
    files = {f"{job}.args": "\n".join(render.megatron_args(spec, SHARED)) + "\n"}
    gpu = GPUS["cpu"] if spec.launch.trainer == "lab" else GPUS["H100-SXM"]
    cluster = nodefacts.KnownCluster(spec.launch.nodes, spec.launch.gpus_per_node, gpu, SHARED, stack=SITE)
    hosts = [(f"node{i:02d}", f"10.0.{i // 200}.{i % 200 + 1}") for i in range(spec.launch.nodes)]
    rendered = render.render(spec, cluster, hosts)
    files[f"{job}.node0.sh"] = rendered.nodes[0].script
    if rendered.sbatch is not None:
        files[f"{job}.sbatch"] = rendered.sbatch
    if rendered.slurm_node is not None:
        files[f"{job}.slurm-node.sh"] = rendered.slurm_node
    return files
