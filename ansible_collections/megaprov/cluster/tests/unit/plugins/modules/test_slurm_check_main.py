"""slurm_check's main() as Ansible runs it on the controller, against stand-ins of sinfo, scontrol, runuser and srun on
PATH that print what Slurm prints and keep every command line they were given: the polls until every node is up, the
one reconfigure and the resume of a node that only lost contact, a node drained for another reason left drained, the
test step's exact command line and its skips, the Gres comparison, a step's epilog that drains a node, and the exact
one-line failure and summary of each. The only other stand-in is time.sleep (the polls do not wait)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from ansible_collections.megaprov.cluster.plugins.modules import slurm_check
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules.utils import run_module

NODES = ["node1", "node2", "node3"]
IDLE = "node1|idle|none\nnode2|idle|none\nnode3|idle|none\n"
SHOW = "NodeName=node1 Arch=x86_64 Gres=gpu:h100:8(S:0-1) State=IDLE\nNodeName=node2 Gres=gpu:h100:8 State=IDLE\nNodeName=node3 Gres=(null)\n"
GRES = {"node1": "gpu:h100:8", "node2": "gpu:h100:8", "node3": ""}
SINFO_ARGV = "sinfo -h -N -o %N|%T|%E"
STEP_ARGV = "runuser -u megaprov -- srun --immediate=60 -N3 -w node1,node2,node3 --ntasks-per-node=1 -t 1 hostname -s"


class Slurm:
    """The stand-in tools in ``tmp/tools``: sinfo prints its answers in turn (the last one again and again), scontrol
    answers `show node -o` and accepts reconfigure and update, srun (through runuser) prints the nodes that answered."""

    def __init__(self, tmp: Path, monkeypatch, sinfo: list[str], show: str = SHOW, srun: str = "printf 'node1\\nnode2\\nnode3\\n'") -> None:
        self.tmp = tmp
        tools = tmp / "tools"
        tools.mkdir()
        for n, text in enumerate(sinfo):
            (tmp / f"sinfo.{n}").write_text(text)
        self.log = tmp / "calls"
        log = f'printf "%s\\n" "$(basename "$0") $*" >> {self.log}\n'
        last = len(sinfo) - 1
        scripts = {
            "sinfo": (
                f"{log}n=$(cat {tmp}/sinfo.n 2>/dev/null || echo 0)\n"
                f'[ "$n" -gt {last} ] && n={last}\n'
                f"cat {tmp}/sinfo.$n\n"
                f"echo $((n + 1)) > {tmp}/sinfo.n\n"
                f'[ -e {tmp}/sinfo.fail ] && {{ echo "sinfo: error: Unable to contact slurm controller (connect failure)" >&2; exit 1; }}\n'
                "exit 0\n"
            ),
            "scontrol": (
                f'{log}[ "$1" = show ] || exit 0\n'
                f'[ -e {tmp}/scontrol.fail ] && {{ echo "slurm_load_node error: Unable to contact" >&2; exit 1; }}\n'
                f"cat {tmp}/show\n"
            ),
            "runuser": f'{log}shift 3; exec "$@"',
            "srun": f"{log}{srun}\n",
        }
        (tmp / "show").write_text(show)
        for name, body in scripts.items():
            (tools / name).write_text(f"#!/bin/sh\n{body}")
            (tools / name).chmod(0o755)
        monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
        monkeypatch.setattr(slurm_check.time, "sleep", lambda _s: None)

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


def args(**more):
    return {"nodes": NODES, "user": "megaprov", "gres": GRES, "timeout": 30, **more}


def summary_without_time(result: dict) -> str:
    return re.sub(r" in \d+\.\d s", " in T s", result["summary"])


# ---- every node up at once


def test_a_healthy_cluster_is_polled_once_stepped_once_and_summed_up(tmp_path, monkeypatch, capsys):
    slurm = Slurm(tmp_path, monkeypatch, [IDLE])
    code, result = run_module(slurm_check.main, args(), capsys)
    assert code == 0, result
    assert slurm.calls() == [SINFO_ARGV, "scontrol show node -o", STEP_ARGV, "srun " + STEP_ARGV.split("-- srun ", 1)[1], SINFO_ARGV]
    assert summary_without_time(result) == (
        "3/3 node(s) up (node1 idle, node2 idle, node3 idle); srun -N3 hostname as megaprov answered from node1, node2, node3 in T s;"
        " gres gpu:h100:8, none"
    )
    assert result["states"] == {"node1": "idle", "node2": "idle", "node3": "idle"}
    assert (result["changed"], result["resumed"]) == (False, [])


def test_the_defaults_run_the_step_and_compare_no_gres(tmp_path, monkeypatch, capsys):
    slurm = Slurm(tmp_path, monkeypatch, [IDLE], show="NodeName=node1 Gres=gpu:1\n")
    code, result = run_module(slurm_check.main, {"nodes": NODES, "user": "megaprov"}, capsys)
    assert code == 0, result
    assert STEP_ARGV in slurm.calls()
    assert result["summary"].endswith("; gres gpu:1, none")  # no gres given: nothing is compared, each node says its own


def test_the_default_wait_is_two_minutes(tmp_path, monkeypatch, capsys):
    clock = iter([0.0, 110.0, 125.0])
    monkeypatch.setattr(slurm_check.time, "monotonic", lambda: next(clock))
    slurm = Slurm(tmp_path, monkeypatch, ["node1|idle|none\nnode2|down|none\nnode3|idle|none\n"])
    code, result = run_module(slurm_check.main, {"nodes": NODES, "user": "megaprov"}, capsys)
    assert code == 1
    assert slurm.calls() == [SINFO_ARGV] * 2
    assert result["msg"].startswith("Slurm nodes not up after 120 s: node2 down; see")


def test_a_numeric_user_is_the_accounts_name_as_text(tmp_path, monkeypatch, capsys):
    slurm = Slurm(tmp_path, monkeypatch, [IDLE])
    code, result = run_module(slurm_check.main, args(user=1000), capsys)
    assert code == 0, result
    assert STEP_ARGV.replace("megaprov", "1000") in slurm.calls()


def test_the_user_and_the_nodes_are_required(tmp_path, monkeypatch, capsys):
    Slurm(tmp_path, monkeypatch, [IDLE])
    code, result = run_module(slurm_check.main, {"nodes": NODES}, capsys)
    assert code == 1
    assert result["msg"] == "missing required arguments: user"
    code, result = run_module(slurm_check.main, {"user": "megaprov"}, capsys)
    assert code == 1
    assert result["msg"] == "missing required arguments: nodes"


def test_without_the_step_there_is_no_srun_and_no_word_of_it(tmp_path, monkeypatch, capsys):
    slurm = Slurm(tmp_path, monkeypatch, [IDLE])
    code, result = run_module(slurm_check.main, args(step=False), capsys)
    assert code == 0, result
    assert slurm.calls() == [SINFO_ARGV, "scontrol show node -o"]
    assert result["summary"] == "3/3 node(s) up (node1 idle, node2 idle, node3 idle); gres gpu:h100:8, none"


def test_in_check_mode_the_step_is_not_run_and_said_so(tmp_path, monkeypatch, capsys):
    slurm = Slurm(tmp_path, monkeypatch, [IDLE])
    code, result = run_module(slurm_check.main, args(_ansible_check_mode=True), capsys)
    assert code == 0, result
    assert slurm.calls() == [SINFO_ARGV, "scontrol show node -o"]
    assert result["summary"] == "3/3 node(s) up (node1 idle, node2 idle, node3 idle); no srun step in check mode; gres gpu:h100:8, none"


@pytest.mark.parametrize("busy", ["mixed", "allocated", "completing"])
def test_a_cluster_at_work_gets_no_step_and_names_the_busy_nodes(tmp_path, monkeypatch, capsys, busy):
    slurm = Slurm(tmp_path, monkeypatch, [f"node1|{busy}|none\nnode2|idle|none\nnode3|{busy}|none\n"])
    code, result = run_module(slurm_check.main, args(), capsys)
    assert code == 0, result
    assert not any(c.startswith("srun") for c in slurm.calls())
    assert result["summary"] == f"3/3 node(s) up (node1 {busy}, node2 idle, node3 {busy}); no srun step: node1, node3 run jobs; gres gpu:h100:8, none"


# ---- nodes that are not up


def test_sinfo_failing_fails_at_once_with_its_error(tmp_path, monkeypatch, capsys):
    slurm = Slurm(tmp_path, monkeypatch, [IDLE])
    (tmp_path / "sinfo.fail").write_text("")
    code, result = run_module(slurm_check.main, args(), capsys)
    assert code == 1
    assert result["msg"] == "sinfo failed (1): sinfo: error: Unable to contact slurm controller (connect failure)"
    assert (result["resumed"], result["states"]) == ([], {})
    assert slurm.calls() == [SINFO_ARGV]


def test_a_long_sinfo_error_is_cut_to_its_last_300_characters(tmp_path, monkeypatch, capsys):
    Slurm(tmp_path, monkeypatch, [IDLE])
    tools = tmp_path / "tools"
    (tools / "sinfo").write_text("#!/bin/sh\nprintf 'a%.0s' $(seq 400) >&2\nprintf 'END\\n' >&2\nexit 2\n")
    code, result = run_module(slurm_check.main, args(), capsys)
    assert code == 1
    assert result["msg"] == "sinfo failed (2): " + "a" * 297 + "END"


def test_a_node_sinfo_does_not_list_is_absent_and_fails_when_the_time_is_up(tmp_path, monkeypatch, capsys):
    slurm = Slurm(tmp_path, monkeypatch, ["node1|idle|none\nnode3|idle|none\n"])
    code, result = run_module(slurm_check.main, args(timeout=0), capsys)
    assert code == 1
    assert result["msg"] == "Slurm nodes not up after 0 s: node2 absent; see `sinfo -R` and /var/log/slurm/slurmd.log on them"
    assert result["states"] == {"node1": "idle", "node2": "absent", "node3": "idle"}
    assert result["resumed"] == []
    assert slurm.calls() == [SINFO_ARGV]  # an absent node is not one that lost contact: no reconfigure


def test_a_node_that_comes_up_later_is_waited_for(tmp_path, monkeypatch, capsys):
    slurm = Slurm(tmp_path, monkeypatch, ["node1|idle|none\nnode2|unknown|none\nnode3|idle|none\n", "node1|idle|none\n", IDLE])
    code, result = run_module(slurm_check.main, args(step=False, timeout=60), capsys)
    assert code == 0, result
    # unknown is a node slurmctld has not heard from yet: one reconfigure, no resume (it has no reason)
    assert slurm.calls() == [SINFO_ARGV, "scontrol reconfigure", SINFO_ARGV, SINFO_ARGV, "scontrol show node -o"]
    assert (result["changed"], result["resumed"]) == (False, [])


def test_a_node_that_lost_contact_is_reconfigured_once_and_resumed_once(tmp_path, monkeypatch, capsys):
    down = "node1|idle|none\nnode2|down*|Not responding\nnode3|down|Node unexpectedly rebooted\n"
    slurm = Slurm(tmp_path, monkeypatch, [down, down, IDLE])
    code, result = run_module(slurm_check.main, args(step=False, timeout=60), capsys)
    assert code == 0, result
    assert slurm.calls() == [
        SINFO_ARGV,
        "scontrol reconfigure",
        "scontrol update nodename=node2 state=resume",
        "scontrol update nodename=node3 state=resume",
        SINFO_ARGV,
        SINFO_ARGV,
        "scontrol show node -o",
    ]
    assert (result["changed"], result["resumed"]) == (True, ["node2", "node3"])


def test_a_node_drained_by_the_health_check_is_left_drained_and_named_with_its_reason(tmp_path, monkeypatch, capsys):
    drained = "node1|idle|none\nnode2|drained|megaprov health: /dev/nvidia1 missing\nnode3|draining*|Kill task failed\n"
    slurm = Slurm(tmp_path, monkeypatch, [drained])
    code, result = run_module(slurm_check.main, args(timeout=0), capsys)
    assert code == 1
    assert result["msg"] == (
        "Slurm nodes not up after 0 s: node2 drained (megaprov health: /dev/nvidia1 missing); node3 draining* (Kill task failed);"
        " see `sinfo -R` and /var/log/slurm/slurmd.log on them"
    )
    assert result["states"] == {"node1": "idle", "node2": "drained megaprov health: /dev/nvidia1 missing", "node3": "draining* Kill task failed"}
    # node3 is not responding (*): slurmctld re-reads it once, but its reason is not a lost contact: it is not resumed
    assert slurm.calls() == [SINFO_ARGV, "scontrol reconfigure"]
    assert result["resumed"] == []


def test_a_down_node_without_a_reason_is_not_resumed(tmp_path, monkeypatch, capsys):
    slurm = Slurm(tmp_path, monkeypatch, ["node1|idle|none\nnode2|down*|none\nnode3|idle|none\n"])
    code, result = run_module(slurm_check.main, args(timeout=0), capsys)
    assert code == 1
    assert slurm.calls() == [SINFO_ARGV, "scontrol reconfigure"]
    assert result["msg"].startswith("Slurm nodes not up after 0 s: node2 down*; see")


def test_an_idle_but_not_responding_node_is_not_up(tmp_path, monkeypatch, capsys):
    Slurm(tmp_path, monkeypatch, ["node1|idle*|none\nnode2|idle|none\nnode3|idle|none\n"])
    code, result = run_module(slurm_check.main, args(timeout=0), capsys)
    assert code == 1
    assert result["msg"].startswith("Slurm nodes not up after 0 s: node1 idle*; see")


def test_in_check_mode_nothing_is_reconfigured_or_resumed(tmp_path, monkeypatch, capsys):
    slurm = Slurm(tmp_path, monkeypatch, ["node1|idle|none\nnode2|down*|Not responding\nnode3|idle|none\n"])
    code, result = run_module(slurm_check.main, args(timeout=0, _ansible_check_mode=True), capsys)
    assert code == 1
    assert slurm.calls() == [SINFO_ARGV]
    assert result["resumed"] == []


def test_the_wait_lasts_its_timeout_then_fails(tmp_path, monkeypatch, capsys):
    clock = iter(range(0, 10_000, 10))
    monkeypatch.setattr(slurm_check.time, "monotonic", lambda: float(next(clock)))
    slurm = Slurm(tmp_path, monkeypatch, ["node1|idle|none\nnode2|down|none\nnode3|idle|none\n"])
    code, result = run_module(slurm_check.main, args(timeout=25), capsys)
    assert code == 1
    # the deadline is 25 s after the start (t=0); the polls see t=10, 20, 30: the third is past it
    assert slurm.calls() == [SINFO_ARGV] * 3
    assert result["msg"].startswith("Slurm nodes not up after 25 s: node2 down; see")


# ---- Gres


def test_gres_that_differ_from_the_gpu_facts_fail_naming_each_node(tmp_path, monkeypatch, capsys):
    slurm = Slurm(tmp_path, monkeypatch, [IDLE])
    code, result = run_module(slurm_check.main, args(gres={"node1": "gpu:h100:4", "node2": "gpu:h100:8", "node3": "gpu:2", "node9": ""}), capsys)
    assert code == 1
    assert result["msg"] == (
        "Slurm Gres differ from the GPU facts: node1 has Gres=gpu:h100:8, configured gpu:h100:4; node3 has Gres=none, configured gpu:2"
    )
    assert result["states"] == {"node1": "idle", "node2": "idle", "node3": "idle"}
    assert not any(c.startswith("runuser") for c in slurm.calls())


def test_a_node_scontrol_does_not_show_has_gres_unknown(tmp_path, monkeypatch, capsys):
    Slurm(tmp_path, monkeypatch, [IDLE], show="NodeName=node1 Gres=gpu:h100:8\n")
    code, result = run_module(slurm_check.main, args(gres={"node2": "gpu:h100:8", "node3": ""}), capsys)
    assert code == 1
    assert result["msg"] == "Slurm Gres differ from the GPU facts: node2 has Gres=?, configured gpu:h100:8"


def test_scontrol_failing_fails_with_its_error(tmp_path, monkeypatch, capsys):
    Slurm(tmp_path, monkeypatch, [IDLE])
    (tmp_path / "scontrol.fail").write_text("")
    code, result = run_module(slurm_check.main, args(), capsys)
    assert code == 1
    assert result["msg"] == "scontrol show node failed: slurm_load_node error: Unable to contact"


# ---- the step


def test_a_step_not_every_node_answered_fails_naming_who_did(tmp_path, monkeypatch, capsys):
    Slurm(tmp_path, monkeypatch, [IDLE], srun="printf 'node1\\nnode1\\nnode3\\n'; echo 'srun: error: node2: task 0: Exited' >&2; exit 1")
    code, result = run_module(slurm_check.main, args(), capsys)
    assert code == 1
    assert result["msg"] == "srun -N3 hostname as megaprov: rc=1, answered node1,node3: srun: error: node2: task 0: Exited"


def test_a_step_that_answers_from_all_but_exits_non_zero_fails(tmp_path, monkeypatch, capsys):
    Slurm(tmp_path, monkeypatch, [IDLE], srun="printf 'node1\\nnode2\\nnode3\\n'; echo 'srun: error: x' >&2; exit 1")
    code, result = run_module(slurm_check.main, args(), capsys)
    assert code == 1
    assert result["msg"] == "srun -N3 hostname as megaprov: rc=1, answered node1,node2,node3: srun: error: x"


@pytest.mark.parametrize("words", slurm_check.LAUNCH_TIMEOUTS)
def test_each_launch_timeout_is_tried_again_up_to_three_times(tmp_path, monkeypatch, capsys, words):
    slurm = Slurm(tmp_path, monkeypatch, [IDLE], srun=f"echo node1; echo {shlex.quote('srun: error: ' + words)} >&2; exit 1")
    code, result = run_module(slurm_check.main, args(), capsys)
    assert code == 1
    assert sum(c.startswith("srun ") for c in slurm.calls()) == 3
    assert result["msg"] == f"srun -N3 hostname as megaprov: rc=1, answered node1 (attempt 3): srun: error: {words}"


def test_a_step_that_answers_the_second_time_says_so(tmp_path, monkeypatch, capsys):
    once = (
        f'if [ ! -e {tmp_path}/tried ]; then touch {tmp_path}/tried; echo "srun: error: Socket timed out on send/recv" >&2; exit 1; fi;'
        ' printf "node3\\nnode1\\nnode2\\n"'
    )
    Slurm(tmp_path, monkeypatch, [IDLE], srun=once)
    code, result = run_module(slurm_check.main, args(), capsys)
    assert code == 0, result
    assert summary_without_time(result) == (
        "3/3 node(s) up (node1 idle, node2 idle, node3 idle); srun -N3 hostname as megaprov answered from node1, node2, node3 in T s"
        " (attempt 2: the tasks did not launch in time before); gres gpu:h100:8, none"
    )


def test_a_node_the_steps_epilog_drained_fails_the_check(tmp_path, monkeypatch, capsys):
    after = "node1|idle|none\nnode2|drained|Epilog error\nnode3|idle|none\n"
    clock = iter(range(0, 10_000, 7))
    monkeypatch.setattr(slurm_check.time, "monotonic", lambda: float(next(clock)))
    Slurm(tmp_path, monkeypatch, [IDLE, after])
    code, result = run_module(slurm_check.main, args(), capsys)
    assert code == 1
    assert result["msg"] == "Slurm nodes left unfit by a test step: node2 drained (Epilog error); see `sinfo -R` and the prolog/epilog in /etc/slurm"


def test_after_the_step_completing_nodes_are_waited_for(tmp_path, monkeypatch, capsys):
    completing = "node1|completing|none\nnode2|idle|none\nnode3|completing|none\n"
    slurm = Slurm(tmp_path, monkeypatch, [IDLE, completing, completing, IDLE])
    code, result = run_module(slurm_check.main, args(), capsys)
    assert code == 0, result
    assert slurm.calls().count(SINFO_ARGV) == 4
    assert result["states"] == {"node1": "idle", "node2": "idle", "node3": "idle"}


def test_after_the_step_a_failing_sinfo_is_waited_out_and_then_every_node_is_absent(tmp_path, monkeypatch, capsys):
    clock = iter(range(0, 10_000, 7))
    monkeypatch.setattr(slurm_check.time, "monotonic", lambda: float(next(clock)))
    slurm = Slurm(tmp_path, monkeypatch, [IDLE])
    (tmp_path / "tools" / "srun").write_text(f"#!/bin/sh\ntouch {tmp_path}/sinfo.fail\nprintf 'node1\\nnode2\\nnode3\\n'\n")
    code, result = run_module(slurm_check.main, args(), capsys)
    assert code == 1
    assert result["msg"] == (
        "Slurm nodes left unfit by a test step: node1 absent; node2 absent; node3 absent; see `sinfo -R` and the prolog/epilog in /etc/slurm"
    )
    # the settle wait is 30 s from the step's end; a clock of 7 s per reading sees it end after 4 or 5 polls
    assert 4 <= slurm.calls().count(SINFO_ARGV) - 1 <= 5


@pytest.mark.parametrize("state", ["drained", "draining", "drained*"])
def test_a_drained_node_whose_reason_is_a_lost_contact_is_resumed(tmp_path, monkeypatch, capsys, state):
    lost = f"node1|idle|none\nnode2|{state}|Not responding\nnode3|idle|none\n"
    slurm = Slurm(tmp_path, monkeypatch, [lost, IDLE])
    code, result = run_module(slurm_check.main, args(step=False, timeout=60), capsys)
    assert code == 0, result
    assert "scontrol update nodename=node2 state=resume" in slurm.calls()
    assert result["resumed"] == ["node2"]


def test_an_up_node_with_an_old_reason_is_not_one_that_lost_contact(tmp_path, monkeypatch, capsys):
    slurm = Slurm(tmp_path, monkeypatch, ["node1|idle|Not responding\nnode2|down|none\nnode3|idle|none\n"])
    code, _result = run_module(slurm_check.main, args(timeout=0), capsys)
    assert code == 1
    assert slurm.calls() == [SINFO_ARGV]  # node2 is down for no lost contact; node1 is up: no reconfigure


def test_the_deadline_itself_is_still_within_the_wait(tmp_path, monkeypatch, capsys):
    clock = iter([0.0, 25.0, 50.0])
    monkeypatch.setattr(slurm_check.time, "monotonic", lambda: next(clock))
    slurm = Slurm(tmp_path, monkeypatch, ["node1|idle|none\nnode2|down|none\nnode3|idle|none\n"])
    code, _result = run_module(slurm_check.main, args(timeout=25), capsys)
    assert code == 1
    assert slurm.calls() == [SINFO_ARGV] * 2


def test_the_polls_are_two_seconds_apart(tmp_path, monkeypatch, capsys):
    slurm = Slurm(tmp_path, monkeypatch, ["node1|idle|none\nnode2|unknown|none\nnode3|idle|none\n", IDLE])
    slept = []
    monkeypatch.setattr(slurm_check.time, "sleep", slept.append)
    code, result = run_module(slurm_check.main, args(step=False, timeout=60), capsys)
    assert code == 0, result
    assert slept == [2]
    assert slurm.calls().count(SINFO_ARGV) == 2


def test_a_long_scontrol_error_is_cut_to_its_last_300_characters(tmp_path, monkeypatch, capsys):
    Slurm(tmp_path, monkeypatch, [IDLE])
    (tmp_path / "tools" / "scontrol").write_text("#!/bin/sh\nprintf 'a%.0s' $(seq 400) >&2\nprintf 'END\\n' >&2\nexit 1\n")
    code, result = run_module(slurm_check.main, args(), capsys)
    assert code == 1
    assert result["msg"] == "scontrol show node failed: " + "a" * 297 + "END"


def test_a_node_configured_without_gres_that_registered_some_is_named(tmp_path, monkeypatch, capsys):
    Slurm(tmp_path, monkeypatch, [IDLE])
    code, result = run_module(slurm_check.main, args(gres={"node1": ""}), capsys)
    assert code == 1
    assert result["msg"] == "Slurm Gres differ from the GPU facts: node1 has Gres=gpu:h100:8, configured none"


def test_a_second_step_that_fails_otherwise_says_its_attempt_and_the_wait_between_is_five_seconds(tmp_path, monkeypatch, capsys):
    twice = (
        f'if [ ! -e {tmp_path}/tried ]; then touch {tmp_path}/tried; echo "srun: error: Socket timed out on send/recv" >&2; exit 1; fi;'
        ' echo "srun: error: Invalid account" >&2; exit 1'
    )
    Slurm(tmp_path, monkeypatch, [IDLE], srun=twice)
    slept = []
    monkeypatch.setattr(slurm_check.time, "sleep", slept.append)
    code, result = run_module(slurm_check.main, args(), capsys)
    assert code == 1
    assert result["msg"] == "srun -N3 hostname as megaprov: rc=1, answered nobody (attempt 2): srun: error: Invalid account"
    assert slept == [5]


def test_a_long_srun_error_is_cut_to_its_last_300_characters(tmp_path, monkeypatch, capsys):
    Slurm(tmp_path, monkeypatch, [IDLE], srun="printf 'a%.0s' $(seq 400) >&2; printf 'END\\n' >&2; exit 1")
    code, result = run_module(slurm_check.main, args(), capsys)
    assert code == 1
    assert result["msg"] == "srun -N3 hostname as megaprov: rc=1, answered nobody: " + "a" * 297 + "END"


COMPLETING = "node1|completing|none\nnode2|idle|none\nnode3|idle|none\n"


@pytest.mark.parametrize(
    ("settle", "polls"),
    [
        # the clock's readings: the wait's deadline, the step's start and end, the settle wait's start, then one per poll
        ([0.0, 100.0, 103.0, 200.0, 230.0, 260.0], 2),  # 230 is not past 200 + 30: one more poll
        ([0.0, 100.0, 103.0, 200.0, 230.5, 260.0], 1),  # 230.5 is past it
    ],
)
def test_after_the_step_the_nodes_get_thirty_seconds_to_settle(tmp_path, monkeypatch, capsys, settle, polls):
    clock = iter(settle)
    monkeypatch.setattr(slurm_check.time, "monotonic", lambda: next(clock))
    slurm = Slurm(tmp_path, monkeypatch, [IDLE, COMPLETING])
    slept = []
    monkeypatch.setattr(slurm_check.time, "sleep", slept.append)
    code, result = run_module(slurm_check.main, args(), capsys)
    assert code == 0, result  # completing is up: the check passes once the wait is over
    assert slurm.calls().count(SINFO_ARGV) == 1 + polls
    assert slept == [1] * (polls - 1)
    assert "answered from node1, node2, node3 in 3.0 s;" in result["summary"]
