"""From a job spec and an inventory to the cluster a job runs on (megaprov.training.target.cluster): the GPUs per node, and so
torchrun's --nproc-per-node and the world size, are the inventory's (or the --gpus-per-node flag's), never the spec's
launch.gpus_per_node, which only stands in where nothing says what the nodes have."""

from pathlib import Path

import pytest

from megaprov.errors import UsageError
from megaprov.training import jobspec, planner, render, target
from tests.helpers.megatron import assert_megatron_accepts, parse_torchrun

ROOT = Path(__file__).resolve().parents[3]
JOBS = ROOT / "examples" / "jobs"


def inventory(tmp_path, monkeypatch, node_vars):
    """A two-node inventory ([gpu_nodes] g1, g2) with ``node_vars`` for the GPU nodes; the fact cache is empty."""
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    path = tmp_path / "inv.ini"
    lines = "".join(f"{k}={v}\n" for k, v in node_vars.items())
    path.write_text(
        f"[head]\nh ansible_host=10.0.0.9\n\n[gpu_nodes]\ng1 ansible_host=10.0.0.1\ng2 ansible_host=10.0.0.2\n\n[gpu_nodes:vars]\n{lines}"
    )
    return str(path)


LLAMA = jobspec.load(JOBS / "llama-8b-2nodes.yml")  # written for 2 nodes x 8 GPUs (launch.gpus_per_node: 8), tensor 2


# What the llama example's nodes are set up with (it forces Transformer Engine and reads a Hugging Face tokenizer).
LLAMA_STACK = {"megatron_transformer_engine": True, "megatron_huggingface": True}


def test_the_inventorys_gpu_count_wins_over_the_spec(tmp_path, monkeypatch):
    # The nodes have 4 GPUs (megaprov_gpus_per_node=4); the spec says 8. The job runs 4 ranks per node: a world of
    # 2 x 4 = 8, data parallel 8 / tensor 2 = 4 (the spec's 8 would give 16 ranks on 8 GPUs, two per GPU).
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM", "megaprov_gpus_per_node": 4, **LLAMA_STACK})
    assert LLAMA.launch.gpus_per_node == 8
    found, hosts = target.cluster(LLAMA, path, target.Shape())
    assert (found.nodes, found.gpus_per_node, found.world) == (2, 4, 8)
    assert hosts == [("g1", "10.0.0.1"), ("g2", "10.0.0.2")]
    target.check(LLAMA, (JOBS / "llama-8b-2nodes.yml").read_text(), "llama.yml", found.world, found.gpus_per_node)
    plan = planner.plan(LLAMA, found)
    assert (plan.gpus_per_node, plan.world, plan.data_parallel) == (4, 8, 4)
    assert "launch.gpus_per_node=8 differs from the cluster's 4; the plan uses the cluster" in plan.warnings
    rendered = render.render(LLAMA, found, hosts)
    assert [n.host for n in rendered.nodes] == ["g1", "g2"]
    for node in rendered.nodes:
        ns = parse_torchrun(node.argv)
        assert (ns.nnodes, ns.nproc_per_node, ns.node_rank, ns.master_addr) == ("2", "4", node.node_rank, "10.0.0.1")
        assert_megatron_accepts(ns.training_script_args)


def test_the_gpus_per_node_flag_wins_over_the_inventory(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM", "megaprov_gpus_per_node": 4, **LLAMA_STACK})
    found, hosts = target.cluster(LLAMA, path, target.Shape(gpus_per_node=2))
    assert (found.gpus_per_node, found.world) == (2, 4)
    argv = render.render(LLAMA, found, hosts).nodes[0].argv
    assert parse_torchrun(argv).nproc_per_node == "2"


def test_the_spec_stands_in_only_where_the_inventory_says_nothing(tmp_path, monkeypatch):
    # megaprov_gpus_per_node 0 (inventories/defaults.yml: any count) says nothing: the spec's 8 is used
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM"})
    found, _ = target.cluster(LLAMA, path, target.Shape())
    assert (found.gpus_per_node, found.world) == (8, 16)
    # CPU nodes (megaprov_gpu_expected=false): a GPU count of the inventory means nothing for processes per node
    lab = jobspec.load(JOBS / "lab-tiny.yml")
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_expected": "false", "megaprov_gpus_per_node": 8})
    found, hosts = target.cluster(lab, path, target.Shape())
    assert (found.gpu.name, found.gpus_per_node, found.world) == ("cpu", lab.launch.gpus_per_node, 2)
    assert parse_torchrun(render.render(lab, found, hosts).nodes[1].argv).nproc_per_node == "1"


def test_without_an_inventory_the_flags_then_the_spec_give_the_shape():
    found, hosts = target.cluster(LLAMA, None, target.Shape(nodes=3, gpus_per_node=4, gpu="A100-80GB"))
    assert (found.nodes, found.gpus_per_node, found.gpu.name) == (3, 4, "A100-80GB")
    assert hosts == [("node0", "node0"), ("node1", "node1"), ("node2", "node2")]
    found, _ = target.cluster(LLAMA, None, target.Shape(gpu="H100-SXM"))
    assert (found.nodes, found.gpus_per_node) == (2, 8)
    with pytest.raises(UsageError, match="the GPU model is unknown"):
        target.cluster(LLAMA, None, target.Shape())
