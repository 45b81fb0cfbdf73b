"""megaprov.commands.main, the one entry point: what the operator reads for a command that works, a mistake, a missing
action, an interrupt and a bug, in text and in the JSON envelope, with the exit code of each. Every case runs in-process
through the real parser; `megaprov inventory check` is the command, over a real inventory read by
megaprov.cluster.inventory. Where a case needs a handler to fail in a way no input makes it (an interrupt, a bug), the
one domain call it makes (scaffold.summary) is replaced by one that raises."""

from __future__ import annotations

import json
import sys

import pytest

from megaprov import commands
from megaprov.cluster import scaffold
from megaprov.commands import base
from megaprov.errors import ExitCode, UsageError
from megaprov.output import JSON_SCHEMA_VERSION
from tests.helpers.commandline import isolate, run

GOOD = "[head]\nh1 ansible_host=192.0.2.10\n[gpu_nodes]\nn1 ansible_host=192.0.2.11\n"


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path)
    (tmp_path / "inventory.ini").write_text(GOOD)


def refusal(message: str, hint: str, *details: str) -> UsageError:
    error = UsageError(message, hint)
    error.details = list(details)
    return error


def raising(exc: BaseException):
    def summary(*_a, **_k):
        raise exc

    return summary


# ---- a command that works


def test_a_command_prints_its_text_and_exits_0(capsys, tmp_path):
    code, out, err = run(capsys, "inventory", "check", "-i", "inventory.ini")
    assert code == 0
    assert out.splitlines()[0] == f"{tmp_path / 'inventory.ini'}: valid; no host was contacted (`megaprov preflight` checks the nodes themselves)"
    assert err == ""


def test_with_json_it_prints_the_envelope_alone(capsys):
    code, out, err = run(capsys, "-o", "json", "inventory", "check", "-i", "inventory.ini")
    doc = json.loads(out)
    assert (code, err) == (0, "")
    assert (doc["command"], doc["ok"]) == ("inventory check", True)
    assert doc["result"]["head"] == "h1"
    assert "error" not in doc
    assert "valid;" not in out  # the text form is not printed beside the document


def test_argv_defaults_to_the_processes_own(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["megaprov", "-o", "json", "inventory", "check", "-i", "inventory.ini"])
    code = commands.main()
    assert code == 0
    assert json.loads(capsys.readouterr().out)["command"] == "inventory check"


# ---- no command, no action


def test_no_command_prints_the_help_and_exits_2(capsys):
    code, out, err = run(capsys)
    assert code == ExitCode.USAGE == 2
    lines = out.splitlines()
    assert lines[0].startswith("usage: megaprov ")
    assert "Provision GPU machines into a verified Megatron-LM training cluster." in lines
    # the examples are printed as written (RawDescriptionHelpFormatter): one per line, indented by two
    tail = lines[lines.index("examples:") + 1 :]
    assert tail == [
        "  megaprov lab up --nodes 2 && export MEGAPROV_INVENTORY=$(megaprov lab inventory)",
        "  megaprov bootstrap",
        "  megaprov train -f examples/jobs/gpt-lab.yml",
        "  megaprov COMMAND --help",
    ]
    assert err == ""


def test_every_family_is_a_command():
    names = set(commands._subparsers(commands.build_parser()))
    assert {"bootstrap", "preflight", "inventory", "init", "self-check", "job", "plan", "train", "jobs", "data", "image"} <= names
    assert {"logs", "doctor", "top", "status", "lab", "bundle", "completion"} <= names


def test_a_family_without_its_action_names_every_action(capsys):
    code, out, err = run(capsys, "lab")
    assert code == 2
    assert out == ""
    actions = sorted(commands._subparsers(commands._subparsers(commands.build_parser())["lab"]))
    assert len(actions) > 2
    use = ", ".join(f"`megaprov lab {a}`" for a in actions)
    assert err == f"megaprov: error: megaprov lab: missing ACTION: use {use}\n"


def test_a_missing_action_in_json_is_the_envelope_of_the_family(capsys):
    code, out, err = run(capsys, "-o", "json", "inventory")
    doc = json.loads(out)
    assert code == 2
    assert (doc["command"], doc["ok"], doc["result"]) == ("inventory", False, {})
    assert doc["error"] == {"code": 2, "kind": "usage", "message": "megaprov inventory: missing ACTION", "fix": "use `megaprov inventory check`"}
    assert err == "megaprov: error: megaprov inventory: missing ACTION: use `megaprov inventory check`\n"


def test_version_prints_the_version_lines_and_exits_0(capsys, monkeypatch):
    import megaprov.selfcheck as selfcheck

    monkeypatch.setattr(selfcheck, "version_lines", lambda: ["megaprov 9.9", "python 3"])
    with pytest.raises(SystemExit) as exit_:
        commands.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == "megaprov 9.9\npython 3\n"


def test_version_is_a_flag_without_a_value():
    action = next(a for a in commands.build_parser()._actions if "--version" in a.option_strings)
    assert (action.nargs, action.help) == (0, "show versions and exit")


# ---- the leaf a command line reaches


@pytest.mark.parametrize(
    ("argv", "path"),
    [
        (["lab", "up", "--nodes", "2"], ["lab", "up"]),
        (["-o", "json", "lab", "up"], ["lab", "up"]),
        (["--output", "json", "inventory", "check"], ["inventory", "check"]),
        (["--debug", "inventory", "check", "extra"], ["inventory", "check"]),
        (["inventory", "nothing", "check"], ["inventory"]),
        (["bootstrap", "inventory"], ["bootstrap"]),  # bootstrap has no subcommands: the walk stops there
        ([], []),
    ],
)
def test_leaf_is_the_parser_the_words_reach(argv, path):
    parser = commands.build_parser()
    found, walked = commands.leaf(parser, argv)
    assert walked == path
    want = parser
    for name in path:
        want = commands._subparsers(want)[name]
    assert found is want


def test_a_parser_without_subcommands_has_none():
    leaf = commands._subparsers(commands.build_parser())["bootstrap"]
    assert commands._subparsers(leaf) == {}


# ---- an unknown flag


def test_an_unknown_flag_gets_the_closest_of_the_commands_own(capsys):
    code, out, err = run(capsys, "inventory", "check", "--inventroy", "x")
    assert code == 2
    assert out == ""
    assert err.endswith(": did you mean --inventory? (see `megaprov inventory check --help`)\n")
    assert err.startswith("megaprov: error: ")


def test_an_unknown_flag_with_a_value_is_matched_by_its_name(capsys):
    code, _out, err = run(capsys, "lab", "up", "--nodse=2")
    assert code == 2
    assert err.endswith(": did you mean --nodes? (see `megaprov lab up --help`)\n")


def test_an_unknown_flag_with_a_long_value_is_matched_by_its_name_alone(capsys):
    _code, _out, err = run(capsys, "lab", "up", "--nodse=123456789012")
    assert err.endswith(": did you mean --nodes? (see `megaprov lab up --help`)\n")


def test_a_single_dash_word_is_never_guessed_as_a_long_flag(capsys):
    _code, _out, err = run(capsys, "lab", "up", "-nodse")
    assert err == "megaprov: error: megaprov: unrecognized arguments: -nodse: see `megaprov lab up --help`\n"


def test_the_guess_is_for_the_first_unknown_word_even_when_a_value_repeats_the_parsers_words(capsys):
    _code, _out, err = run(capsys, "inventory", "check", "--inventroy", "x", "unrecognized arguments: --debgu")
    assert err.endswith(": did you mean --inventory? (see `megaprov inventory check --help`)\n")


def test_a_mistake_before_any_command_is_an_envelope_without_a_command(capsys):
    code, out, _err = run(capsys, "-o", "json", "--zzzzzzzz")
    doc = json.loads(out)
    assert code == 2
    assert (doc["command"], doc["ok"]) == ("", False)


def test_an_unknown_flag_close_to_nothing_points_at_the_commands_help(capsys):
    code, _out, err = run(capsys, "inventory", "check", "--zzzzzzzz")
    assert code == 2
    assert err.endswith(": see `megaprov inventory check --help`\n")
    assert "did you mean" not in err


def test_an_unknown_short_flag_is_never_guessed(capsys):
    code, _out, err = run(capsys, "inventory", "check", "-q")
    assert code == 2
    assert err.endswith(": see `megaprov inventory check --help`\n")


def test_an_unknown_flag_before_any_command_keeps_the_parsers_own_hint(capsys):
    _code, _out, err = run(capsys, "--zzzzzzzz")
    assert err == "megaprov: error: megaprov: unrecognized arguments: --zzzzzzzz: see `megaprov --help`\n"


def test_an_unknown_flag_close_to_a_top_flag_is_guessed_without_a_command():
    error = UsageError("unrecognized arguments: --debgu")
    assert commands._unknown_flag(error, commands.build_parser(), ["--debgu"]).hint == "did you mean --debug? (see `megaprov --help`)"


def test_a_mistake_that_is_no_unknown_flag_is_left_as_it_is():
    error = UsageError("argument --forks: invalid value", "keep me")
    same = commands._unknown_flag(error, commands.build_parser(), ["bootstrap", "--forks", "x"])
    assert same is error
    assert same.hint == "keep me"


# ---- -o json wherever it is


@pytest.mark.parametrize(
    ("argv", "wanted"),
    [
        (["-o", "json"], True),
        (["--output", "json"], True),
        (["lab", "up", "--output=json"], True),
        (["-ojson"], True),
        (["-o=json"], True),
        (["-o", "text"], False),
        (["-o"], False),
        (["json"], False),
        (["--output", "text", "json"], False),
        ([], False),
    ],
)
def test_wants_json(argv, wanted):
    assert commands._wants_json(argv) is wanted


def test_a_mistake_with_json_after_the_command_is_still_an_envelope(capsys):
    code, out, err = run(capsys, "inventory", "check", "--inventroy", "x", "--output=json")
    doc = json.loads(out)
    assert code == 2
    assert doc["command"] == "inventory check"
    assert doc["ok"] is False
    assert doc["error"]["fix"] == "did you mean --inventory? (see `megaprov inventory check --help`)"
    assert err.startswith("megaprov: error: ")


# ---- a refusal from the domain


def test_a_refusal_prints_one_line_and_each_detail(capsys, monkeypatch):
    monkeypatch.setattr(scaffold, "summary", raising(refusal("inventory.ini: bad", "fix it", "first detail", "second detail")))
    code, out, err = run(capsys, "inventory", "check", "-i", "inventory.ini")
    assert code == 2
    assert out == ""
    assert err == "megaprov: error: inventory.ini: bad: fix it\nmegaprov: error: first detail\nmegaprov: error: second detail\n"


def test_a_refusal_in_json_carries_each_detail_as_an_error(capsys, monkeypatch):
    monkeypatch.setattr(scaffold, "summary", raising(refusal("bad", "fix it", "first detail")))
    code, out, _err = run(capsys, "-o", "json", "inventory", "check", "-i", "inventory.ini")
    doc = json.loads(out)
    assert code == 2
    assert doc["command"] == "inventory check"
    assert [e["message"] for e in doc["errors"]] == ["bad", "first detail"]


def test_a_refusals_details_and_a_bugs_words_are_printed_as_they_are(capsys, monkeypatch):
    monkeypatch.setattr(scaffold, "summary", raising(refusal("bad", "fix", "[bold]detail[/bold]")))
    _code, _out, err = run(capsys, "inventory", "check", "-i", "inventory.ini")
    assert err.splitlines()[1] == "megaprov: error: [bold]detail[/bold]"
    monkeypatch.setattr(scaffold, "summary", raising(RuntimeError("[red]boom[/red]")))
    _code, _out, err = run(capsys, "inventory", "check", "-i", "inventory.ini")
    assert err == "megaprov: internal error: RuntimeError: [red]boom[/red] (rerun with --debug and report it)\n"


def test_debug_prints_the_traceback_of_a_refusal(capsys, monkeypatch):
    monkeypatch.setattr(scaffold, "summary", raising(UsageError("bad")))
    _code, _out, err = run(capsys, "--debug", "inventory", "check", "-i", "inventory.ini")
    assert "Traceback (most recent call last)" in err
    _code, _out, err = run(capsys, "inventory", "check", "-i", "inventory.ini")
    assert "Traceback" not in err


# ---- an interrupt and a bug


def test_an_interrupt_exits_130_with_one_line(capsys, monkeypatch):
    monkeypatch.setattr(scaffold, "summary", raising(KeyboardInterrupt()))
    code, out, err = run(capsys, "inventory", "check", "-i", "inventory.ini")
    assert code == ExitCode.INTERRUPTED == 130
    assert (out, err) == ("", "megaprov: interrupted\n")


def test_a_bug_is_one_line_naming_it_and_exits_1(capsys, monkeypatch):
    monkeypatch.setattr(scaffold, "summary", raising(KeyError("[boom]")))
    code, out, err = run(capsys, "inventory", "check", "-i", "inventory.ini")
    assert code == ExitCode.INTERNAL == 1
    assert out == ""
    assert err == "megaprov: internal error: KeyError: '[boom]' (rerun with --debug and report it)\n"


def test_a_bug_with_debug_prints_its_traceback(capsys, monkeypatch):
    monkeypatch.setattr(scaffold, "summary", raising(RuntimeError("boom")))
    code, _out, err = run(capsys, "--debug", "inventory", "check", "-i", "inventory.ini")
    assert code == 1
    assert "Traceback (most recent call last)" in err
    assert err.endswith("megaprov: internal error: RuntimeError: boom (rerun with --debug and report it)\n")


# ---- emit: the one renderer


def shown():
    said: list[str] = []
    return said, lambda: said.append("text")


def test_emit_text_calls_the_text():
    said, text = shown()
    commands.emit(base.Outcome("x", text=text), "text")
    assert said == ["text"]


def test_emit_json_prints_the_envelope_and_not_the_text(capsys):
    said, text = shown()
    commands.emit(base.Outcome("x", {"a": 1}, text=text), "json")
    assert said == []
    assert json.loads(capsys.readouterr().out) == {"megaprov": JSON_SCHEMA_VERSION, "command": "x", "ok": True, "result": {"a": 1}}


def test_emit_json_of_a_failure_carries_its_error(capsys):
    commands.emit(base.Outcome("x", {}, ExitCode.RUN_FAILED, "it failed"), "json")
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False
    assert doc["errors"] == [{"code": 3, "kind": "run-failed", "message": "it failed"}]


def test_emit_json_keeps_the_commands_own_errors(capsys):
    mine = [{"code": 3, "kind": "run-failed", "message": "one"}, {"code": 3, "kind": "run-failed", "message": "two"}]
    commands.emit(base.Outcome("x", {}, ExitCode.RUN_FAILED, "summary", errors=mine), "json")
    assert json.loads(capsys.readouterr().out)["errors"] == mine


def test_emit_json_of_a_success_with_an_error_line_has_no_error(capsys):
    commands.emit(base.Outcome("x", {}, ExitCode.OK, "a note"), "json")
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True
    assert "errors" not in doc


def test_emit_json_of_a_failure_without_an_error_line_has_no_error(capsys):
    commands.emit(base.Outcome("x", {}, ExitCode.RUN_FAILED, None), "json")
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False
    assert "errors" not in doc


def test_emit_a_document_prints_itself_in_either_form(capsys):
    for form in ("text", "json"):
        said, text = shown()
        commands.emit(base.Outcome("x", {"a": 1}, text=text, document=True), form)
        assert said == ["text"]
    assert capsys.readouterr().out == ""


def test_emit_without_a_text_prints_nothing(capsys):
    commands.emit(base.Outcome("x", {"a": 1}), "text")
    assert capsys.readouterr().out == ""


def test_a_failed_outcome_prints_its_error_after_its_text(capsys, monkeypatch):
    monkeypatch.setattr(
        commands,
        "build_parser",
        _parser_with(lambda _args: base.Outcome("inventory check", {}, ExitCode.RUN_FAILED, "[b]it[/b] failed", text=lambda: print("the text"))),
    )
    code, out, err = run(capsys, "inventory", "check", "-i", "inventory.ini")
    assert code == 3
    assert out == "the text\n"
    assert err == "megaprov: error: [b]it[/b] failed\n"


def test_a_successful_outcome_with_an_error_line_does_not_print_it(capsys, monkeypatch):
    monkeypatch.setattr(commands, "build_parser", _parser_with(lambda _args: base.Outcome("inventory check", {}, ExitCode.OK, "only a note")))
    code, out, err = run(capsys, "inventory", "check", "-i", "inventory.ini")
    assert (code, out, err) == (0, "", "")


def _parser_with(handler):
    """The real parser, with `inventory check`'s handler replaced (for outcomes no real input gives)."""
    real = commands.build_parser

    def build():
        parser = real()
        commands._subparsers(commands._subparsers(parser)["inventory"])["check"].set_defaults(handler=handler)
        return parser

    return build


# ---- shell completion


def test_main_answers_a_completion_request_over_its_own_parser(monkeypatch):
    import argcomplete

    asked = []

    def autocomplete(parser):
        asked.append(parser)
        raise SystemExit(0)  # argcomplete prints the completions and exits

    monkeypatch.setattr(argcomplete, "autocomplete", autocomplete)
    monkeypatch.setenv("_ARGCOMPLETE", "1")
    with pytest.raises(SystemExit):
        commands.main(["inventory"])
    assert len(asked) == 1
    assert asked[0].prog == "megaprov"
    assert "inventory" in commands._subparsers(asked[0])


def test_without_a_completion_request_nothing_is_completed(monkeypatch):
    import argcomplete

    called = []
    monkeypatch.setattr(argcomplete, "autocomplete", lambda parser: called.append(parser))
    commands._complete(commands.build_parser())
    assert called == []


def test_a_completion_request_is_answered_by_argcomplete_over_the_parser(monkeypatch):
    import argcomplete

    called = []
    monkeypatch.setattr(argcomplete, "autocomplete", lambda parser: called.append(parser))
    monkeypatch.setenv("_ARGCOMPLETE", "1")
    parser = commands.build_parser()
    commands._complete(parser)
    assert called == [parser]
