"""`megaprov lab`'s parser as the operator meets it (megaprov.commands.lab.register): each action's description,
examples and defaults in its --help, the family's list of actions, and the command each action names in the JSON
envelope when it refuses a bad lab name. In-process through megaprov.cli.main; nothing is stood in (a bad name is
refused before podman or the state directory is touched)."""

import json

import pytest

from megaprov.cli import main
from megaprov.commands import build_parser


@pytest.fixture(autouse=True)
def wide(monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))


def help_lines(capsys, *argv):
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return [line.strip() for line in capsys.readouterr().out.splitlines()]


def examples(lines):
    return lines[lines.index("examples:") + 1 :]


def test_the_lab_family_lists_its_actions_and_examples(capsys):
    lines = help_lines(capsys, "lab")
    assert lines[0] == "usage: megaprov lab [-h] [--debug] [-o {text,json}] ACTION ..."
    assert "Local container lab of cluster nodes." in lines
    for row in [
        "up                  start N nodes and write their inventory",
        "image               build the node image (cached)",
        "status              list lab nodes",
        "inventory           print the path of a lab's inventory (for scripts)",
        "down                remove what lab up made",
        "stop                stop one node (its disk and address stay)",
        "start               start a stopped node; wait for boot and SSH",
    ]:
        assert row in lines
    assert examples(lines) == ["megaprov lab up --nodes 3", "megaprov lab status", "megaprov lab down"]


@pytest.mark.parametrize(
    ("action", "usage", "description", "shown"),
    [
        (
            "up",
            "[--nodes NODES] [--name NAME]",
            "Start N nodes and write their inventory.",
            ["megaprov lab up --nodes 3", "megaprov lab up --name ci --nodes 2 -o json"],
        ),
        ("image", "", "Build the node image (cached).", ["megaprov lab image"]),
        ("status", "", "List lab nodes.", ["megaprov lab status", "megaprov lab status -o json"]),
        (
            "inventory",
            "[--name NAME]",
            "Print the path of a lab's inventory (for scripts).",
            ["INV=$(megaprov lab inventory)", "export MEGAPROV_INVENTORY=$(megaprov lab inventory --name ci)"],
        ),
        ("down", "[--name NAME]", "Remove what lab up made.", ["megaprov lab down", "megaprov lab down --name ci"]),
        ("stop", "[--name NAME] NODE", "Stop one node (its disk and address stay).", ["megaprov lab stop node3"]),
        ("start", "[--name NAME] NODE", "Start a stopped node; wait for boot and SSH.", ["megaprov lab start node3"]),
    ],
)
def test_each_action_says_what_it_does_with_its_examples(capsys, action, usage, description, shown):
    lines = help_lines(capsys, "lab", action)
    assert lines[0] == f"usage: megaprov lab {action} [-h] [--debug] [-o {{text,json}}]" + (f" {usage}" if usage else "")
    assert description in lines
    assert examples(lines) == shown


def test_the_defaults_are_two_nodes_of_the_lab_named_default():
    parser = build_parser()
    up = parser.parse_args(["lab", "up"])
    assert (up.nodes, up.name) == (2, "default")
    for argv in (["lab", "inventory"], ["lab", "down"], ["lab", "stop", "node3"], ["lab", "start", "node3"]):
        assert parser.parse_args(argv).name == "default"
    stop = parser.parse_args(["lab", "stop", "node3", "--name", "ci"])
    assert (stop.node, stop.name) == ("node3", "ci")


@pytest.mark.parametrize("argv", [["up"], ["inventory"], ["down"], ["stop", "node3"], ["start", "node3"]], ids=lambda a: a[0])
def test_a_bad_lab_name_is_refused_under_the_actions_own_command(capsys, argv):
    code = main(["lab", *argv, "--name", "bad/x", "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["command"], doc["error"]["code"]) == (2, f"lab {argv[0]}", 2)
    assert doc["error"]["message"].startswith("--name 'bad/x' is not a valid lab name")
