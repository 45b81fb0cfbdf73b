"""A job spec's problems as the JSON envelope carries them (JobSpecError.objects: one error object per problem, with
the spec's field, file and line) and the 'did you mean' of an unknown key in an optional section. Real specs from
examples/jobs, parsed by megaprov.training.jobspec; nothing is stood in."""

from __future__ import annotations

from pathlib import Path

import pytest

from megaprov.training import jobspec

EXAMPLE = (Path(__file__).resolve().parents[3] / "examples" / "jobs" / "gpt-345m-1node.yml").read_text()


def problems_of(text: str, source: str = "gpt.yml") -> jobspec.JobSpecError:
    with pytest.raises(jobspec.JobSpecError) as error:
        jobspec.parse(text, source)
    return error.value


def test_each_problem_is_an_error_object_with_its_field_file_and_line():
    bad = EXAMPLE.replace("num_layers:", "num_layerz:", 1)
    objects = problems_of(bad).objects()
    line = next(n for n, text in enumerate(bad.splitlines(), 1) if "num_layerz:" in text)
    assert objects == [
        {
            "code": 2,
            "kind": "usage",
            "message": "model.num_layers is required",
            "fix": "add num_layers: to the model section",
            "file": "gpt.yml",
            "line": line - 1,
            "field": "model.num_layers",
        },
        {
            "code": 2,
            "kind": "usage",
            "message": "model.num_layerz: unknown key",
            "fix": "did you mean num_layers?",
            "file": "gpt.yml",
            "line": line,
            "field": "model.num_layerz",
        },
    ]


def test_a_problem_without_a_source_fix_path_or_line_leaves_those_keys_out():
    error = jobspec.JobSpecError([jobspec.Problem("", "the spec is empty")])
    assert error.objects() == [{"code": 2, "kind": "usage", "message": "the spec is empty"}]


def test_an_unknown_key_in_an_optional_section_gets_the_close_key_of_that_section():
    bad = EXAMPLE.replace("launch:\n", "launch:\n  container: {image: nvcr.io/nvidia/pytorch:25.01-py3, imgae: x}\n", 1)
    found = [(p.path, p.message, p.fix) for p in problems_of(bad).problems]
    assert found == [("launch.container.imgae", "launch.container.imgae: unknown key", "did you mean image?")]


def test_an_unknown_key_in_a_list_of_sections_gets_the_close_key_of_an_item():
    mount = "{source: /data, target: /data}"
    bad = EXAMPLE.replace(
        "launch:\n", f"launch:\n  container: {{image: nvcr.io/nvidia/pytorch:25.01-py3, mounts: [{mount}, {{sorce: /x, target: /y}}]}}\n", 1
    )
    found = [(p.path, p.fix) for p in problems_of(bad).problems if "unknown" in p.message]
    assert found == [("launch.container.mounts[1].sorce", "did you mean source?")]


def test_an_unknown_key_under_a_plain_value_lists_nothing_to_choose():
    assert jobspec._section_fields(("name",)) == []
    assert jobspec._section_fields(("model", "num_layers")) == []
    assert jobspec._section_fields(("nothing",)) == []
    assert "image" in jobspec._section_fields(("launch", "container"))
