"""megaprov.errors in-process: the one line an error prints, the JSON envelope's error objects (the file, line and flag
read from the message where it starts with them, the fix, each further problem as its own object) and the exit code
each error class carries. Nothing is stood in."""

import pytest

from megaprov import errors
from megaprov.errors import EXIT_CODES, ExitCode, MegaprovError, error_object


def test_the_line_is_the_message_and_its_fix_or_the_message_alone():
    assert str(MegaprovError("inventory x.ini: no [nodes] group", "add one")) == "inventory x.ini: no [nodes] group: add one"
    assert str(MegaprovError("inventory x.ini: no [nodes] group")) == "inventory x.ini: no [nodes] group"
    assert str(MegaprovError("no hosts", "")) == "no hosts"
    # the exception's own argument is the message, as a traceback under --debug shows it
    assert MegaprovError("no hosts", "add one").args == ("no hosts",)


def test_an_error_keeps_what_it_was_given_and_starts_without_details():
    error = errors.UsageError("bad", "fix it", field="nodes", file="job.yml", line=3)
    assert (error.message, error.hint, error.field, error.file, error.line, error.details) == ("bad", "fix it", "nodes", "job.yml", 3, [])
    other = errors.UsageError("bad")
    error.details.append("one more")
    assert other.details == []


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (MegaprovError, 1),
        (errors.UsageError, 2),
        (errors.InventoryError, 2),
        (errors.RunFailed, 3),
        (errors.HostsUnreachable, 4),
        (errors.EnvironmentProblem, 5),
    ],
)
def test_each_error_class_carries_its_exit_code(cls, code):
    assert cls("x").exit_code == code


def test_the_table_names_each_code_once():
    assert [name for name, dummy in EXIT_CODES.values()] == [
        "ok",
        "internal",
        "usage",
        "run-failed",
        "unreachable",
        "environment",
        "verdict-failed",
        "interrupted",
    ]
    assert set(EXIT_CODES) == set(ExitCode)


def test_an_error_object_carries_code_kind_message_and_only_the_parts_it_has():
    assert error_object(ExitCode.USAGE, "bad input") == {"code": 2, "kind": "usage", "message": "bad input"}
    assert error_object(ExitCode.RUN_FAILED, "task failed", "see the log", field="nodes", file="inv.ini", line=7) == {
        "code": 3,
        "kind": "run-failed",
        "message": "task failed",
        "fix": "see the log",
        "file": "inv.ini",
        "line": 7,
        "field": "nodes",
    }
    # an empty fix, file or field is left out; a line 0 is kept (it is a number, not an absence)
    assert error_object(ExitCode.USAGE, "x", "", field="", file="") == {"code": 2, "kind": "usage", "message": "x"}
    assert error_object(ExitCode.USAGE, "x", line=0) == {"code": 2, "kind": "usage", "message": "x", "line": 0}


def test_the_file_and_line_are_read_from_a_message_that_starts_with_them():
    doc = error_object(ExitCode.USAGE, "inventories/lab.ini:12: unknown variable 'gpus'", "remove it")
    assert doc == {
        "code": 2,
        "kind": "usage",
        "message": "inventories/lab.ini:12: unknown variable 'gpus'",
        "fix": "remove it",
        "file": "inventories/lab.ini",
        "line": 12,
    }
    assert type(doc["line"]) is int
    # given ones win over the message's
    doc = error_object(ExitCode.USAGE, "a.ini:12: x", file="b.yml", line=3)
    assert (doc["file"], doc["line"]) == ("b.yml", 3)
    # not at the start, or without the space after the colon, it is not a location
    assert "file" not in error_object(ExitCode.USAGE, "see a.ini:12: x")
    assert "file" not in error_object(ExitCode.USAGE, "a.ini:12:x")
    assert "file" not in error_object(ExitCode.USAGE, "a.ini:x: y")


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ("argument --nodes: invalid int value: 'x'", "--nodes"),
        ("megaprov train: argument --job: expected one argument", "--job"),
        ("--nodes 99 is more than the inventory's 3 nodes", "--nodes"),
        ("-f is required", "-f"),
        ("the nodes are 3", None),
        ("--9 is no flag", None),
    ],
)
def test_the_flag_a_message_starts_with_is_its_field(message, field):
    assert error_object(ExitCode.USAGE, message).get("field") == field


def test_a_given_field_wins_over_the_messages_flag():
    assert error_object(ExitCode.USAGE, "--nodes 99 is too many", field="nodes")["field"] == "nodes"


def test_an_errors_objects_are_its_own_then_one_per_detail_with_its_code():
    error = errors.RunFailed("job.yml:4: two problems", "fix both", field="model")
    error.details += ["job.yml:9: the second", "a third"]
    assert error.objects() == [
        {"code": 3, "kind": "run-failed", "message": "job.yml:4: two problems", "fix": "fix both", "file": "job.yml", "line": 4, "field": "model"},
        {"code": 3, "kind": "run-failed", "message": "job.yml:9: the second", "file": "job.yml", "line": 9},
        {"code": 3, "kind": "run-failed", "message": "a third"},
    ]
    assert errors.UsageError("x", file="f.yml", line=2).objects() == [{"code": 2, "kind": "usage", "message": "x", "file": "f.yml", "line": 2}]
