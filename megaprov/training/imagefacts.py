"""What a job's container image holds, probed once where the job runs and recorded on the controller.

A job with ``launch.container`` trains on the image's torch, Transformer Engine and apex, not the nodes': its render
must follow the image as it follows the nodes' fact otherwise (:mod:`megaprov.training.nodefacts`). ``megaprov
train`` runs the megatron role's probe (``probe_python_stack.py``, read from stdin) inside the image on the job's
first node, the way the job itself will run (podman with the CDI devices, or srun with pyxis), as the cluster user
(``image_probe.yml``), and records the answer in ``<state>/images/<inventory digest>/<reference digest>.json``.
Later jobs with the same image read the record; ``megaprov image pull`` of a new image under the same name removes
it. A probe on a node without GPUs reports Transformer Engine as it imports there (its CUDA libraries load lazily).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from megaprov import values
from megaprov.cluster import plays
from megaprov.cluster.factcache import read_json
from megaprov.errors import UsageError
from megaprov.output import Reporter
from megaprov.paths import fact_cache_dir, state_dir
from megaprov.training import container
from megaprov.training.jobspec import JobSpec
from megaprov.training.nodefacts import NodeStack, node_from_fact

PLAYBOOK = "image_probe.yml"
STAT = "image_probe"  # what image_probe.yml hands back (set_stats): {"host": ..., "fact": {...}}


def record_path(inventory: Path, image: str) -> Path:
    cluster = fact_cache_dir(inventory).name  # the inventory's digest
    return state_dir() / "images" / cluster / (hashlib.sha256(image.encode()).hexdigest()[:24] + ".json")


def _stack(fact: Any, image: str, host: str) -> NodeStack | None:
    node = node_from_fact(fact, f"image {image}")
    if node is None:
        return None
    return NodeStack(**{**node.__dict__, "hosts": (host,), "source": "image", "image": image})


def known(inventory: Path, image: str) -> NodeStack | None:
    """The recorded probe of ``image`` for this inventory's cluster, or None."""
    doc = read_json(record_path(inventory, image))
    if not isinstance(doc, dict) or doc.get("image") != image:
        return None
    host = doc.get("host")
    return _stack(doc.get("fact"), image, host if isinstance(host, str) and values.HOST_NAME.fullmatch(host) else "?")


def forget(inventory: Path, image: str) -> None:
    """Drop the record (the name now points at another image)."""
    record_path(inventory, image).unlink(missing_ok=True)


def record(inventory: Path, image: str, host: str, fact: Any) -> NodeStack:
    stack = _stack(fact, image, host)
    if stack is None:
        raise UsageError(
            f"the probe of image {image} on {host} did not answer with megaprov's fact",
            "check that launch.container.python is the image's Python with torch (run it with `podman run IMAGE PYTHON -c 'import torch'`)",
        )
    path = record_path(inventory, image)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"image": image, "host": host, "probed_at": time.time(), "fact": fact}, indent=2) + "\n")
    tmp.replace(path)
    return stack


def probe_vars(spec: JobSpec, shared: str, host: str, gpus: bool, submit_host: str | None) -> dict[str, Any]:
    """What image_probe.yml runs: the probe's command (it reads the probe from stdin) and where."""
    box = spec.launch.container
    assert box is not None
    # the checkout's megatron.core first on the path, as in the job (render: PYTHONPATH)
    probe = ["env", f"PYTHONPATH={spec.launch.megatron_dir}", box.python, "-", spec.launch.megatron_dir]
    if spec.launch.launcher == "slurm":  # on a node Slurm gives, asked for as the job asks (container.pyxis_srun)
        argv = [*container.pyxis_srun(spec, shared, 1, gpus, "megaprov-image-probe"), *probe]
        return {"host": submit_host or host, "argv": argv}
    return {"host": host, "argv": [*container.podman_options(spec, shared, gpus), "--rm", "-i", box.image, *probe]}


def probe(spec: JobSpec, inventory: Path, shared: str, host: str, gpus: bool, submit_host: str | None, report: Reporter) -> NodeStack:
    """Probe the job's image on ``host`` (through ``submit_host`` for Slurm) and record what it holds."""
    box = spec.launch.container
    assert box is not None
    report.say(f"train: probing image {box.image} on {host} (once per image: what its torch, Transformer Engine and apex hold)")
    result = plays.run(PLAYBOOK, inventory, {"megaprov_probe": probe_vars(spec, shared, host, gpus, submit_host)}, report, 1)
    if not result.ok:
        raise plays.failure(result, f"probing image {box.image}")
    answer = result.data.get(STAT)
    fact = answer.get("fact") if isinstance(answer, dict) else None
    return record(inventory, box.image, host, fact)
