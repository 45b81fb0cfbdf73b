"""Rendered launches: golden pretrain_gpt.py arguments, every flag checked against Megatron-LM core_v0.16.1's own
parser (recorded in megaprov/training/megatron/flags-core_v0.16.1.json by scripts/dump-megatron-flags.py), torchrun
arguments checked by torch's parser, and scripts checked by bash."""

import difflib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from megaprov.errors import UsageError
from megaprov.training import jobspec, nodefacts, render
from megaprov.training.jobspec import JobSpecError
from megaprov.training.planner import GPUS
from tests.helpers.golden import UPDATE_COMMAND, example_jobs, golden_files
from tests.helpers.megatron import FLAGS, assert_megatron_accepts, parse_torchrun

ROOT = Path(__file__).resolve().parents[3]
JOBS = ROOT / "examples" / "jobs"
GOLDEN = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "golden"


def spec(name):
    return jobspec.load(JOBS / f"{name}.yml")


# A GPU site whose python stage installed Transformer Engine and apex (what the large examples are written for).
TE_SITE = nodefacts.NodeStack(
    transformer_engine="2.9.0", apex_gradient_accumulation=True, apex_softmax=True, apex_layer_norm=True, transformers="4.57.1", hosts=("node00",)
)


def cluster_for(s, shared="/shared", stack=TE_SITE, gpus_per_node=None):
    gpu = GPUS["cpu"] if s.launch.trainer == "lab" else GPUS["H100-SXM"]
    return nodefacts.KnownCluster(s.launch.nodes, gpus_per_node or s.launch.gpus_per_node, gpu, shared, stack=stack)


def hosts(n):
    return [(f"node{i:02d}", f"10.0.0.{i + 1}") for i in range(n)]


def assert_golden(job, name, text, golden_dir=GOLDEN):
    """Compare only: a golden file is rewritten by the separate command UPDATE_COMMAND, never by a test run."""
    golden = golden_dir / name
    assert golden.is_file(), f"no golden file {golden}: review what {job} renders and create it with {UPDATE_COMMAND} {job}"
    expected = golden.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), str(golden), "rendered now"))
        raise AssertionError(
            f"what {job} renders differs from {golden}:\n{diff}"
            f"if the change is intended, run {UPDATE_COMMAND} {job} (refused under CI) and commit the file"
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


@pytest.mark.parametrize("job", example_jobs())
def test_each_examples_arguments_are_megatrons(job):
    files = golden_files(job)
    assert_megatron_accepts(files[f"{job}.args"].splitlines())
    assert list(files)[:2] == [f"{job}.args", f"{job}.node0.sh"]


@pytest.mark.sync
@pytest.mark.parametrize("job", example_jobs())
def test_golden_files(job):
    """Each example's arguments, node script of rank 0 and sbatch script, as reviewed and committed."""
    for name, text in golden_files(job).items():
        assert_golden(job, name, text)


def test_every_golden_file_belongs_to_an_example():
    expected = {name for job in example_jobs() for name in golden_files(job)}
    assert {p.name for p in GOLDEN.iterdir()} == expected
    assert {"gpt3-175b-128nodes.sbatch", "lab-tiny.node0.sh", "lab-tiny.args"} <= expected


def test_a_differing_golden_file_fails_and_is_left_as_it_was(tmp_path, monkeypatch):
    # The old test rewrote its golden file when MEGAPROV_UPDATE_GOLDEN was set, then compared it with itself: the
    # variable must change nothing now, and the failure must name the update command.
    monkeypatch.setenv("MEGAPROV_UPDATE_GOLDEN", "1")
    rendered = (GOLDEN / "lab-tiny.args").read_text()
    stale = rendered.replace("--hidden-size\n", "--hidden-size\n9", 1)
    assert stale != rendered
    (tmp_path / "lab-tiny.args").write_text(stale)
    with pytest.raises(AssertionError, match=r"run \.venv/bin/python scripts/update_golden\.py lab-tiny \(refused under CI\)") as info:
        assert_golden("lab-tiny", "lab-tiny.args", rendered, tmp_path)
    assert "\n-964\n+64\n" in str(info.value)  # the diff is shown: golden 964, rendered 64 (lab-tiny's hidden size)
    assert (tmp_path / "lab-tiny.args").read_text() == stale
    with pytest.raises(AssertionError, match="create it with .*update_golden.py gpu-check"):
        assert_golden("gpu-check", "gpu-check.args", rendered, tmp_path)
    assert not (tmp_path / "gpu-check.args").exists()


def _update_golden(args, env_extra, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CI"} | env_extra
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "update_golden.py"), *args], env=env, capture_output=True, text=True, timeout=120)


def test_the_update_command_writes_what_the_golden_test_compares(tmp_path):
    (tmp_path / "gone.args").write_text("--old\n")
    out = _update_golden(["--dir", str(tmp_path)], {}, tmp_path)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in GOLDEN.iterdir())
    for path in GOLDEN.iterdir():
        assert (tmp_path / path.name).read_text() == path.read_text(), path.name
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
    rendered = render.render(slurm, cluster_for(slurm, gpus_per_node=4), hosts(2))
    assert rendered.sbatch is not None and rendered.slurm_node is not None
    assert "#SBATCH --gpus-per-node=4" in rendered.sbatch.splitlines() and "#SBATCH --nodes=2" in rendered.sbatch.splitlines()
    assert " --nnodes 2 --nproc-per-node 4 " in rendered.slurm_node


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
    # the venv's bin first: Megatron-LM's start-up `make` of the dataset helpers finds them built
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
    text, node = out.sbatch, out.slurm_node
    assert text is not None and node is not None
    for line in ("#SBATCH --nodes=128", "#SBATCH --gpus-per-node=8", "#SBATCH --partition=batch", "#SBATCH --time=4:00:00", "#SBATCH --requeue"):
        assert line in text.splitlines(), line
    assert 'srun --kill-on-bad-exit=1 --ntasks-per-node=1 --cpu-bind=none bash "$jdir/launch/slurm-node.sh" &' in text.splitlines()
    # the node script: torchrun with Slurm's node rank and the allocation's first node as the rendezvous
    assert '--node-rank "$rank" --master-addr "$MASTER_ADDR" --master-port 29500' in node
    assert "rank=${SLURM_NODEID:?}" in node.splitlines() and 'export PATH=/opt/megaprov/venv/bin:"$PATH"' in node.splitlines()
    for script in (text, node):
        result = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
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
    text = render.slurm_node_script(s.model_copy(update={"launch": launch}), cluster_for(s))
    assert "x@@MASTER@@y" in text and 'x"$MASTER_ADDR"y' not in text
    assert '--node-rank "$rank"' in text and '--master-addr "$MASTER_ADDR"' in text


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


EVERY_FIELD = """\
name: every-field
model:
  num_layers: 8
  hidden_size: 512
  num_attention_heads: 8
  num_query_groups: 2
  ffn_hidden_size: 1376
  seq_length: 256
  max_position_embeddings: 512
  vocab_size: 32000
  make_vocab_size_divisible_by: 64
  activation: squared_relu
  normalization: RMSNorm
  position_embedding: rope
  rotary_base: 500000
  attention_backend: flash
  untie_embeddings: true
  bias_linear: false
  init_method_std: 0.008
  hidden_dropout: 0.0
  attention_dropout: 0.25
parallel:
  tensor: 2
  pipeline: 2
  context: 2
  virtual_stages: 2
  sequence_parallel: true
  distributed_optimizer: true
  overlap_grad_reduce: true
  overlap_param_gather: true
  tp_comm_overlap: true
train:
  micro_batch_size: 2
  global_batch_size: 64
  train_iters: 300
  lr: 3.0e-4
  min_lr: 3.0e-5
  lr_decay_style: WSD
  lr_warmup_iters: 30
  weight_decay: 0.1
  adam_beta1: 0.8
  adam_beta2: 0.999
  clip_grad: 0.5
  precision: fp16
  recompute: full
  recompute_method: block
  recompute_num_layers: 2
  seed: 7
  log_interval: 5
  eval_interval: 100
  eval_iters: 3
data:
  prefixes:
    - path: data/a_text_document
      weight: 0.25
    - path: /mnt/s/data/b_text_document
      weight: 3
  split: "98,2"
  tokenizer:
    type: huggingface
    path: tok/llama3
checkpoint:
  directory: ckpt/every
  save_interval: 50
  format: torch
  resume: never
  async_save: true
launch:
  extra_args: ["--manual-gc"]
"""


def test_every_spec_field_reaches_its_flag():
    """Each field of a spec that sets every one away from its default, rendered for the shared directory /mnt/s on
    nodes with Transformer Engine: the expected argv is written out by hand from the spec above."""
    s = jobspec.parse(EVERY_FIELD)
    args = render.megatron_args(s, "/mnt/s", TE_SITE)
    # fmt: off
    assert args == [
        "--num-layers", "8", "--hidden-size", "512", "--ffn-hidden-size", "1376", "--num-attention-heads", "8",
        "--group-query-attention", "--num-query-groups", "2",
        "--seq-length", "256", "--max-position-embeddings", "512", "--position-embedding-type", "rope", "--rotary-base", "500000",
        "--normalization", "RMSNorm", "--attention-backend", "flash", "--squared-relu", "--untie-embeddings-and-output-weights",
        "--disable-bias-linear", "--init-method-std", "0.008", "--hidden-dropout", "0.0", "--attention-dropout", "0.25",
        "--make-vocab-size-divisible-by", "64",
        "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--context-parallel-size", "2",
        "--num-virtual-stages-per-pipeline-rank", "2",
        "--sequence-parallel", "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather", "--tp-comm-overlap",
        "--micro-batch-size", "2", "--global-batch-size", "64", "--train-iters", "300", "--lr", "0.0003", "--min-lr", "3e-05",
        "--lr-decay-style", "WSD", "--lr-decay-iters", "300", "--lr-warmup-iters", "30", "--weight-decay", "0.1",
        "--adam-beta1", "0.8", "--adam-beta2", "0.999", "--clip-grad", "0.5", "--fp16",
        "--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "2", "--seed", "7",
        "--data-path", "0.25", "/mnt/s/data/a_text_document", "3.0", "/mnt/s/data/b_text_document", "--split", "98,2",
        "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "/mnt/s/tok/llama3", "--legacy-tokenizer",
        "--save", "/mnt/s/ckpt/every", "--save-interval", "50", "--ckpt-format", "torch", "--async-save", "--exit-signal-handler",
        "--log-interval", "5", "--log-throughput", "--eval-interval", "100", "--eval-iters", "3",
        "--tensorboard-dir", "/mnt/s/jobs/every-field/tensorboard", "--distributed-backend", "nccl",
        "--transformer-impl", "transformer_engine", "--manual-gc",
    ]
    # fmt: on
    assert_megatron_accepts(args)
    # Without Transformer Engine or apex: the local implementation and each fused path switched off, RoPE's too
    bare = nodefacts.NodeStack(hosts=("node00",))
    assert render.megatron_args(s, "/mnt/s", bare)[-7:] == [
        "--transformer-impl",
        "local",
        "--no-gradient-accumulation-fusion",
        "--no-masked-softmax-fusion",
        "--no-persist-layer-norm",
        "--no-rope-fusion",
        "--manual-gc",
    ]


def test_other_tokenizers_and_the_defaults_they_leave():
    s = jobspec.parse(EVERY_FIELD)
    null = s.data.tokenizer.model_copy(update={"type": "null", "path": None, "vocab_size": 50000})
    model = s.model.model_copy(update={"num_query_groups": 8, "activation": "swiglu", "position_embedding": "learned_absolute"})
    train = s.train.model_copy(update={"recompute": "selective", "recompute_method": "uniform", "recompute_num_layers": 1, "lr_decay_iters": 250})
    s = s.model_copy(update={"data": s.data.model_copy(update={"tokenizer": null, "mock": True, "prefixes": []}), "model": model, "train": train})
    args = render.megatron_args(s, "/mnt/s", TE_SITE)
    joined = " ".join(args)
    assert "--tokenizer-type NullTokenizer --vocab-size 50000 --legacy-tokenizer --save" in joined
    assert "--mock-data --split" in joined and "--data-path" not in args
    assert "--group-query-attention" not in args and "--num-query-groups" not in args  # 8 groups of 8 heads: plain multi-head
    assert "--swiglu" in args and "--squared-relu" not in args and "--rotary-base" not in args
    assert "--recompute-granularity selective --seed" in joined and "--recompute-method" not in args
    assert "--lr-decay-iters 250 " in joined


def test_the_lab_jobs_stop_grace_by_hand():
    # lab-tiny: 2 layers, hidden 64, ffn 256, 4 heads, LayerNorm, biases, vocabulary 257 padded to 384, 128 learned
    # positions. Per layer: attention 64x192 + 192 + 64x64 + 64 = 16,640; MLP 64x256 + 256 + 256x64 + 64 = 33,088;
    # two LayerNorms 4 x 64 = 256: 49,984. Two layers 99,968 + embeddings 384x64 = 24,576 + positions 128x64 = 8,192
    # + final norm 128 = 132,864 parameters. fp32: 4 bytes of weights + 8 of Adam's moments = 12 bytes each.
    s = spec("lab-tiny")
    assert render.checkpoint_bytes(s) == 132_864 * 12 == 1_594_368
    # bf16 adds fp32 main weights: 2 + 4 + 8 = 14 bytes per parameter
    bf16 = s.model_copy(update={"train": s.train.model_copy(update={"precision": "bf16"})})
    assert render.checkpoint_bytes(bf16) == 132_864 * 14
    # at the default 1000 MB/s: 60 s + 2 x 0.0016 s written, rounded up = 61 s; the unit 60 s more; Slurm's lead 121 s
    assert render.stop_grace(s) == render.StopGrace(1_594_368, 1000.0, "default", 61, 121)


def test_sbatch_header_for_cpu_nodes_with_every_slurm_field():
    s = spec("lab-tiny")
    slurm = s.launch.slurm.model_copy(update={"partition": "p1", "account": "acct", "time": "1-00:00:00", "qos": "high"})
    s = s.model_copy(update={"launch": s.launch.model_copy(update={"launcher": "slurm", "slurm": slurm})})
    text = render.sbatch_script(s, cluster_for(s), {"NCCL_DEBUG": "INFO", "HOME": "/root"})
    head, body = text.split("\n\n", 1)
    assert head.splitlines() == [
        "#!/bin/bash",
        "#SBATCH --job-name=lab-tiny",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",  # no --gpus-per-node: CPU nodes
        "#SBATCH --exclusive",
        "#SBATCH --output=/shared/jobs/lab-tiny/logs/slurm-%j.out",
        "#SBATCH --open-mode=append",  # a continuation appends
        "#SBATCH --requeue",
        "#SBATCH --signal=B:USR1@121",  # the unit's 121 s (test above), above the 120 s floor; to the batch script
        "#SBATCH --partition=p1",
        "#SBATCH --account=acct",
        "#SBATCH --time=1-00:00:00",
        "#SBATCH --qos=high",
    ]
    lines = body.splitlines()
    assert lines[:3] == ["set -uo pipefail", "jdir=/shared/jobs/lab-tiny", "max_restarts=3"]
    assert """trap 'limit=1; scancel --signal=TERM "$SLURM_JOB_ID"' USR1""" in lines
    # the continuation: the same script, after this job (afterany), its id where megaprov follows it
    # (sbatch's own messages go to the events, its id is the last line it prints)
    events = "/shared/jobs/lab-tiny/logs/slurm.log"
    assert f'    next=$(sbatch --parsable --dependency=afterany:"$SLURM_JOB_ID" "$jdir/launch/job.sbatch" 2>>{events} | tail -n 1)' in lines
    assert '    echo "$next" >>"$jdir/launch/slurm-jobs"' in lines
    # a stop that came before this job started (a continuation already queued) ends it before srun
    assert lines.index('if [ -e "$jdir/launch/stop" ]; then  # megaprov job stop came first: this continuation does not train') < next(
        i for i, line in enumerate(lines) if line.startswith("srun ")
    )
    # the allocation's nodes are where the follower reads logs; the rendezvous is the first of them
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" >"$nodes.tmp" && mv -f "$nodes.tmp" "$nodes"  # the follower reads these logs' in lines
    # a run that trained to the end is finished even if the time-limit signal came as it ended
    assert lines.index('if [ "$rc" = 0 ]; then  # trained to the end (a time-limit signal that came as it finished changes nothing)') < lines.index(
        'if [ "$limit" = 1 ]; then continue_job "reached its time limit (saved)"; fi'
    )


def test_a_slurm_time_limit_shorter_than_the_save_before_it_is_refused():
    s = spec("lab-tiny")
    for time_limit, refused in (("3", True), ("4", True), ("5", False), ("00:30:00", False)):
        slurm = s.launch.slurm.model_copy(update={"time": time_limit})
        t = s.model_copy(update={"launch": s.launch.model_copy(update={"launcher": "slurm", "slurm": slurm})})
        if not refused:
            assert render.render(t, cluster_for(t), hosts(2)).sbatch is not None
            continue
        with pytest.raises(JobSpecError) as info:
            render.render(t, cluster_for(t), hosts(2))
        # lab-tiny's lead is 121 s (its stop grace); Slurm may signal 60 s early; one more minute to train
        assert str(info.value).startswith(
            f"launch.slurm.time={time_limit} ({int(time_limit) * 60} s) leaves no time to train: the ranks are told to save 121 s"
        )
        assert "set launch.slurm.time above 241 s (at least 5 minutes)" in str(info.value)
    node = render.slurm_node_script(s, cluster_for(s), {"NCCL_DEBUG": "INFO", "HOME": "/root"}).splitlines()
    exports = [line for line in node if line.startswith("export ")]
    assert exports == [
        "export CUDA_DEVICE_MAX_CONNECTIONS=1",
        "export NCCL_DEBUG=INFO",
        "export OMP_NUM_THREADS=4",
        "export PYTHONPATH=/opt/megatron-lm",
        "export PYTHONUNBUFFERED=1",
        "export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=61",
        'export PATH=/opt/megaprov/venv/bin:"$PATH"',
    ]
    assert "cd /shared/jobs/lab-tiny" in node and 'exec >>/shared/jobs/lab-tiny/logs/"$host".log 2>&1' in node
    assert node[node.index("child=$!") - 1].startswith("/opt/megaprov/venv/bin/python -m torch.distributed.run --nnodes 2 --nproc-per-node 1 ")


def test_the_per_gpu_shape_runs_one_task_per_gpu_with_slurms_rank_variables():
    s = spec("llama-8b-2nodes")
    slurm = s.launch.slurm.model_copy(update={"shape": "per-gpu"})
    s = s.model_copy(update={"launch": s.launch.model_copy(update={"launcher": "slurm", "slurm": slurm})})
    batch = render.sbatch_script(s, cluster_for(s))
    assert "#SBATCH --ntasks-per-node=8" in batch.splitlines() and "#SBATCH --gpus-per-node=8" in batch.splitlines()
    assert 'srun --kill-on-bad-exit=1 --ntasks-per-node=8 --cpu-bind=none bash "$jdir/launch/slurm-node.sh" &' in batch.splitlines()
    node = render.slurm_node_script(s, cluster_for(s)).splitlines()
    assert "export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS LOCAL_WORLD_SIZE=$SLURM_NTASKS_PER_NODE" in node
    assert "export MASTER_PORT=29500" in node
    launch = node[node.index("child=$!") - 1]
    assert launch.startswith("/opt/megaprov/venv/bin/python /opt/megatron-lm/pretrain_gpt.py ") and "torch.distributed.run" not in launch
    # local rank 0 speaks for the node: one start and one exit line per node, as with torchrun
    assert 'speaker=0; [ "$SLURM_LOCALID" = 0 ] && speaker=1' in node
    for script in (batch, "\n".join(node)):
        assert subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True).returncode == 0


def test_the_slurm_node_script_refuses_a_node_name_it_cannot_use_as_a_file_name(tmp_path):
    s = spec("lab-tiny")
    s = s.model_copy(update={"launch": s.launch.model_copy(update={"launcher": "slurm"})})
    script = tmp_path / "node.sh"
    script.write_text(render.slurm_node_script(s, cluster_for(s)))
    for name in ("../x", ".hidden", "a b"):
        proc = subprocess.run(
            ["bash", str(script)], env={"SLURMD_NODENAME": name, "SLURM_NODEID": "0", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True
        )
        assert proc.returncode == 2 and "unusable node name" in proc.stderr, (name, proc.stderr)


def test_the_node_script_header_and_environment():
    s = spec("llama-8b-2nodes")
    out = render.render(s, cluster_for(s), hosts(2), {"TORCH_DISTRIBUTED_DEBUG": "DETAIL", "PATH": "/evil"})
    node = out.nodes[1]
    assert (node.host, node.node_rank) == ("node01", 1)
    env = dict(node.env)
    assert env == {
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "OMP_NUM_THREADS": "4",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": "/opt/megatron-lm",
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(out.stop.torchrun_s),
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
        "NCCL_DEBUG": "WARN",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    lines = node.script.splitlines()
    assert lines[:4] == [
        "#!/bin/bash",
        "# megaprov job llama-8b: node node01, rank 1 of 2 (Megatron-LM core_v0.16.1)",
        "# Run by the unit megaprov-job-llama-8b.service; its output is appended to /shared/jobs/llama-8b/logs/node01.log.",
        "# Megatron-LM implementation: transformer_engine (forced by launch.extra_args); nodes: " + TE_SITE.describe(),
    ]
    assert "exec >>/shared/jobs/llama-8b/logs/node01.log 2>&1  # as the job user (a root-squashed share refuses root)" in lines
    assert "cd /shared/jobs/llama-8b" in lines
    assert any(">>/shared/jobs/llama-8b/logs/gpu-node01.csv 2>/dev/null &" in line for line in lines)
    assert 'echo "megaprov: node node01 (node rank 1): torchrun starting at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"' in lines
    assert "    --nproc-per-node 8 \\" in lines and "    --master-addr 10.0.0.1 \\" in lines and "    --lr 0.0003 \\" in lines
    assert (out.job, out.job_dir, out.checkpoint_dir) == ("llama-8b", "/shared/jobs/llama-8b", "/shared/checkpoints/llama-8b")
    assert out.transformer_impl == "transformer_engine" and out.stack == TE_SITE.describe()
    for extra, line in (
        (["--transformer-impl=local"], "local (forced by launch.extra_args)"),
        ([], "transformer_engine (chosen for the nodes)"),
    ):
        parallel = s.parallel.model_copy(update={"sequence_parallel": False, "tp_comm_overlap": False})  # local refuses it
        other = s.model_copy(update={"launch": s.launch.model_copy(update={"extra_args": extra}), "parallel": parallel})
        rendered = render.render(other, cluster_for(other), hosts(2))
        assert f"# Megatron-LM implementation: {line}; nodes: {TE_SITE.describe()}" in rendered.nodes[0].script.splitlines()
        assert rendered.transformer_impl == line.split()[0]


def _with_extra(s, extra):
    return s.model_copy(update={"launch": s.launch.model_copy(update={"extra_args": extra})})


def test_pass_through_arguments_are_checked_flag_by_flag():
    s = spec("gpt-345m-1node")

    def problems(extra):
        return [p.render() for p in render.check_extra_args(_with_extra(s, extra))]

    assert problems(["--use-flash-attn", "--wandb-project", "p", "--transformer-impl=local", "--attention-backend", "flash"]) == []
    assert problems(["x", "--use-flash-attn"]) == ["launch.extra_args[0]='x' is a value without a flag; start with a --flag"]
    assert problems(["--zzzzzz-qqqq"]) == [
        "launch.extra_args[0]=--zzzzzz-qqqq is not a Megatron-LM core_v0.16.1 argument; see pretrain_gpt.py --help of Megatron-LM core_v0.16.1"
    ]
    assert problems(["--manual-gc", "--transformer-impl=te"]) == [
        "launch.extra_args[1]: --transformer-impl te is not allowed; use one of inference_optimized, local, transformer_engine"
    ]
    assert problems(["--transformer-impl", "te"]) == [
        "launch.extra_args[0]: --transformer-impl te is not allowed; use one of inference_optimized, local, transformer_engine"
    ]
    # Arity, as Megatron-LM's argparse parser checks it when the job starts on every node: a value flag takes one
    # value, a switch none, a list flag any number, and a value needs its flag (these passed the check before)
    assert problems(["--seed"]) == problems(["--seed", "--manual-gc"]) == ["launch.extra_args[0]: --seed needs a value; write --seed VALUE"]
    assert problems(["--transformer-impl"]) == ["launch.extra_args[0]: --transformer-impl needs a value; write --transformer-impl VALUE"]
    assert problems(["--manual-gc", "x"]) == ["launch.extra_args[1]='x' is a value without a flag; put its --flag before it, or remove it"]
    assert problems(["--seed", "1", "2"]) == ["launch.extra_args[2]='2' is a value without a flag; put its --flag before it, or remove it"]
    assert problems(["--seed=1", "2"]) == ["launch.extra_args[1]='2' is a value without a flag; put its --flag before it, or remove it"]
    assert problems(["--manual-gc=1"]) == ["launch.extra_args[0]: --manual-gc takes no value; write --manual-gc alone"]
    assert problems(["--seed", "1", "--manual-gc", "--wandb-project=p", "--data-path", "1", "a", "2", "b"]) == []
    # an unknown flag is reported once, not its values too
    assert problems(["--zzzzzz-qqqq", "1", "2", "--seed", "3"]) == [
        "launch.extra_args[0]=--zzzzzz-qqqq is not a Megatron-LM core_v0.16.1 argument; see pretrain_gpt.py --help of Megatron-LM core_v0.16.1"
    ]


def test_a_forced_implementation_is_read_in_both_spellings():
    s = spec("gpt-345m-1node")
    for extra in (["--transformer-impl", "transformer_engine"], ["--transformer-impl=transformer_engine"]):
        forced = _with_extra(s, extra)
        assert render.selected_impl(forced, nodefacts.ROLE_DEFAULTS) == "transformer_engine"
        args = render.megatron_args(forced, "/shared", nodefacts.ROLE_DEFAULTS)
        # the spec's choice is not rendered twice, and the rules for a forced TE drop the fusions TE brings
        assert args.count("--transformer-impl") + args.count("--transformer-impl=transformer_engine") == 1
        assert "--no-persist-layer-norm" not in args and "--no-gradient-accumulation-fusion" in args
    assert render.selected_impl(s, nodefacts.ROLE_DEFAULTS) == "local"
    assert render.selected_impl(s, TE_SITE) == "transformer_engine"
    # a fusion the spec switches off itself is left to it
    args = render.megatron_args(_with_extra(s, ["--no-masked-softmax-fusion"]), "/shared", nodefacts.ROLE_DEFAULTS)
    assert args.count("--no-masked-softmax-fusion") == 1
    lab = spec("lab-tiny")
    assert (
        render.stack_args(lab, nodefacts.ROLE_DEFAULTS) == []
        and render.stack_problems(_with_extra(lab, ["--transformer-impl", "transformer_engine"]), nodefacts.NodeStack()) == []
    )


def test_render_refuses_what_the_inventory_gave_in_one_line_each():
    s = spec("lab-tiny")
    with pytest.raises(Exception, match="inventory host"):
        render.render(s, cluster_for(s), [("bad host", "10.0.0.1"), ("n2", "10.0.0.2")])
    with pytest.raises(Exception, match="ansible_host of n2"):
        render.render(s, cluster_for(s), [("n1", "10.0.0.1"), ("n2", "10.0.0.2;x")])
    with pytest.raises(Exception, match="megaprov_shared_dir"):
        render.render(s, cluster_for(s, "relative/dir"), hosts(2))
    outside = s.model_copy(update={"data": s.data.model_copy(update={"prefixes": [s.data.prefixes[0].model_copy(update={"path": "/data/x"})]})})
    with pytest.raises(JobSpecError) as info:
        render.render(outside, cluster_for(s), hosts(2))
    assert str(info.value) == (
        "data.prefixes path /data/x is not under the shared directory /shared; "
        "put prepared data on the shared directory (megaprov data prepare --output-prefix)"
    )
    assert info.value.problems[0].path == "data.prefixes"
    # every problem at once: the prefix, the checkpoint directory and the missing node
    both = outside.model_copy(update={"checkpoint": s.checkpoint.model_copy(update={"directory": "/shared/../etc"})})
    with pytest.raises(JobSpecError) as info:
        render.render(both, cluster_for(s), hosts(1))
    assert [p.path for p in info.value.problems] == ["checkpoint.directory", "data.prefixes", "launch.nodes"]
    assert info.value.problems[2].fix == "set launch.nodes to at most 1 or add nodes"
    # a shared directory with a trailing slash holds what is under it; a sibling with the same prefix does not
    assert render.render(s, cluster_for(s, "/shared/"), hosts(2)).checkpoint_dir == "/shared/checkpoints/lab-tiny"
    sibling = s.model_copy(update={"checkpoint": s.checkpoint.model_copy(update={"directory": "/shared2/ckpt"})})
    with pytest.raises(JobSpecError, match="checkpoint.directory=/shared2/ckpt is not a directory under the shared directory /shared"):
        render.render(sibling, cluster_for(s), hosts(2))
    # more inventory hosts than the job needs: the first ones, in rank order
    out = render.render(s, cluster_for(s), hosts(3))
    assert [(n.host, n.node_rank) for n in out.nodes] == [("node00", 0), ("node01", 1)]


def test_sbatch_refuses_what_sbatch_would_misread_naming_the_field():
    s = spec("lab-tiny")
    with pytest.raises(UsageError) as info:
        render.sbatch_script(s, cluster_for(s, "/my share"))
    assert str(info.value) == (
        "the job directory='/my share/jobs/lab-tiny' is not a path that can go on an #SBATCH line: use a shared directory of letters, digits and /._-"
    )
    for key in ("partition", "account", "qos"):
        slurm = s.launch.slurm.model_copy(update={key: "a b"})
        bad = s.model_copy(update={"launch": s.launch.model_copy(update={"slurm": slurm})})
        with pytest.raises(UsageError) as info:
            render.sbatch_script(bad, cluster_for(s))
        assert str(info.value).startswith(f"launch.slurm.{key}='a b' is not a plain Slurm name: use letters, digits")


def test_the_sbatch_lead_comes_from_the_clusters_write_speed():
    # lab-tiny's checkpoint is 1,594,368 bytes (test above). At 0.01 MB/s it takes 159.4368 s: torchrun's wait is
    # ceil(60 + 2 x 159.4368) = 379 s, the unit's 439 s, and Slurm's SIGTERM lead the same 439 s.
    s = spec("lab-tiny")
    slow = nodefacts.KnownCluster(2, 1, GPUS["cpu"], "/shared", stack=TE_SITE, write_mbps=0.01, write_source="inventory")
    assert render.stop_grace(s, slow) == render.StopGrace(1_594_368, 0.01, "inventory", 379, 439)
    text = render.sbatch_script(s, slow)
    assert "#SBATCH --signal=B:USR1@439" in text.splitlines()
    assert "export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=379" in render.slurm_node_script(s, slow).splitlines()
    out = render.render(s, slow, hosts(2))
    assert dict(out.nodes[0].env)["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == "379"
    assert "# Stop grace: 379 s from SIGTERM to torchrun's SIGKILL (checkpoint ~0.0 GB at 0.01 MB/s, inventory), the unit's TimeoutStopSec 439 s" in (
        out.nodes[0].script.splitlines()
    )


def test_without_an_implementation_flag_megatrons_own_default_is_the_one():
    # Megatron-LM core_v0.16.1's default --transformer-impl is transformer_engine (TransformerConfig.transformer_impl,
    # recorded in impl-core_v0.16.1.json): what runs when megaprov renders no choice (the lab trainer's argv, or a
    # forced flag left without its value, which check_extra_args refuses)
    assert render.selected_impl(spec("lab-tiny"), nodefacts.ROLE_DEFAULTS) == "transformer_engine"
    assert render.selected_impl(_with_extra(spec("gpt-345m-1node"), ["--transformer-impl"]), nodefacts.ROLE_DEFAULTS) == "transformer_engine"
