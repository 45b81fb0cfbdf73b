"""The megaprov command line: one module per command family (each parses, calls the domain and returns an
:class:`~megaprov.commands.base.Outcome`); :func:`main` runs one and renders its outcome, as text or as the
versioned JSON envelope (schemas/envelope-v2.json), with the exit code of the one table (megaprov.errors)."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from megaprov.commands import bundle, cluster, data, image, lab, ops, shell, training
from megaprov.commands.base import PROG, Outcome, Parser, global_flags
from megaprov.errors import ExitCode, MegaprovError, error_object
from megaprov.output import console, envelope, print_json
from megaprov.values import close

FAMILIES = (cluster, training, data, image, ops, lab, bundle, shell)


class _Version(argparse.Action):
    """``--version``: megaprov's, the collection's it runs (and where), ansible-core's and Python's."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show versions and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:
        from megaprov.selfcheck import version_lines

        print("\n".join(version_lines()))
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description="Provision GPU machines into a verified Megatron-LM training cluster.",
        epilog="examples:\n  megaprov lab up --nodes 2 && export MEGAPROV_INVENTORY=$(megaprov lab inventory)\n"
        "  megaprov bootstrap\n  megaprov train -f examples/jobs/gpt-lab.yml\n  megaprov COMMAND --help",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    global_flags(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for family in FAMILIES:
        family.register(sub)
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # noqa: SLF001 (argparse keeps its subparsers there)
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return dict(action.choices)
    return {}


def leaf(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The (sub)command parser argv reaches, and the path of names that led there."""
    path: list[str] = []
    value = False  # the token is the value of -o/--output given before the command
    for token in argv:
        if value or token.startswith("-"):
            value = token in ("-o", "--output")
            continue
        children = _subparsers(parser)
        if token not in children:
            break
        parser = children[token]
        path.append(token)
    return parser, path


def _unknown_flag(error: MegaprovError, parser: argparse.ArgumentParser, argv: Sequence[str]) -> MegaprovError:
    """'unrecognized arguments: --nodse': the flag the command has that is closest, from the command's own parser."""
    marker = "unrecognized arguments: "
    if marker not in error.message:
        return error
    found, path = leaf(parser, argv)
    first = error.message.split(marker, 1)[1].split()[0]
    guess = close(first.split("=")[0], [s for s in found._option_string_actions if s.startswith("--")]) if first.startswith("--") else None  # noqa: SLF001
    if guess:
        error.hint = f"did you mean {guess}? (see `{' '.join([PROG, *path])} --help`)"
    elif path:
        error.hint = f"see `{' '.join([PROG, *path])} --help`"
    return error


def _missing_action(args: argparse.Namespace, parser: argparse.ArgumentParser) -> MegaprovError:
    from megaprov.errors import UsageError

    family = args.command
    actions = sorted(_subparsers(_subparsers(parser)[family]))
    return UsageError(f"megaprov {family}: missing ACTION", "use " + ", ".join(f"`megaprov {family} {a}`" for a in actions))


def _wants_json(argv: Sequence[str]) -> bool:
    for i, arg in enumerate(argv):
        if arg in ("-o", "--output") and i + 1 < len(argv) and argv[i + 1] == "json":
            return True
        if arg in ("--output=json", "-ojson", "-o=json"):
            return True
    return False


def emit(outcome: Outcome, output: str) -> None:
    """The one renderer: the command's text, or the JSON envelope (a document command prints its document as is)."""
    if output == "json" and not outcome.document:
        errors = outcome.errors
        if errors is None and outcome.error and outcome.code != ExitCode.OK:
            errors = [error_object(outcome.code, outcome.error)]
        print_json(envelope(outcome.command, outcome.code == ExitCode.OK, outcome.result, errors))
        return
    if outcome.text is not None and (output == "text" or outcome.document):
        outcome.text()


def _complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request (argcomplete sets _ARGCOMPLETE) and exit; otherwise nothing."""
    import os

    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete

    argcomplete.autocomplete(parser)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    want_json = _wants_json(argv)
    err = console(stderr=True)
    parser = build_parser()
    _complete(parser)
    command = " ".join(leaf(parser, argv)[1]) or ""
    try:
        args = parser.parse_args(argv)
        if not args.command:
            parser.print_help()
            return int(ExitCode.USAGE)
        if not hasattr(args, "handler"):
            raise _missing_action(args, parser)
        command = args.command_path
        outcome = args.handler(args)
    except MegaprovError as exc:
        exc = _unknown_flag(exc, parser, argv)
        if debug:
            traceback.print_exc()
        if want_json:
            print_json(envelope(command, False, {}, exc.objects()))
        err.print(f"megaprov: error: {exc.one_line()}", markup=False)
        for line in exc.details:
            err.print(f"megaprov: error: {line}", markup=False)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        err.print("megaprov: interrupted")
        return int(ExitCode.INTERRUPTED)
    except Exception as exc:  # a bug: one line, the traceback with --debug
        if debug:
            traceback.print_exc()
        err.print(f"megaprov: internal error: {exc.__class__.__name__}: {exc} (rerun with --debug and report it)", markup=False)
        return int(ExitCode.INTERNAL)
    emit(outcome, args.output)
    if outcome.error and outcome.code != ExitCode.OK:
        err.print(f"megaprov: error: {outcome.error}", markup=False)
    return int(outcome.code)
