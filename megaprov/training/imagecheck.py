"""The node checks of a job in a container image, run inside the image on every node of the job before it starts.

A job with ``launch.container`` trains on what the image holds and sees, not the host's: its torch must see the
node's GPUs through the CDI devices (podman) or pyxis, the NCCL it carries is the image's, RDMA needs the InfiniBand
devices inside and an unlimited memlock (NCCL registers its buffers), and the ranks write their checkpoints to the
shared directory as the cluster user. ``megaprov train`` runs ``check_in_image.py`` (the container_toolkit role's
file, on stdin) in the image on each node the way the job will run (``image_check.yml``): with podman under the
limits of the job's unit (``systemd-run`` with the unit's limits), or with one srun of a task per node through
pyxis. :func:`judge` reads the answers; a problem stops the launch before any unit starts. The answers are not
recorded: a node's devices and limits change without the image changing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from megaprov import values
from megaprov.cluster import plays
from megaprov.errors import ExitCode, MegaprovError
from megaprov.output import Reporter
from megaprov.training import container
from megaprov.training.jobspec import JobSpec

PLAYBOOK = "image_check.yml"
STAT = "image_check"  # what image_check.yml hands back (set_stats): {host: {"fact": {...}, "ib": bool}} or {"lines": [...]}


class ChecksFailed(MegaprovError):
    """The checks ran and the nodes failed them (exit 6, as a failed preflight)."""

    exit_code = ExitCode.VERDICT_FAILED


@dataclass(frozen=True)
class Answer:
    """What the check saw inside the image on one node; ``host_ib``: the node itself has /dev/infiniband (None:
    not asked, under Slurm)."""

    host: str
    fact: dict[str, Any]
    host_ib: bool | None = None


def check_vars(spec: JobSpec, shared: str, hosts: list[str], gpus: bool, submit_host: str | None, unit_limits: list[str]) -> dict[str, Any]:
    """What image_check.yml runs where: per node with podman (``wrap`` before it: the unit's limits), or one srun."""
    box = spec.launch.container
    assert box is not None
    target = f"{shared.rstrip('/')}/jobs"
    probe = [box.python, "-", target]
    if spec.launch.launcher == "slurm":
        argv = [*container.pyxis_srun(spec, shared, len(hosts), gpus, "megaprov-image-check"), *probe]
        return {"submit": submit_host or hosts[0], "hosts": hosts, "argv": argv}
    wrap = ["systemd-run", "--quiet", "--wait", "--pipe", "--collect", "--service-type=exec"]
    for limit in unit_limits:
        wrap += ["-p", limit]
    # named, so that what the transient service's end cut short of podman's --rm cleanup is removed after it
    name = f"megaprov-check-{spec.name}"
    argv = [*container.podman_options(spec, shared, gpus), "--rm", "--replace", "--name", name, "-i"]
    return {"hosts": hosts, "wrap": wrap, "argv": argv, "image": [box.image, *probe], "name": name}


def answers_of(data: Any, hosts: list[str]) -> list[Answer]:
    """The play's answers, one per host that answered (a host missing is judged so)."""
    found: list[Answer] = []
    if not isinstance(data, dict):
        return found
    lines = data.get("lines")
    if isinstance(lines, list):  # Slurm: one JSON object a task, each with its node's Slurm name
        for line in lines[: 4 * len(hosts)]:
            try:
                fact = json.loads(line) if isinstance(line, str) and line.startswith("{") else None
            except ValueError:
                fact = None
            host = fact.get("host") if isinstance(fact, dict) else None
            if isinstance(host, str) and values.HOST_NAME.fullmatch(host):
                found.append(Answer(host, fact))  # type: ignore[arg-type]
        return found
    for host in hosts:
        entry = data.get(host)
        if isinstance(entry, dict) and isinstance(entry.get("fact"), dict):
            found.append(Answer(host, entry["fact"], bool(entry.get("ib"))))
    return found


def _gpus(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 1024 else 0


def judge(spec: JobSpec, hosts: list[str], answers: list[Answer], gpus: bool) -> tuple[list[str], str]:
    """(problems, one line for the operator). Pure: every string of an answer is clipped and made printable. Under
    Slurm the nodes are those Slurm gave the check (``hosts`` counts them), not the inventory's first."""
    by_host = {a.host: a for a in answers}
    problems: list[str] = []
    if spec.launch.launcher == "slurm":
        if len(by_host) < len(hosts):
            problems.append(f"the check in the image answered from {len(by_host)} of {len(hosts)} node(s) (see the output above)")
        hosts = sorted(by_host)
    want = spec.launch.gpus_per_node
    for host in hosts:
        answer = by_host.get(host)
        if answer is None:
            problems.append(f"{host}: the check in the image gave no answer (see the output above)")
            continue
        fact = answer.fact
        if not fact.get("torch"):
            error = values.printable(str(fact.get("torch_error") or "no torch"))[:200]
            problems.append(f"{host}: the image's {spec.launch.interpreter} cannot import torch ({error}): check launch.container.python")
            continue
        seen = _gpus(fact.get("gpus"))
        if gpus and seen < want:
            problems.append(
                f"{host}: torch in the image sees {seen} GPU(s), the job needs {want}: check the node's CDI spec (`nvidia-ctk cdi list`;"
                " `megaprov bootstrap --tags containers` regenerates it) and that the image's CUDA runs on the node's driver"
            )
        ib = fact.get("infiniband")
        if answer.host_ib and not ib:
            problems.append(f"{host}: /dev/infiniband is on the node but not in the container: NCCL cannot use RDMA there")
        memlock = fact.get("memlock")
        soft = memlock[0] if isinstance(memlock, list) and memlock else None
        if ib and soft != "unlimited":
            problems.append(
                f"{host}: memlock in the container is {values.printable(str(soft))[:40]}, not unlimited: NCCL over InfiniBand cannot register"
                " its buffers (the job's unit sets LimitMEMLOCK=infinity; under Slurm, slurmd's own limit and PropagateResourceLimits)"
            )
        if fact.get("writable") is False:
            why = values.printable(str(fact.get("write_error") or ""))[:200]
            problems.append(f"{host}: the cluster user cannot write the shared directory's jobs directory in the container ({why})")
    first = by_host.get(hosts[0]) if hosts else None
    summary = ""
    if first is not None and first.fact.get("torch"):
        f = first.fact
        nccl = values.printable(str(f.get("nccl")))[:20] if f.get("nccl") else "none (no CUDA)"
        limits = f.get("memlock")
        memlock = limits[0] if isinstance(limits, list) and limits else "?"
        ib = f.get("infiniband")
        summary = (
            f"torch {values.printable(str(f.get('torch')))[:40]}, {_gpus(f.get('gpus'))} GPU(s), NCCL {nccl} (the image's), memlock"
            f" {values.printable(str(memlock))[:20]}, InfiniBand {'devices ' + str(len(ib)) if isinstance(ib, list) else 'none'},"
            f" shared directory {'writable' if f.get('writable') else 'not checked' if f.get('writable') is None else 'NOT writable'}"
        )
    return problems, summary


def check(
    spec: JobSpec, inventory: Any, shared: str, hosts: list[str], gpus: bool, submit_host: str | None, unit_limits: list[str], report: Reporter
) -> str:
    """Run the checks in the image on ``hosts``; raise ChecksFailed (exit 6) naming each problem, else return the summary."""
    box = spec.launch.container
    assert box is not None
    report.say(f"train: checking image {box.image} on {', '.join(hosts)}, as the job will run it (GPUs, NCCL, InfiniBand, memlock, shared directory)")
    extravars = {"megaprov_check": check_vars(spec, shared, hosts, gpus, submit_host, unit_limits)}
    result = plays.run(PLAYBOOK, inventory, extravars, report, len(hosts))
    if not result.ok:
        raise plays.failure(result, f"checking image {box.image}")
    problems, summary = judge(spec, hosts, answers_of(result.data.get(STAT), hosts), gpus)
    if problems:
        error = ChecksFailed(f"image {box.image} failed its checks on the nodes: {problems[0]}", "nothing was started")
        error.details = problems[1:]
        raise error
    report.say(f"train: image checked on {len(hosts)} node(s): {summary}")
    return summary
