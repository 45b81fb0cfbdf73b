"""The training job spec (``gpt.yml``): typed models, loading with line numbers, and readable errors.

Pure: :func:`parse` takes YAML text and returns a :class:`JobSpec` or raises :class:`JobSpecError`, whose
problems each name the field path, the value, and the fix. Rules that involve more than one field (heads by
tensor parallelism, batch arithmetic, ...) live in :mod:`megaprov.training.planner`, which knows the world size.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from megaprov import values
from megaprov.errors import UsageError

SPEC_VERSION = 1
PINNED_MEGATRON = "core_v0.16.1"


# Bounds: what a real cluster and a real model can have (the largest published models have ~100-200 layers,
# hidden sizes of ~20k and contexts of ~1M tokens). They keep every computation of the planner small.
MAX_LAYERS = 1000
MAX_HIDDEN = 1 << 20
MAX_HEADS = 1 << 16
MAX_SEQ = 1 << 22
MAX_VOCAB = 1 << 24
MAX_NODES = values.MAX_HOSTS
MAX_GPUS_PER_NODE = 64
MAX_PARALLEL = 1 << 16
MAX_ITERS = 1_000_000_000
MAX_BATCH = 1 << 24
MAX_MICRO_BATCH = 1 << 16
MAX_ENV = 256
# Environment megaprov sets for every rank itself: a job spec may not override it.
RESERVED_ENV = {
    "MEGAPROV_JOB_UNIT": "it marks the job's processes, which are reaped by it",
    "MASTER_ADDR": "torchrun's rendezvous",
    "MASTER_PORT": "launch.master_port",
    "RANK": "torchrun",
    "LOCAL_RANK": "torchrun",
    "WORLD_SIZE": "torchrun",
}


class _SpecValue(ValueError):
    """A string field failed its :mod:`megaprov.values` check (rendered by :func:`_problem` with its fix)."""

    def __init__(self, bad: values.BadValue) -> None:
        super().__init__(bad.problem)
        self.value = bad.value
        self.problem = bad.problem
        self.fix = bad.hint or ""


def _checked(check: Any, value: Any, *args: Any) -> Any:
    try:
        return check(value, "", *args)
    except values.BadValue as bad:
        raise _SpecValue(bad) from None


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Model(_Section):
    """The GPT architecture (Megatron-LM's network-size arguments)."""

    num_layers: int = Field(ge=1, le=MAX_LAYERS, description="transformer layers (--num-layers)")
    hidden_size: int = Field(ge=1, le=MAX_HIDDEN, description="model width (--hidden-size)")
    num_attention_heads: int = Field(ge=1, le=MAX_HEADS, description="attention heads (--num-attention-heads)")
    num_query_groups: int | None = Field(None, ge=1, le=MAX_HEADS, description="key/value groups for grouped-query attention; unset = multi-head")
    ffn_hidden_size: int | None = Field(None, ge=1, le=4 * MAX_HIDDEN, description="MLP width; unset = 4 x hidden_size")
    seq_length: int = Field(ge=1, le=MAX_SEQ, description="tokens per sample (--seq-length)")
    max_position_embeddings: int | None = Field(None, ge=1, le=MAX_SEQ, description="unset = seq_length")
    vocab_size: int | None = Field(
        None, ge=1, le=MAX_VOCAB, description="tokenizer vocabulary; unset = the tokenizer's own (required for huggingface)"
    )
    make_vocab_size_divisible_by: int = Field(128, ge=1, le=1 << 16, description="Megatron pads the vocabulary to a multiple of this x tensor")
    activation: Literal["gelu", "swiglu", "squared_relu"] = "gelu"
    normalization: Literal["LayerNorm", "RMSNorm"] = "LayerNorm"
    position_embedding: Literal["learned_absolute", "rope"] = "learned_absolute"
    rotary_base: int = Field(10000, ge=1, le=1_000_000_000, description="RoPE base (position_embedding: rope)")
    attention_backend: Literal["auto", "flash", "fused", "unfused", "local"] = Field(
        "auto", description="--attention-backend; auto/flash/fused never store the s x s attention scores"
    )
    untie_embeddings: bool = Field(False, description="separate output layer weights")
    bias_linear: bool = Field(True, description="biases in linear layers (false = --disable-bias-linear)")
    init_method_std: float = Field(0.02, gt=0, le=10)
    hidden_dropout: float = Field(0.1, ge=0, lt=1)
    attention_dropout: float = Field(0.1, ge=0, lt=1)

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def query_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def max_positions(self) -> int:
        return self.max_position_embeddings or self.seq_length


class Parallel(_Section):
    """How the model is split over GPUs; data parallelism is what remains of the world size."""

    tensor: int = Field(1, ge=1, le=MAX_GPUS_PER_NODE, description="tensor model parallel size (within a node)")
    pipeline: int = Field(1, ge=1, le=MAX_LAYERS, description="pipeline model parallel size")
    context: int = Field(1, ge=1, le=MAX_PARALLEL, description="context parallel size (splits the sequence)")
    virtual_stages: int | None = Field(None, ge=1, le=MAX_LAYERS, description="virtual pipeline stages per pipeline rank (interleaved schedule)")
    sequence_parallel: bool = Field(False, description="needs tensor > 1")
    distributed_optimizer: bool = Field(False, description="shard optimizer states over data-parallel ranks")
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = Field(False, description="needs distributed_optimizer")
    tp_comm_overlap: bool = Field(False, description="needs sequence_parallel (Transformer Engine)")


class Train(_Section):
    micro_batch_size: int = Field(1, ge=1, le=MAX_MICRO_BATCH)
    global_batch_size: int = Field(ge=1, le=MAX_BATCH)
    train_iters: int = Field(ge=1, le=MAX_ITERS)
    lr: float = Field(ge=0, le=10, description="peak learning rate (0 freezes the weights: the verdict must then fail)")
    min_lr: float = Field(0.0, ge=0, le=10)
    lr_decay_style: Literal["constant", "linear", "cosine", "inverse-square-root", "WSD"] = "cosine"
    lr_decay_iters: int | None = Field(None, ge=1, le=MAX_ITERS, description="unset = train_iters")
    lr_warmup_iters: int = Field(0, ge=0, le=MAX_ITERS)
    weight_decay: float = Field(0.01, ge=0, le=10)
    adam_beta1: float = Field(0.9, gt=0, lt=1)
    adam_beta2: float = Field(0.95, gt=0, lt=1)
    clip_grad: float = Field(1.0, ge=0, le=1e6)
    precision: Literal["bf16", "fp16", "fp32"] = "bf16"
    recompute: Literal["none", "selective", "full"] = "none"
    recompute_method: Literal["uniform", "block"] = "uniform"
    recompute_num_layers: int = Field(1, ge=1, le=MAX_LAYERS, description="layers per recompute chunk (recompute: full)")
    seed: int = Field(1234, ge=0, le=2**32 - 1)
    log_interval: int = Field(1, ge=1, le=MAX_ITERS)
    eval_interval: int = Field(1000, ge=1, le=MAX_ITERS)
    eval_iters: int = Field(10, ge=0, le=MAX_ITERS)


class Tokenizer(_Section):
    type: Literal["byte", "gpt2-bpe", "huggingface", "null"] = "byte"
    vocab_file: str | None = Field(None, description="GPT-2 vocab.json (gpt2-bpe)")
    merge_file: str | None = Field(None, description="GPT-2 merges.txt (gpt2-bpe)")
    path: str | None = Field(None, description="directory or tokenizer.json (huggingface)")
    vocab_size: int | None = Field(None, ge=1, le=MAX_VOCAB, description="vocabulary without the end-of-document token (null)")

    @field_validator("vocab_file", "merge_file", "path")
    @classmethod
    def _in_shared(cls, value: str | None) -> str | None:
        return None if value is None else str(_checked(values.path_in_root, value))


class DataPrefix(_Section):
    path: str = Field(min_length=1, description="Megatron prefix (without .bin/.idx); relative = under the shared dir")
    weight: float = Field(1.0, gt=0, le=1e9)

    @field_validator("path")
    @classmethod
    def _in_shared(cls, value: str) -> str:
        return str(_checked(values.path_in_root, value))


class Data(_Section):
    mock: bool = Field(False, description="synthetic tokens (--mock-data); no prefixes needed")
    prefixes: list[DataPrefix] = Field(default_factory=list, max_length=values.MAX_LIST)
    split: str = Field("949,50,1", pattern=r"^\d+(\.\d+)?(,\d+(\.\d+)?){0,2}$", description="train,valid,test weights")
    tokenizer: Tokenizer = Field(default_factory=lambda: Tokenizer())


class Checkpoint(_Section):
    directory: str | None = Field(None, description="unset = <shared dir>/checkpoints/<job name>; relative = under the shared dir")
    save_interval: int = Field(1000, ge=1, le=MAX_ITERS)
    format: Literal["torch_dist", "torch"] = "torch_dist"
    resume: Literal["auto", "never"] = Field("auto", description="auto: continue from the latest checkpoint in directory")
    async_save: bool = False

    @field_validator("directory")
    @classmethod
    def _in_shared(cls, value: str | None) -> str | None:
        return None if value is None else str(_checked(values.path_in_root, value))


class Slurm(_Section):
    partition: str | None = None
    account: str | None = None
    time: str | None = Field(None, pattern=r"^(\d{1,3}-)?\d{1,2}(:\d{2}){0,2}$", description="walltime, e.g. 2-00:00:00")
    qos: str | None = None
    shape: Literal["torchrun", "per-gpu"] = Field(
        "torchrun",
        description="torchrun: srun starts one torchrun per node (as the systemd launcher); per-gpu: one task per GPU, "
        "ranks from SLURM_PROCID/LOCALID/NTASKS",
    )

    @field_validator("partition", "account", "qos")
    @classmethod
    def _plain(cls, value: str | None) -> str | None:
        return None if value is None else str(_checked(values.sbatch_value, value))


def _environment(value: dict[str, str], section: str) -> dict[str, str]:
    for key, item in value.items():
        _checked(values.env_name, key)
        _checked(values.text, item)
        if key in RESERVED_ENV:
            raise _SpecValue(values.BadValue("", key, f"is set by megaprov itself ({RESERVED_ENV[key]})", f"remove it from {section}"))
        if values.secret_name(key):
            raise _SpecValue(values.BadValue("", key, "names a secret", values.SECRET_FIX))
    return value


class Mount(_Section):
    """A directory of the node bound into the job's container."""

    source: str = Field(
        description="absolute path on the node, under the shared directory or a root the inventory allows (megaprov_container_mount_roots)"
    )
    target: str | None = Field(None, description="absolute path in the container; unset = the same as source")
    readonly: bool = Field(True, description="mounted read-only")

    @field_validator("source", "target")
    @classmethod
    def _plain(cls, value: str | None) -> str | None:
        return None if value is None else str(_checked(values.mount_path, value))

    @field_validator("target")
    @classmethod
    def _not_reserved(cls, value: str | None) -> str | None:
        if value is not None and (value == "/" or any(values.inside(value, r) for r in values.RESERVED_TARGETS)):
            raise _SpecValue(values.BadValue("", value, "is provided by the container runtime", "mount somewhere else (e.g. /mnt/NAME)"))
        return value

    @model_validator(mode="after")
    def _source_as_target(self) -> Mount:
        if self.target is None:
            self._not_reserved(self.source)
        return self

    @property
    def inside(self) -> str:
        return self.target or self.source


class Container(_Section):
    """Run the job in a container image: pyxis (launcher slurm) or podman with NVIDIA's CDI devices (launcher torchrun).
    The shared directory, the job's data and checkpoints, and launch.megatron_dir are mounted at their own paths."""

    image: str = Field(
        description="registry reference (nvcr.io/nvidia/pytorch:25.01-py3; pulled through the cluster's mirror) or an absolute .sqsh path on the "
        "shared directory (launcher slurm)"
    )
    python: str = Field("/usr/bin/python3", description="the interpreter in the image that has torch (replaces launch.python)")
    mounts: list[Mount] = Field(default_factory=list, max_length=64, description="further directories of the node to mount")
    env: dict[str, str] = Field(default_factory=dict, max_length=MAX_ENV, description="environment set in the container only (after launch.env)")

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return str(_checked(values.image_reference, value))

    @field_validator("python")
    @classmethod
    def _absolute(cls, value: str) -> str:
        return str(_checked(values.absolute_path, value))

    @field_validator("mounts")
    @classmethod
    def _targets(cls, value: list[Mount]) -> list[Mount]:
        seen: set[str] = set()
        for mount in value:
            target = mount.inside
            if target in seen:
                raise _SpecValue(values.BadValue("", target, "is the target of two mounts", "give each mount its own target"))
            seen.add(target)
        return value

    @field_validator("env")
    @classmethod
    def _environment(cls, value: dict[str, str]) -> dict[str, str]:
        return _environment(value, "launch.container.env")

    @property
    def squashfs(self) -> bool:
        return self.image.startswith("/")


class Elastic(_Section):
    """Continue on fewer nodes when one is lost, and grow back when it returns (``launch.elastic``). Tensor, pipeline and
    context sizes stay; the data-parallel size follows the healthy nodes and the global batch is kept by more gradient
    accumulation, so the run resumes from its latest checkpoint (``checkpoint.format: torch_dist`` reshards over data
    parallelism) with the same samples in the same order."""

    min_nodes: int = Field(ge=1, le=MAX_NODES, description="the fewest nodes the job continues on (at most launch.nodes)")


class Launch(_Section):
    launcher: Literal["torchrun", "slurm"] = "torchrun"
    nodes: int = Field(1, ge=1, le=MAX_NODES)
    gpus_per_node: int = Field(8, ge=1, le=MAX_GPUS_PER_NODE, description="processes per node (GPUs; 1 on CPU lab nodes)")
    trainer: Literal["megatron-lm", "lab"] = Field("megatron-lm", description="lab: megaprov's CPU trainer on megatron-core")
    megatron_dir: str = Field("/opt/megatron-lm", description="checkout of Megatron-LM holding pretrain_gpt.py")
    python: str = Field("/opt/megaprov/venv/bin/python", description="interpreter of the training environment")
    master_port: int = Field(29500, ge=1024, le=65535)
    max_restarts: int = Field(
        3, ge=0, le=100, description="restarts of the job after a failure, within an hour (each resumes from the latest checkpoint)"
    )
    env: dict[str, str] = Field(default_factory=dict, max_length=MAX_ENV, description="extra environment, e.g. NCCL_DEBUG: INFO")
    extra_args: list[str] = Field(default_factory=list, max_length=values.MAX_LIST, description="pass-through pretrain_gpt.py arguments")
    slurm: Slurm = Field(default_factory=lambda: Slurm())
    container: Container | None = Field(None, description="run the job in a container image; unset = in the nodes' training environment")
    elastic: Elastic | None = Field(None, description="continue on the healthy nodes after a node is lost, grow back when it returns; unset = off")

    @field_validator("megatron_dir", "python")
    @classmethod
    def _absolute(cls, value: str) -> str:
        return str(_checked(values.absolute_path, value))

    @property
    def interpreter(self) -> str:
        """The Python that runs torchrun and the ranks: the image's in a container, else the nodes' training environment."""
        return self.container.python if self.container else self.python

    @field_validator("env")
    @classmethod
    def _environment(cls, value: dict[str, str]) -> dict[str, str]:
        return _environment(value, "launch.env")

    @field_validator("extra_args")
    @classmethod
    def _arguments(cls, value: list[str]) -> list[str]:
        for item in value:
            _checked(values.text, item)
        return value


class Verify(_Section):
    tokens_per_second: float | None = Field(None, gt=0, le=1e15, description="expected cluster throughput; unset = from the plan")
    mfu: float | None = Field(None, gt=0, le=1, description="expected model FLOPs utilisation")
    throughput_tolerance: float = Field(0.8, gt=0, le=1, description="fraction of the expectation that passes")
    loss_window: int = Field(20, ge=3, le=1_000_000, description="iterations in the loss-trend test")
    gpu_utilization: float = Field(0.8, ge=0, le=1, description="minimum mean GPU utilisation")


NAME_PATTERN = values.JOB_NAME


class JobSpec(_Section):
    """A whole ``gpt.yml``."""

    version: Literal[1] = 1
    name: str = Field(pattern=NAME_PATTERN.pattern, description="job name: directory and unit names")
    model: Model
    parallel: Parallel = Field(default_factory=lambda: Parallel())
    train: Train
    data: Data = Field(default_factory=lambda: Data())
    checkpoint: Checkpoint = Field(default_factory=lambda: Checkpoint())
    launch: Launch = Field(default_factory=lambda: Launch())
    verify: Verify = Field(default_factory=lambda: Verify())


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec: where, what, and how to fix it."""

    path: str
    message: str
    fix: str = ""
    line: int | None = None

    def render(self, source: str = "") -> str:
        where = f"{source}:{self.line}: " if source and self.line else (f"{source}: " if source else "")
        return f"{where}{self.message}" + (f"; {self.fix}" if self.fix else "")


class JobSpecError(UsageError):
    """The spec is invalid. ``problems`` has every finding; the message is the first, the rest follow."""

    def __init__(self, problems: list[Problem], source: str = "") -> None:
        self.problems = problems
        self.source = source
        lines = [p.render(source) for p in problems]
        super().__init__(lines[0])
        self.details = lines[1:]

    def objects(self) -> list[dict[str, Any]]:
        """One error object per problem, with the spec's field (model.num_layers), file and line."""
        from megaprov.errors import error_object

        return [
            error_object(self.exit_code, p.message, p.fix or None, field=p.path or None, file=self.source or None, line=p.line) for p in self.problems
        ]


_BARE = re.compile(r"^[A-Za-z0-9._/+-]{1,60}$")


def _fmt(value: Any) -> str:
    """A value as it would be written in YAML, on one line and short."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and _BARE.fullmatch(value):
        return value
    # Control characters (and Unicode line breaks) are escaped: the problem stays one line.
    text = json.dumps(value, ensure_ascii=False, default=str)
    if any(c in text for c in "\x85\u2028\u2029") or values.control_character(text):
        text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _line_map(
    node: yaml.Node, path: tuple[str | int, ...] = (), out: dict[tuple[str | int, ...], int] | None = None
) -> dict[tuple[str | int, ...], int]:
    """Line (1-based) of every key and item in a composed YAML document."""
    out = {} if out is None else out
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = (*path, str(key.value))
            out[sub] = key.start_mark.line + 1
            _line_map(value, sub, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            sub = (*path, i)
            out[sub] = item.start_mark.line + 1
            _line_map(item, sub, out)
    return out


def dotted(path: tuple[str | int, ...]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _lookup(data: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return None
    return data


def _section_fields(path: tuple[str | int, ...]) -> list[str]:
    model: Any = JobSpec
    for part in path:
        if isinstance(part, int):
            continue
        info = getattr(model, "model_fields", {}).get(part)
        if info is None:
            return []
        annotation = info.annotation
        args = getattr(annotation, "__args__", ())
        candidates = [annotation, *args]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if model is None:
            return []
    return list(getattr(model, "model_fields", {}))


_PATTERN_HINTS: dict[tuple[str | int, ...], str] = {
    ("name",): "lower-case letters, digits, '.', '_' and '-' (at most 63, starting with a letter or digit)",
    ("data", "split"): "up to three comma-separated weights such as 949,50,1",
    ("launch", "slurm", "time"): "a Slurm walltime such as 2-00:00:00, 12:00:00 or 90",
}


def _problem(err: Any, data: Any, lines: dict[tuple[str | int, ...], int]) -> Problem:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p.startswith("function-"))))
    path = dotted(loc)
    kind = err["type"]
    line = lines.get(loc) or lines.get(loc[:-1])
    if kind == "extra_forbidden":
        known = _section_fields(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        fix = f"did you mean {close[0]}?" if close else ("known keys: " + ", ".join(known) if known else "remove it")
        return Problem(path, f"{path}: unknown key", fix, line)
    if kind == "missing":
        return Problem(path, f"{path} is required", f"add {loc[-1]}: to the {dotted(loc[:-1]) or 'top level'} section", line)
    value = _lookup(data, loc)
    shown = f"{path}={_fmt(value)}"
    ctx = err.get("ctx") or {}
    if kind == "literal_error":
        return Problem(path, f"{shown} is not allowed", f"use {ctx.get('expected', 'one of the listed values')}", line)
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}[kind]
        limit = next(iter(ctx.values()), "")
        return Problem(path, f"{shown} is out of range", f"use a value {bound} {limit}", line)
    if kind == "string_pattern_mismatch":
        hint = _PATTERN_HINTS.get(loc, f"a value matching {ctx.get('pattern', '')}")
        return Problem(path, f"{shown} is not valid", f"use {hint}", line)
    if kind == "int_parsing_size":
        return Problem(path, f"{shown} is out of range", "use a realistic value (megaprov job schema shows every bound)", line)
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return Problem(path, f"{shown} is not a whole number", "write an integer", line)
    if kind in ("float_type", "float_parsing"):
        return Problem(path, f"{shown} is not a number", "write a number such as 3.0e-4", line)
    if kind in ("bool_type", "bool_parsing"):
        return Problem(path, f"{shown} is not true or false", "write true or false", line)
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return Problem(path, f"{shown} must be a mapping", f"write {loc[-1] if loc else 'the spec'} as key: value lines", line)
    if kind == "list_type":
        return Problem(path, f"{shown} must be a list", "write it as a YAML list (- item)", line)
    if kind in ("string_type", "string_too_short"):
        return Problem(path, f"{shown} must be a non-empty string", "quote the value", line)
    if kind == "too_long":
        return Problem(path, f"{path} has {ctx.get('actual_length')} items", f"use at most {ctx.get('max_length')}", line)
    if kind == "value_error" and isinstance(ctx.get("error"), _SpecValue):
        bad = ctx["error"]
        shown = shown if isinstance(value, str) else f"{path} {values.shown(bad.value)}"
        return Problem(path, f"{shown} {bad.problem}", bad.fix, line)
    return Problem(path, f"{shown}: {err['msg']}", "", line)


def parse(text: str, source: str = "") -> JobSpec:
    """Validate a YAML job spec. Raises :class:`JobSpecError` listing every problem (field path, value, fix)."""
    if len(text) > values.MAX_FILE_BYTES:
        raise JobSpecError([Problem("", f"the spec is {len(text):,} characters long", f"keep it under {values.MAX_FILE_BYTES:,}")], source)
    refused = _anchor(text)
    if refused is not None:
        raise JobSpecError([refused], source)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        what = exc.problem or exc.context or "invalid YAML"
        raise JobSpecError([Problem("", f"YAML syntax error: {what}", "fix the YAML syntax at that line", line)], source) from None
    except yaml.YAMLError as exc:
        raise JobSpecError([Problem("", f"YAML error: {exc.__class__.__name__}", "fix the YAML syntax")], source) from None
    except (ValueError, RecursionError) as exc:  # an integer of more than 4,300 digits
        raise JobSpecError([Problem("", f"a value cannot be read ({str(exc).splitlines()[0][:80]})", "write ordinary numbers")], source) from None
    if not isinstance(data, dict):
        raise JobSpecError([Problem("", "a job spec must be a mapping with name, model, train, ...", "see examples/jobs/")], source)
    lines = _line_map(node) if node is not None else {}
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        problems = [_problem(e, data, lines) for e in exc.errors()]
        raise JobSpecError(problems, source) from None


def _anchor(text: str) -> Problem | None:
    """Anchors and aliases make no sense in a job spec, and aliases of aliases expand exponentially (a "billion
    laughs" of 11 lines hangs a loader): refused from the event stream, before anything is composed."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            anchor = getattr(event, "anchor", None)
            line = event.start_mark.line + 1 if event.start_mark else None
            if isinstance(event, yaml.AliasEvent) or anchor is not None:
                what = f"alias *{anchor}" if isinstance(event, yaml.AliasEvent) else f"anchor &{anchor}"
                return Problem("", f"YAML {what}: anchors and aliases are not allowed in a job spec", "write the values out", line)
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > values.MAX_DEPTH:  # the composer recurses per level
                    return Problem("", f"YAML nested deeper than {values.MAX_DEPTH} levels", "a job spec has a few sections of key: value", line)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError:
        return None  # parse() reports the syntax error with its line
    return None


def read_text(path: str | Path) -> str:
    """The text of a job spec file; a missing, unreadable, oversized or non-UTF-8 file is a usage error."""
    return values.read_text(path, "job spec")


def load(path: str | Path) -> JobSpec:
    """Read and validate a job spec file."""
    return parse(read_text(path), str(path))


Lines = dict[tuple[str | int, ...], int]


def line_map(text: str) -> Lines:
    """Line of every key and item of the YAML text ({} when it does not compose)."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    return _line_map(node) if node is not None else {}


def line_of(lines: Lines, path: tuple[str | int, ...]) -> int | None:
    """Line of a field, or of its nearest present parent (for cross-field problems found by the planner)."""
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path)


def schema() -> dict[str, Any]:
    """JSON Schema of gpt.yml for editors (yaml-language-server: $schema=...)."""
    doc = JobSpec.model_json_schema()
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["$id"] = "https://megaprov.dev/schemas/job-v1.json"
    doc["title"] = "megaprov training job (gpt.yml)"
    return doc
