"""`megaprov inventory check` (what an inventory says, read offline) and `megaprov init` (a starting inventory)."""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from megaprov import paths, values
from megaprov.cluster import inventory as inv
from megaprov.errors import UsageError

# the settings an operator checks first, in the order they matter
SETTINGS = (
    "megaprov_gpu_model",
    "megaprov_gpus_per_node",
    "megaprov_gpu_expected",
    "megaprov_cluster_user",
    "megaprov_shared_dir",
    "megaprov_scheduler",
    "megaprov_observe",
    "megaprov_package_cache",
    "infiniband_required",
)


def sources() -> tuple[Path, Path]:
    """The roles (argument specs) and cluster defaults every inventory is checked against."""
    return paths.roles_dir(), paths.cluster_defaults()


def summary(found: inv.Inventory) -> dict[str, Any]:
    """What a valid inventory says, as its first GPU node sees it; notes for what an operator usually forgets."""
    nodes = found.hosts_of("gpu_nodes")
    first = nodes[0]
    settings = {name: found.host_var(first, name) for name in SETTINGS if found.host_var(first, name) is not None}
    notes = []
    if inv.as_bool(found.host_var(first, "megaprov_gpu_expected", True)) and not found.host_var(first, "megaprov_gpu_model", ""):
        notes.append("megaprov_gpu_model is unset: `plan` and `train` need it (or --gpu); set it in group_vars/gpu_nodes.yml")
    if not found.host_var(first, "megaprov_gpus_per_node", 0):
        notes.append("megaprov_gpus_per_node is 0 (any): preflight then accepts a node that lost a GPU")
    return {
        "inventory": str(found.path),
        "contacted": False,
        "head": found.head,
        "gpu_nodes": nodes,
        "hosts": len(found.hosts),
        "groups": {name: len(members) for name, members in sorted(found.groups.items())},
        "settings": {k: v if isinstance(v, (bool, int, float)) else values.printable(str(v)) for k, v in settings.items()},
        "notes": notes,
    }


@dataclass(frozen=True)
class InitRequest:
    head: str
    nodes: str
    gpu: str | None
    gpus_per_node: int
    user: str
    shared_dir: str
    fabric: str
    scheduler: str


_RANGE = re.compile(r"\[[^\]]*\]")


def _host(entry: str, default_name: str, field: str) -> tuple[str, str | None]:
    """(name, address or None) of NAME=ADDRESS, ADDRESS (an IP: named for its place) or NAME (a name that resolves)."""
    name, sep, address = entry.partition("=")
    if sep:
        return values.host_name(name, field), values.host_address(address, field)
    if _RANGE.search(entry):
        return entry, None  # a range: checked when the written inventory is read back
    checked = values.host_address(entry, field)  # an address, or a name by the inventory's own rules (HOST_NAME)
    try:
        ipaddress.ip_address(checked)  # a zone (fe80::1%eth0) included
    except ValueError:
        return checked, None
    return default_name, checked


def _line(name: str, address: str | None) -> str:
    return f"{name} ansible_host={address}" if address else name


def init(directory: Path, req: InitRequest) -> list[Path]:
    """Write inventory.ini and group_vars/{all,gpu_nodes,head}.yml into a new directory; read them back as a check."""
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise UsageError(f"--dir {directory} exists and is not empty", "give a new directory (init never writes over an inventory)")
    if not directory.parent.is_dir():
        raise UsageError(f"--dir {directory}: {directory.parent} does not exist", "create the parent directory first")
    head = _host(req.head, "head01", "--head")
    entries = [e.strip() for e in req.nodes.split(",") if e.strip()]
    if not entries or len(entries) > values.MAX_HOSTS:
        raise UsageError(f"--nodes names {len(entries)} hosts", f"give 1 to {values.MAX_HOSTS:,} GPU nodes, comma separated")
    nodes = [_host(e, f"gpu{i + 1:02d}", "--nodes") for i, e in enumerate(entries)]
    gpu_model = req.gpu or ""  # checked and named as megaprov names it by the caller (megaprov.training.planner.gpu_model)
    user = values.posix_user(req.user, "--user")
    shared = values.absolute_path(req.shared_dir, "--shared-dir")
    gpu_line = (
        f"megaprov_gpu_model: {gpu_model}"
        if gpu_model
        else "# megaprov_gpu_model: H100-SXM   # set it: plan and train size the job by it, the nccl role its bandwidth floor"
    )
    files = {
        "inventory.ini": "\n".join(
            [
                "# Written by `megaprov init`. Check it offline with `megaprov inventory check -i THIS_DIRECTORY`, then",
                "# `megaprov preflight -i THIS_DIRECTORY` (contacts the nodes) and `megaprov bootstrap -i THIS_DIRECTORY`.",
                "# megaprov connects as ansible_user over SSH with your key (ssh-agent or ~/.ssh), and needs sudo on every node.",
                "",
                "# The head: rendezvous, NFS server of the shared directory, Slurm controller, Prometheus, package cache.",
                "[head]",
                _line(*head),
                "",
                "# The training nodes (a range such as gpu[01:04] expands). The head may be one of them too.",
                "[gpu_nodes]",
                *(_line(*n) for n in nodes),
                "",
                "[all:vars]",
                f"ansible_user={user}",
                "",
            ]
        ),
        "group_vars/all.yml": "\n".join(
            [
                "---",
                "# Cluster-wide settings: every variable is checked against the roles' argument specs before any host is",
                "# contacted (`megaprov inventory check`); each role's README lists its variables.",
                "megaprov_cluster_user: megaprov   # the account jobs run as; megaprov creates it and its SSH mesh",
                f"megaprov_shared_dir: {shared}   # NFS from the head (root_squash), mounted on every node",
                "ansible_become: true",
                f"megaprov_scheduler: {req.scheduler}   # none: jobs run as systemd units; slurm: munge, slurmctld, slurmd, GPU gres",
                "megaprov_observe: false   # true: Prometheus, Grafana, alerting and central logs on the head",
                "",
            ]
        ),
        "group_vars/gpu_nodes.yml": "\n".join(
            [
                "---",
                gpu_line,
                f"megaprov_gpus_per_node: {req.gpus_per_node}   # preflight fails a node that shows fewer",
                "# The training network: true fails a GPU node whose InfiniBand/RoCE ports are down (NCCL would fall back to",
                "# TCP sockets silently); false lets NCCL use sockets knowingly.",
                f"infiniband_required: {'true' if req.fabric == 'infiniband' else 'false'}",
                "",
            ]
        ),
        "group_vars/head.yml": "---\n# The head is a CPU machine (false: preflight does not ask it for GPUs).\nmegaprov_gpu_expected: false\n",
    }
    if head[0] in {n[0] for n in nodes}:
        files["group_vars/head.yml"] = "---\n# The head is also a GPU node.\n"
    directory.mkdir(mode=0o755, exist_ok=True)
    (directory / "group_vars").mkdir(mode=0o755)
    written = []
    for relative, text in files.items():
        target = directory / relative
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        written.append(target)
    try:
        inv.load(directory / "inventory.ini", *sources())
    except UsageError:
        for target in written:
            target.unlink()
        (directory / "group_vars").rmdir()
        raise
    return written
