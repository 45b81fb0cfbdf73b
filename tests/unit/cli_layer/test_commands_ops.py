"""`megaprov logs`, `doctor`, `top` and `status` (megaprov.commands.ops) from argv to what the operator reads: what each
handler hands to the domain layer (every flag's parsing and default, -e, the deprecated --job, the default inventory),
every line of the text form, the JSON envelope's result, the exit code and the error line, and each command's --help.
Every command runs in-process through megaprov.cli.main with the real parser.

Stood in, only at the edge, each by a recorder that keeps its arguments and returns a real result of the real type:
megaprov.ops.logs.read (a play on the head) -> lines; megaprov.training.jobs.find and node_log (the job index and the
job's node log, refreshed from the nodes) -> a jobs.Job and lines; megaprov.ops.doctor.health.examine and drain (the
doctor play, scontrol) -> a findings.Report and the drained nodes; megaprov.ops.doctor.diagnose_job (a job's logs) ->
a findings.Report; megaprov.ops.top.prometheus and snapshot (an SSH tunnel, HTTP to Prometheus) -> a URL and a
top.Snapshot; megaprov.ops.status.gather (sinfo, Prometheus) -> its document; time.sleep in top's live loop. Everything
else is real: the inventory is read by megaprov.cluster.inventory, the query checked by megaprov.ops.logs.build, log
files diagnosed by megaprov.ops.doctor.diagnose_logs, doctor's findings recorded on disk, the tables rendered by rich."""

from __future__ import annotations

import json
import re
import time
from contextlib import contextmanager

import pytest

from megaprov import output
from megaprov.errors import ExitCode, HostsUnreachable
from megaprov.ops import doctor, logs, status, top
from megaprov.ops.doctor import health
from megaprov.ops.doctor.findings import LOG_BOUNDS, Report, finding
from megaprov.training import jobs
from tests.helpers.commandline import cells, help_lines, isolate, options, run

GOOD = "[head]\nn1 ansible_host=192.0.2.10\n[gpu_nodes]\nn1\nn2 ansible_host=192.0.2.11\n"
OOM = "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch):
    """As the benchmark runs: no colour, a known width, UTC; megaprov's state and config of this test alone, the
    current directory the test's own, no default inventory; the inventory's observe stage on."""
    isolate(monkeypatch, tmp_path)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    (tmp_path / "inventory.ini").write_text(GOOD)
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("megaprov_observe: true\n")
    yield
    monkeypatch.undo()
    time.tzset()


# ---- logs


class Read:
    def __init__(self, lines: list[str]) -> None:
        self.calls: list[tuple] = []
        self.lines = lines

    def __call__(self, inventory_path, query, report):
        self.calls.append((inventory_path, query, report))
        return list(self.lines)


@pytest.fixture
def read(monkeypatch):
    recorder = Read(["Dec 01 n1 kernel: NVRM: Xid 79", "[bold]not markup[/]"])
    monkeypatch.setattr(logs, "read", recorder)
    return recorder


def test_logs_hands_the_head_the_default_query_and_prints_the_lines_as_they_are(capsys, tmp_path, read):
    code, out, err = run(capsys, "logs", "-i", "inventory.ini")
    assert (code, err) == (ExitCode.OK, "")
    assert read.calls == [(str(tmp_path / "inventory.ini"), logs.Query("n1", None, None, None, 200), output.SHOWN)]
    assert out == "Dec 01 n1 kernel: NVRM: Xid 79\n[bold]not markup[/]\n"


def test_logs_maps_each_flag_into_the_checked_query(capsys, tmp_path, read):
    code, _, _ = run(capsys, "logs", "--inventory", "inventory.ini", "--node", "n2", "--since", "2h", "--grep", "Xid|NVRM", "--lines", "10000")
    assert code == ExitCode.OK
    assert read.calls == [(str(tmp_path / "inventory.ini"), logs.Query("n1", "n2", "-2h", "Xid|NVRM", 10000), output.SHOWN)]


def test_logs_in_json_is_the_head_the_node_and_the_lines(capsys, read):
    code, out, err = run(capsys, "logs", "-i", "inventory.ini", "--node", "n2", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert read.calls[0][2] is output.SILENT
    assert json.loads(out) == {
        "megaprov": output.JSON_SCHEMA_VERSION,
        "command": "logs",
        "ok": True,
        "result": {"host": "n1", "node": "n2", "lines": ["Dec 01 n1 kernel: NVRM: Xid 79", "[bold]not markup[/]"]},
    }


@pytest.mark.parametrize(("lines", "why"), [("0", "0 must be at least 1"), ("10001", "'10001' is more than 10,000")])
def test_logs_lines_are_1_to_10000(capsys, read, lines, why):
    code, _, err = run(capsys, "logs", "-i", "inventory.ini", "--lines", lines)
    assert code == ExitCode.USAGE
    assert err.startswith(f"megaprov: error: megaprov logs: argument --lines: {why}")
    assert read.calls == []


def test_logs_of_an_unknown_node_is_refused_before_the_head_is_asked(capsys, tmp_path, read):
    code, _, err = run(capsys, "logs", "-i", "inventory.ini", "--node", "n9")
    assert code == ExitCode.USAGE
    assert err == f"megaprov: error: --node n9 is not a host of {tmp_path / 'inventory.ini'}: use one of n1, n2\n"
    assert read.calls == []


def test_logs_without_an_inventory_names_the_job_form_too(capsys, tmp_path, read):
    code, out, err = run(capsys, "logs")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == (
        "megaprov: error: megaprov logs needs -i INVENTORY (or --name JOB for a job's log): pass the cluster's inventory, or set "
        f'MEGAPROV_INVENTORY or inventory = "PATH" in {tmp_path / "config" / "megaprov" / "config.toml"}\n'
    )


def test_logs_takes_the_default_inventory(capsys, tmp_path, monkeypatch, read):
    monkeypatch.setenv("MEGAPROV_INVENTORY", "inventory.ini")
    code, _, _ = run(capsys, "logs")
    assert code == ExitCode.OK
    assert read.calls[0][0] == str(tmp_path / "inventory.ini")


def a_job(tmp_path) -> jobs.Job:
    return jobs.Job("gpt-lab", tmp_path / "inventory.ini", ["n1", "n2"], "/shared", "/shared/jobs/gpt-lab", tmp_path / "jobs" / "gpt-lab", "/ck", "u")


@pytest.fixture
def job_log(tmp_path, monkeypatch):
    calls: dict[str, list] = {"find": [], "node_log": []}
    job = a_job(tmp_path)

    def find(name, inventory_path=None):
        calls["find"].append((name, inventory_path))
        return job

    def node_log(found, node, lines, pattern=None):
        calls["node_log"].append((found, node, lines, pattern))
        return node or "n2", ["iteration 10 | loss 2.1", "iteration 20 | loss 1.9"]

    monkeypatch.setattr(jobs, "find", find)
    monkeypatch.setattr(jobs, "node_log", node_log)
    return calls


def test_logs_of_a_job_reads_its_node_log_and_asks_no_head(capsys, tmp_path, read, job_log):
    code, out, err = run(capsys, "logs", "--name", "gpt-lab")
    assert (code, err) == (ExitCode.OK, "")
    assert job_log["find"] == [("gpt-lab", None)]
    assert job_log["node_log"] == [(a_job(tmp_path), None, 200, None)]
    assert read.calls == []
    assert out == "iteration 10 | loss 2.1\niteration 20 | loss 1.9\n"


def test_logs_of_a_job_in_json_names_the_node_the_log_came_from(capsys, read, job_log):
    code, out, _ = run(capsys, "logs", "--name", "gpt-lab", "-o", "json")
    assert code == ExitCode.OK
    assert json.loads(out)["result"] == {"job": "gpt-lab", "node": "n2", "lines": ["iteration 10 | loss 2.1", "iteration 20 | loss 1.9"]}


def test_logs_of_a_job_with_each_flag(capsys, tmp_path, read, job_log):
    code, out, err = run(capsys, "logs", "--name", "gpt-lab", "-i", "inventory.ini", "--node", "n1", "--lines", "5", "--grep", "iter", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert job_log["find"] == [("gpt-lab", str(tmp_path / "inventory.ini"))]
    assert job_log["node_log"] == [(a_job(tmp_path), "n1", 5, re.compile("iter"))]
    assert json.loads(out)["result"] == {"job": "gpt-lab", "node": "n1", "lines": ["iteration 10 | loss 2.1", "iteration 20 | loss 1.9"]}


def test_logs_of_a_job_refuses_a_grep_that_is_no_expression(capsys, job_log):
    code, _, err = run(capsys, "logs", "--name", "gpt-lab", "--grep", "(")
    assert code == ExitCode.USAGE
    assert err.startswith("megaprov: error: --grep '(' is not a regular expression (")
    assert job_log["node_log"] == []


def test_logs_job_is_the_deprecated_name_with_a_note(capsys, tmp_path, job_log):
    code, out, err = run(capsys, "logs", "--job", "gpt-lab")
    assert code == ExitCode.OK
    assert job_log["find"] == [("gpt-lab", None)]
    assert err == (
        "megaprov: note: `--job NAME` here is deprecated and goes in the next release (--job is a spec file elsewhere): write --name gpt-lab\n"
    )
    code, _, err = run(capsys, "logs", "--job", "gpt-lab", "--name", "gpt-lab")
    assert code == ExitCode.OK


def test_logs_with_two_job_names_is_refused(capsys, job_log):
    code, out, err = run(capsys, "logs", "--job", "a", "--name", "b")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == "megaprov: error: two job names: --name b and --job a: give --name NAME\n"
    assert job_log["find"] == []


# ---- doctor


class Examine:
    def __init__(self, *found, checked=("n1", "n2")) -> None:
        self.requests: list[health.Request] = []
        self.found = found
        self.checked = list(checked)

    def __call__(self, req):
        self.requests.append(req)
        return Report(list(self.found), list(self.checked))


@pytest.fixture
def examine(monkeypatch):
    recorder = Examine()
    monkeypatch.setattr(health, "examine", recorder)
    return recorder


def with_examine(monkeypatch, *found, checked=("n1", "n2")) -> Examine:
    recorder = Examine(*found, checked=checked)
    monkeypatch.setattr(health, "examine", recorder)
    return recorder


def test_doctor_needs_an_inventory_a_log_or_a_job(capsys, examine):
    code, out, err = run(capsys, "doctor")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == (
        "megaprov: error: megaprov doctor needs -i INVENTORY, --log FILE or --name JOB: "
        "e.g. megaprov doctor -i inventory.ini, or megaprov doctor --log node1.log\n"
    )
    assert examine.requests == []


def test_doctor_hands_down_the_passive_defaults_and_records_what_it_found(capsys, tmp_path, examine):
    code, out, err = run(capsys, "doctor", "-i", "inventory.ini")
    assert (code, err) == (ExitCode.OK, "")
    assert examine.requests == [health.Request(str(tmp_path / "inventory.ini"), "passive", None, False, {}, output.SHOWN)]
    assert out == "megaprov doctor: nothing wrong (passive checks of 2 node(s))\n"
    recorded = json.loads(health.findings_file(tmp_path / "inventory.ini").read_text())
    assert (recorded["level"], recorded["findings"]) == ("passive", [])


def test_doctor_takes_the_default_inventory(capsys, tmp_path, monkeypatch, examine):
    monkeypatch.setenv("MEGAPROV_INVENTORY", "inventory.ini")
    code, out, _ = run(capsys, "doctor")
    assert code == ExitCode.OK
    assert examine.requests[0].inventory == str(tmp_path / "inventory.ini")
    assert out == "megaprov doctor: nothing wrong (passive checks of 2 node(s))\n"


def test_doctor_maps_each_cluster_flag(capsys, tmp_path, monkeypatch, examine):
    drained = []

    def drain(req, report):
        drained.append((req, report.findings))
        return {}

    monkeypatch.setattr(health, "drain", drain)
    code, out, err = run(
        capsys, "doctor", "-i", "inventory.ini", "--level", "deep", "--node", "n1,n2", "--drain", "-e", "doctor_min_free_gib=5", "-o", "json"
    )
    assert (code, err) == (ExitCode.OK, "")
    req = health.Request(str(tmp_path / "inventory.ini"), "deep", "n1,n2", True, {"doctor_min_free_gib": 5}, output.SILENT)
    assert examine.requests == [req]
    assert drained == [(req, [])]
    assert json.loads(out) == {
        "megaprov": output.JSON_SCHEMA_VERSION,
        "command": "doctor",
        "ok": True,
        "result": {"ok": True, "checked": ["n1", "n2"], "counts": {"error": 0, "warn": 0, "info": 0}, "findings": [], "drained": {}},
    }
    assert json.loads(health.findings_file(tmp_path / "inventory.ini").read_text())["level"] == "deep"


def test_doctor_quick_level_is_named_in_the_title(capsys, examine):
    code, out, _ = run(capsys, "doctor", "-i", "inventory.ini", "--level", "quick")
    assert code == ExitCode.OK
    assert examine.requests[0].level == "quick"
    assert out == "megaprov doctor: nothing wrong (quick checks of 2 node(s))\n"


def test_doctor_findings_are_a_table_the_counts_and_exit_6_naming_the_worst(capsys, monkeypatch):
    warn = finding("SERVICE_DOWN", "n1", "chrony: inactive", severity="warn")
    error = finding("SERVICE_DOWN", "n2", "slurmd: inactive")
    info = finding("SERVICE_DOWN", "n1", "x", severity="info")
    with_examine(monkeypatch, warn, info, error)
    code, out, err = run(capsys, "doctor", "-i", "inventory.ini")
    assert code == ExitCode.VERDICT_FAILED
    lines = out.splitlines()
    assert lines[0] == "megaprov doctor: passive checks of 2 node(s)"
    assert cells(lines[2]) == ["severity", "code", "node", "evidence", "cause", "fix"]
    assert cells(lines[4])[:4] == ["error", "SERVICE_DOWN", "n2", "slurmd: inactive"]
    assert lines[-1] == "1 error(s), 1 warning(s), 1 note(s)"
    assert err == f"megaprov: error: SERVICE_DOWN on n2: {error.cause}\n"


def test_doctor_json_of_findings_is_every_field_and_not_ok(capsys, monkeypatch):
    error = finding("SERVICE_DOWN", "n2", "slurmd: inactive")
    with_examine(monkeypatch, error)
    code, out, err = run(capsys, "doctor", "-i", "inventory.ini", "-o", "json")
    assert code == ExitCode.VERDICT_FAILED
    doc = json.loads(out)
    assert (doc["command"], doc["ok"]) == ("doctor", False)
    assert doc["result"] == {
        "ok": False,
        "checked": ["n1", "n2"],
        "counts": {"error": 1, "warn": 0, "info": 0},
        "findings": [error.as_dict()],
        "drained": {},
    }
    message = f"SERVICE_DOWN on n2: {error.cause}"
    assert doc["error"] == {"code": 6, "kind": "verdict-failed", "message": message}
    assert err == f"megaprov: error: {message}\n"


def test_doctor_with_a_node_that_does_not_answer_is_exit_4(capsys, monkeypatch):
    down = finding("NODE_UNREACHABLE", "n2", "ssh: timed out")
    with_examine(monkeypatch, finding("SERVICE_DOWN", "n1", "chrony: inactive"), down)
    code, _, err = run(capsys, "doctor", "-i", "inventory.ini")
    assert code == ExitCode.UNREACHABLE
    assert err.startswith("megaprov: error: ")


def test_doctor_with_only_notes_is_a_table_and_exit_0(capsys, monkeypatch):
    with_examine(monkeypatch, finding("SERVICE_DOWN", "n1", "x", severity="info"))
    code, out, err = run(capsys, "doctor", "-i", "inventory.ini")
    assert (code, err) == (ExitCode.OK, "")
    assert out.splitlines()[0] == "megaprov doctor: passive checks of 2 node(s)"
    assert out.splitlines()[-1] == "0 error(s), 0 warning(s), 1 note(s)"


def test_doctor_drain_names_each_drained_node(capsys, tmp_path, monkeypatch):
    error = finding("SERVICE_DOWN", "n2", "slurmd: inactive")
    with_examine(monkeypatch, error)
    monkeypatch.setattr(health, "drain", lambda req, report: {"n2": "megaprov doctor: [bold]SERVICE_DOWN"})
    code, out, err = run(capsys, "doctor", "-i", "inventory.ini", "--drain")
    assert code == ExitCode.VERDICT_FAILED
    assert out.splitlines()[-2:] == ["1 error(s), 0 warning(s), 0 note(s)", "drained n2 in Slurm: megaprov doctor: [bold]SERVICE_DOWN"]
    code, out, err = run(capsys, "doctor", "-i", "inventory.ini", "--drain", "-o", "json")
    assert json.loads(out)["result"]["drained"] == {"n2": "megaprov doctor: [bold]SERVICE_DOWN"}


def test_doctor_without_drain_drains_nothing(capsys, monkeypatch, examine):
    def drain(req, report):
        raise AssertionError("drained without --drain")

    monkeypatch.setattr(health, "drain", drain)
    code, _, _ = run(capsys, "doctor", "-i", "inventory.ini")
    assert code == ExitCode.OK


@pytest.mark.parametrize("flags", [["--drain"], ["--node", "n1"], ["--level", "quick"], ["--level", "deep"]])
def test_doctor_cluster_flags_need_an_inventory_and_no_job(capsys, tmp_path, examine, flags):
    (tmp_path / "a.log").write_text("fine\n")
    expected = "megaprov: error: --drain, --node and --level check a cluster: pass -i INVENTORY without --name (run the job's diagnosis on its own)\n"
    code, _, err = run(capsys, "doctor", "--log", "a.log", *flags)
    assert (code, err) == (ExitCode.USAGE, expected)
    code, _, err = run(capsys, "doctor", "--name", "gpt-lab", "-i", "inventory.ini", *flags)
    assert (code, err) == (ExitCode.USAGE, expected)
    assert examine.requests == []


def test_doctor_of_log_files_needs_no_inventory(capsys, tmp_path, examine):
    (tmp_path / "a.log").write_text("fine\n")
    (tmp_path / "b.log").write_text("also fine\n")
    code, out, err = run(capsys, "doctor", "--log", "a.log", "b.log", "--level", "passive")
    assert (code, err) == (ExitCode.OK, "")
    assert out == "megaprov doctor: nothing wrong (2 log file(s))\n"
    assert examine.requests == []
    assert not health.findings_file(tmp_path / "inventory.ini").exists()


def test_doctor_of_a_log_with_a_failure_names_its_file_as_the_source(capsys, tmp_path, examine):
    (tmp_path / "node2.log").write_text("start\n" + OOM + "\n")
    code, out, err = run(capsys, "doctor", "--log", "node2.log")
    assert code == ExitCode.VERDICT_FAILED
    assert out.splitlines()[0] == "megaprov doctor: 1 log file(s)"
    assert err.startswith("megaprov: error: CUDA_OOM on node2.log: ")


def test_doctor_of_the_cluster_and_logs_together_titles_both(capsys, tmp_path, examine):
    (tmp_path / "a[bold].log").write_text("fine\n")
    code, out, _ = run(capsys, "doctor", "-i", "inventory.ini", "--log", "a[bold].log", "-o", "json")
    assert code == ExitCode.OK
    assert json.loads(out)["result"]["checked"] == ["n1", "n2", "a[bold].log"]
    code, out, _ = run(capsys, "doctor", "-i", "inventory.ini", "--log", "a[bold].log")
    assert out == "megaprov doctor: nothing wrong (passive checks of 2 node(s), 1 log file(s))\n"


def test_doctor_table_of_the_cluster_and_logs_together_titles_both(capsys, tmp_path, monkeypatch):
    with_examine(monkeypatch, finding("SERVICE_DOWN", "n2", "slurmd: inactive"))
    (tmp_path / "node2.log").write_text(OOM + "\n")
    code, out, _ = run(capsys, "doctor", "-i", "inventory.ini", "--log", "node2.log")
    assert code == ExitCode.VERDICT_FAILED
    assert out.splitlines()[0] == "megaprov doctor: passive checks of 2 node(s), 1 log file(s)"
    assert out.splitlines()[-1] == "2 error(s), 0 warning(s), 0 note(s)"


@pytest.fixture
def diagnose(monkeypatch):
    calls = []

    def diagnose_job(name, inventory):
        calls.append((name, inventory))
        return Report([finding("CUDA_OOM", "n2", "out of memory", source="jobs/gpt-lab/logs/n2.log", line=7)], ["jobs/gpt-lab/logs/n2.log"])

    monkeypatch.setattr(doctor, "diagnose_job", diagnose_job)
    return calls


def test_doctor_of_a_job_diagnoses_its_logs_and_checks_no_node(capsys, tmp_path, examine, diagnose):
    code, out, err = run(capsys, "doctor", "--name", "gpt-lab", "-i", "inventory.ini")
    assert code == ExitCode.VERDICT_FAILED
    assert diagnose == [("gpt-lab", str(tmp_path / "inventory.ini"))]
    assert examine.requests == []
    assert out.splitlines()[0] == "megaprov doctor: job gpt-lab's logs"
    assert err.startswith("megaprov: error: CUDA_OOM on n2: ")


def test_doctor_of_a_job_without_an_inventory_and_with_the_deprecated_flag(capsys, examine, diagnose):
    code, out, err = run(capsys, "doctor", "--job", "gpt-lab", "-o", "json")
    assert code == ExitCode.VERDICT_FAILED
    assert diagnose == [("gpt-lab", None)]
    assert err.splitlines()[0] == (
        "megaprov: note: `--job NAME` here is deprecated and goes in the next release (--job is a spec file elsewhere): write --name gpt-lab"
    )
    assert json.loads(out)["result"]["checked"] == ["jobs/gpt-lab/logs/n2.log"]


def test_doctor_of_a_job_takes_no_default_inventory_check(capsys, monkeypatch, examine, diagnose):
    monkeypatch.setenv("MEGAPROV_INVENTORY", "inventory.ini")
    code, _, _ = run(capsys, "doctor", "--name", "gpt-lab")
    assert code == ExitCode.VERDICT_FAILED
    assert diagnose == [("gpt-lab", None)]
    assert examine.requests == []


def test_a_doctor_play_that_cannot_run_is_its_exit_code(capsys, monkeypatch):
    def examine(req):
        raise HostsUnreachable("no node answered", "check ssh")

    monkeypatch.setattr(health, "examine", examine)
    code, out, err = run(capsys, "doctor", "-i", "inventory.ini")
    assert (code, out, err) == (ExitCode.UNREACHABLE, "", "megaprov: error: no node answered: check ssh\n")


# ---- top


class Prometheus:
    """top.prometheus: keeps what it was handed, says one line through the handler's callback, yields the URL."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    @contextmanager
    def __call__(self, found, override, say=None):
        self.calls.append((str(found.path), found.head, override))
        if say is not None:
            say("Prometheus at n1:9090 through an SSH tunnel [bold]x")
        yield override or "http://127.0.0.1:40000"


SNAP = top.Snapshot(
    "http://127.0.0.1:40000",
    nodes=[top.NodeRow("n1", True, 1.5, 64, 0.25, 8, 8, 0.5, 0.75), top.NodeRow("n2", False)],
    alerts=[top.AlertRow("NodeDown", "critical", "n2")],
)


@pytest.fixture
def prom(monkeypatch):
    recorder = Prometheus()
    monkeypatch.setattr(top, "prometheus", recorder)
    asked = []

    def snapshot(url):
        asked.append(url)
        return SNAP if url == SNAP.url else top.Snapshot(url, nodes=SNAP.nodes, alerts=SNAP.alerts)

    monkeypatch.setattr(top, "snapshot", snapshot)

    def sleep(seconds):
        raise AssertionError(f"top refreshed (slept {seconds}s) where it prints one snapshot")

    monkeypatch.setattr(time, "sleep", sleep)  # a test that wants the live view sets its own
    recorder.asked = asked
    return recorder


def test_top_once_asks_prometheus_of_the_inventory_and_prints_one_snapshot(capsys, tmp_path, prom):
    code, out, err = run(capsys, "top", "-i", "inventory.ini", "--once")
    assert code == ExitCode.OK
    assert prom.calls == [(str(tmp_path / "inventory.ini"), "n1", None)]
    assert prom.asked == ["http://127.0.0.1:40000"]
    assert err == "top: Prometheus at n1:9090 through an SSH tunnel [bold]x\n"
    lines = out.splitlines()
    assert lines[0] == "nodes (http://127.0.0.1:40000)"
    assert cells(lines[4]) == ["n1", "up", "1.5/64", "25%", "8/8", "50%", "75%"]
    assert cells(lines[5]) == ["n2", "DOWN", "-/-", "-", "-", "-", "-"]
    assert "running jobs: none" in lines
    assert "firing alerts" in lines


def test_top_with_url_hands_it_down(capsys, prom):
    code, out, _ = run(capsys, "top", "-i", "inventory.ini", "--url", "http://localhost:9090", "--once")
    assert code == ExitCode.OK
    assert prom.calls[0][2] == "http://localhost:9090"
    assert prom.asked == ["http://localhost:9090"]


def test_top_in_json_is_one_snapshot_and_nothing_on_stderr(capsys, prom):
    code, out, err = run(capsys, "top", "-i", "inventory.ini", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert json.loads(out) == {"megaprov": output.JSON_SCHEMA_VERSION, "command": "top", "ok": True, "result": SNAP.as_dict()}


def test_top_without_once_refreshes_every_interval_until_interrupted(capsys, monkeypatch, prom):
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        if len(slept) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", sleep)
    code, out, err = run(capsys, "top", "-i", "inventory.ini", "--interval", "7")
    assert code == ExitCode.INTERRUPTED
    assert slept == [7, 7]
    assert prom.asked == ["http://127.0.0.1:40000", "http://127.0.0.1:40000"]  # the first view, then one refresh
    assert "nodes (http://127.0.0.1:40000)" in out
    assert err.splitlines()[-1] == "megaprov: interrupted"
    slept.clear()
    run(capsys, "top", "-i", "inventory.ini")
    assert slept == [5, 5]


def test_top_live_view_prints_a_url_with_brackets_as_it_is(capsys, monkeypatch, prom):
    """The live view is drawn on megaprov's console (markup off): the table titles hold the operator's --url."""

    def sleep(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", sleep)
    code, out, _ = run(capsys, "top", "-i", "inventory.ini", "--url", "http://h:9090/[bold]x")
    assert code == ExitCode.INTERRUPTED
    assert prom.asked == ["http://h:9090/[bold]x"]
    assert "nodes (http://h:9090/[bold]x)" in out.splitlines()


def test_top_live_view_redraws_once_a_second_in_the_terminal_not_a_screen_of_its_own(capsys, monkeypatch, prom):
    import rich.live

    made = []
    real = rich.live.Live

    def live(*args, **kwargs):
        made.append(kwargs)
        return real(*args, **kwargs)

    def sleep(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(rich.live, "Live", live)
    monkeypatch.setattr(time, "sleep", sleep)
    code, _, _ = run(capsys, "top", "-i", "inventory.ini", "--url", "http://h:9090")
    assert code == ExitCode.INTERRUPTED
    assert [(k["refresh_per_second"], k["screen"]) for k in made] == [(1, False)]


@pytest.mark.parametrize(("interval", "why"), [("0", "0 must be at least 1"), ("3601", "'3601' is more than 3,600")])
def test_top_interval_is_1_to_3600(capsys, prom, interval, why):
    code, _, err = run(capsys, "top", "-i", "inventory.ini", "--interval", interval)
    assert code == ExitCode.USAGE
    assert err.startswith(f"megaprov: error: megaprov top: argument --interval: {why}")
    assert prom.calls == []


def test_top_without_an_inventory_is_usage(capsys, prom):
    code, _, err = run(capsys, "top")
    assert code == ExitCode.USAGE
    assert err.startswith("megaprov: error: megaprov top needs -i INVENTORY: ")
    assert prom.calls == []


# ---- status


def document(tmp_path, **more) -> dict:
    doc = {
        "inventory": str(tmp_path / "inventory.ini"),
        "last_bootstrap": {"at": 1796200000, "ok": True, "error": None},
        "nodes": {
            "n1": {
                "groups": ["gpu_nodes", "head"],
                "stages": {"base": "ok", "gpu": "ok"},
                "doctor": [],
                "slurm": {"state": "idle", "reason": "none"},
                "up": True,
            },
            "n2": {
                "groups": ["gpu_nodes"],
                "stages": {"base": "ok", "gpu": "failed"},
                "doctor": ["GPU_MISSING", "SERVICE_DOWN"],
                "slurm": {"state": "drain", "reason": "megaprov doctor"},
                "up": False,
            },
            "n3": {"groups": [], "stages": {}, "doctor": []},
        },
        "jobs": [{"name": "gpt-lab", "state": "running", "verdict": None, "started": "[bold]2026-12-01T10:00:00Z"}],
        "alerts": [{"name": "NodeDown", "severity": "critical", "where": "n2 [bold]x"}],
        "doctor": {"at": 1796203600, "level": "quick", "errors": 2},
        "asked": ["alerts", "slurm"],
        "problems": ["sinfo: [bold]timed out"],
    }
    return {**doc, **more}


@pytest.fixture
def gather(tmp_path, monkeypatch):
    calls = []
    answer = {"doc": document(tmp_path)}

    def fake(inventory, probe, report):
        calls.append((inventory, probe, report))
        return answer["doc"]

    monkeypatch.setattr(status, "gather", fake)
    fake.calls = calls
    fake.answer = answer
    return fake


def test_status_asks_the_cluster_and_prints_every_part(capsys, tmp_path, gather):
    code, out, err = run(capsys, "status", "-i", "inventory.ini")
    assert (code, err) == (ExitCode.OK, "")
    assert gather.calls == [(str(tmp_path / "inventory.ini"), True, output.SHOWN)]
    lines = out.splitlines()
    assert lines[0] == "last bootstrap: 2026-12-02 08:26, ok"
    assert lines[1] == f"status of {tmp_path / 'inventory.ini'}"
    assert cells(lines[3]) == ["node", "groups", "stages (last bootstrap)", "slurm", "up", "doctor"]
    assert cells(lines[5]) == ["n1", "gpu_nodes,head", "2 ok", "idle", "up", "-"]
    assert cells(lines[6]) == ["n2", "gpu_nodes", "gpu failed; 1 ok", "drain (megaprov doctor)", "DOWN", "GPU_MISSING,SERVICE_DOWN"]
    assert cells(lines[7]) == ["n3", "", "-", "-", "-", "-"]
    assert lines[9:] == [
        "job gpt-lab: running, verdict -, started [bold]2026-12-01T10:00:00Z",
        "alert NodeDown (critical) n2 [bold]x",
        "doctor: 2 error finding(s) at 2026-12-02 09:26 (quick)",
        "not asked: sinfo: [bold]timed out",
    ]


def test_status_recorded_asks_no_host_and_json_is_the_document(capsys, tmp_path, gather):
    code, out, err = run(capsys, "status", "-i", "inventory.ini", "--recorded", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert gather.calls == [(str(tmp_path / "inventory.ini"), False, output.SILENT)]
    assert json.loads(out) == {"megaprov": output.JSON_SCHEMA_VERSION, "command": "status", "ok": True, "result": document(tmp_path)}


def test_status_of_a_failed_bootstrap_and_a_stage_that_only_failed(capsys, tmp_path, gather):
    gather.answer["doc"] = document(
        tmp_path,
        last_bootstrap={"at": 1796200000, "ok": False, "error": "n2: [bold]gpu: no driver"},
        nodes={
            "n2": {"groups": ["gpu_nodes"], "stages": {"gpu": "failed", "base": "skipped"}, "doctor": [], "slurm": {"state": "down", "reason": ""}}
        },
        jobs=[{"name": "old", "state": "done", "verdict": "pass", "started": "x"}],
        alerts=[],
        doctor=None,
        problems=[],
    )
    code, out, _ = run(capsys, "status", "-i", "inventory.ini")
    assert code == ExitCode.OK
    lines = out.splitlines()
    assert lines[0] == "last bootstrap: 2026-12-02 08:26, failed: n2: [bold]gpu: no driver"
    assert cells(lines[5]) == ["n2", "gpu_nodes", "base skipped; gpu failed", "down", "-", "-"]
    assert lines[7:] == ["job old: done, verdict pass, started x"]


def test_status_without_a_recorded_bootstrap_says_so(capsys, tmp_path):
    code, out, err = run(capsys, "status", "-i", "inventory.ini", "--recorded")
    assert (code, err) == (ExitCode.OK, "")
    lines = out.splitlines()
    assert lines[0] == "last bootstrap: none recorded on this machine"
    assert cells(lines[5]) == ["n1", "gpu_nodes,head", "-", "-", "-", "-"]


def test_status_without_an_inventory_is_usage(capsys, gather):
    code, _, err = run(capsys, "status")
    assert code == ExitCode.USAGE
    assert err.startswith("megaprov: error: megaprov status needs -i INVENTORY: ")
    assert gather.calls == []


# ---- --help


def test_logs_help(capsys):
    lines = help_lines(capsys, "logs")
    assert "The nodes' journals kept on the head (the observe stage), or a job's own log." in lines
    assert lines[lines.index("examples:") + 1 :] == [
        "megaprov logs -i inventory.ini --node gpu01 --since 2h --grep 'Xid|NVRM'",
        "megaprov logs -i inventory.ini --name gpt-lab --grep 'iteration'",
    ]
    assert options(capsys, "logs") == (
        "options: -h, --help show this help message and exit --debug show tracebacks -o {text,json}, --output "
        "{text,json} text (default) or json: one JSON document on stdout -i INVENTORY, --inventory INVENTORY the "
        "cluster's inventory (default: $MEGAPROV_INVENTORY or the config file's) --node NODE this node's journal only "
        "(an inventory host) --since SINCE from this time: 30m, 2h, 1d before now, or a date and time (2026-12-01 "
        "14:30) --grep GREP lines matching this regular expression only --lines LINES the last N lines (default 200) "
        "--name NAME the job's own node log instead (as `megaprov job logs`), filtered by --grep"
    )


def test_doctor_help_ends_with_the_bounds_of_a_log(capsys):
    lines = help_lines(capsys, "doctor")
    assert "Cluster health checks (-i INVENTORY) and failure diagnosis of logs (--log FILE, --name JOB)." in lines
    tail = lines[lines.index("examples:") + 1 :]
    assert tail[:4] == [
        "megaprov doctor -i inventory.ini                  # passive: seconds",
        "megaprov doctor -i inventory.ini --level deep --node gpu03",
        "megaprov doctor --log node1.log dmesg.txt",
        "megaprov doctor --name gpt-lab                    # a job's logs, with its plan",
    ]
    assert tail[4:] == ["", f"logs (--log, --name): {LOG_BOUNDS}"]
    assert options(capsys, "doctor") == (
        "options: -h, --help show this help message and exit --debug show tracebacks -o {text,json}, --output "
        "{text,json} text (default) or json: one JSON document on stdout -i INVENTORY, --inventory INVENTORY check "
        "this cluster's nodes (with --name: the cluster the job ran on, to find it) --level {passive,quick,deep} "
        "passive (seconds, default), quick (a minute), deep (minutes) --node NODE only these nodes (comma-separated "
        "inventory hosts) --log FILE [FILE ...] diagnose these logs (job or node logs, dmesg or journal output); no "
        "inventory needed --name NAME diagnose this job's node logs (with its plan for the advice) --drain drain the "
        "nodes with error findings in Slurm, their codes as the reason -e VAR=VALUE|@FILE, --extra-vars "
        "VAR=VALUE|@FILE variables (doctor_min_free_gib, ...)"
    )


def test_top_help(capsys):
    lines = help_lines(capsys, "top")
    assert "Live view of nodes, GPUs, running jobs and firing alerts from Prometheus (the observe stage)." in lines
    assert lines[lines.index("examples:") + 1 :] == [
        "megaprov top -i inventory.ini",
        "megaprov top -i inventory.ini --once -o json",
        "megaprov top -i inventory.ini --url http://localhost:9090",
    ]
    assert options(capsys, "top") == (
        "options: -h, --help show this help message and exit --debug show tracebacks -o {text,json}, --output "
        "{text,json} text (default) or json: one JSON document on stdout -i INVENTORY, --inventory INVENTORY the "
        "cluster's inventory (default: $MEGAPROV_INVENTORY or the config file's) --url URL Prometheus's address "
        "(default: the head's, through an SSH tunnel to the head when it cannot be reached directly) --interval "
        "INTERVAL seconds between refreshes (default 5) --once print one snapshot and exit"
    )


def test_status_help(capsys):
    lines = help_lines(capsys, "status")
    assert "The cluster at a glance: each node's last bootstrap per stage, Slurm's node states, jobs, alerts, doctor's findings." in lines
    assert lines[lines.index("examples:") + 1 :] == [
        "megaprov status -i inventory.ini",
        "megaprov status --recorded          # only what this machine recorded: asks no host",
        "megaprov status -o json",
    ]
    assert options(capsys, "status") == (
        "options: -h, --help show this help message and exit --debug show tracebacks -o {text,json}, --output "
        "{text,json} text (default) or json: one JSON document on stdout -i INVENTORY, --inventory INVENTORY the "
        "cluster's inventory (default: $MEGAPROV_INVENTORY or the config file's) --recorded what this machine recorded "
        "only (no Slurm or Prometheus question)"
    )


def test_status_prints_the_doctor_level_as_recorded(capsys, tmp_path, gather):
    gather.answer["doc"] = document(tmp_path, doctor={"at": 1796203600, "level": "[b]deep[/b]", "errors": 1})
    code, out, _ = run(capsys, "status", "-i", "inventory.ini")
    assert code == ExitCode.OK
    lines = out.splitlines()
    assert "doctor: 1 error finding(s) at 2026-12-02 09:26 ([b]deep[/b])" in lines
