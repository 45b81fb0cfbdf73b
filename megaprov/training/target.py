"""A job's target: the cluster a job spec runs on (from the inventory, or a shape given by flags) with the nodes'
measured rates, and the spec read and checked against it. It starts nothing: :mod:`megaprov.training.jobs` does."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from megaprov import paths, untrusted, values
from megaprov.cluster import inventory as inv
from megaprov.cluster import rates
from megaprov.errors import UsageError
from megaprov.training import imagefacts, jobspec, nodefacts, planner, render
from megaprov.training.jobspec import JobSpec, JobSpecError


@dataclass(frozen=True)
class Shape:
    """Cluster flags given on the command line (each optional)."""

    nodes: int | None = None
    gpus_per_node: int | None = None
    gpu: str | None = None
    exclude: tuple[str, ...] = ()  # nodes left out (megaprov train --exclude-unhealthy: open error findings of megaprov doctor)


def _gpu(name: str, where: str) -> planner.Gpu:
    gpu = planner.gpu_named(name)
    if gpu is None:
        raise UsageError(f"{where}={name!r} is not a known GPU", "use one of " + ", ".join(planner.GPUS))
    return gpu


def cluster(spec: JobSpec, inventory_path: str | None, shape: Shape) -> tuple[planner.Cluster, list[tuple[str, str]]]:
    """The cluster a job runs on, and its training nodes (name, address) in rank order."""
    if inventory_path is None:
        nodes = shape.nodes or spec.launch.nodes
        gpn = shape.gpus_per_node or spec.launch.gpus_per_node
        if shape.gpu is None and spec.launch.trainer != "lab":
            raise UsageError("the GPU model is unknown", "pass --gpu MODEL (e.g. H100-SXM) or -i INVENTORY with megaprov_gpu_model set")
        gpu = _gpu(shape.gpu or "cpu", "--gpu")
        hosts = [(f"node{i}", f"node{i}") for i in range(nodes)]
        return planner.Cluster(nodes, gpn, gpu), hosts
    found = inv.load(inventory_path, paths.roles_dir(), paths.cluster_defaults())
    names = [n for n in found.hosts_of("gpu_nodes") if n not in shape.exclude]
    if not names:
        raise UsageError(
            f"every GPU node of {found.path} is excluded ({', '.join(shape.exclude)})", "fix them (megaprov doctor -i INVENTORY) and run again"
        )
    first = names[0]
    hosts = [(n, str(found.host_var(n, "ansible_host", n))) for n in names]
    gpu_expected = inv.as_bool(found.host_var(first, "megaprov_gpu_expected", True))
    gpn_var = int(found.host_var(first, "megaprov_gpus_per_node", 0) or 0)
    if shape.gpu:
        gpu = _gpu(shape.gpu, "--gpu")
    elif not gpu_expected:
        gpu = planner.GPUS["cpu"]
    else:
        model = str(found.host_var(first, "megaprov_gpu_model", "") or "")
        if not model:
            raise UsageError(f"{found.path}: megaprov_gpu_model is unset", "set it in group_vars/gpu_nodes.yml (e.g. H100-SXM) or pass --gpu")
        gpu = _gpu(model, "megaprov_gpu_model")
    gpn = shape.gpus_per_node or (gpn_var if gpu_expected and gpn_var else spec.launch.gpus_per_node)
    nodes = shape.nodes or spec.launch.nodes
    if shape.exclude and nodes > len(names):
        raise UsageError(
            f"the job needs {nodes} nodes; {len(names)} are left without {', '.join(shape.exclude)} (error findings of megaprov doctor)",
            "fix those nodes and run `megaprov doctor -i INVENTORY` again, or lower launch.nodes (--nodes)",
        )
    shared = str(found.host_var(first, "megaprov_shared_dir", "/shared"))
    # The nodes' measured GEMM rates, where bootstrap or preflight recorded them: the plan's estimate rests on them.
    # What their training environment holds (the python stage's fact): the render's implementation choice rests on it.
    job_hosts = tuple(n for n, _ in hosts)
    stack = nodefacts.known(Path(inventory_path), job_hosts[:nodes])
    if stack.source == "assumed":  # no python stage has run yet: what the inventory will install there
        stack = nodefacts.assumed(
            inv.as_bool(found.host_var(first, "megatron_transformer_engine", False)),
            inv.as_bool(found.host_var(first, "apex_enabled", False)),
            inv.as_bool(found.host_var(first, "megatron_huggingface", False)),
        )
    if spec.launch.container is not None:  # the job trains on the image's stack, not the nodes'
        image = spec.launch.container.image
        stack = imagefacts.known(Path(inventory_path), image) or dataclasses.replace(nodefacts.ROLE_DEFAULTS, image=image)
    write = found.host_var(first, "megatron_checkpoint_write_mbps", None)
    # a number when set: the inventory loader types it by the role's argument spec (megaprov.cluster.inventory)
    write_mbps = float(write) if write is not None else nodefacts.DEFAULT_WRITE_MBPS
    if not 0 < write_mbps < 1e7:
        raise UsageError(
            f"{found.path}: megatron_checkpoint_write_mbps={write_mbps:g} is out of range",
            "set it to the shared directory's write speed in MB/s (> 0)",
        )
    found_cluster = nodefacts.KnownCluster(
        nodes,
        gpn,
        gpu,
        shared,
        job_hosts,
        stack=stack,
        write_mbps=write_mbps,
        write_source="inventory" if write not in (None, "") else "default",
        container_roots=mount_roots(found.host_var(first, "megaprov_container_mount_roots", []), found.path),
    )
    return with_rates(found_cluster, inventory_path), hosts


def mount_roots(value: object, source: object) -> tuple[str, ...]:
    """megaprov_container_mount_roots: the node directories a job's container may mount besides the shared directory."""
    if not isinstance(value, list) or len(value) > values.MAX_LIST:
        raise UsageError(
            f"{source}: megaprov_container_mount_roots={values.shown(value)} is not a list of paths",
            "write it as a YAML list such as [/scratch, /raid]",
        )
    roots = tuple(values.mount_path(item, "megaprov_container_mount_roots") for item in value)
    if "/" in roots:
        raise UsageError(f"{source}: megaprov_container_mount_roots holds /, which lets a job mount the whole node", "name the data directories")
    return roots


def with_rates(cluster: planner.Cluster, inventory: str | None) -> planner.Cluster:
    """``cluster`` with the measured rates of its hosts (unchanged without an inventory; replace keeps a KnownCluster)."""
    if not inventory or not cluster.hosts:
        return cluster
    return dataclasses.replace(cluster, rates=rates.known(Path(inventory), cluster.hosts))


def check(spec: JobSpec, text: str, source: str, world: int | None, gpus_per_node: int | None) -> None:
    """Raise :class:`JobSpecError` with every cross-field problem, each with its line in the file."""
    problems = planner.spec_problems(spec, world, gpus_per_node) + render.megatron_problems(spec)
    if problems:
        lines = jobspec.line_map(text)
        located = [p if p.line else type(p)(p.path, p.message, p.fix, jobspec.line_of(lines, tuple(p.path.split(".")))) for p in problems]
        raise JobSpecError(located, source)


def read(path: str, root: Path | None = None) -> tuple[JobSpec, str]:
    """The validated spec and its text (kept for the lines of cross-field problems); the file is read once. With
    ``root``, the spec stored in a job directory below it (written by the cluster user: see :mod:`megaprov.untrusted`)."""
    text = jobspec.read_text(path) if root is None else untrusted.read_text(path, "job spec", values.MAX_FILE_BYTES, root).removeprefix("\ufeff")
    return jobspec.parse(text, path), text
