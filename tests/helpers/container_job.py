"""A job spec with ``launch.container`` (an NGC image, one extra mount under /scratch) for the unit tests of the image
probe and the checks in the image, and the cluster it renders on (/scratch allowed as a mount root)."""

from __future__ import annotations

from megaprov.training import jobspec, nodefacts
from megaprov.training.jobspec import JobSpec
from megaprov.training.planner import GPUS

IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"
SPEC = f"""\
name: boxed
model: {{num_layers: 2, hidden_size: 64, num_attention_heads: 4, seq_length: 128, vocab_size: 512}}
train: {{global_batch_size: 4, train_iters: 10, lr: 0.001}}
data: {{mock: true}}
launch:
  nodes: 2
  gpus_per_node: 4
  launcher: LAUNCHER
  container:
    image: {IMAGE}
    python: /usr/bin/python
    mounts: [{{source: /scratch/cache, target: /cache}}]
"""


def spec(launcher: str = "torchrun") -> JobSpec:
    return jobspec.parse(SPEC.replace("LAUNCHER", launcher))


def cluster() -> nodefacts.KnownCluster:
    return nodefacts.KnownCluster(2, 4, GPUS["H100-SXM"], "/shared", ("n1", "n2"), container_roots=("/scratch",))
