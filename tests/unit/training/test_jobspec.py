"""Job spec parsing: the examples are valid; every kind of bad input names the field, the value, the fix and the line."""

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from megaprov.errors import UsageError
from megaprov.training import jobspec
from megaprov.training.jobspec import JobSpecError

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples" / "jobs").glob("*.yml"))

MINIMAL = """\
name: t
model:
  num_layers: 2
  hidden_size: 64
  num_attention_heads: 4
  seq_length: 128
train:
  global_batch_size: 8
  train_iters: 10
  lr: 1.0e-3
data:
  mock: true
"""


def problems(text):
    with pytest.raises(JobSpecError) as info:
        jobspec.parse(text, "gpt.yml")
    return [info.value.one_line(), *info.value.details]


def test_examples_exist_and_parse():
    names = {p.stem for p in EXAMPLES}
    assert {"lab-tiny", "gpt-345m-1node", "llama-8b-2nodes", "gpt3-175b-128nodes"} <= names
    for path in EXAMPLES:
        spec = jobspec.load(path)
        assert spec.name


def test_minimal_defaults():
    spec = jobspec.parse(MINIMAL)
    assert spec.model.ffn == 256
    assert spec.model.query_groups == 4
    assert spec.model.max_positions == 128
    assert spec.parallel.tensor == 1 and spec.train.precision == "bf16"
    assert spec.verify.gpu_utilization == 0.8
    assert spec.launch.trainer == "megatron-lm"


def test_unknown_key_suggests_the_close_one_with_its_line():
    text = MINIMAL.replace("  hidden_size: 64", "  hidden_size: 64\n  hiden_size: 64")
    [line] = problems(text)
    assert line == "gpt.yml:5: model.hiden_size: unknown key; did you mean hidden_size?"


def test_unknown_top_level_section():
    [line] = problems(MINIMAL + "trian: {}\n")
    assert "trian: unknown key" in line and "did you mean train?" in line


def test_missing_required_field():
    text = MINIMAL.replace("  train_iters: 10\n", "")
    [line] = problems(text)
    assert line == "gpt.yml:7: train.train_iters is required; add train_iters: to the train section"


def test_wrong_type_and_choice_and_range_all_reported():
    text = MINIMAL.replace("num_attention_heads: 4", "num_attention_heads: four").replace("lr: 1.0e-3", "lr: 1.0e-3\n  precision: bf32")
    text = text.replace("data:\n", "parallel:\n  tensor: 0\ndata:\n")
    lines = problems(text)
    assert "gpt.yml:5: model.num_attention_heads=four is not a whole number; write an integer" in lines
    assert "gpt.yml:11: train.precision=bf32 is not allowed; use 'bf16', 'fp16' or 'fp32'" in lines
    assert "gpt.yml:13: parallel.tensor=0 is out of range; use a value >= 1" in lines


def test_bad_name_pattern():
    [line] = problems(MINIMAL.replace("name: t", "name: My Job"))
    assert line.startswith('gpt.yml:1: name="My Job" is not valid; use lower-case letters')


def test_yaml_syntax_error_gives_the_line():
    [line] = problems("name: t\nmodel:\n  num_layers: [1,\n")
    assert line.startswith("gpt.yml:4: YAML syntax error")


def test_not_a_mapping():
    [line] = problems("- a\n- b\n")
    assert "must be a mapping" in line


def test_section_of_wrong_kind():
    [line] = problems(MINIMAL.replace("data:\n  mock: true\n", "data: 3\n"))
    assert line == "gpt.yml:11: data=3 must be a mapping; write data as key: value lines"


def test_load_missing_file(tmp_path):
    with pytest.raises(Exception) as info:
        jobspec.load(tmp_path / "nope.yml")
    assert "does not exist" in str(info.value)


def test_schema_forbids_unknown_keys_everywhere():
    doc = jobspec.schema()
    assert set(doc["properties"]) == {"version", "name", "model", "parallel", "train", "data", "checkpoint", "launch", "verify"}
    assert doc["additionalProperties"] is False
    for name, definition in doc["$defs"].items():
        if definition.get("type") == "object" and "properties" in definition:
            assert definition.get("additionalProperties") is False, name
    json.dumps(doc)  # serialisable


def test_line_of_nested_field():
    text = textwrap.dedent(MINIMAL)
    lines = jobspec.line_map(text)
    assert jobspec.line_of(lines, ("train", "lr")) == 10
    assert jobspec.line_of(lines, ("parallel", "tensor")) is None  # absent section: no line
    assert jobspec.line_of(lines, ("model", "nope")) == 2
    assert jobspec.line_map("a: [1,\n") == {}


def _doc(**sections):
    """MINIMAL as a dict, with ``section={key: value}`` merged in."""
    doc = yaml.safe_load(MINIMAL)
    for section, fields in sections.items():
        if section == "top":
            doc.update(fields)
            continue
        node = doc.setdefault(section, {})
        for key, value in fields.items():
            sub = node
            *parents, leaf = key.split(".")
            for part in parents:
                sub = sub.setdefault(part, {})
            sub[leaf] = value
    return doc


def _parse(doc):
    return jobspec.parse(yaml.safe_dump(doc), "gpt.yml")


def _get(spec, section, key):
    node = getattr(spec, section)
    for part in key.split("."):
        node = getattr(node, part)
    return node


# The documented bounds of every numeric field (`megaprov job schema`): (section, field, lowest, highest, how the lower
# bound is written, how the upper one is). Sizes: 1 << 20 = 1,048,576 hidden; 1 << 16 = 65,536 heads, groups,
# context and micro-batch; 1 << 22 = 4,194,304 tokens; 1 << 24 = 16,777,216 vocabulary and batch; MAX_HOSTS 10,000.
BOUNDS = [
    ("model", "num_layers", 1, 1000, ">=", "<="),
    ("model", "hidden_size", 1, 1_048_576, ">=", "<="),
    ("model", "num_attention_heads", 1, 65_536, ">=", "<="),
    ("model", "num_query_groups", 1, 65_536, ">=", "<="),
    ("model", "ffn_hidden_size", 1, 4 * 1_048_576, ">=", "<="),
    ("model", "seq_length", 1, 4_194_304, ">=", "<="),
    ("model", "max_position_embeddings", 1, 4_194_304, ">=", "<="),
    ("model", "vocab_size", 1, 16_777_216, ">=", "<="),
    ("model", "make_vocab_size_divisible_by", 1, 65_536, ">=", "<="),
    ("model", "rotary_base", 1, 1_000_000_000, ">=", "<="),
    ("model", "init_method_std", 0.0, 10.0, ">", "<="),
    ("model", "hidden_dropout", 0.0, 1.0, ">=", "<"),
    ("model", "attention_dropout", 0.0, 1.0, ">=", "<"),
    ("parallel", "tensor", 1, 64, ">=", "<="),
    ("parallel", "pipeline", 1, 1000, ">=", "<="),
    ("parallel", "context", 1, 65_536, ">=", "<="),
    ("parallel", "virtual_stages", 1, 1000, ">=", "<="),
    ("train", "micro_batch_size", 1, 65_536, ">=", "<="),
    ("train", "global_batch_size", 1, 16_777_216, ">=", "<="),
    ("train", "train_iters", 1, 1_000_000_000, ">=", "<="),
    ("train", "lr", 0.0, 10.0, ">=", "<="),
    ("train", "min_lr", 0.0, 10.0, ">=", "<="),
    ("train", "lr_decay_iters", 1, 1_000_000_000, ">=", "<="),
    ("train", "lr_warmup_iters", 0, 1_000_000_000, ">=", "<="),
    ("train", "weight_decay", 0.0, 10.0, ">=", "<="),
    ("train", "adam_beta1", 0.0, 1.0, ">", "<"),
    ("train", "adam_beta2", 0.0, 1.0, ">", "<"),
    ("train", "clip_grad", 0.0, 1000000.0, ">=", "<="),
    ("train", "recompute_num_layers", 1, 1000, ">=", "<="),
    ("train", "seed", 0, 2**32 - 1, ">=", "<="),
    ("train", "log_interval", 1, 1_000_000_000, ">=", "<="),
    ("train", "eval_interval", 1, 1_000_000_000, ">=", "<="),
    ("train", "eval_iters", 0, 1_000_000_000, ">=", "<="),
    ("data", "tokenizer.vocab_size", 1, 16_777_216, ">=", "<="),
    ("checkpoint", "save_interval", 1, 1_000_000_000, ">=", "<="),
    ("launch", "nodes", 1, 10_000, ">=", "<="),
    ("launch", "gpus_per_node", 1, 64, ">=", "<="),
    ("launch", "master_port", 1024, 65_535, ">=", "<="),
    ("launch", "max_restarts", 0, 100, ">=", "<="),
    ("verify", "tokens_per_second", 0.0, 1000000000000000.0, ">", "<="),
    ("verify", "mfu", 0.0, 1.0, ">", "<="),
    ("verify", "throughput_tolerance", 0.0, 1.0, ">", "<="),
    ("verify", "loss_window", 3, 1_000_000, ">=", "<="),
    ("verify", "gpu_utilization", 0.0, 1.0, ">=", "<="),
]


def _inside(value, how, step):
    """The nearest value the bound admits: the bound itself, or a step inside it for a strict bound."""
    return value if how in (">=", "<=") else (value + step if how == ">" else value - step)


@pytest.mark.parametrize(("section", "key", "low", "high", "low_how", "high_how"), BOUNDS, ids=[f"{s}.{k}" for s, k, *_ in BOUNDS])
def test_every_numeric_bound_holds_where_documented(section, key, low, high, low_how, high_how):
    step = 1 if isinstance(low, int) and low_how == ">=" and isinstance(high, int) else 1e-6
    for value in (_inside(low, low_how, step), _inside(high, high_how, step)):
        assert _get(_parse(_doc(**{section: {key: value}})), section, key) == value
    path = f"{section}.{key}"
    below = low - 1 if low_how == ">=" else low
    above = high + 1 if high_how == "<=" else high
    for value, how, bound in ((below, low_how, low), (above, high_how, high)):
        with pytest.raises(JobSpecError) as info:
            _parse(_doc(**{section: {key: value}}))
        [problem] = info.value.problems
        assert problem.path == path
        assert problem.message == f"{path}={jobspec._fmt(value)} is out of range"
        assert problem.fix == f"use a value {how} {bound}"


def test_every_default():
    """What a spec that sets only the required fields gets (Megatron-LM's usual GPT settings, written in the schema)."""
    s = jobspec.parse(MINIMAL)
    m, p, t, d, c, la, v = s.model, s.parallel, s.train, s.data, s.checkpoint, s.launch, s.verify
    assert s.version == 1 and jobspec.SPEC_VERSION == 1 and jobspec.PINNED_MEGATRON == "core_v0.16.1"
    assert (m.num_query_groups, m.ffn_hidden_size, m.max_position_embeddings, m.vocab_size) == (None, None, None, None)
    assert (m.make_vocab_size_divisible_by, m.activation, m.normalization, m.position_embedding, m.rotary_base) == (
        128,
        "gelu",
        "LayerNorm",
        "learned_absolute",
        10000,
    )
    assert (m.attention_backend, m.untie_embeddings, m.bias_linear) == ("auto", False, True)
    assert (m.init_method_std, m.hidden_dropout, m.attention_dropout) == (0.02, 0.1, 0.1)
    assert (p.tensor, p.pipeline, p.context, p.virtual_stages) == (1, 1, 1, None)
    assert not (p.sequence_parallel or p.distributed_optimizer or p.overlap_grad_reduce or p.overlap_param_gather or p.tp_comm_overlap)
    assert (t.micro_batch_size, t.min_lr, t.lr_decay_style, t.lr_decay_iters, t.lr_warmup_iters) == (1, 0.0, "cosine", None, 0)
    assert (t.weight_decay, t.adam_beta1, t.adam_beta2, t.clip_grad, t.precision) == (0.01, 0.9, 0.95, 1.0, "bf16")
    assert (t.recompute, t.recompute_method, t.recompute_num_layers, t.seed) == ("none", "uniform", 1, 1234)
    assert (t.log_interval, t.eval_interval, t.eval_iters) == (1, 1000, 10)
    assert (d.mock, d.prefixes, d.split) == (True, [], "949,50,1")
    assert d.tokenizer == jobspec.Tokenizer(type="byte", vocab_file=None, merge_file=None, path=None, vocab_size=None)
    assert (c.directory, c.save_interval, c.format, c.resume, c.async_save) == (None, 1000, "torch_dist", "auto", False)
    assert (la.launcher, la.nodes, la.gpus_per_node, la.trainer) == ("torchrun", 1, 8, "megatron-lm")
    assert (la.megatron_dir, la.python, la.master_port, la.max_restarts) == ("/opt/megatron-lm", "/opt/megaprov/venv/bin/python", 29500, 3)
    assert (la.env, la.extra_args) == ({}, [])
    assert la.slurm == jobspec.Slurm(partition=None, account=None, time=None, qos=None)
    assert (v.tokens_per_second, v.mfu, v.throughput_tolerance, v.loss_window, v.gpu_utilization) == (None, None, 0.8, 20, 0.8)
    assert jobspec.DataPrefix(path="x").weight == 1.0
    # sections left out entirely get the same defaults as empty ones
    assert jobspec.parse(MINIMAL.replace("data:\n  mock: true\n", "")).data == jobspec.Data()


ONE_LINE_ERRORS = [
    ("lr: 1.0e-3", "lr: fast", "gpt.yml:10: train.lr=fast is not a number; write a number such as 3.0e-4"),
    ("lr: 1.0e-3", "lr: 1.5e", "gpt.yml:10: train.lr=1.5e is not a number; write a number such as 3.0e-4"),
    ("num_layers: 2", "num_layers: 2.5", "gpt.yml:3: model.num_layers=2.5 is not a whole number; write an integer"),
    ("mock: true", "mock: maybe", "gpt.yml:12: data.mock=maybe is not true or false; write true or false"),
    ("mock: true", "prefixes: data/x", "gpt.yml:12: data.prefixes=data/x must be a list; write it as a YAML list (- item)"),
    ("name: t", "name: 12", "gpt.yml:1: name=12 must be a non-empty string; quote the value"),
    ("name: t", "name: null", "gpt.yml:1: name=null must be a non-empty string; quote the value"),
    (
        "num_layers: 2",
        "num_layers: " + "9" * 30,
        "gpt.yml:3: model.num_layers=999999999999999999999999999999 is out of range; use a value <= 1000",
    ),
    (
        "mock: true",
        "mock: true\n  split: 1,2,3,4",
        'gpt.yml:13: data.split="1,2,3,4" is not valid; use up to three comma-separated weights such as 949,50,1',
    ),
    (
        "name: t",
        'name: "a\\u0007b"',  # a control character is escaped: the problem stays one line
        "gpt.yml:1: name=\"a\\u0007b\" is not valid; use lower-case letters, digits, '.', '_' and '-' (at most 63, starting with a letter or digit)",
    ),
    (
        "name: t",
        'name: "a\\u2028b"',  # so is a Unicode line separator
        "gpt.yml:1: name=\"a\\u2028b\" is not valid; use lower-case letters, digits, '.', '_' and '-' (at most 63, starting with a letter or digit)",
    ),
    (
        "name: t",
        "name: " + "y" * 70,  # shortened to 40 characters
        'gpt.yml:1: name="'
        + "y" * 36
        + "... is not valid; use lower-case letters, digits, '.', '_' and '-' (at most 63, starting with a letter or digit)",
    ),
    ("num_layers: 2", "num_layers: &n 2", "gpt.yml:3: YAML anchor &n: anchors and aliases are not allowed in a job spec; write the values out"),
    ("hidden_size: 64", "hidden_size: *n", "gpt.yml:4: YAML alias *n: anchors and aliases are not allowed in a job spec; write the values out"),
]
APPENDED_ERRORS = [
    ("launch:\n  python: ''\n", 'gpt.yml:14: launch.python="" is empty; give a value'),
    ("launch:\n  extra_args: [" + ",".join(["--manual-gc"] * 1001) + "]\n", "gpt.yml:14: launch.extra_args has 1001 items; use at most 1000"),
    ("launch:\n  python: relative/python\n", "gpt.yml:14: launch.python=relative/python is not an absolute path; start it with /"),
    ("launch:\n  env: {NCCL_DEBUG: [1]}\n", "gpt.yml:14: launch.env.NCCL_DEBUG=[1] must be a non-empty string; quote the value"),
    ("launch:\n  env: {RANK: '3'}\n", "gpt.yml:14: launch.env 'RANK' is set by megaprov itself (torchrun); remove it from launch.env"),
    (
        "launch:\n  env: {'1BAD': x}\n",
        "gpt.yml:14: launch.env '1BAD' is not an environment variable name; use letters, digits and _, not starting with a digit",
    ),
    (
        "launch:\n  slurm: {time: 'soon'}\n",
        "gpt.yml:14: launch.slurm.time=soon is not valid; use a Slurm walltime such as 2-00:00:00, 12:00:00 or 90",
    ),
    ("launch:\n  slurm: {partition: {a: 1}}\n", 'gpt.yml:14: launch.slurm.partition={"a": 1} must be a non-empty string; quote the value'),
    (
        "verify:\n  zzzzqqq: 1\n",
        "gpt.yml:14: verify.zzzzqqq: unknown key; known keys: tokens_per_second, mfu, throughput_tolerance, loss_window, gpu_utilization",
    ),
    ("nope: {a: 1}\n", "gpt.yml:13: nope: unknown key; known keys: version, name, model, parallel, train, data, checkpoint, launch, verify"),
]


@pytest.mark.parametrize(("old", "new", "expected"), ONE_LINE_ERRORS, ids=[e[1][:24] for e in ONE_LINE_ERRORS])
def test_each_kind_of_bad_value_gives_its_one_line_problem(old, new, expected):
    assert problems(MINIMAL.replace(old, new)) == [expected]


@pytest.mark.parametrize(("tail", "expected"), APPENDED_ERRORS, ids=[e[1][12:40] for e in APPENDED_ERRORS])
def test_each_kind_of_bad_launch_or_section_gives_its_one_line_problem(tail, expected):
    assert problems(MINIMAL + tail) == [expected]


def test_every_problem_of_a_list_item_names_its_index_and_line():
    text = MINIMAL.replace("mock: true", "prefixes:\n    - path: ''\n    - {path: /x/../y, weight: 0}")
    assert problems(text) == [
        'gpt.yml:13: data.prefixes[0].path="" must be a non-empty string; quote the value',
        "gpt.yml:14: data.prefixes[1].path=/x/../y contains '..'; write the path without '..'",
        "gpt.yml:14: data.prefixes[1].weight=0 is out of range; use a value > 0.0",
    ]
    lines = jobspec.line_map(text)
    assert (lines[("data", "prefixes", 0)], lines[("data", "prefixes", 1, "path")]) == (13, 14)
    # missing fields of a section are placed on the section's line; a missing section has no line
    assert problems("name: t\nmodel: {num_layers: 1}\n") == [
        "gpt.yml:2: model.hidden_size is required; add hidden_size: to the model section",
        "gpt.yml:2: model.num_attention_heads is required; add num_attention_heads: to the model section",
        "gpt.yml:2: model.seq_length is required; add seq_length: to the model section",
        "gpt.yml: train is required; add train: to the top level section",
    ]


def test_documents_refused_before_they_are_read():
    assert problems("a: " + "[" * 40 + "]" * 40 + "\n") == [
        "gpt.yml:1: YAML nested deeper than 32 levels; a job spec has a few sections of key: value"
    ]
    assert problems("#" * (1 << 20) + "x") == ["gpt.yml: the spec is 1,048,577 characters long; keep it under 1,048,576"]
    assert len(problems("#" * (1 << 20))) == 1  # exactly 1 MiB is read (and is no mapping)
    [digits] = problems("name: t\nmodel: {num_layers: " + "1" * 5000 + "}\n")
    assert digits.startswith("gpt.yml: a value cannot be read (Exceeds the limit (4300 digits)") and digits.endswith("); write ordinary numbers")
    assert problems("") == ["gpt.yml: a job spec must be a mapping with name, model, train, ...; see examples/jobs/"]
    assert problems("name: t\n\tmodel: 1\n") == [
        "gpt.yml:2: YAML syntax error: found character '\\t' that cannot start any token; fix the YAML syntax at that line"
    ]
    with pytest.raises(JobSpecError) as info:
        jobspec.parse("- a\n")
    assert str(info.value) == "a job spec must be a mapping with name, model, train, ...; see examples/jobs/"  # no source, no prefix


def test_small_helpers_of_the_messages():
    assert jobspec.dotted(("data", "prefixes", 0, "path")) == "data.prefixes[0].path"
    assert jobspec.dotted((0, "a")) == "[0].a" and jobspec.dotted(()) == ""
    assert [jobspec._fmt(v) for v in (None, True, False, "a b", "ok/x.y_z+1-", 3)] == ["null", "true", "false", '"a b"', "ok/x.y_z+1-", "3"]
    assert jobspec._fmt("x" * 60) == "x" * 60 and jobspec._fmt("x" * 61) == '"' + "x" * 36 + "..."
    assert jobspec._fmt("\x85") == '"\\u0085"'
    data = {"a": [1, {"b": 2}]}
    assert jobspec._lookup(data, ("a", 1, "b")) == 2
    assert [jobspec._lookup(data, p) for p in (("a", 2), ("a", "x"), ("a", 0, "b"), ("z",))] == [None, None, None, None]
    assert jobspec._section_fields(("launch", "slurm")) == ["partition", "account", "time", "qos", "shape"]
    assert jobspec._section_fields(("data", "prefixes", 0)) == ["path", "weight"]
    assert jobspec._section_fields(("nope",)) == [] and jobspec._section_fields(("name",)) == []
    assert jobspec.line_map("") == {} and jobspec.line_map("x: 1\n") == {("x",): 1}
    assert jobspec.Problem("a", "m", "f", 3).render("s.yml") == "s.yml:3: m; f"
    assert jobspec.Problem("a", "m").render("s.yml") == "s.yml: m" and jobspec.Problem("a", "m", "f").render() == "m; f"
    error = JobSpecError([jobspec.Problem("a", "one", "fix"), jobspec.Problem("b", "two", line=4)], "s.yml")
    assert (str(error), error.details, error.source) == ("s.yml: one; fix", ["s.yml:4: two"], "s.yml")


def test_schema_names_itself():
    doc = jobspec.schema()
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert doc["$id"] == "https://megaprov.dev/schemas/job-v1.json"
    assert doc["title"] == "megaprov training job (gpt.yml)"


def test_load_names_the_file_in_every_problem(tmp_path):
    path = tmp_path / "gpt.yml"
    path.write_text(MINIMAL.replace("num_layers: 2", "num_layers: 0"))
    with pytest.raises(JobSpecError) as info:
        jobspec.load(path)
    assert str(info.value) == f"{path}:3: model.num_layers=0 is out of range; use a value >= 1"
    with pytest.raises(UsageError) as info:
        jobspec.load(tmp_path / "nope.yml")
    assert str(info.value) == f"job spec {tmp_path / 'nope.yml'} does not exist: check the path"
    assert jobspec.read_text(path) == path.read_text()
