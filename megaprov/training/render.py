"""Launch rendering: the exact Megatron-LM arguments, the torchrun command and environment per node, and an
sbatch script. Pure functions: a job spec and a cluster in, text and argv out.

The arguments target Megatron-LM ``core_v0.16.1`` (``PINNED_MEGATRON``); its complete flag list, produced by
running that version's own ``add_megatron_arguments`` parser, is ``megaprov/training/megatron/flags-<tag>.json``, and
pass-through arguments are checked against it. Which transformer implementation and fused paths an argv selects,
what each needs on the nodes and the arguments megaprov adds for what the nodes have are facts read from that
version's code, in ``megaprov/training/megatron/impl-<tag>.json``; what the nodes have is :mod:`megaprov.training.nodefacts`.
"""

from __future__ import annotations

import difflib
import json
import math
import posixpath
import shlex
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from ansible_collections.megaprov.cluster.plugins.module_utils import gpu_query
from megaprov import values
from megaprov.training import container, planner
from megaprov.training.jobspec import PINNED_MEGATRON, JobSpec, JobSpecError, Problem
from megaprov.training.nodefacts import DEFAULT_WRITE_MBPS, ROLE_DEFAULTS, NodeStack, stack_of, write_speed
from megaprov.training.planner import Cluster

# Environment every rank gets. CUDA_DEVICE_MAX_CONNECTIONS=1 keeps tensor-parallel communication kernels
# ordered ahead of compute (Megatron-LM requires it for sequence parallelism and communication overlap).
BASE_ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "OMP_NUM_THREADS": "4", "PYTHONUNBUFFERED": "1"}
# Written on every node by the fabric stage: NCCL_SOCKET_IFNAME, NCCL_IB_HCA, GLOO_SOCKET_IFNAME, ...
NCCL_ENV_FILE = "/etc/megaprov/nccl.env"
# The lab trainer is copied into the job directory (nodes need torch and megatron-core, not megaprov).
LAB_TRAINER_FILE = "bin/megaprov_trainer.py"
# Unit names on the nodes: one service per job and node.
UNIT_PREFIX = "megaprov-job-"


def unit_name(job: str) -> str:
    return f"{UNIT_PREFIX}{job}.service"


def node_log(job_directory: str, host: str) -> str:
    """Where a node's unit appends everything its torchrun and ranks print."""
    return posixpath.join(job_directory, "logs", f"{host}.log")


def gpu_samples(job_directory: str, host: str) -> str:
    return posixpath.join(job_directory, "logs", f"gpu-{host}.csv")


@cache
def megatron_flags(tag: str = PINNED_MEGATRON) -> dict[str, dict[str, Any]]:
    """Every ``--flag`` of ``pretrain_gpt.py`` at ``tag``: kind (switch/value/list) and choices."""
    text = resources.files("megaprov.training").joinpath(f"megatron/flags-{tag}.json").read_text(encoding="utf-8")
    flags: dict[str, dict[str, Any]] = json.loads(text)["flags"]
    return flags


@cache
def megatron_impl(tag: str = PINNED_MEGATRON) -> dict[str, Any]:
    """Facts read from Megatron-LM at ``tag``: defaults of the implementation and fusion switches, what each needs,
    and the rules megaprov renders by (``impl-<tag>.json``)."""
    text = resources.files("megaprov.training").joinpath(f"megatron/impl-{tag}.json").read_text(encoding="utf-8")
    table: dict[str, Any] = json.loads(text)
    return table


def _forced(spec: JobSpec) -> dict[str, str]:
    """Implementation and fusion flags the spec passes itself (launch.extra_args): the spec's choice wins."""
    out: dict[str, str] = {}
    items = spec.launch.extra_args
    for i, item in enumerate(items):
        name, _, inline = item.partition("=")
        if name == "--transformer-impl":
            out[name] = inline or (items[i + 1] if i + 1 < len(items) else "")
        elif name.startswith("--no-") and name.endswith(("-fusion", "-layer-norm")):
            out[name] = ""
    return out


def stack_args(spec: JobSpec, stack: NodeStack = ROLE_DEFAULTS, tag: str = PINNED_MEGATRON) -> list[str]:
    """The implementation and fused-path arguments for what the nodes have: Transformer Engine's implementation where
    every node has it, Megatron-LM's local one otherwise, and each fused path whose kernel some node lacks switched
    off (``rules`` of ``impl-<tag>.json``). A flag the spec passes in launch.extra_args is left to it."""
    if spec.launch.trainer != "megatron-lm":  # the lab trainer has its own CPU layers
        return []
    forced = _forced(spec)
    model = {"position_embedding": spec.model.position_embedding, "normalization": spec.model.normalization}
    # A forced implementation decides the rules that depend on it (a force the nodes cannot satisfy is refused by
    # stack_problems, never rendered around).
    have = {"transformer_engine": forced["--transformer-impl"] == "transformer_engine"} if "--transformer-impl" in forced else {}
    out: list[str] = []
    for rule in megatron_impl(tag)["rules"]:
        if rule["args"][0] in forced:
            continue
        on = all(have.get(k, stack.capability(k)) == v for k, v in rule["stack"].items())
        if on and all(model.get(k) == v for k, v in rule.get("model", {}).items()):
            out += rule["args"]
    return out


def selected_impl(spec: JobSpec, stack: NodeStack = ROLE_DEFAULTS) -> str:
    forced = _forced(spec).get("--transformer-impl")
    if forced:
        return forced
    args = stack_args(spec, stack)
    return (
        args[args.index("--transformer-impl") + 1] if "--transformer-impl" in args else str(megatron_impl()["defaults"]["transformer_impl"]["value"])
    )


def stack_problems(spec: JobSpec, stack: NodeStack) -> list[Problem]:
    """What the spec asks of the nodes that they do not have (one problem each, before any host is contacted)."""
    if spec.launch.trainer != "megatron-lm":
        return []
    problems: list[Problem] = []
    impl = selected_impl(spec, stack)
    forced = _forced(spec)
    install = "install it on the nodes (megatron_transformer_engine: true, then megaprov bootstrap --tags python)"
    # Refused whether the nodes' facts are known or assumed (the roles' defaults install no Transformer Engine): a job
    # launched with an implementation its nodes lack fails at model build on every rank, after the queue and the start.
    if forced.get("--transformer-impl") == "transformer_engine" and stack.transformer_engine is None:
        problems.append(
            Problem(
                "launch.extra_args",
                f"launch.extra_args forces --transformer-impl transformer_engine but the nodes have no Transformer Engine ({stack.describe()})",
                f"{install}, or drop --transformer-impl from launch.extra_args",
            )
        )
    apex_norm = stack.apex_layer_norm and spec.model.normalization == "LayerNorm"
    if spec.parallel.sequence_parallel and impl == "local" and not apex_norm:
        problems.append(
            Problem(
                "parallel.sequence_parallel",
                "parallel.sequence_parallel=true needs Transformer Engine on the nodes (Megatron-LM's local layers use torch's "
                f"{spec.model.normalization}, which refuses sequence parallelism); {stack.describe()}",
                f"{install}, or set parallel.sequence_parallel: false",
            )
        )
    if spec.data.tokenizer.type == "huggingface" and stack.transformers is None:
        problems.append(
            Problem(
                "data.tokenizer.type",
                "data.tokenizer.type=huggingface needs transformers on the nodes (Megatron-LM's HuggingFaceTokenizer calls "
                f"transformers.AutoTokenizer on data.tokenizer.path); {stack.describe()}, without transformers",
                "install it on the nodes (megatron_huggingface: true, then megaprov bootstrap --tags python)",
            )
        )
    return problems


# ---- stopping: SIGTERM -> checkpoint (--exit-signal-handler) -> exit, before anything sends SIGKILL
# torchrun (torch.distributed.elastic) sends the ranks SIGTERM and SIGKILLs them after a wait: 30 s unless
# TORCH_ELASTIC_SHUTDOWN_TIMEOUT (or torchrun --shutdown-timeout) says otherwise (torch 2.13:
# torch/distributed/launcher/api.py LaunchConfig.shutdown_timeout, elastic/multiprocessing/api.py _close).
TORCHRUN_DEFAULT_GRACE = 30
STOP_BASE_S = 60  # the iteration in flight ends and the checkpoint is opened and finalised
STOP_WRITE_FACTOR = 2.0  # the measured (or assumed) write speed is not promised under 1000 ranks writing at once
STOP_MAX_S = 6 * 3600
STOP_MARGIN_S = 60  # the unit's TimeoutStopSec over torchrun's wait: torchrun and the node script exit, reaping


@dataclass(frozen=True)
class StopGrace:
    checkpoint_bytes: int
    write_mbps: float
    write_source: str
    torchrun_s: int  # TORCH_ELASTIC_SHUTDOWN_TIMEOUT: SIGTERM to SIGKILL of the ranks
    unit_s: int  # the unit's TimeoutStopSec (and Slurm's --signal=TERM@ lead)


def write_speed_default() -> tuple[float, str]:
    return DEFAULT_WRITE_MBPS, "default"


def checkpoint_bytes(spec: JobSpec) -> int:
    """Bytes one checkpoint writes: the weights in the training precision, plus fp32 main weights with mixed
    precision, plus Adam's two fp32 moments."""
    params = planner.parameter_count(spec)["total"]
    mixed = spec.train.precision in ("bf16", "fp16")
    return params * ((2 + 4) if mixed else 4) + params * 8


def stop_grace(spec: JobSpec, cluster: Cluster | None = None) -> StopGrace:
    """How long a stop may take: torchrun's SIGTERM-to-SIGKILL wait sized from the checkpoint and the shared
    directory's write speed (``megatron_checkpoint_write_mbps``, else a conservative default), bounded."""
    mbps, source = write_speed(cluster) if cluster is not None else write_speed_default()
    size = checkpoint_bytes(spec)
    write_s = size / (mbps * 1e6)
    torchrun = int(min(STOP_MAX_S, max(TORCHRUN_DEFAULT_GRACE, math.ceil(STOP_BASE_S + STOP_WRITE_FACTOR * write_s))))
    return StopGrace(size, mbps, source, torchrun, torchrun + STOP_MARGIN_S)


@dataclass(frozen=True)
class NodeLaunch:
    host: str
    node_rank: int
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    script: str


@dataclass(frozen=True)
class Rendered:
    job: str
    job_dir: str
    checkpoint_dir: str
    megatron_args: tuple[str, ...]
    nodes: tuple[NodeLaunch, ...]
    sbatch: str | None
    stack: str = ""  # what the implementation choice rests on (node facts, or what was assumed)
    transformer_impl: str = ""
    stop: StopGrace | None = None
    slurm_node: str | None = None  # what srun runs on each node (launcher slurm)


def _under(shared: str, path: str) -> str:
    return path if path.startswith("/") else posixpath.join(shared, path)


def checkpoint_dir(spec: JobSpec, shared_dir: str) -> str:
    if spec.checkpoint.directory is None:
        return posixpath.join(shared_dir, "checkpoints", spec.name)
    return posixpath.normpath(_under(shared_dir, spec.checkpoint.directory))


def job_dir(spec: JobSpec, shared_dir: str) -> str:
    return posixpath.join(shared_dir, "jobs", spec.name)


def _num(value: float) -> str:
    return repr(value) if isinstance(value, float) and not value.is_integer() else (f"{value:.1f}" if isinstance(value, float) else str(value))


def megatron_args(spec: JobSpec, shared_dir: str = "/shared", stack: NodeStack = ROLE_DEFAULTS) -> list[str]:
    """``pretrain_gpt.py`` arguments for the spec (the same list drives the lab trainer), with the implementation and
    fused paths the nodes' ``stack`` supports."""
    m, p, t, d, c = spec.model, spec.parallel, spec.train, spec.data, spec.checkpoint
    a: list[str] = []

    def opt(flag: str, value: Any) -> None:
        a.extend([flag, _num(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)])

    opt("--num-layers", m.num_layers)
    opt("--hidden-size", m.hidden_size)
    opt("--ffn-hidden-size", m.ffn)
    opt("--num-attention-heads", m.num_attention_heads)
    if m.num_query_groups is not None and m.num_query_groups != m.num_attention_heads:
        a.append("--group-query-attention")
        opt("--num-query-groups", m.num_query_groups)
    opt("--seq-length", m.seq_length)
    opt("--max-position-embeddings", m.max_positions)
    opt("--position-embedding-type", m.position_embedding)
    if m.position_embedding == "rope":
        opt("--rotary-base", m.rotary_base)
    opt("--normalization", m.normalization)
    opt("--attention-backend", m.attention_backend)
    if m.activation == "swiglu":
        a.append("--swiglu")
    elif m.activation == "squared_relu":
        a.append("--squared-relu")
    if m.untie_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if not m.bias_linear:
        a.append("--disable-bias-linear")
    opt("--init-method-std", m.init_method_std)
    opt("--hidden-dropout", m.hidden_dropout)
    opt("--attention-dropout", m.attention_dropout)
    opt("--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by)

    opt("--tensor-model-parallel-size", p.tensor)
    opt("--pipeline-model-parallel-size", p.pipeline)
    opt("--context-parallel-size", p.context)
    if p.virtual_stages and p.virtual_stages > 1:
        opt("--num-virtual-stages-per-pipeline-rank", p.virtual_stages)
    for flag, on in (
        ("--sequence-parallel", p.sequence_parallel),
        ("--use-distributed-optimizer", p.distributed_optimizer),
        ("--overlap-grad-reduce", p.overlap_grad_reduce),
        ("--overlap-param-gather", p.overlap_param_gather),
        ("--tp-comm-overlap", p.tp_comm_overlap),
    ):
        if on:
            a.append(flag)
    if spec.launch.elastic and p.overlap_grad_reduce and "--ddp-bucket-size" not in _forced(spec):
        # Megatron-LM sizes the gradient buckets from the data-parallel size (max(40M, 1M x DP) elements) and a
        # dp_reshardable checkpoint stores one tensor per bucket: the full job's size, fixed, keeps them loadable.
        full_dp = spec.launch.nodes * spec.launch.gpus_per_node // max(p.tensor * p.pipeline * p.context, 1) * p.context
        opt("--ddp-bucket-size", max(40_000_000, 1_000_000 * full_dp))

    opt("--micro-batch-size", t.micro_batch_size)
    opt("--global-batch-size", t.global_batch_size)
    opt("--train-iters", t.train_iters)
    opt("--lr", t.lr)
    opt("--min-lr", t.min_lr)
    opt("--lr-decay-style", t.lr_decay_style)
    opt("--lr-decay-iters", t.lr_decay_iters or t.train_iters)
    opt("--lr-warmup-iters", t.lr_warmup_iters)
    opt("--weight-decay", t.weight_decay)
    opt("--adam-beta1", t.adam_beta1)
    opt("--adam-beta2", t.adam_beta2)
    opt("--clip-grad", t.clip_grad)
    if t.precision != "fp32":
        a.append(f"--{t.precision}")
    if t.recompute != "none":
        opt("--recompute-granularity", t.recompute)
        if t.recompute == "full":
            opt("--recompute-method", t.recompute_method)
            opt("--recompute-num-layers", t.recompute_num_layers)
    opt("--seed", t.seed)

    if d.mock:
        a.append("--mock-data")
    else:
        a.append("--data-path")
        for prefix in d.prefixes:
            a.extend([_num(prefix.weight), _under(shared_dir, prefix.path)])
    opt("--split", d.split)
    tok = d.tokenizer
    if tok.type == "byte":  # 256 byte values; Megatron's NullTokenizer adds the end-of-document id 256
        a.extend(["--tokenizer-type", "NullTokenizer", "--vocab-size", "256"])
    elif tok.type == "null":
        a.extend(["--tokenizer-type", "NullTokenizer", "--vocab-size", str(tok.vocab_size)])
    elif tok.type == "gpt2-bpe":
        a.extend(
            [
                "--tokenizer-type",
                "GPT2BPETokenizer",
                "--vocab-file",
                _under(shared_dir, tok.vocab_file or ""),
                "--merge-file",
                _under(shared_dir, tok.merge_file or ""),
            ]
        )
    else:
        a.extend(["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", _under(shared_dir, tok.path or "")])
    if spec.launch.trainer == "megatron-lm":
        # core_v0.16.1's pretrain_gpt.py builds its datasets' tokenizer through megatron.core.tokenizers unless
        # --legacy-tokenizer is given, and that path looks GPT2BPETokenizer up by Hugging Face Hub name ("gpt2", through
        # transformers; megatron/core/tokenizers/text/libraries/megatron_hf_tokenizer.py) instead of reading the vocab and
        # merge files given. The legacy path (megatron/training/tokenizer) reads the files, and is the one the
        # model's own tokenizer (get_tokenizer) uses anyway.
        a.append("--legacy-tokenizer")

    ckpt = checkpoint_dir(spec, shared_dir)
    opt("--save", ckpt)
    if c.resume == "auto":  # Megatron starts from scratch when the directory holds no checkpoint yet
        opt("--load", ckpt)
    opt("--save-interval", c.save_interval)
    opt("--ckpt-format", c.format)
    if c.async_save:
        a.append("--async-save")
    a.append("--exit-signal-handler")  # SIGTERM (systemd stop, Slurm preemption) saves a checkpoint, then exits

    opt("--log-interval", t.log_interval)
    a.append("--log-throughput")
    opt("--eval-interval", t.eval_interval)
    opt("--eval-iters", t.eval_iters)
    opt("--tensorboard-dir", posixpath.join(job_dir(spec, shared_dir), "tensorboard"))
    opt("--distributed-backend", "gloo" if spec.launch.trainer == "lab" else "nccl")
    a.extend(stack_args(spec, stack))
    a.extend(spec.launch.extra_args)
    return a


def check_extra_args(spec: JobSpec, tag: str = PINNED_MEGATRON) -> list[Problem]:
    """Pass-through arguments must be flags of the pinned Megatron-LM, each with the values its parser takes: a value
    flag one value (after it, or after ``=``), a switch none, and no value without its flag (pretrain_gpt.py's parser
    refuses all of these at start-up, on every node)."""
    flags = megatron_flags(tag)
    problems = []
    args = spec.launch.extra_args
    values_at: set[int] = set()  # positions that hold the value of a flag before them
    for i, item in enumerate(args):
        if not item.startswith("--"):
            if i not in values_at:
                fix = "start with a --flag" if i == 0 else "put its --flag before it, or remove it"
                problems.append(Problem("launch.extra_args", f"launch.extra_args[{i}]={item!r} is a value without a flag", fix))
            continue
        name, eq, inline = item.partition("=")
        end = i + 1
        while end < len(args) and not args[end].startswith("--"):
            end += 1
        following = range(i + 1, end)  # the values right after it
        if name not in flags:
            values_at.update(following)  # its values are not reported again
            close = difflib.get_close_matches(name, list(flags), n=1)
            hint = f"did you mean {close[0]}?" if close else f"see pretrain_gpt.py --help of Megatron-LM {tag}"
            problems.append(Problem("launch.extra_args", f"launch.extra_args[{i}]={name} is not a Megatron-LM {tag} argument", hint))
            continue
        kind = flags[name]["kind"]
        if kind == "switch" and eq:
            problems.append(Problem("launch.extra_args", f"launch.extra_args[{i}]: {name} takes no value", f"write {name} alone"))
            continue
        if kind == "list":
            values_at.update(following)
        elif kind == "value" and not eq:
            if not following:
                problems.append(Problem("launch.extra_args", f"launch.extra_args[{i}]: {name} needs a value", f"write {name} VALUE"))
                continue
            values_at.add(following[0])
        choices = flags[name].get("choices")
        value = inline or (args[i + 1] if i + 1 < len(args) else "")
        if choices and value not in choices and not value.startswith("--"):
            problems.append(
                Problem("launch.extra_args", f"launch.extra_args[{i}]: {name} {value} is not allowed", f"use one of {', '.join(choices)}")
            )
    return problems


def megatron_problems(spec: JobSpec, tag: str = PINNED_MEGATRON) -> list[Problem]:
    """What Megatron-LM at the pinned tag refuses in the spec whatever the nodes hold, before any host is contacted
    (``job check`` too): the pass-through arguments (:func:`check_extra_args`), a Hugging Face tokenizer given as a file
    where it loads a directory, and FIM, which validate_args refuses with the --legacy-tokenizer megaprov renders."""
    problems = check_extra_args(spec, tag)
    if spec.launch.trainer != "megatron-lm":
        return problems
    tokenizer = spec.data.tokenizer
    if tokenizer.type == "huggingface" and (tokenizer.path or "").endswith(".json"):
        # AutoTokenizer.from_pretrained takes a directory (transformers 4.x: tokenizer_config.json, and config.json when
        # that names no tokenizer_class); a lone tokenizer.json fails at initialize on every rank
        problems.append(
            Problem(
                "data.tokenizer.path",
                f"data.tokenizer.path={tokenizer.path} is a file: Megatron-LM's HuggingFaceTokenizer loads a tokenizer directory "
                "(AutoTokenizer.from_pretrained)",
                "point it at the directory saved by save_pretrained (tokenizer.json, tokenizer_config.json, config.json)",
            )
        )
    if any(item.partition("=")[0] == "--fim-data" for item in spec.launch.extra_args):
        problems.append(
            Problem(
                "launch.extra_args",
                "launch.extra_args --fim-data needs Megatron-LM's new tokenizer path (validate_args refuses FIM with "
                "--legacy-tokenizer), which looks tokenizers up on the Hugging Face Hub; megaprov renders --legacy-tokenizer",
                "drop --fim-data",
            )
        )
    return problems


# Debug switches an operator may export before `megaprov train`: passed to every rank unless the spec sets them.
PASS_THROUGH_ENV = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "TORCH_DISTRIBUTED_DEBUG", "TORCH_NCCL_ASYNC_ERROR_HANDLING")


def _env(spec: JobSpec, passed: dict[str, str] | None = None, grace: StopGrace | None = None) -> dict[str, str]:
    env = dict(BASE_ENV)
    # pretrain_gpt.py's own directory is first on sys.path, so a job imports the checkout's megatron.core (not the
    # installed wheel): said once, here, and the lab trainer gets the same. The checkout's dataset helpers were built
    # there at install time by the megatron role (the venv's python and pybind11), so Megatron-LM's runtime `make` is a
    # no-op. Where the nodes have no checkout (megatron_checkout: false) the path does not exist and the wheel serves.
    env["PYTHONPATH"] = spec.launch.megatron_dir
    if spec.data.tokenizer.type == "huggingface":
        # the tokenizer's files are on the shared directory (data.tokenizer.path): never fetched from the Hub at run time
        env["HF_HUB_OFFLINE"] = "1"
        env["TRANSFORMERS_OFFLINE"] = "1"
    if grace is not None:
        env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(grace.torchrun_s)
    env.update({k: v for k, v in (passed or {}).items() if k in PASS_THROUGH_ENV})
    env.update(spec.launch.env)
    if spec.launch.container is not None:
        env.update(spec.launch.container.env)
    return env


def _entry(spec: JobSpec, shared_dir: str) -> list[str]:
    if spec.launch.trainer == "lab":
        return [posixpath.join(job_dir(spec, shared_dir), LAB_TRAINER_FILE)]
    return [posixpath.join(spec.launch.megatron_dir, "pretrain_gpt.py")]


def torchrun_argv(
    spec: JobSpec, nodes: int, gpus_per_node: int, node_rank: int, master: str, shared_dir: str, stack: NodeStack = ROLE_DEFAULTS
) -> list[str]:
    """The command one node runs: torchrun with a static rendezvous on node rank 0 (its agent hosts the store).
    torchrun does not restart ranks itself: after a failure every torchrun exits, each node's systemd unit starts it
    again (up to ``launch.max_restarts``) and all ranks resume from the latest checkpoint. (Measured on the lab:
    torchrun's elastic restarts over a c10d rendezvous failed to re-form the group after a rank was killed, the
    gloo mesh of the new attempt reaching the dead rank's address, and a re-started c10d rendezvous of the same id
    reported itself closed.)"""
    return [
        spec.launch.interpreter,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(nodes),
        "--nproc-per-node",
        str(gpus_per_node),
        "--node-rank",
        str(node_rank),
        "--master-addr",
        master,
        "--master-port",
        str(spec.launch.master_port),
        "--max-restarts",
        "0",
        *_entry(spec, shared_dir),
        *megatron_args(spec, shared_dir, stack),
    ]


# The job's unit marks every process of the job on a node (Environment=): the node script, torchrun, the ranks, the GPU
# sampler. What is left of a job is found by it, wherever those processes were reparented.
JOB_MARKER = "MEGAPROV_JOB_UNIT"
# A bash function (builtins only while it scans, so nothing it starts is mistaken for the job): SIGKILL every process
# marked as job $1 on this node except the caller, then, inside the job's own unit, wait until the unit's control
# group holds nothing but the caller (a killed rank may take a moment to exit); at most ~10 s. The node script calls
# it when torchrun ended, whatever ended it: ranks orphaned by a killed torchrun wait in collectives for peers that
# are gone, and a unit whose main process exits with processes left waits for them up to TimeoutStopSec before it
# restarts (the lab's systemd, on cgroup v1 inside a container, is never told that the group became empty).
REAP_FUNCTION = r"""reap_job() {
    local unit=$1 environ pid entry line tries procs=""
    local -a left
    [ -n "$unit" ] || return 0
    while IFS= read -r line; do  # the unit's own group (v1: name=systemd, v2: 0::), when this runs in the unit
        case $line in
            *:name=systemd:*/"$unit") procs=/sys/fs/cgroup/systemd${line#*:name=systemd:}/cgroup.procs ;;
            0::*/"$unit") [ -n "$procs" ] || procs=/sys/fs/cgroup${line#0::}/cgroup.procs ;;
        esac
    done </proc/$$/cgroup
    for ((tries = 0; tries < 50; tries++)); do
        left=()
        for environ in /proc/[0-9]*/environ; do
            pid=${environ#/proc/}
            pid=${pid%/environ}
            [ "$pid" = "$$" ] && continue
            while IFS= read -r -d '' entry; do
                if [ "$entry" = "MEGAPROV_JOB_UNIT=$unit" ]; then left+=("$pid"); break; fi
            done 2>/dev/null <"$environ"
        done 2>/dev/null
        if [ -n "$procs" ] && [ -r "$procs" ]; then
            while IFS= read -r pid; do
                [ "$pid" = "$$" ] || [[ " ${left[*]} " == *" $pid "* ]] || left+=("$pid")
            done <"$procs"
        fi
        [ ${#left[@]} -eq 0 ] && return 0
        [ "$tries" = 0 ] && echo "megaprov: $unit: killing ${#left[@]} process(es) of the job left behind: ${left[*]}"
        kill -KILL "${left[@]}" 2>/dev/null
        sleep 0.2
    done
}"""


START_LINE = "megaprov: node {host} (node rank {rank}): torchrun starting at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"
EXIT_LINE = "megaprov: node {host} (node rank {rank}): torchrun exited with $rc at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"
# launch.elastic: the start line also says how many nodes this run of torchrun spans (the follower files each
# iteration under its node count, and the report splits the run into segments by it); older parsers read up to "at".
ELASTIC_NODES = " on {nodes} nodes"
GPU_QUERY = ",".join(gpu_query.SAMPLES)  # follow.gpu_samples reads the answer by these names


def _script(
    spec: JobSpec,
    host: str,
    rank: int,
    nodes: int,
    env: dict[str, str],
    argv: list[str],
    shared_dir: str,
    about: tuple[str, ...] = (),
    gpus: bool = True,
) -> str:
    jdir = job_dir(spec, shared_dir)
    box = spec.launch.container
    runner = container.podman_lines(spec, box, shared_dir, jdir, rank, env, gpus) if box else []
    samples = shlex.quote(gpu_samples(jdir, host))
    lines = [
        "#!/bin/bash",
        f"# megaprov job {spec.name}: node {host}, rank {rank} of {nodes} (Megatron-LM {PINNED_MEGATRON})",
        f"# Run by the unit {unit_name(spec.name)}; its output is appended to {node_log(jdir, host)}.",
        *(f"# {line}" for line in about),
        "set -uo pipefail",
        f"exec >>{shlex.quote(node_log(jdir, host))} 2>&1  # as the job user (a root-squashed share refuses root)",
        f"if [ -r {NCCL_ENV_FILE} ]; then set -a; . {NCCL_ENV_FILE}; set +a; fi",
        *(f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())),
        *([] if box else [_path_line(spec)]),  # in a container the image's interpreter is not the host's: its PATH stays
        f"cd {shlex.quote(jdir)}",
        "if command -v nvidia-smi >/dev/null 2>&1; then  # GPU utilisation and memory for the verdict, every 2 s",
        f"    nvidia-smi --query-gpu={GPU_QUERY} --format=csv,noheader,nounits -lms 2000 >>{samples} 2>/dev/null &",
        "    sampler=$!",
        "    trap 'kill $sampler 2>/dev/null' EXIT",
        "fi",
        f'echo "{START_LINE.format(host=host, rank=rank)}{ELASTIC_NODES.format(nodes=nodes) if spec.launch.elastic else ""}"',
        "# systemctl stop sends SIGTERM here only (KillMode=mixed): pass it to torchrun, which passes it to the ranks",
        "# (--exit-signal-handler: they save a checkpoint), and wait for them; 143 = stopped on purpose.",
        "stopping=0",
        'child=""',
        "trap 'stopping=1; [ -z \"$child\" ] || kill -TERM $child 2>/dev/null' TERM",
        *runner,
        f'if [ "$stopping" = 1 ]; then echo "{EXIT_LINE.format(host=host, rank=rank).replace("$rc", "143")}"; exit 143; fi  # a stop came first',
        " \\\n    ".join((['"${podman[@]}"'] if box else []) + _pairs(argv)) + " &",
        "child=$!",
        "wait $child",
        "rc=$?",
        'if [ "$stopping" = 1 ]; then wait $child; rc=143; fi',
        *(container.podman_after_lines(spec, rank) if box else []),
        "# Nothing of the job outlives torchrun: the unit restarts RestartSec after a failure, not after TimeoutStopSec.",
        "# (On a stop, the unit's ExecStop waits for this script and reaps after it: it is in the group, left alone here.)",
        *REAP_FUNCTION.splitlines(),
        f'if [ "$stopping" != 1 ]; then reap_job "${{{JOB_MARKER}:-}}"; fi',
        f'echo "{EXIT_LINE.format(host=host, rank=rank)}"',
        "exit $rc",
    ]
    return "\n".join(lines) + "\n"


def _impl_line(spec: JobSpec, impl: str, stack: NodeStack) -> str:
    how = "forced by launch.extra_args" if "--transformer-impl" in _forced(spec) else "chosen for the nodes"
    return f"Megatron-LM implementation: {impl} ({how}); nodes: {stack.describe()}"


def _path_line(spec: JobSpec) -> str:
    """The training environment's bin first on PATH: what Megatron-LM runs by name at start-up (``make`` of the
    dataset helpers calls ``python3``) is the venv's, as when the megatron role built them."""
    return f'export PATH={shlex.quote(posixpath.dirname(spec.launch.interpreter))}:"$PATH"'


def _pairs(argv: list[str]) -> list[str]:
    """Group a flag with its values, one per line, for readable scripts."""
    out: list[str] = []
    for item in argv:
        if (item.startswith("-") and not _is_number(item)) or item.endswith(".py") or not out:
            out.append(shlex.quote(item))
        else:
            out[-1] += " " + shlex.quote(item)
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


SLURM_NODE_SCRIPT = "launch/slurm-node.sh"
SLURM_BATCH_SCRIPT = "launch/job.sbatch"
SLURM_STOP_FILE = "launch/stop"  # megaprov job stop: the batch script ends without a continuation
SLURM_FAILURES_FILE = "launch/failures"  # restarts after a failure so far (a time-limit continuation is not one)
SLURM_JOBS_FILE = "launch/slurm-jobs"  # the ids of the continuations, one per line, the current one last
SLURM_NODES_FILE = "launch/nodes"  # the current allocation's nodes, one per line (the follower reads their logs)
SLURM_GROW_FILE = "launch/grow"  # megaprov job grow (launch.elastic): the batch script's next signal is a grow, not the time limit
SLURM_EVENTS = "logs/slurm.log"  # the batch script's lines: each allocation, continuation and end
ELASTIC_EVENTS = "logs/elastic.log"  # launch.elastic under systemd: each change of the job's nodes, one line


def slurm_seconds(text: str) -> int:
    """A Slurm time (sbatch --time: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) in seconds. Pure."""
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        hours, minutes, seconds = (parts + [0, 0])[:3]
        return int(days) * 86400 + hours * 3600 + minutes * 60 + seconds
    if len(parts) == 3:
        return parts[0] * 3600 + parts[1] * 60 + parts[2]
    return parts[0] * 60 + (parts[1] if len(parts) == 2 else 0)


SLURM_SIGNAL_SLACK = 60  # Slurm sends --signal up to 60 s early (sbatch(1)), checking every 30 s


def slurm_lead(spec: JobSpec, cluster: Cluster) -> int:
    """Seconds before the time limit at which Slurm signals the batch script: the stop grace, at least 120."""
    return max(120, stop_grace(spec, cluster).unit_s)


def slurm_node_script(spec: JobSpec, cluster: Cluster, passed: dict[str, str] | None = None) -> str:
    """What ``srun`` runs on each node of the allocation: the same node log, start and exit lines as the systemd
    launcher's node script, with the node's name and rank from Slurm. Shape ``torchrun``: one task per node runs
    torchrun (node rank SLURM_NODEID); shape ``per-gpu``: one task per GPU runs the trainer itself with the rank
    variables torch.distributed reads (RANK=SLURM_PROCID, LOCAL_RANK=SLURM_LOCALID, WORLD_SIZE=SLURM_NTASKS), and
    local rank 0 speaks for the node."""
    shared = cluster.shared_dir
    jdir = job_dir(spec, shared)
    stack = stack_of(cluster)
    grace = stop_grace(spec, cluster)
    env = _env(spec, passed, grace)
    per_gpu = spec.launch.slurm.shape == "per-gpu"
    if per_gpu:
        argv = [spec.launch.interpreter, *_entry(spec, shared), *megatron_args(spec, shared, stack)]
        command = " ".join(shlex.quote(w) for w in argv)
    else:
        argv = torchrun_argv(spec, cluster.nodes, cluster.gpus_per_node, 0, "localhost", shared, stack)
        # The node's rank and the rendezvous host are known only inside the allocation: those two words are shell
        # variables, placed by position (never by searching the quoted text, which holds user strings). An elastic
        # job's continuation may get fewer nodes (sbatch --nodes=MIN-MAX): its node count is Slurm's too.
        at_run_time = {argv.index("--node-rank") + 1: '"$rank"', argv.index("--master-addr") + 1: '"$MASTER_ADDR"'}
        if spec.launch.elastic:
            at_run_time[argv.index("--nnodes") + 1] = '"$SLURM_STEP_NUM_NODES"'
        command = " ".join(at_run_time.get(i, shlex.quote(word)) for i, word in enumerate(argv))
    elastic_nodes = ELASTIC_NODES.format(nodes="$SLURM_STEP_NUM_NODES") if spec.launch.elastic else ""
    lines = [
        "#!/bin/bash",
        f"# megaprov job {spec.name}: run by srun on every node of its Slurm allocation (Megatron-LM {PINNED_MEGATRON}).",
        "set -uo pipefail",
        "host=${SLURMD_NODENAME:-$(hostname -s)}",
        'case $host in ""|.*|*[!A-Za-z0-9._-]*) echo "megaprov: unusable node name $host" >&2; exit 2 ;; esac',
        "rank=${SLURM_NODEID:?}",
        *(
            [
                "export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS LOCAL_WORLD_SIZE=$SLURM_NTASKS_PER_NODE",
                f"export MASTER_PORT={spec.launch.master_port}",
                'speaker=0; [ "$SLURM_LOCALID" = 0 ] && speaker=1',
            ]
            if per_gpu
            else ["speaker=1"]
        ),
        f'exec >>{shlex.quote(jdir)}/logs/"$host".log 2>&1',
        f"if [ -r {NCCL_ENV_FILE} ]; then set -a; . {NCCL_ENV_FILE}; set +a; fi",
        *(f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())),
        _path_line(spec),
        f"cd {shlex.quote(jdir)}",
        'if [ "$speaker" = 1 ] && command -v nvidia-smi >/dev/null 2>&1; then  # GPU utilisation and memory, every 2 s',
        f'    nvidia-smi --query-gpu={GPU_QUERY} --format=csv,noheader,nounits -lms 2000 >>{shlex.quote(jdir)}/logs/gpu-"$host".csv 2>/dev/null &',
        "    sampler=$!",
        "    trap 'kill $sampler 2>/dev/null' EXIT",
        "fi",
        f'if [ "$speaker" = 1 ]; then echo "{START_LINE.format(host="$host", rank="$rank")}{elastic_nodes}"; fi',
        "# Slurm's SIGTERM (job stop, the time limit) reaches this script: pass it on, the ranks save and exit (143).",
        "stopping=0",
        "trap 'stopping=1; kill -TERM $child 2>/dev/null' TERM",
        f"{command} &",
        "child=$!",
        "wait $child",
        "rc=$?",
        'if [ "$stopping" = 1 ]; then wait $child; rc=143; fi',
        f'if [ "$speaker" = 1 ]; then echo "{EXIT_LINE.format(host="$host", rank="$rank")}"; fi',
        "exit $rc",
    ]
    return "\n".join(lines) + "\n"


def sbatch_script(spec: JobSpec, cluster: Cluster, passed: dict[str, str] | None = None) -> str:
    """The batch script: the allocation, srun of the node script on every node, and what happens when it ends.
    After a failure it submits its continuation (the same script, ``--dependency=afterany`` on itself, a new
    allocation) up to ``launch.max_restarts`` times; the ranks resume from the latest checkpoint, and a node the
    epilog's health check drained is not allocated again. Before the time limit Slurm signals this script
    (``--signal=B:USR1@grace``): it sends the steps SIGTERM, the ranks save and exit, and a continuation carries on
    (not counted as a failure). ``megaprov job stop`` leaves ``launch/stop`` first: the job then ends there."""
    shared = cluster.shared_dir
    jdir = job_dir(spec, shared)
    s = spec.launch.slurm
    # #SBATCH lines are read by sbatch, which quotes nothing: only plain words and plain paths go there.
    values.sbatch_path(jdir, "the job directory")
    lead = slurm_lead(spec, cluster)
    per_gpu = s.shape == "per-gpu"
    head = [
        "#!/bin/bash",
        f"#SBATCH --job-name={spec.name}",
        # launch.elastic: a range from the first submission on. Slurm requeues a job whose node failed (NODE_FAIL) with
        # its own request, not through the batch script: only a range lets the requeued job run on the nodes left.
        f"#SBATCH --nodes={spec.launch.elastic.min_nodes}-{cluster.nodes}" if spec.launch.elastic else f"#SBATCH --nodes={cluster.nodes}",
    ]
    # Not with a node range: Slurm then counts the job's tasks from the range's minimum and allocates only that many
    # nodes (measured on Slurm 22.05: --nodes=2-3 --ntasks-per-node=1 got 2 of 3 idle nodes, without it 3); srun
    # gives the step its tasks per node itself, and --exclusive hands the step every CPU of each node.
    if not spec.launch.elastic:
        head.append(f"#SBATCH --ntasks-per-node={cluster.gpus_per_node if per_gpu else 1}")
    else:
        # A failed node does not end the job (Slurm would requeue it and hold it ~2 minutes): the step on it fails,
        # and the batch script's continuation asks for the node range at once.
        head.append("#SBATCH --no-kill")
    if cluster.gpu.name != "cpu":
        head.append(f"#SBATCH --gpus-per-node={cluster.gpus_per_node}")
    head += [
        "#SBATCH --exclusive",
        f"#SBATCH --output={jdir}/logs/slurm-%j.out",
        "#SBATCH --open-mode=append",
        "#SBATCH --requeue",
        # Slurm signals the batch script this long before the time limit: its ranks save within it.
        f"#SBATCH --signal=B:USR1@{lead}",
    ]
    for key, value in (("partition", s.partition), ("account", s.account), ("time", s.time), ("qos", s.qos)):
        if value:
            head.append(f"#SBATCH --{key}={values.sbatch_value(value, f'launch.slurm.{key}')}")
    q = shlex.quote
    events = q(posixpath.join(jdir, SLURM_EVENTS))
    stamp = "$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"
    tasks = f"--ntasks-per-node={cluster.gpus_per_node}" if per_gpu else "--ntasks-per-node=1"
    box = spec.launch.container
    # launch.container: pyxis runs every task of the step in the image (the node script too, so the image needs bash)
    in_image = container.pyxis_mounts_lines(spec, shared) if box else []
    pyxis = " " + container.pyxis_words(box, jdir) if box else ""
    elastic = spec.launch.elastic is not None
    low = spec.launch.elastic.min_nodes if spec.launch.elastic else cluster.nodes
    node_range = f" --nodes={low}-{cluster.nodes}" if elastic else ""
    count = " (training on $use of its $SLURM_JOB_NUM_NODES nodes)" if elastic else ""
    counts = planner.usable_counts(spec, cluster) if elastic else [cluster.nodes]
    step_nodes = ' --nodes="$use" --nodelist="$(paste -sd, "$nodes")"' if elastic else ""
    body = [
        "set -uo pipefail",
        f"jdir={q(jdir)}",
        f"max_restarts={spec.launch.max_restarts}",
        *(
            [
                "limit=0",
                "grow=0",
                "# Near the time limit, or megaprov job grow (launch/grow first): SIGTERM to the steps (not to this script);",
                "# the ranks save a checkpoint and exit, and the continuation asks for the job's node range again. Set first:",
                "# a grow may signal a continuation that has only just started.",
                f"""trap 'limit=1; [ -e "$jdir/{SLURM_GROW_FILE}" ] && grow=1; scancel --signal=TERM "$SLURM_JOB_ID" 2>/dev/null' USR1""",
            ]
            if elastic
            else []
        ),
        f'if [ -e "$jdir/{SLURM_STOP_FILE}" ]; then  # megaprov job stop came first: this continuation does not train',
        f'    echo "megaprov: slurm job $SLURM_JOB_ID stopped before it started (megaprov job stop) at {stamp}" >>{events}',
        "    exit 0",
        "fi",
        f'nodes="$jdir/{SLURM_NODES_FILE}"',
        *(
            [
                "# launch.elastic: train on the largest node count of the allocation that keeps the global batch",
                f"# ({' '.join(map(str, counts))}); the step runs on those nodes, the first of the allocation.",
                'scontrol show hostnames "$SLURM_JOB_NODELIST" >"$nodes.all"',
                "use=0; for n in " + " ".join(map(str, counts)) + '; do if [ "$n" -le "$(wc -l <"$nodes.all")" ]; then use=$n; break; fi; done',
                'if [ "$use" = 0 ]; then',
                f'    echo "megaprov: slurm job $SLURM_JOB_ID got $SLURM_JOB_NUM_NODES node(s), below launch.elastic.min_nodes={low}'
                f' at {stamp}" >>{events}',
                "    exit 1",
                "fi",
                'head -n "$use" "$nodes.all" >"$nodes.tmp" && mv -f "$nodes.tmp" "$nodes" && rm -f "$nodes.all"  # the follower reads these logs',
            ]
            if elastic
            else ['scontrol show hostnames "$SLURM_JOB_NODELIST" >"$nodes.tmp" && mv -f "$nodes.tmp" "$nodes"  # the follower reads these logs']
        ),
        'MASTER_ADDR=$(head -n 1 "$nodes")',
        "export MASTER_ADDR",
        f'echo "megaprov: slurm job $SLURM_JOB_ID running on $SLURM_JOB_NODELIST{count} at {stamp}" >>{events}',
        *(
            []
            if elastic
            else [
                "limit=0",
                "# Near the time limit: SIGTERM to the steps (not to this script); the ranks save a checkpoint and exit.",
                """trap 'limit=1; scancel --signal=TERM "$SLURM_JOB_ID"' USR1""",
            ]
        ),
        *in_image,
        *(["rc=143  # signalled before its step started: it continues as signalled", 'if [ "$limit" = 0 ]; then'] if elastic else []),
        f'{"    " if elastic else ""}srun --kill-on-bad-exit=1 {tasks}{step_nodes} --cpu-bind=none{pyxis} bash "$jdir/{SLURM_NODE_SCRIPT}" &',
        f"{'    ' if elastic else ''}step=$!",
        f"{'    ' if elastic else ''}while :; do wait $step; rc=$?; kill -0 $step 2>/dev/null || break; done",
        *(["fi"] if elastic else []),
        f'if [ -e "$jdir/{SLURM_STOP_FILE}" ]; then',
        f'    echo "megaprov: slurm job $SLURM_JOB_ID stopped (megaprov job stop), status $rc at {stamp}" >>{events}',
        "    exit 0",
        "fi",
        "# A continuation: the same batch script as a new job that starts when this one has ended (afterany), in a new",
        "# allocation (a node the epilog's health check drained is left out); its id goes to launch/slurm-jobs, where",
        "# megaprov follows it. (scontrol requeue would keep the id, but Slurm holds a requeued job for 2 minutes.)",
        *([f"# launch.elastic: it asks for {low} to {cluster.nodes} nodes, and Slurm gives it as many of them as are up then."] if elastic else []),
        "continue_job() {",
        "    # sbatch's messages (retries, the site's job_submit notes) go to the events; its id is its last stdout line",
        f'    next=$(sbatch --parsable{node_range} --dependency=afterany:"$SLURM_JOB_ID" "$jdir/{SLURM_BATCH_SCRIPT}" 2>>{events} | tail -n 1)',
        "    next=${next%%;*}",
        '    case $next in ""|*[!0-9]*)',
        f'        echo "megaprov: slurm job $SLURM_JOB_ID $1: the continuation was refused: $next at {stamp}" >>{events}',
        "        exit 1 ;;",
        "    esac",
        f'    echo "$next" >>"$jdir/{SLURM_JOBS_FILE}"',
        f'    echo "megaprov: slurm job $SLURM_JOB_ID $1: continues as slurm job $next at {stamp}" >>{events}',
        "    exit 0",
        "}",
        'if [ "$rc" = 0 ]; then  # trained to the end (a time-limit signal that came as it finished changes nothing)',
        f'    echo "megaprov: slurm job $SLURM_JOB_ID finished at {stamp}" >>{events}',
        "    exit 0",
        "fi",
        *(
            [
                'if [ "$limit" = 1 ] && [ "$grow" = 1 ]; then',
                f'    rm -f "$jdir/{SLURM_GROW_FILE}"',
                f'    continue_job "grows (saved; asks for {low}-{cluster.nodes} nodes)"',
                "fi",
            ]
            if elastic
            else []
        ),
        'if [ "$limit" = 1 ]; then continue_job "reached its time limit (saved)"; fi',
        f'failures=$(cat "$jdir/{SLURM_FAILURES_FILE}" 2>/dev/null || echo 0)',
        'case $failures in ""|*[!0-9]*) failures=0 ;; esac',
        'if [ "$failures" -lt "$max_restarts" ]; then',
        f'    echo $((failures + 1)) >"$jdir/{SLURM_FAILURES_FILE}"',
        '    continue_job "failed with status $rc (restart $((failures + 1)) of $max_restarts)"',
        "fi",
        f'echo "megaprov: slurm job $SLURM_JOB_ID failed with status $rc: no restarts left ($max_restarts) at {stamp}" >>{events}',
        "exit $rc",
    ]
    return "\n".join(head + [""] + body) + "\n"


def render(spec: JobSpec, cluster: Cluster, hosts: list[tuple[str, str]], passed: dict[str, str] | None = None) -> Rendered:
    """Render every node's launch. ``hosts`` are (inventory name, address) of the training nodes, rank order;
    ``passed`` is the operator's environment, of which the ``PASS_THROUGH_ENV`` variables reach the ranks."""
    stack = stack_of(cluster)
    problems = megatron_problems(spec) + stack_problems(spec, stack) + container.problems(spec, cluster)
    # What the inventory gave (inventory.load checked it; checked again here, where it becomes text of a script).
    shared = values.absolute_path(cluster.shared_dir, "megaprov_shared_dir")
    for name, address in hosts:
        values.host_name(name, "inventory host")
        values.host_address(address, f"ansible_host of {name}")
    ckpt = checkpoint_dir(spec, shared)
    if ckpt.rstrip("/") == shared.rstrip("/") or not (ckpt + "/").startswith(shared.rstrip("/") + "/"):
        problems.append(
            Problem(
                "checkpoint.directory",
                f"checkpoint.directory={ckpt} is not a directory under the shared directory {shared}",
                "every node must see the checkpoints: use a path under it (or a relative path)",
            )
        )
    for prefix in spec.data.prefixes:
        path = _under(shared, prefix.path)
        if not (path + "/").startswith(shared.rstrip("/") + "/"):
            problems.append(
                Problem(
                    "data.prefixes",
                    f"data.prefixes path {path} is not under the shared directory {shared}",
                    "put prepared data on the shared directory (megaprov data prepare --output-prefix)",
                )
            )
    if spec.launch.launcher == "slurm" and spec.launch.slurm.time:
        limit, lead = slurm_seconds(spec.launch.slurm.time), slurm_lead(spec, cluster)
        least = lead + SLURM_SIGNAL_SLACK + 60
        if limit <= least:
            problems.append(
                Problem(
                    "launch.slurm.time",
                    f"launch.slurm.time={spec.launch.slurm.time} ({limit} s) leaves no time to train: the ranks are told to save "
                    f"{lead} s before the limit (the stop grace for this checkpoint)",
                    f"set launch.slurm.time above {least} s (at least {-(-least // 60)} minutes)",
                )
            )
    if len(hosts) < cluster.nodes:
        problems.append(
            Problem(
                "launch.nodes",
                f"the job needs {cluster.nodes} nodes but the inventory has {len(hosts)} in [gpu_nodes]",
                f"set launch.nodes to at most {len(hosts)} or add nodes",
            )
        )
    if problems:
        raise JobSpecError(problems)
    chosen = hosts[: cluster.nodes]
    master = chosen[0][1]
    grace = stop_grace(spec, cluster)
    env = _env(spec, passed, grace)
    impl = selected_impl(spec, stack) if spec.launch.trainer == "megatron-lm" else "lab"
    about = (
        *((_impl_line(spec, impl, stack),) if spec.launch.trainer == "megatron-lm" else ()),
        f"Stop grace: {grace.torchrun_s} s from SIGTERM to torchrun's SIGKILL (checkpoint ~{grace.checkpoint_bytes / 1e9:.1f} GB at "
        f"{grace.write_mbps:g} MB/s, {grace.write_source}), the unit's TimeoutStopSec {grace.unit_s} s",
    )
    launches = []
    for rank, (name, _address) in enumerate(chosen):
        argv = torchrun_argv(spec, cluster.nodes, cluster.gpus_per_node, rank, master, shared, stack)
        script = _script(spec, name, rank, cluster.nodes, env, argv, shared, about, gpus=cluster.gpu.name != "cpu")
        launches.append(NodeLaunch(name, rank, tuple(argv), tuple(sorted(env.items())), script))
    slurm = spec.launch.launcher == "slurm"
    sbatch = sbatch_script(spec, cluster, passed) if slurm else None
    node_script = slurm_node_script(spec, cluster, passed) if slurm else None
    return Rendered(
        spec.name,
        job_dir(spec, shared),
        ckpt,
        tuple(megatron_args(spec, shared, stack)),
        tuple(launches),
        sbatch,
        stack.describe(),
        impl,
        grace,
        node_script,
    )
