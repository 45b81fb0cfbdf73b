"""What the operator reads from megaprov.output: the bootstrap host table and the preflight verdict table as megaprov's
own console lays them out (fixed width, no colour: a log or a pipe), the colours a terminal shows on each verdict, the
live progress line of an Ansible run in each state, and the reporter's notes.

Stood in: the terminal only (a rich console of megaprov's own class writing into a string, as a terminal for the live
line and the colours); tables, progress and reporter are the real ones."""

import io
import re

import pytest

from megaprov import output
from megaprov.cluster.runner import HostStats
from megaprov.output import Reporter, RunProgress, host_table, verdict_table


def shown(renderable, colour=False, width=100):
    """What a terminal (colour=True) or a log (no colour) shows of ``renderable``, through megaprov's console class."""
    buf = io.StringIO()
    console = output._Console(
        file=buf,
        width=width,
        force_terminal=colour,
        color_system="standard" if colour else None,
        no_color=not colour,  # not the environment's NO_COLOR (the mutation benchmark sets it)
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=True,
    )
    console.print(renderable)
    return buf.getvalue()


# ---- the preflight verdict table

ROWS = [
    {"host": "node1", "check": "gpu count", "value": 8, "status": "pass", "reason": ""},
    {"host": "node2", "check": "ib link", "value": "down", "status": "fail", "reason": "port 1 is down"},
    {"host": "node3", "check": "disk", "status": "warn", "reason": "80% full"},
    {"host": "node4", "check": "clock", "value": 0.25, "status": "skipped"},
]


def test_the_verdict_table_shows_each_check_in_its_row_and_column_in_the_given_order():
    assert shown(verdict_table(ROWS, "preflight: /srv/inventory.ini")) == (
        "preflight: /srv/inventory.ini\n"
        "┏━━━━━━━┳━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━━━━━━┓\n"
        "┃ host  ┃ check     ┃ value ┃ verdict ┃ reason         ┃\n"
        "┡━━━━━━━╇━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━━━━━━┩\n"
        "│ node1 │ gpu count │ 8     │ pass    │                │\n"
        "│ node2 │ ib link   │ down  │ fail    │ port 1 is down │\n"
        "│ node3 │ disk      │       │ warn    │ 80% full       │\n"
        "│ node4 │ clock     │ 0.25  │ skipped │                │\n"
        "└───────┴───────────┴───────┴─────────┴────────────────┘\n"
    )


def test_a_terminal_marks_a_failed_check_bold_red_a_warning_yellow_and_a_pass_green():
    text = shown(verdict_table(ROWS, "preflight"), colour=True)
    assert "│ \x1b[32mpass   \x1b[0m │" in text
    assert "│ \x1b[1;31mfail   \x1b[0m │ port 1 is down │" in text
    assert "│ \x1b[33mwarn   \x1b[0m │ 80% full       │" in text
    # a status the table has no colour for is shown plain
    assert "│ 0.25  │ skipped │" in text
    # only the verdict cells are coloured (the title is rich's italic, the header its bold)
    assert re.findall(r"\x1b\[(3[0-9]|1;3[0-9])m", text) == ["32", "1;31", "33"]


def test_an_empty_verdict_table_still_names_its_columns():
    assert shown(verdict_table([], "preflight warnings and failures")) == (
        "preflight warnings and failures\n"
        "┏━━━━━━┳━━━━━━━┳━━━━━━━┳━━━━━━━━━┳━━━━━━━━┓\n"
        "┃ host ┃ check ┃ value ┃ verdict ┃ reason ┃\n"
        "┡━━━━━━╇━━━━━━━╇━━━━━━━╇━━━━━━━━━╇━━━━━━━━┩\n"
        "└──────┴───────┴───────┴─────────┴────────┘\n"
    )


def test_a_row_without_value_or_reason_leaves_those_cells_empty():
    text = shown(verdict_table([{"host": "n1", "check": "ssh", "status": "fail"}], "t"))
    assert "│ n1   │ ssh   │       │ fail    │        │\n" in text


def test_a_long_reason_wraps_inside_its_cell_and_keeps_every_word():
    reason = "the NVIDIA driver 535.104 is older than the 550 series this CUDA toolkit needs on every node"
    text = shown(verdict_table([{"host": "node1", "check": "driver", "value": "535.104", "status": "fail", "reason": reason}], "t"), width=60)
    lines = text.splitlines()
    assert all(len(line) <= 60 for line in lines)
    cells = [line.split("│")[5].strip() for line in lines if line.startswith("│")]
    assert " ".join(cells) == reason
    assert lines[4].startswith("│ node1 │ driver │ 535.104 │ fail    │ ")


# ---- the bootstrap host table

HOSTS = [HostStats("node1", ok=41, changed=7, failed=0, unreachable=0, skipped=12, seconds=83.26), HostStats("node2", 3, 1, 2, 1, 0, seconds=0.04)]


def test_the_host_table_counts_each_hosts_tasks_right_aligned_with_its_time():
    assert shown(host_table(HOSTS, "bootstrap: /srv/inventory.ini")) == (
        "bootstrap: /srv/inventory.ini\n"
        "┏━━━━━━━┳━━━━┳━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━┓\n"
        "┃ host  ┃ ok ┃ changed ┃ failed ┃ unreachable ┃ skipped ┃  time ┃\n"
        "┡━━━━━━━╇━━━━╇━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━┩\n"
        "│ node1 │ 41 │       7 │      0 │           0 │      12 │ 83.3s │\n"
        "│ node2 │  3 │       1 │      2 │           1 │       0 │  0.0s │\n"
        "└───────┴────┴─────────┴────────┴─────────────┴─────────┴───────┘\n"
    )


def test_a_long_host_name_stays_left_and_widens_its_column():
    text = shown(
        host_table([HostStats("gpu-node-017.cluster.example.org", 1, 0, 0, 0, 0, seconds=2.0), HostStats("n2", 10, 0, 0, 0, 0, seconds=1)], "b")
    )
    assert "│ gpu-node-017.cluster.example.org │  1 │       0 │      0 │           0 │       0 │ 2.0s │\n" in text
    assert "│ n2                               │ 10 │       0 │      0 │           0 │       0 │ 1.0s │\n" in text


def test_an_empty_host_table_has_its_title_and_header_only():
    assert shown(host_table([], "bootstrap: inv")).splitlines() == [
        "bootstrap: inv",
        "┏━━━━━━┳━━━━┳━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━┓",
        "┃ host ┃ ok ┃ changed ┃ failed ┃ unreachable ┃ skipped ┃ time ┃",
        "┡━━━━━━╇━━━━╇━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━┩",
        "└──────┴────┴─────────┴────────┴─────────────┴─────────┴──────┘",
    ]


# ---- the live progress line of a run


@pytest.fixture
def terminal(monkeypatch):
    """stderr is a terminal: RunProgress shows its live line there (the string is what the terminal received)."""
    buf = io.StringIO()

    def console(stderr=False):
        return output._Console(
            file=buf, force_terminal=True, color_system=None, width=120, highlight=False, markup=False, emoji=False, soft_wrap=True
        )

    monkeypatch.setattr(output, "console", console)
    return buf


def last_status(buf):
    """The live line as the terminal last drew it (at stop: rich draws it once more, then erases it)."""
    drawn = [piece for piece in re.split(r"\r\x1b\[2K|\n", buf.getvalue()) if re.match("[\u2800-\u28ff] ", piece)]  # a spinner frame
    return drawn[-1][2:]


def play(progress, *events):
    for kind, data in events:
        progress({"event": kind, "event_data": data})
    progress.stop()


START = [("playbook_on_play_start", {"play": "SSH mesh"}), ("playbook_on_task_start", {"task": "Create the cluster user"})]


def test_the_live_line_names_the_play_the_task_and_the_hosts_done(terminal):
    progress = RunProgress(total_hosts=3)
    play(progress, *START, ("runner_on_ok", {"host": "n1"}), ("runner_on_skipped", {"host": "n2"}))
    assert last_status(terminal) == "[SSH mesh] Create the cluster user: 2/3 hosts"
    assert "failed" not in terminal.getvalue() and "XX" not in terminal.getvalue() and "None" not in terminal.getvalue()


def test_the_live_line_counts_failed_and_unreachable_hosts(terminal):
    progress = RunProgress(total_hosts=3)
    play(progress, *START, ("runner_on_failed", {"host": "n1"}), ("runner_on_unreachable", {"host": "n2"}), ("runner_on_ok", {"host": "n3"}))
    assert last_status(terminal) == "[SSH mesh] Create the cluster user: 3/3 hosts, 2 failed"


def test_more_hosts_than_expected_raise_the_total_rather_than_show_more_than_all(terminal):
    progress = RunProgress(total_hosts=1)
    play(progress, *START, ("runner_on_ok", {"host": "n1"}), ("runner_on_ok", {"host": "n2"}))
    assert last_status(terminal) == "[SSH mesh] Create the cluster user: 2/2 hosts"


def test_the_live_line_starts_at_zero_of_all_hosts_for_each_task(terminal):
    progress = RunProgress(total_hosts=4)
    play(progress, *START, ("runner_on_ok", {"host": "n1"}), ("playbook_on_task_start", {"task": "Write the keys"}))
    assert last_status(terminal) == "[SSH mesh] Write the keys: 0/4 hosts"


def test_a_quiet_run_shows_no_live_line_on_a_terminal(terminal):
    progress = RunProgress(total_hosts=2, quiet=True)
    play(progress, *START, ("runner_on_failed", {"host": "n1", "res": {"msg": "boom"}}))
    assert terminal.getvalue() == "" and progress.failed == {"n1"}


# ---- the reporter's notes


def test_a_shown_reporter_says_its_line_on_stderr_and_a_silent_one_nothing(capsys):
    Reporter(True).say("lab: start megaprov-ci-node1")
    Reporter(False).say("lab: never")
    assert capsys.readouterr() == ("", "lab: start megaprov-ci-node1\n")
    assert Reporter(True).shown is True and Reporter(False).shown is False


def test_the_reporters_line_is_data_whatever_brackets_it_holds(capsys):
    Reporter(True).say("node [bold]x[/bold] said [/]")
    assert capsys.readouterr().err == "node [bold]x[/bold] said [/]\n"


# ---- what a run prints besides the live line, and events that lack their fields


def printed(buf):
    """The lines a run printed above the live line (the stage and FAILED lines), without the spinner's frames."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())  # the terminal's cursor moves and erasures
    return [p for p in re.split(r"[\r\n]", text) if p and not re.match("[\u2800-\u28ff] ", p)]


def test_a_stage_is_announced_once_at_its_first_task_and_a_failure_says_its_host_task_and_first_line(terminal):
    progress = RunProgress(total_hosts=2)
    play(
        progress,
        *START,
        ("playbook_on_task_start", {"task": "Write the keys"}),
        ("runner_on_failed", {"host": "n1", "res": {"msg": "  Permission denied\nsecond line"}}),
        ("runner_on_unreachable", {"host": "n2", "res": {}}),
        ("playbook_on_play_start", {"play": "NFS [shared]"}),
        ("playbook_on_task_start", {"task": "Export"}),
    )
    assert printed(terminal) == [
        "stage: SSH mesh",
        "  FAILED n1: Write the keys: Permission denied",
        "  FAILED n2: Write the keys: runner_on_unreachable",
        "stage: NFS [shared]",
    ]


def test_a_failure_ansible_was_told_to_ignore_is_not_counted_or_said(terminal):
    progress = RunProgress(total_hosts=1)
    play(progress, *START, ("runner_on_failed", {"host": "n1", "ignore_errors": True, "res": {"msg": "ignored"}}))
    assert progress.failed == set() and progress.done == {"n1"}
    assert printed(terminal) == ["stage: SSH mesh"]
    assert last_status(terminal) == "[SSH mesh] Create the cluster user: 1/1 hosts"


def test_events_without_their_fields_read_as_empty_names_and_an_unknown_host(terminal):
    progress = RunProgress(total_hosts=1)
    play(
        progress,
        ("playbook_on_play_start", {}),
        ("playbook_on_task_start", {"task": "t"}),
        ("runner_on_failed", {"res": {"msg": None}}),
        ({}, {}),
    )
    assert progress.failed == {"?"} and progress.play == ""
    assert printed(terminal) == ["stage: ", "  FAILED ?: t: None"]
    progress = RunProgress(total_hosts=1)
    play(progress, ("playbook_on_play_start", {"play": "p"}), ("playbook_on_task_start", {}))
    assert progress.task == "" and progress.announced is True


def test_a_reporters_run_is_a_live_line_over_its_hosts_shown_or_quiet():
    shown, quiet = Reporter(True).run(5), Reporter(False).run(7)
    assert (shown.total_hosts, shown.quiet, quiet.total_hosts, quiet.quiet) == (5, False, 7, True)
    assert (shown.play, shown.task, shown.announced, shown.done, shown.failed) == ("", "", False, set(), set())


def test_the_json_envelope_is_two_space_indented_in_the_order_written():
    from pathlib import Path

    text = output.envelope("plan", True, {"z": Path("/a"), "a": [1]})
    version = output.JSON_SCHEMA_VERSION
    assert (
        text
        == f'{{\n  "megaprov": {version},\n  "command": "plan",\n  "ok": true,\n  "result": {{\n    "z": "/a",\n    "a": [\n      1\n    ]\n  }}\n}}'
    )


def test_the_live_line_starts_by_saying_ansible_playbook_is_starting_and_stops_once(terminal):
    progress = RunProgress(total_hosts=1)
    progress.stop()
    progress.stop()  # a second stop (the run's finally after an error) is nothing
    assert re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.getvalue()).strip("\r\n")[2:] == "starting ansible-playbook"
