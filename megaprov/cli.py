"""The megaprov command line: parse, call, render. Nothing else lives here."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from megaprov import __version__
from megaprov.errors import ExitCode, MegaprovError, UsageError
from megaprov.output import console, envelope, print_json
from megaprov.runner import STRATEGIES

PROG = "megaprov"


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}", f"see `{self.prog} --help`")


@dataclass
class Outcome:
    """What a command returns: its JSON result, human lines already printed, and the exit code."""

    command: str
    result: Any = field(default_factory=dict)
    code: ExitCode = ExitCode.OK
    error: str | None = None


def _extravars(values: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for raw in values:
        if raw.startswith("@"):
            path = Path(raw[1:])
            if not path.is_file():
                raise UsageError(f"-e {raw}: file {path} does not exist", "pass -e @FILE with an existing YAML file")
            try:
                data = yaml.safe_load(path.read_text())
            except yaml.YAMLError as exc:
                raise UsageError(f"-e {raw}: invalid YAML ({exc.__class__.__name__})", "fix the file's YAML syntax") from None
            if not isinstance(data, dict):
                raise UsageError(f"-e {raw}: must hold a mapping of name: value", "write name: value lines")
            out.update(data)
            continue
        key, sep, value = raw.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"-e {raw!r} is not KEY=VALUE", "write -e name=value (or -e @vars.yml)")
        try:
            out[key] = yaml.safe_load(value) if value else ""
        except yaml.YAMLError:
            out[key] = value
    return out


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Provision GPU machines into a verified Megatron-LM training cluster.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def run_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("inventory", help="INI inventory (megaprov lab up writes one)")
        p.add_argument("--limit", help="only these hosts/groups (Ansible pattern)")
        p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="KEY=VALUE", help="set a variable (or @file.yml)")
        p.add_argument("--forks", type=_positive, help="parallel hosts (default from ansible.cfg)")
        p.add_argument(
            "--strategy",
            choices=STRATEGIES,
            default=os.environ.get("MEGAPROV_STRATEGY", "linear"),
            help="Ansible strategy; mitogen is faster, opt-in (env MEGAPROV_STRATEGY)",
        )
        p.add_argument("--output", choices=("text", "json"), default="text")
        p.add_argument("--flush-cache", action="store_true", help="forget cached facts (after a node was reinstalled or readdressed)")
        p.add_argument("-v", "--verbose", action="count", default=0, help="more Ansible output in the artifacts")

    boot = sub.add_parser("bootstrap", help="provision and validate the cluster")
    run_flags(boot)
    boot.add_argument("--tags", default="", help="only these stages/roles (comma separated)")
    boot.add_argument("--skip-tags", default="", help="skip these stages/roles")
    boot.add_argument("--check", action="store_true", help="dry run: report what would change")
    boot.add_argument("--diff", action="store_true", help="show file differences")

    pre = sub.add_parser("preflight", help="collect node facts and judge them against the requirements")
    run_flags(pre)

    lab = sub.add_parser("lab", help="local container lab of cluster nodes")
    lab_sub = lab.add_subparsers(dest="lab_command", metavar="ACTION", parser_class=_Parser)
    lab_up = lab_sub.add_parser("up", help="start N nodes and write their inventory")
    lab_up.add_argument("--nodes", type=_positive, default=2)
    lab_up.add_argument("--name", default="default")
    lab_up.add_argument("--output", choices=("text", "json"), default="text")
    lab_image = lab_sub.add_parser("image", help="build the node image (cached)")
    lab_image.add_argument("--output", choices=("text", "json"), default="text")
    lab_status = lab_sub.add_parser("status", help="list lab nodes")
    lab_status.add_argument("--output", choices=("text", "json"), default="text")
    lab_down = lab_sub.add_parser("down", help="remove what lab up made")
    lab_down.add_argument("--name", default="default")
    lab_down.add_argument("--output", choices=("text", "json"), default="text")
    return parser


def _cmd_lab(args: argparse.Namespace) -> Outcome:
    if not args.lab_command:
        raise UsageError("megaprov lab: missing ACTION", "use `megaprov lab up`, `megaprov lab status` or `megaprov lab down`")
    from megaprov import lab
    from megaprov.paths import project_root

    root = project_root()
    out, err = console(), console(stderr=True)
    quiet = args.output == "json"

    def progress(message: str) -> None:
        if not quiet:
            err.print(f"lab: {message}", markup=False)

    if args.lab_command == "up":
        inventory, members = lab.up(root, args.name, args.nodes, progress)
        if not quiet:
            out.print(f"lab {args.name}: {len(members)} node(s) up; inventory: {inventory}", markup=False)
        return Outcome("lab up", {"name": args.name, "inventory": str(inventory), "nodes": members})
    if args.lab_command == "image":
        tag = lab.ensure_image(progress)
        if not quiet:
            out.print(f"lab: node image {tag}", markup=False)
        return Outcome("lab image", {"image": tag})
    if args.lab_command == "status":
        found = lab.labs()
        if not quiet:
            if not found:
                out.print("no lab is running")
            for name, members in found.items():
                out.print(f"lab {name}: " + ", ".join(f"{n.name} {n.address or '-'} {n.state}" for n in members), markup=False)
        return Outcome("lab status", {name: members for name, members in found.items()})
    if args.lab_command == "down":
        removed = lab.down(root, args.name, progress)
        if not quiet:
            out.print(f"lab {args.name}: removed {len(removed)} object(s)" if removed else f"lab {args.name}: nothing to remove", markup=False)
        return Outcome("lab down", {"name": args.name, "removed": removed})
    raise UsageError(f"megaprov lab: unknown ACTION {args.lab_command}", "use up, status or down")


def _request(args: argparse.Namespace, **flags: Any) -> Any:
    from megaprov import provision, runner

    if args.strategy not in STRATEGIES:  # argparse does not check a default taken from the environment
        raise UsageError(f"MEGAPROV_STRATEGY={args.strategy!r} is not a strategy", "use " + ", ".join(STRATEGIES))
    options = runner.RunOptions(
        limit=args.limit,
        forks=args.forks,
        extravars=_extravars(args.extra_vars),
        strategy=args.strategy,
        verbosity=args.verbose,
        flush_cache=args.flush_cache,
        **flags,
    )
    return provision.Request(inventory=Path(args.inventory), options=options, quiet=args.output == "json")


def _cmd_bootstrap(args: argparse.Namespace) -> Outcome:
    from megaprov import provision

    request = _request(
        args,
        tags=tuple(t for t in args.tags.split(",") if t),
        skip_tags=tuple(t for t in args.skip_tags.split(",") if t),
        check=args.check,
        diff=args.diff,
    )
    report = provision.bootstrap(request)
    if args.output == "text":
        provision.render_bootstrap(report)
    return Outcome("bootstrap", report, report.exit_code, report.error)


def _cmd_preflight(args: argparse.Namespace) -> Outcome:
    from megaprov import provision

    report = provision.preflight(_request(args))
    if args.output == "text":
        provision.render_preflight(report)
    return Outcome("preflight", report, report.exit_code, report.error)


HANDLERS = {"bootstrap": _cmd_bootstrap, "preflight": _cmd_preflight, "lab": _cmd_lab}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    want_json = any(a == "json" and i > 0 and argv[i - 1] == "--output" for i, a in enumerate(argv)) or "--output=json" in argv
    command = next((a for a in argv if not a.startswith("-")), "")
    err = console(stderr=True)
    try:
        args = build_parser().parse_args(argv)
        if not args.command:
            build_parser().print_help()
            return int(ExitCode.USAGE)
        outcome = HANDLERS[args.command](args)
    except MegaprovError as exc:
        if debug:
            traceback.print_exc()
        if want_json:
            print_json(envelope(command, False, {}, exc.one_line()))
        err.print(f"megaprov: error: {exc.one_line()}", markup=False)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        err.print("megaprov: interrupted")
        return int(ExitCode.INTERRUPTED)
    except Exception as exc:  # a bug: one line, the traceback with --debug
        if debug:
            traceback.print_exc()
        err.print(f"megaprov: internal error: {exc.__class__.__name__}: {exc} (rerun with --debug and report it)", markup=False)
        return int(ExitCode.INTERNAL)
    if getattr(args, "output", "text") == "json":
        print_json(envelope(outcome.command, outcome.code == ExitCode.OK, outcome.result, outcome.error))
    if outcome.error and outcome.code != ExitCode.OK:
        err.print(f"megaprov: error: {outcome.error}", markup=False)
    return int(outcome.code)
