"""What every command shares: the parser class ("did you mean"), the result a command returns, flag types and the
flags every command spells the same way (-i/--inventory, -o/--output, --debug, -f/--job, -e)."""

from __future__ import annotations

import argparse
import os
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import yaml

from megaprov.errors import ExitCode, UsageError
from megaprov.values import close

if TYPE_CHECKING:
    from megaprov.output import Reporter

PROG = "megaprov"
OUTPUTS = ("text", "json")


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """'; did you mean X?' for a close choice, else ''."""
    guess = close(word, choices)
    return f"; did you mean {guess!r}?" if guess else ""


_INVALID_CHOICE = re.compile(r"^argument (?P<arg>[^:]+): invalid choice: '?(?P<value>[^' ]*)'? \(choose from (?P<choices>.*)\)$")


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line and exit code 2, with the close choice where there is one."""

    def error(self, message: str) -> NoReturn:
        bad = _INVALID_CHOICE.match(message)
        if bad:
            choices = [c.strip().strip("'") for c in bad["choices"].split(",")]
            guess = close(bad["value"], choices)
            hint = f"did you mean {guess!r}? (see `{self.prog} --help`)" if guess else "choose from " + ", ".join(choices)
            raise UsageError(f"{self.prog}: argument {bad['arg']}: invalid choice: {bad['value']!r}", hint)
        raise UsageError(f"{self.prog}: {message}", f"see `{self.prog} --help`")


@dataclass
class Outcome:
    """What a command returns: its result (the JSON envelope's), how to show it as text, its exit code and error.

    ``text`` prints the human form (called only without ``-o json``); ``document`` is a command whose output is a
    document of its own (``job schema``, ``logs``' lines), printed as is in both forms.
    """

    command: str
    result: Any = field(default_factory=dict)
    code: ExitCode = ExitCode.OK
    error: str | None = None
    text: Callable[[], None] | None = None
    document: bool = False
    errors: list[dict[str, Any]] | None = None  # error objects, where the command knows more than one line


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def upto(high: int) -> Any:
    """A whole number from 1 to ``high``: every size flag is bounded by what a real cluster can have."""

    def parse(text: str) -> int:
        value = positive(text) if len(text) <= 20 else high + 1
        if value > high:
            raise argparse.ArgumentTypeError(f"{text[:24]!r} is more than {high:,}")
        return value

    parse.__name__ = "number"
    return parse


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{value} must be above 0 and at most 1")
    return value


def global_flags(p: argparse.ArgumentParser, top: bool = False) -> None:
    """--debug and -o/--output, accepted before or after the subcommand (a subcommand's copy never overrides the top's)."""
    default: Any = argparse.SUPPRESS
    p.add_argument("--debug", action="store_true", default=False if top else default, help="show tracebacks")
    p.add_argument("-o", "--output", choices=OUTPUTS, default="text" if top else default, help="text (default) or json: one JSON document on stdout")


def command(sub: Any, name: str, path: str, text: str, examples: Iterable[str], **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand's parser: its help with examples, the global flags, and its full path for the JSON envelope."""
    lines = "\n".join(f"  {line}" for line in examples)
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help=text,
        description=text[:1].upper() + text[1:] + ".",
        epilog=f"examples:\n{lines}" if lines else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )
    p.set_defaults(command_path=path)
    global_flags(p)
    return p


def family(sub: Any, name: str, text: str, examples: Iterable[str], dest: str) -> Any:
    """A command family (job, lab, data, bundle, inventory): its parser and the subparsers of its actions."""
    p = command(sub, name, name, text, examples)
    return p.add_subparsers(dest=dest, metavar="ACTION", parser_class=Parser)


def inventory_path(text: str) -> str:
    """An inventory as the operator named it, made absolute from the current directory: every command (and the
    ansible-runner it starts, which runs Ansible in another directory) then means the same file."""
    return os.path.abspath(os.path.expanduser(text)) if text else text


def inventory_flag(p: argparse.ArgumentParser, text: str = "the cluster's inventory (default: $MEGAPROV_INVENTORY or the config file's)") -> None:
    p.add_argument("-i", "--inventory", type=inventory_path, help=text)


def config_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "megaprov" / "config.toml"


def default_inventory() -> tuple[str, str] | None:
    """(path, where it was set) of the default inventory: $MEGAPROV_INVENTORY, then ``inventory`` in the config file."""
    from megaprov import values

    env = os.environ.get("MEGAPROV_INVENTORY", "")
    if env:
        return inventory_path(env), "MEGAPROV_INVENTORY"
    path = config_file()
    if not path.exists():
        return None
    text = values.read_text(path, "config file", max_bytes=64 * 1024)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML ({exc})", 'write inventory = "/path/to/inventory.ini"') from None
    unknown = sorted(set(doc) - {"inventory"})
    if unknown:
        raise UsageError(f"{path}: unknown setting {unknown[0]!r}{did_you_mean(unknown[0], ['inventory'])}", "the config file has: inventory")
    value = doc.get("inventory")
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise UsageError(f"{path}: inventory must be a path", 'write inventory = "/path/to/inventory.ini"')
    return str(path.parent / Path(value).expanduser()), str(path)  # relative: next to the file (an absolute one stays)


def need_inventory(args: argparse.Namespace, why: str = "") -> str:
    """The inventory of a command that needs one: -i, the deprecated positional form, or the default."""
    given = getattr(args, "inventory_positional", None)
    if given:
        positional = inventory_path(given)
        if args.inventory and args.inventory != positional:
            raise UsageError(f"two inventories: {given} and -i {args.inventory}", "give one, as -i INVENTORY")
        note(f"`megaprov {args.command_path} INVENTORY` is deprecated and goes in the next release: write -i {given}")
        args.inventory = positional
    if not args.inventory:
        found = default_inventory()
        if found is None:
            raise UsageError(
                f"megaprov {args.command_path} needs -i INVENTORY{why}",
                f'pass the cluster\'s inventory, or set MEGAPROV_INVENTORY or inventory = "PATH" in {config_file()}',
            )
        args.inventory = found[0]
    return str(args.inventory)


def reporter(args: argparse.Namespace) -> Reporter:
    """What the command's domain code reports while it works: shown on stderr for text, nothing beside JSON."""
    from megaprov.output import SHOWN, SILENT

    return SILENT if getattr(args, "output", "text") == "json" else SHOWN


def note(text: str) -> None:
    from megaprov.output import console

    console(stderr=True).print(f"megaprov: note: {text}", markup=False)


def extravars(given: list[str]) -> dict[str, Any]:
    from megaprov import values

    out: dict[str, Any] = {}
    for raw in given:
        if raw.startswith("@"):
            path = Path(raw[1:])
            if not path.exists() and not path.is_symlink():
                raise UsageError(f"-e {raw}: file {path} does not exist", "pass -e @FILE with an existing YAML file")
            text = values.read_text(path, f"-e {raw}: file")
            try:
                data = values.yaml_data(text, f"-e {raw}")
            except yaml.YAMLError as exc:
                raise UsageError(f"-e {raw}: invalid YAML ({exc.__class__.__name__})", "fix the file's YAML syntax") from None
            if not isinstance(data, dict):
                raise UsageError(f"-e {raw}: must hold a mapping of name: value", "write name: value lines")
            out.update(data)  # names and values are checked with every other -e (provision.prepare)
            continue
        key, sep, value = raw.partition("=")
        if not sep or not values.VARIABLE.fullmatch(key):
            raise UsageError(f"-e {raw!r} is not KEY=VALUE", "write -e name=value (or -e @vars.yml)")
        try:
            # one value: aliases are refused here as in -e @file (an alias bomb is a few hundred characters)
            out[key] = values.yaml_data(value, f"-e {key}") if value else ""
        except UsageError:
            raise
        except (yaml.YAMLError, ValueError, RecursionError):
            out[key] = value
        if not isinstance(out[key], (str, int, float, bool, list, dict)) and out[key] is not None:
            out[key] = value  # a date or a binary: the text as given
    return out
