"""completion: the shell's completion of megaprov's commands, flags and choices, generated from the parser."""

from __future__ import annotations

import argparse
from typing import Any

from megaprov.commands.base import Outcome, command

SHELLS = ("bash", "zsh", "fish")


def register(sub: Any) -> None:
    p = command(
        sub,
        "completion",
        "completion",
        "print the shell code that completes megaprov's commands, flags and choices (argcomplete)",
        [
            'eval "$(megaprov completion bash)"                     # in ~/.bashrc',
            'eval "$(megaprov completion zsh)"                      # in ~/.zshrc',
            "megaprov completion fish > ~/.config/fish/completions/megaprov.fish",
        ],
    )
    p.add_argument("shell", choices=SHELLS, help="the shell: bash, zsh or fish")
    p.set_defaults(handler=_completion)


def _completion(args: argparse.Namespace) -> Outcome:
    import importlib

    # looked up by name: argcomplete's type hints differ between its releases, and the pin allows several
    shellcode = importlib.import_module("argcomplete.shell_integration").shellcode
    code = str(shellcode(["megaprov"], shell=args.shell))
    return Outcome("completion", {"shell": args.shell, "code": code}, text=lambda: print(code, end=""))
