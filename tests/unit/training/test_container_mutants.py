"""The exact words megaprov.training.container gives each launcher for a job in an image: podman's argv and the node
script's lines under systemd, srun's options for a pyxis step before the job under Slurm, the container's name and its
cleanup line, the mount roots and mounts of a job with and without a container. Real job specs through the parser;
nothing is stood in (the module is pure)."""

import shlex

import pytest

from megaprov.errors import UsageError
from megaprov.training import container, jobspec, nodefacts
from megaprov.training.planner import GPUS, Cluster

JOB = """\
name: boxed
model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, seq_length: 128, vocab_size: 512}
train: {global_batch_size: 4, train_iters: 10, lr: 0.001}
data: {mock: true}
launch:
  nodes: 2
  gpus_per_node: 4
  launcher: LAUNCHER
  megatron_dir: MEGATRON
  slurm: SLURM
  container:
    image: IMAGE
    mounts: MOUNTS
    env: {TRANSFORMERS_CACHE: /cache/hf}
"""
TWO_MOUNTS = "[{source: /scratch/cache, target: /cache}, {source: /scratch/tok, target: /tok, readonly: false}]"


def box(launcher="slurm", image="nvcr.io/nvidia/pytorch:25.01-py3", mounts="[]", megatron="/opt/megatron-lm", slurm="{time: '00:30:00'}"):
    fields = {"LAUNCHER": launcher, "IMAGE": image, "MOUNTS": mounts, "MEGATRON": megatron, "SLURM": slurm}
    text = JOB
    for key, value in fields.items():
        text = text.replace(key, value)
    return jobspec.parse(text, "gpt.yml")


def spec(slurm="{time: '00:30:00'}", without_container=False):
    """The job with two mounts of its own (one read-only, one not) and one variable."""
    if without_container:
        return jobspec.parse(
            JOB.split("  container:")[0].replace("LAUNCHER", "slurm").replace("MEGATRON", "/opt/megatron-lm").replace("SLURM", slurm), "gpt.yml"
        )
    return box(mounts=TWO_MOUNTS, slurm=slurm)


def test_every_podman_container_gets_the_hosts_network_ipc_ids_limits_and_the_mounts():
    assert container.podman_options(spec(), "/shared", gpus=False) == [
        "podman",
        "run",
        "--pull",
        "missing",
        "--network",
        "host",
        "--ipc",
        "host",
        "--userns",
        "keep-id",
        "--ulimit",
        "host",
        "--security-opt",
        "label=disable",
        "--volume",
        "/shared:/shared",
        "--volume",
        "/opt/megatron-lm:/opt/megatron-lm:ro",
        "--volume",
        "/scratch/cache:/cache:ro",
        "--volume",
        "/scratch/tok:/tok",
    ]
    with_gpus = container.podman_options(spec(), "/shared", gpus=True)
    assert with_gpus[14:16] == ["--device", "nvidia.com/gpu=all"] and len(with_gpus) == 24


def test_the_node_scripts_podman_lines_name_the_container_by_rank_and_pass_the_environment_by_name():
    s = spec()
    lines = container.podman_lines(
        s, s.launch.container, "/shared", "/shared/jobs/boxed", 1, {"TRANSFORMERS_CACHE": "/cache/hf", "PATH": "/x", "HOME": "/h"}, True
    )
    assert len(lines) == 5
    assert lines[0].startswith("# ")
    assert shlex.split(lines[1].removeprefix("podman=(").removesuffix(")")) == [
        *container.podman_options(s, "/shared", True),
        "--rm",
        "--replace",
        "--name",
        "megaprov-job-boxed-1",
        "--workdir",
        "/shared/jobs/boxed",
        "--env",
        "MEGAPROV_JOB_UNIT",
        "--env",
        "TRANSFORMERS_CACHE",
    ]
    assert lines[2].split("  #")[0] == "if [ -r /etc/megaprov/nccl.env ]; then podman+=(--env-file /etc/megaprov/nccl.env); fi"
    assert lines[3].split("  #")[0] == "if [ -d /dev/infiniband ]; then podman+=(--device /dev/infiniband); fi"
    assert lines[4] == "podman+=(nvcr.io/nvidia/pytorch:25.01-py3)"


def test_after_podman_returns_the_script_removes_the_ranks_container_by_name():
    [line] = container.podman_after_lines(spec(), 3)
    assert shlex.split(line, comments=True) == ["podman", "rm", "--force", "--ignore", "megaprov-job-boxed-3", ">/dev/null"]
    assert container.container_name(spec(), 0) == "megaprov-job-boxed-0"


def test_a_pyxis_step_asks_slurm_what_the_job_asks_and_runs_in_the_image_with_the_mounts():
    s = spec("{time: '00:30:00', partition: gpu, account: proj7, qos: high}")
    assert container.pyxis_srun(s, "/shared", 2, True, "megaprov-probe") == [
        "srun",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--exclusive",
        "--immediate=120",
        "--gpus-per-node=4",
        "--partition=gpu",
        "--account=proj7",
        "--qos=high",
        "--input=all",
        "--job-name=megaprov-probe",
        "--container-image=nvcr.io#nvidia/pytorch:25.01-py3",
        "--container-mounts=/shared:/shared,/opt/megatron-lm:/opt/megatron-lm:ro,/scratch/cache:/cache:ro,/scratch/tok:/tok",
        "--no-container-mount-home",
    ]
    # without GPUs or Slurm's optional fields, none of their options
    assert container.pyxis_srun(spec(), "/shared", 3, False, "n")[:6] == [
        "srun",
        "--nodes=3",
        "--ntasks-per-node=1",
        "--exclusive",
        "--immediate=120",
        "--input=all",
    ]


def test_a_job_without_a_container_mounts_only_megaprovs_own_paths():
    assert container.mounts(spec(without_container=True), "/shared") == [
        ("/shared", "/shared", False),
        ("/opt/megatron-lm", "/opt/megatron-lm", True),
    ]


def test_the_mount_roots_are_the_shared_directory_then_the_inventorys():
    known = nodefacts.KnownCluster(2, 4, GPUS["H100-SXM"], "/shared", ("n1", "n2"), container_roots=("/scratch", "/data"))
    assert container.roots(known) == ("/shared", "/scratch", "/data")
    assert container.roots(nodefacts.KnownCluster(2, 4, GPUS["H100-SXM"], "/shared", ("n1", "n2"))) == ("/shared",)
    # a cluster the controller knows nothing more of (the planner's own) has no roots of the inventory's
    assert container.roots(Cluster(2, 4, GPUS["H100-SXM"], "/srv/shared")) == ("/srv/shared",)


def test_a_slurm_field_that_is_no_plain_name_is_refused_by_its_field():
    s = spec("{time: '00:30:00', account: proj7}")
    # the parser refuses it first: only a spec changed after parsing reaches this net
    broken = s.model_copy(update={"launch": s.launch.model_copy(update={"slurm": s.launch.slurm.model_copy(update={"account": "a b"})})})
    with pytest.raises(UsageError) as refused:
        container.pyxis_srun(broken, "/shared", 2, True, "n")
    assert str(refused.value).startswith("launch.slurm.account")


def found(s, shared="/shared", roots=("/scratch",)):
    known = nodefacts.KnownCluster(2, 4, GPUS["H100-SXM"], shared, ("n1", "n2"), container_roots=roots)
    return [(p.path, p.message, p.fix) for p in container.problems(s, known)]


def test_a_job_without_a_container_or_with_a_good_one_has_no_problems():
    assert found(spec(without_container=True)) == []
    assert found(box(mounts="[{source: /scratch/a, target: /mnt/a}]")) == []


def test_a_squashfs_image_under_podman_and_off_the_share_is_refused_with_both_fixes():
    assert found(box("torchrun", image="/scratch/pt.sqsh")) == [
        (
            "launch.container.image",
            "launch.container.image=/scratch/pt.sqsh is a squashfs file, which only pyxis reads (launch.launcher: slurm)",
            "give podman a registry reference (megaprov image pull IMAGE serves it from the head), or use launch.launcher: slurm",
        ),
        (
            "launch.container.image",
            "launch.container.image=/scratch/pt.sqsh is not under the shared directory /shared",
            "every node must read it: megaprov image pull writes it under <shared>/images",
        ),
    ]


def test_a_shared_directory_or_checkout_that_cannot_be_mounted_is_refused_by_its_field():
    assert found(box(megatron="/opt/megatron lm"), shared="/sh:ared") == [
        ("megaprov_shared_dir", "megaprov_shared_dir=/sh:ared cannot be mounted into a container", "use a path of letters, digits and /._-"),
        ("launch.megatron_dir", "launch.megatron_dir=/opt/megatron lm cannot be mounted into a container", "use a path of letters, digits and /._-"),
    ]


def test_a_mount_outside_the_roots_and_over_megaprovs_own_paths_is_refused_with_each_root_and_path():
    mounts = "[{source: /data/a, target: /opt/megatron-lm/x}, {source: /scratch/b, target: /shared}]"
    assert found(box(mounts=mounts), roots=("/scratch", "/raid")) == [
        (
            "launch.container.mounts[0].source",
            "launch.container.mounts[0].source=/data/a is outside the roots a job may mount (/shared, /scratch, /raid)",
            "use a path under them, or add its root to megaprov_container_mount_roots in the inventory",
        ),
        (
            "launch.container.mounts[0].target",
            "launch.container.mounts[0].target=/opt/megatron-lm/x overlaps /opt/megatron-lm, /shared, which megaprov mounts at their own paths",
            "mount it elsewhere (e.g. /mnt/NAME)",
        ),
        (
            "launch.container.mounts[1].target",
            "launch.container.mounts[1].target=/shared overlaps /opt/megatron-lm, /shared, which megaprov mounts at their own paths",
            "mount it elsewhere (e.g. /mnt/NAME)",
        ),
    ]
