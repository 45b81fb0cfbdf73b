"""megaprov logs (megaprov/ops/logs.py) and megaprov status's Slurm view (megaprov/ops/status.py): the exact one-line
errors and hints of a bad --since, --grep, --lines or --node, the query the head is asked with, and sinfo's answer read
into node states. Stood in: Ansible's run of the playbook (cluster.plays.run), answering as the command task does;
the inventory, the argument checks and the remote wrapper are real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from megaprov.cluster import inventory as inv
from megaprov.cluster import plays, runner
from megaprov.errors import HostsUnreachable, RunFailed, UsageError
from megaprov.ops import logs, status
from megaprov.output import SILENT


def inventory(tmp_path: Path, text: str) -> inv.Inventory:
    path = tmp_path / "inventory.ini"
    path.write_text(text)
    hosts, groups, group_vars, _ = inv.parse_ini(text, str(path))
    return inv.Inventory(path, hosts, groups, group_vars)


OBSERVED = "[head]\nhead1 ansible_host=10.0.0.1\n\n[gpu_nodes]\nnode1\nnode2\n\n[all:vars]\nmegaprov_observe=true\n"


class Ansible:
    """plays.run answering as the playbook's command task would: its stdout, or a failure."""

    def __init__(self, stdout: str = "", failures: list[runner.Failure] | None = None, results: bool = True) -> None:
        self.stdout, self.failures, self.results = stdout, failures or [], results
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> runner.RunResult:
        self.calls.append((args, kwargs))
        tasks = [runner.TaskResult("h", "run", "ansible.builtin.command", {"stdout": self.stdout})] if self.results else []
        ok = not self.failures
        return runner.RunResult("successful" if ok else "failed", 0 if ok else 2, [], self.failures, tasks, Path("/tmp/art"), 0.1)


def refused(call, *args):
    with pytest.raises(UsageError) as caught:
        call(*args)
    return caught.value.message, caught.value.hint


# ---- logs: the arguments


def test_since_today_and_yesterday_pass_as_journalctl_reads_them():
    assert logs.since_arg(" today ") == "today"
    assert logs.since_arg("yesterday") == "yesterday"
    assert logs.since_arg("2026-12-01") == "2026-12-01"
    assert logs.since_arg("90min") == "-90min"
    assert logs.since_arg("007m") == "-7min"


def test_a_since_that_is_no_time_names_the_value_and_the_forms_it_takes():
    assert refused(logs.since_arg, "Today") == (
        "--since 'Today' is not a time",
        "give a duration before now (30m, 2h, 1d) or a date and time (2026-12-01 14:30)",
    )


def test_a_grep_of_up_to_200_printable_characters_is_passed_as_given():
    assert logs.grep_arg("a" * 200) == "a" * 200
    assert logs.grep_arg("NCCL (WARN|ERROR)") == "NCCL (WARN|ERROR)"


@pytest.mark.parametrize("bad", ["", "a" * 201, "x\ty"])
def test_a_grep_too_long_or_not_printable_is_refused_with_its_bounds(bad):
    assert refused(logs.grep_arg, bad) == ("--grep must be 1-200 printable characters", "give a shorter regular expression")


def test_a_grep_that_is_no_expression_says_why_and_how_to_escape():
    message, hint = refused(logs.grep_arg, "(")
    assert message == "--grep '(' is not a regular expression (missing ), unterminated subpattern at position 0)"
    assert hint == "escape special characters with \\"


def test_the_lines_are_checked_against_their_bounds(tmp_path):
    found = inventory(tmp_path, OBSERVED)
    assert logs.build(found, None, None, None, 1).lines == 1
    assert logs.build(found, None, None, None, 10_000).lines == 10_000
    assert refused(logs.build, found, None, None, None, 10_001) == ("--lines 10001 is out of range", "give 1 to 10000")


def test_an_unknown_node_is_refused_with_the_hosts_to_choose_from(tmp_path):
    found = inventory(tmp_path, OBSERVED)
    assert refused(logs.build, found, "node9", None, None, 5) == (
        f"--node node9 is not a host of {found.path}",
        "use one of head1, node1, node2",
    )


def test_logs_need_the_observe_stage(tmp_path):
    found = inventory(tmp_path, OBSERVED.replace("megaprov_observe=true", "megaprov_observe=false"))
    assert refused(logs.build, found, None, None, None, 5) == (
        f"the observe stage is off in {found.path}: no journals are kept on the head",
        "set megaprov_observe: true and run `megaprov bootstrap -i INVENTORY --tags observe`",
    )


def test_the_journals_are_read_where_central_logs_host_says_when_it_is_a_host(tmp_path):
    found = inventory(tmp_path, OBSERVED + "central_logs_host=node1\n")
    assert logs.build(found, None, "30m", None, 5).vars() == {"host": "node1", "node": "", "since": "-30min", "grep": "", "lines": 5}
    elsewhere = inventory(tmp_path, OBSERVED + "central_logs_host=logs.example.org\n")
    assert logs.build(elsewhere, None, None, None, 5).host == "head1"


# ---- logs: the head's answer


def test_the_head_is_asked_with_the_checked_query_and_its_empty_lines_dropped(tmp_path, monkeypatch):
    found = inventory(tmp_path, OBSERVED)
    query = logs.build(found, "node2", "2h", "WARN", 50)
    answer = "Dec 02 node2 kernel: a\n\n-- No entries --\nDec 02 node2 python: WARN b\n"
    ansible = Ansible(answer)
    monkeypatch.setattr(plays, "run", ansible)
    assert logs.read(str(found.path), query, SILENT) == ["Dec 02 node2 kernel: a", "Dec 02 node2 python: WARN b"]
    assert ansible.calls == [
        (
            ("logs.yml", found.path, {"megaprov_logs": {"host": "head1", "node": "node2", "since": "-2h", "grep": "WARN", "lines": 50}}, SILENT),
            {"hosts": 1, "collect": ("ansible.builtin.command", "command")},
        )
    ]


def test_an_answer_past_its_bound_is_cut(tmp_path, monkeypatch):
    found = inventory(tmp_path, OBSERVED)
    monkeypatch.setattr(plays, "run", Ansible("x" * (logs.MAX_OUTPUT - 2) + "\nyyyy\n"))
    assert logs.read(str(found.path), logs.build(found, None, None, None, 5), SILENT) == ["x" * (logs.MAX_OUTPUT - 2), "y"]


def test_a_head_that_cannot_read_its_journals_is_a_failed_run(tmp_path, monkeypatch):
    found = inventory(tmp_path, OBSERVED)
    monkeypatch.setattr(plays, "run", Ansible(failures=[runner.Failure("head1", "journalctl", "Logs", "No journal files were found.", False)]))
    with pytest.raises(RunFailed) as caught:
        logs.read(str(found.path), logs.build(found, None, None, None, 5), SILENT)
    assert caught.value.message == "logs: the journals could not be read on head1: No journal files were found."


# ---- status: sinfo's answer


def test_sinfo_lines_keep_a_reason_that_holds_the_separator():
    assert status.parse_sinfo("node1|drained|Xid 79|GPU 3\n") == {"node1": {"state": "drained", "reason": "Xid 79|GPU 3"}}


def test_a_node_in_several_partitions_keeps_its_first_line_and_a_line_without_a_node_is_skipped():
    text = "node1|mixed|none\nnode1|drained|later\n|idle|no node\n  |down|blank\nnode2|idle\n"
    assert status.parse_sinfo(text) == {
        "node1": {"state": "mixed", "reason": "none"},
        "node2": {"state": "idle", "reason": ""},
    }


SLURM = "[head]\nhead1\n\n[gpu_nodes]\nnode1\nnode2\n\n[all:vars]\nmegaprov_scheduler=slurm\n"


def test_a_cluster_without_slurm_is_not_asked(tmp_path, monkeypatch):
    ansible = Ansible("node1|idle|none\n")
    monkeypatch.setattr(plays, "run", ansible)
    assert status.slurm_states(inventory(tmp_path, SLURM.replace("=slurm", "=none")), SILENT) == {}
    assert status.slurm_states(inventory(tmp_path, "[head]\nhead1\n"), SILENT) == {}
    assert ansible.calls == []


def test_sinfo_is_asked_on_the_slurm_controller_and_read_into_node_states(tmp_path, monkeypatch):
    found = inventory(tmp_path, SLURM + "\n[slurm_controller]\nctl1\n")
    ansible = Ansible("node1|idle|none\nnode2|drained|Xid 79\n")
    monkeypatch.setattr(plays, "run", ansible)
    assert status.slurm_states(found, SILENT) == {"node1": {"state": "idle", "reason": "none"}, "node2": {"state": "drained", "reason": "Xid 79"}}
    assert ansible.calls == [
        (
            ("cluster_status.yml", found.path, {"megaprov_status": {"host": "ctl1"}}, SILENT),
            {"hosts": 1, "collect": ("ansible.builtin.command", "command")},
        )
    ]


def test_sinfo_without_a_controller_group_is_asked_on_the_head_and_its_answer_bounded(tmp_path, monkeypatch):
    found = inventory(tmp_path, SLURM)
    long = "node1|idle|" + "r" * status.MAX_SINFO + "\n"
    ansible = Ansible(long)
    monkeypatch.setattr(plays, "run", ansible)
    assert status.slurm_states(found, SILENT) == {"node1": {"state": "idle", "reason": "r" * (status.MAX_SINFO - len("node1|idle|"))}}
    ((args, _),) = ansible.calls
    assert args[2] == {"megaprov_status": {"host": "head1"}}


def test_an_unreachable_controller_and_a_failed_sinfo_name_the_host(tmp_path, monkeypatch):
    found = inventory(tmp_path, SLURM)
    monkeypatch.setattr(plays, "run", Ansible(failures=[runner.Failure("head1", "Gathering Facts", "p", "ssh: connect refused", True)]))
    with pytest.raises(HostsUnreachable) as caught:
        status.slurm_states(found, SILENT)
    assert caught.value.message == "status: the Slurm controller head1 is unreachable: ssh: connect refused"
    monkeypatch.setattr(plays, "run", Ansible(failures=[runner.Failure("head1", "sinfo", "p", "slurm_load_node error", False)]))
    with pytest.raises(RunFailed) as failed:
        status.slurm_states(found, SILENT)
    assert failed.value.message == "status: sinfo failed on head1: slurm_load_node error"
