"""`megaprov lab ...` (megaprov.commands.lab) where the other lab tests do not reach: what each action says when the layer
below refuses (the exit code, the line on stderr, and the command its JSON envelope names), the NODE argument of
`lab stop|start` in their --help, `lab` without an action, the path `lab inventory` prints for scripts on one line
however narrow the terminal, and what `lab up|down|stop|start` hand to megaprov.cluster.lab and show from it. Every
command runs in-process through megaprov.cli.main with the real parser.

Stood in, only at the edge: podman, either absent (PATH holds no podman: the real megaprov.cluster.lab refuses as on a
machine without it) or, where a command would boot or remove containers, the lab functions that call it (lab.up,
lab.down, lab.stop, lab.start) by recorders that keep their arguments, report progress through the handler's callback
as the real ones do, and return real lab.Node objects; and the clock `lab stop|start` reads. Everything else is real:
the state directory, the inventory paths of megaprov.cluster.lab, the console and the JSON envelope."""

from __future__ import annotations

import json

import pytest

from megaprov.cli import main
from megaprov.cluster import lab
from megaprov.commands import lab as lab_command
from megaprov.errors import ExitCode, UsageError
from tests.helpers.commandline import isolate, run

NO_PODMAN = "podman is not installed: run scripts/setup.sh (apt-get install podman runc netavark aardvark-dns)"


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch):
    """As the benchmark runs: no colour, a known width; megaprov's state and config of this test alone."""
    isolate(monkeypatch, tmp_path)


@pytest.fixture
def no_podman(tmp_path, monkeypatch):
    """A machine without podman: PATH names one empty directory."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


# ---- a refusal names the action that refused


@pytest.mark.parametrize(
    "argv",
    [["image"], ["status"], ["down"], ["down", "--name", "ci"], ["stop", "node2"], ["start", "node2", "--name", "ci"]],
    ids=lambda a: "-".join(a),
)
def test_without_podman_each_action_says_so_and_names_itself_in_json(capsys, no_podman, argv):
    code, out, err = run(capsys, "lab", *argv)
    assert (code, out, err) == (ExitCode.ENVIRONMENT, "", f"megaprov: error: {NO_PODMAN}\n")
    code, out, err = run(capsys, "lab", *argv, "-o", "json")
    doc = json.loads(out)
    assert (code, doc["command"], doc["ok"], doc["result"]) == (ExitCode.ENVIRONMENT, f"lab {argv[0]}", False, {})
    assert doc["error"]["message"] == "podman is not installed"


def test_an_up_the_layer_below_refuses_names_lab_up_in_json(capsys, monkeypatch):
    def up(root, name, count, progress=None):
        raise UsageError(f"lab {name!r} already exists with 2 node(s)", f"run `megaprov lab down --name {name}` first")

    monkeypatch.setattr(lab, "up", up)
    code, out, err = run(capsys, "lab", "up", "--name", "ci", "-o", "json")
    doc = json.loads(out)
    assert (code, doc["command"], doc["error"]["message"]) == (ExitCode.USAGE, "lab up", "lab 'ci' already exists with 2 node(s)")
    assert err == "megaprov: error: lab 'ci' already exists with 2 node(s): run `megaprov lab down --name ci` first\n"


def test_lab_without_an_action_lists_every_action(capsys):
    code, out, err = run(capsys, "lab")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == (
        "megaprov: error: megaprov lab: missing ACTION: use `megaprov lab down`, `megaprov lab image`, `megaprov lab inventory`, "
        "`megaprov lab start`, `megaprov lab status`, `megaprov lab stop`, `megaprov lab up`\n"
    )


def test_zero_nodes_are_refused_by_the_parser(capsys, monkeypatch):
    monkeypatch.setattr(lab, "up", lambda *a, **k: pytest.fail("lab.up was called"))
    code, out, err = run(capsys, "lab", "up", "--nodes", "0")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == "megaprov: error: megaprov lab up: argument --nodes: 0 must be at least 1: see `megaprov lab up --help`\n"


# ---- the NODE of lab stop / lab start


@pytest.mark.parametrize("action", ["stop", "start"])
def test_stop_and_start_explain_their_node_argument(capsys, action):
    with pytest.raises(SystemExit) as exit_:
        main(["lab", action, "--help"])
    assert exit_.value.code == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    positional = lines.index("positional arguments:")
    assert lines[positional + 1].split(maxsplit=1) == ["NODE", "inventory name of the node, e.g. node3"]
    assert lines[positional + 2] == ""


# ---- lab inventory: one line for scripts


def test_a_long_inventory_path_is_printed_on_one_line_in_a_narrow_terminal(capsys, tmp_path, monkeypatch):
    state = tmp_path / ("a-rather-long-directory-name-for-megaprovs-state-" * 2)
    monkeypatch.setenv("MEGAPROV_STATE", str(state))
    monkeypatch.setenv("COLUMNS", "40")
    inventory = lab.inventory_path(state, "ci")
    inventory.parent.mkdir(parents=True)
    inventory.write_text("[head]\n")
    assert len(str(inventory)) > 100
    assert run(capsys, "lab", "inventory", "--name", "ci") == (ExitCode.OK, f"{inventory}\n", "")


# ---- lab up / down / stop / start over recorders of the layer below


class LabRecorder:
    """lab.up, lab.down, lab.stop and lab.start: each call kept as (function, arguments); progress reported through
    the handler's callback as the real ones report it."""

    def __init__(self, monkeypatch):
        self.calls: list[tuple] = []
        for name in ("up", "down", "stop", "start"):
            monkeypatch.setattr(lab, name, getattr(self, name))

    def up(self, root, name, count, progress):
        self.calls.append(("up", root, name, count))
        members = []
        for i in range(1, count + 1):
            progress(f"create {lab.container_name(name, i)}")
            members.append(lab.Node(f"node{i}", lab.container_name(name, i), f"10.90.7.{i + 1}", "running"))
        return lab.inventory_path(root, name), members

    def down(self, root, name, progress):
        self.calls.append(("down", root, name))
        progress(f"remove {lab.container_name(name, 1)}")
        return [lab.container_name(name, 1), lab.network_name(name)]

    def stop(self, name, node):
        self.calls.append(("stop", name, node))
        return lab.Node(node, lab.container_name(name, 2), "", "exited")

    def start(self, root, name, node, progress):
        self.calls.append(("start", root, name, node))
        progress(f"start {lab.container_name(name, 2)}")
        return lab.Node(node, lab.container_name(name, 2), "10.90.7.3", "running")


@pytest.fixture
def recorder(monkeypatch):
    return LabRecorder(monkeypatch)


class Clock:
    """time for `lab stop|start`: read before and after; 12.96 s pass in between."""

    def __init__(self):
        self.readings = iter([50.0, 62.96])

    def monotonic(self):
        return next(self.readings)


@pytest.fixture
def clock(monkeypatch):
    monkeypatch.setattr(lab_command, "time", Clock())


def test_up_reports_each_node_it_creates_and_names_the_inventory(capsys, tmp_path, recorder):
    code, out, err = run(capsys, "lab", "up", "--nodes", "2", "--name", "ci")
    assert recorder.calls == [("up", tmp_path / "state", "ci", 2)]
    assert (code, out) == (ExitCode.OK, f"lab ci: 2 node(s) up; inventory: {tmp_path}/state/lab/ci/inventory.ini\n")
    assert err == "lab: create megaprov-ci-node1\nlab: create megaprov-ci-node2\n"


def test_down_of_the_default_lab_reports_and_counts_what_it_removed(capsys, tmp_path, recorder):
    code, out, err = run(capsys, "lab", "down")
    assert recorder.calls == [("down", tmp_path / "state", "default")]
    assert (code, out, err) == (ExitCode.OK, "lab default: removed 2 object(s)\n", "lab: remove megaprov-default-node1\n")


def test_stop_names_the_node_and_its_state_without_an_address(capsys, recorder, clock):
    code, out, err = run(capsys, "lab", "stop", "node2", "--name", "ci")
    assert recorder.calls == [("stop", "ci", "node2")]
    assert (code, out, err) == (ExitCode.OK, "lab ci: node2 exited (13.0s)\n", "")


def test_start_reports_its_progress_and_the_nodes_address(capsys, tmp_path, recorder, clock):
    code, out, err = run(capsys, "lab", "start", "node2", "--name", "ci")
    assert recorder.calls == [("start", tmp_path / "state", "ci", "node2")]
    assert (code, out, err) == (ExitCode.OK, "lab ci: node2 running at 10.90.7.3, host key unchanged (13.0s)\n", "lab: start megaprov-ci-node2\n")


def test_start_as_json_reports_nothing_on_stderr(capsys, tmp_path, recorder, clock):
    code, out, err = run(capsys, "lab", "start", "node2", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    doc = json.loads(out)
    assert (doc["command"], doc["result"]) == (
        "lab start",
        {
            "name": "default",
            "node": {"name": "node2", "container": "megaprov-default-node2", "address": "10.90.7.3", "state": "running"},
            "seconds": 13.0,
        },
    )
