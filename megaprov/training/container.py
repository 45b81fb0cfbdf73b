"""A job in a container image (``launch.container``): what is mounted, and how each launcher runs the image.

- Slurm: pyxis (NVIDIA's SPANK plugin, with enroot) runs each task of the step in the image: ``srun
  --container-image --container-mounts --container-workdir``. The node script itself runs inside, so the image needs
  bash. A squashfs on the shared directory (``megaprov image pull``) is read in place; a registry reference is
  imported by enroot on each node, through the cluster's mirror.
- systemd: the node script stays on the host (its log, GPU sampler, stop and reap) and runs torchrun in the image
  with rootless podman as the cluster user: NVIDIA's CDI devices (``--device nvidia.com/gpu=all``, the spec the
  containers stage generates), host network and IPC (NCCL between nodes and between the ranks of a node),
  ``/dev/infiniband`` where the node has it, the unit's limits (memlock unlimited) and the user's own uid inside, so
  files on a root-squashed share are written as on the host.

The shared directory (job directory, data, checkpoints) and the Megatron-LM checkout are mounted at their own paths,
so every path the render writes means the same inside and out. Pure: a spec and a cluster in, text and problems out.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from megaprov import values
from megaprov.training.jobspec import Container, JobSpec, Problem

if TYPE_CHECKING:
    from megaprov.training.planner import Cluster

NCCL_ENV_FILE = "/etc/megaprov/nccl.env"  # the fabric stage's NCCL settings (render.NCCL_ENV_FILE)
# Environment that stays the image's own: the host's PATH and HOME mean nothing in the image.
HOST_ONLY_ENV = ("PATH", "HOME")


def roots(cluster: Cluster) -> tuple[str, ...]:
    """Where the sources of launch.container.mounts may lie: the shared directory and what the inventory allows
    (megaprov_container_mount_roots)."""
    return (cluster.shared_dir, *getattr(cluster, "container_roots", ()))


def _own(spec: JobSpec, shared: str) -> list[tuple[str, str, bool]]:
    """What megaprov mounts at its own path: the shared directory and the Megatron-LM checkout (unless it lies there)."""
    out = [(shared, shared, False)]
    if not values.inside(spec.launch.megatron_dir, shared):
        out.append((spec.launch.megatron_dir, spec.launch.megatron_dir, True))
    return out


def mounts(spec: JobSpec, shared: str) -> list[tuple[str, str, bool]]:
    """(source, target, read-only) of every mount: megaprov's own, then the spec's."""
    box = spec.launch.container
    return _own(spec, shared) + ([(m.source, m.inside, m.readonly) for m in box.mounts] if box else [])


def problems(spec: JobSpec, cluster: Cluster) -> list[Problem]:
    """What keeps the container settings from running on this cluster, each with its field and fix."""
    box = spec.launch.container
    if box is None:
        return []
    out: list[Problem] = []
    shared = cluster.shared_dir
    if box.squashfs and spec.launch.launcher != "slurm":
        out.append(
            Problem(
                "launch.container.image",
                f"launch.container.image={box.image} is a squashfs file, which only pyxis reads (launch.launcher: slurm)",
                "give podman a registry reference (megaprov image pull IMAGE serves it from the head), or use launch.launcher: slurm",
            )
        )
    if box.squashfs and not values.inside(box.image, shared):
        out.append(
            Problem(
                "launch.container.image",
                f"launch.container.image={box.image} is not under the shared directory {shared}",
                "every node must read it: megaprov image pull writes it under <shared>/images",
            )
        )
    for field, path in (("megaprov_shared_dir", shared), ("launch.megatron_dir", spec.launch.megatron_dir)):
        if not values.MOUNT_PATH.fullmatch(path):
            out.append(Problem(field, f"{field}={path} cannot be mounted into a container", "use a path of letters, digits and /._-"))
    allowed = roots(cluster)
    fixed = {target for _, target, _ in _own(spec, shared)}
    for i, mount in enumerate(box.mounts):
        where = f"launch.container.mounts[{i}]"
        if not any(values.inside(mount.source, root) for root in allowed):
            out.append(
                Problem(
                    f"{where}.source",
                    f"{where}.source={mount.source} is outside the roots a job may mount ({', '.join(allowed)})",
                    "use a path under them, or add its root to megaprov_container_mount_roots in the inventory",
                )
            )
        if any(values.inside(mount.inside, target) or values.inside(target, mount.inside) for target in fixed):
            out.append(
                Problem(
                    f"{where}.target",
                    f"{where}.target={mount.inside} overlaps {', '.join(sorted(fixed))}, which megaprov mounts at their own paths",
                    "mount it elsewhere (e.g. /mnt/NAME)",
                )
            )
    return out


def mount_option(source: str, target: str, readonly: bool) -> str:
    """SRC:DST[:ro], as podman's --volume and pyxis's --container-mounts both take one mount."""
    return f"{source}:{target}" + (":ro" if readonly else "")


def pyxis_words(box: Container, job_dir: str) -> str:
    """srun's pyxis options, as shell words; the mounts are the batch script's ``$mounts`` (:func:`pyxis_mounts_lines`)."""
    q = shlex.quote
    return " ".join(
        [
            q(f"--container-image={values.enroot_image(box.image)}"),
            '--container-mounts="$mounts"',
            q(f"--container-workdir={job_dir}"),
            "--no-container-mount-home",
        ]
    )


def pyxis_mounts_lines(spec: JobSpec, shared: str) -> list[str]:
    """Batch script lines that set ``$mounts`` for --container-mounts (pyxis: SRC:DST[:FLAGS], comma-separated)."""
    fixed = ",".join(mount_option(s, t, ro) for s, t, ro in mounts(spec, shared))
    return [
        f"mounts={shlex.quote(fixed)}",
        f"if [ -r {NCCL_ENV_FILE} ]; then mounts+=,{NCCL_ENV_FILE}:{NCCL_ENV_FILE}:ro; fi  # the fabric stage's NCCL settings",
    ]


def podman_options(spec: JobSpec, shared: str, gpus: bool) -> list[str]:
    """``podman run`` and the options every container of a job gets, the job's own ranks and the checks and probe
    run before it alike: host network and IPC (NCCL's sockets and shared memory), the cluster user's own IDs, the
    limits of the process that starts it (the job's unit: memlock), NVIDIA's CDI devices on GPU nodes, the mounts."""
    words = ["podman", "run", "--pull", "missing", "--network", "host", "--ipc", "host", "--userns", "keep-id", "--ulimit", "host"]
    words += ["--security-opt", "label=disable"]
    if gpus:
        words += ["--device", "nvidia.com/gpu=all"]
    for source, target, readonly in mounts(spec, shared):
        words += ["--volume", mount_option(source, target, readonly)]
    return words


SRUN_WAIT_S = 120  # srun --immediate: how long a check or probe before the job waits for its nodes


def pyxis_srun(spec: JobSpec, shared: str, nodes: int, gpus: bool, name: str) -> list[str]:
    """``srun`` and its options for a step in the job's image before the job (the image probe, the node checks): what
    the job's batch script asks Slurm for (render.sbatch_script: GPUs, partition, account, QOS, whole nodes), one
    task per node, pyxis with the job's mounts, and no waiting on busy nodes beyond SRUN_WAIT_S; Slurm picks the nodes,
    as it will for the job. The command follows; stdin reaches every task (srun's default, said)."""
    box = spec.launch.container
    assert box is not None
    argv = ["srun", f"--nodes={nodes}", "--ntasks-per-node=1", "--exclusive", f"--immediate={SRUN_WAIT_S}"]
    if gpus:
        argv.append(f"--gpus-per-node={spec.launch.gpus_per_node}")
    slurm = spec.launch.slurm
    for key, value in (("partition", slurm.partition), ("account", slurm.account), ("qos", slurm.qos)):
        if value:
            argv.append(f"--{key}={values.sbatch_value(value, f'launch.slurm.{key}')}")
    mounts_option = ",".join(mount_option(*m) for m in mounts(spec, shared))
    return [
        *argv,
        "--input=all",
        f"--job-name={name}",
        f"--container-image={values.enroot_image(box.image)}",
        f"--container-mounts={mounts_option}",
        "--no-container-mount-home",
    ]


def container_name(spec: JobSpec, rank: int) -> str:
    """The podman container of a node's torchrun: one per job and node rank."""
    return f"megaprov-job-{spec.name}-{rank}"


def podman_after_lines(spec: JobSpec, rank: int) -> list[str]:
    """Node script lines run once ``podman run`` returned, before anything of the job is reaped: podman removes its
    container itself (``--rm``, through a cleanup process conmon starts), and killing that cleanup half-way leaves
    podman's state broken for the next start; this waits for the container to be gone, by podman's own lock. Podman's
    state is never reset from inside the unit: ``podman system migrate`` would start the user's pause process here,
    where the next reap kills it; job_launch.yml recovers a broken state before any unit starts."""
    name = shlex.quote(container_name(spec, rank))
    return [f"podman rm --force --ignore {name} >/dev/null  # --rm's cleanup, finished before the reap (podman's errors: the log)"]


def podman_lines(spec: JobSpec, box: Container, shared: str, job_dir: str, rank: int, env: dict[str, str], gpus: bool) -> list[str]:
    """Node script lines that set ``$podman``, the words before the command: podman run of the image with the
    job's mounts, devices and environment (the script has exported ``env``; each is named, never its value)."""
    q = shlex.quote
    words = [*podman_options(spec, shared, gpus), "--rm", "--replace", "--name", container_name(spec, rank), "--workdir", job_dir]
    for name in sorted({*env, "MEGAPROV_JOB_UNIT"} - set(HOST_ONLY_ENV)):
        words += ["--env", name]
    return [
        "# launch.container: torchrun runs in the image (rootless podman as this user; NVIDIA's CDI devices)",
        "podman=(" + " ".join(q(w) for w in words) + ")",
        f"if [ -r {NCCL_ENV_FILE} ]; then podman+=(--env-file {NCCL_ENV_FILE}); fi  # the fabric stage's NCCL settings",
        "if [ -d /dev/infiniband ]; then podman+=(--device /dev/infiniband); fi  # RDMA for NCCL over InfiniBand",
        f"podman+=({q(box.image)})",
    ]
