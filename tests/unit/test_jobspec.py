"""Job spec parsing: the examples are valid; every kind of bad input names the field, the value, the fix and the line."""

import json
import textwrap
from pathlib import Path

import pytest

from megaprov import jobspec
from megaprov.jobspec import JobSpecError

ROOT = Path(__file__).resolve().parents[2]
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
