"""Stopping a job saves a checkpoint first: torchrun's SIGTERM-to-SIGKILL wait and the unit's
TimeoutStopSec are sized from the checkpoint and the shared directory's write speed, not a fixed ~30 s."""

import os
from pathlib import Path

import pytest

from megaprov.training import jobs, jobspec, nodefacts, render
from megaprov.training.launchers import systemd
from megaprov.training.planner import GPUS

ROOT = Path(__file__).resolve().parents[3]
JOBS = ROOT / "examples" / "jobs"
TE = nodefacts.NodeStack(transformer_engine="2.9.0", apex_gradient_accumulation=True, apex_softmax=True, apex_layer_norm=True, hosts=("n",))


def _render(name, write_mbps=nodefacts.DEFAULT_WRITE_MBPS, slurm_time=None):
    spec = jobspec.load(JOBS / f"{name}.yml")
    if slurm_time is not None:
        slurm = spec.launch.slurm.model_copy(update={"time": slurm_time})
        spec = spec.model_copy(update={"launch": spec.launch.model_copy(update={"slurm": slurm})})
    gpu = GPUS["cpu"] if spec.launch.trainer == "lab" else GPUS["H100-SXM"]
    cluster = nodefacts.KnownCluster(spec.launch.nodes, spec.launch.gpus_per_node, gpu, "/shared", stack=TE, write_mbps=write_mbps)
    hosts = [(f"n{i}", f"10.0.{i // 200}.{i % 200 + 1}") for i in range(spec.launch.nodes)]
    return spec, render.render(spec, cluster, hosts)


def _unit(spec, rendered):
    job = jobs.Job(
        spec.name, Path("/inv"), [n.host for n in rendered.nodes], "/shared", rendered.job_dir, Path("/x"), rendered.checkpoint_dir, "u.service"
    )
    text = systemd.unit_text(spec, job, rendered.nodes[0].host, 0, "megaprov", False, rendered.stop)
    return dict(line.partition("=")[::2] for line in text.splitlines() if "=" in line)


def test_a_175b_job_gets_a_grace_far_above_torchruns_30_seconds():
    spec, out = _render("gpt3-175b-128nodes")
    assert out.stop is not None
    # 175B parameters: bf16 weights + fp32 main weights + Adam's two moments = 14 bytes each, ~2.4 TB per checkpoint
    assert 2.3e12 < out.stop.checkpoint_bytes < 2.6e12
    assert out.stop.torchrun_s > 2400  # ~2450 s at 1 GB/s, with margin
    assert dict(out.nodes[0].env)["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == str(out.stop.torchrun_s)
    assert "export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=" + str(out.stop.torchrun_s) in out.nodes[0].script
    unit = _unit(spec, out)
    assert int(unit["TimeoutStopSec"]) == out.stop.unit_s > out.stop.torchrun_s  # systemd outwaits torchrun
    # Slurm: the batch script hears of the time limit that long before it (USR1), the node script carries the wait
    assert out.sbatch is not None and f"#SBATCH --signal=B:USR1@{out.stop.unit_s}" in out.sbatch.splitlines()
    assert out.slurm_node is not None and f"export TORCH_ELASTIC_SHUTDOWN_TIMEOUT={out.stop.torchrun_s}" in out.slurm_node.splitlines()


def test_a_faster_shared_directory_shortens_it_and_the_bound_holds():
    _, slow = _render("gpt3-175b-128nodes", 1000)
    _, fast = _render("gpt3-175b-128nodes", 20000)
    _, crawl = _render("gpt3-175b-128nodes", 1, slurm_time="1-00:00:00")
    assert slow.stop and fast.stop and crawl.stop
    assert fast.stop.torchrun_s < slow.stop.torchrun_s
    assert crawl.stop.torchrun_s == render.STOP_MAX_S
    # at 1 MB/s the save before the time limit takes the whole 6 h bound: the example's 4 h limit leaves no time to train
    with pytest.raises(jobspec.JobSpecError, match=r"launch.slurm.time=4:00:00 \(14400 s\) leaves no time to train"):
        _render("gpt3-175b-128nodes", 1)


def test_a_tiny_job_stays_small():
    spec, out = _render("lab-tiny")
    assert out.stop is not None and out.stop.torchrun_s <= 90
    assert int(_unit(spec, out)["TimeoutStopSec"]) <= 180


def test_torch_reads_the_rendered_variable():
    """torch 2.13: torchrun's LaunchConfig takes its shutdown timeout from TORCH_ELASTIC_SHUTDOWN_TIMEOUT (30 s
    without it), the wait between SIGTERM and SIGKILL of the ranks."""
    api = pytest.importorskip("torch.distributed.launcher.api", reason="torch is not installed")
    saved = os.environ.pop("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", None)
    try:
        assert api.LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=1).shutdown_timeout == render.TORCHRUN_DEFAULT_GRACE
        os.environ["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = "4960"
        assert api.LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=1).shutdown_timeout == 4960
    finally:
        os.environ.pop("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", None)
        if saved is not None:
            os.environ["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = saved


def test_the_write_speed_comes_from_the_inventory(tmp_path, monkeypatch):
    from megaprov.training import target

    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    inv = tmp_path / "inv.ini"
    body = "[head]\nh ansible_host=10.0.0.9\n\n[gpu_nodes]\ng1 ansible_host=10.0.0.1\n\n[gpu_nodes:vars]\nmegaprov_gpu_model=H100-SXM\n"
    inv.write_text(body + "megatron_checkpoint_write_mbps=5000\n")
    spec = jobspec.load(JOBS / "gpt-345m-1node.yml")
    found, _ = target.cluster(spec, str(inv), target.Shape())
    assert nodefacts.write_speed(found) == (5000.0, "inventory")
    inv.write_text(body + "megatron_checkpoint_write_mbps=0\n")
    with pytest.raises(Exception, match="megatron_checkpoint_write_mbps"):
        target.cluster(spec, str(inv), target.Shape())
