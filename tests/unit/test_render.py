"""Rendered launches: golden pretrain_gpt.py arguments, every flag checked against Megatron-LM core_v0.16.1's own
parser (recorded in megaprov/megatron/flags-core_v0.16.1.json by scripts/dump-megatron-flags.py), torchrun
arguments checked by torch's parser, and scripts checked by bash."""

import difflib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from megaprov import jobspec, nodefacts, render
from megaprov.jobspec import JobSpecError
from megaprov.planner import GPUS
from tests.helpers.megatron import FLAGS, assert_megatron_accepts, parse_torchrun

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "examples" / "jobs"
GOLDEN = Path(__file__).parent / "golden"
UPDATE_GOLDEN = ".venv/bin/python scripts/update_golden.py"


def spec(name):
    return jobspec.load(JOBS / f"{name}.yml")


# A GPU site whose python stage installed Transformer Engine and apex (what the large examples are written for).
TE_SITE = nodefacts.NodeStack(transformer_engine="2.9.0", apex_gradient_accumulation=True, apex_softmax=True, apex_layer_norm=True, hosts=("node00",))


def cluster_for(s, shared="/shared", stack=TE_SITE, gpus_per_node=None):
    gpu = GPUS["cpu"] if s.launch.trainer == "lab" else GPUS["H100-SXM"]
    return nodefacts.KnownCluster(s.launch.nodes, gpus_per_node or s.launch.gpus_per_node, gpu, shared, stack=stack)


def hosts(n):
    return [(f"node{i:02d}", f"10.0.0.{i + 1}") for i in range(n)]


def assert_golden(name, text, golden_dir=GOLDEN):
    """Compare only: a golden file is rewritten by the separate command UPDATE_GOLDEN, never by a test run."""
    golden = golden_dir / f"{name}.args"
    assert golden.is_file(), f"no golden file {golden}: review the arguments and create it with {UPDATE_GOLDEN} {name}"
    expected = golden.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), str(golden), "rendered now"))
        raise AssertionError(
            f"the rendered arguments of {name} differ from {golden}:\n{diff}"
            f"if the change is intended, run {UPDATE_GOLDEN} {name} (refused under CI) and commit the file"
        )


def test_flag_table_is_the_pinned_version():
    assert len(FLAGS) == 681
    for flag in (
        "--num-layers",
        "--tensor-model-parallel-size",
        "--use-distributed-optimizer",
        "--mock-data",
        "--ckpt-format",
        "--exit-signal-handler",
    ):
        assert flag in FLAGS
    assert FLAGS["--recompute-granularity"]["choices"] == ["full", "selective"]


@pytest.mark.parametrize("name", sorted(p.stem for p in JOBS.glob("*.yml")))
def test_golden_megatron_arguments(name):
    args = render.megatron_args(spec(name), "/shared")
    assert_megatron_accepts(args)
    assert_golden(name, "\n".join(args) + "\n")


def test_every_example_has_a_golden_file_and_no_golden_file_is_orphaned():
    assert {p.stem for p in GOLDEN.glob("*.args")} == {p.stem for p in JOBS.glob("*.yml")}


def test_a_differing_golden_file_fails_and_is_left_as_it_was(tmp_path, monkeypatch):
    # The old test rewrote its golden file when MEGAPROV_UPDATE_GOLDEN was set, then compared it with itself: the
    # variable must change nothing now, and the failure must name the update command.
    monkeypatch.setenv("MEGAPROV_UPDATE_GOLDEN", "1")
    rendered = (GOLDEN / "lab-tiny.args").read_text()
    stale = rendered.replace("--hidden-size\n", "--hidden-size\n9", 1)
    assert stale != rendered
    (tmp_path / "lab-tiny.args").write_text(stale)
    with pytest.raises(AssertionError, match=r"run \.venv/bin/python scripts/update_golden\.py lab-tiny \(refused under CI\)") as info:
        assert_golden("lab-tiny", rendered, tmp_path)
    assert "\n-964\n+64\n" in str(info.value)  # the diff is shown: golden 964, rendered 64 (lab-tiny's hidden size)
    assert (tmp_path / "lab-tiny.args").read_text() == stale
    with pytest.raises(AssertionError, match="create it with .*update_golden.py gpu-check"):
        assert_golden("gpu-check", rendered, tmp_path)
    assert not (tmp_path / "gpu-check.args").exists()


def _update_golden(args, env_extra, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CI"} | env_extra
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "update_golden.py"), *args], env=env, capture_output=True, text=True, timeout=120)


def test_the_update_command_writes_what_the_golden_test_compares(tmp_path):
    (tmp_path / "gone.args").write_text("--old\n")
    out = _update_golden(["--dir", str(tmp_path)], {}, tmp_path)
    assert out.returncode == 0, out.stderr
    for name in sorted(p.stem for p in JOBS.glob("*.yml")):
        assert (tmp_path / f"{name}.args").read_text() == (GOLDEN / f"{name}.args").read_text(), name
    assert not (tmp_path / "gone.args").exists()  # the example is gone: its golden file would never be compared


@pytest.mark.parametrize("ci", ["true", "1", "yes"])
def test_the_update_command_refuses_under_ci(tmp_path, ci):
    out = _update_golden(["--dir", str(tmp_path), "lab-tiny"], {"CI": ci}, tmp_path)
    assert out.returncode == 2 and "CI" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_key_arguments_of_the_175b_job():
    args = render.megatron_args(spec("gpt3-175b-128nodes"), "/shared")
    joined = " ".join(args)
    for piece in (
        "--tensor-model-parallel-size 8",
        "--pipeline-model-parallel-size 16",
        "--sequence-parallel",
        "--use-distributed-optimizer",
        "--micro-batch-size 1 --global-batch-size 1536",
        "--bf16",
        "--recompute-granularity selective",
        "--data-path 1.0 /shared/data/pile/pile_text_document",
        "--tokenizer-type GPT2BPETokenizer",
        "--save /shared/checkpoints/gpt3-175b --load /shared/checkpoints/gpt3-175b",
        "--ckpt-format torch_dist",
        "--distributed-backend nccl",
    ):
        assert piece in joined, piece


def test_byte_tokenizer_renders_megatrons_null_tokenizer():
    args = " ".join(render.megatron_args(spec("lab-tiny"), "/shared"))
    assert "--tokenizer-type NullTokenizer --vocab-size 256" in args
    assert "--distributed-backend gloo" in args
    assert "--bf16" not in args and "--fp16" not in args  # fp32


def test_resume_never_renders_no_load():
    s = spec("gpt-345m-1node")
    s = s.model_copy(update={"checkpoint": s.checkpoint.model_copy(update={"resume": "never"})})
    assert "--load" not in render.megatron_args(s)


def test_torchrun_arguments_parse_with_torchs_own_parser():
    s = spec("llama-8b-2nodes")
    out = render.render(s, cluster_for(s), hosts(2))
    for node in out.nodes:
        argv = list(node.argv)
        assert argv[:3] == ["/opt/megaprov/venv/bin/python", "-m", "torch.distributed.run"]
        ns = parse_torchrun(argv)
        assert (ns.nnodes, ns.nproc_per_node, ns.node_rank) == ("2", "8", node.node_rank)
        assert (ns.master_addr, ns.master_port) == ("10.0.0.1", 29500)
        assert ns.max_restarts == 0  # the unit restarts torchrun on every node
        assert ns.training_script == "/opt/megatron-lm/pretrain_gpt.py"
        assert_megatron_accepts(ns.training_script_args)


def test_nproc_per_node_is_the_clusters_gpu_count_not_the_specs():
    # The spec was written for nodes of 8 GPUs (llama-8b-2nodes: launch.gpus_per_node 8, tensor 2); the cluster (the
    # inventory's megaprov_gpus_per_node) has 4. torchrun must start one rank per GPU the node has: 2 nodes x 4 = a
    # world of 8 ranks (16 would oversubscribe every GPU twice).
    s = spec("llama-8b-2nodes")
    assert s.launch.gpus_per_node == 8
    out = render.render(s, cluster_for(s, gpus_per_node=4), hosts(2))
    for node in out.nodes:
        ns = parse_torchrun(node.argv)
        assert (ns.nnodes, ns.nproc_per_node, ns.node_rank) == ("2", "4", node.node_rank)
        assert int(ns.nnodes) * int(ns.nproc_per_node) == 8
        assert "--nproc-per-node 4 " in node.script
    slurm = s.model_copy(update={"launch": s.launch.model_copy(update={"launcher": "slurm"})})
    text = render.render(slurm, cluster_for(slurm, gpus_per_node=4), hosts(2)).sbatch
    assert text is not None
    assert "#SBATCH --gpus-per-node=4" in text.splitlines() and "#SBATCH --nodes=2" in text.splitlines()
    assert " --nnodes 2 --nproc-per-node 4 " in text


def test_lab_trainer_runs_from_the_job_directory():
    s = spec("lab-tiny")
    out = render.render(s, cluster_for(s), hosts(2))
    argv = list(out.nodes[1].argv)
    assert f"{out.job_dir}/bin/megaprov_trainer.py" in argv
    assert argv[argv.index("--node-rank") + 1] == "1"
    assert out.sbatch is None


def test_environment_and_scripts_are_valid_bash(tmp_path):
    s = spec("llama-8b-2nodes")
    out = render.render(s, cluster_for(s), hosts(2))
    env = dict(out.nodes[0].env)
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert env["NCCL_DEBUG"] == "WARN"
    assert env["PYTHONPATH"] == "/opt/megatron-lm"
    script = out.nodes[1].script
    assert ". /etc/megaprov/nccl.env" in script and "--node-rank 1" in script
    assert "torchrun exited with $rc" in script and "nvidia-smi --query-gpu=" in script
    # the venv's bin first: Megatron-LM's start-up `make` of the dataset helpers finds them built (issue 13 item 2)
    assert 'export PATH=/opt/megaprov/venv/bin:"$PATH"' in script.splitlines()
    path = tmp_path / "node.sh"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_operator_debug_variables_pass_through_but_the_spec_wins():
    s = spec("llama-8b-2nodes")  # the spec sets NCCL_DEBUG=WARN
    out = render.render(s, cluster_for(s), hosts(2), {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "HOME": "/root"})
    env = dict(out.nodes[0].env)
    assert env["NCCL_DEBUG"] == "WARN" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET" and "HOME" not in env
    lab = spec("lab-tiny")
    assert dict(render.render(lab, cluster_for(lab), hosts(2), {"NCCL_DEBUG": "INFO"}).nodes[0].env)["NCCL_DEBUG"] == "INFO"


def test_sbatch_script():
    s = spec("gpt3-175b-128nodes")
    out = render.render(s, cluster_for(s), hosts(128))
    text = out.sbatch
    assert text is not None
    for line in ("#SBATCH --nodes=128", "#SBATCH --gpus-per-node=8", "#SBATCH --partition=batch", "#SBATCH --time=4:00:00", "#SBATCH --requeue"):
        assert line in text.splitlines(), line
    assert '--node-rank "$SLURM_NODEID" --master-addr "$MASTER_ADDR" --master-port 29500' in text
    assert 'export PATH=/opt/megaprov/venv/bin:"$PATH"' in text.splitlines()
    result = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert result.returncode == 0, result.stderr


def test_unknown_pass_through_flag_is_named_with_a_suggestion():
    s = spec("gpt-345m-1node")
    s = s.model_copy(update={"launch": s.launch.model_copy(update={"extra_args": ["--use-flash-atn"]})})
    with pytest.raises(JobSpecError) as info:
        render.render(s, cluster_for(s), hosts(1))
    assert str(info.value) == "launch.extra_args[0]=--use-flash-atn is not a Megatron-LM core_v0.16.1 argument; did you mean --use-flash-attn?"


def test_checkpoint_outside_the_shared_dir_is_refused():
    s = spec("gpt-345m-1node")
    s = s.model_copy(update={"checkpoint": s.checkpoint.model_copy(update={"directory": "/local/ckpt"})})
    with pytest.raises(JobSpecError) as info:
        render.render(s, cluster_for(s, "/shared"), hosts(1))
    assert "checkpoint.directory=/local/ckpt is not a directory under the shared directory /shared" in str(info.value)
    # the shared directory itself is no checkpoint directory either (job.json would name it, and be refused)
    s = s.model_copy(update={"checkpoint": s.checkpoint.model_copy(update={"directory": "/shared"})})
    with pytest.raises(JobSpecError, match="checkpoint.directory=/shared is not a directory under"):
        render.render(s, cluster_for(s, "/shared"), hosts(1))


def test_sbatch_placeholders_cannot_be_forged_by_user_strings():
    s = spec("gpt-345m-1node")
    launch = s.launch.model_copy(update={"launcher": "slurm", "extra_args": ["--wandb-project", "x@@MASTER@@y"]})
    text = render.sbatch_script(s.model_copy(update={"launch": launch}), cluster_for(s))
    assert "x@@MASTER@@y" in text and 'x"$MASTER_ADDR"y' not in text
    assert '--node-rank "$SLURM_NODEID"' in text and '--master-addr "$MASTER_ADDR"' in text


def test_too_few_nodes_in_the_inventory():
    s = spec("llama-8b-2nodes")
    with pytest.raises(JobSpecError) as info:
        render.render(s, cluster_for(s), hosts(1))
    assert "the job needs 2 nodes but the inventory has 1" in str(info.value)


def test_relative_paths_land_on_the_shared_dir():
    s = spec("lab-tiny")
    args = render.megatron_args(s, "/mnt/shared")
    assert args[args.index("--data-path") + 2] == "/mnt/shared/data/lab_text_document"
    assert args[args.index("--save") + 1] == "/mnt/shared/checkpoints/lab-tiny"


def test_the_node_script_leaves_nothing_of_the_job_when_torchrun_is_killed(tmp_path):
    # torchrun killed with SIGKILL (the OOM killer) leaves its ranks running in sessions of their own: the node
    # script must kill them before it exits, or the unit waits for them up to TimeoutStopSec before it restarts.
    fake = tmp_path / "python"
    pidfile = tmp_path / "rank.pid"
    fake.write_text(f"#!/bin/bash\nsetsid sleep 300 </dev/null >/dev/null 2>&1 &\necho $! > {pidfile}\nsleep 0.3\nkill -9 $$\n")
    fake.chmod(0o755)
    s = spec("lab-tiny").model_copy(update={"launch": spec("lab-tiny").launch.model_copy(update={"python": str(fake)})})
    shared = tmp_path / "shared"
    (shared / "jobs" / s.name).mkdir(parents=True)
    rendered = render.render(s, cluster_for(s, str(shared)), hosts(2))
    script = tmp_path / "node00.sh"
    script.write_text(rendered.nodes[0].script)
    unit = f"megaprov-job-test-{os.getpid()}.service"
    out = subprocess.run(["bash", str(script)], env={**os.environ, "MEGAPROV_JOB_UNIT": unit}, capture_output=True, text=True, timeout=60)
    rank = int(pidfile.read_text())
    try:
        assert out.returncode == 137, out.stderr
        assert f"megaprov: {unit}: killing 1 process(es) of the job left behind: {rank}" in out.stdout
        assert not Path(f"/proc/{rank}").exists() or Path(f"/proc/{rank}/status").read_text().find("zombie") >= 0
        assert out.stdout.rstrip().splitlines()[-1].startswith("megaprov: node node00 (node rank 0): torchrun exited with 137")
    finally:
        subprocess.run(["kill", "-9", str(rank)], capture_output=True)


def test_a_stopped_node_script_leaves_the_reaping_to_execstop(tmp_path):
    # On `systemctl stop` the unit's ExecStop (a marked process of the same unit) sends SIGTERM and waits for the
    # node script; the node script must not kill it (ExecStop reaps after the node script exited).
    fake = tmp_path / "python"
    fake.write_text("#!/bin/bash\ntrap 'exit 143' TERM\nwhile :; do sleep 0.1; done\n")
    fake.chmod(0o755)
    s = spec("lab-tiny").model_copy(update={"launch": spec("lab-tiny").launch.model_copy(update={"python": str(fake)})})
    shared = tmp_path / "shared"
    (shared / "jobs" / s.name).mkdir(parents=True)
    script = tmp_path / "node00.sh"
    script.write_text(render.render(s, cluster_for(s, str(shared)), hosts(2)).nodes[0].script)
    env = {**os.environ, "MEGAPROV_JOB_UNIT": f"megaprov-job-stop-{os.getpid()}.service"}
    stopper = subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)
    node = subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        node.terminate()
        out, _ = node.communicate(timeout=30)
        assert node.returncode == 143, out
        assert "killing" not in out and stopper.poll() is None, "the node script killed its unit's ExecStop"
    finally:
        stopper.kill()
        node.kill()
