"""Checks of rendered argv against the parsers that will read it: Megatron-LM core_v0.16.1's flag table (recorded in
megaprov/training/megatron/flags-core_v0.16.1.json by scripts/dump-megatron-flags.py from that version's own argparse parser)
and torch's ``torch.distributed.run`` parser (the torchrun part of a node's command)."""

from __future__ import annotations

from argparse import ArgumentParser, Namespace
from functools import cache
from typing import Any

from megaprov.training import render

FLAGS: dict[str, dict[str, Any]] = render.megatron_flags()


def assert_megatron_accepts(args: list[str] | tuple[str, ...]) -> None:
    """Walk argv the way argparse would with Megatron-LM's flag table: known flags, arity, choices."""
    args = list(args)
    i = 0
    while i < len(args):
        flag = args[i]
        assert flag.startswith("--"), f"value {flag!r} without a flag at position {i}"
        assert flag in FLAGS, f"{flag} is not a Megatron-LM core_v0.16.1 argument"
        kind = FLAGS[flag]["kind"]
        values = []
        j = i + 1
        while j < len(args) and not (args[j].startswith("--")):
            values.append(args[j])
            j += 1
        if kind == "switch":
            assert values == [], f"{flag} takes no value, got {values}"
        elif kind == "value":
            assert len(values) == 1, f"{flag} takes one value, got {values}"
        else:
            assert values, f"{flag} needs values"
        if "choices" in FLAGS[flag]:
            assert values[0] in FLAGS[flag]["choices"], f"{flag} {values[0]} not in {FLAGS[flag]['choices']}"
        i = j


@cache
def torchrun_parser() -> ArgumentParser:
    """torch's own torchrun parser (torch is in the test extra, through megatron-core; the Python 3.12 run of the
    unit tests has no torch, and the tests that need its parser skip there, saying so)."""
    import pytest

    pytest.importorskip("torch", reason="skipped: no torch in this environment (torch's own torchrun parser)")
    from torch.distributed import run

    return run.get_args_parser()


def parse_torchrun(argv: list[str] | tuple[str, ...]) -> Namespace:
    """A node's command ``python -m torch.distributed.run ...`` parsed by torch: the part after ``-m
    torch.distributed.run``, the training script and its arguments in ``training_script``/``training_script_args``."""
    argv = list(argv)
    assert argv[1:3] == ["-m", "torch.distributed.run"], argv[:3]
    return torchrun_parser().parse_args(argv[3:])


def as_the_refusals_fix_it(spec: Any, stack: Any) -> tuple[Any, list[str]]:
    """The spec as the fixes of its refusals on nodes with ``stack`` leave it (render.stack_problems: sequence
    parallelism off, a forced implementation dropped, a Hugging Face tokenizer replaced by the null one, whose files the
    check has none of), and the paths of what was refused. Dropping a forced implementation can surface the next one."""
    from megaprov.training import jobspec

    refused: list[str] = []
    for _ in range(3):
        for problem in render.stack_problems(spec, stack):
            refused.append(problem.path)
            if problem.path == "parallel.sequence_parallel":
                spec = spec.model_copy(update={"parallel": spec.parallel.model_copy(update={"sequence_parallel": False})})
            elif problem.path == "data.tokenizer.type":
                tokenizer = jobspec.Tokenizer(type="null", vocab_size=32000)
                spec = spec.model_copy(update={"data": spec.data.model_copy(update={"tokenizer": tokenizer})})
            else:
                spec = spec.model_copy(update={"launch": spec.launch.model_copy(update={"extra_args": []})})
    assert render.stack_problems(spec, stack) == [], "a refusal whose fix this helper does not know"
    return spec, refused
