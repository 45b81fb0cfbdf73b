"""The bootstrap stages: playbook, tag and what each does (kept in sync with playbooks/ by a test)."""

from __future__ import annotations

STAGES: tuple[tuple[str, str], ...] = (
    ("validate", "inventory and variables, on the controller"),
    ("preflight", "facts per node and a verdict against the requirements"),
    ("base", "packages, time sync, /etc/hosts, limits, sysctl"),
    ("ssh_mesh", "cluster user, cluster key, pinned known_hosts, all-pairs SSH check"),
    ("storage", "NFS server (kernel or Ganesha) and the shared directory on every node, N x N write/read check"),
    ("fabric", "RDMA stack, GPUDirect RDMA, IPoIB and /etc/megaprov/nccl.env on the training nodes"),
)
ROLE_TAGS: tuple[str, ...] = (
    "preflight",
    "common",
    "common_install",
    "common_configure",
    "ssh_mesh",
    "ssh_mesh_install",
    "ssh_mesh_configure",
    "ssh_mesh_check",
    "nfs_server",
    "nfs_server_install",
    "nfs_server_configure",
    "nfs_server_run",
    "nfs_client",
    "nfs_client_install",
    "nfs_client_configure",
    "nfs_client_check",
    "infiniband",
    "infiniband_install",
    "infiniband_configure",
    "infiniband_check",
)
KNOWN_TAGS: frozenset[str] = frozenset({name for name, _ in STAGES} | set(ROLE_TAGS) | {"always", "never", "all"})
