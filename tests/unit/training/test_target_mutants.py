"""The cluster a job runs on and its spec's cross-field check (megaprov.training.target): the GPU from a flag or the
inventory, the shape from flags, the inventory and the spec in that order, the nodes left after exclusions, the nodes'
training stack (facts, what the inventory asks, or the container image's), the shared directory's write speed and
the container mount roots, each refusal as the one line the operator reads; and the check that locates every
cross-field problem on its line of the spec file. Nothing is stood in: real inventories, fact caches and image
records under a temporary MEGAPROV_STATE."""

import json
from pathlib import Path

import pytest

from megaprov import paths, untrusted, values
from megaprov.errors import UsageError
from megaprov.training import imagefacts, jobspec, nodefacts, planner, target
from megaprov.training.jobspec import JobSpecError
from megaprov.training.nodefacts import ROLE_DEFAULTS, KnownCluster, NodeStack

ROOT = Path(__file__).resolve().parents[3]
JOBS = ROOT / "examples" / "jobs"
LLAMA_TEXT = (JOBS / "llama-8b-2nodes.yml").read_text()
LLAMA = jobspec.parse(LLAMA_TEXT, "llama.yml")  # 2 nodes x 8 GPUs, megatron-lm, tensor 2
LAB = jobspec.load(JOBS / "lab-tiny.yml")  # the CPU lab trainer
NGC = jobspec.load(JOBS / "gpt-345m-ngc.yml")  # launch.container.image
KNOWN_GPUS = "GB200, B200, H200, H100-SXM, H100-PCIe, GH200, A100-80GB, A100-40GB, L40S, A10, V100, cpu"
H100 = planner.GPUS["H100-SXM"]
BACKEND = "torch-cuda"


def inventory(tmp_path, monkeypatch, node_vars, hosts=("g1", "g2")):
    """An inventory with a head and ``hosts`` in [gpu_nodes] (addresses 10.0.0.1...), ``node_vars`` for all of them."""
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    path = tmp_path / "inv.ini"
    nodes = "".join(f"{h} ansible_host=10.0.0.{i + 1}\n" for i, h in enumerate(hosts))
    lines = "".join(f"{k}={v}\n" for k, v in node_vars.items())
    path.write_text(f"[head]\nh ansible_host=10.0.0.9\n\n[gpu_nodes]\n{nodes}\n[gpu_nodes:vars]\n{lines}")
    return str(path)


def refused(call):
    with pytest.raises(UsageError) as caught:
        call()
    return caught.value


# ---- _gpu and the flags without an inventory


def test_an_unknown_gpu_flag_is_refused_with_every_known_name():
    error = refused(lambda: target.cluster(LLAMA, None, target.Shape(gpu="Z9")))
    assert error.message == "--gpu='Z9' is not a known GPU"
    assert error.hint == f"use one of {KNOWN_GPUS}"
    assert str(error) == f"--gpu='Z9' is not a known GPU: use one of {KNOWN_GPUS}"


def test_gpu_names_and_aliases_are_resolved():
    assert target._gpu("h100", "--gpu") is H100
    assert target._gpu("A100-80GB", "x") is planner.GPUS["A100-80GB"]
    error = refused(lambda: target._gpu("", "megaprov_gpu_model"))
    assert str(error) == f"megaprov_gpu_model='' is not a known GPU: use one of {KNOWN_GPUS}"


def test_without_an_inventory_the_flags_win_then_the_spec():
    found, hosts = target.cluster(LLAMA, None, target.Shape(nodes=3, gpus_per_node=4, gpu="A100-80GB"))
    assert found == planner.Cluster(3, 4, planner.GPUS["A100-80GB"])
    assert type(found) is planner.Cluster
    assert hosts == [("node0", "node0"), ("node1", "node1"), ("node2", "node2")]
    found, hosts = target.cluster(LLAMA, None, target.Shape(gpu="H100-SXM"))
    assert found == planner.Cluster(2, 8, H100)
    assert hosts == [("node0", "node0"), ("node1", "node1")]


def test_without_an_inventory_a_gpu_job_needs_the_gpu_flag():
    error = refused(lambda: target.cluster(LLAMA, None, target.Shape(nodes=1)))
    assert str(error) == "the GPU model is unknown: pass --gpu MODEL (e.g. H100-SXM) or -i INVENTORY with megaprov_gpu_model set"


def test_without_an_inventory_the_lab_runs_on_cpus():
    found, hosts = target.cluster(LAB, None, target.Shape())
    assert found == planner.Cluster(LAB.launch.nodes, LAB.launch.gpus_per_node, planner.GPUS["cpu"])
    assert hosts == [(f"node{i}", f"node{i}") for i in range(LAB.launch.nodes)]
    found, _ = target.cluster(LAB, None, target.Shape(gpu="H100-SXM"))
    assert found.gpu is H100


# ---- with an inventory


def test_the_inventory_gives_hosts_addresses_gpu_and_defaults(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM", "megaprov_gpus_per_node": 4})
    found, hosts = target.cluster(LLAMA, path, target.Shape())
    assert hosts == [("g1", "10.0.0.1"), ("g2", "10.0.0.2")]
    assert found == KnownCluster(
        2, 4, H100, "/shared", ("g1", "g2"), (), stack=ROLE_DEFAULTS, write_mbps=1000.0, write_source="default", container_roots=()
    )
    assert found.write_source == "default" and found.container_roots == () and found.stack is ROLE_DEFAULTS


def test_an_address_defaults_to_the_host_name(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    path = tmp_path / "inv.ini"
    path.write_text("[head]\nh\n\n[gpu_nodes]\ng1\ng2 ansible_host=10.0.0.2\n\n[gpu_nodes:vars]\nmegaprov_gpu_model=H100-SXM\n")
    _, hosts = target.cluster(LLAMA, str(path), target.Shape())
    assert hosts == [("g1", "g1"), ("g2", "10.0.0.2")]


def test_flags_win_over_the_inventory(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM", "megaprov_gpus_per_node": 4}, ("g1", "g2", "g3"))
    found, hosts = target.cluster(LLAMA, path, target.Shape(nodes=3, gpus_per_node=2, gpu="A100-40GB"))
    assert (found.nodes, found.gpus_per_node, found.gpu.name, found.hosts) == (3, 2, "A100-40GB", ("g1", "g2", "g3"))
    assert len(hosts) == 3


def test_an_unknown_gpu_flag_is_refused_with_an_inventory_too(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM"})
    error = refused(lambda: target.cluster(LLAMA, path, target.Shape(gpu="H99")))
    assert str(error) == f"--gpu='H99' is not a known GPU: use one of {KNOWN_GPUS}"


def test_the_inventory_gpu_count_then_the_spec(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM", "megaprov_gpus_per_node": 0})
    assert target.cluster(LLAMA, path, target.Shape())[0].gpus_per_node == 8
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM", "megaprov_gpus_per_node": 2})
    assert target.cluster(LLAMA, path, target.Shape())[0].gpus_per_node == 2


def test_cpu_nodes_run_on_the_cpu_gpu_whatever_the_model_says(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_expected": "false", "megaprov_gpu_model": "H100-SXM", "megaprov_gpus_per_node": 8})
    found, _ = target.cluster(LAB, path, target.Shape())
    assert (found.gpu.name, found.gpus_per_node) == ("cpu", LAB.launch.gpus_per_node)
    found, _ = target.cluster(LAB, path, target.Shape(gpu="A10"))
    assert found.gpu.name == "A10"


def test_the_gpu_model_must_be_set_and_known(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {})
    error = refused(lambda: target.cluster(LLAMA, path, target.Shape()))
    assert str(error) == f"{path}: megaprov_gpu_model is unset: set it in group_vars/gpu_nodes.yml (e.g. H100-SXM) or pass --gpu"
    assert target.cluster(LLAMA, path, target.Shape(gpu="H200"))[0].gpu.name == "H200"
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "Z9"})
    error = refused(lambda: target.cluster(LLAMA, path, target.Shape()))
    assert str(error) == f"megaprov_gpu_model='Z9' is not a known GPU: use one of {KNOWN_GPUS}"


def test_excluded_nodes_are_left_out(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM"}, ("g1", "g2", "g3"))
    found, hosts = target.cluster(LLAMA, path, target.Shape(exclude=("g1",)))
    assert hosts == [("g2", "10.0.0.2"), ("g3", "10.0.0.3")]
    assert (found.nodes, found.hosts) == (2, ("g2", "g3"))


def test_every_node_excluded_is_refused(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM"})
    error = refused(lambda: target.cluster(LLAMA, path, target.Shape(exclude=("g1", "g2"))))
    assert str(error) == f"every GPU node of {path} is excluded (g1, g2): fix them (megaprov doctor -i INVENTORY) and run again"


def test_too_few_nodes_left_after_exclusion_is_refused(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM"}, ("g1", "g2", "g3"))
    error = refused(lambda: target.cluster(LLAMA, path, target.Shape(exclude=("g1", "g3"))))
    assert str(error) == (
        "the job needs 2 nodes; 1 are left without g1, g3 (error findings of megaprov doctor): "
        "fix those nodes and run `megaprov doctor -i INVENTORY` again, or lower launch.nodes (--nodes)"
    )
    # exactly as many as the job needs: accepted
    found, _ = target.cluster(LLAMA, path, target.Shape(exclude=("g3",)))
    assert found.hosts == ("g1", "g2")


def test_without_exclusions_more_nodes_than_the_inventory_are_planned(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM"})
    found, hosts = target.cluster(LLAMA, path, target.Shape(nodes=3))
    assert (found.nodes, len(hosts)) == (3, 2)


def test_the_shared_directory_from_the_inventory(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM", "megaprov_shared_dir": "/mnt/shared"})
    assert target.cluster(LLAMA, path, target.Shape())[0].shared_dir == "/mnt/shared"


# ---- the stack


def test_the_stack_the_inventory_asks_for_before_any_fact(tmp_path, monkeypatch):
    asks = {"megatron_transformer_engine": "true", "apex_enabled": "true", "megatron_huggingface": "true"}
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM", **asks})
    assert target.cluster(LLAMA, path, target.Shape())[0].stack == nodefacts.assumed(True, True, True)
    for one in asks:
        path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM", one: "true"})
        expected = nodefacts.assumed(*(k == one for k in asks))
        assert target.cluster(LLAMA, path, target.Shape())[0].stack == expected


FACT = {"version": 1, "transformer_engine": "1.13.0", "torch": "2.5.1", "apex": {"fused_layer_norm_cuda": True}}


def write_facts(path, facts):
    cache = paths.fact_cache_dir(Path(path))
    cache.mkdir(parents=True, exist_ok=True)
    for host, fact in facts.items():
        (cache / host).write_text(json.dumps({"megaprov_python": fact}))


def test_the_stack_of_the_job_nodes_facts(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM", "apex_enabled": "true"}, ("g1", "g2", "g3"))
    write_facts(path, {"g1": FACT, "g2": FACT, "g3": {"version": 1}})
    stack = target.cluster(LLAMA, path, target.Shape())[0].stack
    # only the job's two nodes: g3 (nothing optional) is not among them; the facts win over what the inventory asks
    assert stack == NodeStack(transformer_engine="1.13.0", apex_layer_norm=True, torch="2.5.1", hosts=("g1", "g2"))


def test_a_container_job_has_the_image_stack_or_the_roles_defaults_until_probed(tmp_path, monkeypatch):
    image = NGC.launch.container.image
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM", "apex_enabled": "true"})
    write_facts(path, {"g1": FACT, "g2": FACT})
    assert target.cluster(NGC, path, target.Shape())[0].stack == NodeStack(source="assumed", image=image)
    imagefacts.record(Path(path), image, "g1", {"version": 1, "transformer_engine": "2.1", "torch": "2.6.0"})
    assert target.cluster(NGC, path, target.Shape())[0].stack == NodeStack(
        transformer_engine="2.1", torch="2.6.0", hosts=("g1",), source="image", image=image
    )


# ---- write speed and mount roots


def test_the_write_speed_from_the_inventory(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM", "megatron_checkpoint_write_mbps": 2500})
    found = target.cluster(LLAMA, path, target.Shape())[0]
    assert (found.write_mbps, found.write_source) == (2500.0, "inventory")
    assert nodefacts.write_speed(found) == (2500.0, "inventory")


@pytest.mark.parametrize("mbps,accepted", [("0.001", 0.001), ("9999999", 9999999.0)])
def test_the_write_speed_just_inside_its_range(tmp_path, monkeypatch, mbps, accepted):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM", "megatron_checkpoint_write_mbps": mbps})
    assert target.cluster(LLAMA, path, target.Shape())[0].write_mbps == accepted


@pytest.mark.parametrize("mbps,shown", [("0", "0"), ("-5", "-5"), ("1e7", "1e+07"), ("20000000", "2e+07")])
def test_a_write_speed_out_of_range_is_refused(tmp_path, monkeypatch, mbps, shown):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM", "megatron_checkpoint_write_mbps": mbps})
    error = refused(lambda: target.cluster(LLAMA, path, target.Shape()))
    assert str(error) == (
        f"{path}: megatron_checkpoint_write_mbps={shown} is out of range: set it to the shared directory's write speed in MB/s (> 0)"
    )


def test_the_mount_roots_from_the_inventory(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM", "megaprov_container_mount_roots": "['/scratch','/raid']"})
    assert target.cluster(LLAMA, path, target.Shape())[0].container_roots == ("/scratch", "/raid")


def test_a_mount_root_of_slash_is_refused(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM", "megaprov_container_mount_roots": "['/scratch','/']"})
    error = refused(lambda: target.cluster(LLAMA, path, target.Shape()))
    assert str(error) == f"{path}: megaprov_container_mount_roots holds /, which lets a job mount the whole node: name the data directories"


def test_mount_roots():
    assert target.mount_roots([], "inv") == ()
    assert target.mount_roots(["/scratch", "/raid/data"], "inv") == ("/scratch", "/raid/data")
    assert target.mount_roots(["/a"] * values.MAX_LIST, "inv") == ("/a",) * values.MAX_LIST


@pytest.mark.parametrize("value", ["/scratch", ("/scratch",), None, ["/a"] * (values.MAX_LIST + 1)])
def test_mount_roots_not_a_list_are_refused(value):
    error = refused(lambda: target.mount_roots(value, "inv.ini"))
    assert error.message == f"inv.ini: megaprov_container_mount_roots={values.shown(value)} is not a list of paths"
    assert error.hint == "write it as a YAML list such as [/scratch, /raid]"


def test_mount_roots_must_be_plain_absolute_paths():
    assert str(refused(lambda: target.mount_roots(["rel"], "inv"))) == "megaprov_container_mount_roots='rel' is not an absolute path: start it with /"
    assert str(refused(lambda: target.mount_roots(["/"], "inv"))) == (
        "inv: megaprov_container_mount_roots holds /, which lets a job mount the whole node: name the data directories"
    )


# ---- with_rates


def test_with_rates_without_an_inventory_or_hosts_is_unchanged(tmp_path, monkeypatch):
    plain = planner.Cluster(2, 8, H100)
    assert target.with_rates(plain, None) is plain
    assert target.with_rates(plain, "") is plain
    assert target.with_rates(plain, str(tmp_path / "inv.ini")) is plain  # no hosts


def test_with_rates_reads_the_recorded_rates_and_keeps_the_known_cluster(tmp_path, monkeypatch):
    path = inventory(tmp_path, monkeypatch, {"megaprov_gpu_model": "H100-SXM"})
    cache = paths.fact_cache_dir(Path(path))
    cache.mkdir(parents=True)
    rate = {"version": 1, "tflops_per_device": 700.0, "devices": ["H100"] * 8, "backend": BACKEND, "dtype": "bf16"}
    (cache / "g1").write_text(json.dumps({"megaprov_compute": rate}))
    known = KnownCluster(2, 8, H100, hosts=("g1", "g2"), write_mbps=5.0)
    from megaprov.cluster import rates

    expected = (rates.NodeRate("g1", 700.0, 8, BACKEND, "bf16", ""),)
    assert rates.known(Path(path), ("g1", "g2")) == expected
    with_rates = target.with_rates(known, path)
    assert type(with_rates) is KnownCluster and with_rates.write_mbps == 5.0
    assert with_rates.rates == expected
    assert target.cluster(LLAMA, path, target.Shape())[0].rates == expected


# ---- check


def test_check_passes_a_valid_spec():
    assert target.check(LLAMA, LLAMA_TEXT, "llama.yml", 16, 8) is None
    assert target.check(LLAMA, LLAMA_TEXT, "llama.yml", None, None) is None


TP8 = LLAMA_TEXT.replace("  tensor: 2\n", "  tensor: 8\n")
TP8_LINE = TP8.splitlines().index("  tensor: 8") + 1


def test_check_locates_a_problem_that_depends_on_the_gpus_per_node():
    spec = jobspec.parse(TP8, "tp8.yml")
    target.check(spec, TP8, "tp8.yml", 16, None)  # without the node size nothing spans nodes
    target.check(spec, TP8, "tp8.yml", 16, 8)
    with pytest.raises(JobSpecError) as caught:
        target.check(spec, TP8, "tp8.yml", 16, 4)
    [problem] = caught.value.problems
    assert (problem.path, problem.line) == ("parallel.tensor", TP8_LINE)
    assert problem.message == "parallel.tensor=8 spans more than the 4 GPUs of a node"
    assert str(caught.value).startswith(f"tp8.yml:{TP8_LINE}: parallel.tensor=8 spans more than the 4 GPUs of a node; ")
    assert caught.value.source == "tp8.yml"


def test_check_reports_every_problem_each_on_its_line():
    text = TP8.replace(
        '  extra_args: ["--transformer-impl", "transformer_engine", "--use-flash-attn"]\n',
        '  extra_args: ["--transformer-impl", "transformer_engine", "--use-flash-attn", "--fim-data"]\n',
    )
    lines = text.splitlines()
    extra_line = next(i for i, line in enumerate(lines) if line.startswith("  extra_args:")) + 1
    spec = jobspec.parse(text, "two.yml")
    with pytest.raises(JobSpecError) as caught:
        target.check(spec, text, "two.yml", 16, 4)
    located = [(p.path, p.line) for p in caught.value.problems]
    assert ("parallel.tensor", TP8_LINE) in located
    assert ("launch.extra_args", extra_line) in located
    assert len(caught.value.details) == len(located) - 1


def test_check_locates_a_megatron_problem_written_in_flow_style():
    # the tokenizer written in flow style, its path a file: the problem is on the tokenizer's line
    text = LLAMA_TEXT.replace(
        "  tokenizer:\n    type: huggingface\n    path: tokenizers/llama3\n", "  tokenizer: {type: huggingface, path: tok/tokenizer.json}\n"
    )
    spec = jobspec.parse(text, "hf.yml")
    tok_line = text.splitlines().index("  tokenizer: {type: huggingface, path: tok/tokenizer.json}") + 1
    with pytest.raises(JobSpecError) as caught:
        target.check(spec, text, "hf.yml", 16, 8)
    [problem] = caught.value.problems
    assert problem.path == "data.tokenizer.path"
    assert problem.line == tok_line
    assert str(caught.value).startswith(f"hf.yml:{tok_line}: data.tokenizer.path=tok/tokenizer.json is a file: ")


# ---- read


def test_read_returns_the_spec_and_its_text(tmp_path):
    file = tmp_path / "job.yml"
    file.write_text(LLAMA_TEXT)
    spec, text = target.read(str(file))
    assert text == LLAMA_TEXT
    assert spec == jobspec.parse(LLAMA_TEXT, str(file))


def test_read_below_a_root_drops_a_byte_order_mark(tmp_path):
    file = tmp_path / "jobs" / "job.yml"
    file.parent.mkdir()
    file.write_text("\ufeff" + LLAMA_TEXT, encoding="utf-8")
    spec, text = target.read(str(file), tmp_path)
    assert text == LLAMA_TEXT
    assert spec.name == "llama-8b"


def test_read_names_the_file_in_a_refusal(tmp_path):
    file = tmp_path / "bad.yml"
    file.write_text(LLAMA_TEXT.replace("  num_layers: 32\n", "  num_layers: many\n"))
    with pytest.raises(JobSpecError) as caught:
        target.read(str(file))
    assert caught.value.source == str(file)
    assert str(caught.value).startswith(f"{file}:")


def test_read_below_a_root_refuses_a_file_outside_it(tmp_path):
    outside = tmp_path / "job.yml"
    outside.write_text(LLAMA_TEXT)
    (tmp_path / "root").mkdir()
    assert target.read(str(outside))[1] == LLAMA_TEXT
    with pytest.raises(UsageError):
        target.read(str(outside), tmp_path / "root")


def test_a_spec_is_read_as_the_operators_file_or_below_a_job_directory_as_an_untrusted_entry(tmp_path):
    """Without a root the spec is the operator's file (its own words for a missing or undecodable file); with one it is
    the job directory's copy, an entry the cluster user could have written, named as the job spec."""
    bad = tmp_path / "job.yml"
    bad.write_bytes(b"\xff\xfe name: x\n")
    with pytest.raises(UsageError) as err:
        target.read(str(tmp_path / "nope.yml"))
    assert str(err.value) == f"job spec {tmp_path}/nope.yml does not exist: check the path"
    with pytest.raises(UsageError) as err:
        target.read(str(bad))
    assert str(err.value) == f"job spec {bad} is not UTF-8 (byte 0xff on line 1): save it as UTF-8"
    with pytest.raises(untrusted.BadEntry) as entry:
        target.read(str(bad), tmp_path)
    assert str(entry.value).startswith(f"{bad} (job spec) is not UTF-8 text: ")
