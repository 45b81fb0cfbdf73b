"""Record every pretrain_gpt.py flag of a Megatron-LM checkout, from that version's own argument parser.

    PYTHONPATH=/path/to/Megatron-LM python scripts/dump-megatron-flags.py core_v0.16.1 > megaprov/training/megatron/flags-core_v0.16.1.json

Needs torch and Megatron-LM's import-time dependencies (six, regex, pyyaml, pydantic). The output is what
megaprov's renderer is tested against and what pass-through arguments (launch.extra_args) are checked with.
"""

from __future__ import annotations

import argparse
import json
import sys


def kind(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "switch"
    if action.nargs in ("+", "*") or isinstance(action.nargs, int):
        return "list"
    return "value"


def main() -> None:
    from megatron.training.arguments import add_megatron_arguments

    tag = sys.argv[1] if len(sys.argv) > 1 else "unknown"
    parser = argparse.ArgumentParser(allow_abbrev=False)
    add_megatron_arguments(parser)
    flags: dict[str, dict[str, object]] = {}
    for action in parser._actions:
        for option in action.option_strings:
            if not option.startswith("--"):
                continue
            entry: dict[str, object] = {"kind": kind(action)}
            if action.choices is not None:
                # Enum-typed flags (--attention-backend) list the names a user types.
                entry["choices"] = sorted(getattr(c, "name", str(c)) for c in action.choices)
            flags[option] = entry
    doc = {"megatron_lm": tag, "source": "megatron/training/arguments.py add_megatron_arguments()", "flags": flags}
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
