"""Domain code reports through a Reporter (megaprov.output), never through ``quiet`` flags: the command line makes one
from ``--output`` and passes it down."""

import ast
from pathlib import Path

from megaprov.commands import build_parser
from megaprov.commands.base import reporter
from megaprov.output import SHOWN, SILENT

PACKAGE = Path(__file__).resolve().parents[3] / "megaprov"


def test_shown_says_lines_on_stderr_as_data_and_silent_says_nothing(capsys):
    SHOWN.say("stage [/] done \\[link=x]")
    SILENT.say("never")
    out, err = capsys.readouterr()
    assert out == "" and err == "stage [/] done \\[link=x]\n"  # rich markup in the line is printed, not interpreted
    assert SHOWN.run(3).quiet is False and SILENT.run(3).quiet is True


def test_the_command_line_makes_the_reporter_from_the_output_format():
    parser = build_parser()
    assert reporter(parser.parse_args(["jobs", "-o", "json"])) is SILENT
    assert reporter(parser.parse_args(["jobs"])) is SHOWN


def test_no_function_of_the_package_takes_a_quiet_flag():
    # RunProgress is the renderer the reporter drives: the one place that may say "quiet"
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in (*node.args.args, *node.args.kwonlyargs)]
                if "quiet" in names and not (path.name == "output.py" and node.name == "__init__"):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "quiet":
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} a field")
    assert found == []
